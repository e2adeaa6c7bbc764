#!/usr/bin/env python3
"""PyTorch side of bench/cpu-vs-torch.sh and bench/gpu.sh: trains the Hugging
Face model that matches a resolved pp config (pp-train --print-config) for a
few steps on random tokens and prints one JSON line with its throughput.

    torch_train.py --config RESOLVED.json [--steps N] [--warmup W] [--threads K]
                   [--device cpu|cuda] [--dtype fp32|bf16] [--attn eager|sdpa]
                   [--compile] [--fused]

Same work per step as pp-train: one forward and backward of global_batch x
seq_len tokens (microbatches of `microbatch`), global-norm clipping at
clip_norm, AdamW with pp's betas, eps and weight decay on matrices only.
Dropout is off and the KV cache unused. The model is built by
tests/ref/hf_reference.py's build_model, the code the reference test checks pp
against.

The defaults are bench/cpu-vs-torch.sh's settings: fp32, eager attention, no
compilation (torch 1.13 has neither scaled_dot_product_attention nor
torch.compile). bench/gpu.sh asks for the usual fast GPU settings:
--dtype bf16 (autocast: bf16 matrix products and attention, fp32 weights,
gradients and AdamW state), --attn sdpa, --compile (torch.compile of each
decoder layer, as torchtitan does) and --fused (torch.optim.AdamW(fused=True)).
A setting this torch cannot honour falls back to the default, and the output
says so in "notes": the fallback is never silent.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hf_reference  # noqa: E402


def blas_library():
    """The BLAS this process runs (the first OpenBLAS, MKL or reference BLAS
    library mapped, resolved; its folder names the build), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "/" in line})
    except OSError:
        return None
    for want in ("libopenblas", "libmkl", "libblas"):
        for p in paths:
            if os.path.basename(p).startswith(want):
                return os.path.realpath(p)
    return None


def first_line(err):
    s = str(err).strip().splitlines()
    return f"{type(err).__name__}: {s[0] if s else ''}"[:300]


def build(cfg, family, attn, notes):
    """The model with attention implementation attn, else eager (noted)."""
    if attn != "eager":
        try:
            return hf_reference.build_model(cfg, family, torch.float32, attn=attn), attn
        except (ValueError, ImportError) as err:
            notes.append(f"attention {attn} unavailable ({first_line(err)}): eager")
    return hf_reference.build_model(cfg, family, torch.float32), "eager"


def compile_layers(model, notes):
    """torch.compile of every decoder layer; False (noted) without torch.compile."""
    if not hasattr(torch, "compile"):
        notes.append(f"torch {torch.__version__} has no torch.compile: eager")
        return False
    layers = model.model.layers if hasattr(model, "model") else model.transformer.h
    for i, layer in enumerate(layers):
        layers[i] = torch.compile(layer)
    return True


def uncompile_layers(model):
    layers = model.model.layers if hasattr(model, "model") else model.transformer.h
    for i, layer in enumerate(layers):
        layers[i] = getattr(layer, "_orig_mod", layer)


def make_optimizer(model, cfg, fused, notes):
    aw = cfg.get("adamw", {})
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2],
               "weight_decay": float(aw.get("weight_decay", 0.1))},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kw = dict(lr=float(cfg.get("lr", 3e-4)),
              betas=(float(aw.get("b1", 0.9)), float(aw.get("b2", 0.95))),
              eps=float(aw.get("eps", 1e-8)))
    if fused:
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), params, True
        except (TypeError, RuntimeError) as err:
            notes.append(f"AdamW(fused=True) unavailable ({first_line(err)}): unfused")
    return torch.optim.AdamW(groups, **kw), params, False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="resolved pp config JSON")
    ap.add_argument("--steps", type=int, help="total steps (default: the config's steps)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the average")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (default: OMP_NUM_THREADS, else every core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: autocast to bf16 over fp32 weights")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    ap.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    ap.add_argument("--fused", action="store_true", help="torch.optim.AdamW(fused=True)")
    a = ap.parse_args()

    with open(a.config) as f:
        cfg = json.load(f)
    if a.threads <= 0:
        env = os.environ.get("OMP_NUM_THREADS", "")
        a.threads = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"torch_train: --device cuda: torch {torch.__version__} sees no CUDA device")
    dev = torch.device(a.device)
    notes = []
    family = hf_reference.family_name(cfg["model"])
    model, attn = build(cfg, family, a.attn, notes)
    model.to(dev).train()
    V = int(cfg["model"]["vocab_size"])
    T = int(cfg["seq_len"])
    GB = int(cfg["global_batch"])
    MB = int(cfg.get("microbatch") or GB)
    steps = a.steps or int(cfg["steps"])
    if steps <= a.warmup:
        sys.exit(f"torch_train: --steps {steps} must exceed --warmup {a.warmup}")
    opt, params, fused = make_optimizer(model, cfg, a.fused, notes)
    clip = float(cfg.get("clip_norm", 1.0))
    n_params = sum(p.numel() for p in params)
    compiled = a.compile and compile_layers(model, notes)
    if a.dtype == "bf16":
        autocast = lambda: torch.autocast(a.device, dtype=torch.bfloat16)  # noqa: E731
    else:
        import contextlib
        autocast = contextlib.nullcontext
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    torch.manual_seed(a.seed)

    def train_step():
        data = torch.randint(0, V, (GB, T + 1), device=dev)
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=dev)
        for k in range(0, GB, MB):
            x, y = data[k:k + MB, :-1], data[k:k + MB, 1:]
            with autocast():
                logits = model(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1)) * (x.shape[0] / GB)
            loss.backward()
            total += loss.detach()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        return float(total)  # waits for the step's kernels

    times, losses = [], []
    name = cfg["model"].get("preset") or family
    for step in range(steps):
        sync()
        t0 = time.perf_counter()
        try:
            total = train_step()
        except Exception as err:  # compilation fails on the first call
            if not (compiled and step == 0):
                raise
            notes.append(f"torch.compile failed ({first_line(err)}): eager")
            uncompile_layers(model)
            compiled = False
            sync()
            t0 = time.perf_counter()
            total = train_step()
        sync()
        dt = time.perf_counter() - t0
        times.append(dt)
        losses.append(total)
        print(f"torch_train: {name} step {step + 1}/{steps} loss {total:.4f} {dt:.3f} s "
              f"{GB * T / dt:.0f} tok/s", file=sys.stderr, flush=True)

    steady = times[a.warmup:]
    tps = [GB * T / t for t in steady]
    import transformers
    out = {
        "model": name, "family": family, "params": n_params,
        "tokens_per_s": sum(tps) / len(tps), "tokens_per_s_best": max(tps), "step_times": times,
        "loss_first": losses[0], "loss_last": losses[-1], "threads": a.threads,
        "device": a.device, "device_name": torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu",
        "dtype": a.dtype,
        "precision": "bf16 autocast over fp32 weights, gradients and AdamW state"
        if a.dtype == "bf16" else "fp32",
        "attn": attn, "compile": compiled, "fused_adamw": fused, "notes": notes,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "blas": blas_library() or "unknown"}
    if a.device == "cuda":
        out["max_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    print(json.dumps(out))


if __name__ == "__main__":
    main()
