#!/usr/bin/env bash
# The batch scripts in sbatch/ on the local Slurm cluster. Every GPU script
# is accepted by `sbatch --test-only` on 8 nodes of 8 fake GPUs, its ranks
# match its pp-train layout, and that layout fits 80 GB per GPU by
# `pp-init --plan` (the figure its comment gives). tiny-cpu.sub trains over 8
# ranks; and a preemption round trip: scancel --signal=USR1 mid-run, a
# checkpoint, the job requeued by sbatch/common.sh, the run finished, and
# its losses bitwise those of an uninterrupted run.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
export OMP_NUM_THREADS=1 PP_SLURM_GPU_NODES=8

subs=()
for s in "$PP_ROOT"/sbatch/*.sub; do [ "$(basename "$s")" = tiny-cpu.sub ] || subs+=("$s"); done
# --- the layouts by pp-init --plan (no cluster needed) --------------------------
for s in "${subs[@]}"; do
	name=$(basename "$s" .sub)
	nodes=$(sed -n 's/^#SBATCH --nodes=\([0-9]*\)$/\1/p' "$s")
	per=$(sed -n 's/^#SBATCH --ntasks-per-node=\([0-9]*\)$/\1/p' "$s")
	gpus=$(sed -n 's/^#SBATCH --gpus-per-node=\([0-9]*\)$/\1/p' "$s")
	said=$(sed -n 's/^# pp-init --plan: \([0-9.]*\) GiB per GPU.*/\1/p' "$s")
	if ! (cd "$PP_ROOT" && PP_PLAN_ONLY=1 bash "$s") >$T/$name.json 2>$T/$name.err; then
		fail "sbatch/plan/$name" "pp-init --plan refused its command line: $(tail -n 1 $T/$name.err)"
		continue
	fi
	got=$(jq -r '"\(.layout.world) \(.memory.total) \(.memory.total_gib * 10 | round / 10)"' $T/$name.json)
	read -r world bytes gib <<<"$got"
	if [ "$world" != $((nodes * per)) ] || [ "$per" != "$gpus" ]; then
		fail "sbatch/plan/$name" "layout of $world ranks, but $nodes nodes x $per tasks ($gpus GPUs per node)"
	elif [ "$bytes" -gt 80000000000 ]; then
		fail "sbatch/plan/$name" "plan needs $gib GiB per GPU, more than 80 GB"
	elif ! awk -v a="$said" -v b="$gib" 'BEGIN { exit !(a != "" && a + 0 == b + 0) }'; then
		fail "sbatch/plan/$name" "its comment says ${said:-nothing} GiB, the plan $gib GiB"
	else
		pass "sbatch/plan/$name"
		echo "  $name: $world ranks, $gib GiB per GPU"
	fi
done
# every script names the Slurm settings a long job needs
for s in "$PP_ROOT"/sbatch/*.sub; do
	name=$(basename "$s" .sub) missing=
	for opt in job-name nodes ntasks-per-node time signal=USR1@ requeue open-mode=append output; do
		grep -q "^#SBATCH --$opt" "$s" || missing+=" --$opt"
	done
	for v in RUN DATA IMAGE; do grep -q "^$v=" "$s" || missing+=" $v="; done
	check "sbatch/settings/$name" test -z "$missing"
done

slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4)
	for s in "${subs[@]}"; do skip "sbatch/test-only/$(basename "$s" .sub)" "$SLURM_SKIP"; done
	for n in tiny/completed tiny/loss_fell tiny/outputs preempt/stopped preempt/requeued preempt/finished preempt/bitwise; do
		skip "sbatch/$n" "$SLURM_SKIP"
	done
	exit 0 ;;
*) fail sbatch/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"; exit 1 ;;
esac
cd "$PP_ROOT" || exit 1
for s in "${subs[@]}"; do
	name=$(basename "$s" .sub)
	if out=$(sbatch --test-only -p gpu "$s" 2>&1) && grep -q "to start at" <<<"$out"; then
		pass "sbatch/test-only/$name"
	else
		fail "sbatch/test-only/$name" "$out"
	fi
done

# wait_job ID: until the job has left the queue (at most 300 s)
wait_job() {
	local i
	for i in $(seq 3000); do [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0; sleep 0.1; done
	return 1
}
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -n 1 | cut -d= -f2; }

# --- tiny-cpu.sub trains --------------------------------------------------------
job=$(sbatch --parsable --output=$T/tiny.out sbatch/tiny-cpu.sub run_dir=$T/tiny steps=30)
wait_job "$job"
check sbatch/tiny/completed test "$(job_field "$job" JobState)" = COMPLETED
first=$(losses $T/tiny | head -n 1 | cut -d' ' -f2) last=$(losses $T/tiny | tail -n 1 | cut -d' ' -f2)
check sbatch/tiny/loss_fell awk -v a="$first" -v b="$last" 'BEGIN { exit !(a != "" && b != "" && b < a - 0.05) }'
check sbatch/tiny/outputs test -f $T/tiny/checkpoints/step_00000030/manifest.json -a -s $T/tiny/metrics.jsonl \
	-a "$(ls $T/tiny/tensorboard/ 2>/dev/null | grep -c "^events.out.tfevents")" = 1

# --- preemption round trip --------------------------------------------------------
steps=150
ref=$(sbatch --parsable --output=$T/ref.out sbatch/tiny-cpu.sub run_dir=$T/ref steps=$steps)
wait_job "$ref"
job=$(sbatch --parsable --output=$T/pre.out sbatch/tiny-cpu.sub run_dir=$T/pre steps=$steps)
for i in $(seq 600); do
	[ "$(losses $T/pre 2>/dev/null | wc -l)" -ge 5 ] && break
	sleep 0.1
done
scancel --signal=USR1 "$job"
# The requeued job waits for its begin time (Slurm's delay after a requeue):
# once the first run's step is gone (same job id, same step id), let it start
for i in $(seq 600); do
	[ "$(job_field "$job" JobState)" = PENDING ] &&
		grep -q "\[$job.0\] done with job" "$SLURM_DIR/log/slurmd.log" 2>/dev/null && break
	sleep 0.1
done
scontrol update JobId="$job" StartTime=now 2>/dev/null
wait_job "$job"
stopped=$(sed -n 's/.*stopped by a signal at step \([0-9]*\) after saving a checkpoint.*/\1/p' $T/pre.out | head -n 1)
check sbatch/preempt/stopped test -n "$stopped" -a "$stopped" -lt $steps
check sbatch/preempt/requeued test "$(job_field "$job" Restarts)" = 1
check sbatch/preempt/finished test "$(job_field "$job" JobState)" = COMPLETED -a -f $T/pre/checkpoints/step_00000$steps/manifest.json
check sbatch/preempt/bitwise same_losses $T/ref $T/pre
grep -E "stopped|requeue|resumed|error" $T/pre.out | head -n 8
