#!/usr/bin/env bash
# Runs the tests, by how they run:
#   unit    the C unit tests (tests/unit/test_*.c, built into build/tests) and
#           the static checks (tests/unit/test_*.sh): seconds, no tool run
#   e2e     the tools end to end in one process (tests/e2e)
#   system  several ranks: the local Slurm cluster, srun, mpirun (tests/system)
#   gpu     the CUDA build and the GPU checks (tests/gpu; skipped without one)
#   fuzz    the libFuzzer targets (tests/fuzz)
#   tests/run.sh [unit|e2e|system|gpu|fuzz|NAME]
# With no argument every test runs; NAME runs the test files whose names
# contain it. Each test prints PASS:/FAIL:/SKIP: lines; a binary or script
# that exits non-zero without printing a FAIL line counts as one failure.
# Ends with "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
export PP_ROOT=$PWD PATH="$PWD/build/bin:$PATH"
arg=${1:-}
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
# does the test file t run under the argument?
wanted() {
	case "$arg" in
	'') return 0 ;;
	unit | e2e | system | gpu | fuzz) [ "$2" = "$arg" ] ;;
	*) case "$(basename "$1")" in *"$arg"*) return 0 ;; *) return 1 ;; esac ;;
	esac
}
for t in build/tests/test_*; do
	[ -x "$t" ] && wanted "$t" unit && run_one "$t" "$t"
done
for kind in unit e2e system gpu fuzz; do
	for t in tests/$kind/test_*.sh; do
		[ -e "$t" ] && wanted "$t" $kind && run_one "$t" bash "$t"
	done
done
rm -rf "$log"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
