#!/usr/bin/env bash
# Fine-tuning from existing weights (load_parameters_path):
#   - pp-init and pp-train start from a trained run's parameters (a run
#     directory, one of its checkpoints, its GGUF and safetensors exports):
#     the step-0 checkpoint equals the source exactly, AdamW is fresh and
#     the step is 0;
#   - pp=2 x tp=2 under mpirun loads the same parameters: its first losses
#     equal one process's (the layouts' tolerance);
#   - a run directory with checkpoints of its own resumes from them and says
#     that load_parameters_path is not read;
#   - a model of another shape, a missing source: exit 2 naming them.
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=1
base="model=llama-tiny data=synthetic global_batch=4 microbatch=2 seq_len=16 log_period=1"
pp-train $base steps=4 lr=1e-2 run_dir=$T/src --quiet 2>$T/src.log ||
	{ fail finetune/src "$(tail -n 2 $T/src.log)"; exit 1; }
src=$T/src/checkpoints/step_00000004
pp-ckpt export $T/src --format gguf -o $T/src.gguf >/dev/null 2>$T/gguf.log &&
	pp-ckpt export $T/src --format safetensors -o $T/src.st >/dev/null 2>>$T/gguf.log ||
	fail finetune/export "$(tail -n 2 $T/gguf.log)"

# pp-init -o with load_parameters_path: step 0 holds the source's parameters
for from in run:$T/src ckpt:$src gguf:$T/src.gguf safetensors:$T/src.st; do
	name=${from%%:*} path=${from#*:}
	rm -rf $T/init
	if pp-init $base load_parameters_path=$path -o $T/init >/dev/null 2>$T/init.log; then
		check finetune/init_$name/same_parameters eval "pp-ckpt diff $src $T/init >/dev/null"
		check finetune/init_$name/step_0 eval '[ -d $T/init/checkpoints/step_00000000 ]'
	else
		fail finetune/init_$name "$(tail -n 2 $T/init.log)"
	fi
done

# pp-train: one process and pp=2 x tp=2 start from the same parameters
ft="$base steps=3 lr=1e-3 load_parameters_path=$T/src"
pp-train $ft run_dir=$T/one 2>$T/one.log >/dev/null ||
	fail finetune/train_one "$(tail -n 2 $T/one.log)"
check finetune/train_one/logs_source grep -q "parameters from $T/src (pp); AdamW and the data start afresh at step 0" $T/one.log
check finetune/train_one/starts_at_step_1 eval 'losses $T/one | head -n 1 | grep -q "^1 "'
# the first loss is the source model's on that batch: well below a fresh model's
pp-train $base steps=1 lr=1e-3 run_dir=$T/fresh --quiet 2>/dev/null
check finetune/train_one/first_loss_below_fresh eval 'awk "BEGIN { exit !($(losses $T/one | head -n 1 | cut -d" " -f2) < $(losses $T/fresh | head -n 1 | cut -d" " -f2) - 0.5) }"'
if mpirun -n 4 --allow-run-as-root --oversubscribe pp-train $ft pp=2 tp=2 run_dir=$T/four \
	--quiet >/dev/null 2>$T/four.log; then
	check finetune/train_pp2_tp2/same_losses eval 'within "$(loss_diff $T/one $T/four)" 1e-5'
else
	fail finetune/train_pp2_tp2 "$(tail -n 3 $T/four.log)"
fi

# a run with checkpoints of its own resumes from them
pp-train $ft steps=5 run_dir=$T/one 2>$T/again.log >/dev/null ||
	fail finetune/resume "$(tail -n 2 $T/again.log)"
check finetune/resume/says_so grep -q "resumed from step 3 .*load_parameters_path is not read" $T/again.log
check finetune/resume/continues eval 'losses $T/one | tail -n 1 | grep -q "^5 "'

# errors
expect_fail finetune/other_shape 2 "load_parameters_path $T/src.*model.layers.0.mlp.gate_proj.weight.*another shape" \
	pp-train $ft model.d_ff=80 run_dir=$T/bad
check finetune/other_shape/nothing_written eval '! ls $T/bad/checkpoints/step_* >/dev/null 2>&1'
expect_fail finetune/missing 2 "$T/nowhere" pp-train $base load_parameters_path=$T/nowhere run_dir=$T/bad2

# LoRA in layouts: pp=2 x tp=2 and fsdp=2 train the adapters as one process does
lora="$base steps=4 lr=1e-2 lora.rank=4 lora.alpha=8 load_parameters_path=$T/src"
pp-train $lora run_dir=$T/lora_one --quiet >/dev/null 2>$T/lora_one.log ||
	fail finetune/lora_one "$(tail -n 2 $T/lora_one.log)"
# as_one NAME ONE KEYS LAYOUT...: KEYS in each layout (on the product of
# its pp, dp, fsdp and tp ranks) give the losses of the one-process run ONE
as_one() {
	local name=$1 one=$2 keys=$3 lay n k v ln
	shift 3
	for lay in "$@"; do
		n=1
		for k in pp dp fsdp tp; do
			v=$(echo " $lay" | grep -oE " $k=[0-9]+" | cut -d= -f2)
			n=$((n * ${v:-1}))
		done
		ln=$(echo $lay | tr ' =' '_')
		if mpirun -n $n --allow-run-as-root --oversubscribe pp-train $keys $lay \
			run_dir=$T/${name}_$ln --quiet >/dev/null 2>$T/${name}_$ln.log; then
			check finetune/${name}_$ln/same_losses eval "within \"\$(loss_diff $one $T/${name}_$ln)\" 1e-5"
		else
			fail finetune/${name}_$ln "$(tail -n 3 $T/${name}_$ln.log)"
		fi
	done
}
as_one lora $T/lora_one "$lora" "pp=2 tp=2" "fsdp=2" "dp=2"

# the adapters themselves: the same at tp=1 and pp=2 x tp=2 (their initialisation
# does not depend on the layout, and they train alike; AdamW's first steps
# magnify rounding in the smallest entries of B, hence 1e-3)
check finetune/lora_pp_2_tp_2/same_adapters eval 'pp-ckpt diff $T/lora_one $T/lora_pp_2_tp_2 --tol 1e-3 >/dev/null'

# lora.dropout: the masks follow each element's place in the step (its
# sequence among the single process's, its column of the whole width), so
# every layout and microbatch size drops the same elements as one process
lora_d="$lora lora.dropout=0.2"
pp-train $lora_d run_dir=$T/drop_one --quiet >/dev/null 2>$T/drop_one.log ||
	fail finetune/dropout_one "$(tail -n 2 $T/drop_one.log)"
check finetune/dropout_one/drops eval '! within "$(loss_diff $T/lora_one $T/drop_one)" 1e-4'
as_one dropout $T/drop_one "$lora_d" "pp=2 tp=2" "fsdp=2" "dp=2 microbatch=1" "microbatch=1"

# a LoRA run (with dropout) resumes bitwise (from step 2 of the same 4-step
# run), and its checkpoints convert, verify and diff as any
pp-train $lora_d checkpoint_period=2 keep=0 run_dir=$T/lora_a --quiet >/dev/null 2>$T/lora_a.log ||
	fail finetune/lora_resume "$(tail -n 2 $T/lora_a.log)"
cp -r $T/lora_a $T/lora_b && rm -rf $T/lora_b/checkpoints/step_00000004
pp-train $lora_d checkpoint_period=2 keep=0 run_dir=$T/lora_b --quiet >/dev/null 2>$T/lora_b.log ||
	fail finetune/lora_resume "$(tail -n 2 $T/lora_b.log)"
check finetune/lora_resume/bitwise same_tensors $T/lora_a/checkpoints/step_00000004/shard-pp000-tp000.h5 \
	$T/lora_b/checkpoints/step_00000004/shard-pp000-tp000.h5
pp-ckpt convert $T/lora_one -o $T/lora_tp2 tp=2 >/dev/null 2>$T/lora_conv.log ||
	fail finetune/lora_convert "$(tail -n 2 $T/lora_conv.log)"
check finetune/lora_convert/verify eval 'pp-ckpt verify $T/lora_tp2 >/dev/null 2>&1'
check finetune/lora_convert/same_adapters eval 'pp-ckpt diff $T/lora_one $T/lora_tp2 >/dev/null'
check finetune/lora_convert/info_says_lora eval 'pp-ckpt info $T/lora_tp2 --config | grep -q "\"rank\": 4"'

# pp-eval --data on instruction data: only the tokens the loss mask counts
# are scored, as a hand computation from the model's logits gives them
PYTHONPATH="$PP_ROOT/tests/tools" /usr/bin/python3 - $T/masked.h5 $T/masked.txt <<'PY'
import sys, numpy as np
from tokens_file import write
rng = np.random.default_rng(5)
docs = [list(rng.integers(0, 64, n)) for n in (9, 14, 6, 21)]
masks = [[int(j >= n // 2) for j in range(n)] for n in map(len, docs)]
write(sys.argv[1], docs, docs, 64, masks=(masks, masks))
with open(sys.argv[2], "w") as f:
    for d, m in zip(docs, masks):
        f.write(" ".join(map(str, d)) + "|" + " ".join(map(str, m)) + "\n")
PY
pp-eval --ckpt $T/src --data $T/masked.h5 --json >$T/masked.json 2>$T/masked.log ||
	fail finetune/eval_masked "$(tail -n 2 $T/masked.log)"
i=0
while IFS='|' read -r toks mask; do
	"$PP_ROOT/build/tests/tool_logits" $src $T/masked_$((++i)).f32 $toks >/dev/null
done <$T/masked.txt
check finetune/eval_masked/hand_computed /usr/bin/python3 - $T/masked.json $T/masked.txt $T <<'PY'
import json, sys, numpy as np
got = json.load(open(sys.argv[1]))
nll = count = 0
for i, line in enumerate(open(sys.argv[2])):
    toks, mask = ([int(x) for x in part.split()] for part in line.split("|"))
    z = np.fromfile(f"{sys.argv[3]}/masked_{i + 1}.f32", "<f4").reshape(len(toks), -1).astype(np.float64)
    lp = z - z.max(1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(1, keepdims=True))
    for j in range(1, len(toks)):  # no tokenizer: the first token is the context
        if mask[j]:
            nll -= lp[j - 1, toks[j]]
            count += 1
want = nll / count
print(f"  masked --data: {got['tokens']} tokens scored (want {count}), loss {got['loss']:.8f} (by hand {want:.8f})")
sys.exit(not (got["tokens"] == count and abs(got["loss"] - want) <= 1e-5 * want))
PY

# packing: documents of many lengths, packed; pp=2 (positions to every
# stage) and dp=2 give one process's losses
PYTHONPATH="$PP_ROOT/tests/tools" /usr/bin/python3 - $T/docs.h5 <<'PY'
import sys, numpy as np
from tokens_file import write
rng = np.random.default_rng(7)
docs = [rng.integers(3, 500, rng.integers(3, 40)) for _ in range(200)]
write(sys.argv[1], docs[:180], docs[180:], 512, eos=2, source="random")
PY
pk="model=llama-tiny model.vocab_size=512 data=$T/docs.h5 packing=true seq_len=32 global_batch=4 microbatch=2 steps=4 lr=1e-2 log_period=1"
pp-train $pk run_dir=$T/pk_one --quiet >/dev/null 2>$T/pk_one.log || fail finetune/packing_one "$(tail -n 2 $T/pk_one.log)"
pp-train $pk packing=false run_dir=$T/pk_off --quiet >/dev/null 2>$T/pk_off.log
check finetune/packing/differs_from_windows eval '! within "$(loss_diff $T/pk_one $T/pk_off)" 1e-6'
for lay in "pp=2" "dp=2"; do
	ln=$(echo $lay | tr '=' '_')
	if mpirun -n 2 --allow-run-as-root --oversubscribe pp-train $pk $lay run_dir=$T/pk_$ln \
		--quiet >/dev/null 2>$T/pk_$ln.log; then
		check finetune/packing_$ln/same_losses eval 'within "$(loss_diff $T/pk_one $T/pk_$ln)" 1e-5'
	else
		fail finetune/packing_$ln "$(tail -n 3 $T/pk_$ln.log)"
	fi
done
expect_fail finetune/packing_synthetic 2 "packing" pp-train model=llama-tiny packing=true run_dir=$T/bad3

# pp-init --plan: a LoRA run's memory beside full fine-tuning's (Llama-2 7B, rank 32, every linear layer)
pp-init --plan --json model=llama2-7b lora.rank=32 seq_len=2048 microbatch=1 global_batch=8 recompute=full >$T/plan.json 2>$T/plan.log ||
	fail finetune/plan "$(tail -n 2 $T/plan.log)"
check finetune/plan/lora_beside_full /usr/bin/python3 - $T/plan.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
# PEFT's count for Llama-2 7B, r=32 on q,k,v,o,gate,up,down: 32 x (4 x (4096+4096) + 2 x (4096+11008) + (11008+4096)) x 32 layers
want = 32 * (4 * 8192 + 3 * (4096 + 11008)) * 32
print(f"  adapters {m['param_count']:,} (want {want:,}), base {m['lora_base_count']:,}, total {m['total']/2**30:.2f} GiB, full {m['full_finetune_total']/2**30:.2f} GiB")
sys.exit(not (m["param_count"] == want and m["lora_base_count"] == 6738415616 and m["full_finetune_total"] > 3 * m["total"]))
PY
