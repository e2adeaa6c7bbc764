#!/usr/bin/env bash
# Makes the Python environment that reads pp-train's TensorBoard event files
# back in tests/e2e/test_tensorboard.sh: a venv at $PP_TB_VENV (default
# $PP_ROOT/.venv-tb, and $PP_ROOT defaults to this repository) over Debian's
# python3, with the `tensorboard` package from PyPI pinned in
# scripts/tensorboard-requirements.txt (it reads event files without
# TensorFlow, checking each record's masked CRC32C), and beside it current
# `tokenizers` and `tiktoken` releases for tests/e2e/test_gguf.sh and
# tests/e2e/test_tokenizer_ref.sh.
#
# Idempotent: when the venv already imports tensorboard, tokenizers and
# tiktoken at the pinned versions it installs nothing. Missing Debian packages are installed when run as root;
# otherwise it prints the apt-get line to run and exits 1.
# Exit 0: ready (the venv's python is printed on stdout); 1: not ready.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${PP_ROOT:-$(dirname "$here")}
venv=${PP_TB_VENV:-$root/.venv-tb}
req=$here/tensorboard-requirements.txt
py=/usr/bin/python3

die() { echo "setup-tensorboard: $*" >&2; exit 1; }

want=$(sed -n 's/^tensorboard==\([^ ;#]*\).*/\1/p' "$req")
[ -n "$want" ] || die "$req pins no tensorboard version (expected a line tensorboard==X.Y.Z)"
want_tok=$(sed -n 's/^tokenizers==\([^ ;#]*\).*/\1/p' "$req")
want_tt=$(sed -n 's/^tiktoken==\([^ ;#]*\).*/\1/p' "$req")

ready() {
	[ -x "$venv/bin/python" ] && "$venv/bin/python" -c '
import sys, tensorboard, tokenizers, tiktoken
from tensorboard.backend.event_processing import event_accumulator
sys.exit(tensorboard.__version__ != sys.argv[1] or tokenizers.__version__ != sys.argv[2] or
         tiktoken.__version__ != sys.argv[3])' \
		"$want" "$want_tok" "$want_tt" >/dev/null 2>&1
}
if ready; then
	echo "$venv/bin/python"
	exit 0
fi

"$here/install-deps.sh" python3-venv || exit 1
mkdir -p "$(dirname "$venv")"
# one installer at a time: checkouts may share a venv
. "$here/setup-lib.sh"
setup_lock setup-tensorboard "$venv" 600
if ready; then
	echo "$venv/bin/python"
	exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv" >&2 || die "cannot create the venv $venv"
echo "setup-tensorboard: installing tensorboard $want, tokenizers $want_tok and tiktoken $want_tt into $venv" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --quiet -r "$req" >&2 ||
	die "pip install -r $req failed (is PyPI reachable?)"
ready || die "the venv $venv does not import tensorboard $want, tokenizers $want_tok and tiktoken $want_tt"
echo "$venv/bin/python"
