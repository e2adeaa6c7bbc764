#!/usr/bin/env bash
# SentencePiece encoding speed: pp's encoder (build/tests/tool_tokenize)
# against spm_encode (Debian sentencepiece), same model, same input, same
# output (ids, one line per input line, checked identical), wall time.
#
#   bench/tokenize-vs-spm.sh [--model FILE] [--input FILE] [--repeat 3]
#
# Default model: the Llama 2 tokenizer ($PP_SHARED_DATA or ../shared/data);
# default input: the King James Bible (Debian bible-kjv, 4.1 MB, 31,102
# lines). Each side runs --repeat times; the best time counts. Both times
# include loading the model and writing the ids. Prints MB/s of each and the
# ratio on stdout; run `make tests` first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
model=${PP_SHARED_DATA:-$root/../shared/data}/llama2-tokenizer.model input= repeat=3
usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
	case $1 in
	--model) model=$2; shift 2 ;;
	--input) input=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "tokenize-vs-spm: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "tokenize-vs-spm: --repeat $repeat: expected a positive integer" >&2; exit 2; }
tool=$root/build/tests/tool_tokenize
[ -x "$tool" ] || { echo "tokenize-vs-spm: $tool not found: run make tests first" >&2; exit 1; }
command -v spm_encode >/dev/null || { echo "tokenize-vs-spm: spm_encode not found (apt-get install sentencepiece)" >&2; exit 1; }
[ -f "$model" ] || { echo "tokenize-vs-spm: no model $model (--model FILE)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pp-tokbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -z "$input" ]; then
	command -v bible >/dev/null || { echo "tokenize-vs-spm: bible not found (apt-get install bible-kjv), or give --input FILE" >&2; exit 1; }
	input=$tmp/kjv.txt
	bible -f 'Gen1:1-Rev22:21' | sed 's/^[^ ]* //' >"$input"
fi
bytes=$(wc -c <"$input")

# best wall time in seconds of "$@" < input > out, over $repeat runs
best() {
	local out=$1 b= t0 t1 t
	shift
	for _ in $(seq "$repeat"); do
		t0=$(date +%s.%N)
		"$@" <"$input" >"$out"
		t1=$(date +%s.%N)
		t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')
		if [ -z "$b" ] || awk -v t="$t" -v b="$b" 'BEGIN { exit !(t < b) }'; then b=$t; fi
	done
	echo "$b"
}
echo "model $model; input $input ($bytes bytes, $(wc -l <"$input") lines); best of $repeat" >&2
t_spm=$(best "$tmp/spm.ids" spm_encode --model "$model" --output_format=id)
t_pp=$(best "$tmp/pp.ids" "$tool" "$model")
if ! cmp -s "$tmp/spm.ids" "$tmp/pp.ids"; then
	echo "tokenize-vs-spm: the ids differ from spm_encode's: not a fair comparison" >&2
	exit 1
fi
tokens=$(wc -w <"$tmp/pp.ids")
printf '%-12s %10s %10s %12s\n' encoder seconds MB/s tokens/s
for side in spm_encode pp; do
	t=$t_spm
	[ $side = pp ] && t=$t_pp
	awk -v s=$side -v t="$t" -v b="$bytes" -v n="$tokens" \
		'BEGIN { printf "%-12s %10.3f %10.2f %12.0f\n", s, t, b / t / 1e6, n / t }'
done
awk -v a="$t_spm" -v b="$t_pp" -v n="$tokens" \
	'BEGIN { printf "pp / spm_encode speed: %.1fx (%d tokens, identical ids)\n", a / b, n }'
