/* Checkpoint file and directory names, paths and shapes. */
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

void ckpt_fp8_name(int layer, char *name, size_t size)
{
	if (layer < 0)
		snprintf(name, size, "lm_head.fp8_meta");
	else
		snprintf(name, size, "model.layers.%d.fp8_meta", layer);
}

bool ckpt_fp8_layer(const char *name, int *layer)
{
	int n = -1;
	if (!strcmp(name, "lm_head.fp8_meta")) {
		*layer = -1;
		return true;
	}
	return sscanf(name, "model.layers.%d.fp8_meta%n", layer, &n) == 1 && n > 0 && !name[n];
}

void ckpt_h5_close_file(hid_t *f)
{
	if (*f >= 0)
		H5Fclose(*f);
	*f = -1;
}

/* snprintf that reports truncation as an error (paths, names) */
__attribute__((format(printf, 4, 5))) int ckpt_fmt_checked(char *out, size_t n, pp_err *e,
							   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(out, n, fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= n)
		return pp_errorf(e, PP_EUSAGE, "path or name too long: %s...", out);
	return PP_OK;
}

int ckpt_join(char *out, size_t n, const char *a, const char *b, pp_err *e)
{
	return ckpt_fmt_checked(out, n, e, "%s/%s", a, b);
}

/* The element count, or -1 when it does not fit int64_t (a damaged manifest). */
int64_t ckpt_volume(int ndim, const int64_t *d)
{
	int64_t v = 1;
	for (int i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(v, d[i], &v))
			return -1;
	return v;
}

bool ckpt_same_dims(int ndim, const int64_t *a, const int64_t *b)
{
	for (int i = 0; i < ndim; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

void ckpt_shard_name(char *buf, size_t size, int pp_rank, int tp_rank, int ep_rank)
{
	if (ep_rank < 0)
		snprintf(buf, size, "shard-pp%03d-tp%03d.h5", pp_rank, tp_rank);
	else
		snprintf(buf, size, "shard-pp%03d-tp%03d-ep%03d.h5", pp_rank, tp_rank, ep_rank);
}

void ckpt_optim_name(char *buf, size_t size, int pp_rank, int tp_rank, int dp_rank)
{
	snprintf(buf, size, "optim-pp%03d-tp%03d-dp%03d.h5", pp_rank, tp_rank, dp_rank);
}

/* Only the canonical spelling counts, so a manifest cannot name ../x. */
static bool parse_shard_name(const char *name, int *pp, int *tp, int *ep)
{
	char canon[64];
	*ep = -1;
	if (sscanf(name, "shard-pp%d-tp%d-ep%d.h5", pp, tp, ep) != 3 &&
	    sscanf(name, "shard-pp%d-tp%d.h5", pp, tp) != 2)
		return false;
	if (*pp < 0 || *tp < 0)
		return false;
	ckpt_shard_name(canon, sizeof canon, *pp, *tp, *ep);
	return strcmp(canon, name) == 0;
}

static bool parse_optim_name(const char *name, int *pp, int *tp, int *dp)
{
	char canon[64];
	if (sscanf(name, "optim-pp%d-tp%d-dp%d.h5", pp, tp, dp) != 3 || *pp < 0 || *tp < 0 ||
	    *dp < 0)
		return false;
	ckpt_optim_name(canon, sizeof canon, *pp, *tp, *dp);
	return strcmp(canon, name) == 0;
}

/* The kind of a file name and its mesh coordinates (dp = -1 for a shard,
 * ep = -1 for an optimizer file or a shard without one). */
int ckpt_file_kind(const char *name, int *pp, int *tp, int *dp, int *ep)
{
	*dp = *ep = -1;
	if (parse_shard_name(name, pp, tp, ep))
		return F_SHARD;
	return parse_optim_name(name, pp, tp, dp) ? F_OPTIM : F_NONE;
}

/* "step_" and digits only */
bool ckpt_parse_step_name(const char *name, long *step)
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

int ckpt_write_file_synced(const char *path, const char *text, pp_err *e)
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
			return pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", path,
					 strerror(err));
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

const char *const ckpt_group_name[N_GROUPS] = {"params", "adam_m", "adam_v"};
