#!/usr/bin/env bash
# pp-ckpt and what it relies on:
#   - ls, info (text and --json), verify, diff on a trained run;
#   - reshard round trips: llama-tiny trained at pp=2 x tp=2 x dp=2 with
#     ZeRO-1 (mpirun), its step-10 checkpoint converted to pp=1 tp=1 dp=1 and
#     to pp=4 tp=1 dp=2 with ZeRO-1, each resumed to step 20: every loss
#     within 1e-5 of the unconverted continuation; converted there and back
#     again, pp-ckpt diff says exactly zero and the AdamW state is bitwise
#     the same;
#   - corruption: a truncated shard, a flipped byte, a missing shard,
#     overlapping slices, a wrong format version, a NaN: verify names each
#     (and every problem at once), and pp-train resumes from the newest
#     sound checkpoint with a warning naming the damaged one (pp-decode
#     too); convert and export of a damaged checkpoint fail on its sha256
#     and leave nothing;
#   - a full disk (a small tmpfs; root): pp-train, pp-init -o and pp-ckpt
#     convert exit 1 with the error, no crash, no temporary files, the
#     previous checkpoint still loadable;
#   - usage errors.
. "$(dirname "$0")/../tools/lib.sh"
cd "$PP_ROOT" || exit 1
export OMP_NUM_THREADS=1
common="model=llama-tiny model.n_layers=4 global_batch=8 microbatch=1 seq_len=32 lr=1e-3
	log_period=1 data=synthetic keep=0"
ck() { printf '%s/checkpoints/step_%08d' "$1" "$2"; }
same_losses_tol() { # A B FROM: the losses of A and B after step FROM within 1e-5
	paste -d' ' <(losses $1 | awk -v s=$3 '$1 > s') <(losses $2 | awk -v s=$3 '$1 > s') |
		awk 'NF != 4 || $1 != $3 { bad = 1 } { d = ($2 - $4) / $2; if (d < 0) d = -d;
			if (d > 1e-5) bad = 1; n++ } END { exit bad || n == 0 }'
}

# --- inspection -----------------------------------------------------------------------------
pp-train $common steps=4 checkpoint_period=2 run_dir=$T/small --quiet 2>$T/small.log ||
	{ fail ckpt_cli/train "$(tail -n 2 $T/small.log)"; exit 1; }
check ckpt_cli/ls eval 'pp-ckpt ls $T/small >$T/ls.txt && grep -q "^00000004 .*pp=1 tp=1 dp=1 .* sound$" $T/ls.txt &&
	grep -q "^00000002 " $T/ls.txt'
check ckpt_cli/ls_json eval 'pp-ckpt ls $T/small --json | python3 -c "import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r[\"step\"] for r in rows] == [4, 2] and all(r[\"sound\"] for r in rows), rows"'
check ckpt_cli/info eval 'pp-ckpt info $T/small >$T/info.txt && grep -q "^step *4 (1024 tokens seen" $T/info.txt &&
	grep -q "^layout *pp=1 tp=1 dp=1" $T/info.txt && grep -q "model.layers.3.mlp.down_proj.weight *64 x 96 *float32" $T/info.txt'
check ckpt_cli/info_json eval 'pp-ckpt info $(ck $T/small 2) --json | python3 -c "import json, sys
d = json.load(sys.stdin)
assert d[\"step\"] == 2 and d[\"format_version\"] == 1 and d[\"layout\"][\"pp\"] == 1
assert d[\"model\"][\"family\"] == \"llama\" and d[\"optimizer_state\"]
t = {x[\"name\"]: x for x in d[\"tensors\"]}
assert t[\"lm_head.weight\"][\"global_shape\"] == [256, 64] and t[\"lm_head.weight\"][\"dtype\"] == \"float32\""'
check ckpt_cli/verify_sound eval 'pp-ckpt verify $T/small | grep -q "step_00000004: sound$"'
check ckpt_cli/diff_same eval 'pp-ckpt diff $(ck $T/small 4) $(ck $T/small 4) | tail -n 1 | grep -q "^0 of 39 tensors"'
expect_fail ckpt_cli/diff_differs 1 "differ: 39 tensors past --tol 0" pp-ckpt diff $(ck $T/small 2) $(ck $T/small 4)
check ckpt_cli/diff_tol eval 'pp-ckpt diff $(ck $T/small 2) $(ck $T/small 4) --tol 1 >/dev/null'
# the saved config, as pp-train --cfg takes it: the run resumes from it alone
check ckpt_cli/info_config eval 'cp -r $T/small $T/again && pp-ckpt info $T/again --config >$T/again.json &&
	pp-train --cfg $T/again.json steps=5 --quiet 2>$T/again.log && grep -q "resumed from step 4" $T/again.log'
# dtype=bf16: the same fp32 master weights, the config computing in bf16
check ckpt_cli/convert_dtype eval 'pp-ckpt convert $T/small -o $T/bf16 dtype=bf16 >/dev/null 2>&1 &&
	pp-ckpt info $T/bf16 --config | grep -q "^  \"dtype\": \"bf16\"" &&
	pp-ckpt diff $T/small $T/bf16 | tail -n 1 | grep -q "^0 of 39 tensors"'

# --- a checkpoint on its own: its config and its tokenizer ------------------------------------
# trained with a tokenizer file that is then removed: pp-decode --ckpt needs
# neither --cfg nor the file, and a converted run keeps the tokenizer too
if spm=$(spm_tokenizer 2>$T/tok.err); then
	cp "$spm" $T/tok.model
	pp-train model=llama-tiny model.vocab_size=32000 data=synthetic steps=2 global_batch=2 \
		microbatch=1 seq_len=16 tokenizer=$T/tok.model run_dir=$T/own --quiet 2>$T/own.log
	rm -f $T/tok.model
	check ckpt_own/decode_text eval 'pp-decode --ckpt $T/own --prompt "In the beginning" -n 4 \
		--temperature 0 2>$T/dec.err | grep -q "^In the beginning" && ! grep -q error $T/dec.err'
	check ckpt_own/decode_checkpoint_dir eval 'pp-decode --ckpt $(ck $T/own 2) --prompt "Hello" -n 2 >/dev/null 2>&1'
	check ckpt_own/convert_keeps_tokenizer eval 'pp-ckpt convert $T/own -o $T/own2 tp=2 >/dev/null 2>&1 &&
		pp-decode --ckpt $T/own2 --prompt "In the beginning" -n 4 --temperature 0 2>/dev/null | grep -q "^In the beginning"'
else
	for c in decode_text decode_checkpoint_dir convert_keeps_tokenizer; do
		skip ckpt_own/$c "no SentencePiece tokenizer: $(cat $T/tok.err)"
	done
fi

# --- reshard round trips ------------------------------------------------------------------------
run8() { mpirun -n 8 --allow-run-as-root --oversubscribe pp-train $common "$@" --quiet; }
if ! command -v mpirun >/dev/null; then
	for c in reference to_111 to_412 resume_111 resume_412 there_and_back adam_there_and_back; do
		skip ckpt_reshard/$c "no mpirun (scripts/install-deps.sh)"
	done
elif ! run8 pp=2 tp=2 dp=2 shard_optimizer=true steps=20 checkpoint_period=10 run_dir=$T/ref 2>$T/ref.log; then
	fail ckpt_reshard/reference "mpirun exited: $(grep -m1 error $T/ref.log)"
else
	pass ckpt_reshard/reference
	check ckpt_reshard/to_111 eval 'pp-ckpt convert $(ck $T/ref 10) -o $T/c111 pp=1 tp=1 dp=1 \
		shard_optimizer=false >/dev/null 2>$T/c111.log && grep -q "peak RSS" $T/c111.log'
	check ckpt_reshard/to_412 eval 'pp-ckpt convert $(ck $T/ref 10) -o $T/c412 pp=4 tp=1 dp=2 \
		shard_optimizer=true >/dev/null 2>$T/c412.log && pp-ckpt info $T/c412 | grep -q "pp=4 tp=1 dp=2, AdamW state sharded"'
	check ckpt_reshard/resume_111 eval 'pp-train $common steps=20 run_dir=$T/c111 --quiet 2>$T/r111.log &&
		grep -q "resumed from step 10" $T/r111.log && same_losses_tol $T/ref $T/c111 10'
	check ckpt_reshard/resume_412 eval 'run8 pp=4 dp=2 shard_optimizer=true steps=20 run_dir=$T/c412 2>$T/r412.log &&
		same_losses_tol $T/ref $T/c412 10'
	# there and back: pp=2 tp=2 dp=2 ZeRO-1 -> pp=1 -> pp=2 tp=2 dp=2 ZeRO-1
	pp-ckpt convert $(ck $T/ref 10) -o $T/there pp=1 tp=1 dp=1 shard_optimizer=false >/dev/null 2>&1
	pp-ckpt convert $T/there -o $T/back pp=2 tp=2 dp=2 shard_optimizer=true >/dev/null 2>&1
	check ckpt_reshard/there_and_back eval 'pp-ckpt diff $(ck $T/ref 10) $(ck $T/back 10) >$T/diff.txt &&
		tail -n 1 $T/diff.txt | grep -q "^0 of 39 tensors differ past tolerance 0; largest relative difference 0 "'
	adam_same() {
		local f
		for f in $(ck $T/ref 10)/*.h5; do
			same_tensors $f $(ck $T/back 10)/${f##*/} $(case ${f##*/} in optim*) echo /adam_m /adam_v ;; *) echo /params ;; esac) || return 1
		done
	}
	check ckpt_reshard/adam_there_and_back adam_same
fi

# --- corruption ------------------------------------------------------------------------------
# a copy of the small run with step 4 damaged in one way; verify names the
# damage, and resuming falls back to step 2 with a warning naming step 4
damaged() { rm -rf $T/bad; cp -r $T/small $T/bad; }
shard4=$T/bad/checkpoints/step_00000004/shard-pp000-tp000.h5
resume_falls_back() {
	pp-train $common steps=6 run_dir=$T/bad 2>$T/fb.log &&
		grep -q "warning: step_00000004 fails verification (.*); resuming from $T/bad/checkpoints/step_00000002" $T/fb.log &&
		grep -q "resumed from step 2" $T/fb.log || { tail -n 3 $T/fb.log; false; }
}
# verify_says PATTERN: verify exits 1 and prints a line matching PATTERN
verify_says() {
	pp-ckpt verify $(ck $T/bad 4) >$T/v.txt 2>$T/v.err
	[ $? -eq 1 ] && grep -qE -- "$1" $T/v.txt || { cat $T/v.txt $T/v.err; false; }
}
corrupt() { # NAME PATTERN COMMAND...: the damage, then verify's message and the fallback
	local name=$1 pat=$2
	shift 2
	damaged
	"$@"
	check ckpt_corrupt/${name}_verify verify_says "$pat"
	check ckpt_corrupt/${name}_resume resume_falls_back
}
flip() { printf '\xff' | dd of=$1 bs=1 seek=$(($(stat -c %s $1) / 2)) conv=notrunc status=none; }
edit_manifest() { # python over step 4's manifest.json
	python3 -c "import json, sys
p = sys.argv[1]; m = json.load(open(p)); $1
json.dump(m, open(p, 'w'))" $T/bad/checkpoints/step_00000004/manifest.json
}
corrupt truncated "is [0-9]+ bytes; manifest.json says [0-9]+ \(truncated" truncate -s -1000 $shard4
corrupt flipped "sha256" flip $shard4
corrupt missing "shard-pp000-tp000.h5 \(listed in manifest.json\)" rm $shard4
corrupt version "format version 99" edit_manifest 'm["version"] = 99'
# a damaged checkpoint named directly: convert and export check every
# file's sha256 as they read it, fail, and leave nothing behind
damaged
flip $shard4
# pp-decode given the run falls back past the damaged step 4 and says so
check ckpt_corrupt/decode_falls_back eval 'pp-decode --ckpt $T/bad --prompt "1 2 3" -n 2 >/dev/null 2>$T/dfb.log &&
	grep -q "warning: step_00000004 fails verification (.*); using $T/bad/checkpoints/step_00000002, the newest sound one" $T/dfb.log'
for c in "convert -o $T/from-bad tp=2" "export --format safetensors -o $T/from-bad-st"; do
	check "ckpt_corrupt/${c%% *}_refuses" eval 'pp-ckpt $c $(ck $T/bad 4) >/dev/null 2>$T/fb.err; [ $? -eq 1 ] &&
		grep -q "shard-pp000-tp000.h5 has sha256 .* (the file is corrupt)" $T/fb.err &&
		[ -z "$(find $T/from-bad* -type f 2>/dev/null)" ]'
done
# overlapping slices: two shards (tp=2) whose q_proj rows claim the same block
pp-ckpt convert $T/small -o $T/tp2 tp=2 >/dev/null 2>&1
overlap() {
	rm -rf $T/bad/checkpoints/step_00000004
	cp -r $(ck $T/tp2 4) $T/bad/checkpoints/
	edit_manifest 'q = m["tensors"]["model.layers.0.self_attn.q_proj.weight"]["shards"]; q[1]["offset"] = q[0]["offset"]'
}
corrupt overlap "blocks of its params in shard-pp000-tp00[01].h5 and shard-pp000-tp00[01].h5 overlap" overlap
# everything at once: one line per problem
damaged
truncate -s -1000 $shard4
edit_manifest 'q = m["tensors"]["model.layers.1.mlp.up_proj.weight"]["shards"]; q[0]["shape"] = [1, 64]'
check ckpt_corrupt/every_problem eval '! pp-ckpt verify $(ck $T/bad 4) >$T/all.txt 2>$T/all.err &&
	grep -q "up_proj.weight: its params cover 64 of 6144" $T/all.txt && grep -q "truncated" $T/all.txt &&
	grep -q "2 problems" $T/all.err'
# a NaN in a sound file: written with h5py (the reference venv), hash rewritten
if py=$(scripts/setup-reference.sh 2>$T/venv.log); then
	damaged
	"$py" -c "import h5py, numpy, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['params/model.norm.weight']; x = d[()]; x[3] = numpy.nan; x[5] = numpy.inf; d[...] = x" $shard4
	sha=$(sha256sum $shard4 | cut -d' ' -f1) size=$(stat -c %s $shard4)
	edit_manifest "[f.update(sha256='$sha', bytes=$size) for f in m['files']]"
	check ckpt_corrupt/nan_verify eval '! pp-ckpt verify $(ck $T/bad 4) >$T/nan.txt 2>/dev/null &&
		grep -q "model.norm.weight: /params holds 1 NaN and 1 infinite values of 64 (the first at element 3)" $T/nan.txt'
	check ckpt_corrupt/nan_skipped_without_values eval 'pp-ckpt verify $(ck $T/bad 4) --no-values >/dev/null'
else
	skip ckpt_corrupt/nan_verify "reference venv unavailable: $(tail -n 1 $T/venv.log)"
	skip ckpt_corrupt/nan_skipped_without_values "reference venv unavailable"
fi
damaged
check ckpt_corrupt/resume_from_picks eval 'pp-train $common steps=6 resume_from=2 run_dir=$T/bad 2>$T/rf.log &&
	grep -q "resumed from step 2" $T/rf.log'
damaged
truncate -s -1000 $shard4
expect_fail ckpt_corrupt/resume_from_damaged 1 "resume_from=4: .*truncated" pp-train $common steps=6 resume_from=4 run_dir=$T/bad
damaged
truncate -s -1000 $shard4 $T/bad/checkpoints/step_00000002/shard-pp000-tp000.h5
expect_fail ckpt_corrupt/all_damaged 1 "no checkpoint in .* passes verification: step_00000004 fails .*; step_00000002 fails" \
	pp-train $common steps=6 run_dir=$T/bad

# --- a full disk -------------------------------------------------------------------------------
disk=$T/disk
full_disk() { # SIZE: a fresh tmpfs of SIZE at $disk
	umount $disk 2>/dev/null
	mkdir -p $disk && mount -t tmpfs -o size=$1 tmpfs $disk
}
no_tmp() { ! ls -a $1/checkpoints 2>/dev/null | grep -q '^\.tmp-'; }
if [ "$(id -u)" -ne 0 ] || ! full_disk 1800k 2>/dev/null; then
	for c in train init convert metrics metrics_tensorboard profile; do skip ckpt_disk/$c "needs root to mount a small tmpfs"; done
else
	# room for one llama-tiny checkpoint (1.2 MB), not two
	tiny="model=llama-tiny global_batch=4 microbatch=2 seq_len=32 data=synthetic keep=0"
	pp-train $tiny steps=4 checkpoint_period=2 run_dir=$disk/run >/dev/null 2>$T/disk.log
	rc=$?
	check ckpt_disk/train eval '[ $rc -eq 1 ] && grep -q "No space left on device" $T/disk.log && no_tmp $disk/run &&
		pp-ckpt verify $disk/run >/dev/null && pp-decode model=llama-tiny run_dir=$disk/run --prompt "1 2" -n 2 >/dev/null 2>&1'
	full_disk 200k # pp-init writes parameters only (0.4 MB)
	pp-init model=llama-tiny -o $disk/init >/dev/null 2>$T/disk.log
	rc=$?
	check ckpt_disk/init eval '[ $rc -eq 1 ] && grep -q "No space left on device" $T/disk.log && no_tmp $disk/init'
	full_disk 600k
	pp-ckpt convert $T/small -o $disk/conv tp=2 >/dev/null 2>$T/disk.log
	rc=$?
	check ckpt_disk/convert eval '[ $rc -eq 1 ] && grep -q "No space left on device" $T/disk.log && no_tmp $disk/conv'
	# metrics that no longer fit: one warning per output, naming its file,
	# with TensorBoard's events or without (the run itself saves nothing)
	for tb in false true; do
		full_disk 8k
		pp-train $tiny steps=60 save_on_completion=false tensorboard=$tb run_dir=$disk/m --quiet 2>$T/m-$tb.log
		echo "rc=$?" >>$T/m-$tb.log
	done
	metrics_said() {
		grep -q "^rc=0" $1 && [ "$(grep -c "warning: cannot write .*/m/metrics.jsonl: No space left on device" $1)" = 1 ]
	}
	check ckpt_disk/metrics metrics_said $T/m-false.log
	check ckpt_disk/metrics_tensorboard eval 'metrics_said $T/m-true.log && [ "$(grep -c "warning: .*/m/tensorboard/events.out.tfevents.*No space left on device" $T/m-true.log)" = 1 ]'
	# a profile that cannot be created once the metrics filled the disk: said,
	# and no temporary file left behind
	full_disk 4k
	pp-train $tiny steps=42 save_on_completion=false tensorboard=false profile_steps=40:42 \
		run_dir=$disk/p --quiet 2>$T/p.log
	check ckpt_disk/profile eval 'grep -q "rank 0.s profile is not written: cannot create" $T/p.log &&
		[ -z "$(ls -A $disk/p/profile)" ]'
	umount $disk
fi

# --- usage ---------------------------------------------------------------------------------
expect_fail ckpt_usage/no_command 2 "usage: pp-ckpt COMMAND" pp-ckpt
expect_fail ckpt_usage/unknown 2 "unknown command 'frobnicate'" pp-ckpt frobnicate
expect_fail ckpt_usage/convert_no_out 2 "give -o RUN_DIR" pp-ckpt convert $T/small
expect_fail ckpt_usage/not_a_checkpoint 2 "neither a checkpoint .* nor a run directory" pp-ckpt info $T
expect_fail ckpt_usage/bad_layout 2 "model.n_heads 4 is not divisible by tp 3" pp-ckpt convert $T/small -o $T/x tp=3
# a run directory that holds a checkpoint already: convert and import refuse it
# (a step written beside a newer one would be passed over)
expect_fail ckpt_usage/convert_into_run 2 "already holds checkpoint step .*; pp-ckpt writes new runs only" \
	pp-ckpt convert $T/small -o $T/small tp=2
pp-ckpt export $T/small --format safetensors -o $T/hf >/dev/null 2>&1
expect_fail ckpt_usage/import_into_run 2 "already holds checkpoint step .*; pp-ckpt writes new runs only" \
	pp-ckpt import --format safetensors $T/hf -o $T/small
# messages that say what is wrong
printf 'GGUF\003\000\000\000' >$T/model.gguf
expect_fail ckpt_usage/import_gguf_as_safetensors 2 "model.gguf: expected a Hugging Face model directory.*this is a GGUF file: --format gguf" \
	pp-ckpt import --format safetensors $T/model.gguf -o $T/imp
expect_fail ckpt_usage/export_formats 2 "--format 'pp': use pp-ckpt convert" pp-ckpt export $T/small --format pp -o $T/x
expect_fail ckpt_usage/export_unknown 2 "--format 'npz': expected safetensors, gguf, llama2c or peft$" pp-ckpt export $T/small --format npz -o $T/x
expect_fail ckpt_usage/import_unknown 2 "--format 'pp': expected safetensors, gguf or peft" pp-ckpt import --format pp $T/small -o $T/x
check ckpt_usage/help eval 'pp-ckpt convert --help | grep -q "usage: pp-ckpt convert CKPT -o RUN_DIR"'
