/* eval_tasks: task files scored at each evaluation of a run, on ranks that
 * hold the whole model (config.c refuses other layouts). The files are
 * read and tokenized when the run opens, so that a bad file fails before
 * the first step; the KV cache is made at the first evaluation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "../eval/eval.h"
#include "internal.h"

struct train_tasks {
	pp_tokenizer *tk;
	eval_set *sets;
	int n;
	eval_scorer sc;
	bool open; /* the scorer */
};

void train_tasks_close(trainer *t)
{
	train_tasks *x = t->tasks;
	if (!x)
		return;
	if (x->open)
		eval_scorer_close(&x->sc);
	eval_sets_close(x->sets, x->n);
	if (x->tk)
		tok_free(x->tk);
	free(x);
	t->tasks = NULL;
}

int train_tasks_open(trainer *t, pp_err *e)
{
	const pp_config *c = t->cfg;
	if (!c->eval_tasks[0] || t->params_only)
		return 0;
	train_tasks *x = calloc(1, sizeof *x);
	if (!(t->tasks = x))
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	int rc = tok_load(&x->tk, c->tokenizer, e);
	if (!rc)
		rc = eval_sets_open(&x->sets, &x->n, c->eval_tasks,
				    (eval_format)c->eval_task_format, 0, x->tk, EVAL_BOS_TOKENIZER,
				    c->model.max_seq_len, &x->sc, e);
	if (rc)
		pp_err_prefix(e, "key 'eval_tasks'");
	return rc;
}

int train_tasks_score(trainer *t, run_log *lg, pp_err *e)
{
	train_tasks *x = t->tasks;
	if (!x)
		return 0;
	/* the items shared over the data ranks where the comm is on the host;
	 * on the GPU's comm the leader scores them all */
	pp_comm *comm = t->mesh.data_comm;
	if (comm && strcmp(comm->ops->name, "mpi"))
		comm = NULL;
	if (!comm && !lg->leader)
		return 0;
	int rc = 0;
	if (!x->open && !(rc = eval_scorer_open(&x->sc, &t->chunks[0], e)))
		x->open = true;
	for (int i = 0; i < x->n && !rc; i++) {
		eval_set *es = &x->sets[i];
		if ((rc = eval_set_score(es, &x->sc, comm, false, e)) || !lg->leader)
			continue;
		const eval_summary *s = &es->sum;
		char line[256], name[160];
		int len = snprintf(line, sizeof line, "acc %.4f", s->acc);
		snprintf(name, sizeof name, "eval/%s/acc", es->task.name);
		train_log_scalar(lg, t->step, name, s->acc);
		if (isfinite(s->acc_norm)) {
			len += snprintf(line + len, sizeof line - (size_t)len, ", acc_norm %.4f",
					s->acc_norm);
			snprintf(name, sizeof name, "eval/%s/acc_norm", es->task.name);
			train_log_scalar(lg, t->step, name, s->acc_norm);
		}
		if (isfinite(s->ppl)) {
			snprintf(line + len, sizeof line - (size_t)len, ", perplexity %.4f",
				 s->ppl);
			snprintf(name, sizeof name, "eval/%s/perplexity", es->task.name);
			train_log_scalar(lg, t->step, name, s->ppl);
		}
		log_info("step %ld/%ld | eval %s: %s (%d items, %.1f s)", t->step, t->cfg->steps,
			 es->task.name, line, s->items, es->seconds);
	}
	return rc;
}
