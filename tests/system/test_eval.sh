#!/usr/bin/env bash
# pp-eval across layouts and ranks, on a small model trained a few steps
# with SmolLM2's tokenizer (imported from its GGUF file):
#   - the same model saved at pp=2 x tp=2 (pp-ckpt convert) gives every
#     request the same log-likelihood as the single-process checkpoint
#     (<= 1e-5 relative) and the same figures;
#   - 2 ranks under mpirun, and under srun --mpi=pmix on the local Slurm
#     cluster, share the items and give the same per-item results and
#     totals as one process; so does --data's sum over documents.
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=1
if ! G=$(cd "$PP_ROOT" && scripts/fetch-smollm2.sh 2>$T/fetch.log); then
	skip eval "SmolLM2 unavailable: $(tail -n 1 $T/fetch.log)"
	exit 0
fi
pp-ckpt import --format gguf "$G" -o $T/smol >/dev/null 2>$T/import.log ||
	{ fail eval/import "$(tail -n 2 $T/import.log)"; exit 1; }
tok=$T/smol/tokenizer/tokenizer.json
cfg="model=llama-tiny model.vocab_size=49152 tokenizer=$tok data=synthetic seq_len=32 global_batch=4 steps=3 lr=1e-2"
pp-train $cfg run_dir=$T/one --quiet 2>$T/train.log || { fail eval/train "$(tail -n 2 $T/train.log)"; exit 1; }
pp-ckpt convert $T/one -o $T/four pp=2 tp=2 >/dev/null 2>$T/convert.log ||
	{ fail eval/convert "$(tail -n 2 $T/convert.log)"; exit 1; }
cat >$T/mc.jsonl <<'EOF'
{"context": "In the beginning God created", "choices": ["the heaven and the earth.", "a cat.", "nothing at all, said he"], "answer": 0}
{"context": "And God said, Let there be", "choices": ["light", "darkness upon the face of the deep"], "answer": 0}
{"context": "The LORD is my shepherd;", "choices": ["I shall not want.", "he maketh me to lie down", "x"], "answer": 0}
{"context": "For God so loved the world,", "choices": ["that he gave", "and the sea", "a b c d"], "answer": 0}
{"context": "Blessed are the meek:", "choices": ["for they shall inherit the earth.", "for theirs"], "answer": 0}
EOF
printf '{"text": "In the beginning God created the heaven and the earth"}\n{"text": "And the earth was without form"}\n{"text": "Jesus wept and the people"}\n' >$T/cloze.jsonl
printf 'In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.\nAnd God said, Let there be light: and there was light.\n' >$T/docs.txt
pp-tokenize --tokenizer $tok -o $T/docs.h5 --one-doc-per-line $T/docs.txt >/dev/null 2>&1
ev() { pp-eval "$@" --tasks $T/mc.jsonl,$T/cloze.jsonl --json --per-item; }
ev --ckpt $T/one >$T/one.json 2>$T/one.log || fail eval/one "$(tail -n 2 $T/one.log)"
ev --ckpt $T/four >$T/four.json 2>$T/four.log || fail eval/four "$(tail -n 2 $T/four.log)"
# compare A B TOL: the same items, requests and figures, log-likelihoods
# within TOL relative
compare() {
	python3 - "$@" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(a) == len(b) == 10, (len(a), len(b))
worst = 0
for x, y in zip(a, b):
    assert x.get("task") == y.get("task")
    if "requests" in x:
        assert x["line"] == y["line"] and x.get("pred") == y.get("pred")
        for r, s in zip(x["requests"], y["requests"]):
            assert r["tokens"] == s["tokens"] and r["greedy"] == s["greedy"]
            worst = max(worst, abs(r["ll"] - s["ll"]) / abs(r["ll"]))
    else:
        for k in ("acc", "acc_norm", "perplexity", "tokens", "items"):
            if k in x:
                assert abs(x[k] - y[k]) <= tol * abs(x[k]) + 1e-12, (k, x[k], y[k])
assert worst <= tol, worst
print(f"log-likelihoods within {worst:.2g} relative")
EOF
}
check eval/layout/pp2_tp2_same_as_one compare $T/one.json $T/four.json 1e-5

if mpirun -n 2 --allow-run-as-root --oversubscribe pp-eval --ckpt $T/one --tasks $T/mc.jsonl,$T/cloze.jsonl \
	--json --per-item >$T/mpi.json 2>$T/mpi.log; then
	check eval/ranks/mpirun_2_same_as_one compare $T/one.json $T/mpi.json 0
	check eval/ranks/mpirun_items_shared grep -q "mc: 5 items (jsonl); 3 on this rank" $T/mpi.log
else
	fail eval/ranks/mpirun "$(tail -n 3 $T/mpi.log)"
fi
pp-eval --ckpt $T/one --data $T/docs.h5 --json >$T/data1.json 2>/dev/null
mpirun -n 2 --allow-run-as-root --oversubscribe pp-eval --ckpt $T/one --data $T/docs.h5 --json >$T/data2.json 2>$T/data2.log
same_data() {
	python3 - $T/data1.json $T/data2.json <<'EOF'
import json, sys
a, b = (json.loads(open(f).read()) for f in sys.argv[1:])
assert a["docs"] == b["docs"] == 3 and a["tokens"] == b["tokens"] and a["bytes"] == b["bytes"]
assert abs(a["loss"] - b["loss"]) <= 1e-12 * a["loss"], (a, b)
EOF
}
check eval/ranks/mpirun_data_same_as_one same_data

. tests/tools/slurm-lib.sh
slurm_up 2>$T/slurm.log
case $? in
0)
	timeout 120 srun -n 2 --mpi=pmix pp-eval --ckpt $T/one --tasks $T/mc.jsonl,$T/cloze.jsonl --json \
		--per-item >$T/srun.json 2>$T/srun.log
	check eval/ranks/srun_2_same_as_one compare $T/one.json $T/srun.json 0
	slurm_down
	;;
3 | 4) skip eval/ranks/srun "$SLURM_SKIP" ;;
*) fail eval/ranks/srun "the local Slurm cluster did not start: $(tail -n 5 $T/slurm.log | tr '\n' ' ')" ;;
esac
