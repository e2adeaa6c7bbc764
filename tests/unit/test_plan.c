/* plan: parameter counts of published models, the MFU FLOP formula, per-rank
 * memory planning, the device peak table and the report. Configs are built
 * by hand so that the test depends on config.h's structs only. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../libcommon/config/hparams.h"
#include "../../libcommon/model/model.h"
#include "../../libcommon/parallel/fsdp.h"
#include "../../libcommon/plan/plan.h"
#include "../tools/harness.h"

static pp_model_cfg llama(const char *name, int C, int Hq, int Hkv, int F, int L, int V)
{
	pp_model_cfg m = {0};
	snprintf(m.preset, sizeof m.preset, "%s", name);
	m.family = PP_FAMILY_LLAMA;
	m.d_model = C;
	m.n_heads = Hq;
	m.n_kv_heads = Hkv;
	m.head_dim = C / Hq;
	m.d_ff = F;
	m.n_layers = L;
	m.vocab_size = V;
	m.max_seq_len = 4096;
	m.mlp = PP_MLP_SWIGLU;
	m.norm = PP_NORM_RMS;
	m.norm_eps = 1e-5;
	m.pos = PP_POS_ROPE;
	m.rope_theta = 10000;
	m.moe_every = 1;
	m.init_std = 0.02;
	return m;
}

static pp_model_cfg gpt2_124m(void)
{
	pp_model_cfg m = {0};
	snprintf(m.preset, sizeof m.preset, "gpt2-124m");
	m.family = PP_FAMILY_GPT;
	m.d_model = 768;
	m.n_heads = 12;
	m.n_kv_heads = 12;
	m.head_dim = 64;
	m.d_ff = 3072;
	m.n_layers = 12;
	m.vocab_size = 50257;
	m.max_seq_len = 1024;
	m.mlp = PP_MLP_GELU;
	m.norm = PP_NORM_LAYER;
	m.pos = PP_POS_LEARNED;
	m.tied_embeddings = true;
	m.bias = true;
	m.moe_every = 1;
	return m;
}

static pp_model_cfg gemma_2b(int V)
{
	pp_model_cfg m = llama("gemma-2b", 2048, 8, 1, 16384, 18, V);
	m.family = PP_FAMILY_GEMMA;
	m.head_dim = 256;
	m.mlp = PP_MLP_GEGLU;
	m.norm_offset = 1;
	m.tied_embeddings = true;
	m.embed_scale = true;
	return m;
}

static pp_config run_cfg(pp_model_cfg m)
{
	pp_config c = {0};
	c.model = m;
	c.global_batch = 8;
	c.microbatch = 2;
	c.seq_len = 256;
	c.pp = c.dp = c.fsdp = c.tp = c.ep = 1;
	c.microbatches = 4;
	c.virtual_stages = 1;
	c.schedule = SCHED_1F1B;
	c.dtype = PP_TYPE_REAL;
	return c;
}

static void check_count(const char *name, const pp_model_cfg *m, long long want)
{
	plan_counts n;
	plan_param_count(m, &n);
	long long parts = n.embedding + n.attention + n.mlp + n.router + n.norms + n.head;
	CHECK(n.total == want && parts == want, name, "total %lld, components sum %lld, want %lld",
	      (long long)n.total, parts, want);
}

static void test_counts(void)
{
	pp_model_cfg l7 = llama("llama2-7b", 4096, 32, 32, 11008, 32, 32000);
	pp_model_cfg l13 = llama("llama2-13b", 5120, 40, 40, 13824, 40, 32000);
	pp_model_cfg l70 = llama("llama2-70b", 8192, 64, 8, 28672, 80, 32000);
	pp_model_cfg mis = llama("mistral-7b", 4096, 32, 8, 14336, 32, 32000);
	pp_model_cfg mix = mis;
	mix.n_experts = 8;
	mix.top_k = 2;
	mix.moe_every = 1;
	pp_model_cfg g2 = gpt2_124m();

	/* 32000*4096*2 + 32*(4*4096^2 + 3*4096*11008 + 2*4096) + 4096 */
	check_count("plan/count/llama2-7b", &l7, 6738415616LL);
	check_count("plan/count/llama2-13b", &l13, 13015864320LL);
	check_count("plan/count/llama2-70b", &l70, 68976648192LL);
	check_count("plan/count/mistral-7b", &mis, 7241732096LL);
	check_count("plan/count/mixtral-8x7b", &mix, 46702792704LL);
	check_count("plan/count/gpt2-124m", &g2, 124439808LL);
	/* Hugging Face's gemma-2b (vocab_size 256000): 2,506,172,416. The
	 * 256128-row table (256000 padded by 128) adds 128 * 2048 = 262,144. */
	pp_model_cfg gh = gemma_2b(256000), gp = gemma_2b(256128);
	check_count("plan/count/gemma-2b", &gh, 2506172416LL);
	check_count("plan/count/gemma-2b-vocab-256128", &gp, 2506172416LL + 128 * 2048);

	plan_counts n;
	plan_param_count(&l7, &n);
	CHECK(n.per_layer == 4LL * 4096 * 4096 + 3LL * 4096 * 11008 + 2 * 4096 &&
		      n.embedding == 32000LL * 4096 && n.head == n.embedding && n.active == n.total,
	      "plan/count/llama2-7b-components", "per_layer %lld embedding %lld head %lld",
	      (long long)n.per_layer, (long long)n.embedding, (long long)n.head);
	/* N: every layer matrix + head; not wte lookup, norms */
	long long want_n = 32LL * (4LL * 4096 * 4096 + 3LL * 4096 * 11008) + 32000LL * 4096;
	CHECK(n.matmul == want_n, "plan/count/llama2-7b-matmul", "N %lld want %lld",
	      (long long)n.matmul, want_n);

	plan_param_count(&g2, &n);
	/* tied: wte counted once, as the head; wpe, biases, layernorms out */
	want_n = 12LL * (4 * 768 * 768 + 2 * 768 * 3072) + 50257LL * 768;
	CHECK(n.matmul == want_n && n.head == 0 && n.positions == 1024 * 768,
	      "plan/count/gpt2-matmul-tied", "N %lld want %lld head %lld", (long long)n.matmul,
	      want_n, (long long)n.head);

	/* Mixtral: ~12.9B active, N counts 2 of 8 experts + router */
	plan_param_count(&mix, &n);
	long long expert = 3LL * 4096 * 14336;
	CHECK(n.active == 46702792704LL - 32 * 6 * expert && n.active == 12879925248LL,
	      "plan/count/mixtral-active", "active %lld", (long long)n.active);
	want_n = 32LL * ((48LL + 32) * 128 * 4096 + 2 * expert + 8 * 4096) + 32000LL * 4096;
	CHECK(n.matmul == want_n && n.n_moe_layers == 32, "plan/count/mixtral-matmul",
	      "N %lld want %lld, %d MoE layers", (long long)n.matmul, want_n, n.n_moe_layers);

	/* every other layer MoE: layers 1, 3, ..., 11 */
	pp_model_cfg half = g2;
	half.n_experts = 4;
	half.top_k = 2;
	half.moe_every = 2;
	plan_param_count(&half, &n);
	plan_counts dense;
	plan_param_count(&g2, &dense);
	long long mlp1 = 2LL * 768 * 3072 + 3072 + 768;
	CHECK(n.n_moe_layers == 6 && hparams_layer_is_moe(&half, 1) &&
		      !hparams_layer_is_moe(&half, 0) &&
		      n.total == dense.total + 6 * (3 * mlp1 + 4 * 768),
	      "plan/count/moe-every-2", "%d MoE layers, total %lld", n.n_moe_layers,
	      (long long)n.total);
}

static void test_flops(void)
{
	pp_model_cfg l7 = llama("llama2-7b", 4096, 32, 32, 11008, 32, 32000);
	plan_counts n;
	plan_param_count(&l7, &n);
	double want = 6.0 * (double)n.matmul + 6.0 * 32 * 32 * 128 * 4096;
	double got = plan_flops_per_token(&l7, 4096);
	/* 6 * 6,607,077,376 + 6 * 32 * 4096 * 4096 = 4.286e10 */
	CHECK(got == want && fabs(got - 42863689728.0) < 1, "plan/flops/llama2-7b",
	      "%.6g want %.6g", got, want);
	double fwd = plan_flops_per_token_fwd(&l7, 4096);
	CHECK(fabs(3 * fwd - got) < 1 && fwd == 2.0 * (double)n.matmul + 2.0 * 32 * 4096 * 4096,
	      "plan/flops/forward", "fwd %.6g", fwd);
	pp_model_cfg g2 = gpt2_124m();
	plan_param_count(&g2, &n);
	got = plan_flops_per_token(&g2, 1024);
	want = 6.0 * (double)n.matmul + 6.0 * 12 * 768 * 1024;
	CHECK(got == want, "plan/flops/gpt2", "%.6g want %.6g", got, want);

	double mfu = plan_mfu(got, 1e6, 989.4);
	CHECK(fabs(mfu - got * 1e6 / 989.4e12) < 1e-12 && plan_mfu(got, 1e6, 0) == -1,
	      "plan/flops/mfu", "mfu %g", mfu);
}

static void test_memory(void)
{
	pp_err e = {0};
	pp_model_cfg l7 = llama("llama2-7b", 4096, 32, 32, 11008, 32, 32000);
	plan_counts n;
	plan_param_count(&l7, &n);

	pp_config c = run_cfg(l7);
	plan_memory_t m1;
	int rc = plan_memory(&c, &m1, &e);
	CHECK(rc == 0 && m1.param_count == n.total && m1.params == n.total * 4 &&
		      m1.grads == n.total * 4 && m1.optimizer == n.total * 8,
	      "plan/mem/fp32-single-rank", "rc %d %s: params %lld want %lld", rc, e.msg,
	      (long long)m1.params, (long long)n.total * 4);
	CHECK(m1.logits == 2LL * 256 * 32000 * 4 && m1.in_flight == 1 &&
		      m1.total == m1.params + m1.grads + m1.optimizer + m1.activations +
					  m1.scratch + m1.logits,
	      "plan/mem/logits-and-total", "logits %lld in_flight %d", (long long)m1.logits,
	      m1.in_flight);

	/* a large vocabulary: one chunk of as many rows as fit in loss_chunk_mb
	 * (64 MiB: 130 rows of 128256 fp32 logits, rounded down to 128), not
	 * B x T rows */
	pp_config cv = c;
	cv.model.vocab_size = 128256;
	cv.microbatch = 1;
	cv.seq_len = 8192;
	plan_memory_t mv, mv1;
	rc = plan_memory(&cv, &mv, &e);
	cv.loss_chunk_mb = 1;
	rc = rc || plan_memory(&cv, &mv1, &e);
	CHECK(rc == 0 && mv.logits == 128LL * 128256 * 4 && mv1.logits == 2LL * 128256 * 4 &&
		      mv.total - mv1.total == 126LL * 128256 * 4,
	      "plan/mem/logits-chunk", "logits %lld and %lld", (long long)mv.logits,
	      (long long)mv1.logits);

	/* bf16: 2-byte weights, fp32 grads, 12 bytes of optimizer state */
	pp_config cb = c;
	cb.dtype = PP_TYPE_BF16;
	plan_memory_t mb;
	rc = plan_memory(&cb, &mb, &e);
	CHECK(rc == 0 && mb.params == n.total * 2 && mb.grads == n.total * 4 &&
		      mb.optimizer == n.total * 12 && mb.activations < m1.activations,
	      "plan/mem/bf16", "params %lld optimizer %lld", (long long)mb.params,
	      (long long)mb.optimizer);

	/* FP8 on a bf16 table (the CUDA backend's): its products pack both
	 * operands into FP8 bytes, one each, in the backend's scratch, as many
	 * as the largest product needs: the MLP's up product (OC 2 x 11008, C
	 * 4096) with its gradient (N x OC) for the input gradient. Apart from
	 * that, the FP8 bytes are those of fp32's copies at half the size: the
	 * N-row casts of the widest input and output and the weights' copies. */
	pp_config c8 = c, c8b = cb;
	c8.fp8.recipe = c8b.fp8.recipe = PP_FP8_DELAYED;
	c8.fp8.amax_history = c8b.fp8.amax_history = 16;
	plan_memory_t m8, m8b;
	rc = plan_memory(&c8, &m8, &e) || plan_memory(&c8b, &m8b, &e);
	const int64_t N = 2 * 256, copies = N * (11008 + 22016) + n.total;
	const int64_t pack = m8b.fp8 - (m8.fp8 - 2 * copies), up = 22016LL * 4096 + N * 22016;
	CHECK(rc == 0 && pack == up && m8b.fp8 > 0, "plan/mem/fp8-bf16-packs",
	      "rc %d %s: fp8 %lld (fp32 %lld), packs %lld, want %lld", rc, e.msg,
	      (long long)m8b.fp8, (long long)m8.fp8, (long long)pack, (long long)up);
	/* the packs are the backend's one scratch buffer: a rank with two
	 * chunks (interleaved, pp = 4) counts them once, its copies twice */
	pp_config c8i = c8, c8bi = c8b;
	c8i.pp = c8bi.pp = 4;
	c8i.virtual_stages = c8bi.virtual_stages = 2;
	c8i.microbatches = c8bi.microbatches = 8;
	c8i.global_batch = c8bi.global_batch = 16;
	c8i.schedule = c8bi.schedule = SCHED_INTERLEAVED_1F1B;
	rc = plan_memory_rank(&c8i, 0, &m8, &e) || plan_memory_rank(&c8bi, 0, &m8b, &e);
	const int64_t copies2 = 2 * N * (11008 + 22016) + m8b.param_count;
	const int64_t pack2 = m8b.fp8 - (m8.fp8 - 2 * copies2);
	CHECK(rc == 0 && m8b.chunks == 2 && pack2 == up, "plan/mem/fp8-packs-once-per-rank",
	      "rc %d %s: %d chunks, packs %lld, want %lld", rc, e.msg, m8b.chunks, (long long)pack2,
	      (long long)up);

	/* tp = 2 halves every layer matrix and the vocab rows; norms stay */
	pp_config c2 = c;
	c2.tp = 2;
	plan_memory_t m2;
	rc = plan_memory(&c2, &m2, &e);
	long long norms = 32LL * 2 * 4096 + 4096;
	CHECK(rc == 0 && m2.param_count == (n.total - norms) / 2 + norms,
	      "plan/mem/tp2-halves-matrices", "tp2 %lld want %lld", (long long)m2.param_count,
	      (n.total - norms) / 2 + norms);
	CHECK(m2.activations < m1.activations && m2.logits * 2 == m1.logits, "plan/mem/tp2-acts",
	      "acts %lld vs %lld", (long long)m2.activations, (long long)m1.activations);

	/* ZeRO-1 divides the optimizer state only, and adds the fp32 buffer the
	 * parameters are gathered in: every share and its own */
	pp_config cz = c;
	cz.dp = 4;
	cz.global_batch = 32;
	plan_memory_t mz0, mz1;
	plan_memory(&cz, &mz0, &e);
	cz.shard_optimizer = true;
	rc = plan_memory(&cz, &mz1, &e);
	const int64_t share = (mz0.optimizer / 8 + 3) / 4;
	CHECK(rc == 0 && mz1.optimizer == share * 8 + share * 5 * 4 && mz1.params == mz0.params &&
		      mz1.grads == mz0.grads,
	      "plan/mem/shard-optimizer", "sharded %lld unsharded %lld", (long long)mz1.optimizer,
	      (long long)mz0.optimizer);

	/* recompute=full: layer inputs + one layer's full set; minimal keeps
	 * more, minimal_flash more again (attention's output), none the most */
	pp_config cr = c;
	plan_memory_t mr[4];
	for (int p = PP_RECOMPUTE_NONE; p <= PP_RECOMPUTE_MINIMAL_FLASH; p++) {
		cr.recompute = p;
		rc = rc || plan_memory(&cr, &mr[p], &e);
	}
	const int64_t full = mr[PP_RECOMPUTE_FULL].activations;
	const int64_t minimal = mr[PP_RECOMPUTE_MINIMAL].activations;
	const int64_t flash = mr[PP_RECOMPUTE_MINIMAL_FLASH].activations;
	CHECK(rc == 0 && mr[0].activations == m1.activations && full < m1.activations / 4 &&
		      full > m1.activations / 32,
	      "plan/mem/recompute", "recompute %lld none %lld", (long long)full,
	      (long long)m1.activations);
	CHECK(rc == 0 && full < minimal && minimal < flash && flash < m1.activations,
	      "plan/mem/recompute-order", "full %lld minimal %lld minimal_flash %lld none %lld",
	      (long long)full, (long long)minimal, (long long)flash, (long long)m1.activations);

	/* pp = 4, 1f1b: rank 0 keeps 4 microbatches in flight, the last 1;
	 * 34 layers over 4 stages: 9, 9, 8, 8 (remainder to the first) */
	pp_config cp = c;
	cp.model.n_layers = 34;
	cp.pp = 4;
	plan_memory_t r0, r3;
	plan_memory_rank(&cp, 0, &r0, &e);
	rc = plan_memory_rank(&cp, 3, &r3, &e);
	int b2, e2;
	layout_chunk_layers(&cp, 2, &b2, &e2);
	CHECK(rc == 0 && r0.layers == 9 && r3.layers == 8 && b2 == 18 && e2 == 26 &&
		      r0.in_flight == 4 && r3.in_flight == 1 && r0.first && !r0.last && r3.last &&
		      r0.logits == 0 && r3.logits > 0,
	      "plan/mem/pp4-stages", "layers %d/%d in flight %d/%d", r0.layers, r3.layers,
	      r0.in_flight, r3.in_flight);
	plan_memory_t worst;
	plan_memory(&cp, &worst, &e);
	CHECK(worst.total >= r0.total && worst.total >= r3.total, "plan/mem/max-over-stages",
	      "worst rank %d", worst.rank);
	/* gpipe holds all microbatches on every stage */
	pp_config cg = cp;
	cg.schedule = SCHED_GPIPE;
	cg.microbatches = 8;
	plan_memory_t g3;
	plan_memory_rank(&cg, 3, &g3, &e);
	CHECK(g3.in_flight == 8 && g3.activations == 8 * r3.activations && g3.logits == r3.logits,
	      "plan/mem/gpipe", "in flight %d", g3.in_flight);
	/* interleaved, v = 2, pp = 4, m = 8: rank 0 holds 2*3 + 4 + 1 = 11
	 * chunk-microbatches */
	pp_config ci = cp;
	ci.model.n_layers = 32;
	ci.virtual_stages = 2;
	ci.microbatches = 8;
	ci.schedule = SCHED_INTERLEAVED_1F1B;
	plan_memory_t i0;
	rc = plan_memory_rank(&ci, 0, &i0, &e);
	CHECK(rc == 0 && i0.in_flight == 11 && i0.layers == 8 && i0.chunks == 2,
	      "plan/mem/interleaved", "in flight %d layers %d", i0.in_flight, i0.layers);
	/* ZeRO-1 over 4 dp ranks with those two chunks: m and v split over dp,
	 * and the parameter gather's buffer (every share and its own, fp32)
	 * sized for the larger chunk, rank 0's first (the embedding and 4
	 * layers), not for the whole stage */
	pp_config ciz = ci;
	ciz.dp = 4;
	ciz.global_batch = 4 * ci.global_batch;
	ciz.shard_optimizer = true;
	plan_memory_t iz;
	rc = plan_memory_rank(&ciz, 0, &iz, &e);
	const int64_t embed = (int64_t)ci.model.vocab_size * ci.model.d_model / ci.tp;
	const int64_t big = embed + (i0.param_count - embed) / 2;
	CHECK(rc == 0 && ci.tp == 1 && ci.dtype == PP_TYPE_REAL &&
		      iz.optimizer == (i0.param_count + 3) / 4 * 8 + (big + 3) / 4 * 5 * 4,
	      "plan/mem/shard-optimizer-chunks",
	      "rc %d optimizer %lld, stage %lld, largest chunk %lld", rc, (long long)iz.optimizer,
	      (long long)i0.param_count, (long long)big);

	/* expert parallelism: a rank holds E / ep experts of each MoE layer, as
	 * the stage it builds does; ZeRO-1 splits the rest over dp and the
	 * experts over the dp / ep ranks that hold the same ones (here one:
	 * not split), and the gather buffer fits the larger region's shares */
	pp_model_cfg mx = llama("moe", 64, 4, 2, 96, 4, 256);
	mx.family = PP_FAMILY_MIXTRAL;
	mx.n_experts = 4;
	mx.top_k = 2;
	pp_config ce = run_cfg(mx);
	ce.dp = ce.ep = 2;
	ce.global_batch = 16;
	ce.shard_optimizer = true;
	plan_memory_t me;
	rc = plan_memory_rank(&ce, 0, &me, &e);
	stage_spec sp = stage_spec_whole(&mx, 1, 1, PP_RECOMPUTE_NONE);
	sp.ep.rank = 1;
	sp.ep.size = 2;
	pp_stage st;
	rc = rc || stage_describe(&st, &mx, &sp, &e);
	const int64_t ne = rc ? 0 : (int64_t)st.n_elems, ns = rc ? 0 : (int64_t)st.n_shared;
	int64_t gather = (ns + 1) / 2 * 3 > (ne - ns) * 2 ? (ns + 1) / 2 * 3 : (ne - ns) * 2;
	CHECK(rc == 0 && me.param_count == ne && ne > ns &&
		      me.optimizer == ((ns + 1) / 2 + (ne - ns)) * 8 + gather * 4,
	      "plan/mem/ep-matches-stage",
	      "rc %d %s: plan %lld, stage %lld (shared %lld); optimizer %lld", rc, e.msg,
	      (long long)me.param_count, (long long)ne, (long long)ns, (long long)me.optimizer);
	if (!rc)
		stage_free(&st);
	/* FP8 casts an expert product's rows, up to N K ep of them (every
	 * rank of the ep group may send this rank's experts all of theirs):
	 * one more expert per token adds N ep rows to the input's cast (F wide,
	 * the down product's) and the gradient's (2F, the gate|up product's) */
	pp_config ce8 = ce, ce81 = ce;
	ce8.fp8.recipe = ce81.fp8.recipe = PP_FP8_DELAYED;
	ce8.fp8.amax_history = ce81.fp8.amax_history = 16;
	ce81.model.top_k = 1;
	plan_memory_t me8, me81;
	rc = plan_memory_rank(&ce8, 0, &me8, &e) || plan_memory_rank(&ce81, 0, &me81, &e);
	const int64_t rows = (int64_t)ce.microbatch * ce.seq_len * ce.ep;
	CHECK(rc == 0 && me8.fp8 - me81.fp8 == rows * (96 + 2 * 96) * 4, "plan/mem/fp8-experts",
	      "rc %d %s: fp8 %lld at top 2, %lld at top 1, want a difference of %lld", rc, e.msg,
	      (long long)me8.fp8, (long long)me81.fp8, (long long)(rows * (96 + 2 * 96) * 4));

	/* errors are values naming the key */
	pp_config bad = c;
	bad.pp = 64;
	rc = plan_memory(&bad, &m1, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "n_layers"), "plan/mem/too-few-layers", "rc %d: %s",
	      rc, e.msg);
	bad = c;
	bad.dtype = 7;
	rc = plan_memory(&bad, &m1, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "dtype"), "plan/mem/bad-dtype", "rc %d: %s", rc,
	      e.msg);
}

/* Device bytes stage_create allocates, through the CPU ops. */
static size_t counted;
static void *counting_alloc(size_t bytes)
{
	counted += bytes;
	return pp_ops_cpu.alloc(bytes);
}

/* What stage_create allocates for the single rank of c, built as the
 * trainer builds it (its layout's spec). */
static int64_t allocated_bytes(const pp_config *c, pp_err *e)
{
	pp_ops ops = pp_ops_cpu;
	ops.alloc = counting_alloc;
	pp_layout l;
	if (layout_build(&l, c, 0, e))
		return -1;
	stage_spec sp = stage_spec_of(c, &l, 0);
	pp_stage st;
	counted = 0;
	if (stage_create(&st, &c->model, &ops, &sp, e))
		return -1;
	stage_free(&st);
	return (int64_t)counted;
}

/* The plan is what stage_create allocates (model.h: stage_sizes): for every
 * recompute policy, with one microbatch in flight (1f1b) and two (gpipe),
 * with a split backward's stashes (zbh1), for a dense llama and gpt, and a
 * mixtral; the parameters, gradients, activations, scratch and logits of
 * the plan add up to the stage's device bytes exactly. */
static void test_recompute_allocations(void)
{
	pp_model_cfg gpt = gpt2_124m();
	snprintf(gpt.preset, sizeof gpt.preset, "gpt-tiny");
	gpt.d_model = 64;
	gpt.n_heads = gpt.n_kv_heads = 4;
	gpt.head_dim = 16;
	gpt.d_ff = 256;
	gpt.n_layers = 3;
	gpt.vocab_size = 256;
	gpt.max_seq_len = 64;
	gpt.init_std = 0.02;
	gpt.norm_eps = 1e-5;
	pp_model_cfg mix = llama("mixtral-tiny", 64, 4, 2, 96, 3, 256);
	mix.family = PP_FAMILY_MIXTRAL;
	mix.n_experts = 4;
	mix.top_k = 2;
	const pp_model_cfg models[] = {llama("llama-tiny", 64, 4, 2, 96, 3, 256), gpt, mix};
	const struct {
		sched_kind kind;
		int m;
	} runs[] = {{SCHED_1F1B, 1}, {SCHED_GPIPE, 2}, {SCHED_ZBH1, 2}};
	for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
		char why[1024] = "";
		bool same = true;
		for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
			for (int p = PP_RECOMPUTE_NONE; p <= PP_RECOMPUTE_MINIMAL_FLASH; p++) {
				if (p != PP_RECOMPUTE_NONE && schedule_split_backward(runs[k].kind))
					continue;
				pp_err e = {0};
				pp_config c = run_cfg(models[i]);
				c.microbatch = 2;
				c.seq_len = 16;
				c.microbatches = runs[k].m;
				c.global_batch = 2 * runs[k].m;
				c.schedule = runs[k].kind;
				c.recompute = p;
				plan_memory_t pl;
				int64_t got = plan_memory(&c, &pl, &e) ? -1
								       : allocated_bytes(&c, &e);
				int64_t want = pl.params + pl.grads + pl.activations + pl.scratch +
					       pl.logits;
				if (got != want ||
				    pl.in_flight != schedule_peak_held_theory(c.schedule, 1, 1,
									      c.microbatches, 0)) {
					snprintf(
						why + strlen(why), sizeof why - strlen(why),
						"%s %s m=%d: stage %lld, plan %lld (in flight %d) %.100s; ",
						schedule_kind_name(runs[k].kind),
						pp_recompute_name(p), runs[k].m, (long long)got,
						(long long)want, pl.in_flight, e.msg);
					same = false;
				}
			}
		char name[128];
		snprintf(name, sizeof name, "plan/mem/recompute-allocations/%.60s",
			 models[i].preset);
		CHECK(same, name, "%s", why);
	}
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void test_70b_plan(void)
{
	pp_err e = {0};
	pp_config c = run_cfg(llama("llama2-70b", 8192, 64, 8, 28672, 80, 32000));
	c.pp = 8;
	c.tp = 8;
	c.dp = 1;
	c.seq_len = 4096;
	c.microbatch = 1;
	c.microbatches = 16;
	c.global_batch = 16;
	c.dtype = PP_TYPE_BF16;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	double t0 = now();
	int rc = plan_print(f, &c, false, &e);
	int rcj = plan_print(f, &c, true, &e);
	double dt = now() - t0;
	fclose(f);
	CHECK(rc == 0 && rcj == 0 && dt < 1.0, "plan/70b-under-1s", "rc %d/%d %.3f s: %s", rc, rcj,
	      dt, e.msg);
	CHECK(buf && strstr(buf, "68,976,648,192") && strstr(buf, "6*N + 6*L*Hq*D*T") &&
		      strstr(buf, "GiB") && strstr(buf, "\"total\":68976648192"),
	      "plan/report", "report:\n%s", buf ? buf : "(none)");
	/* 70B/64 ranks in bf16: params ~2.1 GiB on the heaviest rank */
	plan_memory_t m;
	plan_memory(&c, &m, &e);
	CHECK(m.layers == 10 && m.params > 2000000000LL && m.params < 2400000000LL,
	      "plan/70b-rank-params", "layers %d params %lld", m.layers, (long long)m.params);
	free(buf);
}

static void test_peaks(void)
{
	struct {
		const char *name;
		double want;
	} t[] = {
		{"NVIDIA H100 80GB HBM3", 989.4},
		{"NVIDIA H100 PCIe", 756},
		{"NVIDIA H200", 989.4},
		{"NVIDIA A100-SXM4-80GB", 312},
		{"NVIDIA A100 80GB PCIe", 312},
		{"NVIDIA RTX A1000", 0},
		{"NVIDIA H100 NVL", 0},
		{"NVIDIA GeForce RTX 4090", 0},
		{"", 0},
	};
	int ok = 1;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (plan_peak_tflops(t[i].name) != t[i].want) {
			ok = 0;
			printf("# %s: %g want %g\n", t[i].name, plan_peak_tflops(t[i].name),
			       t[i].want);
		}
	CHECK(ok && plan_peak_tflops(NULL) == 0, "plan/peak-table", "see lines above");
}

/* pp-init --plan's pipeline facts are the schedule's own theory, for every
 * schedule: the bubble (at the reference costs), each rank's peak
 * activations and weight-gradient stashes, and the memory of the chunk-
 * microbatches the runtime holds. A few values are also given by hand: at
 * p=4, m=8 the 1F1B family's bubble is 3/11, ZB-H1's 3/27. */
static void test_schedule_facts(void)
{
	const double by_hand[SCHED_NKINDS] = {3.0 / 11, 3.0 / 11, 3.0 / 11, 3.0 / 19, 3.0 / 27};
	for (int k = 0; k < SCHED_NKINDS; k++) {
		pp_err e = {0};
		pp_config c = run_cfg(llama("llama-16", 512, 8, 8, 1024, 16, 1000));
		c.schedule = (sched_kind)k;
		c.pp = 4;
		c.virtual_stages = k == SCHED_INTERLEAVED_1F1B ? 2 : 1;
		c.microbatches = 8;
		c.global_batch = 8 * c.microbatch;
		char *buf = NULL, name[64];
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		int rc = plan_print(f, &c, true, &e);
		fclose(f);
		json_t *j = rc ? NULL : json_loads(buf, 0, NULL);
		json_t *layout = json_object_get(j, "layout"), *mem = json_object_get(j, "memory");
		json_t *acts = json_object_get(layout, "peak_activations");
		json_t *stash = json_object_get(layout, "peak_wstash");
		const int p = c.pp, v = c.virtual_stages, m = c.microbatches;
		double bubble = json_real_value(json_object_get(layout, "bubble"));
		double theory = schedule_bubble_theory(c.schedule, p, v, m, NULL);
		snprintf(name, sizeof name, "plan/schedule/%s/bubble",
			 schedule_kind_name(c.schedule));
		CHECK(j && fabs(bubble - theory) < 1e-12 && fabs(theory - by_hand[k]) < 1e-12, name,
		      "rc %d %s: plan %g, theory %g, by hand %g", rc, e.msg, bubble, theory,
		      by_hand[k]);
		bool same = json_array_size(acts) == (size_t)p &&
			    json_array_size(stash) == (size_t)p;
		for (int r = 0; same && r < p; r++)
			same = json_integer_value(json_array_get(acts, r)) ==
				       schedule_peak_act_theory(c.schedule, p, v, m, r) &&
			       json_integer_value(json_array_get(stash, r)) ==
				       schedule_peak_wstash_theory(c.schedule, p, v, m, r);
		int worst = (int)json_integer_value(json_object_get(mem, "rank"));
		int held = (int)json_integer_value(json_object_get(mem, "in_flight"));
		snprintf(name, sizeof name, "plan/schedule/%s/peaks",
			 schedule_kind_name(c.schedule));
		CHECK(same && held == schedule_peak_held_theory(c.schedule, p, v, m, worst) &&
			      held > 0,
		      name, "report %s", buf ? buf : "(none)");
		json_decref(j);
		free(buf);
	}
}

/* fsdp: the shares of parameters, gradients and optimizer state, and beside
 * them the working set: FSDP_BUFS gathered units of the largest (a layer of
 * the 7B) and the units' gradient buffers with the embedding's and head's
 * whole; the traffic of a step */
static void test_fsdp_plan(void)
{
	pp_err e = {0};
	pp_model_cfg l7 = llama("llama2-7b", 4096, 32, 32, 11008, 32, 32000);
	plan_counts n;
	plan_param_count(&l7, &n);
	pp_config c = run_cfg(l7);
	c.fsdp = 8;
	c.global_batch = 16;
	plan_memory_t f;
	int rc = plan_memory(&c, &f, &e);
	const int64_t share = (n.total + 7) / 8, held = 2LL * 32000 * 4096;
	CHECK(rc == 0 && f.params == share * 4 && f.grads == share * 4 &&
		      f.optimizer == share * 8 && f.unit_max == n.per_layer &&
		      f.gathered == FSDP_BUFS * n.per_layer * 4 &&
		      f.grad_buffers == (2LL * FSDP_GBUFS * n.per_layer + held + 4096) * 4,
	      "plan/fsdp/shares-and-working-set", "rc %d %s: params %lld unit %lld", rc, e.msg,
	      (long long)f.params, (long long)f.unit_max);
	/* each microbatch gathers every unit twice; 7/8 of each comes from the others */
	CHECK(f.fsdp_gather == (int64_t)(2.0 * 4 * (double)n.total * 4 * 7 / 8) && f.fsdp_dp == 0 &&
		      f.fsdp_reduce > 0,
	      "plan/fsdp/traffic", "gather %lld", (long long)f.fsdp_gather);
	pp_config h = c;
	h.dp = 2;
	h.global_batch = 32;
	plan_memory_t fh;
	rc = plan_memory(&h, &fh, &e);
	CHECK(rc == 0 && fh.params == f.params && fh.fsdp_dp == (int64_t)(2.0 * share * 4 / 2),
	      "plan/fsdp/hybrid", "dp traffic %lld", (long long)fh.fsdp_dp);
}

int main(void)
{
	test_schedule_facts();
	test_counts();
	test_flops();
	test_memory();
	test_recompute_allocations();
	test_70b_plan();
	test_peaks();
	test_fsdp_plan();
	TH_EXIT();
}
