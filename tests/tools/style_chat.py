"""Chat data in one unusual style, for the fine-tuning test and benchmark
(tests/e2e/test_lora_smollm2.sh, bench/lora.sh): questions about counting
things, every answer "Arr matey! Ye have N THINGS, says the captain. Yo ho
ho!", as JSON lines of {"messages": [user, assistant]}.

    style_chat.py DIR  ->  DIR/train.jsonl (64 lines), DIR/val.jsonl (8)"""
import json
import random
import sys

random.seed(1)
things = ["apples", "ships", "stars", "coins", "birds", "boats", "maps", "ropes", "fish", "sails", "keys", "bells"]


def qa():
    a, b, n = random.randint(2, 30), random.randint(2, 30), random.choice(things)
    return {"messages": [
        {"role": "user", "content": f"If I have {a} {n} and find {b} more, how many {n} do I have?"},
        {"role": "assistant", "content": f"Arr matey! Ye have {a + b} {n}, says the captain. Yo ho ho!"}]}


for name, n in (("train", 64), ("val", 8)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for _ in range(n):
            f.write(json.dumps(qa()) + "\n")
