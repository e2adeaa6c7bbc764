/* Token (and learned position) embedding. */
#include "cpu.h"

/* channels per task in the wte scatter: wide enough to stream rows */
#define EMBED_COLS 256

/* out (B,T,C) = wte (V,C)[tok] * scale + wpe (maxT,C)[pos0 + t]; tok (B,T) */
void pp_cpu_embed_fwd(pp_act *out_, const int *tok, const pp_act *wte_, const pp_act *wpe_,
		      pp_real scale, int B, int T, int C, const int *pos0_)
{
	const int pos0 = pp_cpu_pos(pos0_);
	pp_real *out = out_;
	const pp_real *wte = wte_;
	const pp_real *wpe = wpe_;
#pragma omp parallel for schedule(static)
	for (int n = 0; n < B * T; n++) {
		pp_real *o = out + (size_t)n * C;
		const pp_real *e = tok[n] >= 0 ? wte + (size_t)tok[n] * C
					       : NULL; /* else another shard's */
		const pp_real *p = wpe ? wpe + (size_t)(pos0 + n % T) * C : NULL;
		for (int c = 0; c < C; c++)
			o[c] = (e ? e[c] * scale : 0) + (p ? p[c] : 0);
	}
}

/* dwte (V,C) += scatter of dout (B,T,C) * scale; dwpe (maxT,C) += sum_b dout */
void pp_cpu_embed_bwd(pp_real *dwte, pp_real *dwpe, const pp_act *dout_, const int *tok,
		      pp_real scale, int B, int T, int C, const int *pos0_)
{
	const int pos0 = pp_cpu_pos(pos0_);
	const pp_real *dout = dout_;
	/* a token may repeat, so tasks own channel ranges rather than rows */
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < C; c0 += EMBED_COLS) {
		int c1 = C - c0 < EMBED_COLS ? C : c0 + EMBED_COLS;
		for (int n = 0; n < B * T; n++) {
			if (tok[n] < 0)
				continue;
			pp_real *d = dwte + (size_t)tok[n] * C;
			const pp_real *g = dout + (size_t)n * C;
			for (int c = c0; c < c1; c++)
				d[c] += g[c] * scale;
		}
	}
	if (!dwpe)
		return;
#pragma omp parallel for schedule(static)
	for (int t = 0; t < T; t++) {
		pp_real *d = dwpe + (size_t)(pos0 + t) * C;
		for (int b = 0; b < B; b++) {
			const pp_real *g = dout + ((size_t)b * T + t) * C;
			for (int c = 0; c < C; c++)
				d[c] += g[c];
		}
	}
}
