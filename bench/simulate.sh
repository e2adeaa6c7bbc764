#!/usr/bin/env bash
# pp-init --simulate against pp-train on this GPU: the cluster description
# of the GPU (dgx-h100, h200 or a100-sxm by nvidia-smi's name) calibrated
# with pp-init --calibrate from the profile of one run (llama-1b, seq 2048,
# 8 sequences a step), then the step of two other runs predicted and
# measured: llama-1b at seq 4096 (4 sequences) and the A3 Mega recipe on one
# GPU (bench/a3mega.sh's run: llama2-7b shapes, as many layers as fit, 4 x
# 4096, minimal_flash). Prints each prediction against its measurement
# (mean step after the warm-up); the goal is within 15%. On a GPU the
# calibration run is repeated under PP_CUDA_PROFILE=1 and the cluster also
# calibrated from its per-op table; those predictions' ratios are the last
# column.
#
#   bench/simulate.sh [--warmup 2] [--steps 5] [--mem-fraction 0.85] [--budget 0]
#                     [--json FILE] [--smoke]
#
# --budget: seconds the runs may take together (0: no limit). --smoke: the
# same on the CPU with llama-tiny (seq 64 and 128, 2 layers for the A3 Mega
# run) and a nominal one-core cluster, for tests/e2e/test_bench.sh (its
# ratios mean nothing). Table on stdout (progress on stderr); with --json,
# the figures as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init simulate

warmup=2 steps=5 mem_fraction=0.85 budget=0 json= smoke=0
usage() { sed -n '2,21s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--mem-fraction) mem_fraction=$2; shift 2 ;;
	--budget) budget=$2; shift 2 ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints warmup steps budget
[ "$smoke" = 0 ] || warmup=1 steps=2
total=$((warmup + steps)) start=$SECONDS
pp_init=$(bench_tool pp-init)
common=(data=synthetic steps="$total" save_on_completion=false eval_interval=0 checkpoint_period=0
	log_period=1)
a3mega=("${bench_a3mega[@]}")
if [ "$smoke" = 1 ]; then
	dev=(device=cpu dtype=fp32 model=llama-tiny)
	cal=("${dev[@]}" seq_len=64 global_batch=8 microbatch=8)
	long=("${dev[@]}" seq_len=128 global_batch=4 microbatch=4)
	a3mega+=("${dev[@]}" seq_len=64 model.n_layers=2)
	cluster=$bench_tmp/cpu.json
	bench_cpu_cluster "$cluster"
	where="the CPU (smoke: llama-tiny)"
else
	dev=(device=cuda dtype=bf16 model=llama-1b)
	cal=("${dev[@]}" seq_len=2048 global_batch=8 microbatch=8)
	long=("${dev[@]}" model.max_seq_len=4096 seq_len=4096 global_batch=4 microbatch=4)
	gpu=$(bench_gpu_name)
	[ -n "$gpu" ] || die "no GPU (nvidia-smi lists none); --smoke runs on the CPU"
	cluster=$(bench_cluster "$gpu")
	layers=$(bench_fit_layers "$mem_fraction" "${a3mega[@]}") || exit 1
	a3mega+=(model.n_layers="$layers")
	where="one $gpu (cluster=$cluster)"
fi
left() { [ "$budget" -eq 0 ] && echo 0 || echo $((budget - (SECONDS - start) > 10 ? budget - (SECONDS - start) : 10)); }

# the calibration: one profiled run
bench_pp_train cal "$warmup" "$(left)" "${cal[@]}" "${common[@]}" profile_steps=$((warmup + 1)):$((total + 1)) ||
	die "the calibration run failed: $(cat "$bench_tmp/cal.pp.err")"
"$pp_init" --calibrate "$bench_tmp/run-cal/profile" "${cal[@]}" cluster="$cluster" \
	>"$bench_tmp/calibrated.json" 2>"$bench_tmp/calibrate.log" ||
	die "pp-init --calibrate failed: $(tail -n 1 "$bench_tmp/calibrate.log")"
sed 's/^/  /' "$bench_tmp/calibrate.log" >&2
# on a GPU, the same run under PP_CUDA_PROFILE=1: a calibration from its per-op table too
ops=
if [ "$smoke" = 0 ]; then
	if PP_CUDA_PROFILE=1 bench_pp_train calops "$warmup" "$(left)" "${cal[@]}" "${common[@]}" &&
		"$pp_init" --calibrate "$bench_tmp/calops.pp.log" "${cal[@]}" cluster="$cluster" \
			>"$bench_tmp/calibrated-ops.json" 2>"$bench_tmp/calibrate-ops.log"; then
		sed 's/^/  /' "$bench_tmp/calibrate-ops.log" >&2
		ops=$bench_tmp/calibrated-ops.json
	else
		say "no calibration from the per-op table: $(cat "$bench_tmp/calops.pp.err" 2>/dev/null || tail -n 1 "$bench_tmp/calibrate-ops.log")"
	fi
fi

rows=()
for tag in cal long a3mega; do
	case $tag in
	cal) keys=("${cal[@]}") ;;
	long) keys=("${long[@]}") ;;
	a3mega) keys=("${a3mega[@]}") ;;
	esac
	if [ "$tag" != cal ]; then
		bench_pp_train "$tag" "$warmup" "$(left)" "${keys[@]}" "${common[@]}" ||
			die "the $tag run failed: $(cat "$bench_tmp/$tag.pp.err")"
	fi
	"$pp_init" --simulate --json "${keys[@]}" data=synthetic cluster="$bench_tmp/calibrated.json" nodes=1 \
		>"$bench_tmp/$tag.sim.json" 2>"$bench_tmp/$tag.sim.log" ||
		die "pp-init --simulate of the $tag run failed: $(tail -n 1 "$bench_tmp/$tag.sim.log")"
	[ -z "$ops" ] || "$pp_init" --simulate --json "${keys[@]}" data=synthetic cluster="$ops" nodes=1 \
		>"$bench_tmp/$tag.simops.json" 2>/dev/null || rm -f "$bench_tmp/$tag.simops.json"
	rows+=("$tag=${keys[*]}")
done

echo "# pp-init --simulate, calibrated on the first run's profile, against pp-train on $where; $steps steps after $warmup warm-up; commit $(bench_commit)"
python3 - "$bench_tmp" "$json" "${rows[@]}" <<'EOF'
import json, os, sys
tmp, path, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
out = []
print(f"{'run':<34} {'predicted s':>12} {'measured s':>12} {'ratio':>7} {'per-op table':>13}")
for row in rows:
    tag, keys = row.split("=", 1)
    sim = json.load(open(f"{tmp}/{tag}.sim.json"))
    cfg = json.load(open(f"{tmp}/{tag}.json"))
    pp = json.load(open(f"{tmp}/{tag}.pp.json"))
    measured = cfg["global_batch"] * cfg["seq_len"] / pp["tokens_per_s"]
    ratio = sim["step_s"] / measured
    m = cfg["model"]
    name = (f"{m['preset']} seq {cfg['seq_len']}" if tag != "a3mega" else
            f"A3 Mega recipe, {m['n_layers']} layers") + (" (calibration)" if tag == "cal" else "")
    ops = f"{tmp}/{tag}.simops.json"
    ops_ratio = json.load(open(ops))["step_s"] / measured if os.path.exists(ops) else None
    print(f"{name:<34} {sim['step_s']:>12.4f} {measured:>12.4f} {ratio:>7.3f} "
          f"{'-' if ops_ratio is None else f'{ops_ratio:.3f}':>13}")
    out.append({"run": tag, "keys": keys, "predicted_s": sim["step_s"], "measured_s": measured,
                "ratio": ratio, "within_15pct": abs(ratio - 1) <= 0.15,
                "ratio_optable": ops_ratio})
if path:
    json.dump({"bench": "simulate", "rows": out}, open(path, "w"), indent=1)
EOF
