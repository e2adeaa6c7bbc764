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

static int64_t volume(int ndim, const int64_t *d)
{
	int64_t v = 1;
	for (int i = 0; i < ndim; i++)
		v *= d[i];
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

/* ------------------------------------------------------------ manifest */

void ckpt_manifest_free(ckpt_manifest *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n_tensors; i++) {
		free(m->tensors[i].name);
		free(m->tensors[i].shards);
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

/* The files are exactly the pp x tp shards of the mesh. */
static int check_mesh_files(const char *where, const ckpt_manifest *m, pp_err *e)
{
	if (m->pp_size < 1 || m->tp_size < 1 || m->dp_size < 1)
		return pp_errorf(e, PP_ERUNTIME, "%s: mesh pp=%d tp=%d dp=%d is not valid", where,
				 m->pp_size, m->tp_size, m->dp_size);
	for (int i = 0; i < m->n_files; i++) {
		int pp, tp;
		if (!parse_shard_name(m->files[i].name, &pp, &tp))
			return pp_errorf(e, PP_ERUNTIME, "%s: unexpected file %s (shard files are named shard-ppNNN-tpNNN.h5)",
					 where, m->files[i].name);
		if (pp >= m->pp_size || tp >= m->tp_size)
			return pp_errorf(e, PP_ERUNTIME, "%s: %s lies outside the mesh pp=%d tp=%d", where,
					 m->files[i].name, m->pp_size, m->tp_size);
		if (i && strcmp(m->files[i - 1].name, m->files[i].name) == 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: %s is listed twice", where, m->files[i].name);
	}
	if (m->n_files != m->pp_size * m->tp_size) {
		for (int pp = 0; pp < m->pp_size; pp++)
			for (int tp = 0; tp < m->tp_size; tp++) {
				char name[64];
				ckpt_shard_name(name, sizeof name, pp, tp);
				if (file_index(m, name) < 0)
					return pp_errorf(e, PP_ERUNTIME, "%s: shard %s of the pp=%d tp=%d mesh is missing",
							 where, name, m->pp_size, m->tp_size);
			}
	}
	return PP_OK;
}

/* Each shard lies inside its tensor; together they cover it exactly once. */
static int check_cover(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t, pp_err *e)
{
	char a[128], b[128];
	int nd = t->ndim;
	if (nd < 1 || nd > PP_CKPT_MAXDIM)
		return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has %d dimensions (1 to %d supported)", where,
				 t->name, nd, PP_CKPT_MAXDIM);
	for (int d = 0; d < nd; d++)
		if (t->global_shape[d] < 1)
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has global shape %s", where, t->name,
					 shape_str(a, sizeof a, nd, t->global_shape));
	int64_t covered = 0;
	for (int i = 0; i < t->n_shards; i++) {
		const ckpt_slice_info *s = &t->shards[i];
		for (int d = 0; d < nd; d++)
			if (s->offset[d] < 0 || s->shape[d] < 1 || s->offset[d] + s->shape[d] > t->global_shape[d])
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: tensor %s: the slice in %s at offset %s with shape %s lies outside its global shape %s",
						 where, t->name, m->files[s->file].name, shape_str(a, sizeof a, nd, s->offset),
						 shape_str(b, sizeof b, nd, s->shape),
						 shape_str((char[128]){0}, 128, nd, t->global_shape));
		for (int j = 0; j < i; j++) {
			const ckpt_slice_info *o = &t->shards[j];
			bool overlap = true;
			for (int d = 0; d < nd; d++)
				overlap = overlap && s->offset[d] < o->offset[d] + o->shape[d] &&
					  o->offset[d] < s->offset[d] + s->shape[d];
			if (overlap)
				return pp_errorf(e, PP_ERUNTIME,
						 "%s: tensor %s: the slices in %s and %s overlap (each element must be saved once; "
						 "replicated tensors by tp rank 0 only)",
						 where, t->name, m->files[o->file].name, m->files[s->file].name);
		}
		covered += volume(nd, s->shape);
	}
	int64_t total = volume(nd, t->global_shape);
	if (covered != total)
		return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: its slices cover %lld of %lld elements of %s (a shard is missing)",
				 where, t->name, (long long)covered, (long long)total, shape_str(a, sizeof a, nd, t->global_shape));
	return PP_OK;
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
	json_object_set_new(root, "version", json_integer(PP_CKPT_VERSION));
	json_object_set_new(root, "step", json_integer(m->step));
	json_object_set_new(root, "mesh", json_pack("{s:i, s:i, s:i}", "pp", m->pp_size, "tp", m->tp_size,
						    "dp", m->dp_size));
	for (int i = 0; i < m->n_files; i++)
		json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", m->files[i].name, "bytes",
						       (json_int_t)m->files[i].bytes, "sha256", m->files[i].sha256));
	for (int i = 0; i < m->n_tensors; i++) {
		const ckpt_tensor_info *t = &m->tensors[i];
		json_t *shards = json_array();
		for (int j = 0; j < t->n_shards; j++)
			json_array_append_new(shards, json_pack("{s:s, s:o, s:o}", "file", m->files[t->shards[j].file].name,
								"offset", dims_json(t->ndim, t->shards[j].offset), "shape",
								dims_json(t->ndim, t->shards[j].shape)));
		json_object_set_new(tensors, t->name,
				    json_pack("{s:s, s:o, s:b, s:o}", "dtype", "float32", "global_shape",
					      dims_json(t->ndim, t->global_shape), "adam", t->adam, "shards", shards));
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

static int manifest_from_json(const char *where, json_t *root, ckpt_manifest *m, pp_err *e)
{
	json_t *mesh = json_object_get(root, "mesh"), *files = json_object_get(root, "files"),
	       *tensors = json_object_get(root, "tensors"), *step = json_object_get(root, "step");
	if (!json_is_integer(step) || json_integer_value(step) < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: \"step\" must be an integer >= 0", where);
	m->step = (long)json_integer_value(step);
	if (!json_is_object(mesh) || json_unpack(mesh, "{s:i, s:i, s:i}", "pp", &m->pp_size, "tp", &m->tp_size,
						  "dp", &m->dp_size) != 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: \"mesh\" must be {\"pp\": n, \"tp\": n, \"dp\": n}", where);
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
		}
		if (check_cover(where, m, t, e))
			return e ? e->code : PP_ERUNTIME;
	}
	qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, cmp_tensor);
	return PP_OK;
}

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
	} else if ((*version = (int)json_integer_value(ver)) != PP_CKPT_VERSION) {
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s has format version %lld; this pp reads version %d", dir,
			       (long long)json_integer_value(ver), PP_CKPT_VERSION);
	} else {
		m->version = PP_CKPT_VERSION;
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

/* ---------------------------------------------------------- shard files */

/* Root attributes of a shard file, as written by write_shard_body. */
typedef struct {
	int64_t version, step, pp_rank, tp_rank, dp_rank, pp_size, tp_size, dp_size;
} shard_attrs;

static int read_shard_attrs(hid_t f, const char *path, shard_attrs *a, pp_err *e)
{
	char *format = attr_get_str(f, "format");
	bool is_pp = format && strcmp(format, PP_CKPT_FORMAT) == 0;
	free(format);
	if (!is_pp)
		return pp_errorf(e, PP_ERUNTIME, "%s: root attribute format is not \"" PP_CKPT_FORMAT "\"", path);
	if (!attr_get_i64(f, "version", 1, &a->version, NULL))
		return pp_errorf(e, PP_ERUNTIME, "%s: root attribute version missing", path);
	if (a->version != PP_CKPT_VERSION)
		return pp_errorf(e, PP_ERUNTIME, "%s has format version %lld; this pp reads version %d", path,
				 (long long)a->version, PP_CKPT_VERSION);
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
	return PP_OK;
}

/* Opens DIR/FILE and checks its root attributes against the manifest. */
static int shard_open(const char *dir, const ckpt_manifest *m, int file, hid_t *out, pp_err *e)
{
	char path[CKPT_PATH];
	const char *name = m->files[file].name;
	if (join(path, sizeof path, dir, name, e))
		return e ? e->code : PP_EUSAGE;
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (!h5u_ok(f))
		return pp_errorf(e, PP_ERUNTIME, "cannot open checkpoint shard %s: %s", path, h5u_reason());
	shard_attrs a;
	int pp = 0, tp = 0;
	parse_shard_name(name, &pp, &tp);
	int rc = read_shard_attrs(f, path, &a, e);
	if (!rc && a.step != m->step)
		rc = pp_errorf(e, PP_ERUNTIME, "%s holds step %lld; " MANIFEST " says step %ld", path,
			       (long long)a.step, m->step);
	if (!rc && (a.pp_rank != pp || a.tp_rank != tp))
		rc = pp_errorf(e, PP_ERUNTIME, "%s says it is shard pp=%lld tp=%lld; its name says pp=%d tp=%d", path,
			       (long long)a.pp_rank, (long long)a.tp_rank, pp, tp);
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

/* global shape and offset of a requested slice ("not sliced" when global
 * is all zero) */
static void slice_of(const ckpt_tensor *t, int64_t *global, int64_t *offset)
{
	bool sliced = false;
	for (int d = 0; d < t->ndim; d++)
		sliced = sliced || t->global_shape[d] != 0;
	for (int d = 0; d < t->ndim; d++) {
		global[d] = sliced ? t->global_shape[d] : t->shape[d];
		offset[d] = sliced ? t->offset[d] : 0;
	}
}

/* Checks tensors' names, shapes and slices (both for save and load). */
static int check_tensors(const char *what, const ckpt_state *s, bool saving, pp_err *e)
{
	if (s->n_tensors < 0 || (s->n_tensors > 0 && !s->tensors))
		return pp_errorf(e, PP_EUSAGE, "%s: n_tensors %d with no tensors", what, s->n_tensors);
	for (int i = 0; i < s->n_tensors; i++) {
		const ckpt_tensor *t = &s->tensors[i];
		char a[128], b[128], c[128];
		if (!t->name || !t->name[0] || strchr(t->name, '/') || strcmp(t->name, ".") == 0 || strcmp(t->name, "..") == 0 ||
		    strlen(t->name) > 1000)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %d has name \"%s\" (expected a Hugging Face name, no '/')",
					 what, i, t->name ? t->name : "(null)");
		if (t->ndim < 1 || t->ndim > PP_CKPT_MAXDIM)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has %d dimensions (1 to %d supported)", what,
					 t->name, t->ndim, PP_CKPT_MAXDIM);
		int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
		slice_of(t, g, o);
		for (int d = 0; d < t->ndim; d++)
			if (t->shape[d] < 1 || o[d] < 0 || o[d] + t->shape[d] > g[d])
				return pp_errorf(e, PP_EUSAGE,
						 "%s: tensor %s: slice shape %s at offset %s does not fit global shape %s", what,
						 t->name, shape_str(a, sizeof a, t->ndim, t->shape),
						 shape_str(b, sizeof b, t->ndim, o), shape_str(c, sizeof c, t->ndim, g));
		if (!t->param)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has no param buffer", what, t->name);
		if (saving && !t->m != !t->v)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has only one of adam m and v", what, t->name);
		for (int j = 0; j < i; j++)
			if (strcmp(s->tensors[j].name, t->name) == 0)
				return pp_errorf(e, PP_EUSAGE, "%s: tensor %s is listed twice", what, t->name);
	}
	return PP_OK;
}

static int check_state(const ckpt_state *s, pp_err *e)
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
	return check_tensors("checkpoint save", s, true, e);
}

/* A float32 dataset written straight from the caller's buffer (HDF5
 * converts double to float in strips when pp_real is double). */
static bool write_dataset(hid_t g, const char *name, int nd, const int64_t *shape, const int64_t *global,
			  const int64_t *offset, const pp_real *buf)
{
	hsize_t dims[PP_CKPT_MAXDIM];
	for (int d = 0; d < nd; d++)
		dims[d] = (hsize_t)shape[d];
	hid_t sp = H5Screate_simple(nd, dims, NULL), ds = -1;
	bool ok = h5u_ok(ds = H5Dcreate2(g, name, H5T_FILE_REAL, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) &&
		  attr_put_i64(ds, "global_shape", nd, global) && attr_put_i64(ds, "offset", nd, offset) &&
		  h5u_ok(H5Dwrite(ds, H5T_MEM_REAL, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
	if (ds >= 0)
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

static int write_shard_body(hid_t f, const char *path, const ckpt_state *s, pp_err *e)
{
	int64_t ints[8] = {PP_CKPT_VERSION, s->step,    s->pp_rank, s->tp_rank,
			   s->dp_rank,      s->pp_size, s->tp_size, s->dp_size};
	const char *names[8] = {"version", "step", "pp_rank", "tp_rank", "dp_rank", "pp_size", "tp_size", "dp_size"};
	if (!attr_put_str(f, "format", PP_CKPT_FORMAT))
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write attribute format: %s", path, h5u_reason());
	for (int i = 0; i < 8; i++)
		if (!attr_put_i64(f, names[i], 0, &ints[i]))
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot write attribute %s: %s", path, names[i], h5u_reason());

	hid_t g[N_GROUPS];
	for (int k = 0; k < N_GROUPS; k++)
		if (!h5u_ok(g[k] = H5Gcreate2(f, group_name[k], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT))) {
			for (int j = 0; j < k; j++)
				H5Gclose(g[j]);
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot create group /%s: %s", path, group_name[k], h5u_reason());
		}
	int rc = PP_OK;
	for (int i = 0; i < s->n_tensors && !rc; i++) {
		const ckpt_tensor *t = &s->tensors[i];
		const pp_real *buf[N_GROUPS] = {t->param, t->m, t->v};
		int64_t gs[PP_CKPT_MAXDIM], off[PP_CKPT_MAXDIM];
		slice_of(t, gs, off);
		for (int k = 0; k < N_GROUPS && !rc; k++)
			if (buf[k] && !write_dataset(g[k], t->name, t->ndim, t->shape, gs, off, buf[k]))
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

int ckpt_write_shard(const char *dir, const ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	if (check_state(s, e))
		return e ? e->code : PP_EUSAGE;
	char name[64], path[CKPT_PATH];
	ckpt_shard_name(name, sizeof name, s->pp_rank, s->tp_rank);
	if (join(path, sizeof path, dir, name, e))
		return e ? e->code : PP_EUSAGE;
	/* a strong close also closes what a failed write left open */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
	hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	H5Pclose(fapl);
	if (!h5u_ok(f))
		return pp_errorf(e, PP_ERUNTIME, "cannot create checkpoint shard %s: %s", path, h5u_reason());
	int rc = write_shard_body(f, path, s, e);
	/* flush first, so that a full disk shows here and not in the close */
	if (!rc && !h5u_ok(H5Fflush(f, H5F_SCOPE_LOCAL)))
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write checkpoint shard %s: %s", path, h5u_reason());
	if (rc)
		h5_discard_file(f);
	if (!h5u_ok(H5Fclose(f)) && !rc)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot finish checkpoint shard %s: %s", path, h5u_reason());
	if (!rc)
		rc = fs_fsync_path(path, e);
	if (rc)
		unlink(path);
	return rc;
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
		t->adam = adam;
		json_object_set_new(index, name, json_integer(m->n_tensors++));
	} else {
		t = &m->tensors[json_integer_value(ix)];
		if (t->ndim != nd || !same_dims(nd, t->global_shape, global))
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has global shape %s; %s says %s", path, name,
					 shape_str(a, sizeof a, nd, global), m->files[t->shards[0].file].name,
					 shape_str(b, sizeof b, t->ndim, t->global_shape));
		if (t->adam != adam)
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s %s adam m/v; %s %s", path, name,
					 adam ? "has" : "lacks", m->files[t->shards[0].file].name, t->adam ? "has them" : "does not");
	}
	void *p = realloc(t->shards, (size_t)(t->n_shards + 1) * sizeof *t->shards);
	if (!p)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	t->shards = p;
	ckpt_slice_info *s = &t->shards[t->n_shards++];
	memset(s, 0, sizeof *s);
	s->file = file;
	memcpy(s->offset, offset, (size_t)nd * sizeof *offset);
	memcpy(s->shape, shape, (size_t)nd * sizeof *shape);
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
		ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
		free(name);
		name = n > 0 ? malloc((size_t)n + 1) : NULL;
		if (!name || H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)n + 1, H5P_DEFAULT) != n) {
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

/* The manifest of the shard files in dir, which must all be for `step`. */
static int manifest_build(const char *dir, long step, ckpt_manifest *m, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->version = PP_CKPT_VERSION;
	m->step = step;
	DIR *d = opendir(dir);
	if (!d)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint commit: %s: %s", dir, strerror(errno));
	int rc = PP_OK, cap = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		int pp, tp;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (!parse_shard_name(de->d_name, &pp, &tp)) {
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
	if (rc)
		return rc;
	qsort(m->files, (size_t)m->n_files, sizeof *m->files, cmp_file);

	json_t *index = json_object();
	char path[CKPT_PATH], where[CKPT_PATH + 32];
	snprintf(where, sizeof where, "checkpoint commit: %s", dir);
	for (int i = 0; !rc && i < m->n_files; i++) {
		if ((rc = join(path, sizeof path, dir, m->files[i].name, e)))
			break;
		hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
		if (!h5u_ok(f)) {
			rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: cannot open %s: %s", path, h5u_reason());
			break;
		}
		shard_attrs a;
		int pp, tp;
		parse_shard_name(m->files[i].name, &pp, &tp);
		rc = read_shard_attrs(f, path, &a, e);
		if (!rc && a.step != step)
			rc = pp_errorf(e, PP_ERUNTIME, "%s holds step %lld; committing step %ld", path, (long long)a.step, step);
		if (!rc && (a.pp_rank != pp || a.tp_rank != tp))
			rc = pp_errorf(e, PP_ERUNTIME, "%s says it is shard pp=%lld tp=%lld", path, (long long)a.pp_rank,
				       (long long)a.tp_rank);
		if (!rc && i == 0) {
			m->pp_size = (int)a.pp_size;
			m->tp_size = (int)a.tp_size;
			m->dp_size = (int)a.dp_size;
		}
		if (!rc && (a.pp_size != m->pp_size || a.tp_size != m->tp_size || a.dp_size != m->dp_size))
			rc = pp_errorf(e, PP_ERUNTIME, "%s was written for mesh pp=%lld tp=%lld dp=%lld; %s for pp=%d tp=%d dp=%d",
				       path, (long long)a.pp_size, (long long)a.tp_size, (long long)a.dp_size,
				       m->files[0].name, m->pp_size, m->tp_size, m->dp_size);
		if (!rc)
			rc = scan_shard(f, path, m, i, index, e);
		H5Fclose(f);
	}
	json_decref(index);
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
		return version > 0 && version != PP_CKPT_VERSION;
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
	char tmp[CKPT_PATH];
	int rc = ckpt_begin(run_dir, s->step, tmp, sizeof tmp, e);
	if (rc)
		return rc;
	if ((rc = ckpt_write_shard(tmp, s, e)) || (rc = ckpt_commit(run_dir, tmp, s->step, keep, e)))
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
		rc = shard_open(r->dir, r->m, file, &r->fh[file], e);
	return rc;
}

/* Reads the part of tensor t's /GROUP dataset(s) that falls in the block
 * (offset, shape) of the whole tensor, into out (shape, row-major). */
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
		bool empty = false;
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
	if (!rc && got != volume(nd, shape))
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint %s: tensor %s: its shards hold %lld of the %lld elements of the block %s at %s",
			       dir, t->name, (long long)got, (long long)volume(nd, shape), shape_str(a, sizeof a, nd, shape),
			       shape_str(b, sizeof b, nd, offset));
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

int ckpt_verify(const char *dir, pp_err *e)
{
	h5u_quiet();
	ckpt_manifest m;
	int rc;
	if ((rc = ckpt_read_manifest(dir, &m, e)))
		return rc;
	rc = check_files(dir, &m, true, e);
	char path[CKPT_PATH], a[128], b[128];
	for (int i = 0; i < m.n_files && !rc; i++) {
		hid_t f = -1;
		if ((rc = shard_open(dir, &m, i, &f, e)))
			break;
		snprintf(path, sizeof path, "%s/%s", dir, m.files[i].name);
		ckpt_state st = {0};
		rc = read_state(f, path, &st, m.step, e);
		if (!rc && (H5Lexists(f, "config", H5P_DEFAULT) <= 0))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: /config is missing", path);
		for (int j = 0; j < m.n_tensors && !rc; j++) {
			const ckpt_tensor_info *t = &m.tensors[j];
			for (int q = 0; q < t->n_shards && !rc; q++) {
				const ckpt_slice_info *s = &t->shards[q];
				if (s->file != i)
					continue;
				for (int k = 0; k < (t->adam ? N_GROUPS : 1) && !rc; k++)
					rc = check_dataset(f, path, k, t->name, t->ndim, s->shape, e);
				if (rc)
					break;
				char dpath[1100];
				snprintf(dpath, sizeof dpath, "params/%s", t->name);
				hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
				int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
				int ng = 0, no = 0;
				bool ok = ds >= 0 && attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, g, &ng) &&
					  attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, o, &no) && ng == t->ndim &&
					  no == t->ndim && same_dims(t->ndim, g, t->global_shape) &&
					  same_dims(t->ndim, o, s->offset);
				if (ds >= 0)
					H5Dclose(ds);
				if (!ok)
					rc = pp_errorf(e, PP_ERUNTIME,
						       "%s: /%s: attributes global_shape and offset differ from " MANIFEST
						       " (global shape %s, offset %s)",
						       path, dpath, shape_str(a, sizeof a, t->ndim, t->global_shape),
						       shape_str(b, sizeof b, t->ndim, s->offset));
			}
		}
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
	if (!(rc = check_files(dir, &m, false, e)) && !(rc = shard_open(dir, &m, i, &f, e))) {
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
