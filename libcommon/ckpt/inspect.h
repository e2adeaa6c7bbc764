/* What pp-ckpt shows of checkpoints: the list of a run's, one checkpoint's
 * contents, the largest differences between two. Each prints to out and
 * returns an error value as the rest of the library does. */
#ifndef PP_CKPT_INSPECT_H
#define PP_CKPT_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "../base/error.h"

/* The checkpoints of run_dir, newest first: step, layout, size, and whether
 * each passes verification (its files' sizes and sha256, its tiling), with
 * the first problem when not; one JSON object per line with json. */
int ckpt_ls(const char *run_dir, bool json, FILE *out, pp_err *e);

/* Config, step, tokens seen, layout, format version, and every tensor with
 * its global shape, dtype and shards; one JSON object with json. */
int ckpt_info(const char *path, bool json, FILE *out, pp_err *e);

/* Per tensor, the largest absolute difference of the parameters of a and b
 * (any two layouts) and the same relative to b's largest magnitude; a line
 * each and a summary. PP_ERUNTIME when a tensor's relative difference is
 * past tol, or a tensor is in one only or shaped differently. */
int ckpt_diff(const char *a, const char *b, double tol, FILE *out, pp_err *e);

#endif
