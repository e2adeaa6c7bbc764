#include "watchdog.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"

extern char **environ;

/* ---- stack traces --------------------------------------------------------- */

#define MAX_FRAMES  48
#define MAX_THREADS 256

/* The one request in flight: the signalled thread fills it. */
static struct {
	void *frames[MAX_FRAMES];
	int n;
	atomic_int done;
} slot;

static void on_dump_signal(int sig)
{
	(void)sig;
	int saved = errno;
	slot.n = backtrace(slot.frames, MAX_FRAMES);
	atomic_store(&slot.done, 1);
	errno = saved;
}

typedef struct {
	pid_t tid;
	char name[32];
	int n; /* frames; -1: did not answer */
	void *frames[MAX_FRAMES];
} thread_stack;

/* One frame's name: "func at file:line (module)", then a line per function
 * inlined at that address: "    inlined in caller at file:line". */
typedef struct {
	char text[1024];
} frame_name;

static void read_comm(pid_t tid, char *buf, size_t n)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
	FILE *f = fopen(path, "r");
	buf[0] = 0;
	if (f) {
		if (fgets(buf, (int)n, f))
			buf[strcspn(buf, "\n")] = 0;
		fclose(f);
	}
}

/* Appends "func at file:line" (or "func" without debug information) to out. */
static void append_frame(char *out, size_t n, const char *lead, const char *fn, const char *loc)
{
	size_t len = strlen(out);
	if (len + 1 >= n)
		return;
	if (loc[0] && strncmp(loc, "??", 2))
		snprintf(out + len, n - len, "%s%s at %s", lead, fn, loc);
	else
		snprintf(out + len, n - len, "%s%s", lead, fn);
}

/* Runs `addr2line -a -f -i -C` on n offsets of one module: for each, the
 * function and location, and those of the functions inlined there (the
 * innermost first), into text[i] ("" where addr2line knows nothing). */
static void addr2line(const char *module, const uintptr_t *off, int n, char (*text)[1024])
{
	int out[2];
	if (pipe(out))
		return;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addclose(&fa, out[0]);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	char **argv = calloc((size_t)n + 8, sizeof *argv);
	char(*hex)[24] = calloc((size_t)n, sizeof *hex);
	pid_t pid = -1;
	if (argv && hex) {
		int a = 0;
		argv[a++] = "addr2line";
		argv[a++] = "-a";
		argv[a++] = "-f";
		argv[a++] = "-i";
		argv[a++] = "-C";
		argv[a++] = "-e";
		argv[a++] = (char *)module;
		for (int i = 0; i < n; i++) {
			snprintf(hex[i], sizeof hex[i], "0x%lx", (unsigned long)off[i]);
			argv[a++] = hex[i];
		}
		if (posix_spawnp(&pid, "addr2line", &fa, NULL, argv, environ))
			pid = -1;
	}
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	FILE *f = pid > 0 ? fdopen(out[0], "r") : NULL;
	if (!f)
		close(out[0]);
	/* groups: an address line "0x...", then pairs of lines: function, file:line */
	char line[512], fn[256] = "";
	int i = -1, half = 0, depth = 0;
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "0x", 2)) {
			i++, half = 0, depth = 0;
			continue;
		}
		if (i < 0 || i >= n)
			continue;
		if (!half) {
			snprintf(fn, sizeof fn, "%.255s", line);
			half = 1;
			continue;
		}
		half = 0;
		line[strcspn(line, " ")] = 0; /* drops " (discriminator 2)" */
		if (!strcmp(fn, "??"))
			continue;
		append_frame(text[i], sizeof text[i], depth++ ? "\n      inlined in " : "", fn,
			     line);
	}
	if (f)
		fclose(f);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	free(argv);
	free(hex);
}

/* Names every frame of the threads: one addr2line per module. */
static void name_frames(thread_stack *ts, int nt, frame_name *names)
{
	int total = 0;
	for (int t = 0; t < nt; t++)
		total += ts[t].n > 0 ? ts[t].n : 0;
	if (!total)
		return;
	typedef struct {
		const char *module;
		uintptr_t off;
		const char *sym;
		int done;
	} fr;
	fr *all = calloc((size_t)total, sizeof *all);
	uintptr_t *offs = calloc((size_t)total, sizeof *offs);
	int *idx = calloc((size_t)total, sizeof *idx);
	char(*text)[1024] = calloc((size_t)total, sizeof *text);
	if (!all || !offs || !idx || !text)
		goto out;
	/* the main program by its real path (its link-map name may be empty) */
	static char exe[1024];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[len > 0 ? len : 0] = 0;
	Dl_info self;
	void *self_base = dladdr((void *)name_frames, &self) ? self.dli_fbase : NULL;
	int k = 0;
	for (int t = 0; t < nt; t++)
		for (int i = 0; i < ts[t].n; i++, k++) {
			Dl_info info;
			/* a return address points after the call: look up the call */
			uintptr_t pc = (uintptr_t)ts[t].frames[i] - (i > 0);
			if (!dladdr((void *)pc, &info) || !info.dli_fname) {
				all[k].done = 1;
				continue;
			}
			all[k].module = info.dli_fbase == self_base && exe[0] ? exe
									      : info.dli_fname;
			all[k].off = pc - (uintptr_t)info.dli_fbase;
			all[k].sym = info.dli_sname;
		}
	/* batch the frames of each module */
	for (int i = 0; i < total; i++) {
		if (all[i].done)
			continue;
		int n = 0;
		for (int j = i; j < total; j++)
			if (!all[j].done && !strcmp(all[j].module, all[i].module)) {
				idx[n] = j;
				offs[n++] = all[j].off;
			}
		memset(text, 0, (size_t)n * sizeof *text);
		addr2line(all[i].module, offs, n, text);
		const char *base = strrchr(all[i].module, '/');
		base = base ? base + 1 : all[i].module;
		for (int j = 0; j < n; j++) {
			fr *f = &all[idx[j]];
			char *out = names[idx[j]].text;
			if (text[j][0])
				snprintf(out, sizeof names[idx[j]].text, "%.1000s (%s)", text[j],
					 base);
			else
				snprintf(out, sizeof names[idx[j]].text, "%.200s (%s+0x%lx)",
					 f->sym ? f->sym : "??", base, (unsigned long)f->off);
			f->done = 1;
		}
	}
out:
	free(all);
	free(offs);
	free(idx);
	free(text);
}

int stacks_dump(void)
{
	static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&one);
	const int sig = SIGRTMIN + 3;
	struct sigaction sa = {.sa_handler = on_dump_signal, .sa_flags = SA_RESTART}, old;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, &old);
	void *warm[2];
	backtrace(warm, 2); /* loads the unwinder outside a signal handler */

	thread_stack *ts = calloc(MAX_THREADS, sizeof *ts);
	int nt = 0, answered = 0;
	pid_t self = (pid_t)syscall(SYS_gettid), pid = getpid();
	DIR *d = opendir("/proc/self/task");
	for (struct dirent *de; ts && d && (de = readdir(d)) && nt < MAX_THREADS;) {
		pid_t tid = (pid_t)atoi(de->d_name);
		if (tid <= 0 || tid == self)
			continue;
		thread_stack *t = &ts[nt++];
		t->tid = tid;
		read_comm(tid, t->name, sizeof t->name);
		t->n = -1;
		atomic_store(&slot.done, 0);
		if (syscall(SYS_tgkill, pid, tid, sig))
			continue;
		/* a thread that blocks the signal never answers */
		for (double t0 = clock_seconds();
		     !atomic_load(&slot.done) && clock_seconds() - t0 < 0.5;)
			usleep(1000);
		if (atomic_load(&slot.done)) {
			/* frames[0] is the handler, [1] the signal trampoline */
			t->n = slot.n > 2 ? slot.n - 2 : 0;
			memcpy(t->frames, slot.frames + 2, (size_t)t->n * sizeof(void *));
			answered++;
		}
	}
	if (d)
		closedir(d);
	sigaction(sig, &old, NULL);

	int total = 0;
	for (int t = 0; t < nt; t++)
		total += ts[t].n > 0 ? ts[t].n : 0;
	frame_name *names = calloc((size_t)total + 1, sizeof *names);
	if (names)
		name_frames(ts, nt, names);
	for (int t = 0, k = 0; t < nt; t++) {
		log_info("thread %d (%s%s)%s", (int)ts[t].tid, ts[t].name,
			 ts[t].tid == pid ? ", main" : "",
			 ts[t].n < 0 ? ": no stack (the thread blocks signals)" : ":");
		for (int i = 0; i < ts[t].n; i++, k++) {
			const char *name = names && names[k].text[0] ? names[k].text : "??";
			/* one log line per line: every line carries the rank */
			for (int first = 1; *name; first = 0) {
				int len = (int)strcspn(name, "\n");
				if (first)
					log_info("  #%-2d %.*s", i, len, name);
				else
					log_info("%.*s", len, name);
				name += len + (name[len] == '\n');
			}
		}
	}
	free(names);
	free(ts);
	pthread_mutex_unlock(&one);
	return answered;
}

/* ---- the watchdog thread ------------------------------------------------- */

struct watchdog {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool quit, armed;
	long step;
	double deadline, timeout;
	void (*end)(void *ctx, const char *why);
	void *ctx;
};

static void fire(watchdog *w, long step)
{
	char why[160];
	snprintf(why, sizeof why, "step %ld ran past step_timeout=%g s", step, w->timeout);
	log_error("%s (hung); the stack of every thread of this rank follows", why);
	int n = stacks_dump();
	log_error("%s: %d thread stack(s) above; ending the job", why, n);
	/* the other ranks, stuck behind this one, pass the deadline at about the
	 * same time: let them print before the job is ended */
	sleep(2);
	w->end(w->ctx, why);
}

static void *run(void *arg)
{
	watchdog *w = arg;
	pthread_mutex_lock(&w->mu);
	while (!w->quit) {
		if (!w->armed) {
			pthread_cond_wait(&w->cv, &w->mu);
			continue;
		}
		double left = w->deadline - clock_seconds();
		if (left <= 0) {
			/* fire does not return, and w->mu stays held: the main
			 * thread, should its step end meanwhile, stops at the
			 * watchdog (watchdog_disarm) instead of training on or
			 * saving the checkpoint of a job that hung */
			fire(w, w->step);
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		double until = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + left;
		ts.tv_sec = (time_t)until;
		ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int watchdog_start(watchdog **out, double timeout_s, void (*end)(void *ctx, const char *why),
		   void *ctx, pp_err *e)
{
	*out = NULL;
	watchdog *w = calloc(1, sizeof *w);
	if (!w)
		return pp_errorf(e, PP_ERUNTIME, "watchdog: out of memory");
	w->timeout = timeout_s;
	w->end = end;
	w->ctx = ctx;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	/* the thread takes no signal meant for the process (SIGTERM, SIGUSR1) */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(&w->thread, NULL, run, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		free(w);
		return pp_errorf(e, PP_ERUNTIME, "watchdog: cannot start its thread: %s",
				 strerror(rc));
	}
	*out = w;
	return 0;
}

void watchdog_arm(watchdog *w, long step)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->armed = true;
	w->step = step;
	w->deadline = clock_seconds() + w->timeout;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void watchdog_disarm(watchdog *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->armed = false;
	pthread_mutex_unlock(&w->mu);
}

void watchdog_stop(watchdog *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->quit = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

void debug_hang(long step)
{
	log_info("debug.hang_step=%ld: this rank now hangs inside step %ld", step, step);
	for (;;)
		sleep(60);
}
