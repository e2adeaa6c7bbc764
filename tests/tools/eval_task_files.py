"""Task files in the published schemas of HellaSwag, ARC, BoolQ, Winogrande,
Lambada and PIQA, made from real text (one verse of the King James Bible per
line on stdin), with the quirks their prompts must survive: HellaSwag's
[title], [header], [step] and [substeps] marks, a context ending in spaces,
a lower-case ctx_b, endings that start with a mark; non-ASCII characters in
choices (acc_norm counts characters); answers in every position.

    python3 eval_task_files.py N SEED DIR < kjv.txt

writes DIR/hellaswag.jsonl, arc_easy.jsonl, boolq.jsonl, winogrande.jsonl,
lambada.jsonl and piqa.jsonl, N items each, the names lm-eval's reference
(tests/ref/lm_eval_ref.py) and pp-eval's --task-format take."""
import json
import os
import random
import sys


def main():
    n, seed, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    verses = [v.split() for v in sys.stdin.read().splitlines()]
    verses = [v for v in verses if 14 <= len(v) <= 28]
    rng = random.Random(seed)
    pick = lambda: verses[rng.randrange(len(verses))]
    tail = lambda v, k: " ".join(v[len(v) * k // 5:])
    head = lambda v, k: " ".join(v[:len(v) * k // 5])
    files = {k: open(os.path.join(out, k + ".jsonl"), "w", encoding="utf-8")
             for k in ("hellaswag", "arc_easy", "boolq", "winogrande", "lambada", "piqa")}
    marks = ["[title] ", "[header] ", "[step] ", "[substeps] ", ""]
    for i in range(n):
        v = pick()
        # HellaSwag: a context cut in two, ctx_b lower-cased, marked endings
        endings = [tail(v, 3)] + [tail(pick(), 3) for _ in range(3)]
        label = i % 4
        endings[0], endings[label] = endings[label], endings[0]
        endings = [marks[(i + j) % 5] + e for j, e in enumerate(endings)]
        a = head(v, 2) + (" [title] " if i % 2 else "  ")
        b = " ".join(v[len(v) * 2 // 5:len(v) * 3 // 5]).lower()
        files["hellaswag"].write(json.dumps({
            "ind": i, "activity_label": " ".join(pick()[:2]).strip(",;:"), "ctx_a": a, "ctx_b": b,
            "ctx": a + " " + b, "endings": endings, "label": label, "source_id": f"kjv~{i}",
            "split": "val", "split_type": "indomain"}) + "\n")
        # ARC: which words end the verse
        choices = [tail(v, 4)] + [tail(pick(), 4) for _ in range(3)]
        key = "ABCD"[(i + 1) % 4]
        choices[0], choices["ABCD".index(key)] = choices["ABCD".index(key)], choices[0]
        if i % 3 == 0:
            choices[(i + 2) % 4] += " caf\u00e9 na\u00efve"
        files["arc_easy"].write(json.dumps({
            "id": f"KJV_{i}", "question": "Which words end the verse that begins: " + head(v, 4) + "?",
            "choices": {"text": choices, "label": list("ABCD")}, "answerKey": key}) + "\n")
        # BoolQ: is a word in the passage
        w = v[len(v) // 2].strip(",.;:").lower() if i % 2 else "zebra"
        files["boolq"].write(json.dumps({
            "question": f"does the verse say {w}", "passage": " ".join(v),
            "idx": i, "label": int(i % 2 == 1)}) + "\n")
        # Winogrande: a blank where a word was
        j = len(v) // 2
        other = pick()[len(v) // 3]
        words = v[:j] + ["_"] + v[j + 1:]
        ans = "1" if i % 2 == 0 else "2"
        o1, o2 = (v[j], other) if ans == "1" else (other, v[j])
        files["winogrande"].write(json.dumps({
            "sentence": " ".join(words), "option1": o1, "option2": o2, "answer": ans}) + "\n")
        # Lambada: the verse, its last word the target
        files["lambada"].write(json.dumps({"text": " ".join(v).rstrip(".,;:")}) + "\n")
        # PIQA: how the verse goes on
        sols = [tail(v, 3), tail(pick(), 3)]
        lab = i % 2
        sols[0], sols[lab] = sols[lab], sols[0]
        files["piqa"].write(json.dumps({"goal": head(v, 3), "sol1": sols[0], "sol2": sols[1],
                                        "label": lab}) + "\n")
    for f in files.values():
        f.close()


main()
