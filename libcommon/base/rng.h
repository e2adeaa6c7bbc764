/* Counter-based random numbers: every value is a pure function of
 * (key, index), so any process, layout or resume point draws the same
 * numbers without carrying generator state. */
#ifndef PP_RNG_H
#define PP_RNG_H

#include <stdint.h>

uint64_t rng_mix(uint64_t x); /* splitmix64 finaliser */
/* A key for a named stream: mixes the seed with the FNV-1a hash of name. */
uint64_t rng_key(uint64_t seed, const char *name);
/* Uniform in [0, 1) with 53 random bits. */
double rng_uniform(uint64_t key, uint64_t index);
/* Standard normal (Box-Muller on two uniforms of the same index). */
double rng_normal(uint64_t key, uint64_t index);
/* Uniform integer in [0, n). */
uint64_t rng_below(uint64_t key, uint64_t index, uint64_t n);

#endif
