# Sourced on a GPU machine (`. scripts/gpu-env.sh`) from the repository root:
# unpacks .gpu/pp-gpu.tar.xz (made by scripts/gpu-pack.sh) into build/ when
# there is one, and puts build/lib and the machine's own CUDA libraries
# (cuBLASLt, NCCL, cuDNN, and NVRTC, which cuDNN's fused attention engines
# load to compile kernels: under /usr/local/cuda or in PyTorch's nvidia-*
# wheels) on LD_LIBRARY_PATH and build/bin on PATH. Returns non-zero, saying
# which library is missing, when pp-train still cannot load.
gpu_env() {
	local sum
	if [ -f .gpu/pp-gpu.tar.xz ]; then # unpacked again when the pack changes
		sum=$(sha256sum .gpu/pp-gpu.tar.xz | cut -d' ' -f1)
		if [ "$sum" != "$(cat build/.gpu-unpacked 2>/dev/null)" ]; then
			mkdir -p build && tar -C build -xJf .gpu/pp-gpu.tar.xz &&
				echo "$sum" >build/.gpu-unpacked || return 1
		fi
	fi
	[ -x build/bin/pp-train ] || { echo "gpu-env: no build/bin/pp-train: run make, or scripts/gpu-pack.sh on the build machine" >&2; return 1; }
	local dirs=$PWD/build/lib d lib py
	for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
		d=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }')
		[ -n "$d" ] && continue # the loader finds it already
		py=$(python3 -c 'import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)
		# the trailing slashes follow a lib64 that links to lib
		d=$(find /usr/local/cuda*/lib64/ /usr/local/cuda*/lib/ /usr/local/cuda*/targets/*/lib/ \
			/usr/local/lib /opt \
			${py:+"$py/nvidia"} -name "$lib" 2>/dev/null | head -n 1)
		[ -n "$d" ] && dirs="$dirs:$(dirname "$d")"
	done
	export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$PWD/build/bin:$PATH"
	local missing
	missing=$(ldd build/bin/pp-train | awk '/not found/ { print $1 }' | paste -sd' ' -)
	[ -z "$missing" ] || { echo "gpu-env: pp-train cannot load: $missing" >&2; return 1; }
}
gpu_env
