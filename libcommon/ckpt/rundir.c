/* The run directory: a checkpoint begun in a temporary directory,
 * committed by renaming it into place, older ones pruned, the newest found. */
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
#include "../base/log.h"
#include "../base/sha256.h"
#include "internal.h"

static bool pid_alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

/* .tmp-step_N-PID and .trash-step_N-PID left by processes that are gone
 * (or by this one, from an earlier failed attempt) */
static void remove_stale(const char *ckpts)
{
	DIR *d = opendir(ckpts);
	if (!d)
		return;
	struct dirent *de;
	char path[CKPT_PATH];
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, ".tmp-", 5) != 0 && strncmp(de->d_name, ".trash-", 7) != 0)
			continue;
		const char *dash = strrchr(de->d_name, '-');
		char *end;
		long pid = strtol(dash + 1, &end, 10);
		if (*end || end == dash + 1)
			continue;
		if ((pid == (long)getpid() || !pid_alive(pid)) &&
		    snprintf(path, sizeof path, "%s/%s", ckpts, de->d_name) < (int)sizeof path)
			fs_rm_rf(path); /* a failure here is retried by the next save */
	}
	closedir(d);
}

static int cmp_long_desc(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x < y) - (x > y);
}

/* step_* directories under ckpts, newest first; none when ckpts is absent */
static int list_steps(const char *ckpts, long **steps, int *n, pp_err *e)
{
	*steps = NULL;
	*n = 0;
	DIR *d = opendir(ckpts);
	if (!d)
		return errno == ENOENT
			       ? PP_OK
			       : pp_errorf(e, PP_ERUNTIME, "cannot list checkpoints in %s: %s",
					   ckpts, strerror(errno));
	int cap = 0;
	struct dirent *de;
	long s;
	while ((de = readdir(d))) {
		if (!ckpt_parse_step_name(de->d_name, &s))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			long *p = realloc(*steps, (size_t)cap * sizeof *p);
			if (!p) {
				closedir(d);
				free(*steps);
				*steps = NULL;
				return pp_errorf(e, PP_ERUNTIME, "out of memory");
			}
			*steps = p;
		}
		(*steps)[(*n)++] = s;
	}
	closedir(d);
	qsort(*steps, (size_t)*n, sizeof **steps, cmp_long_desc);
	return PP_OK;
}

static int step_path(char *buf, size_t n, const char *ckpts, long step)
{
	return ckpt_fmt_checked(buf, n, NULL, "%s/step_%08ld", ckpts, step);
}

/* Complete: the manifest parses and its files have their recorded sizes.
 * A checkpoint of another format version counts, so that loading it says
 * why it cannot be read instead of silently resuming from an older one. */
static bool step_complete(const char *dir)
{
	ckpt_manifest m;
	int version;
	if (ckpt_manifest_read(dir, &m, &version, NULL))
		return version != 0 && !ckpt_version_known(version);
	bool ok = ckpt_check_file_set(dir, &m, false, NULL) == PP_OK;
	ckpt_manifest_free(&m);
	return ok;
}

/* Moves dir out of the step_* namespace in one rename, then deletes it. */
static int remove_checkpoint(const char *ckpts, const char *dir, long step, pp_err *e)
{
	char trash[CKPT_PATH];
	if (ckpt_fmt_checked(trash, sizeof trash, e, "%s/.trash-step_%08ld-%ld", ckpts, step,
			     (long)getpid()))
		return PP_EUSAGE;
	if (rename(dir, trash) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot remove old checkpoint %s: %s", dir,
				 strerror(errno));
	if (fs_fsync_path(ckpts, e))
		return e ? e->code : PP_ERUNTIME;
	if (fs_rm_rf(trash) != 0)
		return pp_errorf(e, PP_ERUNTIME,
				 "cannot remove old checkpoint %s (moved to %s): %s", dir, trash,
				 strerror(errno));
	return PP_OK;
}

/* Keeps the newest `keep` complete checkpoints, and `saved` always. */
static int prune(const char *ckpts, int keep, long saved, pp_err *e)
{
	if (keep <= 0)
		return PP_OK;
	long *steps;
	int n, rc;
	if ((rc = list_steps(ckpts, &steps, &n, e)))
		return rc;
	int complete = 0;
	char dir[CKPT_PATH];
	for (int i = 0; i < n && !rc; i++) {
		if (step_path(dir, sizeof dir, ckpts, steps[i]) || !step_complete(dir))
			continue;
		if (complete++ < keep || steps[i] == saved)
			continue;
		rc = remove_checkpoint(ckpts, dir, steps[i], e);
	}
	free(steps);
	return rc;
}

static int ckpts_dir(char *buf, size_t n, const char *run_dir, pp_err *e)
{
	return ckpt_join(buf, n, run_dir, "checkpoints", e);
}

int ckpt_begin(const char *run_dir, long step, char *tmp_dir, size_t tmp_size, pp_err *e)
{
	char ckpts[CKPT_PATH], tmp[CKPT_PATH];
	if (step < 0)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: step %ld is negative", step);
	if (ckpts_dir(ckpts, sizeof ckpts, run_dir, e) || fs_mkdir_p(ckpts, e))
		return e ? e->code : PP_ERUNTIME;
	remove_stale(ckpts);
	int k = snprintf(tmp, sizeof tmp, "%s/.tmp-step_%08ld-%ld", ckpts, step, (long)getpid());
	if (k < 0 || (size_t)k >= sizeof tmp || (size_t)k >= tmp_size)
		return pp_errorf(e, PP_EUSAGE, "checkpoint save: path too long under %s", ckpts);
	if (mkdir(tmp, 0777) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", tmp, strerror(errno));
	snprintf(tmp_dir, tmp_size, "%s", tmp);
	return PP_OK;
}

/* Renames tmp to final; an existing final is swapped out atomically where
 * the file system allows (RENAME_EXCHANGE), else moved aside first. */
static int install(const char *ckpts, const char *tmp, const char *final, long step, pp_err *e)
{
	if (rename(tmp, final) == 0)
		return fs_fsync_path(ckpts, e);
	if (errno != ENOTEMPTY && errno != EEXIST)
		return pp_errorf(e, PP_ERUNTIME, "cannot rename %s to %s: %s", tmp, final,
				 strerror(errno));
#ifdef RENAME_EXCHANGE
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
		if (fs_fsync_path(ckpts, e))
			return e ? e->code : PP_ERUNTIME;
		fs_rm_rf(tmp); /* now the old checkpoint; stale-removed later if this fails */
		return PP_OK;
	}
	if (errno != EINVAL && errno != ENOSYS)
		return pp_errorf(e, PP_ERUNTIME, "cannot replace %s with %s: %s", final, tmp,
				 strerror(errno));
#endif
	char trash[CKPT_PATH];
	if (ckpt_fmt_checked(trash, sizeof trash, e, "%s/.trash-step_%08ld-%ld", ckpts, step,
			     (long)getpid()))
		return PP_EUSAGE;
	if (rename(final, trash) != 0)
		return pp_errorf(e, PP_ERUNTIME, "cannot move %s aside: %s", final,
				 strerror(errno));
	if (rename(tmp, final) != 0) {
		int err = errno;
		rename(trash, final);
		return pp_errorf(e, PP_ERUNTIME, "cannot rename %s to %s: %s", tmp, final,
				 strerror(err));
	}
	if (fs_fsync_path(ckpts, e))
		return e ? e->code : PP_ERUNTIME;
	fs_rm_rf(trash);
	return PP_OK;
}

int ckpt_commit(const char *run_dir, const char *tmp_dir, long step, int keep, pp_err *e)
{
	h5u_quiet();
	char ckpts[CKPT_PATH], final[CKPT_PATH], path[CKPT_PATH];
	ckpt_manifest m;
	int rc;
	if ((rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e)) ||
	    (rc = ckpt_join(path, sizeof path, tmp_dir, MANIFEST, e)))
		return rc;
	if ((rc = ckpt_manifest_build(tmp_dir, step, &m, e)))
		return rc;
	json_t *root = ckpt_manifest_to_json(&m);
	char *text = json_dumps(root, JSON_SORT_KEYS | JSON_INDENT(2));
	json_decref(root);
	ckpt_manifest_free(&m);
	if (!text)
		return pp_errorf(e, PP_ERUNTIME, "checkpoint commit: cannot format " MANIFEST);
	size_t n = strlen(text);
	char *line = realloc(text, n + 2);
	if (!line) {
		free(text);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	memcpy(line + n, "\n", 2);
	rc = ckpt_write_file_synced(path, line, e);
	free(line);
	if (rc || (rc = fs_fsync_path(tmp_dir, e)))
		return rc;
	if ((rc = ckpt_fmt_checked(final, sizeof final, e, "%s/step_%08ld", ckpts, step)))
		return rc;
	if ((rc = install(ckpts, tmp_dir, final, step, e)))
		return rc;
	if ((rc = prune(ckpts, keep, step, e)))
		return pp_err_prefix(e, "checkpoint %s saved, but keeping the newest %d failed",
				     final, keep);
	return PP_OK;
}

int ckpt_save(const char *run_dir, const ckpt_state *s, int keep, pp_err *e)
{
	if (ckpt_check_state(s, e))
		return e ? e->code : PP_EUSAGE;
	if (s->pp_size * s->tp_size != 1 || s->ep_size > 1)
		return pp_errorf(
			e, PP_EUSAGE,
			"ckpt_save writes one shard, but mesh pp=%d tp=%d ep=%d has more: use "
			"ckpt_begin, ckpt_write_shard on every rank, then ckpt_commit",
			s->pp_size, s->tp_size, s->ep_size);
	if (s->optim_per_dp && s->dp_size != 1)
		return pp_errorf(
			e, PP_EUSAGE,
			"ckpt_save writes one optimizer file, but dp=%d ranks each have one: use ckpt_begin, "
			"ckpt_write_shard, ckpt_write_optim_shard on every rank, then ckpt_commit",
			s->dp_size);
	char tmp[CKPT_PATH];
	int rc = ckpt_begin(run_dir, s->step, tmp, sizeof tmp, e);
	if (rc)
		return rc;
	if ((rc = ckpt_write_shard(tmp, s, e)) ||
	    (s->optim_per_dp && (rc = ckpt_write_optim_shard(tmp, s, e))) ||
	    (rc = ckpt_commit(run_dir, tmp, s->step, keep, e)))
		fs_rm_rf(tmp); /* gone already when only the pruning failed */
	return rc;
}

static int find_step(const char *run_dir, char *dir, size_t dir_size, long *step,
		     bool complete_only, pp_err *e)
{
	h5u_quiet();
	*step = -1;
	if (dir_size)
		dir[0] = '\0';
	char ckpts[CKPT_PATH], path[CKPT_PATH];
	long *steps;
	int n, rc;
	if ((rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e)) ||
	    (rc = list_steps(ckpts, &steps, &n, e)))
		return rc;
	for (int i = 0; i < n; i++) {
		if (step_path(path, sizeof path, ckpts, steps[i]) ||
		    (complete_only && !step_complete(path)))
			continue;
		if (strlen(path) >= dir_size)
			rc = pp_errorf(e, PP_EUSAGE, "checkpoint path %s does not fit in %zu bytes",
				       path, dir_size);
		else {
			snprintf(dir, dir_size, "%s", path);
			*step = steps[i];
		}
		break;
	}
	free(steps);
	return rc;
}

int ckpt_find_latest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e)
{
	return find_step(run_dir, dir, dir_size, step, true, e);
}

int ckpt_find_newest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e)
{
	return find_step(run_dir, dir, dir_size, step, false, e);
}

int ckpt_refuse_existing(const char *run_dir, const char *who, pp_err *e)
{
	char dir[CKPT_PATH];
	long step = -1;
	int rc = ckpt_find_newest(run_dir, dir, sizeof dir, &step, e);
	if (!rc && step >= 0)
		rc = pp_errorf(e, PP_EUSAGE,
			       "%s already holds checkpoint step %ld; %s writes new runs only",
			       run_dir, step, who);
	return rc;
}

int ckpt_find_resume(const char *run_dir, long want, char *dir, size_t dir_size, long *step,
		     char *skipped, size_t skipped_size, pp_err *e)
{
	h5u_quiet();
	*step = -1;
	if (dir_size)
		dir[0] = '\0';
	if (skipped_size)
		skipped[0] = '\0';
	char ckpts[CKPT_PATH], path[CKPT_PATH];
	long *steps;
	int n, rc;
	if ((rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e)) ||
	    (rc = list_steps(ckpts, &steps, &n, e)))
		return rc;
	size_t used = 0;
	bool asked_found = false;
	for (int i = 0; i < n && *step < 0 && !rc; i++) {
		if (want >= 0 && steps[i] != want)
			continue;
		asked_found = true;
		if (step_path(path, sizeof path, ckpts, steps[i]))
			continue;
		pp_err why = {0};
		if (ckpt_verify(path, &why) == PP_OK) {
			if (strlen(path) >= dir_size)
				rc = pp_errorf(e, PP_EUSAGE,
					       "checkpoint path %s does not fit in %zu bytes", path,
					       dir_size);
			else {
				snprintf(dir, dir_size, "%s", path);
				*step = steps[i];
			}
		} else if (want >= 0) {
			rc = pp_errorf(e, PP_ERUNTIME, "resume_from=%ld: %s", want, why.msg);
		} else if (used < skipped_size) {
			int k = snprintf(skipped + used, skipped_size - used,
					 "%sstep_%08ld fails verification (%s)", used ? "; " : "",
					 steps[i], why.msg);
			used += k > 0 ? (size_t)k : 0;
		}
	}
	if (!rc && want >= 0 && !asked_found)
		rc = pp_errorf(e, PP_EUSAGE, "resume_from=%ld: %s holds no checkpoint step_%08ld%s",
			       want, ckpts, want, n ? "" : " (it holds none)");
	/* damaged checkpoints and no sound one: never a silent fresh start */
	if (!rc && *step < 0 && used)
		rc = pp_errorf(e, PP_ERUNTIME,
			       "no checkpoint in %s passes verification: %s; remove them to start "
			       "afresh",
			       ckpts, skipped);
	free(steps);
	return rc;
}

int ckpt_step_dir(const char *run_dir, long step, char *buf, size_t n, pp_err *e)
{
	char ckpts[CKPT_PATH];
	int rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e);
	return rc ? rc : ckpt_fmt_checked(buf, n, e, "%s/step_%08ld", ckpts, step);
}

int ckpt_list_steps(const char *run_dir, long **steps, int *n, pp_err *e)
{
	char ckpts[CKPT_PATH];
	*steps = NULL;
	*n = 0;
	int rc = ckpts_dir(ckpts, sizeof ckpts, run_dir, e);
	return rc ? rc : list_steps(ckpts, steps, n, e);
}

int ckpt_resolve(const char *path, char *dir, size_t n, pp_err *e)
{
	char probe[CKPT_PATH + 32];
	struct stat st;
	snprintf(probe, sizeof probe, "%s/manifest.json", path);
	if (stat(probe, &st) == 0) {
		snprintf(dir, n, "%s", path);
		return 0;
	}
	long step;
	char skipped[2048];
	int rc = ckpt_find_resume(path, -1, dir, n, &step, skipped, sizeof skipped, e);
	if (!rc && step < 0)
		rc = pp_errorf(
			e, PP_EUSAGE,
			"%s: neither a checkpoint (no manifest.json) nor a run directory holding one",
			path);
	if (!rc && skipped[0])
		log_info("warning: %s; using %s, the newest sound one", skipped, dir);
	return rc;
}
