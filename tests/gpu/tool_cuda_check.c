/* The CUDA backend against the CPU backend, op by op, on a machine with a
 * GPU: every op of kernels/ops.h runs on fresh random inputs of small
 * realistic shapes on pp_ops_cpu and on each CUDA table, pp_ops_cuda (fp32)
 * and pp_ops_cuda_bf16 (bf16 activations), and every output and gradient
 * is compared.
 *
 *   error      max |gpu - cpu| / max |cpu| over each output (normwise
 *              relative error; NaN anywhere counts as infinite), the worst
 *              output of the op. fp32: both sides are fp32 with different
 *              summation orders; the bound is 1e-5 (PP_CHECK_TOL overrides).
 *              bf16: the inputs are built on the host as fp32 values rounded
 *              to bf16, so the CPU op (in fp32) sees exactly the inputs the
 *              GPU sees; activations come back through act_to_host and fp32
 *              tensors (statistics, parameter gradients, losses) as they
 *              are; the bound is 1e-2 (PP_CHECK_TOL_BF16 overrides).
 *   written    outputs that an op overwrites start as NaN on the GPU: an
 *              element the kernel forgets stays NaN and fails the check.
 *   untouched  inputs are compared bitwise after the GPU run.
 *   determinism  the GPU runs every op twice on the same inputs: the
 *              outputs must be bitwise equal (the second run is timed; the
 *              first also loads the kernels).
 *   cudnn      attention through cuDNN (PP_CUDA_ATTENTION_CUDNN) is checked
 *              against the same CPU attention at the bf16 bound, 1e-2, in
 *              both tables, and its backward (the deterministic form) is
 *              asked to be bitwise repeatable like every other op. A shape
 *              cuDNN does not take is one counted SKIP line with cuDNN's
 *              reason: tests/gpu/test_gpu.sh names the ones it expects.
 *
 * One PASS:/FAIL: line per check, then a table (op, table, shape, max rel
 * err, CPU ms, GPU ms). The seed is printed; PP_CHECK_SEED=N repeats a run,
 * PP_CHECK_ONLY=NAME runs the checks of the ops whose name contains NAME,
 * PP_CHECK_TABLE=fp32|bf16 the checks of one table. Exit status 1 when a
 * check fails or no GPU can be used. Built without CUDA it prints one SKIP
 * line. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../kernels/fp8.h"
#include "../../kernels/fp8mm.h"
#include "../../kernels/ops.h"

#ifndef PP_CUDA

int main(void)
{
	printf("SKIP: cuda: built without CUDA\n");
	return 0;
}

#else

#include <cuda_runtime.h>

#define MAXT 8 /* tensors per check */

enum { IN, OUT, ACC, INOUT }; /* OUT is overwritten by the op; ACC, INOUT start with data */
/* ACT: a pp_act tensor, of the table's compute type on the GPU; F32,
 * F32_POS: pp_real; POS: ints equal to the tensor's scale (a position) */
enum { ACT, F32, F32_POS, TOK, TGT, TGT_SPLIT, POS, IDX };

typedef struct {
	const char *name;
	size_t n;
	int role, kind;
	double scale; /* ACT, F32: uniform in [-scale, scale) */
	double tol;   /* bound on this output's error; 0: the global one */
	int exact;    /* this output must equal the CPU's bit for bit */
} tensor;

struct check;
typedef void (*run_fn)(const pp_ops *o, void *const *p, const struct check *c);

typedef struct check {
	const char *op;
	char shape[80];
	run_fn run;
	/* derives inputs on the host from the others, with the CPU backend
	 * (attention_bwd needs the out and lse of its qkv) */
	void (*prep)(void *const *host, const struct check *c);
	int nt;
	tensor t[MAXT];
	int a[10];     /* sizes and flags, per op */
	float f[6];    /* scalars, per op */
	int vocab;     /* token and target range */
	int attention; /* PP_CUDA_ATTENTION_* for the GPU runs */
} check;

static double tol = 1e-5, tol_bf16 = 1e-2;
static int failed, passed, skipped;
static const char *only;       /* PP_CHECK_ONLY: the ops whose name contains it */
static const char *only_table; /* PP_CHECK_TABLE: fp32 or bf16 */

static int selected(const char *op) { return !only || strstr(op, only); }

/* the GPU tables, each against the CPU */
typedef struct {
	const char *name;
	const pp_ops *ops;
} table_t;
static const table_t tables[] = {{"fp32", &pp_ops_cuda}, {"bf16", &pp_ops_cuda_bf16}};
enum { N_TABLES = sizeof tables / sizeof tables[0] };

static int table_selected(const table_t *tb)
{
	return !only_table || !strcmp(only_table, tb->name);
}

static int is_bf16(const pp_ops *o) { return o->act_type == PP_TYPE_BF16; }

/* the error bound of a table's outputs */
static double tol_of(const pp_ops *o) { return is_bf16(o) ? tol_bf16 : tol; }

/* ---- bf16 on the host ------------------------------------------------------- */

/* x rounded to bf16 (to nearest even; NaN stays a quiet NaN), the upper
 * half of its fp32 bits */
static uint16_t bf16_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float bf16_round(float x)
{
	uint32_t u = (uint32_t)bf16_bits(x) << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* ---- random data ------------------------------------------------------------ */

static uint64_t rng;

static uint64_t next_u64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static double rnd(void) { return (double)(next_u64() >> 11) / (double)(1ull << 52) - 1; }

static int rnd_int(int n) { return (int)(next_u64() % (uint64_t)n); }

static void fill(void *buf, const tensor *t, int vocab)
{
	float *f = buf;
	int *x = buf;
	for (size_t i = 0; i < t->n; i++) {
		int u = rnd_int(10);
		switch (t->kind) {
		case ACT:
		case F32:
			f[i] = t->role == OUT ? NAN : (float)(rnd() * t->scale);
			break;
		case F32_POS:
			f[i] = (float)(fabs(rnd()) * t->scale);
			break;
		case TOK: /* 1 in 10 in another rank's vocabulary shard */
			x[i] = u == 0 ? -1 : rnd_int(vocab);
			break;
		case TGT: /* 1 in 10 ignored */
			x[i] = u == 0 ? PP_IGNORE_INDEX : rnd_int(vocab);
			break;
		case TGT_SPLIT: /* also targets in other slices, below and above */
			x[i] = u == 0   ? PP_IGNORE_INDEX
			       : u == 1 ? -1
			       : u == 2 ? vocab + 3
					: rnd_int(vocab);
			break;
		case POS:
			x[i] = (int)t->scale;
			break;
		case IDX: /* an index below vocab */
			x[i] = rnd_int(vocab);
			break;
		}
	}
}

static int is_real(const tensor *t)
{
	return t->kind == ACT || t->kind == F32 || t->kind == F32_POS;
}

/* bytes on the host (fp32 for every real tensor) */
static size_t bytes_of(const tensor *t)
{
	return t->n * (is_real(t) ? sizeof(float) : sizeof(int));
}

/* bytes on the device of table o */
static size_t dev_bytes(const pp_ops *o, const tensor *t)
{
	return t->kind == ACT ? t->n * pp_act_size(o) : bytes_of(t);
}

/* an activation tensor's host values as table o holds them: rounded to bf16
 * in the bf16 table */
static void round_act(const pp_ops *o, void *host, const tensor *t)
{
	if (t->kind != ACT || !is_bf16(o))
		return;
	float *f = host;
	for (size_t i = 0; i < t->n; i++)
		f[i] = bf16_round(f[i]);
}

/* host fp32 values to the device of table o: activations in its compute
 * type (bf16 bits made on the host, so the upload does not depend on the
 * ops under test) */
static void upload(const pp_ops *o, void *dev, const void *host, const tensor *t)
{
	if (t->kind != ACT || !is_bf16(o)) {
		o->to_device(dev, host, bytes_of(t));
		return;
	}
	const float *f = host;
	uint16_t *b = malloc(t->n * sizeof *b + 1);
	for (size_t i = 0; i < t->n; i++)
		b[i] = bf16_bits(f[i]);
	o->to_device(dev, b, t->n * sizeof *b);
	free(b);
}

/* device to host fp32: activations through act_to_host */
static void download(const pp_ops *o, void *host, const void *dev, const tensor *t)
{
	if (t->kind == ACT)
		o->act_to_host(host, dev, t->n);
	else
		o->to_host(host, dev, bytes_of(t));
}

/* ---- measuring ---------------------------------------------------------------- */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void gpu_sync(void)
{
	cudaError_t q = cudaDeviceSynchronize();
	if (q != cudaSuccess) {
		fprintf(stderr, "cudaDeviceSynchronize: %s\n", cudaGetErrorString(q));
		exit(1);
	}
}

/* max |g - c| / max |c|; NaN or inf anywhere gives INFINITY */
static double rel_err(const float *c, const float *g, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(c[i]) || !isfinite(g[i]))
			return INFINITY;
		double d = fabs((double)g[i] - c[i]);
		num = d > num ? d : num;
		den = fabs(c[i]) > den ? fabs(c[i]) : den;
	}
	return den > 0 ? num / den : num;
}

typedef struct {
	char op[24], table[8], shape[80];
	double err, cpu_ms, gpu_ms;
	int ok;
} row;

static row table[512];
static int n_rows;

static void report(const char *op, const table_t *tb, const char *shape, int ok, double err,
		   double cpu_ms, double gpu_ms, const char *why)
{
	if (ok) {
		printf("PASS: cuda/%s/%s[%s]\n", tb->name, op, shape);
		passed++;
	} else {
		printf("FAIL: cuda/%s/%s[%s]: %s\n", tb->name, op, shape, why);
		failed++;
	}
	fflush(stdout);
	if (n_rows < (int)(sizeof table / sizeof table[0])) {
		row *r = &table[n_rows++];
		snprintf(r->op, sizeof r->op, "%s", op);
		snprintf(r->table, sizeof r->table, "%s", tb->name);
		snprintf(r->shape, sizeof r->shape, "%s", shape);
		r->err = err, r->cpu_ms = cpu_ms, r->gpu_ms = gpu_ms, r->ok = ok;
	}
}

/* ---- the driver ------------------------------------------------------------- */

static void run_check_on(check *c, const table_t *tb)
{
	const pp_ops *g = tb->ops;
	void *host[MAXT], *cpu[MAXT], *dev[MAXT], *got[2][MAXT];
	for (int i = 0; i < c->nt; i++) {
		size_t b = bytes_of(&c->t[i]) + 4;
		host[i] = malloc(b);
		cpu[i] = malloc(b);
		got[0][i] = malloc(b);
		got[1][i] = malloc(b);
		fill(host[i], &c->t[i], c->vocab);
		round_act(g, host[i], &c->t[i]);
	}
	if (c->prep) {
		c->prep(host, c);
		for (int i = 0; i < c->nt; i++)
			round_act(g, host[i], &c->t[i]);
	}
	for (int i = 0; i < c->nt; i++)
		memcpy(cpu[i], host[i], bytes_of(&c->t[i]));
	double t0 = now_ms();
	c->run(&pp_ops_cpu, cpu, c);
	double cpu_ms = now_ms() - t0, gpu_ms = 0;

	pp_cuda_set_attention(c->attention);
	for (int rep = 0; rep < 2; rep++) {
		for (int i = 0; i < c->nt; i++) {
			dev[i] = g->alloc(dev_bytes(g, &c->t[i]));
			if (!dev[i]) {
				fprintf(stderr, "out of GPU memory\n");
				exit(1);
			}
			upload(g, dev[i], host[i], &c->t[i]);
		}
		gpu_sync();
		t0 = now_ms();
		c->run(g, dev, c);
		gpu_sync();
		gpu_ms = now_ms() - t0;
		for (int i = 0; i < c->nt; i++) {
			download(g, got[rep][i], dev[i], &c->t[i]);
			g->free(dev[i]);
		}
	}
	pp_cuda_set_attention(PP_CUDA_ATTENTION_AUTO);

	double worst = 0;
	char why[256] = "";
	for (int i = 0; i < c->nt; i++) {
		const tensor *t = &c->t[i];
		size_t b = bytes_of(t);
		if (t->role == IN) {
			if (memcmp(got[1][i], host[i], b) && !why[0])
				snprintf(why, sizeof why, "input %s was modified", t->name);
			continue;
		}
		if (memcmp(got[0][i], got[1][i], b) && !why[0])
			snprintf(why, sizeof why, "%s differs between two runs on the same inputs",
				 t->name);
		double err = is_real(t) ? rel_err(cpu[i], got[1][i], t->n)
					: (memcmp(cpu[i], got[1][i], b) ? INFINITY : 0);
		if (t->exact && memcmp(cpu[i], got[1][i], b))
			err = INFINITY;
		const double bound = t->tol > tol_of(g) ? t->tol : tol_of(g);
		if (err > bound && !why[0])
			snprintf(why, sizeof why, "%s: relative error %.3g > %.0e", t->name, err,
				 bound);
		worst = err > worst ? err : worst;
	}
	report(c->op, tb, c->shape, !why[0], worst, cpu_ms, gpu_ms, why);
	for (int i = 0; i < c->nt; i++) {
		free(host[i]);
		free(cpu[i]);
		free(got[0][i]);
		free(got[1][i]);
	}
}

/* the check on every selected table, each with fresh inputs */
static void run_check(check *c)
{
	if (!selected(c->op))
		return;
	for (int k = 0; k < N_TABLES; k++)
		if (table_selected(&tables[k]))
			run_check_on(c, &tables[k]);
}

#define P(i)     ((pp_real *)p[i])
#define I(i)     ((int *)p[i])
#define TS(...)  ((tensor){__VA_ARGS__, 0, 0})
/* the same with its own error bound */
#define TSB(...) ((tensor){__VA_ARGS__, 0})

/* ---- memory ------------------------------------------------------------------ */

/* the selected tables, in order */
#define EACH_TABLE(tb)                                                                             \
	for (const table_t *tb = tables; tb < tables + N_TABLES; tb++)                             \
		if (table_selected(tb))

static void check_memory_on(const table_t *tb)
{
	const size_t n = 1000003;
	const pp_ops *g = tb->ops;
	float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
	for (size_t i = 0; i < n; i++)
		h[i] = (float)rnd();
	float *a = g->alloc(n * sizeof *a), *b = g->alloc(n * sizeof *b);
	int ok = a && b;
	if (ok) {
		g->to_host(back, b, n * sizeof *back);
		for (size_t i = 0; i < n && ok; i++)
			ok = back[i] == 0;
	}
	int zero_fill = ok;
	if (ok) { /* host -> device -> device -> host, then zero */
		g->to_device(a, h, n * sizeof *h);
		g->to_device(b, a, n * sizeof *h);
		g->to_host(back, b, n * sizeof *back);
		ok = !memcmp(back, h, n * sizeof *h);
	}
	int copies = ok;
	if (ok) {
		g->zero(b + 10, 100 * sizeof *b);
		g->to_host(back, b, n * sizeof *back);
		for (size_t i = 0; i < n && ok; i++)
			ok = back[i] == (i >= 10 && i < 110 ? 0 : h[i]);
	}
	g->free(a);
	g->free(b);
	report("memory", tb, "alloc zero-filled, copies, zero", ok, 0, 0, 0,
	       !zero_fill ? "alloc is not zero-filled"
	       : !copies  ? "host/device/device copies differ"
			  : "zero cleared the wrong range");
	free(h);
	free(back);
}

static void check_memory(void)
{
	if (!selected("memory"))
		return;
	EACH_TABLE(tb) check_memory_on(tb);
}

/* to_act then act_to_host: the host's rounding of every value, bit for bit
 * (NaN for NaN), in the fp32 table the value itself. Random values of every
 * magnitude, then specials: signed zeros, infinities, NaN, the largest
 * float (rounds to inf), subnormals, ties that round to even (down and up).
 * The whole vector from aligned pointers, then from one element in, where
 * 16-byte loads do not apply. */
static void check_to_act_on(const table_t *tb, size_t n)
{
	const pp_ops *g = tb->ops;
	const float special[] = {0.0f,          -0.0f,          INFINITY, -INFINITY, NAN,
				 3.4028235e38f, -3.4028235e38f, 1e-40f,   -1e-41f,   1.00390625f,
				 1.01171875f,   -1.00390625f,   65504.0f, 1.0f / 3};
	const size_t ns = sizeof special / sizeof special[0];
	float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
	for (size_t i = 0; i < n; i++)
		h[i] = i < ns ? special[i] : (float)(rnd() * pow(2, rnd_int(60) - 30));
	float *src = g->alloc(n * sizeof *src);
	void *act = g->alloc(n * pp_act_size(g));
	g->to_device(src, h, n * sizeof *h);
	char why[160] = "";
	double t0 = now_ms();
	for (int off = 0; off < 2 && !why[0]; off++) {
		const size_t m = n - (size_t)off;
		g->to_act((char *)act + (size_t)off * pp_act_size(g), src + off, m);
		for (size_t i = 0; i < m; i++)
			back[i] = -1;
		g->act_to_host(back, (const char *)act + (size_t)off * pp_act_size(g), m);
		for (size_t i = 0; i < m && !why[0]; i++) {
			const float want = is_bf16(g) ? bf16_round(h[i + off]) : h[i + off];
			if (isnan(want) ? !isnan(back[i]) : memcmp(&want, &back[i], sizeof want))
				snprintf(why, sizeof why,
					 "element %zu (offset %d): %.9g became %.9g, want %.9g", i,
					 off, h[i + off], back[i], want);
		}
	}
	double gpu_ms = now_ms() - t0;
	g->free(src);
	g->free(act);
	char shape[48];
	snprintf(shape, sizeof shape, "n=%zu, aligned and one in", n);
	report("to_act+act_to_host", tb, shape, !why[0], why[0] ? INFINITY : 0, 0, gpu_ms, why);
	free(h);
	free(back);
}

static void check_to_act(size_t n)
{
	if (!selected("to_act"))
		return;
	EACH_TABLE(tb) check_to_act_on(tb, n);
}

/* ---- matmul ------------------------------------------------------------------- */

static void r_matmul_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->matmul_fwd(P(0), P(1), P(2), c->a[3] ? P(3) : NULL, c->a[0], c->a[1], c->a[2]);
}

/* a[5] calls in a row: the parameter gradients accumulate (in fp32) */
static void r_matmul_bwd(const pp_ops *o, void *const *p, const check *c)
{
	for (int k = 0; k < c->a[5]; k++)
		o->matmul_bwd(c->a[4] ? P(0) : NULL, P(1), c->a[3] ? P(2) : NULL, P(3), P(4), P(5),
			      c->a[0], c->a[1], c->a[2]);
}

static void check_matmul(int N, int C, int OC, int bias, int dinp, int calls)
{
	check c = {.op = "matmul_fwd", .run = r_matmul_fwd, .nt = 4, .a = {N, C, OC, bias}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d OC=%d%s", N, C, OC, bias ? " bias" : "");
	c.t[0] = TS("out", (size_t)N * OC, OUT, ACT, 1);
	c.t[1] = TS("inp", (size_t)N * C, IN, ACT, 1);
	c.t[2] = TS("w", (size_t)OC * C, IN, ACT, 0.1);
	c.t[3] = TS("bias", (size_t)OC, IN, ACT, 1);
	run_check(&c);

	check d = {.op = "matmul_bwd",
		   .run = r_matmul_bwd,
		   .nt = 6,
		   .a = {N, C, OC, bias, dinp, calls}};
	snprintf(d.shape, sizeof d.shape, "N=%d C=%d OC=%d%s%s%s", N, C, OC, bias ? " dbias" : "",
		 dinp ? "" : " no dinp", calls > 1 ? " 2 calls" : "");
	d.t[0] = TS("dinp", (size_t)N * C, OUT, ACT, 1);
	d.t[1] = TS("dw", (size_t)OC * C, ACC, F32, 1);
	d.t[2] = TS("dbias", (size_t)OC, ACC, F32, 1);
	d.t[3] = TS("dout", (size_t)N * OC, IN, ACT, 1);
	d.t[4] = TS("inp", (size_t)N * C, IN, ACT, 1);
	d.t[5] = TS("w", (size_t)OC * C, IN, ACT, 0.1);
	if (!dinp)
		d.t[0].role = INOUT; /* untouched: stays as it was */
	run_check(&d);
}

static void r_matmul_gelu_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->matmul_gelu_fwd(P(0), P(1), P(2), P(3), c->a[3] ? P(4) : NULL, c->a[0], c->a[1],
			   c->a[2]);
}

/* OC a multiple of 8 takes cuBLASLt's GELU epilogue, others the fallback.
 * The epilogue may evaluate tanh with the hardware approximation (about
 * 2^-11 relative): out gets 1e-3, pre the usual bound. */
static void check_matmul_gelu(int N, int C, int OC, int bias)
{
	check c = {
		.op = "matmul_gelu_fwd", .run = r_matmul_gelu_fwd, .nt = 5, .a = {N, C, OC, bias}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d OC=%d%s", N, C, OC, bias ? " bias" : "");
	c.t[0] = TSB("out", (size_t)N * OC, OUT, ACT, 1, 1e-3);
	c.t[1] = TS("pre", (size_t)N * OC, OUT, ACT, 1);
	c.t[2] = TS("inp", (size_t)N * C, IN, ACT, 1);
	c.t[3] = TS("w", (size_t)OC * C, IN, ACT, 0.1);
	c.t[4] = TS("bias", (size_t)OC, IN, ACT, 1);
	run_check(&c);
}

static void r_gelu_matmul_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->gelu_matmul_bwd(P(0), P(1), P(2), P(3), P(4), P(5), P(6), c->a[0], c->a[1], c->a[2]);
}

/* C a multiple of 8 takes cuBLASLt's DGELU epilogue, others the fallback;
 * dpre gets the GELU epilogue's bound. inp stands for gelu(pre): the op
 * reads it for dw only, so any values serve. */
static void check_gelu_matmul_bwd(int N, int C, int OC)
{
	check c = {.op = "gelu_matmul_bwd", .run = r_gelu_matmul_bwd, .nt = 7, .a = {N, C, OC}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d OC=%d", N, C, OC);
	c.t[0] = TSB("dpre", (size_t)N * C, OUT, ACT, 1, 1e-3);
	c.t[1] = TS("dw", (size_t)OC * C, ACC, F32, 1);
	c.t[2] = TS("dbias", (size_t)OC, ACC, F32, 1);
	c.t[3] = TS("dout", (size_t)N * OC, IN, ACT, 1);
	c.t[4] = TS("inp", (size_t)N * C, IN, ACT, 1);
	c.t[5] = TS("pre", (size_t)N * C, IN, ACT, 2);
	c.t[6] = TS("w", (size_t)OC * C, IN, ACT, 0.1);
	run_check(&c);
}

/* ---- embedding ------------------------------------------------------------------ */

static void r_embed_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->embed_fwd(P(0), I(1), P(2), c->a[4] ? P(3) : NULL, c->f[0], c->a[0], c->a[1], c->a[2],
		     I(4));
}

static void r_embed_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->embed_bwd(P(0), c->a[4] ? P(1) : NULL, P(2), I(3), c->f[0], c->a[0], c->a[1], c->a[2],
		     I(4));
}

static void check_embed(int B, int T, int C, int V, int pos0, int wpe, float scale)
{
	const int maxT = pos0 + T + 5;
	check c = {.op = "embed_fwd",
		   .run = r_embed_fwd,
		   .nt = 5,
		   .a = {B, T, C, pos0, wpe},
		   .f = {scale},
		   .vocab = V};
	snprintf(c.shape, sizeof c.shape, "B=%d T=%d C=%d V=%d pos0=%d%s scale=%g", B, T, C, V,
		 pos0, wpe ? " wpe" : "", scale);
	c.t[0] = TS("out", (size_t)B * T * C, OUT, ACT, 1);
	c.t[1] = TS("tok", (size_t)B * T, IN, TOK, 0);
	c.t[2] = TS("wte", (size_t)V * C, IN, ACT, 1);
	c.t[3] = TS("wpe", (size_t)maxT * C, IN, ACT, 1);
	c.t[4] = TS("pos0", 1, IN, POS, pos0);
	run_check(&c);

	check d = {.op = "embed_bwd",
		   .run = r_embed_bwd,
		   .nt = 5,
		   .a = {B, T, C, pos0, wpe},
		   .f = {scale},
		   .vocab = V};
	memcpy(d.shape, c.shape, sizeof d.shape);
	d.t[0] = TS("dwte", (size_t)V * C, ACC, F32, 1);
	d.t[1] = TS("dwpe", (size_t)maxT * C, ACC, F32, 1);
	d.t[2] = TS("dout", (size_t)B * T * C, IN, ACT, 1);
	d.t[3] = TS("tok", (size_t)B * T, IN, TOK, 0);
	d.t[4] = TS("pos0", 1, IN, POS, pos0);
	run_check(&d);
}

/* ---- norms --------------------------------------------------------------------- */

static void r_rmsnorm_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->rmsnorm_fwd(P(0), P(1), P(2), P(3), c->f[0], c->f[1], c->a[0], c->a[1]);
}

static void r_rmsnorm_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->rmsnorm_bwd(P(0), P(1), P(2), P(3), P(4), P(5), c->f[1], c->a[0], c->a[1]);
}

/* rstd of the rows of x, as the forward pass saves it */
static void prep_rstd(void *const *host, const check *c)
{
	const int N = c->a[0], C = c->a[1];
	float *out = malloc(sizeof(float) * (size_t)N * C);
	pp_ops_cpu.rmsnorm_fwd(out, host[5], host[3], host[4], c->f[0], c->f[1], N, C);
	free(out);
}

static void r_layernorm_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->layernorm_fwd(P(0), P(1), P(2), P(3), P(4), P(5), c->f[0], c->a[0], c->a[1]);
}

static void r_layernorm_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->layernorm_bwd(P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), c->a[0], c->a[1]);
}

static void prep_mean_rstd(void *const *host, const check *c)
{
	const int N = c->a[0], C = c->a[1];
	float *out = malloc(sizeof(float) * (size_t)N * C), *b = calloc((size_t)C, sizeof(float));
	pp_ops_cpu.layernorm_fwd(out, host[6], host[7], host[4], host[5], b, c->f[0], N, C);
	free(out);
	free(b);
}

static void check_norms(int N, int C, float offset)
{
	const float eps = 1e-5f;
	check c = {
		.op = "rmsnorm_fwd", .run = r_rmsnorm_fwd, .nt = 4, .a = {N, C}, .f = {eps, offset}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d offset=%g", N, C, offset);
	c.t[0] = TS("out", (size_t)N * C, OUT, ACT, 1);
	c.t[1] = TS("rstd", (size_t)N, OUT, F32, 1);
	c.t[2] = TS("x", (size_t)N * C, IN, ACT, 3);
	c.t[3] = TS("w", (size_t)C, IN, ACT, 1);
	run_check(&c);

	check d = {.op = "rmsnorm_bwd",
		   .run = r_rmsnorm_bwd,
		   .prep = prep_rstd,
		   .nt = 6,
		   .a = {N, C},
		   .f = {eps, offset}};
	memcpy(d.shape, c.shape, sizeof d.shape);
	d.t[0] = TS("dx", (size_t)N * C, ACC, ACT, 1);
	d.t[1] = TS("dw", (size_t)C, ACC, F32, 1);
	d.t[2] = TS("dout", (size_t)N * C, IN, ACT, 1);
	d.t[3] = TS("x", (size_t)N * C, IN, ACT, 3);
	d.t[4] = TS("w", (size_t)C, IN, ACT, 1);
	d.t[5] = TS("rstd", (size_t)N, IN, F32, 1);
	run_check(&d);

	if (offset != 0)
		return;
	check l = {.op = "layernorm_fwd", .run = r_layernorm_fwd, .nt = 6, .a = {N, C}, .f = {eps}};
	snprintf(l.shape, sizeof l.shape, "N=%d C=%d", N, C);
	l.t[0] = TS("out", (size_t)N * C, OUT, ACT, 1);
	l.t[1] = TS("mean", (size_t)N, OUT, F32, 1);
	l.t[2] = TS("rstd", (size_t)N, OUT, F32, 1);
	l.t[3] = TS("x", (size_t)N * C, IN, ACT, 3);
	l.t[4] = TS("w", (size_t)C, IN, ACT, 1);
	l.t[5] = TS("b", (size_t)C, IN, ACT, 1);
	run_check(&l);

	check m = {.op = "layernorm_bwd",
		   .run = r_layernorm_bwd,
		   .prep = prep_mean_rstd,
		   .nt = 8,
		   .a = {N, C},
		   .f = {eps}};
	memcpy(m.shape, l.shape, sizeof m.shape);
	m.t[0] = TS("dx", (size_t)N * C, ACC, ACT, 1);
	m.t[1] = TS("dw", (size_t)C, ACC, F32, 1);
	m.t[2] = TS("db", (size_t)C, ACC, F32, 1);
	m.t[3] = TS("dout", (size_t)N * C, IN, ACT, 1);
	m.t[4] = TS("x", (size_t)N * C, IN, ACT, 3);
	m.t[5] = TS("w", (size_t)C, IN, ACT, 1);
	m.t[6] = TS("mean", (size_t)N, IN, F32, 1);
	m.t[7] = TS("rstd", (size_t)N, IN, F32, 1);
	run_check(&m);
}

/* The residual add fused with the norm. a[2] = 1 runs it in place, res_out
 * on top of x: tensor 0 holds x, then res. Else x is the last tensor. */
static void r_rmsnorm_residual_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->rmsnorm_residual_fwd(P(0), P(3), P(4), c->a[2] ? P(0) : P(5), P(1), P(2), c->f[0],
				c->f[1], c->a[0], c->a[1]);
}

static void r_layernorm_residual_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->layernorm_residual_fwd(P(0), P(4), P(5), P(6), c->a[2] ? P(0) : P(7), P(1), P(2), P(3),
				  c->f[0], c->a[0], c->a[1]);
}

/* widths from one register step per thread to past the widest register
 * variant (8192), where the row is read back from memory */
static void check_norm_residual(int N, int C, float offset, int in_place)
{
	const float eps = 1e-5f;
	const size_t NC = (size_t)N * C;
	check c = {.op = "rmsnorm_residual_fwd",
		   .run = r_rmsnorm_residual_fwd,
		   .nt = in_place ? 5 : 6,
		   .a = {N, C, in_place},
		   .f = {eps, offset}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d offset=%g%s", N, C, offset,
		 in_place ? " res=x" : "");
	c.t[0] = in_place ? TS("x, then res", NC, INOUT, ACT, 3) : TS("res", NC, OUT, ACT, 1);
	c.t[1] = TS("y", NC, IN, ACT, 1);
	c.t[2] = TS("w", (size_t)C, IN, ACT, 1);
	c.t[3] = TS("out", NC, OUT, ACT, 1);
	c.t[4] = TS("rstd", (size_t)N, OUT, F32, 1);
	c.t[5] = TS("x", NC, IN, ACT, 3);
	run_check(&c);

	if (offset != 0)
		return;
	check l = {.op = "layernorm_residual_fwd",
		   .run = r_layernorm_residual_fwd,
		   .nt = in_place ? 7 : 8,
		   .a = {N, C, in_place},
		   .f = {eps}};
	snprintf(l.shape, sizeof l.shape, "N=%d C=%d%s", N, C, in_place ? " res=x" : "");
	l.t[0] = c.t[0];
	l.t[1] = c.t[1];
	l.t[2] = c.t[2];
	l.t[3] = TS("b", (size_t)C, IN, ACT, 1);
	l.t[4] = TS("out", NC, OUT, ACT, 1);
	l.t[5] = TS("mean", (size_t)N, OUT, F32, 1);
	l.t[6] = TS("rstd", (size_t)N, OUT, F32, 1);
	l.t[7] = TS("x", NC, IN, ACT, 3);
	run_check(&l);
}

/* ---- rope ------------------------------------------------------------------------- */

static void r_rope(const pp_ops *o, void *const *p, const check *c)
{
	(c->a[5] ? o->rope_bwd : o->rope_fwd)(P(0), c->a[0], c->a[1], c->a[2], c->a[3], c->a[4],
					      c->f[0], I(1));
}

static void check_rope(int B, int T, int Hq, int Hkv, int D, float theta, int pos0)
{
	for (int bwd = 0; bwd < 2; bwd++) {
		check c = {.op = bwd ? "rope_bwd" : "rope_fwd",
			   .run = r_rope,
			   .nt = 2,
			   .a = {B, T, Hq, Hkv, D, bwd, pos0},
			   .f = {theta}};
		snprintf(c.shape, sizeof c.shape, "B=%d T=%d Hq=%d Hkv=%d D=%d theta=%g pos0=%d", B,
			 T, Hq, Hkv, D, theta, pos0);
		c.t[0] = TS("qkv", (size_t)B * T * (Hq + 2 * Hkv) * D, INOUT, ACT, 1);
		c.t[1] = TS("pos0", 1, IN, POS, pos0);
		run_check(&c);
	}
}

/* ---- attention ----------------------------------------------------------------------- */

/* The bias by distance of a check whose a[6] is its buckets (0: none): its
 * weights at p[w], its bucket of each distance at p[w + 1], its gradient
 * at p[dw] (dw < 0: none) */
static const pp_attn_bias *bias_of(void *const *p, const check *c, int w, int dw, pp_attn_bias *b)
{
	if (!c->a[6])
		return NULL;
	*b = (pp_attn_bias){
		.w = p[w], .dw = dw >= 0 ? P(dw) : NULL, .bucket = I(w + 1), .nb = c->a[6]};
	return b;
}

/* forward tensors: out, lse, qkv[, bias, bucket] */
static void r_attention_fwd(const pp_ops *o, void *const *p, const check *c)
{
	pp_attn_bias b;
	o->attention_fwd(P(0), P(1), P(2), c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5],
			 bias_of(p, c, 3, -1, &b));
}

/* backward tensors: dqkv, dout, out, lse, qkv[, bias, bucket, dbias] */
static void r_attention_bwd(const pp_ops *o, void *const *p, const check *c)
{
	pp_attn_bias b;
	o->attention_bwd(P(0), P(1), P(2), P(3), P(4), c->a[0], c->a[1], c->a[2], c->a[3], c->a[4],
			 c->a[5], bias_of(p, c, 5, 7, &b));
}

/* out and lse of qkv, as the forward pass saves them */
static void prep_attention(void *const *host, const check *c)
{
	pp_attn_bias b;
	pp_ops_cpu.attention_fwd(host[2], host[3], host[4], c->a[0], c->a[1], c->a[2], c->a[3],
				 c->a[4], c->a[5], bias_of(host, c, 5, -1, &b));
}

/* nb > 0: with a bias by distance of nb buckets (random buckets per
 * distance, its gradient summed over the distances of each) */
static void check_attention(int B, int T, int Hq, int Hkv, int D, int window, int nb)
{
	const size_t nqkv = (size_t)B * T * (Hq + 2 * Hkv) * D, nout = (size_t)B * T * Hq * D;
	const size_t nlse = (size_t)B * Hq * T;
	check c = {.op = nb ? "attention_fwd_bias" : "attention_fwd",
		   .run = r_attention_fwd,
		   .nt = nb ? 5 : 3,
		   .a = {B, T, Hq, Hkv, D, window, nb},
		   .vocab = nb};
	snprintf(c.shape, sizeof c.shape, "B=%d T=%d Hq=%d Hkv=%d D=%d window=%d nb=%d", B, T, Hq,
		 Hkv, D, window, nb);
	c.t[0] = TS("out", nout, OUT, ACT, 1);
	c.t[1] = TS("lse", nlse, OUT, F32, 1);
	c.t[2] = TS("qkv", nqkv, IN, ACT, 2);
	c.t[3] = TS("bias", (size_t)Hq * nb, IN, ACT, 1);
	c.t[4] = TS("bucket", (size_t)T, IN, IDX, 0);
	run_check(&c);

	check d = {.op = nb ? "attention_bwd_bias" : "attention_bwd",
		   .run = r_attention_bwd,
		   .prep = prep_attention,
		   .nt = nb ? 8 : 5,
		   .a = {B, T, Hq, Hkv, D, window, nb},
		   .vocab = nb};
	memcpy(d.shape, c.shape, sizeof d.shape);
	d.t[0] = TS("dqkv", nqkv, OUT, ACT, 1);
	d.t[1] = TS("dout", nout, IN, ACT, 1);
	d.t[2] = TS("out", nout, IN, ACT, 1);
	d.t[3] = TS("lse", nlse, IN, F32, 1);
	d.t[4] = TS("qkv", nqkv, IN, ACT, 2);
	d.t[5] = TS("bias", (size_t)Hq * nb, IN, ACT, 1);
	d.t[6] = TS("bucket", (size_t)T, IN, IDX, 0);
	d.t[7] = TS("dbias", (size_t)Hq * nb, ACC, F32, 1);
	run_check(&d);
}

/* ---- decoding with a KV cache --------------------------------------------------------- */

static void r_kv_append(const pp_ops *o, void *const *p, const check *c)
{
	o->kv_append(P(0), P(1), P(2), c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5], I(3));
}

/* tensors: out, qkv, kcache, vcache, pos0[, bias, bucket]; a[8] the buckets */
static void r_attention_cached(const pp_ops *o, void *const *p, const check *c)
{
	pp_attn_bias b = {.w = p[5], .bucket = I(6), .nb = c->a[8]};
	o->attention_cached(P(0), P(1), P(2), P(3), c->a[0], c->a[1], c->a[2], c->a[3], c->a[4],
			    c->a[5], I(4), c->a[7], c->a[8] ? &b : NULL);
}

/* n new rows at positions pos0.. of B sequences against a cache of Tmax
 * entries (random beyond pos0 + n: the op must not read them); nb > 0: with
 * a bias by distance of nb buckets */
static void check_decode(int B, int n, int Hq, int Hkv, int D, int Tmax, int pos0, int window,
			 int nb)
{
	const size_t nqkv = (size_t)B * n * (Hq + 2 * Hkv) * D, nout = (size_t)B * n * Hq * D;
	const size_t ncache = (size_t)B * Tmax * Hkv * D;
	check c = {.op = "kv_append",
		   .run = r_kv_append,
		   .nt = 4,
		   .a = {B, n, Hq, Hkv, D, Tmax, pos0}};
	snprintf(c.shape, sizeof c.shape, "B=%d n=%d Hq=%d Hkv=%d D=%d Tmax=%d pos0=%d", B, n, Hq,
		 Hkv, D, Tmax, pos0);
	c.t[0] = TS("kcache", ncache, INOUT, ACT, 1);
	c.t[1] = TS("vcache", ncache, INOUT, ACT, 1);
	c.t[2] = TS("qkv", nqkv, IN, ACT, 1);
	c.t[3] = TS("pos0", 1, IN, POS, pos0);
	run_check(&c);

	check d = {.op = nb ? "attention_cached_bias" : "attention_cached",
		   .run = r_attention_cached,
		   .nt = nb ? 7 : 5,
		   .a = {B, n, Hq, Hkv, D, Tmax, pos0, window, nb},
		   .vocab = nb};
	snprintf(d.shape, sizeof d.shape, "B=%d n=%d Hq=%d Hkv=%d D=%d T=%d pos0=%d w=%d nb=%d", B,
		 n, Hq, Hkv, D, Tmax, pos0, window, nb);
	d.t[0] = TS("out", nout, OUT, ACT, 1);
	d.t[1] = TS("qkv", nqkv, IN, ACT, 2);
	d.t[2] = TS("kcache", ncache, IN, ACT, 2);
	d.t[3] = TS("vcache", ncache, IN, ACT, 1);
	d.t[4] = TS("pos0", 1, IN, POS, pos0);
	d.t[5] = TS("bias", (size_t)Hq * nb, IN, ACT, 1);
	d.t[6] = TS("bucket", (size_t)Tmax, IN, IDX, 0);
	run_check(&d);
}

/* The same checks with cuDNN's attention, at the bf16 bound; a shape cuDNN
 * rejects is a counted skip. nb > 0: with a bias by distance, which cuDNN
 * takes spread over (Hq,T,T) in bf16, its gradient summed back per bucket
 * from cuDNN's bf16 dBias. */
static void check_attention_cudnn(int B, int T, int Hq, int Hkv, int D, int window, int nb)
{
	const size_t nqkv = (size_t)B * T * (Hq + 2 * Hkv) * D, nout = (size_t)B * T * Hq * D;
	const size_t nlse = (size_t)B * Hq * T;
	const double bf16 = 1e-2;
	check c = {.op = nb ? "cudnn_attention_fwd_bias" : "cudnn_attention_fwd",
		   .run = r_attention_fwd,
		   .nt = nb ? 5 : 3,
		   .a = {B, T, Hq, Hkv, D, window, nb},
		   .vocab = nb,
		   .attention = PP_CUDA_ATTENTION_CUDNN};
	snprintf(c.shape, sizeof c.shape, "B=%d T=%d Hq=%d Hkv=%d D=%d window=%d nb=%d", B, T, Hq,
		 Hkv, D, window, nb);
	if (!selected(c.op))
		return;
	char why[300];
	if (!pp_cuda_cudnn_attention_check(B, T, Hq, Hkv, D, window, nb > 0, why, sizeof why)) {
		printf("SKIP: cuda/%s[%s]: cuDNN does not take it: %s\n", c.op, c.shape, why);
		skipped++;
		return;
	}
	c.t[0] = TSB("out", nout, OUT, ACT, 1, bf16);
	c.t[1] = TSB("lse", nlse, OUT, F32, 1, bf16);
	c.t[2] = TS("qkv", nqkv, IN, ACT, 2);
	c.t[3] = TS("bias", (size_t)Hq * nb, IN, ACT, 1);
	c.t[4] = TS("bucket", (size_t)T, IN, IDX, 0);
	run_check(&c);

	check d = {.op = nb ? "cudnn_attention_bwd_bias" : "cudnn_attention_bwd",
		   .run = r_attention_bwd,
		   .prep = prep_attention,
		   .nt = nb ? 8 : 5,
		   .a = {B, T, Hq, Hkv, D, window, nb},
		   .vocab = nb,
		   .attention = PP_CUDA_ATTENTION_CUDNN};
	memcpy(d.shape, c.shape, sizeof d.shape);
	d.t[0] = TSB("dqkv", nqkv, OUT, ACT, 1, bf16);
	d.t[1] = TS("dout", nout, IN, ACT, 1);
	d.t[2] = TS("out", nout, IN, ACT, 1);
	d.t[3] = TS("lse", nlse, IN, F32, 1);
	d.t[4] = TS("qkv", nqkv, IN, ACT, 2);
	d.t[5] = TS("bias", (size_t)Hq * nb, IN, ACT, 1);
	d.t[6] = TS("bucket", (size_t)T, IN, IDX, 0);
	d.t[7] = TSB("dbias", (size_t)Hq * nb, ACC, F32, 1, bf16);
	run_check(&d);
}

/* ---- mlp --------------------------------------------------------------------------- */

static void r_glu_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->glu_fwd(P(0), P(1), c->a[0], c->a[1], c->a[2]);
}

static void r_glu_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->glu_bwd(P(0), P(1), P(2), c->a[0], c->a[1], c->a[2]);
}

static void r_gelu_fwd(const pp_ops *o, void *const *p, const check *c)
{
	o->gelu_fwd(P(0), P(1), (size_t)c->a[0]);
}

static void r_gelu_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->gelu_bwd(P(0), P(1), P(2), (size_t)c->a[0]);
}

static void check_mlp(int N, int F)
{
	for (int act = 0; act < 2; act++) {
		const char *name = act == PP_ACT_SILU ? "silu" : "gelu_tanh";
		check c = {.op = "glu_fwd", .run = r_glu_fwd, .nt = 2, .a = {N, F, act}};
		snprintf(c.shape, sizeof c.shape, "N=%d F=%d %s", N, F, name);
		c.t[0] = TS("out", (size_t)N * F, OUT, ACT, 1);
		c.t[1] = TS("gu", (size_t)N * 2 * F, IN, ACT, 4);
		run_check(&c);
		check d = {.op = "glu_bwd", .run = r_glu_bwd, .nt = 3, .a = {N, F, act}};
		memcpy(d.shape, c.shape, sizeof d.shape);
		d.t[0] = TS("dgu", (size_t)N * 2 * F, OUT, ACT, 1);
		d.t[1] = TS("dout", (size_t)N * F, IN, ACT, 1);
		d.t[2] = TS("gu", (size_t)N * 2 * F, IN, ACT, 4);
		run_check(&d);
	}
	const int n = N * F;
	check g = {.op = "gelu_fwd", .run = r_gelu_fwd, .nt = 2, .a = {n}};
	snprintf(g.shape, sizeof g.shape, "n=%d", n);
	g.t[0] = TS("out", (size_t)n, OUT, ACT, 1);
	g.t[1] = TS("x", (size_t)n, IN, ACT, 5);
	run_check(&g);
	check h = {.op = "gelu_bwd", .run = r_gelu_bwd, .nt = 3, .a = {n}};
	memcpy(h.shape, g.shape, sizeof h.shape);
	h.t[0] = TS("dx", (size_t)n, OUT, ACT, 1);
	h.t[1] = TS("dout", (size_t)n, IN, ACT, 1);
	h.t[2] = TS("x", (size_t)n, IN, ACT, 5);
	run_check(&h);
}

/* ---- mixture of experts ----------------------------------------------------------------- */

static void r_moe_route(const pp_ops *o, void *const *p, const check *c)
{
	o->moe_route(I(0), P(1), P(2), P(3), P(4), P(5), c->a[0], c->a[1], c->a[2], c->a[3]);
}

static void r_moe_dispatch(const pp_ops *o, void *const *p, const check *c)
{
	o->moe_dispatch(I(0), I(1), I(2), I(3), c->a[0], c->a[1], c->a[2], c->a[3]);
}

static void r_moe_gather(const pp_ops *o, void *const *p, const check *c)
{
	o->moe_gather(P(0), P(1), I(2), P(3), c->a[0] * c->a[1], c->a[1], c->a[2]);
}

static void r_moe_combine(const pp_ops *o, void *const *p, const check *c)
{
	o->moe_combine(P(0), P(1), I(2), P(3), c->a[0], c->a[1], c->a[2]);
}

static void r_moe_gate_grad(const pp_ops *o, void *const *p, const check *c)
{
	o->moe_gate_grad(P(0), P(1), P(2), I(3), c->a[0], c->a[1], c->a[2]);
}

static void r_moe_router_bwd(const pp_ops *o, void *const *p, const check *c)
{
	o->moe_router_bwd(P(0), P(1), I(2), P(3), P(4), P(5), P(6), c->f[0], c->f[1], c->a[0],
			  c->a[1], c->a[2], c->a[3]);
}

/* rows (N K) and slot (N K) of the CPU's dispatch of random experts: tensors
 * ri and si of the check (a: N, K, E, cap) */
static void moe_permutation(void *const *host, int ri, int si, const int *a)
{
	const int N = a[0], K = a[1], E = a[2];
	int *ex = calloc((size_t)N * K, sizeof(int)), *counts = calloc(2 * (size_t)E, sizeof(int));
	for (int i = 0; i < N * K; i++)
		ex[i] = rnd_int(E);
	int *rows = host[ri], *slot = si >= 0 ? host[si] : malloc(sizeof(int) * (size_t)N * K);
	for (int i = 0; i < N * K; i++)
		rows[i] = i; /* the dropped ones' rows are never read: any valid index */
	pp_ops_cpu.moe_dispatch(rows, slot, counts, ex, N, K, E, a[3]);
	if (si < 0)
		free(slot);
	free(ex);
	free(counts);
}

static void prep_gather(void *const *host, const check *c)
{
	moe_permutation(host, 2, -1, c->a + 3);
}
static void prep_combine(void *const *host, const check *c)
{
	int *rows = malloc(sizeof(int) * (size_t)c->a[0] * c->a[1]);
	void *h[2] = {rows, host[2]};
	moe_permutation(h, 0, 1, c->a + 3);
	free(rows);
}
static void prep_gate_grad(void *const *host, const check *c)
{
	int *rows = malloc(sizeof(int) * (size_t)c->a[0] * c->a[1]);
	void *h[2] = {rows, host[3]};
	moe_permutation(h, 0, 1, c->a + 3);
	free(rows);
}
/* the routing of random logits, as the router's backward takes it */
static void prep_router_bwd(void *const *host, const check *c)
{
	const int N = c->a[0], E = c->a[1], K = c->a[2];
	float *l = malloc(sizeof(float) * (size_t)N * E), st[512];
	for (int i = 0; i < N * E; i++)
		l[i] = (float)(2 * rnd());
	pp_ops_cpu.moe_route(host[2], host[3], host[4], host[5], st, l, N, E, K, c->a[3]);
	free(l);
}

static void check_moe(int N, int E, int K, int C, int cap)
{
	for (int mode = 0; mode < 2; mode++) {
		const char *name = mode == PP_ROUTE_TOPK_SOFTMAX ? "topk_softmax" : "softmax_topk";
		check r = {.op = "moe_route", .run = r_moe_route, .nt = 6, .a = {N, E, K, mode}};
		snprintf(r.shape, sizeof r.shape, "N=%d E=%d K=%d %s", N, E, K, name);
		r.t[0] = TS("expert", (size_t)N * K, OUT, POS, 0);
		r.t[1] = TS("gate", (size_t)N * K, OUT, F32, 1);
		r.t[2] = TS("prob", (size_t)N * E, OUT, F32, 1);
		r.t[3] = TS("lse", (size_t)N, OUT, F32, 1);
		r.t[4] = TS("stats", (size_t)E + 1, OUT, F32, 1);
		r.t[5] = TS("logits", (size_t)N * E, IN, ACT, 3);
		run_check(&r);
		check b = {.op = "moe_router_bwd",
			   .run = r_moe_router_bwd,
			   .nt = 7,
			   .a = {N, E, K, mode},
			   .f = {0.01f, 0.001f},
			   .prep = prep_router_bwd};
		memcpy(b.shape, r.shape, sizeof b.shape);
		b.t[0] = TS("dlogits", (size_t)N * E, OUT, ACT, 1);
		b.t[1] = TS("dgate", (size_t)N * K, IN, F32, 1);
		b.t[2] = TS("expert", (size_t)N * K, IN, POS, 0);
		b.t[3] = TS("gate", (size_t)N * K, IN, F32, 1);
		b.t[4] = TS("prob", (size_t)N * E, IN, F32, 1);
		b.t[5] = TS("lse", (size_t)N, IN, F32, 1);
		b.t[6] = TS("frac", (size_t)E, IN, F32_POS, 2);
		run_check(&b);
	}
	check d = {.op = "moe_dispatch",
		   .run = r_moe_dispatch,
		   .nt = 4,
		   .a = {N, K, E, cap},
		   .vocab = E};
	snprintf(d.shape, sizeof d.shape, "N=%d K=%d E=%d cap=%d", N, K, E, cap);
	d.t[0] = TS("rows", (size_t)N * K, OUT, POS, 0);
	d.t[1] = TS("slot", (size_t)N * K, OUT, POS, 0);
	d.t[2] = TS("counts", 2 * (size_t)E, OUT, POS, 0);
	d.t[3] = TS("expert", (size_t)N * K, IN, IDX, 0);
	run_check(&d);
	/* a: N, K, C, then the permutation's N, K, E, cap */
	check g = {.op = "moe_gather",
		   .run = r_moe_gather,
		   .nt = 4,
		   .a = {N, K, C, N, K, E, -1},
		   .prep = prep_gather};
	snprintf(g.shape, sizeof g.shape, "N=%d K=%d C=%d", N, K, C);
	g.t[0] = TS("dst", (size_t)N * K * C, OUT, ACT, 1);
	g.t[1] = TS("src", (size_t)N * C, IN, ACT, 1);
	g.t[2] = TS("rows", (size_t)N * K, IN, POS, 0);
	g.t[3] = TS("scale", (size_t)N * K, IN, F32, 1);
	run_check(&g);
	check m = {.op = "moe_combine",
		   .run = r_moe_combine,
		   .nt = 4,
		   .a = {N, K, C, N, K, E, cap},
		   .prep = prep_combine};
	snprintf(m.shape, sizeof m.shape, "N=%d K=%d C=%d cap=%d", N, K, C, cap);
	m.t[0] = TS("out", (size_t)N * C, OUT, ACT, 1);
	m.t[1] = TS("y", (size_t)N * K * C, IN, ACT, 1);
	m.t[2] = TS("slot", (size_t)N * K, IN, POS, 0);
	m.t[3] = TS("gate", (size_t)N * K, IN, F32, 1);
	run_check(&m);
	check q = {.op = "moe_gate_grad",
		   .run = r_moe_gate_grad,
		   .nt = 4,
		   .a = {N, K, C, N, K, E, cap},
		   .prep = prep_gate_grad};
	memcpy(q.shape, m.shape, sizeof q.shape);
	q.t[0] = TS("dgate", (size_t)N * K, OUT, F32, 1);
	q.t[1] = TS("dout", (size_t)N * C, IN, ACT, 1);
	q.t[2] = TS("y", (size_t)N * K * C, IN, ACT, 1);
	q.t[3] = TS("slot", (size_t)N * K, IN, POS, 0);
	run_check(&q);
}

/* ---- vectors ---------------------------------------------------------------------------- */

static void r_add(const pp_ops *o, void *const *p, const check *c)
{
	if (c->a[1]) /* in place: out is a */
		o->add(P(0), P(0), P(1), (size_t)c->a[0]);
	else
		o->add(P(0), P(1), P(2), (size_t)c->a[0]);
}

static void r_add_real(const pp_ops *o, void *const *p, const check *c)
{
	if (c->a[1])
		o->add_real(P(0), P(0), P(1), (size_t)c->a[0]);
	else
		o->add_real(P(0), P(1), P(2), (size_t)c->a[0]);
}

static void r_scale(const pp_ops *o, void *const *p, const check *c)
{
	o->scale(P(0), c->f[0], (size_t)c->a[0]);
}

static void check_vec(int n)
{
	/* add on activations, add_real on fp32 gradients: out apart, and in
	 * place (out = a) */
	const struct {
		const char *op;
		run_fn run;
		int kind;
	} adds[] = {{"add", r_add, ACT}, {"add_real", r_add_real, F32}};
	for (int k = 0; k < 2; k++) {
		check c = {.op = adds[k].op, .run = adds[k].run, .nt = 3, .a = {n, 0}};
		snprintf(c.shape, sizeof c.shape, "n=%d", n);
		c.t[0] = TS("out", (size_t)n, OUT, adds[k].kind, 1);
		c.t[1] = TS("a", (size_t)n, IN, adds[k].kind, 1);
		c.t[2] = TS("b", (size_t)n, IN, adds[k].kind, 1);
		run_check(&c);
		check d = {.op = adds[k].op, .run = adds[k].run, .nt = 2, .a = {n, 1}};
		snprintf(d.shape, sizeof d.shape, "n=%d out=a", n);
		d.t[0] = TS("a", (size_t)n, INOUT, adds[k].kind, 1);
		d.t[1] = TS("b", (size_t)n, IN, adds[k].kind, 1);
		run_check(&d);
	}
	check s = {.op = "scale", .run = r_scale, .nt = 1, .a = {n}, .f = {0.37f}};
	snprintf(s.shape, sizeof s.shape, "n=%d s=0.37", n);
	s.t[0] = TS("x", (size_t)n, INOUT, F32, 1);
	run_check(&s);
}

/* dropout of a block (rows from a[2], columns from a[3] of a matrix a[4]
 * wide): the same mask as the CPU's, which draws it from the same hash */
static void r_dropout(const pp_ops *o, void *const *p, const check *c)
{
	const double q = c->f[0];
	const pp_dropout d = {.key = 0x5eedULL + (uint64_t)c->a[2],
			      .row0 = (uint64_t)c->a[2],
			      .threshold = (uint64_t)(q * 4294967296.0),
			      .col0 = c->a[3],
			      .width = c->a[4],
			      .scale = (float)(1 / (1 - q))};
	o->dropout(P(0), P(1), c->a[0], c->a[1], &d);
}

static void check_dropout(int N, int C, int row0, int col0, int width)
{
	check c = {.op = "dropout",
		   .run = r_dropout,
		   .nt = 2,
		   .a = {N, C, row0, col0, width},
		   .f = {0.3f}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d rows %d.. cols %d.. of %d p=0.3", N, C, row0,
		 col0, width);
	c.t[0] = TS("out", (size_t)N * C, OUT, ACT, 1);
	c.t[1] = TS("in", (size_t)N * C, IN, ACT, 1);
	run_check(&c);
}

/* a bias added to every row (after an FP8 product): bit for bit */
static void r_add_bias(const pp_ops *o, void *const *p, const check *c)
{
	o->add_bias(P(0), P(1), c->a[0], c->a[1]);
}

static void check_add_bias(int N, int OC)
{
	check c = {.op = "add_bias", .run = r_add_bias, .nt = 2, .a = {N, OC}};
	snprintf(c.shape, sizeof c.shape, "N=%d OC=%d", N, OC);
	c.t[0] = (tensor){"out", (size_t)N * OC, INOUT, ACT, 1, 0, 1};
	c.t[1] = TS("bias", (size_t)OC, IN, ACT, 1);
	run_check(&c);
}

/* a cast's scale s as the ops take it: s and 1/s in o's memory (o->free) */
static float *scale_pair(const pp_ops *o, float s)
{
	const float h[2] = {s, 1.0f / s};
	float *d = o->alloc(sizeof h);
	o->to_device(d, h, sizeof h);
	return d;
}

/* FP8 casts (kernels/fp8.h): every value equal to the CPU's, bit for bit,
 * with values past the format's range, ties and subnormals among them */
static void r_fp8_cast(const pp_ops *o, void *const *p, const check *c)
{
	float *s = scale_pair(o, c->f[0]);
	o->fp8_cast(P(0), P(1), (size_t)c->a[0], s, c->a[1], NULL);
	o->free(s);
}

static void check_fp8_cast(int n, int fmt, float scale)
{
	check c = {.op = "fp8_cast", .run = r_fp8_cast, .nt = 2, .a = {n, fmt}, .f = {scale}};
	snprintf(c.shape, sizeof c.shape, "n=%d %s scale=%g", n, fmt ? "E5M2" : "E4M3", scale);
	c.t[0] = (tensor){"out", (size_t)n, OUT, ACT, 1, 0, 1};
	c.t[1] = TS("in", (size_t)n, IN, ACT, 1);
	run_check(&c);
}

/* Current scaling's scales, computed on the device (absmax of the first
 * half, then of the second into it, then fp8_scale with div = 2^margin):
 * the amax and both halves of the pair equal to the CPU's, bit for bit; an
 * amax so small that the scale would be infinite keeps 1. f[0]: the
 * inputs' range. */
static void r_fp8_scale(const pp_ops *o, void *const *p, const check *c)
{
	const size_t n = (size_t)c->a[0], h = n / 2;
	o->absmax(P(1), P(2), h, 0);
	o->absmax(P(1), pp_act_at(o, P(2), h), n - h, 1);
	o->fp8_scale(P(0), P(1), c->a[1], exp2f((float)c->a[2]));
}

static void check_fp8_scale(int n, int fmt, int margin, float range)
{
	check c = {.op = "fp8_scale", .run = r_fp8_scale, .nt = 3, .a = {n, fmt, margin}};
	snprintf(c.shape, sizeof c.shape, "n=%d %s margin=%d range=%g", n, fmt ? "E5M2" : "E4M3",
		 margin, range);
	c.t[0] = (tensor){"scale", 2, OUT, F32, 1, 0, 1};
	c.t[1] = (tensor){"amax", 1, OUT, F32, 1, 0, 1};
	c.t[2] = TS("in", (size_t)n, IN, ACT, range);
	run_check(&c);
}

/* FP8 products (kernels/fp8mm.h) of inputs cast to FP8 first (fp8_cast,
 * bit for bit the CPU's): forward, input gradient and weight gradient
 * (accumulated) within the table's bound of the CPU's products of the same
 * FP8 values; on the bf16 table of an sm_89+ GPU with dimensions that are
 * multiples of 16 they run on FP8 tensor cores (fp8_matmul), else in the
 * compute type. f: the scales of x, w and g. */
static void r_fp8_matmul(const pp_ops *o, void *const *p, const check *c)
{
	const int N = c->a[0], C = c->a[1], OC = c->a[2];
	float *sx = scale_pair(o, c->f[0]), *sw = scale_pair(o, c->f[1]),
	      *sg = scale_pair(o, c->f[2]);
	o->fp8_cast(P(3), P(3), (size_t)N * C, sx, PP_FP8_E4M3, NULL);
	o->fp8_cast(P(4), P(4), (size_t)OC * C, sw, PP_FP8_E4M3, NULL);
	o->fp8_cast(P(5), P(5), (size_t)N * OC, sg, PP_FP8_E5M2, NULL);
	pp_fp8_matmul_fwd(o, P(0), P(3), P(4), sx, sw, N, C, OC);
	pp_fp8_matmul_dgrad(o, P(1), P(5), P(4), sg, sw, N, C, OC);
	pp_fp8_matmul_wgrad(o, P(2), P(6), P(5), P(3), sg, sx, N, C, OC);
	o->free(sx);
	o->free(sw);
	o->free(sg);
}

static void check_fp8_matmul(int N, int C, int OC)
{
	check c = {.op = "fp8_matmul",
		   .run = r_fp8_matmul,
		   .nt = 7,
		   .a = {N, C, OC},
		   .f = {448.0f, 4480.0f, 57344.0f}};
	snprintf(c.shape, sizeof c.shape, "N=%d C=%d OC=%d", N, C, OC);
	c.t[0] = TS("out", (size_t)N * OC, OUT, ACT, 1);
	c.t[1] = TS("din", (size_t)N * C, OUT, ACT, 1);
	c.t[2] = TS("dw", (size_t)OC * C, ACC, F32, 1);
	c.t[3] = TS("x", (size_t)N * C, IN, ACT, 1);
	c.t[4] = TS("w", (size_t)OC * C, IN, ACT, 0.1);
	c.t[5] = TS("g", (size_t)N * OC, IN, ACT, 1);
	c.t[6] = TS("tmp", (size_t)OC * C, IN, F32, 1); /* the CPU's scratch: not compared */
	run_check(&c);
}

/* fp8_matmul takes an aligned product on FP8 tensor cores exactly where
 * the GPU has them (sm_89 and later) and the table is bf16 */
static void check_fp8_cores_on(const table_t *tb)
{
	const pp_ops *g = tb->ops;
	const int N = 64, C = 64, OC = 64;
	void *x = g->alloc((size_t)N * C * pp_act_size(g)),
	     *w = g->alloc((size_t)OC * C * pp_act_size(g)),
	     *out = g->alloc((size_t)N * OC * pp_act_size(g));
	float *one = scale_pair(g, 1);
	const int want = is_bf16(g) && pp_cuda_capability() >= 89;
	const int got = g->fp8_matmul && g->fp8_matmul(PP_FP8MM_FWD, out, x, w, one, one, N, C, OC);
	g->free(one);
	g->free(x);
	g->free(w);
	g->free(out);
	char shape[64], why[128];
	snprintf(shape, sizeof shape, "N=C=OC=64 on compute capability %d", pp_cuda_capability());
	snprintf(why, sizeof why, "fp8_matmul %s, on a %s table of a GPU of capability %d",
		 got ? "took it" : "declined", tb->name, pp_cuda_capability());
	report("fp8_tensor_cores", tb, shape, got == want, 0, 0, 0, why);
}

static void check_fp8_cores(void)
{
	if (!selected("fp8_tensor_cores"))
		return;
	EACH_TABLE(tb) check_fp8_cores_on(tb);
}

/* sumsq returns a double: its own comparison (fp32 gradients in both tables) */
static void check_sumsq_on(const table_t *tb, size_t n)
{
	const pp_ops *g = tb->ops;
	float *h = malloc(n * sizeof *h);
	for (size_t i = 0; i < n; i++)
		h[i] = (float)rnd();
	double t0 = now_ms();
	double want = pp_ops_cpu.sumsq(h, n);
	double cpu_ms = now_ms() - t0;
	float *d = g->alloc(n * sizeof *d);
	g->to_device(d, h, n * sizeof *h);
	double first = g->sumsq(d, n);
	t0 = now_ms();
	double got = g->sumsq(d, n);
	double gpu_ms = now_ms() - t0;
	g->free(d);
	double err = fabs(got - want) / want;
	char shape[32], why[128] = "";
	snprintf(shape, sizeof shape, "n=%zu", n);
	if (memcmp(&first, &got, sizeof got))
		snprintf(why, sizeof why, "differs between two runs (%.17g, %.17g)", first, got);
	else if (!(err <= tol))
		snprintf(why, sizeof why, "relative error %.3g > %.0e", err, tol);
	report("sumsq", tb, shape, !why[0], err, cpu_ms, gpu_ms, why);
	free(h);
}

static void check_sumsq(size_t n)
{
	if (!selected("sumsq"))
		return;
	EACH_TABLE(tb) check_sumsq_on(tb, n);
}

/* ---- losses ---------------------------------------------------------------------------- */

static void r_crossentropy(const pp_ops *o, void *const *p, const check *c)
{
	/* a[2]: 0 no dlogits, 1 dlogits apart, 2 dlogits in place of logits */
	pp_real *dlogits = c->a[2] == 0 ? NULL : c->a[2] == 1 ? P(1) : P(2);
	o->crossentropy(P(0), dlogits, P(2), I(3), c->a[0], c->a[1], c->f[0]);
}

static void r_logsumexp_rows(const pp_ops *o, void *const *p, const check *c)
{
	o->logsumexp_rows(P(0), P(1), P(2), I(3), c->a[0], c->a[1]);
}

static void r_softmax_grad(const pp_ops *o, void *const *p, const check *c)
{
	o->softmax_grad(P(0), P(1), P(2), I(3), c->a[0], c->a[1], c->f[0]);
}

/* lse of a wider vocabulary than the slice: the slice's own, plus a bit */
static void prep_lse(void *const *host, const check *c)
{
	const int N = c->a[0], V = c->a[1];
	float *tgt = malloc(sizeof(float) * (size_t)N);
	pp_ops_cpu.logsumexp_rows(host[2], tgt, host[1], host[3], N, V);
	for (int n = 0; n < N; n++)
		((float *)host[2])[n] += 0.5f;
	free(tgt);
}

static void check_loss(int N, int V)
{
	const float dscale = 1.0f / N;
	for (int mode = 0; mode < 3; mode++) {
		check c = {.op = "crossentropy",
			   .run = r_crossentropy,
			   .nt = 4,
			   .a = {N, V, mode},
			   .f = {dscale},
			   .vocab = V};
		snprintf(c.shape, sizeof c.shape, "N=%d V=%d %s", N, V,
			 mode == 0   ? "no dlogits"
			 : mode == 1 ? "dlogits"
				     : "dlogits=logits");
		c.t[0] = TS("losses", (size_t)N, OUT, F32, 1);
		c.t[1] = TS("dlogits", (size_t)N * V, mode == 1 ? OUT : INOUT, ACT, 1);
		c.t[2] = TS("logits", (size_t)N * V, mode == 2 ? INOUT : IN, ACT, 4);
		c.t[3] = TS("targets", (size_t)N, IN, TGT, 0);
		run_check(&c);
	}
	check l = {
		.op = "logsumexp_rows", .run = r_logsumexp_rows, .nt = 4, .a = {N, V}, .vocab = V};
	snprintf(l.shape, sizeof l.shape, "N=%d V=%d", N, V);
	l.t[0] = TS("lse", (size_t)N, OUT, F32, 1);
	l.t[1] = TS("tgt", (size_t)N, OUT, F32, 1);
	l.t[2] = TS("logits", (size_t)N * V, IN, ACT, 4);
	l.t[3] = TS("targets", (size_t)N, IN, TGT_SPLIT, 0);
	run_check(&l);
	check s = {.op = "softmax_grad",
		   .run = r_softmax_grad,
		   .prep = prep_lse,
		   .nt = 4,
		   .a = {N, V},
		   .f = {dscale},
		   .vocab = V};
	memcpy(s.shape, l.shape, sizeof s.shape);
	s.t[0] = TS("dlogits", (size_t)N * V, OUT, ACT, 1);
	s.t[1] = TS("logits", (size_t)N * V, IN, ACT, 4);
	s.t[2] = TS("lse", (size_t)N, IN, F32, 1);
	s.t[3] = TS("targets", (size_t)N, IN, TGT_SPLIT, 0);
	run_check(&s);
}

/* ---- optimizer --------------------------------------------------------------------------- */

static void r_adamw(const pp_ops *o, void *const *p, const check *c)
{
	o->adamw(P(0), c->a[2] ? P(4) : NULL, P(1), P(2), P(3), (size_t)c->a[0], c->f[0], c->f[1],
		 c->f[2], c->f[3], c->f[4], c->a[1], c->f[5]);
}

/* with the compute copy pc of the new parameters, or without */
static void check_adamw(int n, long t, int pc)
{
	check c = {.op = "adamw",
		   .run = r_adamw,
		   .nt = pc ? 5 : 4,
		   .a = {n, (int)t, pc},
		   .f = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f}};
	snprintf(c.shape, sizeof c.shape, "n=%d t=%ld%s", n, t, pc ? " pc" : "");
	c.t[0] = TS("p", (size_t)n, INOUT, F32, 1);
	c.t[1] = TS("g", (size_t)n, IN, F32, 1);
	c.t[2] = TS("m", (size_t)n, INOUT, F32, 0.1);
	c.t[3] = TS("v", (size_t)n, INOUT, F32_POS, 0.01);
	c.t[4] = TS("pc", (size_t)n, OUT, ACT, 1);
	run_check(&c);
}

/* ---- main ---------------------------------------------------------------------------- */

int main(void)
{
	const char *s = getenv("PP_CHECK_SEED");
	rng = s && *s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	only = getenv("PP_CHECK_ONLY");
	only = only && *only ? only : NULL;
	only_table = getenv("PP_CHECK_TABLE");
	only_table = only_table && *only_table ? only_table : NULL;
	if (only_table && strcmp(only_table, "fp32") && strcmp(only_table, "bf16")) {
		printf("FAIL: cuda/init: PP_CHECK_TABLE=%s: expected fp32 or bf16\n", only_table);
		return 1;
	}
	const char *tv = getenv("PP_CHECK_TOL");
	if (tv && *tv)
		tol = atof(tv);
	tv = getenv("PP_CHECK_TOL_BF16");
	if (tv && *tv)
		tol_bf16 = atof(tv);
	printf("seed %llu (PP_CHECK_SEED), tolerance %.0e (fp32 table), %.0e (bf16 table) on "
	       "max |gpu - cpu| / max |cpu| per output\n",
	       (unsigned long long)rng, tol, tol_bf16);
	pp_err e;
	if (pp_cuda_init(0, &e)) {
		printf("FAIL: cuda/init: %s\n", e.msg);
		return 1;
	}
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
		printf("device 0: %s, compute capability %d.%d\n", prop.name, prop.major,
		       prop.minor);

	check_memory();
	check_to_act(100003);
	/* llama-tiny-ish widths, then odd sizes (unaligned rows for cuBLASLt) */
	check_matmul(256, 192, 576, 1, 1, 1);
	check_matmul(256, 192, 576, 0, 0, 2);
	check_matmul(100, 77, 33, 1, 1, 2);
	check_matmul_gelu(256, 192, 768, 1);
	check_matmul_gelu(256, 192, 768, 0);
	check_matmul_gelu(100, 77, 33, 1);
	check_gelu_matmul_bwd(256, 768, 192);
	check_gelu_matmul_bwd(100, 77, 33);
	check_embed(2, 64, 96, 500, 0, 1, 1.0f);
	check_embed(3, 50, 70, 300, 7, 0, 8.3666f);
	check_norms(256, 192, 0);
	check_norms(100, 77, 1);
	check_norms(100, 77, 0);
	check_norms(16, 8192, 0);
	check_norm_residual(256, 192, 0, 0);
	check_norm_residual(100, 77, 1, 1);
	check_norm_residual(64, 2304, 0, 1);
	check_norm_residual(16, 8192, 0, 0);
	check_norm_residual(8, 9000, 0, 1);
	check_rope(2, 64, 4, 2, 32, 10000, 0);
	check_rope(1, 33, 2, 1, 128, 500000, 4000);
	check_attention(2, 100, 4, 2, 32, 0, 0);
	check_attention(1, 130, 4, 1, 64, 48, 0);
	check_attention(2, 70, 2, 2, 128, 0, 0);
	check_attention(1, 40, 2, 1, 256, 0, 0);
	check_attention(1, 33, 3, 1, 80, 7, 0);
	check_attention(1, 1, 2, 1, 16, 0, 0);
	check_attention(2, 17, 4, 4, 48, 1, 0);
	check_attention(1, 512, 8, 2, 64, 0, 0);
	/* GLaM's relative position biases: 32 buckets, a window, a ragged T */
	check_attention(2, 100, 4, 2, 32, 0, 32);
	check_attention(1, 130, 4, 1, 64, 48, 7);
	check_attention(1, 300, 12, 12, 64, 0, 32);
	/* T a multiple of 128, which every cuDNN 9 backward takes */
	check_attention_cudnn(2, 128, 4, 2, 32, 0, 0);
	check_attention_cudnn(1, 256, 4, 1, 64, 48, 0);
	check_attention_cudnn(2, 128, 2, 2, 128, 0, 0);
	check_attention_cudnn(1, 256, 8, 2, 128, 64, 0);
	check_attention_cudnn(1, 512, 8, 2, 64, 0, 0);
	check_attention_cudnn(2, 128, 4, 2, 16, 4, 0);
	check_attention_cudnn(1, 128, 4, 1, 256, 16, 0); /* head dim 256: both ways on sm_90 only */
	check_attention_cudnn(2, 100, 4, 2, 32, 0, 0);   /* any T: the backward from cuDNN 9.16 */
	check_attention_cudnn(1, 1, 2, 1, 16, 0, 0);  /* one token: cuDNN's backward refuses it */
	check_attention_cudnn(1, 33, 3, 1, 20, 7, 0); /* head dim 20: cuDNN wants multiples of 8 */
	/* GLaM's relative position biases on cuDNN: 32 buckets, a window, GQA */
	check_attention_cudnn(2, 128, 4, 2, 32, 0, 32);
	check_attention_cudnn(1, 256, 4, 1, 64, 48, 7);
	check_attention_cudnn(2, 100, 4, 4, 64, 0, 32);
	/* one token (several key splits of 256), a prefill, a window, GQA and MQA */
	check_decode(1, 1, 32, 8, 128, 1024, 700, 0, 0);
	check_decode(2, 1, 4, 2, 64, 300, 299, 0, 0);
	check_decode(1, 37, 4, 1, 64, 100, 0, 0, 0);
	check_decode(2, 5, 4, 2, 32, 600, 400, 48, 0);
	check_decode(1, 1, 2, 1, 256, 8, 3, 0, 0);
	check_decode(2, 1, 4, 2, 64, 300, 299, 0, 32);
	check_decode(1, 37, 4, 1, 64, 100, 0, 0, 7);
	check_mlp(256, 320);
	check_moe(300, 8, 2, 96, -1); /* Mixtral's routing */
	check_moe(257, 64, 2, 64, 9); /* GLaM's 64 experts, with a capacity */
	check_vec(100003);
	check_dropout(257, 96, 0, 0, 96);
	/* inputs in [-1, 1): scales that saturate some, and that flush some */
	check_add_bias(2048, 768);
	check_add_bias(37, 5);
	check_fp8_cast(100003, 0, 600.0f);
	check_fp8_cast(100003, 1, 80000.0f);
	check_fp8_cast(4099, 0, 1e-2f);
	check_fp8_cast(4099, 1, 1e-3f);
	check_fp8_scale(100003, 0, 0, 3.0f);
	check_fp8_scale(4099, 1, 1, 1e-3f);
	check_fp8_scale(4099, 0, 0, 1e-38f); /* 448 / 1e-38 is past float: keeps 1 */
	check_fp8_cores();
	check_fp8_matmul(256, 320, 192);   /* multiples of 16: FP8 tensor cores on sm_89+ */
	check_fp8_matmul(2048, 1024, 768); /* the shapes of a small model's layers */
	check_fp8_matmul(100, 72, 40);     /* not: the products in the compute type */
	check_dropout(64, 40, 1000, 40, 120);
	check_sumsq(1000003);
	check_sumsq(17);
	check_loss(128, 1000);
	check_loss(7, 50257);
	check_adamw(100003, 1, 1);
	check_adamw(4099, 1000, 0);

	printf("\n%-22s %-5s %-44s %12s %9s %9s\n", "op", "table", "shape", "max rel err", "CPU ms",
	       "GPU ms");
	for (int i = 0; i < n_rows; i++) {
		const row *r = &table[i];
		printf("%-22s %-5s %-44s %12.3g %9.3f %9.3f%s\n", r->op, r->table, r->shape, r->err,
		       r->cpu_ms, r->gpu_ms, r->ok ? "" : "  FAIL");
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}

#endif
