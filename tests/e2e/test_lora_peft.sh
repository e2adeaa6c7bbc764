#!/usr/bin/env bash
# LoRA against PEFT (tests/ref/peft_ref.py, in the reference venv of
# scripts/setup-reference.sh: transformers 4.46.3, peft 0.13.2, torch 1.13):
# a tiny Llama exported to safetensors, adapters of rank 4 on every linear
# layer.
#   - pp's step-0 adapters, exported with --format peft, load in PEFT onto
#     the base's safetensors export and give pp's logits (<= 1e-5 relative),
#     which are the base's (B starts at zero);
#   - the same batches, AdamW settings and 10 steps in PyTorch + PEFT and in
#     pp give the same losses and adapters (<= 1e-5 relative), and PEFT with
#     pp's final adapters gives pp's logits;
#   - --merge-lora's export equals W + scale * B A of the checkpoint's
#     tensors (float64, rounded once: within an ulp) and PEFT's
#     merge_and_unload; only the adapters changed in training; pp-decode
#     runs the LoRA checkpoint and its merged export to the same tokens;
#   - pp-ckpt import --format peft: PEFT's own save_pretrained of the
#     adapters it trained gives PEFT's logits in pp; pp's export imported
#     back holds the same adapters; PEFT settings pp cannot take are refused.
. "$(dirname "$0")/../tools/lib.sh"
export OMP_NUM_THREADS=1
if ! PY=$(cd "$PP_ROOT" && scripts/setup-reference.sh 2>$T/setup.log); then
	skip lora_peft "reference venv unavailable: $(tail -n 1 $T/setup.log)"
	exit 0
fi
L=16
# every window of L+1 tokens the same: a document of period L
PYTHONPATH="$PP_ROOT/tests/tools" /usr/bin/python3 - $T/data.h5 $L <<'PY'
import sys, numpy as np
from tokens_file import write
path, L = sys.argv[1], int(sys.argv[2])
pattern = np.random.default_rng(5).integers(3, 250, L)
write(path, [np.resize(pattern, 8 * L + 1)], [], 256, source="pattern")
PY
model="model=llama-tiny model.vocab_size=256 seed=3"
pp-init $model -o $T/base >/dev/null 2>$T/init.log &&
	pp-ckpt export $T/base --format safetensors -o $T/base.hf >/dev/null 2>>$T/init.log ||
	{ fail lora_peft/base "$(tail -n 2 $T/init.log)"; exit 1; }
lora="lora.rank=4 lora.alpha=8 lora.targets=all"
run="$model $lora data=$T/data.h5 seq_len=$L global_batch=2 microbatch=2 steps=10 lr=1e-2
	lr_schedule.type=constant lr_schedule.warmup_steps=0 clip_norm=0 adamw.weight_decay=0.05
	checkpoint_period=10 log_period=1 load_parameters_path=$T/base"
pp-train $run steps=1 checkpoint_period=0 save_on_completion=false run_dir=$T/none --quiet 2>/dev/null
pp-init $run -o $T/lora0 >/dev/null 2>$T/lora0.log &&
	pp-train $run run_dir=$T/lora --quiet >/dev/null 2>$T/train.log ||
	{ fail lora_peft/train "$(tail -n 2 $T/lora0.log $T/train.log)"; exit 1; }
end=$T/lora/checkpoints/step_00000010
pp-ckpt export $T/lora0 --format peft -o $T/peft0 >/dev/null 2>$T/export.log &&
	pp-ckpt export $end --format peft -o $T/peft10 >/dev/null 2>>$T/export.log &&
	pp-ckpt export $end --format safetensors --merge-lora -o $T/merged >/dev/null 2>>$T/export.log ||
	{ fail lora_peft/export "$(tail -n 2 $T/export.log)"; exit 1; }
toks=$(/usr/bin/python3 -c "import h5py,sys; print(*h5py.File(sys.argv[1])['train/tokens'][:$L])" $T/data.h5)
"$PP_ROOT/build/tests/tool_logits" $T/lora0/checkpoints/step_00000000 $T/l0.f32 $toks >/dev/null &&
	"$PP_ROOT/build/tests/tool_logits" $end $T/l10.f32 $toks >/dev/null ||
	{ fail lora_peft/logits "tool_logits failed"; exit 1; }
HF_HUB_OFFLINE=1 "$PY" "$PP_ROOT/tests/ref/peft_ref.py" $T/base.hf $T/peft0 $T/data.h5 $L 10 1e-2 0.05 \
	$T/l0.f32 $T/peft10 $T/l10.f32 $T/ref.json >$T/ref.log 2>&1 ||
	{ fail lora_peft/reference "$(tail -n 3 $T/ref.log)"; exit 1; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" $T/ref.json "$1"; }
check lora_peft/step0_logits_equal_peft within "$(field logits0)" 1e-5
check lora_peft/step0_is_the_base eval '[ "$(field logits0_is_base)" = True ]'
check lora_peft/same_adapter_set eval '[ "$(field n_adapters)" = "$(field n_pp_adapters)" ] && [ "$(field n_adapters)" = 28 ]'
check lora_peft/adapters_after_10_steps within "$(field adapters)" 1e-5
check lora_peft/logits_after_10_steps within "$(field logits_end)" 1e-5
# the losses: pp's metrics.jsonl against PyTorch's, step by step
check lora_peft/same_losses /usr/bin/python3 - $T/ref.json $T/lora/metrics.jsonl <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["losses"]
pp = [json.loads(l) for l in open(sys.argv[2])]
pp = [r["loss"] for r in pp if "loss" in r and "step" in r]
assert len(pp) == len(ref) == 10, (len(pp), len(ref))
worst = max(abs(a - b) / abs(b) for a, b in zip(pp, ref))
print(f"  losses {pp[0]:.6f} .. {pp[-1]:.6f}, worst relative difference {worst:.2e}")
sys.exit(worst > 1e-5 or not pp[-1] < pp[0])
PY
# merged: W + scale B A in float64, rounded once; and PEFT's merge
check lora_peft/merge_exact /usr/bin/python3 - $end $T/merged $T/ref.json.merged_q.npy $T/base/checkpoints/step_00000000 <<'PY'
import sys, h5py, glob, json, numpy as np
from pathlib import Path
ck, merged, peft_q, base = sys.argv[1:5]
def read(name):
    for f in sorted(glob.glob(ck + "/shard-*.h5")) + sorted(glob.glob(base + "/shard-*.h5")):
        with h5py.File(f) as h:
            if name in h["params"]:
                return np.asarray(h["params"][name])
    raise KeyError(name)
import struct
raw = Path(merged + "/model.safetensors").read_bytes()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def st(name):
    m = head[name]; a, b = m["data_offsets"]
    return np.frombuffer(raw[8 + n + a: 8 + n + b], "<f4").reshape(m["shape"])
worst_ulp, scale = 0, 8 / 4
for l in range(2):
    for mod in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        p = f"model.layers.{l}.{mod}"
        W, A, B = read(p + ".weight"), read(p + ".lora_A.weight"), read(p + ".lora_B.weight")
        want = (W.astype(np.float64) + scale * (B.astype(np.float64) @ A.astype(np.float64))).astype(np.float32)
        got = st(p + ".weight")
        ulp = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64)).max()
        worst_ulp = max(worst_ulp, int(ulp))
q = st("model.layers.0.self_attn.q_proj.weight")
peft = np.load(peft_q)
d = np.abs(q - peft).max() / np.abs(peft).max()
print(f"  merged: worst {worst_ulp} ulp from float64; PEFT's merge_and_unload within {d:.2e}")
sys.exit(int(worst_ulp > 1 or d > 1e-6))
PY
# the checkpoint holds the adapters (and their AdamW state) alone, with its base's fingerprint
check lora_peft/checkpoint_holds_adapters_only /usr/bin/python3 - $end <<'PY'
import sys, json, glob, h5py
names = set()
for f in glob.glob(sys.argv[1] + "/shard-*.h5"):
    with h5py.File(f) as h:
        names |= set(h["params"].keys())
        assert set(h["adam_m"].keys()) == set(h["params"].keys())
sys.exit(not (len(names) == 28 and all(".lora_" in n for n in names)))
PY
check lora_peft/records_base_sha256 eval "pp-ckpt info $end --config | grep -q '\"base_sha256\": \"$(sha256sum $T/base/checkpoints/step_00000000/manifest.json | cut -c1-64)\"'"
check lora_peft/adapters_moved eval "pp-ckpt diff $T/lora0 $end 2>/dev/null | awk '/^model.*lora_B.weight / && \$2 != 0 { n++ } END { exit !(n == 14) }'"
# pp-decode runs the LoRA checkpoint, and its merged export, to the same tokens
pp-decode --ckpt $end --prompt "$(echo $toks | cut -d' ' -f1-4)" -n 8 --temperature 0 >$T/dec_lora.txt 2>$T/dec.log &&
	pp-ckpt import --format safetensors $T/merged -o $T/merged.run >/dev/null 2>>$T/dec.log &&
	pp-decode --ckpt $T/merged.run --prompt "$(echo $toks | cut -d' ' -f1-4)" -n 8 --temperature 0 >$T/dec_merged.txt 2>>$T/dec.log ||
	fail lora_peft/decode "$(tail -n 2 $T/dec.log)"
check lora_peft/decode_lora_equals_merged eval '[ -s $T/dec_lora.txt ] && cmp -s $T/dec_lora.txt $T/dec_merged.txt'
# errors
expect_fail lora_peft/export_plain_refused 2 "holds LoRA adapters: --merge-lora" pp-ckpt export $end --format gguf -o $T/x.gguf
expect_fail lora_peft/peft_without_adapters 2 "holds no LoRA adapters" pp-ckpt export $T/base --format peft -o $T/x
expect_fail lora_peft/unknown_target 2 "lora.targets: 'qq_proj' matches no projection" pp-train $model lora.rank=2 lora.targets=qq_proj
expect_fail lora_peft/rank_negative 2 "lora.rank" pp-train $model lora.rank=-1
# a base that changed under the run is refused by every reader of it
mv $T/base $T/base.orig && pp-init $model seed=4 -o $T/base >/dev/null 2>&1
expect_fail lora_peft/base_changed_decode 2 "LoRA base $T/base has changed" pp-decode --ckpt $end --prompt "5 6" -n 2
expect_fail lora_peft/base_changed_resume 2 "LoRA base $T/base has changed" pp-train $run steps=12 run_dir=$T/lora
expect_fail lora_peft/base_changed_merge 2 "LoRA base $T/base has changed" pp-ckpt export $end --format gguf --merge-lora -o $T/x.gguf
rm -rf $T/base && mv $T/base.orig $T/base
# import: PEFT's own files, on the base's safetensors export; and pp's export back
pp-ckpt import --format peft $T/ref.json.peft --base $T/base.hf -o $T/imported >/dev/null 2>$T/imp.log &&
	"$PP_ROOT/build/tests/tool_logits" $T/imported/checkpoints/step_00000000 $T/imp.f32 $toks >/dev/null 2>>$T/imp.log ||
	fail lora_peft/import "$(tail -n 2 $T/imp.log)"
check lora_peft/import_peft_saved_gives_peft_logits /usr/bin/python3 -c "
import numpy as np, sys
a, b = np.fromfile(sys.argv[1], '<f4'), np.fromfile(sys.argv[2], '<f4')
d = np.abs(a - b).max() / np.abs(b).max(); print(f'  imported PEFT adapters: logits within {d:.2e} of pp\'s trained run')
sys.exit(not (a.size == b.size and d <= 1e-5))" $T/imp.f32 $T/l10.f32
pp-ckpt import --format peft $T/peft10 --base $T/base -o $T/back >/dev/null 2>>$T/imp.log ||
	fail lora_peft/import_back "$(tail -n 2 $T/imp.log)"
check lora_peft/export_import_same_adapters eval "pp-ckpt diff $end $T/back >/dev/null"
# lora_dropout travels both ways: PEFT's setting becomes lora.dropout, and
# pp's export writes it
cp -r $T/peft10 $T/drop && sed -i 's/"lora_dropout": 0[.0-9]*/"lora_dropout": 0.1/' $T/drop/adapter_config.json
pp-ckpt import --format peft $T/drop --base $T/base -o $T/drop_run >/dev/null 2>>$T/imp.log &&
	pp-ckpt export $T/drop_run --format peft -o $T/drop_back >/dev/null 2>>$T/imp.log ||
	fail lora_peft/import_dropout "$(tail -n 2 $T/imp.log)"
check lora_peft/import_dropout/config eval 'pp-ckpt info $T/drop_run --config | grep -q "\"dropout\": 0.1"'
check lora_peft/import_dropout/exported eval 'grep -q "\"lora_dropout\": 0.1" $T/drop_back/adapter_config.json'
sed -i 's/"lora_dropout": 0.1/"lora_dropout": 1.5/' $T/drop/adapter_config.json
expect_fail lora_peft/import_dropout_range 2 "adapter_config.json: lora_dropout must be a number in \[0, 1)" \
	pp-ckpt import --format peft $T/drop --base $T/base -o $T/x3
expect_fail lora_peft/import_needs_base 2 "needs --base" pp-ckpt import --format peft $T/peft10 -o $T/nobase
cp -r $T/peft10 $T/dora && sed -i 's/"use_dora": false/"use_dora": true/' $T/dora/adapter_config.json
expect_fail lora_peft/import_dora_refused 2 "adapter_config.json: use_dora is true" pp-ckpt import --format peft $T/dora --base $T/base -o $T/x2
