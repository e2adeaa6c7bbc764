/* The CPU backend's FP8 casts and products, for tests/e2e/test_fp8.sh to
 * check against references of their own (ml_dtypes, float64 numpy):
 *
 *   tool_fp8 cast IN.f32 E4M3.f32 E5M2.f32
 *       every float of IN cast to E4M3 and to E5M2 (scale 1), as values
 *   tool_fp8 scale IN.f32 MARGIN OUT.f32
 *       for every float v of IN, current scaling's scale pair of the tensor
 *       {v, -v/2} (ops absmax, then fp8_scale with div 2^MARGIN), for E4M3
 *       and for E5M2: four floats per v (scale, inverse, scale, inverse)
 *   tool_fp8 matmul N C OC SX SW SG X.f32 W.f32 DY.f32 DIR
 *       x (N,C), w (OC,C) and dy (N,OC) cast with their scales (E4M3,
 *       E4M3, E5M2) into DIR/{xq,wq,gq}.f32, and the three products of
 *       kernels/fp8mm.h into DIR/{out,din,dw}.f32 (dw from zero)
 *
 * Files are raw little-endian floats. Exit 0, 1 on a file error, 2 on usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu/cpu.h"
#include "../../kernels/fp8.h"
#include "../../kernels/fp8mm.h"

static float *load(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long bytes = ftell(f);
	rewind(f);
	*n = (size_t)bytes / sizeof(float);
	float *x = malloc(*n * sizeof *x + 1);
	if (x && fread(x, sizeof *x, *n, f) != *n) {
		free(x);
		x = NULL;
	}
	fclose(f);
	return x;
}

static int save(const char *dir, const char *name, const float *x, size_t n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s%s%s", dir, name ? "/" : "", name ? name : "");
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(x, sizeof *x, n, f) == n;
	if (f && fclose(f))
		ok = 0;
	if (!ok)
		fprintf(stderr, "tool_fp8: cannot write %s\n", path);
	return ok ? 0 : 1;
}

static int cast(char **argv)
{
	size_t n;
	float *x = load(argv[0], &n), *y = malloc(n * sizeof *y + 1);
	if (!x || !y) {
		fprintf(stderr, "tool_fp8: cannot read %s\n", argv[0]);
		return 1;
	}
	const pp_ops *o = &pp_ops_cpu;
	int rc = 0;
	const float one[2] = {1, 1};
	for (int fmt = 0; fmt < 2 && !rc; fmt++) {
		o->fp8_cast(y, x, n, one, fmt, NULL);
		rc = save(argv[1 + fmt], NULL, y, n);
	}
	free(x);
	free(y);
	return rc;
}

static int scale(char **argv)
{
	size_t n;
	float *x = load(argv[0], &n), *y = malloc(4 * n * sizeof *y + 1);
	if (!x || !y) {
		fprintf(stderr, "tool_fp8: cannot read %s\n", argv[0]);
		return 1;
	}
	const pp_ops *o = &pp_ops_cpu;
	const float div = exp2f((float)atoi(argv[1]));
	for (size_t i = 0; i < n; i++) {
		const float t[2] = {x[i], -x[i] / 2};
		float amax;
		o->absmax(&amax, t, 2, 0);
		for (int fmt = 0; fmt < 2; fmt++)
			o->fp8_scale(y + 4 * i + 2 * fmt, &amax, fmt, div);
	}
	int rc = save(argv[2], NULL, y, 4 * n);
	free(x);
	free(y);
	return rc;
}

static int matmul(char **argv)
{
	const int N = atoi(argv[0]), C = atoi(argv[1]), OC = atoi(argv[2]);
	/* the scales as the ops take them: each with its inverse */
	float sx[2] = {strtof(argv[3], NULL)}, sw[2] = {strtof(argv[4], NULL)},
	      sg[2] = {strtof(argv[5], NULL)};
	sx[1] = 1.0f / sx[0];
	sw[1] = 1.0f / sw[0];
	sg[1] = 1.0f / sg[0];
	size_t nx, nw, ng;
	float *x = load(argv[6], &nx), *w = load(argv[7], &nw), *g = load(argv[8], &ng);
	const char *dir = argv[9];
	if (!x || !w || !g || nx != (size_t)N * C || nw != (size_t)OC * C || ng != (size_t)N * OC) {
		fprintf(stderr, "tool_fp8: inputs missing or not N x C, OC x C, N x OC\n");
		return 1;
	}
	const pp_ops *o = &pp_ops_cpu;
	float *xq = malloc(nx * sizeof *xq), *wq = malloc(nw * sizeof *wq),
	      *gq = malloc(ng * sizeof *gq), *out = malloc(ng * sizeof *out),
	      *din = malloc(nx * sizeof *din), *dw = calloc(nw, sizeof *dw),
	      *tmp = malloc(nw * sizeof *tmp);
	o->fp8_cast(xq, x, nx, sx, PP_FP8_E4M3, NULL);
	o->fp8_cast(wq, w, nw, sw, PP_FP8_E4M3, NULL);
	o->fp8_cast(gq, g, ng, sg, PP_FP8_E5M2, NULL);
	pp_fp8_matmul_fwd(o, out, xq, wq, sx, sw, N, C, OC);
	pp_fp8_matmul_dgrad(o, din, gq, wq, sg, sw, N, C, OC);
	pp_fp8_matmul_wgrad(o, dw, tmp, gq, xq, sg, sx, N, C, OC);
	int rc = save(dir, "xq.f32", xq, nx) || save(dir, "wq.f32", wq, nw) ||
		 save(dir, "gq.f32", gq, ng) || save(dir, "out.f32", out, ng) ||
		 save(dir, "din.f32", din, nx) || save(dir, "dw.f32", dw, nw);
	void *p[] = {x, w, g, xq, wq, gq, out, din, dw, tmp};
	for (size_t i = 0; i < sizeof p / sizeof *p; i++)
		free(p[i]);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "cast"))
		return cast(argv + 2);
	if (argc == 5 && !strcmp(argv[1], "scale"))
		return scale(argv + 2);
	if (argc == 12 && !strcmp(argv[1], "matmul"))
		return matmul(argv + 2);
	fprintf(stderr, "usage: tool_fp8 cast IN E4M3 E5M2 | tool_fp8 scale IN MARGIN OUT | "
			"tool_fp8 matmul N C OC SX SW SG X W DY DIR\n");
	return 2;
}
