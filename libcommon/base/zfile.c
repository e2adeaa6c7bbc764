/* Plain, gzip and zstd files as one byte stream (zfile.h). */
#include "zfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define ZFILE_BLOCK ((size_t)1 << 18)

enum { Z_PLAIN, Z_GZIP, Z_ZSTD };
static const char *const kind_name[] = {"plain", "gzip", "zstd"};

struct zfile {
	char *path;
	int fd;
	int kind;
	unsigned char *in; /* (ZFILE_BLOCK) read, not yet consumed: [beg, end) */
	size_t beg, end;
	bool eof;
	bool not_named; /* named .gz or .zst, but neither: the first read says so */
	uint64_t raw;
	z_stream zs;
	bool zs_ready;
	ZSTD_DCtx *zd;
	bool in_frame; /* zstd: the last call that moved data left a frame unfinished */
};

/* more input behind what is unread; at the end of the file, eof */
static int refill(zfile *z, pp_err *e)
{
	if (z->beg > 0) {
		memmove(z->in, z->in + z->beg, z->end - z->beg);
		z->end -= z->beg;
		z->beg = 0;
	}
	while (!z->eof && z->end < ZFILE_BLOCK) {
		ssize_t got = read(z->fd, z->in + z->end, ZFILE_BLOCK - z->end);
		if (got < 0 && errno == EINTR) /* a signal the caller handles: let it act */
			return pp_errorf(e, PP_ERUNTIME, "reading %s: interrupted", z->path);
		if (got < 0)
			return pp_errorf(e, PP_ERUNTIME, "cannot read %s: %s", z->path,
					 strerror(errno));
		z->eof = got == 0;
		z->end += (size_t)got;
		z->raw += (uint64_t)got;
		if (got > 0)
			break;
	}
	return 0;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

void zfile_close(zfile *z)
{
	if (!z)
		return;
	if (z->fd > 0)
		close(z->fd);
	if (z->zs_ready)
		inflateEnd(&z->zs);
	ZSTD_freeDCtx(z->zd);
	free(z->in);
	free(z->path);
	free(z);
}

int zfile_open(zfile **out, const char *path, pp_err *e)
{
	*out = NULL;
	zfile *z = calloc(1, sizeof *z);
	if (!z || !(z->path = strdup(path)) || !(z->in = malloc(ZFILE_BLOCK))) {
		zfile_close(z);
		return pp_errorf(e, PP_ERUNTIME, "out of memory opening %s", path);
	}
	bool is_stdin = !strcmp(path, "-");
	z->fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	if (z->fd < 0) {
		int rc = pp_errorf(e, PP_EUSAGE, "cannot open %s: %s", path, strerror(errno));
		zfile_close(z);
		return rc;
	}
	int rc = 0;
	while (!rc && !z->eof && z->end < 4)
		rc = refill(z, e);
	const unsigned char *p = z->in;
	if (!rc && z->end >= 2 && p[0] == 0x1f && p[1] == 0x8b) {
		z->kind = Z_GZIP;
		if (inflateInit2(&z->zs, 15 + 16) != Z_OK) /* a gzip wrapper */
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot start zlib", path);
		z->zs_ready = !rc;
	} else if (!rc && z->end >= 4 && !memcmp(p, "\x28\xb5\x2f\xfd", 4)) {
		z->kind = Z_ZSTD;
		if (!(z->zd = ZSTD_createDCtx()))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot start zstd", path);
	} else if (!rc && (has_suffix(path, ".gz") || has_suffix(path, ".zst"))) {
		z->not_named = true;
	}
	if (rc) {
		zfile_close(z);
		return rc;
	}
	*out = z;
	return 0;
}

static int corrupt(zfile *z, const char *why, pp_err *e)
{
	return pp_errorf(e, PP_EUSAGE, "%s: corrupt %s data (%s)", z->path, kind_name[z->kind],
			 why);
}

static int truncated(zfile *z, pp_err *e)
{
	return pp_errorf(e, PP_EUSAGE, "%s: truncated %s data (the file ends inside a %s)", z->path,
			 kind_name[z->kind], z->kind == Z_GZIP ? "member" : "frame");
}

static int read_gzip(zfile *z, unsigned char *buf, size_t n, size_t *got, pp_err *e)
{
	z_stream *s = &z->zs;
	while (*got < n) {
		int rc = z->beg == z->end && !z->eof ? refill(z, e) : 0;
		if (rc)
			return rc;
		if (z->beg == z->end && z->eof) {
			/* the end of the file: where a member ended, or inside one */
			if (s->total_in)
				return truncated(z, e);
			break;
		}
		s->next_in = z->in + z->beg;
		s->avail_in = (uInt)(z->end - z->beg);
		s->next_out = buf + *got;
		s->avail_out = (uInt)(n - *got);
		int ret = inflate(s, Z_NO_FLUSH);
		z->beg = z->end - s->avail_in;
		*got = n - s->avail_out;
		if (ret == Z_STREAM_END) {
			inflateReset(s); /* another member may follow; total_in is 0 again */
			continue;
		}
		if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT)
			return corrupt(z, s->msg ? s->msg : "invalid data", e);
		if (ret == Z_MEM_ERROR)
			return pp_errorf(e, PP_ERUNTIME, "%s: out of memory decompressing",
					 z->path);
	}
	return 0;
}

static int read_zstd(zfile *z, unsigned char *buf, size_t n, size_t *got, pp_err *e)
{
	while (*got < n) {
		int rc = z->beg == z->end && !z->eof ? refill(z, e) : 0;
		if (rc)
			return rc;
		ZSTD_inBuffer in = {z->in + z->beg, z->end - z->beg, 0};
		ZSTD_outBuffer out = {buf + *got, n - *got, 0};
		size_t r = ZSTD_decompressStream(z->zd, &out, &in);
		if (ZSTD_isError(r))
			return corrupt(z, ZSTD_getErrorName(r), e);
		z->beg += in.pos;
		*got += out.pos;
		if (in.pos || out.pos)
			z->in_frame = r != 0; /* 0: a frame ends here */
		else if (z->beg == z->end && z->eof)
			return z->in_frame ? truncated(z, e) : 0;
	}
	return 0;
}

int zfile_read(zfile *z, void *buf, size_t n, size_t *got, pp_err *e)
{
	*got = 0;
	if (z->not_named)
		return pp_errorf(e, PP_EUSAGE, "%s: not %s data (%s)", z->path,
				 has_suffix(z->path, ".gz") ? "gzip" : "zstd",
				 z->end ? "its first bytes are not the format's magic number"
					: "the file is empty");
	if (z->kind == Z_GZIP)
		return read_gzip(z, buf, n, got, e);
	if (z->kind == Z_ZSTD)
		return read_zstd(z, buf, n, got, e);
	while (*got < n) {
		if (z->beg == z->end) {
			if (z->eof)
				break;
			int rc = refill(z, e);
			if (rc)
				return rc;
			continue;
		}
		size_t k = z->end - z->beg < n - *got ? z->end - z->beg : n - *got;
		memcpy((unsigned char *)buf + *got, z->in + z->beg, k);
		z->beg += k;
		*got += k;
	}
	return 0;
}

const char *zfile_kind(const zfile *z) { return kind_name[z->kind]; }

uint64_t zfile_bytes_read(const zfile *z) { return z->raw; }
