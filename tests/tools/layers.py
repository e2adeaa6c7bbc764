#!/usr/bin/env python3
"""The include rules of the source tree, from its #include "..." lines.

    layers.py ROOT

A folder is a layer: a file includes only from its own folder or from a
folder of a lower layer (the table below; kernels/cpu and kernels/cuda are
kernels). A module is a file's folder and name without its extension
(model/stage.c and a model/stage.h are one module); the modules' include
graph has no cycle. Prints one line per violation, then the counts; exits 1
on a violation."""
import os
import re
import sys

# libcommon's folders, kernels and the commands, lowest layer first
LAYERS = {
    "base": 0,
    "kernels": 1, "schedule": 1, "tok": 1,
    "comm": 2,
    "config": 3,
    "model": 4, "data": 4, "profile": 4,
    "parallel": 5, "ckpt": 5,
    "plan": 6, "formats": 6, "eval": 6,
    "train": 7, "decode": 7, "sim": 7,
    "cmd": 8,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder(path):
    """The layer folder of a path relative to the root, or None."""
    parts = path.split("/")
    if parts[0] == "libcommon" and len(parts) > 2:
        return parts[1]
    if parts[0] in ("kernels", "cmd"):
        return parts[0]
    return None


def module(path):
    return os.path.splitext(path)[0]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = []
    for top in ("libcommon", "kernels", "cmd"):
        for d, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(d, n), root) for n in names
                      if n.endswith((".c", ".h", ".cu", ".cuh"))]
    bad = 0
    edges = {}
    for f in sorted(files):
        src = open(os.path.join(root, f), encoding="utf-8").read()
        here = folder(f)
        if here not in LAYERS:
            print(f"{f}: folder '{here}' has no layer (tests/tools/layers.py)")
            bad += 1
            continue
        for inc in INCLUDE.findall(src):
            target = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if not os.path.exists(os.path.join(root, target)):
                continue  # a system or generated header found by -I
            there = folder(target)
            if there is None or there not in LAYERS:
                print(f"{f}: includes {target}, outside the layers")
                bad += 1
            elif there != here and LAYERS[there] >= LAYERS[here]:
                print(f"{f}: includes {target}: {there} (layer {LAYERS[there]}) is not below "
                      f"{here} (layer {LAYERS[here]})")
                bad += 1
            if module(target) != module(f):
                edges.setdefault(module(f), set()).add(module(target))
    # cycles: depth-first search, reporting each cycle once by its smallest node
    seen, stack, on = set(), [], set()
    cycles = set()

    def visit(n):
        seen.add(n)
        stack.append(n)
        on.add(n)
        for m in sorted(edges.get(n, ())):
            if m in on:
                cyc = stack[stack.index(m):]
                k = cyc.index(min(cyc))
                cycles.add(tuple(cyc[k:] + cyc[:k]))
            elif m not in seen:
                visit(m)
        stack.pop()
        on.discard(n)

    for n in sorted(edges):
        if n not in seen:
            visit(n)
    for c in sorted(cycles):
        print("include cycle: " + " -> ".join(c + (c[0],)))
        bad += 1
    print(f"{len(files)} files, {sum(len(v) for v in edges.values())} module edges, "
          f"{bad} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
