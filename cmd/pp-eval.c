/* pp-eval: scores a checkpoint on zero-shot tasks (multiple choice,
 * partial scoring, cloze) as lm-evaluation-harness does, or measures its
 * loss, perplexity and bits per byte on a token dataset. Under srun or
 * mpirun the items are shared among the ranks. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/log.h"
#include "../libcommon/comm/boot.h"
#include "../libcommon/decode/open.h"
#include "../libcommon/eval/eval.h"
#include "../libcommon/eval/perplexity.h"

typedef struct {
	const char *ckpt, *weights, *tasks, *format, *data, *limit, *bos;
	bool random_init, json, per_item;
} eval_args;

static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static void print_line(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (s)
		puts(s);
	free(s);
	json_decref(o);
}

/* --per-item: one line per item, each request's figures */
static void print_items(const eval_set *es)
{
	for (int i = 0; i < es->task.n_items; i++) {
		const eval_item *it = &es->task.items[i];
		json_t *req = json_array();
		for (int j = 0; j < it->n; j++) {
			const eval_result *r = &es->res[es->first[i] + j];
			json_array_append_new(
				req, json_pack("{s:s, s:s, s:o, s:i, s:b, s:f}", "context",
					       eval_ctx(it, j), "continuation", eval_cont(it, j),
					       "ll", num(r->ll), "tokens", r->tokens, "greedy",
					       r->greedy, "chars", it->chars[j]));
		}
		json_t *o = json_pack("{s:s, s:i, s:i, s:o}", "task", es->task.name, "item", i,
				      "line", it->line, "requests", req);
		if (o && it->kind != EVAL_CLOZE) {
			json_object_set_new(o, "answer", json_integer(it->answer));
			json_object_set_new(o, "pred", json_integer(eval_pred(es, i, false)));
			if (it->kind == EVAL_CHOICE)
				json_object_set_new(o, "pred_norm",
						    json_integer(eval_pred(es, i, true)));
		}
		print_line(o);
	}
}

static void print_task_json(const eval_set *es)
{
	const eval_summary *s = &es->sum;
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:I, s:f, s:f}", "task",
			      es->task.name, "file", es->task.path, "format",
			      eval_format_name(es->task.fmt), "items", s->items, "acc", num(s->acc),
			      "acc_stderr", num(s->acc_se), "tokens", (json_int_t)s->tokens,
			      "seconds", es->seconds, "items_per_s",
			      es->seconds > 0 ? s->items / es->seconds : 0);
	if (o && es->task.kind == EVAL_CHOICE) {
		json_object_set_new(o, "acc_norm", num(s->acc_norm));
		json_object_set_new(o, "acc_norm_stderr", num(s->acc_norm_se));
	}
	if (o && es->task.kind == EVAL_CLOZE) {
		json_object_set_new(o, "perplexity", num(s->ppl));
		json_object_set_new(o, "perplexity_stderr", num(s->ppl_se));
	}
	print_line(o);
}

/* the table of lm-evaluation-harness: a row per task and metric */
static void print_row(const char *task, int items, const char *metric, double v, double se)
{
	char sev[32] = "N/A";
	if (isfinite(se))
		snprintf(sev, sizeof sev, "%.4f", se);
	if (task)
		printf("|%-14s|%6d|%-10s|%10.4f|±|%8s|\n", task, items, metric, v, sev);
	else
		printf("|%-14s|%6s|%-10s|%10.4f|±|%8s|\n", "", "", metric, v, sev);
}

static void print_table(const eval_set *sets, int n)
{
	printf("|%-14s|%6s|%-10s|%10s|%s|%8s|\n", "task", "items", "metric", "value", " ",
	       "stderr");
	printf("|%.14s|%.5s:|%.10s|%.9s:|-|%.7s:|\n", "--------------", "------", "----------",
	       "----------", "--------");
	for (int i = 0; i < n; i++) {
		const eval_set *es = &sets[i];
		const eval_summary *s = &es->sum;
		print_row(es->task.name, s->items, "acc", s->acc, s->acc_se);
		if (es->task.kind == EVAL_CHOICE)
			print_row(NULL, 0, "acc_norm", s->acc_norm, s->acc_norm_se);
		if (es->task.kind == EVAL_CLOZE)
			print_row(NULL, 0, "perplexity", s->ppl, s->ppl_se);
	}
}

static int run_tasks(const eval_args *a, decode_model *m, pp_comm *world, bool leader, long limit,
		     pp_err *e)
{
	eval_format fmt = TASK_JSONL;
	eval_bos bos = EVAL_BOS_TOKENIZER;
	int rc = a->format ? eval_format_parse(a->format, &fmt, e) : 0;
	if (!rc && a->bos)
		rc = eval_bos_parse(a->bos, &bos, e);
	if (rc)
		return rc;
	eval_set *sets = NULL;
	eval_scorer sc = {0};
	int opened = 0;
	rc = eval_sets_open(&sets, &opened, a->tasks, fmt, (int)limit, m->tk, bos,
			    m->cfg.model.max_seq_len, &sc, e);
	if (!rc)
		rc = decode_model_load(m, e);
	if (!rc)
		rc = eval_scorer_open(&sc, &m->s, e);
	for (int i = 0; i < opened && !rc; i++) {
		eval_set *es = &sets[i];
		if (!(rc = eval_set_score(es, &sc, world, leader, e)) && leader)
			log_info("%s: %d items (%s); %d on this rank in %.1f s, %.2f items/s",
				 es->task.name, es->task.n_items, eval_format_name(es->task.fmt),
				 es->scored, es->seconds,
				 es->seconds > 0 ? es->scored / es->seconds : 0);
		if (!rc && leader && a->json) {
			if (a->per_item)
				print_items(es);
			print_task_json(es);
			fflush(stdout);
		}
	}
	if (!rc && leader && !a->json)
		print_table(sets, opened);
	eval_scorer_close(&sc);
	eval_sets_close(sets, opened);
	return rc;
}

static int run_data(const eval_args *a, decode_model *m, pp_comm *world, bool leader, long limit,
		    pp_err *e)
{
	eval_ppl r;
	int rc = decode_model_load(m, e);
	if (!rc)
		rc = eval_perplexity(&m->s, m->tk, a->data, (int)limit, world, leader, &r, e);
	if (rc || !leader)
		return rc;
	if (a->json) {
		print_line(json_pack("{s:s, s:I, s:I, s:f, s:f, s:o, s:I, s:f}", "data", r.name,
				     "docs", (json_int_t)r.docs, "tokens", (json_int_t)r.tokens,
				     "loss", r.loss, "perplexity", r.ppl, "bits_per_byte",
				     num(r.bpb), "bytes", (json_int_t)r.bytes, "seconds",
				     r.seconds));
	} else {
		printf("%s: %ld documents, %ld tokens: loss %.6f, perplexity %.4f", r.name, r.docs,
		       r.tokens, r.loss, r.ppl);
		if (isfinite(r.bpb))
			printf(", %.6f bits per byte", r.bpb);
		printf("\n");
	}
	return 0;
}

int main(int argc, char **argv)
{
	eval_args a = {0};
	const cli_opt opts[] = {
		{"--ckpt", "DIR",
		 "a checkpoint, a run directory (its newest sound one) or a GGUF file; "
		 "without --cfg its own config and tokenizer",
		 &a.ckpt, NULL},
		{"--tasks", "F[,F...]",
		 "score the task files F (JSON lines; pp-tasks(5)); FMT:F gives one file's format",
		 &a.tasks, NULL},
		{"--task-format", "FMT",
		 "the files' schema: jsonl (default), hellaswag, arc, piqa, boolq, winogrande or "
		 "lambada (where F gives none)",
		 &a.format, NULL},
		{"--data", "D",
		 "loss, perplexity and bits per byte over the documents of a token dataset "
		 "(its validation split when it has one)",
		 &a.data, NULL},
		{"--limit", "N", "the first N items of each task (documents of --data)", &a.limit,
		 NULL},
		{"--bos", "WHEN",
		 "BOS before every context: as the tokenizer adds it (tokenizer, the default), "
		 "always or never",
		 &a.bos, NULL},
		{"--weights", "W",
		 "store the weights as fp32, bf16 or q8_0, or as a GGUF file has them: gguf (CPU; "
		 "default fp32, gguf for a GGUF file)",
		 &a.weights, NULL},
		{"--random-init", NULL,
		 "seeded initial weights (with --ckpt: of its config and tokenizer, a baseline "
		 "at chance)",
		 NULL, &a.random_init},
		{"--json", NULL, "one JSON object per task on stdout instead of the table", NULL,
		 &a.json},
		{"--per-item", NULL, "with --json, a line per item before its task's", NULL,
		 &a.per_item},
		{0},
	};
	const cli_spec spec = {
		"pp-eval",
		"(--ckpt DIR | --cfg FILE) [--random-init] [key=value ...] (--tasks F[,F...] "
		"[--task-format FMT] | --data D) [--limit N] [--bos WHEN] [--weights W] [--json "
		"[--per-item]]",
		"Score a checkpoint on zero-shot tasks, or its perplexity on a token dataset.",
		opts,
		true,
		0,
		NULL};
	log_set_prefix("pp-eval", 0, 1);
	pp_err e = {0};
	cli_args args;
	decode_model m = {0};
	pp_proc proc = {0};
	pp_comm *world = NULL;
	bool booted = false;
	long limit = 0;
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0)
		return 0;
	if (!rc && !a.tasks == !a.data)
		rc = pp_errorf(&e, PP_EUSAGE, "give --tasks or --data (one of them)");
	if (!rc && a.per_item && !a.json)
		rc = pp_errorf(&e, PP_EUSAGE,
			       "--per-item: the items are written in --json output "
			       "only; add --json");
	if (!rc && a.format && !a.tasks)
		rc = pp_errorf(&e, PP_EUSAGE, "--task-format is for --tasks");
	if (!rc && a.limit)
		rc = cli_long("--limit", a.limit, 1, 1L << 30, &limit, &e);
	if (!rc && !(rc = boot_init(&proc, &e))) {
		booted = true;
		log_set_prefix("pp-eval", proc.rank, proc.size);
		if (proc.size > 1 && (rc = comm_init(&world, "mpi", &proc, 600, &e)))
			world = NULL;
	}
	decode_source src = {.ckpt = a.ckpt,
			     .cfg = args.cfg,
			     .weights = a.weights,
			     .random_init = a.random_init,
			     .device = booted ? boot_device(&proc) : 0,
			     .n_overrides = args.n_overrides,
			     .overrides = args.overrides};
	if (!rc)
		rc = decode_model_open(&m, &src, &e);
	const bool leader = proc.rank == 0;
	if (!rc && a.tasks)
		rc = run_tasks(&a, &m, world, leader, limit, &e);
	else if (!rc)
		rc = run_data(&a, &m, world, leader, limit, &e);
	decode_model_close(&m);
	if (world)
		comm_free(world);
	if (booted)
		boot_fini(&proc);
	cli_free(&args);
	return rc ? cli_fail(&spec, &e) : 0;
}
