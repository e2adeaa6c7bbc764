#!/usr/bin/env bash
# Mixture of experts on the CPU: training tokens/s of a small Mixtral-shaped
# model in pp-train against the same model in PyTorch, and the all-to-all
# that expert parallelism exchanges token rows with, at ep=2.
#
#   bench/moe.sh [--warmup 1] [--steps 3] [--seq 256] [--batch 4] [--json FILE] [--smoke]
#
# 1. pp-train and MixtralForCausalLM (bench/torch_train.py, fp32, eager
#    attention, AdamW, clip 1.0) on the same model: d_model 256, 4 layers, 8
#    heads (4 kv), 8 SwiGLU experts of 512 per layer, top 2, dropless,
#    vocabulary 8192; both with OMP_NUM_THREADS threads (default: every
#    core), one microbatch of --batch sequences of --seq tokens, --warmup +
#    --steps steps; tokens/s over the --steps steady ones, and pp/torch.
# 2. the same model at dp=2 with ep=1 and with ep=2 (two ranks under mpirun,
#    OMP_NUM_THREADS / 2 threads each): tokens/s of both, so the cost of the
#    exchange shows.
# 3. `pp-init --check` on two ranks: the all-to-all's bus bandwidth (block
#    q of each rank's message to rank q) at 4 KiB to 32 MiB per rank, with
#    the allreduce beside it for scale.
# --smoke: a tiny model, one timed step, for tests/e2e/test_bench.sh. Table on
# stdout (progress on stderr); with --json, the figures as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init moe

warmup=1 steps=3 seq=256 batch=4 json= smoke=0
usage() { sed -n '2,21s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--seq) seq=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints warmup steps seq batch
[ "$steps" -ge 1 ] || usage_error "--steps must be at least 1"

shape=(model=mixtral-tiny model.d_model=256 model.n_heads=8 model.n_kv_heads=4 model.d_ff=512
	model.n_layers=4 model.n_experts=8 model.top_k=2 model.vocab_size=8192 model.max_seq_len=512)
if [ "$smoke" = 1 ]; then
	shape=(model=mixtral-tiny) warmup=1 steps=1 seq=16 batch=2
fi
pp_init=$(bench_tool pp-init)
bench_tool pp-train >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
half=$((OMP_NUM_THREADS > 1 ? OMP_NUM_THREADS / 2 : 1))
py=$(bench_python cpu)
total=$((warmup + steps))
load0=$(cut -d' ' -f1 /proc/loadavg)
run=("${shape[@]}" steps="$total" global_batch="$batch" microbatch="$batch" seq_len="$seq"
	data=synthetic save_on_completion=false eval_interval=0 log_period=1)
say "$OMP_NUM_THREADS threads, batch $batch x seq $seq, $warmup warm-up + $steps timed steps"

# 1. one process against PyTorch
bench_pp_train one "$warmup" 0 "${run[@]}" || exit 1
bench_torch one "$py" 0 --steps $total --warmup "$warmup" || exit 1
read -r pp_tps pp_best <<<"$(benchlib get "$bench_tmp/one.pp.json" tokens_per_s tokens_per_s_best)"
read -r th_tps th_best th_params th_torch th_tf <<<"$(benchlib get "$bench_tmp/one.torch.json" \
	tokens_per_s tokens_per_s_best params torch transformers)"

# 2. two ranks: dp=2 with the experts replicated, then split over ep=2
mpi() { OMP_NUM_THREADS=$half mpirun -n 2 --allow-run-as-root --oversubscribe --bind-to none "$@"; }
for ep in 1 2; do
	say "dp=2 ep=$ep: pp-train ..."
	mpi "$(bench_tool pp-train)" "${run[@]}" global_batch=$((2 * batch)) dp=2 ep=$ep \
		run_dir="$bench_tmp/run-ep$ep" 2>"$bench_tmp/ep$ep.log" ||
		die "dp=2 ep=$ep: pp-train failed: $(grep -v '^$' "$bench_tmp/ep$ep.log" | tail -n 1)"
	benchlib pp-metrics "$bench_tmp/run-ep$ep/metrics.jsonl" "$warmup" >"$bench_tmp/ep$ep.json"
done
ep1=$(benchlib get "$bench_tmp/ep1.json" tokens_per_s)
ep2=$(benchlib get "$bench_tmp/ep2.json" tokens_per_s)

# 3. the all-to-all on two ranks
say "pp-init --check on two ranks ..."
mpi "$pp_init" --check "${shape[@]}" dp=2 ep=2 run_dir="$bench_tmp/check" >"$bench_tmp/check.txt" 2>&1 ||
	die "pp-init --check failed: $(tail -n 3 "$bench_tmp/check.txt")"
coll=$(grep -E '^(alltoall|allreduce) +[0-9]+ [KM]iB +ok +bus' "$bench_tmp/check.txt" |
	sed -E 's/^([a-z_]+) +([0-9]+ [KM]iB) +ok +bus ([0-9.]+) GB\/s, ([0-9.]+) ms.*/\1 \2 \3 \4/')
[ -n "$coll" ] || die "pp-init --check printed no all-to-all row: $(tail -n 3 "$bench_tmp/check.txt")"

ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }
echo "# MoE on the CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $OMP_NUM_THREADS threads, fp32; load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end"
echo "# model: ${shape[*]}; batch $batch x seq $seq, mean of $steps steps after $warmup warm-up; PyTorch torch-$th_torch/transformers-$th_tf MixtralForCausalLM, eager attention"
printf '%-34s %12s %12s %9s %10s\n' run "pp tok/s" "torch tok/s" pp/torch best-step
printf '%-34s %12.1f %12.1f %9s %10s\n' "one process ($(python3 -c "print(f'{$th_params / 1e6:.1f}')")M params)" \
	"$pp_tps" "$th_tps" "$(ratio "$pp_tps" "$th_tps")" "$(ratio "$pp_best" "$th_best")"
printf '%-34s %12.1f\n' "dp=2 ep=1, $half threads per rank" "$ep1"
printf '%-34s %12.1f   ep=2 / ep=1: %s\n' "dp=2 ep=2, $half threads per rank" "$ep2" "$(ratio "$ep2" "$ep1")"
echo
echo "# collectives on 2 ranks (pp-init --check: bus bandwidth as nccl-tests computes it)"
printf '%-10s %8s %10s %10s\n' op size "bus GB/s" ms
while read -r op n unit bw ms; do printf '%-10s %8s %10s %10s\n' "$op" "$n $unit" "$bw" "$ms"; done <<<"$coll"
if [ -n "$json" ]; then
	python3 - "$json" "$pp_tps" "$th_tps" "$pp_best" "$th_best" "$ep1" "$ep2" "$coll" <<'EOF'
import json, sys
path, pp, th, ppb, thb, ep1, ep2, coll = sys.argv[1:]
rows = [l.split() for l in coll.splitlines() if l.strip()]
json.dump({"pp_tokens_per_s": float(pp), "torch_tokens_per_s": float(th),
           "pp_over_torch": float(pp) / float(th), "best_step_ratio": float(ppb) / float(thb),
           "dp2_ep1_tokens_per_s": float(ep1), "dp2_ep2_tokens_per_s": float(ep2),
           "collectives": [{"op": r[0], "size": f"{r[1]} {r[2]}", "bus_gb_s": float(r[3]), "ms": float(r[4])}
                           for r in rows]}, open(path, "w"), indent=1)
EOF
fi
