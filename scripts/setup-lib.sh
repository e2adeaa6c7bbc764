# Shared by the scripts that make Python environments (setup-reference.sh,
# setup-bench-env.sh, setup-eval-env.sh, setup-tensorboard.sh); sourced
# after the script defines die().

# setup_lock NAME VENV SECONDS: waits up to SECONDS for, then holds (on file
# descriptor 9, until the script exits) the lock of VENV's installer, so that
# one installer runs at a time: tests of several checkouts may share a venv
setup_lock() {
	local lock
	lock=${TMPDIR:-/tmp}/pp-$1.$(printf '%s' "$2" | cksum | cut -d' ' -f1).lock
	exec 9>"$lock"
	flock -w "$3" 9 || die "timed out waiting for $lock (another $1.sh)"
}
