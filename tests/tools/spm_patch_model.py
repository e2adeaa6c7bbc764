#!/usr/bin/python3
"""Rewrites a SentencePiece .model so that every Kth multi-character NORMAL
piece becomes UNUSED (type 5), to check pp's resegmentation of unused pieces
against spm_encode (tests/e2e/test_tokenizer_ref.sh). Reads and writes the
protobuf wire format directly (no protobuf package needed).

    spm_patch_model.py IN.model OUT.model K"""
import sys


def varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return x, i


def put_varint(x):
    out = bytearray()
    while True:
        c = x & 0x7F
        x >>= 7
        out.append(c | (0x80 if x else 0))
        if not x:
            return bytes(out)


def fields(b):
    i = 0
    while i < len(b):
        key, j = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            _, k = varint(b, j)
        elif wt == 1:
            k = j + 8
        elif wt == 5:
            k = j + 4
        elif wt == 2:
            n, j2 = varint(b, j)
            k = j2 + n
        else:
            raise SystemExit("unsupported wire type %d" % wt)
        yield f, wt, b[i:k], b[j:k]
        i = k


src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
out, count, changed = bytearray(), 0, 0
for f, wt, raw, val in fields(data):
    if f == 1 and wt == 2:
        n, j = varint(val, 0)
        msg = val[j:]
        piece, ptype = b"", 1
        for sf, swt, sraw, sval in fields(msg):
            if sf == 1:
                ln, jj = varint(sval, 0)
                piece = sval[jj:]
            elif sf == 3:
                ptype = varint(sval, 0)[0]
        if ptype == 1 and len(piece.decode()) > 1:
            count += 1
            if count % k == 0:
                msg = b"".join(r for sf, _, r, _ in fields(msg) if sf != 3) + b"\x18\x05"
                changed += 1
        out += b"\x0a" + put_varint(len(msg)) + msg
    else:
        out += raw
open(dst, "wb").write(bytes(out))
print(changed, file=sys.stderr)
