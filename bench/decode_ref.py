#!/usr/bin/env python3
"""The llama.cpp and transformers sides of bench/decode-cpu.sh, pp-decode's
figures read back, and the script's tables.

    decode_ref.py llama.cpp GGUF --threads "1 2" --prompt IDS -n N [--repeat R]
        greedy decoding of the GGUF file with llama.cpp (llama-cpp-python)
    decode_ref.py transformers HFDIR --dtype fp32|bf16 --threads "1 2" --prompt IDS -n N [--repeat R]
        greedy decoding of a Hugging Face safetensors directory with
        transformers' AutoModelForCausalLM on PyTorch, KV cache on
    decode_ref.py pp FILE --log STDERR [--weights P] [--prompts K] [--wall S]
        pp-decode --json's stdout (one JSON object per prompt) and the
        totals line of its stderr as one JSON object: batch-1 decode tok/s,
        the generation time of the whole run, the weight bytes read per
        step; exit 1 naming a missing field, when K prompts did not come
        back, or when the log says the weights were not P
    decode_ref.py report META DIR [JSON]
        bench/decode-cpu.sh's tables (stdout) and JSON file

IDS are token ids separated by spaces: the models have random weights and no
tokenizer. Both reference sides load the model once per thread count, feed
the prompt in one forward pass (prefill: its logits give the first new
token), then run N - 1 forward passes of one token each, taking the argmax of
the logits (end-of-sequence ignored). Only those N - 1 steps are timed:
decode tok/s = (N - 1) / their wall-clock time, as pp-decode counts its
decode_tok_s. With --repeat R the prompt is decoded R times from an empty
cache and the fastest counts (decode_tok_s_runs lists them all). They
print one JSON line per thread count: threads, prompt_tokens,
generated_tokens, load_s, prefill_s, prefill_tok_s, decode_s, decode_tok_s,
tokens (the generated ids) and the library versions; llama.cpp's also carry
its own perf counters (llama_perf_context: eval time and count). A failure
exits 1 with the reason on stderr.

pp, report and everything but the two reference sides use the standard
library only: they run under any python3.
"""
import argparse
import json
import sys
import time

from benchlib import fmt, load, load_or_none, ratio


def die(msg):
    sys.exit(f"decode_ref: {msg}")


def ids(text):
    try:
        out = [int(x) for x in text.split()]
    except ValueError:
        die(f"--prompt {text!r}: expected token ids separated by spaces")
    if not out:
        die("--prompt: empty")
    return out


def threads_list(text):
    try:
        out = [int(x) for x in text.split()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        die(f"--threads {text!r}: expected positive integers")
    return out


def emit(d):
    print(json.dumps(d), flush=True)


# --- llama.cpp ------------------------------------------------------------------

def best_of(repeat, once):
    """once() -> (prefill_s, decode_s, tokens, extra) repeat times: the
    fastest decode, with every run's decode time"""
    runs = [once() for _ in range(repeat)]
    best = min(runs, key=lambda r: r[1])
    return best, [r[1] for r in runs]


def figures(side, t, prompt, n, load_s, best, all_s):
    prefill_s, decode_s, out, extra = best
    return dict({"side": side, "threads": t, "prompt_tokens": len(prompt),
                 "generated_tokens": len(out), "load_s": load_s, "prefill_s": prefill_s,
                 "prefill_tok_s": len(prompt) / prefill_s, "decode_s": decode_s,
                 "decode_tok_s": (n - 1) / decode_s,
                 "decode_tok_s_runs": [(n - 1) / x for x in all_s], "tokens": out}, **extra)


def run_llama_cpp(a):
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    prompt, n = ids(a.prompt), a.n
    for t in threads_list(a.threads):
        t0 = time.perf_counter()
        llm = Llama(model_path=a.model, n_ctx=len(prompt) + n + 8, n_batch=max(len(prompt), 32),
                    n_threads=t, n_threads_batch=t, logits_all=False, verbose=a.verbose)
        load_s = time.perf_counter() - t0
        ctx = llm._ctx.ctx
        nv = llm.n_vocab()

        def argmax():
            return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(nv,))))

        def once():
            llm.reset()  # an empty KV cache: eval drops what lies past n_tokens
            t0 = time.perf_counter()
            llm.eval(prompt)
            tok = argmax()
            prefill_s = time.perf_counter() - t0
            out = [tok]
            llama_cpp.llama_perf_context_reset(ctx)
            t0 = time.perf_counter()
            for _ in range(n - 1):
                llm.eval([tok])
                tok = argmax()
                out.append(tok)
            decode_s = time.perf_counter() - t0
            perf = llama_cpp.llama_perf_context(ctx)
            return prefill_s, decode_s, out, {"llama_perf": {
                "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval,
                "decode_tok_s": perf.n_eval / perf.t_eval_ms * 1e3 if perf.t_eval_ms > 0 else None}}

        best, all_s = best_of(a.repeat, once)
        llm.close()
        best[3]["llama_cpp_python"] = llama_cpp.__version__
        emit(figures("llama.cpp", t, prompt, n, load_s, best, all_s))


# --- transformers ---------------------------------------------------------------

def run_transformers(a):
    import inspect
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    prompt, n = ids(a.prompt), a.n
    # transformers 4.56 renamed from_pretrained's torch_dtype to dtype, and 5.x
    # forward's past_key_values to cache
    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    kw = {"dtype": dtype} if major_minor >= (4, 56) else {"torch_dtype": dtype}
    for t in threads_list(a.threads):
        torch.set_num_threads(t)
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(a.model, **kw)
        model.eval()
        load_s = time.perf_counter() - t0
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters \
            else "past_key_values"

        def step(x, past):
            o = model(input_ids=torch.tensor([x], dtype=torch.long), use_cache=True,
                      **({cache_kw: past} if past is not None else {}))
            past = getattr(o, "cache", None)
            if past is None:
                past = o.past_key_values
            return int(o.logits[0, -1].argmax()), past

        def once():
            with torch.inference_mode():
                t0 = time.perf_counter()
                tok, past = step(prompt, None)  # a new cache
                prefill_s = time.perf_counter() - t0
                out = [tok]
                t0 = time.perf_counter()
                for _ in range(n - 1):
                    tok, past = step([tok], past)
                    out.append(tok)
                return prefill_s, time.perf_counter() - t0, out, {}

        best, all_s = best_of(a.repeat, once)
        best[3].update(dtype=a.dtype, attn=getattr(model.config, "_attn_implementation", None),
                       torch=torch.__version__, transformers=transformers.__version__)
        del model
        emit(figures("transformers", t, prompt, n, load_s, best, all_s))


# --- pp-decode --json -----------------------------------------------------------

def pp_totals(path):
    """The run's totals: the JSON object pp-decode --json writes on stderr at
    the end. Its decode_tok_s counts the tokens of the one-token steps: every
    prompt's first token comes from its prefill."""
    try:
        with open(path, errors="replace") as f:
            lines = [x for x in f if x.startswith("{")]
    except OSError as err:
        die(f"{path}: {err}")
    try:
        out = json.loads(lines[-1]) if lines else None
    except ValueError as err:
        die(f"{path}: pp-decode's totals are not JSON ({err})")
    if not isinstance(out, dict):
        die(f"{path}: pp-decode --json wrote no totals on stderr")
    for k in ("prefill_s", "step_s", "weights", "weights_bytes"):
        if k not in out:
            die(f"{path}: pp-decode's totals have no field {k} (keys: {', '.join(out)})")
    return out


BULKY = ("tokens", "logprobs", "top_logprobs", "text", "completion", "prompt")


def cmd_pp(a):
    """One JSON object from pp-decode --json's stdout and its totals on
    stderr (--log); exit 1 naming what is missing."""
    rows = []
    try:
        with open(a.file) as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError as err:
                        die(f"{a.file}: a line that is not JSON ({err}): {line[:80]}")
    except OSError as err:
        die(f"{a.file}: {err}")
    for o in rows:
        for k in ("completion_tokens", "decode_tok_s", "prefill_tok_s", "tokens"):
            if k not in o:
                die(f"{a.file}: pp-decode --json has no field {k}; keys: {', '.join(o)}")
    if not rows or (a.prompts and len(rows) != a.prompts):
        die(f"{a.file}: pp-decode printed {len(rows)} JSON line(s) for {a.prompts or 1} "
            f"prompt(s): it did not decode one prompt per line")
    tot = pp_totals(a.log)
    if a.weights and tot["weights"] != a.weights:
        die(f"pp-decode --weights {a.weights} decoded {tot['weights']} weights (its totals)")
    emit({"lines": len(rows), "decode_tok_s": rows[0]["decode_tok_s"],
          "prefill_tok_s": rows[0]["prefill_tok_s"],
          "generated_tokens": sum(o["completion_tokens"] for o in rows),
          "gen_s": tot["prefill_s"] + tot["step_s"], "weight_bytes": tot["weights_bytes"],
          "weights_dtype": tot["weights"], "tokens": rows[0]["tokens"], "wall_s": a.wall,
          "totals": tot,
          "raw": {k: v for k, v in rows[0].items() if k not in BULKY} if len(rows) == 1 else None})


# --- report ---------------------------------------------------------------------



def load_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip().startswith("{"):
                    out.append(json.loads(line))
    except (OSError, ValueError):
        pass
    return out


def error_of(path):
    try:
        with open(path) as f:
            return f.read().strip() or "failed"
    except OSError:
        return None




def agree(a, b):
    """how many leading ids two greedy continuations share"""
    if not a or not b:
        return None
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k




def cmd_report(a):
    """META: bench, cpu, date, commit, n, prompt_tokens, models, precisions,
    threads, bandwidth {threads: GB/s}, bandwidth_note, batch, batch_n,
    batch_weights, batch_threads. In DIR, per model
    M: M.plan.json (pp-init --plan --json); per precision P and threads T:
    M.P.T.pp.json (decode_ref.py pp) or M.P.T.pp.err; M.P.llama.jsonl or
    M.P.llama.err; M.P.hf.jsonl or M.P.hf.err; and the ragged batch:
    M.ragged.batch.json / .err, M.ragged.single.K.json / .err."""
    meta, d = load(a.meta), a.dir
    bw = {int(k): v for k, v in (meta.get("bandwidth") or {}).items()}
    rows, vers, notes = [], {}, []
    for m in meta["models"]:
        plan = load(f"{d}/{m}.plan.json")["params"]
        for p in meta["precisions"]:
            refs = {}
            for side, key in (("llama.cpp", "llama"), ("transformers", "hf")):
                lines = load_lines(f"{d}/{m}.{p}.{key}.jsonl")
                err = error_of(f"{d}/{m}.{p}.{key}.err")
                refs[side] = ({x["threads"]: x for x in lines}, err)
                for x in lines:
                    for k in ("torch", "transformers", "llama_cpp_python"):
                        if k in x:
                            vers[k] = x[k]
            for t in meta["threads"]:
                pp = load_or_none(f"{d}/{m}.{p}.{t}.pp.json")
                row = {"model": m, "params": plan["total"], "precision": p, "threads": t,
                       "pp": None, "llama.cpp": None, "transformers": None}
                if pp:
                    wbytes = pp["weight_bytes"]  # pp-decode's own figure
                    gbs = pp["decode_tok_s"] * wbytes / 1e9
                    row["pp"] = {"decode_tok_s": pp["decode_tok_s"], "bytes_per_token": wbytes,
                                 "gbs": gbs,
                                 "bandwidth_fraction": gbs / bw[t] if bw.get(t) else None,
                                 "tokens": pp.get("tokens"), "raw": pp.get("raw")}
                else:
                    row["pp_error"] = error_of(f"{d}/{m}.{p}.{t}.pp.err") or "not run"
                for side, (by_t, err) in refs.items():
                    x = by_t.get(t)
                    if x:
                        row[side] = {k: x[k] for k in ("decode_tok_s", "prefill_tok_s", "load_s",
                                                       "tokens") if k in x}
                        if "llama_perf" in x:
                            row[side]["llama_perf_decode_tok_s"] = x["llama_perf"]["decode_tok_s"]
                    elif side == "transformers" and p == "q8_0":
                        row[side + "_error"] = "n/a"
                    else:
                        row[side + "_error"] = err or "not run"
                pt = (row["pp"] or {}).get("decode_tok_s")
                row["pp_over_llama_cpp"] = ratio(pt, (row["llama.cpp"] or {}).get("decode_tok_s"))
                row["pp_over_transformers"] = ratio(pt, (row["transformers"] or {}).get("decode_tok_s"))
                rows.append(row)

    ragged = []
    for m in meta["models"] if meta.get("batch") else []:
        r = {"model": m, "prompts": meta["batch"], "n": meta["batch_n"],
             "precision": meta["batch_weights"], "threads": meta["batch_threads"]}
        b = load_or_none(f"{d}/{m}.ragged.batch.pp.json")
        singles = [load_or_none(f"{d}/{m}.ragged.single.{k}.pp.json") for k in range(meta["batch"])]
        if not b:
            r["error"] = "batch: " + (error_of(f"{d}/{m}.ragged.batch.pp.err") or "not run")
        elif None in singles:
            k = singles.index(None)
            r["error"] = f"single run {k + 1}: " + (
                error_of(f"{d}/{m}.ragged.single.{k}.pp.err") or "not run")
        else:
            toks = b["generated_tokens"]
            stoks = sum(s["generated_tokens"] for s in singles)
            sgen = sum(s["gen_s"] for s in singles)
            swall = sum(s["wall_s"] for s in singles)
            r.update(batch_tokens=toks, single_tokens=stoks,
                     batch_gen_s=b["gen_s"], single_gen_s=sgen,
                     batch_tok_s=toks / b["gen_s"], single_tok_s=stoks / sgen,
                     gen_ratio=(toks / b["gen_s"]) / (stoks / sgen),
                     batch_wall_s=b["wall_s"], single_wall_s=swall,
                     wall_ratio=(toks / b["wall_s"]) / (stoks / swall))
        ragged.append(r)

    print(f"# CPU batch-1 decode: {meta['cpu']}, {meta['nproc']} cores; {meta['n']} new tokens "
          f"after a {meta['prompt_tokens']}-token prompt, greedy, random weights; {meta['date']}, "
          f"commit {meta['commit']}")
    print(f"# tok/s = (generated - 1) / decode time (prefill and model load not counted); "
          f"llama.cpp: llama-cpp-python {vers.get('llama_cpp_python', '?')} on pp's GGUF export; "
          f"transformers {vers.get('transformers', '?')} on PyTorch {vers.get('torch', '?')} "
          f"(AutoModelForCausalLM, KV cache) on pp's safetensors export")
    print("# BW% = pp tok/s x weight bytes per token / memory read bandwidth at that thread count ("
          + ", ".join(f"{t} thread{'s' if t > 1 else ''}: {g:.1f} GB/s" for t, g in sorted(bw.items()))
          + f"; {meta.get('bandwidth_note', '')})")
    head = ("model", "weights", "thr", "pp tok/s", "llama.cpp", "transformers", "pp/llama.cpp",
            "pp/transf.", "pp GB/tok", "pp GB/s", "BW%")
    line = "%-11s %-7s %3s %9s %9s %12s %12s %10s %9s %8s %6s"
    print(line % head)
    for r in rows:
        pp = r["pp"] or {}
        print(line % (
            r["model"], r["precision"], r["threads"],
            fmt(pp.get("decode_tok_s"), ".1f", "failed"),
            fmt((r["llama.cpp"] or {}).get("decode_tok_s"), ".1f", "failed"),
            fmt((r["transformers"] or {}).get("decode_tok_s"), ".1f",
                "n/a" if r.get("transformers_error") == "n/a" else "failed"),
            fmt(r["pp_over_llama_cpp"], ".2f"), fmt(r["pp_over_transformers"], ".2f"),
            fmt(pp.get("bytes_per_token") and pp["bytes_per_token"] / 1e9, ".3f"),
            fmt(pp.get("gbs"), ".1f"),
            fmt(pp.get("bandwidth_fraction") and 100 * pp["bandwidth_fraction"], ".0f")))
    # greedy agreement: the same weights should give the same ids (fp32);
    # bf16 and q8_0 round differently in each program, so they may part
    for r in rows:
        if r["threads"] != meta["threads"][0]:
            continue
        pt = (r["pp"] or {}).get("tokens")
        parts = []
        for side in ("llama.cpp", "transformers"):
            k = agree(pt, (r[side] or {}).get("tokens"))
            if k is not None:
                parts.append(f"{side} {k}/{len(pt)}")
        if parts:
            notes.append(f"{r['model']} {r['precision']}: greedy ids shared with pp from the start: "
                         + ", ".join(parts))
        elif r["pp"] and not pt:
            notes.append(f"{r['model']} {r['precision']}: pp-decode --json gave no ids to compare")
    for r in rows:
        for side in ("pp", "llama.cpp", "transformers"):
            e = r.get(side + "_error")
            if e and e != "n/a":
                notes.append(f"{r['model']} {r['precision']} {r['threads']} thr: {side} failed: {e}")
    for n_ in dict.fromkeys(notes):
        print(f"# {n_}")

    if ragged:
        print()
        print(f"# pp-decode: {meta['batch']} ragged prompts (lengths {meta.get('batch_lengths', '?')}) "
              f"in one run (--batch {meta['batch']} --prompt-file) against {meta['batch']} runs of one "
              f"prompt; {meta['batch_n']} new tokens each, weights {meta['batch_weights']}, "
              f"{meta['batch_threads']} threads")
        print("# gen: generated tokens / generation time (prefill + decode, from pp-decode's "
              "totals on stderr); wall: whole processes, model load included (once for the "
              "batch, per run for the singles)")
        line = "%-11s %12s %12s %9s %10s %12s %9s"
        print(line % ("model", "batch tok/s", "single tok/s", "gen ratio", "batch s",
                      "singles s", "wall ratio"))
        for r in ragged:
            if "error" in r:
                print(line % (r["model"], "failed", "-", "-", "-", "-", "-"))
                continue
            print(line % (r["model"], fmt(r["batch_tok_s"], ".1f"), fmt(r["single_tok_s"], ".1f"),
                          fmt(r["gen_ratio"], ".2f"), fmt(r["batch_wall_s"], ".1f"),
                          fmt(r["single_wall_s"], ".1f"), fmt(r["wall_ratio"], ".2f")))
        for r in ragged:
            if "error" in r:
                print(f"# {r['model']}: ragged batch failed: {r['error']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(meta, versions=vers, rows=rows, ragged=ragged), f, indent=1)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(prog="decode_ref.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("llama.cpp", "transformers"):
        s = sub.add_parser(name)
        s.add_argument("model")
        s.add_argument("--threads", default="1")
        s.add_argument("--prompt", required=True)
        s.add_argument("-n", type=int, default=128)
        s.add_argument("--repeat", type=int, default=1)
        s.add_argument("--verbose", action="store_true")
        if name == "transformers":
            s.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    s = sub.add_parser("pp")
    s.add_argument("file")
    s.add_argument("--prompts", type=int, default=0)
    s.add_argument("--wall", type=float, default=None)
    s.add_argument("--log", required=True)
    s.add_argument("--weights")
    s = sub.add_parser("report")
    s.add_argument("meta")
    s.add_argument("dir")
    s.add_argument("json", nargs="?")
    a = ap.parse_args()
    if a.cmd in ("llama.cpp", "transformers") and a.n < 2:
        die("-n must be at least 2 (the first new token comes from the prefill)")
    if a.cmd in ("llama.cpp", "transformers") and a.repeat < 1:
        die("--repeat must be at least 1")
    {"llama.cpp": run_llama_cpp, "transformers": run_transformers, "pp": cmd_pp,
     "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
