#!/usr/bin/env python3
"""Runs a llama2.c model file the way llama2.c's programs do, for
tests/e2e/test_kjv.sh, in numpy and nothing of pp's:

  generate MODEL TOKENIZER.BIN PROMPT N
      reads MODEL as run.c (version 0, the 7-int header) or runq.c (version
      2, int8 groups) or export.py's version 1 lays it out, encodes PROMPT
      with run.c's BPE over TOKENIZER.BIN (BOS, a dummy-prefix space,
      merges by score), generates N tokens greedily (run.c at temperature 0,
      stopping at BOS) and prints one JSON line: version, prompt_ids,
      tokens, text (run.c's decode: the space after BOS dropped, <0xXX>
      pieces as their byte)
  vocab TOKENIZER.BIN VOCAB.TSV TAG
      checks TOKENIZER.BIN against spm_export_vocab's pieces and scores, as
      llama2.c's tokenizer.py exports them (U+2581 as a space, BOS and EOS
      as "\\n<s>\\n" and "\\n</s>\\n", the longest piece's length first);
      prints PASS or FAIL lines, exits 1 on a failure

The forward pass is run.c's: RMSNorm (eps 1e-5) scaled by w, RoPE theta
10000 over interleaved pairs, grouped-query attention, SwiGLU, the shared
or separate classifier. Version 2 is runq.c's: weights dequantized per
group for the embedding, every matmul's input quantized to int8 in groups
of the file's group size and multiplied in integers, then scaled.
"""
import json
import struct
import sys

import numpy as np

MAGIC = 0x616B3432


def read_model(path):
    raw = open(path, "rb").read()
    magic = struct.unpack_from("<I", raw, 0)[0]
    if magic == MAGIC:
        version = struct.unpack_from("<i", raw, 4)[0]
        dims = struct.unpack_from("<7i", raw, 8)
        shared = raw[36] != 0
        group = struct.unpack_from("<i", raw, 37)[0] if version == 2 else 0
        off = 256
    else:
        version, group = 0, 0
        dims = struct.unpack_from("<7i", raw, 0)
        shared = dims[5] > 0
        off = 28
    dim, hid, L, H, KV, V, T = dims
    V = abs(V)
    hs = dim // H
    kvd = KV * hs
    cfg = dict(version=version, dim=dim, hidden=hid, layers=L, heads=H, kv_heads=KV, vocab=V,
               seq_len=T, shared=shared, group=group)
    shapes = dict(tok=(V, dim), rms_att=(L, dim), wq=(L, dim, dim), wk=(L, kvd, dim),
                  wv=(L, kvd, dim), wo=(L, dim, dim), rms_ffn=(L, dim), w1=(L, hid, dim),
                  w2=(L, dim, hid), w3=(L, hid, dim), rms_final=(dim,), wcls=(V, dim))
    w = {}

    def f32(name, shape=None):
        nonlocal off
        shape = shape or shapes[name]
        n = int(np.prod(shape))
        w[name] = np.frombuffer(raw, "<f4", n, off).reshape(shape)
        off += 4 * n

    def q8(name):  # runq.c's init_quantized_tensors: per layer, int8 values then fp32 scales
        nonlocal off
        shape = shapes[name]
        per = shape if name in ("tok", "wcls") else shape[1:]
        n = int(np.prod(per))
        qs, ss = [], []
        for _ in range(1 if per is shape else shape[0]):
            qs.append(np.frombuffer(raw, "i1", n, off).reshape(per))
            ss.append(np.frombuffer(raw, "<f4", n // group, off + n).reshape(per[0], -1))
            off += n + 4 * (n // group)
        w[name] = (qs[0], ss[0]) if per is shape else (np.stack(qs), np.stack(ss))

    if version == 0:  # run.c's memory_map_weights
        for name in ("tok", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3",
                     "rms_final"):
            f32(name)
        off += 2 * T * (hs // 2) * 4  # freq_cis_real, freq_cis_imag
        if not shared:
            f32("wcls")
    elif version == 1:  # export.py's version1_export
        for name in ("rms_att", "rms_ffn", "rms_final", "tok", "wq", "wk", "wv", "wo", "w1",
                     "w2", "w3"):
            f32(name)
        if not shared:
            f32("wcls")
    elif version == 2:  # runq.c's memory_map_weights
        for name in ("rms_att", "rms_ffn", "rms_final"):
            f32(name)
        for name in ("tok", "wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            q8(name)
        if not shared:
            q8("wcls")
    else:
        sys.exit(f"{path}: version {version}")
    if off != len(raw):
        sys.exit(f"{path}: {len(raw)} bytes, the weights end at {off}")
    if version == 2:  # runq.c dequantizes the embedding table at load
        q, s = w["tok"]
        w["tok_f32"] = (q.reshape(V, -1, group) * s[:, :, None]).astype(np.float32).reshape(V, dim)
    else:
        w["tok_f32"] = w["tok"]
    if shared:
        w["wcls"] = w["tok"]
    return cfg, w


def matmul(w, x, group):
    """w @ x: fp32, or runq.c's: x quantized per group, integer dots, scaled"""
    if not group:
        return (w.astype(np.float32) @ x.astype(np.float32)).astype(np.float32)
    q, s = w
    n = x.size
    xg = x.reshape(-1, group)
    xs = np.abs(xg).max(axis=1) / np.float32(127.0)
    r = xg / np.where(xs > 0, xs, 1)[:, None]
    xq = (np.sign(r) * np.floor(np.abs(r) + 0.5)).astype(np.int32)  # C's round(): ties away
    qi = q.reshape(q.shape[0], n // group, group).astype(np.int32)
    dots = (qi * xq[None]).sum(axis=2).astype(np.float32)  # int32 per group
    return (dots * s.reshape(q.shape[0], -1) * xs[None]).sum(axis=1, dtype=np.float32)


def rmsnorm(x, w):
    ss = np.float32(np.dot(x, x) / x.size + 1e-5)
    return (w * (x / np.sqrt(ss))).astype(np.float32)


def layer_w(w, name, l, group):
    v = w[name]
    return (v[0][l], v[1][l]) if group else v[l]


def forward(cfg, w, cache, token, pos):
    dim, H, KV = cfg["dim"], cfg["heads"], cfg["kv_heads"]
    hs = dim // H
    kvd = KV * hs
    g = cfg["group"]
    x = w["tok_f32"][token].astype(np.float32).copy()
    i = np.arange(0, dim, 2)
    freq = 1.0 / np.power(np.float32(10000.0), (i % hs).astype(np.float32) / np.float32(hs))
    ang = np.float32(pos) * freq.astype(np.float32)
    fcr, fci = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    for l in range(cfg["layers"]):
        xb = rmsnorm(x, w["rms_att"][l])
        q = matmul(layer_w(w, "wq", l, g), xb, g)
        k = matmul(layer_w(w, "wk", l, g), xb, g)
        v = matmul(layer_w(w, "wv", l, g), xb, g)
        for vec, n in ((q, dim), (k, kvd)):
            a, b = vec[0:n:2].copy(), vec[1:n:2].copy()
            vec[0:n:2] = a * fcr[:n // 2] - b * fci[:n // 2]
            vec[1:n:2] = a * fci[:n // 2] + b * fcr[:n // 2]
        cache["k"][l, pos], cache["v"][l, pos] = k, v
        out = np.zeros(dim, np.float32)
        for h in range(H):
            kh = h // (H // KV)
            keys = cache["k"][l, :pos + 1, kh * hs:(kh + 1) * hs]
            att = keys @ q[h * hs:(h + 1) * hs] / np.sqrt(np.float32(hs))
            att = np.exp(att - att.max())
            att /= att.sum()
            out[h * hs:(h + 1) * hs] = att @ cache["v"][l, :pos + 1, kh * hs:(kh + 1) * hs]
        x = x + matmul(layer_w(w, "wo", l, g), out, g)
        xb = rmsnorm(x, w["rms_ffn"][l])
        h1 = matmul(layer_w(w, "w1", l, g), xb, g)
        h3 = matmul(layer_w(w, "w3", l, g), xb, g)
        hb = (h1 / (1 + np.exp(-h1)) * h3).astype(np.float32)
        x = x + matmul(layer_w(w, "w2", l, g), hb, g)
    x = rmsnorm(x, w["rms_final"])
    return matmul(w["wcls"], x, g)


def read_tokenizer(path, n):
    raw = open(path, "rb").read()
    longest = struct.unpack_from("<I", raw, 0)[0]
    off, pieces, scores = 4, [], []
    for _ in range(n):
        score, length = struct.unpack_from("<fI", raw, off)
        off += 8
        pieces.append(raw[off:off + length])
        scores.append(score)
        off += length
    return longest, pieces, scores, off == len(raw)


def encode(text, pieces, scores):
    """run.c's encode(text, bos=1, eos=0)"""
    lookup = {p: i for i, p in reversed(list(enumerate(pieces)))}
    ids = [1]
    if text:
        ids.append(lookup[b" "])
    for ch in text:
        b = ch.encode()
        if b in lookup:
            ids.append(lookup[b])
        else:
            ids.extend(c + 3 for c in b)
    while True:
        best = (-1e10, -1, -1)
        for i in range(len(ids) - 1):
            j = lookup.get(pieces[ids[i]] + pieces[ids[i + 1]], -1)
            if j != -1 and scores[j] > best[0]:
                best = (scores[j], j, i)
        if best[2] == -1:
            return ids
        ids[best[2]:best[2] + 2] = [best[1]]


def decode(prev, tok, pieces):
    p = pieces[tok]
    if prev == 1 and p.startswith(b" "):
        p = p[1:]
    if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
        p = bytes([int(p[3:5], 16)])
    return p


def cmd_generate(model, tokbin, prompt, n):
    cfg, w = read_model(model)
    _, pieces, scores, _ = read_tokenizer(tokbin, cfg["vocab"])
    ids = encode(prompt, pieces, scores)
    kvd = cfg["kv_heads"] * (cfg["dim"] // cfg["heads"])
    cache = {"k": np.zeros((cfg["layers"], cfg["seq_len"], kvd), np.float32),
             "v": np.zeros((cfg["layers"], cfg["seq_len"], kvd), np.float32)}
    token, out, text = ids[0], [], b""
    for pos in range(len(ids) - 1 + n):
        logits = forward(cfg, w, cache, token, pos)
        nxt = ids[pos + 1] if pos < len(ids) - 1 else int(np.argmax(logits))
        if nxt == 1:
            break
        if pos >= len(ids) - 1:
            out.append(nxt)
            text += decode(token, nxt, pieces)
        token = nxt
    print(json.dumps({"version": cfg["version"], "group": cfg["group"], "prompt_ids": ids,
                      "tokens": out, "text": text.decode("utf-8", "replace")}))


def cmd_vocab(tokbin, tsv, tag):
    want = []
    for line in open(tsv, "rb").read().split(b"\n")[:-1]:  # a piece may hold "\r"
        piece, score = line.rsplit(b"\t", 1)
        want.append((piece.decode(), float(score)))
    longest, pieces, scores, whole = read_tokenizer(tokbin, len(want))
    bad = []
    for i, (piece, score) in enumerate(want):
        p = {"<s>": "\n<s>\n", "</s>": "\n</s>\n"}.get(piece, piece.replace("\u2581", " "))
        if pieces[i] != p.encode() or scores[i] != np.float32(score):
            bad.append(f"{i}: {pieces[i]!r} {scores[i]} vs {p!r} {score}")
    ok = not bad and whole and longest == max(len(p) for p in pieces)
    print(f"{'PASS' if ok else 'FAIL'}: {tag}{' ' if ok else ': '}"
          + (f"{len(want)} pieces and scores as tokenizer.py exports spm's, longest {longest}"
             if ok else f"{bad[:3]}; whole file {whole}; longest {longest}"))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "generate":
        cmd_generate(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif len(sys.argv) == 5 and sys.argv[1] == "vocab":
        sys.exit(cmd_vocab(*sys.argv[2:]))
    else:
        sys.exit(__doc__)
