/* The CPU ops (kernels/cpu) against the contract of kernels/ops.h: forwards
 * against naive reference loops, backwards against central finite
 * differences. Built with -DPP_F64, so pp_real is double here. */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu/cpu.h"
#include "../../kernels/dropmask.h"
#include "../../kernels/ops.h"
#include "../tools/harness.h"

#ifndef PP_F64
#error "test_ops needs -DPP_F64: finite differences are only meaningful in double"
#endif

/* Finite differences: L = sum(out * R) for a fixed random R, each input
 * element moved by +-FD_H. Truncation error is O(FD_H^2) ~ 1e-12 and rounding
 * error O(1e-16 |L| / FD_H) ~ 1e-10 at these sizes; the errors seen are
 * below 1e-8, while a wrong term in a backward pass shows up at 1e-3 or more.
 * The measure is max |analytic - numeric| / max |numeric| over one input. */
#define FD_H   1e-6
#define FD_TOL 1e-7
/* forwards are compared with loops that compute the same thing in another
 * order: only rounding separates them */
#define FWD_TOL 1e-12

static const pp_ops *ops;

/* ---- random data ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* uniform in [-1, 1) (splitmix64) */
static double rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / (double)(1ull << 52) - 1;
}

static pp_real *rnd_buf(size_t n, double scale)
{
	pp_real *x = malloc(sizeof(pp_real) * (n ? n : 1));
	for (size_t i = 0; i < n; i++)
		x[i] = rnd() * scale;
	return x;
}

static pp_real *copy_buf(const pp_real *x, size_t n)
{
	pp_real *y = malloc(sizeof(pp_real) * (n ? n : 1));
	memcpy(y, x, sizeof(pp_real) * n);
	return y;
}

/* max |a - b| / max |b|: b is the reference */
static double rel_diff(const pp_real *a, const pp_real *b, size_t n)
{
	double emax = 0, bmax = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs(a[i] - b[i]);
		emax = fmax(emax, isnan(e) ? INFINITY : e);
		bmax = fmax(bmax, fabs(b[i]));
	}
	return bmax > 0 ? emax / bmax : emax;
}

static void check_close(const char *name, const pp_real *got, const pp_real *want, size_t n,
			double tol)
{
	double e = rel_diff(got, want, n);
	CHECK(e <= tol, name, "max |got - want| / max |want| = %.3g > %.0e", e, tol);
}

/* ---- one op under test ---- */

enum { ACCUM, OVERWRITE }; /* how a backward pass writes a gradient: += or = */

/* Everything any op needs; each test fills the fields its op reads.
 * arg[i].x are the inputs that are differentiated, arg[i].dx their
 * gradients as the backward pass writes them. */
typedef struct op_case op_case;
struct op_case {
	void (*fwd)(op_case *c); /* out (and saved statistics) from the inputs */
	void (*bwd)(op_case *c); /* gradients from dout, after fwd */
	int B, T, N, C, OC, V, Hq, Hkv, D, F, window, act, pos0;
	int bwd_threads; /* OpenMP threads for bwd; 0: as set */
	int nb;          /* attention's bias by distance: buckets, and the bucket of each */
	int *bucket;     /* distance (NULL: no bias) */
	pp_real scale, eps, offset, theta;
	int *tok;
	pp_real *out, *dout, *stat1, *stat2;
	size_t nout;
	int narg;
	struct {
		const char *what;
		pp_real *x, *dx;
		size_t n;
		int mode;
	} arg[3];
};

#define X(i)  (c->arg[i].x)
#define DX(i) (c->arg[i].dx)

static void case_arg(op_case *c, const char *what, size_t n, int mode)
{
	c->arg[c->narg].what = what;
	c->arg[c->narg].x = rnd_buf(n, 1);
	c->arg[c->narg].dx = rnd_buf(n, 1);
	c->arg[c->narg].n = n;
	c->arg[c->narg].mode = mode;
	c->narg++;
}

/* out gets nout elements and dout = R; nstat elements for each saved statistic */
static void case_out(op_case *c, size_t nout, size_t nstat)
{
	c->nout = nout;
	c->out = rnd_buf(nout, 1);
	c->dout = rnd_buf(nout, 1);
	c->stat1 = rnd_buf(nstat, 1);
	c->stat2 = rnd_buf(nstat, 1);
}

static void case_free(op_case *c)
{
	for (int i = 0; i < c->narg; i++) {
		free(c->arg[i].x);
		free(c->arg[i].dx);
	}
	free(c->out);
	free(c->dout);
	free(c->stat1);
	free(c->stat2);
	free(c->tok);
	free(c->bucket);
}

static double case_loss(op_case *c)
{
	c->fwd(c);
	double L = 0;
	for (size_t i = 0; i < c->nout; i++)
		L += c->out[i] * c->dout[i];
	return L;
}

/* Runs the backward pass once with every gradient pre-filled and compares
 * each gradient with central differences of case_loss. ACCUM gradients start
 * random and the start is subtracted afterwards, so a kernel that overwrites
 * fails; OVERWRITE gradients start NaN, so one that adds or skips fails. */
static void gradcheck(const char *name, op_case *c)
{
	pp_real *pre[3];
	for (int a = 0; a < c->narg; a++) {
		for (size_t i = 0; i < c->arg[a].n; i++)
			c->arg[a].dx[i] = c->arg[a].mode == ACCUM ? rnd() : NAN;
		pre[a] = copy_buf(c->arg[a].dx, c->arg[a].n);
	}
	c->fwd(c);
	int nt = omp_get_max_threads();
	omp_set_num_threads(c->bwd_threads ? c->bwd_threads : nt);
	c->bwd(c);
	/* one forward per perturbed element: on one thread, the thousands of
	 * tiny parallel regions would mostly wait at barriers */
	omp_set_num_threads(1);
	double worst = 0;
	const char *worst_what = "";
	for (int a = 0; a < c->narg; a++) {
		pp_real *x = c->arg[a].x, *num = malloc(sizeof(pp_real) * c->arg[a].n);
		pp_real *an = pre[a]; /* reused for the analytic gradient */
		for (size_t i = 0; i < c->arg[a].n; i++) {
			an[i] = c->arg[a].mode == ACCUM ? c->arg[a].dx[i] - an[i] : c->arg[a].dx[i];
			pp_real x0 = x[i];
			x[i] = x0 + FD_H;
			double lp = case_loss(c);
			x[i] = x0 - FD_H;
			double lm = case_loss(c);
			x[i] = x0;
			num[i] = (lp - lm) / (2 * FD_H);
		}
		double e = rel_diff(an, num, c->arg[a].n);
		if (!(e <= worst)) {
			worst = e;
			worst_what = c->arg[a].what;
		}
		free(num);
		free(an);
	}
	omp_set_num_threads(nt);
	CHECK(worst <= FD_TOL, name,
	      "d%s: max |analytic - finite difference| / max |grad| = %.3g > %.0e", worst_what,
	      worst, FD_TOL);
}

/* ---- matmul ---- */

static void matmul_fwd(op_case *c)
{
	ops->matmul_fwd(c->out, X(0), X(1), c->narg > 2 ? X(2) : NULL, c->N, c->C, c->OC);
}
static void matmul_bwd(op_case *c)
{
	ops->matmul_bwd(DX(0), DX(1), c->narg > 2 ? DX(2) : NULL, c->dout, X(0), X(1), c->N, c->C,
			c->OC);
}

static void test_matmul(int bias)
{
	op_case cs = {.fwd = matmul_fwd, .bwd = matmul_bwd, .N = 5, .C = 7, .OC = 6}, *c = &cs;
	case_arg(c, "inp", (size_t)c->N * c->C, OVERWRITE);
	case_arg(c, "w", (size_t)c->OC * c->C, ACCUM);
	if (bias)
		case_arg(c, "bias", c->OC, ACCUM);
	case_out(c, (size_t)c->N * c->OC, 0);

	pp_real *want = malloc(sizeof(pp_real) * c->nout);
	for (int n = 0; n < c->N; n++)
		for (int o = 0; o < c->OC; o++) {
			double s = bias ? X(2)[o] : 0;
			for (int k = 0; k < c->C; k++)
				s += X(0)[n * c->C + k] * X(1)[o * c->C + k];
			want[n * c->OC + o] = s;
		}
	c->fwd(c);
	check_close(bias ? "ops/matmul_fwd_bias" : "ops/matmul_fwd", c->out, want, c->nout,
		    FWD_TOL);
	gradcheck(bias ? "ops/matmul_bwd_bias" : "ops/matmul_bwd", c);

	if (bias) {
		/* any gradient may be NULL: dw alone must match the full call */
		size_t nw = c->arg[1].n;
		pp_real *dw = calloc(nw, sizeof(pp_real));
		ops->matmul_bwd(NULL, dw, NULL, c->dout, X(0), X(1), c->N, c->C, c->OC);
		memset(DX(1), 0, sizeof(pp_real) * nw);
		ops->matmul_bwd(DX(0), DX(1), DX(2), c->dout, X(0), X(1), c->N, c->C, c->OC);
		check_close("ops/matmul_bwd_null", dw, DX(1), nw, 0);
		free(dw);
	}
	free(want);
	case_free(c);
}

/* ---- embedding ---- */

/* the position argument of ops.h: the case's pos0 in memory, NULL for 0 */
static const int *pos_of(const op_case *c) { return c->pos0 ? &c->pos0 : NULL; }

static void embed_fwd(op_case *c)
{
	ops->embed_fwd(c->out, c->tok, X(0), c->narg > 1 ? X(1) : NULL, c->scale, c->B, c->T, c->C,
		       pos_of(c));
}
static void embed_bwd(op_case *c)
{
	ops->embed_bwd(DX(0), c->narg > 1 ? DX(1) : NULL, c->dout, c->tok, c->scale, c->B, c->T,
		       c->C, pos_of(c));
}

static void test_embed(int wpe, pp_real scale, int pos0, const char *fwd_name, const char *bwd_name)
{
	op_case cs = {.fwd = embed_fwd,
		      .bwd = embed_bwd,
		      .B = 2,
		      .T = 6,
		      .C = 5,
		      .V = 4,
		      .scale = scale,
		      .pos0 = pos0},
		*c = &cs;
	int maxT = pos0 + c->T + 2;
	/* 12 tokens from a vocabulary of 4: the scatter has to add repeats */
	c->tok = malloc(sizeof(int) * c->B * c->T);
	for (int n = 0; n < c->B * c->T; n++)
		c->tok[n] = (n * 7 + 1) % c->V;
	case_arg(c, "wte", (size_t)c->V * c->C, ACCUM);
	if (wpe)
		case_arg(c, "wpe", (size_t)maxT * c->C, ACCUM);
	case_out(c, (size_t)c->B * c->T * c->C, 0);

	pp_real *want = malloc(sizeof(pp_real) * c->nout);
	for (int b = 0; b < c->B; b++)
		for (int t = 0; t < c->T; t++)
			for (int k = 0; k < c->C; k++) {
				int n = b * c->T + t;
				want[n * c->C + k] = X(0)[c->tok[n] * c->C + k] * scale +
						     (wpe ? X(1)[(pos0 + t) * c->C + k] : 0);
			}
	c->fwd(c);
	check_close(fwd_name, c->out, want, c->nout, FWD_TOL);
	gradcheck(bwd_name, c);
	free(want);
	case_free(c);
}

/* ---- norms ---- */

static void rmsnorm_fwd(op_case *c)
{
	ops->rmsnorm_fwd(c->out, c->stat1, X(0), X(1), c->eps, c->offset, c->N, c->C);
}
static void rmsnorm_bwd(op_case *c)
{
	ops->rmsnorm_bwd(DX(0), DX(1), c->dout, X(0), X(1), c->stat1, c->offset, c->N, c->C);
}

static void test_rmsnorm(pp_real offset, const char *fwd_name, const char *bwd_name)
{
	op_case cs = {.fwd = rmsnorm_fwd,
		      .bwd = rmsnorm_bwd,
		      .N = 5,
		      .C = 8,
		      .eps = 1e-5,
		      .offset = offset},
		*c = &cs;
	case_arg(c, "x", (size_t)c->N * c->C, ACCUM);
	case_arg(c, "w", c->C, ACCUM);
	case_out(c, (size_t)c->N * c->C, c->N);

	pp_real *want = malloc(sizeof(pp_real) * c->nout), *rstd = malloc(sizeof(pp_real) * c->N);
	for (int n = 0; n < c->N; n++) {
		double ms = 0;
		for (int k = 0; k < c->C; k++)
			ms += X(0)[n * c->C + k] * X(0)[n * c->C + k] / c->C;
		rstd[n] = 1 / sqrt(ms + c->eps);
		for (int k = 0; k < c->C; k++)
			want[n * c->C + k] = X(0)[n * c->C + k] * rstd[n] * (offset + X(1)[k]);
	}
	c->fwd(c);
	CHECK(rel_diff(c->out, want, c->nout) <= FWD_TOL &&
		      rel_diff(c->stat1, rstd, c->N) <= FWD_TOL,
	      fwd_name, "out off by %.3g, rstd by %.3g", rel_diff(c->out, want, c->nout),
	      rel_diff(c->stat1, rstd, c->N));
	gradcheck(bwd_name, c);
	free(want);
	free(rstd);
	case_free(c);
}

static void layernorm_fwd(op_case *c)
{
	ops->layernorm_fwd(c->out, c->stat1, c->stat2, X(0), X(1), X(2), c->eps, c->N, c->C);
}
static void layernorm_bwd(op_case *c)
{
	ops->layernorm_bwd(DX(0), DX(1), DX(2), c->dout, X(0), X(1), c->stat1, c->stat2, c->N,
			   c->C);
}

static void test_layernorm(void)
{
	op_case cs = {.fwd = layernorm_fwd, .bwd = layernorm_bwd, .N = 5, .C = 8, .eps = 1e-5},
		*c = &cs;
	case_arg(c, "x", (size_t)c->N * c->C, ACCUM);
	case_arg(c, "w", c->C, ACCUM);
	case_arg(c, "b", c->C, ACCUM);
	case_out(c, (size_t)c->N * c->C, c->N);
	/* an offset row mean, which a one-pass variance would lose digits to */
	for (int k = 0; k < c->C; k++)
		X(0)[k] += 100;

	pp_real *want = malloc(sizeof(pp_real) * c->nout);
	for (int n = 0; n < c->N; n++) {
		const pp_real *x = X(0) + n * c->C;
		double mu = 0, var = 0;
		for (int k = 0; k < c->C; k++)
			mu += x[k] / c->C;
		for (int k = 0; k < c->C; k++)
			var += (x[k] - mu) * (x[k] - mu) / c->C;
		for (int k = 0; k < c->C; k++)
			want[n * c->C + k] = (x[k] - mu) / sqrt(var + c->eps) * X(1)[k] + X(2)[k];
	}
	c->fwd(c);
	check_close("ops/layernorm_fwd", c->out, want, c->nout, FWD_TOL);
	gradcheck("ops/layernorm_bwd", c);
	free(want);
	case_free(c);
}

/* The residual add fused with the norm: res = x + y and the norm of res,
 * bitwise as add then the plain norm (checked against loops above), also
 * where res is x or y. C = 300 spans two summation blocks of the row sums,
 * N = 37 rows several threads. */
static void test_norm_residual(int layer, pp_real offset, const char *name)
{
	enum { N = 37, C = 300 };
	const size_t NC = (size_t)N * C;
	const pp_real eps = 1e-5;
	pp_real *x = rnd_buf(NC, 3), *y = rnd_buf(NC, 1), *w = rnd_buf(C, 1), *b = rnd_buf(C, 1);
	/* an offset row mean, as in test_layernorm */
	for (size_t i = 0; i < NC; i += 7)
		x[i] += 50;
	pp_real *res = malloc(sizeof(pp_real) * NC), *want_out = malloc(sizeof(pp_real) * NC);
	pp_real *want_mean = malloc(sizeof(pp_real) * N), *want_rstd = malloc(sizeof(pp_real) * N);
	pp_real *want_res = malloc(sizeof(pp_real) * NC);
	ops->add(want_res, x, y, NC);
	if (layer)
		ops->layernorm_fwd(want_out, want_mean, want_rstd, want_res, w, b, eps, N, C);
	else
		ops->rmsnorm_fwd(want_out, want_rstd, want_res, w, eps, offset, N, C);

	static const char *const alias[] = {"", "_res_is_x", "_res_is_y"};
	for (int a = 0; a < 3; a++) {
		pp_real *xa = copy_buf(x, NC), *ya = copy_buf(y, NC);
		pp_real *r = a == 1 ? xa : a == 2 ? ya : res;
		pp_real *out = rnd_buf(NC, 1), *mean = rnd_buf(N, 1), *rstd = rnd_buf(N, 1);
		if (layer)
			ops->layernorm_residual_fwd(r, out, mean, rstd, xa, ya, w, b, eps, N, C);
		else
			ops->rmsnorm_residual_fwd(r, out, rstd, xa, ya, w, eps, offset, N, C);
		char what[80];
		snprintf(what, sizeof what, "%s%s", name, alias[a]);
		int same = !memcmp(r, want_res, sizeof(pp_real) * NC) &&
			   !memcmp(out, want_out, sizeof(pp_real) * NC) &&
			   !memcmp(rstd, want_rstd, sizeof(pp_real) * N) &&
			   (!layer || !memcmp(mean, want_mean, sizeof(pp_real) * N));
		/* the input that res does not overwrite is left alone */
		int kept = (a == 1 || !memcmp(xa, x, sizeof(pp_real) * NC)) &&
			   (a == 2 || !memcmp(ya, y, sizeof(pp_real) * NC));
		CHECK(same && kept, what,
		      "res off add by %.3g, out off the norm by %.3g, rstd by %.3g%s",
		      rel_diff(r, want_res, NC), rel_diff(out, want_out, NC),
		      rel_diff(rstd, want_rstd, N), kept ? "" : "; an input changed");
		free(xa);
		free(ya);
		free(out);
		free(mean);
		free(rstd);
	}
	free(x);
	free(y);
	free(w);
	free(b);
	free(res);
	free(want_out);
	free(want_mean);
	free(want_rstd);
	free(want_res);
}

/* ---- rope ---- */

static size_t qkv_size(const op_case *c)
{
	return (size_t)c->B * c->T * (c->Hq + 2 * c->Hkv) * c->D;
}

static void rope_fwd(op_case *c)
{
	memcpy(c->out, X(0), sizeof(pp_real) * c->nout);
	ops->rope_fwd(c->out, c->B, c->T, c->Hq, c->Hkv, c->D, c->theta, pos_of(c));
}
static void rope_bwd(op_case *c)
{
	memcpy(DX(0), c->dout, sizeof(pp_real) * c->nout);
	ops->rope_bwd(DX(0), c->B, c->T, c->Hq, c->Hkv, c->D, c->theta, pos_of(c));
}

static void test_rope(void)
{
	op_case cs = {.fwd = rope_fwd,
		      .bwd = rope_bwd,
		      .B = 2,
		      .T = 5,
		      .Hq = 4,
		      .Hkv = 2,
		      .D = 6,
		      .theta = 10000,
		      .pos0 = 3},
		*c = &cs;
	case_arg(c, "qkv", qkv_size(c), OVERWRITE);
	case_out(c, qkv_size(c), 0);

	/* q and k heads rotated by (pos0 + t) * theta^(-2i/D); v heads copied */
	int W = (c->Hq + 2 * c->Hkv) * c->D, half = c->D / 2;
	pp_real *want = copy_buf(X(0), c->nout);
	for (int b = 0; b < c->B; b++)
		for (int t = 0; t < c->T; t++)
			for (int h = 0; h < c->Hq + c->Hkv; h++) {
				const pp_real *x = X(0) + (b * c->T + t) * W + h * c->D;
				pp_real *y = want + (b * c->T + t) * W + h * c->D;
				for (int i = 0; i < half; i++) {
					double a = (c->pos0 + t) * pow(c->theta, -2.0 * i / c->D);
					y[i] = x[i] * cos(a) - x[i + half] * sin(a);
					y[i + half] = x[i + half] * cos(a) + x[i] * sin(a);
				}
			}
	c->fwd(c);
	check_close("ops/rope_fwd", c->out, want, c->nout, FWD_TOL);
	/* the backward rotation undoes the forward one */
	ops->rope_bwd(c->out, c->B, c->T, c->Hq, c->Hkv, c->D, c->theta, pos_of(c));
	check_close("ops/rope_bwd_inverse", c->out, X(0), c->nout, FWD_TOL);
	gradcheck("ops/rope_bwd", c);
	free(want);
	case_free(c);
}

/* ---- attention ---- */

/* the case's bias by distance (its weights are the second argument), or NULL */
static const pp_attn_bias *case_bias(op_case *c, pp_attn_bias *b)
{
	if (!c->bucket)
		return NULL;
	*b = (pp_attn_bias){.w = X(1), .dw = DX(1), .bucket = c->bucket, .nb = c->nb};
	return b;
}
static void attention_fwd(op_case *c)
{
	pp_attn_bias b;
	ops->attention_fwd(c->out, c->stat1, X(0), c->B, c->T, c->Hq, c->Hkv, c->D, c->window,
			   case_bias(c, &b));
}
static void attention_bwd(op_case *c)
{
	pp_attn_bias b;
	ops->attention_bwd(DX(0), c->dout, c->out, c->stat1, X(0), c->B, c->T, c->Hq, c->Hkv, c->D,
			   c->window, case_bias(c, &b));
}

/* out (B,T,Hq*D) and lse (B,Hq,T) by the textbook formula: an explicit
 * (T,T) mask, the bias of each distance, softmax over the full score row */
static void attention_ref(const op_case *c, pp_real *out, pp_real *lse)
{
	const int T = c->T, D = c->D, W = (c->Hq + 2 * c->Hkv) * D, G = c->Hq / c->Hkv;
	double *s = malloc(sizeof(double) * T);
	char *mask = malloc((size_t)T * T);
	for (int i = 0; i < T; i++)
		for (int j = 0; j < T; j++)
			mask[i * T + j] = j <= i && (c->window <= 0 || j > i - c->window);
	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < c->Hq; h++)
			for (int i = 0; i < T; i++) {
				const pp_real *q = X(0) + (b * T + i) * W + h * D;
				double z = 0;
				for (int j = 0; j < T; j++) {
					const pp_real *k = X(0) + (b * T + j) * W +
							   (c->Hq + h / G) * D;
					double dot = 0;
					for (int d = 0; d < D; d++)
						dot += q[d] * k[d];
					const double bias =
						c->bucket && j <= i
							? X(1)[h * c->nb + c->bucket[i - j]]
							: 0;
					s[j] = mask[i * T + j] ? exp(dot / sqrt(D) + bias) : 0;
					z += s[j];
				}
				lse[(b * c->Hq + h) * T + i] = log(z);
				pp_real *o = out + (b * T + i) * c->Hq * D + h * D;
				for (int d = 0; d < D; d++) {
					double acc = 0;
					for (int j = 0; j < T; j++)
						acc += s[j] / z *
						       X(0)[(b * T + j) * W +
							    (c->Hq + c->Hkv + h / G) * D + d];
					o[d] = acc;
				}
			}
	free(mask);
	free(s);
}

/* A bias by distance of nb buckets, the bucket of distance d (d * 7 + 3) % nb:
 * distances far apart share one, so its gradient sums over them */
static void case_bucket(op_case *c, int nb, int T)
{
	c->nb = nb;
	c->bucket = malloc(sizeof(int) * T);
	for (int d = 0; d < T; d++)
		c->bucket[d] = (d * 7 + 3) % nb;
}

static void test_attention(const char *variant, int B, int T, int Hq, int Hkv, int D, int window,
			   int nb)
{
	op_case cs = {.fwd = attention_fwd,
		      .bwd = attention_bwd,
		      .B = B,
		      .T = T,
		      .Hq = Hq,
		      .Hkv = Hkv,
		      .D = D,
		      .window = window},
		*c = &cs;
	char name[64];
	case_arg(c, "qkv", qkv_size(c), OVERWRITE);
	if (nb) {
		case_arg(c, "bias", (size_t)Hq * nb, ACCUM);
		case_bucket(c, nb, T);
	}
	case_out(c, (size_t)B * T * Hq * D, (size_t)B * Hq * T);

	pp_real *want = malloc(sizeof(pp_real) * c->nout),
		*lse = malloc(sizeof(pp_real) * B * Hq * T);
	attention_ref(c, want, lse);
	c->fwd(c);
	snprintf(name, sizeof name, "ops/attention_fwd_%s", variant);
	double eo = rel_diff(c->out, want, c->nout),
	       el = rel_diff(c->stat1, lse, (size_t)B * Hq * T);
	CHECK(eo <= FWD_TOL && el <= FWD_TOL, name, "out off by %.3g, lse by %.3g (tolerance %.0e)",
	      eo, el, FWD_TOL);
	snprintf(name, sizeof name, "ops/attention_bwd_%s", variant);
	gradcheck(name, c);
	if (Hq > Hkv) {
		/* with a thread per query head the backward pass splits each kv
		 * group over tasks and sums their partial kv gradients */
		c->bwd_threads = B * Hq;
		snprintf(name, sizeof name, "ops/attention_bwd_%s_split", variant);
		gradcheck(name, c);
	}
	free(want);
	free(lse);
	case_free(c);
}

/* ---- activations ---- */

static double ref_act(double x, int act)
{
	if (act == PP_ACT_GELU_TANH)
		return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	return x / (1 + exp(-x));
}

static void glu_fwd(op_case *c) { ops->glu_fwd(c->out, X(0), c->N, c->F, c->act); }
static void glu_bwd(op_case *c) { ops->glu_bwd(DX(0), c->dout, X(0), c->N, c->F, c->act); }

static void test_glu(int act, const char *fwd_name, const char *bwd_name)
{
	op_case cs = {.fwd = glu_fwd, .bwd = glu_bwd, .N = 4, .F = 6, .act = act}, *c = &cs;
	case_arg(c, "gu", (size_t)c->N * 2 * c->F, OVERWRITE);
	case_out(c, (size_t)c->N * c->F, 0);
	for (size_t i = 0; i < c->arg[0].n; i++)
		X(0)[i] *= 3; /* reach both tails of the activation */
	pp_real *want = malloc(sizeof(pp_real) * c->nout);
	for (int n = 0; n < c->N; n++)
		for (int f = 0; f < c->F; f++)
			want[n * c->F + f] = ref_act(X(0)[n * 2 * c->F + f], act) *
					     X(0)[n * 2 * c->F + c->F + f];
	c->fwd(c);
	check_close(fwd_name, c->out, want, c->nout, FWD_TOL);
	gradcheck(bwd_name, c);
	free(want);
	case_free(c);
}

static void gelu_fwd(op_case *c) { ops->gelu_fwd(c->out, X(0), c->nout); }
static void gelu_bwd(op_case *c) { ops->gelu_bwd(DX(0), c->dout, X(0), c->nout); }

/* ---- mixture of experts ---- */

/* moe_route against loops: top-K by repeated argmax, gates by mode, the
 * softmax, lse and the column sums */
static void test_moe_route(int mode, const char *name)
{
	enum { N = 5, E = 6, K = 2 };
	pp_real *l = rnd_buf((size_t)N * E, 2);
	l[E + 3] = l[E + 1] = 2.5; /* a tie for the top in row 1: the lower expert first */
	int ex[N * K];
	pp_real g[N * K], prob[N * E], lse[N], st[E + 1];
	ops->moe_route(ex, g, prob, lse, st, l, N, E, K, mode);
	int ok = 1;
	double colsum[E + 1];
	memset(colsum, 0, sizeof colsum);
	for (int n = 0; n < N; n++) {
		const pp_real *r = l + n * E;
		double mx = r[0], z = 0;
		for (int e = 1; e < E; e++)
			mx = fmax(mx, r[e]);
		for (int e = 0; e < E; e++)
			z += exp(r[e] - mx);
		ok &= fabs(lse[n] - (mx + log(z))) < 1e-12;
		int want[K];
		for (int k = 0; k < K; k++) {
			int best = -1;
			for (int e = 0; e < E; e++)
				if ((k == 0 || (e != want[0] && (k < 2 || e != want[1]))) &&
				    (best < 0 || r[e] > r[best]))
					best = e;
			want[k] = best;
			ok &= ex[n * K + k] == best;
		}
		double sel = 0;
		for (int k = 0; k < K; k++)
			sel += exp(r[want[k]]);
		for (int k = 0; k < K; k++) {
			double wg = mode == PP_ROUTE_SOFTMAX_TOPK ? exp(r[want[k]] - mx) / z
								  : exp(r[want[k]]) / sel;
			ok &= fabs(g[n * K + k] - wg) < 1e-12;
		}
		for (int e = 0; e < E; e++) {
			ok &= fabs(prob[n * E + e] - exp(r[e] - mx) / z) < 1e-12;
			colsum[e] += exp(r[e] - mx) / z;
		}
		colsum[E] += (mx + log(z)) * (mx + log(z));
	}
	ok &= ex[K] == 1 && ex[K + 1] == 3;
	for (int e = 0; e <= E; e++)
		ok &= fabs(st[e] - colsum[e]) < 1e-12;
	CHECK(ok, name, "routing differs from the reference loops");
	free(l);
}

/* dispatch, gather, combine and the gate gradient against loops, with and
 * without a capacity */
static void test_moe_permute(int cap, const char *name)
{
	enum { N = 7, K = 2, E = 3, C = 5 };
	const int ex[N * K] = {0, 2, 2, 1, 0, 1, 2, 0, 2, 1, 0, 2, 1, 0};
	int rows[N * K], slot[N * K], counts[2 * E];
	ops->moe_dispatch(rows, slot, counts, ex, N, K, E, cap);
	int ok = 1, want_slot[N * K], kept[E] = {0}, chosen[E] = {0}, start[E], M = 0;
	for (int a = 0; a < N * K; a++)
		chosen[ex[a]]++;
	for (int e = 0; e < E; e++)
		kept[e] = cap < 0 || chosen[e] < cap ? chosen[e] : cap;
	for (int e = 0; e < E; e++) {
		start[e] = M;
		M += kept[e];
		ok &= counts[e] == kept[e] && counts[E + e] == chosen[e];
	}
	int seen[E] = {0};
	for (int a = 0; a < N * K; a++) {
		int e = ex[a];
		want_slot[a] = cap >= 0 && seen[e] >= cap ? -1 : start[e] + seen[e];
		seen[e]++;
		ok &= slot[a] == want_slot[a] && (slot[a] < 0 || rows[slot[a]] == a);
	}
	pp_real *x = rnd_buf((size_t)N * C, 1), *gate = rnd_buf((size_t)N * K, 1);
	pp_real *xs = rnd_buf((size_t)M * C, 1), *y = rnd_buf((size_t)M * C, 1);
	pp_real *out = rnd_buf((size_t)N * C, 1), *d = rnd_buf((size_t)N * C, 1);
	pp_real *dg = rnd_buf((size_t)N * K, 1);
	ops->moe_gather(xs, x, rows, gate, M, K, C);
	for (int i = 0; i < M; i++)
		for (int c = 0; c < C; c++)
			ok &= fabs(xs[i * C + c] - gate[rows[i]] * x[(rows[i] / K) * C + c]) <
			      1e-15;
	ops->moe_combine(out, y, slot, gate, N, K, C);
	ops->moe_gate_grad(dg, d, y, slot, N, K, C);
	for (int n = 0; n < N; n++) {
		for (int c = 0; c < C; c++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				if (want_slot[n * K + k] >= 0)
					s += gate[n * K + k] * y[want_slot[n * K + k] * C + c];
			ok &= fabs(out[n * C + c] - s) < 1e-14;
		}
		for (int k = 0; k < K; k++) {
			double s = 0;
			for (int c = 0; want_slot[n * K + k] >= 0 && c < C; c++)
				s += d[n * C + c] * y[want_slot[n * K + k] * C + c];
			ok &= fabs(dg[n * K + k] - s) < 1e-14;
		}
	}
	CHECK(ok, name, "cap %d: %d rows kept of %d", cap, M, N * K);
	free(x), free(gate), free(xs), free(y), free(out), free(d), free(dg);
}

/* the router's backward: out = the gates, the load-balancing loss and the
 * z-loss of the logits, weighted by dout as every gradcheck does */
static pp_real moe_frac[4] = {0.7, 0.2, 0.6, 0.5};
static void moe_router_fwd(op_case *c)
{
	const int N = c->N, E = c->C, K = c->OC;
	int *ex = (int *)c->tok;
	pp_real *prob = c->stat1, *lse = c->stat2, st[8];
	ops->moe_route(ex, c->out, prob, lse, st, X(0), N, E, K, c->act);
	double aux = 0;
	for (int e = 0; e < E; e++)
		aux += moe_frac[e] * st[e] / N;
	c->out[N * K] = E * aux;
	c->out[N * K + 1] = st[E] / N;
}
static void moe_router_bwd(op_case *c)
{
	const int N = c->N, E = c->C, K = c->OC;
	ops->moe_router_bwd(DX(0), c->dout, (int *)c->tok, c->out, c->stat1, c->stat2, moe_frac,
			    c->dout[N * K], c->dout[N * K + 1], N, E, K, c->act);
}

static void test_moe_router_bwd(int mode, const char *name)
{
	op_case cs = {.fwd = moe_router_fwd,
		      .bwd = moe_router_bwd,
		      .N = 5,
		      .C = 4,
		      .OC = 2,
		      .act = mode},
		*c = &cs;
	case_arg(c, "logits", (size_t)c->N * c->C, OVERWRITE);
	case_out(c, (size_t)c->N * c->OC + 2, (size_t)c->N * c->C);
	c->tok = malloc(sizeof(int) * (size_t)c->N * c->OC);
	gradcheck(name, c);
	case_free(c);
}

static void test_gelu(void)
{
	op_case cs = {.fwd = gelu_fwd, .bwd = gelu_bwd}, *c = &cs;
	case_arg(c, "x", 40, OVERWRITE);
	case_out(c, 40, 0);
	for (size_t i = 0; i < c->nout; i++)
		X(0)[i] *= 4;
	pp_real *want = malloc(sizeof(pp_real) * c->nout);
	for (size_t i = 0; i < c->nout; i++)
		want[i] = ref_act(X(0)[i], PP_ACT_GELU_TANH);
	c->fwd(c);
	check_close("ops/gelu_fwd", c->out, want, c->nout, FWD_TOL);
	gradcheck("ops/gelu_bwd", c);
	free(want);
	case_free(c);
}

/* The linear layer with its GELU: pre against the naive product (plus
 * bias), out against the GELU of it; both are overwritten (they start
 * random). */
static void test_matmul_gelu(int bias)
{
	const int N = 5, C = 7, OC = 6;
	const size_t n = (size_t)N * OC;
	pp_real *inp = rnd_buf((size_t)N * C, 1), *w = rnd_buf((size_t)OC * C, 1);
	pp_real *b = bias ? rnd_buf(OC, 1) : NULL;
	pp_real *out = rnd_buf(n, 1), *pre = rnd_buf(n, 1);
	pp_real *want_pre = malloc(sizeof(pp_real) * n), *want_out = malloc(sizeof(pp_real) * n);
	for (int r = 0; r < N; r++)
		for (int o = 0; o < OC; o++) {
			double s = bias ? b[o] : 0;
			for (int k = 0; k < C; k++)
				s += inp[r * C + k] * w[o * C + k];
			want_pre[r * OC + o] = s;
			want_out[r * OC + o] = ref_act(s, PP_ACT_GELU_TANH);
		}
	ops->matmul_gelu_fwd(out, pre, inp, w, b, N, C, OC);
	check_close(bias ? "ops/matmul_gelu_fwd_bias_pre" : "ops/matmul_gelu_fwd_pre", pre,
		    want_pre, n, FWD_TOL);
	check_close(bias ? "ops/matmul_gelu_fwd_bias_out" : "ops/matmul_gelu_fwd_out", out,
		    want_out, n, FWD_TOL);
	free(inp);
	free(w);
	free(b);
	free(out);
	free(pre);
	free(want_pre);
	free(want_out);
}

/* A linear layer on gelu(pre): out = gelu(pre) @ w^T + bias. The forward
 * keeps gelu(pre) in stat1, as the model keeps it for the weight gradient. */
static void gelu_matmul_fwd(op_case *c)
{
	ops->gelu_fwd(c->stat1, X(0), (size_t)c->N * c->C);
	ops->matmul_fwd(c->out, c->stat1, X(1), X(2), c->N, c->C, c->OC);
}
static void gelu_matmul_bwd(op_case *c)
{
	ops->gelu_matmul_bwd(DX(0), DX(1), DX(2), c->dout, c->stat1, X(0), X(1), c->N, c->C, c->OC);
}

static void test_gelu_matmul_bwd(void)
{
	op_case cs = {.fwd = gelu_matmul_fwd, .bwd = gelu_matmul_bwd, .N = 5, .C = 7, .OC = 6},
		*c = &cs;
	case_arg(c, "pre", (size_t)c->N * c->C, OVERWRITE);
	case_arg(c, "w", (size_t)c->OC * c->C, ACCUM);
	case_arg(c, "bias", c->OC, ACCUM);
	case_out(c, (size_t)c->N * c->OC, (size_t)c->N * c->C);
	for (size_t i = 0; i < c->arg[0].n; i++)
		X(0)[i] *= 3; /* reach both tails of the GELU */
	gradcheck("ops/gelu_matmul_bwd", c);

	/* without dpre, dw and dbias are matmul_bwd's */
	size_t nw = c->arg[1].n;
	pp_real *dw = calloc(nw, sizeof(pp_real)), *db = calloc(c->OC, sizeof(pp_real));
	ops->gelu_matmul_bwd(NULL, dw, db, c->dout, c->stat1, X(0), X(1), c->N, c->C, c->OC);
	memset(DX(1), 0, sizeof(pp_real) * nw);
	memset(DX(2), 0, sizeof(pp_real) * c->OC);
	ops->matmul_bwd(NULL, DX(1), DX(2), c->dout, c->stat1, X(1), c->N, c->C, c->OC);
	check_close("ops/gelu_matmul_bwd_no_dpre_dw", dw, DX(1), nw, 0);
	check_close("ops/gelu_matmul_bwd_no_dpre_dbias", db, DX(2), c->OC, 0);
	free(dw);
	free(db);
	case_free(c);
}

/* ---- loss ---- */

/* out = losses (N); dout is filled with dscale, so that the finite
 * differences of sum(losses * dscale) are what dlogits holds */
static void ce_fwd(op_case *c)
{
	ops->crossentropy(c->out, NULL, X(0), c->tok, c->N, c->V, c->scale);
}
static void ce_bwd(op_case *c)
{
	ops->crossentropy(c->stat1, DX(0), X(0), c->tok, c->N, c->V, c->scale);
}

static void test_crossentropy(void)
{
	op_case cs = {.fwd = ce_fwd, .bwd = ce_bwd, .N = 6, .V = 11, .scale = 0.37}, *c = &cs;
	size_t nl = (size_t)c->N * c->V;
	case_arg(c, "logits", nl, OVERWRITE);
	case_out(c, c->N, c->N);
	c->tok = malloc(sizeof(int) * c->N);
	for (int n = 0; n < c->N; n++) {
		c->tok[n] = n % 3 == 1 ? PP_IGNORE_INDEX : (n * 5 + 2) % c->V;
		c->dout[n] = c->scale;
	}
	for (size_t i = 0; i < nl; i++)
		X(0)[i] *= 4;

	pp_real *want = malloc(sizeof(pp_real) * c->N);
	for (int n = 0; n < c->N; n++) {
		double z = 0;
		for (int v = 0; v < c->V; v++)
			z += exp(X(0)[n * c->V + v]);
		want[n] = c->tok[n] < 0 ? 0 : log(z) - X(0)[n * c->V + c->tok[n]];
	}
	c->fwd(c);
	check_close("ops/crossentropy_fwd", c->out, want, c->N, FWD_TOL);
	gradcheck("ops/crossentropy_bwd", c);

	/* dlogits == logits: same losses and gradient as separate buffers */
	pp_real *inplace = copy_buf(X(0), nl), *loss2 = malloc(sizeof(pp_real) * c->N);
	ops->crossentropy(c->out, DX(0), X(0), c->tok, c->N, c->V, c->scale);
	ops->crossentropy(loss2, inplace, inplace, c->tok, c->N, c->V, c->scale);
	CHECK(rel_diff(inplace, DX(0), nl) == 0 && rel_diff(loss2, c->out, c->N) == 0,
	      "ops/crossentropy_inplace", "aliased dlogits differ by %.3g, losses by %.3g",
	      rel_diff(inplace, DX(0), nl), rel_diff(loss2, c->out, c->N));

	/* logits near 1000 overflow exp without the max trick */
	for (size_t i = 0; i < nl; i++)
		inplace[i] = X(0)[i] + 1000;
	ops->crossentropy(loss2, NULL, inplace, c->tok, c->N, c->V, c->scale);
	check_close("ops/crossentropy_large_logits", loss2, want, c->N, 1e-10);
	free(inplace);
	free(loss2);
	free(want);
	case_free(c);
}

/* The vocabulary split in two: each half's log-sum-exp and target logit,
 * combined as the model combines them across tp ranks, then each half's
 * gradient from the global lse, must give the fused op's losses and
 * gradient (ignored rows included). */
static void test_crossentropy_split(void)
{
	const int N = 6, V = 10, H = V / 2;
	const pp_real dscale = 0.37;
	pp_real *logits = malloc(sizeof(pp_real) * N * V), *d = malloc(sizeof(pp_real) * N * V);
	pp_real *loss = malloc(sizeof(pp_real) * N), *dsplit = malloc(sizeof(pp_real) * N * V);
	int tgt[6], local[2][6];
	for (int i = 0; i < N * V; i++)
		logits[i] = (pp_real)(3 * sin(1.7 * i));
	for (int n = 0; n < N; n++) {
		tgt[n] = n == 2 ? PP_IGNORE_INDEX : (n * 7 + 1) % V;
		for (int h = 0; h < 2; h++) {
			int v = tgt[n] - h * H;
			local[h][n] = tgt[n] == PP_IGNORE_INDEX ? PP_IGNORE_INDEX
				      : v >= 0 && v < H         ? v
								: -1;
		}
	}
	ops->crossentropy(loss, d, logits, tgt, N, V, dscale);
	pp_real half[2][6 * 5], lse[2][6], tl[2][6], glse[6];
	double worst_loss = 0;
	for (int h = 0; h < 2; h++) {
		for (int n = 0; n < N; n++)
			memcpy(half[h] + n * H, logits + n * V + h * H, sizeof(pp_real) * H);
		ops->logsumexp_rows(lse[h], tl[h], half[h], local[h], N, H);
	}
	for (int n = 0; n < N; n++) {
		double m = fmax(lse[0][n], lse[1][n]);
		glse[n] = (pp_real)(m + log(exp(lse[0][n] - m) + exp(lse[1][n] - m)));
		double l = tgt[n] == PP_IGNORE_INDEX ? 0 : glse[n] - (tl[0][n] + tl[1][n]);
		worst_loss = fmax(worst_loss, fabs(l - loss[n]));
	}
	for (int h = 0; h < 2; h++) {
		ops->softmax_grad(half[h], half[h], glse, local[h], N, H, dscale);
		for (int n = 0; n < N; n++)
			memcpy(dsplit + n * V + h * H, half[h] + n * H, sizeof(pp_real) * H);
	}
	CHECK(worst_loss < 1e-12 && rel_diff(dsplit, d, (size_t)N * V) < 1e-12,
	      "ops/crossentropy_vocab_split", "losses differ by %.3g, gradients by %.3g",
	      worst_loss, rel_diff(dsplit, d, (size_t)N * V));
	free(logits);
	free(d);
	free(loss);
	free(dsplit);
}

/* ---- the float exp and tanh of the CPU backend ---- */

/* The production (float) build's softmax, loss and activations run on
 * pp_cpu_expf and pp_cpu_tanhf; the ops above, built in double, use libm. */
static void test_fast_math(void)
{
	double ee = 0, et = 0;
	for (int k = -870000; k <= 880000; k++) {
		float x = k * 1e-4f;
		double want = exp((double)x);
		ee = fmax(ee, fabs(pp_cpu_expf(x) - want) / want);
	}
	for (int k = -200000; k <= 200000; k++) {
		float x = k * 1e-4f;
		et = fmax(et, fabs(pp_cpu_tanhf(x) - tanh((double)x)));
	}
	CHECK(ee <= 2e-7, "ops/cpu_expf", "max relative error %.3g on [-87, 88] > 2e-7", ee);
	CHECK(et <= 3e-7, "ops/cpu_tanhf", "max absolute error %.3g on [-20, 20] > 3e-7", et);
	float lo = pp_cpu_expf(-1000), hi = pp_cpu_expf(1000);
	CHECK(lo >= 0 && lo < 1e-37f && isfinite(hi) && hi > 1e38f && pp_cpu_tanhf(-1000) == -1 &&
		      pp_cpu_tanhf(1000) == 1 && isnan(pp_cpu_expf(NAN)) &&
		      isnan(pp_cpu_tanhf(NAN)),
	      "ops/cpu_expf_tails", "exp(-1000) = %g, exp(1000) = %g, exp(NaN) = %g", lo, hi,
	      pp_cpu_expf(NAN));
}

/* ---- optimizer and vector ops ---- */

static void test_adamw(void)
{
	enum { n = 9 };
	const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.5f;
	pp_real *p = rnd_buf(n, 1), *g = rnd_buf(n, 1), *m = calloc(n, sizeof(pp_real)),
		*v = calloc(n, sizeof(pp_real)), *pc = calloc(n, sizeof(pp_real));
	double P[n], M[n] = {0}, Vv[n] = {0};
	for (int i = 0; i < n; i++)
		P[i] = p[i];
	for (long t = 1; t <= 3; t++) {
		for (int i = 0; i < n; i++)
			g[i] = rnd();
		/* the compute copy on the last step only: without it the rest is the same */
		ops->adamw(p, t == 3 ? pc : NULL, g, m, v, n, lr, b1, b2, eps, wd, t, gscale);
		for (int i = 0; i < n; i++) {
			double gi = g[i] * (double)gscale;
			M[i] = b1 * M[i] + (1 - (double)b1) * gi;
			Vv[i] = b2 * Vv[i] + (1 - (double)b2) * gi * gi;
			double mhat = M[i] / (1 - pow(b1, t)), vhat = Vv[i] / (1 - pow(b2, t));
			P[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * P[i]);
		}
	}
	double e = 0;
	for (int i = 0; i < n; i++)
		e = fmax(e, fmax(fabs(p[i] - P[i]), fmax(fabs(m[i] - M[i]), fabs(v[i] - Vv[i]))));
	CHECK(e <= 1e-12, "ops/adamw", "three steps off the hand computation by %.3g", e);
	CHECK(!memcmp(pc, p, n * sizeof *p), "ops/adamw_compute_copy",
	      "the compute copy differs from the new parameters");
	free(pc);
	free(p);
	free(g);
	free(m);
	free(v);
}

static void test_vector_ops(void)
{
	enum { n = 1001 };
	pp_real *a = rnd_buf(n, 1), *b = rnd_buf(n, 1), *want = malloc(sizeof(pp_real) * n);
	double ss = 0;
	for (int i = 0; i < n; i++) {
		ss += a[i] * a[i];
		want[i] = a[i] + b[i];
	}
	double got = ops->sumsq(a, n);
	CHECK(fabs(got - ss) <= 1e-12 * ss, "ops/sumsq", "%.17g, want %.17g", got, ss);
	pp_real *c = malloc(sizeof(pp_real) * n);
	ops->add_real(c, a, b, n);
	check_close("ops/add_real", c, want, n, 0);
	ops->to_act(c, a, n); /* the compute type is pp_real: a copy */
	pp_real *back = malloc(sizeof(pp_real) * n);
	ops->act_to_host(back, c, n);
	check_close("ops/to_act_roundtrip", back, a, n, 0);
	free(back);
	free(c);
	ops->add(a, a, b, n); /* out aliases a */
	check_close("ops/add", a, want, n, 0);
	for (int i = 0; i < n; i++)
		want[i] = a[i] * -2.5;
	ops->scale(a, -2.5, n);
	check_close("ops/scale", a, want, n, 0);
	free(a);
	free(b);
	free(want);
}

static void test_memory(void)
{
	enum { n = 100 };
	pp_real *host = rnd_buf(n, 1), *back = malloc(sizeof(pp_real) * n);
	unsigned char *d = ops->alloc(sizeof(pp_real) * n);
	int zeroed = d != NULL;
	for (size_t i = 0; d && i < sizeof(pp_real) * n; i++)
		zeroed &= d[i] == 0;
	CHECK(zeroed, "ops/alloc_zeroed", "alloc returned %p, not zero-filled", (void *)d);
	ops->to_device(d, host, sizeof(pp_real) * n);
	ops->to_host(back, d, sizeof(pp_real) * n);
	check_close("ops/copy_roundtrip", back, host, n, 0);
	ops->zero(d, sizeof(pp_real) * n);
	ops->to_host(back, d, sizeof(pp_real) * n);
	int all0 = 1;
	for (int i = 0; i < n; i++)
		all0 &= back[i] == 0;
	CHECK(all0, "ops/zero", "buffer not zero after zero()");
	ops->free(d);
	free(host);
	free(back);
}

/* Decoding with a KV cache gives the full forward's rows: the sequence goes
 * in as a prefill of n0 rows, then chunks of `step` rows, each appended to
 * a cache of Tmax >= T entries and attended against it; every row of out
 * must equal attention_fwd's over the whole sequence. */
static void test_attention_cached(const char *variant, int B, int T, int Hq, int Hkv, int D,
				  int window, int n0, int step, int Tmax, int nb)
{
	op_case bc = {0};
	pp_attn_bias bias;
	const pp_attn_bias *bp = NULL;
	if (nb) {
		case_arg(&bc, "bias", (size_t)Hq * nb, ACCUM);
		case_bucket(&bc, nb, Tmax);
		bp = case_bias(&bc, &bias);
	}
	const int W = (Hq + 2 * Hkv) * D, HD = Hq * D, KV = Hkv * D;
	const size_t ncache = (size_t)B * Tmax * KV;
	pp_real *qkv = rnd_buf((size_t)B * T * W, 1);
	pp_real *want = malloc(sizeof(pp_real) * B * T * HD);
	pp_real *lse = malloc(sizeof(pp_real) * B * Hq * T);
	pp_real *got = malloc(sizeof(pp_real) * B * T * HD);
	pp_real *kc = calloc(ncache, sizeof(pp_real)), *vc = calloc(ncache, sizeof(pp_real));
	pp_real *chunk = malloc(sizeof(pp_real) * B * T * W);
	pp_real *out = malloc(sizeof(pp_real) * B * T * HD);
	ops->attention_fwd(want, lse, qkv, B, T, Hq, Hkv, D, window, bp);
	for (int pos0 = 0, n = n0; pos0 < T; pos0 += n, n = T - pos0 < step ? T - pos0 : step) {
		for (int b = 0; b < B; b++)
			memcpy(chunk + (size_t)b * n * W, qkv + ((size_t)b * T + pos0) * W,
			       sizeof(pp_real) * n * W);
		ops->kv_append(kc, vc, chunk, B, n, Hq, Hkv, D, Tmax, &pos0);
		ops->attention_cached(out, chunk, kc, vc, B, n, Hq, Hkv, D, Tmax, &pos0, window,
				      bp);
		for (int b = 0; b < B; b++)
			memcpy(got + ((size_t)b * T + pos0) * HD, out + (size_t)b * n * HD,
			       sizeof(pp_real) * n * HD);
	}
	/* the cache holds every k and v head, and nothing past T */
	int cache_ok = 1;
	for (int b = 0; b < B; b++)
		for (int t = 0; t < Tmax; t++)
			for (int j = 0; j < KV; j++) {
				const pp_real *row = qkv + ((size_t)b * T + t) * W + HD;
				size_t at = ((size_t)b * Tmax + t) * KV + j;
				cache_ok &= t < T ? kc[at] == row[j] && vc[at] == row[KV + j]
						  : kc[at] == 0 && vc[at] == 0;
			}
	char name[80];
	snprintf(name, sizeof name, "ops/kv_append_%s", variant);
	CHECK(cache_ok, name, "cache entries differ from the k, v heads of qkv");
	snprintf(name, sizeof name, "ops/attention_cached_%s", variant);
	double d = rel_diff(got, want, (size_t)B * T * HD);
	CHECK(d <= FWD_TOL, name, "off attention_fwd by %.3g (tolerance %.0e)", d, FWD_TOL);
	free(qkv);
	free(want);
	free(lse);
	free(got);
	free(kc);
	free(vc);
	free(chunk);
	free(out);
	case_free(&bc);
}

/* Dropout: about p of the elements dropped, the others scaled exactly, and
 * the mask a function of an element's place in the whole matrix: two row
 * blocks, or two column blocks (a tp split), drop what the whole does. */
static void test_dropout(void)
{
	const int N = 96, C = 80;
	const double p = 0.25;
	const size_t n = (size_t)N * C;
	pp_real *x = rnd_buf(n, 1), *whole = malloc(n * sizeof(pp_real)),
		*part = malloc(n * sizeof(pp_real));
	for (size_t i = 0; i < n; i++)
		x[i] += x[i] >= 0 ? 0.5 : -0.5; /* no zeros of its own */
	pp_dropout d = {.key = 0xabcdef,
			.row0 = 1000,
			.threshold = pp_drop_threshold(p),
			.col0 = 0,
			.width = C,
			.scale = (float)(1 / (1 - p))};
	ops->dropout(whole, x, N, C, &d);
	size_t dropped = 0, wrong = 0;
	for (size_t i = 0; i < n; i++) {
		dropped += whole[i] == 0;
		wrong += whole[i] != 0 && whole[i] != x[i] * (pp_real)d.scale;
	}
	/* binomial: sd = sqrt(n p (1-p)) ~ 34 of 7680 */
	const double frac = (double)dropped / (double)n;
	CHECK(fabs(frac - p) < 0.02 && !wrong, "ops/dropout",
	      "dropped %.4f (p %.2f), %zu scaled wrongly", frac, p, wrong);
	/* rows [0, 40) and [40, N) as two calls */
	pp_dropout lo = d, hi = d;
	hi.row0 += 40;
	ops->dropout(part, x, 40, C, &lo);
	ops->dropout(part + 40 * C, x + 40 * C, N - 40, C, &hi);
	bool same = !memcmp(part, whole, n * sizeof(pp_real));
	/* columns [0, 30) and [30, C): blocks of a matrix C wide */
	pp_real *xc = malloc(n * sizeof(pp_real)), *yc = malloc(n * sizeof(pp_real));
	for (int c0 = 0; c0 < C; c0 += 30) {
		const int w = C - c0 < 30 ? C - c0 : 30;
		for (int i = 0; i < N; i++)
			memcpy(xc + (size_t)i * w, x + (size_t)i * C + c0, w * sizeof(pp_real));
		pp_dropout b = d;
		b.col0 = c0;
		ops->dropout(yc, xc, N, w, &b);
		for (int i = 0; i < N; i++)
			same &= !memcmp(yc + (size_t)i * w, whole + (size_t)i * C + c0,
					w * sizeof(pp_real));
	}
	/* in place, as the adapters' backward applies it */
	memcpy(part, x, n * sizeof(pp_real));
	ops->dropout(part, part, N, C, &d);
	same &= !memcmp(part, whole, n * sizeof(pp_real));
	/* another key drops others */
	d.key++;
	ops->dropout(part, x, N, C, &d);
	CHECK(same && memcmp(part, whole, n * sizeof(pp_real)), "ops/dropout_blocks",
	      "a row or column block, or in place, drops other elements than the whole");
	free(x);
	free(whole);
	free(part);
	free(xc);
	free(yc);
}

int main(void)
{
	ops = pp_ops_find(PP_DEVICE_CPU, PP_TYPE_REAL);
	CHECK(ops == &pp_ops_cpu && !pp_ops_find(7, PP_TYPE_REAL) &&
		      !pp_ops_find(-1, PP_TYPE_REAL) && !pp_ops_find(PP_DEVICE_CPU, PP_TYPE_BF16) &&
		      !pp_ops_find(PP_DEVICE_CPU, 5) &&
		      !strcmp(pp_device_name(PP_DEVICE_CUDA), "cuda") &&
		      !strcmp(pp_type_name(PP_TYPE_BF16), "bf16") &&
		      !strcmp(pp_device_name(9), "?"),
	      "ops/find", "pp_ops_find(cpu, fp32) = %p, want %p", (const void *)ops,
	      (const void *)&pp_ops_cpu);
	if (!ops)
		TH_EXIT();
	const pp_ops *sel = NULL;
	pp_err e = {0};
	int rc = pp_ops_select(PP_DEVICE_CPU, PP_TYPE_BF16, &sel, &e);
	CHECK(rc == PP_EUSAGE && !sel && strstr(e.msg, "dtype=bf16") &&
		      strstr(e.msg, "device=cuda"),
	      "ops/select_bf16_cpu", "rc %d: %s", rc, e.msg);
	/* the F64 test build never includes the CUDA backend */
	rc = pp_ops_select(PP_DEVICE_CUDA, PP_TYPE_REAL, &sel, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "no cuda backend"), "ops/select_unknown",
	      "rc %d: %s", rc, e.msg);
	CHECK(pp_act_size(ops) == sizeof(pp_real) && ops->act_type == PP_TYPE_REAL, "ops/act_size",
	      "%zu", pp_act_size(ops));

	test_memory();
	test_vector_ops();
	test_dropout();
	test_matmul(0);
	test_matmul(1);
	test_embed(0, 2.5, 0, "ops/embed_fwd_scaled", "ops/embed_bwd_scaled");
	test_embed(1, 1.3, 3, "ops/embed_fwd_wpe_pos0", "ops/embed_bwd_wpe_pos0");
	test_rmsnorm(0, "ops/rmsnorm_fwd", "ops/rmsnorm_bwd");
	test_rmsnorm(1, "ops/rmsnorm_fwd_offset1", "ops/rmsnorm_bwd_offset1");
	test_layernorm();
	test_norm_residual(0, 0, "ops/rmsnorm_residual_fwd");
	test_norm_residual(0, 1, "ops/rmsnorm_residual_fwd_offset1");
	test_norm_residual(1, 0, "ops/layernorm_residual_fwd");
	test_rope();
	/* T = 7 fits one query block; T = 70 spans two (blocks are 64 rows),
	 * with the window cutting off the second block's early keys */
	test_attention("mha", 2, 7, 2, 2, 4, 0, 0);
	test_attention("gqa", 2, 7, 4, 2, 4, 0, 0);
	test_attention("mqa", 1, 7, 3, 1, 4, 0, 0);
	test_attention("window", 2, 7, 4, 2, 4, 3, 0);
	test_attention("window_wide", 1, 7, 2, 1, 4, 50, 0);
	test_attention("two_blocks", 1, 70, 2, 1, 4, 0, 0);
	test_attention("two_blocks_window", 1, 70, 4, 2, 2, 5, 0);
	/* a learned bias by distance (GLaM's relative position biases) */
	test_attention("bias", 2, 7, 2, 2, 4, 0, 3);
	test_attention("bias_gqa", 2, 9, 4, 2, 4, 0, 5);
	test_attention("bias_window", 2, 9, 4, 2, 4, 3, 4);
	test_attention("bias_two_blocks", 1, 70, 2, 1, 4, 0, 6);
	/* prefill then one token at a time, or in chunks; Tmax > T */
	test_attention_cached("gqa", 2, 9, 4, 2, 4, 0, 4, 1, 12, 0);
	test_attention_cached("mqa_window", 2, 9, 3, 1, 4, 3, 5, 1, 9, 0);
	test_attention_cached("two_blocks", 1, 150, 4, 2, 2, 0, 70, 33, 160, 0);
	test_attention_cached("two_blocks_window", 1, 150, 2, 2, 3, 7, 100, 1, 150, 0);
	test_attention_cached("bias", 2, 9, 4, 2, 4, 0, 4, 1, 12, 5);
	test_attention_cached("bias_two_blocks_window", 1, 150, 2, 2, 3, 7, 70, 33, 160, 6);
	test_glu(PP_ACT_SILU, "ops/glu_fwd_silu", "ops/glu_bwd_silu");
	test_moe_route(PP_ROUTE_TOPK_SOFTMAX, "ops/moe_route_topk_softmax");
	test_moe_route(PP_ROUTE_SOFTMAX_TOPK, "ops/moe_route_softmax_topk");
	test_moe_permute(-1, "ops/moe_permute_dropless");
	test_moe_permute(3, "ops/moe_permute_capacity");
	test_moe_router_bwd(PP_ROUTE_TOPK_SOFTMAX, "ops/moe_router_bwd_topk_softmax");
	test_moe_router_bwd(PP_ROUTE_SOFTMAX_TOPK, "ops/moe_router_bwd_softmax_topk");
	test_glu(PP_ACT_GELU_TANH, "ops/glu_fwd_gelu", "ops/glu_bwd_gelu");
	test_gelu();
	test_matmul_gelu(0);
	test_matmul_gelu(1);
	test_gelu_matmul_bwd();
	test_crossentropy();
	test_crossentropy_split();
	test_adamw();
	test_fast_math();
	TH_EXIT();
}
