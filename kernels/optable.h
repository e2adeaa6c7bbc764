/* The names of the CUDA backend's per-op table (PP_CUDA_PROFILE=1,
 * kernels/cuda/profile.cu), as the backend writes them and pp-init
 * --calibrate reads them back (libcommon/sim/optable.c): the table's
 * header, the prefix of a product's row ("cublasLtMatmul XY m=M n=N k=K",
 * then " fp8" on FP8 tensor cores, then its output and epilogue), and the
 * forward attention's rows (the plain kernel's, cuDNN's). */
#ifndef PP_KERNELS_OPTABLE_H
#define PP_KERNELS_OPTABLE_H

#define PP_OPTABLE_HEADER         "pp: cuda profile"
#define PP_OPTABLE_PRODUCT        "cublasLtMatmul"
#define PP_OPTABLE_FP8            " fp8"
#define PP_OPTABLE_ATTN_FWD       "attention_fwd_kernel"
#define PP_OPTABLE_ATTN_FWD_CUDNN "cuDNN attention forward"

#endif
