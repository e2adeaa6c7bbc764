#!/usr/bin/env bash
# Fuzzes the tokenizers with libFuzzer (clang -fsanitize=fuzzer,address,
# undefined): tests/fuzz/fuzz_spm_model.c (the .model, tokenizer.json and
# vocab.json parsers on arbitrary bytes) and tests/fuzz/fuzz_encode.c
# (encode + decode round trips on arbitrary bytes, Llama 2 model and a GPT-2
# vocabulary), each for PP_FUZZ_SECONDS seconds (default 20) from a small
# seed corpus of real models and real text. PASS when no crash, hang or
# sanitizer report; FAIL shows the report, and the input that caused it is
# kept under build/fuzz/artifacts/ (rerun: build/fuzz/TARGET FILE).
# PP_FUZZ_VERBOSE=1 also shows libFuzzer's coverage at start and end.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
root=$PP_ROOT
secs=${PP_FUZZ_SECONDS:-20}
out=$root/build/fuzz
shared=${PP_SHARED_DATA:-$root/../shared/data}
cc=$(command -v clang || command -v clang-14) || { skip fuzz "clang not installed (scripts/install-deps.sh)"; exit 0; }
[[ $secs =~ ^[0-9]+$ ]] || { fail fuzz "PP_FUZZ_SECONDS=$secs: expected a whole number of seconds"; exit 1; }

mkdir -p "$out/artifacts"
src=(libcommon/tokenizer.c libcommon/tok_spm.c libcommon/tok_bpe.c libcommon/tok_unicode.c
	libcommon/error.c libcommon/sha256.c)
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined
	-fno-sanitize-recover=undefined $(pkg-config --cflags jansson))
for target in fuzz_spm_model fuzz_encode; do
	if ! "$cc" "${flags[@]}" "tests/fuzz/$target.c" "${src[@]}" -o "$out/$target" \
		$(pkg-config --libs jansson) -lpthread 2>"$T/$target.build"; then
		if grep -q 'libclang_rt.fuzzer\|fsanitize=fuzzer' "$T/$target.build"; then
			skip "fuzz/$target" "clang cannot link libFuzzer (libclang-rt-14-dev missing?)"
		else
			fail "fuzz/$target" "does not build: $(head -n 5 "$T/$target.build")"
		fi
		exit 0
	fi
done

# Seed corpora: small SentencePiece models trained here (with and without
# byte fallback), a tiny tokenizer.json, and lines of real text.
seeds_m=$T/seeds-model seeds_e=$T/seeds-encode
mkdir -p "$seeds_m" "$seeds_e"
gen=$T/gen.txt text=$T/text.txt
if command -v bible >/dev/null; then
	bible -f 'Gen1:1-Gen3:24' 2>/dev/null | sed 's/^[^ ]* //' >"$gen"
fi
[ -s "$gen" ] || printf 'In the beginning God created the heaven and the earth.\n' >"$gen"
cp "$gen" "$text"
/usr/bin/python3 tests/tokenizer_stress.py 60 7 >>"$text" 2>/dev/null
if command -v spm_train >/dev/null; then
	spm_train --input="$gen" --model_prefix="$T/s1" --model_type=bpe --vocab_size=400 \
		--byte_fallback=true --normalization_rule_name=identity --character_coverage=1.0 \
		--user_defined_symbols=God --minloglevel=2 --num_threads=1 >/dev/null 2>&1 &&
		cp "$T/s1.model" "$seeds_m/bpe-byte-fallback.model"
	spm_train --input="$gen" --model_prefix="$T/s2" --model_type=bpe --vocab_size=150 \
		--normalization_rule_name=identity --add_dummy_prefix=false --minloglevel=2 \
		--num_threads=1 >/dev/null 2>&1 && cp "$T/s2.model" "$seeds_m/bpe.model"
fi
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\\u0120": 3}, "merges": ["a b"]}, "added_tokens": [{"id": 4, "content": "<x>", "special": false}], "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}}' \
	>"$seeds_m/tokenizer.json"
i=0
while IFS= read -r line && [ $i -lt 60 ]; do
	{ printf "\\x0$((i % 2))"; printf '%s' "$line"; } >"$seeds_e/line$i"
	i=$((i + 1))
done <"$text"
printf '\x00a\xffb\xe2\x82 \xe2\x96\x81 \xf0\x9f\x98\x80' >"$seeds_e/bytes0"
printf '\x01a\xffb\xe2\x82 it'"'"'s  \t\n 12' >"$seeds_e/bytes1"

# The models for fuzz_encode: Llama 2's, and GPT-2's vocab.json if
# tests/test_tokenizer_ref.sh has downloaded it, else a byte-level
# vocabulary made here (the 256 byte tokens and a few merges).
models=
[ -f "$shared/llama2-tokenizer.model" ] && models=$shared/llama2-tokenizer.model
if [ -f "$root/build/ref/gpt2/vocab.json" ]; then
	models=${models:+$models:}$root/build/ref/gpt2/vocab.json
else
	/usr/bin/python3 - "$T/vocab.json" <<'EOF'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
chars = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {chars[b]: b for b in range(256)}
merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "\u0120")]
for a, b in merges:
    vocab[a + b] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
json.dump(vocab, open(sys.argv[1], "w"))
with open(sys.argv[1].replace("vocab.json", "merges.txt"), "w") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
EOF
	models=${models:+$models:}$T/vocab.json
fi

# run TARGET MAXLEN CORPUS...: libFuzzer for $secs seconds
run() {
	local target=$1 maxlen=$2
	shift 2
	local log=$T/$target.log
	mkdir -p "$T/corpus-$target"
	if "$out/$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="$maxlen" \
		-print_final_stats=1 -artifact_prefix="$out/artifacts/$target-" \
		"$T/corpus-$target" "$@" >"$log" 2>&1; then
		[ -n "${PP_FUZZ_VERBOSE:-}" ] && grep -E "INITED|DONE" "$log" >&2
		local runs
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
		pass "fuzz/$target ${runs:-?} inputs in ${secs}s, no crash or sanitizer report"
	else
		fail "fuzz/$target" "libFuzzer found a problem (input kept in $out/artifacts/):
$(grep -E -A 12 'ERROR: |runtime error|==ERROR|deadly signal|Test unit written' "$log" | head -n 40)"
	fi
}
run fuzz_spm_model 65536 "$seeds_m"
if [ -z "$models" ]; then
	skip fuzz/fuzz_encode "no tokenizer to fuzz (no $shared/llama2-tokenizer.model)"
else
	export PP_FUZZ_MODELS=$models
	run fuzz_encode 4096 "$seeds_e"
fi
