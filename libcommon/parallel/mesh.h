/* The process groups of a layout (config/layout.h): one communicator per
 * axis of the mesh that this rank shares with others, each NULL when the
 * group has one rank.
 *
 * fsdp and ep groups lie inside the data ranks: an fsdp group is fsdp
 * consecutive data ranks, which shard parameters, gradients and optimizer
 * state between them; the ranks that hold the same shard (the same
 * fsdp_rank: the config's dp of them) form a rep group, over which the
 * shards' gradients are summed. An ep group is ep consecutive data ranks,
 * which split every MoE layer's experts and exchange token rows; the ranks
 * that hold the same experts (the same ep_rank: data / ep of them) form an
 * edp group, over which the experts' gradients are summed. */
#ifndef PP_MESH_H
#define PP_MESH_H

#include "../comm/comm.h"
#include "../config/layout.h"

typedef struct {
	pp_comm *world_comm;
	pp_comm *tp_comm;   /* same pp and data rank */
	pp_comm *data_comm; /* same pp and tp rank: every data rank (dp x fsdp) */
	pp_comm *pp_comm;   /* same data and tp rank */
	pp_comm *tied_comm; /* first and last pp rank of a pp group: tied embeddings (pp > 1) */
	pp_comm *ep_comm;   /* same pp and tp rank, same data_rank / ep */
	pp_comm *edp_comm;  /* same pp and tp rank, same ep_rank */
	pp_comm *fsdp_comm; /* same pp and tp rank, same data_rank / fsdp */
	pp_comm *rep_comm;  /* same pp and tp rank, same fsdp_rank */
} pp_mesh;

/* The groups of l's rank, one per communicator of pp_mesh but world (in
 * its field order): the color its members share (PP_COMM_NOCOLOR: not in
 * one), its size, and this rank's key (its rank in the group). */
enum { MESH_GROUPS = 8 };
typedef struct {
	const char *name;
	int color, size, key;
} mesh_group;
void mesh_groups(const pp_layout *l, mesh_group g[MESH_GROUPS]);

/* Splits world into l's groups (collective over world; world may be NULL
 * for a single process: every group is then NULL). */
int mesh_split(pp_mesh *m, const pp_layout *l, pp_comm *world, pp_err *e);
/* Frees the groups, not world. */
void mesh_free(pp_mesh *m);

#endif
