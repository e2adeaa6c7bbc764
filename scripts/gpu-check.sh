#!/usr/bin/env bash
# Builds, checks and benchmarks pp on a machine with one GPU, in stages that
# each fit in one 10-minute command, and collects every log and result in
# one directory.
#
#   scripts/gpu-check.sh [--smoke] [build|test|bench|a3mega|decode|fp8|sim]... [OUTDIR]
#
# Stages (default: build and test; each named stage runs build first):
#   build   make -j$(nproc) tests (incremental; every other stage runs it
#           first, so a stage alone works on a fresh checkout), or, on a
#           machine without pp's build dependencies (pkg-config finds no
#           HDF5, jansson, libcrypto, PMIx or MPI) where .gpu/pp-gpu.tar.xz
#           was carried in (scripts/gpu-pack.sh), unpacks it; then the
#           versions (nvidia-smi, driver, nvcc, cuDNN, NCCL, gcc, python,
#           torch, transformers, commit) into versions.txt. Stops here with
#           exit status 3 and says so when the machine has no GPU.
#   test    tests/gpu/test_gpu.sh: every CUDA op against the CPU backend,
#           pp-train device=cuda against device=cpu for each tiny family,
#           a bitwise resume on the GPU.
#   bench   bench/gpu.sh: llama-1b training at seq 2048 and 4096, pp
#           against PyTorch (table and JSON), then pp-train's per-op
#           profile (--profile: PP_CUDA_PROFILE=1).
#   a3mega  bench/a3mega.sh: MaxText's A3 Mega recipe (Llama-2 7B, 4 x 4096
#           tokens per GPU, bf16, minimal_flash) scaled to one GPU (fsdp 1,
#           as many of the 7B's layers as fit), its MFU against MaxText's 55%.
#   decode  bench/gpu-decode.sh: batch-1 decode of llama-1b and llama2-7b
#           with pp-decode, against the measured copy bandwidth, then
#           pp-decode's per-op profile.
#   fp8     bench/fp8.sh: fp8.recipe=delayed and current against bf16 on
#           llama-1b and on as many llama2-7b layers as fit, tokens/s and
#           the loss curves.
#   sim     bench/simulate.sh: pp-init --simulate calibrated on llama-1b at
#           seq 2048 (pp-init --calibrate of its profile), its predictions
#           for seq 4096 and the A3 Mega run against their measured steps
#           (goal: within 15%).
# Each stage runs under a limit of PP_GPU_CHECK_STAGE_LIMIT seconds
# (default 470: under 8 minutes) and prints its time. OUTDIR/summary.txt
# and OUTDIR/summary.json are rewritten before and after every stage (a
# stage still running shows as "running"), so a command killed from
# outside still leaves what it had; the run ends with the summary table.
#
# OUTDIR (default build/gpu-check) receives per stage STAGE.log (its
# standard error: progress, logs) and its results (standard output):
# build.txt + versions.txt, test-gpu.txt, and bench-STAGE.txt +
# bench-STAGE.json for the others (bench-gpu, bench-a3mega, bench-decode,
# bench-fp8, bench-simulate). The terminal gets the results, the
# end of a failed stage's log and the summary. With no OUTDIR and $OUT set
# (a folder collected after the run, for a few files only), OUTDIR is a
# scratch directory and $OUT gets two files, rewritten after every stage:
# gpu-check.tgz (all of OUTDIR) and summary.txt.
#
# --smoke runs the stages on the CPU (test: PP_TEST_GPU_DEVICE=cpu, where
# the op check skips; bench, decode: their --smoke modes) and skips the GPU
# requirement: a check of this script on a machine without a GPU
# (tests/e2e/test_bench.sh). Without it a SKIP line of tests/gpu/test_gpu.sh fails
# the test stage unless it is marked [expected] (the shapes cuDNN refuses
# by design, listed in tests/gpu/test_gpu.sh).
#
# On a GPU machine without pp's build dependencies (no Debian build
# packages, no network):
#   1. scripts/gpu-pack.sh on the build machine: .gpu/pp-gpu.tar.xz (make
#      tests, then the binaries and the libraries they load).
#   2. Copy the working tree with .gpu/ there and run
#      "bash scripts/gpu-check.sh build test decode" (under 10 minutes).
#   3. Then "bash scripts/gpu-check.sh bench" (under 10 minutes).
# With $OUT set, each run's outputs are $OUT/gpu-check.tgz and
# $OUT/summary.txt.
# Measured 2026-11-26 on an H100: build (unpack) 4 s, test 34 s, decode
# 52 s, bench 123 s (PyTorch's compile included); the start about a
# minute. Each stage's limit keeps the worst case of a call under its 10
# minutes.
#
# Exit status: 0 every stage passed; 1 a stage failed; 2 usage; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
self=$root/scripts/gpu-check.sh
usage() { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$self"; }

smoke=0 stages=() out=
for a in "$@"; do
	case $a in
	-h | --help) usage; exit 0 ;;
	--smoke) smoke=1 ;;
	build | test | bench | a3mega | decode | fp8 | sim) stages+=("$a") ;;
	-*) echo "gpu-check: unknown option '$a' (see --help)" >&2; exit 2 ;;
	*)
		[ -z "$out" ] || { echo "gpu-check: '$a' is not a stage (build, test, bench, a3mega, decode, fp8, sim) and OUTDIR is already $out" >&2; exit 2; }
		out=$a
		;;
	esac
done
[ ${#stages[@]} -gt 0 ] || stages=(build test)
# build first, once, whatever was asked
run=(build)
for s in "${stages[@]}"; do
	[[ " ${run[*]} " == *" $s "* ]] || run+=("$s")
done
archive=
if [ -z "$out" ] && [ -n "${OUT:-}" ]; then
	archive=$OUT/gpu-check.tgz
	out=$(mktemp -d /tmp/gpu-check.XXXXXX) || exit 1
fi
out=${out:-$root/build/gpu-check}
mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 1; }
out=$(cd "$out" && pwd)
limit=${PP_GPU_CHECK_STAGE_LIMIT:-470}
[[ $limit =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: PP_GPU_CHECK_STAGE_LIMIT=$limit: expected seconds" >&2; exit 2; }
smoke_arg=()
[ "$smoke" = 0 ] || smoke_arg=(--smoke)

failed=0
# record STAGE STATUS SECONDS DETAIL: one row of the summary, which is
# written out again at once
record() {
	python3 -c 'import json, sys
s, st, t, d = sys.argv[1:]
print(json.dumps({"stage": s, "status": st, "seconds": int(t) if t.isdigit() else None, "detail": d}))' \
		"$1" "$2" "$3" "$4" >>"$out/summary.jsonl"
	[ "$2" = pass ] || [ "$2" = running ] || failed=1
	summary >/dev/null
	if [ -n "$archive" ]; then
		tar -czf "$archive.tmp" -C "$out" . && mv "$archive.tmp" "$archive" &&
			cp "$out/summary.txt" "$(dirname "$archive")/summary.txt"
	fi
}
# summary: OUTDIR/summary.txt and summary.json from the rows so far (a
# stage's last row wins: "running" until it ends), on stdout too
summary() {
	python3 - "$out" "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)" <<'EOF' | tee "$out/summary.txt"
import json, os, sys
out, when = sys.argv[1:]
rows = {}
for line in open(os.path.join(out, "summary.jsonl")):
    r = json.loads(line)
    rows[r["stage"]] = r  # first position kept, last row of a stage wins
rows = list(rows.values())
print(f"# gpu-check: {when}, outputs in {out}")
print(f"{'stage':<8} {'status':<8} {'s':>6}  detail")
for r in rows:
    t = "-" if r["seconds"] is None else r["seconds"]
    print(f"{r['stage']:<8} {r['status']:<8} {t:>6}  {r['detail']}")
tmp = os.path.join(out, "summary.json.tmp")
with open(tmp, "w") as f:
    json.dump(rows, f, indent=1)
os.replace(tmp, os.path.join(out, "summary.json"))
EOF
}
rm -f "$out/summary.jsonl"

# stage_run NAME RESULT CMD...: CMD under the stage limit, its stdout into
# RESULT, its stderr into NAME.log; prints RESULT, and on a failure the end
# of the log (the whole of both is in OUTDIR); sets $rc and $secs
stage_run() {
	local name=$1 result=$2; shift 2
	local t0=$SECONDS
	echo "==== gpu-check: $name: $*"
	record "$name" running - "started $(date -u '+%H:%M:%S UTC'), limit ${limit} s; log in $out/$name.log"
	timeout --kill-after=15 "$limit" "$@" >"$result" 2>"$out/$name.log"
	rc=$?
	secs=$((SECONDS - t0))
	if [ "$name" = build ]; then
		tail -n 2 "$result"
	else
		cat "$result"
	fi
	if [ "$rc" -ne 0 ]; then
		echo "---- last lines of $out/$name.log"
		tail -n 15 "$out/$name.log"
	fi
	echo "==== gpu-check: $name: exit $rc after $secs s"
}
limit_hit() { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }

versions() {
	echo "commit    $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
	echo "kernel    $(uname -srm)"
	echo "cpu       $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	local nvcc
	nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	echo "nvcc      $("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
	echo "gcc       $(command -v cc >/dev/null && cc --version | head -n 1 || echo "no cc")"
	# what the pack may need at most (scripts/gpu-pack.sh checks it)
	echo "glibc     $(ldd --version 2>/dev/null | head -n 1)"
	local cxx
	cxx=$(ldconfig -p 2>/dev/null | awk '$1 == "libstdc++.so.6" { print $NF; exit }')
	echo "libstdc++ ${cxx:-not found}$([ -n "$cxx" ] && grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$cxx" | sort -uV | tail -n 1 | sed 's/^/, newest /')"
	local inc=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$nvcc" 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}/include h
	h=$(ls "$inc/cudnn_version.h" /usr/include/cudnn_version.h /usr/include/*/cudnn_version.h 2>/dev/null | head -n 1)
	echo "cudnn     $([ -n "$h" ] && awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{v=v (v ? "." : "") $3} END {print v}' "$h" || echo 'no cudnn_version.h')"
	h=$(ls "$inc/nccl.h" /usr/include/nccl.h 2>/dev/null | head -n 1)
	echo "nccl      $([ -n "$h" ] && awk '/define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v ? "." : "") $3} END {print v}' "$h" || echo 'no nccl.h')"
	echo "python    $(python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo 'not found')"
	echo "torch     $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "no GPU")' 2>/dev/null || echo 'not importable')"
	echo "transformers $(HF_HUB_OFFLINE=1 python3 -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo 'not importable')"
	echo "pp build  $(ls build/obj/.variant-* 2>/dev/null | sed 's/.*variant-//')"
	echo "---- nvidia-smi"
	if command -v nvidia-smi >/dev/null; then nvidia-smi 2>&1; else echo "no nvidia-smi on this machine"; fi
	nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null || true
}

# whether make can build pp here: the pack stands in for it only where it
# cannot, never over a build of the tree as it is
can_make() {
	command -v pkg-config >/dev/null && pkg-config --exists jansson libcrypto pmix ompi-c &&
		{ pkg-config --exists hdf5 || pkg-config --exists hdf5-serial; }
}

for stage in "${run[@]}"; do
	case $stage in
	build)
		if [ -f .gpu/pp-gpu.tar.xz ] && ! can_make; then
			# a build packed elsewhere (scripts/gpu-pack.sh): this machine
			# lacks pp's build dependencies
			stage_run build "$out/build.txt" bash -c '. scripts/gpu-env.sh && echo "unpacked .gpu/pp-gpu.tar.xz"'
			[ "$rc" -ne 0 ] || . scripts/gpu-env.sh
			what="unpacking .gpu/pp-gpu.tar.xz"
		else
			stage_run build "$out/build.txt" make -j"$(nproc)" tests
			what=make
		fi
		if [ "$rc" -ne 0 ]; then
			record build fail $secs "$what exited $rc: $(grep -m1 -E 'error:|Error [0-9]|gpu-env:' "$out/build.log" || tail -n 1 "$out/build.log")"
			break
		fi
		versions >"$out/versions.txt" 2>&1
		cat "$out/versions.txt"
		variant=$(ls build/obj/.variant-* 2>/dev/null | sed 's/.*variant-//')
		gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
		if [ "$smoke" = 0 ] && [ "${gpus:-0}" -eq 0 ]; then
			record build pass $secs "built ($variant)"
			record gpu "no-GPU" - "nvidia-smi lists no GPU: test, bench and decode need one"
			echo "gpu-check: no GPU on this machine (nvidia-smi lists none): pp is built ($variant build), but the test, bench and decode stages need a GPU"
			summary
			exit 3
		fi
		if [ "$smoke" = 0 ] && [ "$variant" != cuda ]; then
			record build fail $secs "pp was built without CUDA (nvcc not found, or CUDA=0)"
			break
		fi
		record build pass $secs "built ($variant); $(nvidia-smi -L 2>/dev/null | head -n 1 || echo 'smoke: no GPU needed')"
		;;
	test)
		if [ "$smoke" = 1 ]; then
			stage_run test "$out/test-gpu.txt" env PP_TEST_GPU_DEVICE=cpu bash tests/gpu/test_gpu.sh
		else
			stage_run test "$out/test-gpu.txt" bash tests/gpu/test_gpu.sh
		fi
		r=$out/test-gpu.txt
		unexpected=$(grep '^SKIP: ' "$r" | grep -vc ' \[expected\]$')
		counts="$(grep -c '^PASS: ' "$r") passed, $(grep -c '^FAIL: ' "$r") failed, $(grep -c '^SKIP: ' "$r") skipped ($unexpected unexpected)"
		if limit_hit; then
			record test fail $secs "ran past the ${limit} s stage limit"
		elif [ "$rc" -eq 0 ] && [[ $counts == *" 0 failed, "* ]] && [[ $counts != "0 passed"* ]] &&
			{ [ "$unexpected" -eq 0 ] || [ "$smoke" = 1 ]; }; then
			record test pass $secs "$counts"
		else
			record test fail $secs "$counts, exit $rc$(grep -E '^(FAIL|SKIP): ' "$r" | grep -v ' \[expected\]$' | head -n 3 | sed 's/^/; /' | tr -d '\n')"
		fi
		;;
	bench | a3mega | decode | fp8 | sim)
		profile=(--profile)
		case $stage in
		bench) script=bench/gpu.sh name=bench-gpu ;;
		a3mega) script=bench/a3mega.sh name=bench-a3mega ;;
		fp8) script=bench/fp8.sh name=bench-fp8 profile=() ;;
		sim) script=bench/simulate.sh name=bench-simulate profile=() ;;
		*) script=bench/gpu-decode.sh name=bench-decode ;;
		esac
		# the script's own budget ends it, table written, before the stage limit kills it
		stage_run "$stage" "$out/$name.txt" "$script" "${smoke_arg[@]}" "${profile[@]}" --budget $((limit > 90 ? limit - 45 : limit / 2)) \
			--json "$out/$name.json"
		if limit_hit; then
			record "$stage" fail $secs "ran past the ${limit} s stage limit"
		elif [ "$rc" -eq 0 ]; then
			record "$stage" pass $secs "$(python3 - "$out/$name.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
if d["bench"] == "gpu":
    print("; ".join(f"seq {r['seq']}: pp/torch {r['pp_over_torch']:.3f}" for r in d["rows"]))
elif d["bench"] == "fp8":
    print("; ".join(f"{r['model']} {r['recipe']}: {r['speedup']:.2f}x" for r in d["rows"]
                    if r["recipe"] != "none"))
elif d["bench"] == "simulate":
    print("; ".join(f"{r['run']}: predicted/measured {r['ratio']:.3f}" for r in d["rows"]))
elif d["bench"] == "a3mega":
    print(f"{d['layers']} layers: {d['tokens_per_s']:.1f} tok/s"
          + (f", MFU {100 * d['mfu']:.1f}% (MaxText 55%)" if d["mfu"] else ""))
else:
    print("; ".join(f"{r['model']}: {r['tokens_per_s']:.1f} tok/s"
                    + (f", MBU {100 * r['mbu']:.1f}%" if r["mbu"] else "") for r in d["rows"]))
EOF
)"
		else
			record "$stage" fail $secs "$script exited $rc: $(grep -E "^(gpu|gpu-decode|a3mega|fp8|simulate): " "$out/$stage.log" | grep -E 'fail|not found|no GPU|rejected' | head -n 2 | tr '\n' ' ')"
		fi
		;;
	esac
done
summary
exit $failed
