/* A run's profiles together (merge.h). */
#include "merge.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/log.h"

/* ---- finding the files ---------------------------------------------------- */

typedef struct {
	char **v;
	int n, cap;
} names;

static int push(names *l, const char *path, pp_err *e)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 16;
		char **v = realloc(l->v, (size_t)cap * sizeof *v);
		if (!v)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		l->v = v;
		l->cap = cap;
	}
	if (!(l->v[l->n] = strdup(path)))
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	l->n++;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The rank-*.h5 files of a directory (its profile/ when it is a run
 * directory), in name order. */
static int add_dir(names *l, const char *dir, pp_err *e)
{
	char sub[4200];
	struct stat st;
	snprintf(sub, sizeof sub, "%s/profile", dir);
	const char *d = !stat(sub, &st) && S_ISDIR(st.st_mode) ? sub : dir;
	DIR *h = opendir(d);
	if (!h)
		return pp_errorf(e, PP_EUSAGE, "cannot read directory %s", d);
	int first = l->n, rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(h))) {
		int rank, len = 0;
		if (sscanf(de->d_name, "rank-%d.h5%n", &rank, &len) != 1 || de->d_name[len])
			continue;
		char path[4500];
		snprintf(path, sizeof path, "%s/%s", d, de->d_name);
		rc = push(l, path, e);
	}
	closedir(h);
	if (!rc && l->n == first)
		rc = pp_errorf(e, PP_EUSAGE, "%s holds no profiles (rank-NNNNN.h5)", d);
	if (!rc)
		qsort(l->v + first, (size_t)(l->n - first), sizeof *l->v, by_name);
	return rc;
}

/* ---- checks across files -------------------------------------------------- */

static int by_rank(const void *a, const void *b)
{
	const prof_rank *x = a, *y = b;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int check_together(prof_run *run, bool force, pp_err *e)
{
	const prof_rank *a = &run->ranks[0];
	for (int i = 1; i < run->n_ranks; i++) {
		const prof_rank *b = &run->ranks[i];
		if (strcmp(a->run_id, b->run_id) && !force)
			return pp_errorf(e, PP_EUSAGE,
					 "%s is from run %s, %s from run %s: these are profiles of "
					 "different runs (--force merges them anyway)",
					 b->path, b->run_id, a->path, a->run_id);
		if (b->rank == run->ranks[i - 1].rank)
			return pp_errorf(e, PP_EUSAGE, "%s and %s are both profiles of rank %d",
					 run->ranks[i - 1].path, b->path, b->rank);
		if (a->world != b->world || a->pp != b->pp || a->dp != b->dp || a->tp != b->tp ||
		    a->v != b->v || a->m != b->m || strcmp(a->schedule, b->schedule))
			return pp_errorf(
				e, PP_EUSAGE,
				"%s (%d ranks: pp=%d dp=%d tp=%d, %s v=%d m=%d) and %s (%d "
				"ranks: pp=%d dp=%d tp=%d, %s v=%d m=%d) have different layouts",
				a->path, a->world, a->pp, a->dp, a->tp, a->schedule, a->v, a->m,
				b->path, b->world, b->pp, b->dp, b->tp, b->schedule, b->v, b->m);
	}
	run->step_begin = a->step_begin;
	run->step_end = a->step_end;
	for (int i = 1; i < run->n_ranks; i++) {
		const prof_rank *b = &run->ranks[i];
		if (b->step_begin > run->step_begin)
			run->step_begin = b->step_begin;
		if (b->step_end < run->step_end)
			run->step_end = b->step_end;
	}
	if (run->step_begin >= run->step_end)
		return pp_errorf(e, PP_EUSAGE,
				 "the profiles' windows of steps have no step in common");
	if (run->n_ranks < a->world)
		log_info(
			"warning: %d of the run's %d ranks have a profile here; the others are left out",
			run->n_ranks, a->world);
	return 0;
}

int prof_run_file_of(const prof_run *run, int f, int pp_rank)
{
	const prof_rank *me = &run->ranks[f];
	for (int i = 0; i < run->n_ranks; i++) {
		const prof_rank *r = &run->ranks[i];
		if (r->pp_rank == pp_rank && r->dp_rank == me->dp_rank && r->tp_rank == me->tp_rank)
			return i;
	}
	return -1;
}

/* ---- clocks --------------------------------------------------------------- */

static int by_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, by_i64);
	return n % 2 ? v[n / 2] : v[n / 2 - 1] + (v[n / 2] - v[n / 2 - 1]) / 2;
}

/* The offset o of file r's clock against file ref's in phase ph (ref's
 * time = r's + o). Round k's barrier released every rank at one true
 * instant, after each rank's `before` and before its `after`, so
 *   before_ref - after_r <= o <= after_ref - before_r
 * in every round: o lies in the intersection of those intervals, whose
 * middle is the estimate, at *t (r's median exit). Should the intersection
 * be empty (a clock that moved during the rounds), the median of the
 * rounds' exit differences. 0 when the phase has no round in common. */
static int phase_offset(const prof_rank *ref, const prof_rank *r, int ph, int64_t *off, int64_t *t)
{
	int64_t d[64], at[64], lo = INT64_MIN, hi = INT64_MAX;
	int n = 0;
	for (int i = 0; i < r->n_sync && n < 64; i++) {
		const prof_sync *s = &r->sync[i];
		if (s->phase != ph)
			continue;
		for (int j = 0; j < ref->n_sync; j++) {
			const prof_sync *q = &ref->sync[j];
			if (q->phase != ph || q->round != s->round)
				continue;
			d[n] = q->after - s->after;
			at[n++] = s->after;
			lo = q->before - s->after > lo ? q->before - s->after : lo;
			hi = q->after - s->before < hi ? q->after - s->before : hi;
			break;
		}
	}
	if (!n)
		return 0;
	*off = lo <= hi ? lo + (hi - lo) / 2 : median(d, n);
	*t = median(at, n);
	return 1;
}

static void align_clocks(prof_run *run, bool align)
{
	const prof_rank *ref = &run->ranks[0];
	bool missing = false;
	run->aligned = align;
	for (int i = 0; i < run->n_ranks; i++) {
		int64_t o0 = 0, t0 = 0, o1 = 0, t1 = 0;
		int have0 = align && phase_offset(ref, &run->ranks[i], 0, &o0, &t0);
		int have1 = align && phase_offset(ref, &run->ranks[i], 1, &o1, &t1);
		run->off[i] = (double)(have0 ? o0 : o1);
		run->t_ref[i] = have0 ? t0 : t1;
		run->slope[i] = have0 && have1 && t1 > t0 ? (double)(o1 - o0) / (double)(t1 - t0)
							  : 0;
		missing |= align && !have0 && !have1;
	}
	if (missing) {
		log_info("warning: some profiles have no clock records in common with %s; their "
			 "clocks are taken as they are",
			 ref->path);
		run->aligned = false;
	}
}

static int64_t aligned(const prof_run *run, int f, int64_t t)
{
	return t + (int64_t)(run->off[f] + run->slope[f] * (double)(t - run->t_ref[f]));
}

/* ---- sends and receives --------------------------------------------------- */

typedef struct {
	int64_t step, mb, vstage, grad, from, to; /* from, to: files */
	long ev;
} msg_key;

static int by_key(const void *a, const void *b)
{
	const msg_key *x = a, *y = b;
	const int64_t *p = &x->step, *q = &y->step;
	for (int i = 0; i < 6; i++)
		if (p[i] != q[i])
			return (p[i] > q[i]) - (p[i] < q[i]);
	return 0;
}

static int match_messages(prof_run *run, pp_err *e)
{
	msg_key *snd = malloc((run->n_ev + 1) * sizeof *snd),
		*rcv = malloc((run->n_ev + 1) * sizeof *rcv);
	if (!snd || !rcv) {
		free(snd);
		free(rcv);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	size_t ns = 0, nr = 0;
	for (size_t i = 0; i < run->n_ev; i++) {
		prof_mev *m = &run->ev[i];
		m->partner = -1;
		const prof_event *ev = m->src;
		if (!prof_is_p2p(ev->op))
			continue;
		run->n_p2p++;
		int peer = prof_run_file_of(run, m->file, ev->peer);
		bool send = prof_is_send(ev->op);
		msg_key k = {ev->step,
			     ev->mb,
			     ev->vstage,
			     ev->op >= PROF_SEND_GRAD,
			     send ? m->file : peer,
			     send ? peer : m->file,
			     (long)i};
		if (peer >= 0)
			(send ? snd : rcv)[send ? ns++ : nr++] = k;
	}
	qsort(snd, ns, sizeof *snd, by_key);
	qsort(rcv, nr, sizeof *rcv, by_key);
	for (size_t i = 0, j = 0; i < ns && j < nr;) {
		int c = by_key(&snd[i], &rcv[j]);
		if (c == 0) {
			run->ev[snd[i].ev].partner = rcv[j].ev;
			run->ev[rcv[j].ev].partner = snd[i].ev;
			run->n_matched += 2;
			i++, j++;
		} else if (c < 0) {
			i++;
		} else {
			j++;
		}
	}
	free(snd);
	free(rcv);
	return 0;
}

/* ---- loading -------------------------------------------------------------- */

static int by_file_start(const void *a, const void *b)
{
	const prof_mev *x = a, *y = b;
	if (x->file != y->file)
		return (x->file > y->file) - (x->file < y->file);
	if (x->start != y->start)
		return (x->start > y->start) - (x->start < y->start);
	/* an enclosing event first */
	return (x->end < y->end) - (x->end > y->end);
}

int prof_run_load(prof_run *run, char *const *paths, int n, bool force, bool align, pp_err *e)
{
	memset(run, 0, sizeof *run);
	names l = {0};
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		struct stat st;
		if (!stat(paths[i], &st) && S_ISDIR(st.st_mode))
			rc = add_dir(&l, paths[i], e);
		else
			rc = push(&l, paths[i], e);
	}
	if (!rc && !l.n)
		rc = pp_errorf(e, PP_EUSAGE, "no profiles given");
	if (!rc && !(run->ranks = calloc((size_t)l.n, sizeof *run->ranks)))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; i < l.n && !rc; i++)
		if (!(rc = prof_read(l.v[i], &run->ranks[i], e)))
			run->n_ranks++;
	for (int i = 0; i < l.n; i++)
		free(l.v[i]);
	free(l.v);
	if (rc)
		return rc;
	qsort(run->ranks, (size_t)run->n_ranks, sizeof *run->ranks, by_rank);
	if ((rc = check_together(run, force, e)))
		return rc;

	run->off = calloc((size_t)run->n_ranks, sizeof *run->off);
	run->slope = calloc((size_t)run->n_ranks, sizeof *run->slope);
	run->t_ref = calloc((size_t)run->n_ranks, sizeof *run->t_ref);
	for (int i = 0; i < run->n_ranks; i++)
		run->n_ev += run->ranks[i].n_ev;
	run->ev = malloc((run->n_ev + 1) * sizeof *run->ev);
	if (!run->off || !run->slope || !run->t_ref || !run->ev)
		return pp_errorf(e, PP_ERUNTIME, "out of memory for %zu events", run->n_ev);
	align_clocks(run, align);
	size_t k = 0;
	run->origin = INT64_MAX;
	for (int i = 0; i < run->n_ranks; i++)
		for (size_t j = 0; j < run->ranks[i].n_ev; j++) {
			const prof_event *ev = &run->ranks[i].ev[j];
			prof_mev *m = &run->ev[k++];
			m->src = ev;
			m->file = i;
			m->start = aligned(run, i, ev->start);
			m->end = aligned(run, i, ev->start + ev->dur);
			if (m->end < m->start)
				m->end = m->start;
			if (m->start < run->origin)
				run->origin = m->start;
		}
	if (!run->n_ev)
		run->origin = 0;
	for (size_t i = 0; i < run->n_ev; i++) {
		run->ev[i].start -= run->origin;
		run->ev[i].end -= run->origin;
	}
	qsort(run->ev, run->n_ev, sizeof *run->ev, by_file_start);
	return match_messages(run, e);
}

void prof_run_free(prof_run *run)
{
	for (int i = 0; i < run->n_ranks; i++)
		prof_rank_free(&run->ranks[i]);
	free(run->ranks);
	free(run->off);
	free(run->slope);
	free(run->t_ref);
	free(run->ev);
	memset(run, 0, sizeof *run);
}
