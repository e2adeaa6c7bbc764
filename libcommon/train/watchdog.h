/* Hang watchdog: a thread that watches the training loop. When a step runs
 * past its timeout, it prints the stack traces of every thread of this
 * process to stderr, each line prefixed by the rank's log prefix, waits a
 * moment so that the other ranks (stuck in a collective behind the hung one,
 * so past the same deadline) print theirs, then calls the caller's end
 * function, which ends the job. Once it has fired, watchdog_arm, _disarm
 * and _stop wait for that end: a step that finishes meanwhile goes no
 * further (no next step, no checkpoint of a job that hung).
 *
 *   watchdog *w;
 *   watchdog_start(&w, 600, end_job, ctx, &e);
 *   for each step: watchdog_arm(w, step); ... the step ...; watchdog_disarm(w);
 *   watchdog_stop(w);
 *
 * Stack traces are taken without a debugger: the watchdog sends a signal to
 * each thread in turn (tgkill), whose handler records its return addresses
 * (backtrace(3)); the watchdog then names them: function, file and line
 * from the binaries' debug information (addr2line(1), when installed),
 * else the nearest dynamic symbol (dladdr(3)). */
#ifndef PP_WATCHDOG_H
#define PP_WATCHDOG_H

#include "../base/error.h"

typedef struct watchdog watchdog;

/* Starts the watchdog thread. timeout_s > 0. end(ctx, why) ends the job
 * (it does not return); why says which step overran. */
int watchdog_start(watchdog **w, double timeout_s, void (*end)(void *ctx, const char *why),
		   void *ctx, pp_err *e);
/* A step starts now: it must end (watchdog_disarm) within the timeout. */
void watchdog_arm(watchdog *w, long step);
void watchdog_disarm(watchdog *w);
/* Stops and frees the thread (w may be NULL). */
void watchdog_stop(watchdog *w);

/* Writes the stack of every other thread of this process to stderr, one
 * line per frame, each prefixed by the log prefix: "thread 1234 (pp-train, main)"
 * then "  #0 train_step at libcommon/train/train.c:655 (pp-train)". Returns the
 * number of threads that answered. */
int stacks_dump(void);

/* debug.hang_step: sleeps until the process is ended (the watchdog test's
 * hung rank). */
void debug_hang(long step) __attribute__((noreturn));

#endif
