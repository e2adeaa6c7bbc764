/* llm.c token shards as a loader corpus: one file, or every file a glob
 * pattern matches (in sorted order), memory-mapped and read as one stream.
 *
 * A shard: a header of 256 little-endian int32, then the tokens.
 *   header[0] magic   20240520 (GPT-2: uint16 tokens) or 20240801 (Llama 3:
 *                     uint32 tokens)
 *   header[1] version 1 with 20240520, 7 with 20240801
 *   header[2] the number of tokens that follow
 * Shards carry no document boundaries (llm.c's preprocessors put the
 * end-of-text token before each document themselves), so each shard is one
 * document here and the loader inserts nothing between them. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source.h"

#define LLMC_HEADER_INTS  256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)

typedef struct {
	char *path;
	const unsigned char *map;
	uint64_t size;
	size_t width;      /* 2 or 4 */
	uint64_t start, n; /* first token in the stream, token count */
} shard;

typedef struct {
	int n;
	shard *shards;
} llmc;

static bool has_glob(const char *s) { return strpbrk(s, "*?[") != NULL; }

static bool llmc_probe(const char *path)
{
	if (has_glob(path))
		return true;
	FILE *f = fopen(path, "rb");
	int32_t magic = 0;
	bool yes = f && fread(&magic, 4, 1, f) == 1 && (magic == 20240520 || magic == 20240801);
	if (f)
		fclose(f);
	return yes;
}

static void llmc_close(data_corpus *c)
{
	llmc *l = c->impl;
	if (!l)
		return;
	for (int i = 0; i < l->n; i++) {
		corpus_unmap(l->shards[i].map, l->shards[i].size);
		free(l->shards[i].path);
	}
	free(l->shards);
	free(l);
	c->impl = NULL;
}

static int check_shard(shard *s, pp_err *e)
{
	if (s->size < LLMC_HEADER_BYTES)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s is truncated: %llu bytes, the header alone is %d", s->path,
				 (unsigned long long)s->size, LLMC_HEADER_BYTES);
	int32_t h[3];
	memcpy(h, s->map, sizeof h);
	if (h[0] == 20240520 && h[1] == 1)
		s->width = 2;
	else if (h[0] == 20240801 && h[1] == 7)
		s->width = 4;
	else if (h[0] == 20240520 || h[0] == 20240801)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: llm.c shard version %d with magic %d (expected "
				 "version %d)",
				 s->path, h[1], h[0], h[0] == 20240520 ? 1 : 7);
	else
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: not an llm.c token shard (magic %d; expected 20240520 or "
				 "20240801)",
				 s->path, h[0]);
	if (h[2] < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: token count %d in the header", s->path, h[2]);
	s->n = (uint64_t)h[2];
	uint64_t want = LLMC_HEADER_BYTES + s->n * s->width;
	if (s->size != want)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s%s: %llu bytes, but its header says %llu tokens "
				 "(%llu bytes)",
				 s->path, s->size < want ? " is truncated" : "",
				 (unsigned long long)s->size, (unsigned long long)s->n,
				 (unsigned long long)want);
	return 0;
}

static int llmc_open(data_corpus *c, const char *path, corpus_part part, pp_err *e)
{
	(void)part;
	glob_t g;
	int grc = glob(path, GLOB_ERR, NULL, &g);
	if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
		if (!grc)
			globfree(&g);
		return pp_errorf(e, PP_EUSAGE, "%s: %s", path,
				 has_glob(path) ? "no file matches this pattern" : "no such file");
	}
	if (grc)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot list the files of this pattern", path);
	llmc *l = calloc(1, sizeof *l);
	c->impl = l;
	l->shards = calloc(g.gl_pathc, sizeof *l->shards);
	int rc = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
		shard *s = &l->shards[l->n++];
		s->path = strdup(g.gl_pathv[i]);
		const void *map = NULL;
		rc = corpus_map(s->path, &map, &s->size, e);
		s->map = map;
		if (!rc)
			rc = check_shard(s, e);
		s->start = total;
		total += s->n;
	}
	globfree(&g);
	if (rc) {
		llmc_close(c);
		return rc;
	}
	snprintf(c->path, sizeof c->path, "%s", path);
	c->n_tokens = total;
	c->n_docs = (uint64_t)l->n;
	c->vocab_size = -1;
	c->eos_id = -1;
	return 0;
}

static int llmc_read(data_corpus *c, uint64_t offset, size_t n, int *out, pp_err *e)
{
	llmc *l = c->impl;
	if (offset > c->n_tokens || n > c->n_tokens - offset)
		return pp_errorf(e, PP_ERUNTIME, "%s: tokens [%llu, %llu) are past its end (%llu)",
				 c->path, (unsigned long long)offset,
				 (unsigned long long)(offset + n), (unsigned long long)c->n_tokens);
	/* the last shard starting at or before offset */
	int lo = 0, hi = l->n - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (l->shards[mid].start <= offset)
			lo = mid;
		else
			hi = mid - 1;
	}
	for (int k = lo; n > 0; k++) {
		const shard *s = &l->shards[k];
		if (offset >= s->start + s->n)
			continue; /* an empty shard */
		uint64_t at = offset - s->start;
		size_t take = s->n - at < n ? (size_t)(s->n - at) : n;
		const unsigned char *p = s->map + LLMC_HEADER_BYTES + at * s->width;
		for (size_t i = 0; i < take; i++, p += s->width) {
			uint32_t v = 0;
			memcpy(&v, p, s->width); /* little-endian host */
			if (v > INT32_MAX)
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: token %u at %llu is not a token id", s->path,
						 v, (unsigned long long)(at + i));
			*out++ = (int)v;
		}
		offset += take;
		n -= take;
	}
	return 0;
}

static int llmc_offsets(data_corpus *c, uint64_t first, size_t n, uint64_t *out, pp_err *e)
{
	llmc *l = c->impl;
	if (first > c->n_docs + 1 || n > c->n_docs + 1 - first)
		return pp_errorf(e, PP_ERUNTIME, "%s: shards [%llu, %llu) are past the end",
				 c->path, (unsigned long long)first,
				 (unsigned long long)(first + n));
	for (size_t i = 0; i < n; i++) {
		uint64_t k = first + i;
		out[i] = k < (uint64_t)l->n ? l->shards[k].start : c->n_tokens;
	}
	return 0;
}

const corpus_format corpus_llmc = {
	.name = "llm.c",
	.has_splits = false,
	.has_documents = false,
	.probe = llmc_probe,
	.open = llmc_open,
	.read = llmc_read,
	.offsets = llmc_offsets,
	.close = llmc_close,
};
