#!/usr/bin/env bash
# GGUF import and export (libcommon/formats/gguf*.c) through pp-ckpt, against
# llama.cpp's own Python package (gguf) and Hugging Face transformers
# (tests/ref/gguf_reference.py, in the venv of scripts/setup-reference.sh):
#   - SmolLM2-135M-Instruct as llama.cpp quantized it (Q4_1, Q8_0 embedding;
#     scripts/fetch-smollm2.sh): imported, its tokenizer (ids as transformers'
#     tokenizer gives them, text round trips), its logits against
#     transformers' LlamaForCausalLM, pp-decode's greedy text, and a
#     fine-tune resuming from the import
#   - a tiny llama exported as F32, F16, BF16 and Q8_0: read back by
#     GGUFReader (tensors, metadata), and by pp (F32: bit for bit); a tiny
#     Mixtral likewise (its experts stacked per layer, as llama.cpp stores
#     them), and decoded from the file as from its checkpoint
#   - tokenizers exported and imported: SmolLM2's byte-level BPE (the arrays
#     equal the original file's) and Llama 2's SentencePiece (same ids)
#   - Q8_0, Q4_0, Q4_1, F16 and BF16 tensors quantized by gguf.quants
#   - gemma and gpt2 files written with llama.cpp's conventions: the same
#     parameters and logits as the pp models they came from
#   - damaged and unsupported files: a clear error and a non-zero exit
# SKIP (with the reason) only where the reference venv or PyPI is out of reach.
. "$(dirname "$0")/../tools/lib.sh"
root=$PP_ROOT
tok=$root/build/tests/tool_tokenize
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for b in "$root/build/bin/pp-ckpt" "$tok" "$root/build/tests/tool_logits" "$root/build/tests/tool_h5_same"; do
	[ -x "$b" ] || { fail gguf "$b is not built (make tests)"; exit 1; }
done
if ! py=$(cd "$root" && scripts/setup-reference.sh 2>$T/setup.log); then
	skip gguf "reference environment unavailable: $(grep -v '^ ' $T/setup.log | tail -n 1)"
	exit 0
fi
ref() { "$py" "$root/tests/ref/gguf_reference.py" "$@"; }
# --- SmolLM2-135M-Instruct, as llama.cpp quantized it ------------------------------
if ! G=$(cd "$root" && PP_PYTHON=$py scripts/fetch-smollm2.sh 2>$T/fetch.log); then
	skip gguf/smollm2 "model unavailable: $(tail -n 1 $T/fetch.log)"
else
	S=$T/smol
	if ! pp-ckpt import --format gguf "$G" -o $S >$T/import.log 2>&1; then
		fail gguf/smollm2/import "$(tail -n 2 $T/import.log)"
	else
		pass "gguf/smollm2/import ($(grep -o "[0-9]* tensors.*MB/s)" $T/import.log | tail -n 1))"
		tj=$S/tokenizer/tokenizer.json
		# tokenizer: transformers' ids (its tokenizer built from the same
		# metadata), and text that comes back as it went in
		text="The capital of France is Paris. In 1889 the Eiffel Tower opened; it's 330 m tall!"
		ids=$(printf '%s\n' "$text" | "$tok" $tj 2>$T/tok.log)
		hf=$(ref tokens "$G" "$text" 2>$T/hftok.log | tail -n 1)
		if [ -n "$ids" ] && [ "$ids" = "$hf" ]; then
			pass "gguf/smollm2/tokenizer/ids_as_transformers ($(wc -w <<<"$ids") ids)"
		else
			fail gguf/smollm2/tokenizer/ids_as_transformers "pp: $ids; transformers: $hf $(tail -n 1 $T/hftok.log)"
		fi
		cat >$T/en.txt <<'EOF'
The quick brown fox jumps over the lazy dog.
It was the best of times, it was the worst of times.
Call me Ishmael.  Some years ago - never mind how long precisely - I went to sea.
"Hello, world!" she said, and paid $3.50 for 2 coffees at 10:45am.
EOF
		"$tok" $tj <$T/en.txt >$T/en.ids 2>>$T/tok.log &&
			"$tok" $tj --decode <$T/en.ids >$T/en.back 2>>$T/tok.log
		check gguf/smollm2/tokenizer/round_trip cmp -s $T/en.txt $T/en.back
		# exported to safetensors, its tokenizer.json reads in tokenizers 0.20
		# (the reference environment's, which refuses added tokens without
		# every field) and in a current release, and encodes as pp does
		pp-ckpt export $S --format safetensors -o $T/smol-hf >/dev/null 2>$T/smol-hf.log
		hf_ids() {
			"$1" -c 'import sys, tokenizers
t = tokenizers.Tokenizer.from_file(sys.argv[1])
for line in open(sys.argv[2], encoding="utf-8"):
    print(" ".join(str(i) for i in t.encode(line.rstrip("\n"), add_special_tokens=False).ids))' \
				$T/smol-hf/tokenizer.json $T/en.txt
		}
		check gguf/smollm2/export_tokenizer/tokenizers_0.20 eval 'hf_ids "$py" >$T/hf20.ids 2>$T/hf20.err &&
			cmp -s $T/en.ids $T/hf20.ids || { tail -n 2 $T/hf20.err; false; }'
		if tbpy=$(cd "$root" && scripts/setup-tensorboard.sh 2>$T/tb.log); then
			check gguf/smollm2/export_tokenizer/tokenizers_current eval 'hf_ids "$tbpy" >$T/hfnow.ids 2>$T/hfnow.err &&
				cmp -s $T/en.ids $T/hfnow.ids || { tail -n 2 $T/hfnow.err; false; }'
		else
			skip gguf/smollm2/export_tokenizer/tokenizers_current "no current tokenizers: $(tail -n 1 $T/tb.log)"
		fi

		# llama2.c's run.c and runq.c rotate with RoPE base 10000: SmolLM2's
		# 100000 cannot go there (the file would run, and compute another model)
		expect_fail gguf/smollm2/llama2c_refused 2 "model.rope_theta 100000: llama2.c's RoPE base is 10000" \
			pp-ckpt export $S --format llama2c -o $T/smol.bin

		# logits against transformers, and its greedy continuation
		prompt="The capital of France is"
		pids=$(printf '%s\n' "$prompt" | "$tok" $tj)
		# shellcheck disable=SC2086 # ids are words
		"$root/build/tests/tool_logits" $S/checkpoints/step_00000000 $T/smol.f32 $pids >/dev/null 2>$T/logits.log ||
			fail gguf/smollm2/logits "tool_logits: $(tail -n 1 $T/logits.log)"
		# shellcheck disable=SC2086
		ref --tag gguf/smollm2 logits "$G" $T/smol.f32 --ids $pids --greedy 32 >$T/ref.out 2>$T/ref.log
		grep -E '^(PASS|FAIL): ' $T/ref.out || fail gguf/smollm2/logits "reference: $(tail -n 2 $T/ref.log)"
		greedy=$(sed -n 's/^greedy: //p' $T/ref.out)

		# pp-decode from the imported run alone: the checkpoint holds the
		# model's config and the tokenizer
		if pp-decode --ckpt $S --prompt "$prompt" -n 32 --temperature 0 --ignore-eos --json \
			>$T/decode.json 2>$T/decode.log; then
			jq -j '.prompt + .completion' $T/decode.json >$T/decode.txt
			echo "decoded: $(tr '\n' ' ' <$T/decode.txt)"
			check gguf/smollm2/decode/paris grep -q "^$prompt Paris" $T/decode.txt
			echo "$pids $greedy" | "$tok" $tj --decode | head -c -1 >$T/greedy.txt
			check gguf/smollm2/decode/same_text_as_transformers cmp -s $T/decode.txt $T/greedy.txt
		else
			fail gguf/smollm2/decode "pp-decode: $(tail -n 1 $T/decode.log)"
		fi

		# straight from the GGUF file: its own Q4_1 and Q8_0 blocks, not
		# expanded, give the imported (fp32) run's tokens
		pp-decode --ckpt "$G" --prompt "$prompt" -n 32 --temperature 0 --ignore-eos --json \
			>$T/native.json 2>$T/native.log
		check gguf/smollm2/native/reads_blocks jq -e '.weights == "gguf"' $T/native.log
		check gguf/smollm2/native/same_tokens_as_import eval '[ "$(jq -c .tokens $T/native.json)" = "$(jq -c .tokens $T/decode.json)" ]'
		check gguf/smollm2/native/logprobs jq -se '[.[0].logprobs, .[1].logprobs] | transpose |
			all(.[0] - .[1] | fabs < 1e-3)' $T/native.json $T/decode.json
		# Q4_1 layers and a Q8_0 head: about 97 MB, not fp32's 538
		check gguf/smollm2/native/smaller jq -e '.weights_bytes > 9e7 and .weights_bytes < 1.1e8' $T/native.log
		echo '{"messages": [{"role": "user", "content": "What is the capital of France?"}]}' |
			pp-decode --ckpt "$G" --chat --json -n 24 --temperature 0 >$T/native-chat.json 2>/dev/null
		check gguf/smollm2/native/chat jq -e '(.completion | test("Paris")) and .finish_reason == "eos"' $T/native-chat.json
		expect_fail gguf/native/no_cfg 2 "a GGUF file carries its model; give key=value overrides, not --cfg" \
			pp-decode --ckpt "$G" --cfg "$root/configs/tiny-llama.json" --prompt hi
		expect_fail gguf/native/weights_gguf_needs_gguf 2 "--weights gguf: the weights of a GGUF file" \
			pp-decode --ckpt $S --weights gguf --prompt hi
		# weights stored as bf16 and q8_0 still answer in English
		for w in bf16 q8_0; do
			pp-decode --ckpt $S --weights $w --prompt "$prompt" -n 12 --temperature 0 \
				>$T/$w.txt 2>$T/$w.log
			echo "$w: $(tr '\n' ' ' <$T/$w.txt)"
			check gguf/smollm2/decode/weights_$w grep -q "^$prompt Paris" $T/$w.txt
		done
		# the chat template from the GGUF's metadata, a stop string, EOS
		pp-decode --ckpt $S --chat --json -n 48 --temperature 0 >$T/chat.json 2>$T/chat.log <<'CHAT'
{"messages": [{"role": "user", "content": "What is the capital of France?"}]}
{"prompt": "What is the capital of France?", "stop": "."}
CHAT
		jq -c '{prompt, completion, finish_reason}' $T/chat.json
		check gguf/smollm2/chat/template jq -se '.[0].prompt == "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"' $T/chat.json
		check gguf/smollm2/chat/answer jq -se '(.[0].completion | test("Paris")) and .[0].finish_reason == "eos"' $T/chat.json
		check gguf/smollm2/chat/stop jq -se '.[1].finish_reason == "stop" and (.[1].completion | test("Paris$")) and (.[1].completion | contains(".") | not)' $T/chat.json

		# a fine-tune resumes from the import (step 0) on English text, its
		# config the one the import saved; its first loss is a pretrained
		# model's (far below ln 49152 = 10.8) and its loss goes down
		pp-ckpt info $S --config >$T/smol.json
		for i in 1 2 3 4 5 6; do cat $T/en.txt; done >$T/train.txt
		if pp-tokenize --tokenizer $tj -o $T/en.h5 --val-fraction 0 --quiet $T/train.txt \
			>$T/tokenize.log 2>&1 &&
			pp-train --cfg $T/smol.json data=$T/en.h5 steps=3 seq_len=32 global_batch=1 \
				microbatch=1 lr=2e-4 save_on_completion=false >$T/train.log 2>&1; then
			check gguf/smollm2/finetune/resumed grep -q "resumed from step 0" $T/train.log
			l=$(losses $S | tr '\n' ' ')
			echo "losses (step loss): $l"
			check gguf/smollm2/finetune/loss_down awk -v l="$l" 'BEGIN { n = split(l, a, " ");
				exit !(n == 6 && a[2] < 6 && a[6] < a[2]) }'
		else
			fail gguf/smollm2/finetune "$(tail -n 2 $T/tokenize.log $T/train.log)"
		fi
	fi
fi

# --- export: a tiny llama as F32, F16, BF16, Q8_0 ----------------------------------
pp-init model=llama-tiny -o $T/tiny >/dev/null 2>$T/init.log || fail gguf/export "pp-init: $(tail -n 1 $T/init.log)"
h5=$T/tiny/checkpoints/step_00000000/shard-pp000-tp000.h5
for d in F32 F16 BF16 Q8_0; do
	if pp-ckpt export $T/tiny --format gguf -o $T/tiny-$d.gguf --dtype $d >$T/exp-$d.log 2>&1; then
		ref --tag gguf/export/$d export $T/tiny-$d.gguf $h5 $d 2>$T/exp-$d.err || tail -n 2 $T/exp-$d.err
	else
		fail gguf/export/$d "$(tail -n 1 $T/exp-$d.log)"
	fi
done
pp-ckpt import --format gguf $T/tiny-F32.gguf -o $T/back >/dev/null 2>$T/back.log
check gguf/export/F32/reimport_bitwise same_tensors $h5 $T/back/checkpoints/step_00000000/shard-pp000-tp000.h5 /params
check gguf/export/no_temporary_left test -z "$(ls $T | grep '\.gguf\.tmp')"

# --- export: a tiny Mixtral, its experts stacked as llama.cpp stores them --------------
# blk.N.ffn_{gate,up,down}_exps of ne (cols, rows, experts) and the router
# blk.N.ffn_gate_inp in F32: read back expert by expert by GGUFReader,
# imported back bit for bit, and pp-decode from the file continues a prompt
# as from the checkpoint
pp-train model=mixtral-tiny data=synthetic global_batch=8 microbatch=4 seq_len=32 steps=4 \
	run_dir=$T/mx --quiet 2>$T/mx.log || fail gguf/export/mixtral "pp-train: $(tail -n 1 $T/mx.log)"
mx5=$T/mx/checkpoints/step_00000004/shard-pp000-tp000.h5
for d in F32 Q8_0; do
	if pp-ckpt export $T/mx --format gguf -o $T/mx-$d.gguf --dtype $d >$T/mx-$d.log 2>&1; then
		ref --tag gguf/export/mixtral/$d export $T/mx-$d.gguf $mx5 $d 2>$T/mx-$d.err || tail -n 2 $T/mx-$d.err
	else
		fail gguf/export/mixtral/$d "$(tail -n 1 $T/mx-$d.log)"
	fi
done
pp-ckpt import --format gguf $T/mx-F32.gguf -o $T/mx-back >/dev/null 2>$T/mx-back.log
check gguf/export/mixtral/reimport_bitwise same_tensors $mx5 $T/mx-back/checkpoints/step_00000000/shard-pp000-tp000.h5 /params
gguf_decodes_as_ckpt() {
	local a b
	a=$(pp-decode --ckpt $T/mx-F32.gguf --prompt "1 2 3" -n 12 --temperature 0 2>/dev/null) &&
		b=$(pp-decode --ckpt $T/mx --prompt "1 2 3" -n 12 --temperature 0 2>/dev/null) &&
		[ -n "$a" ] && [ "$a" = "$b" ]
}
check gguf/export/mixtral/decode_as_checkpoint gguf_decodes_as_ckpt
pp-init model=mixtral-tiny model.router=softmax_topk -o $T/glam-init >/dev/null 2>&1
expect_fail gguf/export/glam_routing 2 "experts in every layer, Mixtral's top-k softmax routing and no capacity" \
	pp-ckpt export $T/glam-init --format gguf -o $T/glam.gguf
pp-init model=glam-tiny -o $T/glam-geglu >/dev/null 2>&1
expect_fail gguf/export/geglu 2 "an MLP other than SwiGLU, which llama.cpp's llama architecture does not" \
	pp-ckpt export $T/glam-geglu --format gguf -o $T/glam.gguf

# --- tokenizers both ways ----------------------------------------------------------
# SmolLM2's byte-level BPE on a tiny llama: the arrays equal the original file's
if [ -n "${G:-}" ] && [ -f $T/smol/tokenizer/tokenizer.json ]; then
	if pp-init model=llama-tiny model.vocab_size=49152 tokenizer=$T/smol/tokenizer/tokenizer.json \
		-o $T/tbpe >/dev/null 2>$T/tbpe.log &&
		pp-ckpt export $T/tbpe --format gguf -o $T/tbpe.gguf >/dev/null 2>>$T/tbpe.log; then
		ref --tag gguf/export/bpe export $T/tbpe.gguf $T/tbpe/checkpoints/step_00000000/shard-pp000-tp000.h5 \
			F32 --like "$G" 2>>$T/tbpe.log | grep tokenizer || tail -n 2 $T/tbpe.log
	else
		fail gguf/export/bpe "$(tail -n 2 $T/tbpe.log)"
	fi
fi
# Llama 2's SentencePiece: exported, imported back as a .model, same ids
spm=$(spm_tokenizer 2>$T/tok.err)
if [ ! -f "$spm" ]; then
	skip gguf/spm "no SentencePiece tokenizer: $(cat $T/tok.err)"
elif pp-init model=llama-tiny model.vocab_size=32000 tokenizer=$spm -o $T/tspm >/dev/null 2>$T/tspm.log &&
	pp-ckpt export $T/tspm --format gguf -o $T/tspm.gguf --dtype F16 >/dev/null 2>>$T/tspm.log &&
	pp-ckpt import --format gguf $T/tspm.gguf -o $T/tspm-back >/dev/null 2>>$T/tspm.log; then
	ref --tag gguf/export/spm export $T/tspm.gguf $T/tspm/checkpoints/step_00000000/shard-pp000-tp000.h5 \
		F16 2>>$T/tspm.log | grep tokenizer || tail -n 2 $T/tspm.log
	"$tok" "$spm" <$T/en.txt >$T/spm-a.ids && "$tok" $T/tspm-back/tokenizer/tokenizer.model <$T/en.txt >$T/spm-b.ids
	"$tok" $T/tspm-back/tokenizer/tokenizer.model --decode <$T/spm-b.ids >$T/spm.back
	check gguf/spm/same_ids_as_llama2_model cmp -s $T/spm-a.ids $T/spm-b.ids
	check gguf/spm/round_trip cmp -s $T/en.txt $T/spm.back
	"$tok" $T/tspm-back/tokenizer/tokenizer.model --info >$T/spm.info
	"$tok" "$spm" --info >$T/spm0.info
	check gguf/spm/kind_vocab_bos_eos cmp -s <(head -n 4 $T/spm0.info) <(head -n 4 $T/spm.info)
else
	fail gguf/spm "$(tail -n 2 $T/tspm.log)"
fi

# --- import: tensors gguf.quants quantized -----------------------------------------
if ref write $T/q.gguf $T/q.npz 2>$T/q.log && pp-ckpt import --format gguf $T/q.gguf -o $T/q >/dev/null 2>>$T/q.log; then
	ref --tag gguf/import/quantized compare $T/q/checkpoints/step_00000000/shard-pp000-tp000.h5 $T/q.npz
else
	fail gguf/import/quantized "$(tail -n 2 $T/q.log)"
fi

# --- import: gemma and gpt2 as llama.cpp's converter writes them --------------------
# pp's tiny presets through llama.cpp's conventions and back: the same
# parameters and the same logits (the model read from the metadata).
for fam in gemma gpt; do
	if pp-init model=$fam-tiny -o $T/$fam >/dev/null 2>$T/$fam.log &&
		ref convert $T/$fam/checkpoints/step_00000000/shard-pp000-tp000.h5 $T/$fam.gguf 2>>$T/$fam.log &&
		pp-ckpt import --format gguf $T/$fam.gguf -o $T/$fam-back >>$T/$fam.log 2>&1; then
		check gguf/import/$fam/params same_tensors $T/$fam/checkpoints/step_00000000/shard-pp000-tp000.h5 \
			$T/$fam-back/checkpoints/step_00000000/shard-pp000-tp000.h5 /params
		for r in $fam $fam-back; do
			"$root/build/tests/tool_logits" $T/$r/checkpoints/step_00000000 $T/$r.f32 3 1 4 1 5 9 2 6 \
				>/dev/null 2>>$T/$fam.log
		done
		check gguf/import/$fam/same_logits cmp -s $T/$fam.f32 $T/$fam-back.f32
	else
		fail gguf/import/$fam "$(tail -n 2 $T/$fam.log)"
	fi
done

# --- import: a byte-level tokenizer gguf's writer made --------------------------------
if ref write $T/bytes.gguf $T/bytes.npz --bytes-tokenizer gpt-2 2>$T/bytes.log &&
	pp-ckpt import --format gguf $T/bytes.gguf -o $T/bytes >>$T/bytes.log 2>&1; then
	"$tok" $T/bytes/tokenizer/tokenizer.json <$T/en.txt >$T/bytes.ids 2>>$T/bytes.log &&
		"$tok" $T/bytes/tokenizer/tokenizer.json --decode <$T/bytes.ids >$T/bytes.back 2>>$T/bytes.log
	check gguf/import/bytes_tokenizer/round_trip cmp -s $T/en.txt $T/bytes.back
	# the merges: " the" is one token (258), " t" another (256)
	check gguf/import/bytes_tokenizer/merges test "$(echo "the theory to" | "$tok" $T/bytes/tokenizer/tokenizer.json)" = \
		"116 257 258 111 114 121 256 111"
else
	fail gguf/import/bytes_tokenizer "$(tail -n 2 $T/bytes.log)"
fi

# --- bad input ---------------------------------------------------------------------
mkdir -p $T/bad
if ref corrupt $T/q.gguf $T/bad >/dev/null 2>$T/corrupt.log; then
	expect_fail gguf/bad/truncated 1 "truncated|past the end" pp-ckpt import --format gguf $T/bad/truncated.gguf -o $T/x
	expect_fail gguf/bad/magic 1 "not a GGUF file" pp-ckpt import --format gguf $T/bad/bad-magic.gguf -o $T/x
	expect_fail gguf/bad/version 1 "GGUF version 9: pp reads versions 2 and 3" pp-ckpt import --format gguf $T/bad/version-9.gguf -o $T/x
	expect_fail gguf/bad/offset_past_end 1 "token_embd.weight.*ends past the end" pp-ckpt import --format gguf $T/bad/offset-past-end.gguf -o $T/x
	expect_fail gguf/bad/huge_count 1 "1099511627776 tensors: more than the file can hold" pp-ckpt import --format gguf $T/bad/huge-count.gguf -o $T/x
	expect_fail gguf/bad/unknown_type 1 "token_embd.weight' has an unknown type 99" pp-ckpt import --format gguf $T/bad/unknown-type.gguf -o $T/x
	expect_fail gguf/unsupported/k_quant 2 "token_embd.weight' is of type Q5_K, which pp does not read" \
		pp-ckpt import --format gguf $T/bad/k-quant.gguf -o $T/x
else
	fail gguf/bad "$(tail -n 2 $T/corrupt.log)"
fi
if ref write $T/nokey.gguf $T/nokey.npz --omit llama.block_count 2>$T/nokey.log; then
	expect_fail gguf/bad/missing_key 1 "required metadata key llama.block_count is missing" \
		pp-ckpt import --format gguf $T/nokey.gguf -o $T/x
fi
if ref write $T/qwen.gguf $T/qwen.npz --arch qwen2 2>$T/qwen.log; then
	expect_fail gguf/unsupported/architecture 2 "general.architecture 'qwen2': pp imports llama" \
		pp-ckpt import --format gguf $T/qwen.gguf -o $T/x
fi
if ref write $T/llama3.gguf $T/llama3.npz --bytes-tokenizer llama-bpe 2>$T/llama3.log; then
	expect_fail gguf/unsupported/pre_tokenizer 2 "tokenizer.ggml.pre 'llama-bpe': a pre-tokenizer pp does not implement" \
		pp-ckpt import --format gguf $T/llama3.gguf -o $T/x
fi
if ref write $T/scaled.gguf $T/scaled.npz --rope-scaling 2>$T/scaled.log; then
	expect_fail gguf/unsupported/rope_scaling 2 "llama.rope.scaling.type is 'linear': pp has no RoPE scaling" \
		pp-ckpt import --format gguf $T/scaled.gguf -o $T/x
fi
expect_fail gguf/bad/no_file 2 "nothing.gguf: No such file" pp-ckpt import --format gguf $T/nothing.gguf -o $T/x
check gguf/bad/nothing_written test ! -e $T/x
pp-init model=gpt-tiny -o $T/gpt-init >/dev/null 2>&1
expect_fail gguf/export/unsupported_family 2 "GGUF export writes llama models" pp-ckpt export $T/gpt-init --format gguf -o $T/gpt-out.gguf
check gguf/export/unsupported_nothing_written test -z "$(ls $T | grep gpt-out)"
exit 0
