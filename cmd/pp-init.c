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

int main(int argc, char **argv)
{
	bool plan = false, json = false, check = false;
	const char *out = NULL;
	const cli_opt opts[] = {
		{"-o", "RUNDIR", "write RUNDIR/checkpoints/step_00000000 (sets run_dir)", &out,
		 NULL},
		{"--plan", NULL, "print parameters, FLOPs and per-rank memory; allocate nothing",
		 NULL, &plan},
		{"--json", NULL, "with --plan: one JSON object on stdout", NULL, &json},
		{"--check", NULL,
		 "check the allocation (run under srun): wiring, devices, collectives, run_dir, memory",
		 NULL, &check},
		{0},
	};
	const cli_spec spec = {
		"pp-init",
		"--cfg FILE [key=value ...] (-o RUNDIR | --plan [--json] | --check)",
		"Write a seeded step-0 checkpoint, plan a layout's memory and FLOPs, or check an allocation.",
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
	if (!rc && !plan && !check && !out)
		rc = pp_errorf(&e, PP_EUSAGE,
			       "give -o RUNDIR (or --plan, or --check); see pp-init --help");
	if (!rc && plan + check > 1)
		rc = pp_errorf(&e, PP_EUSAGE, "--plan and --check exclude each other");
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
	else if (!rc && check)
		rc = preflight_run(&cfg, stdout, &e);
	else if (!rc)
		rc = write_step0(&cfg, &e);
	pp_config_free(&cfg);
	free(run_override);
	cli_free(&args);
	return rc ? cli_fail(&spec, &e) : 0;
}
