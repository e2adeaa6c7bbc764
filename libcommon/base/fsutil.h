/* File-system steps that make writes durable: the tools never leave a
 * half-written file in place of a good one (write to a temporary name,
 * fsync, rename, fsync the directory). */
#ifndef PP_FSUTIL_H
#define PP_FSUTIL_H

#include <stddef.h>

#include "error.h"

/* fsync a file or directory by path (a directory that cannot be fsynced on
 * this file system is not an error). */
int fs_fsync_path(const char *path, pp_err *e);
/* fsync the directory holding path: makes a create or rename in it durable. */
int fs_fsync_parent(const char *path, pp_err *e);
/* Puts a finished tmp (a file or directory, already fsynced) in place as
 * path: rename, then fsync path's directory so that the rename itself
 * survives a crash. Errors name both. */
int fs_rename_durable(const char *tmp, const char *path, pp_err *e);
/* The temporary name a writer of path uses before fs_rename_durable:
 * ".NAME.tmp-PID" in path's directory. PP_EUSAGE when it does not fit n. */
int fs_tmp_name(const char *path, char *tmp, size_t n, pp_err *e);
/* mkdir -p; each directory created is made durable in its parent. */
int fs_mkdir_p(const char *path, pp_err *e);
/* The same, and the first directory it had to make goes to made ("" when
 * path existed): what fs_rmdir_upto takes away again. */
int fs_mkdir_p_made(const char *path, char *made, size_t made_size, pp_err *e);
/* Removes path and its parents up to made (fs_mkdir_p_made's), each only
 * while it is empty: leaves no trace of directories made for a probe. */
void fs_rmdir_upto(const char *path, const char *made);
/* rm -rf: files first, then the directories (depth first). 0 or -1 (errno). */
int fs_rm_rf(const char *path);

/* Reads the whole file into *buf (malloc'd, NUL-terminated; *n bytes without
 * the NUL). Errors name the file. */
int fs_read_file(const char *path, char **buf, size_t *n, pp_err *e);

/* The inputs a reader of text takes: n of them at *paths, "-" (or n == 0,
 * which sets them to it) standard input; each a readable file or stream
 * (PP_EUSAGE naming it); *total their bytes, -1 when one has no known size. */
int fs_inputs(char *const **paths, int *n, int64_t *total, pp_err *e);

#endif
