/* Decoding's KV cache and the cached forward of new tokens (kvcache.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvcache.h"

int kv_cache_create(pp_kv_cache *c, const pp_stage *s, int B, int Tmax, int rows, bool graphs,
		    pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	memset(c, 0, sizeof *c);
	if (!s->first || !s->last || s->spec.tp.size != 1)
		return pp_errorf(
			e, PP_EUSAGE,
			"a KV cache needs a stage holding every layer without tensor parallelism");
	if (B < 1 || rows < 1 || Tmax < 1)
		return pp_errorf(e, PP_EUSAGE,
				 "KV cache of %d slots, %d positions, %d rows at once", B, Tmax,
				 rows);
	if (Tmax > m->max_seq_len)
		return pp_errorf(e, PP_EUSAGE,
				 "%d positions exceed the context of model '%s' (max_seq_len=%d)",
				 Tmax, m->preset, m->max_seq_len);
	const size_t L = (size_t)m->n_layers, C = m->d_model, F = s->d_ff, V = s->vocab;
	const size_t KV = (size_t)s->n_kv_heads * m->head_dim,
		     HD = (size_t)s->n_heads * m->head_dim;
	const size_t QKV = HD + 2 * KV, UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	const size_t N = (size_t)rows;
	c->ops = o;
	c->B = B;
	c->Tmax = Tmax;
	c->rows = rows;
	c->graphs = graphs && o->graph_begin;
	c->kv_bytes = 2 * L * (size_t)B * Tmax * KV * pp_act_size(o);
	c->layers = (int)L;
	c->pos_bytes = KV * pp_act_size(o);
	pp_act **p[] = {&c->k,   &c->v,   &c->x[0], &c->x[1], &c->h,    &c->qkv,
			&c->att, &c->mid, &c->up,   &c->act,  &c->last, &c->logits};
	const size_t n[] = {L * B * Tmax * KV,
			    L * B * Tmax * KV,
			    N * C,
			    N * C,
			    N * C,
			    N * QKV,
			    N * HD,
			    N * C,
			    N * UP,
			    N * F,
			    (size_t)B * C,
			    (size_t)B * V};
	pp_real **r[] = {&c->stat};
	const size_t rn[] = {2 * N};
	c->keep = 1;
	c->keep_cap = B;
	c->width = (int)C;
	c->vocab = (int)V;
	c->dev = o->alloc((B + N) * sizeof(int));
	c->host = malloc((B + N) * sizeof(int));
	c->len = calloc((size_t)B, sizeof(int));
	const pp_stage_acts *a = s->acts;
	moe_layer ml = layer_moe(s, &a->layer[0]);
	c->graphs = c->graphs && !a->n_moe;
	if (!c->dev || !c->host || !c->len || alloc_acts(o, p, n, NELEMS(p)) ||
	    lora_scratch_alloc(&c->lora, s, N) || alloc_reals(o, r, rn, NELEMS(r)) ||
	    (a->n_moe && (moe_acts_alloc(&c->moe, &ml, (int)N, false, e) ||
			  moe_scratch_alloc(&c->moe_sc, &ml, (int)N, e)))) {
		size_t bytes = c->kv_bytes;
		kv_cache_free(c);
		return pp_errorf(
			e, PP_ERUNTIME,
			"out of memory for a KV cache of %d slots x %d positions (%.3g GB)", B,
			Tmax, 1e-9 * (double)bytes);
	}
	return 0;
}

void kv_cache_free(pp_kv_cache *c)
{
	const pp_ops *o = c->ops;
	if (!o)
		return;
	if (c->graph)
		o->graph_free(c->graph);
	void *p[] = {c->k,   c->v,   c->x[0], c->x[1], c->h,    c->stat,   c->qkv,
		     c->att, c->mid, c->up,   c->act,  c->last, c->logits, c->dev};
	for (int i = 0; i < NELEMS(p); i++)
		o->free(p[i]);
	moe_acts_free(&c->moe, o);
	moe_scratch_free(&c->moe_sc, o);
	lora_scratch_free(&c->lora, o);
	free(c->host);
	free(c->len);
	memset(c, 0, sizeof *c);
}

int kv_cache_tokens(const pp_stage *s, pp_kv_cache *c, int slot0, int nseq, const int *tokens,
		    int n, pp_err *e)
{
	const int V = s->cfg->vocab_size;
	if (slot0 < 0 || nseq < 1 || slot0 + nseq > c->B)
		return pp_errorf(e, PP_EUSAGE, "slots %d..%d: the KV cache has %d", slot0,
				 slot0 + nseq - 1, c->B);
	if (n < 1 || (long)n * nseq > c->rows)
		return pp_errorf(
			e, PP_EUSAGE,
			"%d new tokens for %d sequences: the KV cache takes %d rows at once", n,
			nseq, c->rows);
	for (int b = 0; b < nseq; b++) {
		const int len = c->len[slot0 + b];
		if (len + n > c->Tmax)
			return pp_errorf(e, PP_EUSAGE,
					 "position %d is past the KV cache's %d positions",
					 len + n - 1, c->Tmax);
		for (int i = 0; i < n; i++) {
			const int t = tokens[b * n + i];
			if (t < 0 || t >= V)
				return pp_errorf(
					e, PP_EUSAGE,
					"token %d at position %d is outside the vocabulary [0, %d)",
					t, len + i, V);
			c->host[nseq + b * n + i] = t;
		}
		c->host[b] = len;
	}
	c->ops->to_device(c->dev, c->host, (size_t)nseq * (1 + n) * sizeof(int));
	c->slot0 = slot0;
	c->nseq = nseq;
	c->n = n;
	return 0;
}

int kv_cache_keep(pp_kv_cache *c, int keep, pp_err *e)
{
	if (keep < 1 || keep > c->n)
		return pp_errorf(e, PP_EUSAGE, "logits of %d rows of %d new ones", keep, c->n);
	const int rows = c->nseq * keep;
	if (rows > c->keep_cap) {
		const pp_ops *o = c->ops;
		const int C = c->width, V = c->vocab;
		if (c->graph)
			o->graph_free(c->graph);
		c->graph = NULL;
		c->warm = false;
		o->free(c->last);
		o->free(c->logits);
		pp_act **p[] = {&c->last, &c->logits};
		const size_t n[] = {(size_t)rows * C, (size_t)rows * V};
		c->keep_cap = 0;
		if (alloc_acts(o, p, n, NELEMS(p)))
			return pp_errorf(e, PP_ERUNTIME,
					 "out of memory for the logits of %d rows (%.3g GB)", rows,
					 1e-9 * (double)n[1] * (double)pp_act_size(o));
		c->keep_cap = rows;
	}
	c->keep = keep;
	return 0;
}

void kv_cache_reset(pp_kv_cache *c, int slot) { c->len[slot] = 0; }

/* the first len[from] positions of slot from, every layer, into slot to */
static void copy_slot(pp_kv_cache *c, int from, int to)
{
	const pp_ops *o = c->ops;
	const size_t slot = (size_t)c->Tmax * c->pos_bytes,
		     used = (size_t)c->len[from] * c->pos_bytes;
	for (size_t l = 0; l < (size_t)c->layers; l++) {
		const size_t base = l * (size_t)c->B * slot;
		const size_t src = base + (size_t)from * slot, dst = base + (size_t)to * slot;
		o->to_device((char *)c->k + dst, (char *)c->k + src, used);
		o->to_device((char *)c->v + dst, (char *)c->v + src, used);
	}
	c->len[to] = c->len[from];
}

void kv_cache_copy(pp_kv_cache *c, int from, int to)
{
	if (from != to)
		copy_slot(c, from, to);
}

void kv_cache_move(pp_kv_cache *c, int from, int to)
{
	copy_slot(c, from, to);
	c->len[from] = 0;
}

/* The ops of one cached forward, issued: rows at the positions c->dev holds */
static int forward_cached(pp_stage *s, pp_kv_cache *c, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	const int B = c->nseq, n = c->n, N = B * n, C = m->d_model;
	const int L = s->layer_end - s->layer_begin;
	const size_t KV = (size_t)s->n_kv_heads * m->head_dim, layer = (size_t)c->B * c->Tmax * KV;
	const size_t first = (size_t)c->slot0 * c->Tmax * KV;
	const int *pos = c->dev, *tok = c->dev + B;
	int rc;
	pp_real scale = m->embed_scale ? (pp_real)sqrt((double)C) : 1;
	if (a->embed_pos < 0)
		o->embed_fwd(c->x[0], tok, W(s, a->embed_w), NULL, scale, B, n, C, NULL);
	else /* learned positions: each sequence from its own */
		for (int b = 0; b < B; b++)
			o->embed_fwd(pp_act_at(o, c->x[0], (size_t)b * n * C), tok + b * n,
				     W(s, a->embed_w), W(s, a->embed_pos), scale, 1, n, C, pos + b);
	for (int l = 0; l < L; l++) {
		/* one set of buffers serves every layer; h holds h1, then h2 */
		layer_acts t = {.x = c->x[l % 2],
				.out = c->x[(l + 1) % 2],
				.h1 = c->h,
				.mean1 = c->stat,
				.rstd1 = c->stat + N,
				.qkv = c->qkv,
				.att = c->att,
				.mid = c->mid,
				.h2 = c->h,
				.mean2 = c->stat,
				.rstd2 = c->stat + N,
				.up = c->up,
				.act = c->act,
				.moe = &c->moe,
				.moe_sc = &c->moe_sc,
				.lora = &c->lora};
		layer_kv kv = {pp_act_at(o, c->k, (size_t)l * layer + first),
			       pp_act_at(o, c->v, (size_t)l * layer + first), c->Tmax, pos};
		if ((rc = layer_forward(s, &a->layer[l], &t, B, n, &kv, NULL, e)))
			return rc;
	}
	/* the last `keep` new rows of each sequence: all of them when that is n
	 * (and no copy, so that a backend graph can record the step of n = 1) */
	const int K = c->keep, R = B * K;
	pp_act *x = c->x[L % 2], *last = x;
	if (K < n) {
		last = c->last;
		for (int b = 0; b < B; b++)
			o->to_device(pp_act_at(o, last, (size_t)b * K * C),
				     pp_act_at(o, x, ((size_t)b * n + n - K) * C),
				     (size_t)K * C * pp_act_size(o));
	}
	layer_norm_fwd(s, R, c->h, c->stat, c->stat + R, last, a->normf_w, a->normf_b);
	layer_linear(s, c->logits, c->h, a->head_w, NULL, R, C, s->vocab);
	return 0;
}

int stage_forward_cached(pp_stage *s, pp_kv_cache *c, pp_err *e)
{
	const pp_ops *o = s->ops;
	int rc = 0;
	if (c->n < 1)
		return pp_errorf(e, PP_EUSAGE,
				 "cached forward without new tokens (kv_cache_tokens)");
	/* A recording keeps what the backend set up for the step when it ran
	 * eagerly: its matrix-product plans and kernels (per shape: a prompt's
	 * forward has other shapes, so one step of one token runs eagerly first)
	 * and its scratch, which cannot move while a graph lives (another
	 * forward may need more: it drops the recording). */
	const bool step = c->n == 1;
	const bool same = c->graph_slot0 == c->slot0 && c->graph_nseq == c->nseq;
	if (c->graph && !(step && same)) {
		o->graph_free(c->graph);
		c->graph = NULL;
	}
	if (step && same && c->graphs && c->warm) {
		if (!c->graph) {
			o->graph_begin();
			rc = forward_cached(s, c, e);
			void *g = o->graph_end();
			if (rc)
				o->graph_free(g);
			else
				c->graph = g;
		}
		if (!rc)
			o->graph_launch(c->graph);
	} else {
		rc = forward_cached(s, c, e);
		c->warm = step;
		c->graph_slot0 = c->slot0;
		c->graph_nseq = c->nseq;
	}
	if (rc)
		return rc;
	for (int b = 0; b < c->nseq; b++)
		c->len[c->slot0 + b] += c->n;
	c->n = 0;
	c->keep = 1;
	return 0;
}
