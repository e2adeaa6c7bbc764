#!/usr/bin/env python3
"""Reads pp-train's TensorBoard event files with the `tensorboard` package
(its EventAccumulator, which checks each record's masked CRC32C) and compares
them with the run's metrics.jsonl.

  tensorboard_check.py RUN          every numeric value of metrics.jsonl is a
                                    scalar of RUN/tensorboard at the same step
                                    and tag, equal to the precision it was
                                    printed with (TensorBoard keeps float32)
  tensorboard_check.py RUN --count  prints the number of scalar events read

Exit 1, with the reason on stderr, when anything differs or nothing was read.
"""
import json
import sys
from decimal import Decimal

from tensorboard.backend.event_processing import event_accumulator as ea


def read(run):
    acc = ea.EventAccumulator(f"{run}/tensorboard", size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def main():
    run = sys.argv[1]
    tb = read(run)
    if sys.argv[2:] == ["--count"]:
        print(sum(len(v) for v in tb.values()))
        return 0
    checked, bad = 0, []
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            rec = json.loads(line, parse_float=Decimal)
            step = rec["step"]
            for key, v in rec.items():
                if key == "step" or isinstance(v, bool) or not isinstance(v, (int, Decimal)):
                    continue
                want = float(v)
                # half a unit of the last digit printed, plus float32's rounding
                exp = v.as_tuple().exponent if isinstance(v, Decimal) else 0
                tol = 0.5 * 10.0 ** exp + 1e-6 * abs(want)
                got = tb.get(key, {}).get(step)
                checked += 1
                if got is None:
                    bad.append(f"step {step} {key}: not in the event file")
                elif abs(got - want) > tol:
                    bad.append(f"step {step} {key}: {got} in the event file, {want} in metrics.jsonl")
    if bad or not checked:
        print("tensorboard_check: " + ("; ".join(bad[:5]) or "no scalar in metrics.jsonl"), file=sys.stderr)
        return 1
    print(f"{checked} scalars of metrics.jsonl found in the event file ({len(tb)} tags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
