/* The evaluation's parts without a tokenizer's text:
 *   - the task formats build lm-evaluation-harness's prompts (HellaSwag's
 *     cleaning and capitalisation, as Python's one-pass str.replace leaves
 *     it, ARC in both schemas, PIQA with its
 *     labels file, BoolQ's two label fields, Winogrande's partial
 *     contexts, Lambada's last word) and count a choice's length in
 *     characters, not bytes;
 *   - a bad line is refused naming the file and the line, for each fault;
 *   - a request's log-likelihood and greediness, scored through the
 *     shared context's KV cache (several continuations in one padded
 *     forward) and alone, equal log softmax of one full forward over
 *     context + continuation, on a tiny llama;
 *   - the rolling windows of a token file's documents (perplexity.c), one
 *     document longer than the model's context and one not, give the sum
 *     of the log-likelihoods of full forwards over the windows the
 *     harness defines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/base/rng.h"
#include "../../libcommon/data/dataset.h"
#include "../../libcommon/eval/eval.h"
#include "../../libcommon/eval/perplexity.h"
#include "../tools/harness.h"

static int parse(eval_task *t, eval_format f, const char *text, pp_err *e)
{
	return eval_task_parse(t, "t.jsonl", text, strlen(text), f, 0, e);
}

static void check_formats(void)
{
	eval_task t;
	pp_err e = {0};
	int rc = parse(&t, TASK_HELLASWAG,
		       "{\"activity_label\": \"Home and Garden\", \"ctx_a\": \"[header] How to "
		       "make a bed [title] Strip the bed.  \", \"ctx_b\": \"tHEN you\", "
		       "\"endings\": [\"put  sheets on. [step] Done\", \"b\", \"c\", \"d\"], "
		       "\"label\": \"0\"}\n",
		       &e);
	CHECK(!rc &&
		      !strcmp(t.items[0].ctx[0],
			      "Home and Garden: How to make a bed. Strip the bed.  Then you") &&
		      !strcmp(t.items[0].cont[0], " put sheets on. Done") && t.items[0].n == 4 &&
		      t.items[0].answer == 0 && t.kind == EVAL_CHOICE,
	      "eval/format/hellaswag", "rc %d %s: '%s' / '%s'", rc, e.msg,
	      rc ? "" : t.items[0].ctx[0], rc ? "" : t.items[0].cont[0]);
	if (!rc)
		eval_task_free(&t);

	const char *arc_hf = "{\"question\": \"Which is a gas?\", \"choices\": {\"text\": [\"ice\", "
			     "\"steam\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \"B\"}\n";
	const char *arc_ai2 = "{\"question\": {\"stem\": \"Which is a gas?\", \"choices\": "
			      "[{\"text\": \"ice\", \"label\": \"A\"}, {\"text\": \"steam\", "
			      "\"label\": \"B\"}]}, \"answerKey\": \"B\"}\n";
	eval_task u;
	rc = parse(&t, TASK_ARC, arc_hf, &e) || parse(&u, TASK_ARC, arc_ai2, &e);
	CHECK(!rc && !strcmp(t.items[0].ctx[0], "Question: Which is a gas?\nAnswer:") &&
		      !strcmp(t.items[0].cont[1], " steam") && t.items[0].answer == 1 &&
		      !strcmp(u.items[0].ctx[0], t.items[0].ctx[0]) &&
		      !strcmp(u.items[0].cont[1], " steam") && u.items[0].answer == 1,
	      "eval/format/arc_both_schemas", "rc %d %s", rc, e.msg);
	if (!rc) {
		eval_task_free(&t);
		eval_task_free(&u);
	}

	rc = parse(&t, TASK_BOOLQ,
		   "{\"passage\": \"P.\", \"question\": \"is it\", \"label\": 1}\n"
		   "{\"passage\": \"P.\", \"question\": \"is it\", \"answer\": false}\n",
		   &e);
	CHECK(!rc && !strcmp(t.items[0].ctx[0], "P.\nQuestion: is it?\nAnswer:") &&
		      !strcmp(t.items[0].cont[0], " no") && !strcmp(t.items[0].cont[1], " yes") &&
		      t.items[0].answer == 1 && t.items[1].answer == 0,
	      "eval/format/boolq", "rc %d %s", rc, e.msg);
	if (!rc)
		eval_task_free(&t);

	rc = parse(&t, TASK_WINOGRANDE,
		   "{\"sentence\": \"Ann gave Bo a gift because _ was kind. \", \"option1\": "
		   "\"Ann\", \"option2\": \"Bo\", \"answer\": \"1\"}\n",
		   &e);
	CHECK(!rc && t.kind == EVAL_PARTIAL && t.items[0].n_ctx == 2 &&
		      !strcmp(t.items[0].ctx[1], "Ann gave Bo a gift because Bo") &&
		      !strcmp(t.items[0].cont[0], " was kind.") && t.items[0].answer == 0,
	      "eval/format/winogrande", "rc %d %s", rc, e.msg);
	if (!rc)
		eval_task_free(&t);

	rc = parse(&t, TASK_LAMBADA, "{\"text\": \"he said  to her goodbye\"}\n", &e);
	CHECK(!rc && t.kind == EVAL_CLOZE && !strcmp(t.items[0].ctx[0], "he said  to her") &&
		      !strcmp(t.items[0].cont[0], " goodbye") && t.items[0].answer == -1,
	      "eval/format/lambada", "rc %d %s", rc, e.msg);
	if (!rc)
		eval_task_free(&t);

	/* acc_norm divides by characters (Python's len), not bytes */
	rc = parse(&t, TASK_JSONL,
		   "{\"context\": \"x\", \"choices\": [\"caf\u00e9\", \"\u65e5\u672c\"], "
		   "\"answer\": 0, \"target_delimiter\": \"\"}\n",
		   &e);
	CHECK(!rc && t.items[0].chars[0] == 4 && t.items[0].chars[1] == 2 &&
		      !strcmp(t.items[0].cont[1], "\u65e5\u672c"),
	      "eval/format/characters", "rc %d %s", rc, e.msg);
	if (!rc)
		eval_task_free(&t);

	/* PIQA: the labels from NAME-labels.lst beside NAME.jsonl */
	char dir[] = "/tmp/pp-test-eval.XXXXXX", path[64], lst[80];
	if (mkdtemp(dir)) {
		snprintf(path, sizeof path, "%s/valid.jsonl", dir);
		snprintf(lst, sizeof lst, "%s/valid-labels.lst", dir);
		FILE *f = fopen(path, "w"), *g = fopen(lst, "w");
		if (f && g) {
			fputs("{\"goal\": \"Open a jar\", \"sol1\": \"twist\", \"sol2\": \"pull\"}\n"
			      "{\"goal\": \"Dry hair\", \"sol1\": \"towel\", \"sol2\": \"oven\"}\n",
			      f);
			fputs("1\n0\n", g);
		}
		if (f)
			fclose(f);
		if (g)
			fclose(g);
		rc = eval_task_read(&t, path, TASK_PIQA, 0, &e);
		CHECK(!rc && t.n_items == 2 && t.items[0].answer == 1 && t.items[1].answer == 0 &&
			      !strcmp(t.items[0].ctx[0], "Question: Open a jar\nAnswer:") &&
			      !strcmp(t.items[0].cont[1], " pull") && !strcmp(t.name, "valid"),
		      "eval/format/piqa_labels_file", "rc %d %s", rc, e.msg);
		if (!rc)
			eval_task_free(&t);
		unlink(path);
		unlink(lst);
		rmdir(dir);
	}
}

static void check_errors(void)
{
	static const struct {
		eval_format f;
		const char *text, *want;
	} bad[] = {
		{TASK_JSONL,
		 "{\"context\": \"a\", \"choices\": [\"x\", \"y\"], \"answer\": 0}\nnot json\n",
		 "t.jsonl: line 2: "},
		{TASK_JSONL, "[1, 2]\n", "line 1: not a JSON object"},
		{TASK_JSONL, "{\"context\": \"a\", \"choices\": [\"x\", \"y\"], \"answer\": 2}\n",
		 "line 1: answer 2 is out of range"},
		{TASK_JSONL, "{\"context\": \"a\", \"choices\": [\"x\"], \"answer\": 0}\n",
		 "line 1: 1 choice: a multiple-choice item needs two or more"},
		{TASK_JSONL, "{\"context\": \"a\", \"answer\": 0, \"choices\": [\"x\", 3]}\n",
		 "element 1 is not a string"},
		{TASK_JSONL, "{\"text\": \"oneword\"}\n", "line 1: an empty context"},
		{TASK_JSONL, "{\"prompt\": \"a\"}\n", "line 1: expected {\"context\""},
		{TASK_JSONL,
		 "{\"text\": \"a b\"}\n{\"context\": \"a\", \"choices\": [\"x\", \"y\"], \"answer\": "
		 "0}\n",
		 "line 2: a multiple choice item in a file of cloze items"},
		{TASK_JSONL, "\n\n", "t.jsonl: no items"},
		{TASK_HELLASWAG,
		 "{\"activity_label\": \"a\", \"ctx_a\": \"b\", \"ctx_b\": \"c\"}\n",
		 "line 1: no field \"endings\""},
		{TASK_ARC,
		 "{\"question\": \"q\", \"choices\": {\"text\": [\"a\", \"b\"], \"label\": [\"A\", "
		 "\"B\"]}, \"answerKey\": \"C\"}\n",
		 "answerKey \"C\" is none of the choices' labels"},
		{TASK_PIQA, "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n",
		 "no labels file beside the task file"},
		{TASK_WINOGRANDE,
		 "{\"sentence\": \"no blank\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": "
		 "\"1\"}\n",
		 "has no \"_\" to fill"},
		{TASK_BOOLQ, "{\"passage\": \"p\", \"question\": \"q\"}\n", "no field \"label\""},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		eval_task t;
		pp_err e = {0};
		int rc = parse(&t, bad[i].f, bad[i].text, &e);
		char name[64];
		snprintf(name, sizeof name, "eval/error/%zu_%s", i, eval_format_name(bad[i].f));
		CHECK(rc == PP_EUSAGE && strstr(e.msg, bad[i].want) && strstr(e.msg, "t.jsonl"),
		      name, "rc %d: '%s' (wanted '%s')", rc, e.msg, bad[i].want);
		if (!rc)
			eval_task_free(&t);
	}
	eval_format f;
	pp_err e = {0};
	CHECK(eval_format_parse("mmlu", &f, &e) == PP_EUSAGE && strstr(e.msg, "hellaswag"),
	      "eval/error/format_name", "%s", e.msg);
}

/* a tiny llama with weights off their initial constants */
static int make_stage(pp_config *cfg, pp_stage *s, int T)
{
	char *ov[] = {"model=llama-tiny"};
	pp_err e = {0};
	memset(cfg, 0, sizeof *cfg);
	if (pp_config_load(cfg, NULL, 1, ov, &e))
		return 1;
	stage_spec sp = stage_spec_whole(&cfg->model, 1, T, PP_RECOMPUTE_NONE);
	sp.keep_logits = true;
	if (stage_create(s, &cfg->model, pp_ops_find(PP_DEVICE_CPU, PP_TYPE_REAL), &sp, &e))
		return 1;
	stage_init_params(s, 3);
	pp_real *w = malloc(s->n_elems * sizeof *w);
	s->ops->to_host(w, s->w, s->n_elems * sizeof *w);
	for (size_t j = 0; j < s->n_elems; j++)
		w[j] += (pp_real)(0.05 * rng_normal(rng_key(9, "test_eval"), j));
	s->ops->to_device(s->w, w, s->n_elems * sizeof *w);
	stage_weights_changed(s);
	free(w);
	return 0;
}

/* log-likelihood of tok[from..n) given what comes before, from one full
 * forward over tok[0..n-1) (batch 1, T = n - 1; the stage is T long) */
static double full_ll(pp_stage *s, const int *tok, int n, int from, bool *greedy)
{
	const int V = s->cfg->vocab_size, T = s->spec.T;
	int in[256], tgt[256];
	pp_err e = {0};
	for (int i = 0; i < T; i++) {
		in[i] = i < n - 1 ? tok[i] : 0;
		tgt[i] = PP_IGNORE_INDEX;
	}
	pp_real *x = malloc(sizeof(pp_real) * T * V);
	if (stage_forward(s, 0, in, NULL, tgt, 0, NULL, NULL, NULL, &e)) {
		free(x);
		return NAN;
	}
	s->ops->act_to_host(x, stage_logits(s, 0), (size_t)T * V);
	double ll = 0;
	*greedy = true;
	for (int p = from - 1; p < n - 1; p++) {
		const pp_real *r = x + (size_t)p * V;
		double mx = r[0], sum = 0;
		int best = 0;
		for (int v = 1; v < V; v++)
			if (r[v] > mx)
				mx = r[v], best = v;
		for (int v = 0; v < V; v++)
			sum += exp(r[v] - mx);
		ll += r[tok[p + 1]] - mx - log(sum);
		*greedy = *greedy && best == tok[p + 1];
	}
	free(x);
	return ll;
}

static void ids(tok_ids *t, const int *v, int n)
{
	memset(t, 0, sizeof *t);
	for (int i = 0; i < n; i++)
		tok_ids_push(t, v[i]);
}

static void check_scoring(void)
{
	enum { T = 40 };
	pp_config cfg;
	pp_stage s;
	if (make_stage(&cfg, &s, T)) {
		CHECK(0, "eval/score/setup", "no tiny llama");
		return;
	}
	const int V = cfg.model.vocab_size;
	int ctx[9], conts[4][6], lens[4] = {1, 3, 6, 2};
	for (int i = 0; i < 9; i++)
		ctx[i] = (int)rng_below(21, (uint64_t)i, (uint64_t)V);
	for (int j = 0; j < 4; j++)
		for (int i = 0; i < 6; i++)
			conts[j][i] = (int)rng_below(22, (uint64_t)(10 * j + i), (uint64_t)V);
	/* one item of four continuations of one context, and the same four as
	 * requests of their own contexts (the path of partial items) */
	tok_ids c[4], k[4];
	for (int j = 0; j < 4; j++) {
		ids(&c[j], ctx, 9 - j);
		ids(&k[j], conts[j], lens[j]);
	}
	eval_toks shared = {.n_ctx = 1, .n = 4, .ctx = c, .cont = k};
	eval_toks alone = {.n_ctx = 4, .n = 4, .ctx = c, .cont = k};
	eval_scorer sc = {0};
	eval_scorer_fit(&sc, &shared, 1);
	eval_scorer_fit(&sc, &alone, 1);
	pp_err e = {0};
	eval_result r1[4], r2[4];
	int rc = eval_scorer_open(&sc, &s, &e);
	if (!rc)
		rc = eval_score_item(&sc, &shared, r1, &e);
	if (!rc)
		rc = eval_score_item(&sc, &alone, r2, &e);
	double worst = 0;
	bool same_greedy = true;
	for (int j = 0; !rc && j < 4; j++) {
		int seq[16], n = 0;
		bool g1, g2;
		for (int i = 0; i < 9; i++)
			seq[n++] = ctx[i];
		for (int i = 0; i < lens[j]; i++)
			seq[n++] = conts[j][i];
		const double want1 = full_ll(&s, seq, n, 9, &g1);
		n = 0;
		for (int i = 0; i < 9 - j; i++)
			seq[n++] = ctx[i];
		for (int i = 0; i < lens[j]; i++)
			seq[n++] = conts[j][i];
		const double want2 = full_ll(&s, seq, n, 9 - j, &g2);
		worst = fmax(worst, fabs(r1[j].ll - want1) / fabs(want1));
		worst = fmax(worst, fabs(r2[j].ll - want2) / fabs(want2));
		same_greedy = same_greedy && r1[j].greedy == g1 && r2[j].greedy == g2 &&
			      r1[j].tokens == lens[j];
	}
	CHECK(!rc && worst < 1e-5 && same_greedy, "eval/score/shared_and_alone_vs_full",
	      "rc %d %s: log-likelihoods within %.2g of full forwards", rc, e.msg, worst);
	printf("  scoring: shared context and alone within %.2g of full forwards\n", worst);

	/* three items at once (one forward for all their continuations) give
	 * what each gives alone; the third's context of 12 tokens and its
	 * continuation of 2 fit the cache's 15 positions alone, not with the
	 * others' continuations padded to 5 after it, so it goes into a forward
	 * of its own */
	tok_ids c2[3], k2[3][4];
	eval_toks items[3];
	eval_result rb[3][4], ra[3][4];
	int lctx[12];
	for (int i = 0; i < 12; i++)
		lctx[i] = ctx[i % 9];
	for (int q = 0; q < 3; q++) {
		if (q < 2)
			ids(&c2[q], ctx + q, 9 - 2 * q);
		else
			ids(&c2[q], lctx, 12);
		for (int j = 0; j < 4; j++)
			ids(&k2[q][j], conts[(j + q) % 4], q < 2 ? lens[(j + q) % 4] : 2 - j % 2);
		items[q] = (eval_toks){
			.n_ctx = 1, .n = q < 2 ? 4 : 2, .ctx = &c2[q], .cont = k2[q]};
	}
	const eval_toks *kp[3] = {&items[0], &items[1], &items[2]};
	eval_result *rp[3] = {rb[0], rb[1], rb[2]};
	if (!rc)
		rc = eval_score_items(&sc, kp, rp, 3, &e);
	for (int q = 0; q < 3 && !rc; q++)
		rc = eval_score_item(&sc, &items[q], ra[q], &e);
	double bworst = 0;
	for (int q = 0; q < 3 && !rc; q++)
		for (int j = 0; j < items[q].n; j++) {
			bworst = fmax(bworst, fabs(rb[q][j].ll - ra[q][j].ll) / fabs(ra[q][j].ll));
			same_greedy = same_greedy && rb[q][j].greedy == ra[q][j].greedy &&
				      rb[q][j].tokens == ra[q][j].tokens;
		}
	CHECK(!rc && bworst < 1e-6 && same_greedy && sc.c.B >= 3 + 8 && sc.c.Tmax == 15,
	      "eval/score/batch_of_items",
	      "rc %d %s: batched within %.2g of one at a time (%d slots)", rc, e.msg, bworst,
	      sc.c.B);
	for (int q = 0; q < 3; q++) {
		tok_ids_free(&c2[q]);
		for (int j = 0; j < 4; j++)
			tok_ids_free(&k2[q][j]);
	}
	eval_scorer_close(&sc);

	/* rolling windows: max_seq_len 128 for llama-tiny, a document of 300
	 * tokens and one of 50 */
	char dir[] = "/tmp/pp-test-eval.XXXXXX", path[64];
	if (!mkdtemp(dir))
		return;
	snprintf(path, sizeof path, "%s/d.h5", dir);
	static char *sources[] = {"x"};
	tokens_info m = {
		.vocab_size = V, .bos_id = 1, .eos_id = 2, .n_sources = 1, .sources = sources};
	snprintf(m.fingerprint, sizeof m.fingerprint, "%064d", 1);
	snprintf(m.kind, sizeof m.kind, "test");
	tokens_write_opts o = {0};
	tokens_writer *w;
	int doc[300];
	for (int i = 0; i < 300; i++)
		doc[i] = 3 + (int)rng_below(23, (uint64_t)i, (uint64_t)(V - 3));
	rc = tokens_create(&w, path, &m, &o, &e) || tokens_add_doc(w, doc, 300, &e) ||
	     tokens_add_doc(w, doc, 50, &e) || tokens_finish(w, NULL, &e);
	eval_ppl p;
	if (!rc)
		rc = eval_perplexity(&s, NULL, path, 0, NULL, false, &p, &e);
	/* the reference: full forwards (a stage of T = 128) over each window;
	 * without a tokenizer the first token is the context */
	pp_stage s2;
	pp_config cfg2;
	double want = 0;
	bool g;
	if (!rc && !make_stage(&cfg2, &s2, 128)) {
		/* doc[0] stands for the prefix: windows predict doc[1..129),
		 * doc[129..257) after doc[128..], doc[257..300) after doc[171..] */
		want -= full_ll(&s2, doc, 129, 1, &g);
		want -= full_ll(&s2, doc + 128, 129, 1, &g);
		want -= full_ll(&s2, doc + 171, 129, 86, &g);
		want -= full_ll(&s2, doc, 50, 1, &g);
		stage_free(&s2);
		pp_config_free(&cfg2);
	}
	CHECK(!rc && p.docs == 2 && p.tokens == 299 + 49 && fabs(p.nll - want) < 1e-5 * want &&
		      fabs(p.loss - p.nll / p.tokens) < 1e-12 && isnan(p.bpb),
	      "eval/perplexity/rolling_windows", "rc %d %s: %ld docs %ld tokens, nll %.9g vs %.9g",
	      rc, e.msg, p.docs, p.tokens, p.nll, want);
	unlink(path);
	rmdir(dir);
	for (int j = 0; j < 4; j++) {
		tok_ids_free(&c[j]);
		tok_ids_free(&k[j]);
	}
	stage_free(&s);
	pp_config_free(&cfg);
}

int main(void)
{
	check_formats();
	check_errors();
	check_scoring();
	TH_EXIT();
}
