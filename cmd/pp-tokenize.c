/* pp-tokenize: text files, or JSON lines of text and instruction data,
 * -> a pp-tokens dataset (pp-tokens(5)). */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/log.h"
#include "../libcommon/data/dataset.h"
#include "../libcommon/data/jsonl.h"
#include "../libcommon/tok/chat.h"
#include "../libcommon/tok/tokenizer.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- arguments ---- */

typedef struct {
	const char *tokenizer, *out, *val_fraction, *separator, *seed, *deflate, *format;
	bool per_file, per_line, json, quiet, jsonl;
	int n_inputs;
	char **inputs;
	double fraction;
	uint64_t seed_value;
	int deflate_level;
	docs_mode mode;
} args;

/* cli_parse takes options only: the input files are the arguments that
 * are neither an option nor an option's value ("--" ends the options). */
static int split_inputs(const cli_opt *opts, int argc, char **argv, int *optc, char **optv, args *a)
{
	*optc = 0;
	optv[(*optc)++] = argv[0];
	bool files_only = false;
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i];
		if (!files_only && !strcmp(s, "--")) {
			files_only = true;
			continue;
		}
		if (files_only || s[0] != '-' || !strcmp(s, "-")) {
			a->inputs[a->n_inputs++] = argv[i];
			continue;
		}
		optv[(*optc)++] = argv[i];
		for (const cli_opt *o = opts; o->name; o++)
			if (!strcmp(o->name, s) && o->value && i + 1 < argc)
				optv[(*optc)++] = argv[++i];
	}
	optv[*optc] = NULL;
	return 0;
}

static int check_args(args *a, pp_err *e)
{
	if (!a->tokenizer)
		return pp_errorf(e, PP_EUSAGE, "give --tokenizer FILE (see pp-tokenize --help)");
	if (!a->out)
		return pp_errorf(e, PP_EUSAGE, "give -o OUT.h5 (see pp-tokenize --help)");
	if ((a->per_file + a->per_line + (a->separator != NULL)) > 1)
		return pp_errorf(e, PP_EUSAGE,
				 "--one-doc-per-file, --one-doc-per-line and "
				 "--separator exclude each other");
	if (a->format && strcmp(a->format, "text") && strcmp(a->format, "jsonl"))
		return pp_errorf(e, PP_EUSAGE, "--format '%s': expected text or jsonl", a->format);
	a->jsonl = a->format && !strcmp(a->format, "jsonl");
	if (a->jsonl && (a->per_file || a->per_line || a->separator))
		return pp_errorf(e, PP_EUSAGE,
				 "--%s applies to --format text; in JSON lines each line is a "
				 "document",
				 a->separator  ? "separator"
				 : a->per_line ? "one-doc-per-line"
					       : "one-doc-per-file");
	a->mode = a->per_line ? DOCS_PER_LINE : a->separator ? DOCS_SEPARATOR : DOCS_PER_FILE;
	long deflate = 0;
	if (a->val_fraction &&
	    (cli_double("--val-fraction", a->val_fraction, 0, 1, &a->fraction, e) ||
	     a->fraction == 1))
		return pp_errorf(e, PP_EUSAGE, "--val-fraction '%s': expected a number in [0, 1)",
				 a->val_fraction);
	if (a->seed) {
		char *end;
		a->seed_value = strtoull(a->seed, &end, 10);
		if (end == a->seed || *end || a->seed[0] == '-')
			return pp_errorf(e, PP_EUSAGE, "--seed '%s': expected an integer >= 0",
					 a->seed);
	}
	if (a->deflate && cli_long("--deflate", a->deflate, 0, 9, &deflate, e))
		return PP_EUSAGE;
	a->deflate_level = (int)deflate;
	return 0;
}

/* ---- the inputs: text files or JSON lines ---- */

typedef struct {
	docs_reader *docs;   /* --format text */
	jsonl_reader *jsonl; /* --format jsonl */
	chat_template chat;  /* the tokenizer's (jsonl) */
} inputs;

static uint64_t bytes_read(const inputs *in)
{
	return in->jsonl ? jsonl_bytes_read(in->jsonl) : docs_bytes_read(in->docs);
}

static int64_t bytes_total(const inputs *in)
{
	return in->jsonl ? jsonl_bytes_total(in->jsonl) : docs_bytes_total(in->docs);
}

/* The next document's ids (appended to ids) and, for instruction data, its
 * loss mask (*masked); *got false at the end. */
static int next_doc(inputs *in, const pp_tokenizer *tok, tok_ids *ids, tok_text *mask, bool *masked,
		    bool *got, pp_err *e)
{
	*masked = false;
	if (in->jsonl) {
		jsonl_record rec;
		int rc = jsonl_next(in->jsonl, &rec, got, e);
		if (rc || !*got)
			return rc;
		rc = jsonl_encode(&rec, &in->chat, tok, ids, mask, masked, e);
		return rc ? pp_err_prefix(e, "%s", jsonl_where(in->jsonl)) : 0;
	}
	const char *text;
	size_t len;
	int rc = docs_next(in->docs, &text, &len, got, e);
	return rc || !*got ? rc : tok_encode(tok, text, len, ids, e);
}

/* ---- progress on stderr ---- */

typedef struct {
	double t0, last;
	bool tty;
	uint64_t docs, tokens;
} progress;

static void show(progress *p, const inputs *in, bool final)
{
	double t = now();
	if (!final && t - p->last < (p->tty ? 0.5 : 10.0))
		return;
	p->last = t;
	double mb = (double)bytes_read(in) / 1e6, dt = t - p->t0, rate = dt > 0 ? mb / dt : 0;
	int64_t total = bytes_total(in);
	char docs[32], toks[32], size[96], eta[48] = "";
	log_thousands(docs, sizeof docs, (double)p->docs);
	log_thousands(toks, sizeof toks, (double)p->tokens);
	if (total > 0) {
		snprintf(size, sizeof size, "%.1f of %.1f MB (%.0f%%)", mb, (double)total / 1e6,
			 100.0 * mb / ((double)total / 1e6));
		if (!final && rate > 0) {
			char d[32];
			log_duration(d, sizeof d, ((double)total / 1e6 - mb) / rate);
			snprintf(eta, sizeof eta, ", ETA %s", d);
		}
	} else {
		snprintf(size, sizeof size, "%.1f MB", mb);
	}
	fprintf(stderr, "%spp-tokenize: %s, %.2f MB/s, %s documents, %s tokens%s%s",
		p->tty ? "\r\033[K" : "", size, rate, docs, toks, eta,
		p->tty && !final ? "" : "\n");
	fflush(stderr);
}

/* ---- the work ---- */

static int tokenize(const args *a, const pp_tokenizer *tok, inputs *in, tokens_writer *w,
		    progress *p, pp_err *e)
{
	tok_ids ids = {0};
	tok_text mask = {0};
	int rc = 0;
	for (;;) {
		bool got, masked;
		ids.n = mask.n = 0;
		if ((rc = next_doc(in, tok, &ids, &mask, &masked, &got, e)) || !got)
			break;
		if ((rc = tokens_add_masked(w, ids.ids, masked ? (const uint8_t *)mask.s : NULL,
					    ids.n, e)))
			break;
		p->docs += ids.n > 0;
		p->tokens += ids.n;
		if (interrupted)
			break;
		if (!a->quiet)
			show(p, in, false);
	}
	tok_ids_free(&ids);
	tok_text_free(&mask);
	if (interrupted)
		rc = pp_errorf(e, PP_ERUNTIME, "interrupted; %s not written", a->out);
	if (!rc && !p->tokens)
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s: no text to tokenize (%llu bytes read); %s not written",
			       a->n_inputs ? a->n_inputs == 1 ? a->inputs[0] : "the inputs"
					   : "standard input",
			       (unsigned long long)bytes_read(in), a->out);
	return rc;
}

static void summary(const args *a, const pp_tokenizer *tok, const inputs *in, const tokens_info *m,
		    double seconds)
{
	const uint64_t *docs = m->docs, *toks = m->tokens;
	if (a->json) {
		json_t *o = json_pack(
			"{s:s, s:s, s:I, s:b, s:s, s:s, s:s, s:i, s:s?, s:i, s:I, s:f, s:I, "
			"s:{s:I, s:I}, s:{s:I, s:I}}",
			"output", a->out, "format", PP_TOKENS_FORMAT, "version",
			(json_int_t)m->version, "loss_mask", m->has_mask, "tokenizer", a->tokenizer,
			"tokenizer_kind", tok_kind(tok), "tokenizer_fingerprint",
			tok_fingerprint(tok), "vocab_size", tok_vocab_size(tok), "chat_template",
			in->jsonl ? chat_name(&in->chat) : NULL, "inputs",
			a->n_inputs ? a->n_inputs : 1, "bytes", (json_int_t)bytes_read(in),
			"seconds", seconds, "cut_documents",
			(json_int_t)(in->docs ? docs_cut(in->docs) : 0), "train", "documents",
			(json_int_t)docs[0], "tokens", (json_int_t)toks[0], "val", "documents",
			(json_int_t)docs[1], "tokens", (json_int_t)toks[1]);
		char *s = json_dumps(o, JSON_COMPACT);
		puts(s);
		free(s);
		json_decref(o);
		return;
	}
	char n[4][32];
	log_thousands(n[0], sizeof n[0], (double)docs[0]);
	log_thousands(n[1], sizeof n[1], (double)toks[0]);
	log_thousands(n[2], sizeof n[2], (double)docs[1]);
	log_thousands(n[3], sizeof n[3], (double)toks[1]);
	printf("%s: train %s documents, %s tokens; val %s documents, %s tokens%s\n", a->out, n[0],
	       n[1], n[2], n[3], m->has_mask ? "; with a loss mask" : "");
}

int main(int argc, char **argv)
{
	args a = {0};
	a.inputs = calloc((size_t)argc + 1, sizeof(char *));
	const cli_opt opts[] = {
		{"--tokenizer", "FILE",
		 "tokenizer: SentencePiece .model, tokenizer.json or GPT-2 vocab.json",
		 &a.tokenizer, NULL},
		{"-o", "OUT.h5", "the dataset to write (replaced atomically)", &a.out, NULL},
		{"--val-fraction", "F", "share of documents for /val, in [0, 1) (default 0)",
		 &a.val_fraction, NULL},
		{"--seed", "N", "seeds which documents go to /val (default 0)", &a.seed, NULL},
		{"--one-doc-per-file", NULL, "each input is one document (the default)", NULL,
		 &a.per_file},
		{"--one-doc-per-line", NULL, "each non-empty line is one document", NULL,
		 &a.per_line},
		{"--separator", "STR", "documents end at a line equal to STR", &a.separator, NULL},
		{"--format", "FORMAT",
		 "text (the default) or jsonl: JSON lines of text, prompt/completion or messages "
		 "(.gz and .zst too)",
		 &a.format, NULL},
		{"--deflate", "LEVEL", "compress the tokens, gzip level 1..9 (default 0: off)",
		 &a.deflate, NULL},
		{"--json", NULL, "print the summary as one JSON object", NULL, &a.json},
		{"--quiet", NULL, "no progress on stderr", NULL, &a.quiet},
		{0},
	};
	const cli_spec spec = {
		"pp-tokenize",
		"--tokenizer FILE -o OUT.h5 [--val-fraction F] [--seed N] [--format text|jsonl] ["
		"--separator STR | --one-doc-per-file | --one-doc-per-line] [--json] [FILE...]",
		"Tokenize text files or JSON lines (or standard input) into a pp-tokens dataset.",
		opts,
		false,
		0,
		NULL};
	log_set_prefix("pp-tokenize", 0, 1);
	pp_err e = {0};
	cli_args cargs;
	int optc;
	char **optv = calloc((size_t)argc + 1, sizeof(char *));
	split_inputs(opts, argc, argv, &optc, optv, &a);
	int rc = cli_parse(&spec, optc, optv, &cargs, &e);
	if (rc < 0) {
		free(optv);
		free(a.inputs);
		cli_free(&cargs);
		return 0;
	}
	if (!rc)
		rc = check_args(&a, &e);
	inputs in = {0};
	pp_tokenizer *tok = NULL;
	tokens_writer *w = NULL;
	if (!rc && a.jsonl)
		rc = jsonl_open(&in.jsonl, a.inputs, a.n_inputs, &e);
	else if (!rc)
		rc = docs_open(&in.docs, a.inputs, a.n_inputs, a.mode, a.separator, 0, &e);
	if (!rc)
		rc = tok_load(&tok, a.tokenizer, &e);
	if (!rc && a.jsonl)
		rc = chat_load_beside(&in.chat, a.tokenizer, tok, &e);
	if (!rc) {
		static char *stdin_name[] = {"-"};
		tokens_info m = {
			.vocab_size = tok_vocab_size(tok),
			.bos_id = tok_bos(tok),
			.eos_id = tok_eos(tok),
			.n_sources = a.n_inputs ? a.n_inputs : 1,
			.sources = a.n_inputs ? a.inputs : stdin_name,
		};
		snprintf(m.fingerprint, sizeof m.fingerprint, "%s", tok_fingerprint(tok));
		snprintf(m.kind, sizeof m.kind, "%s", tok_kind(tok));
		tokens_write_opts o = {.val_fraction = a.fraction,
				       .seed = a.seed_value,
				       .deflate = a.deflate_level};
		rc = tokens_create(&w, a.out, &m, &o, &e);
	}
	if (!rc) {
		struct sigaction sa = {.sa_handler = on_signal};
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		progress p = {.t0 = now(), .tty = isatty(2)};
		p.last = p.t0;
		rc = tokenize(&a, tok, &in, w, &p, &e);
		tokens_info m = {0};
		const uint64_t *docs = m.docs;
		if (rc) {
			tokens_abort(w);
		} else {
			rc = tokens_finish(w, &m, &e);
			if (!a.quiet)
				show(&p, &in, true);
		}
		if (!rc && in.docs && docs_cut(in.docs))
			log_info("%llu documents longer than %zu MiB were cut into pieces",
				 (unsigned long long)docs_cut(in.docs), DOCS_MAX_BYTES >> 20);
		/* a split a run cannot read: said now, not when pp-train opens it */
		if (!rc && !docs[0])
			log_info("warning: %s: the train split is empty (%llu documents, all in "
				 "/val at --val-fraction %g); pp-train cannot train on it: lower "
				 "--val-fraction or give more documents",
				 a.out, (unsigned long long)docs[1], a.fraction);
		else if (!rc && a.fraction > 0 && !docs[1])
			log_info("warning: %s: the val split is empty (--val-fraction %g of %llu "
				 "documents); evaluation needs val_data= or more documents",
				 a.out, a.fraction, (unsigned long long)docs[0]);
		if (!rc)
			summary(&a, tok, &in, &m, now() - p.t0);
	}
	tok_free(tok);
	docs_close(in.docs);
	jsonl_close(in.jsonl);
	chat_free(&in.chat);
	free(optv);
	free(a.inputs);
	cli_free(&cargs);
	return rc ? cli_fail(&spec, &e) : 0;
}
