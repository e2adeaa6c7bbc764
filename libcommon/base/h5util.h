/* HDF5 plumbing shared by the checkpoint and token-dataset files: quiet
 * library errors, and the reason of the last failure for our own messages. */
#ifndef PP_H5UTIL_H
#define PP_H5UTIL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

/* Stops HDF5 printing its error stack: callers report errors themselves. */
void h5u_quiet(void);
/* true when r >= 0; otherwise records the innermost message of HDF5's error
 * stack (with the system error pulled out of the driver's long lines) for
 * h5u_reason, before the next library call clears the stack. */
bool h5u_ok(int64_t r);
/* The reason recorded by the last failing h5u_ok on this thread. */
const char *h5u_reason(void);
/* Writes attribute name on obj: n values (n == 0: a scalar) of memory type
 * mtype stored as ftype. */
bool h5u_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v);
/* A variable-length string type in the given character set (caller closes). */
hid_t h5u_string_type(H5T_cset_t cset);
/* A UTF-8 string attribute. */
bool h5u_attr_put_str(hid_t obj, const char *name, const char *val);
/* An int64 attribute: n values, or a scalar when n == 0. */
bool h5u_attr_put_i64(hid_t obj, const char *name, int n, const int64_t *v);
/* A string dataset or attribute of either kind (variable or fixed length),
 * in its own character set: a malloc'd copy, or NULL. */
char *h5u_read_string(hid_t obj, bool is_attr);
/* A string attribute (malloc'd), or NULL when absent or not a string. */
char *h5u_attr_get_str(hid_t obj, const char *name);
/* An integer scalar (*n = 1) or 1-d array of at most max elements. */
bool h5u_attr_get_i64(hid_t obj, const char *name, int max, int64_t *out, int *n);
/* An integer scalar or 1-d array of any length >= 1, into a malloc'd *out. */
bool h5u_attr_get_i64_all(hid_t obj, const char *name, int64_t **out, int *n);

#endif
