# Shared helpers for the shell tests: each check prints one counted line.
set -u
PP_ROOT=${PP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export PP_ROOT PATH="$PP_ROOT/build/bin:$PATH" PP_CONFIG_DIR="$PP_ROOT/configs"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
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
# last logged loss of each step in RUN/metrics.jsonl: "step loss" lines
losses() { jq -r 'select(.loss != null) | "\(.step) \(.loss)"' "$1/metrics.jsonl" | sort -n -k1,1 -s | awk '{l[$1]=$2} END {for (s in l) print s, l[s]}' | sort -n; }
# same_tensors A.h5 B.h5: parameters and AdamW state bitwise equal
same_tensors() {
	local g
	for g in /params /adam_m /adam_v; do h5diff -q "$1" "$2" $g || return 1; done
}
