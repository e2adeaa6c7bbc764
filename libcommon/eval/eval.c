/* Tasks scored over the ranks, and their figures (eval.h). */
#include "eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"

int eval_set_open(eval_set *es, const char *path, eval_format f, int limit, const pp_tokenizer *tk,
		  eval_bos bos, int max_seq_len, pp_err *e)
{
	memset(es, 0, sizeof *es);
	int rc = eval_task_read(&es->task, path, f, limit, e);
	if (rc)
		return rc;
	if (!tk) {
		eval_task_free(&es->task);
		return pp_errorf(e, PP_EUSAGE,
				 "%s: scoring text needs the model's tokenizer, and this "
				 "checkpoint has none (give tokenizer=PATH)",
				 path);
	}
	const int n = es->task.n_items;
	es->first = malloc(((size_t)n + 1) * sizeof *es->first);
	if (!es->first) {
		eval_set_close(es);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	es->first[0] = 0;
	for (int i = 0; i < n; i++)
		es->first[i + 1] = es->first[i] + es->task.items[i].n;
	es->res = calloc((size_t)es->first[n] + 1, sizeof *es->res);
	if (!es->res)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	if (!rc)
		rc = eval_tokenize(&es->task, tk, bos, max_seq_len, &es->toks, e);
	if (rc)
		eval_set_close(es);
	return rc;
}

void eval_set_close(eval_set *es)
{
	eval_toks_free(es->toks, es->task.n_items);
	eval_task_free(&es->task);
	free(es->res);
	free(es->first);
	memset(es, 0, sizeof *es);
}

int eval_sets_open(eval_set **sets, int *n, const char *list, eval_format fmt, int limit,
		   const pp_tokenizer *tk, eval_bos bos, int max_seq_len, eval_scorer *sc,
		   pp_err *e)
{
	int cap = 1, rc = 0;
	for (const char *p = list; *p; p++)
		cap += *p == ',';
	char *copy = strdup(list), *save = NULL;
	*sets = calloc((size_t)cap, sizeof **sets);
	*n = 0;
	if (!copy || !*sets) {
		free(copy);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	for (char *f = strtok_r(copy, ",", &save); f && !rc; f = strtok_r(NULL, ",", &save)) {
		eval_format ff = fmt;
		char *colon = strchr(f, ':');
		if (colon) { /* FMT:FILE, where FMT names a format */
			*colon = '\0';
			pp_err ignore;
			if (eval_format_parse(f, &ff, &ignore))
				*colon = ':';
			else
				f = colon + 1;
		}
		eval_set *es = &(*sets)[*n];
		if (!(rc = eval_set_open(es, f, ff, limit, tk, bos, max_seq_len, e))) {
			if (sc)
				eval_scorer_fit(sc, es->toks, es->task.n_items);
			(*n)++;
		}
	}
	if (!rc && !*n)
		rc = pp_errorf(e, PP_EUSAGE, "no task files in '%s'", list);
	free(copy);
	return rc;
}

void eval_sets_close(eval_set *sets, int n)
{
	for (int i = 0; i < n; i++)
		eval_set_close(&sets[i]);
	free(sets);
}

int eval_pred(const eval_set *es, int item, bool norm)
{
	const eval_item *it = &es->task.items[item];
	if (it->kind == EVAL_CLOZE)
		return -1;
	const eval_result *r = es->res + es->first[item];
	int best = 0;
	for (int i = 1; i < it->n; i++) {
		const double a = norm ? r[i].ll / it->chars[i] : r[i].ll,
			     b = norm ? r[best].ll / it->chars[best] : r[best].ll;
		if (a > b)
			best = i;
	}
	return best;
}

/* mean and lm-evaluation-harness's mean_stderr (sample deviation over
 * sqrt(n)) of x */
static void mean_se(const double *x, int n, double *mean, double *se)
{
	double m = 0, ss = 0;
	for (int i = 0; i < n; i++)
		m += x[i];
	m /= n;
	for (int i = 0; i < n; i++)
		ss += (x[i] - m) * (x[i] - m);
	*mean = m;
	*se = n > 1 ? sqrt(ss / (n - 1)) / sqrt((double)n) : NAN;
}

static void summarize(eval_set *es)
{
	const eval_task *t = &es->task;
	const int n = t->n_items;
	eval_summary *s = &es->sum;
	double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
	s->items = n;
	s->acc = s->acc_se = s->acc_norm = s->acc_norm_se = s->ppl = s->ppl_se = NAN;
	s->tokens = 0;
	for (int i = 0; i < es->first[n]; i++)
		s->tokens += es->res[i].tokens;
	if (!a || !b) {
		free(a);
		free(b);
		return;
	}
	for (int i = 0; i < n; i++) {
		const eval_item *it = &t->items[i];
		const eval_result *r = es->res + es->first[i];
		if (it->kind == EVAL_CLOZE) {
			a[i] = r->greedy;
			b[i] = r->ll;
		} else {
			a[i] = eval_pred(es, i, false) == it->answer;
			b[i] = eval_pred(es, i, true) == it->answer;
		}
	}
	mean_se(a, n, &s->acc, &s->acc_se);
	if (t->kind == EVAL_CHOICE)
		mean_se(b, n, &s->acc_norm, &s->acc_norm_se);
	if (t->kind == EVAL_CLOZE) {
		/* exp of minus the mean log-likelihood; its error to first order */
		double m, se;
		mean_se(b, n, &m, &se);
		s->ppl = exp(-m);
		s->ppl_se = s->ppl * se;
	}
	free(a);
	free(b);
}

int eval_set_score(eval_set *es, eval_scorer *sc, pp_comm *comm, bool progress, pp_err *e)
{
	const int n = es->task.n_items, rank = comm ? comm->rank : 0, size = comm ? comm->size : 1;
	const int mine = n / size + (rank < n % size);
	const double t0 = clock_seconds();
	double shown = t0;
	int rc = 0, done = 0;
	/* this rank's items, in batches of up to CHUNK */
	enum { CHUNK = 32 };
	const eval_toks *k[CHUNK];
	eval_result *r[CHUNK];
	for (int i = rank; i < n && !rc;) {
		int b = 0, first = i;
		for (; b < CHUNK && i < n; b++, i += size) {
			k[b] = &es->toks[i];
			r[b] = es->res + es->first[i];
		}
		if ((rc = eval_score_items(sc, k, r, b, e))) {
			pp_err_prefix(e, "%s: lines %d to %d", es->task.path,
				      es->task.items[first].line, es->task.items[i - size].line);
			break;
		}
		done += b;
		const double t = clock_seconds();
		if (progress && t - shown > 10 && done < mine) {
			char left[32];
			log_duration(left, sizeof left, (t - t0) / done * (mine - done));
			log_info("%s: %d of %d items, %.2f items/s, %s left", es->task.name, done,
				 mine, done / (t - t0), left);
			shown = t;
		}
	}
	es->seconds = clock_seconds() - t0;
	es->scored = done;
	if (rc || !comm || size == 1) {
		if (!rc)
			summarize(es);
		return rc;
	}
	/* every rank's results to every rank: each request's (ll, tokens,
	 * greedy), zeros where another rank scored it */
	const size_t m = (size_t)es->first[n];
	double *buf = calloc(3 * m + 1, sizeof *buf);
	if (!buf)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = rank; i < n; i += size)
		for (int j = es->first[i]; j < es->first[i + 1]; j++) {
			buf[3 * j] = es->res[j].ll;
			buf[3 * j + 1] = es->res[j].tokens;
			buf[3 * j + 2] = es->res[j].greedy;
		}
	rc = comm_allreduce(comm, buf, 3 * m, PP_DT_F64, PP_OP_SUM, e);
	for (size_t j = 0; !rc && j < m; j++) {
		es->res[j].ll = buf[3 * j];
		es->res[j].tokens = (int)buf[3 * j + 1];
		es->res[j].greedy = buf[3 * j + 2] > 0.5;
	}
	free(buf);
	if (!rc)
		summarize(es);
	return rc;
}
