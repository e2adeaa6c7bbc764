"""pp-eval against lm-evaluation-harness on the same tasks and model.

    python3 eval_compare.py REF.json PP_DIR TOL

REF.json is tests/ref/lm_eval_ref.py's output; PP_DIR holds pp-eval's
`--json --per-item` output per task, TASK.json. Every request must have the
same context and continuation strings (the prompts as the harness builds
them), the same greediness, and a log-likelihood within TOL relative (of at
least 1 nat: lm-eval's log softmax in fp32 over 49152 logits carries an
absolute error of about 1e-5, which is more than 1e-4 of a log-likelihood
near 0); each task the same acc and acc_norm, and a perplexity within TOL
relative.
Prints one line per task and figure; exit 1 on any difference."""
import json
import sys

ref = json.load(open(sys.argv[1]))["tasks"]
tol = float(sys.argv[3])
worst, n_req, bad, at = 0.0, 0, [], None
for task in sorted(ref):
    lines = [json.loads(l) for l in open(f"{sys.argv[2]}/{task}.json")]
    items, summary = lines[:-1], lines[-1]
    r = ref[task]
    if len(items) != len(r["items"]):
        bad.append(f"{task}: {len(items)} items against {len(r['items'])}")
        continue
    for it, ri in zip(items, r["items"]):
        if len(it["requests"]) != len(ri["requests"]):
            bad.append(f"{task} item {it['item']}: {len(it['requests'])} requests against {len(ri['requests'])}")
            continue
        for q, rq in zip(it["requests"], ri["requests"]):
            if (q["context"], q["continuation"]) != (rq["context"], rq["continuation"]):
                bad.append(f"{task} item {it['item']}: prompt {q['context']!r} + {q['continuation']!r} "
                           f"against {rq['context']!r} + {rq['continuation']!r}")
            if q["greedy"] != rq["is_greedy"]:
                bad.append(f"{task} item {it['item']}: greedy {q['greedy']} against {rq['is_greedy']}")
            d = abs(q["ll"] - rq["ll"]) / max(abs(rq["ll"]), 1.0)
            if d > worst:
                worst, at = d, (task, it["item"], q["ll"], rq["ll"])
            n_req += 1
    for k in ("acc", "acc_norm", "perplexity"):
        if k not in r["metrics"]:
            continue
        a, b = summary.get(k), r["metrics"][k]
        print(f"{task} {k}: pp-eval {a:.6g}, lm-eval {b:.6g}")
        if a is None or (abs(a - b) > tol * abs(b) if k == "perplexity" else a != b):
            bad.append(f"{task} {k}: {a} against {b}")
print(f"{n_req} requests: log-likelihoods within {worst:.2g} relative of lm-eval's"
      + (f" (the most: {at[0]} item {at[1]}, {at[2]:.7g} against {at[3]:.7g})" if worst else ""))
if worst > tol:
    bad.append(f"log-likelihoods differ by {worst:.3g} relative (bound {tol})")
for b in bad[:10]:
    print("DIFF:", b)
sys.exit(1 if bad else 0)
