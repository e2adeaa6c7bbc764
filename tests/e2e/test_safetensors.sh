#!/usr/bin/env bash
# Hugging Face safetensors and llama2.c files (libcommon/formats/safetensors.c,
# hfconfig.c, llama2c.c) through pp-ckpt import and export, checked by readers
# that are not pp's (tests/ref/safetensors_ref.py: transformers in the venv of
# scripts/setup-reference.sh, safetensors' own loader, struct):
#   - each tiny preset (Mixtral's with its experts) exported loads in
#     transformers with no missing or unexpected keys and gives pp's logits;
#     imported back, the same parameters bit for bit
#   - F16 and BF16 exports are torch's own rounding and load; a sharded
#     export (an index and 3+ files) loads and imports back bitwise
#   - models save_pretrained wrote (F32 llama, whole and sharded, BF16
#     mistral with a sliding window, F32 mixtral, GPT-2 with and without the
#     "transformer." prefix and mask buffers) import and give transformers'
#     logits
#   - damaged files and configs pp cannot build fail with a clear message
#   - the tokenizer (SentencePiece, byte-level BPE) travels both ways
#   - a llama2.c export of llama-tiny holds pp's tensors at export.py's
#     offsets, q and k in interleaved pairs
# The transformers checks SKIP when the reference environment cannot be made.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/tools/lib.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
logits=$PP_ROOT/build/tests/tool_logits
ref=$PP_ROOT/tests/ref/safetensors_ref.py
for b in "$PP_ROOT/build/bin/pp-ckpt" "$logits" "$PP_ROOT/build/tests/tool_h5_same" "$PP_ROOT/build/bin/pp-init"; do
	[ -x "$b" ] || { fail safetensors "$b is not built (make tests)"; exit 1; }
done
TOK=(1 5 9 200 17 3 3 80 255 0 44 12 7 99 100 101) # 16 > mistral-tiny's window of 4
shard() { echo "$1/checkpoints/step_00000000/shard-pp000-tp000.h5"; }
# quiet RUN: CMD's output in $T/log, shown on failure
quiet() { "$@" >"$T/log" 2>&1 || { echo "  $* failed: $(tail -n 3 "$T/log")" >&2; return 1; }; }

if py=$(scripts/setup-reference.sh 2>"$T/setup.log"); then
	have_ref=true
else
	have_ref=false
	py=/usr/bin/python3 # the llama2.c reader and the damaged files need no transformers
	skip safetensors/hf "reference environment unavailable: $(grep -v '^ ' "$T/setup.log" | tail -n 1)"
fi

# ---- pp -> safetensors -> pp, for every family ---------------------------------
jobs=()
for f in llama mistral gemma gpt mixtral; do
	if ! quiet pp-init model=$f-tiny -o "$T/$f" || ! quiet pp-ckpt export "$T/$f" --format safetensors -o "$T/st-$f" ||
		! quiet "$logits" "$T/$f/checkpoints/step_00000000" "$T/$f.f32" "${TOK[@]}"; then
		fail "safetensors/$f/export" "$(tail -n 2 "$T/log")"
		continue
	fi
	pass "safetensors/$f/export"
	jobs+=(+ load "safetensors/$f/hf" "$T/st-$f" "$T/$f.f32" 1e-4)
	check "safetensors/$f/reimport-bitwise" eval \
		'quiet pp-ckpt import --format safetensors "$T/st-$f" -o "$T/back-$f" && same_tensors "$(shard "$T/$f")" "$(shard "$T/back-$f")" /params'
done
check safetensors/no-temporary-left eval '[ -z "$(ls -d "$T"/*.tmp-* 2>/dev/null)" ]'

# F16 and BF16: torch's rounding, bit for bit; transformers' logits equal
# pp's on the rounded weights (imported back)
for spec in "llama F16" "gemma BF16" "gpt F16"; do
	read -r f dt <<<"$spec"
	d=$T/st-$f-$dt
	if quiet pp-ckpt export "$T/$f" --format safetensors -o "$d" --dtype "$dt" && quiet pp-ckpt import --format safetensors "$d" -o "$T/r-$f-$dt" &&
		quiet "$logits" "$T/r-$f-$dt/checkpoints/step_00000000" "$T/$f-$dt.f32" "${TOK[@]}"; then
		pass "safetensors/$f/$dt-export"
		jobs+=(+ rounded "safetensors/$f/$dt" "$d" "$(shard "$T/$f")" "$dt"
			+ load "safetensors/$f/$dt-hf" "$d" "$T/$f-$dt.f32" 1e-4)
	else
		fail "safetensors/$f/$dt-export" "$(tail -n 2 "$T/log")"
	fi
done

# sharded: 3+ files of at most 0.1 MiB (llama-tiny is 0.36 MiB) and the index
d=$T/st-sharded
if quiet pp-ckpt export "$T/mistral" --format safetensors -o "$d" --shard-mb 0.1; then
	n=$(find "$d" -name 'model-0*-of-0*.safetensors' | wc -l)
	check "safetensors/sharded/files ($n)" eval '[ "$n" -ge 3 ] && [ -f "$d/model.safetensors.index.json" ] && [ ! -e "$d/model.safetensors" ]'
	check safetensors/sharded/reimport-bitwise eval \
		'quiet pp-ckpt import --format safetensors "$d" -o "$T/back-sharded" && same_tensors "$(shard "$T/mistral")" "$(shard "$T/back-sharded")" /params'
	jobs+=(+ load safetensors/sharded/hf "$d" "$T/mistral.f32" 1e-4)
else
	fail safetensors/sharded "$(tail -n 2 "$T/log")"
fi

# ---- models transformers wrote --------------------------------------------------
hf_cases="llama float32
llama-sharded float32
mistral bfloat16
mixtral float32
gpt2 float32
gpt2-bare float32"
if $have_ref; then
	while read -r kind dt; do jobs+=(+ mkhf "$kind" "$dt" "$T/hf-$kind"); done <<<"$hf_cases"
	"$py" "$ref" "${jobs[@]:1}" || true
	cmps=()
	while read -r kind dt; do
		if quiet pp-ckpt import --format safetensors "$T/hf-$kind" -o "$T/imp-$kind" &&
			quiet "$logits" "$T/imp-$kind/checkpoints/step_00000000" "$T/imp-$kind.f32" "${TOK[@]}"; then
			cmps+=(+ cmp "safetensors/hf-written/$kind-$dt/logits" "$T/imp-$kind.f32" "$T/hf-$kind.f32" 1e-4)
		else
			fail "safetensors/hf-written/$kind-$dt/import" "$(tail -n 2 "$T/log")"
		fi
	done <<<"$hf_cases"
	[ ${#cmps[@]} -eq 0 ] || "$py" "$ref" "${cmps[@]:1}" || true
	# a tied GPT-2 file may keep lm_head.weight: equal to wte it is dropped, else refused
	g=$T/hf-gpt2-head
	if "$py" - "$T/hf-gpt2" "$g" <<'EOF'; then
import shutil, sys
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
for name, shift in (("same", 0.0), ("differs", 1.0)):
    shutil.copytree(src, f"{dst}-{name}")
    sd = load_file(f"{src}/model.safetensors")
    sd["lm_head.weight"] = sd["transformer.wte.weight"] + shift
    save_file(sd, f"{dst}-{name}/model.safetensors", metadata={"format": "pt"})
EOF
		check safetensors/tied-head-equal-dropped quiet pp-ckpt import --format safetensors "$g-same" -o "$T/imp-head"
		expect_fail safetensors/tied-head-differs 2 'lm_head.weight differs from transformer.wte.weight' \
			pp-ckpt import --format safetensors "$g-differs" -o "$T/imp-head2"
	else
		fail safetensors/tied-head "cannot write the files"
	fi
fi

# ---- damaged files, and configs pp cannot build -------------------------------------
if "$py" "$ref" corrupt "$T/st-llama" "$T/bad"; then
	x() { expect_fail "safetensors/bad/$1" "$2" "$3" pp-ckpt import --format safetensors "$T/bad-$1" -o "$T/out-$1"; }
	x truncated 1 'outside the data section of [0-9]+ bytes \(a truncated file\?\)'
	x header-past-end 1 'header length [0-9]+ runs past the end of the file \([0-9]+ bytes\)'
	x overlap 1 'model.embed_tokens.weight .* and model.layers.0.input_layernorm.weight .* overlap'
	x dtype-size 1 'model.norm.weight: data_offsets .* hold 256 bytes, but 64 elements of F16 take 128'
	x missing 2 'tensor model.layers.1.mlp.up_proj.weight \[96, 64\] of the llama model is missing'
	x extra 2 'tensor model.layers.0.mlp.extra_proj.weight is not one of the llama model'
	x shape 2 'tensor model.layers.0.self_attn.o_proj.weight has shape \[64, 32, 2\], the model.s is \[64, 64\]'
	x rope-scaling 2 "config.json: key 'rope_scaling' is .*linear.*: pp has no RoPE scaling"
	check safetensors/bad/nothing-written eval '[ -z "$(ls -d "$T"/out-* 2>/dev/null)" ]'
else
	fail safetensors/bad "cannot write the damaged files"
fi
cp -r "$T/st-llama" "$T/qmoe" && sed -i 's/"model_type": "llama"/"model_type": "qwen2_moe"/' "$T/qmoe/config.json"
expect_fail safetensors/bad/model-type 2 "key 'model_type' is \"qwen2_moe\": pp imports llama, mistral, mixtral, gemma and gpt2" \
	pp-ckpt import --format safetensors "$T/qmoe" -o "$T/out-qmoe"
cp -r "$T/st-llama" "$T/moe" && sed -i 's/"model_type": "llama"/"model_type": "llama", "num_experts": 8/' "$T/moe/config.json"
expect_fail safetensors/bad/experts-not-mixtral 2 "key 'num_experts'.*pp imports the experts of Mixtral only" \
	pp-ckpt import --format safetensors "$T/moe" -o "$T/out-moe"
cp -r "$T/st-llama" "$T/abias" && sed -i 's/"attention_bias": false/"attention_bias": true/' "$T/abias/config.json"
expect_fail safetensors/bad/attention-bias 2 "key 'attention_bias' is true: pp's bias puts biases on attention and MLP alike" \
	pp-ckpt import --format safetensors "$T/abias" -o "$T/out-abias"
expect_fail safetensors/export-into-nonempty 2 'exists and is not empty' pp-ckpt export "$T/llama" --format safetensors -o "$T/st-gpt"
# a source that fails after the sink has written most tensors (the final
# norm comes late): the sink's abort leaves nothing behind (the checkpoint
# is named itself: a run directory's damaged newest would be refused whole)
cp -r "$T/llama" "$T/broken"
if "$py" -c 'import h5py, hashlib, json, os, sys
f = h5py.File(sys.argv[1], "r+"); del f["params/model.norm.weight"]; f.close()
m = os.path.join(os.path.dirname(sys.argv[1]), "manifest.json"); j = json.load(open(m))
for x in j["files"]:  # the file stays sound as a file: the damage shows mid-copy
    x["sha256"] = hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest(); x["bytes"] = os.path.getsize(sys.argv[1])
json.dump(j, open(m, "w"))' "$(shard "$T/broken")" 2>/dev/null; then
	for fmt in safetensors llama2c; do
		expect_fail "safetensors/abort/$fmt-fails" 1 '/params/model.norm.weight is missing' \
			pp-ckpt export "$(dirname "$(shard "$T/broken")")" --format $fmt -o "$T/out-broken-$fmt"
		check "safetensors/abort/$fmt-removes-everything" eval '[ -z "$(ls -d "$T"/out-broken-$fmt* 2>/dev/null)" ]'
	done
else
	skip safetensors/abort "no h5py to damage a checkpoint with"
fi

# ---- the tokenizer travels with the model -------------------------------------------
# SentencePiece (Llama 2's, a model of its 32000 tokens): tokenizer.model as
# is, a tokenizer_config.json, BOS and EOS in config.json; imported back,
# the run keeps it in RUN/tokenizer/, where its config names it
spm=$(spm_tokenizer 2>$T/tok.err)
if [ ! -f "$spm" ]; then
	skip safetensors/tokenizer/sentencepiece "no SentencePiece tokenizer: $(cat $T/tok.err)"
elif quiet pp-init model=llama-tiny model.vocab_size=32000 model.tied_embeddings=true tokenizer="$spm" -o "$T/spm" &&
	quiet pp-ckpt export "$T/spm" --format safetensors -o "$T/st-spm" && quiet pp-ckpt import --format safetensors "$T/st-spm" -o "$T/back-spm"; then
	check safetensors/tokenizer/sentencepiece-copied cmp -s "$spm" "$T/st-spm/tokenizer.model"
	check safetensors/tokenizer/sentencepiece-ids "$py" -c '
import json, sys
c, t = json.load(open(sys.argv[1] + "/config.json")), json.load(open(sys.argv[1] + "/tokenizer_config.json"))
g = json.load(open(sys.argv[1] + "/generation_config.json"))
sys.exit(not (c["bos_token_id"] == g["bos_token_id"] == 1 and c["eos_token_id"] == g["eos_token_id"] == 2
              and t["tokenizer_class"] == "LlamaTokenizer" and (t["bos_token"], t["eos_token"]) == ("<s>", "</s>")))' "$T/st-spm"
	check safetensors/tokenizer/sentencepiece-reimported eval \
		'cmp -s "$spm" "$T/back-spm/tokenizer/tokenizer.model" &&
		h5dump -d /config "$(shard "$T/back-spm")" 2>/dev/null | grep -q "\"tokenizer\": *\"$T/back-spm/tokenizer/tokenizer.model\""'
else
	fail safetensors/tokenizer/sentencepiece "$(tail -n 2 "$T/log")"
fi
# byte-level BPE: a tokenizer.json transformers loads and encodes as pp does
mkdir -p "$T/bpe"
python3 tests/tools/tiny_bpe.py tokenizer.json "$T/bpe/tokenizer.json"
text="in the then thin"
if quiet pp-init model=gpt-tiny model.vocab_size=262 tokenizer="$T/bpe/tokenizer.json" -o "$T/bpe/run" &&
	quiet pp-ckpt export "$T/bpe/run" --format safetensors -o "$T/st-bpe" && quiet pp-ckpt import --format safetensors "$T/st-bpe" -o "$T/back-bpe" &&
	ids=$(echo "$text" | "$PP_ROOT/build/tests/tool_tokenize" "$T/st-bpe/tokenizer.json"); then
	check safetensors/tokenizer/bpe-copied cmp -s "$T/bpe/tokenizer.json" "$T/st-bpe/tokenizer.json"
	check safetensors/tokenizer/bpe-eos eval 'grep -q "\"eos_token_id\": 261" "$T/st-bpe/config.json"'
	$have_ref && { "$py" "$ref" tok safetensors/tokenizer/bpe-hf "$T/st-bpe" "$text" $ids || true; }
else
	fail safetensors/tokenizer/bpe "$(tail -n 2 "$T/log")"
fi

# ---- llama2.c ---------------------------------------------------------------------
# the bytes of version 0 (run.c's, the default) and 1 against the
# checkpoint; runs of the files are tests/e2e/test_kjv.sh's
if ! "$py" -c 'import numpy, h5py' 2>/dev/null; then
	skip safetensors/llama2c "$py cannot import numpy and h5py to read the files with"
else
	for v in 0 1; do
		if quiet pp-ckpt export "$T/llama" --format llama2c --llama2c-version $v -o "$T/llama-v$v.bin"; then
			"$py" "$ref" llama2c safetensors/llama2c/v$v "$T/llama-v$v.bin" "$(shard "$T/llama")" \
				"$PP_CONFIG_DIR/models/llama-tiny.json" || true
		else
			fail safetensors/llama2c/v$v-export "$(tail -n 2 "$T/log")"
		fi
	done
	quiet pp-ckpt export "$T/llama" --format llama2c -o "$T/llama-default.bin" || true
	check safetensors/llama2c/default-v0 cmp -s "$T/llama-v0.bin" "$T/llama-default.bin"
fi
# a SentencePiece tokenizer goes along as tokenizer.bin (Llama 2's, with a tied
# model: a positive vocab_size in version 0's header); a byte-level BPE
# cannot (llama2.c's tokenizer is SentencePiece's), said so
if [ -f "$spm" ] && [ -d "$T/spm" ] && quiet pp-ckpt export "$T/spm" --format llama2c -o "$T/l2c-spm/model.bin"; then
	check safetensors/llama2c/tied-header eval '[ "$(od -An -t d4 -j 20 -N 4 "$T/l2c-spm/model.bin" | tr -d " ")" = 32000 ]'
	spm_export_vocab --model="$spm" >"$T/spm-vocab.tsv" 2>/dev/null
	/usr/bin/python3 tests/ref/llama2c_run.py vocab "$T/l2c-spm/tokenizer.bin" "$T/spm-vocab.tsv" \
		safetensors/llama2c/llama2-tokenizer.bin || true
else
	skip safetensors/llama2c/tokenizer "no SentencePiece run to export (see safetensors/tokenizer/sentencepiece)"
fi
if quiet pp-init model=llama-tiny model.vocab_size=262 tokenizer="$T/bpe/tokenizer.json" -o "$T/l2c-bpe" &&
	pp-ckpt export "$T/l2c-bpe" --format llama2c -o "$T/l2c-bpe/out/model.bin" >"$T/log" 2>&1; then
	check safetensors/llama2c/bpe-said eval 'grep -q "not SentencePiece.s: the llama2.c model is written without tokenizer.bin" "$T/log" &&
		[ -s "$T/l2c-bpe/out/model.bin" ] && [ ! -e "$T/l2c-bpe/out/tokenizer.bin" ]'
else
	fail safetensors/llama2c/bpe "$(tail -n 2 "$T/log")"
fi
expect_fail safetensors/llama2c/v2-groups 2 'model.d_ff 96: not whole groups of 64, as runq.c quantizes' \
	pp-ckpt export "$T/llama" --format llama2c --llama2c-version 2 -o "$T/llama-v2.bin"
expect_fail safetensors/llama2c/version-range 2 "--llama2c-version" \
	pp-ckpt export "$T/llama" --format llama2c --llama2c-version 3 -o "$T/llama-v3.bin"
expect_fail safetensors/llama2c/version-needs-llama2c 2 '--llama2c-version goes with --format llama2c' \
	pp-ckpt export "$T/llama" --format gguf --llama2c-version 1 -o "$T/llama-v1.gguf"
# relative position biases (GLaM's) have no place in any of the three formats
quiet pp-init model=llama-tiny model.pos=relative -o "$T/rel" || true
expect_fail safetensors/relative-refused/safetensors 2 'model.pos is not rope' \
	pp-ckpt export "$T/rel" --format safetensors -o "$T/rel-st"
expect_fail safetensors/relative-refused/gguf 2 'positions other than RoPE' \
	pp-ckpt export "$T/rel" --format gguf -o "$T/rel.gguf"
expect_fail safetensors/relative-refused/llama2c 2 'model.pos relative: llama2.c rotates q and k with RoPE' \
	pp-ckpt export "$T/rel" --format llama2c -o "$T/rel.bin"
expect_fail safetensors/llama2c/gemma-refused 2 'model.family gemma: llama2.c runs llama models only' \
	pp-ckpt export "$T/gemma" --format llama2c -o "$T/gemma.bin"
expect_fail safetensors/llama2c/window-refused 2 'model.sliding_window 4: llama2.c attends to every position' \
	pp-ckpt export "$T/mistral" --format llama2c -o "$T/mistral.bin"
check safetensors/llama2c/nothing-left eval '[ ! -e "$T/gemma.bin" ] && [ -z "$(ls -d "$T"/*.bin.tmp-* 2>/dev/null)" ]'
