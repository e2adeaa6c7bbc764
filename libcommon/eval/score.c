/* Requests into tokens, and their log-likelihoods from cached forwards
 * (score.h). */
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"

static int nomem(pp_err *e) { return pp_errorf(e, PP_ERUNTIME, "out of memory"); }

static bool py_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static int encode(const pp_tokenizer *tk, const char *s, size_t n, tok_ids *out, pp_err *e)
{
	return n ? tok_encode(tk, s, n, out, e) : 0;
}

/* lm-evaluation-harness's _encode_pair: context and continuation tokens */
static int encode_pair(const pp_tokenizer *tk, const char *ctx, const char *cont, int bos_id,
		       int prefix, tok_ids *c, tok_ids *k, pp_err *e)
{
	size_t nc = strlen(ctx);
	if (!nc) {
		if (tok_ids_push(c, prefix))
			return nomem(e);
		return encode(tk, cont, strlen(cont), k, e);
	}
	while (nc && py_space((unsigned char)ctx[nc - 1]))
		nc--;
	const size_t nk = strlen(ctx) - nc + strlen(cont);
	char *whole = malloc(nc + nk + 1);
	if (!whole)
		return nomem(e);
	memcpy(whole, ctx, strlen(ctx));
	strcpy(whole + strlen(ctx), cont);
	tok_ids w = {0};
	if (bos_id >= 0 && (tok_ids_push(c, bos_id) || tok_ids_push(&w, bos_id))) {
		free(whole);
		return nomem(e);
	}
	int rc = encode(tk, whole, nc + nk, &w, e);
	if (!rc)
		rc = encode(tk, whole, nc, c, e);
	for (size_t i = c->n; !rc && i < w.n; i++)
		if (tok_ids_push(k, w.ids[i]))
			rc = nomem(e);
	tok_ids_free(&w);
	free(whole);
	return rc;
}

void eval_toks_free(eval_toks *k, int n)
{
	for (int i = 0; k && i < n; i++) {
		for (int j = 0; k[i].ctx && j < k[i].n_ctx; j++)
			tok_ids_free(&k[i].ctx[j]);
		for (int j = 0; k[i].cont && j < k[i].n; j++)
			tok_ids_free(&k[i].cont[j]);
		free(k[i].ctx);
		free(k[i].cont);
	}
	free(k);
}

/* the harness's left truncation of context + continuation to L + 1
 * tokens: drops from the front of c */
static void truncate_left(tok_ids *c, size_t drop)
{
	memmove(c->ids, c->ids + drop, (c->n - drop) * sizeof *c->ids);
	c->n -= drop;
}

static int tokenize_item(const eval_item *it, const pp_tokenizer *tk, eval_bos bos, int L,
			 eval_toks *k, pp_err *e)
{
	const bool add = bos == EVAL_BOS_ALWAYS || (bos == EVAL_BOS_TOKENIZER && tok_adds_bos(tk));
	const int bos_id = add ? tok_bos(tk) : -1;
	const int prefix = tok_bos(tk) >= 0 ? tok_bos(tk) : tok_eos(tk);
	if (prefix < 0 && it->n_ctx && !*eval_ctx(it, 0))
		return pp_errorf(e, PP_EUSAGE,
				 "an empty context, and the tokenizer has no BOS or EOS to stand "
				 "for it");
	/* one context per request; shared again below when they are equal */
	k->n = it->n;
	k->ctx = calloc((size_t)it->n, sizeof *k->ctx);
	k->cont = calloc((size_t)it->n, sizeof *k->cont);
	if (!k->ctx || !k->cont)
		return nomem(e);
	k->n_ctx = it->n;
	for (int i = 0; i < it->n; i++) {
		int rc = encode_pair(tk, eval_ctx(it, i), eval_cont(it, i), bos_id, prefix,
				     &k->ctx[i], &k->cont[i], e);
		if (rc)
			return rc;
		const size_t nk = k->cont[i].n, all = k->ctx[i].n + nk;
		if (!nk)
			return pp_errorf(e, PP_EUSAGE, "request %d's continuation has no tokens",
					 i);
		if (nk > (size_t)L)
			return pp_errorf(e, PP_EUSAGE,
					 "request %d's continuation is %zu tokens, longer than the "
					 "model's context (max_seq_len=%d)",
					 i, nk, L);
		if (all > (size_t)L + 1) {
			truncate_left(&k->ctx[i], all - ((size_t)L + 1));
			k->truncated = true;
		}
	}
	/* a context shared by every request (multiple choice) runs once */
	bool same = !k->truncated;
	for (int i = 1; same && i < it->n; i++)
		same = k->ctx[i].n == k->ctx[0].n &&
		       !memcmp(k->ctx[i].ids, k->ctx[0].ids, k->ctx[0].n * sizeof(int));
	if (same) {
		for (int i = 1; i < it->n; i++)
			tok_ids_free(&k->ctx[i]);
		k->n_ctx = 1;
	}
	return 0;
}

int eval_bos_parse(const char *s, eval_bos *b, pp_err *e)
{
	static const char *const names[] = {"tokenizer", "always", "never"};
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, names[i])) {
			*b = (eval_bos)i;
			return 0;
		}
	return pp_errorf(e, PP_EUSAGE, "--bos '%s': expected tokenizer, always or never", s);
}

int eval_tokenize(const eval_task *t, const pp_tokenizer *tk, eval_bos bos, int max_seq_len,
		  eval_toks **out, pp_err *e)
{
	eval_toks *k = calloc((size_t)t->n_items + 1, sizeof *k);
	if (!k)
		return nomem(e);
	int rc = 0, truncated = 0;
	for (int i = 0; i < t->n_items && !rc; i++) {
		if ((rc = tokenize_item(&t->items[i], tk, bos, max_seq_len, &k[i], e)))
			pp_err_prefix(e, "%s: line %d", t->path, t->items[i].line);
		else if (k[i].truncated && truncated++ < 3)
			log_info(
				"warning: %s: line %d: longer than the model's context (max_seq_len=%d): its "
				"context loses tokens on the left, as lm-evaluation-harness "
				"truncates",
				t->path, t->items[i].line, max_seq_len);
	}
	if (truncated > 3)
		log_info("warning: %s: %d items in all were truncated on the left", t->path,
			 truncated);
	if (rc) {
		eval_toks_free(k, t->n_items);
		return rc;
	}
	*out = k;
	return 0;
}

/* ---- the cache ---------------------------------------------------------- */

/* what one item needs: slots, positions, rows at once */
static void item_needs(const eval_toks *k, int *B, int *T, int *rows)
{
	for (int i = 0; i < k->n; i++) {
		const tok_ids *c = &k->ctx[k->n_ctx == 1 ? 0 : i];
		const int all = (int)(c->n + k->cont[i].n);
		*T = all > *T ? all : *T;
		*rows = all > *rows ? all : *rows;
	}
	if (k->n_ctx == 1 && k->n > 1) {
		int longest = 0;
		for (int i = 0; i < k->n; i++)
			longest = (int)k->cont[i].n > longest ? (int)k->cont[i].n : longest;
		*B = k->n + 1 > *B ? k->n + 1 : *B;
		*rows = k->n * longest > *rows ? k->n * longest : *rows;
	}
}

void eval_scorer_fit(eval_scorer *sc, const eval_toks *k, int n)
{
	sc->batch = true;
	if (!sc->B)
		sc->B = sc->Tmax = sc->rows = 1;
	for (int i = 0; i < n; i++)
		item_needs(&k[i], &sc->B, &sc->Tmax, &sc->rows);
}

int eval_scorer_open(eval_scorer *sc, pp_stage *s, pp_err *e)
{
	sc->s = s;
	if (!sc->B)
		sc->B = sc->Tmax = sc->rows = 1;
	if (sc->Tmax > s->cfg->max_seq_len)
		sc->Tmax = s->cfg->max_seq_len;
	if (sc->batch) {
		/* room to batch items: up to 64 slots in 256 MB of keys and values,
		 * and up to 512 rows of logits in 128 MB */
		const double slot = 2.0 * s->cfg->n_layers * s->n_kv_heads * s->cfg->head_dim *
				    (double)sc->Tmax * (double)pp_act_size(s->ops);
		const double rows = (double)(1 << 27) / (4.0 * s->cfg->vocab_size);
		const int B = (int)fmin(64, (double)(1 << 28) / slot), R = (int)fmin(512, rows);
		sc->B = B > sc->B ? B : sc->B;
		sc->rows = R > sc->rows ? R : sc->rows;
	}
	return kv_cache_create(&sc->c, s, sc->B, sc->Tmax, sc->rows, false, e);
}

void eval_scorer_close(eval_scorer *sc)
{
	kv_cache_free(&sc->c);
	free(sc->logits);
	free(sc->feed);
	memset(sc, 0, sizeof *sc);
}

static int room(eval_scorer *sc, size_t logits, size_t feed, pp_err *e)
{
	if (logits > sc->logits_n) {
		free(sc->logits);
		if (!(sc->logits = malloc(logits * sizeof *sc->logits)))
			return sc->logits_n = 0, nomem(e);
		sc->logits_n = logits;
	}
	if (feed > sc->feed_n) {
		free(sc->feed);
		if (!(sc->feed = malloc(feed * sizeof *sc->feed)))
			return sc->feed_n = 0, nomem(e);
		sc->feed_n = feed;
	}
	return 0;
}

/* log softmax of x (V) at t, and whether t is its argmax */
static double row_ll(const pp_real *x, int V, int t, bool *greedy)
{
	*greedy = true;
	if (t < 0) /* a target the loss mask leaves out */
		return 0;
	int best = 0;
	double mx = x[0], sum = 0;
	for (int v = 1; v < V; v++)
		if (x[v] > mx) {
			mx = x[v];
			best = v;
		}
	for (int v = 0; v < V; v++)
		sum += exp((double)x[v] - mx);
	*greedy = best == t;
	return (double)x[t] - mx - log(sum);
}

/* the logits of the last forward's rows (nseq * keep of them) to the host */
static void fetch(eval_scorer *sc, int nrows)
{
	sc->s->ops->act_to_host(sc->logits, sc->c.logits, (size_t)nrows * sc->s->cfg->vocab_size);
}

int eval_score_rows(eval_scorer *sc, const int *tokens, int n, int ctx, const int *target, int keep,
		    double *ll, bool *greedy, pp_err *e)
{
	pp_stage *s = sc->s;
	const int V = s->cfg->vocab_size;
	int rc;
	if (!ctx)
		kv_cache_reset(&sc->c, 0);
	if ((rc = room(sc, (size_t)keep * V, 0, e)) ||
	    (rc = kv_cache_tokens(s, &sc->c, 0, 1, tokens, n, e)) ||
	    (keep && (rc = kv_cache_keep(&sc->c, keep, e))) ||
	    (rc = stage_forward_cached(s, &sc->c, e)) || !keep)
		return rc;
	fetch(sc, keep);
	double sum = 0;
	bool all = true;
#pragma omp parallel for reduction(+ : sum) reduction(&& : all)
	for (int i = 0; i < keep; i++) {
		bool g;
		sum += row_ll(sc->logits + (size_t)i * V, V, target[i], &g);
		all = all && g;
	}
	*ll += sum;
	*greedy = *greedy && all;
	return 0;
}

/* one request alone: its context and continuation in one forward, from an
 * empty slot 0 */
static int score_alone(eval_scorer *sc, const tok_ids *c, const tok_ids *k, eval_result *r,
		       pp_err *e)
{
	const int nc = (int)c->n, nk = (int)k->n, n = nc + nk - 1;
	int rc = room(sc, 0, (size_t)n, e);
	if (rc)
		return rc;
	memcpy(sc->feed, c->ids, (size_t)nc * sizeof(int));
	memcpy(sc->feed + nc, k->ids, (size_t)(nk - 1) * sizeof(int));
	r->ll = 0;
	r->greedy = true;
	r->tokens = nk;
	return eval_score_rows(sc, sc->feed, n, 0, k->ids, nk, &r->ll, &r->greedy, e);
}

/* whether an item's requests share one context (multiple choice) */
static bool shared(const eval_toks *k) { return k->n_ctx == 1 && k->n > 1; }

/* its continuations of two tokens or more, and the longest's length - 1 */
static void tails(const eval_toks *k, int *m, int *longest)
{
	*m = *longest = 0;
	for (int i = 0; i < k->n; i++)
		if (k->cont[i].n > 1) {
			(*m)++;
			*longest = (int)k->cont[i].n - 1 > *longest ? (int)k->cont[i].n - 1
								    : *longest;
		}
}

/* A group of g items of shared contexts: each context in its own slot
 * (0..g-1), its last position scoring every first token; then the rest of
 * every continuation of two tokens or more, each from a copy of its
 * context (slots g.., M of them), all in one forward padded to one length
 * n (the padding comes after every scored row, so it changes none). */
static int score_group(eval_scorer *sc, const eval_toks *const *k, eval_result *const *res, int g,
		       int M, int n, pp_err *e)
{
	pp_stage *s = sc->s;
	const int V = s->cfg->vocab_size;
	int rc = room(sc, (size_t)(M > 1 ? M : 1) * (n > 1 ? n : 1) * V, (size_t)M * n + 1, e);
	for (int q = 0; q < g && !rc; q++) {
		const tok_ids *c = &k[q]->ctx[0];
		kv_cache_reset(&sc->c, q);
		if ((rc = kv_cache_tokens(s, &sc->c, q, 1, c->ids, (int)c->n, e)) ||
		    (rc = stage_forward_cached(s, &sc->c, e)))
			break;
		fetch(sc, 1);
		for (int i = 0; i < k[q]->n; i++) {
			eval_result *r = &res[q][i];
			r->tokens = (int)k[q]->cont[i].n;
			r->ll = row_ll(sc->logits, V, k[q]->cont[i].ids[0], &r->greedy);
		}
	}
	if (rc || !M)
		return rc;
	int(*which)[2] = malloc((size_t)M * sizeof *which), m = 0;
	if (!which)
		return nomem(e);
	for (int q = 0; q < g; q++)
		for (int i = 0; i < k[q]->n; i++) {
			const tok_ids *t = &k[q]->cont[i];
			if (t->n < 2)
				continue;
			kv_cache_copy(&sc->c, q, g + m);
			for (int j = 0; j < n; j++)
				sc->feed[(size_t)m * n + j] = j < (int)t->n - 1 ? t->ids[j]
										: t->ids[0];
			which[m][0] = q;
			which[m++][1] = i;
		}
	if ((rc = kv_cache_tokens(s, &sc->c, g, M, sc->feed, n, e)) ||
	    (rc = kv_cache_keep(&sc->c, n, e)) || (rc = stage_forward_cached(s, &sc->c, e))) {
		free(which);
		return rc;
	}
	fetch(sc, M * n);
#pragma omp parallel for
	for (int x = 0; x < M; x++) {
		const int q = which[x][0], i = which[x][1];
		const tok_ids *t = &k[q]->cont[i];
		double ll = 0;
		bool all = true;
		for (int j = 0; j + 1 < (int)t->n; j++) {
			bool gr;
			ll += row_ll(sc->logits + ((size_t)x * n + j) * V, V, t->ids[j + 1], &gr);
			all = all && gr;
		}
		res[q][i].ll += ll;
		res[q][i].greedy = res[q][i].greedy && all;
	}
	free(which);
	return 0;
}

int eval_score_items(eval_scorer *sc, const eval_toks *const *k, eval_result *const *res, int n,
		     pp_err *e)
{
	int rc = 0;
	for (int i = 0; i < n && !rc;) {
		if (!shared(k[i])) { /* each request alone */
			for (int r = 0; r < k[i]->n && !rc; r++)
				rc = score_alone(sc, &k[i]->ctx[k[i]->n_ctx == 1 ? 0 : r],
						 &k[i]->cont[r], &res[i][r], e);
			i++;
			continue;
		}
		/* as many items of shared contexts as the slots, the positions
		 * (each context and the padded continuations) and the rows of
		 * one forward take (one at least) */
		int g = 0, M = 0, L = 0, C = 0;
		while (i + g < n && shared(k[i + g])) {
			int m, l;
			tails(k[i + g], &m, &l);
			const int c = (int)k[i + g]->ctx[0].n;
			const int M2 = M + m, L2 = l > L ? l : L, C2 = c > C ? c : C;
			if (g &&
			    (g + 1 + M2 > sc->c.B || M2 * L2 > sc->c.rows || C2 + L2 > sc->c.Tmax))
				break;
			g++;
			M = M2;
			L = L2;
			C = C2;
		}
		rc = score_group(sc, k + i, res + i, g, M, L, e);
		i += g;
	}
	return rc;
}

int eval_score_item(eval_scorer *sc, const eval_toks *k, eval_result *res, pp_err *e)
{
	return eval_score_items(sc, &k, &res, 1, e);
}
