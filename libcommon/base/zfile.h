/* A file's bytes as a stream, decompressed when they are gzip (zlib) or
 * Zstandard (libzstd) data: known by their first bytes, whatever the name;
 * a name ending in .gz or .zst whose bytes are neither is an error (of the
 * first read). gzip
 * members and zstd frames may follow one another (as cat of two files
 * makes). Memory: one input block and the decompressor's window.
 *
 * Errors begin "PATH: ": PP_EUSAGE for a file that cannot be opened and for
 * damaged data (corrupt, or truncated: the data ends inside a member or a
 * frame), PP_ERUNTIME for a failing read. */
#ifndef PP_BASE_ZFILE_H
#define PP_BASE_ZFILE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct zfile zfile;

/* path "-" is standard input */
int zfile_open(zfile **z, const char *path, pp_err *e);
/* Up to n decompressed bytes into buf; *got 0 only at the end. */
int zfile_read(zfile *z, void *buf, size_t n, size_t *got, pp_err *e);
/* "plain", "gzip" or "zstd" */
const char *zfile_kind(const zfile *z);
/* bytes of the file read so far (compressed, for progress) */
uint64_t zfile_bytes_read(const zfile *z);
void zfile_close(zfile *z);

#endif
