/* What the tokenizers share (internal.h): the piece table and its hash
 * maps, the per-thread word caches, UTF-8 output, and the release of a
 * tokenizer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* The map is sized for its entries at init: no growth. A repeated key
 * takes the new value (a repeated merge takes its last rank, as in GPT-2's
 * encoder.py and Hugging Face tokenizers). */
int tok_pairmap_put(tok_pairmap *m, int a, int b, int val)
{
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	uint64_t h = k * 0x9E3779B97F4A7C15ull;
	for (size_t i = (size_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
		if (m->key[i] == k || !m->key[i]) {
			m->key[i] = k;
			m->val[i] = val;
			return 0;
		}
	}
}

/* ---- the piece table ---- */

static atomic_uint_fast64_t serial_next = 1;

pp_tokenizer *tok_new(int n)
{
	pp_tokenizer *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->n_vocab = n;
	t->bos = t->eos = t->unk = -1;
	t->add_bos = 1;
	t->serial = atomic_fetch_add(&serial_next, 1);
	t->off = calloc((size_t)n + 1, sizeof *t->off);
	t->len = calloc((size_t)n + 1, sizeof *t->len);
	t->pool_cap = 1024;
	t->pool = malloc(t->pool_cap);
	if (!t->off || !t->len || !t->pool) {
		tok_vocab_free(t);
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
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: piece %d '%.64s' is already defined as piece %d",
					 path, i, t->pool + t->off[i], old);
	}
	return 0;
}

/* ---- buffers ---- */

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

/* ---- the per-thread cache of encoded words ----
 * tok_encode takes a const tokenizer and may run in many threads at once,
 * so each thread has its own bounded cache, emptied when full or when used
 * with another tokenizer (told apart by a serial number, never reused). */

enum { CACHE_WORDS = 1 << 15, CACHE_KEY_BYTES = 1 << 20, CACHE_IDS = 1 << 18, CACHE_MAXLEN = 64 };

struct tok_cache {
	uint64_t owner;
	tok_map map;          /* word -> entry */
	uint32_t (*entry)[2]; /* offset and count in ids */
	char *keys;
	int *ids;
	size_t nwords, nkeys, nids;
};

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_key_ok;

static void cache_free(void *p)
{
	tok_cache *c = p;
	if (!c)
		return;
	tok_map_free(&c->map);
	free(c->entry);
	free(c->keys);
	free(c->ids);
	free(c);
}

static void cache_init_key(void) { cache_key_ok = pthread_key_create(&cache_key, cache_free) == 0; }

static void cache_clear(tok_cache *c, uint64_t owner)
{
	memset(c->map.slot, 0, (c->map.mask + 1) * sizeof *c->map.slot);
	c->map.n = 0;
	c->nwords = c->nkeys = c->nids = 0;
	c->owner = owner;
}

tok_cache *tok_cache_get(const pp_tokenizer *t)
{
	pthread_once(&cache_once, cache_init_key);
	if (!cache_key_ok)
		return NULL;
	tok_cache *c = pthread_getspecific(cache_key);
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c)
			return NULL;
		c->entry = malloc(CACHE_WORDS * sizeof *c->entry);
		c->keys = malloc(CACHE_KEY_BYTES);
		c->ids = malloc(CACHE_IDS * sizeof *c->ids);
		if (!c->entry || !c->keys || !c->ids || tok_map_init(&c->map, CACHE_WORDS) ||
		    pthread_setspecific(cache_key, c)) {
			cache_free(c);
			return NULL;
		}
		c->owner = t->serial;
	}
	if (c->owner != t->serial)
		cache_clear(c, t->serial);
	return c;
}

int tok_cache_find(const tok_cache *c, const char *w, size_t n, const int **ids, size_t *k)
{
	if (n > CACHE_MAXLEN)
		return 0;
	int i = tok_map_get(&c->map, w, n);
	if (i < 0)
		return 0;
	*ids = c->ids + c->entry[i][0];
	*k = c->entry[i][1];
	return 1;
}

void tok_cache_put(tok_cache *c, const char *w, size_t n, const int *ids, size_t k)
{
	if (n > CACHE_MAXLEN || k > CACHE_IDS)
		return;
	if (c->nwords == CACHE_WORDS || c->nkeys + n > CACHE_KEY_BYTES || c->nids + k > CACHE_IDS)
		cache_clear(c, c->owner);
	char *key = c->keys + c->nkeys;
	memcpy(key, w, n);
	if (tok_map_put(&c->map, key, n, (int)c->nwords, NULL) != 0)
		return; /* already there */
	memcpy(c->ids + c->nids, ids, k * sizeof *ids);
	c->entry[c->nwords][0] = (uint32_t)c->nids;
	c->entry[c->nwords][1] = (uint32_t)k;
	c->nwords++;
	c->nkeys += n;
	c->nids += k;
}

void tok_vocab_free(pp_tokenizer *t)
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
