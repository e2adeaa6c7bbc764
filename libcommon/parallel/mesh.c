#include "mesh.h"

#include <stdbool.h>
#include <string.h>

void mesh_groups(const pp_layout *l, mesh_group g[MESH_GROUPS])
{
	const int tp_group = l->pp_rank * l->data + l->data_rank; /* ranks sharing pp and data */
	const int data_group = l->pp_rank * l->tp + l->tp_rank;
	const int pp_group = l->data_rank * l->tp + l->tp_rank;
	const bool end = l->pp_rank == 0 || l->pp_rank == l->pp - 1;
	const mesh_group all[MESH_GROUPS] = {
		{"tp", tp_group, l->tp, l->tp_rank},
		{"data", data_group, l->data, l->data_rank},
		{"pp", pp_group, l->pp, l->pp_rank},
		{"tied", end && l->pp > 1 ? pp_group : PP_COMM_NOCOLOR, 2, l->pp_rank ? 1 : 0},
		{"ep", data_group * l->data + l->data_rank / l->ep, l->ep, l->ep_rank},
		{"edp", data_group * l->ep + l->ep_rank, l->data / l->ep, l->data_rank / l->ep},
		{"fsdp", data_group * l->data + l->data_rank / l->fsdp, l->fsdp, l->fsdp_rank},
		{"rep", data_group * l->fsdp + l->fsdp_rank, l->data / l->fsdp,
		 l->data_rank / l->fsdp},
	};
	memcpy(g, all, sizeof all);
}

int mesh_split(pp_mesh *m, const pp_layout *l, pp_comm *world, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->world_comm = world;
	if (!world)
		return 0;
	pp_comm **out[MESH_GROUPS] = {&m->tp_comm, &m->data_comm, &m->pp_comm,   &m->tied_comm,
				      &m->ep_comm, &m->edp_comm,  &m->fsdp_comm, &m->rep_comm};
	mesh_group g[MESH_GROUPS];
	mesh_groups(l, g);
	for (int i = 0; i < MESH_GROUPS; i++) {
		pp_comm *c = NULL;
		int rc = comm_split(world, g[i].color, g[i].key, g[i].name, &c, e);
		if (rc)
			return rc;
		if (c && g[i].size == 1) {
			comm_free(c);
			c = NULL;
		}
		*out[i] = c;
	}
	return 0;
}

void mesh_free(pp_mesh *m)
{
	pp_comm *c[] = {m->rep_comm,  m->fsdp_comm, m->edp_comm,  m->ep_comm,
			m->tied_comm, m->pp_comm,   m->data_comm, m->tp_comm};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++)
		comm_free(c[i]);
	memset(m, 0, sizeof *m);
}
