/* The decoding loop: prompts into slots of a KV cache, ragged steps over
 * the busy slots, continuous batching (decode.h). */
#include "../base/clock.h"
#include "decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int decode_check(const pp_stage *s, const decode_request *r, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const int n = (int)r->ids.n, ctx = m->max_seq_len;
	char where[32] = "";
	if (r->line)
		snprintf(where, sizeof where, "line %d: ", r->line);
	if (n < 1)
		return pp_errorf(e, PP_EUSAGE, "%san empty prompt", where);
	if (n > ctx)
		return pp_errorf(e, PP_EUSAGE,
				 "%sthe prompt is %d tokens, longer than the context of model '%s' "
				 "(max_seq_len=%d)",
				 where, n, m->preset, ctx);
	if (r->max_tokens < 1)
		return pp_errorf(e, PP_EUSAGE, "%smax_tokens %d: expected at least 1", where,
				 r->max_tokens);
	/* the last new token is not fed back */
	if ((long)n + r->max_tokens - 1 > ctx)
		return pp_errorf(
			e, PP_EUSAGE,
			"%s%d new tokens after a prompt of %d need %ld positions; the context "
			"of model '%s' holds %d (max_seq_len): ask for at most %d",
			where, r->max_tokens, n, (long)n + r->max_tokens - 1, m->preset, ctx,
			ctx - n + 1);
	for (int i = 0; i < n; i++)
		if (r->ids.ids[i] < 0 || r->ids.ids[i] >= m->vocab_size)
			return pp_errorf(e, PP_EUSAGE,
					 "%stoken %d is outside the vocabulary [0, %d)", where,
					 r->ids.ids[i], m->vocab_size);
	/* the command line's values were checked at its start: a bad one is a line's */
	int rc = sample_check(&r->sample, true, e);
	if (rc && r->line)
		pp_err_prefix(e, "line %d", r->line);
	return rc;
}

void decode_result_free(decode_result *r)
{
	free(r->ids);
	free(r->logprob);
	free(r->top_ids);
	free(r->top_logprob);
	tok_text_free(&r->text);
	memset(r, 0, sizeof *r);
}

/* ids as text into t (cleared first): through the tokenizer, or as numbers
 * separated by spaces without one; cont: they continue earlier text (a
 * leading space before the first number, no BOS-side space stripping) */
static int ids_text(const pp_tokenizer *tk, const int *ids, size_t n, bool cont, tok_text *t,
		    pp_err *e)
{
	tok_text_free(t);
	if (tk)
		return tok_decode_ex(tk, ids, n, cont ? TOK_DECODE_CONTINUE : 0, t, e);
	for (size_t i = 0; i < n; i++) {
		char num[16];
		int len = snprintf(num, sizeof num, cont || i ? " %d" : "%d", ids[i]);
		if (tok_text_append(t, num, (size_t)len))
			return pp_errorf(e, PP_ERUNTIME, "decode: out of memory");
	}
	return tok_text_append(t, "", 0) ? pp_errorf(e, PP_ERUNTIME, "decode: out of memory") : 0;
}

/* ---- one sequence ---------------------------------------------------------- */

typedef struct {
	int req;        /* index of its request */
	int cap;        /* room in the result's arrays */
	size_t shown;   /* bytes of text streamed */
	double t_first; /* when its first token came */
} seq;

typedef struct {
	pp_stage *s;
	const decode_opts *o;
	decode_request *reqs;
	decode_result *res;
	bool *finished;
	int n, next_done; /* requests; the first not yet handed to done */
	int V;
	void *scratch;
	double *lse_row;
	pp_real *logits;
	pp_err *e;
} engine;

static int grow(engine *g, seq *q)
{
	decode_result *r = &g->res[q->req];
	if (r->n < q->cap)
		return 0;
	const int cap = q->cap ? 2 * q->cap : 16, k = g->o->top_logprobs;
	int *ids = realloc(r->ids, (size_t)cap * sizeof *ids);
	if (ids)
		r->ids = ids;
	bool ok = ids != NULL;
	if (ok && g->o->logprobs) {
		float *lp = realloc(r->logprob, (size_t)cap * sizeof *lp);
		if (lp)
			r->logprob = lp;
		ok = lp != NULL;
	}
	if (ok && k > 0) {
		int *ti = realloc(r->top_ids, (size_t)cap * k * sizeof *ti);
		if (ti)
			r->top_ids = ti;
		float *tl = ti ? realloc(r->top_logprob, (size_t)cap * k * sizeof *tl) : NULL;
		if (tl)
			r->top_logprob = tl;
		ok = ti && tl;
	}
	if (!ok)
		return pp_errorf(g->e, PP_ERUNTIME, "decode: out of memory");
	q->cap = cap;
	return 0;
}

/* log softmax of token t's logit, and the top k (by logit, then lowest id) */
static void logprobs(const engine *g, const pp_real *x, int t, float *lp, int *top_ids,
		     float *top_lp)
{
	const int V = g->V, k = g->o->top_logprobs;
	double mx = x[0], sum = 0;
	for (int v = 1; v < V; v++)
		mx = x[v] > mx ? x[v] : mx;
	for (int v = 0; v < V; v++)
		sum += exp((double)x[v] - mx);
	const double lse = mx + log(sum);
	*lp = (float)((double)x[t] - lse);
	/* insertion into a sorted list of k: k is small */
	int n = 0;
	for (int v = 0; v < V && k > 0; v++) {
		if (n == k && x[v] <= x[top_ids[k - 1]])
			continue;
		int i = n < k ? n++ : k - 1;
		while (i > 0 && x[top_ids[i - 1]] < x[v]) {
			top_ids[i] = top_ids[i - 1];
			i--;
		}
		top_ids[i] = v;
	}
	for (int i = 0; i < n; i++)
		top_lp[i] = (float)((double)x[top_ids[i]] - lse);
}

/* the longest suffix of text[0..n) that begins some stop string: held back
 * from the stream until the next tokens settle it */
static size_t held_back(const decode_request *r, const char *text, size_t n)
{
	size_t keep = 0;
	for (int i = 0; i < r->n_stop; i++) {
		size_t L = strlen(r->stop[i]);
		for (size_t k = L - 1 < n ? L - 1 : n; k > keep; k--)
			if (!memcmp(text + n - k, r->stop[i], k)) {
				keep = k;
				break;
			}
	}
	return keep;
}

/* Takes token t for sequence q (draw k of its stream). Returns 1 when the
 * sequence is finished, 0 when it goes on, < 0 on error. */
static int take(engine *g, seq *q, const pp_real *x, int t)
{
	const decode_opts *o = g->o;
	decode_request *r = &g->reqs[q->req];
	decode_result *res = &g->res[q->req];
	int rc = grow(g, q);
	if (rc)
		return -rc;
	const int k = res->n, K = o->top_logprobs;
	res->ids[k] = t;
	res->n++;
	if (o->logprobs)
		logprobs(g, x, t, &res->logprob[k], K ? res->top_ids + (size_t)k * K : NULL,
			 K ? res->top_logprob + (size_t)k * K : NULL);
	bool eos = false;
	for (int i = 0; i < o->n_eos; i++)
		eos |= t == o->eos[i];
	/* the completion's text so far; a stop string cuts it */
	if ((rc = ids_text(o->tk, res->ids, (size_t)res->n, true, &res->text, g->e)))
		return -rc;
	const char *text = res->text.s ? res->text.s : "", *cut = NULL;
	for (int i = 0; i < r->n_stop; i++) {
		const char *hit = strstr(text, r->stop[i]);
		if (hit && (!cut || hit < cut))
			cut = hit;
	}
	if (cut) {
		res->text.n = (size_t)(cut - text);
		res->text.s[res->text.n] = '\0';
		res->finish = "stop";
	}
	if (!res->finish && eos)
		res->finish = "eos";
	if (!res->finish && res->n == r->max_tokens)
		res->finish = "length";
	if (o->stream && g->n == 1) {
		size_t safe = res->text.n - (res->finish ? 0 : held_back(r, text, res->text.n));
		if (safe > q->shown) {
			fwrite(text + q->shown, 1, safe - q->shown, o->stream);
			fflush(o->stream);
			q->shown = safe;
		}
	}
	return res->finish != NULL;
}

/* hands every finished request at the front of the input order to done */
static int hand_over(engine *g)
{
	int rc = 0;
	while (!rc && g->next_done < g->n && g->finished[g->next_done]) {
		decode_request *r = &g->reqs[g->next_done];
		decode_result *res = &g->res[g->next_done];
		if (g->o->done)
			rc = g->o->done(g->o->ctx, r, r->error ? NULL : res, g->e);
		decode_result_free(res);
		g->next_done++;
	}
	return rc;
}

/* keys and values one step reads of a sequence at length len */
static double kv_read(const pp_stage *s, int len)
{
	const pp_model_cfg *m = s->cfg;
	int seen = m->sliding_window > 0 && len > m->sliding_window ? m->sliding_window : len;
	return 2.0 * m->n_layers * seen * s->n_kv_heads * m->head_dim * (double)pp_act_size(s->ops);
}

/* parameters a step reads: stored weights as stored (stage_pack_weights),
 * the rest in the compute type, but the embedding rows it does not look up
 * (the whole table when the head shares it) and the position rows */
static double param_read_bytes(const pp_stage *s)
{
	const pp_model_cfg *m = s->cfg;
	double n = (double)s->n_elems;
	if (!m->tied_embeddings)
		n -= (double)m->vocab_size * m->d_model;
	if (m->pos == PP_POS_LEARNED)
		n -= (double)m->max_seq_len * m->d_model;
	return (n - (double)s->packed_elems) * (double)pp_act_size(s->ops) + s->packed_bytes;
}

double decode_bytes_per_token(const pp_stage *s, int n_prompt, int n_generated)
{
	double kv = 0;
	for (int k = 1; k < n_generated; k++) /* step k feeds token k-1 at position n_prompt+k-1 */
		kv += kv_read(s, n_prompt + k);
	return param_read_bytes(s) + (n_generated > 1 ? kv / (n_generated - 1) : 0);
}

static bool graphs_off(void)
{
	const char *v = getenv("PP_CUDA_GRAPH");
	return v && !strcmp(v, "0");
}

int decode_run(pp_stage *s, decode_request *reqs, int n, const decode_opts *o, decode_stats *st_,
	       pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const int V = m->vocab_size, B = o->batch;
	decode_stats st_local, *st = st_ ? st_ : &st_local;
	memset(st, 0, sizeof *st);
	st->n_requests = n;
	st->param_bytes = param_read_bytes(s);
	if (B < 1)
		return pp_errorf(e, PP_EUSAGE, "decode: batch %d", B);
	if (o->top_logprobs && !o->logprobs)
		return pp_errorf(e, PP_EUSAGE, "decode: top logprobs without logprobs");
	const double t0 = clock_seconds();
	engine g = {.s = s, .o = o, .reqs = reqs, .n = n, .V = V, .e = e};
	g.res = calloc((size_t)n + 1, sizeof *g.res);
	g.finished = calloc((size_t)n + 1, sizeof *g.finished);
	/* the checks first: the cache is made for the requests that run */
	int Tmax = 1, rows = B, rc = 0;
	for (int i = 0; g.res && g.finished && i < n; i++) {
		decode_request *r = &reqs[i];
		pp_err ce = {0};
		if (!r->error && decode_check(s, r, &ce) && !(r->error = strdup(ce.msg)))
			break;
		if (r->error) {
			g.finished[i] = true;
			st->n_failed++;
			continue;
		}
		const int need = (int)r->ids.n + r->max_tokens - 1;
		Tmax = need > Tmax ? need : Tmax;
		rows = (int)r->ids.n > rows ? (int)r->ids.n : rows;
	}
	seq *slot = calloc((size_t)B, sizeof *slot);
	int *next = malloc((size_t)B * sizeof *next);
	g.logits = malloc((size_t)B * V * sizeof *g.logits);
	g.scratch = malloc((size_t)V * (sizeof(int) + sizeof(double)));
	if (!g.res || !g.finished || !slot || !next || !g.logits || !g.scratch) {
		rc = pp_errorf(e, PP_ERUNTIME, "decode: out of memory");
		goto out;
	}
	pp_kv_cache c = {0};
	if (st->n_failed < n && (rc = kv_cache_create(&c, s, B, Tmax, rows, !graphs_off(), e)))
		goto out;
	st->kv_bytes = c.kv_bytes;
	if ((rc = hand_over(&g)))
		goto done;
	int busy = 0, queued = 0; /* busy slots [0, busy); requests before queued started */
	for (;;) {
		/* admit waiting prompts into free slots, each prefilled in one forward */
		while (!rc && busy < B && queued < n) {
			const int i = queued++;
			decode_request *r = &reqs[i];
			if (r->error)
				continue;
			if (o->stream && n == 1 && r->prompt) {
				fputs(r->prompt, o->stream);
				fflush(o->stream);
			}
			seq *q = &slot[busy];
			memset(q, 0, sizeof *q);
			q->req = i;
			kv_cache_reset(&c, busy);
			double t = clock_seconds();
			if ((rc = kv_cache_tokens(s, &c, busy, 1, r->ids.ids, (int)r->ids.n, e)) ||
			    (rc = stage_forward_cached(s, &c, e)))
				break;
			s->ops->act_to_host(g.logits, c.logits, (size_t)V);
			const int tok = sample_pick(g.logits, V, &r->sample, 0, g.scratch);
			int fin = take(&g, q, g.logits, tok);
			q->t_first = clock_seconds();
			g.res[i].prefill_s = q->t_first - t;
			st->prefill_s += g.res[i].prefill_s;
			st->prompt_tokens += (long)r->ids.n;
			st->generated_tokens++;
			if (fin < 0) {
				rc = -fin;
				break;
			}
			if (fin) {
				g.finished[i] = true;
				rc = hand_over(&g);
			} else {
				next[busy++] = tok;
			}
		}
		if (rc || !busy)
			break;
		/* one step: a token for every busy sequence */
		double t = clock_seconds();
		for (int b = 0; b < busy; b++)
			st->kv_read_bytes += kv_read(s, c.len[b] + 1);
		if ((rc = kv_cache_tokens(s, &c, 0, busy, next, 1, e)) ||
		    (rc = stage_forward_cached(s, &c, e)))
			break;
		s->ops->act_to_host(g.logits, c.logits, (size_t)busy * V);
		st->steps++;
		st->max_batch = busy > st->max_batch ? busy : st->max_batch;
		for (int b = 0; b < busy && !rc; b++) {
			seq *q = &slot[b];
			const decode_request *r = &reqs[q->req];
			const pp_real *x = g.logits + (size_t)b * V;
			const int k = g.res[q->req].n;
			const int tok = sample_pick(x, V, &r->sample, (uint64_t)k, g.scratch);
			int fin = take(&g, q, x, tok);
			st->generated_tokens++;
			if (fin < 0)
				rc = -fin;
			next[b] = tok;
			if (fin > 0) {
				g.res[q->req].decode_s = clock_seconds() - q->t_first;
				g.finished[q->req] = true;
			}
		}
		st->step_s += clock_seconds() - t;
		/* finished sequences leave; the last busy slot fills each hole */
		for (int b = busy - 1; b >= 0 && !rc; b--) {
			if (!g.finished[slot[b].req])
				continue;
			if (b != busy - 1) {
				kv_cache_move(&c, busy - 1, b);
				slot[b] = slot[busy - 1];
				next[b] = next[busy - 1];
			}
			busy--;
		}
		if (!rc)
			rc = hand_over(&g);
	}
	if (!rc && o->stream && n == 1 && !reqs[0].error) {
		fputc('\n', o->stream);
		fflush(o->stream);
	}
done:
	st->graph = c.graph != NULL;
	kv_cache_free(&c);
out:
	st->wall_s = clock_seconds() - t0;
	for (int i = 0; g.res && i < n; i++)
		decode_result_free(&g.res[i]);
	free(g.res);
	free(g.finished);
	free(slot);
	free(next);
	free(g.logits);
	free(g.scratch);
	return rc;
}

/* ---- one prompt, its ids kept ------------------------------------------------ */

typedef struct {
	int *ids;
	int n_prompt;
} one_ctx;

static int keep_ids(void *ctx, const decode_request *r, const decode_result *res, pp_err *e)
{
	one_ctx *k = ctx;
	if (r->error)
		return pp_errorf(e, PP_EUSAGE, "%s", r->error);
	memcpy(k->ids + k->n_prompt, res->ids, (size_t)res->n * sizeof(int));
	return 0;
}

int decode_one(pp_stage *s, const int *prompt, int n_prompt, int n_new, const sample_params *sp,
	       const pp_tokenizer *tk, FILE *out, int *ids, pp_err *e)
{
	decode_request r = {.max_tokens = n_new, .sample = *sp};
	one_ctx k = {ids, n_prompt};
	memcpy(ids, prompt, (size_t)n_prompt * sizeof(int));
	for (int i = 0; i < n_prompt; i++)
		if (tok_ids_push(&r.ids, prompt[i])) {
			decode_request_free(&r);
			return pp_errorf(e, PP_ERUNTIME, "decode: out of memory");
		}
	int rc = 0;
	if (out) { /* the prompt as text, streamed before the new tokens */
		tok_text t = {0};
		rc = ids_text(tk, prompt, (size_t)n_prompt, false, &t, e);
		if (!rc && !(r.prompt = strndup(t.s ? t.s : "", t.n)))
			rc = pp_errorf(e, PP_ERUNTIME, "decode: out of memory");
		tok_text_free(&t);
	}
	decode_opts o = {.batch = 1, .tk = tk, .stream = out, .done = keep_ids, .ctx = &k};
	if (!rc)
		rc = decode_run(s, &r, 1, &o, NULL, e);
	decode_request_free(&r);
	return rc;
}

double decode_prefill_rate(const decode_stats *st)
{
	return st->prefill_s > 0 ? (double)st->prompt_tokens / st->prefill_s : 0;
}

double decode_step_rate(const decode_stats *st)
{
	long n = st->generated_tokens - (st->n_requests - st->n_failed);
	return st->step_s > 0 ? (double)n / st->step_s : 0;
}
