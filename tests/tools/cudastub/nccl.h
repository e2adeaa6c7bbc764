/* A stand-in for NCCL's header, for tests/unit/test_comm_order.c: the subset of
 * the API libcommon/comm/nccl.c calls, implemented by that test (each
 * operation one node of its model of the GPU's streams). */
#ifndef PP_CUDASTUB_NCCL_H
#define PP_CUDASTUB_NCCL_H

#include "cuda_runtime.h"

typedef struct stub_comm *ncclComm_t;
typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
} ncclResult_t;
typedef enum {
	ncclInt8,
	ncclUint8,
	ncclInt32,
	ncclUint32,
	ncclInt64,
	ncclUint64,
	ncclFloat16,
	ncclFloat32,
	ncclFloat64,
	ncclBfloat16
} ncclDataType_t;
typedef enum { ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg } ncclRedOp_t;
typedef struct {
	char internal[128];
} ncclUniqueId;
typedef struct {
	int blocking;
	const char *commName;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                    \
	{                                                                                          \
		1, NULL                                                                            \
	}
#define NCCL_SPLIT_NOCOLOR (-1)

const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t c);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int n, ncclUniqueId id, int rank,
				    ncclConfig_t *cfg);
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *cfg);
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank);
ncclResult_t ncclCommCount(const ncclComm_t c, int *count);
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state);
ncclResult_t ncclCommFinalize(ncclComm_t c);
ncclResult_t ncclCommDestroy(ncclComm_t c);
ncclResult_t ncclCommAbort(ncclComm_t c);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			   ncclComm_t c, cudaStream_t st);
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t c, cudaStream_t st);
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			       ncclComm_t c, cudaStream_t st);
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
			   cudaStream_t st);
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			   ncclComm_t c, cudaStream_t st);
ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st);
ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st);

#endif
