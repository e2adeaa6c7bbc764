#include "decode.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int decode_prompt_ids(const pp_tokenizer *tk, const char *text, int V, tok_ids *ids, pp_err *e)
{
	int rc = 0;
	if (tk) {
		if (tok_adds_bos(tk) && tok_bos(tk) >= 0 && tok_ids_push(ids, tok_bos(tk)))
			return pp_errorf(e, PP_ERUNTIME, "prompt: out of memory");
		rc = tok_encode(tk, text, strlen(text), ids, e);
	} else {
		for (const char *p = text; *p && !rc;) {
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p) {
				while (*end == ' ' || *end == '\t' || *end == '\n')
					end++;
				if (!*end)
					break;
				return pp_errorf(e, PP_EUSAGE,
						 "prompt '%s': without a tokenizer the prompt is token "
						 "ids separated by spaces",
						 text);
			}
			if (v < 0 || v >= V)
				return pp_errorf(e, PP_EUSAGE, "prompt: token %ld is outside [0, %d)", v,
						 V);
			if (tok_ids_push(ids, (int)v))
				return pp_errorf(e, PP_ERUNTIME, "prompt: out of memory");
			p = end;
		}
	}
	if (!rc && ids->n == 0 && tok_ids_push(ids, 0))
		return pp_errorf(e, PP_ERUNTIME, "prompt: out of memory");
	return rc;
}

/* Writes ids as text (or as numbers without a tokenizer); cont says they
 * continue earlier text. */
static int emit(const decode_opts *o, const int *ids, size_t n, bool cont, pp_err *e)
{
	if (!o->out || !n)
		return 0;
	if (!o->tk) {
		for (size_t i = 0; i < n; i++)
			fprintf(o->out, cont || i ? " %d" : "%d", ids[i]);
	} else {
		tok_text t = {0};
		int rc = tok_decode_ex(o->tk, ids, n, cont ? TOK_DECODE_CONTINUE : 0, &t, e);
		if (!rc)
			fwrite(t.s, 1, t.n, o->out);
		tok_text_free(&t);
		if (rc)
			return rc;
	}
	fflush(o->out);
	return 0;
}

/* Keys and values one step reads: per layer and sequence, the window of
 * positions the new token sees (len entries with the new one). */
static double kv_read_bytes(const pp_stage *s, int B, int len)
{
	const pp_model_cfg *m = s->cfg;
	int seen = m->sliding_window > 0 && len > m->sliding_window ? m->sliding_window : len;
	return 2.0 * m->n_layers * B * seen * s->n_kv_heads * m->head_dim *
	       (double)pp_act_size(s->ops);
}

/* Parameters a step reads (their compute copy): every one but the embedding
 * rows it does not look up (the whole table when the head shares it) and the
 * position rows. */
static double param_read_bytes(const pp_stage *s)
{
	const pp_model_cfg *m = s->cfg;
	double n = (double)s->n_elems;
	if (!m->tied_embeddings)
		n -= (double)m->vocab_size * m->d_model;
	if (m->pos == PP_POS_LEARNED)
		n -= (double)m->max_seq_len * m->d_model;
	return n * (double)pp_act_size(s->ops);
}

static bool graphs_off(void)
{
	const char *v = getenv("PP_CUDA_GRAPH");
	return v && !strcmp(v, "0");
}

int decode_generate(pp_stage *s, const int *prompt, int n_prompt, const decode_opts *o, int *ids,
		    decode_stats *st, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *ops = s->ops;
	const int B = o->batch, V = m->vocab_size, W = n_prompt + o->n_new;
	memset(st, 0, sizeof *st);
	st->n_prompt = n_prompt;
	st->batch = B;
	st->param_bytes = param_read_bytes(s);
	if (B < 1 || o->n_new < 1 || n_prompt < 1)
		return pp_errorf(e, PP_EUSAGE, "decode: batch %d, %d new tokens, prompt of %d", B,
				 o->n_new, n_prompt);
	if (n_prompt > m->max_seq_len)
		return pp_errorf(e, PP_EUSAGE,
				 "the prompt is %d tokens, longer than the context of model '%s' "
				 "(max_seq_len=%d)",
				 n_prompt, m->preset, m->max_seq_len);
	if (W - 1 > m->max_seq_len)
		return pp_errorf(e, PP_EUSAGE,
				 "%d new tokens after a prompt of %d need %d positions; the context of "
				 "model '%s' holds %d (max_seq_len): ask for at most %d",
				 o->n_new, n_prompt, W - 1, m->preset, m->max_seq_len,
				 m->max_seq_len - n_prompt + 1);
	int rc = sample_check(&o->sample, e);
	if (rc)
		return rc;
	pp_kv_cache c;
	if ((rc = kv_cache_create(&c, s, B, W - 1, n_prompt, !graphs_off(), e)))
		return rc;
	int *feed = malloc((size_t)B * n_prompt * sizeof(int)), *next = malloc((size_t)B * sizeof(int));
	bool *done = calloc((size_t)B, sizeof(bool));
	pp_real *logits = malloc((size_t)B * V * sizeof(pp_real));
	void *scratch = malloc((size_t)V * (sizeof(int) + sizeof(double)));
	if (!feed || !next || !done || !logits || !scratch) {
		rc = pp_errorf(e, PP_ERUNTIME, "decode: out of memory");
		goto out;
	}
	for (int b = 0; b < B; b++) {
		memcpy(feed + (size_t)b * n_prompt, prompt, (size_t)n_prompt * sizeof(int));
		memcpy(ids + (size_t)b * W, prompt, (size_t)n_prompt * sizeof(int));
	}
	if ((rc = emit(o, prompt, (size_t)n_prompt, false, e)))
		goto out;

	double t0 = now(), kv = 0;
	rc = kv_cache_tokens(s, &c, feed, n_prompt, e);
	if (!rc)
		rc = stage_forward_cached(s, &c, e);
	for (int k = 0; !rc; k++) {
		ops->act_to_host(logits, c.logits, (size_t)B * V);
		int alive = 0;
		for (int b = 0; b < B; b++) {
			int tok = o->eos;
			if (!done[b])
				tok = sample_pick(logits + (size_t)b * V, V, &o->sample,
						  (uint64_t)k * (uint64_t)B + (uint64_t)b, scratch);
			next[b] = tok;
			ids[(size_t)b * W + n_prompt + k] = tok;
			done[b] = done[b] || (o->eos >= 0 && tok == o->eos);
			alive += !done[b];
		}
		st->n_generated = k + 1;
		if (k == 0)
			st->prefill_s = now() - t0;
		if (!done[0] && (rc = emit(o, next, 1, true, e)))
			break;
		if (!alive) {
			st->stopped_at_eos = true;
			break;
		}
		if (k + 1 == o->n_new)
			break;
		if ((rc = kv_cache_tokens(s, &c, next, 1, e)))
			break;
		kv += kv_read_bytes(s, B, c.len + 1);
		rc = stage_forward_cached(s, &c, e);
	}
	if (st->n_generated > 1)
		st->decode_s = now() - t0 - st->prefill_s;
	st->graph = c.graph != NULL;
	st->kv_bytes = st->n_generated > 1 ? kv / (st->n_generated - 1) : 0;
	if (!rc && o->out) {
		fputc('\n', o->out);
		fflush(o->out);
	}
out:
	free(feed);
	free(next);
	free(done);
	free(logits);
	free(scratch);
	kv_cache_free(&c);
	return rc;
}

double decode_prefill_rate(const decode_stats *st)
{
	return st->prefill_s > 0 ? (double)st->n_prompt * st->batch / st->prefill_s : 0;
}

double decode_step_rate(const decode_stats *st)
{
	return st->decode_s > 0 ? (double)(st->n_generated - 1) * st->batch / st->decode_s : 0;
}
