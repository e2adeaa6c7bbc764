/* tool_schedule: one pipeline schedule's timing and memory, from schedule.h.
 *
 *   tool_schedule KIND P V M FWD BWD [BWD_W]
 *
 * KIND is gpipe, 1f1b, eager1f1b, interleaved1f1b or zbh1; P pipeline ranks,
 * V virtual stages per rank (1 except for interleaved1f1b), M microbatches.
 * FWD and BWD are the time of one stage's (chunk's) forward and full
 * backward for one microbatch, in any unit (seconds, or 1 and 2); BWD_W is
 * the weight-gradient part of BWD that zbh1 defers (default BWD / 2; the
 * other schedules never split the backward, so it changes nothing there).
 *
 * Prints one JSON object on stdout, times in the unit of FWD:
 *   ideal_time           critical path of these compute orders with
 *                        non-blocking zero-time messages (schedule_simulate)
 *   ideal_time_formula   schedule_ideal_time's closed form; null where it
 *                        has none (zbh1 when BWD_W > FWD or > BWD - BWD_W)
 *   bubble_ideal         1 - M V (FWD + BWD) / ideal_time
 *   bubble_theory        schedule_bubble_theory; null with the formula
 *   makespan_blocking    the same lists run with blocking rendezvous p2p
 *   bubble_blocking      mean idle fraction of that run
 *   compute_per_rank     M V (FWD + BWD), each rank's busy time
 *   peak_act, peak_wstash, peak_held   per rank (chunk-microbatches)
 * Exit 0; 2 with a message on stderr for a bad argument. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/schedule/schedule.h"

static const char usage[] =
	"usage: tool_schedule KIND P V M FWD BWD [BWD_W]\n"
	"  KIND   gpipe | 1f1b | eager1f1b | interleaved1f1b | zbh1\n"
	"  P V M  pipeline ranks, virtual stages per rank, microbatches (integers >= 1)\n"
	"  FWD BWD [BWD_W]  per-microbatch, per-stage forward, full backward and its\n"
	"         weight-gradient part (default BWD/2), any time unit\n";

static int bad(const char *fmt, const char *what, const char *arg)
{
	fprintf(stderr, "tool_schedule: ");
	fprintf(stderr, fmt, what, arg);
	fprintf(stderr, "\n%s", usage);
	return 2;
}

static int parse_int(const char *what, const char *s, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < 1 || v > SCHED_MAX_UNITS)
		return bad("%s '%s': expected an integer >= 1", what, s);
	*out = (int)v;
	return 0;
}

static int parse_time(const char *what, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < 0)
		return bad("%s '%s': expected a finite time >= 0", what, s);
	*out = v;
	return 0;
}

/* JSON number, or null for the library's -1 "no closed form". */
static void num_or_null(const char *key, double v)
{
	if (v < 0)
		printf(", \"%s\": null", key);
	else
		printf(", \"%s\": %.9g", key, v);
}

static void int_array(const char *key, const sched_sim *s, size_t field)
{
	printf(", \"%s\": [", key);
	for (int r = 0; r < s->p; r++)
		printf("%s%d", r ? ", " : "", *(const int *)((const char *)&s->rank[r] + field));
	printf("]");
}

int main(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc != 7 && argc != 8) {
		fprintf(stderr, "tool_schedule: expected 6 or 7 arguments, got %d\n%s", argc - 1,
			usage);
		return 2;
	}
	pp_err e = {0};
	sched_kind kind;
	int p, v, m;
	sched_costs c;
	if (schedule_kind_parse(argv[1], &kind, &e)) {
		fprintf(stderr, "tool_schedule: %s\n%s", e.msg, usage);
		return 2;
	}
	if (parse_int("P", argv[2], &p) || parse_int("V", argv[3], &v) ||
	    parse_int("M", argv[4], &m) || parse_time("FWD", argv[5], &c.fwd) ||
	    parse_time("BWD", argv[6], &c.bwd))
		return 2;
	c.bwd_w = c.bwd / 2;
	if (argc == 8 && parse_time("BWD_W", argv[7], &c.bwd_w))
		return 2;
	if (c.bwd_w > c.bwd)
		return bad("%s '%s': expected at most BWD", "BWD_W", argv[7]);
	if (c.fwd + c.bwd <= 0)
		return bad("%s '%s': FWD + BWD must be > 0", "BWD", argv[6]);
	if (schedule_check(kind, p, v, m, -1, &e)) {
		fprintf(stderr, "tool_schedule: %s\n%s", e.msg, usage);
		return 2;
	}

	sched_sim s;
	if (schedule_simulate(kind, p, v, m, &c, &s, &e)) {
		fprintf(stderr, "tool_schedule: %s\n", e.msg);
		return 1;
	}
	double work = (double)m * v * (c.fwd + c.bwd);
	printf("{\"kind\": \"%s\", \"p\": %d, \"v\": %d, \"m\": %d", schedule_kind_name(kind), p, v,
	       m);
	printf(", \"fwd\": %.9g, \"bwd\": %.9g, \"bwd_w\": %.9g", c.fwd, c.bwd, c.bwd_w);
	printf(", \"ideal_time\": %.9g", s.critical_path);
	num_or_null("ideal_time_formula", schedule_ideal_time(kind, p, v, m, &c));
	printf(", \"bubble_ideal\": %.9g", 1 - work / s.critical_path);
	num_or_null("bubble_theory", schedule_bubble_theory(kind, p, v, m, &c));
	printf(", \"makespan_blocking\": %.9g, \"bubble_blocking\": %.9g", s.makespan, s.bubble);
	printf(", \"compute_per_rank\": %.9g", work);
	int_array("peak_act", &s, offsetof(sched_rank_stats, peak_act));
	int_array("peak_wstash", &s, offsetof(sched_rank_stats, peak_wstash));
	int_array("peak_held", &s, offsetof(sched_rank_stats, peak_held));
	printf("}\n");
	schedule_sim_free(&s);
	return 0;
}
