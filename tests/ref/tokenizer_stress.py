#!/usr/bin/python3
"""Writes N lines of random text built to hit tokenizer edge cases (runs of
spaces, tabs, leading and trailing spaces, contractions, digits, Latin-1,
CJK, emoji, combining marks, U+2581, rare code points, "<s>" and "<0x41>"
lookalikes), for the reference comparisons in tests/e2e/test_tokenizer_ref.sh.

    tokenizer_stress.py N SEED [invalid] > lines.txt

Every line is valid UTF-8 without a newline or a NUL; with "invalid", the
same kind of lines with malformed UTF-8 among the words (lone continuation
bytes, characters cut short, overlong forms, surrogates, code points past
U+10FFFF, the bytes C0, C1 and F5 to FF) and U+FFFD itself, for the
SentencePiece comparisons."""
import random
import sys

n, seed = int(sys.argv[1]), int(sys.argv[2])
invalid = sys.argv[3:] == ["invalid"]
rng = random.Random(seed)


def malformed():
    """One malformed UTF-8 sequence (bytes), or a valid U+FFFD."""
    cp = rng.choice([rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF),
                     rng.randint(0x10000, 0x10FFFF)])
    full = chr(cp if not 0xD800 <= cp <= 0xDFFF else 0xFFFD).encode("utf-8", "surrogatepass")
    return rng.choice([
        bytes([rng.randint(0x80, 0xBF)]) * rng.randint(1, 3),  # continuation bytes alone
        full[:rng.randint(1, len(full) - 1)] if len(full) > 1 else b"\x80",  # cut short
        bytes([0xC0 | rng.randint(0, 1), rng.randint(0x80, 0xBF)]),  # overlong 2-byte
        bytes([0xE0, rng.randint(0x80, 0x9F), rng.randint(0x80, 0xBF)]),  # overlong 3-byte
        bytes([0xF0, rng.randint(0x80, 0x8F), 0x80, 0x80]),  # overlong 4-byte
        bytes([0xED, rng.randint(0xA0, 0xBF), rng.randint(0x80, 0xBF)]),  # a surrogate
        bytes([0xF4, rng.randint(0x90, 0xBF), 0x80, 0x80]),  # past U+10FFFF
        bytes([rng.randint(0xF5, 0xFF)]) + bytes(rng.randint(0x80, 0xBF) for _ in range(rng.randint(0, 3))),
        full + bytes([rng.randint(0x80, 0xBF)]),  # a valid character, one byte too many
        "\ufffd".encode(),
    ])


out = sys.stdout.buffer
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
    line = "".join(parts).replace("\n", " ").replace("\r", " ").replace("\0", " ").encode()
    if invalid:
        cut = sorted(rng.randint(0, len(line)) for _ in range(rng.randint(1, 4)))
        pieces = [line[a:b] for a, b in zip([0] + cut, cut + [len(line)])]
        line = b"".join(p + (malformed() if i < len(cut) else b"") for i, p in enumerate(pieces))
    out.write(line + b"\n")
