#!/usr/bin/env bash
# pp-tokenize --format jsonl end to end, with a byte-level BPE tokenizer made
# here (tests/tools/tiny_bpe.py) given ChatML's <|im_start|> and <|im_end|>
# and a tokenizer_config.json with a ChatML template, and the same without
# a template (the plain one):
#   - the line kinds: text as pp-tokenize encodes text (every token counts,
#     the same ids as --one-doc-per-line); prompt/completion without a
#     template: BOS, prompt and completion in one encoding, EOS, the
#     completion's tokens and the EOS count (computed here from the
#     prompt's and the whole text's ids); messages with ChatML: the tokens
#     that count are exactly each assistant turn's content and its
#     <|im_end|> (decoded back and compared with the messages); the
#     conversational prompt/completion: only the completion's turns;
#   - .jsonl, .jsonl.gz and .jsonl.zst (made by gzip and zstd) of the same
#     lines give the same datasets, and byte-identical files from standard
#     input; compressed data is known by its bytes, not its name;
#   - bad input: exit 2, a message naming file:line, no dataset written: a
#     line that is not JSON, one without the fields, an unknown role, no
#     assistant turn, truncated and corrupt .gz and .zst;
#   - pp-train on the masked dataset (one document per sequence, and
#     packing=true with a bitwise resume), and on a version-1 dataset
#     written by h5py from checkpoints-format/tokens.md.
. "$(dirname "$0")/../tools/lib.sh"
py=/usr/bin/python3
tool=$PP_ROOT/build/tests/tool_tokenize
jqe() { jq -e "$@" >/dev/null; }
jqse() { jq -se "$@" >/dev/null; }
for c in gzip zstd; do
	command -v $c >/dev/null || { skip jsonl "no $c (scripts/install-deps.sh)"; exit 0; }
done
$py -c 'import h5py, numpy' 2>/dev/null || { skip jsonl "no h5py for $py"; exit 0; }

# --- tokenizers: ChatML (chat/) and plain (plain/) ----------------------------------
mkdir -p $T/chat $T/plain
$py "$PP_ROOT/tests/tools/tiny_bpe.py" tokenizer.json $T/chat/tokenizer.json
$py - $T/chat $T/plain <<'EOF'
import json, shutil, sys
chat, plain = sys.argv[1], sys.argv[2]
t = json.load(open(chat + "/tokenizer.json"))
n = max(max(t["model"]["vocab"].values()), max(a["id"] for a in t["added_tokens"])) + 1
for i, c in enumerate(["<|im_start|>", "<|im_end|>"]):
    t["added_tokens"].append({"id": n + i, "content": c, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(chat + "/tokenizer.json", "w"))
tpl = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump({"chat_template": tpl, "add_bos_token": False}, open(chat + "/tokenizer_config.json", "w"))
shutil.copy(chat + "/tokenizer.json", plain + "/tokenizer.json")
json.dump({"add_bos_token": True}, open(plain + "/tokenizer_config.json", "w"))
EOF
ctok=$T/chat/tokenizer.json ptok=$T/plain/tokenizer.json
info() { $tool $ctok --info | awk -v k=$1 '$1 == k { print $2 }'; }
vocab=$(info vocab) bos=$(info bos) eos=$(info eos)
# the ids of <|im_start|>, <|im_end|> and of "\n" (byte-level: U+010A)
read -r start end nl <<<"$($py -c "
import json
t = json.load(open('$ctok'))
a = {x['content']: x['id'] for x in t['added_tokens']}
print(a['<|im_start|>'], a['<|im_end|>'], t['model']['vocab']['\u010a'])")"

# one dataset split's documents: "ids|mask" per line
docs() {
	$py - "$1" <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
g = f["train"]
off, tok = g["doc_offsets"][:], g["tokens"][:]
mask = g["loss_mask"][:] if "loss_mask" in g else None
for i in range(len(off) - 1):
    a, b = off[i], off[i + 1]
    m = mask[a:b].tolist() if mask is not None else []
    print(" ".join(map(str, tok[a:b].tolist())) + "|" + " ".join(map(str, m)))
EOF
}
enc() { printf '%s\n' "$1" | $tool $2; } # TEXT TOKENIZER: its ids

# --- the line kinds ---------------------------------------------------------------------
cat >$T/kinds.jsonl <<'EOF'
{"text": "the first text is here", "meta": {"source": "x"}}
{"prompt": "What is in the box?", "completion": " Three red apples."}

{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "Again"}, {"role": "assistant", "content": "Hello again"}]}
{"prompt": [{"role": "user", "content": "Name a colour"}], "completion": [{"role": "assistant", "content": "Blue"}], "id": 7}
EOF
pp-tokenize --tokenizer $ctok -o $T/kinds.h5 --format jsonl --json --quiet $T/kinds.jsonl >$T/kinds.json 2>$T/kinds.log
check jsonl/chatml/exit_0 test $? -eq 0
check jsonl/chatml/summary jqe '.version == 2 and .loss_mask == true and .chat_template == "chatml" and .train.documents == 4' $T/kinds.json
docs $T/kinds.h5 >$T/kinds.docs
text_ids=$(enc "the first text is here" $ctok)
check jsonl/text/ids_as_text_mode test "$(sed -n 1p $T/kinds.docs | cut -d'|' -f1)" = "$text_ids"
check jsonl/text/every_token_counts bash -c "sed -n 1p $T/kinds.docs | cut -d'|' -f2 | tr ' ' '\n' | grep -qv 1; test \$? -eq 1"

# ChatML: each run of counted tokens is an assistant turn's content, then
# <|im_end|>, after the role line "assistant\n" and before the "\n" that
# follows the turn, neither of which counts
$py - $T/kinds.docs "$start" "$end" "$nl" "$(enc assistant $ctok)" >$T/runs.txt 2>$T/runs.err <<'EOF'
import sys
start, end, nl = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
role = [int(x) for x in sys.argv[5].split()] + [nl]
for n, line in enumerate(open(sys.argv[1]).read().splitlines()[1:], 2):
    ids, mask = ([int(x) for x in p.split()] for p in line.split("|"))
    assert len(ids) == len(mask), (n, len(ids), len(mask))
    i = 0
    while i < len(ids):
        if not mask[i]:
            i += 1
            continue
        j = i
        while j < len(ids) and mask[j]:
            j += 1
        s = max(k for k in range(i) if ids[k] == start)  # the turn's <|im_start|>
        assert ids[s + 1:i] == role, (n, ids[s + 1:i], role)
        assert ids[j - 1] == end and j < len(ids) and ids[j] == nl and not mask[j], (n, ids[j - 1:])
        print(n, " ".join(map(str, ids[i:j - 1])), sep="|")  # doc, the content's ids
        i = j
EOF
check jsonl/chatml/turns_between_role_line_and_newline test -s $T/runs.txt -a ! -s $T/runs.err
got=$(while IFS='|' read -r doc ids; do
	printf '%s|%s\n' "$doc" "$(echo "$ids" | $tool $ctok --decode)"
done <$T/runs.txt)
# prompt/completion (document 2) is a user turn and an assistant turn; the
# conversational one (document 4) counts its completion only
want=$(printf '%s\n' "2| Three red apples." "3|Hi there" "3|Hello again" "4|Blue")
check jsonl/chatml/counted_tokens_are_the_assistant_turns test "$got" = "$want"

# plain (no template): BOS, prompt + completion in one encoding, EOS
pp-tokenize --tokenizer $ptok -o $T/plain.h5 --format jsonl --json --quiet $T/kinds.jsonl >$T/plain.json 2>/dev/null
check jsonl/plain/summary jqe '.chat_template == "plain" and .version == 2' $T/plain.json
docs $T/plain.h5 >$T/plain.docs
p_ids=$(enc "What is in the box?" $ptok)
pc_ids=$(enc "What is in the box? Three red apples." $ptok)
np=$(wc -w <<<"$p_ids") npc=$(wc -w <<<"$pc_ids")
want_ids="$bos $pc_ids $eos"
want_mask=$(for ((i = 0; i < npc + 2; i++)); do
	if [ $i -ge $((np + 1)) ]; then echo -n "1 "; else echo -n "0 "; fi
done | sed 's/ $//')
check jsonl/plain/completion_ids test "$(sed -n 2p $T/plain.docs | cut -d'|' -f1)" = "$want_ids"
check jsonl/plain/completion_mask_by_hand test "$(sed -n 2p $T/plain.docs | cut -d'|' -f2)" = "$want_mask"
check jsonl/plain/prompt_prefix_is_its_own_encoding test "$(echo $pc_ids | cut -d' ' -f1-$np)" = "$p_ids"
# plain messages: "ROLE: CONTENT\n" per message and the EOS; an assistant
# turn counts from the space after "assistant:" through its newline
$py - $T/plain.docs "$eos" >$T/plain-runs.txt <<'EOF'
import sys
eos = int(sys.argv[2])
ids, mask = ([int(x) for x in p.split()] for p in open(sys.argv[1]).read().splitlines()[2].split("|"))
runs, i = [], 0
while i < len(ids):
    if mask[i]:
        j = i
        while j < len(ids) and mask[j]:
            j += 1
        runs.append(ids[i:j])
        i = j
    else:
        i += 1
assert runs[-1][-1] == eos, runs
runs[-1] = runs[-1][:-1]
for r in runs:
    print(" ".join(map(str, r)))
EOF
check jsonl/plain/assistant_turns test "$($tool $ptok --decode <$T/plain-runs.txt)" = "$(printf ' Hi there\n\n Hello again\n')"

# text lines as JSON equal --one-doc-per-line
printf 'alpha beta gamma\nthe delta\n  indented line\n' >$T/lines.txt
$py -c "import json, sys; [print(json.dumps({'text': l.rstrip('\n')})) for l in open('$T/lines.txt')]" >$T/lines.jsonl
pp-tokenize --tokenizer $ctok -o $T/lines-text.h5 --one-doc-per-line --quiet $T/lines.txt >/dev/null
pp-tokenize --tokenizer $ctok -o $T/lines-json.h5 --format jsonl --json --quiet $T/lines.jsonl >$T/lines.json
check jsonl/text/same_as_one_doc_per_line same_tensors $T/lines-text.h5 $T/lines-json.h5 /train /val
check jsonl/text/version_1_without_mask jqe '.version == 1 and .loss_mask == false' $T/lines.json

# --- compressed inputs -------------------------------------------------------------------
# a few thousand lines of seeded words: compressible, but not to nothing
$py - >$T/big.jsonl <<'EOF'
import json, random
r = random.Random(5)
w = ["apple", "box", "red", "three", "blue", "sky", "the", "a", "is", "what", "why", "zebra", "quartz"]
for i in range(3000):
    s = " ".join(r.choice(w) for _ in range(r.randint(3, 12))) + " %d" % r.randint(0, 10**9)
    k = i % 3
    if k == 0:
        print(json.dumps({"text": s}))
    elif k == 1:
        print(json.dumps({"prompt": s, "completion": " " + s[::-1]}))
    else:
        print(json.dumps({"messages": [{"role": "user", "content": s}, {"role": "assistant", "content": s.upper()}]}))
EOF
gzip -k $T/big.jsonl
zstd -q -k $T/big.jsonl
for f in big.jsonl big.jsonl.gz big.jsonl.zst; do
	pp-tokenize --tokenizer $ctok -o $T/$f.h5 --format jsonl --val-fraction 0.1 --quiet $T/$f >/dev/null 2>$T/$f.log
	check jsonl/compressed/$f/exit_0 test $? -eq 0
	pp-tokenize --tokenizer $ctok -o $T/stdin-$f.h5 --format jsonl --val-fraction 0.1 --quiet - <$T/$f >/dev/null 2>>$T/$f.log
done
check jsonl/compressed/gz_same_datasets same_tensors $T/big.jsonl.h5 $T/big.jsonl.gz.h5 /train /val
check jsonl/compressed/zst_same_datasets same_tensors $T/big.jsonl.h5 $T/big.jsonl.zst.h5 /train /val
check jsonl/compressed/stdin_byte_identical bash -c "cmp $T/stdin-big.jsonl.h5 $T/stdin-big.jsonl.gz.h5 && cmp $T/stdin-big.jsonl.h5 $T/stdin-big.jsonl.zst.h5"
cp $T/big.jsonl.zst $T/noname
pp-tokenize --tokenizer $ctok -o $T/noname.h5 --format jsonl --val-fraction 0.1 --quiet $T/noname >/dev/null 2>&1
check jsonl/compressed/known_by_bytes same_tensors $T/big.jsonl.h5 $T/noname.h5 /train /val
cat $T/big.jsonl.gz $T/big.jsonl.gz >$T/twice.jsonl.gz
pp-tokenize --tokenizer $ctok -o $T/twice.h5 --format jsonl --json --quiet $T/twice.jsonl.gz >$T/twice.json 2>&1
check jsonl/compressed/two_gzip_members jqe '.train.documents == 6000' $T/twice.json

# --- bad input: exit 2, FILE:LINE, nothing written --------------------------------------
bad() { # NAME LINE-PATTERN FILE
	expect_fail jsonl/bad/$1 2 "$(basename $3):$2" pp-tokenize --tokenizer $ctok -o $T/bad.h5 --format jsonl --quiet $3
	check jsonl/bad/$1/nothing_written bash -c "! ls -A $T | grep -q 'bad.h5'"
}
printf '{"text": "ok"}\n\n{"text": "also ok"\n' >$T/notjson.jsonl
bad not_json "3: not JSON" $T/notjson.jsonl
printf '{"text": "ok"}\n{"meta": 1}\n' >$T/nofield.jsonl
bad no_fields "2: no field to tokenize" $T/nofield.jsonl
printf '{"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}\n' >$T/role.jsonl
bad unknown_role "1: messages\[1\]: unknown role 'tool'" $T/role.jsonl
printf '{"text": "x"}\n{"text": "y"}\n{"messages": [{"role": "user", "content": "a"}]}\n' >$T/noasst.jsonl
bad no_assistant_turn "3: \"messages\" has no assistant turn" $T/noasst.jsonl
printf '{"prompt": "a"}\n' >$T/nocompl.jsonl
bad prompt_without_completion "1: \"prompt\" without \"completion\"" $T/nocompl.jsonl
printf '{"text": 5}\n' >$T/type.jsonl
bad text_not_a_string "1: \"text\" is not a string" $T/type.jsonl
for z in gz zst; do
	size=$(stat -c %s $T/big.jsonl.$z)
	head -c $((size / 2)) $T/big.jsonl.$z >$T/trunc.jsonl.$z
	name=$([ $z = gz ] && echo gzip || echo zstd)
	bad truncated_$z "[0-9]+: truncated $name data" $T/trunc.jsonl.$z
	cp $T/big.jsonl.$z $T/corrupt.jsonl.$z
	printf '\xde\xad\xbe\xef\xde\xad\xbe\xef' | dd of=$T/corrupt.jsonl.$z bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
	bad corrupt_$z "[0-9]+: corrupt $name data" $T/corrupt.jsonl.$z
done
cp $T/big.jsonl $T/plain.jsonl.gz
bad gz_name_not_gzip "1: not gzip data" $T/plain.jsonl.gz
expect_fail jsonl/usage/unknown_format 2 "--format 'csv': expected text or jsonl" pp-tokenize --tokenizer $ctok -o $T/x.h5 --format csv $T/kinds.jsonl
expect_fail jsonl/usage/per_line_with_jsonl 2 "--one-doc-per-line applies to --format text" pp-tokenize --tokenizer $ctok -o $T/x.h5 --format jsonl --one-doc-per-line $T/kinds.jsonl

# --- training on it -------------------------------------------------------------------------
run="model=llama-tiny model.vocab_size=$vocab tokenizer=$ctok global_batch=4 microbatch=2 seq_len=128 lr=1e-3 seed=3 eval_interval=0 keep=0"
pp-train $run data=$T/big.jsonl.h5 steps=2 run_dir=$T/sft --quiet 2>$T/sft.log
check train/masked_one_doc_per_sequence jqse '[.[] | select(.loss != null) | .loss] | length == 2 and all(. > 0 and . < 20)' $T/sft/metrics.jsonl
pp-train $run data=$T/big.jsonl.h5 packing=true steps=4 checkpoint_period=2 run_dir=$T/pack --quiet 2>$T/pack.log
check train/packing_runs test -f $T/pack/checkpoints/step_00000004/manifest.json
mkdir -p $T/pack2/checkpoints
cp -r $T/pack/checkpoints/step_00000002 $T/pack2/checkpoints/
pp-train $run data=$T/big.jsonl.h5 packing=true steps=4 checkpoint_period=2 run_dir=$T/pack2 --quiet 2>$T/pack2.log
check train/packing_bitwise_resume same_losses $T/pack $T/pack2 2
expect_fail train/packing_synthetic 2 "packing=true.*synthetic" pp-train model=llama-tiny packing=true steps=1 run_dir=$T/syn

# a version-1 dataset as tokens.md's h5py example writes it
$py - $T/v1.h5 "$text_ids" <<'EOF'
import sys, h5py, numpy as np
base = np.array([int(x) for x in sys.argv[2].split()], np.uint32)
docs = [np.tile(base, 20)[: 40 + 7 * i] for i in range(6)]
with h5py.File(sys.argv[1], "w", libver=("v108", "latest")) as f:
    f.attrs["format"] = "pp-tokens"
    f.attrs["version"] = np.int64(1)
    f.attrs["tokenizer_fingerprint"] = "0" * 64
    f.attrs["tokenizer_kind"] = "byte-level-bpe"
    f.attrs["vocab_size"] = np.int64(262)
    f.attrs["bos_id"] = np.int64(-1)
    f.attrs["eos_id"] = np.int64(-1)
    f.attrs["sources"] = ["a.txt"]
    for split, ds in (("train", docs), ("val", [])):
        g = f.create_group(split)
        toks = np.concatenate(ds) if ds else np.zeros(0, np.uint32)
        off = np.concatenate([[0], np.cumsum([len(d) for d in ds])]).astype(np.uint64)
        g.create_dataset("tokens", data=toks, dtype="<u4", maxshape=(None,), chunks=(1 << 20,))
        g.create_dataset("doc_offsets", data=off, dtype="<u8", maxshape=(None,), chunks=(1 << 16,))
        f.attrs[f"{split}_documents"] = np.uint64(len(ds))
        f.attrs[f"{split}_tokens"] = np.uint64(len(toks))
EOF
pp-train model=llama-tiny model.vocab_size=$vocab global_batch=4 microbatch=2 seq_len=32 steps=1 eval_interval=0 data=$T/v1.h5 run_dir=$T/v1 --quiet 2>$T/v1.log
check train/version_1_dataset_loads jqse '[.[] | select(.loss != null)] | length == 1' $T/v1/metrics.jsonl
