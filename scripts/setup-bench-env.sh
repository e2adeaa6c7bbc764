#!/usr/bin/env bash
# Makes the Python environment of the CPU decode benchmark
# (bench/decode-cpu.sh): a venv at $PP_BENCH_VENV (default
# $PP_ROOT/.venv-bench, and $PP_ROOT defaults to this repository) over
# Debian's python3, with a current PyTorch 2.x, Hugging Face transformers,
# safetensors, numpy and llama-cpp-python, pinned in
# scripts/bench-requirements.txt. llama-cpp-python is compiled from source
# (llama.cpp, with cmake) for this machine's CPU: CMAKE_ARGS=-DGGML_NATIVE=ON,
# in about 8 minutes on 2 cores. PyTorch comes from its CPU wheel index
# (https://download.pytorch.org/whl/cpu) when that can be reached, else from
# PyPI, whose wheel brings the CUDA libraries too (about 4 GB, unused here).
# The venv is apart from the .venv of scripts/setup-reference.sh (Debian's
# torch 1.13.1 for the correctness tests), which this script leaves alone.
#
# Idempotent: when the venv already imports torch, transformers, safetensors,
# numpy and llama_cpp at the pinned versions it installs nothing. Missing
# Debian packages (python3-venv, cmake, build-essential) are installed when
# run as root; otherwise it prints the apt-get line to run and exits 1.
# Exit 0: ready (the venv's python is printed on stdout); 1: not ready.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${PP_ROOT:-$(dirname "$here")}
venv=${PP_BENCH_VENV:-$root/.venv-bench}
req=$here/bench-requirements.txt
py=/usr/bin/python3 # Debian's, the same on every Debian 12 machine
debs=(python3-venv cmake build-essential)
cpu_index=https://download.pytorch.org/whl/cpu

die() { echo "setup-bench-env: $*" >&2; exit 1; }
say() { echo "setup-bench-env: $*" >&2; }

[ -f "$req" ] || die "$req not found"
pin() {
	local v
	v=$(sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$req")
	[ -n "$v" ] || die "$req pins no $1 version (expected a line $1==X.Y.Z)"
	echo "$v"
}
want_torch=$(pin torch)
want_tf=$(pin transformers)
want_llama=$(pin llama-cpp-python)

# ready [llama]: the venv imports everything at the pinned versions (with
# "torch", only what comes before llama-cpp-python)
ready() {
	[ -x "$venv/bin/python" ] &&
		HF_HUB_OFFLINE=1 "$venv/bin/python" -c '
import sys, torch, transformers, safetensors, numpy
ok = torch.__version__.split("+")[0] == sys.argv[1] and transformers.__version__ == sys.argv[2]
if sys.argv[4] == "all":
    import llama_cpp
    ok = ok and llama_cpp.__version__ == sys.argv[3]
sys.exit(not ok)' "$want_torch" "$want_tf" "$want_llama" "${1:-all}" >/dev/null 2>&1
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

# One installer at a time: several checkouts may share a venv.
mkdir -p "$(dirname "$venv")"
. "$here/setup-lib.sh"
setup_lock setup-bench-env "$venv" 1800
if ready; then # another run finished it while we waited
	done_ok
fi

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
	rm -rf "$venv"
	"$py" -m venv "$venv" >&2 || die "cannot create the venv $venv"
	printf '*\n' >"$venv/.gitignore" # git status stays clean
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
pip=("$venv/bin/python" -m pip install --quiet)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pp-setup-bench-env.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! ready torch; then
	grep -v -i '^llama[-_]cpp[-_]python==' "$req" >"$tmp/req.txt"
	if "$py" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=15)' "$cpu_index" >/dev/null 2>&1; then
		say "installing torch $want_torch from $cpu_index"
		"${pip[@]}" --index-url "$cpu_index" "torch==$want_torch" >&2 ||
			die "pip install torch==$want_torch from $cpu_index failed"
		# the CUDA packages come only with PyPI's torch wheel
		grep -v -E '^(nvidia-|cuda-|triton==)' "$req" | grep -v -i '^llama[-_]cpp[-_]python==' >"$tmp/req.txt"
	else
		say "$cpu_index cannot be reached: torch $want_torch from PyPI (with its CUDA libraries)"
	fi
	say "installing $(grep -c '==' "$tmp/req.txt") pinned packages into $venv"
	"${pip[@]}" -r "$tmp/req.txt" >&2 || die "pip install -r $req failed (is PyPI reachable?)"
	ready torch || die "the venv $venv still does not import torch $want_torch and transformers $want_tf"
fi

say "building llama-cpp-python $want_llama (llama.cpp for this CPU; about 8 minutes on 2 cores)"
# --no-binary and no cache: compiled here, for this CPU (GGML_NATIVE), never
# a wheel built elsewhere; its dependencies are pinned above
CMAKE_ARGS="-DGGML_NATIVE=ON ${CMAKE_ARGS:-}" "${pip[@]}" --no-cache-dir --no-deps \
	--no-binary llama-cpp-python "llama-cpp-python==$want_llama" >"$tmp/llama.log" 2>&1 || {
	tail -n 20 "$tmp/llama.log" >&2
	die "pip install llama-cpp-python==$want_llama failed (it needs cmake and a C++ compiler)"
}
ready || die "the venv $venv still does not import llama_cpp $want_llama with torch and transformers"
done_ok
