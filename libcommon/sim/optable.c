/* The CUDA backend's per-op table (optable.h). */
#include "optable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/optable.h"

bool sim_is_optable(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	bool found = false;
	while (f && !found && fgets(line, sizeof line, f))
		found = strstr(line, PP_OPTABLE_HEADER) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* one row's op into o; 0, or -1 for a product without its shape */
static int parse_op(const char *op, sim_op *o)
{
	const size_t np = strlen(PP_OPTABLE_PRODUCT);
	if (!strncmp(op, PP_OPTABLE_PRODUCT, np) && op[np] == ' ') {
		const char *dims = strstr(op, " m=");
		o->product = true;
		o->fp8 = strstr(op, PP_OPTABLE_FP8) != NULL;
		if (!dims || sscanf(dims, " m=%d n=%d k=%d", &o->m, &o->n, &o->k) != 3 ||
		    o->m <= 0 || o->n <= 0 || o->k <= 0)
			return -1;
	} else {
		o->attention_fwd = !strcmp(op, PP_OPTABLE_ATTN_FWD) ||
				   !strcmp(op, PP_OPTABLE_ATTN_FWD_CUDNN);
	}
	return 0;
}

int sim_optable_read(const char *path, sim_optable *t, pp_err *e)
{
	memset(t, 0, sizeof *t);
	FILE *f = fopen(path, "r");
	if (!f)
		return pp_errorf(e, PP_EUSAGE, "--calibrate %s: cannot open", path);
	char line[1024];
	int lineno = 0, state = 0, cap = 0, rc = 0; /* state: 0 before, 1 names, 2 rows */
	while (!rc && state < 3 && fgets(line, sizeof line, f)) {
		lineno++;
		if (state == 0) {
			state = strstr(line, PP_OPTABLE_HEADER) ? 1 : 0;
			continue;
		}
		if (state == 1) { /* the column names */
			state = 2;
			continue;
		}
		sim_op o = {0};
		double share;
		int used = 0;
		if (sscanf(line, "%lf %lf%% %ld %lf %n", &o.ms, &share, &o.calls, &o.us_per_call,
			   &used) != 4 ||
		    !used || !(o.ms >= 0) || !(o.us_per_call >= 0) || o.calls < 0) {
			state = 3; /* the table ends at the first line that is not a row */
			continue;
		}
		char *op = line + used;
		op[strcspn(op, "\r\n")] = 0;
		if (parse_op(op, &o)) {
			rc = pp_errorf(
				e, PP_EUSAGE,
				"--calibrate %s:%d: a product row without m=, n= and k=: %.200s",
				path, lineno, op);
			break;
		}
		if (t->n == cap) {
			cap = cap ? 2 * cap : 64;
			sim_op *g = realloc(t->ops, (size_t)cap * sizeof *g);
			if (!g) {
				rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
				break;
			}
			t->ops = g;
		}
		t->ops[t->n++] = o;
		t->total_ms += o.ms;
	}
	fclose(f);
	if (!rc && state == 0)
		rc = pp_errorf(e, PP_EUSAGE, "--calibrate %s: no per-op table (\"%s\") in it", path,
			       PP_OPTABLE_HEADER);
	if (rc)
		sim_optable_free(t);
	return rc;
}

void sim_optable_free(sim_optable *t)
{
	free(t->ops);
	t->ops = NULL;
	t->n = 0;
}
