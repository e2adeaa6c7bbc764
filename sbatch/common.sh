# Sourced by the batch scripts in sbatch/: runs pp-train on every task of the
# allocation and requeues the job when pp-train stopped on the time-limit
# signal after saving a checkpoint (exit status 75); the requeued job
# resumes from that checkpoint.
#   pp_train_job [pp-train arguments...]
# PP_BIN (default: build/bin of the submit directory) holds the tools.
pp_train_job() {
	local dir=${SLURM_SUBMIT_DIR:-$PWD}
	export PATH="${PP_BIN:-$dir/build/bin}:$PATH" PP_CONFIG_DIR=${PP_CONFIG_DIR:-$dir/configs}
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
	srun --mpi=pmix --kill-on-bad-exit=1 pp-train "$@"
	local rc=$?
	if [ "$rc" -eq 75 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
		echo "pp-train saved a checkpoint on the time-limit signal: requeueing job $SLURM_JOB_ID" >&2
		scontrol requeue "$SLURM_JOB_ID"
	fi
	return "$rc"
}
