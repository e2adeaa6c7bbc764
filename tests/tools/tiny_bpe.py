"""A tiny byte-level BPE tokenizer (GPT-2's byte alphabet, five merges,
<|endoftext|> as the one special token), for tests:

    tiny_bpe.py tokenizer.json PATH   Hugging Face's tokenizer.json
    tiny_bpe.py gpt2 PATH             GPT-2's PATH (vocab.json) and merges.txt beside it

Standard library only."""
import json
import os
import sys

bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
chars = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {chars[b]: b for b in range(256)}
merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "\u0120")]
for a, b in merges:
    vocab[a + b] = len(vocab)
eot = len(vocab)

kind, path = sys.argv[1], sys.argv[2]
if kind == "gpt2":
    json.dump(dict(vocab, **{"<|endoftext|>": eot}), open(path, "w"))
    with open(os.path.join(os.path.dirname(path), "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
elif kind == "tokenizer.json":
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    json.dump({"version": "1.0", "truncation": None, "padding": None,
               "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True}],
               "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                         "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}},
              open(path, "w"))
else:
    sys.exit(f"tiny_bpe.py: unknown kind {kind!r} (tokenizer.json or gpt2)")
