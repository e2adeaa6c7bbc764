/* The TensorBoard event writer (libcommon/train/tensorboard.c) byte by byte:
 * CRC-32C against its published check value, the TFRecord framing with its
 * masked CRCs, and the hand-encoded Event protos. tests/e2e/test_tensorboard.sh
 * reads the files with the tensorboard package itself. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/base/fsutil.h"
#include "../../libcommon/train/tensorboard.h"
#include "../tools/harness.h"

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* the records of an event file: n of them at most, their data in data[] */
static int records(const unsigned char *b, size_t size, const unsigned char **data, size_t *len,
		   int n, int *crc_ok)
{
	size_t at = 0;
	int k = 0;
	*crc_ok = 1;
	while (at + 12 <= size && k < n) {
		uint64_t l = le(b + at, 8);
		*crc_ok &= le(b + at + 8, 4) == tb_masked_crc(b + at, 8);
		if (at + 16 + l > size)
			return -1;
		data[k] = b + at + 12;
		len[k] = (size_t)l;
		*crc_ok &= le(b + at + 12 + l, 4) == tb_masked_crc(b + at + 12, (size_t)l);
		at += 16 + l;
		k++;
	}
	return at == size ? k : -1;
}

int main(void)
{
	CHECK(tb_crc32c("123456789", 9) == 0xE3069283u, "events/crc32c_check_value", "got %08x",
	      tb_crc32c("123456789", 9));
	uint32_t c = tb_crc32c("abc", 3);
	CHECK(tb_masked_crc("abc", 3) == ((c >> 15 | c << 17) + 0xa282ead8u), "events/masked_crc",
	      "mask of rotate 15 + 0xa282ead8");

	char dir[] = "/tmp/pp-events.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char sub[64];
	snprintf(sub, sizeof sub, "%s/tb", dir);
	tb_writer *w;
	pp_err e = {0};
	const char *tags[] = {"loss", "lr"};
	const double vals[] = {2.5, 1e-3};
	int rc = tb_open(&w, sub, &e);
	if (!rc)
		rc = tb_scalars(w, 300, tags, vals, 2, &e);
	tb_close(w);
	CHECK(!rc, "events/write", "%s", e.msg);
	char cmd[160], path[256] = "";
	snprintf(cmd, sizeof cmd, "ls %s/events.out.tfevents.* 2>/dev/null", sub);
	FILE *ls = popen(cmd, "r");
	if (ls && fgets(path, sizeof path, ls))
		path[strcspn(path, "\n")] = 0;
	if (ls)
		pclose(ls);
	char *buf = NULL;
	size_t size = 0;
	rc = path[0] ? fs_read_file(path, &buf, &size, &e) : 1;
	CHECK(!rc, "events/file_named", "no events.out.tfevents.* in %s", sub);
	const unsigned char *data[4];
	size_t len[4];
	int crc_ok = 0,
	    n = rc ? -1 : records((const unsigned char *)buf, size, data, len, 4, &crc_ok);
	CHECK(n == 2 && crc_ok, "events/framing", "%d records, CRCs %s", n,
	      crc_ok ? "right" : "wrong");
	if (n == 2) {
		/* {wall_time (fixed64, field 1), file_version (field 3) "brain.Event:2"} */
		CHECK(len[0] == 9 + 2 + 13 && data[0][0] == 0x09 && data[0][9] == 0x1a &&
			      data[0][10] == 13 && !memcmp(data[0] + 11, "brain.Event:2", 13),
		      "events/first_record_file_version", "unexpected bytes");
		/* wall_time, step 300 (varint ac 02), summary (field 5) of two values:
		 * tag (field 1) and simple_value (field 2, fixed32) */
		const unsigned char *d = data[1];
		float x;
		uint32_t bits = (uint32_t)le(d + 9 + 3 + 2 + 2 + 2 + 4 + 1, 4);
		memcpy(&x, &bits, sizeof x);
		int ok = d[0] == 0x09 && d[9] == 0x10 && d[10] == 0xac && d[11] == 0x02 &&
			 d[12] == 0x2a && d[14] == 0x0a && d[16] == 0x0a && d[17] == 4 &&
			 !memcmp(d + 18, "loss", 4) && d[22] == 0x15 && x == 2.5f;
		CHECK(ok, "events/scalar_record",
		      "step, tag or value not where the Event proto puts them");
	}
	free(buf);
	char rm[96];
	snprintf(rm, sizeof rm, "rm -rf %s", dir);
	if (system(rm))
		return 1;

	TH_EXIT();
}
