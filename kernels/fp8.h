/* FP8 numbers (OCP's E4M3 and E5M2, as NVIDIA's Hopper and Ada hold them)
 * for the CPU and CUDA kernels alike: a float to the nearest FP8 value,
 * rounding to nearest even and saturating as PTX's cvt.rn.satfinite does
 * (a magnitude past the largest finite value, infinity included, becomes
 * that value; NaN stays NaN), returned as a float (every FP8 value is exact
 * in float and in bf16). */
#ifndef PP_KERNELS_FP8_H
#define PP_KERNELS_FP8_H

#include <math.h>
#include <stdint.h>

#include "dropmask.h" /* PP_HOST_DEVICE */

enum { PP_FP8_E4M3 = 0, PP_FP8_E5M2 = 1 };

/* the largest finite values: 448 and 57344 */
#define PP_FP8_E4M3_MAX 448.0f
#define PP_FP8_E5M2_MAX 57344.0f

static inline PP_HOST_DEVICE float pp_fp8_max(int fmt)
{
	return fmt == PP_FP8_E4M3 ? PP_FP8_E4M3_MAX : PP_FP8_E5M2_MAX;
}

/* Where saturation begins: the magnitudes whose nearest value, were the
 * exponents unbounded, would be past the largest (half a step above it:
 * 464 and 61440). */
static inline PP_HOST_DEVICE float pp_fp8_overflow(int fmt)
{
	return fmt == PP_FP8_E4M3 ? 464.0f : 61440.0f;
}

/* The scale that takes amax to fmt's largest value, divided by div
 * (2^margin): keep where amax is not a positive finite number or the scale
 * would not be finite. */
static inline PP_HOST_DEVICE float pp_fp8_scale(float amax, int fmt, float div, float keep)
{
	if (!(amax > 0) || !isfinite(amax))
		return keep;
	const float sf = pp_fp8_max(fmt) / amax / div;
	return isfinite(sf) ? sf : keep;
}

/* x to the nearest value of fmt: 3 (E4M3) or 2 (E5M2) mantissa bits, the
 * smallest normal exponent -6 or -14, below which the spacing stays that
 * of the smallest normals (subnormals). */
static inline PP_HOST_DEVICE float pp_fp8_round(float x, int fmt)
{
	if (x != x)
		return x;
	const int mant = fmt == PP_FP8_E4M3 ? 3 : 2, emin = fmt == PP_FP8_E4M3 ? -6 : -14;
	const float max = pp_fp8_max(fmt), a = fabsf(x);
	if (a >= max) /* infinity too */
		return x < 0 ? -max : max;
	if (a == 0)
		return x;
	int e;
	frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): a's exponent is e - 1 */
	e = e - 1 < emin ? emin : e - 1;
	const int q = e - mant; /* the spacing of fmt's values near a: 2^q */
	float r = ldexpf(rintf(ldexpf(a, -q)), q);
	r = r > max ? max : r;
	return x < 0 ? -r : r;
}

#endif
