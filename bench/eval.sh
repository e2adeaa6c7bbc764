#!/usr/bin/env bash
# Task evaluation speed: pp-eval against EleutherAI lm-evaluation-harness
# (lm-eval, the venv of scripts/setup-eval-env.sh: Hugging Face transformers
# on Debian's PyTorch, CPU) on the same model, tasks, threads and precision,
# in one run: SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh) imported by
# pp-ckpt, and its safetensors export for lm-eval; fp32 on both sides; task
# files in the published schemas of HellaSwag, ARC, BoolQ, Winogrande,
# Lambada and PIQA made from King James Bible verses
# (tests/tools/eval_task_files.py), lm-eval running its own built-in task
# definitions on them (tests/ref/lm_eval_ref.py).
#
#   bench/eval.sh [--items 20] [--threads 2] [--json FILE] [--smoke]
#
# Times whole processes, model loading included, each once over all six
# tasks (pp-eval's --tasks FMT:FILE,...). Prints items per second of each
# and the ratio, and checks the two agree (tests/tools/eval_compare.py,
# 1e-4). --smoke: 2 items per task. Run `make` first.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init eval
items=20 threads=2 json= smoke=0
usage() { sed -n '2,18s/^# \{0,1\}//p' "$bench_self"; }
while [ $# -gt 0 ]; do
	case $1 in
	--items) items=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--json) json=$(bench_out "$2"); shift 2 ;;
	--smoke) smoke=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown argument '$1'" ;;
	esac
done
bench_ints items threads
[ "$smoke" = 0 ] || items=2
export OMP_NUM_THREADS=$threads HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
pp_eval=$(bench_tool pp-eval)
pp_ckpt=$(bench_tool pp-ckpt)
command -v bible >/dev/null || die "bible not found (scripts/install-deps.sh)"
py=$("$root/scripts/setup-eval-env.sh") || die "the lm-eval environment is not available (scripts/setup-eval-env.sh)"
gguf=$("$root/scripts/fetch-smollm2.sh") || die "SmolLM2 is not available (scripts/fetch-smollm2.sh)"
say "importing SmolLM2 and exporting it as safetensors"
"$pp_ckpt" import --format gguf "$gguf" -o "$bench_tmp/smol" >/dev/null
"$pp_ckpt" export --format safetensors "$bench_tmp/smol" -o "$bench_tmp/hf" >/dev/null
bible -f 'Gen1:1-Rev22:21' | sed 's/^[^ ]* //' >"$bench_tmp/kjv.txt"
mkdir -p "$bench_tmp/tasks" "$bench_tmp/pp"
python3 "$root/tests/tools/eval_task_files.py" "$items" 3 "$bench_tmp/tasks" <"$bench_tmp/kjv.txt"
now() { date +%s.%N; }
say "lm-eval: 6 tasks x $items items"
t0=$(now)
"$py" "$root/tests/ref/lm_eval_ref.py" --model "$bench_tmp/hf" --tasks-dir "$bench_tmp/tasks" \
	--out "$bench_tmp/ref.json" >"$bench_tmp/lm_eval.log" 2>&1 || { tail -n 5 "$bench_tmp/lm_eval.log" >&2; die "lm-eval failed"; }
t1=$(now)
say "pp-eval: 6 tasks x $items items"
tasks=
for t in hellaswag:hellaswag arc_easy:arc boolq:boolq winogrande:winogrande lambada:lambada piqa:piqa; do
	tasks+=${tasks:+,}${t#*:}:$bench_tmp/tasks/${t%%:*}.jsonl
done
"$pp_eval" --ckpt "$bench_tmp/smol" --tasks "$tasks" --json --per-item >"$bench_tmp/pp.json" 2>"$bench_tmp/pp.log" ||
	die "pp-eval failed: $(tail -n 2 "$bench_tmp/pp.log")"
t2=$(now)
# one file per task, as tests/tools/eval_compare.py reads them
python3 -c 'import json, sys
for l in open(sys.argv[1]):
    open(sys.argv[2] + "/" + json.loads(l)["task"] + ".json", "a").write(l)' "$bench_tmp/pp.json" "$bench_tmp/pp"
python3 "$root/tests/tools/eval_compare.py" "$bench_tmp/ref.json" "$bench_tmp/pp" 1e-4 >"$bench_tmp/compare.txt" ||
	{ cat "$bench_tmp/compare.txt" >&2; die "pp-eval and lm-eval disagree"; }
python3 - "$t0" "$t1" "$t2" "$items" "$threads" "$bench_tmp" "$json" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PYEOF'
import glob, json, os, sys
t0, t1, t2 = map(float, sys.argv[1:4])
items, threads, tmp, out, commit = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7], sys.argv[8]
n = 6 * items
ref = json.load(open(f"{tmp}/ref.json"))
scoring = sum(json.loads(open(f).read().splitlines()[-1])["seconds"] for f in glob.glob(f"{tmp}/pp/*.json"))
lm, pp = t1 - t0, t2 - t1
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"# Task evaluation, SmolLM2-135M-Instruct fp32 on the CPU ({cpu}, {threads} threads): "
      f"6 tasks x {items} items; commit {commit}")
print(f"# lm-eval {ref['lm_eval_version']} (transformers {ref['transformers_version']}, torch {ref['torch_version']}), "
      "and pp-eval: one process each over all tasks; wall time, model loading included")
print(f"{'side':<10} {'seconds':>8} {'items/s':>8}")
print(f"{'lm-eval':<10} {lm:8.1f} {n / lm:8.2f}")
print(f"{'pp-eval':<10} {pp:8.1f} {n / pp:8.2f}")
print(f"pp-eval / lm-eval: {lm / pp:.2f}x items per second (scoring alone: {n / scoring:.2f} items/s, {lm / scoring:.2f}x)")
print(open(f"{tmp}/compare.txt").read().splitlines()[-1])
if out:
    json.dump({"bench": "eval", "items": n, "threads": threads, "commit": commit,
               "lm_eval_s": lm, "pp_eval_s": pp, "pp_scoring_s": scoring,
               "speedup": lm / pp, "lm_eval_version": ref["lm_eval_version"]}, open(out, "w"), indent=1)
PYEOF
