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
#
# Those the machine provides must be new enough: the pack is refused
# (exit 1, naming the file and the version) when a binary or library in it
# needs a GLIBC or GLIBCXX symbol version newer than the GPU image's. The
# image's, as scripts/gpu-check.sh's versions.txt read them on the GPU
# H100 (2026-11-26, Ubuntu 24.04): glibc 2.39, libstdc++ up to
# GLIBCXX_3.4.33. PP_GPU_IMAGE_GLIBC and PP_GPU_IMAGE_GLIBCXX override them.
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
touch "$stage/obj/.variant-cuda" # what tests/gpu/test_gpu.sh looks for

# the libraries every binary loads, minus those the GPU machine provides
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libnvrtc|libnvJitLink)\.so'
for f in "$stage"/bin/* "$stage"/tests/*; do ldd "$f"; done |
	awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
	while read -r name path; do
		[[ $name =~ $system ]] && continue
		cp -L "$path" "$stage/lib/$name"
	done

# the newest symbol version of FAMILY (GLIBC, GLIBCXX) each file needs, as
# "version file" lines
needs() {
	local f v
	for f in "$stage"/bin/* "$stage"/tests/* "$stage"/lib/*; do
		v=$(readelf -V -W "$f" 2>/dev/null | grep -o "Name: $1_[0-9.]*" | sed "s/Name: $1_//" |
			sort -V | tail -n 1)
		[ -z "$v" ] || echo "$v ${f#"$stage"/}"
	done
}
image_glibc=${PP_GPU_IMAGE_GLIBC:-2.39} image_glibcxx=${PP_GPU_IMAGE_GLIBCXX:-3.4.33}
too_new=()
for fam in GLIBC:$image_glibc GLIBCXX:$image_glibcxx; do
	name=${fam%%:*} have=${fam#*:}
	while read -r v f; do
		[ "$(printf '%s\n%s\n' "$v" "$have" | sort -V | tail -n 1)" = "$have" ] ||
			too_new+=("$f needs ${name}_$v")
	done < <(needs "$name")
done
if [ ${#too_new[@]} -gt 0 ]; then
	echo "gpu-pack: ${#too_new[@]} file(s) need symbols newer than the GPU image's (glibc" \
		"$image_glibc, GLIBCXX_$image_glibcxx): $(printf '%s; ' "${too_new[@]:0:3}")..." >&2
	exit 1
fi

mkdir -p .gpu
# xz on every core at a middle level: a third of the time of the default
XZ_OPT=${XZ_OPT:--T0 -4} tar -C "$stage" -cJf .gpu/pp-gpu.tar.xz bin tests lib obj
echo "gpu-pack: .gpu/pp-gpu.tar.xz $(du -h .gpu/pp-gpu.tar.xz | cut -f1)" \
	"($(ls "$stage/bin" | wc -l) tools, $(ls "$stage/tests" | wc -l) test binaries, $(ls "$stage/lib" | wc -l) libraries)"
