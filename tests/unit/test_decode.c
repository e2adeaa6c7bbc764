/* The cached forward of pp-decode against the training forward: for a tiny
 * model of each dense family, the logits of every position computed with a
 * KV cache (a token at a time, or a prefill then chunks and single tokens)
 * equal those of one forward over the whole sequence, to fp32 round-off.
 * The same through a table that records the one-token step as a graph and
 * replays it, under the CUDA backend's rules for a recording. Also: the
 * cache refuses positions past its end and tokens outside the vocabulary,
 * and the sampler's greedy, top-k and top-p cuts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/quant.h"
#include "../../libcommon/base/rng.h"
#include "../../libcommon/decode/decode.h"
#include "../tools/harness.h"

#define B   2
#define T   12 /* > mistral-tiny's window of 4 */
#define TOL 1e-5

/* norms and biases start constant: noise on every tensor makes each matter */
static void perturb(pp_stage *s)
{
	pp_real *w = malloc(s->n_elems * sizeof *w);
	s->ops->to_host(w, s->w, s->n_elems * sizeof *w);
	for (size_t j = 0; j < s->n_elems; j++)
		w[j] += (pp_real)(0.05 * rng_normal(rng_key(5, "test_decode"), j));
	s->ops->to_device(s->w, w, s->n_elems * sizeof *w);
	stage_weights_changed(s);
	free(w);
}

static double rel(const pp_real *a, const pp_real *b, size_t n)
{
	double d = 0, r = 0;
	for (size_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)b[i] * b[i];
	}
	return sqrt(d / (r > 0 ? r : 1));
}

/* feeds the sequence in chunks of sizes[] (then 1 each) and compares the
 * logits of each chunk's last position with full (B,T,V) */
static double cached_vs_full(pp_stage *s, const int *tok, const pp_real *full, const int *sizes,
			     int n_sizes, int *positions)
{
	const int V = s->cfg->vocab_size;
	pp_kv_cache c;
	pp_err e = {0};
	int n_max = 1;
	for (int i = 0; i < n_sizes; i++)
		n_max = sizes[i] > n_max ? sizes[i] : n_max;
	if (kv_cache_create(&c, s, B, T, B * n_max, true, &e))
		return INFINITY;
	int *chunk = malloc(sizeof(int) * B * T);
	pp_real *got = malloc(sizeof(pp_real) * B * V), *want = malloc(sizeof(pp_real) * B * V);
	double worst = 0;
	*positions = 0;
	for (int k = 0, pos = 0; pos < T; k++) {
		int n = k < n_sizes ? sizes[k] : 1;
		for (int b = 0; b < B; b++)
			memcpy(chunk + b * n, tok + b * T + pos, sizeof(int) * n);
		if (kv_cache_tokens(s, &c, 0, B, chunk, n, &e) || stage_forward_cached(s, &c, &e)) {
			worst = INFINITY;
			break;
		}
		pos += n;
		s->ops->act_to_host(got, c.logits, (size_t)B * V);
		for (int b = 0; b < B; b++)
			memcpy(want + (size_t)b * V, full + ((size_t)b * T + pos - 1) * V,
			       sizeof(pp_real) * V);
		double d = rel(got, want, (size_t)B * V);
		worst = d > worst ? d : worst;
		(*positions)++;
	}
	free(chunk);
	free(got);
	free(want);
	kv_cache_free(&c);
	return worst;
}

/* ---- a table that records graphs: the CPU backend under the CUDA
 * backend's rules for a recording. A recorded op must have run eagerly
 * before with the same arguments (on a GPU its matrix-product plan, its
 * kernels and its scratch must exist before the capture: building them
 * inside one is forbidden or unsafe), nothing copies to or from the host
 * while a graph records, and attention_cached's scratch (its rows) does not
 * grow while a graph lives. A replay reruns the recorded calls, which read
 * the position and the tokens from memory as the kernels do. */

enum {
	G_MATMUL,
	G_MATMUL_GELU,
	G_EMBED,
	G_RMS,
	G_LN,
	G_RMS_RES,
	G_LN_RES,
	G_ROPE,
	G_KV_APPEND,
	G_ATTENTION,
	G_GLU,
	G_GELU,
	G_ADD
};

/* one op's arguments; all members 8 bytes wide, so no padding for memcmp */
typedef struct {
	long op;
	void *p[8];
	long i[10];
	double f[2];
} g_call;

typedef struct {
	g_call *calls;
	size_t n;
} g_graph;

static struct {
	g_call *seen; /* every distinct eager call */
	size_t n_seen;
	bool recording;
	g_graph rec;
	int alive, recorded, replays;
	int unseen, host_copies, scratch_grew; /* broken rules */
	long rows; /* the most rows attention_cached has run eagerly with */
} gm;

static void g_push(g_graph *g, const g_call *c)
{
	g->calls = realloc(g->calls, (g->n + 1) * sizeof *c);
	g->calls[g->n++] = *c;
}

static bool g_seen(const g_call *c)
{
	for (size_t k = 0; k < gm.n_seen; k++)
		if (!memcmp(&gm.seen[k], c, sizeof *c))
			return true;
	return false;
}

static void g_run(const g_call *c)
{
	const pp_ops *o = &pp_ops_cpu;
	void *const *p = c->p;
	const long *i = c->i;
	const double *f = c->f;
	switch (c->op) {
	case G_MATMUL:
		o->matmul_fwd(p[0], p[1], p[2], p[3], i[0], i[1], i[2]);
		break;
	case G_MATMUL_GELU:
		o->matmul_gelu_fwd(p[0], p[1], p[2], p[3], p[4], i[0], i[1], i[2]);
		break;
	case G_EMBED:
		o->embed_fwd(p[0], p[1], p[2], p[3], f[0], i[0], i[1], i[2], p[4]);
		break;
	case G_RMS:
		o->rmsnorm_fwd(p[0], p[1], p[2], p[3], f[0], f[1], i[0], i[1]);
		break;
	case G_LN:
		o->layernorm_fwd(p[0], p[1], p[2], p[3], p[4], p[5], f[0], i[0], i[1]);
		break;
	case G_RMS_RES:
		o->rmsnorm_residual_fwd(p[0], p[1], p[2], p[3], p[4], p[5], f[0], f[1], i[0], i[1]);
		break;
	case G_LN_RES:
		o->layernorm_residual_fwd(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], f[0],
					  i[0], i[1]);
		break;
	case G_ROPE:
		o->rope_fwd(p[0], i[0], i[1], i[2], i[3], i[4], f[0], p[1]);
		break;
	case G_KV_APPEND:
		o->kv_append(p[0], p[1], p[2], i[0], i[1], i[2], i[3], i[4], i[5], p[3]);
		break;
	case G_ATTENTION: {
		/* the bias by value, as a backend's recording keeps its arguments */
		const pp_attn_bias b = {.w = p[5], .bucket = p[6], .nb = (int)i[7]};
		o->attention_cached(p[0], p[1], p[2], p[3], i[0], i[1], i[2], i[3], i[4], i[5],
				    p[4], i[6], p[5] ? &b : NULL);
		break;
	}
	case G_GLU:
		o->glu_fwd(p[0], p[1], i[0], i[1], i[2]);
		break;
	case G_GELU:
		o->gelu_fwd(p[0], p[1], i[0]);
		break;
	case G_ADD:
		o->add(p[0], p[1], p[2], i[0]);
		break;
	}
}

/* runs c now, or records it */
static void g_issue(const g_call *c)
{
	if (gm.recording) {
		gm.unseen += !g_seen(c);
		g_push(&gm.rec, c);
		return;
	}
	if (!g_seen(c)) {
		g_graph all = {gm.seen, gm.n_seen};
		g_push(&all, c);
		gm.seen = all.calls;
		gm.n_seen = all.n;
	}
	g_run(c);
}

#define P(x)         ((void *)(x))
#define G_ISSUE(...) g_issue(&(g_call){__VA_ARGS__})

static void g_matmul_fwd(pp_act *out, const pp_act *inp, const pp_act *w, const pp_act *bias, int N,
			 int C, int OC)
{
	G_ISSUE(.op = G_MATMUL, .p = {out, P(inp), P(w), P(bias)}, .i = {N, C, OC});
}
static void g_matmul_gelu_fwd(pp_act *out, pp_act *pre, const pp_act *inp, const pp_act *w,
			      const pp_act *bias, int N, int C, int OC)
{
	G_ISSUE(.op = G_MATMUL_GELU, .p = {out, pre, P(inp), P(w), P(bias)}, .i = {N, C, OC});
}
static void g_embed_fwd(pp_act *out, const int *tok, const pp_act *wte, const pp_act *wpe,
			pp_real scale, int B_, int T_, int C, const int *pos0)
{
	G_ISSUE(.op = G_EMBED, .p = {out, P(tok), P(wte), P(wpe), P(pos0)}, .i = {B_, T_, C},
		.f = {scale});
}
static void g_rmsnorm_fwd(pp_act *out, pp_real *rstd, const pp_act *x, const pp_act *w, pp_real eps,
			  pp_real offset, int N, int C)
{
	G_ISSUE(.op = G_RMS, .p = {out, rstd, P(x), P(w)}, .i = {N, C}, .f = {eps, offset});
}
static void g_layernorm_fwd(pp_act *out, pp_real *mean, pp_real *rstd, const pp_act *x,
			    const pp_act *w, const pp_act *b, pp_real eps, int N, int C)
{
	G_ISSUE(.op = G_LN, .p = {out, mean, rstd, P(x), P(w), P(b)}, .i = {N, C}, .f = {eps});
}
static void g_rmsnorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *rstd, const pp_act *x,
				   const pp_act *y, const pp_act *w, pp_real eps, pp_real offset,
				   int N, int C)
{
	G_ISSUE(.op = G_RMS_RES, .p = {res_out, out, rstd, P(x), P(y), P(w)}, .i = {N, C},
		.f = {eps, offset});
}
static void g_layernorm_residual_fwd(pp_act *res_out, pp_act *out, pp_real *mean, pp_real *rstd,
				     const pp_act *x, const pp_act *y, const pp_act *w,
				     const pp_act *b, pp_real eps, int N, int C)
{
	G_ISSUE(.op = G_LN_RES, .p = {res_out, out, mean, rstd, P(x), P(y), P(w), P(b)},
		.i = {N, C}, .f = {eps});
}
static void g_rope_fwd(pp_act *qkv, int B_, int T_, int Hq, int Hkv, int D, pp_real theta,
		       const int *pos0)
{
	G_ISSUE(.op = G_ROPE, .p = {qkv, P(pos0)}, .i = {B_, T_, Hq, Hkv, D}, .f = {theta});
}
static void g_kv_append(pp_act *kc, pp_act *vc, const pp_act *qkv, int B_, int n, int Hq, int Hkv,
			int D, int Tmax, const int *pos0)
{
	G_ISSUE(.op = G_KV_APPEND, .p = {kc, vc, P(qkv), P(pos0)}, .i = {B_, n, Hq, Hkv, D, Tmax});
}
static void g_attention_cached(pp_act *out, const pp_act *qkv, const pp_act *kc, const pp_act *vc,
			       int B_, int n, int Hq, int Hkv, int D, int Tmax, const int *pos0,
			       int window, const pp_attn_bias *bias)
{
	if (!gm.recording) {
		const long rows = (long)B_ * n;
		gm.scratch_grew += gm.alive && rows > gm.rows;
		gm.rows = rows > gm.rows ? rows : gm.rows;
	}
	G_ISSUE(.op = G_ATTENTION,
		.p = {out, P(qkv), P(kc), P(vc), P(pos0), bias ? P(bias->w) : NULL,
		      bias ? P(bias->bucket) : NULL},
		.i = {B_, n, Hq, Hkv, D, Tmax, window, bias ? bias->nb : 0});
}
static void g_glu_fwd(pp_act *out, const pp_act *gu, int N, int F, int act)
{
	G_ISSUE(.op = G_GLU, .p = {out, P(gu)}, .i = {N, F, act});
}
static void g_gelu_fwd(pp_act *out, const pp_act *x, size_t n)
{
	G_ISSUE(.op = G_GELU, .p = {out, P(x)}, .i = {(long)n});
}
static void g_add(pp_act *out, const pp_act *a, const pp_act *b, size_t n)
{
	G_ISSUE(.op = G_ADD, .p = {out, P(a), P(b)}, .i = {(long)n});
}

static void g_to_device(void *dst, const void *src, size_t bytes)
{
	gm.host_copies += gm.recording;
	pp_ops_cpu.to_device(dst, src, bytes);
}
static void g_to_host(void *dst, const void *src, size_t bytes)
{
	gm.host_copies += gm.recording;
	pp_ops_cpu.to_host(dst, src, bytes);
}
static void g_act_to_host(pp_real *dst, const pp_act *src, size_t n)
{
	gm.host_copies += gm.recording;
	pp_ops_cpu.act_to_host(dst, src, n);
}

static void g_begin(void)
{
	gm.recording = true;
	gm.rec = (g_graph){NULL, 0};
}
static void *g_end(void)
{
	g_graph *g = malloc(sizeof *g);
	*g = gm.rec;
	gm.recording = false;
	gm.alive++;
	gm.recorded++;
	return g;
}
static void g_launch(void *graph)
{
	const g_graph *g = graph;
	for (size_t k = 0; k < g->n; k++)
		g_run(&g->calls[k]);
	gm.replays++;
}
static void g_free(void *graph)
{
	g_graph *g = graph;
	free(g->calls);
	free(g);
	gm.alive--;
}

static pp_ops graph_ops(void)
{
	pp_ops o = pp_ops_cpu;
	o.matmul_fwd = g_matmul_fwd;
	o.matmul_gelu_fwd = g_matmul_gelu_fwd;
	o.embed_fwd = g_embed_fwd;
	o.rmsnorm_fwd = g_rmsnorm_fwd;
	o.layernorm_fwd = g_layernorm_fwd;
	o.rmsnorm_residual_fwd = g_rmsnorm_residual_fwd;
	o.layernorm_residual_fwd = g_layernorm_residual_fwd;
	o.rope_fwd = g_rope_fwd;
	o.kv_append = g_kv_append;
	o.attention_cached = g_attention_cached;
	o.glu_fwd = g_glu_fwd;
	o.gelu_fwd = g_gelu_fwd;
	o.add = g_add;
	o.to_device = g_to_device;
	o.to_host = g_to_host;
	o.act_to_host = g_act_to_host;
	o.graph_begin = g_begin;
	o.graph_end = g_end;
	o.graph_launch = g_launch;
	o.graph_free = g_free;
	return o;
}

/* s's weights in a stage over the recording table: prompts of several
 * tokens and of one, then steps of one token, and a chunk of several after
 * the graph exists; the logits equal the full forward's, every rule holds,
 * and the step is recorded and replayed as often as expected */
static void check_graphs(const pp_stage *s, const int *tok, const pp_real *full, const char *preset)
{
	static const struct {
		const char *name;
		int sizes[5], n_sizes, recorded, replays;
	} runs[] = {
		/* the first step of one token runs eagerly, then 1 recording, 6 replays */
		{"prompt_then_steps", {5}, 1, 1, T - 5 - 1},
		/* the prompt's forward is that step */
		{"one_token_prompt", {1}, 1, 1, T - 1},
		/* the chunk of 3 drops the recording; one eager step, then again */
		{"chunk_after_graph", {1, 1, 1, 1, 3}, 5, 2, 3 + T - 7 - 1},
	};
	static pp_ops ops;
	ops = graph_ops();
	pp_stage g;
	pp_err e = {0};
	char name[96];
	stage_spec sp = stage_spec_whole(s->cfg, B, T, PP_RECOMPUTE_NONE);
	if (stage_create(&g, s->cfg, &ops, &sp, &e)) {
		CHECK(0, "decode/graph/setup", "%s", e.msg);
		return;
	}
	memcpy(g.w, s->w, s->n_elems * sizeof *g.w);
	stage_weights_changed(&g);
	for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		memset(&gm, 0, sizeof gm);
		int n_pos;
		double d = cached_vs_full(&g, tok, full, runs[r].sizes, runs[r].n_sizes, &n_pos);
		snprintf(name, sizeof name, "decode/%s/graph_%s", preset, runs[r].name);
		CHECK(d <= TOL && !gm.unseen && !gm.host_copies && !gm.scratch_grew && !gm.alive &&
			      gm.recorded == runs[r].recorded && gm.replays == runs[r].replays,
		      name,
		      "logits off by %.3g; recorded ops not run eagerly before %d, host copies while "
		      "recording %d, scratch grown under a live graph %d, graphs left %d; %d "
		      "recordings and %d replays, expected %d and %d",
		      d, gm.unseen, gm.host_copies, gm.scratch_grew, gm.alive, gm.recorded,
		      gm.replays, runs[r].recorded, runs[r].replays);
		free(gm.seen);
	}
	stage_free(&g);
}

/* Two sequences at different lengths in slots 0 and 2 of a 3-slot cache:
 * each prefilled alone, slot 2 moved to slot 1, then stepped together;
 * every step's logits are each sequence's own full-forward row. */
static double ragged_vs_full(pp_stage *s, const int *tok, const pp_real *full, int *steps)
{
	const int V = s->cfg->vocab_size, len0 = 5, len1 = 2;
	pp_kv_cache c;
	pp_err e = {0};
	*steps = 0;
	if (kv_cache_create(&c, s, 3, T, T, true, &e))
		return INFINITY;
	pp_real *got = malloc(sizeof(pp_real) * 2 * V);
	double worst = 0;
	int pos[2] = {len0, len1}, next[2];
	/* prefills: sequence 0 into slot 0, sequence 1 into slot 2 */
	int rc = kv_cache_tokens(s, &c, 0, 1, tok, len0, &e) || stage_forward_cached(s, &c, &e) ||
		 kv_cache_tokens(s, &c, 2, 1, tok + T, len1, &e) || stage_forward_cached(s, &c, &e);
	if (!rc) {
		kv_cache_move(&c, 2, 1);
		rc = c.len[1] != len1 || c.len[2] != 0;
	}
	while (!rc && pos[0] < T) {
		for (int b = 0; b < 2; b++)
			next[b] = tok[b * T + pos[b]];
		if ((rc = kv_cache_tokens(s, &c, 0, 2, next, 1, &e) ||
			  stage_forward_cached(s, &c, &e)))
			break;
		s->ops->act_to_host(got, c.logits, (size_t)2 * V);
		for (int b = 0; b < 2; b++) {
			double d = rel(got + (size_t)b * V, full + ((size_t)b * T + pos[b]) * V,
				       (size_t)V);
			worst = d > worst ? d : worst;
			pos[b]++;
		}
		(*steps)++;
	}
	free(got);
	kv_cache_free(&c);
	return rc ? INFINITY : worst;
}

/* The cached logits of sequence 0 with the weights stored as fmt, against
 * full (B,T,V): a prefill of 5 tokens (the products of several rows), then
 * a token at a time (those of one) */
static double packed_vs_full(pp_stage *s, const int *tok, const pp_real *full, int fmt)
{
	pp_err e = {0};
	if (stage_pack_weights(s, fmt, NULL, &e))
		return INFINITY;
	const int V = s->cfg->vocab_size;
	pp_kv_cache c;
	pp_real *got = malloc(sizeof(pp_real) * V);
	double worst = kv_cache_create(&c, s, 1, T, T, false, &e) ? INFINITY : 0;
	for (int t = 0, n = 5; t < T && worst < INFINITY; t += n, n = 1) {
		if (kv_cache_tokens(s, &c, 0, 1, tok + t, n, &e) ||
		    stage_forward_cached(s, &c, &e)) {
			worst = INFINITY;
			break;
		}
		s->ops->act_to_host(got, c.logits, (size_t)V);
		double d = rel(got, full + (size_t)(t + n - 1) * V, (size_t)V);
		worst = d > worst ? d : worst;
	}
	free(got);
	kv_cache_free(&c);
	stage_unpack_weights(s);
	return worst;
}

static void check_family(const char *preset)
{
	char ov[64], name[96];
	snprintf(ov, sizeof ov, "model=%s", preset);
	char *ovs[] = {ov};
	pp_config cfg;
	pp_err e = {0};
	memset(&cfg, 0, sizeof cfg);
	snprintf(name, sizeof name, "decode/%s/setup", preset);
	if (pp_config_load(&cfg, NULL, 1, ovs, &e)) {
		CHECK(0, name, "%s", e.msg);
		return;
	}
	const pp_model_cfg *m = &cfg.model;
	pp_stage s;
	stage_spec sp = stage_spec_whole(m, B, T, PP_RECOMPUTE_NONE);
	sp.keep_logits = true;
	if (stage_create(&s, m, pp_ops_find(PP_DEVICE_CPU, PP_TYPE_REAL), &sp, &e)) {
		CHECK(0, name, "%s", e.msg);
		pp_config_free(&cfg);
		return;
	}
	stage_init_params(&s, 7);
	perturb(&s);
	const int V = m->vocab_size;
	int tok[B * T], tgt[B * T];
	for (int i = 0; i < B * T; i++) {
		tok[i] = (int)rng_below(11, (uint64_t)i, (uint64_t)V);
		tgt[i] = PP_IGNORE_INDEX;
	}
	pp_real *full = malloc(sizeof(pp_real) * B * T * V);
	int rc = stage_forward(&s, 0, tok, NULL, tgt, 0, NULL, NULL, NULL, &e);
	CHECK(!rc, name, "%s", e.msg);
	s.ops->act_to_host(full, stage_logits(&s, 0), (size_t)B * T * V);

	int n_pos;
	const int one[] = {1}, chunks[] = {5, 3};
	double d = cached_vs_full(&s, tok, full, one, 1, &n_pos);
	snprintf(name, sizeof name, "decode/%s/token_by_token", preset);
	CHECK(d <= TOL && n_pos == T, name, "logits off the full forward by %.3g over %d positions",
	      d, n_pos);
	d = cached_vs_full(&s, tok, full, chunks, 2, &n_pos);
	snprintf(name, sizeof name, "decode/%s/prefill_chunks", preset);
	CHECK(d <= TOL && n_pos == T - 6, name, "logits off the full forward by %.3g", d);
	printf("  %s: cached logits within %.2g of the full forward\n", preset, d);

	/* the cache ends at Tmax, and tokens are checked */
	pp_kv_cache c;
	int bad[B] = {V, 0}, ok[B * 3] = {0};
	rc = kv_cache_create(&c, &s, B, 3, 3 * B, false, &e);
	int r1 = rc ? rc : kv_cache_tokens(&s, &c, 0, B, bad, 1, &e);
	int r2 = rc ? rc
		    : kv_cache_tokens(&s, &c, 0, B, ok, 3, &e) || stage_forward_cached(&s, &c, &e);
	int r3 = rc ? rc : kv_cache_tokens(&s, &c, 0, B, ok, 1, &e);
	snprintf(name, sizeof name, "decode/%s/cache_bounds", preset);
	CHECK(!rc && r1 == PP_EUSAGE && r2 == 0 && r3 == PP_EUSAGE &&
		      strstr(e.msg, "past the KV cache"),
	      name, "rc %d %d %d %d: %s", rc, r1, r2, r3, e.msg);
	kv_cache_free(&c);
	rc = kv_cache_create(&c, &s, 1, m->max_seq_len + 1, 1, false, &e);
	snprintf(name, sizeof name, "decode/%s/context_limit", preset);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "max_seq_len"), name, "rc %d: %s", rc, e.msg);
	check_graphs(&s, tok, full, preset);

	int steps;
	d = ragged_vs_full(&s, tok, full, &steps);
	snprintf(name, sizeof name, "decode/%s/ragged_batch", preset);
	CHECK(d <= TOL && steps == T - 5, name,
	      "two sequences at lengths 5 and 2, one moved between slots: logits off by %.3g "
	      "over %d steps",
	      d, steps);
	/* fp32 reads the compute copy through the decode products: round-off
	 * only; bf16 keeps 8 bits of mantissa (relative 2^-9 per weight), q8_0
	 * 127 levels per block of 32 (up to 1/254 of the block's largest) */
	static const struct {
		int fmt;
		const char *name;
		double tol;
	} fmts[] = {{PP_WEIGHTS_F32, "fp32", TOL},
		    {PP_WEIGHTS_BF16, "bf16", 1e-2},
		    {PP_WEIGHTS_Q8_0, "q8_0", 2e-2}};
	for (int k = 0; k < 3; k++) {
		d = packed_vs_full(&s, tok, full, fmts[k].fmt);
		snprintf(name, sizeof name, "decode/%s/weights_%s", preset, fmts[k].name);
		CHECK(d <= fmts[k].tol, name,
		      "logits off the fp32 full forward by %.3g (tolerance %g)", d, fmts[k].tol);
		printf("  %s: weights stored as %s: logits within %.2g\n", preset, fmts[k].name, d);
	}
	free(full);
	stage_free(&s);
	pp_config_free(&cfg);
}

static void check_sampler(void)
{
	const pp_real logits[6] = {1.0f, 3.0f, 2.5f, 3.0f, -1.0f, 0.0f};
	sample_params p = sample_defaults();
	p.temperature = 0;
	CHECK(sample_pick(logits, 6, &p, 0, NULL) == 1, "decode/sample/greedy_lowest_tie",
	      "greedy did not pick the first maximum");
	/* top-k 1 is greedy at any temperature; top-k 3 never draws outside {1, 3, 2} */
	p.temperature = 5;
	p.top_k = 1;
	int only = 1;
	for (int i = 0; i < 200; i++)
		only &= sample_pick(logits, 6, &p, (uint64_t)i, NULL) == 1;
	CHECK(only, "decode/sample/top_k_1", "top-k 1 drew another token");
	p.top_k = 3;
	int in = 1, seen[6] = {0};
	for (int i = 0; i < 2000; i++) {
		int v = sample_pick(logits, 6, &p, (uint64_t)i, NULL);
		seen[v]++;
		in &= v == 1 || v == 2 || v == 3;
	}
	CHECK(in && seen[1] && seen[2] && seen[3], "decode/sample/top_k_3",
	      "draws outside the top 3, or one of them never drawn");
	/* top-p: at temperature 1, tokens 1 and 3 hold 0.35 each: p = 0.5 keeps both */
	p.temperature = 1;
	p.top_k = 0;
	p.top_p = 0.5;
	memset(seen, 0, sizeof seen);
	for (int i = 0; i < 2000; i++)
		seen[sample_pick(logits, 6, &p, (uint64_t)i, NULL)]++;
	CHECK(seen[1] && seen[3] && seen[1] + seen[3] == 2000, "decode/sample/top_p",
	      "top-p 0.5 drew outside tokens 1 and 3 (%d %d of 2000)", seen[1], seen[3]);
	pp_err e = {0};
	p.top_p = 0;
	CHECK(sample_check(&p, false, &e) == PP_EUSAGE && strstr(e.msg, "--top-p 0:"),
	      "decode/sample/check", "top-p 0 accepted: %s", e.msg);
	CHECK(sample_check(&p, true, &e) == PP_EUSAGE && strstr(e.msg, "field 'top_p' 0:"),
	      "decode/sample/check_field", "a JSON line's top_p 0: %s", e.msg);
}

/* Over many draws, the first token's distribution under top-k and top-p is
 * the softmax at the temperature renormalised over the kept tokens: a
 * chi-square test with a fixed seed (critical value at p = 0.001). */
static void check_distribution(void)
{
	enum { NV = 12, DRAWS = 40000 };
	pp_real logits[NV];
	for (int v = 0; v < NV; v++)
		logits[v] = (pp_real)(0.37 * v - 0.02 * v * v + (v % 3 ? 0.1 : -0.2));
	static const struct {
		double temperature, top_p;
		int top_k;
	} cases[] = {{1.0, 1.0, 0}, {0.7, 1.0, 5}, {1.3, 0.6, 0}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		sample_params p = sample_defaults();
		p.temperature = cases[c].temperature;
		p.top_k = cases[c].top_k;
		p.top_p = cases[c].top_p;
		p.seed = 77;
		/* the expected distribution, computed apart from the sampler */
		double w[NV], sorted[NV], total = 0;
		int order[NV];
		for (int v = 0; v < NV; v++) {
			w[v] = exp(logits[v] / p.temperature);
			order[v] = v;
		}
		for (int i = 0; i < NV; i++) /* by weight, descending */
			for (int j = i + 1; j < NV; j++)
				if (w[order[j]] > w[order[i]]) {
					int t = order[i];
					order[i] = order[j];
					order[j] = t;
				}
		int kept = p.top_k ? p.top_k : NV;
		for (int i = 0; i < kept; i++)
			total += w[order[i]];
		if (p.top_p < 1) {
			double run = 0;
			int k = 0;
			while (k < kept && run < p.top_p * total)
				run += w[order[k++]];
			kept = k;
		}
		total = 0;
		for (int i = 0; i < kept; i++)
			total += sorted[i] = w[order[i]];
		int seen[NV] = {0}, outside = 0;
		for (int i = 0; i < DRAWS; i++)
			seen[sample_pick(logits, NV, &p, (uint64_t)i, NULL)]++;
		double chi = 0;
		for (int i = 0; i < kept; i++) {
			double expect = DRAWS * sorted[i] / total;
			chi += (seen[order[i]] - expect) * (seen[order[i]] - expect) / expect;
		}
		for (int i = kept; i < NV; i++)
			outside += seen[order[i]];
		/* critical values at p = 0.001 for df = 1..11 */
		static const double crit[] = {0,     10.83, 13.82, 16.27, 18.47, 20.52,
					      22.46, 24.32, 26.12, 27.88, 29.59, 31.26};
		double limit = crit[kept - 1 < 11 ? kept - 1 : 11];
		char name[64];
		snprintf(name, sizeof name, "decode/sample/chi_square_%zu", c);
		CHECK(outside == 0 && kept > 1 && chi < limit, name,
		      "T=%g top_k=%d top_p=%g: %d tokens kept, chi-square %.2f (limit %.2f), %d draws "
		      "outside the kept tokens",
		      p.temperature, p.top_k, p.top_p, kept, chi, limit, outside);
		printf("  sampler T=%g top_k=%d top_p=%g: %d tokens kept, chi-square %.2f < %.2f\n",
		       p.temperature, p.top_k, p.top_p, kept, chi, limit);
	}
}

/* The CPU's products over llama.cpp's blocks (random bytes as a GGUF file
 * would hold them, sane scales) against the blocks decoded by the reference
 * decoder and a plain double dot product: one input row and several. */
static void check_block_products(void)
{
	enum { OC = 40, C = 96, N = 3 };
	static const struct {
		int fmt, bytes;
		const char *name;
		void (*decode)(const void *, float *, int64_t);
	} fm[] = {{PP_WEIGHTS_Q8_0, QUANT_Q8_0_BYTES, "q8_0", quant_decode_q8_0},
		  {PP_WEIGHTS_Q4_0, QUANT_Q4_0_BYTES, "q4_0", quant_decode_q4_0},
		  {PP_WEIGHTS_Q4_1, QUANT_Q4_1_BYTES, "q4_1", quant_decode_q4_1}};
	const pp_ops *o = pp_ops_find(PP_DEVICE_CPU, PP_TYPE_REAL);
	float x[N * C], w[OC * C], got[N * OC], bias[OC];
	for (int i = 0; i < N * C; i++)
		x[i] = (float)rng_normal(rng_key(3, "blocks-x"), (uint64_t)i);
	for (int i = 0; i < OC; i++)
		bias[i] = 0.01f * (float)i;
	for (size_t f = 0; f < sizeof fm / sizeof fm[0]; f++) {
		const size_t nb = (size_t)OC * C / 32 * fm[f].bytes;
		uint8_t *blk = malloc(nb);
		for (size_t i = 0; i < nb; i++)
			blk[i] = (uint8_t)rng_below(5, i + 1000 * f, 256);
		/* scales (and Q4_1's minimum) as small normal fp16: exponent 01010 */
		for (size_t b = 0; b < nb / fm[f].bytes; b++)
			for (int k = 0; k < (fm[f].fmt == PP_WEIGHTS_Q4_1 ? 2 : 1); k++)
				blk[b * fm[f].bytes + 2 * k + 1] =
					(uint8_t)(0x28 | (blk[b * fm[f].bytes + 2 * k + 1] & 0x83));
		fm[f].decode(blk, w, (int64_t)OC * C);
		double worst = 0;
		for (int n = 1; n <= N; n += N - 1) {
			o->matmul_packed(got, x, blk, bias, n, C, OC, fm[f].fmt);
			for (int r = 0; r < n; r++)
				for (int k = 0; k < OC; k++) {
					double want = bias[k], mag = 0;
					for (int j = 0; j < C; j++) {
						want += (double)w[k * C + j] * x[r * C + j];
						mag += fabs((double)w[k * C + j] * x[r * C + j]);
					}
					double d = fabs(got[r * OC + k] - want) / (mag + 1e-30);
					worst = d > worst ? d : worst;
				}
		}
		char name[64];
		snprintf(name, sizeof name, "decode/blocks/%s", fm[f].name);
		CHECK(worst < 1e-5, name,
		      "products over %s blocks off the decoded weights by %.3g "
		      "(relative to the sum of |terms|)",
		      fm[f].name, worst);
		free(blk);
	}
}

int main(void)
{
	check_block_products();
	check_distribution();
	check_family("llama-tiny");
	check_family("mistral-tiny");
	check_family("gemma-tiny");
	check_family("gpt-tiny");
	check_sampler();
	TH_EXIT();
}
