"""Multiple-choice items from real text: each verse of the King James Bible
(one per line on stdin) cut after a share of its words; the choices are its
own ending and the endings of three other verses, in a seeded order.

    python3 kjv_tasks.py N SEED < kjv.txt > task.jsonl

Verses of 12 to 30 words are used, N of them spread over the book; a
language model should pick the true ending far above chance (1/4), a
random one at chance."""
import json
import random
import sys


def main():
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    verses = [v.split() for v in sys.stdin.read().splitlines()]
    verses = [v for v in verses if 12 <= len(v) <= 30]
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(len(verses)), n))
    for i in picks:
        v = verses[i]
        cut = len(v) * 3 // 5
        ending = " ".join(v[cut:])
        others = []
        while len(others) < 3:
            w = verses[rng.randrange(len(verses))]
            other = " ".join(w[len(w) * 3 // 5:])
            if other != ending and other not in others:
                others.append(other)
        answer = rng.randrange(4)
        choices = others[:answer] + [ending] + others[answer:]
        print(json.dumps({"context": " ".join(v[:cut]), "choices": choices, "answer": answer}))


main()
