#include "boot.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The Makefile adds `pkg-config --cflags pmix`; without it this file builds
 * only a boot_init that explains what is missing, so a build without PMIx
 * still links every tool that does not need ranks. */
#if defined(__has_include)
#if __has_include(<pmix.h>)
#define BOOT_HAVE_PMIX 1
#endif
#endif

#ifdef BOOT_HAVE_PMIX
#include <pmix.h>
#endif

/* A fence waits for every rank; a rank that never arrives (crashed before
 * boot, or not started) ends it after this long where the server honours
 * PMIX_TIMEOUT (Slurm's own PMIxTimeout defaults to the same). */
#define BOOT_FENCE_TIMEOUT_S 300

static long env_long(const char *name, long dflt)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	long v = strtol(s, &end, 10);
	return *end ? dflt : v;
}

static void self_peer(boot_peer *b)
{
	memset(b, 0, sizeof *b);
	b->pid = getpid();
	if (gethostname(b->host, sizeof b->host) != 0)
		snprintf(b->host, sizeof b->host, "unknown");
	b->host[sizeof b->host - 1] = 0;
}

static int fill_singleton(pp_proc *p, pp_err *e)
{
	p->rank = 0, p->size = 1, p->local_rank = 0, p->local_size = 1, p->singleton = 1;
	snprintf(p->nspace, sizeof p->nspace, "singleton.%ld", (long)getpid());
	p->peers = calloc(1, sizeof *p->peers);
	if (!p->peers)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	self_peer(&p->peers[0]);
	return 0;
}

/* srun --mpi=none (or pmi2) starts N tasks that each find no PMIx server:
 * they would all be rank 0 of 1 and train alone, so refuse. */
static int check_slurm_singleton(pp_err *e)
{
	long ntasks = env_long("SLURM_NTASKS", 1), procid = env_long("SLURM_PROCID", 0);
	if (ntasks <= 1 && procid == 0)
		return 0;
	return pp_errorf(
		e, PP_ERUNTIME,
		"Slurm started this job step with SLURM_NTASKS=%ld (this is task "
		"SLURM_PROCID=%ld) but no PMIx server answered, so every task would run "
		"alone as rank 0 of 1; launch with `srun --mpi=pmix` (or set MpiDefault=pmix "
		"in slurm.conf)",
		ntasks, procid);
}

#ifdef BOOT_HAVE_PMIX

static int pmix_up; /* PMIx_Init succeeded and not yet finalized */

static long value_long(const pmix_value_t *v)
{
	switch (v->type) {
	case PMIX_UINT8:
		return v->data.uint8;
	case PMIX_UINT16:
		return v->data.uint16;
	case PMIX_UINT32:
		return v->data.uint32;
	case PMIX_UINT64:
		return (long)v->data.uint64;
	case PMIX_INT:
		return v->data.integer;
	case PMIX_INT16:
		return v->data.int16;
	case PMIX_INT32:
		return v->data.int32;
	case PMIX_INT64:
		return (long)v->data.int64;
	case PMIX_PROC_RANK:
		return v->data.rank;
	default:
		return -1;
	}
}

/* A job-level (rank wildcard) or own-rank integer attribute. */
static int get_long(const pmix_proc_t *who, const char *key, long *out, pp_err *e)
{
	pmix_value_t *v = NULL;
	pmix_status_t rc = PMIx_Get(who, key, NULL, 0, &v);
	if (rc != PMIX_SUCCESS || !v)
		return pp_errorf(e, PP_ERUNTIME, "PMIx_Get(%s): %s", key, PMIx_Error_string(rc));
	*out = value_long(v);
	PMIX_VALUE_RELEASE(v);
	if (*out < 0)
		return pp_errorf(e, PP_ERUNTIME, "PMIx_Get(%s): not an integer", key);
	return 0;
}

static void make_key(pp_proc *p, const char *key, char *buf, size_t size)
{
	snprintf(buf, size, "pp.%u.%s", p->seq++, key);
}

static int put_commit(const char *pkey, const void *blob, size_t n, pp_err *e)
{
	pmix_value_t v;
	pmix_byte_object_t bo = {.bytes = (char *)blob, .size = n};
	PMIX_VALUE_CONSTRUCT(&v);
	pmix_status_t rc = PMIx_Value_load(&v, &bo, PMIX_BYTE_OBJECT);
	if (rc == PMIX_SUCCESS)
		rc = PMIx_Put(PMIX_GLOBAL, pkey, &v);
	PMIX_VALUE_DESTRUCT(&v);
	if (rc == PMIX_SUCCESS)
		rc = PMIx_Commit();
	if (rc != PMIX_SUCCESS)
		return pp_errorf(e, PP_ERUNTIME, "PMIx_Put/Commit(%s): %s", pkey,
				 PMIx_Error_string(rc));
	return 0;
}

static int fence(const pp_proc *p, const char *key, pp_err *e)
{
	pmix_proc_t all;
	PMIX_LOAD_PROCID(&all, p->nspace, PMIX_RANK_WILDCARD);
	pmix_info_t info[2];
	bool collect = true;
	int timeout = BOOT_FENCE_TIMEOUT_S;
	PMIX_INFO_CONSTRUCT(&info[0]);
	PMIX_INFO_CONSTRUCT(&info[1]);
	PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
	pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	if (rc != PMIX_SUCCESS)
		return pp_errorf(e, PP_ERUNTIME, "PMIx_Fence for '%s' (%d ranks): %s", key, p->size,
				 PMIx_Error_string(rc));
	return 0;
}

/* out (n bytes) = the blob rank put under pkey */
static int get_blob(const pp_proc *p, int rank, const char *pkey, void *out, size_t n, pp_err *e)
{
	pmix_proc_t src;
	PMIX_LOAD_PROCID(&src, p->nspace, (pmix_rank_t)rank);
	pmix_value_t *v = NULL;
	pmix_status_t rc = PMIx_Get(&src, pkey, NULL, 0, &v);
	if (rc != PMIX_SUCCESS || !v)
		return pp_errorf(e, PP_ERUNTIME, "PMIx_Get(%s) from rank %d: %s", pkey, rank,
				 PMIx_Error_string(rc));
	int bad = v->type != PMIX_BYTE_OBJECT || v->data.bo.size != n;
	if (bad)
		pp_errorf(e, PP_ERUNTIME, "PMIx_Get(%s) from rank %d: %zu bytes, expected %zu",
			  pkey, rank, v->type == PMIX_BYTE_OBJECT ? v->data.bo.size : 0, n);
	else if (n)
		memcpy(out, v->data.bo.bytes, n);
	PMIX_VALUE_RELEASE(v);
	return bad ? PP_ERUNTIME : 0;
}

int boot_init(pp_proc *p, pp_err *e)
{
	memset(p, 0, sizeof *p);
	if (gethostname(p->host, sizeof p->host) != 0)
		snprintf(p->host, sizeof p->host, "unknown");
	p->host[sizeof p->host - 1] = 0;

	pmix_proc_t me;
	pmix_status_t rc = PMIx_Init(&me, NULL, 0);
	if (rc == PMIX_ERR_UNREACH) {
		PMIx_Finalize(NULL, 0);
		if (check_slurm_singleton(e))
			return PP_ERUNTIME;
		return fill_singleton(p, e);
	}
	if (rc != PMIX_SUCCESS)
		return pp_errorf(e, PP_ERUNTIME, "PMIx_Init: %s", PMIx_Error_string(rc));
	pmix_up = 1;
	snprintf(p->nspace, sizeof p->nspace, "%s", me.nspace);
	p->rank = (int)me.rank;

	pmix_proc_t job;
	PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
	long size, lrank, lsize;
	if (get_long(&job, PMIX_JOB_SIZE, &size, e) || get_long(&me, PMIX_LOCAL_RANK, &lrank, e) ||
	    get_long(&job, PMIX_LOCAL_SIZE, &lsize, e)) {
		boot_fini(p);
		return pp_err_prefix(e, "boot (rank %d)", p->rank);
	}
	p->size = (int)size, p->local_rank = (int)lrank, p->local_size = (int)lsize;

	p->peers = calloc((size_t)p->size, sizeof *p->peers);
	if (!p->peers) {
		boot_fini(p);
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %d peers", p->size);
	}
	boot_peer self;
	self_peer(&self);
	if (boot_allgather(p, "peers", &self, sizeof self, p->peers, e)) {
		boot_fini(p);
		return PP_ERUNTIME;
	}
	for (int r = 0; r < p->size; r++)
		p->peers[r].host[BOOT_HOST_MAX - 1] = 0;
	return 0;
}

int boot_exchange(pp_proc *p, const char *key, const void *blob, size_t n, int root, void *out,
		  pp_err *e)
{
	if (root < 0 || root >= p->size)
		return pp_errorf(e, PP_EUSAGE, "boot_exchange(%s): root %d is not a rank of %d",
				 key, root, p->size);
	if (p->singleton) {
		if (n && out != blob)
			memmove(out, blob, n);
		return 0;
	}
	char pkey[PMIX_MAX_KEYLEN];
	make_key(p, key, pkey, sizeof pkey);
	if (p->rank == root && put_commit(pkey, blob, n, e))
		return pp_err_prefix(e, "boot rank %d", p->rank);
	if (fence(p, key, e))
		return pp_err_prefix(e, "boot rank %d", p->rank);
	if (p->rank == root) {
		if (n && out != blob)
			memmove(out, blob, n);
		return 0;
	}
	if (get_blob(p, root, pkey, out, n, e))
		return pp_err_prefix(e, "boot rank %d", p->rank);
	return 0;
}

int boot_allgather(pp_proc *p, const char *key, const void *blob, size_t n, void *out, pp_err *e)
{
	if (p->singleton) {
		if (n && out != blob)
			memmove(out, blob, n);
		return 0;
	}
	char pkey[PMIX_MAX_KEYLEN];
	make_key(p, key, pkey, sizeof pkey);
	if (put_commit(pkey, blob, n, e) || fence(p, key, e))
		return pp_err_prefix(e, "boot rank %d", p->rank);
	for (int r = 0; r < p->size; r++) {
		char *dst = (char *)out + (size_t)r * n;
		if (r == p->rank) {
			if (n && dst != blob)
				memmove(dst, blob, n);
		} else if (get_blob(p, r, pkey, dst, n, e)) {
			return pp_err_prefix(e, "boot rank %d", p->rank);
		}
	}
	return 0;
}

void boot_abort(const pp_proc *p, int code, const char *why)
{
	(void)p; /* a singleton never has pmix_up */
	fflush(NULL);
	if (pmix_up) {
		boot_exit_after(5, code); /* PMIx_Abort waits for the server */
		PMIx_Abort(code, why ? why : "pp: abort", NULL, 0);
	}
	_exit(code);
}

void boot_fini(pp_proc *p)
{
	if (pmix_up) {
		PMIx_Finalize(NULL, 0);
		pmix_up = 0;
	}
	free(p->peers);
	p->peers = NULL;
}

#else /* no PMIx headers at build time */

int boot_init(pp_proc *p, pp_err *e)
{
	memset(p, 0, sizeof *p);
	if (check_slurm_singleton(e))
		return PP_ERUNTIME;
	if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"))
		return pp_errorf(
			e, PP_ERUNTIME,
			"started by a launcher but pp was built without PMIx: rebuild with "
			"libpmix-dev installed (`pkg-config --cflags --libs pmix`)");
	if (gethostname(p->host, sizeof p->host) != 0)
		snprintf(p->host, sizeof p->host, "unknown");
	p->host[sizeof p->host - 1] = 0;
	return fill_singleton(p, e);
}

int boot_exchange(pp_proc *p, const char *key, const void *blob, size_t n, int root, void *out,
		  pp_err *e)
{
	if (root != 0)
		return pp_errorf(e, PP_EUSAGE, "boot_exchange(%s): root %d is not a rank of %d",
				 key, root, p->size);
	if (n && out != blob)
		memmove(out, blob, n);
	return 0;
}

int boot_allgather(pp_proc *p, const char *key, const void *blob, size_t n, void *out, pp_err *e)
{
	(void)p, (void)key, (void)e;
	if (n && out != blob)
		memmove(out, blob, n);
	return 0;
}

void boot_abort(const pp_proc *p, int code, const char *why)
{
	(void)p, (void)why;
	fflush(NULL);
	_exit(code);
}

void boot_fini(pp_proc *p)
{
	free(p->peers);
	p->peers = NULL;
}

#endif

static volatile sig_atomic_t exit_code = 1;
static void exit_now(int sig)
{
	(void)sig;
	_exit(exit_code);
}

void boot_exit_after(unsigned seconds, int code)
{
	exit_code = code;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = exit_now;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	alarm(seconds);
}

int boot_device(const pp_proc *p)
{
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	if (v && *v && !strchr(v, ','))
		return 0;
	return p->local_rank;
}

void boot_peer_name(const pp_proc *p, int rank, char *buf, size_t size)
{
	if (p->peers && rank >= 0 && rank < p->size)
		snprintf(buf, size, "rank %d (pid %ld on host %s)", rank, (long)p->peers[rank].pid,
			 p->peers[rank].host);
	else
		snprintf(buf, size, "rank %d", rank);
}

/* 1 when pid on this host has exited (gone, or a zombie nobody reaped yet) */
static int pid_gone(pid_t pid)
{
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 1;
	char path[64], stat[512];
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(stat, 1, sizeof stat - 1, f);
	fclose(f);
	stat[n] = 0;
	const char *s = strrchr(stat, ')'); /* "pid (comm) S ...": comm may hold spaces */
	return s && (s[2] == 'Z' || s[2] == 'X');
}

static void appendf(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t size, const char *fmt, ...)
{
	size_t len = strnlen(buf, size);
	if (len + 1 >= size)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + len, size - len, fmt, ap);
	va_end(ap);
}

int boot_describe_peers(const pp_proc *p, const int *ranks, int n, char *buf, size_t size)
{
	enum { MAX_NAMED = 8 };
	char name[160];
	int dead = 0, remote = 0, local = 0;
	if (!size)
		return 0;
	buf[strnlen(buf, size - 1)] = 0;
	for (int i = 0; i < n; i++) {
		int r = ranks[i];
		if (r == p->rank || !p->peers || r < 0 || r >= p->size)
			continue;
		if (strcmp(p->peers[r].host, p->host)) {
			remote++;
			continue;
		}
		local++;
		if (pid_gone(p->peers[r].pid)) {
			boot_peer_name(p, r, name, sizeof name);
			appendf(buf, size, "%s%s has exited", dead ? "; " : "", name);
			dead++;
		}
	}
	if (dead)
		return dead;
	if (!remote) {
		appendf(buf, size, "%s",
			local ? "every peer on this host is still running (one may be stuck, "
				"or calling a different operation)"
			      : "no peer to check");
		return 0;
	}
	/* No one here has gone: the ranks elsewhere are the suspects. */
	if (local)
		appendf(buf, size, "no rank on this host (%s) has exited; ", p->host);
	int named = 0;
	for (int i = 0; i < n; i++) {
		int r = ranks[i];
		if (r == p->rank || r < 0 || r >= p->size || !strcmp(p->peers[r].host, p->host))
			continue;
		if (named == MAX_NAMED) {
			appendf(buf, size, " and %d more", remote - named);
			break;
		}
		boot_peer_name(p, r, name, sizeof name);
		appendf(buf, size, "%s%s", named ? ", " : "", name);
		named++;
	}
	appendf(buf, size, " did not respond (on other hosts: see their logs)");
	return 0;
}
