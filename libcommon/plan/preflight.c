#include "preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../../kernels/ops.h"
#include "../base/clock.h"
#include "../base/fsutil.h"
#include "../base/log.h"
#include "../comm/boot.h"
#include "../comm/comm.h"
#include "plan.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

/* What a rank tells rank 0 about itself. */
typedef struct {
	int rank, size, local_rank, local_size;
	int slurm_procid, slurm_ntasks; /* -1 when Slurm did not start it */
	int pid;
	char host[BOOT_HOST_MAX];
	char device[96];
	int device_ok;
	double mem_total; /* bytes of the device memory this rank may use */
	double mem_free;
	int dir_ok;
	char dir_msg[200];
	double dir_free; /* bytes free in run_dir */
} rank_info;

/* ---- the table ---------------------------------------------------------- */

typedef struct {
	char check[16], where[24], detail[240];
	bool ok;
} row;

typedef struct {
	row *rows;
	int n, cap, failed;
} table;

static void add(table *t, const char *check, const char *where, bool ok, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void add(table *t, const char *check, const char *where, bool ok, const char *fmt, ...)
{
	if (t->n == t->cap) {
		int cap = t->cap ? 2 * t->cap : 32;
		row *r = realloc(t->rows, (size_t)cap * sizeof *r);
		if (!r)
			return;
		t->rows = r;
		t->cap = cap;
	}
	row *r = &t->rows[t->n++];
	snprintf(r->check, sizeof r->check, "%s", check);
	snprintf(r->where, sizeof r->where, "%s", where);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof r->detail, fmt, ap);
	va_end(ap);
	r->ok = ok;
	t->failed += !ok;
}

static void print_table(FILE *f, const table *t)
{
	fprintf(f, "%-11s %-14s %-6s %s\n", "CHECK", "WHERE", "RESULT", "DETAIL");
	for (int i = 0; i < t->n; i++)
		fprintf(f, "%-11s %-14s %-6s %s\n", t->rows[i].check, t->rows[i].where,
			t->rows[i].ok ? "ok" : "FAIL", t->rows[i].detail);
	fflush(f);
}

static const char *bytes_str(char *buf, size_t n, double b)
{
	if (b >= GiB)
		snprintf(buf, n, "%.1f GiB", b / GiB);
	else if (b >= 1024 * 1024)
		snprintf(buf, n, "%.0f MiB", b / (1024 * 1024));
	else
		snprintf(buf, n, "%.0f KiB", b / 1024);
	return buf;
}

/* ---- this rank ---------------------------------------------------------- */

static int env_int(const char *name)
{
	const char *s = getenv(name);
	return s && *s ? atoi(s) : -1;
}

/* MemTotal and MemAvailable of /proc/meminfo in bytes */
static void host_memory(double *total, double *avail)
{
	*total = *avail = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		unsigned long long kb;
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			*total = 1024.0 * (double)kb;
		else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			*avail = 1024.0 * (double)kb;
	}
	if (f)
		fclose(f);
}

static void probe_device(const pp_config *c, const pp_proc *p, rank_info *me)
{
	me->device_ok = 1;
	if (c->device == PP_DEVICE_CPU) {
		double total, avail;
		host_memory(&total, &avail);
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		snprintf(me->device, sizeof me->device, "cpu (%ld cores)", cores);
		/* the ranks of a node share its memory */
		int local = p->local_size > 0 ? p->local_size : 1;
		me->mem_total = total / local;
		me->mem_free = avail / local;
		return;
	}
#ifdef PP_CUDA
	pp_err e = {0};
	size_t fr = 0, tot = 0;
	if (pp_cuda_init(boot_device(p), &e) || pp_cuda_memory(&fr, &tot)) {
		me->device_ok = 0;
		snprintf(me->device, sizeof me->device, "%.95s",
			 e.msg[0] ? e.msg : "no CUDA device");
		return;
	}
	snprintf(me->device, sizeof me->device, "%d: %.80s", boot_device(p), pp_cuda_device_name());
	me->mem_total = (double)tot;
	me->mem_free = (double)fr;
#else
	me->device_ok = 0;
	snprintf(me->device, sizeof me->device, "device=%s: this build has no CUDA backend",
		 pp_device_name(c->device));
#endif
}

static void probe_file(const char *dir, const rank_info *me, char *path, size_t n)
{
	snprintf(path, n, "%s/.pp-check.%s.%d", dir, me->host, me->rank);
}

/* Writes this rank's file into run_dir (made if missing: the first
 * directory made goes to made, for the check to take away) and reads back
 * the free space. */
static void probe_run_dir(const pp_config *c, rank_info *me, char *made, size_t made_size)
{
	pp_err e = {0};
	char path[PP_PATH_MAX + 128], text[96];
	me->dir_ok = 0;
	if (fs_mkdir_p_made(c->run_dir, made, made_size, &e)) {
		snprintf(me->dir_msg, sizeof me->dir_msg, "%.199s", e.msg);
		return;
	}
	probe_file(c->run_dir, me, path, sizeof path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int len = snprintf(text, sizeof text, "rank %d on %s\n", me->rank, me->host);
	if (fd < 0 || write(fd, text, (size_t)len) != len || fsync(fd)) {
		snprintf(me->dir_msg, sizeof me->dir_msg, "cannot write %.120s: %s", path,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	struct statvfs sv;
	if (statvfs(c->run_dir, &sv) == 0)
		me->dir_free = (double)sv.f_bavail * (double)sv.f_frsize;
	me->dir_ok = 1;
}

/* ---- collectives -------------------------------------------------------- */

/* value i of rank r: small integers, exact in float32 sums */
static float pattern(int r, size_t i) { return (float)((r + 1) * (int)(i % 13 + 1)); }

enum { OP_ALLREDUCE, OP_ALL_GATHER, OP_SENDRECV, OP_ALLTOALL, N_OPS };
static const char *const op_names[N_OPS] = {"allreduce", "all_gather", "sendrecv", "alltoall"};

/* One op at one size (bytes per rank): checks the result on this rank
 * (*wrong) and times it (seconds per op, the slowest rank's). */
static int run_op(pp_comm *w, const pp_ops *ops, int op, size_t bytes, int *wrong, double *secs,
		  pp_err *e)
{
	const int n = w->size, r = w->rank;
	size_t count = bytes / sizeof(float);
	/* all-to-all (expert parallelism's exchange): block b of the message
	 * goes to rank b */
	const size_t blk = count / (size_t)n;
	if (op == OP_ALLTOALL)
		count = blk * (size_t)n;
	size_t out_count = op == OP_ALL_GATHER ? count * (size_t)n : count;
	size_t *counts = calloc(2 * (size_t)n, sizeof *counts),
	       *displs = counts ? counts + n : NULL;
	for (int q = 0; counts && q < n; q++)
		counts[q] = blk, displs[q] = (size_t)q * blk;
	float *host = malloc(out_count * sizeof(float));
	void *send = ops->alloc(count * sizeof(float)),
	     *recv = ops->alloc(out_count * sizeof(float));
	int rc = 0;
	if (!host || !send || !recv || !counts)
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory for a %zu-byte message", bytes);
	for (size_t i = 0; !rc && i < count; i++)
		host[i] = pattern(r, i);
	if (!rc)
		ops->to_device(send, host, count * sizeof(float));
	const int iters = bytes <= (256 << 10) ? 20 : 5;
	double t = 0;
	for (int it = -1; it < iters && !rc; it++) { /* one untimed warm-up */
		if (op == OP_ALLREDUCE)
			ops->to_device(recv, host, count * sizeof(float));
		if ((rc = comm_barrier(w, e)))
			break;
		double t0 = clock_seconds();
		if (op == OP_ALLREDUCE)
			rc = comm_allreduce(w, recv, count, PP_DT_F32, PP_OP_SUM, e);
		else if (op == OP_ALL_GATHER)
			rc = comm_all_gather(w, send, recv, count, PP_DT_F32, e);
		else if (op == OP_ALLTOALL)
			rc = comm_alltoallv(w, send, counts, displs, recv, counts, displs,
					    PP_DT_F32, e);
		else
			rc = comm_sendrecv(w, send, count, (r + 1) % n, recv, count,
					   (r + n - 1) % n, PP_DT_F32, 1, e);
		if (it >= 0)
			t += clock_seconds() - t0;
	}
	*wrong = 0;
	if (!rc) {
		ops->to_host(host, recv, out_count * sizeof(float));
		const int from = (r + n - 1) % n;
		for (size_t i = 0; i < out_count && !*wrong; i++) {
			float want = op == OP_ALLREDUCE
					     ? (float)(i % 13 + 1) * (float)(n * (n + 1) / 2)
				     : op == OP_ALL_GATHER ? pattern((int)(i / count), i % count)
				     : op == OP_ALLTOALL
					     ? pattern((int)(i / blk), (size_t)r * blk + i % blk)
					     : pattern(from, i);
			*wrong = host[i] != want;
		}
		*secs = t / iters;
		rc = comm_allreduce(w, secs, 1, PP_DT_F64, PP_OP_MAX, e);
	}
	free(host);
	free(counts);
	if (send)
		ops->free(send);
	if (recv)
		ops->free(recv);
	return rc;
}

static int check_collectives(pp_comm *w, const pp_ops *ops, table *t, pp_err *e)
{
	static const size_t sizes[] = {4 << 10, 256 << 10, 4 << 20, 32 << 20};
	const int n = w->size;
	int *wrong_all = calloc((size_t)n, sizeof(int));
	if (!wrong_all)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	int rc = 0;
	for (int op = 0; op < N_OPS && !rc; op++)
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && !rc; s++) {
			int wrong = 0;
			double secs = 0;
			if ((rc = run_op(w, ops, op, sizes[s], &wrong, &secs, e)) ||
			    (rc = comm_all_gather(w, &wrong, wrong_all, 1, PP_DT_I32, e)))
				break;
			/* nccl-tests' bus bandwidth: what each link carries */
			double bytes = (double)sizes[s], bus;
			if (op == OP_ALLREDUCE)
				bus = bytes / secs * 2.0 * (n - 1) / n;
			else if (op == OP_ALL_GATHER)
				bus = bytes * n / secs * (double)(n - 1) / n;
			else if (op ==
				 OP_ALLTOALL) /* (n - 1) / n of each rank's message leaves it */
				bus = bytes / secs * (double)(n - 1) / n;
			else
				bus = bytes / secs;
			char size[32], bad[200] = "";
			bytes_str(size, sizeof size, bytes);
			for (int r = 0; r < n; r++)
				if (wrong_all[r])
					snprintf(bad + strlen(bad), sizeof bad - strlen(bad),
						 "%s%d", bad[0] ? "," : "", r);
			if (bad[0])
				add(t, op_names[op], size, false, "wrong result on rank(s) %s",
				    bad);
			else
				add(t, op_names[op], size, true, "bus %.2f GB/s, %.3f ms",
				    bus / 1e9, secs * 1e3);
		}
	free(wrong_all);
	return rc;
}

/* ---- rank 0's checks of what every rank reported -------------------------- */

static void check_wiring(const rank_info *all, int n, table *t)
{
	int nodes = 0;
	for (int r = 0; r < n; r++) {
		const rank_info *a = &all[r];
		char where[24], bad[160] = "";
		snprintf(where, sizeof where, "rank %d", r);
		int on_host = 0, first = 1;
		for (int q = 0; q < n; q++)
			if (!strcmp(all[q].host, a->host)) {
				on_host++;
				first &= q >= r;
			}
		nodes += first;
		if (a->rank != r || a->size != n)
			snprintf(bad, sizeof bad, "PMIx says rank %d of %d", a->rank, a->size);
		else if (a->local_size != on_host || a->local_rank < 0 || a->local_rank >= on_host)
			snprintf(bad, sizeof bad, "local rank %d of %d, but %d ranks run on %s",
				 a->local_rank, a->local_size, on_host, a->host);
		else if (a->slurm_procid >= 0 && (a->slurm_procid != r || a->slurm_ntasks != n))
			snprintf(bad, sizeof bad, "Slurm says task %d of %d", a->slurm_procid,
				 a->slurm_ntasks);
		if (bad[0])
			add(t, "wiring", where, false, "%s (pid %d on %s)", bad, a->pid, a->host);
		else
			add(t, "wiring", where, true,
			    "rank %d of %d, local %d of %d on %s (pid %d)%s", r, n, a->local_rank,
			    a->local_size, a->host, a->pid,
			    a->slurm_procid >= 0 ? ", = Slurm task" : "");
	}
	add(t, "wiring", "job", true, "%d rank%s on %d node%s", n, n > 1 ? "s" : "", nodes,
	    nodes > 1 ? "s" : "");
}

static void check_devices(const rank_info *all, int n, table *t)
{
	for (int r = 0; r < n; r++) {
		char where[24], tot[32], fr[32];
		snprintf(where, sizeof where, "rank %d", r);
		if (!all[r].device_ok)
			add(t, "device", where, false, "%s", all[r].device);
		else
			add(t, "device", where, true, "%s: %s, %s free", all[r].device,
			    bytes_str(tot, sizeof tot, all[r].mem_total),
			    bytes_str(fr, sizeof fr, all[r].mem_free));
	}
}

static void check_run_dir(const pp_config *c, const rank_info *all, int n, table *t)
{
	plan_counts pc;
	plan_param_count(&c->model, &pc);
	/* fp32 parameters and AdamW's m and v */
	double ckpt = 12.0 * (double)pc.total;
	for (int r = 0; r < n; r++) {
		const rank_info *a = &all[r];
		char where[24], path[PP_PATH_MAX + 128], fr[32], need[32];
		snprintf(where, sizeof where, "rank %d", r);
		if (!a->dir_ok) {
			add(t, "run_dir", where, false, "%s is not writable from %s: %s",
			    c->run_dir, a->host, a->dir_msg);
			continue;
		}
		/* rank 0 sees the file: one file system for every node */
		probe_file(c->run_dir, a, path, sizeof path);
		if (access(path, F_OK)) {
			add(t, "run_dir", where, false,
			    "%s/ written on %s is not seen from rank 0 on %s: it must be one shared file system",
			    c->run_dir, a->host, all[0].host);
			continue;
		}
		bool room = a->dir_free >= 2 * ckpt;
		add(t, "run_dir", where, room,
		    "%s writable from %s, %s free%s %s for 2 checkpoints", c->run_dir, a->host,
		    bytes_str(fr, sizeof fr, a->dir_free), room ? " >=" : ", less than the",
		    bytes_str(need, sizeof need, 2 * ckpt));
	}
}

static void check_memory(const pp_config *c, const rank_info *all, int n, table *t)
{
	const int world = pp_config_world(c), data = pp_config_data_ranks(c);
	if (n > 1 && n != world) {
		add(t, "layout", "job", false,
		    "pp x dp x fsdp x tp = %d x %d x %d x %d needs %d ranks; "
		    "the job has %d",
		    c->pp, c->dp, c->fsdp, c->tp, world, n);
		return;
	}
	add(t, "layout", "job", true, "pp x dp x fsdp x tp = %d x %d x %d x %d = %d rank%s%s",
	    c->pp, c->dp, c->fsdp, c->tp, world, world > 1 ? "s" : "",
	    n == 1 && world > 1 ? " (this machine checked as one of them)" : "");
	/* a single process stands for the most loaded rank */
	for (int r = 0; r < (n > 1 ? n : 1); r++) {
		plan_memory_t pm;
		pp_err e = {0};
		int rc = n > 1 ? plan_memory_rank(c, r / (data * c->tp), &pm, &e)
			       : plan_memory(c, &pm, &e);
		char where[24], need[32], have[32];
		snprintf(where, sizeof where, "rank %d", r);
		if (rc) {
			add(t, "memory", where, false, "%s", e.msg);
			continue;
		}
		bool fits = all[r].device_ok && (double)pm.total <= all[r].mem_total;
		add(t, "memory", where, fits, "plan for pp rank %d: %s %s %s of %s", pm.rank,
		    bytes_str(need, sizeof need, (double)pm.total), fits ? "<=" : ">",
		    bytes_str(have, sizeof have, all[r].mem_total), all[r].device);
	}
}

/* ---- the run ------------------------------------------------------------ */

int preflight_run(const pp_config *c, FILE *out, pp_err *e)
{
	pp_proc p;
	int rc = boot_init(&p, e);
	if (rc)
		return rc;
	log_set_prefix("pp-init", p.rank, p.size);
	rank_info me = {.rank = p.rank,
			.size = p.size,
			.local_rank = p.local_rank,
			.local_size = p.local_size,
			.slurm_procid = env_int("SLURM_PROCID"),
			.slurm_ntasks = env_int("SLURM_NTASKS"),
			.pid = (int)getpid()};
	if (p.size == 1 && me.slurm_ntasks == 1)
		me.slurm_procid = me.slurm_ntasks = -1; /* a plain srun -n 1 says nothing more */
	snprintf(me.host, sizeof me.host, "%s", p.host);
	probe_device(c, &p, &me);
	char made[PP_PATH_MAX] = "";
	probe_run_dir(c, &me, made, sizeof made);
	rank_info *all = calloc((size_t)p.size, sizeof *all);
	if (!all) {
		boot_fini(&p);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	table t = {0};
	if (!(rc = boot_allgather(&p, "check.info", &me, sizeof me, all, e)) && p.rank == 0) {
		check_wiring(all, p.size, &t);
		check_devices(all, p.size, &t);
		check_run_dir(c, all, p.size, &t);
		check_memory(c, all, p.size, &t);
	}
	/* rank 0 has looked for every rank's file: each removes its own */
	int dummy = 0, sink[1];
	if (!rc && p.size > 1)
		rc = boot_exchange(&p, "check.dir", &dummy, sizeof dummy, 0, sink, e);
	char path[PP_PATH_MAX + 128];
	probe_file(c->run_dir, &me, path, sizeof path);
	unlink(path);
	/* the check leaves no trace: run_dir, where it made it, goes again once
	 * every rank's file is gone */
	if (!rc && p.size > 1)
		rc = boot_exchange(&p, "check.undir", &dummy, sizeof dummy, 0, sink, e);
	fs_rmdir_upto(c->run_dir, made);

	pp_comm *world = NULL;
	const pp_ops *ops = NULL;
	if (!rc && p.size > 1 && me.device_ok) {
		const char *backend = c->device == PP_DEVICE_CUDA ? "nccl" : "mpi";
		if (!(rc = pp_ops_select(c->device, PP_TYPE_REAL, &ops, e)) &&
		    !(rc = comm_init(&world, backend, &p, c->comm_timeout, e)))
			rc = check_collectives(world, ops, &t, e);
		if (rc && p.rank == 0)
			add(&t, backend, "job", false, "%s", e->msg);
	} else if (!rc && p.rank == 0) {
		add(&t, "collective", "job", true, "none to check with %s",
		    p.size == 1 ? "one rank" : "a device that failed");
	}
	if (p.rank == 0) {
		print_table(out, &t);
		fprintf(out, "%d check%s, %d failed\n", t.n, t.n == 1 ? "" : "s", t.failed);
		fflush(out);
	}
	/* every rank exits with rank 0's verdict */
	int failed = rc ? 1 : t.failed;
	if (!rc && p.size > 1)
		rc = boot_exchange(&p, "check.verdict", &failed, sizeof failed, 0, &failed, e);
	free(t.rows);
	free(all);
	if (rc) {
		/* a communicator that failed must not be finalized: end the job */
		log_error("%s", e->msg);
		comm_abort(world, PP_ERUNTIME, e->msg);
	}
	comm_free(world);
	boot_fini(&p);
	if (failed)
		return pp_errorf(e, PP_ERUNTIME, "%d preflight check%s failed (see the table)",
				 failed, failed == 1 ? "" : "s");
	return 0;
}
