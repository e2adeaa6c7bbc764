#include "tensorboard.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "../base/fsutil.h"

struct tb_writer {
	FILE *f;
	char path[4200];
};

uint32_t tb_crc32c(const void *data, size_t n)
{
	static uint32_t table[256];
	static bool ready;
	if (!ready) { /* reflected polynomial 0x82f63b78 */
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
			table[i] = c;
		}
		ready = true;
	}
	const unsigned char *p = data;
	uint32_t crc = 0xffffffffu;
	for (size_t i = 0; i < n; i++)
		crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return crc ^ 0xffffffffu;
}

uint32_t tb_masked_crc(const void *data, size_t n)
{
	uint32_t crc = tb_crc32c(data, n);
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protocol buffer encoding: a growing byte buffer ---- */

typedef struct {
	unsigned char *p;
	size_t n, cap;
	bool oom;
} buf;

static void put(buf *b, const void *src, size_t n)
{
	if (b->oom || !n)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		unsigned char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void put_varint(buf *b, uint64_t v)
{
	unsigned char x[10];
	int n = 0;
	do {
		x[n] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v)
			x[n] |= 0x80;
		n++;
	} while (v);
	put(b, x, (size_t)n);
}

/* field number f with wire type w */
static void put_key(buf *b, int f, int w) { put_varint(b, (uint64_t)(f << 3 | w)); }

static void put_le(buf *b, uint64_t v, int bytes)
{
	unsigned char x[8];
	for (int i = 0; i < bytes; i++)
		x[i] = (unsigned char)(v >> (8 * i));
	put(b, x, (size_t)bytes);
}

static void put_bytes(buf *b, int f, const void *p, size_t n)
{
	put_key(b, f, 2);
	put_varint(b, n);
	put(b, p, n);
}

static double wall_time(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Event: wall_time = 1 (double), step = 2 (int64), file_version = 3
 * (string), summary = 5 (Summary: value = 1 (Value: tag = 1, simple_value
 * = 2 (float))) */
static void event_head(buf *b, long step)
{
	uint64_t bits;
	double t = wall_time();
	memcpy(&bits, &t, sizeof bits);
	put_key(b, 1, 1);
	put_le(b, bits, 8);
	if (step >= 0) {
		put_key(b, 2, 0);
		put_varint(b, (uint64_t)step);
	}
}

static int write_record(tb_writer *w, const buf *data, pp_err *e)
{
	if (data->oom)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", w->path);
	unsigned char head[12];
	uint64_t len = data->n;
	for (int i = 0; i < 8; i++)
		head[i] = (unsigned char)(len >> (8 * i));
	uint32_t c = tb_masked_crc(head, 8), d = tb_masked_crc(data->p, data->n);
	for (int i = 0; i < 4; i++)
		head[8 + i] = (unsigned char)(c >> (8 * i));
	unsigned char tail[4];
	for (int i = 0; i < 4; i++)
		tail[i] = (unsigned char)(d >> (8 * i));
	if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data->p, 1, data->n, w->f) != data->n ||
	    fwrite(tail, 1, 4, w->f) != 4 || fflush(w->f))
		return pp_errorf(e, PP_ERUNTIME, "%s: write failed: %s", w->path, strerror(errno));
	return 0;
}

int tb_open(tb_writer **out, const char *dir, pp_err *e)
{
	*out = NULL;
	int rc = fs_mkdir_p(dir, e);
	if (rc)
		return rc;
	tb_writer *w = calloc(1, sizeof *w);
	if (!w)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	char host[64] = "localhost";
	gethostname(host, sizeof host - 1);
	snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%d", dir,
		 (long)wall_time(), host, (int)getpid());
	if (!(w->f = fopen(w->path, "wb"))) {
		rc = pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", w->path, strerror(errno));
		free(w);
		return rc;
	}
	buf b = {0};
	event_head(&b, -1);
	put_bytes(&b, 3, "brain.Event:2", 13);
	rc = write_record(w, &b, e);
	free(b.p);
	if (rc) {
		tb_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

int tb_scalars(tb_writer *w, long step, const char *const *tags, const double *values, int n,
	       pp_err *e)
{
	if (!w)
		return 0;
	buf sum = {0}, val = {0}, ev = {0};
	for (int i = 0; i < n; i++) {
		float x = (float)values[i];
		uint32_t bits;
		memcpy(&bits, &x, sizeof bits);
		val.n = 0;
		put_bytes(&val, 1, tags[i], strlen(tags[i]));
		put_key(&val, 2, 5);
		put_le(&val, bits, 4);
		put_bytes(&sum, 1, val.p, val.n);
		sum.oom |= val.oom;
	}
	event_head(&ev, step);
	put_bytes(&ev, 5, sum.p, sum.n);
	ev.oom |= sum.oom;
	int rc = write_record(w, &ev, e);
	free(sum.p);
	free(val.p);
	free(ev.p);
	return rc;
}

void tb_close(tb_writer *w)
{
	if (!w)
		return;
	if (w->f)
		fclose(w->f);
	free(w);
}
