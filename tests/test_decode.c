/* The cached forward of pp-decode against the training forward: for a tiny
 * model of each dense family, the logits of every position computed with a
 * KV cache (a token at a time, or a prefill then chunks and single tokens)
 * equal those of one forward over the whole sequence, to fp32 round-off.
 * Also: the cache refuses positions past its end and tokens outside the
 * vocabulary, and the sampler's greedy, top-k and top-p cuts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/decode.h"
#include "../libcommon/rng.h"
#include "harness.h"

#define B 2
#define T 12 /* > mistral-tiny's window of 4 */
#define TOL 1e-5

/* norms and biases start constant: noise on every tensor makes each matter */
static void perturb(pp_stage *s)
{
	pp_real *w = malloc(s->n_elems * sizeof *w);
	s->ops->to_host(w, s->w, s->n_elems * sizeof *w);
	for (size_t j = 0; j < s->n_elems; j++)
		w[j] += (pp_real)(0.05 * rng_normal(rng_key(5, "test_decode"), j));
	s->ops->to_device(s->w, w, s->n_elems * sizeof *w);
	stage_weights_changed(s);
	free(w);
}

static double rel(const pp_real *a, const pp_real *b, size_t n)
{
	double d = 0, r = 0;
	for (size_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)b[i] * b[i];
	}
	return sqrt(d / (r > 0 ? r : 1));
}

/* feeds the sequence in chunks of sizes[] (then 1 each) and compares the
 * logits of each chunk's last position with full (B,T,V) */
static double cached_vs_full(pp_stage *s, const int *tok, const pp_real *full, const int *sizes,
			     int n_sizes, int *positions)
{
	const int V = s->cfg->vocab_size;
	pp_kv_cache c;
	pp_err e = {0};
	int n_max = 1;
	for (int i = 0; i < n_sizes; i++)
		n_max = sizes[i] > n_max ? sizes[i] : n_max;
	if (kv_cache_create(&c, s, B, T, n_max, true, &e))
		return INFINITY;
	int *chunk = malloc(sizeof(int) * B * T);
	pp_real *got = malloc(sizeof(pp_real) * B * V), *want = malloc(sizeof(pp_real) * B * V);
	double worst = 0;
	*positions = 0;
	for (int k = 0, pos = 0; pos < T; k++) {
		int n = k < n_sizes ? sizes[k] : 1;
		for (int b = 0; b < B; b++)
			memcpy(chunk + b * n, tok + b * T + pos, sizeof(int) * n);
		if (kv_cache_tokens(s, &c, chunk, n, &e) || stage_forward_cached(s, &c, &e)) {
			worst = INFINITY;
			break;
		}
		pos += n;
		s->ops->act_to_host(got, c.logits, (size_t)B * V);
		for (int b = 0; b < B; b++)
			memcpy(want + (size_t)b * V, full + ((size_t)b * T + pos - 1) * V,
			       sizeof(pp_real) * V);
		double d = rel(got, want, (size_t)B * V);
		worst = d > worst ? d : worst;
		(*positions)++;
	}
	free(chunk);
	free(got);
	free(want);
	kv_cache_free(&c);
	return worst;
}

static void check_family(const char *preset)
{
	char ov[64], name[96];
	snprintf(ov, sizeof ov, "model=%s", preset);
	char *ovs[] = {ov};
	pp_config cfg;
	pp_err e = {0};
	memset(&cfg, 0, sizeof cfg);
	snprintf(name, sizeof name, "decode/%s/setup", preset);
	if (pp_config_load(&cfg, NULL, 1, ovs, &e)) {
		CHECK(0, name, "%s", e.msg);
		return;
	}
	const pp_model_cfg *m = &cfg.model;
	pp_stage s;
	stage_spec sp = stage_spec_whole(m, B, T, false);
	sp.keep_logits = true;
	if (stage_create(&s, m, pp_ops_find("cpu", "fp32"), &sp, &e)) {
		CHECK(0, name, "%s", e.msg);
		pp_config_free(&cfg);
		return;
	}
	stage_init_params(&s, 7);
	perturb(&s);
	const int V = m->vocab_size;
	int tok[B * T], tgt[B * T];
	for (int i = 0; i < B * T; i++) {
		tok[i] = (int)rng_below(11, (uint64_t)i, (uint64_t)V);
		tgt[i] = PP_IGNORE_INDEX;
	}
	pp_real *full = malloc(sizeof(pp_real) * B * T * V);
	int rc = stage_forward(&s, 0, tok, NULL, tgt, 0, NULL, NULL, NULL, &e);
	CHECK(!rc, name, "%s", e.msg);
	s.ops->act_to_host(full, stage_logits(&s, 0), (size_t)B * T * V);

	int n_pos;
	const int one[] = {1}, chunks[] = {5, 3};
	double d = cached_vs_full(&s, tok, full, one, 1, &n_pos);
	snprintf(name, sizeof name, "decode/%s/token_by_token", preset);
	CHECK(d <= TOL && n_pos == T, name, "logits off the full forward by %.3g over %d positions",
	      d, n_pos);
	d = cached_vs_full(&s, tok, full, chunks, 2, &n_pos);
	snprintf(name, sizeof name, "decode/%s/prefill_chunks", preset);
	CHECK(d <= TOL && n_pos == T - 6, name, "logits off the full forward by %.3g", d);
	printf("  %s: cached logits within %.2g of the full forward\n", preset, d);

	/* the cache ends at Tmax, and tokens are checked */
	pp_kv_cache c;
	int bad[B] = {V, 0}, ok[B * 3] = {0};
	rc = kv_cache_create(&c, &s, B, 3, 3, false, &e);
	int r1 = rc ? rc : kv_cache_tokens(&s, &c, bad, 1, &e);
	int r2 = rc ? rc : kv_cache_tokens(&s, &c, ok, 3, &e) || stage_forward_cached(&s, &c, &e);
	int r3 = rc ? rc : kv_cache_tokens(&s, &c, ok, 1, &e);
	snprintf(name, sizeof name, "decode/%s/cache_bounds", preset);
	CHECK(!rc && r1 == PP_EUSAGE && r2 == 0 && r3 == PP_EUSAGE &&
		      strstr(e.msg, "past the KV cache"),
	      name, "rc %d %d %d %d: %s", rc, r1, r2, r3, e.msg);
	kv_cache_free(&c);
	rc = kv_cache_create(&c, &s, 1, m->max_seq_len + 1, 1, false, &e);
	snprintf(name, sizeof name, "decode/%s/context_limit", preset);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "max_seq_len"), name, "rc %d: %s", rc, e.msg);
	free(full);
	stage_free(&s);
	pp_config_free(&cfg);
}

static void check_sampler(void)
{
	const pp_real logits[6] = {1.0f, 3.0f, 2.5f, 3.0f, -1.0f, 0.0f};
	sample_params p = sample_defaults();
	p.temperature = 0;
	CHECK(sample_pick(logits, 6, &p, 0, NULL) == 1, "decode/sample/greedy_lowest_tie",
	      "greedy did not pick the first maximum");
	/* top-k 1 is greedy at any temperature; top-k 3 never draws outside {1, 3, 2} */
	p.temperature = 5;
	p.top_k = 1;
	int only = 1;
	for (int i = 0; i < 200; i++)
		only &= sample_pick(logits, 6, &p, (uint64_t)i, NULL) == 1;
	CHECK(only, "decode/sample/top_k_1", "top-k 1 drew another token");
	p.top_k = 3;
	int in = 1, seen[6] = {0};
	for (int i = 0; i < 2000; i++) {
		int v = sample_pick(logits, 6, &p, (uint64_t)i, NULL);
		seen[v]++;
		in &= v == 1 || v == 2 || v == 3;
	}
	CHECK(in && seen[1] && seen[2] && seen[3], "decode/sample/top_k_3",
	      "draws outside the top 3, or one of them never drawn");
	/* top-p: at temperature 1, tokens 1 and 3 hold 0.35 each: p = 0.5 keeps both */
	p.temperature = 1;
	p.top_k = 0;
	p.top_p = 0.5;
	memset(seen, 0, sizeof seen);
	for (int i = 0; i < 2000; i++)
		seen[sample_pick(logits, 6, &p, (uint64_t)i, NULL)]++;
	CHECK(seen[1] && seen[3] && seen[1] + seen[3] == 2000, "decode/sample/top_p",
	      "top-p 0.5 drew outside tokens 1 and 3 (%d %d of 2000)", seen[1], seen[3]);
	pp_err e = {0};
	p.top_p = 0;
	CHECK(sample_check(&p, &e) == PP_EUSAGE && strstr(e.msg, "--top-p"), "decode/sample/check",
	      "top-p 0 accepted: %s", e.msg);
}

int main(void)
{
	check_family("llama-tiny");
	check_family("mistral-tiny");
	check_family("gemma-tiny");
	check_family("gpt-tiny");
	check_sampler();
	TH_EXIT();
}
