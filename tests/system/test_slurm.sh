#!/usr/bin/env bash
# A real one-node Slurm cluster on loopback (tests/tools/slurm-cluster.sh): srun
# with PMIx, sbatch, fake GPUs, a PMIx client exchanging a blob, MPI under
# srun and under mpirun, and a teardown that leaves no daemon behind.
# Needs root and the Slurm/munge/PMIx/OpenMPI packages; otherwise every
# check is skipped with the reason.
. "$(dirname "$0")/../tools/lib.sh"
. "$PP_ROOT/tests/tools/slurm-lib.sh"

checks=(up srun-pmix mpi-list sbatch gpus-per-task pmix-client mpi-srun mpi-mpirun down)
ms() { echo $(($(date +%s%N) / 1000000)); }

t0=$(ms)
slurm_up
rc=$?
if [ $rc -eq 3 ] || [ $rc -eq 4 ]; then
	for c in "${checks[@]}"; do skip "slurm/$c" "$SLURM_SKIP"; done
	exit 0
elif [ $rc -ne 0 ]; then
	fail slurm/up "slurm-cluster.sh up failed (exit $rc; logs above)"
	for c in "${checks[@]:1}"; do skip "slurm/$c" "cluster did not come up"; done
	exit 1
fi
t_up=$(($(ms) - t0))
dir=$SLURM_DIR
pass slurm/up
cd "$T" || exit 1

# run_ok NAME EXPECTED-FILE CMD...: the command succeeds within 20 s and its
# sorted stdout equals the expected lines
run_ok() {
	local name=$1 want=$2 out
	shift 2
	out=$(timeout 20 "$@" 2>"$T/$name.err")
	local rc=$?
	if [ $rc -ne 0 ]; then
		fail "slurm/$name" "exit $rc: $(tail -n 3 "$T/$name.err" | paste -sd ';')"
	elif [ "$(sort <<<"$out")" != "$(sort "$want")" ]; then
		fail "slurm/$name" "got: $(paste -sd ';' <<<"$out"), wanted: $(paste -sd ';' "$want")"
	else
		pass "slurm/$name"
	fi
}

host=$(hostname -s)
printf '%s\n' "$host" "$host" "$host" "$host" >"$T/want.hosts"
t0=$(ms)
run_ok srun-pmix "$T/want.hosts" srun -n 4 --mpi=pmix hostname
t_srun=$(($(ms) - t0))

if srun --mpi=list 2>&1 | grep -qw pmix; then
	pass slurm/mpi-list
else
	fail slurm/mpi-list "srun --mpi=list does not show pmix: $(srun --mpi=list 2>&1 | paste -sd ' ')"
fi

# a batch job: poll squeue (sbatch --wait is slow), then ask for its state
t0=$(ms)
id=$(sbatch --parsable -n 2 --chdir="$T" -o "$T/job.out" --wrap 'srun hostname' 2>"$T/sbatch.err")
if [ -z "$id" ]; then
	fail slurm/sbatch "sbatch failed: $(paste -sd ';' "$T/sbatch.err")"
else
	end=$((SECONDS + 15))
	while [ -n "$(squeue -h -j "$id" 2>/dev/null)" ] && [ $SECONDS -lt $end ]; do sleep 0.1; done
	t_sbatch=$(($(ms) - t0))
	state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*\|ExitCode=[0-9:]*' | paste -sd ' ')
	if [ "$state" != "JobState=COMPLETED ExitCode=0:0" ]; then
		fail slurm/sbatch "job $id: ${state:-unknown state} after ${t_sbatch} ms"
	elif [ "$(cat "$T/job.out")" != "$(printf '%s\n%s' "$host" "$host")" ]; then
		fail slurm/sbatch "job $id output: $(paste -sd ';' "$T/job.out")"
	else
		pass slurm/sbatch
	fi
fi

# fake GPUs: one distinct device per task
out=$(timeout 20 srun -n 2 --gpus-per-task=1 bash -c 'echo "${CUDA_VISIBLE_DEVICES-unset}"' 2>&1)
if [ "$(sort -u <<<"$out" | grep -cx '[0-3]')" -eq 2 ]; then
	pass slurm/gpus-per-task
else
	fail slurm/gpus-per-task "CUDA_VISIBLE_DEVICES per task: $(paste -sd ';' <<<"$out")"
fi

# a PMIx client: rank and size from PMIx, a 128-byte blob from every rank
# through Put + Commit + Fence(collect) + Get (how an ncclUniqueId travels)
cat >"$T/pmix_check.c" <<'EOF'
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	pmix_proc_t me, proc;
	pmix_value_t val, *vp = NULL;
	pmix_info_t info;
	bool collect = true;
	unsigned char blob[128];
	uint32_t size, r, i;
	pmix_status_t rc = PMIx_Init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
		return 1;
	}
	PMIX_LOAD_PROCID(&proc, me.nspace, PMIX_RANK_WILDCARD);
	if (PMIx_Get(&proc, PMIX_JOB_SIZE, NULL, 0, &vp) != PMIX_SUCCESS) {
		fprintf(stderr, "rank %u: no PMIX_JOB_SIZE\n", me.rank);
		return 1;
	}
	size = vp->data.uint32;
	PMIX_VALUE_RELEASE(vp);
	const char *procid = getenv("SLURM_PROCID"), *ntasks = getenv("SLURM_NTASKS");
	if (!procid || !ntasks || (uint32_t)atoi(procid) != me.rank || (uint32_t)atoi(ntasks) != size) {
		fprintf(stderr, "rank %u size %u but SLURM_PROCID=%s SLURM_NTASKS=%s\n", me.rank,
			size, procid ? procid : "unset", ntasks ? ntasks : "unset");
		return 1;
	}
	for (i = 0; i < sizeof blob; i++)
		blob[i] = (unsigned char)(me.rank * 31 + i);
	val.type = PMIX_BYTE_OBJECT;
	val.data.bo.bytes = (char *)blob;
	val.data.bo.size = sizeof blob;
	if (PMIx_Put(PMIX_GLOBAL, "pp.blob", &val) != PMIX_SUCCESS || PMIx_Commit() != PMIX_SUCCESS) {
		fprintf(stderr, "rank %u: Put/Commit failed\n", me.rank);
		return 1;
	}
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	rc = PMIx_Fence(NULL, 0, &info, 1);
	if (rc != PMIX_SUCCESS) {
		fprintf(stderr, "rank %u: Fence: %s\n", me.rank, PMIx_Error_string(rc));
		return 1;
	}
	for (r = 0; r < size; r++) {
		PMIX_LOAD_PROCID(&proc, me.nspace, r);
		if (PMIx_Get(&proc, "pp.blob", NULL, 0, &vp) != PMIX_SUCCESS ||
		    vp->type != PMIX_BYTE_OBJECT || vp->data.bo.size != sizeof blob) {
			fprintf(stderr, "rank %u: no blob from rank %u\n", me.rank, r);
			return 1;
		}
		for (i = 0; i < sizeof blob; i++)
			if ((unsigned char)vp->data.bo.bytes[i] != (unsigned char)(r * 31 + i)) {
				fprintf(stderr, "rank %u: blob from rank %u differs at byte %u\n", me.rank, r, i);
				return 1;
			}
		PMIX_VALUE_RELEASE(vp);
	}
	printf("pmix rank %u size %u blobs %u ok\n", me.rank, size, size);
	PMIx_Finalize(NULL, 0);
	return 0;
}
EOF
for r in 0 1 2 3; do echo "pmix rank $r size 4 blobs 4 ok"; done >"$T/want.pmix"
if ! pkg-config --exists pmix; then
	skip slurm/pmix-client "pkg-config pmix not found (libpmix-dev)"
elif read -ra pmix_flags <<<"$(pkg-config --cflags --libs pmix)" &&
	! gcc -O1 -o "$T/pmix_check" "$T/pmix_check.c" "${pmix_flags[@]}" 2>"$T/cc.err"; then
	fail slurm/pmix-client "compile failed: $(head -n 3 "$T/cc.err" | paste -sd ';')"
else
	run_ok pmix-client "$T/want.pmix" srun -n 4 --mpi=pmix "$T/pmix_check"
fi

# MPI_Allreduce of the ranks under srun --mpi=pmix and under mpirun
cat >"$T/mpi_check.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	int rank, size, sum = -1;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("mpi rank %d size %d sum %d\n", rank, size, sum);
	MPI_Finalize();
	return sum == size * (size - 1) / 2 ? 0 : 1;
}
EOF
for r in 0 1 2 3; do echo "mpi rank $r size 4 sum 6"; done >"$T/want.mpi4"
for r in 0 1; do echo "mpi rank $r size 2 sum 1"; done >"$T/want.mpi2"
if ! command -v mpicc >/dev/null 2>&1; then
	skip slurm/mpi-srun "mpicc not found (libopenmpi-dev)"
	skip slurm/mpi-mpirun "mpicc not found (libopenmpi-dev)"
elif ! mpicc -O1 -o "$T/mpi_check" "$T/mpi_check.c" 2>"$T/mpicc.err"; then
	fail slurm/mpi-srun "mpicc failed: $(head -n 3 "$T/mpicc.err" | paste -sd ';')"
	skip slurm/mpi-mpirun "mpicc failed"
else
	run_ok mpi-srun "$T/want.mpi4" srun -n 4 --mpi=pmix "$T/mpi_check"
	run_ok mpi-mpirun "$T/want.mpi2" mpirun -n 2 --allow-run-as-root --oversubscribe "$T/mpi_check"
fi

# teardown: no munged, slurmctld, slurmd or slurmstepd of this cluster left
t0=$(ms)
slurm_down
rc=$?
t_down=$(($(ms) - t0))
left=$(ps -eo pid=,stat=,args= | awk '$2 !~ /^Z/' | grep -F "$dir/" | grep -v -e grep -e awk)
# slurmstepd rewrites its command line but keeps the slurmd log open
left+=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$dir/*" 2>/dev/null)
if [ $rc -ne 0 ]; then
	fail slurm/down "slurm-cluster.sh down exited $rc"
elif [ -n "$left" ]; then
	fail slurm/down "still running: $(paste -sd ';' <<<"$left")"
else
	pass slurm/down
fi
echo "timing (ms): up $t_up, srun -n 4 $t_srun, sbatch ${t_sbatch:-?}, down $t_down"
