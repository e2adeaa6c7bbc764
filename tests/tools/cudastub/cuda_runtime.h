/* A stand-in for the CUDA runtime's header, for tests/unit/test_comm_order.c:
 * the subset of the API libcommon/comm/nccl.c calls, implemented by that
 * test as a model of streams and events (no GPU, no CUDA install). */
#ifndef PP_CUDASTUB_RUNTIME_H
#define PP_CUDASTUB_RUNTIME_H

#include <stddef.h>

typedef enum {
	cudaSuccess = 0,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidValue = 1,
	cudaErrorInvalidDevice = 101,
	cudaErrorNotReady = 600,
} cudaError_t;

typedef struct stub_stream *cudaStream_t;
typedef struct stub_event *cudaEvent_t;
#define cudaStreamLegacy       ((cudaStream_t)0x1)
#define cudaStreamNonBlocking  0x01
#define cudaEventDisableTiming 0x02

enum cudaMemcpyKind {
	cudaMemcpyHostToHost,
	cudaMemcpyHostToDevice,
	cudaMemcpyDeviceToHost,
	cudaMemcpyDeviceToDevice,
	cudaMemcpyDefault
};
enum cudaMemoryType {
	cudaMemoryTypeUnregistered,
	cudaMemoryTypeHost,
	cudaMemoryTypeDevice,
	cudaMemoryTypeManaged
};
struct cudaPointerAttributes {
	enum cudaMemoryType type;
	int device;
	void *devicePointer, *hostPointer;
};

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t ev);

#endif
