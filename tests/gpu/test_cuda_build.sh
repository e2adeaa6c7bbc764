#!/usr/bin/env bash
# The CUDA build, checked on any machine (no GPU needed): kernels/cuda is
# compiled for sm_80 and sm_90 into the library, the tools link the CUDA
# runtime, cuBLASLt and cuDNN (never the driver library), they start without a GPU
# and device=cuda then fails with a clear message, and the CPU-only builds
# (make CUDA=0, the F64 test library) hold no CUDA. Every check is one
# counted SKIP when nvcc is absent, or when build/ is a CUDA=0 build.
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1
B=build
tiny="model=llama-tiny data=synthetic global_batch=8 microbatch=4 seq_len=32 steps=2"
# device=cuda without a usable GPU: usage error (2) with the CUDA error named
no_gpu='device=cuda: no usable CUDA device: .*\(CUDA error [0-9]+\)'

checks=(archs_sm80_sm90 library_holds_kernels links_cudart_cublaslt_cudnn no_driver_library
	starts_without_gpu no_gpu_message no_gpu_hidden_devices bf16_on_cpu bf16_no_gpu bad_attention_env
	pp_init_no_gpu tool_no_gpu
	make_cuda0_cpu_only f64_cpu_only)
skip_all() {
	local c
	for c in "${checks[@]}"; do skip "cuda_build/$c" "$1"; done
	exit 0
}
nvcc=$(command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
[ -n "$nvcc" ] || skip_all "nvcc not found: this machine builds the CPU backend only"
[ -f $B/obj/.variant-cuda ] || skip_all "build/ is a CPU-only build (make CUDA=0); run make"
gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')

# --- the kernels: machine code for both targets, in every object --------------------
# cuobjdump when the toolkit has it; else the fat binary's own entry headers
# (each .nv_fatbin section: a 16-byte header, then entries whose u32 at
# offset 0x1c is the SM version)
archs_of() {
	if command -v cuobjdump >/dev/null 2>&1; then
		cuobjdump --list-elf "$1" 2>/dev/null | grep -oE 'sm_[0-9]+' | sort -u
		return
	fi
	objcopy -O binary --only-section=.nv_fatbin "$1" "$T/fatbin" 2>/dev/null || return 1
	python3 - "$T/fatbin" <<'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
off, archs = 0, set()
while off + 16 <= len(b):
    magic, _, hs, size = struct.unpack_from('<IHHQ', b, off)
    if magic != 0xBA55ED50:
        break
    p = off + hs
    while p < off + hs + size:
        kind, _, ehs, psz = struct.unpack_from('<HHIQ', b, p)
        if kind == 2:  # an ELF cubin, not PTX
            archs.add('sm_%d' % struct.unpack_from('<I', b, p + 0x1c)[0])
        p += ehs + psz
    off += hs + size
print('\n'.join(sorted(archs)))
EOF
}
objs=("$B"/obj/kernels/cuda/*.o)
srcs=(kernels/cuda/*.cu)
bad=""
for o in "${objs[@]}"; do
	a=$(archs_of "$o" | tr '\n' ' ')
	[ "$a" = "sm_80 sm_90 " ] || bad="$bad $(basename "$o"): [${a% }]"
done
if [ ${#objs[@]} -ne ${#srcs[@]} ]; then
	fail cuda_build/archs_sm80_sm90 "${#objs[@]} objects in $B/obj/kernels/cuda for ${#srcs[@]} sources"
elif [ -n "$bad" ]; then
	fail cuda_build/archs_sm80_sm90 "want machine code for sm_80 and sm_90 only:$bad"
else
	pass cuda_build/archs_sm80_sm90
fi
n=$(objdump -h $B/libpp.a 2>/dev/null | grep -c '\.nv_fatbin')
check cuda_build/library_holds_kernels test "$n" -eq ${#srcs[@]}

# --- linking ----------------------------------------------------------------------
libs=$(ldd $B/bin/pp-train 2>&1)
links_cuda() {
	grep -q 'libcudart\.so' <<<"$libs" && grep -q 'libcublasLt\.so' <<<"$libs" &&
		grep -q 'libcudnn\.so' <<<"$libs"
}
check cuda_build/links_cudart_cublaslt_cudnn links_cuda
# the driver library is the GPU machine's, never linked: against its stub a
# program would not even start here
no_driver() { ! grep -q 'libcuda\.so' <<<"$libs"; }
check cuda_build/no_driver_library no_driver

# --- no GPU ----------------------------------------------------------------------------
# linked with CUDA, a CPU run touches no GPU
check cuda_build/starts_without_gpu env CUDA_VISIBLE_DEVICES=-1 pp-train $tiny device=cpu run_dir=$T/cpu --quiet
if [ "$gpu" -gt 0 ]; then
	skip cuda_build/no_gpu_message "this machine has a GPU (tests/gpu/test_gpu.sh runs on it)"
else
	expect_fail cuda_build/no_gpu_message 2 "$no_gpu" pp-train $tiny device=cuda run_dir=$T/cuda
fi
# with every device hidden the same path runs on a GPU machine too
expect_fail cuda_build/no_gpu_hidden_devices 2 "$no_gpu" \
	env CUDA_VISIBLE_DEVICES=-1 pp-train $tiny device=cuda run_dir=$T/hidden
# bf16 runs on the CUDA backend only: the CPU says so before any work
expect_fail cuda_build/bf16_on_cpu 2 'dtype=bf16: the cpu backend computes in fp32 only \(bf16 needs device=cuda\)' \
	pp-train $tiny device=cpu dtype=bf16 run_dir=$T/bf16cpu
expect_fail cuda_build/bf16_no_gpu 2 "$no_gpu" \
	env CUDA_VISIBLE_DEVICES=-1 pp-train $tiny device=cuda dtype=bf16 run_dir=$T/bf16hidden
# PP_CUDA_ATTENTION is read before any GPU is looked for: a wrong value is a
# usage error on any machine
expect_fail cuda_build/bad_attention_env 2 'PP_CUDA_ATTENTION=flash: expected cudnn .* or plain' \
	env PP_CUDA_ATTENTION=flash pp-train $tiny device=cuda run_dir=$T/att
init_no_gpu() {
	local err rc
	err=$(CUDA_VISIBLE_DEVICES=-1 pp-init $tiny device=cuda -o $T/init 2>&1 >/dev/null)
	rc=$?
	[ "$rc" -eq 2 ] && grep -qE -- "$no_gpu" <<<"$err" && [ ! -e $T/init ] ||
		{ echo "exit $rc, $T/init $(test -e $T/init && echo exists || echo absent): $err"; return 1; }
}
check cuda_build/pp_init_no_gpu init_no_gpu
tool_no_gpu() {
	local out rc
	out=$(CUDA_VISIBLE_DEVICES=-1 $B/tests/tool_cuda_check 2>&1)
	rc=$?
	[ "$rc" -eq 1 ] && grep -qE "^FAIL: cuda/init: $no_gpu" <<<"$out" || { echo "exit $rc: $out"; return 1; }
}
if [ -x $B/tests/tool_cuda_check ]; then
	check cuda_build/tool_no_gpu tool_no_gpu
else
	fail cuda_build/tool_no_gpu "$B/tests/tool_cuda_check is not built (make tests)"
fi

# --- the CPU-only builds (what make would run, not run) -----------------------------
plan() { make --no-print-directory -n -B "$@" 2>&1; }
cpu_only() { ! grep -qE 'nvcc|-DPP_CUDA|-lcudart|-lnccl|\.cu\b' <<<"$1"; }
plan_cpu=$(plan CUDA=0 B=$T/b $T/b/bin/pp-train)
cuda0_ok() { cpu_only "$plan_cpu" && grep -q 'kernels/cpu/attention.c' <<<"$plan_cpu"; }
check cuda_build/make_cuda0_cpu_only cuda0_ok
plan_f64=$(plan B=$T/b $T/b/tests/test_ops)
f64_ok() {
	cpu_only "$plan_f64" && grep -q -- '-DPP_F64' <<<"$plan_f64" &&
		! objdump -h $B/f64/libpp.a 2>/dev/null | grep -q '\.nv_fatbin' &&
		! nm $B/f64/libpp.a 2>/dev/null | grep -q pp_ops_cuda
}
check cuda_build/f64_cpu_only f64_ok
