/* Rotary position embedding, Hugging Face rotate-half layout: element i of
 * a head pairs with element i + D/2. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

/* Rotates the Hq q heads and Hkv k heads of every row of qkv
 * (B,T,(Hq+2Hkv)*D) by the angles sign * (pos0 + t) * theta^(-2i/D).
 * The rotation is orthogonal, so sign -1 applies its transpose: the
 * backward pass. */
static void rope_rotate(pp_real *qkv, int B, int T, int Hq, int Hkv, int D, pp_real theta, int pos0,
			int sign)
{
	const int half = D / 2;
	const size_t ld = (size_t)(Hq + 2 * Hkv) * D;
#pragma omp parallel
	{
		/* angles in double: pos * inv_freq reaches 1e5 rad at long
		 * context, where a float angle is off by up to 1e-2 rad */
		double *inv_freq = pp_cpu_scratch(sizeof(double) * half);
		pp_real *cs = pp_cpu_scratch(sizeof(pp_real) * 2 *
					     half); /* cos (half) | sin (half) */
		for (int i = 0; i < half; i++)
			inv_freq[i] = pow((double)theta, -2.0 * i / D);
#pragma omp for schedule(static)
		for (int t = 0; t < T; t++) {
			for (int i = 0; i < half; i++) {
				double a = (double)(pos0 + t) * inv_freq[i];
				cs[i] = (pp_real)cos(a);
				cs[half + i] = (pp_real)(sign * sin(a));
			}
			/* one row of angles serves every batch row and head at time t */
			for (int b = 0; b < B; b++) {
				pp_real *row = qkv + ((size_t)b * T + t) * ld;
				for (int h = 0; h < Hq + Hkv; h++) {
					pp_real *x = row + (size_t)h * D;
					for (int i = 0; i < half; i++) {
						pp_real x1 = x[i], x2 = x[half + i];
						x[i] = x1 * cs[i] - x2 * cs[half + i];
						x[half + i] = x2 * cs[i] + x1 * cs[half + i];
					}
				}
			}
		}
		free(cs);
		free(inv_freq);
	}
}

/* qkv (B,T,(Hq+2Hkv)*D) in place */
void pp_cpu_rope_fwd(pp_act *qkv_, int B, int T, int Hq, int Hkv, int D, pp_real theta,
		     const int *pos0)
{
	pp_real *qkv = qkv_;
	rope_rotate(qkv, B, T, Hq, Hkv, D, theta, pp_cpu_pos(pos0), 1);
}

/* dqkv (B,T,(Hq+2Hkv)*D) in place */
void pp_cpu_rope_bwd(pp_act *dqkv_, int B, int T, int Hq, int Hkv, int D, pp_real theta,
		     const int *pos0)
{
	pp_real *dqkv = dqkv_;
	rope_rotate(dqkv, B, T, Hq, Hkv, D, theta, pp_cpu_pos(pos0), -1);
}
