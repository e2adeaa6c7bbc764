/* What the files of the checkpoint module share (libcommon/ckpt/): paths and
 * names, the manifest's checks, the shard files' attributes. Not an
 * interface: ckpt.h is. */
#ifndef PP_CKPT_INTERNAL_H
#define PP_CKPT_INTERNAL_H

#include <hdf5.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/h5util.h"
#include "../base/sha256.h"
#include "ckpt.h"

#define CKPT_PATH 4096
#define MANIFEST  "manifest.json"

#ifdef PP_F64
#define H5T_MEM_REAL H5T_NATIVE_DOUBLE
#else
#define H5T_MEM_REAL H5T_NATIVE_FLOAT
#endif
#define H5T_FILE_REAL H5T_IEEE_F32LE

/* The groups of a shard file (an optimizer file has the last two). */
enum { G_PARAMS, G_ADAM_M, G_ADAM_V, N_GROUPS };
extern const char *const ckpt_group_name[N_GROUPS];

/* ---- util.c: names, paths, shapes ---- */
/* The two kinds of file in a checkpoint directory. */
enum { F_NONE, F_SHARD, F_OPTIM };
/* The kind of a file name and its mesh coordinates (dp = -1 for a shard,
 * ep = -1 for an optimizer file or a shard of a mesh without ep). */
int ckpt_file_kind(const char *name, int *pp, int *tp, int *dp, int *ep);
/* "step_" and digits only */
bool ckpt_parse_step_name(const char *name, long *step);
/* snprintf that reports truncation as an error (paths, names) */
__attribute__((format(printf, 4, 5))) int ckpt_fmt_checked(char *out, size_t n, pp_err *e,
							   const char *fmt, ...);
int ckpt_join(char *out, size_t n, const char *a, const char *b, pp_err *e);
/* The ep rank in a shard's name for a mesh of ep_size: -1 (none) when 1. */
static inline int ckpt_ep_name(int ep_rank, int ep_size) { return ep_size > 1 ? ep_rank : -1; }
/* The element count, or -1 when it does not fit int64_t (a damaged manifest). */
int64_t ckpt_volume(int ndim, const int64_t *d);
bool ckpt_same_dims(int ndim, const int64_t *a, const int64_t *b);
int ckpt_write_file_synced(const char *path, const char *text, pp_err *e);
void ckpt_h5_close_file(hid_t *f);

/* Where verification sends the problems it finds: each one to fn (with
 * ctx), counted, the first kept; fn NULL stops at the first (ckpt_verify). */
typedef struct {
	void (*fn)(void *ctx, const char *msg);
	void *ctx;
	int n;
	pp_err first;
} ckpt_report;
/* Records problem e in r; true when checking should go on. */
bool ckpt_problem(ckpt_report *r, const pp_err *e);

/* ---- manifest.c ---- */
bool ckpt_version_known(long long v);
int ckpt_cmp_tensor(const void *a, const void *b);
int ckpt_cmp_file(const void *a, const void *b);
int ckpt_file_index(const ckpt_manifest *m, const char *name);
/* The files are exactly the pp x tp (x ep, version 3) shards of the mesh
 * and its pp x tp x dp optimizer files: always in version 2, all or none in
 * version 3. */
int ckpt_check_mesh_files(const char *where, const ckpt_manifest *m, pp_err *e);
/* Tensor t's params, and its m and v, covered exactly once. */
int ckpt_check_cover(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t,
		     pp_err *e);
int ckpt_add_ranges(const char *where, const char *what, ckpt_tensor_info *t, int file,
		    const int64_t *offset, const int64_t *shape, const int64_t *begin,
		    const int64_t *end, int n, pp_err *e);
json_t *ckpt_manifest_to_json(const ckpt_manifest *m);
int ckpt_manifest_read(const char *dir, ckpt_manifest *m, int *version, pp_err *e);
/* The same, going on past the tensors whose blocks do not tile them (and
 * the mesh's missing files) with each reported to r: a manifest that parses
 * comes back (return 0) with r->n problems. */
int ckpt_manifest_read_report(const char *dir, ckpt_manifest *m, ckpt_report *r, pp_err *e);
/* A file's size, and with hash its sha256, against the manifest. */
int ckpt_check_file(const char *dir, const ckpt_file_info *f, bool hash, pp_err *e);
int ckpt_check_file_set(const char *dir, const ckpt_manifest *m, bool hash, pp_err *e);
/* Each listed file's sha256 (and size, where bytes) into hex[i], the files
 * hashed in parallel; the first problem in file order. */
int ckpt_hash_files(const char *dir, const ckpt_manifest *m, char (*hex)[SHA256_HEX],
		    int64_t *bytes, pp_err *e);

/* ---- shard.c: the files' root attributes, writing ---- */
/* Root attributes of a shard or optimizer file, as write_root_attrs writes
 * them. */
typedef struct {
	int64_t version, step, pp_rank, tp_rank, dp_rank, pp_size, tp_size, dp_size;
	int64_t ep_rank, ep_size; /* version 3; else 0 and 1 */
} ckpt_file_attrs;

int ckpt_read_file_attrs(hid_t f, const char *path, const char *name, ckpt_file_attrs *a,
			 pp_err *e);
/* Opens DIR/FILE and checks its root attributes against the manifest. */
int ckpt_file_open(const char *dir, const ckpt_manifest *m, int file, hid_t *out, pp_err *e);
/* global shape and offset of a block ("not sliced", the whole tensor, when
 * global_in is all zero) */
void ckpt_block_of(int nd, const int64_t *shape, const int64_t *global_in, const int64_t *offset_in,
		   int64_t *global, int64_t *offset);
void ckpt_slice_of(const ckpt_tensor *t, int64_t *global, int64_t *offset);
int ckpt_check_tensors(const char *what, const ckpt_state *s, bool saving, pp_err *e);
int ckpt_check_state(const ckpt_state *s, pp_err *e);

/* ---- scan.c: the manifest from the files ---- */
int ckpt_manifest_build(const char *dir, long step, ckpt_manifest *m, pp_err *e);
int ckpt_check_dataset(hid_t f, const char *path, int k, const char *name, int nd,
		       const int64_t *shape, pp_err *e);

#endif
