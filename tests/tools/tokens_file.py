"""Writes a pp-tokens dataset (version 1, checkpoints-format/tokens.md) of
given documents, for tests that need tokens no tokenizer makes:

    from tokens_file import write
    write(path, train_docs, val_docs, vocab, eos=-1, masks=None)

Documents are sequences of ints below vocab; the tokenizer is "none".
masks, a (train_masks, val_masks) pair of per-token 0/1 lists, makes it
version 2 with a loss mask."""
import h5py
import numpy as np


def write(path, train, val, vocab, eos=-1, source="generated", masks=None):
    with h5py.File(path, "w", libver=("v108", "latest")) as f:
        f.attrs["format"] = "pp-tokens"
        f.attrs["version"] = np.int64(2 if masks else 1)
        f.attrs["tokenizer_fingerprint"] = ""
        f.attrs["tokenizer_kind"] = "none"
        f.attrs["vocab_size"] = np.int64(vocab)
        f.attrs["bos_id"] = np.int64(-1)
        f.attrs["eos_id"] = np.int64(eos)
        f.attrs["sources"] = [source]
        for k, (split, docs) in enumerate((("train", train), ("val", val))):
            docs = [np.asarray(d, np.uint32) for d in docs]
            g = f.create_group(split)
            toks = np.concatenate(docs) if docs else np.zeros(0, np.uint32)
            off = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.uint64)
            g.create_dataset("tokens", data=toks, dtype="<u4", maxshape=(None,), chunks=(1 << 20,))
            g.create_dataset("doc_offsets", data=off, dtype="<u8", maxshape=(None,), chunks=(1 << 16,))
            if masks:
                m = np.concatenate([np.asarray(x, np.uint8) for x in masks[k]]) if docs else np.zeros(0, np.uint8)
                assert m.size == toks.size
                g.create_dataset("loss_mask", data=m, dtype="u1", maxshape=(None,), chunks=(1 << 20,))
            f.attrs[f"{split}_documents"] = np.uint64(len(docs))
            f.attrs[f"{split}_tokens"] = np.uint64(len(toks))
