#!/usr/bin/env bash
# Installs the Debian packages pp needs to build and test (or, given names,
# those packages: the reference and benchmark environments' scripts). As root
# it runs apt-get; otherwise it prints the exact command and exits 1.
#   scripts/install-deps.sh [PACKAGE...]
set -eu
pkgs=(
	gcc make pkg-config            # build
	libopenblas-dev libopenblas0-openmp libjansson-dev libhdf5-dev libssl-dev zlib1g-dev libzstd-dev  # CPU path: BLAS (OpenMP build), configs, checkpoints (+ SHA-256), gzip traces and inputs, zstd inputs
	hdf5-tools jq mandoc man-db zstd  # tests: h5diff, JSON checks, man page lint and rendering, zstd inputs
	binutils                       # addr2line: the hang watchdog's symbolized stack traces
	python3-torch python3-h5py python3-numpy python3-venv python3-jsonschema  # reference model, benchmarks, trace checks
	slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge  # tests: one-node Slurm cluster on loopback
	libpmix-dev libpmix-bin openmpi-bin libopenmpi-dev  # PMIx bootstrap, MPI comm, mpirun tests
	sentencepiece bible-kjv bible-kjv-text unzip python3-pip  # tokenizer references: spm_encode/spm_train, the KJV corpus, PyPI downloads
	clang libclang-rt-14-dev       # libFuzzer targets (tests/fuzz/test_fuzz.sh)
	clang-format                   # tests/unit/test_format.sh: the tree as .clang-format formats it
)
[ $# -gt 0 ] && pkgs=("$@")
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd=(apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -ne 0 ]; then
	echo "pp needs these Debian packages; run as root:" >&2
	echo "  apt-get update && ${cmd[*]}" >&2
	exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
"${cmd[@]}" >/dev/null
