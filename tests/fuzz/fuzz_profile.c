/* libFuzzer target: pp-train's profile files (libcommon/profile) on
 * arbitrary bytes written to one temporary .h5 file per process: prof_read
 * (HDF5 open, then every check of the format), and for a file it accepts,
 * the merge (clock alignment, message matching), the pipeline analysis and
 * the trace, which must all succeed or say why. HDF5 itself may reject the
 * file (an error is fine); a crash, a hang or a sanitizer report in pp's
 * code is not. Built and run by tests/fuzz/test_fuzz.sh, which tells reports
 * inside libhdf5 (not built with sanitizers) from pp's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/profile/analyze.h"
#include "../../libcommon/profile/trace.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[4200], trace[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-profile");
	snprintf(path, sizeof path, "%s", fuzz_file("rank-00000.h5"));
	snprintf(trace, sizeof trace, "%s", fuzz_file("trace.json.gz"));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp)) {
		perror("fuzz_profile: writing the profile");
		exit(2);
	}
	prof_rank r;
	pp_err e = {0};
	if (prof_read(path, &r, &e)) {
		if (!e.msg[0] || !strstr(e.msg, path))
			__builtin_trap(); /* an error must say what and where */
		return 0;
	}
	for (size_t i = 0; i < r.n_ev; i++)
		if (r.ev[i].op < 0 || r.ev[i].op >= PROF_NOPS || r.ev[i].dur < 0 ||
		    r.ev[i].step < r.step_begin || r.ev[i].step >= r.step_end)
			__builtin_trap(); /* prof_read checked these */
	prof_rank_free(&r);
	char *paths[] = {path};
	prof_run run;
	prof_analysis a;
	if (prof_run_load(&run, paths, 1, false, true, &e)) {
		if (!e.msg[0])
			__builtin_trap();
	} else {
		if (!prof_analyze(&run, &a, &e)) {
			FILE *null = fopen("/dev/null", "w");
			if (prof_analysis_print(null, &run, &a, true, &e) ||
			    prof_analysis_print(null, &run, &a, false, &e))
				__builtin_trap();
			fclose(null);
		} else if (!e.msg[0]) {
			__builtin_trap();
		}
		prof_analysis_free(&a);
		if (prof_trace_write(&run, trace, &e))
			__builtin_trap(); /* a readable profile always makes a trace */
	}
	prof_run_free(&run);
	return 0;
}
