#!/usr/bin/env bash
# Runs every test: the C test binaries in build/tests and the shell tests in
# tests/*.sh. Each prints PASS:/FAIL:/SKIP: lines; a binary or script that
# exits non-zero without printing a FAIL line counts as one failure.
# Ends with "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
export PP_ROOT=$PWD PATH="$PWD/build/bin:$PATH"
only=${1:-}
log=$(mktemp -d /tmp/pp-test-log.XXXXXX)
pass=0 fail=0 skip=0
run_one() {
	local name=$1; shift
	local out="$log/$(basename "$name").log" t0=$SECONDS rc
	"$@" >"$out" 2>&1
	rc=$?
	local p f s
	p=$(grep -c '^PASS: ' "$out"); f=$(grep -c '^FAIL: ' "$out"); s=$(grep -c '^SKIP: ' "$out")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL: $name exited $rc without reporting a failure" >>"$out"
		f=1
	fi
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
	grep -E '^(FAIL|SKIP): ' "$out"
	[ "$f" -eq 0 ] || { echo "---- last lines of $name ----"; tail -n 25 "$out"; }
	printf '%-28s %3d passed %3d failed %3d skipped  %4ds\n' "$(basename "$name")" "$p" "$f" "$s" $((SECONDS - t0))
}
for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	case "$t" in *"$only"*) ;; *) continue ;; esac
	run_one "$t" "$t"
done
for t in tests/test_*.sh; do
	case "$t" in *"$only"*) ;; *) continue ;; esac
	run_one "$t" bash "$t"
done
rm -rf "$log"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
