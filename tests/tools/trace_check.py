#!/usr/bin/python3
"""Checks a Chrome trace that pp-merge-profile wrote (run with Debian's
python3, which has python3-jsonschema).

  trace_check.py TRACE[.gz] [--causal | --acausal] [--min-flows N] [--schema-if-installed]

- the file validates against tests/tools/chrome_trace.schema.json (with
  --schema-if-installed, only where python3-jsonschema is: GPU images);
- complete ("X") events nest strictly on every (pid, tid): two events of a
  thread are disjoint or one contains the other;
- every send event has exactly one flow, whose start lies in the send and
  whose end lies in a receive of the same kind on the process of the
  neighbouring pipeline stage (pp rank r +- 1 mod p, by the process names
  "ppR dpD tpT host:device") that is the send's peer;
- --causal: each such send and its receive overlap in time (a send
  completes when its receive has matched it, so neither ends before the
  other starts), to within 50 us; --acausal: some pair does not (a check
  that the skewed clocks of a test are really skewed).

Prints one line of counts; exits 1 with the reasons on stderr otherwise."""
import gzip
import json
import os
import re
import sys

try:
    import jsonschema
except ImportError:
    jsonschema = None

# How far a send may lie outside its receive on the merged timeline: the
# merge aligns each rank's clock from a few exchanged timestamps, which a
# loaded machine (4 ranks on 2 cores) delays by up to a millisecond or so;
# the passes the tests time are 20 ms and more, and a skewed clock is off by
# seconds.
SLACK_US = 2000.0


def fail(msg):
    print(f"trace_check: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: trace_check.py TRACE [--causal | --acausal] [--min-flows N]")
    path, mode, min_flows, optional = args[0], None, 1, False
    i = 1
    while i < len(args):
        if args[i] in ("--causal", "--acausal"):
            mode = args[i]
        elif args[i] == "--schema-if-installed":
            optional = True
        elif args[i] == "--min-flows":
            i += 1
            min_flows = int(args[i])
        else:
            fail(f"unknown argument {args[i]}")
        i += 1
    doc = load(path)
    schema_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chrome_trace.schema.json")
    with open(schema_path) as f:
        schema = json.load(f)
    if jsonschema is None and not optional:
        fail("python3-jsonschema is not installed (scripts/install-deps.sh)")
    if jsonschema is not None:
        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as e:
            fail(f"{path}: not a valid Chrome trace: {e.message} at {list(e.absolute_path)}")

    evs = doc["traceEvents"]
    pp_of = {}
    for e in evs:
        if e["ph"] == "M" and e["name"] == "process_name":
            m = re.match(r"pp(\d+) dp(\d+) tp(\d+) ", e["args"]["name"])
            if not m:
                fail(f"process {e['pid']} is named {e['args']['name']!r}, not 'ppR dpD tpT host:device'")
            pp_of[e["pid"]] = tuple(int(x) for x in m.groups())
    if not pp_of:
        fail("no process is named")
    n_pp = 1 + max(v[0] for v in pp_of.values())

    # strict nesting per thread
    threads = {}
    for e in evs:
        if e["ph"] == "X":
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
    bad = []
    for key, lst in threads.items():
        lst.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in lst:
            end = e["ts"] + e["dur"]
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            if stack and end > stack[-1]:
                bad.append(f"{key}: {e['name']} at {e['ts']} overlaps an open event ending at {stack[-1]}")
            stack.append(end)
    if bad:
        fail(f"{len(bad)} events do not nest: " + "; ".join(bad[:3]))

    def enclosing(pid, tid, ts):
        best = None
        for e in threads.get((pid, tid), []):
            if e["ts"] <= ts <= e["ts"] + e["dur"] and (best is None or e["dur"] < best["dur"]):
                best = e
        return best

    starts = {e["id"]: e for e in evs if e["ph"] == "s"}
    ends = {e["id"]: e for e in evs if e["ph"] == "f"}
    if len(starts) != sum(1 for e in evs if e["ph"] == "s"):
        fail("two flows share an id")
    sends = [e for lst in threads.values() for e in lst if e.get("args", {}).get("op", "").startswith("send_")]
    flowed = {}
    problems, acausal = [], []
    for fid, s in starts.items():
        f = ends.get(fid)
        if f is None:
            problems.append(f"flow {fid} has no end")
            continue
        snd, rcv = enclosing(s["pid"], s["tid"], s["ts"]), enclosing(f["pid"], f["tid"], f["ts"])
        if snd is None or not snd["args"]["op"].startswith("send_"):
            problems.append(f"flow {fid} does not start in a send")
            continue
        kind = snd["args"]["op"][len("send_"):]
        if rcv is None or rcv["args"]["op"] != "recv_" + kind:
            problems.append(f"flow {fid} from {snd['name']} does not end in a recv_{kind}")
            continue
        a, b = pp_of[snd["pid"]], pp_of[rcv["pid"]]
        if a[1:] != b[1:] or b[0] != snd["args"]["peer_pp_rank"] or (b[0] - a[0]) % n_pp not in (1, n_pp - 1):
            problems.append(f"flow {fid}: pp{a[0]} to pp{b[0]} is not the send's neighbouring peer")
        for k in ("step", "microbatch", "vstage"):
            if snd["args"].get(k) != rcv["args"].get(k):
                problems.append(f"flow {fid}: send and recv differ in {k}")
        flowed[id(snd)] = flowed.get(id(snd), 0) + 1
        if snd["ts"] > rcv["ts"] + rcv["dur"] + SLACK_US or rcv["ts"] > snd["ts"] + snd["dur"] + SLACK_US:
            acausal.append(f"{snd['name']} on pid {snd['pid']} at {snd['ts']} and its receive on pid {rcv['pid']} at {rcv['ts']}")
    for s in sends:
        if flowed.get(id(s), 0) != 1:
            problems.append(f"send {s['name']} on pid {s['pid']} at {s['ts']} has {flowed.get(id(s), 0)} flows")
    if problems:
        fail(f"{len(problems)} flow problems: " + "; ".join(problems[:4]))
    if len(starts) < min_flows:
        fail(f"{len(starts)} flows, expected at least {min_flows}")
    if mode == "--causal" and acausal:
        fail(f"{len(acausal)} of {len(starts)} sends do not overlap their receives: " + "; ".join(acausal[:3]))
    if mode == "--acausal" and not acausal:
        fail(f"every one of {len(starts)} sends overlaps its receive")
    n_x = sum(len(v) for v in threads.values())
    print(f"{n_x} events on {len(threads)} threads of {len(pp_of)} processes, {len(starts)} flows, "
          f"{len(acausal)} sends apart from their receives")


if __name__ == "__main__":
    main()
