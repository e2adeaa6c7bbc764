#!/usr/bin/env bash
# Layout equivalence, the key property of the distributed trainer: for a tiny
# llama and a tiny gpt with the same global batch, seed and data, every
# pp x dp x tp layout reproduces the single-process run: per-step losses and
# final parameters agree to 1e-5 relative (fp32; per tensor ||a - b|| / ||b||).
# The layouts run under srun --mpi=pmix on a local Slurm cluster, one also
# under mpirun. Then: dp gradient sums in buckets overlapped with the backward
# bitwise equal to one sum after it, a bitwise resume at pp=2 x dp=2 x tp=2,
# kill -9 of one rank, srun --mpi=none, and the layout errors.
. "$(dirname "$0")/../tools/lib.sh"
. "$(dirname "$0")/../tools/slurm-lib.sh"
export OMP_NUM_THREADS=1
TOL=1e-5
compare=$PP_ROOT/build/tests/tool_ckpt_compare

layouts=(
	"2 pp=2 schedule=gpipe"
	"2 pp=2 schedule=1f1b"
	"2 pp=2 stage_layers=3,1"
	"2 pp=2 schedule=eager1f1b"
	"2 pp=2 schedule=interleaved1f1b virtual_stages=2"
	"2 pp=2 schedule=zbh1"
	"4 pp=4 schedule=1f1b"
	"2 tp=2"
	"4 tp=4"
	"2 dp=2"
	"2 dp=2 shard_optimizer=true"
	"4 pp=2 dp=2"
	"4 pp=2 tp=2"
	"8 pp=2 dp=2 tp=2"
)

slurm_up 2>$T/slurm.log
case $? in
0) ;;
3 | 4)
	for l in "${layouts[@]}"; do skip "layouts/${l#* }" "$SLURM_SKIP"; done
	exit 0 ;;
*)
	fail layouts/slurm "the local Slurm cluster did not come up: $(tail -n 3 $T/slurm.log)"
	exit 1 ;;
esac

# same_model A B: final parameters within TOL (tool prints the worst tensor)
same_model() { $compare $1/checkpoints/step_00000020 $2/checkpoints/step_00000020 $TOL >$T/cmp.log; }

# adamw.eps=1e-6: GPT's key biases have an exactly zero gradient (softmax
# ignores a shift), so their fp32 gradients are round-off, which AdamW with
# eps=1e-8 turns into full-size steps that differ between layouts.
common="model.n_layers=4 global_batch=8 microbatch=1 seq_len=32 steps=20 lr=1e-3 adamw.eps=1e-6 log_period=20"
layout_suite layouts "$common" llama-tiny gpt-tiny -- "${layouts[@]}"

# --- the same under OpenMPI's mpirun ---------------------------------------------
base="model=llama-tiny $common"
if mpirun -n 8 --allow-run-as-root --oversubscribe pp-train $base pp=2 dp=2 tp=2 run_dir=$T/mpirun --quiet >/dev/null 2>$T/mpirun.log &&
	losses_close $T/llama-tiny/base $T/mpirun && same_model $T/llama-tiny/base $T/mpirun; then
	pass "layouts/mpirun/pp=2,dp=2,tp=2"
else
	fail "layouts/mpirun/pp=2,dp=2,tp=2" "$(grep -m1 error $T/mpirun.log) $(cat $T/cmp.log 2>/dev/null)"
fi

# --- dp gradient sums in buckets, overlapped with the backward ----------------------
# Bitwise the same run as one sum after the backward (grad_bucket_mb=0):
# 0.002 MiB (524 fp32) cuts these models into hundreds of buckets, most of
# them launched during the backward (the log line counts them); interleaved
# chunks, the zero-bubble weight pass, the tied embedding of gpt-tiny held for
# its sum across the pipeline, and ZeRO-1 shards.
buckets=(
	"2 llama-tiny dp=2"
	"4 llama-tiny pp=2 dp=2 schedule=interleaved1f1b virtual_stages=2"
	"4 gpt-tiny pp=2 dp=2 schedule=zbh1"
	"2 gpt-tiny dp=2 shard_optimizer=true"
)
for l in "${buckets[@]}"; do
	read -r n model kv <<<"$l"
	dir=$T/buckets/$model/${kv// /_}
	name="buckets/$model/${kv// /,}"
	run="srun -n $n --mpi=pmix pp-train model=$model $common $kv"
	if ! $run grad_bucket_mb=0 run_dir=$dir/off --quiet 2>$T/b.log ||
		! $run grad_bucket_mb=0.002 run_dir=$dir/on 2>$T/b.log; then
		fail "$name" "srun failed: $(grep -m1 error $T/b.log)"
	elif ! grep -qE "gradient sum over dp: [1-9][0-9]* reduction\(s\) overlapped" $T/b.log; then
		fail "$name" "no bucket went during the backward: $(grep -m1 'gradient sum' $T/b.log)"
	elif ! diff <(losses $dir/off) <(losses $dir/on) >/dev/null ||
		! $compare $dir/off/checkpoints/step_00000020 $dir/on/checkpoints/step_00000020 0 >$T/cmp.log; then
		fail "$name" "not bitwise the same as grad_bucket_mb=0: $(cat $T/cmp.log)"
	else
		pass "$name"
	fi
done

# --- bitwise resume in the 8-rank layout ------------------------------------------
run8() { srun -n 8 --mpi=pmix pp-train $base pp=2 dp=2 tp=2 checkpoint_period=10 "$@" --quiet; }
run8 run_dir=$T/r_ref 2>/dev/null
run8 run_dir=$T/r_cut 2>/dev/null &
pid=$!
while [ ! -d $T/r_cut/checkpoints/step_00000010 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
# what Slurm does at a time limit: SIGTERM to every task
pkill -TERM -f "^([^ ]*/)?pp-train .*run_dir=$T/r_cut"
wait $pid
check resume8/sigterm_exit_75 test $? -eq 75
run8 run_dir=$T/r_cut 2>$T/r_cut.log
bitwise8() {
	diff <(losses $T/r_ref) <(losses $T/r_cut) >/dev/null &&
		$compare $T/r_ref/checkpoints/step_00000020 $T/r_cut/checkpoints/step_00000020 0 >/dev/null
}
check resume8/bitwise_continuation bitwise8

# --- a dead rank ------------------------------------------------------------------
# kill -9 one rank mid-run: every other rank exits non-zero within the
# communication timeout, naming the dead rank.
srun -n 4 --mpi=pmix pp-train $base pp=2 dp=2 steps=100000 comm_timeout=5 run_dir=$T/dead 2>$T/dead.log &
pid=$!
for i in $(seq 100); do
	victim=$(pgrep -f "run_dir=$T/dead" | while read p; do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = pp-train ] && grep -qz '^SLURM_PROCID=2$' /proc/$p/environ 2>/dev/null && echo $p
	done | head -n 1)
	[ -n "$victim" ] && grep -q "step" $T/dead.log 2>/dev/null && break
	sleep 0.1
done
t0=$SECONDS
kill -9 $victim
wait $pid
rc=$?
check dead_rank/job_fails test $rc -ne 0
check dead_rank/within_timeout test $((SECONDS - t0)) -le 30
check dead_rank/names_the_rank grep -qE "rank 2 \(pid [0-9]+ on [^)]*\) has exited|task 2: Killed" $T/dead.log

# --- launcher and layout errors ---------------------------------------------------
expect_fail launch/mpi_none 1 "mpi=pmix" srun -n 2 --mpi=none pp-train $base pp=2 run_dir=$T/none
expect_fail layout/world_size 2 "needs 4 ranks.*has 2" srun -n 2 --mpi=pmix pp-train $base pp=2 dp=2 run_dir=$T/e1
expect_fail layout/heads_vs_tp 2 "n_heads" pp-train $base tp=3 --print-config
expect_fail layout/kv_vs_tp 2 "n_kv_heads" pp-train model=llama-tiny model.n_kv_heads=3 model.n_heads=12 model.d_model=96 tp=4 --print-config
expect_fail layout/interleaved_microbatches 2 "microbatches" pp-train $base pp=4 virtual_stages=2 schedule=interleaved1f1b global_batch=6 microbatch=1 model.n_layers=8 --print-config
expect_fail layout/virtual_needs_interleaved 2 "virtual_stages" pp-train $base pp=2 virtual_stages=2 schedule=1f1b --print-config
expect_fail layout/layers_vs_stages 2 "n_layers" pp-train $base pp=8 --print-config
expect_fail layout/unknown_schedule 2 "schedule" pp-train $base schedule=zigzag --print-config
expect_fail layout/stage_layers_count 2 "stage_layers lists 3 stages" pp-train $base pp=2 stage_layers=2,1,1 --print-config
expect_fail layout/stage_layers_sum 2 "adds up to 5 layers" pp-train $base pp=2 stage_layers=3,2 --print-config
expect_fail layout/stage_layers_syntax 2 "stage_layers" pp-train $base pp=2 stage_layers=3,x --print-config

# --- a batch job: sbatch/tiny-cpu.sub on the local cluster -------------------------
job=$(cd "$PP_ROOT" && sbatch --parsable --output=$T/sbatch.out sbatch/tiny-cpu.sub run_dir=$T/sbatch)
for i in $(seq 600); do [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break; sleep 0.1; done
state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z]*')
check sbatch/completed test "$state" = JobState=COMPLETED
check sbatch/trained test -f $T/sbatch/checkpoints/step_00000020/manifest.json

# --- ZeRO-1: AdamW state saved per dp rank ------------------------------------------
# dp=2 shard_optimizer=true: each dp rank writes its optimizer file, the run
# resumes bitwise in its layout after a SIGTERM just after step 10's
# checkpoint (parameters, and the AdamW state of every optimizer file), and
# its checkpoint loads into a dp=1 run without ZeRO just as the plain dp=2
# run's checkpoint does. 60 steps, so that the SIGTERM lands mid-run.
runz() { srun -n 2 --mpi=pmix pp-train $base steps=60 dp=2 checkpoint_period=10 "$@" --quiet; }
runz shard_optimizer=true run_dir=$T/z_ref 2>/dev/null
runz shard_optimizer=true run_dir=$T/z_cut 2>/dev/null &
pid=$!
while [ ! -d $T/z_cut/checkpoints/step_00000010 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
pkill -TERM -f "^([^ ]*/)?pp-train .*run_dir=$T/z_cut"
wait $pid
check zero/sigterm_exit_75 test $? -eq 75
zero_manifest() {
	jq -e '.version == 2 and ([.files[].name] | index("optim-pp000-tp000-dp000.h5") != null and
		index("optim-pp000-tp000-dp001.h5") != null)' $T/z_cut/checkpoints/step_00000010/manifest.json >/dev/null
}
check zero/manifest_lists_optim_files zero_manifest
runz shard_optimizer=true run_dir=$T/z_cut 2>$T/z_cut.log
zero_bitwise() {
	local a=$T/z_ref/checkpoints/step_00000060 b=$T/z_cut/checkpoints/step_00000060 f
	grep -q "resumed from step" $T/z_cut.log && diff <(losses $T/z_ref) <(losses $T/z_cut) >/dev/null &&
		$compare $a $b 0 >/dev/null || return 1
	for f in $a/optim-*.h5; do
		same_tensors $f $b/${f##*/} /adam_m /adam_v || return 1
	done
}
check zero/resume_bitwise zero_bitwise
runz run_dir=$T/z_plain 2>/dev/null
cp -a $T/z_ref $T/z_ref1 && cp -a $T/z_plain $T/z_plain1
pp-train $base steps=70 run_dir=$T/z_ref1 --quiet 2>$T/z_ref1.log
check zero/loads_into_dp1 grep -q "resumed from step 60" $T/z_ref1.log
pp-train $base steps=70 run_dir=$T/z_plain1 --quiet 2>/dev/null
check zero/dp1_resume_matches_plain_dp2 $compare $T/z_ref1/checkpoints/step_00000070 $T/z_plain1/checkpoints/step_00000070 $TOL

# --- a resume in another layout continues the same run ---------------------------
# 10 steps at dp=2 x tp=2 (ZeRO-1), then the other 10 in one process: the
# data position and every tensor carry over, so the result matches the
# single-process run.
srun -n 4 --mpi=pmix pp-train $base dp=2 tp=2 shard_optimizer=true checkpoint_period=10 run_dir=$T/relayout --quiet 2>/dev/null
rm -rf $T/relayout/checkpoints/step_00000020
pp-train $base run_dir=$T/relayout --quiet 2>$T/relayout.log
relayout_same() {
	grep -q "resumed from step 10" $T/relayout.log && losses_close $T/llama-tiny/base $T/relayout &&
		$compare $T/llama-tiny/base/checkpoints/step_00000020 $T/relayout/checkpoints/step_00000020 $TOL >$T/cmp.log
}
check relayout/dp2_tp2_then_single relayout_same
