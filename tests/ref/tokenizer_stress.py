#!/usr/bin/python3
"""Writes N lines of random text built to hit tokenizer edge cases (runs of
spaces, tabs, leading and trailing spaces, contractions, digits, Latin-1,
CJK, emoji, combining marks, U+2581, rare code points, "<s>" and "<0x41>"
lookalikes), for the reference comparisons in tests/e2e/test_tokenizer_ref.sh.

    tokenizer_stress.py N SEED > lines.txt

Every line is valid UTF-8 without a newline or a NUL."""
import random
import sys

n, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
words = ("the and of to in that he shall unto I his a for they be is him not them "
         "LORD God said Israel king people house day children son land hand men "
         "don't it's we're you've I'm they'll she'd O'Brien rock'n'roll "
         "hello Hello HELLO world naïve café résumé Ærøskøbing straße "
         "東京 日本語 中文字 한국어 русский ελληνικά עברית العربية हिन्दी ไทย "
         "2023 3.14159 1,000,000 0x1F 42nd 1st ½ ² Ⅻ ٣ "
         "<s> </s> <unk> <0x41> <|endoftext|> ▁ ▁▁x a▁b "
         "😀 👍🏽 🇫🇷 👨‍👩‍👧 e\u0301 \u200b \ufeff \u00a0 \u3000 \u2028 "
         "foo_bar foo-bar foo.bar@example.com https://example.com/a?b=c#d "
         "(parens) [brackets] {braces} \"quotes\" 'single' --- ... !!! ??? ;; :: "
         "int main(void) { return 0; } x+=1 a->b a<=b").split()
seps = [" "] * 12 + ["  ", "   ", "\t", " \t ", "    ", ""]
for _ in range(n):
    parts = []
    if rng.random() < 0.15:
        parts.append(rng.choice([" ", "  ", "\t", "   "]))
    for _ in range(rng.randint(0, 25)):
        r = rng.random()
        if r < 0.8:
            parts.append(rng.choice(words))
        elif r < 0.9:
            # random code points from a few planes (no surrogates, no C0 controls
            # other than tab)
            cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FF),
                             rng.randint(0x370, 0x1FFF), rng.randint(0x2000, 0x2BFF),
                             rng.randint(0x3000, 0x9FFF), rng.randint(0xAC00, 0xD7A3),
                             rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x10FFFF)])
            if 0xD800 <= cp <= 0xDFFF or cp in (0x85, 0x2028, 0x2029):
                cp = 0x41
            parts.append(chr(cp))
        else:
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 8))))
        parts.append(rng.choice(seps))
    if rng.random() < 0.15:
        parts.append(rng.choice([" ", "  ", "\t"]))
    line = "".join(parts).replace("\n", " ").replace("\r", " ").replace("\0", " ")
    sys.stdout.write(line + "\n")
