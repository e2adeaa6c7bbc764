/* manifest.json: reading, checking (the mesh's files, every tensor tiled
 * exactly once) and writing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, nftw */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../base/sha256.h"
#include "internal.h"

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

int ckpt_cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const ckpt_tensor_info *)a)->name, ((const ckpt_tensor_info *)b)->name);
}

int ckpt_cmp_file(const void *a, const void *b)
{
	return strcmp(((const ckpt_file_info *)a)->name, ((const ckpt_file_info *)b)->name);
}

const ckpt_tensor_info *ckpt_manifest_tensor(const ckpt_manifest *m, const char *name)
{
	ckpt_tensor_info key = {.name = (char *)name};
	return bsearch(&key, m->tensors, (size_t)m->n_tensors, sizeof key, ckpt_cmp_tensor);
}

int ckpt_file_index(const ckpt_manifest *m, const char *name)
{
	ckpt_file_info key;
	snprintf(key.name, sizeof key.name, "%s", name);
	const ckpt_file_info *f = bsearch(&key, m->files, (size_t)m->n_files, sizeof key,
					  ckpt_cmp_file);
	return f ? (int)(f - m->files) : -1;
}

/* The files are exactly the pp x tp (x ep, version 3) shards of the mesh
 * and its pp x tp x dp optimizer files: always in version 2, all or none in
 * version 3. */
int ckpt_check_mesh_files(const char *where, const ckpt_manifest *m, pp_err *e)
{
	if (m->pp_size < 1 || m->tp_size < 1 || m->dp_size < 1 || m->ep_size < 1 ||
	    m->dp_size % m->ep_size || (m->version < 3 && m->ep_size != 1))
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: mesh pp=%d tp=%d dp=%d ep=%d is not valid (ep divides dp; ep > 1 "
			"needs format version 3)",
			where, m->pp_size, m->tp_size, m->dp_size, m->ep_size);
	const int ep_size = m->version >= 3 ? m->ep_size : 1;
	long long n_shards = 0, n_optim = 0;
	for (int i = 0; i < m->n_files; i++) {
		const char *name = m->files[i].name;
		int pp, tp, dp, ep, kind = ckpt_file_kind(name, &pp, &tp, &dp, &ep);
		if (kind == F_NONE)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: unexpected file %s (shard files are named shard-ppNNN-tpNNN.h5, or "
				"shard-ppNNN-tpNNN-epNNN.h5 with ep > 1, optimizer files "
				"optim-ppNNN-tpNNN-dpNNN.h5)",
				where, name);
		if (kind == F_OPTIM && m->version < 2)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: %s is an optimizer file, which format version %d does not have (version 2 added them)",
				where, name, m->version);
		if (kind == F_SHARD && (ep < 0) != (ep_size == 1))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: %s: the shards of a mesh with ep=%d are named %s",
					 where, name, m->ep_size,
					 ep_size > 1 ? "shard-ppNNN-tpNNN-epNNN.h5"
						     : "shard-ppNNN-tpNNN.h5");
		if (pp >= m->pp_size || tp >= m->tp_size || dp >= m->dp_size || ep >= ep_size)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: %s lies outside the mesh pp=%d tp=%d dp=%d ep=%d",
					 where, name, m->pp_size, m->tp_size, m->dp_size,
					 m->ep_size);
		if (i && strcmp(m->files[i - 1].name, name) == 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: %s is listed twice", where, name);
		if (kind == F_SHARD)
			n_shards++;
		else
			n_optim++;
	}
	char name[64];
	if (n_shards != (long long)m->pp_size * m->tp_size * ep_size)
		for (int pp = 0; pp < m->pp_size; pp++)
			for (int tp = 0; tp < m->tp_size; tp++)
				for (int ep = 0; ep < ep_size; ep++) {
					ckpt_shard_name(name, sizeof name, pp, tp,
							ckpt_ep_name(ep, ep_size));
					if (ckpt_file_index(m, name) < 0)
						return pp_errorf(
							e, PP_ERUNTIME,
							"%s: shard %s of the pp=%d tp=%d ep=%d mesh is missing",
							where, name, m->pp_size, m->tp_size,
							m->ep_size);
				}
	bool want_optim = m->version == 2 || (m->version >= 3 && n_optim > 0);
	if (want_optim && n_optim != (long long)m->pp_size * m->tp_size * m->dp_size)
		for (int pp = 0; pp < m->pp_size; pp++)
			for (int tp = 0; tp < m->tp_size; tp++)
				for (int dp = 0; dp < m->dp_size; dp++) {
					ckpt_optim_name(name, sizeof name, pp, tp, dp);
					if (ckpt_file_index(m, name) < 0)
						return pp_errorf(
							e, PP_ERUNTIME,
							"%s: optimizer file %s of the pp=%d tp=%d dp=%d mesh is missing "
							"(format version %d has one per rank%s)",
							where, name, m->pp_size, m->tp_size,
							m->dp_size, m->version,
							m->version >= 3 ? " when it has any" : "");
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
static int check_tiling(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t,
			const char *what, const char *missing, const block_ref *b, int n, pp_err *e)
{
	char x[128], y[128], z[128];
	int nd = t->ndim;
	int64_t covered = 0;
	for (int i = 0; i < n; i++) {
		for (int d = 0; d < nd; d++)
			if (b[i].offset[d] < 0 || b[i].shape[d] < 1 ||
			    b[i].offset[d] > t->global_shape[d] - b[i].shape[d])
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: tensor %s: the block of its %s in %s at offset %s with shape %s lies outside its global shape %s",
					where, t->name, what, m->files[b[i].file].name,
					pp_shape_str(x, sizeof x, nd, b[i].offset),
					pp_shape_str(y, sizeof y, nd, b[i].shape),
					pp_shape_str(z, sizeof z, nd, t->global_shape));
		for (int j = 0; j < i; j++) {
			bool overlap = true;
			for (int d = 0; d < nd; d++)
				overlap = overlap &&
					  b[i].offset[d] < b[j].offset[d] + b[j].shape[d] &&
					  b[j].offset[d] < b[i].offset[d] + b[i].shape[d];
			if (overlap)
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: tensor %s: the blocks of its %s in %s and %s overlap (each element must be saved once; "
					"replicated tensors by tp rank 0 only)",
					where, t->name, what, m->files[b[j].file].name,
					m->files[b[i].file].name);
		}
		covered += ckpt_volume(nd, b[i].shape);
	}
	int64_t total = ckpt_volume(nd, t->global_shape);
	if (covered != total)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: tensor %s: its %s cover %lld of %lld elements of %s (%s)",
				 where, t->name, what, (long long)covered, (long long)total,
				 pp_shape_str(x, sizeof x, nd, t->global_shape), missing);
	return PP_OK;
}

static int cmp_range(const void *a, const void *b)
{
	const ckpt_range_info *x = *(const ckpt_range_info *const *)a,
			      *y = *(const ckpt_range_info *const *)b;
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
static int check_ranges(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t,
			block_ref *b, int *n, pp_err *e)
{
	char x[128], y[128];
	int nd = t->ndim, rc = PP_OK;
	const ckpt_range_info **r = malloc((size_t)t->n_ranges * sizeof *r + 1);
	if (!r)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; i < t->n_ranges && !rc; i++) {
		r[i] = &t->ranges[i];
		int64_t vol = ckpt_volume(nd, r[i]->shape);
		if (r[i]->begin < 0 || r[i]->begin >= r[i]->end || r[i]->end > vol)
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: tensor %s: %s holds elements [%lld, %lld) of the block at offset %s with shape %s, "
				"which has %lld",
				where, t->name, m->files[r[i]->file].name, (long long)r[i]->begin,
				(long long)r[i]->end, pp_shape_str(x, sizeof x, nd, r[i]->offset),
				pp_shape_str(y, sizeof y, nd, r[i]->shape), (long long)vol);
	}
	if (!rc)
		qsort(r, (size_t)t->n_ranges, sizeof *r, cmp_range);
	for (int i = 0; i < t->n_ranges && !rc;) {
		const ckpt_range_info *g = r[i];
		int64_t vol = ckpt_volume(nd, g->shape), next = 0;
		const char *prev = NULL;
		for (; i < t->n_ranges && !rc && ckpt_same_dims(nd, r[i]->offset, g->offset) &&
		       ckpt_same_dims(nd, r[i]->shape, g->shape);
		     i++) {
			const char *file = m->files[r[i]->file].name;
			if (r[i]->begin < next)
				rc = pp_errorf(
					e, PP_ERUNTIME,
					"%s: tensor %s: %s and %s both hold elements [%lld, %lld) of the block at offset %s "
					"with shape %s of its Adam m and v (each element must be saved once)",
					where, t->name, prev, file, (long long)r[i]->begin,
					(long long)(r[i]->end < next ? r[i]->end : next),
					pp_shape_str(x, sizeof x, nd, g->offset),
					pp_shape_str(y, sizeof y, nd, g->shape));
			else if (r[i]->begin > next)
				break;
			next = r[i]->end;
			prev = file;
		}
		if (!rc && next != vol)
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: tensor %s: elements [%lld, %lld) of its Adam m and v in the block at offset %s with "
				"shape %s are in no optimizer file (one is missing or incomplete)",
				where, t->name, (long long)next,
				(long long)(i < t->n_ranges &&
							    ckpt_same_dims(nd, r[i]->offset,
									   g->offset) &&
							    ckpt_same_dims(nd, r[i]->shape,
									   g->shape)
						    ? r[i]->begin
						    : vol),
				pp_shape_str(x, sizeof x, nd, g->offset),
				pp_shape_str(y, sizeof y, nd, g->shape));
		if (!rc)
			b[(*n)++] = (block_ref){g->file, g->offset, g->shape};
	}
	free(r);
	return rc;
}

/* Tensor t's params are covered exactly once by its shards, and so are its
 * m and v (when saved) by the shards that hold them and its optimizer
 * ranges. */
int ckpt_check_cover(const char *where, const ckpt_manifest *m, const ckpt_tensor_info *t,
		     pp_err *e)
{
	char a[128];
	int nd = t->ndim;
	if (nd < 1 || nd > PP_CKPT_MAXDIM)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: tensor %s has %d dimensions (1 to %d supported)", where,
				 t->name, nd, PP_CKPT_MAXDIM);
	for (int d = 0; d < nd; d++)
		if (t->global_shape[d] < 1 || ckpt_volume(nd, t->global_shape) < 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s has global shape %s", where,
					 t->name, pp_shape_str(a, sizeof a, nd, t->global_shape));
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
			b[n++] = (block_ref){t->shards[i].file, t->shards[i].offset,
					     t->shards[i].shape};
	if (!rc && !t->adam && (n || t->n_ranges))
		rc = pp_errorf(
			e, PP_ERUNTIME,
			"%s: tensor %s: %s holds Adam m and v of a tensor saved without them",
			where, t->name, m->files[n ? b[0].file : t->ranges[0].file].name);
	if (!rc && t->adam && !(rc = check_ranges(where, m, t, b, &n, e)))
		rc = check_tiling(where, m, t, "Adam m and v",
				  "a shard or optimizer file lacks them", b, n, e);
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

json_t *ckpt_manifest_to_json(const ckpt_manifest *m)
{
	json_t *root = json_object(), *files = json_array(), *tensors = json_object();
	json_object_set_new(root, "format", json_string(PP_CKPT_FORMAT));
	json_object_set_new(root, "version", json_integer(m->version));
	json_object_set_new(root, "step", json_integer(m->step));
	json_t *mesh = json_pack("{s:i, s:i, s:i}", "pp", m->pp_size, "tp", m->tp_size, "dp",
				 m->dp_size);
	if (m->version >= 3)
		json_object_set_new(mesh, "ep", json_integer(m->ep_size));
	json_object_set_new(root, "mesh", mesh);
	for (int i = 0; i < m->n_files; i++)
		json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", m->files[i].name,
						       "bytes", (json_int_t)m->files[i].bytes,
						       "sha256", m->files[i].sha256));
	for (int i = 0; i < m->n_tensors; i++) {
		const ckpt_tensor_info *t = &m->tensors[i];
		json_t *shards = json_array();
		for (int j = 0; j < t->n_shards; j++) {
			const ckpt_slice_info *s = &t->shards[j];
			json_t *sj = json_pack("{s:s, s:o, s:o}", "file", m->files[s->file].name,
					       "offset", dims_json(t->ndim, s->offset), "shape",
					       dims_json(t->ndim, s->shape));
			if (m->version >= 2)
				json_object_set_new(sj, "adam", json_boolean(s->adam));
			json_array_append_new(shards, sj);
		}
		json_t *tj = json_pack("{s:s, s:o, s:b, s:o}", "dtype", "float32", "global_shape",
				       dims_json(t->ndim, t->global_shape), "adam", t->adam,
				       "shards", shards);
		/* one entry per dataset: the ranges of one file, in dataset order */
		json_t *optim = json_array(), *begin = NULL, *end = NULL;
		for (int j = 0; j < t->n_ranges; j++) {
			const ckpt_range_info *r = &t->ranges[j];
			if (j == 0 || r->file != t->ranges[j - 1].file) {
				begin = json_array();
				end = json_array();
				json_array_append_new(
					optim, json_pack("{s:s, s:o, s:o, s:o, s:o}", "file",
							 m->files[r->file].name, "offset",
							 dims_json(t->ndim, r->offset), "shape",
							 dims_json(t->ndim, r->shape),
							 "slice_begin", begin, "slice_end", end));
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
int ckpt_add_ranges(const char *where, const char *what, ckpt_tensor_info *t, int file,
		    const int64_t *offset, const int64_t *shape, const int64_t *begin,
		    const int64_t *end, int n, pp_err *e)
{
	for (int i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].file == file)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: tensor %s has two optimizer entries for one file",
					 where, t->name);
	void *p = realloc(t->ranges, (size_t)(t->n_ranges + n) * sizeof *t->ranges);
	if (!p)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	t->ranges = p;
	int64_t at = 0;
	for (int i = 0; i < n; i++) {
		if (begin[i] < 0 || begin[i] >= end[i] || (i && begin[i] < end[i - 1]))
			return pp_errorf(
				e, PP_ERUNTIME,
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
static int parse_optim_entries(const char *where, const ckpt_manifest *m, ckpt_tensor_info *t,
			       json_t *optim, pp_err *e)
{
	if (!optim)
		return PP_OK;
	if (!json_is_array(optim))
		return pp_errorf(e, PP_ERUNTIME, "%s: tensor %s: \"optim\" must be an array", where,
				 t->name);
	for (size_t j = 0; j < json_array_size(optim); j++) {
		json_t *oj = json_array_get(optim, j);
		const char *file = NULL;
		int64_t offset[PP_CKPT_MAXDIM], shape[PP_CKPT_MAXDIM], *begin = NULL, *end = NULL;
		int nd1 = 0, nd2 = 0, nb = 0, ne = 0, rc = PP_OK, fi = -1, pp, tp, dp, ep;
		bool ok = json_unpack(oj, "{s:s}", "file", &file) == 0 &&
			  json_dims(json_object_get(oj, "offset"), offset, &nd1) &&
			  json_dims(json_object_get(oj, "shape"), shape, &nd2) && nd1 == t->ndim &&
			  nd2 == t->ndim &&
			  json_ints(json_object_get(oj, "slice_begin"), &begin, &nb) &&
			  json_ints(json_object_get(oj, "slice_end"), &end, &ne) && nb == ne;
		if (!ok)
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: tensor %s: optim[%zu] must be {\"file\": f, \"offset\": [%d ints], \"shape\": [%d ints], "
				"\"slice_begin\": [n ints], \"slice_end\": [n ints]}",
				where, t->name, j, t->ndim, t->ndim);
		else if ((fi = ckpt_file_index(m, file)) < 0 ||
			 ckpt_file_kind(file, &pp, &tp, &dp, &ep) != F_OPTIM)
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: tensor %s: optim[%zu] names %s, which is not an optimizer file in \"files\"",
				where, t->name, j, file);
		else {
			char what[256];
			snprintf(what, sizeof what, "tensor %s in %s", t->name, file);
			rc = ckpt_add_ranges(where, what, t, fi, offset, shape, begin, end, nb, e);
		}
		free(begin);
		free(end);
		if (rc)
			return rc;
	}
	return PP_OK;
}

bool ckpt_problem(ckpt_report *r, const pp_err *e)
{
	if (!r)
		return false;
	if (!r->n++)
		r->first = *e;
	if (r->fn)
		r->fn(r->ctx, e->msg);
	return r->fn != NULL;
}

static int manifest_from_json(const char *where, json_t *root, ckpt_manifest *m, ckpt_report *r,
			      pp_err *e)
{
	json_t *mesh = json_object_get(root, "mesh"), *files = json_object_get(root, "files"),
	       *tensors = json_object_get(root, "tensors"), *step = json_object_get(root, "step");
	if (!json_is_integer(step) || json_integer_value(step) < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: \"step\" must be an integer >= 0", where);
	m->step = (long)json_integer_value(step);
	json_int_t pp, tp, dp; /* "i" would read 4294967297 as 1 */
	if (!json_is_object(mesh) ||
	    json_unpack(mesh, "{s:I, s:I, s:I}", "pp", &pp, "tp", &tp, "dp", &dp) != 0 ||
	    pp < INT_MIN || pp > INT_MAX || tp < INT_MIN || tp > INT_MAX || dp < INT_MIN ||
	    dp > INT_MAX)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: \"mesh\" must be {\"pp\": n, \"tp\": n, \"dp\": n}", where);
	m->pp_size = (int)pp;
	m->tp_size = (int)tp;
	m->dp_size = (int)dp;
	m->ep_size = 1;
	json_t *ep = json_object_get(mesh, "ep");
	if (m->version >= 3 || ep) {
		if (!json_is_integer(ep) || json_integer_value(ep) < 1 ||
		    json_integer_value(ep) > INT_MAX)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: \"mesh\" must have \"ep\": n >= 1 (format version 3)",
					 where);
		m->ep_size = (int)json_integer_value(ep);
	}
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
		if (json_unpack(json_array_get(files, (size_t)i), "{s:s, s:I, s:s}", "name", &name,
				"bytes", &bytes, "sha256", &sha) != 0 ||
		    strlen(name) >= sizeof m->files[i].name || bytes < 0 || !is_hex64(sha))
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: files[%d] must be {\"name\": file, \"bytes\": n, \"sha256\": 64 hex digits}",
				where, i);
		snprintf(m->files[i].name, sizeof m->files[i].name, "%s", name);
		m->files[i].bytes = bytes;
		snprintf(m->files[i].sha256, sizeof m->files[i].sha256, "%s", sha);
	}
	qsort(m->files, (size_t)m->n_files, sizeof *m->files, ckpt_cmp_file);
	pp_err pe = {0};
	if (ckpt_check_mesh_files(where, m, &pe) && !ckpt_problem(r, &pe))
		return e ? (*e = pe, e->code) : PP_ERUNTIME;

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
		json_t *shards = json_object_get(tj, "shards"),
		       *dtype = json_object_get(tj, "dtype"), *adam = json_object_get(tj, "adam");
		if (!json_dims(json_object_get(tj, "global_shape"), t->global_shape, &t->ndim) ||
		    !json_is_array(shards) || json_array_size(shards) < 1)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s: tensor %s needs \"global_shape\" (1 to %d integers) and a non-empty \"shards\" array",
				where, name, PP_CKPT_MAXDIM);
		if (dtype &&
		    (!json_is_string(dtype) || strcmp(json_string_value(dtype), "float32") != 0))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: tensor %s has dtype other than \"float32\"", where,
					 name);
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
			    !json_dims(json_object_get(sj, "shape"), t->shards[j].shape, &nd2) ||
			    nd1 != t->ndim || nd2 != t->ndim)
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: tensor %s: shards[%d] must be {\"file\": f, \"offset\": [%d ints], \"shape\": [%d ints]}",
					where, name, j, t->ndim, t->ndim);
			if ((t->shards[j].file = ckpt_file_index(m, file)) < 0)
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: tensor %s is in %s, which \"files\" does not list",
					where, name, file);
			json_t *sa = json_object_get(sj, "adam");
			if (sa && !json_is_boolean(sa))
				return pp_errorf(
					e, PP_ERUNTIME,
					"%s: tensor %s: shards[%d].adam must be true or false",
					where, name, j);
			/* version 1 has no per-shard flag: m and v are where the params are */
			t->shards[j].adam = sa ? json_is_true(sa) : t->adam;
		}
		if (m->version >= 2 &&
		    parse_optim_entries(where, m, t, json_object_get(tj, "optim"), e))
			return e ? e->code : PP_ERUNTIME;
		if (ckpt_check_cover(where, m, t, &pe) && !ckpt_problem(r, &pe))
			return e ? (*e = pe, e->code) : PP_ERUNTIME;
	}
	qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, ckpt_cmp_tensor);
	return PP_OK;
}

bool ckpt_version_known(long long v) { return v >= PP_CKPT_VERSION_OLDEST && v <= PP_CKPT_VERSION; }

/* Reads DIR/manifest.json. *version gets the format version when the file
 * parses and says format "pp-checkpoint" (else 0), so that callers can tell
 * "a checkpoint of another version" from "not a checkpoint". */
static int manifest_read(const char *dir, ckpt_manifest *m, int *version, ckpt_report *r, pp_err *e)
{
	memset(m, 0, sizeof *m);
	*version = 0;
	struct stat st;
	if (stat(dir, &st) != 0)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint directory %s: %s", dir,
				 strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s is not a directory", dir);
	char path[CKPT_PATH], where[CKPT_PATH + 32];
	if (ckpt_join(path, sizeof path, dir, MANIFEST, e))
		return e ? e->code : PP_EUSAGE;
	snprintf(where, sizeof where, "checkpoint %s: " MANIFEST, dir);
	if (stat(path, &st) != 0)
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint %s is incomplete: no " MANIFEST
				 " (an interrupted save, or not a checkpoint)",
				 dir);
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return pp_errorf(e, PP_ERUNTIME, "%s: line %d: %s", where, jerr.line, jerr.text);
	int rc = PP_OK;
	json_t *format = json_object_get(root, "format"), *ver = json_object_get(root, "version");
	if (!json_is_string(format) || strcmp(json_string_value(format), PP_CKPT_FORMAT) != 0) {
		rc = pp_errorf(e, PP_ERUNTIME, "%s: \"format\" is not \"" PP_CKPT_FORMAT "\"",
			       where);
	} else if (!json_is_integer(ver)) {
		rc = pp_errorf(e, PP_ERUNTIME, "%s: \"version\" must be an integer", where);
	} else if (!ckpt_version_known(json_integer_value(ver))) {
		*version = -1;
		rc = pp_errorf(
			e, PP_ERUNTIME,
			"checkpoint %s has format version %lld; this pp reads versions %d to %d",
			dir, (long long)json_integer_value(ver), PP_CKPT_VERSION_OLDEST,
			PP_CKPT_VERSION);
	} else {
		*version = (int)json_integer_value(ver);
		m->version = *version;
		rc = manifest_from_json(where, root, m, r, e);
	}
	json_decref(root);
	if (rc)
		ckpt_manifest_free(m);
	return rc;
}

int ckpt_manifest_read(const char *dir, ckpt_manifest *m, int *version, pp_err *e)
{
	return manifest_read(dir, m, version, NULL, e);
}

int ckpt_manifest_read_report(const char *dir, ckpt_manifest *m, ckpt_report *r, pp_err *e)
{
	int version;
	return manifest_read(dir, m, &version, r, e);
}

int ckpt_read_manifest(const char *dir, ckpt_manifest *m, pp_err *e)
{
	int version;
	return ckpt_manifest_read(dir, m, &version, e);
}

/* A listed file is there with its recorded size (and sha256 if hash). */
int ckpt_check_file(const char *dir, const ckpt_file_info *f, bool hash, pp_err *e)
{
	char path[CKPT_PATH], hex[SHA256_HEX];
	struct stat st;
	if (ckpt_join(path, sizeof path, dir, f->name, e))
		return e ? e->code : PP_EUSAGE;
	if (stat(path, &st) != 0)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s: %s (listed in " MANIFEST "): %s",
				 dir, f->name, strerror(errno));
	if ((int64_t)st.st_size != f->bytes)
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint %s: %s is %lld bytes; " MANIFEST
				 " says %lld (truncated or overwritten)",
				 dir, f->name, (long long)st.st_size, (long long)f->bytes);
	if (!hash)
		return PP_OK;
	if (sha256_file(path, hex, NULL, e))
		return pp_err_prefix(e, "checkpoint %s", dir);
	if (strcmp(hex, f->sha256) != 0)
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint %s: %s has sha256 %s; " MANIFEST
				 " says %s (the file is corrupt)",
				 dir, f->name, hex, f->sha256);
	return PP_OK;
}

/* The files of ckpt_hash_files shared out among threads: each takes the next
 * index until none is left. Plain threads, not OpenMP: a process forked
 * after OpenMP ran cannot start an OpenMP team. */
typedef struct {
	const char *dir;
	const ckpt_manifest *m;
	char (*hex)[SHA256_HEX];
	int64_t *bytes;
	pp_err *errs;
	int next; /* atomic */
} hash_job;

static void *hash_worker(void *arg)
{
	hash_job *j = arg;
	for (int i; (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->m->n_files;) {
		char path[CKPT_PATH];
		if (!ckpt_join(path, sizeof path, j->dir, j->m->files[i].name, &j->errs[i]) &&
		    sha256_file(path, j->hex[i], j->bytes ? &j->bytes[i] : NULL, &j->errs[i]))
			pp_err_prefix(&j->errs[i], "checkpoint %s", j->dir);
	}
	return NULL;
}

int ckpt_hash_files(const char *dir, const ckpt_manifest *m, char (*hex)[SHA256_HEX],
		    int64_t *bytes, pp_err *e)
{
	hash_job j = {.dir = dir,
		      .m = m,
		      .hex = hex,
		      .bytes = bytes,
		      .errs = calloc((size_t)m->n_files + 1, sizeof *j.errs)};
	if (!j.errs)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int n = (int)(cores < 1 ? 1 : cores > 16 ? 16 : cores), started = 0;
	n = n < m->n_files ? n : m->n_files;
	pthread_t th[16];
	while (started < n - 1 && pthread_create(&th[started], NULL, hash_worker, &j) == 0)
		started++;
	hash_worker(&j); /* this thread too; alone when no thread could start */
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	int rc = PP_OK;
	for (int i = 0; i < m->n_files && !rc; i++)
		if (j.errs[i].code) {
			rc = j.errs[i].code;
			if (e)
				*e = j.errs[i];
		}
	free(j.errs);
	return rc;
}

int ckpt_check_file_set(const char *dir, const ckpt_manifest *m, bool hash, pp_err *e)
{
	int rc = PP_OK;
	for (int i = 0; i < m->n_files && !rc; i++)
		rc = ckpt_check_file(dir, &m->files[i], false, e);
	if (rc || !hash)
		return rc;
	char(*hex)[SHA256_HEX] = calloc((size_t)m->n_files + 1, sizeof *hex);
	if (!hex)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	rc = ckpt_hash_files(dir, m, hex, NULL, e);
	for (int i = 0; i < m->n_files && !rc; i++)
		if (strcmp(hex[i], m->files[i].sha256) != 0)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "checkpoint %s: %s has sha256 %s; " MANIFEST
				       " says %s (the file is corrupt)",
				       dir, m->files[i].name, hex[i], m->files[i].sha256);
	free(hex);
	return rc;
}

int ckpt_check_files(const char *dir, const ckpt_manifest *m, pp_err *e)
{
	return ckpt_check_file_set(dir, m, true, e);
}

int ckpt_holds_optimizer(const ckpt_manifest *m, bool *holds, pp_err *e)
{
	int with = 0, params = 0, layer;
	const char *some = NULL, *none = NULL;
	for (int i = 0; i < m->n_tensors; i++) {
		if (ckpt_fp8_layer(m->tensors[i].name, &layer))
			continue; /* training state, not a parameter: never has any */
		params++;
		if (m->tensors[i].adam) {
			with++;
			some = m->tensors[i].name;
		} else {
			none = m->tensors[i].name;
		}
	}
	*holds = with > 0;
	if (with && with < params)
		return pp_errorf(
			e, PP_ERUNTIME,
			"the checkpoint holds AdamW state for %d of its %d parameters (%s has it, "
			"%s not): all or none",
			with, params, some, none);
	return PP_OK;
}
