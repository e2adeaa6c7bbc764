/* libFuzzer target: the CUDA backend's per-op table as pp-init --calibrate
 * reads it (sim_optable_read, libcommon/sim/optable.h), on arbitrary bytes
 * written to one temporary file per process. Checks, when it reads: rows
 * with non-negative times and counts, every product with a positive shape,
 * the total the sum of the rows; when it does not: a message naming the
 * file. Built and run by tests/fuzz/test_fuzz.sh. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/sim/optable.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-optable");
	snprintf(path, sizeof path, "%s", fuzz_file("profile.txt"));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp)) {
		perror("fuzz_optable: writing the table");
		exit(2);
	}
	sim_optable t;
	pp_err e = {0};
	const bool has = sim_is_optable(path);
	if (sim_optable_read(path, &t, &e)) {
		char none[4400];
		snprintf(none, sizeof none, "--calibrate %s: no per-op table", path);
		if (!e.msg[0] || !strstr(e.msg, path) ||
		    (has && !strncmp(e.msg, none, strlen(none))))
			__builtin_trap(); /* an error says where, and a header is a table */
		return 0;
	}
	if (!has)
		__builtin_trap(); /* read a table without its header */
	double total = 0;
	for (int i = 0; i < t.n; i++) {
		const sim_op *o = &t.ops[i];
		if (!(o->ms >= 0) || !(o->us_per_call >= 0) || o->calls < 0 ||
		    (o->product && (o->m <= 0 || o->n <= 0 || o->k <= 0)) ||
		    (o->product && o->attention_fwd))
			__builtin_trap();
		total += o->ms;
	}
	if (!(total == t.total_ms) && !(isinf(total) && isinf(t.total_ms)))
		__builtin_trap();
	sim_optable_free(&t);
	return 0;
}
