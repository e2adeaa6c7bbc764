/* Cluster preflight (`srun pp-init --check --cfg FILE`): what a long job
 * needs from its allocation, checked in seconds before it burns hours.
 * Every rank of the job runs it; rank 0 prints one table:
 *   wiring     rank, size, local rank and node of every rank as PMIx gave
 *              them (and as Slurm numbered the tasks), consistent across ranks
 *   device     the device each rank got and its memory
 *   allreduce, all_gather, sendrecv
 *              correctness on the comm backend of the config's device (mpi,
 *              nccl), and bus bandwidth per message size as nccl-tests
 *              computes it (allreduce: bytes / time * 2 (n-1) / n;
 *              all_gather: n * bytes / time * (n-1) / n; sendrecv in a
 *              ring: bytes / time)
 *   run_dir    writable from every rank, the files of every node seen by
 *              rank 0 (one file system), with free space for two checkpoints
 *   layout     the job's ranks match pp x dp x tp
 *   memory     each pp rank's plan (plan_memory_rank) fits its device
 * A single process checks its own machine (no collectives). */
#ifndef PP_PREFLIGHT_H
#define PP_PREFLIGHT_H

#include <stdio.h>

#include "../base/error.h"
#include "../config/config.h"

/* Runs every check and prints the table on out (rank 0). Returns 0 when all
 * passed, PP_ERUNTIME naming the failed checks otherwise (on every rank). */
int preflight_run(const pp_config *c, FILE *out, pp_err *e);

#endif
