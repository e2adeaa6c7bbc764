/* Tokenizer front end: loading by content, the shared piece table and hash
 * maps, buffers. The algorithms are in tok_spm.c (SentencePiece BPE) and
 * tok_bpe.c (byte-level BPE). */
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- hashing ---- */

static inline uint64_t load64(const char *s)
{
	uint64_t v;
	memcpy(&v, s, 8);
	return v;
}

uint32_t tok_hash(const char *s, size_t n)
{
	const uint64_t k = 0x9E3779B97F4A7C15ull;
	uint64_t h = 0x243F6A8885A308D3ull ^ (n * k);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		h = (h ^ load64(s + i)) * k;
		h ^= h >> 29;
	}
	uint64_t tail = 0;
	for (size_t j = 0; i + j < n; j++)
		tail |= (uint64_t)(unsigned char)s[i + j] << (8 * j);
	h = (h ^ tail) * k;
	h ^= h >> 32;
	h *= 0xD6E8FEB86659FD93ull;
	return (uint32_t)(h >> 32);
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

int tok_map_init(tok_map *m, size_t expected)
{
	size_t cap = pow2_at_least(expected * 2 + 1); /* load <= 1/2 */
	m->slot = calloc(cap, sizeof *m->slot);
	m->mask = cap - 1;
	m->n = 0;
	return m->slot ? 0 : -1;
}

void tok_map_free(tok_map *m)
{
	free(m->slot);
	m->slot = NULL;
}

static int map_grow(tok_map *m)
{
	tok_map g;
	size_t cap = (m->mask + 1) * 2;
	g.slot = calloc(cap, sizeof *g.slot);
	if (!g.slot)
		return -1;
	g.mask = cap - 1;
	g.n = m->n;
	for (size_t i = 0; i <= m->mask; i++) {
		tok_slot *s = &m->slot[i];
		if (!s->key)
			continue;
		size_t j = s->hash & g.mask;
		while (g.slot[j].key)
			j = (j + 1) & g.mask;
		g.slot[j] = *s;
	}
	free(m->slot);
	*m = g;
	return 0;
}

int tok_map_put(tok_map *m, const char *key, size_t len, int val, int *old)
{
	if ((m->n + 1) * 2 > m->mask + 1 && map_grow(m))
		return -1;
	uint32_t h = tok_hash(key, len);
	size_t i = h & m->mask;
	for (;; i = (i + 1) & m->mask) {
		tok_slot *s = &m->slot[i];
		if (!s->key)
			break;
		if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
			if (old)
				*old = s->val;
			return 1;
		}
	}
	m->slot[i] = (tok_slot){key, (uint32_t)len, h, val};
	m->n++;
	return 0;
}

int tok_pairmap_init(tok_pairmap *m, size_t expected)
{
	size_t cap = pow2_at_least(expected * 2 + 1);
	m->key = calloc(cap, sizeof *m->key);
	m->val = malloc(cap * sizeof *m->val);
	m->mask = cap - 1;
	return m->key && m->val ? 0 : -1;
}

void tok_pairmap_free(tok_pairmap *m)
{
	free(m->key);
	free(m->val);
	m->key = NULL;
	m->val = NULL;
}

/* The map is sized for its entries at init: no growth. */
int tok_pairmap_put(tok_pairmap *m, int a, int b, int val)
{
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	uint64_t h = k * 0x9E3779B97F4A7C15ull;
	for (size_t i = (size_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
		if (m->key[i] == k)
			return 0; /* first wins */
		if (!m->key[i]) {
			m->key[i] = k;
			m->val[i] = val;
			return 0;
		}
	}
}

/* ---- the piece table ---- */

pp_tokenizer *tok_new(int n)
{
	pp_tokenizer *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->n_vocab = n;
	t->bos = t->eos = -1;
	t->off = calloc((size_t)n + 1, sizeof *t->off);
	t->len = calloc((size_t)n + 1, sizeof *t->len);
	t->pool_cap = 1024;
	t->pool = malloc(t->pool_cap);
	if (!t->off || !t->len || !t->pool) {
		tok_free(t);
		return NULL;
	}
	t->pool[0] = 0; /* every piece starts as the empty string at 0 */
	t->pool_n = 1;
	return t;
}

int tok_set_piece(pp_tokenizer *t, int id, const char *s, size_t n)
{
	if (t->pool_n + n + 1 > t->pool_cap) {
		size_t cap = t->pool_cap;
		while (t->pool_n + n + 1 > cap)
			cap *= 2;
		char *p = realloc(t->pool, cap);
		if (!p)
			return -1;
		t->pool = p;
		t->pool_cap = cap;
	}
	memcpy(t->pool + t->pool_n, s, n);
	t->pool[t->pool_n + n] = 0;
	t->off[id] = (uint32_t)t->pool_n;
	t->len[id] = (uint32_t)n;
	t->pool_n += n + 1;
	return 0;
}

int tok_index_pieces(pp_tokenizer *t, const char *path, pp_err *e)
{
	if (tok_map_init(&t->map, (size_t)t->n_vocab))
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	for (int i = 0; i < t->n_vocab; i++) {
		int old;
		int r = tok_map_put(&t->map, t->pool + t->off[i], t->len[i], i, &old);
		if (r < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
		if (r > 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: piece %d '%.64s' is already defined as piece %d",
					 path, i, t->pool + t->off[i], old);
	}
	return 0;
}

/* ---- buffers ---- */

int tok_ids_push(tok_ids *v, int id)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		int *p = realloc(v->ids, cap * sizeof *p);
		if (!p)
			return -1;
		v->ids = p;
		v->cap = cap;
	}
	v->ids[v->n++] = id;
	return 0;
}

int tok_text_append(tok_text *v, const char *s, size_t n)
{
	if (v->n + n + 1 > v->cap) {
		size_t cap = v->cap ? v->cap : 256;
		while (v->n + n + 1 > cap)
			cap *= 2;
		char *p = realloc(v->s, cap);
		if (!p)
			return -1;
		v->s = p;
		v->cap = cap;
	}
	memcpy(v->s + v->n, s, n);
	v->n += n;
	v->s[v->n] = 0; /* always a C string too */
	return 0;
}

void tok_ids_free(tok_ids *v)
{
	free(v->ids);
	*v = (tok_ids){0};
}

void tok_text_free(tok_text *v)
{
	free(v->s);
	*v = (tok_text){0};
}

size_t tok_utf8_put(uint32_t cp, char *b)
{
	if (cp < 0x80) {
		b[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		b[0] = (char)(0xC0 | cp >> 6);
		b[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		b[0] = (char)(0xE0 | cp >> 12);
		b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		b[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	b[0] = (char)(0xF0 | cp >> 18);
	b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	b[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	b[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

int tok_read_file(const char *path, char **buf, size_t *n, pp_err *e)
{
	*buf = NULL;
	*n = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot open: %s", path, strerror(errno));
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap);
	for (;;) {
		if (!b) {
			fclose(f);
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
		}
		len += fread(b + len, 1, cap - len - 1, f);
		if (len < cap - 1)
			break;
		cap *= 2;
		char *p = realloc(b, cap);
		if (!p)
			free(b);
		b = p;
	}
	int err = ferror(f);
	fclose(f);
	if (err) {
		free(b);
		return pp_errorf(e, PP_ERUNTIME, "%s: read error", path);
	}
	b[len] = 0;
	*buf = b;
	*n = len;
	return 0;
}

/* ---- the interface ---- */

int tok_load(pp_tokenizer **t, const char *path, pp_err *e)
{
	*t = NULL;
	char *buf;
	size_t n;
	int rc = tok_read_file(path, &buf, &n, e);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
		i++;
	char fp[SHA256_HEX] = "";
	if (n == 0) {
		rc = pp_errorf(e, PP_ERUNTIME, "%s: empty file (expected a SentencePiece .model, a "
					       "tokenizer.json or a GPT-2 vocab.json)", path);
	} else if (i < n && buf[i] == '{') {
		/* JSON; the GPT-2 pair's fingerprint covers merges.txt too */
		rc = tok_bpe_load_json(t, path, buf, n, fp, e);
	} else {
		rc = tok_spm_load(t, path, (const unsigned char *)buf, n, e);
		if (!rc) {
			sha256_ctx c;
			uint8_t d[SHA256_BYTES];
			sha256_init(&c);
			sha256_update(&c, buf, n);
			sha256_final(&c, d);
			sha256_hex(d, fp);
		}
	}
	free(buf);
	if (rc) {
		tok_free(*t);
		*t = NULL;
		return rc;
	}
	memcpy((*t)->fingerprint, fp, SHA256_HEX);
	return 0;
}

void tok_free(pp_tokenizer *t)
{
	if (!t)
		return;
	if (t->free_impl)
		t->free_impl(t->impl);
	tok_map_free(&t->map);
	free(t->pool);
	free(t->off);
	free(t->len);
	free(t);
}

int tok_vocab_size(const pp_tokenizer *t) { return t->n_vocab; }
int tok_bos(const pp_tokenizer *t) { return t->bos; }
int tok_eos(const pp_tokenizer *t) { return t->eos; }
const char *tok_kind(const pp_tokenizer *t) { return t->kind; }
const char *tok_fingerprint(const pp_tokenizer *t) { return t->fingerprint; }

int tok_encode(const pp_tokenizer *t, const char *text, size_t n, tok_ids *out, pp_err *e)
{
	return t->encode(t, text, n, out, e);
}

int tok_decode(const pp_tokenizer *t, const int *ids, size_t n, tok_text *out, pp_err *e)
{
	return t->decode(t, ids, n, 0, out, e);
}

int tok_decode_ex(const pp_tokenizer *t, const int *ids, size_t n, int flags, tok_text *out,
		  pp_err *e)
{
	return t->decode(t, ids, n, flags, out, e);
}

const char *tok_piece(const pp_tokenizer *t, int id, size_t *len)
{
	if (id < 0 || id >= t->n_vocab)
		return NULL;
	if (len)
		*len = t->len[id];
	return t->pool + t->off[id];
}

int tok_piece_id(const pp_tokenizer *t, const char *piece, size_t len)
{
	return tok_map_get(&t->map, piece, len);
}
