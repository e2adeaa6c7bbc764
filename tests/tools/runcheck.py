#!/usr/bin/env python3
"""Reads runs' metrics for the shell tests with python3's standard library
alone (on every machine the tests run on, GPU images included; jq is not).

  runcheck.py losses RUN           "step loss" per logged step (the last
                                   loss logged for it), in step order
  runcheck.py loss-diff RUN_A RUN_B
                                   the largest relative difference of the
                                   two runs' per-step losses (relative to B)

Each fails (exit 1, the reason on stderr) when it has nothing to compare:
a missing or unreadable file, a run that logged no loss, runs that logged
different steps. A check built on them therefore cannot pass on empty
input. (tool_h5_same does the same for checkpoints' tensors.)
"""
import json
import math
import sys


def die(msg):
    print(f"runcheck: {msg}", file=sys.stderr)
    sys.exit(1)


def losses(run):
    path = f"{run}/metrics.jsonl"
    out = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    die(f"{path}:{n}: not JSON: {e}")
                if isinstance(rec, dict) and rec.get("loss") is not None and "step" in rec:
                    out[int(rec["step"])] = rec["loss"]
    except OSError as e:
        die(f"{path}: {e.strerror}")
    if not out:
        die(f"{path}: no step logged a loss")
    return sorted(out.items())


def loss_diff(a, b):
    la, lb = losses(a), losses(b)
    sa, sb = [s for s, _ in la], [s for s, _ in lb]
    if sa != sb:
        die(f"{a} logged steps {sa[:3]}..{sa[-3:]} ({len(sa)}), {b} logged {sb[:3]}..{sb[-3:]} ({len(sb)})")
    worst = 0.0
    for (_, x), (_, y) in zip(la, lb):
        if not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        d = abs(x - y) / abs(y) if y != 0 else abs(x - y)
        worst = max(worst, d)
    return worst


def main(argv):
    if len(argv) == 2 and argv[0] == "losses":
        for s, l in losses(argv[1]):
            print(s, repr(float(l)))
    elif len(argv) == 3 and argv[0] == "loss-diff":
        d = loss_diff(argv[1], argv[2])
        print(f"{d:.3g}")
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BrokenPipeError:  # a reader such as head stopped early
        sys.exit(0)
