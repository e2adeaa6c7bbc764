/* SHA-256 (FIPS 180-4): streaming digest and a whole-file helper. Used to
 * checksum checkpoint files; not meant to be fast, meant to be right. */
#ifndef PP_SHA256_H
#define PP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define SHA256_BYTES 32
#define SHA256_HEX 65 /* 64 hex digits and a NUL */

typedef struct {
	uint32_t h[8];
	uint64_t nbytes;   /* message length so far */
	uint8_t block[64]; /* partial block */
	size_t nblock;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t digest[SHA256_BYTES]);

/* Lower-case hex of a digest. */
void sha256_hex(const uint8_t digest[SHA256_BYTES], char hex[SHA256_HEX]);

/* Hashes the whole file at path into hex; *bytes (if not NULL) gets its size.
 * Errors name the file. */
int sha256_file(const char *path, char hex[SHA256_HEX], int64_t *bytes, pp_err *e);

#endif
