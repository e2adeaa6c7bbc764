/* The products' weights stored for decoding (kvcache.h). */
#include <stdlib.h>

#include "internal.h"
#include "kvcache.h"

void stage_unpack_weights(pp_stage *s)
{
	for (int i = 0; s->packed && i < s->n_params; i++)
		if (s->packed[i].owned)
			free(s->packed[i].data);
	free(s->packed);
	s->packed = NULL;
	s->packed_elems = 0;
	s->packed_bytes = 0;
}

/* The stored form of the product whose parameters start at idx and cover
 * oc rows of ic: from `stored` when every part has one format there, else
 * made from the compute copy as fmt. */
static int pack_one(pp_stage *s, int idx, int oc, int ic, int fmt, const stage_stored *stored,
		    pp_err *e)
{
	const pp_ops *o = s->ops;
	pp_packed *pk = &s->packed[idx];
	int have = -1, rc = 0, rows = 0, last = idx;
	for (int i = idx; stored && rows < oc && i < s->n_params; i++, last = i) {
		int f = -1;
		if ((rc = stored->get(stored->ctx, &s->params[i], &f, NULL, e)))
			return rc;
		have = i == idx || f == have ? f : -1;
		rows += (int)(s->params[i].n / (size_t)ic);
		if (have < 0)
			break;
	}
	if (have >= 0 && rows == oc && pp_weights_bytes(have, oc, ic)) {
		const size_t row = pp_weights_bytes(have, 1, ic);
		if (!(pk->data = malloc(pp_weights_bytes(have, oc, ic))))
			return pp_errorf(e, PP_ERUNTIME, "out of memory storing %s",
					 s->params[idx].name);
		pk->fmt = have;
		pk->owned = true;
		for (int i = idx, at = 0; i < last && !rc; i++) {
			rc = stored->get(stored->ctx, &s->params[i], &have,
					 (char *)pk->data + at * row, e);
			at += (int)(s->params[i].n / (size_t)ic);
		}
	} else {
		const size_t nb = pp_weights_bytes(fmt, oc, ic);
		pk->fmt = fmt;
		if (!nb)
			return pp_errorf(e, PP_EUSAGE,
					 "weights=%s: %s has rows of %d, not a multiple of 32",
					 pp_weights_name(fmt), s->params[idx].name, ic);
		if (fmt == PP_WEIGHTS_F32)
			pk->data = W(s, idx);
		else if (!(pk->data = o->pack_weight(W(s, idx), oc, ic, fmt)))
			return pp_errorf(e, PP_ERUNTIME, "out of memory storing %s as %s",
					 s->params[idx].name, pp_weights_name(fmt));
		pk->owned = fmt != PP_WEIGHTS_F32;
	}
	if (!rc) {
		s->packed_bytes += (double)pp_weights_bytes(pk->fmt, oc, ic);
		s->packed_elems += (size_t)oc * ic;
	}
	return rc;
}

int stage_pack_weights(pp_stage *s, int fmt, const stage_stored *stored, pp_err *e)
{
	const pp_model_cfg *m = s->cfg;
	const pp_ops *o = s->ops;
	pp_stage_acts *a = s->acts;
	if (fmt < PP_WEIGHTS_F32 || fmt > PP_WEIGHTS_Q8_0)
		return pp_errorf(e, PP_EUSAGE, "weights: format %d is not one pp makes", fmt);
	if (!o->matmul_packed || (fmt != PP_WEIGHTS_F32 && !o->pack_weight) ||
	    o->act_type != PP_TYPE_REAL)
		return pp_errorf(e, PP_EUSAGE,
				 "weights=%s: the %s backend has no products over "
				 "stored weights",
				 pp_weights_name(fmt), o->name);
	if (s->packed)
		return pp_errorf(e, PP_EUSAGE,
				 "the stage's weights are stored for decoding already");
	const int C = m->d_model, F = s->d_ff, HD = s->n_heads * m->head_dim;
	const int QKV = HD + 2 * s->n_kv_heads * m->head_dim;
	const int UP = m->mlp == PP_MLP_GELU ? F : 2 * F;
	s->packed = calloc((size_t)s->n_params, sizeof *s->packed);
	if (!s->packed)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	s->packed_elems = 0;
	s->packed_bytes = 0;
	int L = s->layer_end - s->layer_begin, rc = 0;
	for (int l = -1; l < L && !rc; l++) {
		/* l = -1: the head */
		const layer_index *li = l < 0 ? NULL : &a->layer[l];
		const int idx[4] = {l < 0 ? a->head_w : li->qkv_w, l < 0 ? -1 : li->o_w,
				    l < 0 ? -1 : li->up_w, l < 0 ? -1 : li->down_w};
		const int oc[4] = {l < 0 ? s->vocab : QKV, C, UP, C};
		const int ic[4] = {C, HD, C, F};
		for (int k = 0; k < 4 && !rc; k++)
			if (idx[k] >= 0)
				rc = pack_one(s, idx[k], oc[k], ic[k], fmt, stored, e);
	}
	if (rc)
		stage_unpack_weights(s);
	return rc;
}
