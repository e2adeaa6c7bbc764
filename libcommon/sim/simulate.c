/* A training step's time on a described cluster (simulate.h). */
#include "simulate.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../config/layout.h"
#include "../plan/plan.h"
#include "../schedule/schedule.h"

/* ---- costs of kernels and collectives ---------------------------------------------- */

typedef struct {
	const sim_cluster *cl;
	double peak, fp8_peak; /* FLOP/s of the compute type's products, and of FP8's */
	double act;            /* bytes of an activation */
} costs;

static double gemm(const costs *k, double flops, bool fp8)
{
	const sim_efficiency *f = &k->cl->eff;
	if (flops <= 0)
		return 0;
	const double eff = f->gemm_max * flops / (flops + f->gemm_half_flops);
	return flops / ((fp8 ? k->fp8_peak : k->peak) * eff) + 1e-6 * f->launch_us;
}

static double attention(const costs *k, double flops, double T)
{
	const sim_efficiency *f = &k->cl->eff;
	return flops / (k->peak * f->attn_max * T / (T + f->attn_half_seq)) + 1e-6 * f->launch_us;
}

/* memory-bound work of `bytes` in `kernels` launches */
static double streamed(const costs *k, double bytes, int kernels)
{
	const sim_efficiency *f = &k->cl->eff;
	return bytes / (k->cl->hbm_gbps * 1e9 * f->mem_eff) + 1e-6 * f->launch_us * kernels;
}

/* The link between ranks a and b. */
static const sim_link *pair_link(const sim_cluster *cl, int a, int b)
{
	return a / cl->gpus_per_node == b / cl->gpus_per_node ? &cl->intra : &cl->inter;
}

/* The link a group of n ranks, stride apart from rank first, crosses at
 * its slowest. */
static const sim_link *link_of(const sim_cluster *cl, int first, int stride, int n)
{
	const int g = cl->gpus_per_node;
	return first / g == (first + stride * (n - 1)) / g ? &cl->intra : &cl->inter;
}

enum { ALLREDUCE, GATHER, ALLTOALL };
/* nccl-tests' bus bandwidth: the time of a collective of `bytes` per rank */
static double collective(const sim_link *l, int kind, int n, double bytes)
{
	if (n < 2 || bytes <= 0)
		return 0;
	const double share = (double)(n - 1) / n, bw = l->bus_gbps * 1e9,
		     lat = 1e-6 * l->latency_us;
	return kind == ALLREDUCE ? 2 * share * bytes / bw + 2 * (n - 1) * lat
				 : share * bytes / bw + (n - 1) * lat;
}

/* ---- one chunk's passes for one microbatch ------------------------------------------- */

double sim_attention_flops(const pp_config *c, const layout_tp *t)
{
	const pp_model_cfg *m = &c->model;
	const double B = c->microbatch, T = c->seq_len, D = m->head_dim;
	const double window = m->sliding_window > 0 && m->sliding_window < T ? m->sliding_window
									     : T;
	return 4 * B * T * window * t->n_heads * D * (window < T ? 1.0 : 0.5);
}

typedef struct {
	double fwd, bwd, bwd_w;    /* compute, communication inside them included */
	double comp_fwd, comp_bwd; /* their kernels alone */
	double compute, tp, ep;    /* of fwd + bwd: kernels, tp all-reduces, all-to-alls */
	double params;             /* the chunk's parameters on this tp rank */
	int units;                 /* fsdp's units: its layers, the embedding, the head */
	double fsdp;               /* the step's exposed fsdp communication (m microbatches) */
} chunk_cost;

static void layer_cost(const pp_config *c, const costs *k, const layout_tp *t, bool moe,
		       const sim_link *tpl, const sim_link *epl, chunk_cost *o)
{
	const pp_model_cfg *m = &c->model;
	const double B = c->microbatch, T = c->seq_len, n = B * T, C = m->d_model, D = m->head_dim;
	const double Hq = t->n_heads, Hkv = t->n_kv_heads, HD = Hq * D, QKV = HD + 2 * Hkv * D;
	const bool gated = m->mlp != PP_MLP_GELU, fp8 = c->fp8.recipe != PP_FP8_NONE;
	const double F = t->d_ff, UP = gated ? 2 * F : F, A = k->act;
	const double K = moe ? m->top_k : 1, E = moe ? m->n_experts : 0;
	/* products: qkv, o, up, down (the experts': each token's K of them) */
	const double prod[4] = {2 * n * C * QKV, 2 * n * HD * C, 2 * n * K * C * UP,
				2 * n * K * F * C};
	double g_fwd = 0;
	for (int i = 0; i < 4; i++)
		g_fwd += gemm(k, prod[i], fp8);
	if (moe)
		g_fwd += gemm(k, 2 * n * C * E, false); /* the router */
	double a_fwd, a_bwd;
	if (k->cl->kernels.attention_materialized) {
		/* two batched products over every score (masked ones included),
		 * the B Hq T T scores through HBM in the compute type: written,
		 * read twice for the softmax's max and sum, read and the
		 * probabilities written, read by the product with V (6 passes);
		 * backward: four products, dP written, read with P for the row
		 * sums, read again with dS written, P read for dV, dS read for
		 * dQ and dK (9 passes) */
		const double prod = gemm(k, 2 * B * Hq * T * T * D, false), S = B * Hq * T * T;
		a_fwd = 2 * prod + streamed(k, 6 * S * A, 3);
		a_bwd = 4 * prod + streamed(k, 9 * S * A, 3);
	} else {
		a_fwd = attention(k, sim_attention_flops(c, t), T);
		/* the fused backward recomputes the scores: 2.5x the forward */
		a_bwd = 2.5 * (a_fwd - 1e-6 * k->cl->eff.launch_us) + 1e-6 * k->cl->eff.launch_us;
	}
	/* norms, residual adds, RoPE, the activation function; FP8's casts */
	double bytes = n * A * (10 * C + 2 * (Hq + Hkv) * D + 3 * K * F);
	if (fp8) {
		const double W = C * QKV + HD * C + C * UP + F * C, X = n * (2 * C + HD + K * F);
		bytes += X * A + 2 * W * A;
		/* on FP8 tensor cores each product first packs its two operands
		 * into FP8 bytes (read in the compute type, one byte written):
		 * the input and the weight here, the gradient with each of them
		 * in the backward, which the second pass below stands for */
		if (k->cl->fp8_tflops > 0)
			bytes += (A + 1) * (X + W);
	}
	const double e_fwd = streamed(k, bytes, 8);
	const double comp_fwd = g_fwd + a_fwd + e_fwd;
	/* backward: each product's input and weight gradients, attention's,
	 * the memory-bound work twice */
	const double g_bwd = 2 * g_fwd, w_part = g_fwd;
	double comp_bwd = g_bwd + a_bwd + 2 * e_fwd;
	switch (c->recompute) { /* what the backward rebuilds first */
	case PP_RECOMPUTE_FULL:
		comp_bwd += comp_fwd;
		break;
	case PP_RECOMPUTE_MINIMAL:
		comp_bwd += a_fwd + e_fwd;
		break;
	case PP_RECOMPUTE_MINIMAL_FLASH:
		comp_bwd += e_fwd;
		break;
	default:
		break;
	}
	/* tp: the o and down products' outputs summed forward, their inputs'
	 * gradients backward */
	const double tp_pass = 2 * collective(tpl, ALLREDUCE, c->tp, n * C * A);
	/* ep: dispatch and combine, each way */
	const double ep_pass = moe ? 2 * collective(epl, ALLTOALL, c->ep, n * K * C * A) : 0;
	o->fwd += comp_fwd + tp_pass + ep_pass;
	o->bwd += comp_bwd + tp_pass + ep_pass;
	o->bwd_w += w_part;
	o->compute += comp_fwd + comp_bwd;
	o->comp_fwd += comp_fwd;
	o->comp_bwd += comp_bwd;
	o->tp += 2 * tp_pass;
	o->ep += 2 * ep_pass;
	o->params += C * QKV + HD * C + (moe ? E / c->ep : 1) * (C * UP + F * C) + 2 * C;
}

/* virtual stage s (of S), layers [lb, le), on pipeline rank r */
static void chunk_cost_of(const pp_config *c, const costs *k, const layout_tp *t, int s, int S,
			  int lb, int le, chunk_cost *o)
{
	const pp_model_cfg *m = &c->model;
	const sim_cluster *cl = k->cl;
	const int data = pp_config_data_ranks(c);
	const int first = (s % c->pp) * data * c->tp; /* the rank of (its pp rank, data 0, tp 0) */
	const sim_link *tpl = link_of(cl, first, 1, c->tp);
	const sim_link *epl = link_of(cl, first, c->tp, c->ep);
	memset(o, 0, sizeof *o);
	o->units = le - lb + (s == 0) + (s == S - 1);
	for (int l = lb; l < le; l++) {
		const bool moe = m->n_experts > 0 &&
				 (l + 1) % (m->moe_every > 0 ? m->moe_every : 1) == 0;
		layer_cost(c, k, t, moe, tpl, epl, o);
	}
	const double n = (double)c->microbatch * c->seq_len, C = m->d_model, V = t->vocab;
	if (s == 0) { /* the embedding's lookup, and its gradient */
		double f = streamed(k, 2 * n * C * k->act, 1), b = 2 * f;
		if (cl->kernels.embedding_onehot) { /* one-hot rows written, times the table */
			f = streamed(k, n * V * k->act, 1) + gemm(k, 2 * n * V * C, false);
			b = gemm(k, 2 * n * V * C, false);
		}
		o->fwd += f;
		o->bwd += b;
		o->comp_fwd += f;
		o->comp_bwd += b;
		o->compute += f + b;
		o->params += V * C;
	}
	if (s == S - 1) { /* final norm, head and loss: the head's backward runs in the forward */
		const bool fp8 = c->fp8.recipe != PP_FP8_NONE && c->fp8.head;
		const double h = 3 * gemm(k, 2 * n * C * V, fp8) +
				 streamed(k, 3 * n * V * 4 + 4 * n * C * k->act, 4) +
				 2 * collective(tpl, ALLREDUCE, c->tp, 2 * n * 4);
		o->fwd += h;
		o->bwd_w += gemm(k, 2 * n * C * V, fp8);
		o->comp_fwd += h;
		o->compute += h;
		o->params += (m->tied_embeddings && s == 0 ? 0 : V * C) + C;
	}
	/* pp: the activations sent on, the gradients sent back (blocking) */
	const double act = n * C * k->act;
	if (s < S - 1) {
		const int peer = ((s + 1) % c->pp) * data * c->tp;
		const sim_link *l = pair_link(cl, first, peer);
		o->fwd += act / (l->bus_gbps * 1e9) + 1e-6 * l->latency_us;
	}
	if (s > 0) {
		const int peer = ((s - 1) % c->pp) * data * c->tp;
		const sim_link *l = pair_link(cl, first, peer);
		o->bwd += act / (l->bus_gbps * 1e9) + 1e-6 * l->latency_us;
	}
}

static costs costs_of(const pp_config *c, const sim_cluster *cl)
{
	const bool bf16 = c->dtype == PP_TYPE_BF16;
	return (costs){.cl = cl,
		       .peak = (bf16 ? cl->bf16_tflops : cl->fp32_tflops) * 1e12,
		       .fp8_peak = (cl->fp8_tflops > 0 ? cl->fp8_tflops : cl->bf16_tflops) * 1e12,
		       .act = bf16 ? 2 : 4};
}

int sim_pass_compute(const pp_config *c, const sim_cluster *cl, double *fwd, double *bwd, pp_err *e)
{
	layout_tp t;
	int rc = layout_tp_share(&c->model, c->tp, 0, &t, e);
	const int S = c->pp * (c->virtual_stages > 0 ? c->virtual_stages : 1);
	const costs k = costs_of(c, cl);
	for (int s = 0; !rc && s < S; s++) {
		int lb, le;
		chunk_cost x;
		layout_chunk_layers(c, s, &lb, &le);
		chunk_cost_of(c, &k, &t, s, S, lb, le, &x);
		fwd[s] = x.comp_fwd;
		bwd[s] = x.comp_bwd;
	}
	return rc;
}

/* ---- the step ------------------------------------------------------------------------ */

static int check_world(const pp_config *c, const sim_cluster *cl, int nodes, int *out, pp_err *e)
{
	const int world = pp_config_world(c), g = cl->gpus_per_node;
	if (nodes > 0 && world != nodes * g)
		return pp_errorf(
			e, PP_EUSAGE,
			"the layout's world pp %d x dp %d x fsdp %d x tp %d = %d ranks is not "
			"the %d GPUs of %d %s nodes of %d",
			c->pp, c->dp, c->fsdp, c->tp, world, nodes * g, nodes, cl->name, g);
	if (nodes <= 0 && world > g && world % g)
		return pp_errorf(
			e, PP_EUSAGE,
			"the layout's world of %d ranks does not fill whole %s nodes of %d "
			"GPUs",
			world, cl->name, g);
	*out = nodes > 0 ? nodes : (world + g - 1) / g;
	return 0;
}

int sim_step(const pp_config *c, const sim_cluster *cl, int nodes, const double *memory,
	     sim_result *r, pp_err *e)
{
	memset(r, 0, sizeof *r);
	int rc = check_world(c, cl, nodes, &r->nodes, e);
	if (rc)
		return rc;
	r->world = pp_config_world(c);
	const int p = c->pp, v = c->virtual_stages > 0 ? c->virtual_stages : 1, m = c->microbatches;
	const int S = p * v, data = pp_config_data_ranks(c);
	layout_tp t;
	if ((rc = layout_tp_share(&c->model, c->tp, 0, &t, e)))
		return rc;
	const bool bf16 = c->dtype == PP_TYPE_BF16;
	const costs k = costs_of(c, cl);
	chunk_cost *ch = calloc((size_t)S, sizeof *ch);
	sched_action **lists = calloc((size_t)p, sizeof *lists);
	int *counts = calloc((size_t)p, sizeof *counts);
	double **dur = calloc((size_t)p, sizeof *dur);
	if (!ch || !lists || !counts || !dur)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int s = 0; !rc && s < S; s++) {
		int lb, le;
		layout_chunk_layers(c, s, &lb, &le);
		chunk_cost_of(c, &k, &t, s, S, lb, le, &ch[s]);
	}
	/* fsdp: each chunk's parameters gathered for every pass, its gradients
	 * reduce-scattered after every backward, overlapped with the pass (the
	 * first gather exposed) */
	if (!rc && c->fsdp > 1) {
		for (int s = 0; s < S; s++) {
			const int first = (s % p) * data * c->tp;
			const sim_link *l = link_of(cl, first, c->tp, c->fsdp);
			const double gather = collective(l, GATHER, c->fsdp, ch[s].params * k.act);
			const double reduce = collective(l, GATHER, c->fsdp, ch[s].params * 4);
			/* the first unit's gather waits for nothing to hide behind */
			const double lead = gather / (ch[s].units > 0 ? ch[s].units : 1);
			const double f = fmax(ch[s].fwd, gather) + lead,
				     b = fmax(ch[s].bwd, gather + reduce) + lead;
			ch[s].fsdp = (double)m * ((f - ch[s].fwd) + (b - ch[s].bwd));
			ch[s].fwd = f;
			ch[s].bwd = b;
		}
	}
	if (!rc)
		rc = schedule_build_all(c->schedule, p, v, m, lists, counts, e);
	for (int q = 0; !rc && q < p; q++) {
		if (!(dur[q] = calloc((size_t)counts[q] + 1, sizeof **dur))) {
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
			break;
		}
		for (int i = 0; i < counts[q]; i++) {
			const sched_action *a = &lists[q][i];
			const chunk_cost *x = &ch[a->vstage];
			dur[q][i] = a->op == SCHED_FWD     ? x->fwd
				    : a->op == SCHED_BWD   ? x->bwd
				    : a->op == SCHED_BWD_I ? x->bwd - x->bwd_w
				    : a->op == SCHED_BWD_W ? x->bwd_w
							   : 0;
		}
	}
	sched_sim sim = {0};
	if (!rc)
		rc = schedule_simulate_timed(p, v, m, lists, counts, dur, &sim, e);
	if (!rc) {
		/* the rank that finishes last (the busiest among equals) */
		int w = 0;
		for (int q = 1; q < p; q++)
			if (sim.rank[q].finish > sim.rank[w].finish + 1e-12 ||
			    (fabs(sim.rank[q].finish - sim.rank[w].finish) <= 1e-12 &&
			     sim.rank[q].busy > sim.rank[w].busy))
				w = q;
		double params = 0, bwd_last = 0;
		for (int s = w; s < S; s += p) {
			r->b.compute += m * ch[s].compute;
			r->b.tp += m * ch[s].tp;
			r->b.ep += m * ch[s].ep;
			r->b.fsdp += ch[s].fsdp;
			params += ch[s].params;
			bwd_last += ch[s].bwd;
		}
		r->b.bubble = sim.makespan - sim.rank[w].busy;
		r->b.pp = sim.rank[w].busy - r->b.compute - r->b.tp - r->b.ep - r->b.fsdp;
		if (r->b.pp < 0)
			r->b.pp = 0;
		/* dp: the fp32 gradients (of each fsdp share) summed over the
		 * replicas, overlapped with the rank's last backward passes */
		const int reps = c->dp, first = w * data * c->tp;
		const sim_link *l = link_of(cl, first, c->tp * c->fsdp, reps);
		r->dp_total = collective(l, ALLREDUCE, reps, params / c->fsdp * 4);
		r->b.dp = fmax(0, r->dp_total - bwd_last);
		/* AdamW over the rank's share: w, g, m, v read, w, m, v written */
		const double share = c->fsdp > 1 || c->shard_optimizer ? data : 1;
		r->b.optimizer = streamed(&k, params / share * (28 + (bf16 ? 2 : 0)), 2) +
				 (c->shard_optimizer && data > 1 && c->fsdp == 1
					  ? collective(l, GATHER, data, params * 4)
					  : 0);
		r->step = sim.makespan + r->b.dp + r->b.optimizer;
		r->fwd = ch[S - 1].fwd;
		r->bwd = ch[S - 1].bwd;
		const double tokens = (double)c->global_batch * c->seq_len;
		r->tokens_per_s = tokens / r->step;
		r->flops_per_token = plan_flops_per_token(&c->model, c->seq_len);
		const pp_model_cfg *mm = &c->model;
		const double attn = 6.0 * mm->n_layers * mm->n_heads * mm->head_dim * c->seq_len;
		r->mfu = r->flops_per_token * r->tokens_per_s / (r->world * cl->bf16_tflops * 1e12);
		r->mfu_noncausal = (r->flops_per_token + attn) * r->tokens_per_s /
				   (r->world * cl->bf16_tflops * 1e12);
		plan_memory_t pm;
		if (memory)
			r->memory = *memory;
		else if (!(rc = plan_memory(c, &pm, e)))
			r->memory = (double)pm.total;
		r->fits = r->memory <= cl->hbm_gib * 1073741824.0;
	}
	schedule_sim_free(&sim);
	for (int q = 0; dur && q < p; q++)
		free(dur[q]);
	if (lists && counts)
		schedule_free_all(p, lists);
	free(dur);
	free(lists);
	free(counts);
	free(ch);
	return rc;
}

void sim_layout_line(const pp_config *c, char *buf, size_t n)
{
	snprintf(buf, n,
		 "pp=%d dp=%d fsdp=%d tp=%d ep=%d microbatch=%d schedule=%s virtual_stages=%d "
		 "recompute=%s",
		 c->pp, c->dp, c->fsdp, c->tp, c->ep, c->microbatch,
		 schedule_kind_name(c->schedule), c->virtual_stages,
		 pp_recompute_name(c->recompute));
}

static const char *const not_modelled =
	"contention between concurrent collectives, NCCL's algorithms beyond the ring's "
	"formula, stragglers, data loading, checkpoints, evaluation, launch overheads beyond a "
	"fixed cost per kernel, memory fragmentation";

int sim_print(FILE *f, const pp_config *c, const sim_cluster *cl, const sim_result *r, bool json,
	      pp_err *e)
{
	char line[512];
	sim_layout_line(c, line, sizeof line);
	const sim_breakdown *b = &r->b;
	const char *attn = cl->kernels.attention_materialized ? "materialized" : "fused",
		   *emb = cl->kernels.embedding_onehot ? "onehot" : "gather";
	if (json) {
		json_t *o = json_pack(
			"{s:s, s:s, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b, "
			"s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}, s:s, s:s}",
			"cluster", cl->name, "gpu", cl->gpu, "nodes", r->nodes, "world", r->world,
			"layout", line, "step_s", r->step, "tokens_per_s", r->tokens_per_s, "mfu",
			r->mfu, "mfu_noncausal", r->mfu_noncausal, "flops_per_token",
			r->flops_per_token, "memory_gib", r->memory / 1073741824.0,
			"gpu_memory_gib", cl->hbm_gib, "fits", r->fits, "breakdown_s", "compute",
			b->compute, "tp", b->tp, "ep", b->ep, "pp", b->pp, "fsdp", b->fsdp,
			"bubble", b->bubble, "dp", b->dp, "optimizer", b->optimizer, "efficiency",
			cl->eff.source, "not_modelled", not_modelled);
		if (!o || json_object_set_new(
				  o, "kernels",
				  json_pack("{s:s, s:s}", "attention", attn, "embedding", emb))) {
			json_decref(o);
			return pp_errorf(e, PP_ERUNTIME, "simulate: cannot build the JSON report");
		}
		int rc = json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(10));
		json_decref(o);
		fputc('\n', f);
		return rc ? pp_errorf(e, PP_ERUNTIME, "simulate: cannot write the report") : 0;
	}
	fprintf(f, "simulation of %s on %d %s node%s (%d x %s, %s between nodes)\n\n",
		c->model.preset[0] ? c->model.preset : "(custom model)", r->nodes, cl->name,
		r->nodes > 1 ? "s" : "", cl->gpus_per_node, cl->gpu, cl->inter.name);
	fprintf(f, "  %-22s %s\n", "layout", line);
	fprintf(f, "  %-22s %.4f s\n", "step", r->step);
	fprintf(f, "  %-22s %.0f (%.0f per GPU)\n", "tokens/s", r->tokens_per_s,
		r->tokens_per_s / r->world);
	fprintf(f,
		"  %-22s %.1f%% (6N + 6*L*Hq*D*T, causal), %.1f%% counting attention as if "
		"not causal\n",
		"MFU", 100 * r->mfu, 100 * r->mfu_noncausal);
	fprintf(f, "  %-22s %.2f GiB of %.0f: %s\n", "memory (plan)", r->memory / 1073741824.0,
		cl->hbm_gib, r->fits ? "fits" : "does NOT fit");
	fprintf(f, "\nper step, on the pipeline rank that finishes last\n");
	const char *names[] = {"compute",        "tp all-reduce",   "ep all-to-all", "pp send/recv",
			       "fsdp (exposed)", "pipeline bubble", "dp (exposed)",  "optimizer"};
	const double vals[] = {b->compute, b->tp,     b->ep, b->pp,
			       b->fsdp,    b->bubble, b->dp, b->optimizer};
	for (int i = 0; i < 8; i++)
		fprintf(f, "  %-22s %10.4f s %6.1f%%\n", names[i], vals[i],
			r->step > 0 ? 100 * vals[i] / r->step : 0);
	fprintf(f, "  %-22s %10.4f s in all, overlapped with the backward passes\n",
		"dp all-reduce", r->dp_total);
	fprintf(f, "\nefficiencies: %s\n", cl->eff.source);
	if (cl->kernels.attention_materialized || cl->kernels.embedding_onehot)
		fprintf(f, "kernels: attention %s, embedding %s (not pp's)\n", attn, emb);
	fprintf(f, "not modelled: %s\n", not_modelled);
	return 0;
}
