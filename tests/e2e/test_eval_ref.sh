#!/usr/bin/env bash
# pp-eval equal to EleutherAI lm-evaluation-harness: SmolLM2-135M-Instruct
# imported from its GGUF file and exported as safetensors, lm-eval (the venv
# of scripts/setup-eval-env.sh; its own built-in task definitions of
# hellaswag, arc_easy, boolq, winogrande, lambada_openai and piqa, pointed at
# local files; tests/ref/lm_eval_ref.py) on the export, pp-eval on the
# imported checkpoint, over task files written in the data sets' published
# schemas from King James Bible verses (tests/tools/eval_task_files.py, with
# HellaSwag's marks, non-ASCII choices, answers in every position). Every
# request's context and continuation are the harness's strings, every
# log-likelihood within 1e-4 relative (of at least 1 nat: lm-eval's fp32 log
# softmax has an absolute floor near 1e-5), greediness the same, acc and acc_norm
# equal on every task and Lambada's perplexity within 1e-4
# (tests/tools/eval_compare.py).
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
command -v bible >/dev/null || { skip eval_ref "bible is not installed (scripts/install-deps.sh)"; exit 0; }
if ! py=$(cd "$PP_ROOT" && scripts/setup-eval-env.sh 2>$T/setup.log); then
	skip eval_ref "lm-eval environment unavailable: $(grep -v '^ ' $T/setup.log | tail -n 1)"
	exit 0
fi
if ! G=$(cd "$PP_ROOT" && scripts/fetch-smollm2.sh 2>$T/fetch.log); then
	skip eval_ref "SmolLM2 unavailable: $(tail -n 1 $T/fetch.log)"
	exit 0
fi
pp-ckpt import --format gguf "$G" -o $T/smol >/dev/null 2>$T/import.log &&
	pp-ckpt export --format safetensors $T/smol -o $T/hf >/dev/null 2>$T/export.log ||
	{ fail eval_ref/model "$(tail -n 2 $T/import.log $T/export.log)"; exit 1; }
bible -f 'Gen1:1-Rev22:21' | sed 's/^[^ ]* //' >$T/kjv.txt
mkdir -p $T/tasks $T/pp
python3 "$PP_ROOT/tests/tools/eval_task_files.py" 6 3 $T/tasks <$T/kjv.txt
if "$py" "$PP_ROOT/tests/ref/lm_eval_ref.py" --model $T/hf --tasks-dir $T/tasks --out $T/ref.json \
	>$T/lm_eval.log 2>&1; then
	pass "eval_ref/lm_eval_ran ($(python3 -c 'import json, sys; print("lm-eval", json.load(open(sys.argv[1]))["lm_eval_version"])' $T/ref.json))"
else
	fail eval_ref/lm_eval_ran "$(tail -n 3 $T/lm_eval.log)"
	exit 1
fi
# one run over every task, each file with its format (FMT:FILE)
tasks=
for t in hellaswag:hellaswag arc_easy:arc boolq:boolq winogrande:winogrande lambada:lambada piqa:piqa; do
	tasks+=${tasks:+,}${t#*:}:$T/tasks/${t%%:*}.jsonl
done
pp-eval --ckpt $T/smol --tasks "$tasks" --json --per-item >$T/pp.json 2>$T/pp.log ||
	fail eval_ref/pp_eval "$(tail -n 2 $T/pp.log)"
python3 -c 'import json, sys
for l in open(sys.argv[1]):
    open(sys.argv[2] + "/" + json.loads(l)["task"] + ".json", "a").write(l)' $T/pp.json $T/pp
python3 "$PP_ROOT/tests/tools/eval_compare.py" $T/ref.json $T/pp 1e-4 >$T/compare.txt
rc=$?
cat $T/compare.txt
check eval_ref/equal_to_lm_eval test $rc -eq 0
