#include "h5util.h"

#include <stddef.h>
#include <stdio.h>
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

hid_t h5u_string_type(H5T_cset_t cset)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, cset);
	return t;
}

bool h5u_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
		  const void *v)
{
	hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR), a = -1;
	bool ok = h5u_ok(a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT)) &&
		  h5u_ok(H5Awrite(a, mtype, v));
	if (a >= 0)
		H5Aclose(a);
	H5Sclose(sp);
	return ok;
}
