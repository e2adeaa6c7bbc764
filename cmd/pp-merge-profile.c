/* pp-merge-profile: per-rank profiles into one Perfetto timeline, and where
 * the pipeline's time goes. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/log.h"
#include "../libcommon/profile/analyze.h"
#include "../libcommon/profile/trace.h"

int main(int argc, char **argv)
{
	bool summary = false, json = false, force = false, no_align = false;
	const char *out = NULL;
	const cli_opt opts[] = {
		{"-o", "OUT", "write the merged trace to OUT (.json, .json.gz, or - for stdout)",
		 &out, NULL},
		{"--summary", NULL,
		 "print the pipeline analysis as tables (the default without -o)", NULL, &summary},
		{"--json", NULL, "print the pipeline analysis as one JSON object", NULL, &json},
		{"--force", NULL, "merge profiles of different runs", NULL, &force},
		{"--no-align", NULL, "take each rank's clock as it is (no alignment)", NULL,
		 &no_align},
		{0},
	};
	const cli_spec spec = {
		"pp-merge-profile",
		"[-o OUT.json[.gz] | -o -] [--summary | --json] [--force] "
		"[--no-align] FILE... | DIR",
		"Merge pp-train's per-rank profiles into one Chrome/Perfetto trace and "
		"analyse the pipeline's bubble.",
		opts,
		false,
		INT_MAX,
		NULL};
	log_set_prefix("pp-merge-profile", 0, 1);
	pp_err e = {0};
	cli_args args;
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0)
		return 0;
	if (!rc && !args.n_positional)
		rc = pp_errorf(&e, PP_EUSAGE,
			       "give profile files or a run directory; see "
			       "pp-merge-profile --help");
	if (!rc && summary && json)
		rc = pp_errorf(&e, PP_EUSAGE, "--summary and --json: choose one");
	if (!rc && out && !strcmp(out, "-") && (summary || json))
		rc = pp_errorf(&e, PP_EUSAGE,
			       "-o - writes the trace to stdout: the report cannot "
			       "go there too");
	if (!out && !json)
		summary = true;
	prof_run run = {0};
	prof_analysis a = {0};
	if (!rc)
		rc = prof_run_load(&run, args.positional, args.n_positional, force, !no_align, &e);
	if (!rc && out)
		rc = prof_trace_write(&run, out, &e);
	if (!rc && (summary || json) && !(rc = prof_analyze(&run, &a, &e)))
		rc = prof_analysis_print(stdout, &run, &a, json, &e);
	prof_analysis_free(&a);
	prof_run_free(&run);
	cli_free(&args);
	return rc ? cli_fail(&spec, &e) : 0;
}
