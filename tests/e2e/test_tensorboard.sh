#!/usr/bin/env bash
# TensorBoard event files (libcommon/train/tensorboard.c): pp-train writes
# RUN/tensorboard/events.out.tfevents.* beside metrics.jsonl, and the
# `tensorboard` package from PyPI (in the venv scripts/setup-tensorboard.sh
# makes) reads back every scalar of metrics.jsonl: loss, lr, grad norm, step
# time, tokens/s, FLOP/s, validation loss, the time a step was blocked by an
# asynchronous checkpoint. A byte flipped in the file is caught by the
# reader's CRC32C check. SKIP when the venv cannot be made.
. "$(dirname "$0")/../tools/lib.sh"
if ! py=$("$PP_ROOT/scripts/setup-tensorboard.sh" 2>$T/setup.log); then
	skip tensorboard "the tensorboard environment is unavailable: $(tail -n 1 $T/setup.log)"
	exit 0
fi
run=$T/run
pp-train model=llama-tiny data=synthetic global_batch=8 microbatch=4 seq_len=32 steps=20 eval_interval=5 \
	checkpoint_period=10 async_checkpointing=true run_dir=$run --quiet 2>$T/train.log
files=$(ls $run/tensorboard/ 2>/dev/null)
check tensorboard/one_event_file grep -qxE "events\.out\.tfevents\.[0-9]+\.[^.]+\.[0-9]+" <<<"$files"
check tensorboard/every_scalar_of_metrics "$py" "$PP_ROOT/tests/tools/tensorboard_check.py" $run
tags() { "$py" -c '
import sys
from tensorboard.backend.event_processing import event_accumulator as ea
a = ea.EventAccumulator(sys.argv[1]); a.Reload(); print(" ".join(sorted(a.Tags()["scalars"])))' $run/tensorboard; }
check tensorboard/tags test "$(tags)" = "checkpoint_blocked_s flops_per_s grad_norm loss lr step_time tokens_per_s val_loss"
# one byte flipped in the middle: the reader stops at the damaged record
n=$("$py" "$PP_ROOT/tests/tools/tensorboard_check.py" $run --count)
f=$run/tensorboard/$files
/usr/bin/python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[len(b) // 2] ^= 0xff; open(sys.argv[1], "wb").write(b)' "$f"
m=$("$py" "$PP_ROOT/tests/tools/tensorboard_check.py" $run --count 2>/dev/null)
check tensorboard/crc_checked test "${m:-x}" -lt "$n"
pp-train model=llama-tiny data=synthetic steps=3 tensorboard=false run_dir=$T/off --quiet 2>/dev/null
check tensorboard/turned_off test ! -e $T/off/tensorboard
