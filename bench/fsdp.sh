#!/usr/bin/env bash
# Fully sharded data parallelism on the CPU over 4 ranks: step time and
# peak resident memory of fsdp=4 against dp=4 with ZeRO-1
# (shard_optimizer=true), at the same batch.
#
#   bench/fsdp.sh [--rounds 2] [--warmup 2] [--steps 6] [--seq 128] [--json FILE] [--smoke]
#
# The model: llama-shaped, d_model 256, 16 layers, 8 heads, SwiGLU 688,
# vocabulary 8192 (16.9M parameters, fp32: 270 MB of weights, gradients
# and AdamW state unsharded). 4 ranks under mpirun, OMP_NUM_THREADS each
# (default: cores / 4, at least 1), one sequence of --seq tokens per rank
# per microbatch, two microbatches per step. Each round runs both, in
# alternating order (ZeRO-1 first in even rounds); the step time is the
# median over every round's steps after --warmup, the peak RSS the largest
# of any rank (each rank's getrusage). --smoke: a tiny model, one round of
# one timed step, for tests/e2e/test_bench.sh. Table on stdout (progress on
# stderr); with --json, the figures as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init fsdp

rounds=2 warmup=2 steps=6 seq=128 json= smoke=0
usage() { sed -n '2,18s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--seq) seq=$2; shift 2 ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints rounds warmup steps seq
[ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] || usage_error "--steps and --rounds must be at least 1"

shape=(model=llama-tiny model.d_model=256 model.n_heads=8 model.n_kv_heads=8 model.d_ff=688
	model.n_layers=16 model.vocab_size=8192 model.max_seq_len=512)
if [ "$smoke" = 1 ]; then
	shape=(model=llama-tiny) rounds=1 warmup=1 steps=1 seq=16
fi
pp=$(bench_tool pp-train)
cores=$(getconf _NPROCESSORS_ONLN)
threads=$((cores / 4))
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((threads > 0 ? threads : 1))}
total=$((warmup + steps))
load0=$(cut -d' ' -f1 /proc/loadavg)
run=("${shape[@]}" steps="$total" global_batch=8 microbatch=1 seq_len="$seq" data=synthetic
	save_on_completion=false eval_interval=0 log_period=1)
declare -A layout=([zero1]="dp=4 shard_optimizer=true" [fsdp]="fsdp=4")
say "4 ranks x $OMP_NUM_THREADS thread(s), 8 x $seq tokens per step, $rounds round(s) of $warmup warm-up + $steps timed steps"

one() { # ROUND SIDE
	local r=$1 side=$2 dir=$bench_tmp/run-$1-$2
	say "round $r: $side ..."
	# shellcheck disable=SC2086 # the layout is key=value words
	mpirun -n 4 --allow-run-as-root --oversubscribe --bind-to none \
		python3 "$root/bench/benchlib.py" maxrss "$bench_tmp/$r.$side.rss" \
		"$pp" "${run[@]}" ${layout[$side]} run_dir="$dir" 2>"$bench_tmp/$r.$side.log" ||
		die "$side: pp-train failed: $(grep -v '^$' "$bench_tmp/$r.$side.log" | tail -n 1)"
	benchlib step-times "$dir/metrics.jsonl" $((warmup + 1)) "$total" >"$bench_tmp/$r.$side.times"
}
for r in $(seq 0 $((rounds - 1))); do
	if [ $((r % 2)) -eq 0 ]; then one "$r" zero1; one "$r" fsdp; else one "$r" fsdp; one "$r" zero1; fi
done
params=$(grep -o 'training state on rank 0: .*' "$bench_tmp/0.fsdp.log" | head -n 1)

echo "# fsdp=4 against ZeRO-1 on the CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores, 4 ranks x $OMP_NUM_THREADS thread(s), fp32; load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end"
echo "# model: ${shape[*]}; 8 x $seq tokens per step; median of $rounds x $steps steps after $warmup warm-up each"
echo "# fsdp=4 ${params#training }"
benchlib fsdp-report "$bench_tmp" "$rounds" ${json:+"$json"}
