#!/usr/bin/env bash
# FP8 against bf16 on one GPU: tokens/s of fp8.recipe=delayed and current
# beside dtype=bf16 alone, in one run, on the llama-1b preset (seq 2048) and
# on a stack of llama2-7b layers (their shapes unchanged; as many as
# pp-init --plan fits in --mem-fraction of the GPU, as bench/a3mega.sh
# does), each recipe's loss curve beside bf16's (the largest relative
# difference of the per-step losses). Goal: 1.3x bf16's tokens/s on the 7B
# layers, the losses within 1%. Beside each, pp-init --simulate's predicted
# speed-up on the GPU's cluster description (configs/clusters, by
# nvidia-smi's name; uncalibrated), to hold the model's FP8 costs to.
#
#   bench/fp8.sh [--warmup 2] [--steps 5] [--mem-fraction 0.85] [--budget 0]
#                [--json FILE] [--smoke]
#
# --budget: seconds the runs may take together (0: no limit), split among
# them. --smoke: llama-tiny on the CPU (fp32 against the CPU's FP8
# emulation), one timed step, for tests/e2e/test_bench.sh. Table on stdout
# (progress on stderr); with --json, the figures as JSON.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init fp8

warmup=2 steps=5 mem_fraction=0.85 budget=0 json= smoke=0
usage() { sed -n '2,16s/^# \{0,1\}//p' "$bench_self"; }
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
[ "$smoke" = 0 ] || warmup=1 steps=1
total=$((warmup + steps))
common=(data=synthetic steps="$total" save_on_completion=false eval_interval=0 checkpoint_period=0
	log_period=1 lr_schedule.warmup_steps=0)
pp_init=$(bench_tool pp-init)
if [ "$smoke" = 1 ]; then
	models=("tiny" "model=llama-tiny device=cpu dtype=fp32 seq_len=64 global_batch=4 microbatch=4")
	cluster=$bench_tmp/cpu.json
	bench_cpu_cluster "$cluster"
else
	cluster=$(bench_cluster "$(bench_gpu_name)")
	seven=("${bench_a3mega[@]}")
	# the most layers whose FP8 plan fits
	layers=$(bench_fit_layers "$mem_fraction" "${seven[@]}" "${common[@]}" fp8.recipe=delayed) || exit 1
	models=("llama-1b" "model=llama-1b device=cuda dtype=bf16 seq_len=2048 global_batch=8 microbatch=4"
		"llama2-7b x$layers" "${seven[*]} model.n_layers=$layers")
fi
runs=$((${#models[@]} / 2 * 3))
per=$((budget > 0 ? budget / runs : 0))
: >"$bench_tmp/rows.jsonl"
for ((i = 0; i < ${#models[@]}; i += 2)); do
	name=${models[i]}
	read -ra cfg <<<"${models[i + 1]}"
	for r in none delayed current; do
		tag="m$((i / 2))-$r"
		bench_pp_train "$tag" "$warmup" "$per" "${cfg[@]}" "${common[@]}" fp8.recipe=$r ||
			die "$name, fp8.recipe=$r: $(cat "$bench_tmp/$tag.pp.err")"
		"$pp_init" --simulate --json "${cfg[@]}" "${common[@]}" fp8.recipe=$r cluster="$cluster" \
			nodes=1 >"$bench_tmp/$tag.sim.json" 2>"$bench_tmp/$tag.sim.err" ||
			die "$name, fp8.recipe=$r: pp-init --simulate: $(tail -n 1 "$bench_tmp/$tag.sim.err")"
		python3 - "$name" "$r" "$bench_tmp/$tag.pp.json" "$bench_tmp/run-$tag/metrics.jsonl" \
			"$bench_tmp/run-m$((i / 2))-none/metrics.jsonl" "$bench_tmp/$tag.sim.json" \
			>>"$bench_tmp/rows.jsonl" <<'EOF'
import json, sys
name, recipe, src, mine, base, sim = sys.argv[1:]
r = json.load(open(src))
loss = lambda p: [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b = loss(mine), loss(base)
diff = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and b else None
print(json.dumps({"model": name, "recipe": recipe, "tokens_per_s": r["tokens_per_s"],
                  "mfu": r["mfu"], "loss_vs_bf16": diff,
                  "predicted_tokens_per_s": json.load(open(sim))["tokens_per_s"]}))
EOF
	done
done
where="one $(bench_gpu_name)"
[ "$smoke" = 0 ] || where="the CPU (smoke: llama-tiny, fp32 and the CPU's FP8 emulation)"
echo "# FP8 against bf16 on $where; $steps steps after $warmup warm-up; predicted: pp-init --simulate cluster=$(basename "$cluster" .json); commit $(bench_commit)"
python3 - "$bench_tmp/rows.jsonl" "$json" "$smoke" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
plain = "fp32" if sys.argv[3] == "1" else "bf16"
base = {r["model"]: r["tokens_per_s"] for r in rows if r["recipe"] == "none"}
pbase = {r["model"]: r["predicted_tokens_per_s"] for r in rows if r["recipe"] == "none"}
print(f"{'model':<16} {'recipe':<10} {'tok/s':>12} {'vs ' + plain:>8} {'predicted':>10} {'MFU':>7} "
      f"{'loss vs ' + plain:>13}")
for r in rows:
    r["speedup"] = r["tokens_per_s"] / base[r["model"]]
    r["predicted_speedup"] = r["predicted_tokens_per_s"] / pbase[r["model"]]
    mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    d = "-" if r["recipe"] == "none" or r["loss_vs_bf16"] is None else f"{r['loss_vs_bf16']:.2e}"
    print(f"{r['model']:<16} {r['recipe'] if r['recipe'] != 'none' else plain:<10} "
          f"{r['tokens_per_s']:>12.1f} {r['speedup']:>7.2f}x {r['predicted_speedup']:>9.2f}x "
          f"{mfu:>7} {d:>13}")
if sys.argv[2]:
    json.dump({"bench": "fp8", "rows": rows}, open(sys.argv[2], "w"), indent=1)
EOF
