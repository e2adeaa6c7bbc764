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
bool h5u_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
		  const void *v);
/* A variable-length string type in the given character set (caller closes). */
hid_t h5u_string_type(H5T_cset_t cset);

#endif
