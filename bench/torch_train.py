#!/usr/bin/env python3
"""PyTorch side of bench/cpu-vs-torch.sh: trains the Hugging Face model that
matches a resolved pp config (pp-train --print-config) for a few steps on
random tokens and prints one JSON line with its throughput.

    torch_train.py --config RESOLVED.json [--steps N] [--warmup W] [--threads K]

Same work per step as pp-train: fp32, one forward and backward of
global_batch x seq_len tokens (microbatches of `microbatch`), global-norm
clipping at clip_norm, AdamW with pp's betas, eps and weight decay on matrices
only. Dropout is off, attention is the eager implementation (torch 1.13 has no
scaled_dot_product_attention). The model is built by tests/hf_reference.py's
build_model, the code the reference test checks pp against.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hf_reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="resolved pp config JSON")
    ap.add_argument("--steps", type=int, help="total steps (default: the config's steps)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the average")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (default: OMP_NUM_THREADS, else every core)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    with open(a.config) as f:
        cfg = json.load(f)
    if a.threads <= 0:
        env = os.environ.get("OMP_NUM_THREADS", "")
        a.threads = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    family = hf_reference.family_name(cfg["model"])
    model = hf_reference.build_model(cfg, family, torch.float32)
    model.train()
    V = int(cfg["model"]["vocab_size"])
    T = int(cfg["seq_len"])
    GB = int(cfg["global_batch"])
    MB = int(cfg.get("microbatch") or GB)
    steps = a.steps or int(cfg["steps"])
    if steps <= a.warmup:
        sys.exit(f"torch_train: --steps {steps} must exceed --warmup {a.warmup}")
    aw = cfg.get("adamw", {})
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": float(aw.get("weight_decay", 0.1))},
         {"params": other, "weight_decay": 0.0}],
        lr=float(cfg.get("lr", 3e-4)), betas=(float(aw.get("b1", 0.9)), float(aw.get("b2", 0.95))),
        eps=float(aw.get("eps", 1e-8)))
    clip = float(cfg.get("clip_norm", 1.0))
    n_params = sum(p.numel() for p in params)

    times, losses = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        data = torch.randint(0, V, (GB, T + 1))
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(0, GB, MB):
            x, y = data[k:k + MB, :-1], data[k:k + MB, 1:]
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)) * (x.shape[0] / GB)
            loss.backward()
            total += float(loss)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        losses.append(total)
        print(f"torch_train: {cfg['model'].get('preset', family)} step {step + 1}/{steps} "
              f"loss {total:.4f} {dt:.3f} s {GB * T / dt:.0f} tok/s", file=sys.stderr, flush=True)

    steady = times[a.warmup:]
    tps = [GB * T / t for t in steady]
    import transformers
    print(json.dumps({
        "model": cfg["model"].get("preset", family), "family": family, "params": n_params,
        "tokens_per_s": sum(tps) / len(tps), "tokens_per_s_best": max(tps), "step_times": times, "loss_first": losses[0],
        "loss_last": losses[-1], "threads": a.threads, "torch": torch.__version__,
        "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
