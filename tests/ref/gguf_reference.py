#!/usr/bin/env python3
"""Independent reference for pp's GGUF reader and writer (tests/e2e/test_gguf.sh):
llama.cpp's own Python package (gguf: GGUFReader, GGUFWriter, gguf.quants)
and Hugging Face transformers, in the venv of scripts/setup-reference.sh.

  gguf_reference.py logits GGUF PP_LOGITS.f32 --ids I... [--greedy N] [--tol T]
      Builds LlamaForCausalLM from GGUF's metadata and dequantized tensors
      (q and k rows back in rotate-half order), float32, eager attention;
      compares its logits for the ids with pp's (tool_logits: T x V floats)
      and prints the greedy continuation (N tokens) as ids on "greedy: ...".
  gguf_reference.py tokens GGUF TEXT
      The ids of TEXT from transformers' tokenizer built from GGUF's
      metadata (no special tokens added).
  gguf_reference.py export GGUF PP_SHARD.h5 DTYPE [--like ORIG.gguf]
      Checks a GGUF written by pp (pp-ckpt export RUN --format gguf -o OUT): every tensor
      against pp's parameter (F32 equal, F16/BF16 equal to pp's value rounded
      to nearest even, Q8_0 within half its block's scale), 1-D tensors F32,
      and the metadata against pp's config; with --like, the tokenizer
      arrays against the GGUF the tokenizer came from.
  gguf_reference.py write OUT.gguf EXPECTED.npz [--omit KEY] [--arch A] [--rope-scaling]
                                               [--bytes-tokenizer PRE]
      Writes a small llama model whose weights gguf.quants quantized (Q8_0,
      Q4_0, Q4_1, F16, BF16; F32 norms); EXPECTED holds their dequantized
      values in pp's layout. --omit leaves out one metadata key, --arch names
      another architecture, --rope-scaling adds linear RoPE scaling,
      --bytes-tokenizer a "gpt2" tokenizer of the 256 bytes and 3 merges (" t",
      "he", " the") with tokenizer.ggml.pre PRE.
  gguf_reference.py convert PP_SHARD.h5 OUT.gguf
      A pp checkpoint (llama, gemma or gpt family) written the way llama.cpp's
      convert_hf_to_gguf.py writes that architecture: llama's q and k rows
      permuted, gemma's RMSNorm weights as 1 + w, gpt2's tied embedding
      stored twice; all F32.
  gguf_reference.py compare PP_SHARD.h5 EXPECTED.npz
      pp's imported parameters equal to EXPECTED, bit for bit.
  gguf_reference.py corrupt SRC.gguf DIR
      Damaged copies of SRC in DIR: bad-magic, version-9, offset-past-end,
      huge-count, unknown-type, k-quant (a type pp does not read), truncated.

Checks print PASS:/FAIL: lines (tag from --tag); exit 0 when all passed.
"""
import argparse
import json
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

failed = 0


def check(tag, ok, detail):
    global failed
    if ok:
        print(f"PASS: {tag} {detail}")
    else:
        failed += 1
        print(f"FAIL: {tag}: {detail}")
    sys.stdout.flush()


# llama.cpp's llama names -> Hugging Face's (pp's)
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}
LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "ffn_gate_inp": "block_sparse_moe.gate"}
# Mixtral's experts, stacked by llama.cpp into one tensor of E slices per projection
EXPERTS = {"ffn_gate_exps": "w1", "ffn_up_exps": "w3", "ffn_down_exps": "w2"}


def hf_name(name, expert=None):
    if name in GLOBAL:
        return GLOBAL[name]
    blk, n, part, kind = name.split(".")
    assert blk == "blk", name
    if part in EXPERTS:
        return f"model.layers.{n}.block_sparse_moe.experts.{expert}.{EXPERTS[part]}.{kind}"
    return f"model.layers.{n}.{LAYER[part]}.{kind}"


def slices(t):
    """(pp's name, this slice's floats, its raw rows) of a tensor: one, or each
    expert's of a stacked one."""
    w = dequant(t)
    if t.name in GLOBAL or t.name.split(".")[2] not in EXPERTS:
        return [(hf_name(t.name), w, np.asarray(t.data))]
    raw = np.asarray(t.data)
    return [(hf_name(t.name, x), w[x], raw[x]) for x in range(w.shape[0])]


def permute(w, heads):
    """Hugging Face rows -> llama.cpp's (convert_hf_to_gguf.py's permute)."""
    r = w.shape[0]
    return w.reshape(heads, 2, r // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, heads):
    r = w.shape[0]
    return w.reshape(heads, r // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def dequant(t):
    shape = [int(x) for x in reversed(t.shape)]
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)


def hyper(r):
    a = field(r, "general.architecture")
    g = lambda k, d=None: field(r, f"{a}.{k}", d)  # noqa: E731
    h = dict(C=int(g("embedding_length")), L=int(g("block_count")), F=int(g("feed_forward_length")),
             H=int(g("attention.head_count")), ctx=int(g("context_length")),
             eps=float(g("attention.layer_norm_rms_epsilon")), theta=float(g("rope.freq_base", 10000.0)))
    h["KV"] = int(g("attention.head_count_kv", h["H"]))
    h["D"] = int(g("attention.key_length", h["C"] // h["H"]))
    return a, h


def hf_state(r, h):
    """Hugging Face state dict of a llama GGUF (numpy, float32)."""
    out = {}
    for t in r.tensors:
        w = dequant(t)
        if ".attn_q." in t.name:
            w = unpermute(w, h["H"])
        elif ".attn_k." in t.name:
            w = unpermute(w, h["KV"])
        out[hf_name(t.name)] = w
    return out


def cmd_logits(a):
    import torch
    import transformers

    r = gguf.GGUFReader(a.gguf)
    arch, h = hyper(r)
    state = hf_state(r, h)
    tied = "lm_head.weight" not in state
    V = state["model.embed_tokens.weight"].shape[0]
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=h["C"], intermediate_size=h["F"],
                                   num_hidden_layers=h["L"], num_attention_heads=h["H"],
                                   num_key_value_heads=h["KV"], head_dim=h["D"],
                                   max_position_embeddings=h["ctx"], rms_norm_eps=h["eps"],
                                   rope_theta=h["theta"], tie_word_embeddings=tied, hidden_act="silu",
                                   attention_bias=False, mlp_bias=False,
                                   attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg).float().eval()
    missing, unexpected = model.load_state_dict({k: torch.tensor(v) for k, v in state.items()},
                                                strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        check(f"{a.tag}/load", False, f"missing {missing}, unexpected {unexpected}")
        return
    ids = [int(x) for x in a.ids]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
    got = np.fromfile(a.pp_logits, dtype=np.float32).astype(np.float64)
    if got.size != ref.size:
        check(f"{a.tag}/logits", False, f"pp wrote {got.size} logits, expected {ref.shape}")
        return
    got = got.reshape(ref.shape)
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    rel_max = float(np.abs(got - ref).max() / np.abs(ref).max())
    same = bool((got.argmax(-1) == ref.argmax(-1)).all())
    check(f"{a.tag}/logits", max(rel, rel_max) <= a.tol and same,
          f"T={len(ids)} V={V}: ||pp - ref|| / ||ref|| = {rel:.2e}, max|pp - ref| / max|ref| = "
          f"{rel_max:.2e} (tol {a.tol:g}), argmax equal at every position: {same}")
    if a.greedy:
        seq = list(ids)
        with torch.no_grad():
            for _ in range(a.greedy):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        print("greedy: " + " ".join(str(i) for i in seq[len(ids):]))


def cmd_tokens(a):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                                     gguf_file=os.path.basename(a.gguf))
    print(" ".join(str(i) for i in tok(a.text, add_special_tokens=False)["input_ids"]))


def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


FILE_TYPE = {"F32": 0, "F16": 1, "BF16": 32, "Q8_0": 7}
QTYPE = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0}


def cmd_export(a):
    import h5py

    tag = a.tag
    r = gguf.GGUFReader(a.gguf)
    with h5py.File(a.shard, "r") as f:
        cfg = json.loads(f["config"][()])
        params = {k: np.asarray(f["params"][k]) for k in f["params"]}
    m = cfg["model"]
    arch, h = hyper(r)
    # metadata
    want = {"general.architecture": "llama", "general.alignment": 32,
            "general.file_type": FILE_TYPE[a.dtype], "llama.context_length": m["max_seq_len"],
            "llama.embedding_length": m["d_model"], "llama.block_count": m["n_layers"],
            "llama.feed_forward_length": m["d_ff"], "llama.rope.dimension_count": m["head_dim"],
            "llama.attention.head_count": m["n_heads"], "llama.attention.head_count_kv": m["n_kv_heads"],
            "llama.attention.layer_norm_rms_epsilon": float(np.float32(m["norm_eps"])),
            "llama.rope.freq_base": float(np.float32(m["rope_theta"])),
            "llama.vocab_size": m["vocab_size"]}
    if m.get("n_experts"):
        want.update({"llama.expert_count": m["n_experts"], "llama.expert_used_count": m["top_k"]})
    bad = [f"{k}={field(r, k)!r} (expected {v!r})" for k, v in want.items() if field(r, k) != v]
    check(f"{tag}/metadata", not bad and r.fields["GGUF.version"].contents() == 3,
          "; ".join(bad) or f"GGUF v3, {len(want)} keys as pp's config says")
    # tensors
    worst, problems, seen = 0.0, [], set()
    for t in r.tensors:
        for name, w, raw in slices(t):
            seen.add(name)
            if name not in params:
                problems.append(f"{t.name}: pp has no {name}")
                continue
            p = params[name].astype(np.float32)
            if ".attn_q." in t.name:
                w = unpermute(w, h["H"])
            elif ".attn_k." in t.name:
                w = unpermute(w, h["KV"])
            want_t = QT.F32 if p.ndim == 1 or ".ffn_gate_inp." in t.name else QTYPE[a.dtype]
            if t.tensor_type != want_t:
                problems.append(f"{t.name} is {t.tensor_type.name}, expected {want_t.name}")
                continue
            if w.shape != p.shape:
                problems.append(f"{t.name}: shape {w.shape}, pp's {p.shape}")
            elif t.tensor_type == QT.F32:
                ok = np.array_equal(w, p)
            elif t.tensor_type == QT.F16:
                ok = np.array_equal(w, p.astype(np.float16).astype(np.float32))
            elif t.tensor_type == QT.BF16:
                ok = np.array_equal(w, bf16_round(p))
            else:  # Q8_0: each element within half its block's scale
                d = np.asarray(raw, dtype=np.uint8).reshape(-1, 34)[:, :2].copy().view(np.float16)
                d = d.astype(np.float64).ravel()
                gw = permute(w, h["H"]) if ".attn_q." in t.name else permute(w, h["KV"]) if ".attn_k." in t.name else w
                gp = permute(p, h["H"]) if ".attn_q." in t.name else permute(p, h["KV"]) if ".attn_k." in t.name else p
                err = np.abs(gw.astype(np.float64) - gp.astype(np.float64)).reshape(-1, 32)
                bound = d[:, None] / 2 + 1e-6 * np.abs(gp.astype(np.float64)).reshape(-1, 32)
                ok = bool((err <= bound).all())
                worst = max(worst, float((err / np.maximum(d[:, None], 1e-30)).max()))
            if w.shape == p.shape and not ok:
                problems.append(f"{t.name} differs from pp's {name}")
    missing = sorted(set(params) - seen)
    if missing:
        problems.append(f"pp's {missing[:3]} not in the file")
    extra = f", worst Q8_0 error {worst:.3f} of its block's scale" if a.dtype == "Q8_0" else ""
    check(f"{tag}/tensors", not problems,
          "; ".join(problems[:4]) or f"{len(r.tensors)} tensors equal to pp's ({a.dtype}{extra})")
    model = field(r, "tokenizer.ggml.model")
    if not cfg.get("tokenizer"):
        check(f"{tag}/no_tokenizer", model == "no_vocab",
              f"tokenizer.ggml.model {model!r} (expected 'no_vocab': pp's model has no tokenizer)")
    else:
        n = len(field(r, "tokenizer.ggml.tokens") or [])
        check(f"{tag}/tokenizer_size", n == m["vocab_size"],
              f"{model} tokenizer: {n} tokens for a vocabulary of {m['vocab_size']}")
    if a.like:
        o = gguf.GGUFReader(a.like)
        keys = ["tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token"]
        bad = [k for k in keys if field(r, k) != field(o, k)]
        n = len(field(r, "tokenizer.ggml.tokens") or [])
        check(f"{tag}/tokenizer", not bad,
              f"differ from {os.path.basename(a.like)}: {bad}" if bad else
              f"{n} tokens, merges, types, BOS/EOS as in {os.path.basename(a.like)}")


def cmd_write(a):
    rng = np.random.default_rng(1234)
    C, H, KV, D, F, L, V, ctx = 64, 4, 2, 16, 96, 2, 260, 128
    w = gguf.GGUFWriter(a.out, a.arch)
    if a.rope_scaling:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(4.0)
    keys = {"llama.context_length": lambda: w.add_context_length(ctx),
            "llama.embedding_length": lambda: w.add_embedding_length(C),
            "llama.block_count": lambda: w.add_block_count(L),
            "llama.feed_forward_length": lambda: w.add_feed_forward_length(F),
            "llama.attention.head_count": lambda: w.add_head_count(H),
            "llama.attention.head_count_kv": lambda: w.add_head_count_kv(KV),
            "llama.attention.layer_norm_rms_epsilon": lambda: w.add_layer_norm_rms_eps(1e-5),
            "llama.rope.freq_base": lambda: w.add_rope_freq_base(10000.0),
            "llama.rope.dimension_count": lambda: w.add_rope_dimension_count(D)}
    for k, add in keys.items():
        if k != a.omit:
            add()
    if a.bytes_tokenizer:
        # GPT-2's bytes_to_unicode: printable bytes stand for themselves
        keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
        spell, n = {}, 0
        for b in range(256):
            spell[b] = chr(b) if b in keep else chr(256 + n)
            n += b not in keep
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(a.bytes_tokenizer)
        merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he")]
        w.add_token_list([spell[b] for b in range(256)] + [x + y for x, y in merges])
        w.add_token_types([1] * (256 + len(merges)))
        w.add_token_merges([f"{x} {y}" for x, y in merges])
    expected = {}

    def add(gname, rows, cols, qtype, heads=0):
        x = rng.standard_normal((rows, cols) if cols else (rows,)).astype(np.float32) * 0.05
        if cols:
            x += rng.uniform(-0.05, 0.05, (rows, 1)).astype(np.float32)  # Q4_1's offsets matter
        else:
            x += 1.0
        g = permute(x, heads) if heads else x
        q = gguf.quants.quantize(g, qtype)
        w.add_tensor(gname, q, raw_dtype=qtype)
        back = np.asarray(gguf.quants.dequantize(q, qtype), dtype=np.float32).reshape(g.shape)
        expected[hf_name(gname)] = unpermute(back, heads) if heads else back

    add("token_embd.weight", V, C, QT.Q8_0)
    for i in range(L):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", C, 0, QT.F32)
        add(b + "attn_q.weight", H * D, C, QT.Q4_0, H)
        add(b + "attn_k.weight", KV * D, C, QT.Q4_1, KV)
        add(b + "attn_v.weight", KV * D, C, QT.Q8_0)
        add(b + "attn_output.weight", C, H * D, QT.Q4_1)
        add(b + "ffn_norm.weight", C, 0, QT.F32)
        add(b + "ffn_gate.weight", F, C, QT.Q4_0)
        add(b + "ffn_up.weight", F, C, QT.F16)
        add(b + "ffn_down.weight", C, F, QT.BF16)
    add("output_norm.weight", C, 0, QT.F32)
    add("output.weight", V, C, QT.Q4_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    np.savez(a.expected, **expected)


GPT2 = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight",
        "ln_f.weight": "output_norm.weight", "ln_f.bias": "output_norm.bias"}
GPT2_LAYER = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
              "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}


def gguf_name(fam, name):
    if name == "lm_head.weight":
        return "output.weight"
    if fam != "gpt":
        inv = {v: k for k, v in GLOBAL.items()}
        if name in inv:
            return inv[name]
        _, _, n, rest = name.split(".", 3)
        part, kind = rest.rsplit(".", 1)
        return f"blk.{n}.{ {v: k for k, v in LAYER.items()}[part]}.{kind}"
    rest = name[len("transformer."):]
    if rest in GPT2:
        return GPT2[rest]
    _, n, rest = rest.split(".", 2)
    part, kind = rest.rsplit(".", 1)
    return f"blk.{n}.{GPT2_LAYER[part]}.{kind}"


def cmd_convert(a):
    import h5py

    with h5py.File(a.shard, "r") as f:
        m = json.loads(f["config"][()])["model"]
        params = {k: np.asarray(f["params"][k], dtype=np.float32) for k in f["params"]}
    fam = m["family"]
    w = gguf.GGUFWriter(a.out, {"llama": "llama", "gemma": "gemma", "gpt": "gpt2"}[fam])
    w.add_context_length(m["max_seq_len"])
    w.add_embedding_length(m["d_model"])
    w.add_block_count(m["n_layers"])
    w.add_feed_forward_length(m["d_ff"])
    w.add_head_count(m["n_heads"])
    if fam == "gpt":
        w.add_layer_norm_eps(m["norm_eps"])
    else:
        w.add_head_count_kv(m["n_kv_heads"])
        w.add_layer_norm_rms_eps(m["norm_eps"])
        w.add_key_length(m["head_dim"])
        w.add_value_length(m["head_dim"])
        if fam == "llama":
            w.add_rope_freq_base(m["rope_theta"])
    for name, x in params.items():
        g = gguf_name(fam, name)
        if fam == "gemma" and name.endswith("norm.weight"):
            x = x + np.float32(1)
        elif fam == "llama" and ".attn_q." in g:
            x = permute(x, m["n_heads"])
        elif fam == "llama" and ".attn_k." in g:
            x = permute(x, m["n_kv_heads"])
        w.add_tensor(g, np.ascontiguousarray(x))
        if fam == "gpt" and g == "token_embd.weight" and m["tied_embeddings"]:
            w.add_tensor("output.weight", np.ascontiguousarray(x))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_compare(a):
    import h5py

    exp = np.load(a.expected)
    with h5py.File(a.shard, "r") as f:
        params = {k: np.asarray(f["params"][k]) for k in f["params"]}
    bad = [k for k in exp.files if k not in params or not np.array_equal(params[k], exp[k])]
    extra = sorted(set(params) - set(exp.files))
    worst = max((float(np.abs(params[k] - exp[k]).max()) for k in bad if k in params), default=0.0)
    check(a.tag, not bad and not extra,
          f"{len(bad)} tensors differ (first {bad[:3]}, max |diff| {worst:.3g}), extra {extra[:3]}"
          if bad or extra else f"{len(exp.files)} tensors (Q8_0, Q4_0, Q4_1, F16, BF16, F32) equal "
          "to gguf.quants.dequantize, bit for bit")


def cmd_corrupt(a):
    data = bytearray(open(a.src, "rb").read())
    # walk to the first tensor info, as the format says (independent of pp)
    o = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t):
        nonlocal o
        if t == 8:
            n = struct.unpack_from("<Q", data, o)[0]
            o += 8 + n
        elif t == 9:
            at, n = struct.unpack_from("<IQ", data, o)
            o += 12
            for _ in range(n):
                skip(at)
        else:
            o += sizes[t]

    for _ in range(n_kv):
        skip(8)
        t = struct.unpack_from("<I", data, o)[0]
        o += 4
        skip(t)
    n = struct.unpack_from("<Q", data, o)[0]
    nd = struct.unpack_from("<I", data, o + 8 + n)[0]
    type_at = o + 8 + n + 4 + 8 * nd
    offset_at = type_at + 4

    def out(name, b):
        with open(os.path.join(a.dir, name + ".gguf"), "wb") as f:
            f.write(b)

    b = bytearray(data)
    b[0:4] = b"GGUX"
    out("bad-magic", b)
    b = bytearray(data)
    struct.pack_into("<I", b, 4, 9)
    out("version-9", b)
    b = bytearray(data)
    struct.pack_into("<Q", b, offset_at, len(data) // 32 * 32)
    out("offset-past-end", b)
    b = bytearray(data)
    struct.pack_into("<Q", b, 8, 1 << 40)
    out("huge-count", b)
    b = bytearray(data)
    struct.pack_into("<I", b, type_at, 99)
    out("unknown-type", b)
    b = bytearray(data)
    struct.pack_into("<I", b, type_at, int(QT.Q5_K))
    out("k-quant", b)
    out("truncated", data[: len(data) * 2 // 3])
    print(f"{n_tensors} tensors, {n_kv} keys; first tensor's type at byte {type_at}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tag", default="gguf")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("logits")
    s.add_argument("gguf")
    s.add_argument("pp_logits")
    s.add_argument("--ids", nargs="+", required=True)
    s.add_argument("--greedy", type=int, default=0)
    s.add_argument("--tol", type=float, default=1e-3)
    s = sub.add_parser("tokens")
    s.add_argument("gguf")
    s.add_argument("text")
    s = sub.add_parser("export")
    s.add_argument("gguf")
    s.add_argument("shard")
    s.add_argument("dtype", choices=sorted(FILE_TYPE))
    s.add_argument("--like")
    s = sub.add_parser("write")
    s.add_argument("out")
    s.add_argument("expected")
    s.add_argument("--omit")
    s.add_argument("--arch", default="llama")
    s.add_argument("--rope-scaling", action="store_true")
    s.add_argument("--bytes-tokenizer", metavar="PRE")
    s = sub.add_parser("convert")
    s.add_argument("shard")
    s.add_argument("out")
    s = sub.add_parser("compare")
    s.add_argument("shard")
    s.add_argument("expected")
    s = sub.add_parser("corrupt")
    s.add_argument("src")
    s.add_argument("dir")
    a = p.parse_args()
    globals()["cmd_" + a.cmd](a)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
