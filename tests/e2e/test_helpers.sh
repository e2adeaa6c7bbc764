#!/usr/bin/env bash
# The shell tests' helpers (tests/tools/lib.sh) and the GPU checks built on them,
# with jq and the HDF5 command-line tools hidden from PATH, as on the GPU
# machines, which have neither: each comparison must pass on a right
# result, fail on a wrong one, and fail when it has nothing to compare.
#   - losses, loss_diff + within, same_losses: on two identical runs, on
#     runs with different learning rates, on a run that logged no loss;
#   - same_tensors (tool_h5_same): on identical checkpoints, different
#     ones, a missing group, a missing file;
#   - tests/gpu/test_gpu.sh with PP_TEST_GPU_DEVICE=cpu: its comparisons pass,
#     and with PP_TEST_GPU_EXTRA=lr=... (a wrong result on the side under
#     test) every loss comparison fails.
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1

# a PATH of links to every command on PATH but jq and the HDF5 tools
hidden=$T/bin
mkdir -p $hidden
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	for f in "$d"/*; do
		n=${f##*/}
		case $n in jq | h5diff | h5dump | h5ls | h5cc) continue ;; esac
		[ -x "$f" ] && [ ! -e "$hidden/$n" ] && ln -s "$f" "$hidden/$n"
	done
done
PATH=$hidden
check helpers/tools_hidden eval '! command -v jq && ! command -v h5diff && command -v pp-train >/dev/null &&
	command -v python3 >/dev/null'

run="model=llama-tiny data=synthetic global_batch=4 microbatch=2 seq_len=16 steps=6 log_period=1 checkpoint_period=6"
pp-train $run run_dir=$T/a --quiet 2>$T/a.log &&
	pp-train $run run_dir=$T/b --quiet 2>$T/b.log &&
	pp-train $run lr=1e-3 run_dir=$T/other --quiet 2>$T/other.log ||
	{ fail helpers/runs "pp-train: $(tail -n 2 $T/*.log)"; exit 1; }
mkdir -p $T/empty && : >$T/empty/metrics.jsonl
mkdir -p $T/none

# --- losses ---------------------------------------------------------------------------
check helpers/losses_read eval '[ "$(losses $T/a | wc -l)" -eq 6 ] && [ "$(losses $T/a | head -n 1 | cut -d" " -f1)" = 1 ]'
check helpers/losses_empty_fails eval '! losses $T/empty 2>/dev/null'
check helpers/losses_missing_fails eval '! losses $T/none 2>/dev/null'

# --- loss_diff + within: the training comparisons of test_gpu.sh ------------------------------
check helpers/loss_diff_right eval 'within "$(loss_diff $T/a $T/b)" 1e-6'
check helpers/loss_diff_wrong eval '! within "$(loss_diff $T/a $T/other)" 1e-4'
check helpers/loss_diff_empty eval '! within "$(loss_diff $T/empty $T/empty 2>/dev/null)" 1e-4'
check helpers/loss_diff_missing eval '! within "$(loss_diff $T/none $T/a 2>/dev/null)" 1e-4'
check helpers/within_bad_number eval '! within nan 1 && ! within "" 1 && ! within inf 1 && within 0 0'

# --- same_losses: the resume checks ---------------------------------------------------------
check helpers/same_losses_right same_losses $T/a $T/b 3
check helpers/same_losses_wrong eval '! same_losses $T/a $T/other 3 2>/dev/null'
check helpers/same_losses_empty eval '! same_losses $T/empty $T/empty 2>/dev/null'
check helpers/same_losses_nothing_after eval '! same_losses $T/a $T/b 6 2>/dev/null'

# --- same_tensors: checkpoints bitwise ------------------------------------------------------
ck() { echo "$1/checkpoints/step_00000006/shard-pp000-tp000.h5"; }
check helpers/same_tensors_right same_tensors "$(ck $T/a)" "$(ck $T/b)"
check helpers/same_tensors_wrong eval '! same_tensors "$(ck $T/a)" "$(ck $T/other)" 2>/dev/null'
check helpers/same_tensors_no_group eval '! same_tensors "$(ck $T/a)" "$(ck $T/b)" /no_such_group 2>/dev/null'
check helpers/same_tensors_no_file eval '! same_tensors "$(ck $T/a)" $T/none/x.h5 2>/dev/null'

# --- test_gpu.sh's own checks, without jq and h5diff -------------------------------------------
PP_TEST_GPU_DEVICE=cpu bash tests/gpu/test_gpu.sh >$T/gpu-right.txt 2>&1
# the nine loss comparisons of the training runs (six families on cuda,
# llama on cudnn, packed documents and LoRA on cuda: the device side)
cmp_re='gpu/[a-z]*_\(cuda\|cudnn\)_vs_cpu'
check helpers/gpu_checks_pass eval '[ "$(grep -c "^PASS: $cmp_re\$" $T/gpu-right.txt)" -eq 9 ] &&
	grep -q "^PASS: gpu/resume_bitwise$" $T/gpu-right.txt && ! grep -q "^FAIL: " $T/gpu-right.txt'
PP_TEST_GPU_DEVICE=cpu PP_TEST_GPU_EXTRA=lr=1e-3 bash tests/gpu/test_gpu.sh >$T/gpu-wrong.txt 2>&1
check helpers/gpu_checks_fail_wrong eval '[ "$(grep -c "^FAIL: $cmp_re: " $T/gpu-wrong.txt)" -eq 9 ] &&
	! grep -q "^PASS: $cmp_re\$" $T/gpu-wrong.txt'
