#!/usr/bin/env python3
"""The arithmetic and the tables of the bench/*.sh scripts, in one place.

    benchlib.py get FILE KEY...               values of top-level keys of a JSON file, one line
    benchlib.py pp-metrics METRICS WARMUP     steady-state figures of a pp-train run (JSON)
    benchlib.py step-times METRICS FIRST LAST the step times (s) of steps FIRST..LAST of a
                                              pp-train run, one line
    benchlib.py fit-microbatch BATCH BUDGET PLAN...
                                              the largest microbatch whose planned memory fits
    benchlib.py gpu-report META DIR TAGS [JSON]
                                              bench/gpu.sh's table (stdout) and JSON file
    benchlib.py decode-metrics FILE           tok/s and bytes/token of pp-decode --json (JSON)
    benchlib.py profile-report DIR LAYOUTS [JSON]
                                              bench/profile.sh's table and JSON file
    benchlib.py decode-report META DIR TAGS [JSON]
                                              bench/gpu-decode.sh's table and JSON file

Standard library only: it runs under any python3, with or without torch.
Exit status 1 with a message naming the file when an input is missing or
malformed.
"""
import json
import os
import sys


def die(msg):
    sys.exit(f"benchlib: {msg}")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        die(f"{path}: {err}")


def load_or_none(path):
    """A JSON file that a failed run may have left absent or empty: None then."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mean(xs):
    return sum(xs) / len(xs)


def lookup(d, key):
    """d[key], where key may be a dotted path ("model.max_seq_len")"""
    for part in key.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def cmd_get(path, *keys):
    d = load(path)
    vals = [lookup(d, k) for k in keys]
    missing = [k for k, v in zip(keys, vals) if v is None]
    if missing:
        die(f"{path}: no key {', '.join(missing)} (keys: {', '.join(d)})")
    print(" ".join(str(v) for v in vals))


def read_jsonl(path):
    """The records of a JSON-lines file (blank lines skipped)."""
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as err:
                        die(f"{path}:{n}: {err}")
    except OSError as err:
        die(f"{path}: {err}")
    return rows


def cmd_pp_metrics(path, warmup):
    """Mean tokens/s, FLOP/s and MFU over the steps after `warmup` of a
    pp-train metrics.jsonl (its per-step lines: step, loss, tokens_per_s,
    flops_per_s, mfu, null when the device's peak is unknown)."""
    rows = [r for r in read_jsonl(path) if "tokens_per_s" in r]
    steady = [r for r in rows if r["step"] > int(warmup)]
    if not steady:
        die(f"{path}: no step after the {warmup} warm-up steps")
    mfus = [r.get("mfu") for r in steady]
    print(json.dumps({
        "steps": len(steady),
        "tokens_per_s": mean([r["tokens_per_s"] for r in steady]),
        "tokens_per_s_best": max(r["tokens_per_s"] for r in steady),
        "flops_per_s": mean([r["flops_per_s"] for r in steady]),
        "mfu": None if None in mfus else mean(mfus),
        "loss_first": rows[0]["loss"],
        "loss_last": rows[-1]["loss"],
    }))


def cmd_step_times(path, first, last):
    """The step_time of each of steps first..last of a metrics.jsonl, in
    step order (the last record of a step: a resumed run logs it again)."""
    times = {r["step"]: r["step_time"] for r in read_jsonl(path)
             if "step_time" in r and int(first) <= r["step"] <= int(last)}
    want = range(int(first), int(last) + 1)
    missing = [s for s in want if s not in times]
    if missing:
        die(f"{path}: no step time for step {missing[0]}")
    print(" ".join(f"{times[s]:.6f}" for s in want))


def cmd_fit_microbatch(batch, budget_gib, *plans):
    """plans: MB=FILE pairs of pp-init --plan --json outputs; prints the
    largest MB that divides batch and whose memory.total fits budget_gib,
    else exits 1 naming the smallest plan's need."""
    batch, budget = int(batch), float(budget_gib) * 2**30
    fits, need = [], {}
    for p in plans:
        mb, path = p.split("=", 1)
        total = load(path)["memory"]["total"]
        need[int(mb)] = total
        if batch % int(mb) == 0 and total <= budget:
            fits.append(int(mb))
    if not fits:
        mb = min(need)
        die(f"no microbatch fits {float(budget_gib):.1f} GiB: microbatch {mb} is planned at "
            f"{need[mb] / 2**30:.1f} GiB")
    print(max(fits))


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def human(n):
    """1100048384 -> 1.10B, 94528 -> 94.5K"""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)


def ratio(a, b):
    return a / b if a and b else None


def read_rows(tmp, tags, sides):
    """Per tag: TAG.row.json (the row's settings) and, for each side, its
    result TAG.SIDE.json or the reason it failed, TAG.SIDE.err."""
    rows = []
    for tag in tags.split():
        r = load(f"{tmp}/{tag}.row.json")
        for side in sides:
            r[side] = load_or_none(f"{tmp}/{tag}.{side}.json")
            if r[side] is None:
                try:
                    with open(f"{tmp}/{tag}.{side}.err") as f:
                        r[side + "_error"] = f.read().strip() or "failed"
                except OSError:
                    r[side + "_error"] = "not run"
        rows.append(r)
    return rows


def cmd_gpu_report(meta_path, tmp, tags, json_path=None):
    """meta: model, params, matmul_params, device, date, commit, warmup,
    steps, pp_dtype, pp_note; per tag in tmp: TAG.row.json {seq,
    global_batch, microbatch, flops_per_token}, TAG.pp.json (pp-metrics),
    TAG.torch.json (torch_train.py), or their .err files."""
    meta = load(meta_path)
    out_rows, torch_info, pp_dtype = [], None, meta.get("pp_dtype", "fp32")
    for r in read_rows(tmp, tags, ("pp", "torch")):
        pp, th = r["pp"], r["torch"]
        fpt = float(r["flops_per_token"])
        row = {"seq": r["seq"], "global_batch": r["global_batch"], "microbatch": r["microbatch"],
               "flops_per_token": fpt, "pp": None, "torch": None, "pp_over_torch": None}
        peak = None
        if pp:
            tflops = pp["flops_per_s"] / 1e12
            row["pp"] = {"dtype": pp_dtype, "tokens_per_s": pp["tokens_per_s"],
                         "tflops": tflops, "mfu": pp["mfu"], "loss_first": pp["loss_first"]}
            if pp["mfu"]:  # the peak pp-train used: its own table in libcommon/plan/plan.c
                peak = pp["flops_per_s"] / pp["mfu"]
        else:
            row["pp_error"] = r["pp_error"]
        if th:
            torch_info = th
            tps = th["tokens_per_s"]
            row["torch"] = {"dtype": th["dtype"], "precision": th["precision"],
                            "tokens_per_s": tps,
                            "tflops": tps * fpt / 1e12,
                            "mfu": tps * fpt / peak if peak else None,
                            "loss_first": th["loss_first"], "attn": th["attn"],
                            "compile": th["compile"], "fused_adamw": th["fused_adamw"],
                            "notes": th["notes"]}
        else:
            row["torch_error"] = r["torch_error"]
        if pp and th:
            row["pp_over_torch"] = ratio(pp["tokens_per_s"], th["tokens_per_s"])
        row["peak_tflops"] = peak / 1e12 if peak else None
        out_rows.append(row)

    peaks = {round(x["peak_tflops"], 1) for x in out_rows if x["peak_tflops"]}
    print(f"# GPU training throughput: {meta['model']} ({human(meta['params'])} parameters) "
          f"on {meta['device']}; mean of {meta['steps']} steps after {meta['warmup']} warm-up; "
          f"{meta['date']}, commit {meta['commit']}")
    print(f"# FLOPs/token = 6N + 6*L*Hq*D*T (N = {meta['matmul_params']:,} parameters in "
          f"matrix products); MFU against the dense bf16 peak "
          + (", ".join(f"{p:.1f}" for p in sorted(peaks)) + " TFLOP/s" if peaks
             else "(unknown for this device: no MFU)"))
    print(f"# pp: {pp_dtype}: {meta.get('pp_note', '')}")
    if torch_info:
        print(f"# PyTorch {torch_info['torch']}, transformers {torch_info['transformers']}: "
              f"Hugging Face model, {torch_info['precision']}, attention {torch_info['attn']}, "
              f"torch.compile {'on (each decoder layer)' if torch_info['compile'] else 'off'}, "
              f"AdamW fused={torch_info['fused_adamw']}")
        for note in torch_info["notes"]:
            print(f"# PyTorch fallback: {note}")
    head = ("seq", "batch", "mb", "pp dtype", "pp tok/s", "pp TFLOP/s", "pp MFU",
            "torch dtype", "torch tok/s", "torch MFU", "pp/torch")
    print("%-6s %5s %4s %-8s %10s %10s %7s %-12s %11s %9s %8s" % head)
    for x in out_rows:
        pp, th = x["pp"] or {}, x["torch"] or {}
        print("%-6d %5d %4d %-8s %10s %10s %7s %-12s %11s %9s %8s" % (
            x["seq"], x["global_batch"], x["microbatch"], pp_dtype,
            fmt(pp.get("tokens_per_s"), ".1f", "failed"), fmt(pp.get("tflops"), ".3g"),
            fmt(pp.get("mfu") and 100 * pp["mfu"], ".1f"),
            th.get("dtype") or "-",
            fmt(th.get("tokens_per_s"), ".1f", "failed"),
            fmt(th.get("mfu") and 100 * th["mfu"], ".1f"),
            fmt(x["pp_over_torch"], ".3f")))
    for x in out_rows:
        for side in ("pp", "torch"):
            if x.get(side + "_error"):
                print(f"# seq {x['seq']}: {side} failed: {x[side + '_error']}")
    if json_path:
        doc = dict(meta, rows=out_rows, columns={
            "tflops": "achieved model TFLOP/s per device", "mfu": "fraction of peak_tflops",
            "pp_over_torch": "pp tokens/s divided by PyTorch tokens/s"})
        if torch_info:
            doc["torch"] = {k: torch_info[k] for k in ("torch", "transformers", "dtype",
                                                       "precision", "attn", "compile",
                                                       "fused_adamw", "notes")}
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


# pp-decode --json: the names its figures may go by, most specific first
DECODE_TPS = ("decode_tokens_per_s", "decode_tok_per_s", "decode_tok_s", "tokens_per_s",
              "tok_per_s", "tok_s")
DECODE_BYTES = ("bytes_per_token", "decode_bytes_per_token", "bytes_read_per_token",
                "read_bytes_per_token")


def pick(d, names, what, path):
    for k in names:
        if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool):
            return k, float(d[k])
    die(f"{path}: pp-decode --json gave no {what} (looked for {', '.join(names)}; "
        f"keys: {', '.join(d)})")


def cmd_decode_metrics(path):
    """The last JSON object line of pp-decode --json's stdout, normalised."""
    obj = None
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        pass
    except OSError as err:
        die(f"{path}: {err}")
    if not isinstance(obj, dict):
        die(f"{path}: pp-decode --json printed no JSON object")
    ktps, tps = pick(obj, DECODE_TPS, "tokens per second", path)
    kbytes, nbytes = pick(obj, DECODE_BYTES, "bytes read per token", path)
    if not (tps > 0 and nbytes > 0):
        die(f"{path}: {ktps} = {tps}, {kbytes} = {nbytes}: expected positive figures")
    print(json.dumps({"tokens_per_s": tps, "bytes_per_token": nbytes, "raw": obj}))


def cmd_decode_report(meta_path, tmp, tags, json_path=None):
    """meta: device, bandwidth_gbs (null when not measured), bandwidth_note,
    n, prompt_tokens, date, commit; per tag in tmp: TAG.row.json {model,
    params, dtype}, TAG.decode.json (decode-metrics) or TAG.decode.err."""
    meta = load(meta_path)
    bw = meta.get("bandwidth_gbs")
    out_rows = []
    for r in read_rows(tmp, tags, ("decode",)):
        res = r["decode"]
        row = {"model": r["model"], "params": r["params"], "dtype": r["dtype"],
               "tokens_per_s": None, "bytes_per_token": None, "achieved_gbs": None, "mbu": None}
        if res:
            achieved = res["tokens_per_s"] * res["bytes_per_token"] / 1e9
            row.update(tokens_per_s=res["tokens_per_s"], bytes_per_token=res["bytes_per_token"],
                       achieved_gbs=achieved, mbu=achieved / bw if bw else None,
                       pp_decode=res["raw"])
        else:
            row["error"] = r["decode_error"]
        out_rows.append(row)
    print(f"# Batch-1 decode on {meta['device']}: {meta['n']} generated tokens after a "
          f"{meta['prompt_tokens']}-token prompt, random weights; {meta['date']}, commit "
          f"{meta['commit']}")
    print("# MBU = bytes read per token x tokens/s / bandwidth"
          + (f" ({bw:.1f} GB/s: {meta.get('bandwidth_note', '')})" if bw
             else f" (bandwidth not measured: {meta.get('bandwidth_note', '')}; no MBU)"))
    print("%-12s %8s %-6s %10s %12s %12s %7s" % ("model", "params", "dtype", "tok/s",
                                                  "GB/token", "GB/s", "MBU"))
    for x in out_rows:
        print("%-12s %8s %-6s %10s %12s %12s %7s" % (
            x["model"], human(x["params"]), x["dtype"], fmt(x["tokens_per_s"], ".1f", "failed"),
            fmt(x["bytes_per_token"] and x["bytes_per_token"] / 1e9, ".4g"),
            fmt(x["achieved_gbs"], ".1f"), fmt(x["mbu"] and 100 * x["mbu"], ".1f")))
    for x in out_rows:
        if x.get("error"):
            print(f"# {x['model']}: failed: {x['error']}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(meta, rows=out_rows), f, indent=1)
            f.write("\n")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if not n else xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def cmd_profile_report(tmp, layouts, json_path=None):
    """bench/profile.sh: per layout, DIR/LAYOUT.off and DIR/LAYOUT.on hold
    step times (s) of the runs without and with profiling, one run a line;
    DIR/LAYOUT.events the events per step and rank of a profiled run."""
    rows = []
    for name in layouts.split():
        side = {}
        for k in ("off", "on"):
            try:
                with open(f"{tmp}/{name}.{k}") as f:
                    side[k] = [float(x) for line in f for x in line.split()]
            except (OSError, ValueError) as err:
                die(f"{tmp}/{name}.{k}: {err}")
        try:
            with open(f"{tmp}/{name}.events") as f:
                events = float(f.read())
        except (OSError, ValueError):
            events = None
        off, on = median(side["off"]), median(side["on"])
        rows.append({"layout": name, "steps": len(side["on"]), "events_per_step": events,
                     "step_ms_off": 1e3 * off, "step_ms_on": 1e3 * on, "ratio": ratio(on, off)})
    print(f"{'layout':<8} {'steps':>6} {'events/step/rank':>17} {'off ms':>10} {'on ms':>10} {'on/off':>8}")
    for r in rows:
        print(f"{r['layout']:<8} {r['steps']:>6} {fmt(r['events_per_step'], '.0f'):>17} "
              f"{r['step_ms_off']:>10.3f} {r['step_ms_on']:>10.3f} {fmt(r['ratio'], '.4f'):>8}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"bench": "profile", "rows": rows}, f, indent=1)
            f.write("\n")


def cmd_maxrss(out, *cmd):
    """Runs cmd and writes its peak resident memory in bytes (the largest
    of its process tree's, getrusage's RUSAGE_CHILDREN) to out, with the
    rank of an MPI job (OMPI_COMM_WORLD_RANK) appended to the name; exits
    with cmd's status."""
    import resource
    import subprocess
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", "0"))
    rc = subprocess.call(list(cmd))
    with open(f"{out}.{rank}", "w") as f:
        f.write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}\n")
    sys.exit(rc)


def cmd_fsdp_report(tmp, rounds, json_path=None):
    """bench/fsdp.sh's table: for zero1 and fsdp, the median step time over
    every round's steady steps (ROUND.SIDE.times: one line of step times)
    and the largest peak RSS of any rank in any round (ROUND.SIDE.rss.R)."""
    import glob
    rows = {}
    for side in ("zero1", "fsdp"):
        times, rss = [], []
        for r in range(int(rounds)):
            with open(os.path.join(tmp, f"{r}.{side}.times")) as f:
                times += [float(x) for x in f.read().split()]
            for p in glob.glob(os.path.join(tmp, f"{r}.{side}.rss.*")):
                with open(p) as f:
                    rss.append(int(f.read()))
        if not times or not rss:
            die(f"{tmp}: no step times or peak memory of {side}")
        rows[side] = {"steps": len(times), "step_ms": 1e3 * median(times), "peak_rss_mb": max(rss) / 1e6}
    z, f = rows["zero1"], rows["fsdp"]
    print(f"{'run':<28} {'steps':>6} {'step ms':>10} {'peak RSS MB':>12}")
    for name, r in (("dp=4 shard_optimizer (ZeRO-1)", z), ("fsdp=4", f)):
        print(f"{name:<28} {r['steps']:>6} {r['step_ms']:>10.2f} {r['peak_rss_mb']:>12.1f}")
    print(f"{'fsdp / ZeRO-1':<28} {'':>6} {ratio(f['step_ms'], z['step_ms']):>10.3f} "
          f"{ratio(f['peak_rss_mb'], z['peak_rss_mb']):>12.3f}")
    if json_path:
        with open(json_path, "w") as out:
            json.dump({"bench": "fsdp", "zero1": z, "fsdp": f,
                       "step_ratio": ratio(f["step_ms"], z["step_ms"]),
                       "rss_ratio": ratio(f["peak_rss_mb"], z["peak_rss_mb"])}, out, indent=1)
            out.write("\n")


COMMANDS = {"get": cmd_get, "maxrss": cmd_maxrss, "fsdp-report": cmd_fsdp_report, "pp-metrics": cmd_pp_metrics, "step-times": cmd_step_times,
            "fit-microbatch": cmd_fit_microbatch,
            "gpu-report": cmd_gpu_report, "decode-metrics": cmd_decode_metrics,
            "decode-report": cmd_decode_report, "profile-report": cmd_profile_report}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        die("usage: benchlib.py " + "|".join(COMMANDS) + " ARGS... (see the file's docstring)")
    import inspect
    try:
        inspect.signature(COMMANDS[sys.argv[1]]).bind(*sys.argv[2:])
    except TypeError as err:
        die(f"{sys.argv[1]}: wrong arguments ({err})")
    COMMANDS[sys.argv[1]](*sys.argv[2:])
