/* The fastest layouts of a model and batch on a cluster (pp-init --search):
 * every pp, tp, dp x fsdp split, ep, microbatch size, schedule (with its
 * virtual stages) and recompute policy that the layout rules take and that
 * fits the GPU's memory by the plan, each simulated (simulate.h). */
#ifndef PP_SIM_SEARCH_H
#define PP_SIM_SEARCH_H

#include <stdbool.h>
#include <stdio.h>

#include "../config/config.h"
#include "cluster.h"
#include "simulate.h"

#define SIM_SEARCH_BEST 10

typedef struct {
	pp_config cfg; /* the layout (a copy of the search's config; owns nothing) */
	sim_result r;
} sim_candidate;

typedef struct {
	int tried, fitting; /* layouts the rules took; of which fit */
	int n;              /* the best, fastest first */
	sim_candidate best[SIM_SEARCH_BEST];
	int smallest_nodes; /* none fits: the fewest nodes where one does (0: none
					      * up to 4096) */
	double seconds;
} sim_search_result;

int sim_search(const pp_config *c, const sim_cluster *cl, int nodes, sim_search_result *out,
	       pp_err *e);
/* The search and its report: the best ten with step time, tokens/s, MFU,
 * memory and the key=value line, or, when nothing fits, the smallest
 * cluster that does. */
int sim_search_print(FILE *f, const pp_config *c, const sim_cluster *cl, int nodes, bool json,
		     pp_err *e);

#endif
