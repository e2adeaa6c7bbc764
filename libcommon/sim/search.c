/* The fastest layouts that fit (search.h). */
#include "search.h"

#include <jansson.h>
#include <string.h>

#include "../base/clock.h"
#include "../config/layout.h"
#include "../plan/plan.h"

/* a layout's memory by the plan; -1 where the rules refuse it */
static double memory_of(const pp_config *c)
{
	plan_memory_t m;
	pp_err ignored;
	if (layout_check(c, &ignored) || plan_memory(c, &m, &ignored))
		return -1;
	return (double)m.total;
}

static void keep(sim_search_result *out, const pp_config *c, const sim_result *r)
{
	int at = out->n;
	while (at > 0 && out->best[at - 1].r.step > r->step)
		at--;
	if (at >= SIM_SEARCH_BEST)
		return;
	const int last = out->n < SIM_SEARCH_BEST ? out->n : SIM_SEARCH_BEST - 1;
	memmove(&out->best[at + 1], &out->best[at], (size_t)(last - at) * sizeof out->best[0]);
	out->best[at] = (sim_candidate){*c, *r};
	if (out->n < SIM_SEARCH_BEST)
		out->n++;
}

/* v with the least recompute that fits (more only costs time), and
 * ZeRO-1 only where needed: counted, and simulated and kept among the best
 * (simulate), or only noted in *any */
static int try_layout(pp_config *v, const sim_cluster *cl, int nodes, bool simulate,
		      sim_search_result *out, bool *any, pp_err *e)
{
	static const int recs[] = {PP_RECOMPUTE_NONE, PP_RECOMPUTE_MINIMAL_FLASH,
				   PP_RECOMPUTE_MINIMAL, PP_RECOMPUTE_FULL};
	const double limit = cl->hbm_gib * 1073741824.0;
	for (int z = 0; z < 2; z++) {
		v->shard_optimizer = z;
		if (z && (v->dp < 2 || v->fsdp > 1))
			break;
		double mem = -1;
		for (size_t ri = 0; ri < sizeof recs / sizeof *recs; ri++) {
			v->recompute = recs[ri];
			mem = memory_of(v);
			if (mem < 0)
				break;
			out->tried++;
			if (mem <= limit)
				break;
		}
		if (mem < 0 || mem > limit)
			continue;
		*any = true;
		out->fitting++;
		if (!simulate)
			return 0;
		sim_result r;
		int rc = sim_step(v, cl, nodes, &mem, &r, e);
		if (!rc)
			keep(out, v, &r);
		return rc;
	}
	return 0;
}

/* every layout on `world` ranks; simulate: each that fits (else only
 * whether one does: *any) */
static int walk(const pp_config *c, const sim_cluster *cl, int nodes, bool simulate,
		sim_search_result *out, bool *any, pp_err *e)
{
	const pp_model_cfg *m = &c->model;
	const int world = nodes * cl->gpus_per_node;
	static const int tps[] = {1, 2, 4, 8}, mbs[] = {1, 2, 4, 8, 16};
	*any = false;
	for (size_t ti = 0; ti < sizeof tps / sizeof *tps; ti++) {
		const int tp = tps[ti];
		if (tp > cl->gpus_per_node || world % tp)
			continue;
		for (int pp = 1; pp <= world / tp && pp <= m->n_layers; pp++) {
			if ((world / tp) % pp)
				continue;
			const int data = world / tp / pp;
			for (int fsdp = 1; fsdp <= data; fsdp++) {
				if (data % fsdp || (fsdp > 1 && m->n_experts > 0))
					continue;
				const int dp = data / fsdp;
				for (int ep = 1; ep <= dp; ep++) {
					if (dp % ep ||
					    (ep > 1 && (m->n_experts == 0 || m->n_experts % ep)))
						continue;
					for (size_t bi = 0; bi < sizeof mbs / sizeof *mbs; bi++) {
						const int mb = mbs[bi];
						if (c->global_batch % (data * mb))
							continue;
						/* the schedules: with pp, 1f1b, zbh1 and
						 * interleaved over 2 and 4 virtual stages */
						const struct {
							sched_kind k;
							int v;
						} sch[] = {{SCHED_1F1B, 1},
							   {SCHED_ZBH1, 1},
							   {SCHED_INTERLEAVED_1F1B, 2},
							   {SCHED_INTERLEAVED_1F1B, 4}};
						const int ns = pp > 1 ? 4 : 1;
						for (int si = 0; si < ns; si++) {
							pp_config v = *c;
							v.pp = pp;
							v.tp = tp;
							v.dp = dp;
							v.fsdp = fsdp;
							v.ep = ep;
							v.microbatch = mb;
							v.microbatches = c->global_batch /
									 (data * mb);
							v.schedule = sch[si].k;
							v.virtual_stages = sch[si].v;
							v.n_stage_layers = 0;
							int rc = try_layout(&v, cl, nodes, simulate,
									    out, any, e);
							if (rc || (*any && !simulate))
								return rc;
						}
					}
				}
			}
		}
	}
	return 0;
}

int sim_search(const pp_config *c, const sim_cluster *cl, int nodes, sim_search_result *out,
	       pp_err *e)
{
	memset(out, 0, sizeof *out);
	const double t0 = clock_seconds();
	bool any;
	int rc = walk(c, cl, nodes, true, out, &any, e);
	/* nothing fits: the smallest number of these nodes where something does */
	for (int n = nodes * 2; !rc && !any && n <= 4096; n *= 2) {
		sim_search_result probe = {0};
		if (!(rc = walk(c, cl, n, false, &probe, &any, e)) && any)
			out->smallest_nodes = n;
	}
	out->seconds = clock_seconds() - t0;
	return rc;
}

int sim_search_print(FILE *f, const pp_config *c, const sim_cluster *cl, int nodes, bool json,
		     pp_err *e)
{
	sim_search_result s;
	int rc = sim_search(c, cl, nodes, &s, e);
	if (rc)
		return rc;
	const char *model = c->model.preset[0] ? c->model.preset : "(custom model)";
	char line[512];
	if (json) {
		json_t *rows = json_array();
		for (int i = 0; i < s.n; i++) {
			const sim_result *r = &s.best[i].r;
			sim_layout_line(&s.best[i].cfg, line, sizeof line);
			json_array_append_new(rows,
					      json_pack("{s:s, s:f, s:f, s:f, s:f}", "layout", line,
							"step_s", r->step, "tokens_per_s",
							r->tokens_per_s, "mfu", r->mfu,
							"memory_gib", r->memory / 1073741824.0));
		}
		json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i, s:o, s:i, s:f}", "model", model,
				      "cluster", cl->name, "nodes", nodes, "tried", s.tried,
				      "fitting", s.fitting, "best", rows, "smallest_nodes",
				      s.smallest_nodes, "seconds", s.seconds);
		rc = o ? json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(10)) : -1;
		json_decref(o);
		fputc('\n', f);
		return rc ? pp_errorf(e, PP_ERUNTIME, "search: cannot write the report") : 0;
	}
	fprintf(f,
		"search for %s, global_batch %d x seq_len %d, on %d %s node%s (%d GPUs of %.0f "
		"GiB): %d layouts, %d fit, %.2f s\n\n",
		model, c->global_batch, c->seq_len, nodes, cl->name, nodes > 1 ? "s" : "",
		nodes * cl->gpus_per_node, cl->hbm_gib, s.tried, s.fitting, s.seconds);
	if (!s.n) {
		if (s.smallest_nodes)
			fprintf(f,
				"nothing fits on %d node%s; the smallest %s cluster that fits "
				"has %d nodes (%d GPUs)\n",
				nodes, nodes > 1 ? "s" : "", cl->name, s.smallest_nodes,
				s.smallest_nodes * cl->gpus_per_node);
		else
			fprintf(f, "nothing fits on %d node%s, nor on up to 4096 %s nodes\n", nodes,
				nodes > 1 ? "s" : "", cl->name);
		return 0;
	}
	fprintf(f, "  %-4s %9s %12s %7s %9s  %s\n", "#", "step (s)", "tokens/s", "MFU", "GiB",
		"layout");
	for (int i = 0; i < s.n; i++) {
		const sim_result *r = &s.best[i].r;
		sim_layout_line(&s.best[i].cfg, line, sizeof line);
		fprintf(f, "  %-4d %9.4f %12.0f %6.1f%% %9.2f  %s\n", i + 1, r->step,
			r->tokens_per_s, 100 * r->mfu, r->memory / 1073741824.0, line);
	}
	sim_layout_line(&s.best[0].cfg, line, sizeof line);
	fprintf(f, "\nto run the best, pp-train with the same config and keys and:\n  %s\n", line);
	return 0;
}
