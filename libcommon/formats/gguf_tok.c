/* The tokenizer in GGUF metadata (tokenizer.ggml.*), both ways: into a file
 * that tok_load reads, and out of a loaded tokenizer (gguf_file.h).
 *
 *   tokenizer.ggml.model "gpt2"   byte-level BPE: tokens (spelled with GPT-2's
 *                                 bytes_to_unicode), merges "a b" in rank
 *                                 order, token_type; pre names llama.cpp's
 *                                 pre-tokenizer regex
 *   tokenizer.ggml.model "llama"  SentencePiece BPE: tokens ("▁" for space,
 *                                 <0xXX> bytes), scores, token_type
 *   tokenizer.ggml.model "no_vocab" (or "none"): no tokenizer
 * token_type numbers pieces as SentencePiece does (TOK_NORMAL ...). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../tok/tokenizer.h"
#include "gguf_file.h"

/* llama.cpp's pre-tokenizers (tokenizer.ggml.pre) that pp's byte-level BPE
 * implements: GPT-2's regex alone, or after splitting off each digit
 * (\p{N}). "default" (and none) is llama.cpp's own regex, which pp has not. */
static const char *const pre_gpt2[] = {"gpt-2",    "phi-2",  "mpt",      "olmo", "jais",
				       "trillion", "mellum", "gigachat", NULL};
static const char *const pre_digits[] = {"smollm",    "starcoder", "refact",     "codeshell",
					 "command-r", "exaone",    "minerva-7b", NULL};

static bool in_list(gguf_str s, const char *const *list)
{
	for (; *list; list++)
		if (gguf_str_is(s, *list))
			return true;
	return false;
}

/* ---- GGUF -> a file tok_load reads ---- */

typedef struct {
	const gguf_file *f;
	uint64_t n; /* tokens */
	const gguf_kv *tokens, *types, *scores;
	int64_t bos, eos, unk;
	gguf_str chat; /* tokenizer.chat_template; s NULL when absent */
	char dir[4096];
	pp_err *e;
} tok_src;

static int token_type(const tok_src *s, uint64_t i)
{
	return s->types ? (int)gguf_array_num(s->f, s->types, i) : TOK_NORMAL;
}

/* a token for messages */
static const char *shown(gguf_str t, char buf[80])
{
	size_t n = t.n < 64 ? (size_t)t.n : 64, j = 0;
	for (size_t i = 0; i < n; i++)
		buf[j++] = t.s[i] >= 0x20 && t.s[i] != 0x7F ? t.s[i] : '?';
	buf[j] = 0;
	return buf;
}

static int write_json(const tok_src *s, json_t *root, const char *name, char *path, size_t n)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/%s", s->dir, name);
	int bad = !root || json_dump_file(root, p, JSON_COMPACT);
	json_decref(root);
	if (bad)
		return pp_errorf(s->e, PP_ERUNTIME, "%s: cannot write the tokenizer as %s",
				 s->f->path, p);
	if (path)
		snprintf(path, n, "%s", p);
	return 0;
}

/* "gpt2": tokenizer.json and tokenizer_config.json */
static int export_bpe(const tok_src *s, bool add_bos, char *path, size_t pn)
{
	const gguf_file *f = s->f;
	pp_err *e = s->e;
	gguf_str pre = {"(none)", 6};
	const gguf_kv *merges;
	int rc = gguf_get_string(f, "tokenizer.ggml.pre", false, &pre, e);
	if (!rc)
		rc = gguf_get_array(f, "tokenizer.ggml.merges", GV_STRING, true, &merges, e);
	if (rc)
		return rc;
	char buf[80];
	json_t *pt;
	if (in_list(pre, pre_gpt2))
		pt = json_pack("{sssbsbsb}", "type", "ByteLevel", "add_prefix_space", 0,
			       "trim_offsets", 1, "use_regex", 1);
	else if (in_list(pre, pre_digits))
		pt = json_pack("{ss s[{sssb} {sssbsbsb}]}", "type", "Sequence", "pretokenizers",
			       "type", "Digits", "individual_digits", 1, "type", "ByteLevel",
			       "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1);
	else
		return pp_errorf(
			e, PP_EUSAGE,
			"%s: tokenizer.ggml.pre '%s': a pre-tokenizer pp does not implement "
			"(pp splits text with GPT-2's regex, optionally after single digits: "
			"gpt-2, smollm, starcoder, ...)",
			f->path, shown(pre, buf));
	json_t *vocab = json_object(), *added = json_array(), *ml = json_array();
	json_t *root = json_pack(
		"{sss[]snsosnsoso}", "version", "1.0", "added_tokens", "normalizer",
		"pre_tokenizer", pt, "post_processor", "decoder",
		json_pack("{sssbsbsb}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets",
			  1, "use_regex", 1),
		"model", json_pack("{sssoso}", "type", "BPE", "vocab", vocab, "merges", ml));
	if (!root || !vocab || !added || !ml) {
		json_decref(root);
		json_decref(added);
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", f->path);
	}
	json_object_set(root, "added_tokens", added);
	json_decref(added);
	uint64_t pos = s->tokens->at;
	for (uint64_t i = 0; i < s->n && !rc; i++) {
		gguf_str t = gguf_array_next_str(f, &pos);
		json_t *str = memchr(t.s, 0, t.n) ? NULL : json_stringn(t.s, t.n);
		if (!str) {
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: token %llu '%s' is not valid UTF-8 without NUL bytes, as "
				"a byte-level BPE token must be",
				f->path, (unsigned long long)i, shown(t, buf));
			break;
		}
		const int type = token_type(s, i);
		/* a token spelled like an earlier one stays an added token */
		const bool dup = json_object_get(vocab, json_string_value(str)) != NULL;
		if (!dup)
			json_object_set_new(vocab, json_string_value(str),
					    json_integer((json_int_t)i));
		/* every field Hugging Face writes: tokenizers releases before 0.21
		 * refuse an entry without them */
		const bool special = type != TOK_USER_DEFINED;
		if (dup || type == TOK_CONTROL || type == TOK_USER_DEFINED || type == TOK_UNKNOWN)
			json_array_append_new(
				added, json_pack("{sIsOsbsbsbsbsb}", "id", (json_int_t)i, "content",
						 str, "single_word", 0, "lstrip", 0, "rstrip", 0,
						 "normalized", !special, "special", special));
		json_decref(str);
	}
	pos = merges->at;
	for (uint64_t i = 0; i < merges->count && !rc; i++) {
		gguf_str m = gguf_array_next_str(f, &pos);
		json_t *str = memchr(m.s, 0, m.n) ? NULL : json_stringn(m.s, m.n);
		if (!str)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: merge %llu '%s' is not valid UTF-8 without NUL bytes",
				       f->path, (unsigned long long)i, shown(m, buf));
		else
			json_array_append_new(ml, str);
	}
	if (rc) {
		json_decref(root);
		return rc;
	}
	json_object_set_new(json_object_get(root, "model"), "ignore_merges", json_false());
	if ((rc = write_json(s, root, "tokenizer.json", path, pn)))
		return rc;
	json_t *cfg = json_pack("{sb}", "add_bos_token", add_bos);
	if (cfg && s->chat.s)
		json_object_set_new(cfg, "chat_template", json_stringn(s->chat.s, s->chat.n));
	int64_t ids[2] = {s->bos, s->eos};
	const char *keys[2] = {"bos_token", "eos_token"};
	for (int k = 0; k < 2 && cfg; k++) {
		if (ids[k] < 0)
			continue;
		uint64_t p = s->tokens->at;
		gguf_str t = {0};
		for (int64_t i = 0; i <= ids[k]; i++)
			t = gguf_array_next_str(f, &p);
		json_object_set_new(cfg, keys[k], json_stringn(t.s, t.n));
	}
	return write_json(s, cfg, "tokenizer_config.json", NULL, 0);
}

/* ---- a SentencePiece ModelProto, as tok/spm.c reads it ---- */

static void pb_varint(gguf_buf *b, uint64_t v)
{
	uint8_t x[10];
	size_t n = 0;
	do {
		x[n++] = (uint8_t)(v & 0x7F) | (v > 0x7F ? 0x80 : 0);
		v >>= 7;
	} while (v);
	gguf_put_bytes(b, x, n);
}

static void pb_key(gguf_buf *b, unsigned field, unsigned wt)
{
	pb_varint(b, (uint64_t)field << 3 | wt);
}

/* int32 fields: negatives as 10-byte varints, as protobuf writes them */
static void pb_int(gguf_buf *b, unsigned field, int64_t v)
{
	pb_key(b, field, 0);
	pb_varint(b, (uint64_t)v);
}

static void pb_bytes(gguf_buf *b, unsigned field, const void *p, size_t n)
{
	pb_key(b, field, 2);
	pb_varint(b, n);
	gguf_put_bytes(b, p, n);
}

/* "llama": tokenizer.model */
static int export_spm(const tok_src *s, bool add_bos, char *path, size_t pn)
{
	const gguf_file *f = s->f;
	pp_err *e = s->e;
	bool add_space = true, remove_ws = false;
	int rc = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &add_space, e);
	if (!rc)
		rc = gguf_get_bool(f, "tokenizer.ggml.remove_extra_whitespaces", &remove_ws, e);
	if (rc)
		return rc;
	gguf_buf m = {0}, piece = {0}, spec = {0};
	bool byte_fallback = false;
	uint64_t pos = s->tokens->at;
	char buf[80];
	for (uint64_t i = 0; i < s->n && !rc; i++) {
		gguf_str t = gguf_array_next_str(f, &pos);
		int type = token_type(s, i);
		if (type == 0) /* llama.cpp's "undefined" */
			type = TOK_NORMAL;
		if ((int64_t)i == s->unk)
			type = TOK_UNKNOWN;
		if (type < TOK_NORMAL || type > TOK_BYTE) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: token %llu '%s' has token_type %d (1 to 6)", f->path,
				       (unsigned long long)i, shown(t, buf), type);
			break;
		}
		byte_fallback |= type == TOK_BYTE;
		float score = s->scores ? (float)gguf_array_num(f, s->scores, i) : 0.0f;
		piece.n = 0;
		pb_bytes(&piece, 1, t.s, (size_t)t.n);
		pb_key(&piece, 2, 5);
		gguf_put_bytes(&piece, &score, 4);
		pb_int(&piece, 3, type);
		pb_bytes(&m, 1, piece.p, piece.n);
	}
	/* TrainerSpec: model_type BPE, byte_fallback, unk, bos, eos ids */
	pb_int(&spec, 3, 2);
	pb_int(&spec, 35, byte_fallback);
	pb_int(&spec, 40, s->unk);
	pb_int(&spec, 41, s->bos);
	pb_int(&spec, 42, s->eos);
	pb_bytes(&m, 2, spec.p, spec.n);
	/* NormalizerSpec: the identity rule */
	spec.n = 0;
	pb_bytes(&spec, 1, "identity", 8);
	pb_int(&spec, 3, add_space);
	pb_int(&spec, 4, remove_ws);
	pb_int(&spec, 5, 1);
	pb_bytes(&m, 3, spec.p, spec.n);
	if (!rc && (m.oom || piece.oom || spec.oom))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: out of memory", f->path);
	char p[4200];
	snprintf(p, sizeof p, "%s/tokenizer.model", s->dir);
	FILE *out = rc ? NULL : fopen(p, "wb");
	if (!rc && (!out || fwrite(m.p, 1, m.n, out) != m.n || fclose(out)))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot write the tokenizer as %s", f->path, p);
	if (!rc)
		snprintf(path, pn, "%s", p);
	free(m.p);
	free(piece.p);
	free(spec.p);
	/* the chat template, where the model has one, as Hugging Face keeps it */
	if (!rc && s->chat.s)
		rc = write_json(s,
				json_pack("{sbss#}", "add_bos_token", add_bos, "chat_template",
					  s->chat.s, (size_t)s->chat.n),
				"tokenizer_config.json", NULL, 0);
	return rc;
}

/* An optional token id: -1 when absent; else below n. */
static int token_id(const gguf_file *f, const char *key, uint64_t n, int64_t *id, pp_err *e)
{
	uint64_t v = UINT64_MAX;
	int rc = gguf_get_uint(f, key, false, &v, e);
	*id = -1;
	if (rc || v == UINT64_MAX)
		return rc;
	if (v >= n)
		return pp_errorf(e, PP_ERUNTIME, "%s: %s is %llu, outside the %llu tokens", f->path,
				 key, (unsigned long long)v, (unsigned long long)n);
	*id = (int64_t)v;
	return 0;
}

int gguf_tok_export(const gguf_file *f, const char *dir, int vocab, char *path, size_t pn,
		    bool *add_bos, pp_err *e)
{
	path[0] = 0;
	gguf_str model = {0};
	int rc = gguf_get_string(f, "tokenizer.ggml.model", false, &model, e);
	if (rc || !model.s || gguf_str_is(model, "no_vocab") || gguf_str_is(model, "none"))
		return rc;
	tok_src s = {.f = f, .e = e};
	snprintf(s.dir, sizeof s.dir, "%s", dir);
	const bool bpe = gguf_str_is(model, "gpt2"), spm = gguf_str_is(model, "llama");
	char buf[80];
	if (!bpe && !spm)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: tokenizer.ggml.model '%s': pp reads 'gpt2' (byte-level BPE) "
				 "and 'llama' (SentencePiece) tokenizers",
				 f->path, shown(model, buf));
	if ((rc = gguf_get_array(f, "tokenizer.ggml.tokens", GV_STRING, true, &s.tokens, e)) ||
	    (rc = gguf_get_array(f, "tokenizer.ggml.token_type", -1, false, &s.types, e)) ||
	    (rc = gguf_get_array(f, "tokenizer.ggml.scores", -1, false, &s.scores, e)))
		return rc;
	s.n = s.tokens->count;
	if (s.n == 0 || s.n > (uint64_t)vocab)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: the tokenizer has %llu tokens and the model's embedding %d rows: "
			"expected 1 to %d tokens",
			f->path, (unsigned long long)s.n, vocab, vocab);
	const gguf_kv *arr[2] = {s.types, s.scores};
	const char *names[2] = {"token_type", "scores"};
	for (int k = 0; k < 2; k++)
		if (arr[k] && (arr[k]->count != s.n || arr[k]->atype == GV_STRING ||
			       arr[k]->atype == GV_ARRAY))
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: tokenizer.ggml.%s: expected %llu numbers, one per token",
				f->path, names[k], (unsigned long long)s.n);
	if ((rc = token_id(f, "tokenizer.ggml.bos_token_id", s.n, &s.bos, e)) ||
	    (rc = token_id(f, "tokenizer.ggml.eos_token_id", s.n, &s.eos, e)) ||
	    (rc = token_id(f, "tokenizer.ggml.unknown_token_id", s.n, &s.unk, e)))
		return rc;
	*add_bos = spm; /* llama.cpp's default for each */
	if ((rc = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", add_bos, e)))
		return rc;
	if ((rc = gguf_get_string(f, "tokenizer.chat_template", false, &s.chat, e)))
		return rc;
	return bpe ? export_bpe(&s, *add_bos, path, pn) : export_spm(&s, *add_bos, path, pn);
}

/* ---- a loaded tokenizer -> GGUF metadata ---- */

/* The piece of id as GGUF spells it; pads and ids without a token are
 * "[PAD<id>]". */
static const char *piece(const pp_tokenizer *tk, int id, size_t *len, char pad[32])
{
	const char *p = id < tok_vocab_size(tk) ? tok_piece(tk, id, len) : NULL;
	if (!p || !*len) {
		*len = (size_t)snprintf(pad, 32, "[PAD%d]", id);
		return pad;
	}
	return p;
}

int gguf_tok_emit(gguf_buf *b, const pp_tokenizer *tk, int vocab, bool add_bos, pp_err *e)
{
	const int n = tok_vocab_size(tk);
	const bool spm = !strcmp(tok_kind(tk), "sentencepiece-bpe");
	const tok_prep prep = tok_get_prep(tk);
	if (n > vocab)
		return pp_errorf(e, PP_EUSAGE,
				 "the tokenizer has %d tokens but the model's vocabulary %d", n,
				 vocab);
	const char *pre = NULL;
	if (!spm) {
		if (prep.add_space_prefix || prep.split_digits > 1)
			return pp_errorf(e, PP_EUSAGE,
					 "the tokenizer's pre-tokenizer (%s%s) has no llama.cpp "
					 "name: GGUF export takes GPT-2's, optionally after single "
					 "digits",
					 prep.add_space_prefix ? "add_prefix_space" : "",
					 prep.split_digits > 1 ? " runs of digits" : "");
		pre = prep.split_digits ? "smollm" : "gpt-2";
	}
	gguf_kv_str(b, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
	if (pre)
		gguf_kv_str(b, "tokenizer.ggml.pre", pre);
	char pad[32];
	gguf_kv_array(b, "tokenizer.ggml.tokens", GV_STRING, (uint64_t)vocab);
	for (int i = 0; i < vocab; i++) {
		size_t len;
		const char *p = piece(tk, i, &len, pad);
		gguf_put_str(b, p, len);
	}
	if (spm) {
		gguf_kv_array(b, "tokenizer.ggml.scores", GV_F32, (uint64_t)vocab);
		for (int i = 0; i < vocab; i++) {
			float s = i < n ? tok_piece_score(tk, i) : -1e9f;
			gguf_put_bytes(b, &s, 4);
		}
	}
	gguf_kv_array(b, "tokenizer.ggml.token_type", GV_I32, (uint64_t)vocab);
	for (int i = 0; i < vocab; i++) {
		size_t len = 0;
		int32_t t = i < n ? tok_piece_type(tk, i) : TOK_UNUSED;
		if (i < n && !tok_piece(tk, i, &len)[0])
			t = TOK_UNUSED;
		gguf_put_bytes(b, &t, 4);
	}
	if (!spm) {
		const int m = tok_n_merges(tk);
		gguf_kv_array(b, "tokenizer.ggml.merges", GV_STRING, (uint64_t)m);
		for (int r = 0; r < m; r++) {
			int l, rr;
			size_t ll, rl;
			tok_merge(tk, r, &l, &rr);
			const char *a = tok_piece(tk, l, &ll), *c = tok_piece(tk, rr, &rl);
			gguf_put_u64(b, ll + 1 + rl);
			gguf_put_bytes(b, a, ll);
			gguf_put_bytes(b, " ", 1);
			gguf_put_bytes(b, c, rl);
		}
	}
	if (tok_bos(tk) >= 0)
		gguf_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)tok_bos(tk));
	if (tok_eos(tk) >= 0)
		gguf_kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)tok_eos(tk));
	if (tok_unk(tk) >= 0)
		gguf_kv_u32(b, "tokenizer.ggml.unknown_token_id", (uint32_t)tok_unk(tk));
	gguf_kv_bool(b, "tokenizer.ggml.add_bos_token", add_bos);
	gguf_kv_bool(b, "tokenizer.ggml.add_eos_token", false);
	if (spm) {
		gguf_kv_bool(b, "tokenizer.ggml.add_space_prefix", prep.add_space_prefix);
		gguf_kv_bool(b, "tokenizer.ggml.remove_extra_whitespaces",
			     prep.remove_extra_whitespaces);
	}
	return b->oom ? pp_errorf(e, PP_ERUNTIME, "out of memory for the tokenizer's metadata") : 0;
}
