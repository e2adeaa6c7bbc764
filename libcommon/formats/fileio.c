/* File steps the format readers and writers share (fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../config/config.h"

int fio_pread(int fd, const char *path, void *buf, size_t n, int64_t off, pp_err *e)
{
	unsigned char *b = buf;
	while (n) {
		ssize_t r = pread(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return pp_errorf(e, PP_ERUNTIME, "%s: %s at byte %lld", path,
					 r < 0 ? strerror(errno) : "ends early", (long long)off);
		b += r;
		n -= (size_t)r;
		off += r;
	}
	return 0;
}

int fio_pwrite(int fd, const char *path, const void *buf, size_t n, int64_t off, pp_err *e)
{
	const unsigned char *b = buf;
	while (n) {
		ssize_t w = pwrite(fd, b, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return pp_errorf(e, PP_ERUNTIME, "writing %s at byte %lld: %s", path,
					 (long long)off, w < 0 ? strerror(errno) : "no progress");
		b += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

int fio_make_parent(const char *path, pp_err *e)
{
	char parent[PP_PATH_MAX];
	if (snprintf(parent, sizeof parent, "%s", path) >= (int)sizeof parent)
		return pp_errorf(e, PP_EUSAGE, "path too long: %s", path);
	char *slash = strrchr(parent, '/');
	if (!slash || slash == parent)
		return 0;
	*slash = '\0';
	return fs_mkdir_p(parent, e);
}
