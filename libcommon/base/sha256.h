/* SHA-256 through OpenSSL's libcrypto (which uses the CPU's SHA extensions
 * where present): a streaming digest and a whole-file helper. Checkpoint
 * manifests and tokenizer fingerprints use it. */
#ifndef PP_SHA256_H
#define PP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define SHA256_BYTES 32
#define SHA256_HEX   65 /* 64 hex digits and a NUL */

typedef struct {
	void *md;        /* EVP_MD_CTX */
	uint64_t nbytes; /* message length so far */
} sha256_ctx;

/* Fails (PP_ERUNTIME) only when libcrypto cannot set up a digest. A
 * successful init is ended by sha256_final, or sha256_discard on an error
 * path. */
int sha256_init(sha256_ctx *c, pp_err *e);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t digest[SHA256_BYTES]);
void sha256_discard(sha256_ctx *c);

/* Lower-case hex of a digest. */
void sha256_hex(const uint8_t digest[SHA256_BYTES], char hex[SHA256_HEX]);

/* Hashes the whole file at path into hex; *bytes (if not NULL) gets its size.
 * Errors name the file. */
int sha256_file(const char *path, char hex[SHA256_HEX], int64_t *bytes, pp_err *e);

#endif
