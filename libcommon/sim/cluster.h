/* Cluster descriptions (configs/clusters/NAME.json, pp-init(1) "SIMULATION"):
 * a GPU kind, GPUs per node, the link between the GPUs of a node and the
 * network between nodes, and the efficiencies of pp's kernels on that GPU,
 * which a calibration (sim_calibrate) refines. */
#ifndef PP_SIM_CLUSTER_H
#define PP_SIM_CLUSTER_H

#include <stdbool.h>

#include "../base/error.h"

/* A link: the bus bandwidth a collective reaches over it per GPU (as
 * nccl-tests report it) and the latency of one message. */
typedef struct {
	char name[96];
	double bus_gbps;   /* GB/s */
	double latency_us; /* microseconds */
} sim_link;

/* How fast pp's work runs on the GPU: a matrix product of f FLOPs at
 * gemm_max * f / (f + gemm_half_flops) of the peak, attention at sequence T
 * at attn_max * T / (T + attn_half_seq), everything that streams memory at
 * mem_eff of the HBM bandwidth, and each kernel launch's fixed cost. */
typedef struct {
	double gemm_max, gemm_half_flops;
	double attn_max, attn_half_seq;
	double mem_eff;
	double launch_us;
	char source[256]; /* where the figures come from */
} sim_efficiency;

/* The kernels the predicted system runs: pp's by default. The others
 * describe a system that computes attention with its scores through HBM
 * (XLA's einsums and softmax), or looks its embedding up as a product
 * with one-hot rows (Praxis's lookup_style "matmul"), for comparing the
 * model with that system's published figures (pp-init sim.attention=,
 * sim.embedding=). */
typedef struct {
	bool attention_materialized;
	bool embedding_onehot;
} sim_kernels;

typedef struct {
	char name[64];
	char description[256];
	char gpu[64];
	double bf16_tflops, fp8_tflops; /* dense peaks; fp8 0: none */
	double fp32_tflops;             /* without tensor cores (optional: bf16's / 16) */
	double hbm_gib, hbm_gbps;
	int gpus_per_node;
	sim_link intra, inter;
	sim_efficiency eff;
	sim_kernels kernels;
} sim_cluster;

/* name: a file (a path with '/' or ending in .json) or the name of one in
 * pp_config_dir()/clusters. An unknown name lists the known ones; a file
 * missing a field names it. PP_EUSAGE. */
int sim_cluster_load(const char *name, sim_cluster *c, pp_err *e);

/* Sets one of k's kernels from "sim.attention=fused|materialized" or
 * "sim.embedding=gather|onehot"; PP_EUSAGE naming the key and its values
 * for anything else. */
int sim_kernels_set(sim_kernels *k, const char *key_value, pp_err *e);

/* pp's efficiencies as measured on an H100 (docs/PERFORMANCE.md): the
 * calibration a cluster file without one gets. */
extern const sim_efficiency sim_efficiency_h100;

#endif
