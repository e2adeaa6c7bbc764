#include "mesh.h"

#include <stdbool.h>
#include <string.h>

int mesh_split(pp_mesh *m, const pp_layout *l, pp_comm *world, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->world_comm = world;
	if (!world)
		return 0;
	const int tp_group = l->pp_rank * l->data + l->data_rank; /* ranks sharing pp and data */
	const int data_group = l->pp_rank * l->tp + l->tp_rank;
	const int pp_group = l->data_rank * l->tp + l->tp_rank;
	const bool end = l->pp_rank == 0 || l->pp_rank == l->pp - 1;
	struct {
		int color, size;
		int key;
		const char *name;
		pp_comm **out;
	} g[] = {
		{tp_group, l->tp, l->tp_rank, "tp", &m->tp_comm},
		{data_group, l->data, l->data_rank, "data", &m->data_comm},
		{pp_group, l->pp, l->pp_rank, "pp", &m->pp_comm},
		{end && l->pp > 1 ? pp_group : PP_COMM_NOCOLOR, 2, l->pp_rank, "tied", &m->tied_comm},
		{data_group * l->data + l->data_rank / l->ep, l->ep, l->ep_rank, "ep", &m->ep_comm},
		{data_group * l->ep + l->ep_rank, l->data / l->ep, l->data_rank / l->ep, "edp",
		 &m->edp_comm},
		{data_group * l->data + l->data_rank / l->fsdp, l->fsdp, l->fsdp_rank, "fsdp",
		 &m->fsdp_comm},
		{data_group * l->fsdp + l->fsdp_rank, l->data / l->fsdp, l->data_rank / l->fsdp, "rep",
		 &m->rep_comm},
	};
	for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
		pp_comm *c = NULL;
		int rc = comm_split(world, g[i].color, g[i].key, g[i].name, &c, e);
		if (rc)
			return rc;
		if (c && g[i].size == 1) {
			comm_free(c);
			c = NULL;
		}
		*g[i].out = c;
	}
	return 0;
}

void mesh_free(pp_mesh *m)
{
	pp_comm *c[] = {m->rep_comm, m->fsdp_comm, m->edp_comm, m->ep_comm,
			m->tied_comm, m->pp_comm, m->data_comm, m->tp_comm};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++)
		comm_free(c[i]);
	memset(m, 0, sizeof *m);
}
