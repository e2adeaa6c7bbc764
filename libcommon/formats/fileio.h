/* File steps the format readers and writers share: whole reads and writes
 * at an offset (retrying short ones), and the directory an output goes in. */
#ifndef PP_FORMATS_FILEIO_H
#define PP_FORMATS_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "../base/error.h"

/* n bytes at off, all of them: a read that ends early is an error naming
 * path ("ends early" for a file shorter than that). */
int fio_pread(int fd, const char *path, void *buf, size_t n, int64_t off, pp_err *e);
int fio_pwrite(int fd, const char *path, const void *buf, size_t n, int64_t off, pp_err *e);

/* mkdir -p of the directory that will hold path (nothing for a bare name). */
int fio_make_parent(const char *path, pp_err *e);

#endif
