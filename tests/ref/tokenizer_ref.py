"""Reference byte-level BPE encodings from Hugging Face tokenizers and
tiktoken, for tests/e2e/test_tokenizer_ref.sh (run in the venv of
scripts/setup-tensorboard.sh, which has current releases of both).

    tokenizer_ref.py encode TOKENIZER.json|VOCAB.json < lines > ids
    tokenizer_ref.py tiktoken VOCAB.json < lines > ids
    tokenizer_ref.py convert VOCAB.json OUT_DIR

encode: one line of ids per input line (lines split at "\\n" only), like
spm_encode --output_format=id, from Hugging Face tokenizers. Special tokens
in the text are encoded as text (encode_special_tokens), as pp does.
tiktoken: the same from tiktoken's encoder, built as its "gpt2" encoding is
(GPT-2's regex, the merges as ranks) from VOCAB.json and the merges.txt
beside it, without a download; special tokens are text too
(encode_ordinary).
convert: writes OUT_DIR/tokenizer.json (GPT-2's ByteLevel pipeline, merges
as [a, b] pairs), OUT_DIR/tokenizer-str.json (merges as "a b" strings) and
OUT_DIR/tokenizer-digits.json (a Digits split and add_prefix_space), from
GPT-2's vocab.json + merges.txt."""
import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def gpt2(vocab):
    merges = os.path.join(os.path.dirname(vocab), "merges.txt")
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return tok


def load(path):
    with open(path, "rb") as f:
        is_hf = "model" in json.load(f) and isinstance(json.load(open(path))["model"], dict)
    return Tokenizer.from_file(path) if is_hf else gpt2(path)


def tiktoken_gpt2(vocab):
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext import openai_public

    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # local files: nothing to cache
    merges = os.path.join(os.path.dirname(vocab), "merges.txt")
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=merges, encoder_json_file=vocab)
    return tiktoken.Encoding("gpt2-local", pat_str=openai_public.r50k_pat_str,
                             mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})


def input_lines():
    lines = sys.stdin.buffer.read().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


cmd = sys.argv[1]
if cmd == "encode":
    tok = load(sys.argv[2])
    tok.encode_special_tokens = True
    lines = input_lines()
    out = sys.stdout
    for i in range(0, len(lines), 4096):
        for enc in tok.encode_batch(lines[i:i + 4096], add_special_tokens=False):
            out.write(" ".join(map(str, enc.ids)) + "\n")
elif cmd == "tiktoken":
    enc = tiktoken_gpt2(sys.argv[2])
    lines = input_lines()
    out = sys.stdout
    for i in range(0, len(lines), 4096):
        for ids in enc.encode_ordinary_batch(lines[i:i + 4096], num_threads=1):
            out.write(" ".join(map(str, ids)) + "\n")
elif cmd == "convert":
    tok = gpt2(sys.argv[2])
    d = sys.argv[3]
    tok.save(os.path.join(d, "tokenizer.json"))
    j = json.load(open(os.path.join(d, "tokenizer.json")))
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    json.dump(j, open(os.path.join(d, "tokenizer-str.json"), "w"), ensure_ascii=False)
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}
    json.dump(j, open(os.path.join(d, "tokenizer-digits.json"), "w"), ensure_ascii=False)
else:
    sys.exit("usage: tokenizer_ref.py encode TOKENIZER | tiktoken VOCAB.json | "
             "convert VOCAB.json OUT_DIR")
