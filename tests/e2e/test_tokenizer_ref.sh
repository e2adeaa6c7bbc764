#!/usr/bin/env bash
# pp's tokenizers against the reference implementations on real data:
# SentencePiece models against spm_encode (Debian sentencepiece 0.1.97),
# byte-level BPE against current Hugging Face tokenizers and tiktoken (the
# venv of scripts/setup-tensorboard.sh), id for id, on the King James Bible
# (Debian bible-kjv: 31,102 lines, 4.1 MB) and on a generated file of tricky
# lines (tests/ref/tokenizer_stress.py), plus decode(encode(x)) == x on the
# whole corpus for every tokenizer. Two more inputs hold the cases where pp
# once differed: lines with malformed UTF-8 for SentencePiece (spm's
# normalizer makes each byte that does not begin a valid character U+FFFD),
# and letters and digits newer than Unicode 14 before contractions for
# byte-level BPE (the references class them by Unicode 16, as pp's tables
# do; a letter of Unicode 17 they still split off as punctuation).
#
# Models: the Llama 2 tokenizer (shared data), Mistral's (PyPI mistral-common
# 1.13.1, cached under build/ref/), one trained here with spm_train, a second
# trained one with the opposite options (no byte fallback, no dummy prefix,
# whitespace kept, pieces across words, user-defined and control symbols),
# the first with some pieces marked UNUSED (tests/tools/spm_patch_model.py); GPT-2's
# vocab.json + merges.txt (PyPI openai-whisper==20230306, cached) and
# tokenizer.json conversions of it.
# Prints PASS:/FAIL:/SKIP: lines; SKIP where a package or a download is
# missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/tools/lib.sh
root=$PP_ROOT
tool=$root/build/tests/tool_tokenize
cache=$root/build/ref
shared=${PP_SHARED_DATA:-$root/../shared/data}
py=/usr/bin/python3
if "$py" -m pip --version >/dev/null 2>&1; then pip_=("$py" -m pip); else pip_=(pip); fi
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$tool" ]; then
	fail tokenizer/ref "$tool is not built (make tests)"
	exit 1
fi
missing=
command -v spm_encode >/dev/null || missing="$missing sentencepiece"
command -v bible >/dev/null || missing="$missing bible-kjv"
if [ -n "$missing" ]; then
	skip tokenizer/ref "Debian packages missing:$missing (scripts/install-deps.sh)"
	exit 0
fi

kjv=$T/kjv.txt
bible -f 'Gen1:1-Rev22:21' 2>/dev/null | sed 's/^[^ ]* //' >"$kjv"
n=$(wc -l <"$kjv")
if [ "$n" -ne 31102 ]; then
	fail tokenizer/kjv "the corpus has $n lines, expected 31102 (bible-kjv-text missing?)"
	exit 1
fi
stress=$T/stress.txt
"$py" tests/ref/tokenizer_stress.py 20000 1 >"$stress"
# SentencePiece decodes U+2581 as a space: leave those lines out of its round trips
grep -v $'\u2581' "$stress" >"$T/stress-spm.txt"
# the same kind of lines with malformed UTF-8 among the words (SentencePiece only:
# the byte-level references read text)
invalid=$T/invalid.txt
"$py" tests/ref/tokenizer_stress.py 5000 2 invalid >"$invalid"
# letters and digits of Unicode 15 and 16 (one of 17) alone, doubled, after
# a letter or a digit, after a space, before each contraction and a word:
# without them in \p{L} or \p{N}, "x'" is one punctuation word and "s" another
unicode=$T/unicode.txt
"$py" - >"$unicode" <<'EOF'
new = [0x11F04, 0x1E030, 0x31350, 0x2EBF0, 0x1C89, 0x1C8A, 0x1E5D0, 0x10D4A,  # L, 15.0 to 16.0
       0x11F50, 0x1E4F0, 0x16D70, 0x1E5F1, 0x1CCF0,  # Nd, 15.0 and 16.0
       0x10940]  # Lo in Unicode 17.0, unassigned in 16.0
for c in map(chr, new):
    for k in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]:
        print(f"{c}{k} {c}{c}{k} a{c}{k} 1{c}{k} x {c}{k} it{c}'s {c}{k}x {c}{k}.")
EOF

failed=0
commas() { sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<<"$1"; }
# show_line FILE N: line N of FILE, 200 characters at most, malformed UTF-8
# as \xNN (a FAIL line stays text)
show_line() {
	sed -n "${2}p" "$1" | "$py" -c 'import sys
sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "backslashreplace").rstrip("\n")[:200])'
}
# same NAME REFIDS PPIDS INPUT REFNAME: identical id files, or the first
# differing line
same() {
	local name=$1 a=$2 b=$3 in=$4 refname=$5
	if cmp -s "$a" "$b"; then
		pass "$name $(commas "$(wc -w <"$a")") tokens identical to $refname"
		return
	fi
	local line
	line=$(cmp "$a" "$b" 2>&1 | sed -n 's/.* line \([0-9]*\).*/\1/p')
	line=${line:-$(($(wc -l <"$a") + 1))}
	fail "$name" "line $line differs: input '$(show_line "$in" "$line")' reference [$(sed -n "${line}p" "$a" | cut -c1-200)] pp [$(sed -n "${line}p" "$b" | cut -c1-200)]"
	failed=1
}

# spm NAME MODEL INPUT: pp against spm_encode
spm() {
	local name=$1 model=$2 in=$3
	if ! spm_encode --model "$model" --output_format=id <"$in" >"$T/ref.ids" 2>"$T/err"; then
		fail "$name" "spm_encode failed: $(tail -n 1 "$T/err")"
		failed=1
		return
	fi
	if ! "$tool" "$model" <"$in" >"$T/pp.ids" 2>"$T/err"; then
		fail "$name" "tool_tokenize failed: $(tail -n 1 "$T/err")"
		failed=1
		return
	fi
	same "$name" "$T/ref.ids" "$T/pp.ids" "$in" spm_encode
}

# round_trip NAME MODEL INPUT [EXPECTED]: decode(encode(line)) == line
round_trip() {
	local name=$1 model=$2 in=$3 want=${4:-$3}
	if "$tool" "$model" <"$in" | "$tool" "$model" --decode >"$T/rt.txt" 2>"$T/err" &&
		cmp -s "$T/rt.txt" "$want"; then
		pass "$name ($(wc -l <"$in") lines)"
	else
		local line
		line=$(cmp "$T/rt.txt" "$want" 2>&1 | sed -n 's/.* line \([0-9]*\).*/\1/p')
		fail "$name" "line ${line:-?}: '$(sed -n "${line:-1}p" "$want" | cut -c1-120)' came back as '$(sed -n "${line:-1}p" "$T/rt.txt" | cut -c1-120)' $(tail -n 1 "$T/err")"
		failed=1
	fi
}

# ---- SentencePiece ----
# Llama 2's where it is at hand, else Mistral's v1 in its place
llama=$shared/llama2-tokenizer.model
[ -f "$llama" ] || llama=$(mistral_tokenizer 2>$T/tok.err)
if [ -f "$llama" ]; then
	spm tokenizer/llama2/kjv "$llama" "$kjv"
	spm tokenizer/llama2/stress "$llama" "$stress"
	spm tokenizer/llama2/invalid-utf8 "$llama" "$invalid"
	round_trip tokenizer/llama2/round-trip/kjv "$llama" "$kjv"
	round_trip tokenizer/llama2/round-trip/stress "$llama" "$T/stress-spm.txt"
else
	skip tokenizer/llama2 "no SentencePiece tokenizer: $(cat $T/tok.err)"
fi

mistral=$(mistral_tokenizer 2>$T/mistral.err)
if [ -f "$mistral" ]; then
	spm tokenizer/mistral/kjv "$mistral" "$kjv"
	spm tokenizer/mistral/stress "$mistral" "$stress"
	spm tokenizer/mistral/invalid-utf8 "$mistral" "$invalid"
	round_trip tokenizer/mistral/round-trip/kjv "$mistral" "$kjv"
	round_trip tokenizer/mistral/round-trip/stress "$mistral" "$T/stress-spm.txt"
else
	skip tokenizer/mistral "$(cat $T/mistral.err)"
fi

# A model trained here: BPE, byte fallback, identity normalization (which
# still removes extra whitespace), two user-defined symbols.
head -n 12000 "$kjv" >"$T/train.txt"
if spm_train --input="$T/train.txt" --model_prefix="$T/kjv-bpe" --model_type=bpe \
	--vocab_size=2000 --byte_fallback=true --normalization_rule_name=identity \
	--character_coverage=1.0 --user_defined_symbols=LORD,Israel --num_threads=1 \
	--input_sentence_size=0 --shuffle_input_sentence=false --random_seed=1 \
	--minloglevel=2 >"$T/train.log" 2>&1; then
	m=$T/kjv-bpe.model
	spm tokenizer/trained/kjv "$m" "$kjv"
	spm tokenizer/trained/stress "$m" "$stress"
	spm tokenizer/trained/invalid-utf8 "$m" "$invalid"
	# decoding gives the normalized text: single spaces, none at the ends
	sed 's/  */ /g; s/^ //; s/ $//' "$kjv" >"$T/kjv-norm.txt"
	round_trip tokenizer/trained/round-trip/kjv "$m" "$kjv" "$T/kjv-norm.txt"
	# some pieces UNUSED: spm merges them and then splits them back
	if "$py" tests/tools/spm_patch_model.py "$m" "$T/unused.model" 5 2>/dev/null; then
		spm tokenizer/trained-unused/kjv "$T/unused.model" "$kjv"
		spm tokenizer/trained-unused/stress "$T/unused.model" "$stress"
		spm tokenizer/trained-unused/invalid-utf8 "$T/unused.model" "$invalid"
	else
		fail tokenizer/trained-unused "tests/tools/spm_patch_model.py failed"
		failed=1
	fi
else
	fail tokenizer/trained "spm_train failed: $(tail -n 2 "$T/train.log")"
	failed=1
fi
# The opposite options: <unk> runs instead of byte fallback, no dummy
# prefix, whitespace kept as is, pieces that span words.
if spm_train --input="$T/train.txt" --model_prefix="$T/kjv-bpe2" --model_type=bpe \
	--vocab_size=1000 --normalization_rule_name=identity --add_dummy_prefix=false \
	--remove_extra_whitespaces=false --split_by_whitespace=false --character_coverage=0.98 \
	--control_symbols='<ctl>' --user_defined_symbols='<sep>' --num_threads=1 \
	--input_sentence_size=0 --shuffle_input_sentence=false --random_seed=1 \
	--minloglevel=2 >"$T/train.log" 2>&1; then
	spm tokenizer/trained-opposite/kjv "$T/kjv-bpe2.model" "$kjv"
	spm tokenizer/trained-opposite/stress "$T/kjv-bpe2.model" "$stress"
	spm tokenizer/trained-opposite/invalid-utf8 "$T/kjv-bpe2.model" "$invalid"
else
	fail tokenizer/trained-opposite "spm_train failed: $(tail -n 2 "$T/train.log")"
	failed=1
fi

# ---- byte-level BPE (GPT-2) ----
gpt2=$cache/gpt2
if [ ! -f "$gpt2/vocab.json" ] || [ ! -f "$gpt2/merges.txt" ]; then
	mkdir -p "$gpt2" "$T/dl2"
	# an sdist: pip prepares its metadata, which needs setuptools' pkg_resources
	# (Debian's python has it; an isolated build env may not)
	if { timeout 300 "${pip_[@]}" download --no-deps --no-binary :all: --no-build-isolation \
		openai-whisper==20230306 -d "$T/dl2" >"$T/pip.log" 2>&1 ||
		timeout 300 "${pip_[@]}" download --no-deps --no-binary :all: \
			openai-whisper==20230306 -d "$T/dl2" >>"$T/pip.log" 2>&1; } &&
		tar -xzf "$T"/dl2/openai-whisper-20230306.tar.gz -C "$T/dl2" \
			--wildcards '*/whisper/assets/gpt2/*' 2>>"$T/pip.log"; then
		cp "$T"/dl2/openai-whisper-20230306/whisper/assets/gpt2/{vocab.json,merges.txt,tokenizer_config.json} "$gpt2/"
	fi
fi
if [ ! -f "$gpt2/vocab.json" ]; then
	skip tokenizer/gpt2 "cannot download openai-whisper 20230306 from PyPI: $(tail -n 1 "$T/pip.log")"
else
	v=$gpt2/vocab.json
	info=$("$tool" "$v" --info 2>&1)
	check "tokenizer/gpt2/info" grep -qz 'vocab 50257.*bos 50256.*eos 50256' <<<"$info"
	round_trip tokenizer/gpt2/round-trip/kjv "$v" "$kjv"
	round_trip tokenizer/gpt2/round-trip/stress "$v" "$stress"
	# current tokenizers and tiktoken (the reference environment's tokenizers
	# 0.20 classes letters by Unicode 14)
	if ! vpy=$(scripts/setup-tensorboard.sh 2>"$T/setup.log"); then
		skip tokenizer/gpt2/reference "no current tokenizers and tiktoken: $(grep -v '^ ' "$T/setup.log" | tail -n 1)"
	elif ! HF_HUB_OFFLINE=1 "$vpy" tests/ref/tokenizer_ref.py convert "$v" "$T" 2>"$T/err"; then
		fail tokenizer/gpt2/convert "tests/ref/tokenizer_ref.py convert failed: $(tail -n 1 "$T/err")"
		failed=1
	else
		for tj in "$v" "$T/tokenizer.json" "$T/tokenizer-str.json" "$T/tokenizer-digits.json" tiktoken; do
			how=encode ref="Hugging Face tokenizers"
			case $tj in
			*vocab.json) tag=gpt2 ;;
			*tokenizer.json) tag=gpt2-tokenizer-json ;;
			*tokenizer-str.json) tag=gpt2-tokenizer-json-str-merges ;;
			*tokenizer-digits.json) tag=gpt2-digits-prefix-space ;;
			tiktoken) tag=gpt2-tiktoken how=tiktoken tj=$v ref=tiktoken ;;
			esac
			for in in "$kjv" "$stress" "$unicode"; do
				what=$(basename "$in" .txt)
				if ! HF_HUB_OFFLINE=1 "$vpy" tests/ref/tokenizer_ref.py $how "$tj" <"$in" >"$T/ref.ids" 2>"$T/err"; then
					fail "tokenizer/$tag/$what" "reference encoder failed: $(tail -n 1 "$T/err")"
					failed=1
					continue
				fi
				"$tool" "$tj" <"$in" >"$T/pp.ids" 2>"$T/err" ||
					{ fail "tokenizer/$tag/$what" "tool_tokenize: $(tail -n 1 "$T/err")"; failed=1; continue; }
				same "tokenizer/$tag/$what" "$T/ref.ids" "$T/pp.ids" "$in" "$ref"
			done
		done
	fi
fi
exit $failed
