#!/usr/bin/env bash
# A rehearsal of a GPU machine's run on this machine: the pack of scripts/gpu-pack.sh
# unpacked and run in a minimal root that has what the GPU image has and
# nothing of pp's build machine: a shell, the core utilities, python3 with
# its standard library, the loader, and CUDA's libraries (bound from
# /usr/local/cuda), but no Debian development package, no pkg-config, no
# compiler, no jq and no HDF5 tools. In it, with a private mount namespace
# and chroot (root only):
#   - scripts/gpu-check.sh build test bench decode: the build stage takes
#     the pack (it cannot make), records the versions, and stops at "no GPU"
#     (exit 3);
#   - every binary of the pack loads (ldd finds every library) and each
#     tool answers --version;
#   - tests/gpu/test_gpu.sh: every check one SKIP "no GPU on this machine";
#     bench/gpu.sh and bench/gpu-decode.sh: exit 1 saying "no GPU";
#   - no script met a missing command.
# And on this machine: gpu-pack.sh refuses a pack that needs a newer glibc
# than the GPU image's (PP_GPU_IMAGE_GLIBC=2.17).
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1
checks=(pack glibc_too_new root gpu_check_build gpu_check_no_gpu binaries_load tools_run
	test_gpu_skips bench_no_gpu decode_no_gpu no_missing_command)
skip_all() {
	local c
	for c in "${checks[@]}"; do skip "gpu_pack/$c" "$1"; done
	exit 0
}
[ "$(id -u)" -eq 0 ] || skip_all "needs root (a mount namespace and chroot)"
[ -f build/obj/.variant-cuda ] || skip_all "pp was built without CUDA (nvcc not found, or CUDA=0)"
for c in unshare chroot readelf xz; do
	command -v $c >/dev/null || skip_all "no $c on this machine"
done
cuda=$(readlink -f /usr/local/cuda)
[ -d "$cuda" ] || skip_all "no /usr/local/cuda"
unshare -m true 2>/dev/null || skip_all "no private mount namespace here (unshare -m)"

check gpu_pack/pack eval 'scripts/gpu-pack.sh >$T/pack.log 2>&1 && [ -s .gpu/pp-gpu.tar.xz ]'
expect_fail gpu_pack/glibc_too_new 1 "need symbols newer than the GPU image's \(glibc 2.17" \
	env PP_GPU_IMAGE_GLIBC=2.17 scripts/gpu-pack.sh

# --- the root --------------------------------------------------------------------------
root=$T/root
# the commands the scripts call that the GPU image (Ubuntu 24.04) has
cmds=(bash sh env cat cp mv rm ls mkdir rmdir ln chmod touch date sleep uname hostname id head
	tail cut paste sort uniq tr wc tee grep sed awk find xargs basename dirname readlink
	realpath mktemp timeout sha256sum tar xz gzip stat du nproc seq expr od cmp diff true
	false kill ps ldd ldconfig)
make_root() {
	mkdir -p $root/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,tmp,dev,proc,root,work} $root$cuda || return 1
	ln -s usr/bin $root/bin && ln -s usr/lib $root/lib && ln -s usr/lib64 $root/lib64 &&
		ln -s usr/sbin $root/sbin && { [ "$cuda" = /usr/local/cuda ] || ln -s "$cuda" $root/usr/local/cuda; } || return 1
	chmod 1777 $root/tmp
	local c p lib
	for c in "${cmds[@]}"; do
		p=$(type -P $c) || { echo "no $c here"; return 1; }
		cp -L "$p" $root/usr/bin/$c || return 1
	done
	# python3 and its standard library (hard links: the same file system)
	cp -L /usr/bin/python3 $root/usr/bin/python3 &&
		py=$(/usr/bin/python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")') &&
		{ cp -al /usr/lib/$py $root/usr/lib/$py 2>/dev/null || cp -a /usr/lib/$py $root/usr/lib/$py; } || return 1
	# the libraries of every command, the loader included, and those the
	# pack leaves to the GPU image (the C library family, the C++ runtime:
	# what its binaries load from outside the pack and outside CUDA)
	mkdir -p $T/unpacked && tar -C $T/unpacked -xJf .gpu/pp-gpu.tar.xz || return 1
	{
		for p in $root/usr/bin/*; do ldd "$p" 2>/dev/null; done
		for p in $T/unpacked/bin/* $T/unpacked/tests/*; do
			LD_LIBRARY_PATH=$T/unpacked/lib ldd "$p" 2>/dev/null | grep -v "=> $T/unpacked/\|=> $cuda/\|=> /usr/local/cuda"
		done
	} |
		awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u |
		while read -r lib; do
			mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"
		done
	# the repository as a GPU machine gets it, with the pack
	mkdir -p $root/work/pp/.gpu &&
		git ls-files -z | tar --null -T - -cf - | tar -C $root/work/pp -xf - &&
		cp .gpu/pp-gpu.tar.xz $root/work/pp/.gpu/
}
check gpu_pack/root make_root

# --- in the root ------------------------------------------------------------------------------
cat >$root/work/rehearse.sh <<'EOF'
cd /work/pp || exit 1
for c in jq h5diff pkg-config cc make nvcc; do
	command -v $c >/dev/null && echo "present: $c"
done
bash scripts/gpu-check.sh build test bench decode /work/out/gc >/work/out/gc.txt 2>&1
echo "gpu-check exit $?" >>/work/out/gc.txt
. scripts/gpu-env.sh >/work/out/env.txt 2>&1 || echo "gpu-env failed" >>/work/out/env.txt
for f in build/bin/* build/tests/*; do
	ldd "$f" | grep 'not found' | sed "s|^|$f: |"
done >/work/out/ldd.txt
for t in build/bin/pp-*; do
	"$t" --version >/dev/null 2>>/work/out/tools.txt || echo "$t --version failed" >>/work/out/tools.txt
done
bash tests/gpu/test_gpu.sh >/work/out/test_gpu.txt 2>&1
bench/gpu.sh --budget 30 >/work/out/bench.txt 2>&1
echo "exit $?" >>/work/out/bench.txt
bench/gpu-decode.sh --budget 30 >/work/out/decode.txt 2>&1
echo "exit $?" >>/work/out/decode.txt
echo done >/work/out/done
EOF
mkdir -p $root/work/out
unshare -m bash -c "mount --bind /dev $root/dev && mount -t proc proc $root/proc &&
	mount --bind $cuda $root$cuda &&
	chroot $root /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
		/bin/bash /work/rehearse.sh" >$T/rehearse.log 2>&1
o=$root/work/out
# every check below reads what the rehearsal wrote: none passes without it
ran() { [ -f $o/done ] || { echo "the rehearsal did not finish: $(tail -n 5 $T/rehearse.log)"; return 1; }; }
check gpu_pack/gpu_check_build eval 'ran && ! grep "^present: " $T/rehearse.log &&
	grep -q "^build *pass .*built (cuda)" $o/gc/summary.txt && grep -q "unpacked .gpu/pp-gpu.tar.xz" $o/gc/build.txt &&
	grep -q "^glibc " $o/gc/versions.txt'
check gpu_pack/gpu_check_no_gpu eval 'ran && grep -q "gpu-check exit 3" $o/gc.txt && grep -q "no GPU on this machine" $o/gc.txt'
check gpu_pack/binaries_load eval 'ran && [ -f $o/ldd.txt ] && [ ! -s $o/ldd.txt ] && [ "$(ls build/bin | wc -l)" -ge 4 ] && ! grep -q failed $o/env.txt ||
	{ head -n 5 $o/ldd.txt $o/env.txt; false; }'
check gpu_pack/tools_run eval 'ran && { [ ! -s $o/tools.txt ] || { head -n 5 $o/tools.txt; false; }; }'
n=$(grep -sc '^SKIP: gpu/.*: no GPU on this machine$' $o/test_gpu.txt)
check gpu_pack/test_gpu_skips eval 'ran && [ "$n" -ge 20 ] && [ "$(grep -c "^\(PASS\|FAIL\): " $o/test_gpu.txt)" -eq 0 ]'
check gpu_pack/bench_no_gpu eval 'ran && grep -q "^exit 1$" $o/bench.txt && grep -q "no GPU on this machine" $o/bench.txt'
check gpu_pack/decode_no_gpu eval 'ran && grep -q "^exit 1$" $o/decode.txt && grep -q "no GPU" $o/decode.txt'
check gpu_pack/no_missing_command eval 'ran && ! grep -rh "command not found\|: not found$" $T/rehearse.log $o'
