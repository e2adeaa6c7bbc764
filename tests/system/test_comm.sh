#!/usr/bin/env bash
# Rank bootstrap (libcommon/comm/boot.h) and the comm interface (libcommon/comm/comm.h,
# "mpi" backend) under every launcher: no launcher (singleton), mpirun, and
# srun --mpi=pmix on a one-node Slurm cluster; srun --mpi=none refused with a
# clear message; a rank killed (or stuck) in the middle of an operation makes
# the others exit non-zero within the timeout, naming it. With CUDA present,
# the "nccl" backend too (a clear error where there is no GPU). The
# nonblocking calls are checked like the others, and a stuck or killed rank
# while the others wait for one.
#
# build/tests/tool_comm_check (tests/tools/tool_comm_check.c, built by make tests)
# runs the checks as N ranks; this script forwards rank 0's PASS/FAIL lines,
# labelled with the launcher.
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1

if ! pkg-config --exists pmix 2>/dev/null || ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
	skip comm/all "libpmix-dev or openmpi missing (scripts/install-deps.sh installs them)"
	exit 0
fi

# --- build ------------------------------------------------------------------------
warn="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror"
# The Makefile compiles every libcommon/ source with plain flags: without the
# PMIx/MPI headers these files must still compile (to stubs), and comm/nccl.c
# to nothing without -DPP_CUDA.
plain_build() {
	local f
	for f in comm/boot comm/comm comm/mpi comm/nccl; do
		cc $warn -c libcommon/$f.c -o $T/plain-${f//\//-}.o 2>>$T/plain.log || return 1
	done
}
check comm/builds_without_pmix_mpi_flags plain_build || head -n 5 $T/plain.log
bin=$PP_ROOT/build/tests/tool_comm_check
[ -x $bin ] || { fail comm/build "$bin is not built (make tests)"; exit 1; }
pass comm/build

# --- helpers ----------------------------------------------------------------------
# Every run is bounded: a hang is a failure, never a stuck test.
LIMIT=90
mpirun=(mpirun --allow-run-as-root --oversubscribe)

# run_checks LABEL MIN CMD...: runs the full check program; forwards its
# counted lines as "comm[LABEL]: ...", then one line on the run itself (exit
# status, at least MIN checks passed, no FAIL from any rank).
run_checks() {
	local label=$1 min=$2 out=$T/run.out err=$T/run.err rc np nf
	shift 2
	timeout $LIMIT "$@" >$out 2>$err
	rc=$?
	sed -nE "s/^(PASS|FAIL|SKIP): /\1: comm[$label]: /p" $out
	np=$(grep -c '^PASS: ' $out)
	nf=$(grep -c '^FAIL: ' $out)
	if [ $rc -eq 0 ] && [ "$nf" -eq 0 ] && [ "$np" -ge "$min" ]; then
		pass "comm[$label]: exit 0, $np checks passed"
	else
		fail "comm[$label]" "exit $rc, $np passed (want >= $min), $nf failed; stderr: $(tail -n 5 $err | tr '\n' ' ')"
	fi
}

# fault LABEL OUT ERR CMD...: runs a fault scenario (no checks: init, then
# the fault) with a 5 s communicator timeout; sets rc and secs (wall time,
# launcher start-up included).
fault() {
	local label=$1 out=$2 err=$3 t0=$EPOCHREALTIME
	shift 3
	timeout $LIMIT env PP_CHECK_TIMEOUT=5 "$@" >$out 2>$err
	rc=$?
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	echo "# $label: exit $rc after $secs s"
}
# within SECONDS: the last fault run ended in time (not killed by timeout(1)).
# BOUND: the 5 s timeout plus launcher start-up and teardown on a loaded
# machine; the survivors' own messages say how long the operation waited.
BOUND=15
within() { [ "$rc" -ne 124 ] && awk -v s="$secs" -v m="$1" 'BEGIN { exit !(s < m) }'; }
# survivors_named FILE OP RANKS...: each listed rank reported, for OP, that
# rank 2 (by pid and host) has exited, less than 5 s (the timeout) into it
survivors_named() {
	local f=$1 op=$2 r
	shift 2
	for r in "$@"; do
		grep -qE "\(rank $r\): $op on 'world' \(rank $r of 4\) failed after [0-4] s: rank 2 \(pid [0-9]+ on host [^)]+\) has exited" "$f" || return 1
	done
}
# srun_tasks FILE STATUS: the tasks srun reported with STATUS ("Killed",
# "Exited with exit code 1"), sorted: "tasks 0-1,3: ..." -> "0 1 3 "
srun_tasks() {
	sed -nE "s/.* tasks? ([0-9,-]+): $2\$/\1/p" "$1" | tr ',' '\n' |
		awk -F- '{ for (i = $1; i <= ($2 == "" ? $1 : $2); i++) print i }' | sort -n | tr '\n' ' '
}

# --- singleton: no launcher ----------------------------------------------------------
run_checks singleton 30 $bin
check comm/singleton_is_rank_0_of_1 grep -q '^# mpi: 1 rank(s)' $T/run.out

# --- mpirun -------------------------------------------------------------------------
run_checks "mpirun -n 4" 70 "${mpirun[@]}" -n 4 $bin
check comm/mpirun_4_ranks grep -q '^# mpi: 4 rank(s), 4 on this host' $T/run.out
# odd sizes (summary line only)
for n in 3 5; do
	timeout $LIMIT "${mpirun[@]}" -n $n $bin >$T/n$n.out 2>$T/n$n.err
	rc=$?
	check comm/mpirun_${n}_ranks_all_pass test $rc -eq 0 -a "$(grep -c '^FAIL' $T/n$n.out)" -eq 0 \
		-a "$(grep -c '^PASS' $T/n$n.out)" -ge 50
done

# kill -9 of rank 2 mid-allreduce, and while ranks wait to receive from it.
# --enable-recovery keeps mpirun from killing the survivors itself, so that
# our own detection is what ends them; each reports and _exits 1.
rec=("${mpirun[@]}" --enable-recovery -x PP_CHECK_TIMEOUT -x PP_CHECK_FAULT -x PP_CHECK_FAULT_RANK -x PP_CHECK_FAULT_OP -x PP_CHECK_ON_ERROR)
# (iallreduce: the survivors wait for a nonblocking allreduce; its
# messages say "allreduce")
for op in allreduce recv iallreduce; do
	fault "mpirun kill rank 2 in $op" $T/k$op.out $T/k$op.err \
		PP_CHECK_FAULT=kill PP_CHECK_FAULT_RANK=2 PP_CHECK_FAULT_OP=$op PP_CHECK_ON_ERROR=exit \
		"${rec[@]}" -n 4 sh -c "$bin; echo \"rank \$OMPI_COMM_WORLD_RANK exit \$?\" >>$T/k$op.exits"
	check comm/mpirun_kill_in_${op}_survivors_name_rank_2 survivors_named $T/k$op.out ${op#i} 0 1 3
	check comm/mpirun_kill_in_${op}_survivors_exit_1 test "$(grep -c 'exit 1$' $T/k$op.exits)" -eq 3
	check comm/mpirun_kill_in_${op}_bounded within $BOUND
done
# the same without recovery: mpirun ends the job itself and names the rank
fault "mpirun kill rank 2" $T/kill.out $T/kill.err PP_CHECK_FAULT=kill PP_CHECK_FAULT_RANK=2 \
	"${mpirun[@]}" -x PP_CHECK_TIMEOUT -x PP_CHECK_FAULT -x PP_CHECK_FAULT_RANK -n 4 $bin
check comm/mpirun_kill_job_fails test $rc -ne 0 -a $rc -ne 124
check comm/mpirun_kill_names_rank_2 grep -q 'process rank 2 .*signal 9' $T/kill.err
check comm/mpirun_kill_bounded within $BOUND

# a rank that stops answering: the others time out, and comm_abort
# (MPI_Abort) ends the job, the stuck rank included
fault "mpirun rank 2 stuck" $T/hang.out $T/hang.err PP_CHECK_FAULT=hang PP_CHECK_FAULT_RANK=2 \
	"${mpirun[@]}" -x PP_CHECK_TIMEOUT -x PP_CHECK_FAULT -x PP_CHECK_FAULT_RANK -n 4 $bin
check comm/mpirun_stuck_rank_job_fails test $rc -ne 0 -a $rc -ne 124
check comm/mpirun_stuck_rank_timeout_message grep -qE "allreduce on 'world' \(rank [013] of 4\) timed out after 5 s: every peer on this host is still running" $T/hang.out
check comm/mpirun_stuck_rank_aborts_bounded within $BOUND
# the same while the others wait for a nonblocking allreduce
fault "mpirun rank 2 stuck, nonblocking" $T/ihang.out $T/ihang.err PP_CHECK_FAULT=hang \
	PP_CHECK_FAULT_RANK=2 PP_CHECK_FAULT_OP=iallreduce \
	"${mpirun[@]}" -x PP_CHECK_TIMEOUT -x PP_CHECK_FAULT -x PP_CHECK_FAULT_RANK -x PP_CHECK_FAULT_OP -n 4 $bin
check comm/mpirun_stuck_rank_iallreduce_job_fails test $rc -ne 0 -a $rc -ne 124
check comm/mpirun_stuck_rank_iallreduce_timeout_message grep -qE "allreduce on 'world' \(rank [013] of 4\) timed out after 5 s: every peer on this host is still running" $T/ihang.out
check comm/mpirun_stuck_rank_iallreduce_bounded within $BOUND

# --- srun --mpi=pmix on a one-node Slurm cluster ------------------------------------
slurm_checks() {
	run_checks "srun -n 4 --mpi=pmix" 70 srun -n 4 --mpi=pmix $bin
	check comm/srun_4_ranks grep -q '^# mpi: 4 rank(s), 4 on this host' $T/run.out

	# --gpus-per-task=1 on the cluster's four fake GPUs: Slurm narrows
	# CUDA_VISIBLE_DEVICES to one per task, so every rank uses device 0
	timeout $LIMIT srun -n 4 --gpus-per-task=1 --mpi=pmix env PP_CHECK_DEVICE=0 PP_CHECK_FAULT=none \
		$bin >$T/gpu.out 2>$T/gpu.err
	check comm/srun_gpus_per_task_device_0 grep -q '^PASS: boot_device under the launcher' $T/gpu.out

	expect_fail comm/srun_mpi_none_refused 1 'SLURM_NTASKS=2 .*SLURM_PROCID=[01].*srun --mpi=pmix' \
		timeout $LIMIT srun -n 2 --mpi=none $bin

	# kill -9: Slurm's PMIx plugin cancels the step when a task dies, so
	# the survivors end within seconds and srun names the task
	fault "srun kill rank 2" $T/skill.out $T/skill.err \
		PP_CHECK_FAULT=kill PP_CHECK_FAULT_RANK=2 srun -n 4 --mpi=pmix $bin
	check comm/srun_kill_step_fails test $rc -ne 0 -a $rc -ne 124
	check comm/srun_kill_names_task_2 grep -q 'task 2: Killed' $T/skill.err
	check comm/srun_kill_survivors_end test "$(srun_tasks $T/skill.err '(Killed|Exited with exit code [0-9]+)')" = "0 1 2 3 "
	check comm/srun_kill_bounded within $BOUND

	# a stuck rank: every survivor times out and says so, then exits 1
	fault "srun rank 2 stuck" $T/shang.out $T/shang.err PP_CHECK_FAULT=hang PP_CHECK_FAULT_RANK=2 \
		PP_CHECK_ON_ERROR=exit srun -n 4 --mpi=pmix $bin
	local r ok=0
	for r in 0 1 3; do
		grep -qE "\(rank $r\): allreduce on 'world' \(rank $r of 4\) timed out after 5 s" $T/shang.out || ok=1
	done
	check comm/srun_stuck_rank_each_survivor_reports test $ok -eq 0
	check comm/srun_stuck_rank_survivors_exit_1 test "$(srun_tasks $T/shang.err 'Exited with exit code 1')" = "0 1 3 "
	check comm/srun_stuck_rank_bounded within $BOUND

	# and with comm_abort: MPI_Abort ends the whole step
	fault "srun rank 2 stuck, abort" $T/sabort.out $T/sabort.err PP_CHECK_FAULT=hang \
		PP_CHECK_FAULT_RANK=2 srun -n 4 --mpi=pmix $bin
	check comm/srun_abort_step_fails test $rc -ne 0 -a $rc -ne 124
	check comm/srun_abort_message grep -q "timed out after 5 s" $T/sabort.out
	check comm/srun_abort_bounded within $BOUND
}

. tests/tools/slurm-lib.sh
slurm_up 2>$T/slurm.log
case $? in
0)
	slurm_checks
	slurm_down
	;;
3 | 4) skip comm/srun "$SLURM_SKIP" ;;
*) fail comm/srun "the local Slurm cluster did not start: $(tail -n 5 $T/slurm.log | tr '\n' ' ')" ;;
esac

# --- nccl: built with CUDA; a clear error where there is no GPU --------------------------
if [ -f $PP_ROOT/build/obj/.variant-cuda ]; then
	if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
		run_checks "nccl singleton" 30 env PP_CHECK_BACKEND=nccl $bin
	else
		expect_fail comm/nccl_without_gpu_clear_error 1 'has no usable GPU: .*CUDA error [0-9]+.*use the mpi backend' \
			env PP_CHECK_BACKEND=nccl $bin
	fi
else
	skip comm/nccl "pp was built without CUDA (nvcc not found, or make CUDA=0)"
fi
