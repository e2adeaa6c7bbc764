/* The CPU backend: C with OpenMP threads and CBLAS matrix products. It is
 * the readable reference that other backends are checked against. */
#include "cpu.h"

/* Defined here, away from every file that calls pp_cpu_expf: where the
 * compiler sees these values it folds them, and the loops stop vectorising
 * (see cpu.h). */
const float pp_cpu_expf_range[2] = {-87.0f, 88.0f};

const pp_ops pp_ops_cpu = {
	.name = "cpu",
	.act_type = PP_TYPE_REAL,
	.alloc = pp_cpu_alloc,
	.free = pp_cpu_free,
	.to_device = pp_cpu_copy,
	.to_host = pp_cpu_copy,
	.zero = pp_cpu_zero,
	.copy2d = pp_cpu_copy2d,
	.to_act = pp_cpu_to_act,
	.act_to_host = pp_cpu_act_to_host,
	.matmul_fwd = pp_cpu_matmul_fwd,
	.add_bias = pp_cpu_add_bias,
	.matmul_bwd = pp_cpu_matmul_bwd,
	.matmul_gelu_fwd = pp_cpu_matmul_gelu_fwd,
	.gelu_matmul_bwd = pp_cpu_gelu_matmul_bwd,
	.embed_fwd = pp_cpu_embed_fwd,
	.embed_bwd = pp_cpu_embed_bwd,
	.rmsnorm_fwd = pp_cpu_rmsnorm_fwd,
	.rmsnorm_bwd = pp_cpu_rmsnorm_bwd,
	.layernorm_fwd = pp_cpu_layernorm_fwd,
	.layernorm_bwd = pp_cpu_layernorm_bwd,
	.rmsnorm_residual_fwd = pp_cpu_rmsnorm_residual_fwd,
	.layernorm_residual_fwd = pp_cpu_layernorm_residual_fwd,
	.rope_fwd = pp_cpu_rope_fwd,
	.rope_bwd = pp_cpu_rope_bwd,
	.attention_fwd = pp_cpu_attention_fwd,
	.attention_bwd = pp_cpu_attention_bwd,
	.kv_append = pp_cpu_kv_append,
	.attention_cached = pp_cpu_attention_cached,
	.glu_fwd = pp_cpu_glu_fwd,
	.glu_bwd = pp_cpu_glu_bwd,
	.gelu_fwd = pp_cpu_gelu_fwd,
	.gelu_bwd = pp_cpu_gelu_bwd,
	.add = pp_cpu_add,
	.add_real = pp_cpu_add_real,
	.scale = pp_cpu_scale,
	.scale_act = pp_cpu_scale_act,
	.dropout = pp_cpu_dropout,
	.fp8_cast = pp_cpu_fp8_cast,
	.absmax = pp_cpu_absmax,
	.fp8_scale = pp_cpu_fp8_scale,
	.fp8_unscale = pp_cpu_fp8_unscale,
	.sumsq = pp_cpu_sumsq,
	.crossentropy = pp_cpu_crossentropy,
	.logsumexp_rows = pp_cpu_logsumexp_rows,
	.softmax_grad = pp_cpu_softmax_grad,
	.moe_route = pp_cpu_moe_route,
	.moe_dispatch = pp_cpu_moe_dispatch,
	.moe_gather = pp_cpu_moe_gather,
	.moe_combine = pp_cpu_moe_combine,
	.moe_gate_grad = pp_cpu_moe_gate_grad,
	.moe_router_bwd = pp_cpu_moe_router_bwd,
	.adamw = pp_cpu_adamw,
#ifndef PP_F64
	.pack_weight = pp_cpu_pack_weight,
	.matmul_packed = pp_cpu_matmul_packed,
#endif
};
