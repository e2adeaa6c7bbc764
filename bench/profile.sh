#!/usr/bin/env bash
# Profiling overhead: pp-train's step time over the same steps without and
# with profile_steps recording every one of them, and the ratio.
#
#   bench/profile.sh [--steps 20] [--rounds 3] [--json FILE] [--smoke]
#
# Two layouts of a llama of d_model 256, 8 layers, 8 heads, seq 128, one
# sequence per microbatch (data=synthetic), on the CPU:
#   one   one process, 8 microbatches: a step's passes are tens of
#         milliseconds, so the fixed costs of a step show
#   pp4   pp=4 1f1b, 16 microbatches, 4 ranks under mpirun (OMP_NUM_THREADS=1
#         each, --oversubscribe): the most events per second, every
#         forward, backward, send and receive of 16 microbatches
# Each round runs each layout once without and once with profiling, in
# alternating order (profile_steps=2:STEPS+2, so the window is exactly the measured steps
# 2..STEPS+1 after one warm-up step); the figures are the medians of every
# round's step times (metrics.jsonl's step_time, rank 0's wall clock), the
# ratio with/without the figure of merit (goal <= 1.03). A profiled step
# records the events; the barriers that open and close the window and the
# file's write fall outside the steps. events/step/rank counts what one
# rank recorded per step. --smoke: one round of three steps of a 4-layer
# model, for tests/e2e/test_bench.sh. Table on stdout (progress on stderr);
# with --json, the same as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init profile

steps=20 rounds=3 json= smoke=0
usage() { sed -n '2,23s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--steps) steps=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument $1" ;;
	esac
done
bench_ints steps rounds
[ "$steps" -ge 1 ] && [ "$rounds" -ge 1 ] || usage_error "--steps and --rounds must be at least 1"
train=$(bench_tool pp-train)
merge=$(bench_tool pp-merge-profile)
command -v mpirun >/dev/null || die "mpirun not found (scripts/install-deps.sh)"

model="model=llama-tiny model.d_model=256 model.n_heads=8 model.n_kv_heads=8 model.d_ff=768 model.n_layers=8"
seq=128
if [ "$smoke" = 1 ]; then
	steps=3 rounds=1 model="model=llama-tiny model.n_layers=4" seq=32
fi
last=$((steps + 1))
common="$model seq_len=$seq microbatch=1 steps=$last lr_schedule.warmup_steps=1 data=synthetic save_on_completion=false --quiet"
declare -A args=([one]="global_batch=8" [pp4]="pp=4 schedule=1f1b global_batch=16")
declare -A ranks=([one]=1 [pp4]=4)
layouts="one pp4"

# run LAYOUT SIDE ROUND: one pp-train run; its step times go to LAYOUT.SIDE
run() {
	local l=$1 side=$2 k=$3 dir=$bench_tmp/$1-$2-$3 prof=
	[ "$side" = on ] && prof="profile_steps=2:$((last + 1))"
	local cmd=("$train" $common ${args[$l]} $prof run_dir=$dir)
	[ "${ranks[$l]}" -gt 1 ] && cmd=(mpirun -n "${ranks[$l]}" --allow-run-as-root --oversubscribe --bind-to none "${cmd[@]}")
	OMP_NUM_THREADS=$([ "${ranks[$l]}" -gt 1 ] && echo 1 || nproc) "${cmd[@]}" 2>"$dir.log" ||
		die "$l ($side): pp-train failed: $(tail -n 2 "$dir.log")"
	benchlib step-times "$dir/metrics.jsonl" 2 "$last" >>"$bench_tmp/$l.$side"
	if [ "$side" = on ] && [ ! -s "$bench_tmp/$l.events" ]; then
		"$merge" "$dir" --json >"$dir.json" || die "$l: pp-merge-profile failed"
		python3 -c "import json, sys; j = json.load(open(sys.argv[1])); \
print(sum(t['count'] for t in j['top_ops']) / j['ranks'] / (j['steps'][1] - j['steps'][0]))" \
			"$dir.json" >"$bench_tmp/$l.events"
	fi
}

# odd rounds run without profiling first, even ones with it first: what the
# second run of a pair gains (a warm page cache, the clock) cancels out
for k in $(seq "$rounds"); do
	for l in $layouts; do
		say "round $k/$rounds: $l without and with profiling ($steps steps each)"
		if [ $((k % 2)) = 1 ]; then sides="off on"; else sides="on off"; fi
		for side in $sides; do run "$l" "$side" "$k"; done
	done
done
say "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
benchlib profile-report "$bench_tmp" "$layouts" ${json:+"$json"}
