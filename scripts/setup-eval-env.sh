#!/usr/bin/env bash
# Makes the Python environment of the pp-eval reference (tests/ref/lm_eval_ref.py):
# a venv at $PP_EVAL_VENV (default $PP_ROOT/.venv-eval, and $PP_ROOT defaults
# to this repository) with EleutherAI lm-evaluation-harness (lm-eval) able to
# run its "hf" model on CPU in fp32, made with --system-site-packages over
# Debian's python3-torch 1.13.1 and python3-numpy 1.24.2, like the .venv of
# scripts/setup-reference.sh (which this script leaves alone).
#
# PyPI's torch (4 GB with its CUDA wheels) is never downloaded: every package
# is pinned in scripts/eval-requirements.txt and installed with --no-deps, so
# torch and numpy come from Debian only (the header of that file says why
# each version). The result is checked: lm_eval, lm_eval.models.huggingface,
# datasets, pandas, scikit-learn import at the pinned versions, and torch and
# numpy are Debian's (numpy 1.x, no copy of either in the venv).
#
# A fresh build (venv removed, PyPI reachable) took 40 to 55 s on the
# project's 2-core machine, the same with pip's cache warm or empty: it
# downloads 150 MB of wheels (pyarrow, scipy, transformers, pandas, lm-eval
# and scikit-learn are most of it), builds three small sdists (rouge_score,
# sqlitedict, word2number) and makes a venv of about 780 MB.
#
# Idempotent: when the venv already imports lm-eval and the rest, with every
# package of the requirements file at its pinned version, it installs nothing
# (that check takes about 4 s). The venv holds a .gitignore of its own ("*"),
# so git status stays clean. Missing Debian packages are installed when run
# as root; otherwise it prints the apt-get line to run and exits 1.
# Exit 0: ready (the venv's python is printed on stdout); 1: not ready.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${PP_ROOT:-$(dirname "$here")}
venv=${PP_EVAL_VENV:-$root/.venv-eval}
req=$here/eval-requirements.txt
py=/usr/bin/python3 # Debian's: the only one that sees python3-torch
debs=(python3-torch python3-numpy python3-venv)

die() { echo "setup-eval-env: $*" >&2; exit 1; }

[ -f "$req" ] || die "$req not found"
pin() {
	local v
	v=$(sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$req")
	[ -n "$v" ] || die "$req pins no $1 version (expected a line $1==X.Y.Z)"
	echo "$v"
}
want_lm=$(pin lm-eval)
want_tf=$(pin transformers)
want_acc=$(pin accelerate)
want_ds=$(pin datasets)

# the venv's check; its errors go to stderr with "ready -v"
check='
import sys, importlib.metadata as md
import numpy, torch
# Debian torch and numpy, never a copy from PyPI inside the venv
deb = "/usr/lib/python3/dist-packages/"
assert torch.__file__.startswith(deb) and numpy.__file__.startswith(deb), "torch or numpy is not the Debian package"
assert numpy.__version__.startswith("1."), "numpy " + numpy.__version__
import lm_eval, lm_eval.evaluator, lm_eval.models.huggingface, transformers, accelerate
import datasets, pandas, pyarrow, sklearn, scipy
import re
bad = []
for line in open(sys.argv[1]):  # every pin of the requirements file
    m = re.match(r"([A-Za-z0-9_.-]+)==([^ ;#]+)", line.strip())
    if m:
        try:
            v = md.version(m[1])
        except md.PackageNotFoundError:
            v = None
        if v != m[2]:
            bad.append("%s %s (want %s)" % (m[1], v, m[2]))
if bad:
    sys.exit("not at the pinned versions: " + ", ".join(bad))'
ready() {
	[ -x "$venv/bin/python" ] || return 1
	if [ "${1:-}" = -v ]; then
		HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$venv/bin/python" -c "$check" "$req" >/dev/null
	else
		HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$venv/bin/python" -c "$check" "$req" >/dev/null 2>&1
	fi
}

done_ok() {
	echo "$venv/bin/python"
	exit 0
}

if ready; then
	done_ok
fi

# Debian packages
"$here/install-deps.sh" "${debs[@]}" || exit 1
[ -x "$py" ] || die "$py not found (Debian's python3)"
"$py" -c 'import torch, numpy' 2>/dev/null ||
	die "$py cannot import torch and numpy although their Debian packages are installed"

# One installer at a time: tests of several checkouts may share a venv.
mkdir -p "$(dirname "$venv")"
. "$here/setup-lib.sh"
setup_lock setup-eval-env "$venv" 600
if ready; then # another run finished it while we waited
	done_ok
fi

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
	rm -rf "$venv"
	"$py" -m venv --system-site-packages "$venv" >&2 || die "cannot create the venv $venv"
	printf '*\n' >"$venv/.gitignore" # git status stays clean
fi
echo "setup-eval-env: installing $(grep -c '==' "$req") pinned packages into $venv (--no-deps)" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --quiet --no-deps -r "$req" >&2 ||
	die "pip install --no-deps -r $req failed (is PyPI reachable?)"
ready -v || die "the venv $venv still does not import lm-eval $want_lm (transformers $want_tf, \
accelerate $want_acc, datasets $want_ds) over Debian's torch and numpy 1.x"
done_ok
