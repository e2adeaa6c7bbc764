#include "rng.h"

#include <math.h>

uint64_t rng_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t rng_key(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return rng_mix(seed ^ rng_mix(h));
}

static uint64_t draw(uint64_t key, uint64_t index) { return rng_mix(key ^ rng_mix(index)); }

double rng_uniform(uint64_t key, uint64_t index)
{
	return (double)(draw(key, index) >> 11) * 0x1.0p-53;
}

double rng_normal(uint64_t key, uint64_t index)
{
	double u1 = rng_uniform(key, 2 * index), u2 = rng_uniform(key, 2 * index + 1);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(uint64_t key, uint64_t index, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)draw(key, index) * n) >> 64);
}
