#!/usr/bin/env bash
# pp-init and pp-train end to end on one CPU process: learning, bitwise
# resume after a signal and after kill -9, kill -9 during a checkpoint write,
# recompute policies, bad configs and bad checkpoints.
. "$(dirname "$0")/../tools/lib.sh"

tiny="model=llama-tiny data=synthetic global_batch=8 microbatch=4 seq_len=32 log_period=10"

# --- learning: a tiny llama on synthetic data ------------------------------------
# The synthetic stream follows a fixed successor with probability 0.9, so the
# loss floor is about 0.9*-ln(0.9) + 0.1*ln(256/0.1) = 0.88 nats, against
# ln(256) = 5.55 at the start. Threshold: below 2.0 within 150 steps.
run=$T/learn
pp-train $tiny steps=150 lr=3e-3 run_dir=$run eval_interval=50 --quiet 2>$T/learn.log
first=$(jq -r 'select(.step == 1) | .loss' $run/metrics.jsonl)
last=$(jq -r 'select(.step == 150 and .loss != null) | .loss' $run/metrics.jsonl)
val=$(jq -r 'select(.step == 150 and .val_loss != null) | .val_loss' $run/metrics.jsonl)
echo "loss step 1: $first, step 150: $last, val: $val"
check train/initial_loss_near_ln_vocab awk -v l="$first" 'BEGIN { exit !(l > 5.0 && l < 6.1) }'
check train/loss_below_2 awk -v l="$last" 'BEGIN { exit !(l < 2.0) }'
check train/val_loss_below_2 awk -v l="$val" 'BEGIN { exit !(l < 2.0) }'
check train/metrics_fields jq -se '[.[] | select(.step == 150 and .loss != null)] | length == 1 and (.[0] | has("tokens_per_s") and has("flops_per_s") and has("lr") and has("grad_norm") and (.mfu == null))' $run/metrics.jsonl
check train/final_checkpoint test -f $run/checkpoints/step_00000150/manifest.json
# save_on_completion=false (benchmarks): a periodic save still happens, no final one
pp-train $tiny steps=6 checkpoint_period=4 save_on_completion=false run_dir=$T/nofinal --quiet 2>/dev/null
check train/no_final_save test "$(ls $T/nofinal/checkpoints 2>/dev/null | tr '\n' ' ')" = "step_00000004 "

# --- pp-init writes step 0 and pp-train starts from it -----------------------------
cfg="$tiny steps=20 checkpoint_period=10 lr_schedule.type=constant"
pp-init $cfg -o $T/a >/dev/null 2>$T/init.log
check init/step0_written test -f $T/a/checkpoints/step_00000000/manifest.json
pp-train $cfg run_dir=$T/a --quiet 2>$T/a.log
check init/train_resumes_step0 grep -q "resumed from step 0" $T/a.log
expect_fail init/refuses_existing_run 2 "already holds checkpoint" pp-init $cfg -o $T/a
# the same run without pp-init starts from the same seeded parameters
pp-train $cfg run_dir=$T/a0 --quiet 2>/dev/null
check init/same_as_fresh_start same_tensors $T/a/checkpoints/step_00000020/shard-pp000-tp000.h5 $T/a0/checkpoints/step_00000020/shard-pp000-tp000.h5

# --- bitwise resume ---------------------------------------------------------------
# Reference: 200 steps in one go. Then: stop with SIGTERM mid-run (saves,
# exits 75) and resume; and kill -9 after step 10's checkpoint and resume.
# Losses of every step and the final parameters must be identical. (The 190
# steps after the first checkpoint leave the signal time to arrive.)
slow="$cfg model.d_model=128 model.n_heads=4 model.n_kv_heads=2 seq_len=64 steps=200"
pp-train $slow run_dir=$T/ref --quiet 2>/dev/null
pp-train $slow run_dir=$T/sig --quiet 2>$T/sig.log &
pid=$!
while [ ! -d $T/sig/checkpoints/step_00000010 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
check resume/sigterm_exit_75 test "$rc" -eq 75
check resume/sigterm_message grep -q "stopped by a signal at step [0-9]* after saving a checkpoint" $T/sig.log
check resume/sigterm_not_an_error bash -c "! grep -q 'error' $T/sig.log"
pp-train $slow run_dir=$T/sig --quiet 2>>$T/sig.log
same_slow() {
	diff <(losses $T/ref) <(losses $1) >/dev/null &&
		same_tensors $T/ref/checkpoints/step_00000200/shard-pp000-tp000.h5 $1/checkpoints/step_00000200/shard-pp000-tp000.h5
}
check resume/bitwise_after_sigterm same_slow $T/sig

pp-train $slow run_dir=$T/k9 --quiet 2>/dev/null &
pid=$!
while [ ! -d $T/k9/checkpoints/step_00000010 ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done
kill -9 $pid
wait $pid 2>/dev/null
pp-train $slow run_dir=$T/k9 2>$T/k9.log
check resume/kill9_resumes_from_checkpoint grep -qE "resumed from step [1-9][0-9]*0\b" $T/k9.log
check resume/bitwise_after_kill9 same_slow $T/k9

# --- kill -9 during a checkpoint write ------------------------------------------
# A model of ~20M parameters (~240 MB per checkpoint): kill the trainer while
# it writes step 2's checkpoint; step 1's must stay loadable and resume.
big="model=llama-tiny model.d_model=512 model.n_heads=8 model.n_kv_heads=8 model.d_ff=1024 model.n_layers=4 model.vocab_size=8192 global_batch=1 microbatch=1 seq_len=16 steps=3 checkpoint_period=1 keep=0"
pp-train $big run_dir=$T/big --quiet 2>/dev/null &
pid=$!
while ! ls -d $T/big/checkpoints/.tmp-step_00000002* >/dev/null 2>&1 && kill -0 $pid 2>/dev/null; do sleep 0.01; done
kill -9 $pid
wait $pid 2>/dev/null
check kill9_save/killed_mid_write test ! -d $T/big/checkpoints/step_00000002
check kill9_save/previous_complete test -f $T/big/checkpoints/step_00000001/manifest.json
pp-train $big run_dir=$T/big 2>$T/big.log
check kill9_save/resumes_from_previous grep -q "resumed from step 1" $T/big.log
check kill9_save/finishes test -f $T/big/checkpoints/step_00000003/manifest.json
check kill9_save/temporary_removed bash -c "! ls -d $T/big/checkpoints/.tmp-* 2>/dev/null"

# --- asynchronous checkpoints -----------------------------------------------------
# Written on a background thread while training goes on: every checkpoint
# bitwise the synchronous run's, the step blocked only while the state is
# copied, and the write overlapping the next steps.
acfg="$tiny steps=12 checkpoint_period=4 keep=0 log_period=1"
pp-train $acfg run_dir=$T/sync 2>/dev/null
pp-train $acfg run_dir=$T/async async_checkpointing=true 2>$T/async.log
async_same() {
	local s
	for s in 4 8 12; do
		s=$(printf 'step_%08d' $s)
		same_tensors $T/sync/checkpoints/$s/shard-pp000-tp000.h5 $T/async/checkpoints/$s/shard-pp000-tp000.h5 || return 1
	done
	diff <(losses $T/sync) <(losses $T/async) >/dev/null
}
check async/bitwise_as_sync async_same
check async/blocked_logged grep -qE "checkpoint step 4: training blocked [0-9.]+ s \(copying the state\), writing it in the background" $T/async.log
check async/blocked_in_metrics jq -se '[.[] | select(.checkpoint_blocked_s != null)] | length == 2' $T/async/metrics.jsonl
# step 5 ran while step 4's checkpoint was written
check async/overlapped bash -c "sed -n '/checkpoint step 4: training blocked/,/checkpoint step 4 written in the background/p' $T/async.log | grep -q 'step 5/12'"
check async/verifies pp-ckpt verify $T/async/checkpoints/step_00000008
# kill -9 while the background thread writes step 2: step 1 stays loadable
big_async="$big async_checkpointing=true"
pp-train $big_async run_dir=$T/bigasync --quiet 2>/dev/null &
pid=$!
while ! ls $T/bigasync/checkpoints/.tmp-step_00000002*/shard-* >/dev/null 2>&1 && kill -0 $pid 2>/dev/null; do sleep 0.01; done
kill -9 $pid
wait $pid 2>/dev/null
check async_kill9/killed_mid_write test ! -d $T/bigasync/checkpoints/step_00000002
check async_kill9/previous_verifies pp-ckpt verify $T/bigasync/checkpoints/step_00000001
pp-train $big_async run_dir=$T/bigasync 2>$T/bigasync.log
check async_kill9/resumes_from_previous grep -q "resumed from step 1" $T/bigasync.log
check async_kill9/finishes test -f $T/bigasync/checkpoints/step_00000003/manifest.json

# --- max_runtime: stop and save before the wall clock runs out ----------------------
t0=$SECONDS
pp-train $slow steps=100000 max_runtime=4 run_dir=$T/maxrt 2>$T/maxrt.log
rc=$?
check max_runtime/exit_75 test $rc -eq 75
check max_runtime/in_time test $((SECONDS - t0)) -le 5
check max_runtime/logged grep -qE "stopped by max_runtime=4 s with [0-9]+ s left at step [0-9]+ after saving a checkpoint" $T/maxrt.log
check max_runtime/saved bash -c "ls $T/maxrt/checkpoints | grep -q step_"

# --- keep-N ---------------------------------------------------------------------
pp-train $tiny steps=6 checkpoint_period=1 keep=2 run_dir=$T/keep --quiet 2>/dev/null
check keep/last_two [ "$(ls $T/keep/checkpoints)" = "$(printf 'step_00000005\nstep_00000006')" ]

# --- recompute policies ------------------------------------------------------------
# Every policy rebuilds with the forward's own ops from the forward's own
# inputs, so on the CPU each step's loss and the final parameters are
# recompute=none's, bit for bit. gpipe keeps both microbatches in flight,
# whose backward passes rebuild into the same buffers.
for m in llama-tiny gpt-tiny; do
	rcfg="model=$m data=synthetic global_batch=8 microbatch=4 seq_len=32 steps=4 log_period=1 schedule=gpipe"
	for p in none full minimal minimal_flash; do
		pp-train $rcfg recompute=$p run_dir=$T/remat-$m-$p --quiet 2>/dev/null
	done
	same_as_none() {
		same_losses $T/remat-$m-none $T/remat-$m-$1 &&
			same_tensors $T/remat-$m-none/checkpoints/step_00000004/shard-pp000-tp000.h5 \
				$T/remat-$m-$1/checkpoints/step_00000004/shard-pp000-tp000.h5
	}
	for p in full minimal minimal_flash; do
		check recompute/$m/$p/same_as_none same_as_none $p
	done
done
check recompute/config_names_policy bash -c "pp-train $tiny recompute=minimal_flash --print-config | jq -e '.recompute == \"minimal_flash\"' >/dev/null"
check recompute/true_is_full bash -c "pp-train $tiny recompute=true --print-config | jq -e '.recompute == \"full\"' >/dev/null"
expect_fail recompute/bogus 2 "key 'recompute': unknown value \"bogus\", expected one of none, full, minimal, minimal_flash" pp-train $tiny recompute=bogus
expect_fail recompute/split_backward_refused 2 "recompute=minimal and a split backward pass \(schedule zbh1\) do not combine" pp-train $tiny recompute=minimal schedule=zbh1 steps=1 run_dir=$T/remat-zbh1

# --- nan handling ---------------------------------------------------------------
expect_fail nan/abort 1 "step 1: (loss|gradient norm) is -?(nan|inf)" pp-train $tiny steps=3 lr=1e30 model.init_std=1e30 run_dir=$T/nan
pp-train $tiny steps=3 model.init_std=1e30 nan_policy=skip run_dir=$T/nanskip --quiet 2>/dev/null
check nan/skip jq -se '[.[] | select(.skipped == true)] | length == 3' $T/nanskip/metrics.jsonl

# --- bad configs (exit 2, the key named) -------------------------------------------
echo '{"model": "llama-tiny", "steps": 10,' >$T/broken.json
echo '{"model": "llama-tiny", "lr_shedule": {}}' >$T/typo.json
expect_fail config/missing_file 2 "nope.json" pp-train --cfg $T/nope.json
expect_fail config/invalid_json 2 "broken.json:[0-9]+" pp-train --cfg $T/broken.json
expect_fail config/unknown_key_suggests 2 "lr_shedule.*did you mean 'lr_schedule'" pp-train --cfg $T/typo.json
expect_fail config/unknown_override 2 "stepz.*steps" pp-train $tiny stepz=3
expect_fail config/wrong_type 2 "steps" pp-train $tiny steps=ten
expect_fail config/out_of_range 2 "lr" pp-train $tiny lr=-1
expect_fail config/heads_vs_kv 2 "n_kv_heads" pp-train $tiny model.n_kv_heads=3
expect_fail config/batch_vs_micro 2 "global_batch" pp-train $tiny global_batch=6
expect_fail config/seq_vs_positions 2 "seq_len" pp-train model=gpt-tiny seq_len=4096
expect_fail config/unknown_preset 2 "no-such-model" pp-train model=no-such-model
expect_fail config/bad_override_syntax 2 "argument" pp-train $tiny --stepz
expect_fail config/moe_gelu_refused 2 "experts are gated MLPs" pp-train model=mixtral-tiny model.mlp=gelu run_dir=$T/moe_gelu
expect_fail config/layout_needs_ranks 2 "ranks" pp-train $tiny pp=2
expect_fail config/tokenizer_is_directory 2 "tokenizer: .* is a directory, not a file" pp-train $tiny tokenizer=$T run_dir=$T/tokdir
# the layout's rules hold for the plan and the run alike, before any rank
# starts: a vocabulary tp does not divide, a recompute policy with a split
# backward pass; the same message from both
vocab_msg="model.vocab_size 255 is not divisible by tp 2"
expect_fail layout/vocab_tp/plan 2 "$vocab_msg" pp-init --plan $tiny model.vocab_size=255 tp=2
expect_fail layout/vocab_tp/train 2 "$vocab_msg" pp-train $tiny model.vocab_size=255 tp=2 run_dir=$T/vocab_tp
expect_fail layout/split_recompute/plan 2 "recompute=full and a split backward pass" pp-init --plan $tiny recompute=full schedule=zbh1
# MoE's top_k defaults to min(2, n_experts) in the plan as in the run
top_k_plan() { pp-init --plan --json model=mixtral-tiny "$@" | jq -r .params.active; }
top_k_default() {
	local d two one
	d=$(top_k_plan) && two=$(top_k_plan model.top_k=2) && one=$(top_k_plan model.top_k=1) &&
		[ "$d" = "$two" ] && [ "$d" != "$one" ] &&
		pp-train model=mixtral-tiny --print-config 2>/dev/null | jq -e '.model.top_k == 2' >/dev/null
}
check layout/top_k_default top_k_default
expect_fail config/cuda_without_backend 2 "cuda" pp-train $tiny device=cuda run_dir=$T/cuda
check config/print_config bash -c "pp-train $tiny --print-config | jq -e '.model.n_kv_heads == 2 and .steps == 100'"
echo '{"model": "llama-tiny", "steps": 10, "steps": 20}' >$T/dup.json
expect_fail config/duplicate_key 2 "dup.json:1:.*duplicate object key" pp-train --cfg $T/dup.json
expect_fail config/integer_too_large 2 "steps=99999999999999999999.*too large" pp-train $tiny steps=99999999999999999999
# the shipped tiny configs take a short run without a warmup override
for f in tiny-llama tiny-gpt tiny-gemma tiny-mistral; do
	check config/short_run/$f pp-train --cfg $PP_ROOT/configs/$f.json steps=5 --print-config &>/dev/null
done
pp-train --cfg $PP_ROOT/configs/tiny-llama.json steps=5 run_dir=$T/short --quiet 2>/dev/null
check config/short_run_trains test -f $T/short/checkpoints/step_00000005/manifest.json

# --- bad checkpoints (clear message, non-zero exit, nothing overwritten) -----------
mk_ckpt() { rm -rf $T/bad; pp-init $tiny -o $T/bad >/dev/null 2>&1; }
shard=$T/bad/checkpoints/step_00000000/shard-pp000-tp000.h5
mk_ckpt; truncate -s 1000 $shard
expect_fail ckpt/truncated 1 "shard-pp000-tp000.h5" pp-train $tiny steps=2 run_dir=$T/bad
mk_ckpt; rm $shard
expect_fail ckpt/missing_shard 1 "shard-pp000-tp000.h5" pp-train $tiny steps=2 run_dir=$T/bad
mk_ckpt; jq '.version = 2' $T/bad/checkpoints/step_00000000/manifest.json >$T/m.json && mv $T/m.json $T/bad/checkpoints/step_00000000/manifest.json
expect_fail ckpt/wrong_version 1 "version" pp-train $tiny steps=2 run_dir=$T/bad
mk_ckpt; printf 'garbage' >$T/bad/checkpoints/step_00000000/manifest.json
expect_fail ckpt/corrupt_manifest 1 "manifest" pp-train $tiny steps=2 run_dir=$T/bad
mk_ckpt
expect_fail ckpt/other_model 2 "model.d_model" pp-train $tiny model.d_model=128 steps=2 run_dir=$T/bad
