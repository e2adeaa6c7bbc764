#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FS_PATH 4096

int fs_fsync_path(const char *path, pp_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot open %s to fsync: %s", path,
				 strerror(errno));
	int rc = fsync(fd);
	int err = errno;
	close(fd);
	/* some file systems cannot fsync a directory; the data is still there */
	if (rc != 0 && err != EINVAL)
		return pp_errorf(e, PP_ERUNTIME, "fsync %s: %s", path, strerror(err));
	return PP_OK;
}

int fs_fsync_parent(const char *path, pp_err *e)
{
	char parent[FS_PATH];
	snprintf(parent, sizeof parent, "%s", path);
	char *slash = strrchr(parent, '/');
	if (!slash)
		return fs_fsync_path(".", e);
	if (slash == parent)
		slash[1] = '\0';
	else
		*slash = '\0';
	return fs_fsync_path(parent, e);
}

int fs_rename_durable(const char *tmp, const char *path, pp_err *e)
{
	if (rename(tmp, path) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot rename %s to %s: %s", tmp, path,
				 strerror(errno));
	return fs_fsync_parent(path, e);
}

int fs_tmp_name(const char *path, char *tmp, size_t n, pp_err *e)
{
	const char *slash = strrchr(path, '/');
	int dirlen = slash ? (int)(slash - path) : 0;
	int k = snprintf(tmp, n, "%.*s%s.%s.tmp-%ld", dirlen, path, slash ? "/" : "",
			 slash ? slash + 1 : path, (long)getpid());
	if (k < 0 || (size_t)k >= n)
		return pp_errorf(e, PP_EUSAGE, "output path too long: %s", path);
	return 0;
}

int fs_mkdir_p(const char *path, pp_err *e) { return fs_mkdir_p_made(path, NULL, 0, e); }

int fs_mkdir_p_made(const char *path, char *made, size_t made_size, pp_err *e)
{
	char buf[FS_PATH];
	if (made_size)
		made[0] = '\0';
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return pp_errorf(e, PP_EUSAGE, "path too long: %s", path);
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(buf, 0777) == 0) {
			if (made_size && !made[0])
				snprintf(made, made_size, "%s", buf);
			if (fs_fsync_parent(buf, e))
				return e ? e->code : PP_ERUNTIME;
		} else if (errno != EEXIST) {
			return pp_errorf(e, PP_ERUNTIME, "cannot create directory %s: %s", buf,
					 strerror(errno));
		}
		*p = c;
		if (!c)
			break;
	}
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_ERUNTIME, "%s exists and is not a directory", path);
	return PP_OK;
}

void fs_rmdir_upto(const char *path, const char *made)
{
	char buf[FS_PATH];
	size_t n = strlen(made);
	if (!n || snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return;
	for (size_t k = strlen(buf); k > 1 && buf[k - 1] == '/'; k--)
		buf[k - 1] = '\0';
	/* path itself, then each parent, while it lies at or under made */
	while (strlen(buf) >= n && !strncmp(buf, made, n) && rmdir(buf) == 0) {
		char *slash = strrchr(buf, '/');
		if (!slash || strlen(buf) == n)
			break;
		*slash = '\0';
	}
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int fs_rm_rf(const char *path)
{
	int rc = nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return rc != 0 && errno == ENOENT ? 0 : rc;
}

int fs_read_file(const char *path, char **buf, size_t *n, pp_err *e)
{
	*buf = NULL;
	*n = 0;
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_EUSAGE, "%s is a directory, not a file", path);
	FILE *f = fopen(path, "rb");
	if (!f)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot open: %s", path, strerror(errno));
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap);
	for (;;) {
		if (!b) {
			fclose(f);
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", path);
		}
		len += fread(b + len, 1, cap - len - 1, f);
		if (len < cap - 1)
			break;
		cap *= 2;
		char *p = realloc(b, cap);
		if (!p)
			free(b);
		b = p;
	}
	int err = ferror(f);
	fclose(f);
	if (err) {
		free(b);
		return pp_errorf(e, PP_ERUNTIME, "%s: read error: %s", path, strerror(errno));
	}
	b[len] = 0;
	*buf = b;
	*n = len;
	return 0;
}

int fs_inputs(char *const **paths, int *n, int64_t *total, pp_err *e)
{
	static char *const stdin_only[] = {"-"};
	if (*n <= 0) {
		*paths = stdin_only;
		*n = 1;
	}
	*total = 0;
	for (int i = 0; i < *n; i++) {
		const char *p = (*paths)[i];
		struct stat st;
		bool is_stdin = !strcmp(p, "-");
		if (is_stdin ? fstat(0, &st) : stat(p, &st))
			return pp_errorf(e, PP_EUSAGE, "cannot read input %s: %s", p,
					 strerror(errno));
		if (S_ISDIR(st.st_mode))
			return pp_errorf(e, PP_EUSAGE, "cannot read input %s: is a directory", p);
		if (!is_stdin && access(p, R_OK))
			return pp_errorf(e, PP_EUSAGE, "cannot read input %s: %s", p,
					 strerror(errno));
		*total = S_ISREG(st.st_mode) && *total >= 0 ? *total + st.st_size : -1;
	}
	return 0;
}
