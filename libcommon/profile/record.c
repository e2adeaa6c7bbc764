/* Recording a rank's profile (record.h). */
#include "record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../base/log.h"

/* barrier rounds at each end of the window (merge.c intersects what they say) */
#define SYNC_ROUNDS 8

/* an event timed on the device, waiting for its marks */
typedef struct {
	size_t ev;
	void *m0, *m1; /* m0 NULL: the start is a host time */
} pending;

struct prof_rec {
	prof_rank r; /* identity, and the events so far */
	char dir[4200], path[4300];
	const pp_ops *ops;
	pp_comm *world;
	int64_t offset;  /* ns added to the clock */
	long begin, end; /* the window asked for */
	long step;       /* the step being run */
	bool active, done;
	pending *pend;
	size_t n_pend, cap_pend;
	bool failed; /* nothing is written: the reason was logged */
};

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t prof_now(const prof_rec *p) { return mono_ns() + (p ? p->offset : 0); }

bool prof_on(const prof_rec *p) { return p && p->active; }

/* A run's identity: 16 random bytes in hex, from rank 0. */
static int agree_run_id(prof_rec *p, pp_err *e)
{
	char id[sizeof p->r.run_id] = "";
	if (!p->world || p->world->rank == 0) {
		unsigned char b[16];
		if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
			/* no entropy source: time and pid still tell runs apart */
			uint64_t x = (uint64_t)mono_ns() ^ ((uint64_t)getpid() << 32);
			for (size_t i = 0; i < sizeof b; i++, x = x * 6364136223846793005ULL + 1)
				b[i] = (unsigned char)(x >> 56);
		}
		for (size_t i = 0; i < sizeof b; i++)
			snprintf(id + 2 * i, 3, "%02x", b[i]);
	}
	int rc = p->world ? comm_broadcast(p->world, id, sizeof id, PP_DT_BYTE, 0, e) : 0;
	if (!rc)
		snprintf(p->r.run_id, sizeof p->r.run_id, "%s", id);
	return rc;
}

int prof_rec_open(prof_rec **out, const prof_rec_opts *o, pp_err *e)
{
	*out = NULL;
	prof_rec *p = calloc(1, sizeof *p);
	if (!p)
		return pp_errorf(e, PP_ERUNTIME, "profile: out of memory");
	p->r = *o->id;
	p->r.ev = NULL;
	p->r.sync = NULL;
	p->r.n_ev = p->r.cap_ev = 0;
	p->r.n_sync = p->r.cap_sync = 0;
	p->r.device_clock = o->ops && o->ops->mark;
	p->ops = p->r.device_clock ? o->ops : NULL;
	p->world = o->world;
	p->offset = (int64_t)(o->clock_offset_s * 1e9);
	p->begin = o->begin;
	p->end = o->end;
	char name[32];
	prof_file_name(p->r.rank, name, sizeof name);
	if (snprintf(p->dir, sizeof p->dir, "%s/profile", o->run_dir) >= (int)sizeof p->dir ||
	    snprintf(p->path, sizeof p->path, "%s/%s", p->dir, name) >= (int)sizeof p->path) {
		free(p);
		return pp_errorf(e, PP_EUSAGE, "profile: run directory path too long: %s",
				 o->run_dir);
	}
	snprintf(p->r.run_dir, sizeof p->r.run_dir, "%s", o->run_dir);
	int rc = agree_run_id(p, e);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	return 0;
}

void prof_rec_free(prof_rec *p)
{
	if (!p)
		return;
	prof_rank_free(&p->r);
	free(p->pend);
	free(p);
}

static void warn(prof_rec *p, const char *why)
{
	if (!p->failed)
		log_info("warning: rank %d's profile is not written: %s", p->r.rank, why);
	p->failed = true;
}

/* Rounds of barriers, each timed on both sides. */
static int clock_sync(prof_rec *p, int phase, pp_err *e)
{
	for (int k = 0; k < SYNC_ROUNDS; k++) {
		prof_sync s = {phase, k, prof_now(p), 0};
		int rc = p->world ? comm_barrier(p->world, e) : 0;
		s.after = prof_now(p);
		if (!rc)
			rc = prof_rank_add_sync(&p->r, &s, e);
		if (rc)
			return pp_err_prefix(e, "profile: clock synchronisation");
	}
	return 0;
}

/* Profiles of ranks this run does not have, left by an earlier run with more
 * ranks, would not merge with this run's: rank 0 removes them. */
static void remove_stale(const prof_rec *p)
{
	DIR *d = opendir(p->dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		int rank, len = 0;
		if (sscanf(de->d_name, "rank-%d.h5%n", &rank, &len) == 1 && !de->d_name[len] &&
		    rank >= p->r.world) {
			char path[sizeof p->dir + 300];
			snprintf(path, sizeof path, "%s/%s", p->dir, de->d_name);
			unlink(path);
		}
	}
	closedir(d);
}

int prof_rec_step_begin(prof_rec *p, long step, pp_err *e)
{
	if (!p)
		return 0;
	p->step = step;
	if (p->active || p->done || step < p->begin || step >= p->end)
		return 0;
	/* a resumed run may start inside the window: it opens at this step */
	p->r.step_begin = step;
	int rc = clock_sync(p, 0, e);
	if (rc)
		return rc;
	if (p->ops)
		p->ops->mark_anchor();
	p->active = true;
	/* failures of this rank alone are warnings: the other ranks' barriers
	 * still need it, and training goes on */
	pp_err err;
	if (fs_mkdir_p(p->dir, &err))
		warn(p, err.msg);
	else if (p->r.rank == 0)
		remove_stale(p);
	return 0;
}

/* Reads the marks of the events timed on the device. */
static void resolve(prof_rec *p)
{
	for (size_t i = 0; i < p->n_pend; i++) {
		pending *q = &p->pend[i];
		prof_event *ev = &p->r.ev[q->ev];
		int64_t t0 = q->m0 ? p->ops->mark_ns(q->m0) + p->offset : ev->start;
		int64_t t1 = p->ops->mark_ns(q->m1) + p->offset;
		ev->start = t0;
		ev->dur = t1 > t0 ? t1 - t0 : 0;
	}
	p->n_pend = 0;
}

static int write_file(prof_rec *p, bool sync, pp_err *e)
{
	p->active = false;
	p->done = true;
	if (p->ops)
		resolve(p);
	p->r.step_end = p->step + 1;
	int rc = sync ? clock_sync(p, 1, e) : 0;
	pp_err err;
	if (!rc && !p->failed && prof_write(p->path, &p->r, &err))
		warn(p, err.msg);
	return rc;
}

int prof_rec_step_end(prof_rec *p, long step, pp_err *e)
{
	if (!prof_on(p))
		return 0;
	if (p->ops)
		resolve(p);
	return step + 1 >= p->end ? write_file(p, true, e) : 0;
}

int prof_rec_finish(prof_rec *p, bool sync, pp_err *e)
{
	return prof_on(p) ? write_file(p, sync, e) : 0;
}

/* Timed by marks on the compute stream: the passes and the optimizer; the
 * sends and receives too, since a blocking communication makes the compute
 * stream wait for it (comm.h), so a mark before the call is reached when the
 * work it waits for is done and one after it when the transfer is; and the
 * start of a gradient bucket, which waits for the backward's kernels before
 * it and ends at a mark on its communicator's stream (prof_end_mark). */
static bool on_device(prof_op op)
{
	return prof_is_compute(op) || prof_is_p2p(op) || op == PROF_OPTIMIZER ||
	       op == PROF_GRAD_REDUCE;
}

prof_span prof_begin(prof_rec *p, prof_op op)
{
	prof_span s = {0, NULL, -1};
	if (!prof_on(p))
		return s;
	s.op = op;
	s.t0 = prof_now(p);
	if (p->ops && on_device(op))
		s.m0 = p->ops->mark();
	return s;
}

/* Adds the event; with marks to read later when m1 is not NULL. */
static void add(prof_rec *p, const prof_span *s, int64_t t1, void *m1, int mb, int vstage, int peer,
		int64_t bytes)
{
	prof_event ev = {.op = s->op,
			 .start = s->t0,
			 .dur = t1 - s->t0,
			 .bytes = bytes,
			 .step = (int32_t)p->step,
			 .mb = mb,
			 .vstage = vstage,
			 .peer = peer};
	if (prof_rank_add(&p->r, &ev, NULL)) {
		warn(p, "out of memory for its events");
		return;
	}
	if (!m1)
		return;
	if (p->n_pend == p->cap_pend) {
		size_t cap = p->cap_pend ? 2 * p->cap_pend : 64;
		pending *q = realloc(p->pend, cap * sizeof *q);
		if (!q) {
			warn(p, "out of memory for its events");
			return;
		}
		p->pend = q;
		p->cap_pend = cap;
	}
	p->pend[p->n_pend++] = (pending){p->r.n_ev - 1, s->m0, m1};
}

void prof_end(prof_rec *p, const prof_span *s, int mb, int vstage, int peer, int64_t bytes)
{
	if (s->op < 0 || !prof_on(p))
		return;
	void *m1 = s->m0 ? p->ops->mark() : NULL;
	add(p, s, prof_now(p), m1, mb, vstage, peer, bytes);
}

void prof_end_mark(prof_rec *p, const prof_span *s, void *mark, int64_t bytes)
{
	if (s->op < 0 || !prof_on(p))
		return;
	add(p, s, prof_now(p), p->ops ? mark : NULL, -1, -1, -1, bytes);
}
