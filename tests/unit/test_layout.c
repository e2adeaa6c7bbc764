/* What each rank holds (libcommon/config/layout.c) and its process groups
 * (libcommon/parallel/mesh.c), over whole worlds of ranks:
 *   - coordinates: every rank once, tp innermost, then the data ranks, then
 *     pp; fsdp and ep groups are consecutive data ranks;
 *   - each group of the mesh has the members its definition names, of its
 *     size, with ranks 0 .. size-1;
 *   - chunk layers cover the model once, the remainder to the first chunks,
 *     or as stage_layers says;
 *   - tp shares: heads, kv heads (replicated when tp exceeds them), MLP
 *     columns and vocabulary rows tile each width; a vocabulary tp does not
 *     divide is refused with the message pp-init and pp-train give;
 *   - element shares (ZeRO-1, fsdp) tile [0, n) in rank order, and a stage
 *     described with fsdp units keeps exactly its rank's share;
 *   - the sequences of a step: every data rank's microbatches are the single
 *     process's microbatches, and together they are the step's sequences;
 *   - each chunk's slots are the schedule's microbatches in flight on it. */
#include <stdio.h>
#include <string.h>

#include "../../libcommon/config/layout.h"
#include "../../libcommon/model/model.h"
#include "../../libcommon/parallel/fsdp.h"
#include "../../libcommon/parallel/mesh.h"
#include "../tools/harness.h"

static pp_config cfg(int pp, int dp, int fsdp, int tp, int ep, int v, int layers)
{
	pp_config c = {0};
	pp_model_cfg *m = &c.model;
	snprintf(m->preset, sizeof m->preset, "test");
	m->family = PP_FAMILY_LLAMA;
	m->d_model = 64;
	m->n_heads = 8;
	m->n_kv_heads = 2;
	m->head_dim = 8;
	m->d_ff = 96;
	m->n_layers = layers;
	m->vocab_size = 256;
	m->max_seq_len = 64;
	m->mlp = PP_MLP_SWIGLU;
	m->norm = PP_NORM_RMS;
	m->norm_eps = 1e-5;
	m->pos = PP_POS_ROPE;
	m->rope_theta = 10000;
	m->moe_every = 1;
	m->init_std = 0.02;
	if (ep > 1) {
		m->n_experts = 4;
		m->top_k = 2;
	}
	c.pp = pp, c.dp = dp, c.fsdp = fsdp, c.tp = tp, c.ep = ep, c.virtual_stages = v;
	c.microbatch = 2;
	c.microbatches = 4 * pp;
	c.global_batch = c.microbatch * c.microbatches * dp * fsdp;
	c.seq_len = 16;
	c.schedule = v > 1 ? SCHED_INTERLEAVED_1F1B : SCHED_1F1B;
	return c;
}

/* every rank's coordinates and groups */
static void check_mesh(const char *name, const pp_config *c)
{
	pp_err e = {0};
	const int world = c->pp * c->dp * c->fsdp * c->tp, data = c->dp * c->fsdp;
	char why[256] = "";
	static pp_layout l[64];
	static mesh_group g[64][MESH_GROUPS];
	int rc = layout_check(c, &e) || layout_check_world(c, world, &e);
	for (int r = 0; !rc && r < world; r++) {
		if ((rc = layout_build(&l[r], c, r, &e)))
			break;
		mesh_groups(&l[r], g[r]);
		const pp_layout *x = &l[r];
		if (x->world != world || x->data != data ||
		    layout_rank_of(c, x->pp_rank, x->data_rank, x->tp_rank) != r ||
		    x->tp_rank != r % c->tp || x->pp_rank != r / (c->tp * data) ||
		    x->fsdp_rank != x->data_rank % c->fsdp || x->ep_rank != x->data_rank % c->ep)
			snprintf(why, sizeof why, "rank %d: pp %d data %d tp %d fsdp %d ep %d", r,
				 x->pp_rank, x->data_rank, x->tp_rank, x->fsdp_rank, x->ep_rank);
	}
	/* members of each group: those sharing its color; they must be the
	 * ranks its definition names, and number size with keys 0 .. size-1 */
	for (int r = 0; !rc && !why[0] && r < world; r++)
		for (int k = 0; k < MESH_GROUPS && !why[0]; k++) {
			const mesh_group *a = &g[r][k];
			if (a->color == PP_COMM_NOCOLOR)
				continue;
			int n = 0, keys = 0;
			for (int q = 0; q < world; q++) {
				if (g[q][k].color != a->color)
					continue;
				const pp_layout *p = &l[q], *me = &l[r];
				bool ok;
				switch (k) {
				case 0:
					ok = p->pp_rank == me->pp_rank &&
					     p->data_rank == me->data_rank;
					break;
				case 1:
					ok = p->pp_rank == me->pp_rank && p->tp_rank == me->tp_rank;
					break;
				case 2:
					ok = p->data_rank == me->data_rank &&
					     p->tp_rank == me->tp_rank;
					break;
				case 3:
					ok = p->data_rank == me->data_rank &&
					     p->tp_rank == me->tp_rank &&
					     (p->pp_rank == 0 || p->pp_rank == c->pp - 1);
					break;
				case 4:
					ok = p->pp_rank == me->pp_rank &&
					     p->tp_rank == me->tp_rank &&
					     p->data_rank / c->ep == me->data_rank / c->ep;
					break;
				case 5:
					ok = p->pp_rank == me->pp_rank &&
					     p->tp_rank == me->tp_rank && p->ep_rank == me->ep_rank;
					break;
				case 6:
					ok = p->pp_rank == me->pp_rank &&
					     p->tp_rank == me->tp_rank &&
					     p->data_rank / c->fsdp == me->data_rank / c->fsdp;
					break;
				default:
					ok = p->pp_rank == me->pp_rank &&
					     p->tp_rank == me->tp_rank &&
					     p->fsdp_rank == me->fsdp_rank;
					break;
				}
				if (!ok)
					snprintf(why, sizeof why,
						 "group %s of rank %d holds rank %d", a->name, r,
						 q);
				n++;
				keys |= 1 << g[q][k].key;
			}
			if (!why[0] && (n != a->size || keys != (1 << n) - 1))
				snprintf(why, sizeof why,
					 "group %s of rank %d: %d members, size %d", a->name, r, n,
					 a->size);
		}
	char full[128];
	snprintf(full, sizeof full, "layout/mesh/%s", name);
	CHECK(!rc && !why[0], full, "%s%s", e.msg, why);
}

static void test_meshes(void)
{
	pp_config c = cfg(2, 2, 1, 2, 1, 1, 4);
	check_mesh("pp2_dp2_tp2", &c);
	c = cfg(2, 2, 2, 2, 1, 1, 4);
	check_mesh("pp2_dp2_fsdp2_tp2", &c);
	c = cfg(1, 4, 1, 1, 2, 1, 4);
	check_mesh("dp4_ep2", &c);
	c = cfg(2, 2, 1, 2, 2, 2, 8);
	check_mesh("pp2_dp2_ep2_tp2_v2", &c);
	c = cfg(4, 1, 1, 1, 1, 1, 4);
	check_mesh("pp4", &c);
}

static void test_chunks(void)
{
	pp_config c = cfg(2, 1, 1, 1, 1, 2, 11); /* 4 chunks of 11 layers: 3 3 3 2 */
	int lb[4], le[4], ok = 1;
	for (int k = 0; k < 4; k++)
		layout_chunk_layers(&c, k, &lb[k], &le[k]);
	for (int k = 0; k < 4; k++)
		ok &= le[k] - lb[k] == (k < 3 ? 3 : 2) && lb[k] == (k ? le[k - 1] : 0);
	ok &= le[3] == 11;
	pp_layout l;
	pp_err e = {0};
	ok &= !layout_build(&l, &c, 1, &e) && l.chunk[0].layer_begin == lb[1] &&
	      l.chunk[1].layer_begin == lb[3];
	CHECK(ok, "layout/chunks/even", "11 layers over 4 chunks: %d-%d %d-%d %d-%d %d-%d", lb[0],
	      le[0], lb[1], le[1], lb[2], le[2], lb[3], le[3]);
	c.n_stage_layers = 4;
	const int given[4] = {1, 4, 4, 2};
	memcpy(c.stage_layers, given, sizeof given);
	ok = 1;
	for (int k = 0, at = 0; k < 4; at += given[k++]) {
		layout_chunk_layers(&c, k, &lb[k], &le[k]);
		ok &= lb[k] == at && le[k] == at + given[k];
	}
	CHECK(ok && !layout_check(&c, &e), "layout/chunks/stage_layers", "%s", e.msg);
	c.stage_layers[3] = 3;
	CHECK(layout_check(&c, &e) == PP_EUSAGE && strstr(e.msg, "adds up to 12 layers"),
	      "layout/chunks/stage_layers_sum", "%s", e.msg);
}

static void test_tp(void)
{
	pp_config c = cfg(1, 1, 1, 4, 1, 1, 2); /* 8 q heads, 2 kv heads: each kv head on 2 ranks */
	pp_err e = {0};
	int heads = 0, rows = 0, cols = 0, ok = 1;
	for (int r = 0; r < 4; r++) {
		layout_tp t;
		ok &= !layout_tp_share(&c.model, 4, r, &t, &e);
		heads += t.n_heads;
		cols += t.d_ff;
		ok &= t.vocab_begin == rows && t.n_kv_heads == 1 && t.kv_replicas == 2 &&
		      t.kv_block == r / 2;
		rows += t.vocab;
	}
	CHECK(ok && heads == 8 && cols == 96 && rows == 256, "layout/tp/shares",
	      "heads %d cols %d rows %d: %s", heads, cols, rows, e.msg);
	c.model.vocab_size = 255;
	c.tp = 2;
	int rc = layout_check(&c, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "model.vocab_size 255 is not divisible by tp 2"),
	      "layout/tp/vocab_refused", "rc %d: %s", rc, e.msg);
	c = cfg(1, 1, 1, 3, 1, 1, 2);
	rc = layout_check(&c, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "model.n_heads 8 is not divisible by tp 3"),
	      "layout/tp/heads_refused", "rc %d: %s", rc, e.msg);
}

static void test_shares(void)
{
	int ok = 1;
	for (size_t n = 0; n < 40; n++)
		for (int size = 1; size <= 7; size++) {
			size_t at = 0;
			for (int r = 0; r < size; r++) {
				size_t lo, hi;
				layout_share(n, size, r, &lo, &hi);
				ok &= lo == at && hi >= lo && hi - lo <= layout_share_len(n, size);
				at = hi;
			}
			ok &= at == n;
		}
	CHECK(ok, "layout/shares/tile", "shares of n over size ranks do not tile [0, n)");
	/* a stage described for fsdp rank r keeps its share of the buffer */
	pp_config c = cfg(1, 1, 3, 1, 1, 1, 2);
	size_t at = 0;
	ok = 1;
	fsdp_bytes f0 = {0};
	for (int r = 0; r < 3; r++) {
		pp_err e = {0};
		pp_layout l;
		pp_stage st;
		ok &= !layout_build(&l, &c, r, &e);
		stage_spec sp = stage_spec_of(&c, &l, 0);
		sp.units = (stage_units){.size = 3, .rank = l.fsdp_rank};
		if (stage_describe(&st, &c.model, &sp, &e)) {
			ok = 0;
			break;
		}
		ok &= st.w_lo == at && st.w_hi >= st.w_lo &&
		      st.w_hi - st.w_lo <= layout_share_len(st.n_elems, 3);
		at = st.w_hi;
		fsdp_bytes f;
		fsdp_sizes(&st, 1, 2, &f);
		/* the largest unit: a layer or the embedding; the held units: the
		 * embedding and the final norm with the head */
		const size_t emb = st.params[0].n;
		ok &= f.unit_max >= emb && f.gathered == (int64_t)(FSDP_BUFS * f.unit_max * 2);
		if (r == 0)
			f0 = f;
		ok &= f.grad_buffers == f0.grad_buffers;
		ok &= at <= st.n_elems && (r < 2 || at == st.n_elems);
		stage_free(&st);
	}
	CHECK(ok, "layout/shares/fsdp_stage", "the fsdp ranks' shares of a stage do not tile it");
}

/* Every data rank's microbatches are the single process's: microbatch j of
 * the step (B consecutive sequences) on data rank j % ranks. */
static void test_sequences(void)
{
	const int B = 4, ranks = 3, m = 2, G = B * m * ranks;
	int seen[3 * 24] = {0}, ok = 1;
	for (int step = 0; step < 3; step++)
		for (int r = 0; r < ranks; r++) {
			layout_seqs s = {r, ranks, B};
			for (int i = 0; i < B * m; i++) {
				uint64_t pos = (uint64_t)step * B * m + i,
					 x = layout_seq_index(&s, pos);
				const uint64_t mb = x / B, local = i / B;
				ok &= x >= (uint64_t)step * G && x < (uint64_t)(step + 1) * G &&
				      mb % ranks == (uint64_t)r && x % B == (uint64_t)(i % B) &&
				      mb == (uint64_t)step * m * ranks + local * ranks + r;
				seen[x]++;
			}
		}
	for (int x = 0; x < 3 * G; x++)
		ok &= seen[x] == 1;
	layout_seqs one = {0, 1, B};
	for (uint64_t i = 0; i < 100; i++)
		ok &= layout_seq_index(&one, i) == i;
	layout_seqs unit = {1, 4, 1};
	for (uint64_t i = 0; i < 100; i++)
		ok &= layout_seq_index(&unit, i) == i * 4 + 1;
	CHECK(ok, "layout/sequences", "a rank's microbatches are not the single process's");
}

/* The slots of each chunk: the schedule's most microbatches in flight on
 * it; one chunk a rank holds its peak (schedule_peak_held_theory). */
static void test_slots(void)
{
	int ok = 1;
	char why[256] = "";
	for (int k = 0; k < SCHED_NKINDS; k++)
		for (int p = 1; p <= 4; p++)
			for (int m = p; m <= 8; m += p) {
				const int v = k == SCHED_INTERLEAVED_1F1B ? 2 : 1;
				for (int r = 0; r < p; r++) {
					int slots[2] = {0, 0}, total = 0;
					pp_err e = {0};
					if (schedule_slots((sched_kind)k, p, v, m, r, slots, &e)) {
						ok = 0;
						snprintf(why, sizeof why, "%.200s", e.msg);
						continue;
					}
					for (int c = 0; c < v; c++)
						total += slots[c];
					const int held = schedule_peak_held_theory((sched_kind)k, p,
										   v, m, r);
					if (v == 1 ? total != held
						   : total < held || slots[0] < 1 || slots[1] < 1) {
						ok = 0;
						snprintf(why, sizeof why,
							 "%s p=%d m=%d r=%d: slots %d %d, held %d",
							 schedule_kind_name((sched_kind)k), p, m, r,
							 slots[0], slots[1], held);
					}
				}
			}
	CHECK(ok, "layout/slots", "%s", why);
	pp_config c = cfg(2, 1, 1, 1, 1, 2, 4);
	c.microbatches = 4;
	pp_layout l;
	pp_err e = {0};
	int s2[2];
	CHECK(!layout_build(&l, &c, 0, &e) &&
		      !schedule_slots(SCHED_INTERLEAVED_1F1B, 2, 2, 4, 0, s2, &e) &&
		      l.chunk[0].slots == s2[0] && l.chunk[1].slots == s2[1],
	      "layout/slots/chunks", "%s", e.msg);
}

int main(void)
{
	test_meshes();
	test_chunks();
	test_tp();
	test_shares();
	test_sequences();
	test_slots();
	TH_EXIT();
}
