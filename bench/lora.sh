#!/usr/bin/env bash
# LoRA on the CPU: pp-train's LoRA against its full fine-tuning of the same
# model, and against PyTorch + PEFT (the venv of scripts/setup-reference.sh:
# transformers 4.46.3, peft 0.13.2, Debian's torch 1.13), in one run, on the
# same model, data, batch, threads and precision: SmolLM2-135M-Instruct
# (scripts/fetch-smollm2.sh) imported by pp-ckpt (its safetensors export for
# PEFT), chat data in one style (tests/tools/style_chat.py) tokenized with
# its loss mask, one document per sequence, fp32, LoRA rank 8 (alpha 16) on
# every linear layer, AdamW.
#
#   bench/lora.sh [--steps 8] [--seq 96] [--batch 4] [--threads 2] [--json FILE] [--smoke]
#
# Prints tokens per second (steps after the first) and each process's peak
# RSS, and the ratios: LoRA / full fine-tuning, pp / PEFT. --smoke: 3 steps.
# Run `make` first.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init lora
steps=8 seq=96 batch=4 threads=2 json= smoke=0
usage() { sed -n '2,16s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--steps) steps=$2; shift 2 ;;
	--seq) seq=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints steps seq batch threads
[ "$smoke" = 0 ] || steps=3
export OMP_NUM_THREADS=$threads HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
pp_train=$(bench_tool pp-train)
pp_ckpt=$(bench_tool pp-ckpt)
pp_tokenize=$(bench_tool pp-tokenize)
py=$("$root/scripts/setup-reference.sh") || die "the reference environment is not available (scripts/setup-reference.sh)"
gguf=$("$root/scripts/fetch-smollm2.sh") || die "SmolLM2 is not available (scripts/fetch-smollm2.sh)"
say "importing SmolLM2, exporting it as safetensors, writing the data"
"$pp_ckpt" import --format gguf "$gguf" -o "$bench_tmp/smol" >/dev/null 2>&1
"$pp_ckpt" export --format safetensors "$bench_tmp/smol" -o "$bench_tmp/hf" >/dev/null 2>&1
python3 "$root/tests/tools/style_chat.py" "$bench_tmp"
tok=$bench_tmp/smol/tokenizer/tokenizer.json
"$pp_tokenize" --tokenizer "$tok" --format jsonl -o "$bench_tmp/train.h5" "$bench_tmp/train.jsonl" >/dev/null 2>&1
"$pp_ckpt" info "$bench_tmp/smol" --config >"$bench_tmp/smol.json"
mb=$((batch / 2 > 0 ? batch / 2 : 1))
run_pp() { # TAG KEY=VALUE...: peak RSS (kB) in TAG.rss, the run in run-TAG
	local tag=$1; shift
	say "$tag: pp-train ..."
	/usr/bin/time -f %M -o "$bench_tmp/$tag.rss" "$pp_train" --cfg "$bench_tmp/smol.json" \
		run_dir="$bench_tmp/run-$tag" load_parameters_path="$bench_tmp/smol" data="$bench_tmp/train.h5" \
		tokenizer="$tok" seq_len=$seq global_batch=$batch microbatch=$mb microbatches=$((batch / mb)) \
		steps=$steps lr=2e-4 timing_skip_steps=1 save_on_completion=false "$@" \
		>/dev/null 2>"$bench_tmp/$tag.log" || { tail -n 3 "$bench_tmp/$tag.log" >&2; die "$tag: pp-train failed"; }
}
run_pp full
run_pp lora lora.rank=8 lora.alpha=16
say "peft: PyTorch + PEFT ..."
/usr/bin/time -f %M -o "$bench_tmp/peft.rss" "$py" "$root/bench/peft_train.py" "$bench_tmp/hf" "$bench_tmp/train.h5" \
	--seq $seq --batch $batch --steps $steps --rank 8 --alpha 16 --lr 2e-4 >"$bench_tmp/peft.json" 2>"$bench_tmp/peft.log" ||
	{ tail -n 3 "$bench_tmp/peft.log" >&2; die "PEFT failed"; }
python3 - "$bench_tmp" "$steps" "$seq" "$batch" "$threads" "$json" "$(bench_commit)" <<'PYEOF'
import json, re, sys
tmp, steps, seq, batch, threads, out, commit = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6], sys.argv[7]
def pp(tag):
    log = open(f"{tmp}/{tag}.log").read()
    m = re.search(r"timing: ([0-9.]+) s per step over (\d+) steps", log)
    return {"tokens_per_s": batch * seq / float(m.group(1)), "peak_rss_mb": int(open(f"{tmp}/{tag}.rss").read().split()[-1]) / 1024}
full, lora = pp("full"), pp("lora")
peft = json.load(open(f"{tmp}/peft.json"))
peft["peak_rss_mb"] = int(open(f"{tmp}/peft.rss").read().split()[-1]) / 1024
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"# LoRA fine-tuning, SmolLM2-135M-Instruct fp32 on the CPU ({cpu}, {threads} threads): "
      f"{batch} x {seq} tokens per step, {steps} steps (the first left out); rank 8 on every linear layer; commit {commit}")
print(f"{'run':<22} {'tok/s':>8} {'peak RSS MB':>12}")
for name, r in (("pp full fine-tuning", full), ("pp LoRA", lora), (f"PEFT (torch {peft['torch']})", peft)):
    print(f"{name:<22} {r['tokens_per_s']:8.1f} {r['peak_rss_mb']:12.0f}")
print(f"pp LoRA / pp full: {lora['tokens_per_s'] / full['tokens_per_s']:.2f}x tokens/s, "
      f"{lora['peak_rss_mb'] / full['peak_rss_mb']:.2f}x peak RSS")
print(f"pp LoRA / PEFT: {lora['tokens_per_s'] / peft['tokens_per_s']:.2f}x tokens/s, "
      f"{lora['peak_rss_mb'] / peft['peak_rss_mb']:.2f}x peak RSS")
if out:
    json.dump({"bench": "lora", "commit": commit, "threads": threads, "seq": seq, "batch": batch,
               "full": full, "lora": lora, "peft": peft}, open(out, "w"), indent=1)
PYEOF
