/* Reading: whole tensors reassembled from any layout, a stage's slices
 * (ckpt_load), verification and the saved config. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, nftw */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
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

/* Shard files of one checkpoint, opened on first use. With hash, a file's
 * sha256 is checked before it is opened, so a rank hashes only the shards
 * it reads. */
typedef struct {
	const char *dir;
	const ckpt_manifest *m;
	bool hash;
	hid_t *fh; /* one per file, -1 until opened */
} shard_reader;

static int reader_init(shard_reader *r, const char *dir, const ckpt_manifest *m, bool hash,
		       pp_err *e)
{
	*r = (shard_reader){.dir = dir,
			    .m = m,
			    .hash = hash,
			    .fh = malloc((size_t)(m->n_files + 1) * sizeof(hid_t))};
	for (int i = 0; r->fh && i < m->n_files; i++)
		r->fh[i] = -1;
	return r->fh ? PP_OK : pp_errorf(e, PP_ERUNTIME, "out of memory");
}

static void reader_close(shard_reader *r)
{
	for (int i = 0; r->fh && i < r->m->n_files; i++)
		ckpt_h5_close_file(&r->fh[i]);
	free(r->fh);
	r->fh = NULL;
}

static int reader_open(shard_reader *r, int file, pp_err *e)
{
	int rc = PP_OK;
	if (r->fh[file] < 0 && !(rc = ckpt_check_file(r->dir, &r->m->files[file], r->hash, e)))
		rc = ckpt_file_open(r->dir, r->m, file, &r->fh[file], e);
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
static int64_t scatter_range(int nd, const int64_t *bo, const int64_t *bs, int64_t x, int64_t n,
			     const pp_real *src, const int64_t *ro, const int64_t *rs, pp_real *out)
{
	const int last = nd - 1;
	int64_t copied = 0;
	for (int64_t i = x; i < x + n;) {
		int64_t idx[PP_CKPT_MAXDIM] = {0}, rem = i;
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
		int64_t clo = lo > ro[last] ? lo : ro[last],
			chi = hi < ro[last] + rs[last] ? hi : ro[last] + rs[last];
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
		if (t->ranges[i].file == file &&
		    t->ranges[i].at + t->ranges[i].end - t->ranges[i].begin > n)
			n = t->ranges[i].at + t->ranges[i].end - t->ranges[i].begin;
	return n;
}

/* Reads /GROUP/NAME elements [at, at + n) of an open optimizer dataset into
 * buf. */
static bool read_1d(hid_t ds, int64_t at, int64_t n, pp_real *buf, int64_t buf_len, int64_t buf_at)
{
	hsize_t fstart = (hsize_t)at, count = (hsize_t)n, mdim = (hsize_t)buf_len,
		mstart = (hsize_t)buf_at;
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
		int64_t hi = ro[d] + rs[d] < g->offset[d] + g->shape[d]
				     ? ro[d] + rs[d]
				     : g->offset[d] + g->shape[d];
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
	snprintf(dpath, sizeof dpath, "%s/%s", ckpt_group_name[k], t->name);
	snprintf(path, sizeof path, "%s/%s", r->dir, r->m->files[g->file].name);
	int64_t len = optim_dataset_len(t, g->file);
	hid_t fh = r->fh[g->file];
	if ((rc = ckpt_check_dataset(fh, path, k, t->name, 1, &len, e)))
		return rc;
	hid_t ds = H5Dopen2(fh, dpath, H5P_DEFAULT);
	bool ok = h5u_ok(ds);
	int64_t at = g->at + (begin - g->begin);
	if (ok && ckpt_same_dims(nd, g->offset, ro) && ckpt_same_dims(nd, g->shape, rs)) {
		/* the block is the one wanted: straight into place */
		ok = read_1d(ds, at, end - begin, out, ckpt_volume(nd, rs), begin);
		*got += ok ? end - begin : 0;
	} else if (ok) {
		int64_t n = end - begin < SCATTER_CHUNK ? end - begin : SCATTER_CHUNK;
		pp_real *tmp = malloc((size_t)n * sizeof *tmp);
		ok = tmp != NULL;
		for (int64_t x = begin; ok && x < end; x += n) {
			int64_t c = end - x < n ? end - x : n;
			ok = read_1d(ds, at + (x - begin), c, tmp, c, 0);
			*got += ok ? scatter_range(nd, g->offset, g->shape, x, c, tmp, ro, rs, out)
				   : 0;
		}
		free(tmp);
	}
	if (ds >= 0)
		H5Dclose(ds);
	return ok ? PP_OK
		  : pp_errorf(e, PP_ERUNTIME, "%s: cannot read /%s: %s", path, dpath, h5u_reason());
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
	snprintf(dpath, sizeof dpath, "%s/%s", ckpt_group_name[k], t->name);
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
		if ((rc = ckpt_check_dataset(fh[s->file], path, k, t->name, nd, s->shape, e)))
			break;
		hid_t ds = H5Dopen2(fh[s->file], dpath, H5P_DEFAULT), fs = -1, ms = -1;
		bool ok = h5u_ok(ds) && h5u_ok(fs = H5Dget_space(ds)) &&
			  h5u_ok(H5Sselect_hyperslab(fs, H5S_SELECT_SET, fstart, NULL, count,
						     NULL)) &&
			  h5u_ok(ms = H5Screate_simple(nd, mdims, NULL)) &&
			  h5u_ok(H5Sselect_hyperslab(ms, H5S_SELECT_SET, mstart, NULL, count,
						     NULL)) &&
			  h5u_ok(H5Dread(ds, H5T_MEM_REAL, ms, fs, H5P_DEFAULT, out));
		if (ms >= 0)
			H5Sclose(ms);
		if (fs >= 0)
			H5Sclose(fs);
		if (ds >= 0)
			H5Dclose(ds);
		if (!ok)
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot read /%s: %s", path, dpath,
				       h5u_reason());
		int64_t c[PP_CKPT_MAXDIM];
		for (int d = 0; d < nd; d++)
			c[d] = (int64_t)count[d];
		got += ckpt_volume(nd, c);
	}
	for (int i = 0; k != G_PARAMS && i < t->n_ranges && !rc; i++)
		rc = read_range(r, t, k, &t->ranges[i], offset, shape, out, &got, e);
	if (!rc && got != ckpt_volume(nd, shape))
		rc = pp_errorf(
			e, PP_ERUNTIME,
			"checkpoint %s: tensor %s: its files hold %lld of the %lld elements of /%s in the block %s at %s",
			dir, t->name, (long long)got, (long long)ckpt_volume(nd, shape),
			ckpt_group_name[k], pp_shape_str(a, sizeof a, nd, shape),
			pp_shape_str(b, sizeof b, nd, offset));
	return rc;
}

static int group_index(const char *group)
{
	for (int k = 0; k < N_GROUPS; k++)
		if (group && strcmp(group, ckpt_group_name[k]) == 0)
			return k;
	return -1;
}

int ckpt_read_tensor(const char *dir, const ckpt_manifest *m, const char *name, const char *group,
		     pp_real *out, pp_err *e)
{
	h5u_quiet();
	int k = group_index(group);
	if (k < 0)
		return pp_errorf(e, PP_EUSAGE,
				 "checkpoint group \"%s\": expected params, adam_m or adam_v",
				 group ? group : "(null)");
	const ckpt_tensor_info *t = ckpt_manifest_tensor(m, name);
	if (!t)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint %s has no tensor %s", dir, name);
	if (k != G_PARAMS && !t->adam)
		return pp_errorf(e, PP_ERUNTIME,
				 "checkpoint %s: tensor %s was saved without adam m/v", dir, name);
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
	} parts[] = {
		{"state/step", H5T_NATIVE_INT64, NULL, 0, 0, 0},
		{"state/rng", H5T_NATIVE_UINT64, s->rng, 4, 4, 0},
		{"state/data_state", H5T_NATIVE_UINT64, s->data_state, 0, PP_CKPT_DATA_STATE, 0}};
	int64_t fstep = -1;
	parts[0].buf = &fstep;
	for (int i = 0; i < 3; i++) {
		if (H5Lexists(f, "state", H5P_DEFAULT) <= 0 ||
		    H5Lexists(f, parts[i].name, H5P_DEFAULT) <= 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: /%s is missing", path, parts[i].name);
		hid_t ds = H5Dopen2(f, parts[i].name, H5P_DEFAULT), sp = H5Dget_space(ds);
		hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
		int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
		bool shape_ok = i == 0 ? rank == 0
				       : rank == 1 && n >= parts[i].min && n <= parts[i].max;
		bool ok = shape_ok && (n == 0 || h5u_ok(H5Dread(ds, parts[i].mt, H5S_ALL, H5S_ALL,
								H5P_DEFAULT, parts[i].buf)));
		if (sp >= 0)
			H5Sclose(sp);
		if (ds >= 0)
			H5Dclose(ds);
		if (!shape_ok)
			return pp_errorf(e, PP_ERUNTIME, "%s: /%s has %lld elements; expected %s",
					 path, parts[i].name, (long long)n,
					 i == 0   ? "a scalar"
					 : i == 1 ? "4"
						  : "at most 16");
		if (!ok)
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot read /%s: %s", path,
					 parts[i].name, h5u_reason());
		parts[i].n = (int)n;
	}
	if (fstep != step)
		return pp_errorf(e, PP_ERUNTIME, "%s: /state/step is %lld; " MANIFEST " says %ld",
				 path, (long long)fstep, step);
	s->n_data_state = parts[2].n;
	return PP_OK;
}

/* Index of the shard at (pp, tp) (ep rank 0 of a mesh with ep), or of the
 * first shard when the mesh has none there. */
static int own_file(const ckpt_manifest *m, int pp, int tp)
{
	char name[64];
	const int ep = ckpt_ep_name(0, m->version >= 3 ? m->ep_size : 1);
	ckpt_shard_name(name, sizeof name, pp, tp, ep);
	int i = ckpt_file_index(m, name);
	if (i >= 0)
		return i;
	ckpt_shard_name(name, sizeof name, 0, 0, ep);
	return ckpt_file_index(m, name);
}

int ckpt_load(const char *dir, ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	int rc;
	if ((rc = ckpt_check_tensors("checkpoint load", s, false, e)))
		return rc;
	ckpt_manifest m;
	if ((rc = ckpt_read_manifest(dir, &m, e)))
		return rc;
	/* every size now (cheap); the sha256 of each shard as it is first
	 * read: it costs about what reading does, and a corrupt checkpoint
	 * must not be trained on */
	shard_reader r = {0};
	if (!(rc = ckpt_check_file_set(dir, &m, false, e)))
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
		if (!ti && t->optional)
			continue;
		if (!ti) {
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"checkpoint %s: tensor %s is missing (not in %s or any other shard)",
				dir, t->name, m.files[own].name);
			break;
		}
		int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
		ckpt_slice_of(t, g, o);
		if (ti->ndim != t->ndim || !ckpt_same_dims(t->ndim, ti->global_shape, g)) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "checkpoint %s: tensor %s has shape %s in %s; expected %s",
				       dir, t->name,
				       pp_shape_str(a, sizeof a, ti->ndim, ti->global_shape),
				       m.files[ti->shards[0].file].name,
				       pp_shape_str(b, sizeof b, t->ndim, g));
			break;
		}
		if ((t->m || t->v) && !ti->adam) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "checkpoint %s: tensor %s was saved without adam m/v", dir,
				       t->name);
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

int ckpt_read_state(const char *dir, ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	ckpt_manifest m;
	int rc = ckpt_read_manifest(dir, &m, e);
	if (rc)
		return rc;
	shard_reader r = {0};
	int own = own_file(&m, s->pp_rank, s->tp_rank);
	char path[CKPT_PATH];
	if (!(rc = ckpt_check_file_set(dir, &m, false, e)) &&
	    !(rc = reader_init(&r, dir, &m, false, e)) && !(rc = reader_open(&r, own, e))) {
		snprintf(path, sizeof path, "%s/%s", dir, m.files[own].name);
		rc = read_state(r.fh[own], path, s, m.step, e);
	}
	if (!rc)
		s->step = m.step;
	reader_close(&r);
	ckpt_manifest_free(&m);
	return rc;
}

/* Checks that /params/NAME of shard f carries the manifest's global shape
 * and offset of slice s. */
static int verify_slice_attrs(hid_t f, const char *path, const ckpt_tensor_info *t,
			      const ckpt_slice_info *s, pp_err *e)
{
	char dpath[1100], a[128], b[128];
	snprintf(dpath, sizeof dpath, "params/%s", t->name);
	hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
	int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
	int ng = 0, no = 0;
	bool ok = ds >= 0 && h5u_attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, g, &ng) &&
		  h5u_attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, o, &no) && ng == t->ndim &&
		  no == t->ndim && ckpt_same_dims(t->ndim, g, t->global_shape) &&
		  ckpt_same_dims(t->ndim, o, s->offset);
	if (ds >= 0)
		H5Dclose(ds);
	if (!ok)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: /%s: attributes global_shape and offset differ from " MANIFEST
				 " (global shape %s, offset %s)",
				 path, dpath, pp_shape_str(a, sizeof a, t->ndim, t->global_shape),
				 pp_shape_str(b, sizeof b, t->ndim, s->offset));
	return PP_OK;
}

/* Checks /adam_m/NAME and /adam_v/NAME of optimizer file f (index file)
 * against the manifest's ranges of t there: length and attributes. */
static int verify_optim_tensor(hid_t f, const char *path, const ckpt_tensor_info *t, int file,
			       pp_err *e)
{
	int64_t len = optim_dataset_len(t, file);
	int rc = PP_OK;
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++)
		rc = ckpt_check_dataset(f, path, k, t->name, 1, &len, e);
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++) {
		char dpath[1100];
		snprintf(dpath, sizeof dpath, "%s/%s", ckpt_group_name[k], t->name);
		hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
		int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM], sh[PP_CKPT_MAXDIM], *begin = NULL,
										  *end = NULL;
		int ng = 0, no = 0, ns = 0, nb = 0, ne = 0, n = 0;
		bool ok = ds >= 0 && h5u_attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, g, &ng) &&
			  h5u_attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, o, &no) &&
			  h5u_attr_get_i64(ds, "shape", PP_CKPT_MAXDIM, sh, &ns) &&
			  h5u_attr_get_i64_all(ds, "slice_begin", &begin, &nb) &&
			  h5u_attr_get_i64_all(ds, "slice_end", &end, &ne) && ng == t->ndim &&
			  no == t->ndim && ns == t->ndim && nb == ne &&
			  ckpt_same_dims(t->ndim, g, t->global_shape);
		for (int i = 0; ok && i < t->n_ranges; i++) {
			const ckpt_range_info *r = &t->ranges[i];
			if (r->file != file)
				continue;
			ok = n < nb && begin[n] == r->begin && end[n] == r->end &&
			     ckpt_same_dims(t->ndim, o, r->offset) &&
			     ckpt_same_dims(t->ndim, sh, r->shape);
			n++;
		}
		ok = ok && n == nb;
		if (ds >= 0)
			H5Dclose(ds);
		free(begin);
		free(end);
		if (!ok)
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: /%s: attributes global_shape, offset, shape, slice_begin and slice_end differ from " MANIFEST,
				path, dpath);
	}
	return rc;
}

/* The files' structure against the manifest: root attributes, /state and
 * /config, every dataset's shape and attributes, nothing unlisted; each
 * problem to r. bad[i]: file i failed (its values are not read). */
static void verify_files(const char *dir, const ckpt_manifest *m, ckpt_report *r, bool *bad)
{
	char path[CKPT_PATH];
	for (int i = 0; i < m->n_files; i++) {
		pp_err pe = {0};
		hid_t f = -1;
		int rc = ckpt_check_file(dir, &m->files[i], true, &pe);
		if (!rc)
			rc = ckpt_file_open(dir, m, i, &f, &pe);
		snprintf(path, sizeof path, "%s/%s", dir, m->files[i].name);
		int pp, tp, dp, ep;
		bool optim = ckpt_file_kind(m->files[i].name, &pp, &tp, &dp, &ep) == F_OPTIM;
		if (!rc && !optim) {
			ckpt_state st = {0};
			rc = read_state(f, path, &st, m->step, &pe);
			if (!rc && (H5Lexists(f, "config", H5P_DEFAULT) <= 0))
				rc = pp_errorf(&pe, PP_ERUNTIME, "%s: /config is missing", path);
		}
		hsize_t held = 0; /* tensors of this optimizer file */
		for (int j = 0; j < m->n_tensors && !rc; j++) {
			const ckpt_tensor_info *t = &m->tensors[j];
			for (int q = 0; q < t->n_shards && !rc; q++) {
				const ckpt_slice_info *sl = &t->shards[q];
				if (sl->file != i)
					continue;
				for (int k = 0; k < (sl->adam ? N_GROUPS : 1) && !rc; k++)
					rc = ckpt_check_dataset(f, path, k, t->name, t->ndim,
								sl->shape, &pe);
				if (!rc)
					rc = verify_slice_attrs(f, path, t, sl, &pe);
			}
			if (optim && optim_dataset_len(t, i) > 0) {
				held++;
				rc = verify_optim_tensor(f, path, t, i, &pe);
			}
		}
		H5G_info_t info;
		hid_t g = optim && !rc ? H5Gopen2(f, "adam_m", H5P_DEFAULT) : -1;
		if (optim && !rc &&
		    (!h5u_ok(g) || !h5u_ok(H5Gget_info(g, &info)) || info.nlinks != held))
			rc = pp_errorf(&pe, PP_ERUNTIME,
				       "%s: /adam_m holds tensors that " MANIFEST
				       " does not list there",
				       path);
		if (g >= 0)
			H5Gclose(g);
		if (f >= 0)
			H5Fclose(f);
		bad[i] = rc != 0;
		if (rc && !ckpt_problem(r, &pe))
			return;
	}
}

/* Every element of each tensor whose files are sound: no NaN, no Inf. */
static void verify_values(const char *dir, const ckpt_manifest *m, const bool *bad, ckpt_report *r)
{
	pp_real *buf = NULL;
	size_t cap = 0;
	for (int j = 0; j < m->n_tensors; j++) {
		const ckpt_tensor_info *t = &m->tensors[j];
		bool readable = true;
		for (int q = 0; q < t->n_shards; q++)
			readable = readable && !bad[t->shards[q].file];
		for (int q = 0; q < t->n_ranges; q++)
			readable = readable && !bad[t->ranges[q].file];
		if (!readable)
			continue;
		size_t n = (size_t)ckpt_volume(t->ndim, t->global_shape);
		if (n > cap) {
			free(buf);
			cap = n;
			if (!(buf = malloc(cap * sizeof *buf))) {
				pp_err pe;
				pp_errorf(&pe, PP_ERUNTIME, "out of memory reading %s", t->name);
				ckpt_problem(r, &pe);
				return;
			}
		}
		for (int k = 0; k < (t->adam ? N_GROUPS : 1); k++) {
			pp_err pe = {0};
			if (ckpt_read_tensor(dir, m, t->name, ckpt_group_name[k], buf, &pe)) {
				if (!ckpt_problem(r, &pe))
					goto done;
				continue;
			}
			size_t nans = 0, infs = 0, first = n;
			for (size_t i = 0; i < n; i++) {
				bool nan = isnan(buf[i]), inf = isinf(buf[i]);
				nans += nan;
				infs += inf;
				if ((nan || inf) && first == n)
					first = i;
			}
			if (nans || infs) {
				pp_errorf(
					&pe, PP_ERUNTIME,
					"checkpoint %s: tensor %s: /%s holds %zu NaN and %zu infinite "
					"values of %zu (the first at element %zu)",
					dir, t->name, ckpt_group_name[k], nans, infs, n, first);
				if (!ckpt_problem(r, &pe))
					goto done;
			}
		}
	}
done:
	free(buf);
}

int ckpt_verify_each(const char *dir, bool values, void (*fn)(void *ctx, const char *msg),
		     void *ctx, pp_err *e)
{
	h5u_quiet();
	ckpt_report r = {.fn = fn, .ctx = ctx};
	ckpt_manifest m;
	pp_err pe = {0};
	if (ckpt_manifest_read_report(dir, &m, &r, &pe)) {
		ckpt_problem(&r, &pe); /* the manifest itself: nothing else can be checked */
		if (e)
			*e = r.first;
		return r.n;
	}
	bool *bad = calloc((size_t)m.n_files + 1, sizeof *bad);
	if (!bad) {
		pp_errorf(&pe, PP_ERUNTIME, "out of memory");
		ckpt_problem(&r, &pe);
	} else {
		if (!r.n || fn)
			verify_files(dir, &m, &r, bad);
		if (values && (!r.n || fn))
			verify_values(dir, &m, bad, &r);
	}
	free(bad);
	ckpt_manifest_free(&m);
	if (r.n && e)
		*e = r.first;
	return r.n;
}

int ckpt_verify(const char *dir, pp_err *e)
{
	return ckpt_verify_each(dir, false, NULL, NULL, e) ? (e ? e->code : PP_ERUNTIME) : PP_OK;
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
	if (!(rc = ckpt_check_file_set(dir, &m, false, e)) &&
	    !(rc = ckpt_file_open(dir, &m, i, &f, e))) {
		hid_t ds = H5Lexists(f, "config", H5P_DEFAULT) > 0
				   ? H5Dopen2(f, "config", H5P_DEFAULT)
				   : -1;
		if (ds >= 0) {
			*json_text = h5u_read_string(ds, false);
			H5Dclose(ds);
		}
		if (!*json_text)
			rc = pp_errorf(e, PP_ERUNTIME, "%s/%s: /config is missing or not a string",
				       dir, m.files[i].name);
		H5Fclose(f);
	}
	ckpt_manifest_free(&m);
	return rc;
}

typedef struct {
	const char *out_dir;
	char *path;
	size_t n;
	pp_err *e;
	int rc;
} tok_extract;

static herr_t extract_one(hid_t g, const char *name, const H5L_info_t *info, void *arg)
{
	(void)info;
	tok_extract *x = arg;
	char file[CKPT_PATH];
	if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
	    ckpt_join(file, sizeof file, x->out_dir, name, x->e)) {
		x->rc = pp_errorf(x->e, PP_ERUNTIME, "/tokenizer/%s: not a file name", name);
		return -1;
	}
	hid_t ds = H5Dopen2(g, name, H5P_DEFAULT), sp = ds >= 0 ? H5Dget_space(ds) : -1;
	hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
	char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
	bool ok = buf && (n == 0 || h5u_ok(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL,
						   H5P_DEFAULT, buf)));
	if (sp >= 0)
		H5Sclose(sp);
	if (ds >= 0)
		H5Dclose(ds);
	FILE *f = ok ? fopen(file, "wb") : NULL;
	ok = f && fwrite(buf, 1, (size_t)n, f) == (size_t)n;
	if (f && fclose(f) != 0)
		ok = false;
	free(buf);
	if (!ok) {
		x->rc = pp_errorf(x->e, PP_ERUNTIME, "cannot extract /tokenizer/%s to %s", name,
				  file);
		return -1;
	}
	if (strcmp(name, "merges.txt") != 0 && strcmp(name, "tokenizer_config.json") != 0)
		snprintf(x->path, x->n, "%s", file);
	return 0;
}

int ckpt_read_tokenizer(const char *dir, const char *out_dir, char *path, size_t n, pp_err *e)
{
	h5u_quiet();
	path[0] = '\0';
	ckpt_manifest m;
	int rc = ckpt_read_manifest(dir, &m, e);
	if (rc)
		return rc;
	hid_t f = -1;
	if (!(rc = ckpt_file_open(dir, &m, own_file(&m, 0, 0), &f, e)) &&
	    H5Lexists(f, "tokenizer", H5P_DEFAULT) > 0) {
		hid_t g = H5Gopen2(f, "tokenizer", H5P_DEFAULT);
		tok_extract x = {out_dir, path, n, e, 0};
		if (g < 0 || H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, extract_one, &x) < 0)
			rc = x.rc ? x.rc
				  : pp_errorf(e, PP_ERUNTIME, "%s: cannot read /tokenizer: %s", dir,
					      h5u_reason());
		if (g >= 0)
			H5Gclose(g);
	}
	if (f >= 0)
		H5Fclose(f);
	ckpt_manifest_free(&m);
	return rc;
}
