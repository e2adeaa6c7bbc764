#!/usr/bin/env python3
"""Independent checks of pp's Hugging Face and llama2.c files, for
tests/e2e/test_safetensors.sh. Several commands run in one process (torch and
transformers load once), separated by a lone "+":

    safetensors_ref.py CMD ARGS... [+ CMD ARGS...]

  load TAG DIR PP.f32 TOL     transformers' from_pretrained(DIR) (float32, eager
                              attention) loads with no missing, unexpected or
                              mismatched keys, and its logits on TOKENS match
                              pp's (T x V float32) to TOL: max |hf - pp| / max |hf|
  rounded TAG DIR SHARD.h5 DTYPE
                              every tensor of DIR's model.safetensors is torch's
                              own rounding (F16 or BF16) of pp's fp32 parameter,
                              bit for bit (GPT-2 Conv1D transposed)
  mkhf KIND DTYPE DIR         a tiny random Hugging Face model (llama, mistral,
                              llama-sharded: in files of 100 kB and an index,
                              gpt2, or gpt2-bare: GPT-2's file with names
                              without "transformer." and its mask buffers),
                              save_pretrained in DTYPE; DIR.f32 gets its float32
                              logits on TOKENS
  tok TAG DIR TEXT ID...      transformers' AutoTokenizer.from_pretrained(DIR)
                              encodes TEXT (no special tokens) as the IDs
  cmp TAG A.f32 B.f32 TOL     max |a - b| / max |b| <= TOL
  llama2c TAG FILE SHARD.h5 CONFIG.json
                              a llama2.c version 1 file, read here with struct:
                              header fields, file size, and every tensor at its
                              offset equal to pp's (q, k brought back from
                              interleaved pairs to rotate-half)
  corrupt SRC DST             damaged copies of the export SRC (a llama-tiny
                              directory) as DST-truncated, DST-header-past-end,
                              DST-overlap, DST-dtype-size, DST-missing,
                              DST-extra, DST-rope-scaling, DST-shape

Only load, rounded, mkhf and tok import torch and transformers; cmp needs numpy, llama2c and
corrupt the standard library alone. Prints PASS:/FAIL: lines; exit 1 when a
check failed.
"""
import json
import math
import os
import shutil
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TOKENS = [1, 5, 9, 200, 17, 3, 3, 80, 255, 0, 44, 12, 7, 99, 100, 101]
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
failed = 0


def report(ok, name, detail):
    global failed
    print(f"{'PASS' if ok else 'FAIL'}: {name}{' ' if ok else ': '}{detail}", flush=True)
    failed += not ok


def rel(a, b):
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    d, m = float(np.abs(a - b).max()), float(np.abs(b).max())
    return d / m if m > 0 else d


def hf_logits(model):
    import torch
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].float().numpy()


def cmd_load(tag, d, pp, tol):
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            d, output_loading_info=True, attn_implementation="eager", torch_dtype=torch.float32)
    except Exception as ex:  # noqa: BLE001 (any failure to load is the finding)
        report(False, f"{tag}/load", f"from_pretrained: {type(ex).__name__}: {ex}")
        return
    bad = {k: v for k, v in info.items() if v}
    report(not bad, f"{tag}/load", f"{type(model).__name__}, no missing or unexpected keys"
           if not bad else str(bad))
    model.eval()
    hf = hf_logits(model)
    ours = np.fromfile(pp, dtype=np.float32)
    if ours.size != hf.size:
        report(False, f"{tag}/logits", f"pp wrote {ours.size} logits, hf has {hf.shape}")
        return
    r = rel(ours.reshape(hf.shape), hf)
    report(r <= float(tol), f"{tag}/logits", f"max|pp-hf|/max|hf| = {r:.2e} (tol {tol})")


def cmd_rounded(tag, d, h5, dtype):
    import h5py
    import numpy as np
    import torch
    from safetensors.torch import load_file
    want = {"F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    got = load_file(os.path.join(d, "model.safetensors"))
    bad = []
    with h5py.File(h5, "r") as f:
        params = {k: np.asarray(v) for k, v in f["params"].items()}
    for name, p in params.items():
        ref = torch.from_numpy(p.T.copy() if name.endswith(CONV1D) and "transformer." in name
                               else p).to(want)
        t = got.get(name)
        if t is None or t.dtype != want or t.shape != ref.shape or \
                not torch.equal(t.view(torch.int16), ref.view(torch.int16)):
            bad.append(name)
    extra = sorted(set(got) - set(params))
    report(not bad and not extra, f"{tag}/rounding",
           f"{len(params)} tensors are torch's {dtype} rounding of pp's, bit for bit"
           if not bad and not extra else f"differ: {bad[:4]}, extra: {extra[:4]}")


def cmd_mkhf(kind, dtype, d):
    import torch
    import transformers as tr
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  initializer_range=0.1)
    if kind in ("llama", "llama-sharded"):
        cfg = tr.LlamaConfig(rms_norm_eps=1e-5, tie_word_embeddings=False, **common)
        cls = tr.LlamaForCausalLM
    elif kind == "mistral":
        cfg = tr.MistralConfig(sliding_window=4, rope_theta=1e6, **common)
        cls = tr.MistralForCausalLM
    elif kind == "mixtral":
        cfg = tr.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, rope_theta=1e6,
                               router_aux_loss_coef=0.02, **common)
        cls = tr.MixtralForCausalLM
    elif kind in ("gpt2", "gpt2-bare"):
        cfg = tr.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                            initializer_range=0.1)
        cls = tr.GPT2LMHeadModel
    else:
        raise SystemExit(f"mkhf: no kind {kind}")
    torch.manual_seed(7)
    model = cls(cfg).to(getattr(torch, dtype))
    model.save_pretrained(d, safe_serialization=True,
                          max_shard_size=100_000 if kind == "llama-sharded" else "5GB")
    if kind == "gpt2-bare":  # the original GPT-2 file's naming and buffers
        from safetensors.torch import load_file, save_file
        path = os.path.join(d, "model.safetensors")
        sd = {k[len("transformer."):] if k.startswith("transformer.") else k: v
              for k, v in load_file(path).items()}
        for i in range(cfg.n_layer):
            sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 128, 128))
            sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        save_file(sd, path, metadata={"format": "pt"})
    # transformers' logits from the saved files, in float32 (a fresh load:
    # the model above also rounded its RoPE frequencies to DTYPE)
    model = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    hf_logits(model).astype("float32").tofile(d + ".f32")


def cmd_tok(tag, d, text, *ids):
    from transformers import AutoTokenizer
    try:
        got = AutoTokenizer.from_pretrained(d).encode(text, add_special_tokens=False)
    except Exception as ex:  # noqa: BLE001 (any failure to load is the finding)
        report(False, tag, f"AutoTokenizer.from_pretrained: {type(ex).__name__}: {ex}")
        return
    want = [int(i) for i in ids]
    report(got == want, tag, f"transformers encodes {text!r} as pp does: {got}"
           if got == want else f"transformers {got}, pp {want}")


def cmd_cmp(tag, a, b, tol):
    import numpy as np
    x, y = np.fromfile(a, dtype=np.float32), np.fromfile(b, dtype=np.float32)
    r = rel(x, y)
    report(r <= float(tol), tag, f"max|a-b|/max|b| = {r:.2e} (tol {tol}, {y.size} logits)")


def read_h5_params(h5):
    import h5py
    import numpy as np
    with h5py.File(h5, "r") as f:
        return {k: np.asarray(v, dtype=np.float32) for k, v in f["params"].items()}


def cmd_llama2c(tag, path, h5, cfg_path):
    """the file's bytes against the checkpoint's tensors: version 1 (the
    256-byte ak42 header) or version 0 (run.c's 7-int header), by its
    first word"""
    import numpy as np
    m = json.load(open(cfg_path))
    dim, hid, L, H, KV = m["d_model"], m["d_ff"], m["n_layers"], m["n_heads"], m["n_kv_heads"]
    V, T, tied = m["vocab_size"], m["max_seq_len"], m["tied_embeddings"]
    D = dim // H
    raw = open(path, "rb").read()
    lay = "model.layers.%d."
    if struct.unpack_from("<I", raw, 0)[0] == 0x616B3432:
        magic, version = struct.unpack_from("<Ii", raw, 0)
        fields = struct.unpack_from("<7i", raw, 8)
        shared = raw[36]
        want = (dim, hid, L, H, KV, V, T)
        ok = version == 1 and fields == want and shared == int(tied) and raw[37:256] == bytes(219)
        report(ok, f"{tag}/header", f"ak42 v1 {fields} shared={shared}, zero padding to 256"
               if ok else f"version {version} fields {fields} (want {want}) shared {shared}")
        off = 256
        # export.py's version1_export order
        order = [(lay + "input_layernorm.weight", L), (lay + "post_attention_layernorm.weight", L),
                 ("model.norm.weight", 1), ("model.embed_tokens.weight", 1)]
    else:
        fields = struct.unpack_from("<7i", raw, 0)
        want = (dim, hid, L, H, KV, V if tied else -V, T)
        report(fields == want, f"{tag}/header", f"v0 {fields}, vocab_size negative when untied"
               if fields == want else f"fields {fields} (want {want})")
        off = 28
        # export.py's legacy_export order
        order = [("model.embed_tokens.weight", 1), (lay + "input_layernorm.weight", L)]
    order += [(lay + "self_attn.q_proj.weight", L), (lay + "self_attn.k_proj.weight", L),
              (lay + "self_attn.v_proj.weight", L), (lay + "self_attn.o_proj.weight", L)]
    if off == 28:
        order += [(lay + "post_attention_layernorm.weight", L)]
    order += [(lay + "mlp.gate_proj.weight", L), (lay + "mlp.down_proj.weight", L),
              (lay + "mlp.up_proj.weight", L)]
    if off == 28:
        order += [("model.norm.weight", 1), ("freqs", 1)]
    order += [] if tied else [("lm_head.weight", 1)]
    params = read_h5_params(h5)
    bad, n = [], 0
    for fmt, count in order:
        for layer in range(count):
            name = fmt % layer if "%d" in fmt else fmt
            if name == "freqs":  # model.py's precompute_freqs_cis(D, T), theta 10000
                f = 1.0 / (10000.0 ** (np.arange(0, D, 2)[:D // 2] / D))
                a = np.outer(np.arange(T), f)
                got = np.frombuffer(raw, dtype="<f4", count=2 * a.size, offset=off)
                if not np.allclose(got, np.concatenate([np.cos(a).ravel(), np.sin(a).ravel()]),
                                   atol=1e-5):
                    bad.append(f"freqs@{off}")
                off += 8 * a.size
                continue
            p = params[name]
            got = np.frombuffer(raw, dtype="<f4", count=p.size, offset=off).reshape(p.shape)
            heads = H if ".q_proj." in name else KV if ".k_proj." in name else 0
            if heads:  # llama2.c row h*D + 2i + j holds rotate-half row h*D + j*D/2 + i
                got = got.reshape(heads, D // 2, 2, dim).transpose(0, 2, 1, 3).reshape(p.shape)
            if not np.array_equal(got, p):
                bad.append(f"{name}@{off}")
            off += p.size * 4
            n += 1
    ok = not bad and off == len(raw) and n == len(params)
    report(ok, f"{tag}/tensors", f"{n} tensors at their offsets equal pp's, q/k in interleaved pairs; "
           f"{len(raw)} bytes" if ok else f"mismatch {bad[:4]}; end {off} vs size {len(raw)}; "
           f"{n} tensors vs pp's {len(params)}")


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data, length=None):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if length is None else length) + h + data)


def cmd_corrupt(src, dst):
    header, data = read_st(os.path.join(src, "model.safetensors"))

    def variant(suffix, edit):
        d = f"{dst}-{suffix}"
        shutil.copytree(src, d)
        edit(d, json.loads(json.dumps(header)), bytearray(data))

    def truncated(d, h, b):
        raw = open(os.path.join(src, "model.safetensors"), "rb").read()
        open(os.path.join(d, "model.safetensors"), "wb").write(raw[:len(raw) // 2])

    def past_end(d, h, b):
        write_st(os.path.join(d, "model.safetensors"), h, b, length=len(b) * 4)

    def overlap(d, h, b):  # the norm moved onto the embedding's bytes, sizes kept
        t = h["model.layers.0.input_layernorm.weight"]
        size = t["data_offsets"][1] - t["data_offsets"][0]
        e = h["model.embed_tokens.weight"]["data_offsets"][0]
        t["data_offsets"] = [e + 4, e + 4 + size]
        write_st(os.path.join(d, "model.safetensors"), h, b)

    def dtype_size(d, h, b):  # F16 over 4-byte elements: the offsets no longer fit
        h["model.norm.weight"]["dtype"] = "F16"
        write_st(os.path.join(d, "model.safetensors"), h, b)

    def missing(d, h, b):
        del h["model.layers.1.mlp.up_proj.weight"]
        write_st(os.path.join(d, "model.safetensors"), h, b)

    def extra(d, h, b):
        h["model.layers.0.mlp.extra_proj.weight"] = {"dtype": "F32", "shape": [2, 2],
                                                      "data_offsets": [len(b), len(b) + 16]}
        write_st(os.path.join(d, "model.safetensors"), h, b + bytes(16))

    def shape(d, h, b):  # consistent with its bytes, not with the model
        t = h["model.layers.0.self_attn.o_proj.weight"]
        t["shape"] = [t["shape"][1], t["shape"][0] // 2, 2] if t["shape"][0] % 2 == 0 else t["shape"]
        write_st(os.path.join(d, "model.safetensors"), h, b)

    def rope_scaling(d, h, b):
        c = json.load(open(os.path.join(d, "config.json")))
        c["rope_scaling"] = {"type": "linear", "factor": 2.0}
        json.dump(c, open(os.path.join(d, "config.json"), "w"))

    for suffix, edit in [("truncated", truncated), ("header-past-end", past_end),
                         ("overlap", overlap), ("dtype-size", dtype_size), ("missing", missing),
                         ("extra", extra), ("shape", shape), ("rope-scaling", rope_scaling)]:
        variant(suffix, edit)


def main():
    cmds, cur = [], []
    for a in sys.argv[1:] + ["+"]:
        if a == "+":
            if cur:
                cmds.append(cur)
            cur = []
        else:
            cur.append(a)
    try:
        import transformers
        transformers.utils.logging.disable_progress_bar()
    except ImportError:
        pass
    table = {"load": cmd_load, "rounded": cmd_rounded, "mkhf": cmd_mkhf, "cmp": cmd_cmp, "tok": cmd_tok,
             "llama2c": cmd_llama2c, "corrupt": cmd_corrupt}
    for c in cmds:
        if c[0] not in table:
            print(f"safetensors_ref.py: unknown command {c[0]}", file=sys.stderr)
            return 2
        if "torch" in sys.modules or c[0] in ("load", "rounded", "mkhf", "tok"):
            import torch
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2") or 2))
        try:
            table[c[0]](*c[1:])
        except Exception as ex:  # noqa: BLE001 (a crash is a failed check, the rest still run)
            report(False, f"safetensors_ref/{c[0]}", f"{' '.join(c[1:3])}: {type(ex).__name__}: {ex}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
