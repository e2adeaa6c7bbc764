/* What each rank holds (see layout.h). */
#include "layout.h"

#include <stdio.h>
#include <string.h>

#define REQUIRE(cond, ...)                                                                         \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return pp_errorf(e, PP_EUSAGE, __VA_ARGS__);                               \
	} while (0)

int layout_tp_share(const pp_model_cfg *m, int tp, int rank, layout_tp *out, pp_err *e)
{
	REQUIRE(tp >= 1 && rank >= 0 && rank < tp, "tensor-parallel rank %d of %d", rank, tp);
	REQUIRE(m->n_heads % tp == 0, "model.n_heads %d is not divisible by tp %d", m->n_heads, tp);
	REQUIRE(m->n_kv_heads % tp == 0 || tp % m->n_kv_heads == 0,
		"model.n_kv_heads %d is not divisible by tp %d (nor tp by it, so kv heads cannot be "
		"replicated)",
		m->n_kv_heads, tp);
	REQUIRE(m->d_ff % tp == 0, "model.d_ff %d is not divisible by tp %d", m->d_ff, tp);
	REQUIRE(m->vocab_size % tp == 0,
		"model.vocab_size %d is not divisible by tp %d (the embedding and the head are split "
		"by rows of the vocabulary)",
		m->vocab_size, tp);
	const bool split = m->n_kv_heads % tp == 0;
	*out = (layout_tp){
		.rank = rank,
		.size = tp,
		.n_heads = m->n_heads / tp,
		.n_kv_heads = split ? m->n_kv_heads / tp : 1,
		.kv_replicas = split ? 1 : tp / m->n_kv_heads,
		.d_ff = m->d_ff / tp,
		.vocab = m->vocab_size / tp,
		.vocab_begin = rank * (m->vocab_size / tp),
	};
	out->kv_block = rank / out->kv_replicas;
	return PP_OK;
}

void layout_experts(const pp_model_cfg *m, int ep, int rank, int *begin, int *n)
{
	*n = m->n_experts > 0 ? m->n_experts / ep : 0;
	*begin = rank * *n;
}

void layout_chunk_layers(const pp_config *c, int chunk, int *begin, int *end)
{
	if (c->n_stage_layers) {
		*begin = 0;
		for (int i = 0; i < chunk; i++)
			*begin += c->stage_layers[i];
		*end = *begin + c->stage_layers[chunk];
		return;
	}
	int n_layers = c->model.n_layers, n_chunks = c->pp * c->virtual_stages;
	int base = n_layers / n_chunks, rem = n_layers % n_chunks;
	*begin = chunk * base + (chunk < rem ? chunk : rem);
	*end = *begin + base + (chunk < rem);
}

int layout_check_recompute(int recompute, sched_kind schedule, pp_err *e)
{
	REQUIRE(recompute >= PP_RECOMPUTE_NONE && recompute <= PP_RECOMPUTE_MINIMAL_FLASH,
		"recompute policy %d: expected a PP_RECOMPUTE_*", recompute);
	REQUIRE(recompute == PP_RECOMPUTE_NONE || !schedule_split_backward(schedule),
		"recompute=%s and a split backward pass (schedule %s) do not combine: use "
		"recompute=none",
		pp_recompute_name(recompute), schedule_kind_name(schedule));
	return PP_OK;
}

int layout_check(const pp_config *c, pp_err *e)
{
	const pp_model_cfg *m = &c->model;
	REQUIRE(c->pp >= 1 && c->dp >= 1 && c->fsdp >= 1 && c->tp >= 1 && c->ep >= 1,
		"mesh pp=%d dp=%d fsdp=%d tp=%d ep=%d: each must be >= 1", c->pp, c->dp, c->fsdp,
		c->tp, c->ep);
	REQUIRE(c->virtual_stages <= LAYOUT_MAX_CHUNKS, "virtual_stages=%d: at most %d",
		c->virtual_stages, LAYOUT_MAX_CHUNKS);
	if (schedule_check(c->schedule, c->pp, c->virtual_stages, c->microbatches, -1, e))
		return pp_err_prefix(e, "schedule=%s pp=%d virtual_stages=%d microbatches=%d",
				     schedule_kind_name(c->schedule), c->pp, c->virtual_stages,
				     c->microbatches);
	REQUIRE((long)c->pp * c->virtual_stages <= m->n_layers,
		"model.n_layers %d is fewer than pp * virtual_stages = %d * %d pipeline stages",
		m->n_layers, c->pp, c->virtual_stages);
	long sum = 0; /* up to PP_MAX_CHUNKS counts of up to INT_MAX each */
	for (int i = 0; i < c->n_stage_layers; i++)
		sum += c->stage_layers[i];
	REQUIRE(!c->n_stage_layers || c->n_stage_layers == c->pp * c->virtual_stages,
		"stage_layers lists %d stages, but pp * virtual_stages = %d * %d",
		c->n_stage_layers, c->pp, c->virtual_stages);
	REQUIRE(!c->n_stage_layers || sum == m->n_layers,
		"stage_layers adds up to %ld layers, but model.n_layers is %d", sum, m->n_layers);
	layout_tp share;
	int rc = layout_tp_share(m, c->tp, 0, &share, e);
	if (rc)
		return rc;
	REQUIRE(c->ep == 1 || m->n_experts > 0,
		"ep %d: expert parallelism needs a mixture of experts (model.n_experts is 0)",
		c->ep);
	REQUIRE(c->dp % c->ep == 0, "ep %d does not divide dp %d (the ep groups lie inside dp)",
		c->ep, c->dp);
	REQUIRE(m->n_experts % c->ep == 0, "ep %d does not divide model.n_experts %d", c->ep,
		m->n_experts);
	REQUIRE(c->fsdp == 1 || m->n_experts == 0,
		"fsdp %d: a mixture of experts shards its experts with ep and the rest with "
		"shard_optimizer (ZeRO-1); fsdp shards dense models",
		c->fsdp);
	return layout_check_recompute(c->recompute, c->schedule, e);
}

int layout_check_world(const pp_config *c, int world, pp_err *e)
{
	const int want = pp_config_world(c);
	if (world == want)
		return PP_OK;
	char fsdp[32] = "";
	if (c->fsdp > 1)
		snprintf(fsdp, sizeof fsdp, " fsdp=%d", c->fsdp);
	return pp_errorf(
		e, PP_EUSAGE, "the layout pp=%d dp=%d%s tp=%d needs %d ranks, but the job has %d%s",
		c->pp, c->dp, fsdp, c->tp, want, world,
		world == 1 ? " (launch with srun --mpi=pmix -n N, or set pp=1 dp=1 fsdp=1 tp=1)"
			   : "");
}

int layout_rank_of(const pp_config *c, int pp_rank, int data_rank, int tp_rank)
{
	return (pp_rank * pp_config_data_ranks(c) + data_rank) * c->tp + tp_rank;
}

int layout_build(pp_layout *l, const pp_config *c, int rank, pp_err *e)
{
	memset(l, 0, sizeof *l);
	const int data = pp_config_data_ranks(c), world = pp_config_world(c);
	REQUIRE(rank >= 0 && rank < world, "rank %d outside the layout's %d ranks", rank, world);
	*l = (pp_layout){.pp = c->pp,
			 .dp = c->dp,
			 .fsdp = c->fsdp,
			 .tp = c->tp,
			 .ep = c->ep,
			 .v = c->virtual_stages,
			 .data = data,
			 .world = world,
			 .rank = rank,
			 .schedule = c->schedule,
			 .microbatches = c->microbatches,
			 .microbatch = c->microbatch,
			 .seq_len = c->seq_len,
			 .split_backward = schedule_split_backward(c->schedule)};
	l->tp_rank = rank % c->tp;
	l->data_rank = rank / c->tp % data;
	l->pp_rank = rank / (c->tp * data);
	l->fsdp_rank = l->data_rank % c->fsdp;
	l->ep_rank = l->data_rank % c->ep;
	int rc = layout_tp_share(&c->model, c->tp, l->tp_rank, &l->tp_share, e);
	if (rc)
		return rc;
	layout_experts(&c->model, c->ep, l->ep_rank, &l->expert_begin, &l->n_experts);
	l->seqs = (layout_seqs){l->data_rank, data, c->microbatch};
	int slots[LAYOUT_MAX_CHUNKS];
	if ((rc = schedule_slots(c->schedule, c->pp, l->v, c->microbatches, l->pp_rank, slots, e)))
		return rc;
	for (int k = 0; k < l->v; k++) {
		layout_chunk_layers(c, k * c->pp + l->pp_rank, &l->chunk[k].layer_begin,
				    &l->chunk[k].layer_end);
		l->chunk[k].slots = slots[k];
	}
	return PP_OK;
}

size_t layout_share_len(size_t n, int size) { return (n + (size_t)size - 1) / (size_t)size; }

void layout_share(size_t n, int size, int r, size_t *lo, size_t *hi)
{
	const size_t share = layout_share_len(n, size);
	*lo = share * (size_t)r < n ? share * (size_t)r : n;
	*hi = *lo + share < n ? *lo + share : n;
}

uint64_t layout_seq_index(const layout_seqs *s, uint64_t i)
{
	const uint64_t B = (uint64_t)s->group, mb = i / B;
	return (mb * (uint64_t)s->ranks + (uint64_t)s->rank) * B + i % B;
}
