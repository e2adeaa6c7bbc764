#!/usr/bin/env bash
# The hang watchdog (libcommon/train/watchdog.c): with step_timeout=, a step that
# runs too long makes every rank print the stack of each of its threads,
# named by rank and symbolized (function, file:line), and the job fail fast.
# debug.hang_step=N makes the job's last rank sleep inside step N. Alone, and
# over 4 ranks under srun on the local Slurm cluster, where the other ranks
# wait for the hung one in a collective.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
export OMP_NUM_THREADS=1
tiny="model=llama-tiny data=synthetic global_batch=8 microbatch=1 seq_len=32 steps=1000 log_period=1000"

# --- one process ------------------------------------------------------------------
t0=$SECONDS
pp-train $tiny step_timeout=2 debug.hang_step=3 run_dir=$T/one 2>$T/one.log
rc=$?
took=$((SECONDS - t0))
check watchdog/single_fails test $rc -ne 0
check watchdog/single_fast test $took -le 15
check watchdog/single_names_step grep -q "error: step 3 ran past step_timeout=2 s" $T/one.log
# the main thread, symbolized down to the hanging call in train.c
check watchdog/single_main_stack grep -qE "^pp-train:   #[0-9]+ +debug_hang at .*libcommon/train/watchdog.c:[0-9]+" $T/one.log
check watchdog/single_caller grep -qE "^pp-train: +(#[0-9]+ +|inlined in )train_step at .*libcommon/train/step.c:[0-9]+" $T/one.log
check watchdog/single_threads grep -qE "^pp-train: thread [0-9]+ \(pp-train, main\):" $T/one.log
# a step that overruns and then finishes goes no further: no checkpoint of
# a hung job (8 forwards padded to 0.2 s: the step ends at about 1.7 s, the
# job about 3 s, after the watchdog has printed and waited)
pp-train $tiny steps=1 step_timeout=1 debug.fwd_ms=200 run_dir=$T/slow 2>$T/slow.log
rc=$?
check watchdog/stops_at_once eval '[ $rc -ne 0 ] && grep -q "step 1 ran past step_timeout=1 s" $T/slow.log &&
	[ ! -e $T/slow/checkpoints/step_00000001 ]'
# a run within its timeout is not disturbed
pp-train $tiny steps=5 step_timeout=30 run_dir=$T/fine --quiet 2>$T/fine.log
check watchdog/quiet_when_fine test $? -eq 0 -a -f $T/fine/checkpoints/step_00000005/manifest.json

# --- 4 ranks under srun -------------------------------------------------------------
names=(srun_fails srun_fast srun_every_rank srun_hung_rank_stack)
slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4) for n in "${names[@]}"; do skip "watchdog/$n" "$SLURM_SKIP"; done; exit 0 ;;
*) fail watchdog/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"; exit 1 ;;
esac
t0=$SECONDS
srun -n 4 --mpi=pmix --kill-on-bad-exit=1 pp-train $tiny pp=2 dp=2 step_timeout=3 comm_timeout=120 \
	debug.hang_step=4 run_dir=$T/four 2>$T/four.log
rc=$?
took=$((SECONDS - t0))
check watchdog/srun_fails test $rc -ne 0
# 3 s of timeout, 2 s for the other ranks to print, start-up: far below comm_timeout
check watchdog/srun_fast test $took -le 30
every() {
	local r
	for r in 0 1 2 3; do
		grep -q "^pp-train\[$r\]: error: step 4 ran past step_timeout=3 s" $T/four.log &&
			grep -qE "^pp-train\[$r\]: +(#[0-9]+ +|inlined in )trainer_run at .*libcommon/train/loop.c:[0-9]+" $T/four.log ||
			{ echo "rank $r printed no stack" >&2; return 1; }
	done
}
check watchdog/srun_every_rank every
check watchdog/srun_hung_rank_stack grep -qE "^pp-train\[3\]:   #[0-9]+ +debug_hang at " $T/four.log
grep "^pp-train\[0\]" $T/four.log | head -n 20
