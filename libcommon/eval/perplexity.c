/* Rolling log-likelihood of a token dataset's documents (perplexity.h). */
#include "perplexity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../data/data.h"
#include "score.h"

/* rows of one forward: a window goes through in chunks of this many */
#define CHUNK 256

/* The window of n fed tokens whose last `scored` rows predict target:
 * from an empty slot, in chunks; only the chunks' scored rows (a suffix
 * of the window) are kept. */
static int window(eval_scorer *sc, const int *feed, int n, const int *target, int scored,
		  double *nll, pp_err *e)
{
	const int first = n - scored; /* the first scored row */
	int rc = 0;
	for (int p = 0; p < n && !rc; p += CHUNK) {
		const int r = n - p < CHUNK ? n - p : CHUNK;
		const int from = first > p ? first : p, keep = p + r - from;
		double ll = 0;
		bool greedy = true;
		rc = eval_score_rows(sc, feed + p, r, p, keep > 0 ? target + (from - first) : NULL,
				     keep > 0 ? keep : 0, &ll, &greedy, e);
		*nll -= ll;
	}
	return rc;
}

/* tok (n) fed, tgt (n) predicted: tok, or tok with PP_IGNORE_INDEX where
 * a loss mask leaves a token out */
static int score_doc(eval_scorer *sc, const int *tok, const int *tgt, int n, int prefix, int L,
		     double *nll, long *predicted, int **feed, pp_err *e)
{
	int rc = 0;
	if (prefix < 0) { /* the first token is the context */
		if (n < 2)
			return 0;
		prefix = tok[0];
		tok++;
		tgt++;
		n--;
	}
	if (n < 1)
		return 0;
	int *f = realloc(*feed, ((size_t)L + 1) * sizeof *f);
	if (!f)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	*feed = f;
	const int first = n < L ? n : L;
	f[0] = prefix;
	if (first > 1)
		memcpy(f + 1, tok, (size_t)(first - 1) * sizeof *f);
	rc = window(sc, f, first, tgt, first, nll, e);
	for (int done = first; !rc && done < n;) {
		const int w = n - done < L ? n - done : L, end = done + w;
		rc = window(sc, tok + end - L - 1, L, tgt + end - w, w, nll, e);
		done = end;
	}
	for (int j = 0; j < n; j++)
		*predicted += tgt[j] >= 0;
	return rc;
}

/* The bytes of a document's text (mask: of its runs of scored tokens). */
static int text_bytes(const pp_tokenizer *tk, const int *ids, const uint8_t *mask, size_t n,
		      double *bytes, pp_err *e)
{
	int rc = 0;
	for (size_t a = 0; a < n && !rc;) {
		size_t b = a;
		while (b < n && (!mask || mask[b]))
			b++;
		if (b > a) {
			tok_text t = {0};
			rc = tok_decode(tk, ids + a, b - a, &t, e);
			*bytes += (double)t.n;
			tok_text_free(&t);
		}
		a = b + (b < n);
	}
	return rc;
}

int eval_perplexity(pp_stage *s, const pp_tokenizer *tk, const char *path, int limit, pp_comm *comm,
		    bool progress, eval_ppl *r, pp_err *e)
{
	memset(r, 0, sizeof *r);
	data_docs *d = NULL;
	int rc = data_docs_open(&d, path, e);
	if (rc)
		return rc;
	snprintf(r->name, sizeof r->name, "%s", data_docs_name(d));
	const int L = s->cfg->max_seq_len, rank = comm ? comm->rank : 0,
		  size = comm ? comm->size : 1;
	uint64_t n = data_docs_count(d);
	if (limit > 0 && (uint64_t)limit < n)
		n = (uint64_t)limit;
	const int prefix = tk ? (tok_bos(tk) >= 0 ? tok_bos(tk) : tok_eos(tk)) : -1;
	eval_scorer sc = {.B = 1, .Tmax = L, .rows = CHUNK < L ? CHUNK : L};
	int *ids = NULL, *feed = NULL, *tgt = NULL;
	uint8_t *mask = NULL;
	const bool masked = data_docs_masked(d);
	size_t len = 0;
	double sums[4] = {0}; /* nll, tokens, bytes, docs */
	const double t0 = clock_seconds();
	double shown = t0;
	rc = eval_scorer_open(&sc, s, e);
	for (uint64_t i = (uint64_t)rank; !rc && i < n; i += (uint64_t)size) {
		long predicted = 0;
		if ((rc = data_docs_read(d, i, &ids, masked ? &mask : NULL, &len, e)))
			break;
		int *grown = masked ? realloc(tgt, (len + 1) * sizeof *grown) : NULL;
		if (masked && !grown) {
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
			break;
		}
		tgt = masked ? grown : tgt;
		for (size_t j = 0; masked && j < len; j++)
			tgt[j] = mask[j] ? ids[j] : PP_IGNORE_INDEX;
		for (size_t j = 0; j < len && !rc; j++)
			if (ids[j] < 0 || ids[j] >= s->cfg->vocab_size)
				rc = pp_errorf(e, PP_EUSAGE,
					       "%s: document %llu: token %d is outside the "
					       "model's vocabulary [0, %d)",
					       r->name, (unsigned long long)i, ids[j],
					       s->cfg->vocab_size);
		if (!rc)
			rc = score_doc(&sc, ids, masked ? tgt : ids, (int)len, prefix, L, &sums[0],
				       &predicted, &feed, e);
		if (!rc && tk)
			rc = text_bytes(tk, ids, masked ? mask : NULL, len, &sums[2], e);
		sums[1] += (double)predicted;
		sums[3] += 1;
		const double t = clock_seconds();
		if (progress && t - shown > 10) {
			char left[32];
			const double done = sums[3],
				     mine = (double)((n - (uint64_t)rank + (uint64_t)size - 1) /
						     (uint64_t)size);
			log_duration(left, sizeof left, (t - t0) / done * (mine - done));
			log_info("%s: %.0f of %.0f documents, %.0f tokens/s, %s left", r->name,
				 done, mine, sums[1] / (t - t0), left);
			shown = t;
		}
	}
	r->seconds = clock_seconds() - t0;
	if (!rc && comm && size > 1)
		rc = comm_allreduce(comm, sums, 4, PP_DT_F64, PP_OP_SUM, e);
	if (!rc) {
		r->nll = sums[0];
		r->tokens = (long)sums[1];
		r->bytes = (long)sums[2];
		r->docs = (long)sums[3];
		if (!r->tokens)
			rc = pp_errorf(e, PP_EUSAGE, "%s: no tokens to predict", r->name);
	}
	if (!rc) {
		r->loss = r->nll / (double)r->tokens;
		r->ppl = exp(r->loss);
		r->bpb = tk && r->bytes ? r->nll / (log(2.0) * (double)r->bytes) : NAN;
	}
	eval_scorer_close(&sc);
	free(ids);
	free(tgt);
	free(mask);
	free(feed);
	data_docs_close(d);
	return rc;
}
