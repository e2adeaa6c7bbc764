#include "h5util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char reason[256];

/* The driver's messages carry the system error inside a long line
 * ("file write failed: time = ..., errno = 28, error message = 'No space
 * left on device', buf = ..."): keep what failed and the system error. */
static herr_t walk(unsigned n, const H5E_error2_t *err, void *data)
{
	(void)data;
	if (n != 0)
		return 0;
	const char *d = err->desc ? err->desc : "HDF5 error", *msg = strstr(d, "error message = '");
	const char *colon = strchr(d, ':');
	if (msg && colon && colon < msg) {
		msg += strlen("error message = '");
		const char *end = strchr(msg, '\'');
		snprintf(reason, sizeof reason, "%.*s: %.*s", (int)(colon - d), d,
			 (int)(end ? end - msg : (ptrdiff_t)strlen(msg)), msg);
	} else {
		snprintf(reason, sizeof reason, "%s", d);
	}
	return 0;
}

bool h5u_ok(int64_t r)
{
	if (r >= 0)
		return true;
	snprintf(reason, sizeof reason, "HDF5 error");
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, NULL);
	return false;
}

const char *h5u_reason(void) { return reason; }

void h5u_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* HDF5 1.10 closes every file still open at exit, from an atexit handler.
 * A file whose flush failed (a full disk) cannot be closed: its metadata
 * cache stays in a state ("slist already enabled") where closing it fails
 * again, and the handler then crashes the process after pp has reported the
 * error. pp closes every file it opens, on success and failure alike, so
 * the handler is turned off before the library starts (before main). */
__attribute__((constructor)) static void h5u_no_atexit(void) { H5dont_atexit(); }

hid_t h5u_string_type(H5T_cset_t cset)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, cset);
	return t;
}

bool h5u_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v)
{
	hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR), a = -1;
	bool ok = h5u_ok(a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT)) &&
		  h5u_ok(H5Awrite(a, mtype, v));
	if (a >= 0)
		H5Aclose(a);
	H5Sclose(sp);
	return ok;
}

bool h5u_attr_put_str(hid_t obj, const char *name, const char *val)
{
	hid_t t = h5u_string_type(H5T_CSET_UTF8);
	bool ok = h5u_attr_put(obj, name, t, t, 0, &val);
	H5Tclose(t);
	return ok;
}

bool h5u_attr_put_i64(hid_t obj, const char *name, int n, const int64_t *v)
{
	return h5u_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)n, v);
}

char *h5u_read_string(hid_t obj, bool is_attr)
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
		herr_t r = is_attr ? H5Aread(obj, mt, &s)
				   : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s);
		if (h5u_ok(r) && s)
			out = strdup(s);
		if (s)
			H5free_memory(s);
		H5Tclose(mt);
	} else {
		size_t n = H5Tget_size(ft);
		if (!(out = calloc(n + 1, 1)))
			goto done;
		herr_t r = is_attr ? H5Aread(obj, ft, out)
				   : H5Dread(obj, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
		if (out && !h5u_ok(r)) {
			free(out);
			out = NULL;
		}
	}
done:
	H5Tclose(ft);
	return out;
}

char *h5u_attr_get_str(hid_t obj, const char *name)
{
	if (H5Aexists(obj, name) <= 0)
		return NULL;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0)
		return NULL;
	char *s = h5u_read_string(a, true);
	H5Aclose(a);
	return s;
}

bool h5u_attr_get_i64(hid_t obj, const char *name, int max, int64_t *out, int *n)
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
	if (H5Tget_class(t) == H5T_INTEGER && rank >= 0 && rank <= 1 && count >= 1 &&
	    count <= max) {
		ok = h5u_ok(H5Aread(a, H5T_NATIVE_INT64, out));
		if (n)
			*n = (int)count;
	}
	H5Tclose(t);
	H5Sclose(sp);
	H5Aclose(a);
	return ok;
}

bool h5u_attr_get_i64_all(hid_t obj, const char *name, int64_t **out, int *n)
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
	if (!h5u_attr_get_i64(obj, name, (int)count, *out, n)) {
		free(*out);
		*out = NULL;
		return false;
	}
	return true;
}
