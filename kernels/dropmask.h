/* Dropout's mask as a pure function of a key and an element's index, for
 * the CPU and CUDA kernels alike (the same bits on both): element index is
 * dropped with probability p = threshold / 2^32. */
#ifndef PP_KERNELS_DROPMASK_H
#define PP_KERNELS_DROPMASK_H

#include <stdint.h>

#ifdef __CUDACC__
#define PP_HOST_DEVICE __host__ __device__
#else
#define PP_HOST_DEVICE
#endif

/* splitmix64's finaliser */
static inline PP_HOST_DEVICE uint64_t pp_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static inline PP_HOST_DEVICE int pp_dropped(uint64_t key, uint64_t index, uint64_t threshold)
{
	return (pp_mix64(key ^ pp_mix64(index)) >> 32) < threshold;
}

/* p in [0, 1) as the threshold of pp_dropped */
static inline uint64_t pp_drop_threshold(double p) { return (uint64_t)(p * 4294967296.0); }

#endif
