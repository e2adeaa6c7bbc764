/* The GGUF container, private to the GGUF format (gguf.c, gguf_tok.c): a
 * mapped file checked whole at open, its metadata by key, and the pieces a
 * writer emits.
 *
 * Layout (little-endian, versions 2 and 3 alike):
 *   "GGUF", uint32 version, uint64 n_tensors, uint64 n_kv
 *   n_kv x {string key, uint32 type, value}
 *   n_tensors x {string name, uint32 n_dims, uint64 ne[n_dims], uint32 type,
 *                uint64 offset}
 *   zero padding to general.alignment (default 32), then the data section;
 *   each tensor at data + offset (a multiple of the alignment).
 * A string is uint64 length + bytes (no NUL); an array is uint32 element
 * type + uint64 count + the elements (arrays of arrays too). ne[0] is the
 * fastest dimension: pp's shape is ne reversed. */
#ifndef PP_GGUF_FILE_H
#define PP_GGUF_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../tok/tokenizer.h"
#include "gguf_quant.h"

/* metadata value types */
enum {
	GV_U8,
	GV_I8,
	GV_U16,
	GV_I16,
	GV_U32,
	GV_I32,
	GV_F32,
	GV_BOOL,
	GV_STRING,
	GV_ARRAY,
	GV_U64,
	GV_I64,
	GV_F64,
	GV_NTYPES
};

#define GGUF_MAX_DIMS    4
#define GGUF_MAX_TENSORS (1 << 20)
#define GGUF_MAX_KV      (1 << 16)
#define GGUF_MAX_NAME    255

typedef struct {
	const char *s; /* into the map: not NUL-terminated */
	uint64_t n;
} gguf_str;

typedef struct {
	gguf_str key;
	uint32_t type;
	uint32_t atype; /* arrays: the element type */
	uint64_t count; /* arrays: the element count */
	uint64_t at;    /* file offset of the value (arrays: of the first element) */
} gguf_kv;

typedef struct {
	gguf_str name;
	int ndim;
	int64_t ne[GGUF_MAX_DIMS];
	int64_t numel;
	const gguf_type *type;
	uint64_t offset; /* in the data section */
	uint64_t nbytes;
} gguf_tinfo;

typedef struct {
	char path[4096];
	const uint8_t *map;
	size_t size;
	uint32_t version;
	uint64_t n_kv, n_tensors;
	gguf_kv *kv;
	gguf_tinfo *ti;
	uint64_t alignment;
	uint64_t data; /* file offset of the data section */
} gguf_file;

/* Maps path and checks everything against the file: header, every value,
 * every tensor info (dims, type, size, offset inside the data section, no
 * two tensors overlapping). Errors name the file and what is wrong. */
int gguf_file_open(gguf_file *f, const char *path, pp_err *e);
void gguf_file_close(gguf_file *f);
/* The tensor's bytes. */
static inline const uint8_t *gguf_tensor_data(const gguf_file *f, const gguf_tinfo *t)
{
	return f->map + f->data + t->offset;
}

/* ---- metadata by key ---- */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
/* Each returns 0 when the key is absent and not required (out untouched),
 * an error naming the file and key when it is required or of another type. */
int gguf_get_uint(const gguf_file *f, const char *key, bool required, uint64_t *out, pp_err *e);
int gguf_get_float(const gguf_file *f, const char *key, bool required, double *out, pp_err *e);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, pp_err *e);
int gguf_get_string(const gguf_file *f, const char *key, bool required, gguf_str *out, pp_err *e);
/* An array of atype (any element type for atype < 0); *kv NULL when absent
 * and not required. */
int gguf_get_array(const gguf_file *f, const char *key, int atype, bool required,
		   const gguf_kv **kv, pp_err *e);
/* Element i of a numeric array kv as a double / an int64. */
double gguf_array_num(const gguf_file *f, const gguf_kv *kv, uint64_t i);
/* Walks a string array: *pos starts at kv->at; each call gives the next
 * string (the array was checked at open). */
gguf_str gguf_array_next_str(const gguf_file *f, uint64_t *pos);
/* Whether s equals the C string c. */
bool gguf_str_is(gguf_str s, const char *c);

/* ---- writing ---- */
typedef struct {
	uint8_t *p;
	size_t n, cap;
	uint64_t n_kv;
	bool oom;
} gguf_buf;

void gguf_put_u32(gguf_buf *b, uint32_t v);
void gguf_put_u64(gguf_buf *b, uint64_t v);
void gguf_put_bytes(gguf_buf *b, const void *p, size_t n);
void gguf_put_str(gguf_buf *b, const char *s, size_t n);
/* key/value pairs (each counts one in b->n_kv) */
void gguf_kv_u32(gguf_buf *b, const char *key, uint32_t v);
void gguf_kv_i32(gguf_buf *b, const char *key, int32_t v);
void gguf_kv_f32(gguf_buf *b, const char *key, float v);
void gguf_kv_bool(gguf_buf *b, const char *key, bool v);
void gguf_kv_str(gguf_buf *b, const char *key, const char *v);
/* An array's header: the elements follow, written with gguf_put_*. */
void gguf_kv_array(gguf_buf *b, const char *key, uint32_t atype, uint64_t count);

/* ---- the tokenizer (gguf_tok.c) ---- */

/* Writes the tokenizer of f's metadata (tokenizer.ggml.*) into dir as a
 * file tok_load reads: "gpt2" as tokenizer.json (with tokenizer_config.json
 * for BOS, EOS and add_bos_token), "llama" as a SentencePiece
 * tokenizer.model. path gets the file's path, "" when f has no tokenizer;
 * *add_bos gets tokenizer.ggml.add_bos_token. vocab: the model's rows (no
 * more tokens than that). */
int gguf_tok_export(const gguf_file *f, const char *dir, int vocab, char *path, size_t n,
		    bool *add_bos, pp_err *e);
/* Emits tk as tokenizer.ggml.* pairs, padded to vocab tokens (as llama.cpp's
 * converter pads: "[PAD<id>]", unused). */
int gguf_tok_emit(gguf_buf *b, const pp_tokenizer *tk, int vocab, bool add_bos, pp_err *e);

#endif
