// Device memory bandwidth as a device-to-device copy sees it: the bound that
// batch-1 decode, which reads every weight once per token, runs against.
//
//   membw [--bytes N] [--reps R]     (default 1 GiB, 20 repetitions)
//
// cudaMemcpyAsync of N bytes from one device buffer to another, R times
// after one untimed copy, timed with CUDA events around all R. A copy reads
// and writes N bytes, so GB/s = 2 N R / seconds / 1e9. Prints one JSON line
// on stdout: {"device", "bytes", "reps", "seconds", "gbs"}. Exit 1 with a
// message on stderr when there is no GPU or a CUDA call fails. Built by
// bench/gpu-decode.sh (nvcc -O2 -o build/bench/membw bench/membw.cu).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return 0;
	fprintf(stderr, "membw: %s: %s\n", what, cudaGetErrorString(err));
	return 1;
}

static long long parse(const char *flag, const char *v, long long min)
{
	char *end;
	long long x = v ? strtoll(v, &end, 10) : 0;
	if (!v || *end || x < min) {
		fprintf(stderr, "membw: %s %s: expected an integer >= %lld\n", flag,
			v ? v : "(missing)", min);
		exit(2);
	}
	return x;
}

int main(int argc, char **argv)
{
	long long bytes = 1LL << 30, reps = 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--bytes"))
			bytes = parse("--bytes", i + 1 < argc ? argv[++i] : NULL, 1 << 20);
		else if (!strcmp(argv[i], "--reps"))
			reps = parse("--reps", i + 1 < argc ? argv[++i] : NULL, 1);
		else {
			fprintf(stderr,
				"membw: unknown argument '%s'; usage: membw [--bytes N] [--reps R]\n",
				argv[i]);
			return 2;
		}
	}
	cudaDeviceProp prop;
	void *src = NULL, *dst = NULL;
	cudaEvent_t t0, t1;
	if (check(cudaGetDeviceProperties(&prop, 0), "no usable GPU") ||
	    check(cudaMalloc(&src, (size_t)bytes), "cudaMalloc") ||
	    check(cudaMalloc(&dst, (size_t)bytes), "cudaMalloc") ||
	    check(cudaMemset(src, 1, (size_t)bytes), "cudaMemset") ||
	    check(cudaEventCreate(&t0), "cudaEventCreate") ||
	    check(cudaEventCreate(&t1), "cudaEventCreate") ||
	    check(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice),
		  "warm-up copy"))
		return 1;
	if (check(cudaEventRecord(t0), "cudaEventRecord"))
		return 1;
	for (long long r = 0; r < reps; r++)
		if (check(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice),
			  "copy"))
			return 1;
	float ms = 0;
	if (check(cudaEventRecord(t1), "cudaEventRecord") ||
	    check(cudaEventSynchronize(t1), "cudaEventSynchronize") ||
	    check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime"))
		return 1;
	double s = ms / 1e3;
	printf("{\"device\": \"%s\", \"bytes\": %lld, \"reps\": %lld, \"seconds\": %.6f, \"gbs\": %.1f}\n",
	       prop.name, bytes, reps, s, 2.0 * (double)bytes * (double)reps / s / 1e9);
	cudaFree(src);
	cudaFree(dst);
	return 0;
}
