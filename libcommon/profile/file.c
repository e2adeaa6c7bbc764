/* Profile files (profile.h): the table of event kinds, and the HDF5 writer
 * and validating reader. Every entry point that touches HDF5 quiets its
 * error printing and reports its own message naming the file. */
#include "profile.h"

#include <errno.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fsutil.h"
#include "../base/h5util.h"

/* ---- the kinds of events ------------------------------------------------ */

static const struct {
	const char *name;
	prof_cat cat;
	prof_stream stream;
} ops[PROF_NOPS] = {
	[PROF_FWD] = {"forward", PROF_C_COMPUTE, PROF_S_COMPUTE},
	[PROF_BWD] = {"backward", PROF_C_COMPUTE, PROF_S_COMPUTE},
	[PROF_BWD_I] = {"backward_input", PROF_C_COMPUTE, PROF_S_COMPUTE},
	[PROF_BWD_W] = {"backward_weight", PROF_C_COMPUTE, PROF_S_COMPUTE},
	[PROF_SEND_ACT] = {"send_act", PROF_C_P2P, PROF_S_SEND},
	[PROF_RECV_ACT] = {"recv_act", PROF_C_P2P, PROF_S_RECV},
	[PROF_SEND_GRAD] = {"send_grad", PROF_C_P2P, PROF_S_SEND},
	[PROF_RECV_GRAD] = {"recv_grad", PROF_C_P2P, PROF_S_RECV},
	[PROF_STEP] = {"step", PROF_C_STEP, PROF_S_COMPUTE},
	[PROF_DATA] = {"data", PROF_C_IO, PROF_S_IO},
	[PROF_GRAD_REDUCE] = {"grad_reduce", PROF_C_COLLECTIVE, PROF_S_COLLECTIVE},
	[PROF_GRAD_SYNC] = {"grad_sync", PROF_C_COLLECTIVE, PROF_S_COLLECTIVE},
	[PROF_GRAD_NORM] = {"grad_norm", PROF_C_COLLECTIVE, PROF_S_COLLECTIVE},
	[PROF_LOSS_REDUCE] = {"loss_reduce", PROF_C_COLLECTIVE, PROF_S_COLLECTIVE},
	[PROF_OPTIMIZER] = {"optimizer", PROF_C_OPTIMIZER, PROF_S_COMPUTE},
	[PROF_PARAM_GATHER] = {"param_gather", PROF_C_COLLECTIVE, PROF_S_COLLECTIVE},
	[PROF_CHECKPOINT] = {"checkpoint", PROF_C_IO, PROF_S_IO},
	[PROF_EVAL] = {"eval", PROF_C_EVAL, PROF_S_COMPUTE},
	[PROF_OTHER] = {"other", PROF_C_OTHER, PROF_S_COMPUTE},
};
_Static_assert((int)PROF_FWD == (int)SCHED_FWD && (int)PROF_BWD_W == (int)SCHED_BWD_W &&
		       (int)PROF_SEND_ACT == (int)SCHED_SEND_ACT &&
		       (int)PROF_RECV_GRAD == (int)SCHED_RECV_GRAD,
	       "the pipeline events follow sched_op");

static const char *const stream_names[PROF_NSTREAMS] = {"compute", "send", "recv", "collective",
							"io"};
static const char *const cat_names[PROF_NCATS] = {"step",      "compute", "p2p",  "collective",
						  "optimizer", "io",      "eval", "other"};

const char *prof_op_name(prof_op op) { return op >= 0 && op < PROF_NOPS ? ops[op].name : "?"; }
prof_cat prof_op_cat(prof_op op) { return op >= 0 && op < PROF_NOPS ? ops[op].cat : PROF_C_OTHER; }
prof_stream prof_op_stream(prof_op op)
{
	return op >= 0 && op < PROF_NOPS ? ops[op].stream : PROF_S_COMPUTE;
}
const char *prof_stream_name(prof_stream s)
{
	return s >= 0 && s < PROF_NSTREAMS ? stream_names[s] : "?";
}
const char *prof_cat_name(prof_cat c) { return c >= 0 && c < PROF_NCATS ? cat_names[c] : "?"; }

prof_op prof_op_of(const char *name)
{
	for (int i = 0; i < PROF_OTHER; i++)
		if (!strcmp(name, ops[i].name))
			return (prof_op)i;
	return PROF_OTHER;
}

void prof_file_name(int rank, char *buf, size_t n) { snprintf(buf, n, "rank-%05d.h5", rank); }

/* ---- in memory ------------------------------------------------------------ */

static int grow(void **p, size_t *cap, size_t need, size_t size, pp_err *e)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap * 2 : 256;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * size);
	if (!q)
		return pp_errorf(e, PP_ERUNTIME, "profile: out of memory for %zu records", need);
	*p = q;
	*cap = n;
	return 0;
}

int prof_rank_add(prof_rank *r, const prof_event *ev, pp_err *e)
{
	int rc = grow((void **)&r->ev, &r->cap_ev, r->n_ev + 1, sizeof *r->ev, e);
	if (!rc)
		r->ev[r->n_ev++] = *ev;
	return rc;
}

int prof_rank_add_sync(prof_rank *r, const prof_sync *s, pp_err *e)
{
	size_t cap = (size_t)r->cap_sync;
	int rc = grow((void **)&r->sync, &cap, (size_t)r->n_sync + 1, sizeof *r->sync, e);
	r->cap_sync = (int)cap;
	if (!rc)
		r->sync[r->n_sync++] = *s;
	return rc;
}

void prof_rank_free(prof_rank *r)
{
	free(r->ev);
	free(r->sync);
	r->ev = NULL;
	r->sync = NULL;
	r->n_ev = r->cap_ev = 0;
	r->n_sync = r->cap_sync = 0;
}

/* ---- HDF5 types ----------------------------------------------------------- */

static hid_t enum_type(const char *const *names, int n)
{
	hid_t t = H5Tenum_create(H5T_NATIVE_INT32);
	for (int32_t i = 0; i < n; i++)
		H5Tenum_insert(t, names[i], &i);
	return t;
}

/* The events' compound type, in memory (the struct, less op) or in the
 * file (packed, little-endian). */
static hid_t event_type(bool file)
{
	hid_t name = H5Tcopy(H5T_C_S1);
	H5Tset_size(name, PROF_NAME_LEN);
	H5Tset_strpad(name, H5T_STR_NULLTERM);
	hid_t cat = enum_type(cat_names, PROF_NCATS),
	      stream = enum_type(stream_names, PROF_NSTREAMS);
	hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64,
	      i32 = file ? H5T_STD_I32LE : H5T_NATIVE_INT32;
	struct {
		const char *name;
		size_t off;
		hid_t t;
	} m[] = {
		{"name", offsetof(prof_event, name), name},
		{"category", offsetof(prof_event, cat), cat},
		{"stream", offsetof(prof_event, stream), stream},
		{"start_ns", offsetof(prof_event, start), i64},
		{"duration_ns", offsetof(prof_event, dur), i64},
		{"bytes", offsetof(prof_event, bytes), i64},
		{"step", offsetof(prof_event, step), i32},
		{"microbatch", offsetof(prof_event, mb), i32},
		{"vstage", offsetof(prof_event, vstage), i32},
		{"peer", offsetof(prof_event, peer), i32},
	};
	size_t n = sizeof m / sizeof m[0], size = 0;
	for (size_t i = 0; i < n; i++)
		size += H5Tget_size(m[i].t);
	hid_t t = H5Tcreate(H5T_COMPOUND, file ? size : sizeof(prof_event));
	for (size_t i = 0, at = 0; i < n; i++) {
		H5Tinsert(t, m[i].name, file ? at : m[i].off, m[i].t);
		at += H5Tget_size(m[i].t);
	}
	if (file)
		H5Tpack(t);
	H5Tclose(name);
	H5Tclose(cat);
	H5Tclose(stream);
	return t;
}

static hid_t sync_type(bool file)
{
	hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64,
	      i32 = file ? H5T_STD_I32LE : H5T_NATIVE_INT32;
	hid_t t = H5Tcreate(H5T_COMPOUND, file ? 24 : sizeof(prof_sync));
	H5Tinsert(t, "phase", file ? 0 : offsetof(prof_sync, phase), i32);
	H5Tinsert(t, "round", file ? 4 : offsetof(prof_sync, round), i32);
	H5Tinsert(t, "before_ns", file ? 8 : offsetof(prof_sync, before), i64);
	H5Tinsert(t, "after_ns", file ? 16 : offsetof(prof_sync, after), i64);
	return t;
}

/* ---- writing -------------------------------------------------------------- */

static bool put_i64(hid_t f, const char *name, int64_t v)
{
	return h5u_attr_put_i64(f, name, 0, &v);
}

/* A 1-d table of n records; chunked so that an empty one is valid too. */
static bool put_table(hid_t f, const char *name, hid_t ftype, hid_t mtype, size_t n, const void *v)
{
	hsize_t dims = n, maxd = H5S_UNLIMITED, chunk = n > 4096 ? 4096 : n ? n : 1;
	hid_t sp = H5Screate_simple(1, &dims, &maxd), pl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_chunk(pl, 1, &chunk);
	H5Pset_deflate(pl, 1);
	hid_t d = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
	bool ok = h5u_ok(d) && (!n || h5u_ok(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)));
	if (d >= 0)
		H5Dclose(d);
	H5Pclose(pl);
	H5Sclose(sp);
	return ok;
}

static bool write_body(hid_t f, const prof_rank *r)
{
	const int64_t steps[2] = {r->step_begin, r->step_end};
	bool ok = h5u_attr_put_str(f, "format", PROF_FORMAT) &&
		  put_i64(f, "version", PROF_VERSION) && h5u_attr_put_str(f, "run_id", r->run_id) &&
		  h5u_attr_put_str(f, "run_dir", r->run_dir) &&
		  h5u_attr_put_str(f, "preset", r->preset) &&
		  h5u_attr_put_str(f, "host", r->host) &&
		  h5u_attr_put_str(f, "device", r->device) &&
		  h5u_attr_put_str(f, "schedule", r->schedule) && put_i64(f, "rank", r->rank) &&
		  put_i64(f, "world", r->world) && put_i64(f, "pp", r->pp) &&
		  put_i64(f, "dp", r->dp) && put_i64(f, "tp", r->tp) &&
		  put_i64(f, "pp_rank", r->pp_rank) && put_i64(f, "dp_rank", r->dp_rank) &&
		  put_i64(f, "tp_rank", r->tp_rank) && put_i64(f, "virtual_stages", r->v) &&
		  put_i64(f, "microbatches", r->m) && h5u_attr_put_i64(f, "steps", 2, steps) &&
		  put_i64(f, "device_clock", r->device_clock);
	hid_t ft = event_type(true), mt = event_type(false);
	ok = ok && put_table(f, "events", ft, mt, r->n_ev, r->ev);
	H5Tclose(ft);
	H5Tclose(mt);
	ft = sync_type(true), mt = sync_type(false);
	ok = ok && put_table(f, "clock_sync", ft, mt, (size_t)r->n_sync, r->sync);
	H5Tclose(ft);
	H5Tclose(mt);
	return ok;
}

int prof_write(const char *path, prof_rank *r, pp_err *e)
{
	char tmp[4200];
	int rc = fs_tmp_name(path, tmp, sizeof tmp, e);
	if (rc)
		return rc;
	for (size_t i = 0; i < r->n_ev; i++) {
		prof_event *ev = &r->ev[i];
		if (ev->op != PROF_OTHER)
			snprintf(ev->name, sizeof ev->name, "%s", prof_op_name(ev->op));
		ev->cat = prof_op_cat(ev->op);
		ev->stream = prof_op_stream(ev->op);
	}
	h5u_quiet();
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST); /* checksummed headers */
	hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	bool created = h5u_ok(f);
	H5Pclose(fapl);
	if (!created) {
		rc = pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", tmp, h5u_reason());
		remove(tmp); /* a failed create may leave the file behind, empty */
		return rc;
	}
	bool ok = write_body(f, r);
	if (!ok)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", tmp, h5u_reason());
	if (!h5u_ok(H5Fclose(f)) && !rc)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot close %s: %s", tmp, h5u_reason());
	if (!rc)
		rc = fs_fsync_path(tmp, e);
	if (!rc)
		rc = fs_rename_durable(tmp, path, e);
	if (rc)
		remove(tmp);
	return rc;
}

/* ---- reading -------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static int bad(const char *path, pp_err *e, const char *fmt,
						     ...)
{
	char why[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return pp_errorf(e, PP_ERUNTIME, "%s: %s", path, why);
}

static int get_str(hid_t f, const char *path, const char *name, char *out, size_t n, pp_err *e)
{
	char *s = h5u_attr_get_str(f, name);
	if (!s)
		return bad(path, e, "attribute '%s' is missing or not a string", name);
	snprintf(out, n, "%s", s);
	free(s);
	return 0;
}

static int get_int(hid_t f, const char *path, const char *name, int lo, int hi, int *out, pp_err *e)
{
	int64_t v;
	int n;
	if (!h5u_attr_get_i64(f, name, 1, &v, &n) || n != 1)
		return bad(path, e, "attribute '%s' is missing or not an integer", name);
	if (v < lo || v > hi)
		return bad(path, e, "attribute '%s' is %lld, expected %d .. %d", name, (long long)v,
			   lo, hi);
	*out = (int)v;
	return 0;
}

/* Reads table name (records of mtype) into a malloc'd *out of *n records. */
static int get_table(hid_t f, const char *path, const char *name, hid_t mtype, size_t size,
		     void **out, size_t *n, pp_err *e)
{
	*out = NULL;
	*n = 0;
	if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
		return bad(path, e, "the table /%s is missing", name);
	hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
	if (!h5u_ok(d))
		return bad(path, e, "cannot open /%s: %s", name, h5u_reason());
	hid_t sp = H5Dget_space(d);
	hssize_t count = H5Sget_simple_extent_ndims(sp) == 1 ? H5Sget_simple_extent_npoints(sp)
							     : -1;
	/* deflate packs at most about 1032:1, so a table cannot hold many more
	 * records than its stored bytes allow (a damaged extent would ask for
	 * any amount of memory) */
	hid_t ft = H5Dget_type(d);
	const double stored = (double)H5Dget_storage_size(d),
		     rec = h5u_ok(ft) ? (double)H5Tget_size(ft) : 1;
	if (h5u_ok(ft))
		H5Tclose(ft);
	int rc = 0;
	if (count < 0)
		rc = bad(path, e, "/%s is not a 1-d table", name);
	else if ((double)count * rec > 1100.0 * stored + 4096.0 * rec)
		rc = bad(path, e, "/%s claims %lld records in %.0f stored bytes", name,
			 (long long)count, stored);
	else if (count > 0 && !(*out = malloc((size_t)count * size)))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: out of memory for %lld records of /%s", path,
			       (long long)count, name);
	else if (count > 0 && !h5u_ok(H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out)))
		rc = bad(path, e, "cannot read /%s: %s", name, h5u_reason());
	H5Sclose(sp);
	H5Dclose(d);
	if (rc) {
		free(*out);
		*out = NULL;
	} else {
		*n = (size_t)count;
	}
	return rc;
}

static int check_event(const prof_rank *r, size_t i, pp_err *e)
{
	prof_event *ev = &r->ev[i];
	const char *why = NULL;
	if (!memchr(ev->name, 0, sizeof ev->name))
		why = "its name is not terminated";
	else if (ev->dur < 0 || ev->start < 0)
		why = "a negative time";
	else if (ev->stream < 0 || ev->stream >= PROF_NSTREAMS || ev->cat < 0 ||
		 ev->cat >= PROF_NCATS)
		why = "an unknown stream or category";
	else if (ev->step < r->step_begin || ev->step >= r->step_end)
		why = "a step outside the window";
	else if (prof_is_p2p(ev->op) &&
		 (ev->peer < 0 || ev->peer >= r->pp || ev->peer == r->pp_rank || ev->mb < 0 ||
		  ev->mb >= r->m || ev->vstage < 0 || ev->vstage >= r->pp * r->v))
		why = "a send or receive with its peer, microbatch or stage out of range";
	else if (prof_is_compute(ev->op) &&
		 (ev->mb < 0 || ev->mb >= r->m || ev->vstage < 0 || ev->vstage >= r->pp * r->v ||
		  ev->vstage % r->pp != r->pp_rank))
		why = "a pass with its microbatch or stage out of range";
	if (why)
		return bad(r->path, e, "event %zu (%.*s, step %d): %s", i, PROF_NAME_LEN, ev->name,
			   ev->step, why);
	return 0;
}

static int read_body(hid_t f, prof_rank *r, pp_err *e)
{
	const char *p = r->path;
	char format[64];
	int version = 0, rc = 0;
	if (get_str(f, p, "format", format, sizeof format, NULL) || strcmp(format, PROF_FORMAT))
		return bad(p, e, "not a pp profile (no format attribute '%s')", PROF_FORMAT);
	if ((rc = get_int(f, p, "version", 0, 1 << 30, &version, e)))
		return rc;
	if (version != PROF_VERSION)
		return bad(p, e, "profile version %d; this pp reads version %d", version,
			   PROF_VERSION);
	int clock = 0;
	const int big = 1 << 30;
	if ((rc = get_str(f, p, "run_id", r->run_id, sizeof r->run_id, e)) ||
	    (rc = get_str(f, p, "run_dir", r->run_dir, sizeof r->run_dir, e)) ||
	    (rc = get_str(f, p, "preset", r->preset, sizeof r->preset, e)) ||
	    (rc = get_str(f, p, "host", r->host, sizeof r->host, e)) ||
	    (rc = get_str(f, p, "device", r->device, sizeof r->device, e)) ||
	    (rc = get_str(f, p, "schedule", r->schedule, sizeof r->schedule, e)) ||
	    (rc = get_int(f, p, "world", 1, big, &r->world, e)) ||
	    (rc = get_int(f, p, "rank", 0, r->world - 1, &r->rank, e)) ||
	    (rc = get_int(f, p, "pp", 1, r->world, &r->pp, e)) ||
	    (rc = get_int(f, p, "dp", 1, r->world, &r->dp, e)) ||
	    (rc = get_int(f, p, "tp", 1, r->world, &r->tp, e)) ||
	    (rc = get_int(f, p, "pp_rank", 0, r->pp - 1, &r->pp_rank, e)) ||
	    (rc = get_int(f, p, "dp_rank", 0, r->dp - 1, &r->dp_rank, e)) ||
	    (rc = get_int(f, p, "tp_rank", 0, r->tp - 1, &r->tp_rank, e)) ||
	    (rc = get_int(f, p, "virtual_stages", 1, big, &r->v, e)) ||
	    (rc = get_int(f, p, "microbatches", 1, big, &r->m, e)) ||
	    (rc = get_int(f, p, "device_clock", 0, 1, &clock, e)))
		return rc;
	r->device_clock = clock;
	if ((long long)r->pp * r->dp * r->tp != r->world)
		return bad(p, e, "mesh pp=%d dp=%d tp=%d does not make world=%d", r->pp, r->dp,
			   r->tp, r->world);
	sched_kind kind;
	if (schedule_kind_parse(r->schedule, &kind, NULL) ||
	    schedule_check(kind, r->pp, r->v, r->m, r->pp_rank, NULL))
		return bad(p, e, "schedule %s at p=%d v=%d m=%d is not a valid pipeline",
			   r->schedule, r->pp, r->v, r->m);
	int64_t steps[2];
	int n;
	if (!h5u_attr_get_i64(f, "steps", 2, steps, &n) || n != 2 || steps[0] < 1 ||
	    steps[1] <= steps[0] || steps[1] > (int64_t)1 << 40)
		return bad(p, e, "attribute 'steps' is not a window [begin, end) of steps >= 1");
	r->step_begin = (long)steps[0];
	r->step_end = (long)steps[1];

	hid_t mt = event_type(false);
	size_t count = 0;
	rc = get_table(f, p, "events", mt, sizeof(prof_event), (void **)&r->ev, &count, e);
	H5Tclose(mt);
	if (rc)
		return rc;
	r->n_ev = r->cap_ev = count;
	for (size_t i = 0; i < r->n_ev && !rc; i++) {
		r->ev[i].op = prof_op_of(r->ev[i].name);
		rc = check_event(r, i, e);
	}
	if (rc)
		return rc;
	mt = sync_type(false);
	rc = get_table(f, p, "clock_sync", mt, sizeof(prof_sync), (void **)&r->sync, &count, e);
	H5Tclose(mt);
	if (rc)
		return rc;
	r->n_sync = r->cap_sync = (int)count;
	for (int i = 0; i < r->n_sync; i++)
		if (r->sync[i].phase < 0 || r->sync[i].phase > 1 ||
		    r->sync[i].after < r->sync[i].before)
			return bad(p, e, "clock_sync record %d is malformed", i);
	return 0;
}

int prof_read(const char *path, prof_rank *r, pp_err *e)
{
	memset(r, 0, sizeof *r);
	snprintf(r->path, sizeof r->path, "%s", path);
	FILE *probe = fopen(path, "rb");
	if (!probe)
		return pp_errorf(e, PP_ERUNTIME, "cannot open %s: %s", path, strerror(errno));
	fclose(probe);
	h5u_quiet();
	if (H5Fis_hdf5(path) <= 0)
		return bad(path, e, "not an HDF5 file, or truncated");
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (!h5u_ok(f))
		return bad(path, e, "cannot open as HDF5 (truncated or damaged?): %s",
			   h5u_reason());
	int rc = read_body(f, r, e);
	H5Fclose(f);
	if (rc)
		prof_rank_free(r);
	return rc;
}
