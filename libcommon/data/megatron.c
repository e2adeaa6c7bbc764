/* Megatron-LM indexed datasets as a loader corpus: PREFIX.bin (the tokens,
 * raw, little-endian) and PREFIX.idx (the index), both memory-mapped.
 *
 * PREFIX.idx, little-endian, packed:
 *   char     magic[9]   "MMIDIDX\0\0"
 *   uint64   version    1
 *   uint8    dtype      1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
 *                       6 float64, 7 float32, 8 uint16
 *   uint64   S          sequence count
 *   uint64   D          document-index count (documents + 1)
 *   int32    sizes[S]      tokens per sequence
 *   int64    pointers[S]   byte offset of each sequence in PREFIX.bin
 *   int64    doc_idx[D]    first sequence of each document; doc_idx[0] = 0,
 *                          doc_idx[D - 1] = S
 *   (int8    modes[S]      multimodal datasets only; ignored)
 * A document is the run of sequences doc_idx[k] .. doc_idx[k + 1] - 1.
 * This reader needs the sequences back to back in PREFIX.bin, as Megatron's
 * builder writes them, and checks it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source.h"

#define MEGATRON_MAGIC  "MMIDIDX\0\0"
#define MEGATRON_HEADER 34 /* 9 + 8 + 1 + 8 + 8 */

typedef struct {
	char idx_path[PP_PATH_MAX + 8], bin_path[PP_PATH_MAX + 8];
	const unsigned char *idx, *bin;
	uint64_t idx_size, bin_size;
	int dtype;
	size_t width; /* bytes per token */
	uint64_t n_seq, n_doc_idx;
	const unsigned char *pointers, *doc_idx; /* int64 arrays, unaligned */
} megatron;

static const struct {
	const char *name;
	size_t width;
} dtypes[] = {
	[1] = {"uint8", 1}, [2] = {"int8", 1},    [3] = {"int16", 2},   [4] = {"int32", 4},
	[5] = {"int64", 8}, [6] = {"float64", 8}, [7] = {"float32", 4}, [8] = {"uint16", 2},
};

static uint64_t load_u64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static int64_t load_i64(const unsigned char *p)
{
	int64_t v;
	memcpy(&v, p, 8);
	return v;
}

static int32_t load_i32(const unsigned char *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* PREFIX from PREFIX, PREFIX.bin or PREFIX.idx */
static void prefix_of(const char *path, char *out, size_t n)
{
	size_t len = strlen(path);
	if (corpus_has_suffix(path, ".bin") || corpus_has_suffix(path, ".idx"))
		len -= 4;
	snprintf(out, n, "%.*s", (int)len, path);
}

/* PREFIX.idx exists: a damaged index still gets this reader's account of
 * what is wrong with it */
static bool megatron_probe(const char *path)
{
	char prefix[PP_PATH_MAX], idx[PP_PATH_MAX + 8];
	prefix_of(path, prefix, sizeof prefix);
	snprintf(idx, sizeof idx, "%s.idx", prefix);
	return access(idx, F_OK) == 0;
}

static void megatron_close(data_corpus *c)
{
	megatron *m = c->impl;
	if (!m)
		return;
	corpus_unmap(m->idx, m->idx_size);
	corpus_unmap(m->bin, m->bin_size);
	free(m);
	c->impl = NULL;
}

/* Reads and checks the index; fills c's counts. */
static int check_index(data_corpus *c, megatron *m, pp_err *e)
{
	const char *p = m->idx_path;
	if (m->idx_size < MEGATRON_HEADER)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s is truncated: %llu bytes, the header alone is %d", p,
				 (unsigned long long)m->idx_size, MEGATRON_HEADER);
	if (memcmp(m->idx, MEGATRON_MAGIC, 9))
		return pp_errorf(e, PP_ERUNTIME, "%s: not a Megatron index (no MMIDIDX magic)", p);
	uint64_t version = load_u64(m->idx + 9);
	if (version != 1)
		return pp_errorf(e, PP_ERUNTIME, "%s: index version %llu; this pp reads version 1",
				 p, (unsigned long long)version);
	int code = m->idx[17];
	if (code < 1 || code > 8)
		return pp_errorf(e, PP_ERUNTIME, "%s: unknown dtype code %d (expected 1..8)", p,
				 code);
	if (code == 6 || code == 7)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: tokens of type %s; token ids must be integers", p,
				 dtypes[code].name);
	m->dtype = code;
	m->width = dtypes[code].width;
	m->n_seq = load_u64(m->idx + 18);
	m->n_doc_idx = load_u64(m->idx + 26);
	if (m->n_seq > ((uint64_t)1 << 40) || m->n_doc_idx > ((uint64_t)1 << 40) ||
	    m->n_doc_idx < 1)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: implausible counts: %llu sequences, %llu "
				 "document-index entries",
				 p, (unsigned long long)m->n_seq, (unsigned long long)m->n_doc_idx);
	uint64_t want = MEGATRON_HEADER + 12 * m->n_seq + 8 * m->n_doc_idx;
	if (m->idx_size < want)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s is truncated: %llu bytes, its header describes %llu (%llu "
				 "sequences, %llu document-index entries)",
				 p, (unsigned long long)m->idx_size, (unsigned long long)want,
				 (unsigned long long)m->n_seq, (unsigned long long)m->n_doc_idx);
	if (m->idx_size != want && m->idx_size != want + m->n_seq)
		return pp_errorf(e, PP_ERUNTIME, "%s: %llu bytes, but its header describes %llu", p,
				 (unsigned long long)m->idx_size, (unsigned long long)want);
	const unsigned char *sizes = m->idx + MEGATRON_HEADER;
	m->pointers = sizes + 4 * m->n_seq;
	m->doc_idx = m->pointers + 8 * m->n_seq;

	uint64_t bytes = 0;
	for (uint64_t i = 0; i < m->n_seq; i++) {
		int32_t n = load_i32(sizes + 4 * i);
		int64_t ptr = load_i64(m->pointers + 8 * i);
		if (n < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: sequence %llu has size %d", p,
					 (unsigned long long)i, n);
		if (ptr < 0 || (uint64_t)ptr != bytes)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: sequence %llu starts at byte %lld of the .bin, expected "
				"%llu (sequences must be back to back)",
				p, (unsigned long long)i, (long long)ptr,
				(unsigned long long)bytes);
		bytes += (uint64_t)n * m->width;
	}
	int64_t prev = 0;
	for (uint64_t k = 0; k < m->n_doc_idx; k++) {
		int64_t s = load_i64(m->doc_idx + 8 * k);
		if ((k == 0 && s != 0) || s < prev || (uint64_t)s > m->n_seq)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: document index entry %llu is %lld (entries must rise "
					 "from 0 to the sequence count %llu)",
					 p, (unsigned long long)k, (long long)s,
					 (unsigned long long)m->n_seq);
		prev = s;
	}
	if ((uint64_t)prev != m->n_seq)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: the document index ends at sequence %lld, not at the sequence "
			"count %llu",
			p, (long long)prev, (unsigned long long)m->n_seq);
	if (m->bin_size != bytes)
		return pp_errorf(e, PP_ERUNTIME, "%s has %llu bytes but %s describes %llu%s",
				 m->bin_path, (unsigned long long)m->bin_size, p,
				 (unsigned long long)bytes,
				 m->bin_size < bytes ? " (truncated)" : " (not its index?)");
	c->n_tokens = bytes / m->width;
	c->n_docs = m->n_doc_idx - 1;
	return 0;
}

static int megatron_open(data_corpus *c, const char *path, corpus_part part, pp_err *e)
{
	(void)part;
	megatron *m = calloc(1, sizeof *m);
	char prefix[PP_PATH_MAX];
	prefix_of(path, prefix, sizeof prefix);
	snprintf(m->idx_path, sizeof m->idx_path, "%s.idx", prefix);
	snprintf(m->bin_path, sizeof m->bin_path, "%s.bin", prefix);
	c->impl = m;
	const void *idx = NULL, *bin = NULL;
	int rc = corpus_map(m->idx_path, &idx, &m->idx_size, e);
	m->idx = idx;
	if (!rc)
		rc = corpus_map(m->bin_path, &bin, &m->bin_size, e);
	m->bin = bin;
	if (!rc)
		rc = check_index(c, m, e);
	if (rc) {
		megatron_close(c);
		return rc;
	}
	snprintf(c->path, sizeof c->path, "%s", m->bin_path);
	c->vocab_size = -1;
	c->eos_id = -1;
	return 0;
}

/* one little-endian token of dtype code (1..5, 8) */
static int64_t token_at(int code, const unsigned char *p)
{
	int16_t i16;
	uint16_t u16;
	switch (code) {
	case 1:
		return *p;
	case 2:
		return (int8_t)*p;
	case 3:
		memcpy(&i16, p, 2);
		return i16;
	case 4:
		return load_i32(p);
	case 5:
		return load_i64(p);
	default:
		memcpy(&u16, p, 2);
		return u16;
	}
}

static int megatron_read(data_corpus *c, uint64_t offset, size_t n, int *out, pp_err *e)
{
	megatron *m = c->impl;
	if (offset > c->n_tokens || n > c->n_tokens - offset)
		return pp_errorf(e, PP_ERUNTIME, "%s: tokens [%llu, %llu) are past its end (%llu)",
				 m->bin_path, (unsigned long long)offset,
				 (unsigned long long)(offset + n), (unsigned long long)c->n_tokens);
	if (!n)
		return 0; /* an empty .bin has no mapping: bin is NULL */
	const unsigned char *p = m->bin + offset * m->width;
	for (size_t i = 0; i < n; i++, p += m->width) {
		int64_t v = token_at(m->dtype, p);
		if (v < 0 || v > INT32_MAX)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: token %lld at offset %llu is not a "
					 "token id",
					 m->bin_path, (long long)v,
					 (unsigned long long)(offset + i));
		out[i] = (int)v;
	}
	return 0;
}

static int megatron_offsets(data_corpus *c, uint64_t first, size_t n, uint64_t *out, pp_err *e)
{
	megatron *m = c->impl;
	if (first > c->n_docs + 1 || n > c->n_docs + 1 - first)
		return pp_errorf(e, PP_ERUNTIME, "%s: documents [%llu, %llu) are past its end",
				 m->idx_path, (unsigned long long)first,
				 (unsigned long long)(first + n));
	for (size_t i = 0; i < n; i++) {
		uint64_t s = (uint64_t)load_i64(m->doc_idx + 8 * (first + i));
		out[i] = s < m->n_seq ? (uint64_t)load_i64(m->pointers + 8 * s) / m->width
				      : c->n_tokens;
	}
	return 0;
}

const corpus_format corpus_megatron = {
	.name = "megatron",
	.has_splits = false,
	.has_documents = true,
	.probe = megatron_probe,
	.open = megatron_open,
	.read = megatron_read,
	.offsets = megatron_offsets,
	.close = megatron_close,
};
