/*
 * membw-cpu: the CPU's memory read bandwidth, the bound of batch-1 decoding
 * (bench/decode-cpu.sh divides its decode figures by it; bench/membw.cu is
 * the GPU's).
 *
 *   cc -O3 -march=native -fopenmp -o membw-cpu bench/membw-cpu.c
 *   membw-cpu [-m MIB] [-p PASSES] THREADS...
 *
 * Fills an array of MIB MiB (default 1024) of floats, with every thread
 * touching its own part first, then for each THREADS count sums the whole
 * array PASSES times (default 10) with that many OpenMP threads, each thread
 * a contiguous block. The best pass gives the bandwidth: bytes read / s, in
 * GB/s (1e9 bytes). The array is much larger than any cache, so every pass
 * reads it from memory. Prints one JSON object on stdout:
 *
 *   {"mib": 1024, "passes": 10, "gbs": {"1": 9.8, "2": 14.1}, "checksum": ...}
 *
 * Exit 0; 1 when the array cannot be allocated; 2 on a usage error.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float sum_once(const float *a, size_t n, int threads)
{
	float s = 0.0f;
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : s)
	for (size_t i = 0; i < n; i++)
		s += a[i];
	return s;
}

static void usage(void)
{
	fprintf(stderr, "usage: membw-cpu [-m MIB] [-p PASSES] THREADS...\n");
	exit(2);
}

static long positive(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 1)
		usage();
	return v;
}

int main(int argc, char **argv)
{
	long mib = 1024, passes = 10;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i += 2) {
		if (i + 1 >= argc)
			usage();
		if (strcmp(argv[i], "-m") == 0)
			mib = positive(argv[i + 1]);
		else if (strcmp(argv[i], "-p") == 0)
			passes = positive(argv[i + 1]);
		else
			usage();
	}
	if (i >= argc)
		usage();
	int maxt = 1;
	for (int j = i; j < argc; j++)
		if (positive(argv[j]) > maxt)
			maxt = (int)positive(argv[j]);

	size_t n = (size_t)mib * 1024 * 1024 / sizeof(float);
	float *a = NULL;
	if (posix_memalign((void **)&a, 4096, n * sizeof(float)) != 0) {
		fprintf(stderr, "membw-cpu: cannot allocate %ld MiB\n", mib);
		return 1;
	}
	/* first touch by the threads that read it, in the same static blocks */
#pragma omp parallel for num_threads(maxt) schedule(static)
	for (size_t k = 0; k < n; k++)
		a[k] = (float)(k & 7) * 0.125f;

	double checksum = 0;
	printf("{\"mib\": %ld, \"passes\": %ld, \"gbs\": {", mib, passes);
	for (int j = i; j < argc; j++) {
		int t = (int)positive(argv[j]);
		double best = 0;
		checksum += sum_once(a, n, t); /* warm-up */
		for (long p = 0; p < passes; p++) {
			double t0 = omp_get_wtime();
			checksum += sum_once(a, n, t);
			double dt = omp_get_wtime() - t0;
			double gbs = (double)n * sizeof(float) / dt / 1e9;
			if (gbs > best)
				best = gbs;
		}
		printf("%s\"%d\": %.2f", j > i ? ", " : "", t, best);
	}
	printf("}, \"checksum\": %.6g}\n", checksum);
	free(a);
	return 0;
}
