/* pp-init: writes the step-0 checkpoint, or plans memory and FLOPs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/log.h"
#include "../libcommon/ckpt/ckpt.h"
#include "../libcommon/plan/plan.h"
#include "../libcommon/plan/preflight.h"
#include "../libcommon/sim/calibrate.h"
#include "../libcommon/sim/search.h"
#include "../libcommon/sim/simulate.h"
#include "../libcommon/train/train.h"

static int write_step0(pp_config *cfg, pp_err *e)
{
	int rc = ckpt_refuse_existing(cfg->run_dir, "pp-init", e);
	if (rc)
		return rc;
	trainer t;
	rc = trainer_open(&t, cfg, true, e);
	if (!rc && !(rc = trainer_init(&t, e)))
		rc = trainer_save(&t, e);
	if (!rc)
		printf("%s/checkpoints/step_00000000 (%zu parameters, seed %llu)\n", cfg->run_dir,
		       t.chunks[0].n_elems, (unsigned long long)cfg->seed);
	trainer_close(&t);
	return rc;
}

/* What cluster=X, nodes=N and the sim.* keys say: where the run would go
 * and what would run it, not the run. */
typedef struct {
	const char *cluster;
	int nodes;
	const char *kernels[8]; /* sim.KEY=VALUE */
	int n_kernels;
} sim_args;

/* Takes them out of the overrides. */
static int take_sim_args(cli_args *a, sim_args *s, pp_err *e)
{
	int k = 0;
	for (int i = 0; i < a->n_overrides; i++) {
		char *o = a->overrides[i];
		if (!strncmp(o, "cluster=", 8)) {
			s->cluster = o + 8;
		} else if (!strncmp(o, "nodes=", 6)) {
			char *end;
			long n = strtol(o + 6, &end, 10);
			if (*end || n < 1 || n > 1 << 20)
				return pp_errorf(e, PP_EUSAGE,
						 "nodes=%s: expected a positive integer", o + 6);
			s->nodes = (int)n;
		} else if (!strncmp(o, "sim.", 4)) {
			if (s->n_kernels == 8)
				return pp_errorf(e, PP_EUSAGE, "%s: too many sim.* keys", o);
			s->kernels[s->n_kernels++] = o;
		} else {
			a->overrides[k++] = o;
		}
	}
	a->n_overrides = k;
	return 0;
}

static int simulate(const pp_config *cfg, const sim_args *s, bool search, bool json,
		    const char *calibrate, pp_err *e)
{
	sim_cluster cl;
	if (!s->cluster)
		return pp_errorf(e, PP_EUSAGE, "--%s needs cluster=NAME (or cluster=FILE)",
				 calibrate ? "calibrate"
				 : search  ? "search"
					   : "simulate");
	int rc = sim_cluster_load(s->cluster, &cl, e);
	for (int i = 0; !rc && i < s->n_kernels; i++)
		rc = sim_kernels_set(&cl.kernels, s->kernels[i], e);
	if (!rc && calibrate && !(rc = sim_calibrate(cfg, &cl, calibrate, stderr, e)))
		return sim_cluster_write(stdout, &cl, e);
	if (rc || search)
		return rc ? rc : sim_search_print(stdout, cfg, &cl, s->nodes, json, e);
	sim_result r;
	if (!(rc = sim_step(cfg, &cl, s->nodes, NULL, &r, e)))
		rc = sim_print(stdout, cfg, &cl, &r, json, e);
	return rc;
}

int main(int argc, char **argv)
{
	bool plan = false, json = false, check = false, sim = false, search = false;
	const char *calibrate = NULL;
	sim_args sa = {0};
	const char *out = NULL;
	const cli_opt opts[] = {
		{"-o", "RUNDIR", "write RUNDIR/checkpoints/step_00000000 (sets run_dir)", &out,
		 NULL},
		{"--plan", NULL, "print parameters, FLOPs and per-rank memory; allocate nothing",
		 NULL, &plan},
		{"--json", NULL, "with --plan, --simulate or --search: one JSON object on stdout",
		 NULL, &json},
		{"--simulate", NULL,
		 "predict the step time of the layout on cluster=NAME (nodes=N), with its breakdown",
		 NULL, &sim},
		{"--search", NULL,
		 "the fastest layouts that fit nodes=N of cluster=NAME, best first", NULL, &search},
		{"--calibrate", "PROFILE",
		 "fit cluster=NAME's efficiencies and links to the profiles (a file or a run's "
		 "profile/) of the configured run, or to its per-op table (PP_CUDA_PROFILE=1); "
		 "print the calibrated cluster",
		 &calibrate, NULL},
		{"--check", NULL,
		 "check the allocation (run under srun): wiring, devices, collectives, run_dir, memory",
		 NULL, &check},
		{0},
	};
	const cli_spec spec = {
		"pp-init",
		"--cfg FILE [key=value ...] (-o RUNDIR | --plan [--json] | --check | --simulate "
		"cluster=NAME [nodes=N] [--json] | --search cluster=NAME nodes=N [--json] | "
		"--calibrate PROFILE cluster=NAME)",
		"Write a seeded step-0 checkpoint, plan a layout's memory and FLOPs, predict its step "
		"time on a cluster or search for the fastest, or check an allocation.",
		opts,
		true,
		0,
		NULL};
	log_set_prefix("pp-init", 0, 1);
	pp_err e = {0};
	cli_args args;
	pp_config cfg = {0};
	char *run_override = NULL;
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0)
		return 0;
	const bool cal = calibrate != NULL;
	if (!rc && !plan && !check && !sim && !search && !cal && !out)
		rc = pp_errorf(&e, PP_EUSAGE,
			       "give -o RUNDIR (or --plan, --check, --simulate or --search); see "
			       "pp-init --help");
	if (!rc && plan + check + sim + search + cal > 1)
		rc = pp_errorf(
			&e, PP_EUSAGE,
			"--plan, --check, --simulate, --search and --calibrate exclude each other");
	if (!rc)
		rc = take_sim_args(&args, &sa, &e);
	if (!rc && search && !sa.nodes)
		rc = pp_errorf(&e, PP_EUSAGE, "--search needs nodes=N");
	if (!rc && out) {
		json_t *s = json_string(out);
		char *quoted = json_dumps(s, JSON_ENCODE_ANY);
		json_decref(s);
		if (asprintf(&run_override, "run_dir=%s", quoted) < 0)
			run_override = NULL;
		free(quoted);
		args.overrides[args.n_overrides++] = run_override;
	}
	if (!rc)
		rc = pp_config_load(&cfg, args.cfg, args.n_overrides, args.overrides, &e);
	if (!rc && plan)
		rc = plan_print(stdout, &cfg, json, &e);
	else if (!rc && (sim || search || cal))
		rc = simulate(&cfg, &sa, search, json, calibrate, &e);
	else if (!rc && check)
		rc = preflight_run(&cfg, stdout, &e);
	else if (!rc)
		rc = write_step0(&cfg, &e);
	pp_config_free(&cfg);
	free(run_override);
	cli_free(&args);
	return rc ? cli_fail(&spec, &e) : 0;
}
