/* libFuzzer target: the Megatron .idx and llm.c shard readers behind the
 * data loader (data.h: data_open with data=PATH, then data_next), on
 * arbitrary bytes written into one temporary directory per process.
 *
 * Input: byte 0 flags, byte 1 seq_len, then the file.
 *   flags & 1   0: the file is PREFIX.idx, with a PREFIX.bin of the size the
 *               index describes (when it describes one: sizes * dtype
 *               width, at most 1 MiB) made here; data=PREFIX
 *               1: the file is an llm.c shard; data=that .bin
 *   flags & 2   a tokenizer that has an end-of-text token (EOS insertion
 *               between documents); else none
 *   flags & 4   two data-parallel ranks (rank 1 reads); else one
 *   flags & 8   Megatron: one byte more in PREFIX.bin than the index says;
 *               llm.c: a second, valid shard, and data=a glob of both
 *   flags & 16  the .bin tokens are the input bytes as they are; else each
 *               token is one input byte (a valid id), zero-extended
 *   flags & 32  also ask for the validation split (these formats have none)
 *   flags & 64  packing=true: whole documents (Megatron), or the error for
 *               data without documents (llm.c)
 * Checks: errors have a message; a batch that is read has every token in
 * the vocabulary; windows: targets equal to the inputs shifted by one,
 * positions 0..T-1; packed: positions from 0 at each document, each
 * target ignored or the next input of the same document (or the EOS
 * after its last token), padding at the tail.
 * Built and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/data/data.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VOCAB   256
#define MAX_BIN ((size_t)1 << 20)
#define N_SEQ   2

static void put(const char *name, const void *p, size_t n)
{
	FILE *f = fopen(fuzz_file(name), "wb");
	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
		perror("fuzz_data_headers: writing a file");
		exit(2);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-data");
	/* a BPE vocabulary of VOCAB tokens, <|endoftext|> (the EOS) first */
	char json[8192];
	size_t n = (size_t)snprintf(json, sizeof json,
				    "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": "
				    "{\"type\": \"BPE\", \"merges\": [], \"vocab\": "
				    "{\"<|endoftext|>\": 0");
	for (int i = 1; i < VOCAB; i++)
		n += (size_t)snprintf(json + n, sizeof json - n, ", \"t%d\": %d", i, i);
	n += (size_t)snprintf(json + n, sizeof json - n, "}}}");
	put("tok.json", json, n);
	/* the second llm.c shard: GPT-2 magic, 300 uint16 tokens */
	unsigned char shard[1024 + 600] = {0};
	int32_t h[3] = {20240520, 1, 300};
	memcpy(shard, h, sizeof h);
	for (int i = 0; i < 300; i++)
		shard[1024 + 2 * i] = (unsigned char)(i * 7);
	put("s_001.keep", shard, sizeof shard);
	return 0;
}

/* The .bin a Megatron index describes: sum of sizes * width bytes, or a few
 * bytes when the index describes none (or too much). */
static size_t bin_size(const uint8_t *idx, size_t n, size_t *width)
{
	static const size_t widths[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
	*width = 1;
	if (n < 34 || idx[17] < 1 || idx[17] > 8)
		return 16;
	*width = widths[idx[17]];
	uint64_t n_seq;
	memcpy(&n_seq, idx + 18, 8);
	if (n_seq > (n - 34) / 4)
		return 16;
	uint64_t bytes = 0;
	for (uint64_t i = 0; i < n_seq; i++) {
		int32_t s;
		memcpy(&s, idx + 34 + 4 * i, 4);
		bytes += s > 0 ? (uint64_t)s * *width : 0;
		if (bytes > MAX_BIN)
			return 16;
	}
	return (size_t)bytes;
}

/* n bytes of tokens of the given width made from src */
static unsigned char *tokens(const uint8_t *src, size_t n_src, size_t n, size_t width, bool raw)
{
	unsigned char *b = calloc(n + 1, 1);
	if (!b)
		abort();
	for (size_t i = 0; i < n && n_src; i++)
		b[i] = raw ? src[i % n_src] : i % width ? 0 : src[(i / width) % n_src];
	return b;
}

static void check_batch(const int *tok, const int *tgt, const int *pos, int T, bool packed)
{
	for (int b = 0; b < N_SEQ; b++)
		for (int t = 0; t < T; t++) {
			int x = tok[b * T + t], y = tgt[b * T + t], p = pos[b * T + t];
			if (x < 0 || x >= VOCAB || y < -100 || y >= VOCAB || (!packed && y < 0))
				__builtin_trap(); /* outside the vocabulary */
			if (!packed && ((t + 1 < T && y != tok[b * T + t + 1]) || p != t))
				__builtin_trap(); /* targets are the inputs shifted by one */
			if (packed && (p < 0 || p > t || (t == 0 && p != 0) ||
				       (p > 0 && p != pos[b * T + t - 1] + 1)))
				__builtin_trap(); /* positions count from 0 in a document */
			bool next_same_doc = t + 1 < T && pos[b * T + t + 1] == p + 1;
			if (packed && y >= 0 && next_same_doc && y != tok[b * T + t + 1])
				__builtin_trap(); /* a target is the document's next token */
			if (packed && y == -100 && next_same_doc)
				__builtin_trap(); /* no mask: only padding is ignored */
		}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	int flags = data[0], T = 1 + data[1] % 32;
	const uint8_t *body = data + 2;
	size_t n = size - 2;
	/* only the files of this input */
	unlink(fuzz_file("m.idx"));
	unlink(fuzz_file("m.bin"));
	unlink(fuzz_file("s_000.bin"));
	unlink(fuzz_file("s_001.bin"));

	pp_config c;
	memset(&c, 0, sizeof c);
	c.model.vocab_size = VOCAB;
	c.seq_len = T;
	c.seed = 7;
	c.data_eos = true;
	c.packing = flags & 64;
	if (flags & 2)
		snprintf(c.tokenizer, sizeof c.tokenizer, "%s", fuzz_file("tok.json"));
	if (!(flags & 1)) {
		size_t width, nb = bin_size(body, n, &width) + !!(flags & 8);
		unsigned char *bin = tokens(body, n, nb, width, flags & 16);
		put("m.idx", body, n);
		put("m.bin", bin, nb);
		free(bin);
		snprintf(c.data, sizeof c.data, "%s", fuzz_file("m"));
	} else {
		/* a shard that starts like an HDF5 file is the pp-tokens reader's
		 * (its probe checks the signature before HDF5 sees the file):
		 * tests/fuzz/fuzz_tokens.c */
		if (n >= 8 && !memcmp(body, "\x89HDF\r\n\x1a\n", 8))
			return 0;
		put("s_000.bin", body, n);
		if (flags & 8) {
			if (link(fuzz_file("s_001.keep"), fuzz_file("s_001.bin"))) {
				perror("fuzz_data_headers: link");
				exit(2);
			}
			snprintf(c.data, sizeof c.data, "%s", fuzz_file("s_*.bin"));
		} else {
			snprintf(c.data, sizeof c.data, "%s", fuzz_file("s_000.bin"));
		}
	}

	int dp_size = flags & 4 ? 2 : 1;
	pp_data *d = NULL;
	pp_err e = {0};
	if (flags & 32) {
		if (!data_open(&d, &c, "val", &(layout_seqs){0, 1, 1}, &e))
			__builtin_trap(); /* no validation split in these formats */
		memset(&e, 0, sizeof e);
	}
	if (data_open(&d, &c, "train", &(layout_seqs){dp_size - 1, dp_size, 1}, &e)) {
		if (!e.msg[0])
			__builtin_trap();
		return 0;
	}
	if ((flags & 64) && (flags & 1))
		__builtin_trap(); /* llm.c shards have no documents to pack */
	int *tok = malloc(sizeof(int) * N_SEQ * (size_t)T),
	    *tgt = malloc(sizeof(int) * N_SEQ * (size_t)T),
	    *pos = malloc(sizeof(int) * N_SEQ * (size_t)T);
	bool packed = flags & 64;
	int rc = 0;
	for (int i = 0; i < 3 && !rc; i++)
		if (!(rc = data_next(d, N_SEQ, T, tok, tgt, pos, &e)))
			check_batch(tok, tgt, pos, T, packed);
	/* far into the stream: later epochs */
	uint64_t at = (uint64_t)flags << (data[1] % 48);
	if (!data_set_state(d, &at, 1, &e) && !data_next(d, N_SEQ, T, tok, tgt, pos, &e))
		check_batch(tok, tgt, pos, T, packed);
	data_rewind(d);
	if (!data_next(d, N_SEQ, T, tok, tgt, NULL, &e) &&
	    !data_next(d, N_SEQ, T, tok, tgt, pos, &e))
		check_batch(tok, tgt, pos, T, packed);
	if (rc && !e.msg[0])
		__builtin_trap();
	free(tok);
	free(tgt);
	free(pos);
	data_close(d);
	return 0;
}
