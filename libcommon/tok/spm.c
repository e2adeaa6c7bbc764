/* SentencePiece BPE models (.model files: a ModelProto protobuf), encoded
 * the way SentencePiece 0.1.x does it, id for id:
 *
 * 1. Normalize (identity rule only): with remove_extra_whitespaces, drop
 *    leading spaces, collapse runs of spaces and drop trailing ones; add the
 *    dummy prefix "▁" when add_dummy_prefix; replace ' ' by "▁" (U+2581)
 *    when escape_whitespaces; replace each byte that does not begin a valid
 *    UTF-8 character by U+FFFD, one per byte (a truncated 3-byte sequence
 *    becomes two). User-defined pieces pass through untouched.
 * 2. Split the normalized text into characters, except that user-defined
 *    pieces (longest match) become single frozen symbols. There is no
 *    split at whitespace: the whole text is one sequence, so pieces made of
 *    spaces ("▁▁▁") merge across word boundaries.
 * 3. Repeatedly merge the adjacent pair whose concatenation is a NORMAL,
 *    USER_DEFINED or UNUSED piece with the highest score (ties: the leftmost
 *    pair), using a priority queue of candidate pairs over a linked list of
 *    symbols; stale candidates are recognized by their length.
 * 4. A final symbol that is an UNUSED piece is split back into the two
 *    symbols of the last candidate pair recorded for it, recursively.
 * 5. Symbols that are not pieces become <0xXX> byte pieces per byte
 *    (byte_fallback), or one <unk> per run of unknown symbols. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { SP_NORMAL = 1, SP_UNKNOWN, SP_CONTROL, SP_USER, SP_UNUSED, SP_BYTE };

struct tok_spm {
	uint8_t *type;
	float *score;
	int unk;
	int byte_id[256]; /* -1 without byte fallback */
	int byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws;
	int has_unused;
	int word_cache; /* words can be encoded independently (see below) */
	/* user-defined pieces: longest-prefix matcher */
	tok_map user;
	int n_user;
	uint32_t user_maxlen;
	uint8_t user_first[256];
	char unk_surface[64];
};

static void spm_free(void *p)
{
	struct tok_spm *s = p;
	if (!s)
		return;
	free(s->type);
	free(s->score);
	tok_map_free(&s->user);
	free(s);
}

static const char SPACE[] = "\xe2\x96\x81";       /* U+2581, SentencePiece's space */
static const char REPLACEMENT[] = "\xef\xbf\xbd"; /* U+FFFD, for an invalid byte */

/* ---- protobuf wire format ---- */

typedef struct {
	const uint8_t *p, *end;
} pb;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static int pb_varint(pb *b, uint64_t *v)
{
	uint64_t x = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (b->p >= b->end)
			return -1;
		uint8_t c = *b->p++;
		x |= (uint64_t)(c & 0x7F) << shift;
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1; /* more than 10 bytes */
}

/* Reads a field's value into *v (varint, fixed) or *s, *n (length-delimited). */
static int pb_value(pb *b, unsigned wt, uint64_t *v, const uint8_t **s, size_t *n)
{
	switch (wt) {
	case WT_VARINT:
		return pb_varint(b, v);
	case WT_I64:
		if (b->end - b->p < 8)
			return -1;
		memcpy(v, b->p, 8);
		b->p += 8;
		return 0;
	case WT_I32: {
		if (b->end - b->p < 4)
			return -1;
		uint32_t x;
		memcpy(&x, b->p, 4);
		*v = x;
		b->p += 4;
		return 0;
	}
	case WT_LEN: {
		uint64_t len;
		if (pb_varint(b, &len) || len > (uint64_t)(b->end - b->p))
			return -1;
		*s = b->p;
		*n = (size_t)len;
		b->p += len;
		return 0;
	}
	default: /* groups (3, 4) are not used by sentencepiece_model.proto */
		return -1;
	}
}

typedef struct {
	const char *path;
	const uint8_t *file;
	pp_err *e;
} pctx;

static int bad(pctx *c, const pb *b, const char *what)
{
	return pp_errorf(c->e, PP_ERUNTIME,
			 "%s: not a valid SentencePiece model: %s at byte %zu (a truncated or "
			 "corrupt .model file?)",
			 c->path, what, (size_t)(b->p - c->file));
}

/* One field of a message: its number and wire type, and its value (v for
 * the numeric wire types, s and n for a length-delimited one). */
typedef struct {
	unsigned num, wt;
	uint64_t v;
	const uint8_t *s;
	size_t n;
} pb_field;

/* Iterates over the fields of one message: returns 1 with the field, 0 at the
 * end, -1 on a malformed field (error set). */
static int pb_next(pctx *c, pb *b, pb_field *f)
{
	if (b->p >= b->end)
		return 0;
	uint64_t key;
	if (pb_varint(b, &key) || (key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF) {
		bad(c, b, "bad field key");
		return -1;
	}
	f->num = (unsigned)(key >> 3);
	f->wt = (unsigned)(key & 7);
	f->v = 0;
	f->s = NULL;
	f->n = 0;
	if (pb_value(b, f->wt, &f->v, &f->s, &f->n)) {
		bad(c, b,
		    f->wt == 3 || f->wt == 4 || f->wt > 5 ? "bad wire type" : "truncated field");
		return -1;
	}
	return 1;
}

static int want(pctx *c, const pb *b, const pb_field *f, unsigned expected, const char *msg)
{
	if (f->wt == expected)
		return 0;
	char what[96];
	snprintf(what, sizeof what, "%s field %u has wire type %u, expected %u", msg, f->num, f->wt,
		 expected);
	return bad(c, b, what);
}

typedef struct {
	int model_type, byte_fallback, bos, eos, ws_suffix;
	int add_dummy_prefix, remove_extra_ws, escape_ws;
	char norm_name[64];
	size_t charsmap_len;
	char unk_surface[64];
} spec;

static int parse_trainer(pctx *c, const uint8_t *p, size_t n, spec *sp)
{
	pb b = {p, p + n};
	pb_field f;
	int r;
	while ((r = pb_next(c, &b, &f)) > 0) {
		int *dst = NULL;
		switch (f.num) {
		case 3:
			dst = &sp->model_type;
			break;
		case 24:
			dst = &sp->ws_suffix;
			break;
		case 35:
			dst = &sp->byte_fallback;
			break;
		case 41:
			dst = &sp->bos;
			break;
		case 42:
			dst = &sp->eos;
			break;
		case 44:
			if (want(c, &b, &f, WT_LEN, "TrainerSpec"))
				return -1;
			snprintf(sp->unk_surface, sizeof sp->unk_surface, "%.*s", (int)f.n,
				 (const char *)f.s);
			continue;
		default:
			continue;
		}
		if (want(c, &b, &f, WT_VARINT, "TrainerSpec"))
			return -1;
		*dst = (int)(int32_t)(uint32_t)f.v; /* int32: negatives are 10-byte varints */
	}
	return r;
}

static int parse_normalizer(pctx *c, const uint8_t *p, size_t n, spec *sp)
{
	pb b = {p, p + n};
	pb_field f;
	int r;
	while ((r = pb_next(c, &b, &f)) > 0) {
		int *dst = NULL;
		switch (f.num) {
		case 1:
		case 2:
			if (want(c, &b, &f, WT_LEN, "NormalizerSpec"))
				return -1;
			if (f.num == 1)
				snprintf(sp->norm_name, sizeof sp->norm_name, "%.*s", (int)f.n,
					 (const char *)f.s);
			else
				sp->charsmap_len = f.n;
			continue;
		case 3:
			dst = &sp->add_dummy_prefix;
			break;
		case 4:
			dst = &sp->remove_extra_ws;
			break;
		case 5:
			dst = &sp->escape_ws;
			break;
		default:
			continue;
		}
		if (want(c, &b, &f, WT_VARINT, "NormalizerSpec"))
			return -1;
		*dst = f.v != 0;
	}
	return r;
}

static int parse_piece(pctx *c, const uint8_t *p, size_t n, const uint8_t **str, size_t *len,
		       float *score, int *type)
{
	pb b = {p, p + n};
	pb_field f;
	int r;
	*str = NULL;
	*len = 0;
	*score = 0;
	*type = SP_NORMAL;
	while ((r = pb_next(c, &b, &f)) > 0) {
		if (f.num == 1) {
			if (want(c, &b, &f, WT_LEN, "SentencePiece"))
				return -1;
			*str = f.s;
			*len = f.n;
		} else if (f.num == 2) {
			if (want(c, &b, &f, WT_I32, "SentencePiece"))
				return -1;
			uint32_t x = (uint32_t)f.v;
			memcpy(score, &x, 4);
		} else if (f.num == 3) {
			if (want(c, &b, &f, WT_VARINT, "SentencePiece"))
				return -1;
			*type = f.v >= 1 && f.v <= 6 ? (int)f.v : 0;
		}
	}
	return r;
}

/* "<0x4A>" -> 0x4A, or -1 */
static int byte_piece_value(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	int v = 0;
	for (int i = 3; i < 5; i++) {
		char ch = s[i];
		int d = ch >= '0' && ch <= '9'   ? ch - '0'
			: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
						 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static inline int is_mergeable(int type)
{
	return type == SP_NORMAL || type == SP_USER || type == SP_UNUSED;
}

/* Whether piece p has a character other than "▁" followed by "▁" (a piece
 * that spans the start of a word; see the word cache). */
static int crosses_word(const char *p, size_t n)
{
	int prev_other = 0;
	for (size_t i = 0; i < n;) {
		if (n - i >= 3 && !memcmp(p + i, SPACE, 3)) {
			if (prev_other)
				return 1;
			i += 3;
			prev_other = 0;
		} else {
			uint32_t cp;
			i += tok_utf8_char((const unsigned char *)p + i, n - i, &cp);
			prev_other = 1;
		}
	}
	return 0;
}

static int spm_encode(const pp_tokenizer *t, const char *text, size_t n, tok_ids *out, pp_err *e);
static int spm_decode(const pp_tokenizer *t, const int *ids, size_t n, int flags, tok_text *out,
		      pp_err *e);

int tok_spm_load(pp_tokenizer **tp, const char *path, const unsigned char *buf, size_t n, pp_err *e)
{
	*tp = NULL;
	pctx c = {path, buf, e};
	spec sp = {.model_type = 1,
		   .bos = 1,
		   .eos = 2,
		   .add_dummy_prefix = 1,
		   .remove_extra_ws = 1,
		   .escape_ws = 1,
		   .unk_surface = " \xe2\x81\x87 "};

	/* pass 1: count pieces, read the specs (repeated messages merge: last
	 * value wins) */
	pb b = {buf, buf + n};
	pb_field f;
	int r;
	long npieces = 0;
	while ((r = pb_next(&c, &b, &f)) > 0) {
		if (f.num >= 1 && f.num <= 3 && want(&c, &b, &f, WT_LEN, "ModelProto"))
			return PP_ERUNTIME;
		if (f.num == 1)
			npieces++;
		else if (f.num == 2 && parse_trainer(&c, f.s, f.n, &sp) < 0)
			return PP_ERUNTIME;
		else if (f.num == 3 && parse_normalizer(&c, f.s, f.n, &sp) < 0)
			return PP_ERUNTIME;
	}
	if (r < 0)
		return PP_ERUNTIME;
	if (npieces == 0)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: not a SentencePiece model: it has no pieces (expected a .model "
			"file, a tokenizer.json or a GPT-2 vocab.json)",
			path);
	if (npieces > 0x7FFFFFF)
		return pp_errorf(e, PP_ERUNTIME, "%s: %ld pieces is too many", path, npieces);

	static const char *const mtype[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
	if (sp.model_type != 2)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: SentencePiece model_type %s is not supported: pp encodes BPE "
				 "models (Llama, Mistral, Gemma); train with --model_type=bpe",
				 path,
				 sp.model_type >= 1 && sp.model_type <= 4 ? mtype[sp.model_type]
									  : "?");
	if (sp.charsmap_len)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: normalization rule '%s' (a %zu-byte precompiled character map) "
			"is not supported: pp implements the identity rule only; train with "
			"--normalization_rule_name=identity",
			path, sp.norm_name[0] ? sp.norm_name : "(unnamed)", sp.charsmap_len);
	if (sp.ws_suffix)
		return pp_errorf(e, PP_ERUNTIME, "%s: treat_whitespace_as_suffix is not supported",
				 path);

	pp_tokenizer *t = tok_new((int)npieces);
	struct tok_spm *m = t ? calloc(1, sizeof *m) : NULL;
	if (!m) {
		tok_vocab_free(t);
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	}
	*tp = t;
	t->impl = m;
	t->free_impl = spm_free;
	t->kind = "sentencepiece-bpe";
	t->encode = spm_encode;
	t->decode = spm_decode;
	m->type = calloc((size_t)npieces, 1);
	m->score = calloc((size_t)npieces, sizeof *m->score);
	if (!m->type || !m->score || tok_map_init(&m->user, 16))
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	m->byte_fallback = sp.byte_fallback;
	m->add_dummy_prefix = sp.add_dummy_prefix;
	m->remove_extra_ws = sp.remove_extra_ws;
	m->escape_ws = sp.escape_ws;
	snprintf(m->unk_surface, sizeof m->unk_surface, "%s", sp.unk_surface);
	m->unk = -1;
	for (int i = 0; i < 256; i++)
		m->byte_id[i] = -1;

	/* pass 2: the pieces */
	b = (pb){buf, buf + n};
	int id = 0;
	while (pb_next(&c, &b, &f) > 0) {
		if (f.num != 1)
			continue;
		const uint8_t *str;
		size_t len;
		float score;
		int type;
		if (parse_piece(&c, f.s, f.n, &str, &len, &score, &type) < 0)
			return PP_ERUNTIME;
		if (!str || !len)
			return pp_errorf(e, PP_ERUNTIME, "%s: piece %d is empty", path, id);
		if (!type)
			return pp_errorf(e, PP_ERUNTIME, "%s: piece %d '%.*s' has an unknown type",
					 path, id, (int)(len > 64 ? 64 : len), (const char *)str);
		if (tok_set_piece(t, id, (const char *)str, len))
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
		m->type[id] = (uint8_t)type;
		m->score[id] = score;
		const char *ps = t->pool + t->off[id];
		if (type == SP_UNKNOWN) {
			if (m->unk >= 0)
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: pieces %d and %d are both of type UNKNOWN",
						 path, m->unk, id);
			m->unk = id;
		} else if (type == SP_UNUSED) {
			m->has_unused = 1;
		} else if (type == SP_USER) {
			m->n_user++;
			m->user_first[(uint8_t)ps[0]] = 1;
			if (len > m->user_maxlen)
				m->user_maxlen = (uint32_t)len;
		} else if (type == SP_BYTE) {
			int bv = byte_piece_value(ps, len);
			if (!sp.byte_fallback)
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: byte piece %d '%s' although byte_fallback is false",
					path, id, ps);
			if (bv < 0)
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: piece %d '%s' of type BYTE is not <0xXX>",
						 path, id, ps);
			m->byte_id[bv] = id;
		}
		id++;
	}
	if (tok_index_pieces(t, path, e))
		return PP_ERUNTIME;
	/* keys point into the pool, which has stopped moving */
	for (int i = 0; i < t->n_vocab; i++)
		if (m->type[i] == SP_USER &&
		    tok_map_put(&m->user, t->pool + t->off[i], t->len[i], i, NULL) < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
	if (m->unk < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: no piece of type UNKNOWN (<unk>)", path);
	if (sp.byte_fallback)
		for (int i = 0; i < 256; i++)
			if (m->byte_id[i] < 0)
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: byte_fallback is true but there is no byte piece "
					"<0x%02X>",
					path, i);
	if (sp.bos >= (int)npieces || sp.eos >= (int)npieces || sp.bos < -1 || sp.eos < -1)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: bos_id %d or eos_id %d outside the %ld pieces", path, sp.bos,
				 sp.eos, npieces);
	t->bos = sp.bos;
	t->eos = sp.eos;
	t->unk = m->unk;
	t->type = m->type;
	t->score = m->score;
	t->prep = (tok_prep){m->add_dummy_prefix, m->remove_extra_ws, m->byte_fallback, 0};
	m->word_cache = sp.byte_fallback && !m->has_unused;
	for (int i = 0; i < t->n_vocab && m->word_cache; i++)
		if (is_mergeable(m->type[i]) && crosses_word(t->pool + t->off[i], t->len[i]))
			m->word_cache = 0;
	return 0;
}

/* ---- encoding ---- */

/* Length of the longest user-defined piece at p, or 0. */
static size_t user_match(const struct tok_spm *m, const char *p, size_t n)
{
	if (!m->n_user || !m->user_first[(uint8_t)p[0]])
		return 0;
	for (size_t len = n < m->user_maxlen ? n : m->user_maxlen; len > 0; len--)
		if (tok_map_get(&m->user, p, len) >= 0)
			return len;
	return 0;
}

/* Length of the next normalization/segmentation unit at p: a user-defined
 * piece, else one UTF-8 character (an invalid byte alone). */
static inline size_t unit_len(const struct tok_spm *m, const char *p, size_t n, int *user)
{
	size_t len = user_match(m, p, n);
	if (user)
		*user = len > 0;
	if (len)
		return len;
	if ((unsigned char)p[0] < 0x80)
		return 1;
	uint32_t cp;
	return tok_utf8_char((const unsigned char *)p, n, &cp);
}

/* normalizer.cc's Normalize for an empty precompiled charsmap. out has room
 * for 3 * n + 3 bytes (a space or an invalid byte becomes 3). */
static size_t spm_normalize(const struct tok_spm *m, const char *in, size_t n, char *out)
{
	const char *sp = m->escape_ws ? SPACE : " ";
	size_t splen = m->escape_ws ? 3 : 1, i = 0, o = 0;
	if (m->remove_extra_ws) /* leading spaces */
		while (i < n) {
			size_t len = unit_len(m, in + i, n - i, NULL);
			if (len != 1 || in[i] != ' ')
				break;
			i++;
		}
	if (i == n)
		return 0;
	if (m->add_dummy_prefix) {
		memcpy(out, sp, splen);
		o = splen;
	}
	int prev_space = m->remove_extra_ws;
	while (i < n) {
		int user;
		size_t len = unit_len(m, in + i, n - i, &user);
		const char *u = in + i;
		size_t un = len;
		/* NormalizePrefix: a malformed byte is consumed alone, as U+FFFD */
		if (len == 1 && !user && (unsigned char)*u >= 0x80)
			u = REPLACEMENT, un = 3;
		while (prev_space && un && *u == ' ')
			u++, un--;
		if (un) {
			for (size_t k = 0; k < un; k++) {
				if (u[k] == ' ' && m->escape_ws) {
					memcpy(out + o, SPACE, 3);
					o += 3;
				} else {
					out[o++] = u[k];
				}
			}
			prev_space = u[un - 1] == ' ';
		}
		i += len;
		if (!m->remove_extra_ws)
			prev_space = 0;
	}
	if (m->remove_extra_ws)
		while (o >= splen && memcmp(out + o - splen, sp, splen) == 0)
			o -= splen;
	return o;
}

typedef struct {
	int prev, next;
	uint32_t start, len;
	int freeze;
} symbol;

typedef struct {
	float score;
	int left, right;
	uint32_t size;
} cand;

static inline int cand_before(const cand *a, const cand *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
	cand *h;
	size_t n, cap;
} heap;

static int heap_push(heap *q, cand c)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 256;
		cand *p = realloc(q->h, cap * sizeof *p);
		if (!p)
			return -1;
		q->h = p;
		q->cap = cap;
	}
	size_t i = q->n++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!cand_before(&c, &q->h[parent]))
			break;
		q->h[i] = q->h[parent];
		i = parent;
	}
	q->h[i] = c;
	return 0;
}

static cand heap_pop(heap *q)
{
	cand top = q->h[0], last = q->h[--q->n];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, best;
		if (l >= q->n)
			break;
		best = l + 1 < q->n && cand_before(&q->h[l + 1], &q->h[l]) ? l + 1 : l;
		if (!cand_before(&q->h[best], &last))
			break;
		q->h[i] = q->h[best];
		i = best;
	}
	if (q->n)
		q->h[i] = last;
	return top;
}

typedef struct {
	const pp_tokenizer *t;
	const struct tok_spm *m;
	const char *norm;
	symbol *sym;
	heap q;
	int *rev; /* UNUSED piece id -> left length of its last candidate, 0: none */
	int oom;
} encoder;

static void maybe_add(encoder *w, int left, int right)
{
	if (left < 0 || right < 0 || w->sym[left].freeze || w->sym[right].freeze)
		return;
	const char *p = w->norm + w->sym[left].start;
	uint32_t size = w->sym[left].len + w->sym[right].len;
	int id = tok_map_get(&w->t->map, p, size);
	if (id < 0 || !is_mergeable(w->m->type[id]))
		return;
	if (heap_push(&w->q, (cand){w->m->score[id], left, right, size})) {
		w->oom = 1;
		return;
	}
	if (w->m->type[id] == SP_UNUSED) {
		if (!w->rev && !(w->rev = calloc((size_t)w->t->n_vocab, sizeof *w->rev))) {
			w->oom = 1;
			return;
		}
		w->rev[id] = (int)w->sym[left].len;
	}
}

typedef struct {
	tok_ids *out;
	int prev_unk;
} emitter;

static int emit(encoder *w, emitter *em, const char *p, uint32_t len)
{
	const struct tok_spm *m = w->m;
	int id = tok_map_get(&w->t->map, p, len);
	if (id < 0)
		id = m->unk;
	if (m->type[id] == SP_UNUSED && w->rev && w->rev[id] > 0 && (uint32_t)w->rev[id] < len) {
		uint32_t l = (uint32_t)w->rev[id];
		return emit(w, em, p, l) || emit(w, em, p + l, len - l);
	}
	int is_unk = m->type[id] == SP_UNKNOWN;
	if (is_unk && m->byte_fallback) {
		for (uint32_t i = 0; i < len; i++)
			if (tok_ids_push(em->out, m->byte_id[(uint8_t)p[i]]))
				return -1;
	} else if (!(is_unk && em->prev_unk)) { /* a run of unknowns is one <unk> */
		if (tok_ids_push(em->out, id))
			return -1;
	}
	em->prev_unk = is_unk;
	return 0;
}

/* BPE over norm[a, b) (w->sym has room for b - a symbols), then emit. */
static int encode_range(encoder *w, emitter *em, uint32_t a, uint32_t b)
{
	const struct tok_spm *m = w->m;
	int ns = 0;
	for (uint32_t i = a; i < b;) {
		int user;
		uint32_t len = (uint32_t)unit_len(m, w->norm + i, b - i, &user);
		w->sym[ns] = (symbol){ns - 1, ns + 1, i, len, user};
		ns++;
		i += len;
	}
	if (!ns)
		return 0;
	w->sym[ns - 1].next = -1;
	w->q.n = 0;
	for (int i = 1; i < ns; i++)
		maybe_add(w, i - 1, i);
	while (w->q.n && !w->oom) {
		cand top = heap_pop(&w->q);
		symbol *l = &w->sym[top.left], *r = &w->sym[top.right];
		if (!l->len || !r->len || l->len + r->len != top.size)
			continue; /* stale */
		l->len += r->len;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = top.left;
		r->len = 0;
		maybe_add(w, l->prev, top.left);
		maybe_add(w, top.left, l->next);
	}
	if (w->oom)
		return -1;
	for (int i = 0; i != -1; i = w->sym[i].next)
		if (emit(w, em, w->norm + w->sym[i].start, w->sym[i].len))
			return -1;
	return 0;
}

/* ---- the word cache ----
 * When no mergeable piece contains a character other than "▁" followed by
 * "▁" (true of Llama's and Mistral's vocabularies: they were trained with
 * split_by_whitespace), no merge can cross the start of a word, the
 * position before a "▁" that follows another character. BPE then runs on
 * each word independently: the merges inside one word happen in the same
 * order as in the whole text (the globally best candidate is also its
 * word's best), so words can be encoded once and cached. Models with UNUSED
 * pieces (whose resegmentation depends on the whole text) or without byte
 * fallback (runs of <unk> join across words) do not use the cache.
 * (tokenizer.c has the per-thread cache.) */

/* Length of the word at norm[a, nn): up to the next "▁" that follows a
 * character other than "▁". */
static uint32_t word_len(const char *norm, uint32_t a, uint32_t nn)
{
	uint32_t i = a;
	int prev_space = 0;
	while (i < nn) {
		if (nn - i >= 3 && !memcmp(norm + i, SPACE, 3)) {
			if (i > a && !prev_space)
				break;
			prev_space = 1;
			i += 3;
		} else {
			uint32_t cp;
			i += (unsigned char)norm[i] < 0x80
				     ? 1
				     : (uint32_t)tok_utf8_char((const unsigned char *)norm + i,
							       nn - i, &cp);
			prev_space = 0;
		}
	}
	return i - a;
}

static int spm_encode(const pp_tokenizer *t, const char *text, size_t n, tok_ids *out, pp_err *e)
{
	const struct tok_spm *m = t->impl;
	if (n == 0)
		return 0;
	if (n > (UINT32_MAX - 8) / 3)
		return pp_errorf(e, PP_EUSAGE,
				 "tokenizer: a text of %zu bytes is too long to encode "
				 "at once (split it, e.g. by line)",
				 n);
	char small[1024];
	char *norm = 3 * n + 3 <= sizeof small ? small : malloc(3 * n + 3);
	if (!norm)
		return pp_errorf(e, PP_ERUNTIME, "tokenizer: out of memory for %zu bytes", n);
	uint32_t nn = (uint32_t)spm_normalize(m, text, n, norm);
	encoder w = {t, m, norm, NULL, {0}, NULL, 0};
	emitter em = {out, 0};
	int rc = 0;
	if (nn == 0)
		goto done;
	tok_cache *c = m->word_cache ? tok_cache_get(t) : NULL;
	if (!c) {
		if (!(w.sym = malloc(nn * sizeof *w.sym)) || encode_range(&w, &em, 0, nn))
			goto oom;
		goto done;
	}
	for (uint32_t a = 0, len; a < nn; a += len) {
		len = word_len(norm, a, nn);
		const int *hit;
		size_t k;
		if (tok_cache_find(c, norm + a, len, &hit, &k)) {
			for (size_t i = 0; i < k; i++)
				if (tok_ids_push(out, hit[i]))
					goto oom;
			continue;
		}
		if (!w.sym && !(w.sym = malloc((nn < 4096 ? nn : 4096) * sizeof *w.sym)))
			goto oom;
		if (len > 4096) { /* a long word: room for all of it */
			symbol *p = realloc(w.sym, len * sizeof *p);
			if (!p)
				goto oom;
			w.sym = p;
		}
		size_t before = out->n;
		if (encode_range(&w, &em, a, a + len))
			goto oom;
		tok_cache_put(c, norm + a, len, out->ids + before, out->n - before);
		if (len > 4096) {
			free(w.sym);
			w.sym = NULL;
		}
	}
	goto done;
oom:
	rc = pp_errorf(e, PP_ERUNTIME, "tokenizer: out of memory encoding %zu bytes", n);
done:
	if (norm != small)
		free(norm);
	free(w.sym);
	free(w.q.h);
	free(w.rev);
	return rc;
}

/* ---- decoding ---- */

static int spm_decode(const pp_tokenizer *t, const int *ids, size_t n, int flags, tok_text *out,
		      pp_err *e)
{
	const struct tok_spm *m = t->impl;
	int at_start = !(flags & TOK_DECODE_CONTINUE);
	for (size_t i = 0; i < n; i++) {
		int id = ids[i];
		if (id < 0 || id >= t->n_vocab)
			return pp_errorf(
				e, PP_EUSAGE,
				"tokenizer: id %d at position %zu is outside the vocabulary "
				"(0..%d)",
				id, i, t->n_vocab - 1);
		int type = m->type[id], rc = 0;
		const char *p = t->pool + t->off[id];
		size_t len = t->len[id];
		if (type == SP_CONTROL)
			continue;
		if (type == SP_BYTE) {
			char ch = (char)byte_piece_value(p, len);
			rc = tok_text_append(out, &ch, 1);
		} else if (type == SP_UNKNOWN) {
			rc = tok_text_append(out, m->unk_surface, strlen(m->unk_surface));
		} else {
			if (at_start && m->add_dummy_prefix && len >= 3 && !memcmp(p, SPACE, 3))
				p += 3, len -= 3;
			while (len && !rc) {
				if (len >= 3 && !memcmp(p, SPACE, 3)) {
					rc = tok_text_append(out, " ", 1);
					p += 3, len -= 3;
				} else {
					size_t k = 1;
					while (k < len &&
					       !(len - k >= 3 && !memcmp(p + k, SPACE, 3)))
						k++;
					rc = tok_text_append(out, p, k);
					p += k, len -= k;
				}
			}
		}
		if (rc)
			return pp_errorf(e, PP_ERUNTIME, "tokenizer: out of memory decoding");
		at_start = 0;
	}
	return 0;
}
