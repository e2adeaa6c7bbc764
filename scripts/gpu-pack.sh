#!/usr/bin/env bash
# Packs a CUDA build of pp for a GPU machine that cannot build it: a bare
# CUDA image has nvcc, the CUDA libraries and PyTorch, but none of the
# Debian development packages pp links (HDF5, jansson, PMIx, Open MPI,
# OpenBLAS, libcrypto) and no network to fetch them.
#
#   scripts/gpu-pack.sh            build here (make tests), then pack
#
# Writes .gpu/pp-gpu.tar.xz (git ignores .gpu/): build/bin, build/tests and
# build/lib, the shared libraries those binaries load except the C library
# family, the C++ runtime and CUDA's own libraries (cudart, cuBLAS(Lt),
# NCCL, cuDNN), which the GPU machine has in its own versions. On the GPU
# machine, `. scripts/gpu-env.sh` unpacks it and sets the library path.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
	{ echo "gpu-pack: nvcc not found: a GPU pack needs the CUDA build" >&2; exit 2; }
make -j"$(nproc)" tests >/dev/null
[ -f build/obj/.variant-cuda ] || { echo "gpu-pack: build/ is not a CUDA build" >&2; exit 1; }

stage=build/gpu-pack
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/tests" "$stage/lib" "$stage/obj"
cp build/bin/pp-* "$stage/bin/"
find build/tests -maxdepth 1 -type f -perm -u+x -exec cp {} "$stage/tests/" \;
touch "$stage/obj/.variant-cuda" # what tests/test_gpu.sh looks for

# the libraries every binary loads, minus those the GPU machine provides
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libnvrtc|libnvJitLink)\.so'
for f in "$stage"/bin/* "$stage"/tests/*; do ldd "$f"; done |
	awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
	while read -r name path; do
		[[ $name =~ $system ]] && continue
		cp -L "$path" "$stage/lib/$name"
	done

mkdir -p .gpu
tar -C "$stage" -cJf .gpu/pp-gpu.tar.xz bin tests lib obj
echo "gpu-pack: .gpu/pp-gpu.tar.xz $(du -h .gpu/pp-gpu.tar.xz | cut -f1)" \
	"($(ls "$stage/bin" | wc -l) tools, $(ls "$stage/tests" | wc -l) test binaries, $(ls "$stage/lib" | wc -l) libraries)"
