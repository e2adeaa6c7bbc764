#include "mesh.h"

#include <stdio.h>
#include <string.h>

#include "../plan/plan.h"

int mesh_init(pp_mesh *m, const pp_config *c, int rank, int world, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->pp = c->pp;
	m->dp = pp_config_data_ranks(c);
	m->tp = c->tp;
	m->v = c->virtual_stages;
	m->rank = rank;
	m->world = world;
	if (world != pp_config_world(c)) {
		char fsdp[32] = "";
		if (c->fsdp > 1)
			snprintf(fsdp, sizeof fsdp, " fsdp=%d", c->fsdp);
		return pp_errorf(e, PP_EUSAGE,
				 "the layout pp=%d dp=%d%s tp=%d needs %d ranks, but the job has %d%s",
				 c->pp, c->dp, fsdp, c->tp, pp_config_world(c), world,
				 world == 1 ? " (launch with srun --mpi=pmix -n N, or set pp=1 dp=1 fsdp=1 tp=1)"
					    : "");
	}
	m->tp_rank = rank % c->tp;
	m->dp_rank = rank / c->tp % m->dp;
	m->pp_rank = rank / (c->tp * m->dp);
	m->ep = c->ep;
	m->ep_rank = m->dp_rank % c->ep;
	m->fsdp = c->fsdp;
	m->fsdp_rank = m->dp_rank % c->fsdp;
	return 0;
}

void mesh_chunk_layers(const pp_mesh *m, const pp_config *c, int chunk, int *begin, int *end)
{
	plan_chunk_layers(c, chunk * m->pp + m->pp_rank, begin, end);
}

int mesh_split(pp_mesh *m, pp_comm *world, pp_err *e)
{
	m->world_comm = world;
	if (!world)
		return 0;
	const int tp_group = m->pp_rank * m->dp + m->dp_rank; /* ranks sharing pp and dp */
	const int dp_group = m->pp_rank * m->tp + m->tp_rank;
	const int pp_group = m->dp_rank * m->tp + m->tp_rank;
	const bool end = m->pp_rank == 0 || m->pp_rank == m->pp - 1;
	struct {
		int color, size;
		int key;
		const char *name;
		pp_comm **out;
	} g[] = {
		{tp_group, m->tp, m->tp_rank, "tp", &m->tp_comm},
		{dp_group, m->dp, m->dp_rank, "dp", &m->dp_comm},
		{pp_group, m->pp, m->pp_rank, "pp", &m->pp_comm},
		{end && m->pp > 1 ? pp_group : PP_COMM_NOCOLOR, 2, m->pp_rank, "tied", &m->tied_comm},
		{dp_group * m->dp + m->dp_rank / m->ep, m->ep, m->ep_rank, "ep", &m->ep_comm},
		{dp_group * m->ep + m->ep_rank, m->dp / m->ep, m->dp_rank / m->ep, "edp",
		 &m->edp_comm},
		{dp_group * m->dp + m->dp_rank / m->fsdp, m->fsdp, m->fsdp_rank, "fsdp",
		 &m->fsdp_comm},
		{dp_group * m->fsdp + m->fsdp_rank, m->dp / m->fsdp, m->dp_rank / m->fsdp, "rep",
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
			m->tied_comm, m->pp_comm, m->dp_comm, m->tp_comm};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++)
		comm_free(c[i]);
	m->rep_comm = m->fsdp_comm = m->edp_comm = m->ep_comm = NULL;
	m->tied_comm = m->pp_comm = m->dp_comm = m->tp_comm = NULL;
}
