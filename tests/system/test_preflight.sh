#!/usr/bin/env bash
# pp-init --check (libcommon/plan/preflight.c): alone, which checks this machine;
# under srun -n 4 on the local Slurm cluster, where every rank's wiring,
# device, collectives and run directory pass; and failing, naming what is at
# fault: a read-only run directory, a layout the job's ranks do not match, a
# model that does not fit in memory.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
cfg="--cfg $PP_ROOT/configs/tiny-llama.json"

# --- one process ----------------------------------------------------------------
out=$(pp-init --check $cfg run_dir=$T/one 2>$T/one.err)
rc=$?
check check/single_passes test $rc -eq 0
check check/single_table grep -qE "^run_dir +rank 0 +ok +$T/one writable" <<<"$out"
# no trace: the run_dir it made is gone again, one that was there stays, empty
check check/single_leaves_no_trace test ! -e $T/one
mkdir $T/was
pp-init --check $cfg run_dir=$T/was >/dev/null 2>&1
check check/single_keeps_existing_dir eval 'test -d $T/was && test -z "$(ls -A $T/was)"'
expect_fail check/single_too_big 1 "preflight check" pp-init --check --cfg $PP_ROOT/configs/llama2-70b.json device=cpu run_dir=$T/big
pp-init --check --cfg $PP_ROOT/configs/llama2-70b.json device=cpu run_dir=$T/big >$T/big.out 2>/dev/null
check check/names_memory grep -qE "^memory +rank 0 +FAIL +plan for pp rank 0: [0-9.]+ GiB > " $T/big.out
expect_fail check/plan_and_check 2 "exclude" pp-init --check --plan $cfg

# --- srun -n 4 on the local cluster --------------------------------------------------
names=(srun4_passes srun4_leaves_no_trace srun4_every_rank srun4_collectives srun4_bandwidth layout_mismatch read_only_fails read_only_named)
slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4) for n in "${names[@]}"; do skip "check/$n" "$SLURM_SKIP"; done; exit 0 ;;
*) fail check/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"; exit 1 ;;
esac
export OMP_NUM_THREADS=1
out=$(srun -n 4 --mpi=pmix pp-init --check $cfg dp=4 microbatch=2 run_dir=$T/four 2>$T/four.err)
rc=$?
echo "$out"
check check/srun4_passes test $rc -eq 0
check check/srun4_leaves_no_trace test ! -e $T/four
check check/srun4_every_rank test "$(grep -cE '^(wiring|device|run_dir|memory) +rank [0-3] +ok' <<<"$out")" -eq 16
check check/srun4_collectives test "$(grep -cE '^(allreduce|all_gather|sendrecv|alltoall) +[0-9]+ [KM]iB +ok +bus [0-9.]+ GB/s' <<<"$out")" -eq 16
check check/srun4_bandwidth grep -qE "^wiring +job +ok +4 ranks on 1 node" <<<"$out"
expect_fail check/layout_mismatch 1 "preflight" srun -n 4 --mpi=pmix pp-init --check $cfg dp=2 run_dir=$T/four
# a read-only file system as the run directory: the check fails naming it
mkdir -p $T/ro
if mount -t tmpfs -o ro,size=1m tmpfs $T/ro 2>$T/mount.err; then
	out=$(srun -n 4 --mpi=pmix pp-init --check $cfg dp=4 microbatch=2 run_dir=$T/ro/run 2>$T/ro.err)
	rc=$?
	umount $T/ro
	check check/read_only_fails test $rc -eq 1
	check check/read_only_named grep -qE "^run_dir +rank 3 +FAIL +$T/ro/run is not writable from .*Read-only file system" <<<"$out"
else
	skip check/read_only_fails "cannot mount a read-only tmpfs: $(cat $T/mount.err)"
	skip check/read_only_named "cannot mount a read-only tmpfs"
fi
