/* Sharded HDF5 checkpoints. The format is written down in
 * checkpoints-format/README.md; this file is one reader and writer of it.
 *
 * Every entry point quiets HDF5's own error printing and reports its own
 * message naming the checkpoint, file and tensor at fault. The manifest is
 * the one description of a checkpoint: ckpt_commit builds it from the shard
 * files, and every reader (find_latest, verify, load) starts from it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, nftw */
#endif
#include "ckpt.h"
#include "fsutil.h"
#include "h5util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"

#define CKPT_PATH 4096
#define MANIFEST "manifest.json"

#ifdef PP_F64
#define H5T_MEM_REAL H5T_NATIVE_DOUBLE
#else
#define H5T_MEM_REAL H5T_NATIVE_FLOAT
#endif
#define H5T_FILE_REAL H5T_IEEE_F32LE

enum { G_PARAMS, G_ADAM_M, G_ADAM_V, N_GROUPS };
static const char *const group_name[N_GROUPS] = {"params", "adam_m", "adam_v"};

/* ---------------------------------------------------------------- helpers */

static void h5_close_file(hid_t *f)
{
	if (*f >= 0)
		H5Fclose(*f);
	*f = -1;
}

/* snprintf that reports truncation as an error (paths, names) */
__attribute__((format(printf, 4, 5))) static int fmt_checked(char *out, size_t n, pp_err *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(out, n, fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= n)
		return pp_errorf(e, PP_EUSAGE, "path or name too long: %s...", out);
	return PP_OK;
}

static int join(char *out, size_t n, const char *a, const char *b, pp_err *e)
{
	return fmt_checked(out, n, e, "%s/%s", a, b);
}

static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *d)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/* The element count, or -1 when it does not fit int64_t (a damaged manifest). */
static int64_t volume(int ndim, const int64_t *d)
{
	int64_t v = 1;
	for (int i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(v, d[i], &v))
			return -1;
	return v;
}

static bool same_dims(int ndim, const int64_t *a, const int64_t *b)
{
	for (int i = 0; i < ndim; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

void ckpt_shard_name(char *buf, size_t size, int pp_rank, int tp_rank)
{
	snprintf(buf, size, "shard-pp%03d-tp%03d.h5", pp_rank, tp_rank);
}

void ckpt_optim_name(char *buf, size_t size, int pp_rank, int tp_rank, int dp_rank)
{
	snprintf(buf, size, "optim-pp%03d-tp%03d-dp%03d.h5", pp_rank, tp_rank, dp_rank);
}

/* Only the canonical spelling counts, so a manifest cannot name ../x. */
static bool parse_shard_name(const char *name, int *pp, int *tp)
{
	char canon[64];
	if (sscanf(name, "shard-pp%d-tp%d.h5", pp, tp) != 2 || *pp < 0 || *tp < 0)
		return false;
	ckpt_shard_name(canon, sizeof canon, *pp, *tp);
	return strcmp(canon, name) == 0;
}

static bool parse_optim_name(const char *name, int *pp, int *tp, int *dp)
{
	char canon[64];
	if (sscanf(name, "optim-pp%d-tp%d-dp%d.h5", pp, tp, dp) != 3 || *pp < 0 || *tp < 0 || *dp < 0)
		return false;
	ckpt_optim_name(canon, sizeof canon, *pp, *tp, *dp);
	return strcmp(canon, name) == 0;
}

/* The two kinds of file in a checkpoint directory. */
enum { F_NONE, F_SHARD, F_OPTIM };

/* The kind of a file name and its mesh coordinates (dp = -1 for a shard). */
static int file_kind(const char *name, int *pp, int *tp, int *dp)
{
	*dp = -1;
	if (parse_shard_name(name, pp, tp))
		return F_SHARD;
	return parse_optim_name(name, pp, tp, dp) ? F_OPTIM : F_NONE;
}

/* "step_" and digits only */
static bool parse_step_name(const char *name, long *step)
{
	if (strncmp(name, "step_", 5) != 0 || !name[5])
		return false;
	for (const char *p = name + 5; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	errno = 0;
	*step = strtol(name + 5, NULL, 10);
	return errno == 0;
}

static int write_file_synced(const char *path, const char *text, pp_err *e)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", path, strerror(errno));
	size_t n = strlen(text), done = 0;
	while (done < n) {
		ssize_t w = write(fd, text + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int err = errno;
			close(fd);
			return pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", path, strerror(err));
		}
		done += (size_t)w;
	}
	if (fsync(fd) != 0) {
		int err = errno;
		close(fd);
		return pp_errorf(e, PP_ERUNTIME, "fsync %s: %s", path, strerror(err));
	}
	if (close(fd) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", path, strerror(errno));
	return PP_OK;
}

/* ------------------------------------------------------ HDF5 attributes */

static bool attr_put_str(hid_t obj, const char *name, const char *val)
{
	hid_t t = h5u_string_type(H5T_CSET_UTF8), sp = H5Screate(H5S_SCALAR), a = -1;
	bool ok = h5u_ok(a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT)) &&
		  h5u_ok(H5Awrite(a, t, &val));
	if (a >= 0)
		H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
	return ok;
}

/* n == 0: a scalar */
static bool attr_put_i64(hid_t obj, const char *name, int n, const int64_t *v)
{
	return h5u_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)n, v);
}

/* Reads a string of either kind (variable or fixed length) in its own cset;
 * returns a malloc'd copy or NULL. */
static char *read_string(hid_t obj, bool is_attr)
{
	hid_t ft = is_attr ? H5Aget_type(obj) : H5Dget_type(obj);
	if (ft < 0)
		return NULL;
	char *out = NULL;
	if (H5Tget_class(ft) != H5T_STRING)
		goto done;
	if (H5Tis_variable_str(ft) > 0) {
		hid_t mt = h5u_string_type(H5Tget_cset(ft));
		char *s = NULL;
		herr_t r = is_attr ? H5Aread(obj, mt, &s) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s);
		if (h5u_ok(r) && s)
			out = strdup(s);
		if (s)
			H5free_memory(s);
		H5Tclose(mt);
	} else {
		size_t n = H5Tget_size(ft);
		if (!(out = calloc(n + 1, 1)))
			goto done;
		herr_t r = is_attr ? H5Aread(obj, ft, out) : H5Dread(obj, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
		if (out && !h5u_ok(r)) {
			free(out);
			out = NULL;
		}
	}
done:
	H5Tclose(ft);
	return out;
}

static char *attr_get_str(hid_t obj, const char *name)
{
	if (H5Aexists(obj, name) <= 0)
		return NULL;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0)
		return NULL;
	char *s = read_string(a, true);
	H5Aclose(a);
	return s;
}

/* An integer scalar (n = 1) or 1-d array of at most max elements. */
static bool attr_get_i64(hid_t obj, const char *name, int max, int64_t *out, int *n)
{
	if (H5Aexists(obj, name) <= 0)
		return false;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0)
		return false;
	bool ok = false;
	hid_t sp = H5Aget_space(a), t = H5Aget_type(a);
	int rank = H5Sget_simple_extent_ndims(sp);
	hssize_t count = H5Sget_simple_extent_npoints(sp);
	if (H5Tget_class(t) == H5T_INTEGER && rank >= 0 && rank <= 1 && count >= 1 && count <= max) {
		ok = h5u_ok(H5Aread(a, H5T_NATIVE_INT64, out));
		if (n)
			*n = (int)count;
	}
	H5Tclose(t);
	H5Sclose(sp);
	H5Aclose(a);
	return ok;
}

/* An integer scalar or 1-d array of any length >= 1, into a malloc'd *out. */
static bool attr_get_i64_all(hid_t obj, const char *name, int64_t **out, int *n)
{
	*out = NULL;
	*n = 0;
	if (H5Aexists(obj, name) <= 0)
		return false;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0)
		return false;
	hid_t sp = H5Aget_space(a);
	hssize_t count = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
	if (sp >= 0)
		H5Sclose(sp);
	H5Aclose(a);
	if (count < 1 || count > INT32_MAX || !(*out = malloc((size_t)count * sizeof **out)))
		return false;
	if (!attr_get_i64(obj, name, (int)count, *out, n)) {
		free(*out);
		*out = NULL;
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ manifest */

void ckpt_manifest_free(ckpt_manifest *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n_tensors; i++) {
		free(m->tensors[i].name);
		free(m->tensors[i].shards);
		free(m->tensors[i].ranges);
	}
	free(m->tensors);
	free(m->files);
	memset(m, 0, sizeof *m);
}

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const ckpt_tensor_info *)a)->name, ((const ckpt_tensor_info *)b)->name);
}

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const ckpt_file_info *)a)->name, ((const ckpt_file_info *)b)->name);
}

const ckpt_tensor_info *ckpt_manifest_tensor(const ckpt_manifest *m, const char *name)
{
	ckpt_tensor_info key = {.name = (char *)name};
	return bsearch(&key, m->tensors, (size_t)m->n_tensors, sizeof key, cmp_tensor);
}

static int file_index(const ckpt_manifest *m, const char *name)
{
	ckpt_file_info key;
	snprintf(key.name, sizeof key.name, "%s", name);
	const ckpt_file_info *f = bsearch(&key, m->files, (size_t)m->n_files, sizeof key, cmp_file);
	return f ? (int)(f - m->files) : -1;
}

/* The files are exactly the pp x tp shards of the mesh and, from version 2
 * on, its pp x tp x dp optimizer files. */
static int check_mesh_files(const char *where, const ckpt_manifest *m, pp_err *e)
{
	if (m->pp_size < 1 || m->tp_size < 1 || m->dp_size < 1)
		return pp_errorf(e, PP_ERUNTIME, "%s: mesh pp=%d tp=%d dp=%d is not valid", where,
				 m->pp_size, m->tp_size, m->dp_size);
	long long n_shards = 0, n_optim = 0;
	for (int i = 0; i < m->n_files; i++) {
		const char *name = m->files[i].name;
		int pp, tp, dp, kind = file_kind(name, &pp, &tp, &dp);
		if (kind == F_NONE)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: unexpected file %s (shard files are named shard-ppNNN-tpNNN.h5, "
					 "optimizer files optim-ppNNN-tpNNN-dpNNN.h5)",
					 where, name);
		if (kind == F_OPTIM && m->version < 2)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: %s is an optimizer file, which format version %d does not have (version 2 added them)",
					 where, name, m->version);
		if (pp >= m->pp_size || tp >= m->tp_size || dp >= m->dp_size)
			return pp_errorf(e, PP_ERUNTIME, "%s: %s lies outside the mesh pp=%d tp=%d dp=%d", where, name,
					 m->pp_size, m->tp_size, m->dp_size);
		if (i && strcmp(m->files[i - 1].name, name) == 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: %s is listed twice", where, name);
		if (kind == F_SHARD)
			n_shards++;
		else
			n_optim++;
	}
	char name[64];
	if (n_shards != (long long)m->pp_size * m->tp_size)
		for (int pp = 0; pp < m->pp_size; pp++)
			for (int tp = 0; tp < m->tp_size; tp++) {
				ckpt_shard_name(name, sizeof name, pp, tp);
				if (file_index(m, name) < 0)
					return pp_errorf(e, PP_ERUNTIME, "%s: shard %s of the pp=%d tp=%d mesh is missing",
							 where, name, m->pp_size, m->tp_size);
			}
	if (m->version >= 2 && n_optim != (long long)m->pp_size * m->tp_size * m->dp_size)
		for (int pp = 0; pp < m->pp_size; pp++)
			for (int tp = 0; tp < m->tp_size; tp++)
				for (int dp = 0; dp < m->dp_size; dp++) {
					ckpt_optim_name(name, sizeof name, pp, tp, dp);
					if (file_index(m, name) < 0)
						return pp_errorf(e, PP_ERUNTIME,
								 "%s: optimizer file %s of the pp=%d tp=%d dp=%d mesh is missing "
								 "(format version 2 has one per rank)",
								 where, name, m->pp_size, m->tp_size, m->dp_size);
				}
	return PP_OK;
}

/* A rectangular block of a tensor, and the file that holds it. */
typedef struct {
	int file;
	const int64_t *offset, *shape;
} block_ref;

/* The blocks lie inside tensor t and together cover it exactly once. what
 * names the data in messages ("params", "Adam m and v"), missing the
 * likely cause of a gap. */
static int check_tiling(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t, const char *what,
			const char *missing, const block_ref *b, int n, pp_err *e)
{
	char x[128], y[128], z[128];
	int nd = t->ndim;
	int64_t covered = 0;
	for (int i = 0; i < n; i++) {
		for (int d = 0; d < nd; d++)
			if (b[i].offset[d] < 0 || b[i].shape[d] < 1 || b[i].offset[d] > t->global_shape[d] - b[i].shape[d])
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: tensor %s: the block of its %s in %s at offset %s with shape %s lies outside its global shape %s",
						 where, t->name, what, m->files[b[i].file].name, shape_str(x, sizeof x, nd, b[i].offset),
						 shape_str(y, sizeof y, nd, b[i].shape), shape_str(z, sizeof z, nd, t->global_shape));
		for (int j = 0; j < i; j++) {
			bool overlap = true;
			for (int d = 0; d < nd; d++)
				overlap = overlap && b[i].offset[d] < b[j].offset[d] + b[j].shape[d] &&
					  b[j].offset[d] < b[i].offset[d] + b[i].shape[d];
			if (overlap)
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: tensor %s: the blocks of its %s in %s and %s overlap (each element must be saved once; "
						 "replicated tensors by tp rank 0 only)",
						 where, t->name, what, m->files[b[j].file].name, m->files[b[i].file].name);
		}
		covered += volume(nd, b[i].shape);
	}
	int64_t total = volume(nd, t->global_shape);
	if (covered != total)
		return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: its %s cover %lld of %lld elements of %s (%s)", where,
				 t->name, what, (long long)covered, (long long)total, shape_str(x, sizeof x, nd, t->global_shape),
				 missing);
	return PP_OK;
}

static int cmp_range(const void *a, const void *b)
{
	const ckpt_range_info *x = *(const ckpt_range_info *const *)a, *y = *(const ckpt_range_info *const *)b;
	for (int d = 0; d < PP_CKPT_MAXDIM; d++) {
		if (x->offset[d] != y->offset[d])
			return x->offset[d] < y->offset[d] ? -1 : 1;
		if (x->shape[d] != y->shape[d])
			return x->shape[d] < y->shape[d] ? -1 : 1;
	}
	return (x->begin > y->begin) - (x->begin < y->begin);
}

/* The optimizer ranges of t: each inside its block, and the ranges that
 * share a block cover it exactly once. Appends each distinct block to b. */
static int check_ranges(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t, block_ref *b, int *n,
			pp_err *e)
{
	char x[128], y[128];
	int nd = t->ndim, rc = PP_OK;
	const ckpt_range_info **r = malloc((size_t)t->n_ranges * sizeof *r + 1);
	if (!r)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; i < t->n_ranges && !rc; i++) {
		r[i] = &t->ranges[i];
		int64_t vol = volume(nd, r[i]->shape);
		if (r[i]->begin < 0 || r[i]->begin >= r[i]->end || r[i]->end > vol)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: tensor %s: %s holds elements [%lld, %lld) of the block at offset %s with shape %s, "
				       "which has %lld",
				       where, t->name, m->files[r[i]->file].name, (long long)r[i]->begin, (long long)r[i]->end,
				       shape_str(x, sizeof x, nd, r[i]->offset), shape_str(y, sizeof y, nd, r[i]->shape),
				       (long long)vol);
	}
	if (!rc)
		qsort(r, (size_t)t->n_ranges, sizeof *r, cmp_range);
	for (int i = 0; i < t->n_ranges && !rc;) {
		const ckpt_range_info *g = r[i];
		int64_t vol = volume(nd, g->shape), next = 0;
		const char *prev = NULL;
		for (; i < t->n_ranges && !rc && same_dims(nd, r[i]->offset, g->offset) && same_dims(nd, r[i]->shape, g->shape);
		     i++) {
			const char *file = m->files[r[i]->file].name;
			if (r[i]->begin < next)
				rc = pp_errorf(e, PP_ERUNTIME,
					       "%s: tensor %s: %s and %s both hold elements [%lld, %lld) of the block at offset %s "
					       "with shape %s of its Adam m and v (each element must be saved once)",
					       where, t->name, prev, file, (long long)r[i]->begin,
					       (long long)(r[i]->end < next ? r[i]->end : next), shape_str(x, sizeof x, nd, g->offset),
					       shape_str(y, sizeof y, nd, g->shape));
			else if (r[i]->begin > next)
				break;
			next = r[i]->end;
			prev = file;
		}
		if (!rc && next != vol)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: tensor %s: elements [%lld, %lld) of its Adam m and v in the block at offset %s with "
				       "shape %s are in no optimizer file (one is missing or incomplete)",
				       where, t->name, (long long)next,
				       (long long)(i < t->n_ranges && same_dims(nd, r[i]->offset, g->offset) &&
							   same_dims(nd, r[i]->shape, g->shape)
						   ? r[i]->begin
						   : vol),
				       shape_str(x, sizeof x, nd, g->offset), shape_str(y, sizeof y, nd, g->shape));
		if (!rc)
			b[(*n)++] = (block_ref){g->file, g->offset, g->shape};
	}
	free(r);
	return rc;
}

/* Tensor t's params are covered exactly once by its shards, and so are its
 * m and v (when saved) by the shards that hold them and its optimizer
 * ranges. */
static int check_cover(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t, pp_err *e)
{
	char a[128];
	int nd = t->ndim;
	if (nd < 1 || nd > PP_CKPT_MAXDIM)
		return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has %d dimensions (1 to %d supported)", where,
				 t->name, nd, PP_CKPT_MAXDIM);
	for (int d = 0; d < nd; d++)
		if (t->global_shape[d] < 1 || volume(nd, t->global_shape) < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has global shape %s", where, t->name,
					 shape_str(a, sizeof a, nd, t->global_shape));
	block_ref *b = malloc((size_t)(t->n_shards + t->n_ranges) * sizeof *b + 1);
	if (!b)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	int n = 0, rc;
	for (int i = 0; i < t->n_shards; i++)
		b[n++] = (block_ref){t->shards[i].file, t->shards[i].offset, t->shards[i].shape};
	rc = check_tiling(where, m, t, "params", "a shard is missing", b, n, e);
	n = 0;
	for (int i = 0; i < t->n_shards && !rc; i++)
		if (t->shards[i].adam)
			b[n++] = (block_ref){t->shards[i].file, t->shards[i].offset, t->shards[i].shape};
	if (!rc && !t->adam && (n || t->n_ranges))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: %s holds Adam m and v of a tensor saved without them", where,
			       t->name, m->files[n ? b[0].file : t->ranges[0].file].name);
	if (!rc && t->adam && !(rc = check_ranges(where, m, t, b, &n, e)))
		rc = check_tiling(where, m, t, "Adam m and v", "a shard or optimizer file lacks them", b, n, e);
	free(b);
	return rc;
}

static json_t *dims_json(int nd, const int64_t *d)
{
	json_t *a = json_array();
	for (int i = 0; i < nd; i++)
		json_array_append_new(a, json_integer((json_int_t)d[i]));
	return a;
}

static json_t *manifest_to_json(const ckpt_manifest *m)
{
	json_t *root = json_object(), *files = json_array(), *tensors = json_object();
	json_object_set_new(root, "format", json_string(PP_CKPT_FORMAT));
	json_object_set_new(root, "version", json_integer(m->version));
	json_object_set_new(root, "step", json_integer(m->step));
	json_object_set_new(root, "mesh", json_pack("{s:i, s:i, s:i}", "pp", m->pp_size, "tp", m->tp_size,
						    "dp", m->dp_size));
	for (int i = 0; i < m->n_files; i++)
		json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", m->files[i].name, "bytes",
						       (json_int_t)m->files[i].bytes, "sha256", m->files[i].sha256));
	for (int i = 0; i < m->n_tensors; i++) {
		const ckpt_tensor_info *t = &m->tensors[i];
		json_t *shards = json_array();
		for (int j = 0; j < t->n_shards; j++) {
			const ckpt_slice_info *s = &t->shards[j];
			json_t *sj = json_pack("{s:s, s:o, s:o}", "file", m->files[s->file].name, "offset",
					       dims_json(t->ndim, s->offset), "shape", dims_json(t->ndim, s->shape));
			if (m->version >= 2)
				json_object_set_new(sj, "adam", json_boolean(s->adam));
			json_array_append_new(shards, sj);
		}
		json_t *tj = json_pack("{s:s, s:o, s:b, s:o}", "dtype", "float32", "global_shape",
				       dims_json(t->ndim, t->global_shape), "adam", t->adam, "shards", shards);
		/* one entry per dataset: the ranges of one file, in dataset order */
		json_t *optim = json_array(), *begin = NULL, *end = NULL;
		for (int j = 0; j < t->n_ranges; j++) {
			const ckpt_range_info *r = &t->ranges[j];
			if (j == 0 || r->file != t->ranges[j - 1].file) {
				begin = json_array();
				end = json_array();
				json_array_append_new(optim, json_pack("{s:s, s:o, s:o, s:o, s:o}", "file", m->files[r->file].name,
								       "offset", dims_json(t->ndim, r->offset), "shape",
								       dims_json(t->ndim, r->shape), "slice_begin", begin,
								       "slice_end", end));
			}
			json_array_append_new(begin, json_integer((json_int_t)r->begin));
			json_array_append_new(end, json_integer((json_int_t)r->end));
		}
		if (t->n_ranges)
			json_object_set_new(tj, "optim", optim);
		else
			json_decref(optim);
		json_object_set_new(tensors, t->name, tj);
	}
	json_object_set_new(root, "files", files);
	json_object_set_new(root, "tensors", tensors);
	return root;
}

/* A JSON array of 1..PP_CKPT_MAXDIM integers. */
static bool json_dims(json_t *a, int64_t *d, int *nd)
{
	if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > PP_CKPT_MAXDIM)
		return false;
	*nd = (int)json_array_size(a);
	for (int i = 0; i < *nd; i++) {
		json_t *v = json_array_get(a, (size_t)i);
		if (!json_is_integer(v))
			return false;
		d[i] = json_integer_value(v);
	}
	return true;
}

static bool is_hex64(const char *s)
{
	if (strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

/* A JSON array of n >= 1 integers, into a malloc'd *out. */
static bool json_ints(json_t *a, int64_t **out, int *n)
{
	*out = NULL;
	*n = json_is_array(a) ? (int)json_array_size(a) : 0;
	if (*n < 1 || !(*out = malloc((size_t)*n * sizeof **out)))
		return false;
	for (int i = 0; i < *n; i++) {
		json_t *v = json_array_get(a, (size_t)i);
		if (!json_is_integer(v)) {
			free(*out);
			*out = NULL;
			return false;
		}
		(*out)[i] = json_integer_value(v);
	}
	return true;
}

/* Appends the ranges of one optimizer dataset (ascending, disjoint) to t.
 * where and what name it in messages. */
static int add_ranges(const char *where, const char *what, ckpt_tensor_info *t, int file, const int64_t *offset,
		      const int64_t *shape, const int64_t *begin, const int64_t *end, int n, pp_err *e)
{
	for (int i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].file == file)
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has two optimizer entries for one file", where, t->name);
	void *p = realloc(t->ranges, (size_t)(t->n_ranges + n) * sizeof *t->ranges);
	if (!p)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	t->ranges = p;
	int64_t at = 0;
	for (int i = 0; i < n; i++) {
		if (begin[i] < 0 || begin[i] >= end[i] || (i && begin[i] < end[i - 1]))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: %s: range %d is [%lld, %lld); ranges must be non-empty, ascending and disjoint",
					 where, what, i, (long long)begin[i], (long long)end[i]);
		ckpt_range_info *r = &t->ranges[t->n_ranges++];
		memset(r, 0, sizeof *r);
		r->file = file;
		memcpy(r->offset, offset, (size_t)t->ndim * sizeof *offset);
		memcpy(r->shape, shape, (size_t)t->ndim * sizeof *shape);
		r->begin = begin[i];
		r->end = end[i];
		r->at = at;
		at += end[i] - begin[i];
	}
	return PP_OK;
}

/* A tensor's "optim" array (absent: none). */
static int parse_optim_entries(const char *where, const ckpt_manifest *m, ckpt_tensor_info *t, json_t *optim,
			       pp_err *e)
{
	if (!optim)
		return PP_OK;
	if (!json_is_array(optim))
		return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: \"optim\" must be an array", where, t->name);
	for (size_t j = 0; j < json_array_size(optim); j++) {
		json_t *oj = json_array_get(optim, j);
		const char *file = NULL;
		int64_t offset[PP_CKPT_MAXDIM], shape[PP_CKPT_MAXDIM], *begin = NULL, *end = NULL;
		int nd1 = 0, nd2 = 0, nb = 0, ne = 0, rc = PP_OK, fi = -1, pp, tp, dp;
		bool ok = json_unpack(oj, "{s:s}", "file", &file) == 0 &&
			  json_dims(json_object_get(oj, "offset"), offset, &nd1) &&
			  json_dims(json_object_get(oj, "shape"), shape, &nd2) && nd1 == t->ndim && nd2 == t->ndim &&
			  json_ints(json_object_get(oj, "slice_begin"), &begin, &nb) &&
			  json_ints(json_object_get(oj, "slice_end"), &end, &ne) && nb == ne;
		if (!ok)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: tensor %s: optim[%zu] must be {\"file\": f, \"offset\": [%d ints], \"shape\": [%d ints], "
				       "\"slice_begin\": [n ints], \"slice_end\": [n ints]}",
				       where, t->name, j, t->ndim, t->ndim);
		else if ((fi = file_index(m, file)) < 0 || file_kind(file, &pp, &tp, &dp) != F_OPTIM)
			rc = pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: optim[%zu] names %s, which is not an optimizer file in \"files\"",
				       where, t->name, j, file);
		else {
			char what[256];
			snprintf(what, sizeof what, "tensor %s in %s", t->name, file);
			rc = add_ranges(where, what, t, fi, offset, shape, begin, end, nb, e);
		}
		free(begin);
		free(end);
		if (rc)
			return rc;
	}
	return PP_OK;
}

static int manifest_from_json(const char *where, json_t *root, ckpt_manifest *m, pp_err *e)
{
	json_t *mesh = json_object_get(root, "mesh"), *files = json_object_get(root, "files"),
	       *tensors = json_object_get(root, "tensors"), *step = json_object_get(root, "step");
	if (!json_is_integer(step) || json_integer_value(step) < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: \"step\" must be an integer >= 0", where);
	m->step = (long)json_integer_value(step);
	json_int_t pp, tp, dp; /* "i" would read 4294967297 as 1 */
	if (!json_is_object(mesh) || json_unpack(mesh, "{s:I, s:I, s:I}", "pp", &pp, "tp", &tp, "dp", &dp) != 0 ||
	    pp < INT_MIN || pp > INT_MAX || tp < INT_MIN || tp > INT_MAX || dp < INT_MIN || dp > INT_MAX)
		return pp_errorf(e, PP_ERUNTIME, "%s: \"mesh\" must be {\"pp\": n, \"tp\": n, \"dp\": n}", where);
	m->pp_size = (int)pp;
	m->tp_size = (int)tp;
	m->dp_size = (int)dp;
	if (!json_is_array(files) || json_array_size(files) < 1)
		return pp_errorf(e, PP_ERUNTIME, "%s: \"files\" must be a non-empty array", where);
	if (!json_is_object(tensors))
		return pp_errorf(e, PP_ERUNTIME, "%s: \"tensors\" must be an object", where);

	m->n_files = (int)json_array_size(files);
	m->files = calloc((size_t)m->n_files, sizeof *m->files);
	if (!m->files)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", where);
	for (int i = 0; i < m->n_files; i++) {
		const char *name, *sha;
		json_int_t bytes;
		if (json_unpack(json_array_get(files, (size_t)i), "{s:s, s:I, s:s}", "name", &name, "bytes", &bytes,
				"sha256", &sha) != 0 ||
		    strlen(name) >= sizeof m->files[i].name || bytes < 0 || !is_hex64(sha))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: files[%d] must be {\"name\": file, \"bytes\": n, \"sha256\": 64 hex digits}",
					 where, i);
		snprintf(m->files[i].name, sizeof m->files[i].name, "%s", name);
		m->files[i].bytes = bytes;
		snprintf(m->files[i].sha256, sizeof m->files[i].sha256, "%s", sha);
	}
	qsort(m->files, (size_t)m->n_files, sizeof *m->files, cmp_file);
	if (check_mesh_files(where, m, e))
		return e ? e->code : PP_ERUNTIME;

	m->tensors = calloc(json_object_size(tensors) + 1, sizeof *m->tensors);
	if (!m->tensors)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", where);
	const char *name;
	json_t *tj;
	json_object_foreach(tensors, name, tj)
	{
		ckpt_tensor_info *t = &m->tensors[m->n_tensors];
		if (!(t->name = strdup(name)))
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", where);
		m->n_tensors++;
		json_t *shards = json_object_get(tj, "shards"), *dtype = json_object_get(tj, "dtype"),
		       *adam = json_object_get(tj, "adam");
		if (!json_dims(json_object_get(tj, "global_shape"), t->global_shape, &t->ndim) ||
		    !json_is_array(shards) || json_array_size(shards) < 1)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: tensor %s needs \"global_shape\" (1 to %d integers) and a non-empty \"shards\" array",
					 where, name, PP_CKPT_MAXDIM);
		if (dtype && (!json_is_string(dtype) || strcmp(json_string_value(dtype), "float32") != 0))
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has dtype other than \"float32\"", where, name);
		t->adam = json_is_true(adam);
		t->n_shards = (int)json_array_size(shards);
		t->shards = calloc((size_t)t->n_shards, sizeof *t->shards);
		if (!t->shards)
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", where);
		for (int j = 0; j < t->n_shards; j++) {
			json_t *sj = json_array_get(shards, (size_t)j);
			const char *file;
			int nd1 = 0, nd2 = 0;
			if (json_unpack(sj, "{s:s}", "file", &file) != 0 ||
			    !json_dims(json_object_get(sj, "offset"), t->shards[j].offset, &nd1) ||
			    !json_dims(json_object_get(sj, "shape"), t->shards[j].shape, &nd2) || nd1 != t->ndim ||
			    nd2 != t->ndim)
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: tensor %s: shards[%d] must be {\"file\": f, \"offset\": [%d ints], \"shape\": [%d ints]}",
						 where, name, j, t->ndim, t->ndim);
			if ((t->shards[j].file = file_index(m, file)) < 0)
				return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s is in %s, which \"files\" does not list", where,
						 name, file);
			json_t *sa = json_object_get(sj, "adam");
			if (sa && !json_is_boolean(sa))
				return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: shards[%d].adam must be true or false", where,
						 name, j);
			/* version 1 has no per-shard flag: m and v are where the params are */
			t->shards[j].adam = sa ? json_is_true(sa) : t->adam;
		}
		if (m->version >= 2 && parse_optim_entries(where, m, t, json_object_get(tj, "optim"), e))
			return e ? e->code : PP_ERUNTIME;
		if (check_cover(where, m, t, e))
			return e ? e->code : PP_ERUNTIME;
	}
	qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, cmp_tensor);
	return PP_OK;
}

static bool version_known(long long v) { return v >= PP_CKPT_VERSION_OLDEST && v <= PP_CKPT_VERSION; }

/* Reads DIR/manifest.json. *version gets the format version when the file
 * parses and says format "pp-checkpoint" (else 0), so that callers can tell
 * "a checkpoint of another version" from "not a checkpoint". */
static int manifest_read(const char *dir, ckpt_manifest *m, int *version, pp_err *e)
{
	memset(m, 0, sizeof *m);
	*version = 0;
	struct stat st;
	if (stat(dir, &st) != 0)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint directory %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s is not a directory", dir);
	char path[CKPT_PATH], where[CKPT_PATH + 32];
	if (join(path, sizeof path, dir, MANIFEST, e))
		return e ? e->code : PP_EUSAGE;
	snprintf(where, sizeof where, "checkpoint %s: " MANIFEST, dir);
	if (stat(path, &st) != 0)
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint %s is incomplete: no " MANIFEST " (an interrupted save, or not a checkpoint)", dir);
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return pp_errorf(e, PP_ERUNTIME, "%s: line %d: %s", where, jerr.line, jerr.text);
	int rc = PP_OK;
	json_t *format = json_object_get(root, "format"), *ver = json_object_get(root, "version");
	if (!json_is_string(format) || strcmp(json_string_value(format), PP_CKPT_FORMAT) != 0) {
		rc = pp_errorf(e, PP_ERUNTIME, "%s: \"format\" is not \"" PP_CKPT_FORMAT "\"", where);
	} else if (!json_is_integer(ver)) {
		rc = pp_errorf(e, PP_ERUNTIME, "%s: \"version\" must be an integer", where);
	} else if (!version_known(json_integer_value(ver))) {
		*version = -1;
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s has format version %lld; this pp reads versions %d to %d", dir,
			       (long long)json_integer_value(ver), PP_CKPT_VERSION_OLDEST, PP_CKPT_VERSION);
	} else {
		*version = (int)json_integer_value(ver);
		m->version = *version;
		rc = manifest_from_json(where, root, m, e);
	}
	json_decref(root);
	if (rc)
		ckpt_manifest_free(m);
	return rc;
}

int ckpt_read_manifest(const char *dir, ckpt_manifest *m, pp_err *e)
{
	int version;
	return manifest_read(dir, m, &version, e);
}

/* A listed file is there with its recorded size (and sha256 if hash). */
static int check_file(const char *dir, const ckpt_file_info *f, bool hash, pp_err *e)
{
	char path[CKPT_PATH], hex[SHA256_HEX];
	struct stat st;
	if (join(path, sizeof path, dir, f->name, e))
		return e ? e->code : PP_EUSAGE;
	if (stat(path, &st) != 0)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s: %s (listed in " MANIFEST "): %s", dir, f->name,
				 strerror(errno));
	if ((int64_t)st.st_size != f->bytes)
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint %s: %s is %lld bytes; " MANIFEST " says %lld (truncated or overwritten)", dir,
				 f->name, (long long)st.st_size, (long long)f->bytes);
	if (!hash)
		return PP_OK;
	if (sha256_file(path, hex, NULL, e))
		return pp_err_prefix(e, "checkpoint %s", dir);
	if (strcmp(hex, f->sha256) != 0)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s: %s has sha256 %s; " MANIFEST " says %s (the file is corrupt)",
				 dir, f->name, hex, f->sha256);
	return PP_OK;
}

static int check_files(const char *dir, const ckpt_manifest *m, bool hash, pp_err *e)
{
	int rc = PP_OK;
	for (int i = 0; i < m->n_files && !rc; i++)
		rc = check_file(dir, &m->files[i], hash, e);
	return rc;
}

/* ------------------------------------------------- shard and optim files */

/* Root attributes of a shard or optimizer file, as write_root_attrs writes
 * them. */
typedef struct {
	int64_t version, step, pp_rank, tp_rank, dp_rank, pp_size, tp_size, dp_size;
} file_attrs;

/* Reads the root attributes of file f, called name, and checks that they
 * agree with its name (an optimizer file's dp rank too). */
static int read_file_attrs(hid_t f, const char *path, const char *name, file_attrs *a, pp_err *e)
{
	char *format = attr_get_str(f, "format");
	bool is_pp = format && strcmp(format, PP_CKPT_FORMAT) == 0;
	free(format);
	if (!is_pp)
		return pp_errorf(e, PP_ERUNTIME, "%s: root attribute format is not \"" PP_CKPT_FORMAT "\"", path);
	if (!attr_get_i64(f, "version", 1, &a->version, NULL))
		return pp_errorf(e, PP_ERUNTIME, "%s: root attribute version missing", path);
	if (!version_known(a->version))
		return pp_errorf(e, PP_ERUNTIME, "%s has format version %lld; this pp reads versions %d to %d", path,
				 (long long)a->version, PP_CKPT_VERSION_OLDEST, PP_CKPT_VERSION);
	struct {
		const char *name;
		int64_t *v;
	} ints[] = {{"step", &a->step},       {"pp_rank", &a->pp_rank}, {"tp_rank", &a->tp_rank},
		    {"dp_rank", &a->dp_rank}, {"pp_size", &a->pp_size}, {"tp_size", &a->tp_size},
		    {"dp_size", &a->dp_size}};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if (!attr_get_i64(f, ints[i].name, 1, ints[i].v, NULL))
			return pp_errorf(e, PP_ERUNTIME, "%s: root attribute %s missing or not an integer", path,
					 ints[i].name);
	int pp = 0, tp = 0, dp = 0;
	if (file_kind(name, &pp, &tp, &dp) == F_OPTIM) {
		if (a->pp_rank != pp || a->tp_rank != tp || a->dp_rank != dp)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s says it is the optimizer file of pp=%lld tp=%lld dp=%lld; its name says pp=%d tp=%d dp=%d",
					 path, (long long)a->pp_rank, (long long)a->tp_rank, (long long)a->dp_rank, pp, tp, dp);
		if (a->version < 2)
			return pp_errorf(e, PP_ERUNTIME, "%s is an optimizer file of format version %lld (version 2 added them)",
					 path, (long long)a->version);
	} else if (a->pp_rank != pp || a->tp_rank != tp) {
		return pp_errorf(e, PP_ERUNTIME, "%s says it is shard pp=%lld tp=%lld; its name says pp=%d tp=%d", path,
				 (long long)a->pp_rank, (long long)a->tp_rank, pp, tp);
	}
	return PP_OK;
}

/* Opens DIR/FILE and checks its root attributes against the manifest. */
static int file_open(const char *dir, const ckpt_manifest *m, int file, hid_t *out, pp_err *e)
{
	char path[CKPT_PATH];
	const char *name = m->files[file].name;
	if (join(path, sizeof path, dir, name, e))
		return e ? e->code : PP_EUSAGE;
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (!h5u_ok(f))
		return pp_errorf(e, PP_ERUNTIME, "cannot open checkpoint file %s: %s", path, h5u_reason());
	file_attrs a;
	int rc = read_file_attrs(f, path, name, &a, e);
	if (!rc && a.version != m->version)
		rc = pp_errorf(e, PP_ERUNTIME, "%s has format version %lld; " MANIFEST " says version %d", path,
			       (long long)a.version, m->version);
	if (!rc && a.step != m->step)
		rc = pp_errorf(e, PP_ERUNTIME, "%s holds step %lld; " MANIFEST " says step %ld", path,
			       (long long)a.step, m->step);
	if (!rc && (a.pp_size != m->pp_size || a.tp_size != m->tp_size || a.dp_size != m->dp_size))
		rc = pp_errorf(e, PP_ERUNTIME, "%s was written for mesh pp=%lld tp=%lld dp=%lld; " MANIFEST
					       " says pp=%d tp=%d dp=%d",
			       path, (long long)a.pp_size, (long long)a.tp_size, (long long)a.dp_size, m->pp_size,
			       m->tp_size, m->dp_size);
	if (rc) {
		H5Fclose(f);
		return rc;
	}
	*out = f;
	return PP_OK;
}

/* global shape and offset of a block as the caller describes it ("not
 * sliced", the whole tensor, when global is all zero) */
static void block_of(int nd, const int64_t *shape, const int64_t *global_in, const int64_t *offset_in,
		     int64_t *global, int64_t *offset)
{
	bool sliced = false;
	for (int d = 0; d < nd; d++)
		sliced = sliced || global_in[d] != 0;
	for (int d = 0; d < nd; d++) {
		global[d] = sliced ? global_in[d] : shape[d];
		offset[d] = sliced ? offset_in[d] : 0;
	}
}

static void slice_of(const ckpt_tensor *t, int64_t *global, int64_t *offset)
{
	block_of(t->ndim, t->shape, t->global_shape, t->offset, global, offset);
}

/* The name and block of a caller's tensor i (a slice, or an optimizer part). */
static int check_block(const char *what, int i, const char *name, int nd, const int64_t *shape, const int64_t *global_in,
		       const int64_t *offset_in, pp_err *e)
{
	char a[128], b[128], c[128];
	if (!name || !name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
	    strlen(name) > 1000)
		return pp_errorf(e, PP_EUSAGE, "%s: tensor %d has name \"%s\" (expected a Hugging Face name, no '/')", what,
				 i, name ? name : "(null)");
	if (nd < 1 || nd > PP_CKPT_MAXDIM)
		return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has %d dimensions (1 to %d supported)", what, name, nd,
				 PP_CKPT_MAXDIM);
	int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
	block_of(nd, shape, global_in, offset_in, g, o);
	for (int d = 0; d < nd; d++)
		if (shape[d] < 1 || o[d] < 0 || o[d] + shape[d] > g[d])
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s: slice shape %s at offset %s does not fit global shape %s",
					 what, name, shape_str(a, sizeof a, nd, shape), shape_str(b, sizeof b, nd, o),
					 shape_str(c, sizeof c, nd, g));
	return PP_OK;
}

/* Checks tensors' names, shapes and slices (both for save and load). */
static int check_tensors(const char *what, const ckpt_state *s, bool saving, pp_err *e)
{
	if (s->n_tensors < 0 || (s->n_tensors > 0 && !s->tensors))
		return pp_errorf(e, PP_EUSAGE, "%s: n_tensors %d with no tensors", what, s->n_tensors);
	for (int i = 0; i < s->n_tensors; i++) {
		const ckpt_tensor *t = &s->tensors[i];
		if (check_block(what, i, t->name, t->ndim, t->shape, t->global_shape, t->offset, e))
			return e ? e->code : PP_EUSAGE;
		if (!t->param)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has no param buffer", what, t->name);
		if (saving && !t->m != !t->v)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has only one of adam m and v", what, t->name);
		if (saving && s->optim_per_dp && t->m)
			return pp_errorf(e, PP_EUSAGE,
					 "%s: tensor %s has adam m and v, but with optim_per_dp they are saved per dp rank "
					 "(ckpt_write_optim_shard), not in the shard",
					 what, t->name);
		/* loading may ask for several blocks of one tensor (a fused
		 * projection's); a save holds one slice of each */
		for (int j = 0; saving && j < i; j++)
			if (strcmp(s->tensors[j].name, t->name) == 0)
				return pp_errorf(e, PP_EUSAGE, "%s: tensor %s is listed twice", what, t->name);
	}
	return PP_OK;
}

/* The step, rank and data state of a state being saved. */
static int check_header(const ckpt_state *s, pp_err *e)
{
	if (s->step < 0)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: step %ld is negative", s->step);
	if (s->pp_size < 1 || s->tp_size < 1 || s->dp_size < 1 || s->pp_rank < 0 || s->pp_rank >= s->pp_size ||
	    s->tp_rank < 0 || s->tp_rank >= s->tp_size || s->dp_rank < 0 || s->dp_rank >= s->dp_size)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: rank pp=%d tp=%d dp=%d is not inside mesh pp=%d tp=%d dp=%d",
				 s->pp_rank, s->tp_rank, s->dp_rank, s->pp_size, s->tp_size, s->dp_size);
	if (s->n_data_state < 0 || s->n_data_state > PP_CKPT_DATA_STATE)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: n_data_state %d (0 to %d)", s->n_data_state,
				 PP_CKPT_DATA_STATE);
	return PP_OK;
}

static int check_state(const ckpt_state *s, pp_err *e)
{
	if (check_header(s, e))
		return e ? e->code : PP_EUSAGE;
	return check_tensors("checkpoint save", s, true, e);
}

/* The optimizer parts of a state being saved. */
static int check_optim_parts(const ckpt_state *s, pp_err *e)
{
	const char *what = "checkpoint save (optimizer file)";
	if (s->n_optim < 0 || (s->n_optim > 0 && !s->optim))
		return pp_errorf(e, PP_EUSAGE, "%s: n_optim %d with no parts", what, s->n_optim);
	for (int i = 0; i < s->n_optim; i++) {
		const ckpt_optim_part *p = &s->optim[i];
		if (check_block(what, i, p->name, p->ndim, p->shape, p->global_shape, p->offset, e))
			return e ? e->code : PP_EUSAGE;
		if (!p->m || !p->v)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s needs both adam m and v", what, p->name);
		if (p->n_ranges < 1 || !p->begin || !p->end)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has no element ranges", what, p->name);
		int64_t vol = volume(p->ndim, p->shape);
		for (int r = 0; r < p->n_ranges; r++)
			if (p->begin[r] < (r ? p->end[r - 1] : 0) || p->begin[r] >= p->end[r] || p->end[r] > vol)
				return pp_errorf(e, PP_EUSAGE,
						 "%s: tensor %s: range %d is [%lld, %lld) of a block of %lld elements; ranges "
						 "must be non-empty, ascending and disjoint",
						 what, p->name, r, (long long)p->begin[r], (long long)p->end[r], (long long)vol);
		for (int j = 0; j < i; j++)
			if (strcmp(s->optim[j].name, p->name) == 0)
				return pp_errorf(e, PP_EUSAGE, "%s: tensor %s is listed twice", what, p->name);
	}
	return PP_OK;
}

/* A float32 dataset of the given shape (nd dims) written straight from the
 * caller's buffer (HDF5 converts double to float in strips when pp_real is
 * double), with attributes global_shape and offset of gnd elements. With
 * keep, the dataset stays open in *keep (the caller closes it). */
static bool write_dataset(hid_t g, const char *name, int nd, const int64_t *shape, const int64_t *global,
			  const int64_t *offset, const pp_real *buf, int gnd, hid_t *keep)
{
	hsize_t dims[PP_CKPT_MAXDIM];
	for (int d = 0; d < nd; d++)
		dims[d] = (hsize_t)shape[d];
	hid_t sp = H5Screate_simple(nd, dims, NULL), ds = -1;
	bool ok = h5u_ok(ds = H5Dcreate2(g, name, H5T_FILE_REAL, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) &&
		  attr_put_i64(ds, "global_shape", gnd, global) && attr_put_i64(ds, "offset", gnd, offset) &&
		  h5u_ok(H5Dwrite(ds, H5T_MEM_REAL, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
	if (keep)
		*keep = ds;
	else if (ds >= 0)
		H5Dclose(ds);
	H5Sclose(sp);
	return ok;
}

/* 1-d uint64 dataset, or a scalar int64 one when n == 0 */
static bool write_ints(hid_t g, const char *name, int n, const void *v, bool scalar)
{
	hsize_t d = (hsize_t)n;
	hid_t sp = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &d, NULL), ds = -1;
	hid_t ft = scalar ? H5T_STD_I64LE : H5T_STD_U64LE, mt = scalar ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
	bool ok = h5u_ok(ds = H5Dcreate2(g, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) &&
		  (!scalar && n == 0 ? true : h5u_ok(H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)));
	if (ds >= 0)
		H5Dclose(ds);
	H5Sclose(sp);
	return ok;
}

/* The version a state's files carry: 2 when its m and v go to optimizer
 * files, else 1, which every pp reads. */
static int64_t state_version(const ckpt_state *s) { return s->optim_per_dp ? 2 : 1; }

static int write_root_attrs(hid_t f, const char *path, const ckpt_state *s, pp_err *e)
{
	int64_t ints[8] = {state_version(s), s->step,    s->pp_rank, s->tp_rank,
			   s->dp_rank,       s->pp_size, s->tp_size, s->dp_size};
	const char *names[8] = {"version", "step", "pp_rank", "tp_rank", "dp_rank", "pp_size", "tp_size", "dp_size"};
	if (!attr_put_str(f, "format", PP_CKPT_FORMAT))
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write attribute format: %s", path, h5u_reason());
	for (int i = 0; i < 8; i++)
		if (!attr_put_i64(f, names[i], 0, &ints[i]))
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot write attribute %s: %s", path, names[i], h5u_reason());
	return PP_OK;
}

/* Creates the groups first..last of group_name in f, into g. */
static int create_groups(hid_t f, const char *path, int first, int last, hid_t *g, pp_err *e)
{
	for (int k = first; k <= last; k++)
		if (!h5u_ok(g[k] = H5Gcreate2(f, group_name[k], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT))) {
			for (int j = first; j < k; j++)
				H5Gclose(g[j]);
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot create group /%s: %s", path, group_name[k], h5u_reason());
		}
	return PP_OK;
}

static int write_shard_body(hid_t f, const char *path, const ckpt_state *s, pp_err *e)
{
	hid_t g[N_GROUPS];
	int rc;
	if ((rc = write_root_attrs(f, path, s, e)) || (rc = create_groups(f, path, 0, N_GROUPS - 1, g, e)))
		return rc;
	for (int i = 0; i < s->n_tensors && !rc; i++) {
		const ckpt_tensor *t = &s->tensors[i];
		const pp_real *buf[N_GROUPS] = {t->param, t->m, t->v};
		int64_t gs[PP_CKPT_MAXDIM], off[PP_CKPT_MAXDIM];
		slice_of(t, gs, off);
		for (int k = 0; k < N_GROUPS && !rc; k++)
			if (buf[k] && !write_dataset(g[k], t->name, t->ndim, t->shape, gs, off, buf[k], t->ndim, NULL))
				rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot write tensor /%s/%s: %s", path, group_name[k],
					       t->name, h5u_reason());
	}
	for (int k = 0; k < N_GROUPS; k++)
		H5Gclose(g[k]);
	if (rc)
		return rc;

	hid_t st = H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	int64_t step = s->step;
	bool ok = h5u_ok(st) && write_ints(st, "step", 1, &step, true) && write_ints(st, "rng", 4, s->rng, false) &&
		  write_ints(st, "data_state", s->n_data_state, s->data_state, false);
	if (st >= 0)
		H5Gclose(st);
	if (!ok)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write /state: %s", path, h5u_reason());

	const char *cfg = s->config_json ? s->config_json : "";
	hid_t t = h5u_string_type(H5T_CSET_UTF8), sp = H5Screate(H5S_SCALAR), ds = -1;
	ok = h5u_ok(ds = H5Dcreate2(f, "config", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) &&
	     h5u_ok(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &cfg));
	if (ds >= 0)
		H5Dclose(ds);
	H5Sclose(sp);
	H5Tclose(t);
	if (!ok)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write /config: %s", path, h5u_reason());
	return PP_OK;
}

/* When its closing flush fails (a full disk), HDF5 1.10 leaves a
 * half-closed file behind that crashes the next close, or the exit. A file
 * whose writing failed is deleted anyway: point HDF5's descriptor at an
 * in-memory file (sparse, so only the metadata takes memory) so that the
 * close succeeds and the library stays usable. */
static void h5_discard_file(hid_t f)
{
	hid_t fapl = H5Fget_access_plist(f);
	int *fdp = NULL;
	bool sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
	if (sec2 && H5Fget_vfd_handle(f, fapl, (void **)&fdp) >= 0 && fdp && *fdp >= 0) {
		int mfd = memfd_create("pp-ckpt-discard", MFD_CLOEXEC);
		if (mfd >= 0) {
			dup2(mfd, *fdp);
			close(mfd);
		}
	}
	if (fapl >= 0)
		H5Pclose(fapl);
}

/* The optimizer parts of s: /adam_m/NAME and /adam_v/NAME, 1-d, with the
 * block's global_shape, offset and shape and the ranges' slice_begin and
 * slice_end as attributes. */
static int write_optim_body(hid_t f, const char *path, const ckpt_state *s, pp_err *e)
{
	hid_t g[N_GROUPS];
	int rc;
	if ((rc = write_root_attrs(f, path, s, e)) || (rc = create_groups(f, path, G_ADAM_M, G_ADAM_V, g, e)))
		return rc;
	for (int i = 0; i < s->n_optim && !rc; i++) {
		const ckpt_optim_part *p = &s->optim[i];
		int64_t gs[PP_CKPT_MAXDIM], off[PP_CKPT_MAXDIM], len = 0;
		block_of(p->ndim, p->shape, p->global_shape, p->offset, gs, off);
		for (int r = 0; r < p->n_ranges; r++)
			len += p->end[r] - p->begin[r];
		const pp_real *buf[N_GROUPS] = {NULL, p->m, p->v};
		for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++) {
			hid_t ds = -1;
			bool ok = write_dataset(g[k], p->name, 1, &len, gs, off, buf[k], p->ndim, &ds) && ds >= 0 &&
				  attr_put_i64(ds, "shape", p->ndim, p->shape) &&
				  attr_put_i64(ds, "slice_begin", p->n_ranges, p->begin) &&
				  attr_put_i64(ds, "slice_end", p->n_ranges, p->end);
			if (ds >= 0)
				H5Dclose(ds);
			if (!ok)
				rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot write tensor /%s/%s: %s", path, group_name[k], p->name,
					       h5u_reason());
		}
	}
	for (int k = G_ADAM_M; k <= G_ADAM_V; k++)
		H5Gclose(g[k]);
	return rc;
}

/* Creates DIR/NAME with body(f, path, s), flushes and fsyncs it; on failure
 * no file is left. */
static int write_file(const char *dir, const char *name, const ckpt_state *s,
		      int (*body)(hid_t, const char *, const ckpt_state *, pp_err *), pp_err *e)
{
	char path[CKPT_PATH];
	if (join(path, sizeof path, dir, name, e))
		return e ? e->code : PP_EUSAGE;
	/* a strong close also closes what a failed write left open */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
	hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	H5Pclose(fapl);
	if (!h5u_ok(f))
		return pp_errorf(e, PP_ERUNTIME, "cannot create checkpoint file %s: %s", path, h5u_reason());
	int rc = body(f, path, s, e);
	/* flush first, so that a full disk shows here and not in the close */
	if (!rc && !h5u_ok(H5Fflush(f, H5F_SCOPE_LOCAL)))
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write checkpoint file %s: %s", path, h5u_reason());
	if (rc)
		h5_discard_file(f);
	if (!h5u_ok(H5Fclose(f)) && !rc)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot finish checkpoint file %s: %s", path, h5u_reason());
	if (!rc)
		rc = fs_fsync_path(path, e);
	if (rc)
		unlink(path);
	return rc;
}

int ckpt_write_shard(const char *dir, const ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	if (check_state(s, e))
		return e ? e->code : PP_EUSAGE;
	char name[64];
	ckpt_shard_name(name, sizeof name, s->pp_rank, s->tp_rank);
	return write_file(dir, name, s, write_shard_body, e);
}

int ckpt_write_optim_shard(const char *dir, const ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	if (check_header(s, e) || check_optim_parts(s, e))
		return e ? e->code : PP_EUSAGE;
	if (!s->optim_per_dp)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: optimizer files are written with optim_per_dp set "
					       "(its shard holds params only)");
	char name[64];
	ckpt_optim_name(name, sizeof name, s->pp_rank, s->tp_rank, s->dp_rank);
	return write_file(dir, name, s, write_optim_body, e);
}

/* ------------------------------------------------- building the manifest */

static int add_slice(ckpt_manifest *m, json_t *index, const char *path, const char *name, int file, int nd,
		     const int64_t *global, const int64_t *offset, const int64_t *shape, bool adam, pp_err *e)
{
	char a[128], b[128];
	json_t *ix = json_object_get(index, name);
	ckpt_tensor_info *t;
	if (!ix) {
		if (m->n_tensors % 64 == 0) {
			void *p = realloc(m->tensors, (size_t)(m->n_tensors + 64) * sizeof *m->tensors);
			if (!p)
				return pp_errorf(e, PP_ERUNTIME, "out of memory");
			m->tensors = p;
		}
		t = &m->tensors[m->n_tensors];
		memset(t, 0, sizeof *t);
		if (!(t->name = strdup(name)))
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		t->ndim = nd;
		memcpy(t->global_shape, global, sizeof t->global_shape);
		json_object_set_new(index, name, json_integer(m->n_tensors++));
	} else {
		t = &m->tensors[json_integer_value(ix)];
		if (t->ndim != nd || !same_dims(nd, t->global_shape, global))
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has global shape %s; %s says %s", path, name,
					 shape_str(a, sizeof a, nd, global), m->files[t->shards[0].file].name,
					 shape_str(b, sizeof b, t->ndim, t->global_shape));
	}
	t->adam = t->adam || adam;
	void *p = realloc(t->shards, (size_t)(t->n_shards + 1) * sizeof *t->shards);
	if (!p)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	t->shards = p;
	ckpt_slice_info *s = &t->shards[t->n_shards++];
	memset(s, 0, sizeof *s);
	s->file = file;
	memcpy(s->offset, offset, (size_t)nd * sizeof *offset);
	memcpy(s->shape, shape, (size_t)nd * sizeof *shape);
	s->adam = adam;
	return PP_OK;
}

/* Dataspace dims of an open dataset; false if not 1..MAXDIM dims. */
static bool dataset_dims(hid_t ds, int *nd, int64_t *dims)
{
	hid_t sp = H5Dget_space(ds);
	hsize_t d[PP_CKPT_MAXDIM];
	int n = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
	bool ok = n >= 1 && n <= PP_CKPT_MAXDIM && H5Sget_simple_extent_dims(sp, d, NULL) == n;
	if (sp >= 0)
		H5Sclose(sp);
	for (int i = 0; ok && i < n; i++)
		dims[i] = (int64_t)d[i];
	*nd = n;
	return ok;
}

static bool is_float32(hid_t ds)
{
	hid_t t = H5Dget_type(ds);
	bool ok = t >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4;
	if (t >= 0)
		H5Tclose(t);
	return ok;
}

/* Checks /GROUP/NAME in f: float32 with the given slice shape. */
static int check_dataset(hid_t f, const char *path, int k, const char *name, int nd, const int64_t *shape,
			 pp_err *e)
{
	char dpath[1100], a[128], b[128];
	snprintf(dpath, sizeof dpath, "%s/%s", group_name[k], name);
	if (H5Lexists(f, group_name[k], H5P_DEFAULT) <= 0 || H5Lexists(f, dpath, H5P_DEFAULT) <= 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s is missing", path, dpath);
	hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
	if (!h5u_ok(ds))
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot open /%s: %s", path, dpath, h5u_reason());
	int dn;
	int64_t dims[PP_CKPT_MAXDIM];
	bool ok = dataset_dims(ds, &dn, dims), f32 = is_float32(ds);
	H5Dclose(ds);
	if (!f32)
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s is not float32", path, dpath);
	if (!ok || dn != nd || !same_dims(nd, dims, shape))
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s has shape %s; expected %s", path, dpath,
				 ok ? shape_str(a, sizeof a, dn, dims) : "(unreadable)", shape_str(b, sizeof b, nd, shape));
	return PP_OK;
}

/* The name of link i of group g (malloc'd), or NULL. */
static char *link_name(hid_t g, hsize_t i)
{
	ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
	char *name = n > 0 ? malloc((size_t)n + 1) : NULL;
	if (name && H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)n + 1, H5P_DEFAULT) != n) {
		free(name);
		name = NULL;
	}
	return name;
}

/* Tensors of one shard file into m. */
static int scan_shard(hid_t f, const char *path, ckpt_manifest *m, int file, json_t *index, pp_err *e)
{
	hid_t g = H5Gopen2(f, "params", H5P_DEFAULT);
	if (!h5u_ok(g))
		return pp_errorf(e, PP_ERUNTIME, "%s: no /params group: %s", path, h5u_reason());
	H5G_info_t info;
	int rc = h5u_ok(H5Gget_info(g, &info)) ? PP_OK : pp_errorf(e, PP_ERUNTIME, "%s: cannot list /params", path);
	char *name = NULL;
	for (hsize_t i = 0; !rc && i < info.nlinks; i++) {
		free(name);
		if (!(name = link_name(g, i))) {
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot list /params", path);
			break;
		}
		hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
		if (!h5u_ok(ds)) {
			rc = pp_errorf(e, PP_ERUNTIME, "%s: /params/%s is not a dataset", path, name);
			break;
		}
		int nd, ng = 0, no = 0;
		int64_t shape[PP_CKPT_MAXDIM], global[PP_CKPT_MAXDIM], offset[PP_CKPT_MAXDIM];
		bool ok = dataset_dims(ds, &nd, shape) &&
			  attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, global, &ng) &&
			  attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, offset, &no) && ng == nd && no == nd;
		H5Dclose(ds);
		if (!ok) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: /params/%s needs 1 to %d dimensions and int64 attributes global_shape and offset of as many",
				       path, name, PP_CKPT_MAXDIM);
			break;
		}
		if ((rc = check_dataset(f, path, G_PARAMS, name, nd, shape, e)))
			break;
		char mpath[1100];
		snprintf(mpath, sizeof mpath, "adam_m/%s", name);
		bool adam = H5Lexists(f, "adam_m", H5P_DEFAULT) > 0 && H5Lexists(f, mpath, H5P_DEFAULT) > 0;
		for (int k = G_ADAM_M; adam && k <= G_ADAM_V && !rc; k++)
			rc = check_dataset(f, path, k, name, nd, shape, e);
		if (!rc)
			rc = add_slice(m, index, path, name, file, nd, global, offset, shape, adam, e);
	}
	free(name);
	H5Gclose(g);
	return rc;
}

/* The optimizer ranges of /adam_m/NAME in optimizer file f into tensor
 * NAME of m, which a shard must have listed. */
static int scan_optim_dataset(hid_t f, const char *path, ckpt_manifest *m, int file, json_t *index, const char *name,
			      pp_err *e)
{
	char dpath[1100];
	snprintf(dpath, sizeof dpath, "adam_m/%s", name);
	json_t *ix = json_object_get(index, name);
	if (!ix)
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s is the optimizer state of a tensor that no shard holds", path, dpath);
	ckpt_tensor_info *t = &m->tensors[json_integer_value(ix)];
	int nd = t->ndim, ng = 0, no = 0, ns = 0, nb = 0, ne = 0, rc = PP_OK;
	int64_t global[PP_CKPT_MAXDIM], offset[PP_CKPT_MAXDIM], shape[PP_CKPT_MAXDIM], *begin = NULL, *end = NULL, len = 0;
	hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
	bool ok = h5u_ok(ds) && attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, global, &ng) &&
		  attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, offset, &no) &&
		  attr_get_i64(ds, "shape", PP_CKPT_MAXDIM, shape, &ns) && attr_get_i64_all(ds, "slice_begin", &begin, &nb) &&
		  attr_get_i64_all(ds, "slice_end", &end, &ne) && ng == nd && no == nd && ns == nd && nb == ne;
	if (ds >= 0)
		H5Dclose(ds);
	if (!ok)
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s: /%s needs int64 attributes global_shape, offset and shape of %d elements (the tensor's "
			       "dimensions) and slice_begin and slice_end of as many as each other",
			       path, dpath, nd);
	else if (!same_dims(nd, global, t->global_shape))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: /%s has global shape %s; %s says %s", path, dpath,
			       shape_str((char[128]){0}, 128, nd, global), m->files[t->shards[0].file].name,
			       shape_str((char[128]){0}, 128, nd, t->global_shape));
	for (int i = 0; !rc && i < nb; i++)
		len += end[i] - begin[i];
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++)
		rc = check_dataset(f, path, k, name, 1, &len, e);
	if (!rc)
		rc = add_ranges(path, dpath, t, file, offset, shape, begin, end, nb, e);
	t->adam = true;
	free(begin);
	free(end);
	return rc;
}

/* Tensors of one optimizer file into m: /adam_m and /adam_v name the same
 * datasets. */
static int scan_optim(hid_t f, const char *path, ckpt_manifest *m, int file, json_t *index, pp_err *e)
{
	hid_t g[N_GROUPS] = {-1, -1, -1};
	H5G_info_t info[N_GROUPS];
	int rc = PP_OK;
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++)
		if (H5Lexists(f, group_name[k], H5P_DEFAULT) <= 0 ||
		    !h5u_ok(g[k] = H5Gopen2(f, group_name[k], H5P_DEFAULT)) || !h5u_ok(H5Gget_info(g[k], &info[k])))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot list /%s: %s", path, group_name[k], h5u_reason());
	if (!rc && info[G_ADAM_M].nlinks != info[G_ADAM_V].nlinks)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: /adam_m has %llu tensors, /adam_v %llu", path,
			       (unsigned long long)info[G_ADAM_M].nlinks, (unsigned long long)info[G_ADAM_V].nlinks);
	for (hsize_t i = 0; !rc && i < info[G_ADAM_M].nlinks; i++) {
		char *name = link_name(g[G_ADAM_M], i);
		rc = name ? scan_optim_dataset(f, path, m, file, index, name, e)
			  : pp_errorf(e, PP_ERUNTIME, "%s: cannot list /adam_m", path);
		free(name);
	}
	for (int k = G_ADAM_M; k <= G_ADAM_V; k++)
		if (g[k] >= 0)
			H5Gclose(g[k]);
	return rc;
}

/* The manifest of the files in dir, which must all be for `step`. Shards
 * first, so that the optimizer files' tensors are known. */
static int manifest_build(const char *dir, long step, ckpt_manifest *m, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->step = step;
	DIR *d = opendir(dir);
	if (!d)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint commit: %s: %s", dir, strerror(errno));
	int rc = PP_OK, cap = 0, pp, tp, dp;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (file_kind(de->d_name, &pp, &tp, &dp) == F_NONE) {
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: unexpected file %s in %s", de->d_name, dir);
			break;
		}
		if (m->n_files == cap) {
			cap = cap ? 2 * cap : 8;
			void *p = realloc(m->files, (size_t)cap * sizeof *m->files);
			if (!p) {
				rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
				break;
			}
			m->files = p;
		}
		memset(&m->files[m->n_files], 0, sizeof *m->files);
		fmt_checked(m->files[m->n_files++].name, sizeof m->files->name, NULL, "%s", de->d_name);
	}
	closedir(d);
	if (!rc && m->n_files == 0)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: no shard files in %s", dir);
	if (rc) {
		ckpt_manifest_free(m);
		return rc;
	}
	qsort(m->files, (size_t)m->n_files, sizeof *m->files, cmp_file);

	json_t *index = json_object();
	char path[CKPT_PATH], where[CKPT_PATH + 32];
	snprintf(where, sizeof where, "checkpoint commit: %s", dir);
	int first = -1; /* the file whose version and mesh the others must match */
	for (int kind = F_SHARD; kind <= F_OPTIM; kind++)
		for (int i = 0; !rc && i < m->n_files; i++) {
			if (file_kind(m->files[i].name, &pp, &tp, &dp) != kind)
				continue;
			if ((rc = join(path, sizeof path, dir, m->files[i].name, e)))
				break;
			hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
			if (!h5u_ok(f)) {
				rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: cannot open %s: %s", path, h5u_reason());
				break;
			}
			file_attrs a;
			rc = read_file_attrs(f, path, m->files[i].name, &a, e);
			if (!rc && a.step != step)
				rc = pp_errorf(e, PP_ERUNTIME, "%s holds step %lld; committing step %ld", path, (long long)a.step,
					       step);
			if (!rc && first < 0) {
				first = i;
				m->version = (int)a.version;
				m->pp_size = (int)a.pp_size;
				m->tp_size = (int)a.tp_size;
				m->dp_size = (int)a.dp_size;
			}
			if (!rc && a.version != m->version)
				rc = pp_errorf(e, PP_ERUNTIME,
					       "%s has format version %lld; %s has %d (shards are written with optim_per_dp "
					       "when the checkpoint has optimizer files)",
					       path, (long long)a.version, m->files[first].name, m->version);
			if (!rc && (a.pp_size != m->pp_size || a.tp_size != m->tp_size || a.dp_size != m->dp_size))
				rc = pp_errorf(e, PP_ERUNTIME,
					       "%s was written for mesh pp=%lld tp=%lld dp=%lld; %s for pp=%d tp=%d dp=%d", path,
					       (long long)a.pp_size, (long long)a.tp_size, (long long)a.dp_size,
					       m->files[first].name, m->pp_size, m->tp_size, m->dp_size);
			if (!rc)
				rc = kind == F_SHARD ? scan_shard(f, path, m, i, index, e) : scan_optim(f, path, m, i, index, e);
			H5Fclose(f);
		}
	json_decref(index);
	if (!rc && first < 0)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: no shard files in %s", dir);
	if (!rc)
		rc = check_mesh_files(where, m, e);
	for (int i = 0; !rc && i < m->n_tensors; i++)
		rc = check_cover(where, m, &m->tensors[i], e);
	if (!rc)
		qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, cmp_tensor);
	for (int i = 0; !rc && i < m->n_files; i++)
		if (!(rc = join(path, sizeof path, dir, m->files[i].name, e)))
			rc = sha256_file(path, m->files[i].sha256, &m->files[i].bytes, e);
	if (rc)
		ckpt_manifest_free(m);
	return rc;
}

/* --------------------------------------------- run directory, save, keep */

static bool pid_alive(long pid)
{
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* .tmp-step_N-PID and .trash-step_N-PID left by processes that are gone
 * (or by this one, from an earlier failed attempt) */
static void remove_stale(const char *ckpts)
{
	DIR *d = opendir(ckpts);
	if (!d)
		return;
	struct dirent *de;
	char path[CKPT_PATH];
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, ".tmp-", 5) != 0 && strncmp(de->d_name, ".trash-", 7) != 0)
			continue;
		const char *dash = strrchr(de->d_name, '-');
		char *end;
		long pid = strtol(dash + 1, &end, 10);
		if (*end || end == dash + 1)
			continue;
		if ((pid == (long)getpid() || !pid_alive(pid)) &&
		    snprintf(path, sizeof path, "%s/%s", ckpts, de->d_name) < (int)sizeof path)
			fs_rm_rf(path); /* a failure here is retried by the next save */
	}
	closedir(d);
}

static int cmp_long_desc(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x < y) - (x > y);
}

/* step_* directories under ckpts, newest first; none when ckpts is absent */
static int list_steps(const char *ckpts, long **steps, int *n, pp_err *e)
{
	*steps = NULL;
	*n = 0;
	DIR *d = opendir(ckpts);
	if (!d)
		return errno == ENOENT ? PP_OK
				       : pp_errorf(e, PP_ERUNTIME, "cannot list checkpoints in %s: %s", ckpts, strerror(errno));
	int cap = 0;
	struct dirent *de;
	long s;
	while ((de = readdir(d))) {
		if (!parse_step_name(de->d_name, &s))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			long *p = realloc(*steps, (size_t)cap * sizeof *p);
			if (!p) {
				closedir(d);
				free(*steps);
				*steps = NULL;
				return pp_errorf(e, PP_ERUNTIME, "out of memory");
			}
			*steps = p;
		}
		(*steps)[(*n)++] = s;
	}
	closedir(d);
	qsort(*steps, (size_t)*n, sizeof **steps, cmp_long_desc);
	return PP_OK;
}

static int step_path(char *buf, size_t n, const char *ckpts, long step)
{
	return fmt_checked(buf, n, NULL, "%s/step_%08ld", ckpts, step);
}

/* Complete: the manifest parses and its files have their recorded sizes.
 * A checkpoint of another format version counts, so that loading it says
 * why it cannot be read instead of silently resuming from an older one. */
static bool step_complete(const char *dir)
{
	ckpt_manifest m;
	int version;
	if (manifest_read(dir, &m, &version, NULL))
		return version != 0 && !version_known(version);
	bool ok = check_files(dir, &m, false, NULL) == PP_OK;
	ckpt_manifest_free(&m);
	return ok;
}

/* Moves dir out of the step_* namespace in one rename, then deletes it. */
static int remove_checkpoint(const char *ckpts, const char *dir, long step, pp_err *e)
{
	char trash[CKPT_PATH];
	if (fmt_checked(trash, sizeof trash, e, "%s/.trash-step_%08ld-%ld", ckpts, step, (long)getpid()))
		return PP_EUSAGE;
	if (rename(dir, trash) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot remove old checkpoint %s: %s", dir, strerror(errno));
	if (fs_fsync_path(ckpts, e))
		return e ? e->code : PP_ERUNTIME;
	if (fs_rm_rf(trash) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot remove old checkpoint %s (moved to %s): %s", dir, trash,
				 strerror(errno));
	return PP_OK;
}

/* Keeps the newest `keep` complete checkpoints, and `saved` always. */
static int prune(const char *ckpts, int keep, long saved, pp_err *e)
{
	if (keep <= 0)
		return PP_OK;
	long *steps;
	int n, rc;
	if ((rc = list_steps(ckpts, &steps, &n, e)))
		return rc;
	int complete = 0;
	char dir[CKPT_PATH];
	for (int i = 0; i < n && !rc; i++) {
		if (step_path(dir, sizeof dir, ckpts, steps[i]) || !step_complete(dir))
			continue;
		if (complete++ < keep || steps[i] == saved)
			continue;
		rc = remove_checkpoint(ckpts, dir, steps[i], e);
	}
	free(steps);
	return rc;
}

static int ckpts_dir(char *buf, size_t n, const char *run_dir, pp_err *e)
{
	return join(buf, n, run_dir, "checkpoints", e);
}

int ckpt_begin(const char *run_dir, long step, char *tmp_dir, size_t tmp_size, pp_err *e)
{
	char ckpts[CKPT_PATH], tmp[CKPT_PATH];
	if (step < 0)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: step %ld is negative", step);
	if (ckpts_dir(ckpts, sizeof ckpts, run_dir, e) || fs_mkdir_p(ckpts, e))
		return e ? e->code : PP_ERUNTIME;
	remove_stale(ckpts);
	int k = snprintf(tmp, sizeof tmp, "%s/.tmp-step_%08ld-%ld", ckpts, step, (long)getpid());
	if (k < 0 || (size_t)k >= sizeof tmp || (size_t)k >= tmp_size)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: path too long under %s", ckpts);
	if (mkdir(tmp, 0777) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", tmp, strerror(errno));
	snprintf(tmp_dir, tmp_size, "%s", tmp);
	return PP_OK;
}

/* Renames tmp to final; an existing final is swapped out atomically where
 * the file system allows (RENAME_EXCHANGE), else moved aside first. */
static int install(const char *ckpts, const char *tmp, const char *final, long step, pp_err *e)
{
	if (rename(tmp, final) == 0)
		return fs_fsync_path(ckpts, e);
	if (errno != ENOTEMPTY && errno != EEXIST)
		return pp_errorf(e, PP_ERUNTIME, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
#ifdef RENAME_EXCHANGE
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
		if (fs_fsync_path(ckpts, e))
			return e ? e->code : PP_ERUNTIME;
		fs_rm_rf(tmp); /* now the old checkpoint; stale-removed later if this fails */
		return PP_OK;
	}
	if (errno != EINVAL && errno != ENOSYS)
		return pp_errorf(e, PP_ERUNTIME, "cannot replace %s with %s: %s", final, tmp, strerror(errno));
#endif
	char trash[CKPT_PATH];
	if (fmt_checked(trash, sizeof trash, e, "%s/.trash-step_%08ld-%ld", ckpts, step, (long)getpid()))
		return PP_EUSAGE;
	if (rename(final, trash) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot move %s aside: %s", final, strerror(errno));
	if (rename(tmp, final) != 0) {
		int err = errno;
		rename(trash, final);
		return pp_errorf(e, PP_ERUNTIME, "cannot rename %s to %s: %s", tmp, final, strerror(err));
	}
	if (fs_fsync_path(ckpts, e))
		return e ? e->code : PP_ERUNTIME;
	fs_rm_rf(trash);
	return PP_OK;
}

int ckpt_commit(const char *run_dir, const char *tmp_dir, long step, int keep, pp_err *e)
{
	h5u_quiet();
	char ckpts[CKPT_PATH], final[CKPT_PATH], path[CKPT_PATH];
	ckpt_manifest m;
	int rc;
	if ((rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e)) || (rc = join(path, sizeof path, tmp_dir, MANIFEST, e)))
		return rc;
	if ((rc = manifest_build(tmp_dir, step, &m, e)))
		return rc;
	json_t *root = manifest_to_json(&m);
	char *text = json_dumps(root, JSON_SORT_KEYS | JSON_INDENT(2));
	json_decref(root);
	ckpt_manifest_free(&m);
	if (!text)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint commit: cannot format " MANIFEST);
	size_t n = strlen(text);
	char *line = realloc(text, n + 2);
	if (!line) {
		free(text);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	memcpy(line + n, "\n", 2);
	rc = write_file_synced(path, line, e);
	free(line);
	if (rc || (rc = fs_fsync_path(tmp_dir, e)))
		return rc;
	if ((rc = fmt_checked(final, sizeof final, e, "%s/step_%08ld", ckpts, step)))
		return rc;
	if ((rc = install(ckpts, tmp_dir, final, step, e)))
		return rc;
	if ((rc = prune(ckpts, keep, step, e)))
		return pp_err_prefix(e, "checkpoint %s saved, but keeping the newest %d failed", final, keep);
	return PP_OK;
}

int ckpt_save(const char *run_dir, const ckpt_state *s, int keep, pp_err *e)
{
	if (check_state(s, e))
		return e ? e->code : PP_EUSAGE;
	if (s->pp_size * s->tp_size != 1)
		return pp_errorf(e, PP_EUSAGE,
				 "ckpt_save writes one shard, but mesh pp=%d tp=%d has %d: use ckpt_begin, "
				 "ckpt_write_shard on every rank, then ckpt_commit",
				 s->pp_size, s->tp_size, s->pp_size * s->tp_size);
	if (s->optim_per_dp && s->dp_size != 1)
		return pp_errorf(e, PP_EUSAGE,
				 "ckpt_save writes one optimizer file, but dp=%d ranks each have one: use ckpt_begin, "
				 "ckpt_write_shard, ckpt_write_optim_shard on every rank, then ckpt_commit",
				 s->dp_size);
	char tmp[CKPT_PATH];
	int rc = ckpt_begin(run_dir, s->step, tmp, sizeof tmp, e);
	if (rc)
		return rc;
	if ((rc = ckpt_write_shard(tmp, s, e)) || (s->optim_per_dp && (rc = ckpt_write_optim_shard(tmp, s, e))) ||
	    (rc = ckpt_commit(run_dir, tmp, s->step, keep, e)))
		fs_rm_rf(tmp); /* gone already when only the pruning failed */
	return rc;
}

static int find_step(const char *run_dir, char *dir, size_t dir_size, long *step,
		     bool complete_only, pp_err *e)
{
	h5u_quiet();
	*step = -1;
	if (dir_size)
		dir[0] = '\0';
	char ckpts[CKPT_PATH], path[CKPT_PATH];
	long *steps;
	int n, rc;
	if ((rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e)) || (rc = list_steps(ckpts, &steps, &n, e)))
		return rc;
	for (int i = 0; i < n; i++) {
		if (step_path(path, sizeof path, ckpts, steps[i]) ||
		    (complete_only && !step_complete(path)))
			continue;
		if (strlen(path) >= dir_size)
			rc = pp_errorf(e, PP_EUSAGE, "checkpoint path %s does not fit in %zu bytes", path, dir_size);
		else {
			snprintf(dir, dir_size, "%s", path);
			*step = steps[i];
		}
		break;
	}
	free(steps);
	return rc;
}

int ckpt_find_latest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e)
{
	return find_step(run_dir, dir, dir_size, step, true, e);
}

int ckpt_find_newest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e)
{
	return find_step(run_dir, dir, dir_size, step, false, e);
}

/* ------------------------------------------------------------- reading */

/* Shard files of one checkpoint, opened on first use. With hash, a file's
 * sha256 is checked before it is opened, so a rank hashes only the shards
 * it reads. */
typedef struct {
	const char *dir;
	const ckpt_manifest *m;
	bool hash;
	hid_t *fh; /* one per file, -1 until opened */
} shard_reader;

static int reader_init(shard_reader *r, const char *dir, const ckpt_manifest *m, bool hash, pp_err *e)
{
	*r = (shard_reader){.dir = dir, .m = m, .hash = hash, .fh = malloc((size_t)(m->n_files + 1) * sizeof(hid_t))};
	for (int i = 0; r->fh && i < m->n_files; i++)
		r->fh[i] = -1;
	return r->fh ? PP_OK : pp_errorf(e, PP_ERUNTIME, "out of memory");
}

static void reader_close(shard_reader *r)
{
	for (int i = 0; r->fh && i < r->m->n_files; i++)
		h5_close_file(&r->fh[i]);
	free(r->fh);
	r->fh = NULL;
}

static int reader_open(shard_reader *r, int file, pp_err *e)
{
	int rc = PP_OK;
	if (r->fh[file] < 0 && !(rc = check_file(r->dir, &r->m->files[file], r->hash, e)))
		rc = file_open(r->dir, r->m, file, &r->fh[file], e);
	return rc;
}

/* Row-major index of element idx (nd dims) of a block of shape dims. */
static int64_t flat_index(int nd, const int64_t *dims, const int64_t *idx)
{
	int64_t at = 0;
	for (int d = 0; d < nd; d++)
		at = at * dims[d] + idx[d];
	return at;
}

/* Copies elements [x, x + n) of block (bo, bs), counted in its row-major
 * order, from src into out, the block (ro, rs) of the same tensor, where
 * the two blocks meet. Returns the number of elements copied. */
static int64_t scatter_range(int nd, const int64_t *bo, const int64_t *bs, int64_t x, int64_t n, const pp_real *src,
			     const int64_t *ro, const int64_t *rs, pp_real *out)
{
	const int last = nd - 1;
	int64_t copied = 0;
	for (int64_t i = x; i < x + n;) {
		int64_t idx[PP_CKPT_MAXDIM], rem = i;
		for (int d = last; d >= 0; d--) {
			idx[d] = rem % bs[d];
			rem /= bs[d];
		}
		/* a run along the last dimension */
		int64_t run = bs[last] - idx[last] < x + n - i ? bs[last] - idx[last] : x + n - i;
		bool inside = true;
		int64_t row = 0;
		for (int d = 0; d < last; d++) {
			int64_t g = bo[d] + idx[d] - ro[d];
			inside = inside && g >= 0 && g < rs[d];
			row = row * rs[d] + g;
		}
		int64_t lo = bo[last] + idx[last], hi = lo + run;
		int64_t clo = lo > ro[last] ? lo : ro[last], chi = hi < ro[last] + rs[last] ? hi : ro[last] + rs[last];
		if (inside && clo < chi) {
			memcpy(out + row * rs[last] + (clo - ro[last]), src + (i - x) + (clo - lo),
			       (size_t)(chi - clo) * sizeof *out);
			copied += chi - clo;
		}
		i += run;
	}
	return copied;
}

/* Elements in t's optimizer datasets in file. */
static int64_t optim_dataset_len(const ckpt_tensor_info *t, int file)
{
	int64_t n = 0;
	for (int i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].file == file && t->ranges[i].at + t->ranges[i].end - t->ranges[i].begin > n)
			n = t->ranges[i].at + t->ranges[i].end - t->ranges[i].begin;
	return n;
}

/* Reads /GROUP/NAME elements [at, at + n) of an open optimizer dataset into
 * buf. */
static bool read_1d(hid_t ds, int64_t at, int64_t n, pp_real *buf, int64_t buf_len, int64_t buf_at)
{
	hsize_t fstart = (hsize_t)at, count = (hsize_t)n, mdim = (hsize_t)buf_len, mstart = (hsize_t)buf_at;
	hid_t fs = -1, ms = -1;
	bool ok = h5u_ok(fs = H5Dget_space(ds)) &&
		  h5u_ok(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &fstart, NULL, &count, NULL)) &&
		  h5u_ok(ms = H5Screate_simple(1, &mdim, NULL)) &&
		  h5u_ok(H5Sselect_hyperslab(ms, H5S_SELECT_SET, &mstart, NULL, &count, NULL)) &&
		  h5u_ok(H5Dread(ds, H5T_MEM_REAL, ms, fs, H5P_DEFAULT, buf));
	if (ms >= 0)
		H5Sclose(ms);
	if (fs >= 0)
		H5Sclose(fs);
	return ok;
}

enum { SCATTER_CHUNK = 1 << 20 }; /* elements staged at a time */

/* Reads the part of optimizer range g of tensor t (group k: adam_m or
 * adam_v) that falls in the block (ro, rs) into out; adds the elements
 * read to *got. */
static int read_range(shard_reader *r, const ckpt_tensor_info *t, int k, const ckpt_range_info *g,
		      const int64_t *ro, const int64_t *rs, pp_real *out, int64_t *got, pp_err *e)
{
	int nd = t->ndim, rc;
	/* the part of the range inside R: between the flat indices in the
	 * block of the first and last element of the blocks' intersection */
	int64_t first[PP_CKPT_MAXDIM], lastel[PP_CKPT_MAXDIM];
	for (int d = 0; d < nd; d++) {
		int64_t lo = ro[d] > g->offset[d] ? ro[d] : g->offset[d];
		int64_t hi = ro[d] + rs[d] < g->offset[d] + g->shape[d] ? ro[d] + rs[d] : g->offset[d] + g->shape[d];
		if (lo >= hi)
			return PP_OK;
		first[d] = lo - g->offset[d];
		lastel[d] = hi - 1 - g->offset[d];
	}
	int64_t begin = flat_index(nd, g->shape, first), end = flat_index(nd, g->shape, lastel) + 1;
	begin = begin > g->begin ? begin : g->begin;
	end = end < g->end ? end : g->end;
	if (begin >= end)
		return PP_OK;
	if ((rc = reader_open(r, g->file, e)))
		return rc;
	char dpath[1100], path[CKPT_PATH];
	snprintf(dpath, sizeof dpath, "%s/%s", group_name[k], t->name);
	snprintf(path, sizeof path, "%s/%s", r->dir, r->m->files[g->file].name);
	int64_t len = optim_dataset_len(t, g->file);
	hid_t fh = r->fh[g->file];
	if ((rc = check_dataset(fh, path, k, t->name, 1, &len, e)))
		return rc;
	hid_t ds = H5Dopen2(fh, dpath, H5P_DEFAULT);
	bool ok = h5u_ok(ds);
	int64_t at = g->at + (begin - g->begin);
	if (ok && same_dims(nd, g->offset, ro) && same_dims(nd, g->shape, rs)) {
		/* the block is the one wanted: straight into place */
		ok = read_1d(ds, at, end - begin, out, volume(nd, rs), begin);
		*got += ok ? end - begin : 0;
	} else if (ok) {
		int64_t n = end - begin < SCATTER_CHUNK ? end - begin : SCATTER_CHUNK;
		pp_real *tmp = malloc((size_t)n * sizeof *tmp);
		ok = tmp != NULL;
		for (int64_t x = begin; ok && x < end; x += n) {
			int64_t c = end - x < n ? end - x : n;
			ok = read_1d(ds, at + (x - begin), c, tmp, c, 0);
			*got += ok ? scatter_range(nd, g->offset, g->shape, x, c, tmp, ro, rs, out) : 0;
		}
		free(tmp);
	}
	if (ds >= 0)
		H5Dclose(ds);
	return ok ? PP_OK : pp_errorf(e, PP_ERUNTIME, "%s: cannot read /%s: %s", path, dpath, h5u_reason());
}

/* Reads the part of tensor t's group k (params, adam_m, adam_v) that falls
 * in the block (offset, shape) of the whole tensor, into out (shape,
 * row-major), from the shards and, for m and v, the optimizer files. */
static int read_block(shard_reader *r, const ckpt_tensor_info *t, int k, const int64_t *offset,
		      const int64_t *shape, pp_real *out, pp_err *e)
{
	const char *dir = r->dir;
	const ckpt_manifest *m = r->m;
	hid_t *fh = r->fh;
	int nd = t->ndim, rc = PP_OK;
	hsize_t mdims[PP_CKPT_MAXDIM];
	for (int d = 0; d < nd; d++)
		mdims[d] = (hsize_t)shape[d];
	int64_t got = 0;
	char dpath[1100], path[CKPT_PATH], a[128], b[128];
	snprintf(dpath, sizeof dpath, "%s/%s", group_name[k], t->name);
	for (int i = 0; i < t->n_shards && !rc; i++) {
		const ckpt_slice_info *s = &t->shards[i];
		hsize_t fstart[PP_CKPT_MAXDIM], mstart[PP_CKPT_MAXDIM], count[PP_CKPT_MAXDIM];
		bool empty = k != G_PARAMS && !s->adam;
		for (int d = 0; d < nd; d++) {
			int64_t lo = offset[d] > s->offset[d] ? offset[d] : s->offset[d];
			int64_t hi1 = offset[d] + shape[d], hi2 = s->offset[d] + s->shape[d];
			int64_t hi = hi1 < hi2 ? hi1 : hi2;
			empty = empty || lo >= hi;
			fstart[d] = (hsize_t)(lo - s->offset[d]);
			mstart[d] = (hsize_t)(lo - offset[d]);
			count[d] = lo < hi ? (hsize_t)(hi - lo) : 0;
		}
		if (empty)
			continue;
		if ((rc = reader_open(r, s->file, e)))
			break;
		snprintf(path, sizeof path, "%s/%s", dir, m->files[s->file].name);
		if ((rc = check_dataset(fh[s->file], path, k, t->name, nd, s->shape, e)))
			break;
		hid_t ds = H5Dopen2(fh[s->file], dpath, H5P_DEFAULT), fs = -1, ms = -1;
		bool ok = h5u_ok(ds) && h5u_ok(fs = H5Dget_space(ds)) &&
			  h5u_ok(H5Sselect_hyperslab(fs, H5S_SELECT_SET, fstart, NULL, count, NULL)) &&
			  h5u_ok(ms = H5Screate_simple(nd, mdims, NULL)) &&
			  h5u_ok(H5Sselect_hyperslab(ms, H5S_SELECT_SET, mstart, NULL, count, NULL)) &&
			  h5u_ok(H5Dread(ds, H5T_MEM_REAL, ms, fs, H5P_DEFAULT, out));
		if (ms >= 0)
			H5Sclose(ms);
		if (fs >= 0)
			H5Sclose(fs);
		if (ds >= 0)
			H5Dclose(ds);
		if (!ok)
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot read /%s: %s", path, dpath, h5u_reason());
		int64_t c[PP_CKPT_MAXDIM];
		for (int d = 0; d < nd; d++)
			c[d] = (int64_t)count[d];
		got += volume(nd, c);
	}
	for (int i = 0; k != G_PARAMS && i < t->n_ranges && !rc; i++)
		rc = read_range(r, t, k, &t->ranges[i], offset, shape, out, &got, e);
	if (!rc && got != volume(nd, shape))
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: tensor %s: its files hold %lld of the %lld elements of /%s in the block %s at %s",
			       dir, t->name, (long long)got, (long long)volume(nd, shape), group_name[k],
			       shape_str(a, sizeof a, nd, shape), shape_str(b, sizeof b, nd, offset));
	return rc;
}

static int group_index(const char *group)
{
	for (int k = 0; k < N_GROUPS; k++)
		if (group && strcmp(group, group_name[k]) == 0)
			return k;
	return -1;
}

int ckpt_read_tensor(const char *dir, const ckpt_manifest *m, const char *name, const char *group, pp_real *out,
		     pp_err *e)
{
	h5u_quiet();
	int k = group_index(group);
	if (k < 0)
		return pp_errorf(e, PP_EUSAGE, "checkpoint group \"%s\": expected params, adam_m or adam_v",
				 group ? group : "(null)");
	const ckpt_tensor_info *t = ckpt_manifest_tensor(m, name);
	if (!t)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s has no tensor %s", dir, name);
	if (k != G_PARAMS && !t->adam)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s: tensor %s was saved without adam m/v", dir, name);
	int64_t zero[PP_CKPT_MAXDIM] = {0};
	shard_reader r;
	int rc = reader_init(&r, dir, m, false, e);
	if (!rc)
		rc = read_block(&r, t, k, zero, t->global_shape, out, e);
	reader_close(&r);
	return rc;
}

/* Reads /state into s from the open shard f. */
static int read_state(hid_t f, const char *path, ckpt_state *s, long step, pp_err *e)
{
	struct {
		const char *name;
		hid_t mt;
		void *buf;
		int min, max;
		int n;
	} parts[] = {{"state/step", H5T_NATIVE_INT64, NULL, 0, 0, 0},
		     {"state/rng", H5T_NATIVE_UINT64, s->rng, 4, 4, 0},
		     {"state/data_state", H5T_NATIVE_UINT64, s->data_state, 0, PP_CKPT_DATA_STATE, 0}};
	int64_t fstep = -1;
	parts[0].buf = &fstep;
	for (int i = 0; i < 3; i++) {
		if (H5Lexists(f, "state", H5P_DEFAULT) <= 0 || H5Lexists(f, parts[i].name, H5P_DEFAULT) <= 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: /%s is missing", path, parts[i].name);
		hid_t ds = H5Dopen2(f, parts[i].name, H5P_DEFAULT), sp = H5Dget_space(ds);
		hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
		int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
		bool shape_ok = i == 0 ? rank == 0 : rank == 1 && n >= parts[i].min && n <= parts[i].max;
		bool ok = shape_ok && (n == 0 || h5u_ok(H5Dread(ds, parts[i].mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, parts[i].buf)));
		if (sp >= 0)
			H5Sclose(sp);
		if (ds >= 0)
			H5Dclose(ds);
		if (!shape_ok)
			return pp_errorf(e, PP_ERUNTIME, "%s: /%s has %lld elements; expected %s", path, parts[i].name,
					 (long long)n, i == 0 ? "a scalar" : i == 1 ? "4" : "at most 16");
		if (!ok)
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot read /%s: %s", path, parts[i].name, h5u_reason());
		parts[i].n = (int)n;
	}
	if (fstep != step)
		return pp_errorf(e, PP_ERUNTIME, "%s: /state/step is %lld; " MANIFEST " says %ld", path, (long long)fstep,
				 step);
	s->n_data_state = parts[2].n;
	return PP_OK;
}

/* Index of the shard at (pp, tp), or of shard pp000-tp000 when the mesh
 * has none there. */
static int own_file(const ckpt_manifest *m, int pp, int tp)
{
	char name[64];
	ckpt_shard_name(name, sizeof name, pp, tp);
	int i = file_index(m, name);
	if (i >= 0)
		return i;
	ckpt_shard_name(name, sizeof name, 0, 0);
	return file_index(m, name);
}

int ckpt_load(const char *dir, ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	int rc;
	if ((rc = check_tensors("checkpoint load", s, false, e)))
		return rc;
	ckpt_manifest m;
	if ((rc = ckpt_read_manifest(dir, &m, e)))
		return rc;
	/* every size now (cheap); the sha256 of each shard as it is first
	 * read: it costs about what reading does, and a corrupt checkpoint
	 * must not be trained on */
	shard_reader r = {0};
	if (!(rc = check_files(dir, &m, false, e)))
		rc = reader_init(&r, dir, &m, true, e);
	int own = own_file(&m, s->pp_rank, s->tp_rank);
	char path[CKPT_PATH];
	if (!rc && !(rc = reader_open(&r, own, e))) {
		snprintf(path, sizeof path, "%s/%s", dir, m.files[own].name);
		rc = read_state(r.fh[own], path, s, m.step, e);
	}
	for (int i = 0; i < s->n_tensors && !rc; i++) {
		ckpt_tensor *t = &s->tensors[i];
		char a[128], b[128];
		const ckpt_tensor_info *ti = ckpt_manifest_tensor(&m, t->name);
		if (!ti) {
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: tensor %s is missing (not in %s or any other shard)",
				       dir, t->name, m.files[own].name);
			break;
		}
		int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
		slice_of(t, g, o);
		if (ti->ndim != t->ndim || !same_dims(t->ndim, ti->global_shape, g)) {
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: tensor %s has shape %s in %s; expected %s", dir, t->name,
				       shape_str(a, sizeof a, ti->ndim, ti->global_shape), m.files[ti->shards[0].file].name,
				       shape_str(b, sizeof b, t->ndim, g));
			break;
		}
		if ((t->m || t->v) && !ti->adam) {
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: tensor %s was saved without adam m/v", dir, t->name);
			break;
		}
		pp_real *buf[N_GROUPS] = {t->param, t->m, t->v};
		for (int k = 0; k < N_GROUPS && !rc; k++)
			if (buf[k])
				rc = read_block(&r, ti, k, o, t->shape, buf[k], e);
	}
	if (!rc)
		s->step = m.step;
	reader_close(&r);
	ckpt_manifest_free(&m);
	return rc;
}

/* Checks that /params/NAME of shard f carries the manifest's global shape
 * and offset of slice s. */
static int verify_slice_attrs(hid_t f, const char *path, const ckpt_tensor_info *t, const ckpt_slice_info *s,
			      pp_err *e)
{
	char dpath[1100], a[128], b[128];
	snprintf(dpath, sizeof dpath, "params/%s", t->name);
	hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
	int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
	int ng = 0, no = 0;
	bool ok = ds >= 0 && attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, g, &ng) &&
		  attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, o, &no) && ng == t->ndim && no == t->ndim &&
		  same_dims(t->ndim, g, t->global_shape) && same_dims(t->ndim, o, s->offset);
	if (ds >= 0)
		H5Dclose(ds);
	if (!ok)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: /%s: attributes global_shape and offset differ from " MANIFEST " (global shape %s, offset %s)",
				 path, dpath, shape_str(a, sizeof a, t->ndim, t->global_shape),
				 shape_str(b, sizeof b, t->ndim, s->offset));
	return PP_OK;
}

/* Checks /adam_m/NAME and /adam_v/NAME of optimizer file f (index file)
 * against the manifest's ranges of t there: length and attributes. */
static int verify_optim_tensor(hid_t f, const char *path, const ckpt_tensor_info *t, int file, pp_err *e)
{
	int64_t len = optim_dataset_len(t, file);
	int rc = PP_OK;
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++)
		rc = check_dataset(f, path, k, t->name, 1, &len, e);
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++) {
		char dpath[1100];
		snprintf(dpath, sizeof dpath, "%s/%s", group_name[k], t->name);
		hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
		int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM], sh[PP_CKPT_MAXDIM], *begin = NULL, *end = NULL;
		int ng = 0, no = 0, ns = 0, nb = 0, ne = 0, n = 0;
		bool ok = ds >= 0 && attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, g, &ng) &&
			  attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, o, &no) &&
			  attr_get_i64(ds, "shape", PP_CKPT_MAXDIM, sh, &ns) &&
			  attr_get_i64_all(ds, "slice_begin", &begin, &nb) && attr_get_i64_all(ds, "slice_end", &end, &ne) &&
			  ng == t->ndim && no == t->ndim && ns == t->ndim && nb == ne &&
			  same_dims(t->ndim, g, t->global_shape);
		for (int i = 0; ok && i < t->n_ranges; i++) {
			const ckpt_range_info *r = &t->ranges[i];
			if (r->file != file)
				continue;
			ok = n < nb && begin[n] == r->begin && end[n] == r->end && same_dims(t->ndim, o, r->offset) &&
			     same_dims(t->ndim, sh, r->shape);
			n++;
		}
		ok = ok && n == nb;
		if (ds >= 0)
			H5Dclose(ds);
		free(begin);
		free(end);
		if (!ok)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: /%s: attributes global_shape, offset, shape, slice_begin and slice_end differ from " MANIFEST,
				       path, dpath);
	}
	return rc;
}

int ckpt_verify(const char *dir, pp_err *e)
{
	h5u_quiet();
	ckpt_manifest m;
	int rc;
	if ((rc = ckpt_read_manifest(dir, &m, e)))
		return rc;
	rc = check_files(dir, &m, true, e);
	char path[CKPT_PATH];
	for (int i = 0; i < m.n_files && !rc; i++) {
		hid_t f = -1;
		if ((rc = file_open(dir, &m, i, &f, e)))
			break;
		snprintf(path, sizeof path, "%s/%s", dir, m.files[i].name);
		int pp, tp, dp;
		bool optim = file_kind(m.files[i].name, &pp, &tp, &dp) == F_OPTIM;
		if (!optim) {
			ckpt_state st = {0};
			rc = read_state(f, path, &st, m.step, e);
			if (!rc && (H5Lexists(f, "config", H5P_DEFAULT) <= 0))
				rc = pp_errorf(e, PP_ERUNTIME, "%s: /config is missing", path);
		}
		hsize_t held = 0; /* tensors of this optimizer file */
		for (int j = 0; j < m.n_tensors && !rc; j++) {
			const ckpt_tensor_info *t = &m.tensors[j];
			for (int q = 0; q < t->n_shards && !rc; q++) {
				const ckpt_slice_info *s = &t->shards[q];
				if (s->file != i)
					continue;
				for (int k = 0; k < (s->adam ? N_GROUPS : 1) && !rc; k++)
					rc = check_dataset(f, path, k, t->name, t->ndim, s->shape, e);
				if (!rc)
					rc = verify_slice_attrs(f, path, t, s, e);
			}
			if (optim && optim_dataset_len(t, i) > 0) {
				held++;
				rc = verify_optim_tensor(f, path, t, i, e);
			}
		}
		H5G_info_t info;
		hid_t g = optim && !rc ? H5Gopen2(f, "adam_m", H5P_DEFAULT) : -1;
		if (optim && !rc && (!h5u_ok(g) || !h5u_ok(H5Gget_info(g, &info)) || info.nlinks != held))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: /adam_m holds tensors that " MANIFEST " does not list there", path);
		if (g >= 0)
			H5Gclose(g);
		H5Fclose(f);
	}
	ckpt_manifest_free(&m);
	return rc;
}

int ckpt_read_config(const char *dir, char **json_text, pp_err *e)
{
	h5u_quiet();
	*json_text = NULL;
	ckpt_manifest m;
	int rc;
	if ((rc = ckpt_read_manifest(dir, &m, e)))
		return rc;
	int i = own_file(&m, 0, 0);
	hid_t f = -1;
	if (!(rc = check_files(dir, &m, false, e)) && !(rc = file_open(dir, &m, i, &f, e))) {
		hid_t ds = H5Lexists(f, "config", H5P_DEFAULT) > 0 ? H5Dopen2(f, "config", H5P_DEFAULT) : -1;
		if (ds >= 0) {
			*json_text = read_string(ds, false);
			H5Dclose(ds);
		}
		if (!*json_text)
			rc = pp_errorf(e, PP_ERUNTIME, "%s/%s: /config is missing or not a string", dir, m.files[i].name);
		H5Fclose(f);
	}
	ckpt_manifest_free(&m);
	return rc;
}
