/* Bootstrap: who am I in the job, and how do ranks swap small blobs before
 * any communicator exists. Built on PMIx, which `srun --mpi=pmix` and
 * OpenMPI's `mpirun` both serve; with no launcher the process runs alone
 * (singleton: rank 0 of 1).
 *
 * Usage (every rank, same order):
 *   pp_proc p;
 *   if (boot_init(&p, &e)) ...            PMIx up; rank, size, peers known
 *   boot_exchange(&p, "nccl.id", id, sizeof id, 0, id, &e)   rank 0's id to all
 *   ... comm init, training ...
 *   boot_fini(&p);
 *
 * boot_init, boot_exchange and boot_allgather are collective: every rank of
 * the job calls them, in the same order. */
#ifndef PP_BOOT_H
#define PP_BOOT_H

#include <stddef.h>
#include <sys/types.h>

#include "../base/error.h"

#define BOOT_HOST_MAX 64

/* One rank of the job as its peers see it: enough to tell, after a
 * timeout, whether it is still running (same host: kill(pid, 0)). */
typedef struct {
	pid_t pid;
	char host[BOOT_HOST_MAX];
} boot_peer;

typedef struct pp_proc {
	int rank, size;             /* in the job (PMIx namespace) */
	int local_rank, local_size; /* among the job's ranks on this node */
	int singleton;              /* no launcher answered: rank 0 of 1 */
	char host[BOOT_HOST_MAX];   /* gethostname() */
	char nspace[256];           /* PMIx namespace (job id) */
	boot_peer *peers;           /* size entries, by rank */
	unsigned seq;               /* exchanges so far: makes each key unique */
} pp_proc;

/* Connects to the launcher's PMIx server and learns rank, size, local rank
 * and size, and every rank's (pid, host). With no server (PMIx_Init says
 * PMIX_ERR_UNREACH) the process is a singleton; PMIx is then released at
 * once, because OpenMPI's singleton MPI_Init crashes in a process that still
 * holds a PMIx singleton.
 * Fails (PP_ERUNTIME) when Slurm started several tasks without PMIx
 * (`srun --mpi=none` or a non-PMIx MpiDefault): each would silently be rank 0
 * of 1 and train alone. */
int boot_init(pp_proc *p, pp_err *e);

/* Copies root's n-byte blob into out on every rank (out may alias blob).
 * blob is read on root only. key names the exchange in errors and in the
 * PMIx store ("nccl.id"); it needs not be unique across calls. */
int boot_exchange(pp_proc *p, const char *key, const void *blob, size_t n, int root, void *out,
		  pp_err *e);

/* out (size, n) receives every rank's n-byte blob, in rank order. */
int boot_allgather(pp_proc *p, const char *key, const void *blob, size_t n, void *out, pp_err *e);

/* Asks the launcher to end the whole job with status code (PMIx_Abort),
 * and ends this process with it. Never returns, never waits more than a few
 * seconds. Singleton, or PMIx not (or no longer) up: just exits. p may be
 * NULL. */
void boot_abort(const pp_proc *p, int code, const char *why) __attribute__((noreturn));
/* Ends the process with code (_exit) if it is still alive after seconds
 * (SIGALRM): the bound on an abort that waits for a launcher. */
void boot_exit_after(unsigned seconds, int code);

/* Leaves PMIx; frees the peer table. */
void boot_fini(pp_proc *p);

/* GPU index for this rank in the devices it can see: 0 when
 * CUDA_VISIBLE_DEVICES names a single device (Slurm's --gpus-per-task=1 has
 * already narrowed it), else the local rank. The caller checks it against
 * the device count. */
int boot_device(const pp_proc *p);

/* Appends to buf (size bytes, NUL-terminated) what this rank can tell about
 * the n ranks in ranks[] (job ranks; this rank is skipped):
 *   "rank 3 (pid 1234 on host a) has exited"           same host, gone
 *   "rank 5 (pid 99 on host b) did not respond"        no one on this host gone
 * Returns the number of ranks found dead. Used after a timeout to name the
 * peer at fault. */
int boot_describe_peers(const pp_proc *p, const int *ranks, int n, char *buf, size_t size);

/* "rank 3 (pid 1234 on host a)" */
void boot_peer_name(const pp_proc *p, int rank, char *buf, size_t size);

#endif
