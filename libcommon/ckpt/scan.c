/* The manifest built from the files of a checkpoint being committed. */
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

static int add_slice(ckpt_manifest *m, json_t *index, const char *path, const char *name, int file,
		     int nd, const int64_t *global, const int64_t *offset, const int64_t *shape,
		     bool adam, pp_err *e)
{
	char a[128], b[128];
	json_t *ix = json_object_get(index, name);
	ckpt_tensor_info *t;
	if (!ix) {
		if (m->n_tensors % 64 == 0) {
			void *p = realloc(m->tensors,
					  (size_t)(m->n_tensors + 64) * sizeof *m->tensors);
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
		if (t->ndim != nd || !ckpt_same_dims(nd, t->global_shape, global))
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: tensor %s has global shape %s; %s says %s", path,
					 name, pp_shape_str(a, sizeof a, nd, global),
					 m->files[t->shards[0].file].name,
					 pp_shape_str(b, sizeof b, t->ndim, t->global_shape));
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
int ckpt_check_dataset(hid_t f, const char *path, int k, const char *name, int nd,
		       const int64_t *shape, pp_err *e)
{
	char dpath[1100], a[128], b[128];
	snprintf(dpath, sizeof dpath, "%s/%s", ckpt_group_name[k], name);
	if (H5Lexists(f, ckpt_group_name[k], H5P_DEFAULT) <= 0 ||
	    H5Lexists(f, dpath, H5P_DEFAULT) <= 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s is missing", path, dpath);
	hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
	if (!h5u_ok(ds))
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot open /%s: %s", path, dpath,
				 h5u_reason());
	int dn;
	int64_t dims[PP_CKPT_MAXDIM];
	bool ok = dataset_dims(ds, &dn, dims), f32 = is_float32(ds);
	H5Dclose(ds);
	if (!f32)
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s is not float32", path, dpath);
	if (!ok || dn != nd || !ckpt_same_dims(nd, dims, shape))
		return pp_errorf(e, PP_ERUNTIME, "%s: /%s has shape %s; expected %s", path, dpath,
				 ok ? pp_shape_str(a, sizeof a, dn, dims) : "(unreadable)",
				 pp_shape_str(b, sizeof b, nd, shape));
	return PP_OK;
}

/* The name of link i of group g (malloc'd), or NULL. */
static char *link_name(hid_t g, hsize_t i)
{
	ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
	char *name = n > 0 ? malloc((size_t)n + 1) : NULL;
	if (name && H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)n + 1,
				       H5P_DEFAULT) != n) {
		free(name);
		name = NULL;
	}
	return name;
}

/* Tensors of one shard file into m. */
static int scan_shard(hid_t f, const char *path, ckpt_manifest *m, int file, json_t *index,
		      pp_err *e)
{
	hid_t g = H5Gopen2(f, "params", H5P_DEFAULT);
	if (!h5u_ok(g))
		return pp_errorf(e, PP_ERUNTIME, "%s: no /params group: %s", path, h5u_reason());
	H5G_info_t info;
	int rc = h5u_ok(H5Gget_info(g, &info))
			 ? PP_OK
			 : pp_errorf(e, PP_ERUNTIME, "%s: cannot list /params", path);
	char *name = NULL;
	for (hsize_t i = 0; !rc && i < info.nlinks; i++) {
		free(name);
		if (!(name = link_name(g, i))) {
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot list /params", path);
			break;
		}
		hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
		if (!h5u_ok(ds)) {
			rc = pp_errorf(e, PP_ERUNTIME, "%s: /params/%s is not a dataset", path,
				       name);
			break;
		}
		int nd, ng = 0, no = 0;
		int64_t shape[PP_CKPT_MAXDIM], global[PP_CKPT_MAXDIM], offset[PP_CKPT_MAXDIM];
		bool ok = dataset_dims(ds, &nd, shape) &&
			  h5u_attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, global, &ng) &&
			  h5u_attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, offset, &no) && ng == nd &&
			  no == nd;
		H5Dclose(ds);
		if (!ok) {
			rc = pp_errorf(
				e, PP_ERUNTIME,
				"%s: /params/%s needs 1 to %d dimensions and int64 attributes global_shape and offset of as many",
				path, name, PP_CKPT_MAXDIM);
			break;
		}
		if ((rc = ckpt_check_dataset(f, path, G_PARAMS, name, nd, shape, e)))
			break;
		char mpath[1100];
		snprintf(mpath, sizeof mpath, "adam_m/%s", name);
		bool adam = H5Lexists(f, "adam_m", H5P_DEFAULT) > 0 &&
			    H5Lexists(f, mpath, H5P_DEFAULT) > 0;
		for (int k = G_ADAM_M; adam && k <= G_ADAM_V && !rc; k++)
			rc = ckpt_check_dataset(f, path, k, name, nd, shape, e);
		if (!rc)
			rc = add_slice(m, index, path, name, file, nd, global, offset, shape, adam,
				       e);
	}
	free(name);
	H5Gclose(g);
	return rc;
}

/* The optimizer ranges of /adam_m/NAME in optimizer file f into tensor
 * NAME of m, which a shard must have listed. */
static int scan_optim_dataset(hid_t f, const char *path, ckpt_manifest *m, int file, json_t *index,
			      const char *name, pp_err *e)
{
	char dpath[1100];
	snprintf(dpath, sizeof dpath, "adam_m/%s", name);
	json_t *ix = json_object_get(index, name);
	if (!ix)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: /%s is the optimizer state of a tensor that no shard holds",
				 path, dpath);
	ckpt_tensor_info *t = &m->tensors[json_integer_value(ix)];
	int nd = t->ndim, ng = 0, no = 0, ns = 0, nb = 0, ne = 0, rc = PP_OK;
	int64_t global[PP_CKPT_MAXDIM], offset[PP_CKPT_MAXDIM], shape[PP_CKPT_MAXDIM],
		*begin = NULL, *end = NULL, len = 0;
	hid_t ds = H5Dopen2(f, dpath, H5P_DEFAULT);
	bool ok = h5u_ok(ds) && h5u_attr_get_i64(ds, "global_shape", PP_CKPT_MAXDIM, global, &ng) &&
		  h5u_attr_get_i64(ds, "offset", PP_CKPT_MAXDIM, offset, &no) &&
		  h5u_attr_get_i64(ds, "shape", PP_CKPT_MAXDIM, shape, &ns) &&
		  h5u_attr_get_i64_all(ds, "slice_begin", &begin, &nb) &&
		  h5u_attr_get_i64_all(ds, "slice_end", &end, &ne) && ng == nd && no == nd &&
		  ns == nd && nb == ne;
	if (ds >= 0)
		H5Dclose(ds);
	if (!ok)
		rc = pp_errorf(
			e, PP_ERUNTIME,
			"%s: /%s needs int64 attributes global_shape, offset and shape of %d elements (the tensor's "
			"dimensions) and slice_begin and slice_end of as many as each other",
			path, dpath, nd);
	else if (!ckpt_same_dims(nd, global, t->global_shape))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: /%s has global shape %s; %s says %s", path,
			       dpath, pp_shape_str((char[128]){0}, 128, nd, global),
			       m->files[t->shards[0].file].name,
			       pp_shape_str((char[128]){0}, 128, nd, t->global_shape));
	for (int i = 0; !rc && i < nb; i++)
		len += end[i] - begin[i];
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++)
		rc = ckpt_check_dataset(f, path, k, name, 1, &len, e);
	if (!rc)
		rc = ckpt_add_ranges(path, dpath, t, file, offset, shape, begin, end, nb, e);
	t->adam = true;
	free(begin);
	free(end);
	return rc;
}

/* Tensors of one optimizer file into m: /adam_m and /adam_v name the same
 * datasets. */
static int scan_optim(hid_t f, const char *path, ckpt_manifest *m, int file, json_t *index,
		      pp_err *e)
{
	hid_t g[N_GROUPS] = {-1, -1, -1};
	H5G_info_t info[N_GROUPS];
	int rc = PP_OK;
	for (int k = G_ADAM_M; k <= G_ADAM_V && !rc; k++)
		if (H5Lexists(f, ckpt_group_name[k], H5P_DEFAULT) <= 0 ||
		    !h5u_ok(g[k] = H5Gopen2(f, ckpt_group_name[k], H5P_DEFAULT)) ||
		    !h5u_ok(H5Gget_info(g[k], &info[k])))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot list /%s: %s", path,
				       ckpt_group_name[k], h5u_reason());
	if (!rc && info[G_ADAM_M].nlinks != info[G_ADAM_V].nlinks)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: /adam_m has %llu tensors, /adam_v %llu", path,
			       (unsigned long long)info[G_ADAM_M].nlinks,
			       (unsigned long long)info[G_ADAM_V].nlinks);
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
/* Each file's size and sha256 into the manifest. */
static int hash_files(const char *dir, ckpt_manifest *m, pp_err *e)
{
	char(*hex)[SHA256_HEX] = calloc((size_t)m->n_files + 1, sizeof *hex);
	int64_t *bytes = calloc((size_t)m->n_files + 1, sizeof *bytes);
	int rc = hex && bytes ? ckpt_hash_files(dir, m, hex, bytes, e)
			      : pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; !rc && i < m->n_files; i++) {
		memcpy(m->files[i].sha256, hex[i], SHA256_HEX);
		m->files[i].bytes = bytes[i];
	}
	free(hex);
	free(bytes);
	return rc;
}

int ckpt_manifest_build(const char *dir, long step, ckpt_manifest *m, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->step = step;
	DIR *d = opendir(dir);
	if (!d)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint commit: %s: %s", dir, strerror(errno));
	int rc = PP_OK, cap = 0, pp, tp, dp, ep;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (ckpt_file_kind(de->d_name, &pp, &tp, &dp, &ep) == F_NONE) {
			rc = pp_errorf(e, PP_ERUNTIME,
				       "checkpoint commit: unexpected file %s in %s", de->d_name,
				       dir);
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
		ckpt_fmt_checked(m->files[m->n_files++].name, sizeof m->files->name, NULL, "%s",
				 de->d_name);
	}
	closedir(d);
	if (!rc && m->n_files == 0)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: no shard files in %s", dir);
	if (rc) {
		ckpt_manifest_free(m);
		return rc;
	}
	qsort(m->files, (size_t)m->n_files, sizeof *m->files, ckpt_cmp_file);

	json_t *index = json_object();
	char path[CKPT_PATH], where[CKPT_PATH + 32];
	snprintf(where, sizeof where, "checkpoint commit: %s", dir);
	int first = -1; /* the file whose version and mesh the others must match */
	for (int kind = F_SHARD; kind <= F_OPTIM; kind++)
		for (int i = 0; !rc && i < m->n_files; i++) {
			if (ckpt_file_kind(m->files[i].name, &pp, &tp, &dp, &ep) != kind)
				continue;
			if ((rc = ckpt_join(path, sizeof path, dir, m->files[i].name, e)))
				break;
			hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
			if (!h5u_ok(f)) {
				rc = pp_errorf(e, PP_ERUNTIME,
					       "checkpoint commit: cannot open %s: %s", path,
					       h5u_reason());
				break;
			}
			ckpt_file_attrs a;
			rc = ckpt_read_file_attrs(f, path, m->files[i].name, &a, e);
			if (!rc && a.step != step)
				rc = pp_errorf(e, PP_ERUNTIME,
					       "%s holds step %lld; committing step %ld", path,
					       (long long)a.step, step);
			if (!rc && first < 0) {
				first = i;
				m->version = (int)a.version;
				m->pp_size = (int)a.pp_size;
				m->tp_size = (int)a.tp_size;
				m->dp_size = (int)a.dp_size;
				m->ep_size = (int)a.ep_size;
			}
			if (!rc && a.version != m->version)
				rc = pp_errorf(
					e, PP_ERUNTIME,
					"%s has format version %lld; %s has %d (shards are written with optim_per_dp "
					"when the checkpoint has optimizer files)",
					path, (long long)a.version, m->files[first].name,
					m->version);
			if (!rc && (a.pp_size != m->pp_size || a.tp_size != m->tp_size ||
				    a.dp_size != m->dp_size || a.ep_size != m->ep_size))
				rc = pp_errorf(
					e, PP_ERUNTIME,
					"%s was written for mesh pp=%lld tp=%lld dp=%lld ep=%lld; %s for pp=%d tp=%d "
					"dp=%d ep=%d",
					path, (long long)a.pp_size, (long long)a.tp_size,
					(long long)a.dp_size, (long long)a.ep_size,
					m->files[first].name, m->pp_size, m->tp_size, m->dp_size,
					m->ep_size);
			if (!rc)
				rc = kind == F_SHARD ? scan_shard(f, path, m, i, index, e)
						     : scan_optim(f, path, m, i, index, e);
			H5Fclose(f);
		}
	json_decref(index);
	if (!rc && first < 0)
		rc = pp_errorf(e, PP_ERUNTIME, "checkpoint commit: no shard files in %s", dir);
	if (!rc)
		rc = ckpt_check_mesh_files(where, m, e);
	for (int i = 0; !rc && i < m->n_tensors; i++)
		rc = ckpt_check_cover(where, m, &m->tensors[i], e);
	if (!rc)
		qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, ckpt_cmp_tensor);
	if (!rc)
		rc = hash_files(dir, m, e);
	if (rc)
		ckpt_manifest_free(m);
	return rc;
}
