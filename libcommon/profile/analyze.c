/* Pipeline analysis of a merged run (analyze.h). */
#include "analyze.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS 1e-6 /* ns to ms */

/* Per (step, file) sums, ns. */
typedef struct {
	int64_t step, compute, exposed, coll, opt, io;
	bool has_step;
} cell;

static int64_t overlap(const prof_mev *a, const prof_mev *b)
{
	int64_t lo = a->start > b->start ? a->start : b->start;
	int64_t hi = a->end < b->end ? a->end : b->end;
	return hi > lo ? hi - lo : 0;
}

static bool blocking_collective(prof_op op)
{
	return op == PROF_GRAD_SYNC || op == PROF_GRAD_NORM || op == PROF_LOSS_REDUCE ||
	       op == PROF_PARAM_GATHER;
}

/* The time of a send or receive when both ends were in the call; all of it
 * when the other end's file is not here. */
static int64_t exposed(const prof_run *run, const prof_mev *m)
{
	return m->partner >= 0 ? overlap(m, &run->ev[m->partner]) : m->end - m->start;
}

static int add_top(prof_analysis *a, const prof_mev *m, int *cap, pp_err *e)
{
	const char *name = m->src->name;
	int i = 0;
	while (i < a->n_top && strcmp(a->top[i].name, name))
		i++;
	if (i == a->n_top) {
		if (a->n_top == *cap) {
			int n = *cap ? 2 * *cap : 32;
			prof_top_op *t = realloc(a->top, (size_t)n * sizeof *t);
			if (!t)
				return pp_errorf(e, PP_ERUNTIME, "out of memory");
			a->top = t;
			*cap = n;
		}
		memset(&a->top[i], 0, sizeof a->top[i]);
		snprintf(a->top[i].name, sizeof a->top[i].name, "%s", name);
		a->n_top++;
	}
	double ms = (double)(m->end - m->start) * MS;
	a->top[i].count++;
	a->top[i].total += ms;
	if (ms > a->top[i].max)
		a->top[i].max = ms;
	return 0;
}

static int by_total(const void *x, const void *y)
{
	const prof_top_op *a = x, *b = y;
	return (a->total < b->total) - (a->total > b->total);
}

/* Mean pass costs (ms) and the theory's bubble at them. */
static void theory(const prof_run *run, prof_analysis *a)
{
	double sum[4] = {0};
	long n[4] = {0};
	for (size_t i = 0; i < run->n_ev; i++) {
		const prof_mev *m = &run->ev[i];
		int op = m->src->op;
		if (prof_is_compute(op) && m->src->step >= run->step_begin &&
		    m->src->step < run->step_end) {
			sum[op] += (double)(m->end - m->start) * MS;
			n[op]++;
		}
	}
	double mean[4];
	for (int k = 0; k < 4; k++)
		mean[k] = n[k] ? sum[k] / (double)n[k] : 0;
	sched_costs *c = &a->costs;
	c->fwd = mean[PROF_FWD];
	c->bwd_w = mean[PROF_BWD_W];
	c->bwd = n[PROF_BWD] ? mean[PROF_BWD] : mean[PROF_BWD_I] + mean[PROF_BWD_W];
	/* zbh1's premise, w <= f and w <= b - w, to within the noise of
	 * measured times (5%): a weight gradient as long as a forward pass
	 * fills the same gaps */
	double fit = c->fwd < c->bwd - c->bwd_w ? c->fwd : c->bwd - c->bwd_w;
	if (c->bwd_w > fit && c->bwd_w <= 1.05 * fit) {
		c->bwd -= c->bwd_w - fit;
		c->bwd_w = fit;
	}
	a->theory = schedule_bubble_theory(a->kind, a->p, a->v, a->m, &a->costs);
	a->costs_used = a->theory >= 0 && a->costs.fwd > 0;
	if (!a->costs_used) /* no passes, or zbh1's premise (w <= f, w <= b - w) fails */
		a->theory = schedule_bubble_theory(a->kind, a->p, a->v, a->m, NULL);
}

/* The step's actions of the replica's files as the schedule's lists, their
 * measured durations, and the simulator's times for them. */
static void simulate(const prof_run *run, prof_analysis *a, int **lists_ev, const int *n_list)
{
	const int p = a->p;
	sched_action **acts = calloc((size_t)p, sizeof *acts);
	double **dur = calloc((size_t)p, sizeof *dur);
	bool ok = acts && dur;
	for (int r = 0; ok && r < p; r++) {
		acts[r] = malloc(((size_t)n_list[r] + 1) * sizeof **acts);
		dur[r] = malloc(((size_t)n_list[r] + 1) * sizeof **dur);
		ok = acts[r] && dur[r];
		for (int i = 0; ok && i < n_list[r]; i++) {
			const prof_mev *m = &run->ev[lists_ev[r][i]];
			acts[r][i] = (sched_action){(sched_op)m->src->op, m->src->mb,
						    m->src->vstage,
						    prof_is_p2p(m->src->op) ? m->src->peer : -1};
			dur[r][i] = prof_is_compute(m->src->op) ? (double)(m->end - m->start) * MS
								: 0;
		}
	}
	sched_sim s;
	pp_err err = {0};
	if (ok && !schedule_simulate_timed(p, a->v, a->m, acts, n_list, dur, &s, &err)) {
		a->cp_ideal = s.critical_path;
		a->cp_blocking = s.makespan;
		schedule_sim_free(&s);
	} else {
		snprintf(a->cp_note, sizeof a->cp_note,
			 "the step's recorded actions do not form the "
			 "schedule's lists: %.180s",
			 ok ? err.msg : "out of memory");
	}
	for (int r = 0; acts && dur && r < p; r++) {
		free(acts[r]);
		free(dur[r]);
	}
	free(acts);
	free(dur);
}

/* Walks the last step's critical path back from its last event. */
static int critical_path(const prof_run *run, prof_analysis *a, pp_err *e)
{
	const int p = a->p;
	a->cp_step = run->step_end - 1;
	a->cp_ideal = a->cp_blocking = -1;
	int *file = calloc((size_t)p, sizeof *file), *n_list = calloc((size_t)p, sizeof *n_list);
	int **list = calloc((size_t)p, sizeof *list);
	long *pos = malloc((run->n_ev + 1) * sizeof *pos);
	int rc = 0;
	if (!file || !n_list || !list || !pos) {
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < run->n_ev; i++)
		pos[i] = -1;
	for (int r = 0; r < p; r++) {
		file[r] = prof_run_file_of(run, 0, r);
		if (file[r] < 0) {
			snprintf(
				a->cp_note, sizeof a->cp_note,
				"no critical path: the profile of pp rank %d (dp %d, tp %d) is missing",
				r, run->ranks[0].dp_rank, run->ranks[0].tp_rank);
			goto done;
		}
		list[r] = malloc((run->ranks[file[r]].n_ev + 1) * sizeof **list);
		if (!list[r]) {
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
			goto done;
		}
	}
	int64_t t0 = INT64_MAX, t1 = INT64_MIN;
	long last = -1;
	for (size_t i = 0; i < run->n_ev; i++) {
		const prof_mev *m = &run->ev[i];
		int r = run->ranks[m->file].pp_rank;
		if (m->src->step != a->cp_step || m->src->op > PROF_RECV_GRAD || file[r] != m->file)
			continue;
		pos[i] = n_list[r];
		list[r][n_list[r]++] = (int)i;
		if (prof_is_compute(m->src->op)) {
			t0 = m->start < t0 ? m->start : t0;
			t1 = m->end > t1 ? m->end : t1;
		}
		if (last < 0 || m->end > run->ev[last].end)
			last = (long)i;
	}
	if (last < 0 || t1 < t0) {
		snprintf(a->cp_note, sizeof a->cp_note, "no critical path: step %ld has no passes",
			 a->cp_step);
		goto done;
	}
	a->cp_measured = (double)(t1 - t0) * MS;
	simulate(run, a, list, n_list);
	a->path = malloc((run->n_ev + 1) * sizeof *a->path);
	if (!a->path) {
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		goto done;
	}
	for (long cur = last; cur >= 0 && a->n_path < (int)run->n_ev;) {
		const prof_mev *m = &run->ev[cur];
		a->path[a->n_path++] = (prof_path_node){m->file,
							m->src->op,
							m->src->mb,
							m->src->vstage,
							(double)m->start * MS,
							(double)(m->end - m->start) * MS};
		if (prof_is_compute(m->src->op))
			a->cp_compute += (double)(m->end - m->start) * MS;
		long q = m->partner;
		if (prof_is_p2p(m->src->op) && q >= 0 && pos[q] >= 0 &&
		    run->ev[q].start > m->start) {
			cur = q; /* it waited for its peer: the path goes on there */
		} else {
			int r = run->ranks[m->file].pp_rank;
			cur = pos[cur] > 0 ? list[r][pos[cur] - 1] : -1;
		}
	}
	a->cp_comm = a->cp_measured - a->cp_compute;
	for (int i = 0, j = a->n_path - 1; i < j; i++, j--) {
		prof_path_node t = a->path[i];
		a->path[i] = a->path[j];
		a->path[j] = t;
	}
done:
	for (int r = 0; list && r < p; r++)
		free(list[r]);
	free(list);
	free(file);
	free(n_list);
	free(pos);
	return rc;
}

int prof_analyze(const prof_run *run, prof_analysis *a, pp_err *e)
{
	memset(a, 0, sizeof *a);
	const prof_rank *r0 = &run->ranks[0];
	if (schedule_kind_parse(r0->schedule, &a->kind, e))
		return e ? e->code : PP_EUSAGE;
	a->p = r0->pp;
	a->v = r0->v;
	a->m = r0->m;
	a->n_steps = (int)(run->step_end - run->step_begin);
	const int F = run->n_ranks, S = a->n_steps;
	cell *c = calloc((size_t)F * S, sizeof *c);
	int64_t *t0 = malloc((size_t)S * sizeof *t0), *t1 = malloc((size_t)S * sizeof *t1);
	a->stage = calloc((size_t)a->p, sizeof *a->stage);
	int cap_top = 0, rc = 0;
	if (!c || !t0 || !t1 || !a->stage) {
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		goto done;
	}
	for (int s = 0; s < S; s++)
		t0[s] = INT64_MAX, t1[s] = INT64_MIN;
	for (size_t i = 0; i < run->n_ev; i++) {
		const prof_mev *m = &run->ev[i];
		int s = (int)(m->src->step - run->step_begin);
		if (prof_is_compute(m->src->op) && s >= 0 && s < S) {
			t0[s] = m->start < t0[s] ? m->start : t0[s];
			t1[s] = m->end > t1[s] ? m->end : t1[s];
		}
	}
	for (size_t i = 0; i < run->n_ev && !rc; i++) {
		const prof_mev *m = &run->ev[i];
		const prof_event *ev = m->src;
		if (ev->step < run->step_begin || ev->step >= run->step_end)
			continue;
		int s = (int)(ev->step - run->step_begin);
		cell *x = &c[(size_t)s * F + m->file];
		/* the pipeline's span [T0, T1] is compute, exposed messages and
		 * bubble: the rest of a step's parts is what lies outside it (a
		 * rank that waits in a collective for the others to finish their
		 * passes is in the bubble) */
		prof_mev span = {.start = t0[s], .end = t1[s]};
		int64_t d = m->end - m->start,
			outside = d - (t1[s] > t0[s] ? overlap(m, &span) : 0);
		if (prof_is_compute(ev->op)) {
			x->compute += d;
		} else if (prof_is_p2p(ev->op)) {
			x->exposed += exposed(run, m);
		} else if (ev->op == PROF_STEP) {
			x->step += d;
			x->has_step = true;
		} else if (blocking_collective(ev->op)) {
			x->coll += outside;
		} else if (ev->op == PROF_OPTIMIZER) {
			x->opt += outside;
		} else if (ev->op == PROF_DATA) {
			x->io += outside;
		}
		if (ev->op != PROF_STEP)
			rc = add_top(a, m, &cap_top, e);
	}
	if (rc)
		goto done;

	double all_steps = 0;
	for (int p = 0; p < a->p; p++)
		a->stage[p].pp_rank = p;
	for (int f = 0; f < F; f++)
		a->stage[run->ranks[f].pp_rank].n_files++;
	int counted = 0;
	for (int s = 0; s < S; s++) {
		int64_t pipe = t1[s] > t0[s] ? t1[s] - t0[s] : 0;
		a->pipe += (double)pipe * MS / S;
		for (int f = 0; f < F; f++) {
			const cell *x = &c[(size_t)s * F + f];
			prof_stage *st = &a->stage[run->ranks[f].pp_rank];
			int64_t bubble = pipe - x->compute - x->exposed;
			bubble = bubble > 0 ? bubble : 0;
			int64_t step = x->has_step ? x->step : pipe + x->coll + x->opt + x->io;
			double k = 1.0 / ((double)S * st->n_files);
			st->step += (double)step * MS * k;
			st->compute += (double)x->compute * MS * k;
			st->comm += (double)(x->exposed + x->coll) * MS * k;
			st->bubble_ms += (double)bubble * MS * k;
			st->bubble += pipe ? (double)bubble / (double)pipe * k : 0;
			prof_breakdown *b = &a->mean;
			int64_t other = step - x->compute - x->exposed - x->coll - bubble - x->opt -
					x->io;
			b->step += (double)step * MS;
			b->compute += (double)x->compute * MS;
			b->comm += (double)(x->exposed + x->coll) * MS;
			b->bubble += (double)bubble * MS;
			b->optimizer += (double)x->opt * MS;
			b->io += (double)x->io * MS;
			b->other += (double)(other > 0 ? other : 0) * MS;
			all_steps += (double)step * MS;
			counted++;
		}
	}
	if (counted) {
		prof_breakdown *b = &a->mean;
		double k = 1.0 / counted;
		b->step *= k, b->compute *= k, b->comm *= k, b->bubble *= k;
		b->optimizer *= k, b->io *= k, b->other *= k;
	}
	int stages = 0;
	for (int p = 0; p < a->p; p++)
		if (a->stage[p].n_files) {
			a->bubble += a->stage[p].bubble;
			stages++;
		}
	a->bubble = stages ? a->bubble / stages : 0;
	for (int i = 0; i < a->n_top; i++) {
		a->top[i].mean = a->top[i].total / (double)a->top[i].count;
		a->top[i].share = all_steps > 0 ? a->top[i].total / all_steps : 0;
	}
	qsort(a->top, (size_t)a->n_top, sizeof *a->top, by_total);
	for (int f = 0; f < F; f++) {
		int64_t o = (int64_t)fabs(run->off[f]);
		a->max_offset_ns = o > a->max_offset_ns ? o : a->max_offset_ns;
	}
	theory(run, a);
	rc = critical_path(run, a, e);
done:
	free(c);
	free(t0);
	free(t1);
	return rc;
}

void prof_analysis_free(prof_analysis *a)
{
	free(a->stage);
	free(a->path);
	free(a->top);
	memset(a, 0, sizeof *a);
}

/* ---- reports --------------------------------------------------------------- */

static const char letter[] = {'F', 'B', 'B', 'W'};

/* "pp2:B5" (with ".s6", its stage, when interleaved) */
static void node_name(const prof_run *run, const prof_analysis *a, const prof_path_node *n,
		      char *buf, size_t size)
{
	int r = run->ranks[n->file].pp_rank;
	if (a->v > 1)
		snprintf(buf, size, "pp%d:%c%d.s%d", r, letter[n->op], n->mb, n->vstage);
	else
		snprintf(buf, size, "pp%d:%c%d", r, letter[n->op], n->mb);
}

static json_t *to_json(const prof_run *run, const prof_analysis *a)
{
	const prof_rank *r0 = &run->ranks[0];
	json_t *stages = json_array(), *top = json_array(), *path = json_array();
	for (int p = 0; p < a->p; p++) {
		const prof_stage *s = &a->stage[p];
		if (s->n_files)
			json_array_append_new(
				stages,
				json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "pp_rank", p,
					  "ranks", s->n_files, "step_ms", s->step, "compute_ms",
					  s->compute, "comm_ms", s->comm, "bubble_ms", s->bubble_ms,
					  "bubble", s->bubble, "theory", a->theory));
	}
	for (int i = 0; i < a->n_top; i++) {
		const prof_top_op *t = &a->top[i];
		json_array_append_new(top, json_pack("{s:s, s:I, s:f, s:f, s:f, s:f}", "name",
						     t->name, "count", (json_int_t)t->count,
						     "total_ms", t->total, "mean_ms", t->mean,
						     "max_ms", t->max, "share", t->share));
	}
	for (int i = 0; i < a->n_path; i++) {
		const prof_path_node *n = &a->path[i];
		const prof_rank *r = &run->ranks[n->file];
		json_array_append_new(path, json_pack("{s:i, s:i, s:s, s:i, s:i, s:f, s:f}", "rank",
						      r->rank, "pp_rank", r->pp_rank, "op",
						      prof_op_name((prof_op)n->op), "microbatch",
						      n->mb, "vstage", n->vstage, "start_ms",
						      n->start, "ms", n->dur));
	}
	const prof_breakdown *b = &a->mean;
	return json_pack(
		"{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:[I, I], s:i, s:b, s:b, s:I, s:o, "
		"s:{s:f, s:f, s:s, s:{s:f, s:f, s:f}, s:b}, s:f, "
		"s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}, "
		"s:{s:I, s:f, s:f, s:f, s:f, s:f, s:s, s:o}, s:o}",
		"run_id", r0->run_id, "preset", r0->preset, "schedule", r0->schedule, "pp", a->p,
		"dp", r0->dp, "tp", r0->tp, "virtual_stages", a->v, "microbatches", a->m, "steps",
		(json_int_t)run->step_begin, (json_int_t)run->step_end, "ranks", run->n_ranks,
		"clocks_aligned", run->aligned, "device_clock", r0->device_clock,
		"max_clock_offset_ns", (json_int_t)a->max_offset_ns, "stages", stages, "bubble",
		"measured", a->bubble, "theory", a->theory, "formula",
		schedule_bubble_formula(a->kind), "costs_ms", "forward", a->costs.fwd, "backward",
		a->costs.bwd, "backward_weight", a->costs.bwd_w, "theory_at_measured_costs",
		a->costs_used, "pipeline_ms", a->pipe, "step_breakdown_ms", "step", b->step,
		"compute", b->compute, "exposed_comm", b->comm, "bubble", b->bubble, "optimizer",
		b->optimizer, "io", b->io, "other", b->other, "critical_path", "step",
		(json_int_t)a->cp_step, "measured_ms", a->cp_measured, "ideal_ms", a->cp_ideal,
		"blocking_ms", a->cp_blocking, "compute_ms", a->cp_compute, "comm_ms", a->cp_comm,
		"note", a->cp_note, "path", path, "top_ops", top);
}

static void print_text(FILE *f, const prof_run *run, const prof_analysis *a)
{
	const prof_rank *r0 = &run->ranks[0];
	const prof_breakdown *b = &a->mean;
	fprintf(f, "run %s (%s): %d rank%s, pp=%d dp=%d tp=%d, %s with v=%d m=%d\n", r0->run_id,
		r0->preset[0] ? r0->preset : "custom model", run->n_ranks,
		run->n_ranks > 1 ? "s" : "", a->p, r0->dp, r0->tp, r0->schedule, a->v, a->m);
	fprintf(f,
		"steps %ld-%ld (%d), passes timed on the %s, clocks %s (largest correction "
		"%.6f s), %zu of %zu sends and receives matched\n\n",
		run->step_begin, run->step_end - 1, a->n_steps,
		r0->device_clock ? "device" : "host",
		run->aligned ? "aligned by barriers" : "not aligned",
		(double)a->max_offset_ns * 1e-9, run->n_matched, run->n_p2p);

	fprintf(f, "per stage, ms per step and rank\n");
	fprintf(f, "  %-6s %5s %10s %10s %10s %10s %8s %8s\n", "stage", "ranks", "step", "compute",
		"comm", "bubble", "bubble", "theory");
	for (int p = 0; p < a->p; p++) {
		const prof_stage *s = &a->stage[p];
		if (s->n_files)
			fprintf(f, "  pp%-4d %5d %10.3f %10.3f %10.3f %10.3f %7.1f%% %7.1f%%\n", p,
				s->n_files, s->step, s->compute, s->comm, s->bubble_ms,
				100 * s->bubble, 100 * a->theory);
	}
	fprintf(f, "\npipeline bubble: measured %.1f%%, theory %.1f%% = %s", 100 * a->bubble,
		100 * a->theory, schedule_bubble_formula(a->kind));
	if (a->costs_used && schedule_split_backward(a->kind))
		fprintf(f,
			"\n  at the measured costs: forward %.3f ms, backward %.3f ms of which weight "
			"gradient %.3f ms\n",
			a->costs.fwd, a->costs.bwd, a->costs.bwd_w);
	else if (a->costs_used)
		fprintf(f, "\n  at the measured costs: forward %.3f ms, backward %.3f ms\n",
			a->costs.fwd, a->costs.bwd);
	else
		fprintf(f,
			"\n  at the reference costs (backward = 2 x forward): the measured ones do "
			"not meet the schedule's premise\n");

	fprintf(f, "\nstep time, ms per step, mean over ranks\n");
	const struct {
		const char *name;
		double ms;
	} rows[] = {{"compute", b->compute}, {"exposed communication", b->comm},
		    {"bubble", b->bubble},   {"optimizer", b->optimizer},
		    {"I/O (data)", b->io},   {"other", b->other}};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		fprintf(f, "  %-24s %10.3f %6.1f%%\n", rows[i].name, rows[i].ms,
			b->step > 0 ? 100 * rows[i].ms / b->step : 0.0);
	fprintf(f, "  %-24s %10.3f\n", "step", b->step);

	fprintf(f, "\ncritical path of step %ld (pp ranks of dp %d, tp %d)\n", a->cp_step,
		r0->dp_rank, r0->tp_rank);
	if (a->n_path) {
		fprintf(f,
			"  pipeline %.3f ms: %.3f ms in the passes on the path, %.3f ms between "
			"them (messages, waits)\n",
			a->cp_measured, a->cp_compute, a->cp_comm);
		if (a->cp_ideal >= 0)
			fprintf(f,
				"  the same passes with free messages: %.3f ms (blocking %.3f ms), "
				"so messages and overheads add %.3f ms\n",
				a->cp_ideal, a->cp_blocking, a->cp_measured - a->cp_ideal);
		fprintf(f, "  path:");
		int shown = 0, n_compute = 0;
		for (int i = 0; i < a->n_path; i++)
			n_compute += prof_is_compute(a->path[i].op);
		for (int i = 0, k = 0; i < a->n_path; i++) {
			if (!prof_is_compute(a->path[i].op))
				continue;
			if (n_compute > 24 && k == 12)
				fprintf(f, " ...");
			if (n_compute <= 24 || k < 12 || k >= n_compute - 12) {
				char name[48];
				node_name(run, a, &a->path[i], name, sizeof name);
				fprintf(f, " %s", name);
				shown++;
			}
			k++;
		}
		fprintf(f, "\n");
	}
	if (a->cp_note[0])
		fprintf(f, "  note: %s\n", a->cp_note);

	fprintf(f, "\ntop operations, all ranks\n");
	fprintf(f, "  %-18s %12s %8s %10s %10s %7s\n", "name", "total ms", "count", "mean ms",
		"max ms", "share");
	for (int i = 0; i < a->n_top && i < 12; i++) {
		const prof_top_op *t = &a->top[i];
		fprintf(f, "  %-18s %12.3f %8ld %10.3f %10.3f %6.1f%%\n", t->name, t->total,
			t->count, t->mean, t->max, 100 * t->share);
	}
}

int prof_analysis_print(FILE *f, const prof_run *run, const prof_analysis *a, bool json, pp_err *e)
{
	if (json) {
		json_t *o = to_json(run, a);
		int rc = !o || json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(10));
		json_decref(o);
		if (rc || fputc('\n', f) == EOF)
			return pp_errorf(e, PP_ERUNTIME, "cannot write the JSON report");
	} else {
		print_text(f, run, a);
	}
	return ferror(f) ? pp_errorf(e, PP_ERUNTIME, "cannot write the report") : 0;
}
