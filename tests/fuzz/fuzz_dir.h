/* A private directory for the fuzz targets that read files: made under
 * $TMPDIR (tests/fuzz/test_fuzz.sh points it at its own temporary directory,
 * which also takes what a process killed on a report leaves), emptied and
 * removed at exit. Header-only: each target is a program of its own. */
#ifndef PP_FUZZ_DIR_H
#define PP_FUZZ_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir_path[4096];

/* The path of name in the directory; the last four results stay valid. */
static inline const char *fuzz_file(const char *name)
{
	static char buf[4][4200];
	static int k;
	char *b = buf[k++ % 4];
	snprintf(b, sizeof buf[0], "%s/%s", fuzz_dir_path, name);
	return b;
}

static inline void fuzz_dir_cleanup(void)
{
	DIR *d = opendir(fuzz_dir_path);
	for (struct dirent *de; d && (de = readdir(d));)
		if (de->d_name[0] != '.' || (de->d_name[1] && strcmp(de->d_name, "..")))
			unlink(fuzz_file(de->d_name));
	if (d)
		closedir(d);
	rmdir(fuzz_dir_path);
}

/* Makes $TMPDIR/pp-<target>.XXXXXX; exits 2 when it cannot. */
static inline void fuzz_dir_init(const char *target)
{
	const char *tmp = getenv("TMPDIR");
	if (snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/pp-%s.XXXXXX",
		     tmp && *tmp ? tmp : "/tmp", target) >= (int)sizeof fuzz_dir_path ||
	    !mkdtemp(fuzz_dir_path)) {
		fprintf(stderr, "%s: cannot make a temporary directory: ", target);
		perror(fuzz_dir_path);
		exit(2);
	}
	atexit(fuzz_dir_cleanup);
}

#endif
