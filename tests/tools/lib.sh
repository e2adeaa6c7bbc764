# Shared helpers for the shell tests: each check prints one counted line.
set -u
PP_ROOT=${PP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
export PP_ROOT PATH="$PP_ROOT/build/bin:$PATH" PP_CONFIG_DIR="$PP_ROOT/configs"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
. "$PP_ROOT/scripts/blas-env.sh"
T=$(mktemp -d /tmp/pp-test.XXXXXX)
trap 'rm -rf "$T"' EXIT

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1: $2"; }
skip() { echo "SKIP: $1: $2"; }
# check NAME CONDITION-COMMAND... : PASS when the command succeeds
check() {
	local name=$1; shift
	if "$@"; then pass "$name"; else fail "$name" "$*"; fi
}
# expect_fail NAME STATUS PATTERN CMD...: the command exits with STATUS and
# its stderr matches PATTERN (grep -E)
expect_fail() {
	local name=$1 want=$2 pat=$3; shift 3
	local err rc
	err=$("$@" 2>&1 >/dev/null); rc=$?
	if [ "$rc" -ne "$want" ]; then
		fail "$name" "exit $rc, wanted $want; stderr: $(echo "$err" | tail -n 2)"
	elif ! grep -qE -- "$pat" <<<"$err"; then
		fail "$name" "message does not match /$pat/: $err"
	else
		pass "$name"
	fi
}
# last logged loss of each step in RUN/metrics.jsonl: "step loss" lines;
# fails, saying why, when the run logged no loss
losses() { python3 "$PP_ROOT/tests/tools/runcheck.py" losses "$1"; }
# loss_diff RUN_A RUN_B: the largest relative difference of their per-step
# losses; "inf" (and failure) when they did not log the same steps or one
# logged none
loss_diff() { python3 "$PP_ROOT/tests/tools/runcheck.py" loss-diff "$1" "$2" || { echo inf; return 1; }; }
# within D BOUND: D (as loss_diff prints it) is a number no larger than BOUND
within() { awk -v d="$1" -v b="$2" 'BEGIN { exit !(d ~ /^[0-9][0-9.e+-]*$/ && d + 0 <= b + 0) }'; }
# losses_close RUN_A RUN_B: every step's loss within $TOL (relative) of B's
losses_close() { within "$(loss_diff "$1" "$2")" "$TOL"; }
# same_losses RUN_A RUN_B [AFTER]: both logged losses, and the same ones (of
# the steps after AFTER), bit for bit
same_losses() {
	local a b
	a=$(losses "$1" | awk -v s="${3:-0}" '$1 > s') && b=$(losses "$2" | awk -v s="${3:-0}" '$1 > s') || return 1
	[ -n "$a" ] || { echo "$1: no loss logged after step ${3:-0}" >&2; return 1; }
	[ "$a" = "$b" ] || { echo "losses differ: $(diff <(echo "$a") <(echo "$b") | head -n 4 | tr '\n' ' ')" >&2; return 1; }
}
# same_tensors A.h5 B.h5 [GROUP...]: parameters and AdamW state (or the
# GROUPs) bitwise equal; fails on a missing file, group or dataset
same_tensors() {
	local a=$1 b=$2
	shift 2
	[ $# -gt 0 ] || set -- /params /adam_m /adam_v
	"$PP_ROOT/build/tests/tool_h5_same" "$a" "$b" "$@" >/dev/null
}

# mistral_tokenizer: Mistral's v1 SentencePiece model (BPE, 32000 pieces,
# byte fallback: the type of Llama 2's), from PyPI's mistral-common 1.13.1
# wheel (sha256-checked), fetched once into build/ref/mistral. Prints its
# path; fails, saying why on stderr, when it cannot be had.
mistral_tokenizer() {
	local dir=$PP_ROOT/build/ref/mistral whl=mistral_common-1.13.1-py3-none-any.whl
	local sum=98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af
	if [ ! -f "$dir/tokenizer.model.v1" ]; then
		local dl
		dl=$(mktemp -d "$T/dl.XXXXXX")
		mkdir -p "$dir"
		if ! timeout 300 /usr/bin/python3 -m pip download --disable-pip-version-check --no-deps \
			mistral-common==1.13.1 -d "$dl" >"$dl/pip.log" 2>&1; then
			echo "cannot download mistral-common 1.13.1 from PyPI: $(tail -n 1 "$dl/pip.log")" >&2
			return 1
		fi
		if ! echo "$sum  $dl/$whl" | sha256sum -c --status; then
			echo "$whl: not the wheel whose sha256 is $sum" >&2
			return 1
		fi
		unzip -o -q -j -d "$dl" "$dl/$whl" mistral_common/data/tokenizer.model.v1 &&
			mv "$dl/tokenizer.model.v1" "$dir/tokenizer.model.v1.tmp.$$" &&
			mv "$dir/tokenizer.model.v1.tmp.$$" "$dir/tokenizer.model.v1" || return 1
	fi
	echo "$dir/tokenizer.model.v1"
}
# spm_tokenizer: a 32000-piece SentencePiece BPE model with byte fallback:
# Llama 2's from $PP_SHARED_DATA (or ../shared/data beside the tree) where it
# is, else Mistral's v1 (mistral_tokenizer). Prints its path, or fails.
spm_tokenizer() {
	local llama=${PP_SHARED_DATA:-$PP_ROOT/../shared/data}/llama2-tokenizer.model
	if [ -f "$llama" ]; then echo "$llama"; else mistral_tokenizer; fi
}
