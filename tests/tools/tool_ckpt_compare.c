/* tool_ckpt_compare A B [TOL]: compares the parameters of two checkpoint
 * directories, whatever layout each was saved in (tensors reassembled from
 * their shards). Prints the worst per-tensor ||a - b|| / ||b||; exit 0 when
 * it is <= TOL (default 1e-5) and both hold the same tensors, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/ckpt/ckpt.h"

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: tool_ckpt_compare DIR_A DIR_B [TOL]\n");
		return 2;
	}
	double tol = argc > 3 ? atof(argv[3]) : 1e-5, worst = 0;
	const char *worst_name = "";
	ckpt_manifest ma, mb;
	pp_err e = {0};
	if (ckpt_read_manifest(argv[1], &ma, &e) || ckpt_read_manifest(argv[2], &mb, &e)) {
		fprintf(stderr, "tool_ckpt_compare: %s\n", e.msg);
		return 1;
	}
	int bad = ma.n_tensors != mb.n_tensors;
	if (bad)
		fprintf(stderr, "tool_ckpt_compare: %d tensors vs %d\n", ma.n_tensors,
			mb.n_tensors);
	for (int i = 0; i < ma.n_tensors && !bad; i++) {
		const ckpt_tensor_info *ta = &ma.tensors[i],
				       *tb = ckpt_manifest_tensor(&mb, ta->name);
		if (!tb) {
			fprintf(stderr, "tool_ckpt_compare: %s only in %s\n", ta->name, argv[1]);
			bad = 1;
			break;
		}
		size_t n = 1;
		for (int d = 0; d < ta->ndim; d++)
			n *= (size_t)ta->global_shape[d];
		pp_real *a = malloc(n * sizeof(pp_real)), *b = malloc(n * sizeof(pp_real));
		if (ckpt_read_tensor(argv[1], &ma, ta->name, "params", a, &e) ||
		    ckpt_read_tensor(argv[2], &mb, ta->name, "params", b, &e)) {
			fprintf(stderr, "tool_ckpt_compare: %s\n", e.msg);
			bad = 1;
		}
		double d2 = 0, b2 = 0;
		for (size_t j = 0; j < n; j++) {
			d2 += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
			b2 += (double)b[j] * b[j];
		}
		double rel = sqrt(d2 / (b2 > 0 ? b2 : 1));
		if (rel > worst) {
			worst = rel;
			worst_name = ta->name;
		}
		free(a);
		free(b);
	}
	printf("%d tensors, worst relative difference %.3g (%s)\n", ma.n_tensors, worst,
	       worst_name);
	ckpt_manifest_free(&ma);
	ckpt_manifest_free(&mb);
	return bad || !(worst <= tol);
}
