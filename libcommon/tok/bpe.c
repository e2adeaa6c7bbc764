/* Byte-level BPE (GPT-2 style), from a Hugging Face tokenizer.json or from
 * GPT-2's vocab.json + merges.txt:
 *
 * 1. Non-special added tokens are cut out of the text first (longest match);
 *    special ones (<|endoftext|>) are not: they only come from the caller.
 * 2. The GPT-2 pre-tokenizer regex
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *    splits each piece of text into words, written out by hand below (after
 *    an optional Digits split and prefix space, per the tokenizer.json).
 *    \p{L} and \p{N} are unicode.c's tables, of the Unicode version that
 *    tokenizers and tiktoken use (scripts/unicode-requirements.txt).
 * 3. Each word's bytes start as one symbol per byte (the vocabulary spells
 *    byte b as the character bytes_to_unicode(b)); the adjacent pair with
 *    the lowest merge rank is merged (ties: leftmost) until none is left,
 *    with a priority queue over a linked list, as Hugging Face does.
 * Encoded words are cached per thread. Invalid UTF-8 needs nothing special:
 * its bytes are bytes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../base/fsutil.h"
#include "internal.h"

/* more than any real vocabulary (Gemma's is 256000), and a bound on what a
 * damaged file can make us allocate */
#define TOK_MAX_VOCAB (1 << 24)

struct tok_bpe {
	int *merge_out;       /* rank -> id of the merged token */
	int (*merge_pair)[2]; /* rank -> ids of the pair it merges */
	int nmerges;
	uint8_t *ptype;   /* per id: TOK_NORMAL, TOK_CONTROL, ... (tok_piece_type) */
	tok_pairmap rank; /* (left id, right id) -> rank */
	int byte_id[256]; /* the token of each single byte, -1 if none */
	uint8_t *special; /* per id: 1 special added token, 2 no token at all */
	/* raw bytes of each token (what it decodes to) */
	char *raw;
	uint32_t *raw_off, *raw_len;
	tok_map raw_map; /* raw bytes -> id (ignore_merges) */
	/* non-special added tokens: longest-prefix matcher on raw bytes */
	tok_map added;
	int n_added;
	uint32_t added_maxlen;
	uint8_t added_first[256];
	int add_prefix_space, ignore_merges;
	int split_digits; /* 0 no, 1 each digit alone, 2 runs of digits */
};

static void bpe_free(void *p)
{
	struct tok_bpe *b = p;
	if (!b)
		return;
	free(b->merge_out);
	free(b->merge_pair);
	free(b->ptype);
	tok_pairmap_free(&b->rank);
	free(b->special);
	free(b->raw);
	free(b->raw_off);
	free(b->raw_len);
	tok_map_free(&b->raw_map);
	tok_map_free(&b->added);
	free(b);
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other
 * 68 are shifted to U+0100 and up, in byte order. */
static void byte_unicode_tables(uint32_t b2u[256], int u2b[324])
{
	int n = 0;
	for (int i = 0; i < 324; i++)
		u2b[i] = -1;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
		b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
		u2b[b2u[b]] = b;
	}
}

/* ---- encoding ---- */

enum { CL_L, CL_N, CL_S, CL_O };

static inline int char_class(uint32_t cp)
{
	if (cp < 0x80) {
		if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
			return CL_L;
		if (cp >= '0' && cp <= '9')
			return CL_N;
		if (cp == ' ' || (cp >= 9 && cp <= 13))
			return CL_S;
		return CL_O;
	}
	if (cp == TOK_INVALID)
		return CL_O;
	if (tok_uni_is_letter(cp))
		return CL_L;
	if (tok_uni_is_number(cp))
		return CL_N;
	if (tok_uni_is_space(cp))
		return CL_S;
	return CL_O;
}

static inline size_t next_char(const char *s, size_t n, int *cls)
{
	uint32_t cp;
	size_t len = (unsigned char)s[0] < 0x80 ? (cp = (unsigned char)s[0], 1)
						: tok_utf8_char((const unsigned char *)s, n, &cp);
	*cls = char_class(cp);
	return len;
}

typedef struct {
	int prev, next, id;
	uint32_t len;
} bsym;

typedef struct {
	int rank, left;
	uint32_t size;
} bcand;

typedef struct {
	const pp_tokenizer *t;
	const struct tok_bpe *b;
	tok_ids *out;
	tok_cache *cache;
	bsym *sym;
	size_t symcap;
	bcand *heap;
	size_t nheap, heapcap;
	pp_err *e;
} bpe_enc;

static inline int bcand_before(const bcand *a, const bcand *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int bheap_push(bpe_enc *w, bcand c)
{
	if (w->nheap == w->heapcap) {
		size_t cap = w->heapcap ? 2 * w->heapcap : 64;
		bcand *p = realloc(w->heap, cap * sizeof *p);
		if (!p)
			return -1;
		w->heap = p;
		w->heapcap = cap;
	}
	size_t i = w->nheap++;
	while (i > 0 && bcand_before(&c, &w->heap[(i - 1) / 2])) {
		w->heap[i] = w->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	w->heap[i] = c;
	return 0;
}

static bcand bheap_pop(bpe_enc *w)
{
	bcand top = w->heap[0], last = w->heap[--w->nheap];
	size_t i = 0, n = w->nheap;
	for (;;) {
		size_t l = 2 * i + 1;
		if (l >= n)
			break;
		size_t c = l + 1 < n && bcand_before(&w->heap[l + 1], &w->heap[l]) ? l + 1 : l;
		if (!bcand_before(&w->heap[c], &last))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n)
		w->heap[i] = last;
	return top;
}

static int add_pair(bpe_enc *w, int left)
{
	if (left < 0 || w->sym[left].next < 0)
		return 0;
	int right = w->sym[left].next;
	int r = tok_pairmap_get(&w->b->rank, w->sym[left].id, w->sym[right].id);
	if (r < 0)
		return 0;
	return bheap_push(w, (bcand){r, left, w->sym[left].len + w->sym[right].len});
}

static int oom(bpe_enc *w) { return pp_errorf(w->e, PP_ERUNTIME, "tokenizer: out of memory"); }

/* BPE of one word s[0, n). */
static int bpe_word(bpe_enc *w, const char *s, size_t n)
{
	const struct tok_bpe *b = w->b;
	const int *hit;
	size_t k;
	if (w->cache && tok_cache_find(w->cache, s, n, &hit, &k)) {
		for (size_t i = 0; i < k; i++)
			if (tok_ids_push(w->out, hit[i]))
				return oom(w);
		return 0;
	}
	size_t before = w->out->n;
	int id = b->ignore_merges ? tok_map_get(&b->raw_map, s, n) : -1;
	if (id >= 0 && b->special[id] == 0) {
		if (tok_ids_push(w->out, id))
			return oom(w);
		goto done;
	}
	if (n > w->symcap) {
		bsym *p = realloc(w->sym, n * sizeof *p);
		if (!p)
			return oom(w);
		w->sym = p;
		w->symcap = n;
	}
	for (size_t i = 0; i < n; i++) {
		int bid = b->byte_id[(uint8_t)s[i]];
		if (bid < 0)
			return pp_errorf(w->e, PP_ERUNTIME,
					 "tokenizer: byte 0x%02X has no token in this vocabulary",
					 (uint8_t)s[i]);
		w->sym[i] = (bsym){(int)i - 1, i + 1 < n ? (int)i + 1 : -1, bid, 1};
	}
	w->nheap = 0;
	for (size_t i = 0; i + 1 < n; i++)
		if (add_pair(w, (int)i))
			return oom(w);
	while (w->nheap) {
		bcand c = bheap_pop(w);
		bsym *l = &w->sym[c.left];
		if (!l->len || l->next < 0)
			continue;
		bsym *r = &w->sym[l->next];
		if (l->len + r->len != c.size)
			continue; /* stale */
		l->id = b->merge_out[c.rank];
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = c.left;
		if (add_pair(w, l->prev) || add_pair(w, c.left))
			return oom(w);
	}
	for (int i = 0; i >= 0; i = w->sym[i].next)
		if (tok_ids_push(w->out, w->sym[i].id))
			return oom(w);
done:
	if (w->cache)
		tok_cache_put(w->cache, s, n, w->out->ids + before, w->out->n - before);
	return 0;
}

/* The GPT-2 regex over s[0, n): calls bpe_word on each match. */
static int pretokenize(bpe_enc *w, const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		int c;
		size_t len = next_char(s + i, n - i, &c), end;
		if (s[i] == '\'' && i + 1 < n) { /* 's 't 're 've 'm 'll 'd */
			char x = s[i + 1], y = i + 2 < n ? s[i + 2] : 0;
			end = x == 's' || x == 't' || x == 'm' || x == 'd' ? i + 2
			      : (x == 'r' && y == 'e') || (x == 'v' && y == 'e') ||
					      (x == 'l' && y == 'l')
				      ? i + 3
				      : 0;
			if (end) {
				if (bpe_word(w, s + i, end - i))
					return -1;
				i = end;
				continue;
			}
		}
		int cls = c;
		end = i;
		if (s[i] == ' ' && i + 1 < n) { /* " ?" before a letter, number or other */
			int c2;
			size_t len2 = next_char(s + i + 1, n - i - 1, &c2);
			if (c2 != CL_S) {
				cls = c2;
				end = i + 1 + len2;
			}
		}
		if (cls != CL_S) {
			if (end == i)
				end = i + len;
			while (end < n) {
				int c3;
				size_t l3 = next_char(s + end, n - end, &c3);
				if (c3 != cls)
					break;
				end += l3;
			}
		} else { /* \s+(?!\S)|\s+ */
			size_t last = i, nchars = 0;
			end = i;
			while (end < n) {
				int c3;
				size_t l3 = next_char(s + end, n - end, &c3);
				if (c3 != CL_S)
					break;
				last = end;
				end += l3;
				nchars++;
			}
			if (end < n && nchars > 1)
				end = last; /* leave the last space to the word after it */
		}
		if (bpe_word(w, s + i, end - i))
			return -1;
		i = end;
	}
	return 0;
}

/* One piece of text as the ByteLevel pre-tokenizer sees it: with
 * add_prefix_space, a space before it unless it starts with one (Hugging
 * Face does this for every piece a previous pre-tokenizer made: " 12" split
 * by Digits becomes " ", " 1", " 2"). */
static int byte_level(bpe_enc *w, const char *s, size_t n)
{
	if (!n)
		return 0;
	if (!w->b->add_prefix_space || s[0] == ' ')
		return pretokenize(w, s, n);
	char small[256], *tmp = n + 1 <= sizeof small ? small : malloc(n + 1);
	if (!tmp)
		return oom(w);
	tmp[0] = ' ';
	memcpy(tmp + 1, s, n);
	int rc = pretokenize(w, tmp, n + 1);
	if (tmp != small)
		free(tmp);
	return rc;
}

/* One stretch of text between added tokens: the Digits split, then
 * ByteLevel. */
static int encode_text(bpe_enc *w, const char *s, size_t n)
{
	const struct tok_bpe *b = w->b;
	if (!b->split_digits)
		return byte_level(w, s, n);
	size_t i = 0, start = 0;
	while (i < n) {
		int c;
		size_t len = next_char(s + i, n - i, &c);
		if (c != CL_N) {
			i += len;
			continue;
		}
		size_t end = i + len;
		if (b->split_digits == 2)
			for (int c2; end < n; end += len) {
				len = next_char(s + end, n - end, &c2);
				if (c2 != CL_N)
					break;
			}
		if (byte_level(w, s + start, i - start) || byte_level(w, s + i, end - i))
			return -1;
		i = start = end;
	}
	return byte_level(w, s + start, n - start);
}

static size_t added_match(const struct tok_bpe *b, const char *p, size_t n, int *id)
{
	if (!b->n_added || !b->added_first[(uint8_t)p[0]])
		return 0;
	for (size_t len = n < b->added_maxlen ? n : b->added_maxlen; len > 0; len--)
		if ((*id = tok_map_get(&b->added, p, len)) >= 0)
			return len;
	return 0;
}

static int bpe_encode(const pp_tokenizer *t, const char *text, size_t n, tok_ids *out, pp_err *e)
{
	const struct tok_bpe *b = t->impl;
	bpe_enc w = {t, b, out, tok_cache_get(t), NULL, 0, NULL, 0, 0, e};
	int rc = 0;
	size_t start = 0;
	for (size_t i = 0; i < n && b->n_added;) {
		int id;
		size_t len = added_match(b, text + i, n - i, &id);
		if (!len) {
			i++;
			continue;
		}
		if ((rc = encode_text(&w, text + start, i - start)))
			goto done;
		if (tok_ids_push(out, id)) {
			rc = oom(&w);
			goto done;
		}
		i = start = i + len;
	}
	rc = encode_text(&w, text + start, n - start);
done:
	free(w.sym);
	free(w.heap);
	return rc;
}

static int bpe_decode(const pp_tokenizer *t, const int *ids, size_t n, int flags, tok_text *out,
		      pp_err *e)
{
	const struct tok_bpe *b = t->impl;
	(void)flags;
	for (size_t i = 0; i < n; i++) {
		int id = ids[i];
		if (id < 0 || id >= t->n_vocab || b->special[id] == 2)
			return pp_errorf(
				e, PP_EUSAGE,
				"tokenizer: id %d at position %zu is not in the vocabulary", id, i);
		if (b->special[id])
			continue;
		if (tok_text_append(out, b->raw + b->raw_off[id], b->raw_len[id]))
			return pp_errorf(e, PP_ERUNTIME, "tokenizer: out of memory decoding");
	}
	return 0;
}

/* ---- loading ---- */

typedef struct {
	const char *str;
	size_t len;
	int id, special, in_vocab;
} added_tok;

static int load_err(pp_err *e, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int load_err(pp_err *e, const char *path, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return pp_errorf(e, PP_ERUNTIME, "%s: %s", path, msg);
}

/* The content of a token entry of tokenizer_config.json: "x" or {"content": "x"}. */
static const char *token_content(json_t *v)
{
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* dir of path + name */
static char *sibling(const char *path, const char *name)
{
	const char *slash = strrchr(path, '/');
	size_t d = slash ? (size_t)(slash - path + 1) : 0;
	char *p = malloc(d + strlen(name) + 1);
	if (p) {
		memcpy(p, path, d);
		strcpy(p + d, name);
	}
	return p;
}

/* Builds the tokenizer from vocab (object: byte-level string -> id), merges
 * (array of "a b" strings or [a, b] pairs, or NULL with merges_txt) and
 * added tokens. */
static int build(pp_tokenizer **tp, const char *path, json_t *vocab, json_t *merges,
		 const char *merges_txt, const char *merges_path, added_tok *added, size_t nadded,
		 pp_err *e)
{
	uint32_t b2u[256];
	int u2b[324];
	byte_unicode_tables(b2u, u2b);
	long maxid = -1;
	const char *key;
	json_t *val;
	json_object_foreach(vocab, key, val)
	{
		if (!json_is_integer(val) || json_integer_value(val) < 0 ||
		    json_integer_value(val) > TOK_MAX_VOCAB)
			return load_err(e, path, "vocabulary entry '%.64s' has no valid id", key);
		if (json_integer_value(val) > maxid)
			maxid = (long)json_integer_value(val);
	}
	for (size_t i = 0; i < nadded; i++)
		if (added[i].id > maxid)
			maxid = added[i].id;
	if (maxid < 0)
		return load_err(e, path, "the vocabulary is empty");
	int nv = (int)maxid + 1;
	pp_tokenizer *t = tok_new(nv);
	struct tok_bpe *b = t ? calloc(1, sizeof *b) : NULL;
	if (!b) {
		tok_vocab_free(t);
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	}
	*tp = t;
	t->impl = b;
	t->free_impl = bpe_free;
	t->kind = "byte-level-bpe";
	t->encode = bpe_encode;
	t->decode = bpe_decode;
	b->special = malloc((size_t)nv);
	b->raw_off = calloc((size_t)nv, sizeof *b->raw_off);
	b->raw_len = calloc((size_t)nv, sizeof *b->raw_len);
	size_t rawcap = 1 << 16, rawn = 0;
	b->raw = malloc(rawcap);
	if (!b->special || !b->raw_off || !b->raw_len || !b->raw ||
	    tok_map_init(&t->map, (size_t)nv) || tok_map_init(&b->added, nadded + 1))
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	memset(b->special, 2, (size_t)nv);
	for (int i = 0; i < 256; i++)
		b->byte_id[i] = -1;

	/* pieces: vocabulary first, then added tokens that are not in it */
	json_object_foreach(vocab, key, val)
	{
		int id = (int)json_integer_value(val);
		if (b->special[id] != 2)
			return load_err(e, path,
					"vocabulary entries '%.64s' and another share id %d", key,
					id);
		b->special[id] = 0;
		if (tok_set_piece(t, id, key, strlen(key)))
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	}
	for (size_t i = 0; i < nadded; i++) {
		int id = added[i].id;
		if (b->special[id] == 2 && tok_set_piece(t, id, added[i].str, added[i].len))
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
		b->special[id] = added[i].special ? 1 : 0;
	}
	/* added tokens that are not in the vocabulary are spelled as text */
	uint8_t *from_added = calloc((size_t)nv, 1);
	if (!from_added)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	for (size_t j = 0; j < nadded; j++)
		if (!added[j].in_vocab)
			from_added[added[j].id] = 1;
	for (int id = 0; id < nv; id++) {
		if (b->special[id] == 2)
			continue;
		const char *p = t->pool + t->off[id];
		size_t n = t->len[id];
		/* raw bytes: undo bytes_to_unicode; a token with other characters
		 * (an added token) stands for its own UTF-8 */
		if (rawn + n + 1 > rawcap) {
			while (rawn + n + 1 > rawcap)
				rawcap *= 2;
			char *q = realloc(b->raw, rawcap);
			if (!q)
				return free(from_added),
				       pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
			b->raw = q;
		}
		size_t k = 0, i = 0;
		int bytelevel = 1;
		while (i < n) {
			uint32_t cp;
			i += tok_utf8_char((const unsigned char *)p + i, n - i, &cp);
			if (cp >= 324 || u2b[cp] < 0) {
				bytelevel = 0;
				break;
			}
			b->raw[rawn + k++] = (char)u2b[cp];
		}
		if (!bytelevel || from_added[id]) {
			memcpy(b->raw + rawn, p, n);
			k = n;
		}
		b->raw_off[id] = (uint32_t)rawn;
		b->raw_len[id] = (uint32_t)k;
		rawn += k;
		if (k == 1 && !b->special[id] && b->byte_id[(uint8_t)b->raw[b->raw_off[id]]] < 0 &&
		    bytelevel)
			b->byte_id[(uint8_t)b->raw[b->raw_off[id]]] = id;
		if (tok_map_put(&t->map, p, n, id, NULL) < 0)
			return free(from_added),
			       pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	}
	free(from_added);
	if (tok_map_init(&b->raw_map, (size_t)nv))
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	for (int id = 0; id < nv; id++)
		if (b->special[id] == 0 &&
		    tok_map_put(&b->raw_map, b->raw + b->raw_off[id], b->raw_len[id], id, NULL) < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	for (size_t i = 0; i < nadded; i++) {
		if (added[i].special || !added[i].len)
			continue;
		int id = added[i].id;
		const char *raw = b->raw + b->raw_off[id];
		if (tok_map_put(&b->added, raw, b->raw_len[id], id, NULL) < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
		b->n_added++;
		b->added_first[(uint8_t)raw[0]] = 1;
		if (b->raw_len[id] > b->added_maxlen)
			b->added_maxlen = b->raw_len[id];
	}

	/* piece types, for writers of other formats */
	b->ptype = malloc((size_t)nv);
	if (!b->ptype)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	for (int id = 0; id < nv; id++)
		b->ptype[id] = b->special[id] == 1   ? TOK_CONTROL
			       : b->special[id] == 2 ? TOK_UNUSED
						     : TOK_NORMAL;
	for (size_t i = 0; i < nadded; i++)
		if (!added[i].special)
			b->ptype[added[i].id] = TOK_USER_DEFINED;
	t->type = b->ptype;

	/* merges */
	size_t nm = 0;
	if (merges) {
		nm = json_array_size(merges);
	} else {
		for (const char *p = merges_txt; *p; p++)
			nm += *p == '\n';
		nm++;
	}
	b->merge_out = malloc((nm + 1) * sizeof *b->merge_out);
	b->merge_pair = malloc((nm + 1) * sizeof *b->merge_pair);
	if (!b->merge_out || !b->merge_pair || tok_pairmap_init(&b->rank, nm + 1))
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	const char *mp = merges_txt;
	char buf[1024];
	for (size_t i = 0, line = 0;; i++) {
		const char *l = NULL, *r = NULL;
		size_t ll = 0, rl = 0;
		if (merges) {
			if (i >= nm)
				break;
			json_t *m = json_array_get(merges, i);
			if (json_is_string(m)) {
				l = json_string_value(m);
				const char *sp = strchr(l, ' ');
				if (sp && !strchr(sp + 1, ' ')) {
					ll = (size_t)(sp - l);
					r = sp + 1;
					rl = strlen(r);
				}
			} else if (json_is_array(m) && json_array_size(m) == 2 &&
				   json_is_string(json_array_get(m, 0)) &&
				   json_is_string(json_array_get(m, 1))) {
				l = json_string_value(json_array_get(m, 0));
				r = json_string_value(json_array_get(m, 1));
				ll = strlen(l);
				rl = strlen(r);
			}
			if (!r)
				return load_err(e, path,
						"merge %zu is not \"a b\" nor [\"a\", \"b\"]", i);
		} else {
			if (!*mp)
				break;
			const char *eol = strchr(mp, '\n');
			size_t n = eol ? (size_t)(eol - mp) : strlen(mp);
			const char *next = eol ? eol + 1 : mp + n;
			line++;
			if (n && mp[n - 1] == '\r')
				n--;
			if (n == 0 || (line == 1 && !strncmp(mp, "#version", 8))) {
				mp = next;
				i--;
				continue;
			}
			const char *sp = memchr(mp, ' ', n);
			if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - mp)))
				return load_err(e, merges_path, "line %zu is not a merge \"a b\"",
						line);
			l = mp;
			ll = (size_t)(sp - mp);
			r = sp + 1;
			rl = n - ll - 1;
			mp = next;
		}
		if (ll + rl >= sizeof buf)
			return load_err(e, path, "merge %zu is too long", i);
		memcpy(buf, l, ll);
		memcpy(buf + ll, r, rl);
		int a = tok_map_get(&t->map, l, ll), c = tok_map_get(&t->map, r, rl),
		    o = tok_map_get(&t->map, buf, ll + rl);
		if (a < 0 || c < 0 || o < 0) {
			buf[ll + rl] = 0;
			return load_err(
				e, merges ? path : merges_path,
				"merge '%.200s' (rank %zu) has a token that is not in the vocabulary",
				buf, i);
		}
		b->merge_out[i] = o;
		b->merge_pair[i][0] = a;
		b->merge_pair[i][1] = c;
		b->nmerges = (int)i + 1;
		if (tok_pairmap_put(&b->rank, a, c, (int)i))
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	}

	t->merge = (const int(*)[2])b->merge_pair;
	t->n_merges = b->nmerges;

	/* BOS/EOS: tokenizer_config.json beside the file, else well-known names */
	char *cfgpath = sibling(path, "tokenizer_config.json");
	json_t *cfg = cfgpath ? json_load_file(cfgpath, 0, NULL) : NULL;
	free(cfgpath);
	if (json_is_boolean(json_object_get(cfg, "add_bos_token")))
		t->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
	const char *bos = cfg ? token_content(json_object_get(cfg, "bos_token")) : NULL;
	const char *eos = cfg ? token_content(json_object_get(cfg, "eos_token")) : NULL;
	if (bos)
		t->bos = tok_map_get(&t->map, bos, strlen(bos));
	if (eos)
		t->eos = tok_map_get(&t->map, eos, strlen(eos));
	json_decref(cfg);
	static const char *const names[][2] = {{"<|endoftext|>", "<|endoftext|>"},
					       {"<|begin_of_text|>", "<|end_of_text|>"},
					       {"<s>", "</s>"}};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (t->bos < 0 && !bos)
			t->bos = tok_map_get(&t->map, names[i][0], strlen(names[i][0]));
		if (t->eos < 0 && !eos)
			t->eos = tok_map_get(&t->map, names[i][1], strlen(names[i][1]));
	}
	return 0;
}

static const char *type_of(json_t *o)
{
	json_t *t = json_object_get(o, "type");
	return json_is_string(t) ? json_string_value(t) : "";
}

/* Reads the pre_tokenizer: ByteLevel with the GPT-2 regex, optionally after
 * a Digits split (a Sequence). */
static int pre_tokenizer(json_t *pt, const char *path, struct tok_bpe *b, pp_err *e)
{
	if (!json_is_object(pt))
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: pre_tokenizer is missing: pp supports byte-level BPE with the "
			"ByteLevel pre-tokenizer",
			path);
	const char *type = type_of(pt);
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(pt, "pretokenizers");
		size_t n = json_array_size(list);
		if (n == 2 && !strcmp(type_of(json_array_get(list, 0)), "Digits")) {
			json_t *ind = json_object_get(json_array_get(list, 0), "individual_digits");
			b->split_digits = json_is_true(ind) ? 1 : 2;
			return pre_tokenizer(json_array_get(list, 1), path, b, e);
		}
		if (n == 1)
			return pre_tokenizer(json_array_get(list, 0), path, b, e);
	} else if (!strcmp(type, "ByteLevel")) {
		json_t *re = json_object_get(pt, "use_regex");
		if (re && !json_is_true(re))
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: ByteLevel pre-tokenizer with use_regex false (a custom "
				"Split regex) is not supported: pp implements the GPT-2 regex",
				path);
		b->add_prefix_space = json_is_true(json_object_get(pt, "add_prefix_space"));
		return 0;
	}
	char *s = json_dumps(pt, JSON_COMPACT);
	pp_errorf(e, PP_ERUNTIME,
		  "%s: pre_tokenizer %.200s is not supported: pp supports ByteLevel (GPT-2 regex), "
		  "optionally after Digits",
		  path, s ? s : type);
	free(s);
	return PP_ERUNTIME;
}

int tok_bpe_load_json(pp_tokenizer **tp, const char *path, const char *buf, size_t n,
		      char fingerprint[SHA256_HEX], pp_err *e)
{
	*tp = NULL;
	json_error_t je;
	json_t *root = json_loadb(buf, n, 0, &je);
	if (!root)
		return pp_errorf(e, PP_ERUNTIME, "%s: line %d: %s", path, je.line, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return pp_errorf(e, PP_ERUNTIME, "%s: expected a JSON object", path);
	}
	sha256_ctx sc;
	uint8_t d[SHA256_BYTES];
	int rc = sha256_init(&sc, e);
	if (rc) {
		json_decref(root);
		return rc;
	}
	sha256_update(&sc, buf, n);
	added_tok *added = NULL;
	size_t nadded = 0;
	char *mtxt = NULL, *mpath = NULL;
	json_t *model = json_object_get(root, "model");
	if (json_is_object(model)) {
		/* a Hugging Face tokenizer.json ("model" is also a word of GPT-2's
		 * vocab.json, with an integer) */
		const char *type = type_of(model);
		json_t *vocab = json_object_get(model, "vocab"),
		       *merges = json_object_get(model, "merges");
		if (*type && strcmp(type, "BPE")) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: model type %s is not supported (pp reads BPE)", path,
				       type);
			goto out;
		}
		if (!json_is_object(vocab) || !json_is_array(merges)) {
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: model.vocab (an object) and model.merges (an array) are "
				"required",
				path);
			goto out;
		}
		json_t *cp = json_object_get(model, "continuing_subword_prefix"),
		       *ew = json_object_get(model, "end_of_word_suffix");
		if ((json_is_string(cp) && *json_string_value(cp)) ||
		    (json_is_string(ew) && *json_string_value(ew))) {
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: continuing_subword_prefix and end_of_word_suffix are not "
				"supported",
				path);
			goto out;
		}
		json_t *norm = json_object_get(root, "normalizer");
		if (norm && !json_is_null(norm)) {
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: normalizer %s is not supported (byte-level BPE needs none)",
				path, type_of(norm));
			goto out;
		}
		json_t *at = json_object_get(root, "added_tokens");
		nadded = json_array_size(at);
		added = calloc(nadded + 1, sizeof *added);
		if (!added) {
			rc = pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
			goto out;
		}
		for (size_t i = 0; i < nadded; i++) {
			json_t *a = json_array_get(at, i), *id = json_object_get(a, "id"),
			       *content = json_object_get(a, "content");
			if (!json_is_integer(id) || !json_is_string(content) ||
			    json_integer_value(id) < 0 || json_integer_value(id) > TOK_MAX_VOCAB) {
				rc = pp_errorf(e, PP_ERUNTIME,
					       "%s: added_tokens[%zu] needs an id and a content",
					       path, i);
				goto out;
			}
			added[i].str = json_string_value(content);
			added[i].len = json_string_length(content);
			added[i].id = (int)json_integer_value(id);
			added[i].special = json_is_true(json_object_get(a, "special"));
			json_t *v = json_object_get(vocab, added[i].str);
			added[i].in_vocab = json_is_integer(v) &&
					    json_integer_value(v) == added[i].id;
		}
		pp_tokenizer *t = NULL;
		rc = build(&t, path, vocab, merges, NULL, NULL, added, nadded, e);
		*tp = t;
		if (!rc)
			rc = pre_tokenizer(json_object_get(root, "pre_tokenizer"), path, t->impl,
					   e);
		if (!rc) {
			struct tok_bpe *b = t->impl;
			b->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
			t->prep.add_space_prefix = b->add_prefix_space;
			t->prep.split_digits = b->split_digits;
		}
	} else {
		/* GPT-2's vocab.json, with merges.txt beside it */
		const char *key;
		json_t *val;
		json_object_foreach(root, key, val)
		{
			if (json_is_integer(val))
				continue;
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: neither a tokenizer.json (no \"model\") nor a GPT-2 "
				       "vocab.json (entry '%.64s' is not an integer id)",
				       path, key);
			goto out;
		}
		mpath = sibling(path, "merges.txt");
		size_t mn;
		if (!mpath || fs_read_file(mpath, &mtxt, &mn, e)) {
			rc = pp_err_prefix(
				e, "%s is a GPT-2 vocab.json and needs merges.txt beside it", path);
			goto out;
		}
		sha256_update(&sc, mtxt, mn);
		json_t *eot = json_object_get(root, "<|endoftext|>");
		if (json_is_integer(eot)) {
			added = calloc(1, sizeof *added);
			if (!added) {
				rc = pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
				goto out;
			}
			*added = (added_tok){"<|endoftext|>", 13, (int)json_integer_value(eot), 1,
					     1};
			nadded = 1;
		}
		rc = build(tp, path, root, NULL, mtxt, mpath, added, nadded, e);
	}
	sha256_final(&sc, d);
	sha256_hex(d, fingerprint);
out:
	sha256_discard(&sc); /* after sha256_final, a no-op */
	free(added);
	free(mtxt);
	free(mpath);
	json_decref(root);
	return rc;
}
