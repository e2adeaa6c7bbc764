#!/usr/bin/env bash
# pp-eval end to end on a real model and real text:
#   - meaningful: on multiple-choice items built from the King James Bible
#     (a verse's beginning; its own ending against three other verses'),
#     SmolLM2-135M-Instruct scores well above chance (1/4) and a seeded
#     random model of its shape (--random-init on its config) at chance;
#   - the table, --json and --per-item agree (acc from the items' own
#     predictions), --limit takes the first items;
#   - --data: loss, perplexity and bits per byte over a token dataset made
#     by pp-tokenize with the model's tokenizer, every token predicted;
#   - during training: eval_tasks (a FMT:FILE entry) writes eval/TASK/acc and acc_norm into
#     metrics.jsonl and the TensorBoard events (read back with the
#     tensorboard package), equal to pp-eval on the checkpoint saved at that
#     step; layouts that split the model are refused;
#   - bad input: a clear error naming the file and line, exit 2, nothing on
#     stdout, for each fault.
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=2
if ! G=$(cd "$PP_ROOT" && scripts/fetch-smollm2.sh 2>$T/fetch.log); then
	skip eval "SmolLM2 unavailable: $(tail -n 1 $T/fetch.log)"
	exit 0
fi
command -v bible >/dev/null || { skip eval "bible is not installed (scripts/install-deps.sh)"; exit 0; }
pp-ckpt import --format gguf "$G" -o $T/smol >/dev/null 2>$T/import.log ||
	{ fail eval/import "$(tail -n 2 $T/import.log)"; exit 1; }
tok=$T/smol/tokenizer/tokenizer.json
bible -f 'Gen1:1-Rev22:21' | sed 's/^[^ ]* //' >$T/kjv.txt
python3 "$PP_ROOT/tests/tools/kjv_tasks.py" 24 1 <$T/kjv.txt >$T/kjv.jsonl

# --- meaningful -----------------------------------------------------------------------------
jq_acc() { python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$@"; }
pp-eval --ckpt $T/smol --tasks $T/kjv.jsonl --json --per-item >$T/smol.json 2>$T/smol.log ||
	fail eval/smollm2 "$(tail -n 2 $T/smol.log)"
pp-eval --ckpt $T/smol --random-init --tasks $T/kjv.jsonl --json >$T/rand.json 2>$T/rand.log ||
	fail eval/random "$(tail -n 2 $T/rand.log)"
acc=$(jq_acc $T/smol.json acc 2>/dev/null) racc=$(jq_acc $T/rand.json acc 2>/dev/null)
echo "KJV verse endings, 24 items of 4 choices: SmolLM2 acc $acc, random acc $racc"
check eval/smollm2_above_chance awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.45) }'
check eval/random_at_chance awk -v a="${racc:-1}" 'BEGIN { exit !(a <= 0.45) }'
# the task's acc is the mean of the items' predictions; each item names its
# line, and every choice has its tokens and characters
items_agree() {
	python3 - $T/smol.json <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
items, task = lines[:-1], lines[-1]
assert len(items) == task["items"] == 24, len(items)
acc = sum(i["pred"] == i["answer"] for i in items) / len(items)
norm = sum(i["pred_norm"] == i["answer"] for i in items) / len(items)
assert abs(acc - task["acc"]) < 1e-12 and abs(norm - task["acc_norm"]) < 1e-12
for n, i in enumerate(items):
    assert i["line"] == n + 1 and len(i["requests"]) == 4
    for r in i["requests"]:
        assert r["tokens"] >= 1 and r["ll"] < 0 and r["continuation"].startswith(" ")
        assert r["chars"] == len(r["continuation"]) - 1
    best = max(range(4), key=lambda j: (i["requests"][j]["ll"], -j))
    assert best == i["pred"], (best, i["pred"])
EOF
}
check eval/per_item_agrees items_agree
pp-eval --ckpt $T/smol --tasks $T/kjv.jsonl --limit 3 >$T/table.txt 2>$T/table.log
check eval/table_and_limit grep -qE '^\|kjv +\| +3\|acc +\| +[01]\.[0-9]{4}\|±\|' $T/table.txt

# --- --data: a token dataset's documents ------------------------------------------------------
head -n 60 $T/kjv.txt >$T/kjv60.txt
pp-tokenize --tokenizer $tok -o $T/kjv60.h5 --one-doc-per-line $T/kjv60.txt >/dev/null 2>$T/tok.log
pp-eval --ckpt $T/smol --data $T/kjv60.h5 --json >$T/data.json 2>$T/data.log
data_ok() {
	python3 - $T/data.json $T/kjv60.txt <<'EOF'
import json, math, sys
d = json.loads(open(sys.argv[1]).read())
text = open(sys.argv[2], encoding="utf-8").read().splitlines()
assert d["docs"] == 60, d
assert d["bytes"] == sum(len(l.encode()) for l in text), (d["bytes"], "bytes")
assert 0 < d["loss"] < math.log(49152) and abs(d["perplexity"] - math.exp(d["loss"])) < 1e-9 * d["perplexity"]
assert abs(d["bits_per_byte"] - d["loss"] * d["tokens"] / math.log(2) / d["bytes"]) < 1e-9
print(f"--data: {d['docs']} verses, {d['tokens']} tokens, loss {d['loss']:.4f}, "
      f"{d['bits_per_byte']:.4f} bits per byte")
EOF
}
check eval/data_loss_ppl_bpb data_ok

# --- during training --------------------------------------------------------------------------
head -n 6 $T/kjv.jsonl >$T/quiz.jsonl
run="model=llama-tiny model.vocab_size=49152 tokenizer=$tok data=synthetic seq_len=32 global_batch=4 steps=4 lr=3e-3"
pp-train $run eval_interval=2 eval_tasks=jsonl:$T/quiz.jsonl run_dir=$T/run tensorboard=true >/dev/null 2>$T/train.log
check eval/train_log_line grep -qE 'step 4/4 \| eval quiz: acc [01]\.[0-9]{4}, acc_norm [01]\.[0-9]{4} \(6 items' $T/train.log
train_metrics() {
	python3 - $T/run/metrics.jsonl <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
got = {(r["step"], k) for r in recs for k in r if k.startswith("eval/")}
want = {(s, f"eval/quiz/{m}") for s in (2, 4) for m in ("acc", "acc_norm")}
assert want <= got, (want, got)
EOF
}
check eval/train_metrics_jsonl train_metrics
pp-eval --ckpt $T/run --tasks $T/quiz.jsonl --json >$T/quiz.json 2>/dev/null
same_as_pp_eval() {
	python3 - $T/run/metrics.jsonl $T/quiz.json <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = {k: r[k] for r in recs if r["step"] == 4 for k in r if k.startswith("eval/")}
ev = json.loads(open(sys.argv[2]).read())
assert abs(train["eval/quiz/acc"] - ev["acc"]) < 1e-8 and abs(train["eval/quiz/acc_norm"] - ev["acc_norm"]) < 1e-8, (train, ev)
EOF
}
check eval/train_equals_pp_eval same_as_pp_eval
if tbpy=$(cd "$PP_ROOT" && scripts/setup-tensorboard.sh 2>$T/tb.log); then
	tb_ok() {
		"$tbpy" - $T/run/tensorboard <<'EOF'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
ea.Reload()
tags = ea.Tags()["scalars"]
assert "eval/quiz/acc" in tags and "eval/quiz/acc_norm" in tags, tags
assert [e.step for e in ea.Scalars("eval/quiz/acc")] == [2, 4]
EOF
	}
	check eval/train_tensorboard tb_ok
else
	skip eval/train_tensorboard "no tensorboard environment: $(tail -n 1 $T/tb.log)"
fi
expect_fail eval/train_refuses_split_layout 2 "eval_tasks scores on ranks that hold the whole model" \
	pp-train $run pp=2 eval_interval=2 eval_tasks=$T/quiz.jsonl run_dir=$T/run2 --print-config
expect_fail eval/train_needs_interval 2 "eval_interval is 0" \
	pp-train $run eval_tasks=$T/quiz.jsonl run_dir=$T/run3 --print-config
printf '{"context": "a", "choices": ["b"], "answer": 0}\n' >$T/one.jsonl
expect_fail eval/train_bad_task_file 2 "key 'eval_tasks': .*one.jsonl: line 1: 1 choice" \
	pp-train $run eval_interval=2 eval_tasks=$T/one.jsonl run_dir=$T/run4

# --- bad input --------------------------------------------------------------------------------
bad() { # NAME PATTERN TEXT [pp-eval options]: exit 2, the message, nothing on stdout
	local name=$1 pat=$2
	printf '%b' "$3" >$T/$name.jsonl
	shift 3
	expect_fail eval/bad/$name 2 "$pat" pp-eval --ckpt $T/smol --tasks $T/$name.jsonl "$@"
	check eval/bad/${name}_no_output test ! -s $T/out.txt
}
pp-eval() { command pp-eval "$@" >$T/out.txt; }
bad no_field "$T/no_field.jsonl: line 2: no field \"choices\"|expected \\{\"context\"" \
	'{"context": "a", "choices": ["b", "c"], "answer": 0}\n{"context": "a", "answer": 0}\n'
bad answer_range "line 1: answer 5 is out of range: 2 choices" \
	'{"context": "a", "choices": ["b", "c"], "answer": 5}\n'
bad one_choice "line 1: 1 choice: a multiple-choice item needs two or more" \
	'{"context": "a", "choices": ["b"], "answer": 0}\n'
bad empty_cloze "line 1: an empty context" '{"text": "word"}\n'
bad not_jsonl "line 1: .*one JSON object per line" 'context,choices,answer\n'
bad hellaswag_fields "line 1: no field \"activity_label\"" '{"ctx": "x"}\n' --task-format hellaswag
bad format_name "task format 'mmlu'" '{"text": "a b"}\n' --task-format mmlu
unset -f pp-eval
expect_fail eval/bad/missing_file 2 "no_such.jsonl" pp-eval --ckpt $T/smol --tasks $T/no_such.jsonl
expect_fail eval/bad/tasks_and_data 2 "give --tasks or --data" pp-eval --ckpt $T/smol
# a checkpoint without a tokenizer cannot read text
pp-init model=llama-tiny -o $T/notok >/dev/null 2>&1
expect_fail eval/bad/no_tokenizer 2 "kjv.jsonl: scoring text needs the model's tokenizer" \
	pp-eval --ckpt $T/notok --tasks $T/kjv.jsonl
# a context longer than the model's window: truncated on the left, and said
python3 -c 'import json; print(json.dumps({"context": " ".join(["word"] * 200), "choices": ["a", "b"], "answer": 0}))' >$T/long.jsonl
pp-eval --ckpt $T/run --tasks $T/long.jsonl --json >$T/long.json 2>$T/long.log
check eval/long_context_truncated_and_said eval 'grep -q "long.jsonl: line 1: longer than the model.s context (max_seq_len=128)" $T/long.log && test -s $T/long.json'
