/* Chrome Trace Event output (trace.h). Written through zlib, which writes
 * plain text too ("T" mode), so one writer serves .json and .json.gz. */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/fsutil.h"

#define MAX_LANES 64
#define MAX_DEPTH 32

/* The thread of an event: its stream, and a lane within it where events of
 * the stream overlap without nesting. */
static int tid_of(int stream, int lane) { return 100 * stream + lane; }

/* Lanes for every event: the first lane of its stream where it nests in or
 * follows what is open there. Events are in file, then start order. */
static int *assign_lanes(const prof_run *run)
{
	int *lane = calloc(run->n_ev + 1, sizeof *lane);
	if (!lane)
		return NULL;
	int64_t open[PROF_NSTREAMS][MAX_LANES][MAX_DEPTH];
	int depth[PROF_NSTREAMS][MAX_LANES];
	int file = -1;
	for (size_t i = 0; i < run->n_ev; i++) {
		const prof_mev *m = &run->ev[i];
		if (m->file != file) {
			memset(depth, 0, sizeof depth);
			file = m->file;
		}
		int s = m->src->stream, l = 0;
		for (; l < MAX_LANES - 1; l++) {
			int *d = &depth[s][l];
			while (*d && open[s][l][*d - 1] <= m->start)
				(*d)--;
			if (!*d || (m->end <= open[s][l][*d - 1] && *d < MAX_DEPTH))
				break;
		}
		int *d = &depth[s][l];
		if (*d < MAX_DEPTH)
			open[s][l][(*d)++] = m->end;
		lane[i] = l;
	}
	return lane;
}

typedef struct {
	gzFile gz;
	bool failed;
	bool first; /* no event written yet (commas) */
} out;

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof buf || gzwrite(o->gz, buf, (unsigned)n) != n)
		o->failed = true;
}

/* s as the body of a JSON string (quotes and control characters escaped) */
static const char *esc(const char *s, char *buf, size_t n)
{
	size_t k = 0;
	for (; *s && k + 7 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			k += (size_t)snprintf(buf + k, n - k, "\\%c", c);
		else if (c < 0x20)
			k += (size_t)snprintf(buf + k, n - k, "\\u%04x", c);
		else
			buf[k++] = (char)c;
	}
	buf[k] = 0;
	return buf;
}

/* ns as microseconds with three decimals: exact, and in the JSON number's form */
static const char *us(int64_t ns, char *buf)
{
	snprintf(buf, 32, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
	return buf;
}

static void event_name(const prof_run *run, const prof_mev *m, char *buf, size_t n)
{
	const prof_event *ev = m->src;
	const prof_rank *r = &run->ranks[m->file];
	static const char letter[] = {'F', 'B', 'B', 'W'};
	if (prof_is_compute(ev->op) && r->v > 1)
		snprintf(buf, n, "%c%d s%d", letter[ev->op], ev->mb, ev->vstage);
	else if (prof_is_compute(ev->op))
		snprintf(buf, n, "%c%d", letter[ev->op], ev->mb);
	else if (prof_is_p2p(ev->op))
		snprintf(buf, n, "%s %d", prof_op_name(ev->op), ev->mb);
	else if (ev->op == PROF_STEP)
		snprintf(buf, n, "step %d", ev->step);
	else
		snprintf(buf, n, "%s", ev->name);
}

static void put_meta(out *o, const prof_run *run, const int *lane)
{
	char b1[512], b2[512];
	for (int f = 0; f < run->n_ranks; f++) {
		const prof_rank *r = &run->ranks[f];
		char dev[128];
		snprintf(dev, sizeof dev, "%s", r->device);
		dev[strcspn(dev, " ")] = 0;
		snprintf(b1, sizeof b1, "pp%d dp%d tp%d %s:%s", r->pp_rank, r->dp_rank, r->tp_rank,
			 r->host, dev);
		put(o,
		    "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
		    "\"args\":{\"name\":\"%s\"}}",
		    o->first ? "" : ",\n", r->rank, esc(b1, b2, sizeof b2));
		o->first = false;
		/* pipeline stage first, then the rank */
		put(o,
		    ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
		    "\"args\":{\"sort_index\":%lld}}",
		    r->rank, (long long)r->pp_rank * r->world + r->rank);
		int lanes[PROF_NSTREAMS] = {0};
		for (size_t i = 0; i < run->n_ev; i++)
			if (run->ev[i].file == f && lane[i] + 1 > lanes[run->ev[i].src->stream])
				lanes[run->ev[i].src->stream] = lane[i] + 1;
		for (int s = 0; s < PROF_NSTREAMS; s++)
			for (int l = 0; l < (lanes[s] ? lanes[s] : 1); l++) {
				if (l)
					snprintf(b1, sizeof b1, "%s %d",
						 prof_stream_name((prof_stream)s), l + 1);
				else
					snprintf(b1, sizeof b1, "%s",
						 prof_stream_name((prof_stream)s));
				put(o,
				    ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
				    "\"args\":{\"name\":\"%s\"}}",
				    r->rank, tid_of(s, l), b1);
				put(o,
				    ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,"
				    "\"tid\":%d,\"args\":{\"sort_index\":%d}}",
				    r->rank, tid_of(s, l), tid_of(s, l));
			}
	}
}

static void put_events(out *o, const prof_run *run, const int *lane)
{
	char name[96], t0[32], t1[32];
	for (size_t i = 0; i < run->n_ev; i++) {
		const prof_mev *m = &run->ev[i];
		const prof_event *ev = m->src;
		int pid = run->ranks[m->file].rank, tid = tid_of(ev->stream, lane[i]);
		event_name(run, m, name, sizeof name);
		put(o,
		    ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,"
		    "\"ts\":%s,\"dur\":%s,\"args\":{\"op\":\"%s\",\"step\":%d",
		    name, prof_cat_name((prof_cat)ev->cat), pid, tid, us(m->start, t0),
		    us(m->end - m->start, t1), ev->name, ev->step);
		if (ev->mb >= 0)
			put(o, ",\"microbatch\":%d", ev->mb);
		if (ev->vstage >= 0)
			put(o, ",\"vstage\":%d", ev->vstage);
		if (ev->peer >= 0)
			put(o, ",\"peer_pp_rank\":%d", ev->peer);
		if (ev->bytes)
			put(o, ",\"bytes\":%lld", (long long)ev->bytes);
		put(o, "}}");
	}
	/* a flow from the middle of each send to the middle of its receive */
	for (size_t i = 0; i < run->n_ev; i++) {
		const prof_mev *s = &run->ev[i];
		if (!prof_is_send(s->src->op) || s->partner < 0)
			continue;
		const prof_mev *r = &run->ev[s->partner];
		const char *what = s->src->op == PROF_SEND_ACT ? "activation" : "gradient";
		put(o,
		    ",\n{\"ph\":\"s\",\"id\":%zu,\"name\":\"%s\",\"cat\":\"p2p\",\"pid\":%d,"
		    "\"tid\":%d,\"ts\":%s}",
		    i, what, run->ranks[s->file].rank, tid_of(s->src->stream, lane[i]),
		    us(s->start + (s->end - s->start) / 2, t0));
		put(o,
		    ",\n{\"ph\":\"f\",\"bp\":\"e\",\"id\":%zu,\"name\":\"%s\",\"cat\":\"p2p\","
		    "\"pid\":%d,\"tid\":%d,\"ts\":%s}",
		    i, what, run->ranks[r->file].rank, tid_of(r->src->stream, lane[s->partner]),
		    us(r->start + (r->end - r->start) / 2, t1));
	}
}

static void put_trace(out *o, const prof_run *run, const int *lane)
{
	const prof_rank *a = &run->ranks[0];
	char b[256];
	put(o, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
	o->first = true;
	put_meta(o, run, lane);
	put_events(o, run, lane);
	put(o,
	    "\n],\"otherData\":{\"format\":\"pp-merge-profile\",\"run_id\":\"%s\","
	    "\"preset\":\"%s\",\"schedule\":\"%s\",\"pp\":%d,\"dp\":%d,\"tp\":%d,"
	    "\"virtual_stages\":%d,\"microbatches\":%d,\"steps\":[%ld,%ld],\"ranks\":%d,"
	    "\"clocks_aligned\":%s}}\n",
	    a->run_id, esc(a->preset, b, sizeof b), a->schedule, a->pp, a->dp, a->tp, a->v, a->m,
	    run->step_begin, run->step_end, run->n_ranks, run->aligned ? "true" : "false");
}

int prof_trace_write(const prof_run *run, const char *path, pp_err *e)
{
	bool stdout_ = !strcmp(path, "-");
	size_t len = strlen(path);
	bool gz = len > 3 && !strcmp(path + len - 3, ".gz");
	char tmp[4200] = "";
	int rc = stdout_ ? 0 : fs_tmp_name(path, tmp, sizeof tmp, e);
	if (rc)
		return rc;
	int *lane = assign_lanes(run);
	if (!lane)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	fflush(stdout);
	out o = {stdout_ ? gzdopen(dup(1), gz ? "wb6" : "wbT") : gzopen(tmp, gz ? "wb6" : "wbT"),
		 false, true};
	if (!o.gz) {
		free(lane);
		return pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", stdout_ ? "stdout" : tmp,
				 strerror(errno));
	}
	put_trace(&o, run, lane);
	free(lane);
	if (gzclose(o.gz) != Z_OK || o.failed)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write %s (disk full?)",
			       stdout_ ? "stdout" : tmp);
	if (!rc && !stdout_)
		rc = fs_fsync_path(tmp, e);
	if (!rc && !stdout_)
		rc = fs_rename_durable(tmp, path, e);
	if (rc && !stdout_)
		remove(tmp);
	return rc;
}
