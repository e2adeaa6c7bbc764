"""PyTorch + PEFT's side of bench/lora.sh: LoRA training of a Hugging Face
Llama on a pp-tokens dataset with a loss mask, as pp-train reads it with
packing=false (one document per sequence, cut at T+1 tokens, padded, the
masked targets left out), in float32 on the CPU.

    peft_train.py HF_DIR DATA.h5 --seq T --batch B --steps S --rank R --alpha A --lr LR

Prints one JSON object: tokens_per_s over the steps after the first, the
losses, and the peak RSS in MB."""
import argparse
import json
import resource
import time

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("hf")
ap.add_argument("data")
for k, t in (("seq", int), ("batch", int), ("steps", int), ("rank", int), ("alpha", float), ("lr", float)):
    ap.add_argument("--" + k, type=t, required=True)
a = ap.parse_args()

with h5py.File(a.data, "r") as f:
    toks = np.asarray(f["train/tokens"], np.int64)
    off = np.asarray(f["train/doc_offsets"], np.int64)
    mask = np.asarray(f["train/loss_mask"], np.int64) if "loss_mask" in f["train"] else np.ones_like(toks)
T = a.seq
seqs = []
for d in range(len(off) - 1):
    doc, m = toks[off[d]:off[d + 1]][: T + 1], mask[off[d]:off[d + 1]][: T + 1]
    inp = np.zeros(T, np.int64)
    lab = np.full(T, -100, np.int64)
    inp[: len(doc) - 1] = doc[:-1]
    lab[: len(doc) - 1] = np.where(m[1:] > 0, doc[1:], -100)
    seqs.append((inp, lab))

model = LlamaForCausalLM.from_pretrained(a.hf, torch_dtype=torch.float32, attn_implementation="eager")
cfg = LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
model = get_peft_model(model, cfg)
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr, betas=(0.9, 0.95),
                        weight_decay=0.1)
losses, times = [], []
for s in range(a.steps):
    batch = [seqs[(s * a.batch + i) % len(seqs)] for i in range(a.batch)]
    inp = torch.tensor(np.stack([b[0] for b in batch]))
    lab = torch.tensor(np.stack([b[1] for b in batch]))
    t0 = time.perf_counter()
    opt.zero_grad()
    logits = model(inp).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
    losses.append(loss.item())
steady = times[1:] if len(times) > 1 else times
print(json.dumps({"tokens_per_s": a.batch * T / (sum(steady) / len(steady)), "losses": losses,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "torch": torch.__version__}))
