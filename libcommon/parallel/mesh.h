/* The pp x dp x tp mesh: each rank's coordinates and its process groups.
 * tp is innermost (ranks of a tp group are neighbours, on one node), then dp,
 * then pp: rank = (pp_rank * dp + dp_rank) * tp + tp_rank.
 *
 * Here dp counts every rank that takes a part of the batch: the config's
 * dp times its fsdp. Fully sharded data parallelism lives inside dp as its
 * innermost part: fsdp consecutive dp ranks (fsdp_rank = dp_rank % fsdp)
 * form an fsdp group, which shards parameters, gradients and optimizer
 * state between its ranks; the ranks that hold the same shard (the same
 * fsdp_rank: the config's dp of them) form a rep group, over which the
 * shards' gradients are summed. The world is the config's pp x dp x fsdp x
 * tp, MaxText's [data, fsdp, tensor] with pp outermost.
 *
 * Expert parallelism lives inside dp: ep consecutive dp ranks form an ep
 * group, which splits every MoE layer's experts between its ranks (ep_rank =
 * dp_rank % ep) and exchanges token rows among them; the ranks that hold
 * the same experts (the same ep_rank: dp / ep of them) form an edp group,
 * over which the experts' gradients are summed. */
#ifndef PP_MESH_H
#define PP_MESH_H

#include "../comm/comm.h"
#include "../config/config.h"

typedef struct {
	int pp, dp, tp, v; /* sizes; v virtual stages (chunks) per pp rank */
	int rank, world;
	int pp_rank, dp_rank, tp_rank;
	int ep, ep_rank;    /* ep divides dp */
	int fsdp, fsdp_rank; /* fsdp divides dp */
	/* groups (NULL when of size 1, or for tied: when pp == 1) */
	pp_comm *world_comm;
	pp_comm *tp_comm;   /* same pp and dp rank */
	pp_comm *dp_comm;   /* same pp and tp rank */
	pp_comm *pp_comm;   /* same dp and tp rank */
	pp_comm *tied_comm; /* first and last pp rank of a pp group: tied embeddings */
	pp_comm *ep_comm;   /* same pp and tp rank, same dp_rank / ep */
	pp_comm *edp_comm;  /* same pp and tp rank, same ep_rank */
	pp_comm *fsdp_comm; /* same pp and tp rank, same dp_rank / fsdp */
	pp_comm *rep_comm;  /* same pp and tp rank, same fsdp_rank */
} pp_mesh;

/* Coordinates of rank in a world of world ranks; errors when the world size
 * is not pp * dp * fsdp * tp. */
int mesh_init(pp_mesh *m, const pp_config *c, int rank, int world, pp_err *e);
/* Splits world into the groups above (collective over world; world may be
 * NULL for a single process). */
int mesh_split(pp_mesh *m, pp_comm *world, pp_err *e);
void mesh_free(pp_mesh *m);

/* Layers [begin, end) of this rank's local chunk c (virtual stage c * pp + pp_rank). */
void mesh_chunk_layers(const pp_mesh *m, const pp_config *c, int chunk, int *begin, int *end);

#endif
