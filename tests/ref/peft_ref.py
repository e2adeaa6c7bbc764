"""PEFT's LoRA as the reference for pp's (tests/e2e/test_lora_peft.sh).

    peft_ref.py BASE_HF PEFT0 DATA.h5 T STEPS LR WD PP_LOGITS0 PP_PEFT_END PP_LOGITS_END OUT.json

BASE_HF: the base model as pp exported it (safetensors + config.json);
PEFT0: pp's step-0 adapters exported with --format peft; DATA.h5: the
pp-tokens file both trained on (every window of T+1 tokens the same, so the
order pp visits them in does not matter); PP_LOGITS0 / PP_LOGITS_END: pp's
logits (tool_logits) of the window's first T tokens with the step-0 and
the final adapters; PP_PEFT_END: pp's final adapters (--format peft).

Loads the base in transformers, the adapters with PeftModel.from_pretrained,
and checks the logits; then trains the adapters STEPS steps with AdamW (the
settings pp-train was given), two sequences per step, and writes the
losses, the adapters' largest relative difference from pp's and the final
logits' to OUT.json."""
import json
import sys

import h5py
import numpy as np
import torch
from peft import PeftModel
from safetensors.numpy import load_file
from transformers import LlamaForCausalLM

(base_dir, peft0, data, T, steps, lr, wd, logits0, peft_end, logits_end, out) = sys.argv[1:12]
T, steps, lr, wd = int(T), int(steps), float(lr), float(wd)
torch.manual_seed(0)

with h5py.File(data, "r") as f:
    window = np.asarray(f["train/tokens"][: T + 1], np.int64)
inp = torch.tensor(window[:T]).unsqueeze(0)
tgt = torch.tensor(window[1:]).unsqueeze(0)

base = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32, attn_implementation="eager")
model = PeftModel.from_pretrained(base, peft0, is_trainable=True)
model.eval()  # no dropout anywhere (lora_dropout is 0 too)
V = base.config.vocab_size


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def pp_logits(path):
    return np.fromfile(path, "<f4").reshape(T, V)


res = {}
with torch.no_grad():
    res["logits0"] = rel(pp_logits(logits0), model(inp).logits[0].numpy())
    res["logits0_is_base"] = rel(model(inp).logits[0].numpy(), base(inp).logits[0].numpy()) == 0

params = [p for p in model.parameters() if p.requires_grad]
res["trainable"] = sum(p.numel() for p in params)
opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
batch_inp, batch_tgt = inp.repeat(2, 1), tgt.repeat(2, 1)
losses = []
for _ in range(steps):
    opt.zero_grad()
    logits = model(batch_inp).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), batch_tgt.reshape(-1))
    loss.backward()
    opt.step()
    losses.append(loss.item())
res["losses"] = losses

mine = {k: v.detach().numpy() for k, v in model.named_parameters() if "lora_" in k}
theirs = load_file(f"{peft_end}/adapter_model.safetensors")
worst, worst_name = 0.0, ""
for name, x in mine.items():
    key = name.replace(".default.", ".")  # PEFT's adapter name is not in its files
    if key not in theirs:
        res["missing"] = key
        break
    d = rel(theirs[key], x)
    worst, worst_name = (d, key) if d > worst else (worst, worst_name)
res["adapters"], res["adapters_worst"] = worst, worst_name
res["n_adapters"], res["n_pp_adapters"] = len(mine), len(theirs)
with torch.no_grad():
    res["logits_end"] = rel(pp_logits(logits_end), model(inp).logits[0].numpy())
    # PEFT's own merge of the trained adapters, for the merged export
    # PEFT's own files, for pp-ckpt import --format peft: what save_pretrained
    # writes, less the model card (which wants Jinja2)
    import os
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file
    os.makedirs(out + ".peft", exist_ok=True)
    model.peft_config["default"].save_pretrained(out + ".peft")
    save_file({k: v.contiguous() for k, v in get_peft_model_state_dict(model).items()},
              out + ".peft/adapter_model.safetensors", metadata={"format": "pt"})
    merged = model.merge_and_unload()
    np.save(out + ".merged_q.npy", merged.model.layers[0].self_attn.q_proj.weight.numpy())
json.dump(res, open(out, "w"), indent=1)
