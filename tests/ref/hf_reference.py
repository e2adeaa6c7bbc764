#!/usr/bin/env python3
"""Independent reference: compares a pp forward/backward dump with Hugging Face
transformers.

    hf_reference.py DUMP.h5 [--dtype float64|float32] [--tol 1e-4] [--loss-tol 1e-5]

DUMP.h5 is written by build/tests/tool_hf_dump: /tokens and /targets (B,T)
int32, /logits (B,T,V), /loss, /params/NAME and /grads/NAME in pp's stored
layout (Linear weights (out, in), so GPT-2's Conv1D weights are the transpose
of Hugging Face's), and a root attribute "config" holding pp's resolved config
JSON. The matching Hugging Face model is built from that config with random
weights (no hub access), every parameter is loaded from the dump by name, and
the logits, the mean cross-entropy over targets != -100 and every parameter's
gradient are compared. When the dump holds /generate/prompt and
/generate/tokens (tool_hf_dump --generate N), pp's greedy decoding must also
give Hugging Face's greedy tokens (generate(do_sample=False)'s loop). The reference runs in float64 by default, so what is
measured is pp's fp32 error (Hugging Face still computes RMSNorm and the RoPE
tables in fp32 internally, about 1e-7 relative).

A config with model.pos "relative" (GLaM's relative position biases) gets
the family's model with its attention replaced by relative_attention_forward
below: no RoPE, and each layer's learned bias of every (head, bucket of the
distance i - j) added to the scaled scores, with Praxis's RelativeBias
buckets (unidirectional) computed in float32 as Praxis does; the bias table
is a parameter of each attention module, so it is loaded, and its gradient
compared, by name like any other.

A mixtral-family config in GLaM's form (experts every moe_every-th layer,
router softmax_topk, a capacity factor, or geglu) gets Hugging Face's
Mixtral with install_glam below: dense gated MLPs in the other layers, and
GLaM's routing as pp defines it in the MoE layers; its load-balancing and
z losses are computed from the router logits of those layers.

Prints one line per check, as tests/run.sh counts them:
    PASS: hf/<family>/logits rel=...
    FAIL: hf/<family>/grads/<name>: rel=... > tol
Exit status 0 when every check passed, 1 on a failed check, 2 on bad input.
"""
import argparse
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# GPT-2 keeps these as Conv1D: weight (in, out)
GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

FAMILIES = ("llama", "mistral", "mixtral", "gemma", "gpt")


class Report:
    def __init__(self, tag):
        self.tag = tag
        self.failed = 0

    def check(self, ok, name, detail):
        if ok:
            print(f"PASS: {self.tag}/{name} {detail}")
        else:
            self.failed += 1
            print(f"FAIL: {self.tag}/{name}: {detail}")
        sys.stdout.flush()


def rel_err(got, ref):
    """||got - ref|| / ||ref|| (absolute when ref is all zero)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    diff = float(np.linalg.norm((got - ref).ravel()))
    den = float(np.linalg.norm(ref.ravel()))
    if not math.isfinite(diff):
        return math.inf
    return diff / den if den > 0 else diff


def family_name(m):
    """pp's model.family: a name ("llama") or the PP_FAMILY_* number."""
    f = m.get("family")
    if isinstance(f, int):
        return FAMILIES[f] if 0 <= f < len(FAMILIES) else str(f)
    return str(f).lower()


def get(m, *keys, default=None):
    for k in keys:
        if k in m and m[k] is not None:
            return m[k]
    if default is not None:
        return default
    raise KeyError(f"config has none of the keys {keys}")


def build_model(cfg, family, dtype, attn="eager"):
    """The Hugging Face model of pp config cfg, random init (seed 0), in
    dtype, with attention implementation attn ("eager", or "sdpa" where the
    torch version has it: ValueError otherwise)."""
    import transformers

    m = cfg["model"]
    d = int(get(m, "d_model"))
    nh = int(get(m, "n_heads"))
    nkv = int(get(m, "n_kv_heads", default=nh))
    hd = int(get(m, "head_dim", default=d // nh)) or d // nh
    ff = int(get(m, "d_ff"))
    nl = int(get(m, "n_layers"))
    vocab = int(get(m, "vocab_size"))
    maxT = int(get(m, "max_seq_len"))
    eps = float(get(m, "norm_eps"))
    tied = bool(get(m, "tied_embeddings"))
    theta = float(get(m, "rope_theta", default=10000.0))
    common = dict(vocab_size=vocab, hidden_size=d, intermediate_size=ff, num_hidden_layers=nl,
                  num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd,
                  max_position_embeddings=maxT, rms_norm_eps=eps, rope_theta=theta,
                  tie_word_embeddings=tied, attention_dropout=0.0,
                  attn_implementation=attn,
                  # no padding row: pp trains every embedding row as MaxText's
                  # embedding does (GemmaConfig's default pad_token_id=0
                  # would zero row 0's gradient)
                  pad_token_id=None)
    if family == "llama":
        hc = transformers.LlamaConfig(hidden_act="silu", attention_bias=False, mlp_bias=False,
                                      **common)
        cls = transformers.LlamaForCausalLM
    elif family == "mistral":
        sw = int(get(m, "sliding_window", default=0))
        hc = transformers.MistralConfig(hidden_act="silu", sliding_window=sw or None, **common)
        cls = transformers.MistralForCausalLM
    elif family == "mixtral":
        sw = int(get(m, "sliding_window", default=0))
        # the load-balancing loss is added by main(), per layer as pp
        # defines it (Hugging Face's own pools every layer's router logits)
        act = "gelu_pytorch_tanh" if str(get(m, "mlp")) in ("geglu", "1") else "silu"
        hc = transformers.MixtralConfig(hidden_act=act, sliding_window=sw or None,
                                        num_local_experts=int(get(m, "n_experts")),
                                        num_experts_per_tok=int(get(m, "top_k")),
                                        router_aux_loss_coef=0.0, output_router_logits=False,
                                        **common)
        cls = transformers.MixtralForCausalLM
    elif family == "gemma":
        hc = transformers.GemmaConfig(hidden_activation="gelu_pytorch_tanh",
                                      hidden_act="gelu_pytorch_tanh", attention_bias=False,
                                      **common)
        cls = transformers.GemmaForCausalLM
    elif family == "gpt":
        if nkv != nh or hd * nh != d:
            raise ValueError(f"GPT-2 needs n_kv_heads == n_heads and head_dim * n_heads == "
                             f"d_model (got {nkv}, {nh}, {hd}, {d})")
        hc = transformers.GPT2Config(vocab_size=vocab, n_embd=d, n_layer=nl, n_head=nh,
                                     n_inner=ff, n_positions=maxT,
                                     activation_function="gelu_new", layer_norm_epsilon=eps,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     tie_word_embeddings=tied, attn_implementation=attn,
                                     pad_token_id=None)
        cls = transformers.GPT2LMHeadModel
    else:
        raise ValueError(f"no Hugging Face model for family {family!r}")
    torch.manual_seed(0)
    model = cls(hc).to(dtype)
    model.eval()  # no dropout; gradients still flow
    impl = getattr(model.config, "_attn_implementation", attn)
    if impl != attn:
        raise ValueError(f"Hugging Face chose attention {impl!r}, wanted {attn}")
    return model


def relative_bucket(n, nb, max_distance):
    """Praxis's RelativeBias._relative_position_bucket, unidirectional: the
    bucket of each distance n = i - j (negative: a future key, bucket 0)."""
    exact = nb // 2
    n = torch.clamp(n, min=0)
    f32 = torch.float32
    large = exact + (torch.log(n.to(f32) / exact) /
                     torch.log(torch.tensor(float(max_distance), dtype=f32) / exact) *
                     (nb - exact)).to(torch.int32)
    large = torch.clamp(large, max=nb - 1)
    return torch.where(n < exact, n.to(torch.int32), large).long()


class BiasTable(torch.nn.Module):
    """A layer's relative position biases, (heads, buckets) as pp stores them"""

    def __init__(self, heads, nb, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(heads, nb, dtype=dtype))


def relative_attention_forward(self, hidden_states, attention_mask=None, position_ids=None,
                               past_key_value=None, output_attentions=False, use_cache=False,
                               cache_position=None, position_embeddings=None, **kwargs):
    """Causal attention with grouped kv heads and a learned bias by distance,
    in place of the family's RoPE attention (transformers 4.46's interface)."""
    from transformers.models.llama.modeling_llama import repeat_kv
    cfg = self.config
    B, T, _ = hidden_states.shape
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    q = self.q_proj(hidden_states).view(B, T, H, D).transpose(1, 2)
    k = self.k_proj(hidden_states).view(B, T, KV, D).transpose(1, 2)
    v = self.v_proj(hidden_states).view(B, T, KV, D).transpose(1, 2)
    if past_key_value is not None:
        k, v = past_key_value.update(k, v, self.layer_idx, {"cache_position": cache_position})
    k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
    S = k.shape[2]
    dist = torch.arange(S - T, S)[:, None] - torch.arange(S)[None, :]  # i - j
    bias = self.relative_attention_bias.weight[:, relative_bucket(dist, self.rel_nb,
                                                                  self.rel_max_distance)]
    scores = q @ k.transpose(2, 3) / math.sqrt(D) + bias[None]
    scores = scores.masked_fill(dist[None, None] < 0, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = (p @ v).transpose(1, 2).reshape(B, T, H * D)
    return self.o_proj(out), None, past_key_value


def install_relative_bias(model, m, dtype):
    """Every attention module of model gets relative_attention_forward and its
    bias table (model.layers.N.self_attn.relative_attention_bias.weight)."""
    import types
    nb = int(get(m, "relative_attention_num_buckets", default=32))
    maxd = int(get(m, "relative_attention_max_distance", default=128))
    for layer in model.model.layers:
        attn = layer.self_attn
        attn.rel_nb, attn.rel_max_distance = nb, maxd
        attn.relative_attention_bias = BiasTable(model.config.num_attention_heads, nb, dtype)
        attn.forward = types.MethodType(relative_attention_forward, attn)


class GatedMLP(torch.nn.Module):
    """A dense layer's gated MLP, Llama's names, no biases"""

    def __init__(self, C, F, act, dtype):
        super().__init__()
        L = torch.nn.Linear
        self.gate_proj = L(C, F, bias=False, dtype=dtype)
        self.up_proj = L(C, F, bias=False, dtype=dtype)
        self.down_proj = L(F, C, bias=False, dtype=dtype)
        self.act = act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def glam_moe_forward(self, h):
    """GLaM's MoE layer as pp computes it: top-k experts by router logit; gates
    the top-k probabilities of the softmax over all experts (softmax_topk)
    or a softmax over the top-k logits (topk_softmax); each expert takes at
    most ceil(capacity_factor * N * K / E) assignments, in token order and
    within a token in order of choice, the others dropped (capacity 0: no
    limit). Keeps this layer's load-balancing loss E * sum_e f_e P_e (f_e the
    fraction of assignments that chose e, a constant; P_e the mean
    probability) and z loss mean(logsumexp^2)."""
    B, T, C = h.shape
    x = h.reshape(-1, C)
    N, E, K = x.shape[0], self.num_experts, self.top_k
    logits = self.gate(x)
    prob = torch.softmax(logits, dim=-1)
    ex = torch.topk(logits, K, dim=-1).indices
    gates = prob.gather(1, ex) if self.glam_router == "softmax_topk" else \
        torch.softmax(logits.gather(1, ex), dim=-1)
    cap = math.ceil(self.glam_capacity * N * K / E) if self.glam_capacity > 0 else None
    count, kept = [0] * E, torch.zeros(N, K, dtype=torch.bool)
    for n in range(N):
        for k in range(K):
            e = int(ex[n, k])
            if cap is None or count[e] < cap:
                count[e] += 1
                kept[n, k] = True
    out = torch.zeros_like(x)
    for e in range(E):
        n_idx, k_idx = torch.nonzero((ex == e) & kept, as_tuple=True)
        if len(n_idx):
            y = self.experts[e](x[n_idx]) * gates[n_idx, k_idx, None]
            out = out.index_add(0, n_idx, y)
    chosen = torch.bincount(ex.reshape(-1), minlength=E).to(prob.dtype)
    self.glam_aux = E * (chosen / N * prob.mean(dim=0)).sum()
    self.glam_z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    self.glam_dropped = N * K - int(kept.sum())
    return out.view(B, T, C), logits


def is_glam(m):
    return (int(get(m, "moe_every", default=1)) > 1 or float(get(m, "capacity_factor", default=0)) > 0
            or str(get(m, "router", default="topk_softmax")) in ("softmax_topk", "1")
            or str(get(m, "mlp")) in ("geglu", "1"))


def install_glam(model, m, dtype):
    """The Mixtral model made pp's GLaM (see glam_moe_forward): the MoE
    layers' routing replaced, the other layers given a dense GatedMLP as mlp
    (model.layers.N.mlp.*); returns the MoE blocks, for their losses."""
    import types
    from transformers.activations import ACT2FN
    every = int(get(m, "moe_every", default=1))
    router = get(m, "router", default="topk_softmax")
    router = {0: "topk_softmax", 1: "softmax_topk"}.get(router, router)
    act = ACT2FN[model.config.hidden_act]
    moes = []
    for i, layer in enumerate(model.model.layers):
        if i % every == every - 1:
            blk = layer.block_sparse_moe
            blk.glam_router, blk.glam_capacity = router, float(get(m, "capacity_factor", default=0))
            blk.forward = types.MethodType(glam_moe_forward, blk)
            moes.append(blk)
        else:
            del layer.block_sparse_moe
            layer.mlp = GatedMLP(model.config.hidden_size, model.config.intermediate_size, act,
                                 dtype)
            layer.block_sparse_moe = (lambda mlp: lambda h: (mlp(h), None))(layer.mlp)
    return moes


def hf_layout(family, name, arr):
    """pp stored layout -> the Hugging Face parameter's layout."""
    if family == "gpt" and name.endswith(GPT2_CONV1D) and arr.ndim == 2:
        return arr.T
    return arr


def check_generate(r, model, gen):
    """pp's greedy tokens against Hugging Face's greedy decoding, no end-of-sequence
    stop. This is generate(do_sample=False)'s loop written out (argmax of the
    last logits, fed back through the model's own KV cache): generate() itself
    imports torch.distributed, which some torch builds cannot import."""
    prompt = torch.from_numpy(gen["prompt"])[None]
    want = gen["tokens"]
    n_new = len(want) - prompt.shape[1]
    seq, past, inp = prompt, None, prompt
    with torch.no_grad():
        for _ in range(n_new):
            out = model(input_ids=inp, past_key_values=past, use_cache=True)
            past = out.past_key_values
            inp = out.logits[:, -1].argmax(dim=-1, keepdim=True)
            seq = torch.cat([seq, inp], dim=1)
    hf = seq[0].numpy()
    bad = [i for i in range(len(want)) if hf[i] != want[i]]
    r.check(not bad, "generate",
            f"{n_new} greedy tokens after a prompt of {prompt.shape[1]} match" if not bad
            else f"first difference at position {bad[0]}: pp {want.tolist()} hf {hf.tolist()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--tol", type=float, default=1e-4, help="per-tensor relative error (logits, grads)")
    ap.add_argument("--loss-tol", type=float, default=1e-5, help="relative loss error")
    ap.add_argument("--tag", help="check name prefix (default hf/<family>)")
    a = ap.parse_args()
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    env = os.environ.get("OMP_NUM_THREADS", "")
    torch.set_num_threads(int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1))

    try:
        f = h5py.File(a.dump, "r")
        raw = f.attrs["config"]
        cfg = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
        family = family_name(cfg["model"])
        tokens = np.asarray(f["tokens"], dtype=np.int64)
        targets = np.asarray(f["targets"], dtype=np.int64)
        logits_pp = np.asarray(f["logits"], dtype=np.float64)
        loss_pp = float(np.asarray(f["loss"]))
        params = {k: np.asarray(v) for k, v in f["params"].items()}
        grads = {k: np.asarray(v) for k, v in f["grads"].items()}
        gen = {k: np.asarray(v, dtype=np.int64) for k, v in f["generate"].items()} \
            if "generate" in f else None
        aux_pp = float(np.asarray(f["moe_aux"])) if "moe_aux" in f else None
    except (OSError, KeyError, ValueError) as ex:
        print(f"hf_reference: {a.dump}: {ex}", file=sys.stderr)
        return 2
    tag = a.tag or f"hf/{family}"
    r = Report(tag)
    if family == "mixtral" and not any(".block_sparse_moe." in n for n in params):
        print(f"SKIP: {tag}: the dump has no MoE tensors (pp built mixtral as a dense model)")
        return 0
    try:
        model = build_model(cfg, family, dtype)
    except (KeyError, ValueError, TypeError) as ex:
        r.check(False, "model", f"cannot build the Hugging Face model: {ex}")
        return 1
    relative = str(cfg["model"].get("pos")).lower() in ("relative", "2")
    if relative:
        install_relative_bias(model, cfg["model"], dtype)
    glam = install_glam(model, cfg["model"], dtype) if family == "mixtral" and \
        is_glam(cfg["model"]) else None

    # load by name: both directions must be 1:1
    hf_params = dict(model.named_parameters())  # tied lm_head appears once, as the embedding
    missing = [n for n in hf_params if n not in params]
    extra = [n for n in params if n not in hf_params]
    nograd = [n for n in params if n not in grads]
    bad_shape = []
    with torch.no_grad():
        for n, p in hf_params.items():
            if n not in params:
                continue
            w = hf_layout(family, n, params[n])
            if tuple(w.shape) != tuple(p.shape):
                bad_shape.append(f"{n} pp {tuple(params[n].shape)} hf {tuple(p.shape)}")
                continue
            p.copy_(torch.from_numpy(np.ascontiguousarray(w)).to(dtype))
    r.check(not missing, "names/hf-loaded",
            f"{len(hf_params)} Hugging Face parameters loaded" if not missing
            else f"{len(missing)} Hugging Face parameters not in the dump: {', '.join(missing[:8])}")
    r.check(not extra, "names/dump-used",
            f"{len(params)} dump tensors used" if not extra
            else f"{len(extra)} dump tensors with no Hugging Face parameter: {', '.join(extra[:8])}")
    r.check(not nograd, "names/grads", f"{len(grads)} gradients" if not nograd
            else f"no gradient for {', '.join(nograd[:8])}")
    r.check(not bad_shape, "shapes", "all match" if not bad_shape else "; ".join(bad_shape[:8]))
    if missing or bad_shape:
        return 1

    toks = torch.from_numpy(tokens)
    tgts = torch.from_numpy(targets)
    model.zero_grad(set_to_none=True)
    moe = family == "mixtral"
    out = model(input_ids=toks, output_router_logits=True) if moe and glam is None \
        else model(input_ids=toks)
    logits = out.logits
    V = logits.shape[-1]
    if tuple(logits.shape) != tuple(logits_pp.shape):
        r.check(False, "logits", f"shape pp {logits_pp.shape} hf {tuple(logits.shape)}")
        return 1
    e = rel_err(logits_pp, logits.detach().numpy())
    r.check(e <= a.tol, "logits", f"rel={e:.2e}" + ("" if e <= a.tol else f" > {a.tol:g}"))

    loss = F.cross_entropy(logits.reshape(-1, V), tgts.reshape(-1), ignore_index=-100)
    lref = float(loss)
    el = abs(loss_pp - lref) / max(abs(lref), 1e-30)
    r.check(el <= a.loss_tol, "loss", f"pp={loss_pp:.9g} hf={lref:.9g} rel={el:.2e}"
            + ("" if el <= a.loss_tol else f" > {a.loss_tol:g}"))
    if moe:
        m = cfg["model"]
        dropped = ""
        if glam is not None:
            aux = sum(b.glam_aux for b in glam)
            z = sum(b.glam_z for b in glam)
            dropped = f"; {sum(b.glam_dropped for b in glam)} assignments over capacity"
            loss = loss + float(get(m, "router_z_loss_coef", default=0.0)) * z
        else:
            # Switch/Mixtral's load-balancing loss of each MoE layer (transformers'
            # own function on that layer's router logits alone), summed over layers
            from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
            E, K = int(get(m, "n_experts")), int(get(m, "top_k"))
            aux = sum(load_balancing_loss_func((rl,), E, K) for rl in out.router_logits)
        ea = abs(aux_pp - float(aux)) / max(abs(float(aux)), 1e-30) if aux_pp is not None else 1
        r.check(ea <= a.loss_tol, "aux_loss",
                f"pp={aux_pp} hf={float(aux):.9g} rel={ea:.2e}{dropped}")
        loss = loss + float(get(m, "router_aux_loss_coef", default=0.0)) * aux
    loss.backward()

    worst, worst_name, n_ok, n_cmp = -1.0, "", 0, 0
    for n, p in hf_params.items():
        if n not in grads:
            continue
        n_cmp += 1
        ref = p.grad.detach().numpy() if p.grad is not None else np.zeros(tuple(p.shape))
        got = hf_layout(family, n, grads[n])
        if tuple(got.shape) != tuple(ref.shape):
            r.check(False, f"grads/{n}", f"shape pp {got.shape} hf {ref.shape}")
            continue
        e = rel_err(got, ref)
        if e > worst:
            worst, worst_name = e, n
        if e <= a.tol:
            n_ok += 1
        else:
            r.check(False, f"grads/{n}", f"rel={e:.2e} > {a.tol:g}")
    r.check(n_ok == n_cmp and n_cmp > 0, "grads",
            f"worst {worst_name} rel={worst:.2e} ({n_cmp} tensors)" if n_ok == n_cmp
            else f"{n_cmp - n_ok} of {n_cmp} tensors over {a.tol:g}; worst {worst_name} rel={worst:.2e}")

    if gen is not None:
        check_generate(r, model, gen)

    # The reference must itself apply the sliding window, or the comparison
    # above would prove nothing about it: the same weights without the window
    # have to give other logits once T > window.
    sw = int(cfg["model"].get("sliding_window") or 0)
    if family in ("mistral", "mixtral") and sw > 0:
        if tokens.shape[1] <= sw:
            print(f"SKIP: {tag}/sliding-window: seq_len {tokens.shape[1]} <= window {sw}")
        else:
            model.config.sliding_window = None
            with torch.no_grad():
                full = model(input_ids=toks).logits
            model.config.sliding_window = sw
            d = rel_err(full.numpy(), logits.detach().numpy())
            r.check(d > 1e3 * a.tol, "sliding-window",
                    f"reference applies window {sw}: full-causal logits differ rel={d:.2e}")
    # likewise the biases: without them the logits must be others
    if relative:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.relative_attention_bias.weight.zero_()
            plain = model(input_ids=toks).logits
        d = rel_err(plain.numpy(), logits.detach().numpy())
        r.check(d > 1e3 * a.tol, "relative-bias",
                f"reference applies the biases: logits without them differ rel={d:.2e}")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
