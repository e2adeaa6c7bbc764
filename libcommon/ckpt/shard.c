/* Shard and optimizer files: their root attributes, and writing them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, nftw */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "../base/fsutil.h"
#include "../base/sha256.h"
#include "internal.h"

/* Reads the root attributes of file f, called name, and checks that they
 * agree with its name (an optimizer file's dp rank too). */
int ckpt_read_file_attrs(hid_t f, const char *path, const char *name, ckpt_file_attrs *a, pp_err *e)
{
	char *format = h5u_attr_get_str(f, "format");
	bool is_pp = format && strcmp(format, PP_CKPT_FORMAT) == 0;
	free(format);
	if (!is_pp)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: root attribute format is not \"" PP_CKPT_FORMAT "\"", path);
	if (!h5u_attr_get_i64(f, "version", 1, &a->version, NULL))
		return pp_errorf(e, PP_ERUNTIME, "%s: root attribute version missing", path);
	if (!ckpt_version_known(a->version))
		return pp_errorf(e, PP_ERUNTIME,
				 "%s has format version %lld; this pp reads versions %d to %d",
				 path, (long long)a->version, PP_CKPT_VERSION_OLDEST,
				 PP_CKPT_VERSION);
	struct {
		const char *name;
		int64_t *v;
	} ints[] = {{"step", &a->step},       {"pp_rank", &a->pp_rank}, {"tp_rank", &a->tp_rank},
		    {"dp_rank", &a->dp_rank}, {"pp_size", &a->pp_size}, {"tp_size", &a->tp_size},
		    {"dp_size", &a->dp_size}};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if (!h5u_attr_get_i64(f, ints[i].name, 1, ints[i].v, NULL))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: root attribute %s missing or not an integer", path,
					 ints[i].name);
	a->ep_rank = 0, a->ep_size = 1;
	if (a->version >= 3 && (!h5u_attr_get_i64(f, "ep_rank", 1, &a->ep_rank, NULL) ||
				!h5u_attr_get_i64(f, "ep_size", 1, &a->ep_size, NULL)))
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: root attribute ep_rank or ep_size missing or not an integer "
				 "(format version 3 has them)",
				 path);
	int pp = 0, tp = 0, dp = 0, ep = -1;
	if (ckpt_file_kind(name, &pp, &tp, &dp, &ep) == F_OPTIM) {
		if (a->pp_rank != pp || a->tp_rank != tp || a->dp_rank != dp)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s says it is the optimizer file of pp=%lld tp=%lld dp=%lld; its name says pp=%d tp=%d dp=%d",
				path, (long long)a->pp_rank, (long long)a->tp_rank,
				(long long)a->dp_rank, pp, tp, dp);
		if (a->version < 2)
			return pp_errorf(
				e, PP_ERUNTIME,
				"%s is an optimizer file of format version %lld (version 2 added them)",
				path, (long long)a->version);
	} else if (a->pp_rank != pp || a->tp_rank != tp ||
		   ckpt_ep_name((int)a->ep_rank, (int)a->ep_size) != ep) {
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s says it is shard pp=%lld tp=%lld ep=%lld of ep size %lld; its name says pp=%d tp=%d%s",
			path, (long long)a->pp_rank, (long long)a->tp_rank, (long long)a->ep_rank,
			(long long)a->ep_size, pp, tp, ep < 0 ? " and no ep" : " and an ep rank");
	}
	return PP_OK;
}

/* Opens DIR/FILE and checks its root attributes against the manifest. */
int ckpt_file_open(const char *dir, const ckpt_manifest *m, int file, hid_t *out, pp_err *e)
{
	char path[CKPT_PATH];
	const char *name = m->files[file].name;
	if (ckpt_join(path, sizeof path, dir, name, e))
		return e ? e->code : PP_EUSAGE;
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (!h5u_ok(f))
		return pp_errorf(e, PP_ERUNTIME, "cannot open checkpoint file %s: %s", path,
				 h5u_reason());
	ckpt_file_attrs a;
	int rc = ckpt_read_file_attrs(f, path, name, &a, e);
	if (!rc && a.version != m->version)
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s has format version %lld; " MANIFEST " says version %d", path,
			       (long long)a.version, m->version);
	if (!rc && a.step != m->step)
		rc = pp_errorf(e, PP_ERUNTIME, "%s holds step %lld; " MANIFEST " says step %ld",
			       path, (long long)a.step, m->step);
	if (!rc && (a.pp_size != m->pp_size || a.tp_size != m->tp_size || a.dp_size != m->dp_size ||
		    a.ep_size != m->ep_size))
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s was written for mesh pp=%lld tp=%lld dp=%lld ep=%lld; " MANIFEST
			       " says pp=%d tp=%d dp=%d ep=%d",
			       path, (long long)a.pp_size, (long long)a.tp_size,
			       (long long)a.dp_size, (long long)a.ep_size, m->pp_size, m->tp_size,
			       m->dp_size, m->ep_size);
	if (rc) {
		H5Fclose(f);
		return rc;
	}
	*out = f;
	return PP_OK;
}

/* global shape and offset of a block as the caller describes it ("not
 * sliced", the whole tensor, when global is all zero) */
void ckpt_block_of(int nd, const int64_t *shape, const int64_t *global_in, const int64_t *offset_in,
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

void ckpt_slice_of(const ckpt_tensor *t, int64_t *global, int64_t *offset)
{
	ckpt_block_of(t->ndim, t->shape, t->global_shape, t->offset, global, offset);
}

/* The name and block of a caller's tensor i (a slice, or an optimizer part). */
static int check_block(const char *what, int i, const char *name, int nd, const int64_t *shape,
		       const int64_t *global_in, const int64_t *offset_in, pp_err *e)
{
	char a[128], b[128], c[128];
	if (!name || !name[0] || strchr(name, '/') || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0 || strlen(name) > 1000)
		return pp_errorf(
			e, PP_EUSAGE,
			"%s: tensor %d has name \"%s\" (expected a Hugging Face name, no '/')",
			what, i, name ? name : "(null)");
	if (nd < 1 || nd > PP_CKPT_MAXDIM)
		return pp_errorf(e, PP_EUSAGE,
				 "%s: tensor %s has %d dimensions (1 to %d supported)", what, name,
				 nd, PP_CKPT_MAXDIM);
	int64_t g[PP_CKPT_MAXDIM], o[PP_CKPT_MAXDIM];
	ckpt_block_of(nd, shape, global_in, offset_in, g, o);
	for (int d = 0; d < nd; d++)
		if (shape[d] < 1 || o[d] < 0 || o[d] + shape[d] > g[d])
			return pp_errorf(
				e, PP_EUSAGE,
				"%s: tensor %s: slice shape %s at offset %s does not fit global shape %s",
				what, name, pp_shape_str(a, sizeof a, nd, shape),
				pp_shape_str(b, sizeof b, nd, o), pp_shape_str(c, sizeof c, nd, g));
	return PP_OK;
}

/* Checks tensors' names, shapes and slices (both for save and load). */
int ckpt_check_tensors(const char *what, const ckpt_state *s, bool saving, pp_err *e)
{
	if (s->n_tensors < 0 || (s->n_tensors > 0 && !s->tensors))
		return pp_errorf(e, PP_EUSAGE, "%s: n_tensors %d with no tensors", what,
				 s->n_tensors);
	for (int i = 0; i < s->n_tensors; i++) {
		const ckpt_tensor *t = &s->tensors[i];
		if (check_block(what, i, t->name, t->ndim, t->shape, t->global_shape, t->offset, e))
			return e ? e->code : PP_EUSAGE;
		if (!t->param)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has no param buffer", what,
					 t->name);
		if (saving && !t->m != !t->v)
			return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has only one of adam m and v",
					 what, t->name);
		if (saving && s->optim_per_dp && t->m)
			return pp_errorf(
				e, PP_EUSAGE,
				"%s: tensor %s has adam m and v, but with optim_per_dp they are saved per dp rank "
				"(ckpt_write_optim_shard), not in the shard",
				what, t->name);
		/* loading may ask for several blocks of one tensor (a fused
		 * projection's); a save holds one slice of each */
		for (int j = 0; saving && j < i; j++)
			if (strcmp(s->tensors[j].name, t->name) == 0)
				return pp_errorf(e, PP_EUSAGE, "%s: tensor %s is listed twice",
						 what, t->name);
	}
	return PP_OK;
}

/* The step, rank and data state of a state being saved. */
static int check_header(const ckpt_state *s, pp_err *e)
{
	if (s->step < 0)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: step %ld is negative", s->step);
	const int ep = s->ep_size > 1 ? s->ep_size : 1;
	if (s->pp_size < 1 || s->tp_size < 1 || s->dp_size < 1 || s->pp_rank < 0 ||
	    s->pp_rank >= s->pp_size || s->tp_rank < 0 || s->tp_rank >= s->tp_size ||
	    s->dp_rank < 0 || s->dp_rank >= s->dp_size || s->ep_rank < 0 || s->ep_rank >= ep ||
	    s->dp_size % ep)
		return pp_errorf(
			e, PP_EUSAGE,
			"checkpoint save: rank pp=%d tp=%d dp=%d ep=%d is not inside mesh pp=%d tp=%d dp=%d "
			"ep=%d (ep divides dp)",
			s->pp_rank, s->tp_rank, s->dp_rank, s->ep_rank, s->pp_size, s->tp_size,
			s->dp_size, ep);
	if (s->n_data_state < 0 || s->n_data_state > PP_CKPT_DATA_STATE)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: n_data_state %d (0 to %d)",
				 s->n_data_state, PP_CKPT_DATA_STATE);
	return PP_OK;
}

int ckpt_check_state(const ckpt_state *s, pp_err *e)
{
	if (check_header(s, e))
		return e ? e->code : PP_EUSAGE;
	return ckpt_check_tensors("checkpoint save", s, true, e);
}

/* One optimizer part being saved (part i, for messages). */
static int check_optim_part(const char *what, int i, const ckpt_optim_part *p, pp_err *e)
{
	if (check_block(what, i, p->name, p->ndim, p->shape, p->global_shape, p->offset, e))
		return e ? e->code : PP_EUSAGE;
	if (!p->m || !p->v)
		return pp_errorf(e, PP_EUSAGE, "%s: tensor %s needs both adam m and v", what,
				 p->name);
	if (p->n_ranges < 1 || !p->begin || !p->end)
		return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has no element ranges", what,
				 p->name);
	int64_t vol = ckpt_volume(p->ndim, p->shape);
	for (int r = 0; r < p->n_ranges; r++)
		if (p->begin[r] < (r ? p->end[r - 1] : 0) || p->begin[r] >= p->end[r] ||
		    p->end[r] > vol)
			return pp_errorf(
				e, PP_EUSAGE,
				"%s: tensor %s: range %d is [%lld, %lld) of a block of %lld elements; ranges "
				"must be non-empty, ascending and disjoint",
				what, p->name, r, (long long)p->begin[r], (long long)p->end[r],
				(long long)vol);
	return PP_OK;
}

/* A float32 dataset of the given shape (nd dims) written straight from the
 * caller's buffer (HDF5 converts double to float in strips when pp_real is
 * double), with attributes global_shape and offset of gnd elements. With
 * keep, the dataset stays open in *keep (the caller closes it). */
static bool write_dataset(hid_t g, const char *name, int nd, const int64_t *shape,
			  const int64_t *global, const int64_t *offset, const pp_real *buf, int gnd,
			  hid_t *keep)
{
	hsize_t dims[PP_CKPT_MAXDIM];
	for (int d = 0; d < nd; d++)
		dims[d] = (hsize_t)shape[d];
	hid_t sp = H5Screate_simple(nd, dims, NULL), ds = -1;
	bool ok = h5u_ok(ds = H5Dcreate2(g, name, H5T_FILE_REAL, sp, H5P_DEFAULT, H5P_DEFAULT,
					 H5P_DEFAULT)) &&
		  h5u_attr_put_i64(ds, "global_shape", gnd, global) &&
		  h5u_attr_put_i64(ds, "offset", gnd, offset) &&
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
	hid_t ft = scalar ? H5T_STD_I64LE : H5T_STD_U64LE,
	      mt = scalar ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
	bool ok = h5u_ok(ds = H5Dcreate2(g, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) &&
		  (!scalar && n == 0 ? true
				     : h5u_ok(H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)));
	if (ds >= 0)
		H5Dclose(ds);
	H5Sclose(sp);
	return ok;
}

/* The version a state's files carry: 3 when its shards are per ep rank,
 * else 2 when its m and v go to optimizer files, else 1, which every pp
 * reads. */
static int64_t state_version(const ckpt_state *s)
{
	return s->ep_size > 1 ? 3 : s->optim_per_dp ? 2 : 1;
}

static int write_root_attrs(hid_t f, const char *path, const ckpt_state *s, pp_err *e)
{
	int64_t ints[10] = {state_version(s), s->step,    s->pp_rank, s->tp_rank, s->dp_rank,
			    s->pp_size,       s->tp_size, s->dp_size, s->ep_rank, s->ep_size};
	const char *names[10] = {"version", "step",    "pp_rank", "tp_rank", "dp_rank",
				 "pp_size", "tp_size", "dp_size", "ep_rank", "ep_size"};
	if (!h5u_attr_put_str(f, "format", PP_CKPT_FORMAT))
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write attribute format: %s", path,
				 h5u_reason());
	for (int i = 0; i < (ints[0] >= 3 ? 10 : 8); i++)
		if (!h5u_attr_put_i64(f, names[i], 0, &ints[i]))
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot write attribute %s: %s", path,
					 names[i], h5u_reason());
	return PP_OK;
}

/* Creates the groups first..last of ckpt_group_name in f, into g. */
static int create_groups(hid_t f, const char *path, int first, int last, hid_t *g, pp_err *e)
{
	for (int k = first; k <= last; k++)
		if (!h5u_ok(g[k] = H5Gcreate2(f, ckpt_group_name[k], H5P_DEFAULT, H5P_DEFAULT,
					      H5P_DEFAULT))) {
			for (int j = first; j < k; j++)
				H5Gclose(g[j]);
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot create group /%s: %s", path,
					 ckpt_group_name[k], h5u_reason());
		}
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

/* ---- the streaming writer: one shard or optimizer file ---- */

struct ckpt_writer {
	char path[CKPT_PATH];
	hid_t f;
	hid_t g[N_GROUPS]; /* the file's groups, -1 where it has none */
	bool optim;        /* an optimizer file: parts, no params, no /state */
	ckpt_state head;   /* step, rng, data state, ranks, optim_per_dp */
	char *config_json, *tokenizer;
	int n; /* tensors or parts written, for messages */
};

static void writer_free(ckpt_writer *w)
{
	for (int k = 0; k < N_GROUPS; k++)
		if (w->g[k] >= 0)
			H5Gclose(w->g[k]);
	free(w->config_json);
	free(w->tokenizer);
	free(w);
}

/* The file is dropped: closed through the discard path (a full disk leaves
 * HDF5 unable to close it otherwise) and removed. */
static void writer_drop(ckpt_writer *w)
{
	for (int k = 0; k < N_GROUPS; k++)
		if (w->g[k] >= 0)
			H5Gclose(w->g[k]);
	for (int k = 0; k < N_GROUPS; k++)
		w->g[k] = -1;
	if (w->f >= 0) {
		h5_discard_file(w->f);
		H5Fclose(w->f);
		w->f = -1;
	}
	unlink(w->path);
	writer_free(w);
}

int ckpt_writer_open(const char *dir, const ckpt_state *s, bool optim, ckpt_writer **out, pp_err *e)
{
	h5u_quiet();
	*out = NULL;
	if (check_header(s, e))
		return e ? e->code : PP_EUSAGE;
	if (optim && !s->optim_per_dp)
		return pp_errorf(e, PP_EUSAGE,
				 "checkpoint save: optimizer files are written with "
				 "optim_per_dp set (its shard holds params only)");
	ckpt_writer *w = calloc(1, sizeof *w);
	if (!w)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int k = 0; k < N_GROUPS; k++)
		w->g[k] = -1;
	w->f = -1;
	w->optim = optim;
	w->head = *s;
	w->head.tensors = NULL;
	w->head.optim = NULL;
	w->head.n_tensors = w->head.n_optim = 0;
	w->config_json = strdup(s->config_json ? s->config_json : "");
	w->head.config_json = w->config_json;
	w->tokenizer = s->tokenizer && *s->tokenizer ? strdup(s->tokenizer) : NULL;
	w->head.tokenizer = w->tokenizer;
	char name[64];
	if (optim)
		ckpt_optim_name(name, sizeof name, s->pp_rank, s->tp_rank, s->dp_rank);
	else
		ckpt_shard_name(name, sizeof name, s->pp_rank, s->tp_rank,
				ckpt_ep_name(s->ep_rank, s->ep_size));
	int rc = w->config_json ? ckpt_join(w->path, sizeof w->path, dir, name, e)
				: pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (rc) {
		writer_free(w);
		return rc;
	}
	/* a strong close also closes what a failed write left open */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
	w->f = H5Fcreate(w->path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	H5Pclose(fapl);
	if (!h5u_ok(w->f)) {
		rc = pp_errorf(e, PP_ERUNTIME, "cannot create checkpoint file %s: %s", w->path,
			       h5u_reason());
		writer_free(w);
		return rc;
	}
	if (!(rc = write_root_attrs(w->f, w->path, &w->head, e)))
		rc = create_groups(w->f, w->path, optim ? G_ADAM_M : G_PARAMS, G_ADAM_V, w->g, e);
	if (rc) {
		writer_drop(w);
		return rc;
	}
	*out = w;
	return PP_OK;
}

int ckpt_writer_put(ckpt_writer *w, const ckpt_tensor *t, pp_err *e)
{
	const char *what = "checkpoint save";
	if (w->optim)
		return pp_errorf(e, PP_EUSAGE, "%s: %s is an optimizer file (parts only)", what,
				 w->path);
	if (check_block(what, w->n, t->name, t->ndim, t->shape, t->global_shape, t->offset, e))
		return e ? e->code : PP_EUSAGE;
	if (!t->param)
		return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has no param buffer", what, t->name);
	if (!t->m != !t->v)
		return pp_errorf(e, PP_EUSAGE, "%s: tensor %s has only one of adam m and v", what,
				 t->name);
	if (w->head.optim_per_dp && t->m)
		return pp_errorf(
			e, PP_EUSAGE,
			"%s: tensor %s has adam m and v, but with optim_per_dp they are saved "
			"per dp rank (optimizer files), not in the shard",
			what, t->name);
	const pp_real *buf[N_GROUPS] = {t->param, t->m, t->v};
	int64_t gs[PP_CKPT_MAXDIM], off[PP_CKPT_MAXDIM];
	ckpt_slice_of(t, gs, off);
	for (int k = 0; k < N_GROUPS; k++)
		if (buf[k] && !write_dataset(w->g[k], t->name, t->ndim, t->shape, gs, off, buf[k],
					     t->ndim, NULL))
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot write tensor /%s/%s: %s",
					 w->path, ckpt_group_name[k], t->name, h5u_reason());
	w->n++;
	return PP_OK;
}

/* /adam_m/NAME and /adam_v/NAME, 1-d, with the block's global_shape, offset
 * and shape and the ranges' slice_begin and slice_end as attributes. */
int ckpt_writer_put_optim(ckpt_writer *w, const ckpt_optim_part *p, pp_err *e)
{
	const char *what = "checkpoint save (optimizer file)";
	if (!w->optim)
		return pp_errorf(e, PP_EUSAGE, "%s: %s is a shard (tensors only)", what, w->path);
	if (check_optim_part(what, w->n, p, e))
		return e ? e->code : PP_EUSAGE;
	int64_t gs[PP_CKPT_MAXDIM], off[PP_CKPT_MAXDIM], len = 0;
	ckpt_block_of(p->ndim, p->shape, p->global_shape, p->offset, gs, off);
	for (int r = 0; r < p->n_ranges; r++)
		len += p->end[r] - p->begin[r];
	const pp_real *buf[N_GROUPS] = {NULL, p->m, p->v};
	for (int k = G_ADAM_M; k <= G_ADAM_V; k++) {
		hid_t ds = -1;
		bool ok = write_dataset(w->g[k], p->name, 1, &len, gs, off, buf[k], p->ndim, &ds) &&
			  ds >= 0 && h5u_attr_put_i64(ds, "shape", p->ndim, p->shape) &&
			  h5u_attr_put_i64(ds, "slice_begin", p->n_ranges, p->begin) &&
			  h5u_attr_put_i64(ds, "slice_end", p->n_ranges, p->end);
		if (ds >= 0)
			H5Dclose(ds);
		if (!ok)
			return pp_errorf(e, PP_ERUNTIME, "%s: cannot write tensor /%s/%s: %s",
					 w->path, ckpt_group_name[k], p->name, h5u_reason());
	}
	w->n++;
	return PP_OK;
}

/* /tokenizer/NAME: the bytes of a file, as 1-d uint8 */
static int write_bytes(hid_t g, const char *path, const char *file, pp_err *e)
{
	char *buf = NULL;
	size_t n = 0;
	int rc = fs_read_file(file, &buf, &n, e);
	if (rc)
		return pp_err_prefix(e, "the run's tokenizer");
	const char *name = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	hsize_t d = (hsize_t)n;
	hid_t sp = H5Screate_simple(1, &d, NULL), ds = -1;
	bool ok = h5u_ok(ds = H5Dcreate2(g, name, H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT,
					 H5P_DEFAULT)) &&
		  (n == 0 ||
		   h5u_ok(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf)));
	if (ds >= 0)
		H5Dclose(ds);
	H5Sclose(sp);
	free(buf);
	return ok ? PP_OK
		  : pp_errorf(e, PP_ERUNTIME, "%s: cannot write /tokenizer/%s: %s", path, name,
			      h5u_reason());
}

/* The run's tokenizer into /tokenizer (shard pp000-tp000, of ep rank 0
 * with ep > 1, only): the file,
 * the merges.txt beside a GPT-2 vocab.json, and a tokenizer_config.json
 * beside it (whether BOS begins the text). */
static int write_tokenizer(ckpt_writer *w, pp_err *e)
{
	const char *t = w->head.tokenizer;
	if (!t || !*t || w->head.pp_rank || w->head.tp_rank || w->head.ep_rank)
		return PP_OK;
	hid_t g = H5Gcreate2(w->f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (!h5u_ok(g))
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot create /tokenizer: %s", w->path,
				 h5u_reason());
	int rc = write_bytes(g, w->path, t, e);
	/* the files the tokenizer reads beside it, where there are */
	const char *base = strrchr(t, '/') ? strrchr(t, '/') + 1 : t;
	char beside[CKPT_PATH];
	struct stat st;
	snprintf(beside, sizeof beside, "%.*smerges.txt", (int)(base - t), t);
	if (!rc && !strcmp(base, "vocab.json"))
		rc = write_bytes(g, w->path, beside, e);
	snprintf(beside, sizeof beside, "%.*stokenizer_config.json", (int)(base - t), t);
	if (!rc && stat(beside, &st) == 0)
		rc = write_bytes(g, w->path, beside, e);
	H5Gclose(g);
	return rc;
}

/* A shard's /state (step, rng, data state) and /config. */
static int write_state(ckpt_writer *w, pp_err *e)
{
	const ckpt_state *s = &w->head;
	hid_t st = H5Gcreate2(w->f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	int64_t step = s->step;
	bool ok = h5u_ok(st) && write_ints(st, "step", 1, &step, true) &&
		  write_ints(st, "rng", 4, s->rng, false) &&
		  write_ints(st, "data_state", s->n_data_state, s->data_state, false);
	if (st >= 0)
		H5Gclose(st);
	if (!ok)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write /state: %s", w->path,
				 h5u_reason());
	const char *cfg = w->config_json;
	hid_t t = h5u_string_type(H5T_CSET_UTF8), sp = H5Screate(H5S_SCALAR), ds = -1;
	ok = h5u_ok(ds = H5Dcreate2(w->f, "config", t, sp, H5P_DEFAULT, H5P_DEFAULT,
				    H5P_DEFAULT)) &&
	     h5u_ok(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &cfg));
	if (ds >= 0)
		H5Dclose(ds);
	H5Sclose(sp);
	H5Tclose(t);
	if (!ok)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot write /config: %s", w->path,
				 h5u_reason());
	return PP_OK;
}

int ckpt_writer_close(ckpt_writer *w, pp_err *e)
{
	int rc = w->optim ? PP_OK : write_state(w, e);
	if (!rc && !w->optim)
		rc = write_tokenizer(w, e);
	for (int k = 0; k < N_GROUPS; k++)
		if (w->g[k] >= 0)
			H5Gclose(w->g[k]);
	for (int k = 0; k < N_GROUPS; k++)
		w->g[k] = -1;
	/* flush first, so that a full disk shows here and not in the close */
	if (!rc && !h5u_ok(H5Fflush(w->f, H5F_SCOPE_LOCAL)))
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write checkpoint file %s: %s", w->path,
			       h5u_reason());
	if (rc) {
		writer_drop(w);
		return rc;
	}
	if (!h5u_ok(H5Fclose(w->f)))
		rc = pp_errorf(e, PP_ERUNTIME, "cannot finish checkpoint file %s: %s", w->path,
			       h5u_reason());
	w->f = -1;
	if (!rc)
		rc = fs_fsync_path(w->path, e);
	if (rc)
		unlink(w->path);
	writer_free(w);
	return rc;
}

void ckpt_writer_abort(ckpt_writer *w)
{
	if (w)
		writer_drop(w);
}

int ckpt_write_shard(const char *dir, const ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	if (ckpt_check_state(s, e))
		return e ? e->code : PP_EUSAGE;
	ckpt_writer *w;
	int rc = ckpt_writer_open(dir, s, false, &w, e);
	for (int i = 0; !rc && i < s->n_tensors; i++)
		rc = ckpt_writer_put(w, &s->tensors[i], e);
	if (rc) {
		ckpt_writer_abort(w);
		return rc;
	}
	return ckpt_writer_close(w, e);
}

int ckpt_write_optim_shard(const char *dir, const ckpt_state *s, pp_err *e)
{
	h5u_quiet();
	const char *what = "checkpoint save (optimizer file)";
	if (s->n_optim < 0 || (s->n_optim > 0 && !s->optim))
		return pp_errorf(e, PP_EUSAGE, "%s: n_optim %d with no parts", what, s->n_optim);
	for (int i = 0; i < s->n_optim; i++)
		for (int j = 0; j < i; j++)
			if (strcmp(s->optim[j].name, s->optim[i].name) == 0)
				return pp_errorf(e, PP_EUSAGE, "%s: tensor %s is listed twice",
						 what, s->optim[i].name);
	ckpt_writer *w;
	int rc = ckpt_writer_open(dir, s, true, &w, e);
	for (int i = 0; !rc && i < s->n_optim; i++)
		rc = ckpt_writer_put_optim(w, &s->optim[i], e);
	if (rc) {
		ckpt_writer_abort(w);
		return rc;
	}
	return ckpt_writer_close(w, e);
}
