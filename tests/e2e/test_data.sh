#!/usr/bin/env bash
# pp-tokenize end to end (real text, a 32000-piece SentencePiece tokenizer:
# Llama 2's, or Mistral's from PyPI where it is not at hand; decoded back and
# compared with the input), its usage and run-time errors, and pp-train on
# token data: pp-tokens, and Megatron and llm.c files written here with numpy
# from their published layouts; bitwise resume across a checkpoint; a
# tokenizer that did not make the data.
. "$(dirname "$0")/../tools/lib.sh"

py=/usr/bin/python3
if ! tok=$(spm_tokenizer 2>$T/tok.err); then
	skip data "no SentencePiece tokenizer: $(cat $T/tok.err)"
	exit 0
fi
fp=$(sha256sum "$tok" | cut -c 1-8)
have_h5py=1
jqe() { jq -e "$@" >/dev/null; }
jqse() { jq -se "$@" >/dev/null; }
$py -c 'import h5py, numpy' 2>/dev/null || have_h5py=0

lic=/usr/share/common-licenses
texts=()
for f in Apache-2.0 Artistic BSD GPL-2 GPL-3 LGPL-2.1 MPL-2.0 CC0-1.0; do
	[ -f $lic/$f ] && texts+=($lic/$f)
done
if [ ${#texts[@]} -lt 4 ]; then
	skip data "too few texts in $lic"
	exit 0
fi

# --- usage and run-time errors ----------------------------------------------------
expect_fail tokenize/missing_input 2 "nope.txt" pp-tokenize --tokenizer $tok -o $T/x.h5 $T/nope.txt
expect_fail tokenize/unwritable_output 1 "no/such/dir/x.h5.*No such file" pp-tokenize --tokenizer $tok -o $T/no/such/dir/x.h5 ${texts[0]}
expect_fail tokenize/output_is_directory 2 "is a directory" pp-tokenize --tokenizer $tok -o $T ${texts[0]}
expect_fail tokenize/val_fraction_too_big 2 "--val-fraction '1.5'.*\[0, 1\)" pp-tokenize --tokenizer $tok -o $T/x.h5 --val-fraction 1.5 ${texts[0]}
expect_fail tokenize/val_fraction_not_a_number 2 "--val-fraction 'abc'" pp-tokenize --tokenizer $tok -o $T/x.h5 --val-fraction abc ${texts[0]}
expect_fail tokenize/val_fraction_negative 2 "--val-fraction '-0.1'" pp-tokenize --tokenizer $tok -o $T/x.h5 --val-fraction -0.1 ${texts[0]}
expect_fail tokenize/no_tokenizer 2 "--tokenizer" pp-tokenize -o $T/x.h5 ${texts[0]}
expect_fail tokenize/no_output 2 "-o OUT.h5" pp-tokenize --tokenizer $tok ${texts[0]}
expect_fail tokenize/two_modes 2 "exclude each other" pp-tokenize --tokenizer $tok -o $T/x.h5 --one-doc-per-line --separator x ${texts[0]}
expect_fail tokenize/unknown_option 2 "--frobnicate" pp-tokenize --tokenizer $tok -o $T/x.h5 --frobnicate ${texts[0]}
# binary and empty input: an error naming the input, and no dataset written
expect_fail tokenize/binary_input 1 "pp-init holds NUL bytes: a binary file" pp-tokenize --tokenizer $tok -o $T/bin.h5 $PP_ROOT/build/bin/pp-init
: >$T/empty.txt
expect_fail tokenize/empty_input 1 "empty.txt: no text to tokenize \(0 bytes read\)" pp-tokenize --tokenizer $tok -o $T/empty.h5 $T/empty.txt
expect_fail tokenize/empty_stdin 1 "standard input: no text to tokenize" pp-tokenize --tokenizer $tok -o $T/empty.h5 </dev/null
# a split pp-train cannot read is said at tokenize time
echo "one short document" >$T/one.txt
pp-tokenize --tokenizer $tok -o $T/one.h5 --val-fraction 0.99 --quiet $T/one.txt >/dev/null 2>$T/one.log
check tokenize/empty_train_warned grep -q "warning: .*one.h5: the train split is empty" $T/one.log
check tokenize/nothing_written_for_bad_input test ! -e $T/bin.h5 -a ! -e $T/empty.h5
expect_fail tokenize/bad_tokenizer 1 "x.h5|tokenizer|protobuf|model" pp-tokenize --tokenizer ${texts[0]} -o $T/x.h5 ${texts[0]}
check tokenize/nothing_left_behind bash -c "! ls -A $T | grep -q 'x.h5'"
# a signal stops it cleanly: status 1, no output and no temporary file
(sleep 30 | pp-tokenize --tokenizer $tok -o $T/sig.h5 2>$T/sig.log) &
pid=$!
sleep 0.5
kill -INT $(pgrep -P $pid -x pp-tokenize) 2>/dev/null
wait $pid
rc=$?
check tokenize/sigint_exit_1 test $rc -eq 1
check tokenize/sigint_message grep -q "interrupted; .*sig.h5 not written" $T/sig.log
check tokenize/sigint_nothing_left bash -c "! ls -A $T | grep -q 'sig.h5'"
check tokenize/help bash -c "pp-tokenize --help | grep -q -- --val-fraction"
check tokenize/version bash -c "pp-tokenize --version | grep -q '^pp-tokenize '"

# --- end to end: tokenize, decode back, compare -----------------------------------
pp-tokenize --tokenizer $tok -o $T/lic.h5 --json "${texts[@]}" >$T/lic.json 2>$T/lic.log
rc=$?
check tokenize/exit_0 test $rc -eq 0
check tokenize/json_summary jqe --arg n ${#texts[@]} --arg fp "$(sha256sum "$tok" | cut -d' ' -f1)" '.train.documents == ($n | tonumber) and .val.documents == 0 and .train.tokens > 10000 and .format == "pp-tokens" and .tokenizer_fingerprint == $fp and .vocab_size == 32000' $T/lic.json
check tokenize/progress_on_stderr grep -q "MB/s" $T/lic.log
if [ $have_h5py = 1 ]; then
	# one line of ids per document; tool_tokenize --decode prints each decoded, then a newline
	$py - $T/lic.h5 >$T/ids.txt <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format"] == "pp-tokens" and f.attrs["version"] == 1
g = f["train"]
off = g["doc_offsets"][:]
for i in range(len(off) - 1):
    print(" ".join(map(str, g["tokens"][off[i]:off[i + 1]].tolist())))
EOF
	"$PP_ROOT/build/tests/tool_tokenize" $tok --decode <$T/ids.txt >$T/decoded.txt
	for f in "${texts[@]}"; do cat "$f"; echo; done >$T/expected.txt
	check tokenize/decode_equals_input cmp -s $T/decoded.txt $T/expected.txt
	check tokenize/sources_recorded $py -c "
import h5py, sys
s = [x.decode() if isinstance(x, bytes) else x for x in h5py.File('$T/lic.h5', 'r').attrs['sources']]
sys.exit(s != sys.argv[1:])" "${texts[@]}"
else
	skip tokenize/decode_equals_input "no h5py for /usr/bin/python3"
fi

# one document per line, from standard input; and a separator
grep -v '^$' ${texts[0]} >$T/lines.txt
pp-tokenize --tokenizer $tok -o $T/lines.h5 --one-doc-per-line --json --quiet <$T/lines.txt >$T/lines.json 2>$T/lines.log
check tokenize/one_doc_per_line_stdin jqe --arg n "$(wc -l <$T/lines.txt)" '.train.documents == ($n | tonumber)' $T/lines.json
check tokenize/quiet bash -c "! grep -q 'MB/s' $T/lines.log"
printf 'first doc\nline two\n%%%%\nsecond doc\n%%%%\n%%%%\nthird\n' >$T/sep.txt
pp-tokenize --tokenizer $tok -o $T/sep.h5 --separator %% --json $T/sep.txt >$T/sep.json 2>/dev/null
check tokenize/separator jqe '.train.documents == 3' $T/sep.json

# the split: deterministic, both splits used, another seed another split
pp-tokenize --tokenizer $tok -o $T/split1.h5 --one-doc-per-line --val-fraction 0.2 --seed 7 --quiet $T/lines.txt >/dev/null
pp-tokenize --tokenizer $tok -o $T/split2.h5 --one-doc-per-line --val-fraction 0.2 --seed 7 --quiet $T/lines.txt >/dev/null
pp-tokenize --tokenizer $tok -o $T/split3.h5 --one-doc-per-line --val-fraction 0.2 --seed 8 --quiet --json $T/lines.txt >$T/split3.json
check tokenize/split_deterministic same_tensors $T/split1.h5 $T/split2.h5 /train/tokens
h5dump -d /val/tokens -b LE -o $T/val1.bin $T/split1.h5 >/dev/null
h5dump -d /val/tokens -b LE -o $T/val3.bin $T/split3.h5 >/dev/null
check tokenize/split_seeded bash -c "test -s $T/val1.bin && ! cmp -s $T/val1.bin $T/val3.bin"
check tokenize/split_both_used jqe '.val.documents > 0 and .train.documents > .val.documents' $T/split3.json
pp-tokenize --tokenizer $tok -o $T/two.h5 --val-fraction 0.01 --json --quiet ${texts[0]} ${texts[1]} >$T/two.json
check tokenize/two_docs_one_each jqe '.val.documents == 1 and .train.documents == 1' $T/two.json

# --- pp-train on the dataset -------------------------------------------------------
# Llama-tiny with the tokenizer's 32000-token vocabulary: 6 steps in one go
# with checkpoints at 3 and 6, then a run resumed from the step-3 checkpoint;
# losses of steps 4..6, validation losses and final tensors must be identical.
pp-tokenize --tokenizer $tok -o $T/train.h5 --val-fraction 0.25 --seed 1 --quiet "${texts[@]}" >/dev/null
run="model=llama-tiny model.vocab_size=32000 data=$T/train.h5 tokenizer=$tok global_batch=4 microbatch=2 seq_len=32 steps=6 checkpoint_period=3 keep=0 eval_interval=3 eval_batches=2 lr=1e-3 seed=5"
pp-train $run run_dir=$T/ref --quiet 2>$T/ref.log
check train/tokens_runs test -f $T/ref/checkpoints/step_00000006/manifest.json
first=$(jq -r 'select(.step == 1) | .loss' $T/ref/metrics.jsonl 2>/dev/null)
check train/initial_loss_near_ln_32000 awk -v l="$first" 'BEGIN { exit !(l > 9.5 && l < 11.5) }'
check train/val_loss_logged jqse '[.[] | select(.val_loss != null)] | length == 2' $T/ref/metrics.jsonl
mkdir -p $T/res/checkpoints
cp -r $T/ref/checkpoints/step_00000003 $T/res/checkpoints/
pp-train $run run_dir=$T/res 2>$T/res.log
check train/resumed grep -q "resumed from step 3" $T/res.log
same_run() {
	diff <(losses $T/ref | awk '$1 > 3') <(losses $T/res) >/dev/null &&
		diff <(jq -c 'select(.val_loss != null and .step > 3)' $T/ref/metrics.jsonl) <(jq -c 'select(.val_loss != null)' $T/res/metrics.jsonl) >/dev/null &&
		same_tensors $T/ref/checkpoints/step_00000006/shard-pp000-tp000.h5 $T/res/checkpoints/step_00000006/shard-pp000-tp000.h5
}
check train/bitwise_resume_on_tokens same_run

# a dataset made by another tokenizer (its fingerprint edited) is refused
if [ $have_h5py = 1 ]; then
	cp $T/train.h5 $T/other.h5
	$py -c "import h5py; f = h5py.File('$T/other.h5', 'r+'); f.attrs['tokenizer_fingerprint'] = '0' * 64"
	expect_fail train/tokenizer_mismatch 2 "other.h5.*0000000000000000.*$(basename "$tok").*$fp" pp-train $run data=$T/other.h5 run_dir=$T/mismatch
fi
expect_fail train/vocab_larger_than_model 2 "32000.*model.vocab_size=256" pp-train $run model.vocab_size=256 run_dir=$T/small
expect_fail train/missing_data 2 "nope.h5" pp-train $run data=$T/nope.h5 run_dir=$T/nope
printf 'garbage' >$T/bad.h5
expect_fail train/corrupt_data 1 "bad.h5.*not a readable HDF5" pp-train $run data=$T/bad.h5 run_dir=$T/bad

# --- Megatron and llm.c files written by numpy, as their own tools write them ------
if [ $have_h5py = 1 ]; then
	$py - $T/train.h5 $T <<'EOF'
import struct, sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
g = f["train"]
off, toks = g["doc_offsets"][:], g["tokens"][:]
docs = [toks[off[i]:off[i + 1]] for i in range(len(off) - 1)]
out = sys.argv[2]
# Megatron-LM IndexedDatasetBuilder + _IndexWriter: one sequence per document
with open(out + "/mega.bin", "wb") as b:
    for d in docs:
        b.write(d.astype(np.uint16).tobytes())
sizes = np.array([len(d) for d in docs], np.int32)
pointers = np.concatenate([[0], np.cumsum(sizes[:-1].astype(np.int64) * 2)]).astype(np.int64)
doc_idx = np.arange(len(docs) + 1, dtype=np.int64)
with open(out + "/mega.idx", "wb") as x:
    x.write(b"MMIDIDX\x00\x00")
    x.write(struct.pack("<Q", 1))
    x.write(struct.pack("<B", 8))  # DType.uint16
    x.write(struct.pack("<Q", len(sizes)))
    x.write(struct.pack("<Q", len(doc_idx)))
    x.write(sizes.tobytes(order="C"))
    x.write(pointers.tobytes(order="C"))
    x.write(doc_idx.tobytes(order="C"))
# llm.c write_datafile: 256 int32 header, then the tokens; EOT (2 here) before each document
stream = np.concatenate([np.concatenate([[2], d]) for d in docs])
for k, part in enumerate(np.array_split(stream, 2)):
    header = np.zeros(256, np.int32)
    header[0], header[1], header[2] = (20240520, 1, len(part)) if k == 0 else (20240801, 7, len(part))
    with open(f"{out}/llmc_train_{k:06d}.bin", "wb") as s:
        s.write(header.tobytes())
        s.write(part.astype(np.uint16 if k == 0 else np.uint32).tobytes())
EOF
	mrun="model=llama-tiny model.vocab_size=32000 global_batch=4 microbatch=2 seq_len=32 steps=2 lr=1e-3 eval_interval=2 eval_batches=1"
	pp-train $mrun data=$T/mega tokenizer=$tok val_data=$T/train.h5 run_dir=$T/mega --quiet 2>$T/mega.log
	check interop/megatron_trains jqse '[.[] | select(.loss != null)] | length == 2' $T/mega/metrics.jsonl
	pp-train $mrun data="$T/llmc_train_*.bin" val_data=$T/mega.idx run_dir=$T/llmc --quiet 2>$T/llmc.log
	check interop/llmc_trains jqse '[.[] | select(.loss != null)] | length == 2' $T/llmc/metrics.jsonl
	expect_fail interop/megatron_needs_val_data 2 "no validation split.*val_data" pp-train $mrun data=$T/mega.bin run_dir=$T/mega2
	truncate -s 100 $T/mega.bin
	expect_fail interop/megatron_truncated 1 "mega.bin has 100 bytes.*truncated" pp-train $mrun data=$T/mega run_dir=$T/mega3 eval_interval=0
fi
