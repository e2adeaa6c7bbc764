#!/usr/bin/env bash
# MaxText's A3 Mega recipe (configs/llama2-7b-a3mega.json: Llama-2 7B,
# fsdp 8 x dp 2 on two nodes of 8 H100s, 4 sequences of 4096 per GPU, bf16,
# recompute=minimal_flash; 55% MFU published) scaled to one GPU: fsdp 1, the
# same per-GPU batch and sequence, and as many of the 7B's 32 layers (their
# shapes unchanged) as pp-init --plan fits in --mem-fraction of the GPU:
# one GPU cannot hold the whole 7B's fp32 gradients and AdamW state
# unsharded. Prints pp-train's MFU (its metrics.jsonl, the causal FLOP
# count 6N + 6*L*Hq*D*T) against the published 55%.
#
#   bench/a3mega.sh [--warmup 2] [--steps 5] [--mem-fraction 0.85] [--budget 0]
#                   [--json FILE] [--profile] [--smoke]
#
# --budget: seconds the run may take (0: no limit). --profile: then the
# per-op table of pp-train under PP_CUDA_PROFILE=1 (bench/gpu.sh's).
# --smoke: llama-tiny on the CPU at seq 64, one timed step, for
# tests/e2e/test_bench.sh (no MFU: the CPU has no known peak). Table on stdout
# (progress on stderr); with --json, the figures as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init a3mega

warmup=2 steps=5 mem_fraction=0.85 budget=0 json= smoke=0 profile=0
usage() { sed -n '2,19s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--warmup) warmup=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--mem-fraction) mem_fraction=$2; shift 2 ;;
	--budget) budget=$2; shift 2 ;;
	--profile) profile=1; shift ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints warmup steps budget
[ "$smoke" = 0 ] || warmup=1 steps=1
total=$((warmup + steps))
recipe=("${bench_a3mega[@]}" data=synthetic
	steps="$total" save_on_completion=false eval_interval=0 checkpoint_period=0 log_period=1)
if [ "$smoke" = 1 ]; then
	recipe+=(device=cpu dtype=fp32 model=llama-tiny seq_len=64)
	layers=2
else
	layers=$(bench_fit_layers "$mem_fraction" "${recipe[@]}") || exit 1
fi
say "$layers layers, $warmup warm-up + $steps timed steps"
bench_pp_train a3mega "$warmup" "$budget" "${recipe[@]}" model.n_layers="$layers" ||
	die "pp-train failed: $(cat "$bench_tmp/a3mega.pp.err")"
where="one $(bench_gpu_name)"
[ "$smoke" = 0 ] || where="the CPU (smoke: llama-tiny, seq 64, fp32)"
echo "# the A3 Mega recipe on $where: llama2-7b shapes, $layers of 32 layers, 4 x 4096 tokens per step, bf16, recompute=minimal_flash; $steps steps after $warmup warm-up; commit $(bench_commit)"
python3 - "$bench_tmp/a3mega.pp.json" "$layers" "$json" <<'EOF'
import json, sys
src, layers, path = sys.argv[1:]
r = json.load(open(src))
mfu = r["mfu"]
print(f"{'run':<30} {'tok/s':>12} {'MFU':>8} {'MaxText (2 nodes)':>18}")
print(f"{'pp-train, fsdp 1, one device':<30} {r['tokens_per_s']:>12.1f} "
      f"{'-' if mfu is None else f'{100 * mfu:.1f}%':>8} {'55%':>18}")
if path:
    json.dump({"bench": "a3mega", "layers": int(layers), "tokens_per_s": r["tokens_per_s"],
               "mfu": mfu, "maxtext_mfu": 0.55}, open(path, "w"), indent=1)
EOF
if [ "$profile" = 1 ]; then
	bench_profile "$budget" "pp-train's per-op profile, $layers layers" "$(bench_tool pp-train)" \
		"${recipe[@]}" model.n_layers="$layers" steps=$((warmup + 2)) run_dir="$bench_tmp/profile"
fi
