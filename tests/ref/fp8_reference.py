#!/usr/bin/env python3
"""Independent reference for FP8 training: the gradients of a tiny Llama,
Mixtral or GPT computed by pp with fp8.recipe=current against the same model computed
in float64 on its FP8-rounded values.

    fp8_reference.py PLAIN.h5 FP8.h5 [--tag fp8/ref]

PLAIN.h5 and FP8.h5 are build/tests/tool_hf_dump's dumps of one model, one
batch and one seed, without and with fp8.recipe=current (tests/ref/
hf_reference.py describes the file). The reference is a Llama written here
in float64 PyTorch (RMSNorm, RoPE as Hugging Face rotates, grouped-query
causal attention, SwiGLU, an untied head, the mean cross-entropy over the
targets != -100), a Mixtral (the same with each MLP a mixture of SwiGLU
experts: each token's K experts by router logit, gated by the softmax of
those K logits, the Switch load-balancing loss E sum_e f_e P_e and the
router z-loss added at the config's coefficients), or a GPT (LayerNorm, learned positions, one q|k|v product
and every product with a bias, tanh GELU, the head tied to the embedding).
Without FP8 it must give PLAIN.h5's loss and gradients
(pp's fp32 against float64: within 1e-5), which ties it to the model that
tests/e2e/test_hf_reference.sh checks against Hugging Face.

With FP8 each linear layer's product runs as Transformer Engine's current
scaling with the HYBRID formats defines it, as pp fuses them (q|k|v one
product, gate|up one): the input and the weight scaled by E4M3's 448 over
their amax and rounded to E4M3 (saturating, round to nearest even, by
ml_dtypes), the output gradient by E5M2's 57344 over its amax and rounded to
E5M2; the products of the rounded values in float64, divided by the scales:
    y = (xq wq^T) / (sx sw),  dx = (gq wq) / (sg sw),  dW = (gq^T xq) / (sg sx);
a bias is added to y after the product, and its gradient is the sum of the
output gradient before its cast. A MoE layer's experts are one tensor to
their scales, as pp scales them: each of its two products (every expert's
gate|up, every expert's down) casts with the amax of all its experts'
weights, of all its rows (every token's, whichever expert took it) and of
all their gradients; the router's product stays in float64.
Attention, the norms, the head (unless fp8.head) and the loss stay in
float64.

Checks, each a PASS:/FAIL: line:
  plain/loss, plain/grads   the float64 model is pp's model
  fp8/applied               FP8 moves pp's gradients (against the float64
                            model without FP8) by at least 1e-3 relative:
                            the dump is FP8's
  fp8/loss                  pp's FP8 loss within 1e-5 of the reference's
  fp8/grads/NAME            every gradient of pp's FP8 model within 1e-3 of
                            the reference's FP8 gradient, and (fp8/grads)
                            all of them together within 1e-4
A value of pp's in fp32 may land on the other side of an FP8 rounding
boundary than the float64 value does, which is what the tolerances allow
for (measured: 3e-7) where no value lies within fp32's error of a rounding
midpoint, as at the test's seeds (where one does, it casts to the other
neighbour and moves the loss by about 1e-4); a wrong format, scale, fused group or product moves
the gradients by about FP8's own effect (10-20% here). With fp8.head=true
the head's product is FP8 too, its gradient's scale fixed at E5M2's largest
over 1 / n for n counted targets, as pp fixes it (the gradient of the mean
loss is at most 1 / n in magnitude). Exit status 0 when every check passed,
1 otherwise.
"""
import argparse
import json
import math
import sys

import h5py
import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

E4M3 = (ml_dtypes.float8_e4m3fn, 448.0)
E5M2 = (ml_dtypes.float8_e5m2, 57344.0)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / (d if d > 0 else 1.0)


def cast(t, scale, fmt):
    """t * scale rounded to fmt (saturating), as float64"""
    kind, top = fmt
    v = np.clip(t.detach().numpy() * scale, -top, top)
    return torch.from_numpy(v.astype(kind).astype(np.float64))


def scale_of(t, fmt):
    amax = float(t.detach().abs().max())
    return fmt[1] / amax if amax > 0 else 1.0


class FP8Product(torch.autograd.Function):
    """Expert j's rows of x (R, C), in order (counts), times w[j] (E, OC,
    C)^T with current scaling, HYBRID formats: one scale for all the rows,
    one for all the weights and one for all the gradients (a linear layer
    is one expert); the gradient's scale fixed at gscale when given"""

    @staticmethod
    def forward(ctx, x, w, counts, gscale):
        sx, sw = scale_of(x, E4M3), scale_of(w, E4M3)
        xq, wq = cast(x, sx, E4M3), cast(w, sw, E4M3)
        ctx.save_for_backward(xq, wq)
        ctx.sx, ctx.sw, ctx.counts, ctx.gscale = sx, sw, counts, gscale
        return torch.cat([xj @ wq[j].T for j, xj in enumerate(xq.split(counts))]) / (sx * sw)

    @staticmethod
    def backward(ctx, g):
        xq, wq = ctx.saved_tensors
        sg = ctx.gscale or scale_of(g, E5M2)
        gq = cast(g, sg, E5M2)
        pairs = list(zip(gq.split(ctx.counts), xq.split(ctx.counts)))
        dx = torch.cat([gj @ wq[j] for j, (gj, _) in enumerate(pairs)]) / (sg * ctx.sw)
        dw = torch.stack([gj.T @ xj for gj, xj in pairs]) / (sg * ctx.sx)
        return dx, dw, None, None


def experts(x, w, counts, fp8):
    if fp8:
        return FP8Product.apply(x, w, counts, None)
    return torch.cat([xj @ w[j].T for j, xj in enumerate(x.split(counts))])


def moe(P, p, m, h, fp8):
    """Mixtral's MoE MLP over h (B, T, C); returns it and the layer's
    load-balancing and z losses"""
    E, K = m["n_experts"], m["top_k"]
    x = h.reshape(-1, h.shape[-1])
    N = x.shape[0]
    logits = x @ P[p + "block_sparse_moe.gate.weight"].T
    top, idx = logits.topk(K, -1)
    gates = torch.softmax(top, -1)
    e = p + "block_sparse_moe.experts.{}.{}.weight"
    up = torch.stack([torch.cat([P[e.format(j, "w1")], P[e.format(j, "w3")]]) for j in range(E)])
    down = torch.stack([P[e.format(j, "w2")] for j in range(E)])
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = [int((flat == j).sum()) for j in range(E)]
    xs = x[order // K]
    g, u = experts(xs, up, counts, fp8).chunk(2, -1)
    y = experts(F.silu(g) * u, down, counts, fp8)
    ys = torch.empty_like(y).index_copy(0, order, y).reshape(N, K, -1)
    out = (gates.unsqueeze(-1) * ys).sum(1)
    prob = torch.softmax(logits, -1)
    f = torch.tensor(counts, dtype=torch.float64) / N
    aux = E * (f * prob.mean(0)).sum()
    z = torch.logsumexp(logits, -1).pow(2).mean()
    return out.reshape(h.shape), aux, z


def product(x, ws, fp8, gscale=None):
    """x @ cat(ws)^T, split back into one output per weight"""
    w = torch.cat(ws, 0)
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    y = FP8Product.apply(x2, w.unsqueeze(0), [x2.shape[0]], gscale) if fp8 else x2 @ w.T
    y = y.reshape(*shape[:-1], w.shape[0])
    return torch.split(y, [t.shape[0] for t in ws], dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """Hugging Face's rotate_half RoPE over x (B, H, T, D)"""
    T, D = x.shape[2], x.shape[3]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos(), emb.sin()
    rot = torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1)
    return x * cos + rot * sin


def forward(P, cfg, tokens, targets, fp8, head):
    m = cfg["model"]
    C, Hq, Hkv = m["d_model"], m["n_heads"], m["n_kv_heads"]
    D = m.get("head_dim") or C // Hq
    eps, theta = m["norm_eps"], m["rope_theta"]
    B, T = tokens.shape
    x = P["model.embed_tokens.weight"][tokens]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    extra = 0.0  # the MoE layers' losses
    for i in range(m["n_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q, k, v = product(h, [P[p + f"self_attn.{n}_proj.weight"] for n in "qkv"], fp8)
        q = rope(q.reshape(B, T, Hq, D).transpose(1, 2), theta)
        k = rope(k.reshape(B, T, Hkv, D).transpose(1, 2), theta)
        v = v.reshape(B, T, Hkv, D).transpose(1, 2)
        k = k.repeat_interleave(Hq // Hkv, 1)
        v = v.repeat_interleave(Hq // Hkv, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, -1) @ v
        a = a.transpose(1, 2).reshape(B, T, Hq * D)
        (o,) = product(a, [P[p + "self_attn.o_proj.weight"]], fp8)
        x = x + o
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        if p + "block_sparse_moe.gate.weight" in P:
            down, aux, z = moe(P, p, m, h, fp8)
            extra = extra + m["router_aux_loss_coef"] * aux + m["router_z_loss_coef"] * z
        else:
            gate, up = product(h, [P[p + "mlp.gate_proj.weight"], P[p + "mlp.up_proj.weight"]],
                               fp8)
            (down,) = product(F.silu(gate) * up, [P[p + "mlp.down_proj.weight"]], fp8)
        x = x + down
    x = rmsnorm(x, P["model.norm.weight"], eps)
    # the head's gradient is (softmax - onehot) / n: its scale is E5M2's
    # largest over 1 / n, fixed before the backward
    n = int((targets != -100).sum())
    (logits,) = product(x, [P["lm_head.weight"]], fp8 and head, E5M2[1] * n)
    ce = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-100)
    return ce, extra


def layernorm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def forward_gpt(P, cfg, tokens, targets, fp8, head):
    m = cfg["model"]
    C, H = m["d_model"], m["n_heads"]
    D = m.get("head_dim") or C // H
    eps = m["norm_eps"]
    B, T = tokens.shape
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][:T]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(m["n_layers"]):
        p = f"transformer.h.{i}."

        def biased(h, name):
            (y,) = product(h, [P[p + name + ".weight"]], fp8)
            return y + P[p + name + ".bias"]

        h = layernorm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2)
                   for t in biased(h, "attn.c_attn").split(H * D, -1))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, -1) @ v
        x = x + biased(a.transpose(1, 2).reshape(B, T, H * D), "attn.c_proj")
        h = layernorm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        x = x + biased(F.gelu(biased(h, "mlp.c_fc"), approximate="tanh"), "mlp.c_proj")
    x = layernorm(x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    n = int((targets != -100).sum())
    (logits,) = product(x, [P["transformer.wte.weight"]], fp8 and head, E5M2[1] * n)
    ce = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-100)
    return ce, 0.0


def load(path):
    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["config"])
        return (cfg, np.asarray(f["tokens"], np.int64), np.asarray(f["targets"], np.int64),
                float(np.asarray(f["loss"])),
                {k: np.asarray(v, np.float64) for k, v in f["params"].items()},
                {k: np.asarray(v, np.float64) for k, v in f["grads"].items()})


def reference(cfg, tokens, targets, params, fp8):
    P = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    run = forward_gpt if cfg["model"]["family"] == "gpt" else forward
    loss, extra = run(P, cfg, torch.from_numpy(tokens), torch.from_numpy(targets), fp8,
                      cfg["fp8"]["head"])
    (loss + extra).backward()
    return float(loss), {k: t.grad.numpy() for k, t in P.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plain")
    ap.add_argument("fp8")
    ap.add_argument("--tag", default="fp8/ref")
    a = ap.parse_args()
    failed = 0

    def check(ok, name, detail):
        nonlocal failed
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}: {a.tag}/{name} {detail}")

    cfg, tok, tgt, loss_plain, params, g_plain = load(a.plain)
    cfg8, tok8, tgt8, loss_fp8, params8, g_fp8 = load(a.fp8)
    if cfg8["fp8"]["recipe"] != "current" or not np.array_equal(tok, tok8) or any(
            not np.array_equal(params[k], params8[k]) for k in params):
        print(f"FAIL: {a.tag}/input: the dumps are not one model and batch, the second "
              f"with fp8.recipe=current")
        return 1
    names = sorted(params)
    ref_loss, ref_g = reference(cfg, tok, tgt, params, False)
    check(abs(loss_plain - ref_loss) <= 1e-5 * abs(ref_loss), "plain/loss",
          f"pp {loss_plain:.9g}, float64 {ref_loss:.9g}")
    worst = max((rel(g_plain[k], ref_g[k]), k) for k in names)
    check(worst[0] <= 1e-5, "plain/grads", f"worst {worst[1]} rel={worst[0]:.3g}")

    ref8_loss, ref8_g = reference(cfg8, tok, tgt, params, True)
    flat = lambda g: np.concatenate([g[k].ravel() for k in names])  # noqa: E731
    moved = rel(flat(g_fp8), flat(ref_g))
    check(moved >= 1e-3, "fp8/applied", f"FP8 moves pp's gradients by rel={moved:.3g}")
    check(abs(loss_fp8 - ref8_loss) <= 1e-5 * abs(ref8_loss), "fp8/loss",
          f"pp {loss_fp8:.9g}, float64 on FP8 values {ref8_loss:.9g} (without FP8 {ref_loss:.9g})")
    for k in names:
        e = rel(g_fp8[k], ref8_g[k])
        check(e <= 1e-3, f"fp8/grads/{k}", f"rel={e:.3g}")
    whole = rel(flat(g_fp8), flat(ref8_g))
    check(whole <= 1e-4, "fp8/grads",
          f"rel={whole:.3g} against FP8's own effect {moved:.3g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
