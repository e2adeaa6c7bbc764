# shellcheck shell=bash
# Sourced by the batch scripts in sbatch/, one per preset. A script sets its
# #SBATCH lines and the variables below, then calls
#   pp_gpu_job [pp-train arguments...]   one task per GPU, bf16 on CUDA
#   pp_train_job [pp-train arguments...] the same on whatever device the
#                                        arguments name (tiny-cpu.sub)
# Each runs pp-train on every task of the allocation (srun --mpi=pmix) and
# requeues the job when pp-train stopped on the time-limit signal, or at
# max_runtime, after saving a checkpoint (exit status 75); the requeued job
# resumes from that checkpoint.
#
# Variables (the script's values at its top; the environment of sbatch wins):
#   RUN      run directory: checkpoints, metrics.jsonl, tensorboard/
#   DATA     a pp-tokens(5) dataset (or Megatron/llm.c tokens), or "synthetic"
#   IMAGE    a container image for pyxis (srun --container-image); empty: the
#            tools of the host
#   MOUNTS   with IMAGE: srun --container-mounts (default: the submit
#            directory at the same path)
#   PP_BIN   the directory of the tools (default: build/bin of the submit
#            directory when it holds them, else the PATH)
#   PP_CONFIG_DIR  run configs and model presets (default: configs/ of the
#            submit directory when it exists, else the installed
#            share/pp/configs beside the tools)
# The scripts are submitted from the directory that holds sbatch/ (the
# source tree, or a copy of an installed share/pp/sbatch).
#   PP_PLAN_ONLY=1  run nothing: print `pp-init --plan --json` for the job's
#            pp-train command line (how the tests check every script's layout)

# The NCCL and CUDA settings of the GPU scripts; each can be overridden from
# the environment of sbatch.
pp_gpu_env() {
	# NCCL prints warnings (a fallback from InfiniBand to sockets, a bad
	# topology) but not its per-call trace; INFO when debugging a hang.
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	# InfiniBand retry timeout 4.096 us * 2^22 (about 17 s): large jobs on
	# congested fabrics see fewer spurious "transport retry" failures.
	export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-22}
	# One hardware queue per device: kernels and NCCL's transfers start in
	# the order pp issues them, which its overlap of the dp gradient sum
	# with the backward pass relies on (as in Megatron-LM).
	export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
	# Load each CUDA kernel on first use: faster start, less memory per rank.
	export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-LAZY}
}

# The tools and the configs, found once when this file is sourced (the
# scripts name configs as $PP_CONFIG_DIR/NAME.json).
pp_paths() {
	local dir=${SLURM_SUBMIT_DIR:-$PWD}
	[ -z "${PP_BIN:-}" ] && [ -x "$dir/build/bin/pp-train" ] && PP_BIN=$dir/build/bin
	[ -n "${PP_BIN:-}" ] && export PATH="$PP_BIN:$PATH"
	if [ -z "${PP_CONFIG_DIR:-}" ]; then
		if [ -d "$dir/configs/models" ]; then
			PP_CONFIG_DIR=$dir/configs
		else
			PP_CONFIG_DIR=$(dirname "$(command -v pp-train || echo .)")/../share/pp/configs
		fi
	fi
	export PP_CONFIG_DIR
}
pp_paths

pp_train_job() {
	local dir=${SLURM_SUBMIT_DIR:-$PWD}
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
	# RUN and DATA first: the script's arguments, then sbatch's, override them
	local args=()
	[ -n "${RUN:-}" ] && args+=("run_dir=$RUN")
	[ -n "${DATA:-}" ] && args+=("data=$DATA")
	args+=("$@")
	if [ "${PP_PLAN_ONLY:-0}" = 1 ]; then
		pp-init --plan --json "${args[@]}"
		return
	fi
	local container=()
	if [ -n "${IMAGE:-}" ]; then
		container=(--container-image="$IMAGE" --container-mounts="${MOUNTS:-$dir:$dir}"
			--container-workdir="$dir")
	fi
	srun --mpi=pmix --kill-on-bad-exit=1 "${container[@]}" pp-train "${args[@]}"
	local rc=$?
	if [ "$rc" -eq 75 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
		echo "pp-train saved a checkpoint and stopped before the time limit: requeueing job $SLURM_JOB_ID" >&2
		scontrol requeue "$SLURM_JOB_ID"
	fi
	return "$rc"
}

# The defaults of every GPU job: bf16 on CUDA, checkpoints written in the
# background and the newest two kept, a step that hangs for 10 minutes ends
# the job with every rank's stack traces (well before a collective's own
# timeout), then the script's own arguments.
pp_gpu_job() {
	pp_gpu_env
	pp_train_job device=cuda dtype=bf16 async_checkpointing=true keep=2 step_timeout=600 \
		comm_timeout=1200 "$@"
}
