/* The tokenizer's front door (tokenizer.h): loading by content, and the
 * interface over the loaded tokenizer. The vocabulary, its hash maps and
 * the word caches are in vocab.c; the algorithms in spm.c (SentencePiece
 * BPE) and bpe.c (byte-level BPE). */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "../base/fsutil.h"
#include "internal.h"

int tok_load(pp_tokenizer **t, const char *path, pp_err *e)
{
	*t = NULL;
	char *buf;
	size_t n;
	int rc = fs_read_file(path, &buf, &n, e);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
		i++;
	char fp[SHA256_HEX] = "";
	if (n == 0) {
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s: empty file (expected a SentencePiece .model, a "
			       "tokenizer.json or a GPT-2 vocab.json)",
			       path);
	} else if (i < n && buf[i] == '{' && buf[0] != 0x0A) {
		/* JSON; the GPT-2 pair's fingerprint covers merges.txt too. (A
		 * protobuf starts with 0x0A, '\n', the key of its first piece.) */
		rc = tok_bpe_load_json(t, path, buf, n, fp, e);
	} else {
		rc = tok_spm_load(t, path, (const unsigned char *)buf, n, e);
		sha256_ctx c;
		if (!rc && !(rc = sha256_init(&c, e))) {
			uint8_t d[SHA256_BYTES];
			sha256_update(&c, buf, n);
			sha256_final(&c, d);
			sha256_hex(d, fp);
		}
	}
	free(buf);
	if (rc) {
		tok_vocab_free(*t);
		*t = NULL;
		return rc;
	}
	memcpy((*t)->fingerprint, fp, SHA256_HEX);
	return 0;
}

void tok_free(pp_tokenizer *t) { tok_vocab_free(t); }

int tok_vocab_size(const pp_tokenizer *t) { return t->n_vocab; }
int tok_bos(const pp_tokenizer *t) { return t->bos; }
int tok_eos(const pp_tokenizer *t) { return t->eos; }
const char *tok_kind(const pp_tokenizer *t) { return t->kind; }
const char *tok_fingerprint(const pp_tokenizer *t) { return t->fingerprint; }

int tok_piece_type(const pp_tokenizer *t, int id)
{
	return id < 0 || id >= t->n_vocab || !t->type ? 0 : t->type[id];
}

float tok_piece_score(const pp_tokenizer *t, int id)
{
	return id < 0 || id >= t->n_vocab || !t->score ? 0 : t->score[id];
}

int tok_unk(const pp_tokenizer *t) { return t->unk; }
int tok_n_merges(const pp_tokenizer *t) { return t->n_merges; }
int tok_adds_bos(const pp_tokenizer *t) { return t->add_bos; }
tok_prep tok_get_prep(const pp_tokenizer *t) { return t->prep; }

int tok_merge(const pp_tokenizer *t, int rank, int *left, int *right)
{
	if (rank < 0 || rank >= t->n_merges)
		return -1;
	*left = t->merge[rank][0];
	*right = t->merge[rank][1];
	return 0;
}

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
