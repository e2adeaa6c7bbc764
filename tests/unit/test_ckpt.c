/* Checkpoints: sha256 vectors, round trips, the on-disk layout (read back
 * with the HDF5 API and with h5py when present), keep, find_latest,
 * multi-shard reassembly, every load error, stale temporaries, and kill -9
 * in the middle of saving. Works in a mkdtemp directory under /tmp. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../libcommon/base/sha256.h"
#include "../../libcommon/ckpt/ckpt.h"
#include "../tools/harness.h"

static char root[256];

/* root/rel; the strings live until at_free() */
static char *paths[512];
static int n_paths;

static const char *at(const char *rel)
{
	char *b = malloc(strlen(root) + strlen(rel) + 2);
	sprintf(b, "%s/%s", root, rel);
	if (n_paths < 512)
		paths[n_paths++] = b;
	return b;
}

static void at_free(void)
{
	while (n_paths)
		free(paths[--n_paths]);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static long long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = calloc((size_t)n + 1, 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	fclose(f);
	return s;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	fputs(text, f);
	fclose(f);
}

static int count_entries(const char *dir, const char *prefix)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s' ", dir, prefix);
	FILE *p = popen(cmd, "r");
	int n = -1;
	if (p && fscanf(p, "%d", &n) != 1)
		n = -1;
	if (p)
		pclose(p);
	return n;
}

/* ------------------------------------------------------------ fixtures */

/* Values exactly representable in float32, so round trips are bitwise in
 * the PP_F64 build too. */
static pp_real val(long step, int t, int64_t i)
{
	return (pp_real)(float)((double)((i * 37 + t * 11) % 101 - 50) / 8.0 + (double)step * 0.25);
}

enum { NT = 4 };
typedef struct {
	ckpt_state s;
	ckpt_tensor t[NT];
	pp_real *buf[NT][3];
} fixture;

static const char *names[NT] = {"model.embed_tokens.weight",
				"model.layers.0.self_attn.q_proj.weight",
				"model.layers.0.mlp.down_proj.weight", "model.norm.weight"};
static const int64_t shapes[NT][2] = {{8, 4}, {4, 4}, {4, 6}, {4, 0}};

/* fill: values of `step`, else zeros (a load target) */
static void fixture_init(fixture *f, long step, bool fill)
{
	memset(f, 0, sizeof *f);
	for (int t = 0; t < NT; t++) {
		ckpt_tensor *x = &f->t[t];
		x->name = names[t];
		x->ndim = shapes[t][1] ? 2 : 1;
		x->shape[0] = shapes[t][0];
		x->shape[1] = shapes[t][1];
		int64_t n = x->shape[0] * (x->ndim == 2 ? x->shape[1] : 1);
		/* model.norm.weight has no optimizer state */
		for (int k = 0; k < (t == 3 ? 1 : 3); k++) {
			f->buf[t][k] = calloc((size_t)n, sizeof(pp_real));
			for (int64_t i = 0; fill && i < n; i++)
				f->buf[t][k][i] = val(step, t + 10 * k, i);
		}
		x->param = f->buf[t][0];
		x->m = f->buf[t][1];
		x->v = f->buf[t][2];
	}
	f->s.step = fill ? step : -1;
	for (int i = 0; i < 4; i++)
		f->s.rng[i] = fill ? 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + (uint64_t)step : 0;
	f->s.n_data_state = fill ? 3 : 0;
	for (int i = 0; fill && i < 3; i++)
		f->s.data_state[i] = 1000 + (uint64_t)i + (uint64_t)step;
	f->s.config_json =
		"{\"model\": {\"preset\": \"tiny\"}, \"lr\": 0.0003, \"note\": \"h\\u00e9llo\"}";
	f->s.pp_size = f->s.tp_size = f->s.dp_size = 1;
	f->s.n_tensors = NT;
	f->s.tensors = f->t;
}

static void fixture_free(fixture *f)
{
	for (int t = 0; t < NT; t++)
		for (int k = 0; k < 3; k++)
			free(f->buf[t][k]);
}

static int64_t numel(const ckpt_tensor *t)
{
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

static bool same_tensors(const fixture *a, const fixture *b)
{
	for (int t = 0; t < NT; t++)
		for (int k = 0; k < 3; k++)
			if (a->buf[t][k] && memcmp(a->buf[t][k], b->buf[t][k],
						   (size_t)numel(&a->t[t]) * sizeof(pp_real)))
				return false;
	return true;
}

static int save_step(const char *run, long step, int keep, pp_err *e)
{
	fixture f;
	fixture_init(&f, step, true);
	int rc = ckpt_save(run, &f.s, keep, e);
	fixture_free(&f);
	return rc;
}

/* ------------------------------------------------------------- sha256 */

static void test_sha256(void)
{
	static const char *v_empty =
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
	static const char *v_abc =
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	static const char *v_2blk =
		"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
	static const char *v_mil =
		"cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
	pp_err e = {0};
	sha256_ctx c;
	uint8_t d[SHA256_BYTES];
	char hex[SHA256_HEX];

	CHECK(sha256_init(&c, &e) == 0, "ckpt/sha256_init", "%s", e.msg);
	sha256_final(&c, d);
	sha256_hex(d, hex);
	CHECK(strcmp(hex, v_empty) == 0, "ckpt/sha256_empty", "got %s", hex);

	sha256_init(&c, &e); /* a failure shows as a wrong digest */
	sha256_update(&c, "a", 1);
	sha256_update(&c, "bc", 2);
	sha256_final(&c, d);
	sha256_hex(d, hex);
	CHECK(strcmp(hex, v_abc) == 0, "ckpt/sha256_abc", "got %s", hex);

	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	sha256_init(&c, &e); /* a failure shows as a wrong digest */
	sha256_update(&c, two, strlen(two));
	sha256_final(&c, d);
	sha256_hex(d, hex);
	CHECK(strcmp(hex, v_2blk) == 0, "ckpt/sha256_448bits", "got %s", hex);

	/* a million 'a' in uneven pieces that straddle block boundaries */
	char a[997];
	memset(a, 'a', sizeof a);
	sha256_init(&c, &e); /* a failure shows as a wrong digest */
	size_t left = 1000000;
	for (size_t k = 1; left; k = (k * 7 + 13) % 997 + 1) {
		size_t n = k < left ? k : left;
		sha256_update(&c, a, n);
		left -= n;
	}
	sha256_final(&c, d);
	sha256_hex(d, hex);
	CHECK(strcmp(hex, v_mil) == 0, "ckpt/sha256_million_a", "got %s", hex);

	spit(at("abc.txt"), "abc");
	int64_t bytes = 0;
	int rc = sha256_file(at("abc.txt"), hex, &bytes, &e);
	CHECK(rc == 0 && bytes == 3 && strcmp(hex, v_abc) == 0, "ckpt/sha256_file",
	      "rc %d bytes %lld %s %s", rc, (long long)bytes, hex, e.msg);
	rc = sha256_file(at("nope.txt"), hex, &bytes, &e);
	CHECK(rc != 0 && strstr(e.msg, "nope.txt"), "ckpt/sha256_file_missing", "rc %d: %s", rc,
	      e.msg);
}

/* --------------------------------------------------------- round trip */

static void test_round_trip(void)
{
	const char *run = at("run1");
	pp_err e = {0};
	int rc = save_step(run, 7, 0, &e);
	CHECK(rc == 0, "ckpt/save", "%s", e.msg);

	char dir[1024];
	long step = 0;
	rc = ckpt_find_latest(run, dir, sizeof dir, &step, &e);
	CHECK(rc == 0 && step == 7 && strcmp(dir, at("run1/checkpoints/step_00000007")) == 0,
	      "ckpt/find_latest", "rc %d step %ld dir %s: %s", rc, step, dir, e.msg);
	CHECK(exists(at("run1/checkpoints/step_00000007/manifest.json")) &&
		      exists(at("run1/checkpoints/step_00000007/shard-pp000-tp000.h5")) &&
		      count_entries(at("run1/checkpoints/step_00000007"), "[^.]") == 2,
	      "ckpt/layout", "expected manifest.json and shard-pp000-tp000.h5 only");
	CHECK(count_entries(at("run1/checkpoints"), "\\.") == 2, "ckpt/no_leftovers",
	      "temporary dirs left behind");

	fixture want, got;
	fixture_init(&want, 7, true);
	fixture_init(&got, 0, false);
	rc = ckpt_load(dir, &got.s, &e);
	CHECK(rc == 0, "ckpt/load", "%s", e.msg);
	CHECK(same_tensors(&want, &got), "ckpt/load_tensors_bitwise", "param, m or v differ");
	CHECK(got.s.step == 7 && memcmp(got.s.rng, want.s.rng, sizeof want.s.rng) == 0,
	      "ckpt/load_step_rng", "step %ld", got.s.step);
	CHECK(got.s.n_data_state == 3 &&
		      memcmp(got.s.data_state, want.s.data_state, 3 * sizeof(uint64_t)) == 0,
	      "ckpt/load_data_state", "n %d", got.s.n_data_state);
	char *cfg = NULL;
	rc = ckpt_read_config(dir, &cfg, &e);
	CHECK(rc == 0 && cfg && strcmp(cfg, want.s.config_json) == 0, "ckpt/config_text",
	      "rc %d: %s / %s", rc, cfg ? cfg : "(null)", e.msg);
	free(cfg);
	rc = ckpt_verify(dir, &e);
	CHECK(rc == 0, "ckpt/verify", "%s", e.msg);

	/* load with a sliced description of an unsliced tensor */
	fixture part;
	fixture_init(&part, 0, false);
	ckpt_tensor *q = &part.t[2]; /* down_proj (4, 6): columns 2..4 */
	q->global_shape[0] = 4;
	q->global_shape[1] = 6;
	q->offset[1] = 2;
	q->shape[1] = 3;
	rc = ckpt_load(dir, &part.s, &e);
	bool ok = rc == 0;
	for (int r = 0; ok && r < 4; r++)
		for (int c = 0; c < 3; c++)
			ok = ok && q->param[r * 3 + c] == want.t[2].param[r * 6 + c + 2] &&
			     q->v[r * 3 + c] == want.t[2].v[r * 6 + c + 2];
	CHECK(ok, "ckpt/load_slice_of_whole", "rc %d: %s", rc, e.msg);
	fixture_free(&part);

	/* manifest content */
	json_error_t jerr;
	json_t *m = json_load_file(at("run1/checkpoints/step_00000007/manifest.json"), 0, &jerr);
	json_t *t = m ? json_object_get(json_object_get(m, "tensors"),
					"model.layers.0.self_attn.q_proj.weight")
		      : NULL;
	json_t *f0 = m ? json_array_get(json_object_get(m, "files"), 0) : NULL;
	const char *sha = f0 ? json_string_value(json_object_get(f0, "sha256")) : NULL;
	ok = m && t && f0 && sha &&
	     strcmp(json_string_value(json_object_get(m, "format")), "pp-checkpoint") == 0 &&
	     json_integer_value(json_object_get(m, "version")) == 1 &&
	     json_integer_value(json_object_get(m, "step")) == 7 &&
	     json_integer_value(json_object_get(json_object_get(m, "mesh"), "tp")) == 1 &&
	     strcmp(json_string_value(json_object_get(f0, "name")), "shard-pp000-tp000.h5") == 0 &&
	     json_integer_value(json_object_get(f0, "bytes")) ==
		     file_size(at("run1/checkpoints/step_00000007/shard-pp000-tp000.h5")) &&
	     strlen(sha) == 64 &&
	     json_integer_value(json_array_get(json_object_get(t, "global_shape"), 1)) == 4 &&
	     json_array_size(json_object_get(t, "shards")) == 1;
	CHECK(ok, "ckpt/manifest_json", "manifest content unexpected");
	char hex[SHA256_HEX];
	sha256_file(at("run1/checkpoints/step_00000007/shard-pp000-tp000.h5"), hex, NULL, NULL);
	CHECK(sha && strcmp(sha, hex) == 0, "ckpt/manifest_sha256", "%s vs %s", sha ? sha : "-",
	      hex);
	json_decref(m);

	ckpt_manifest man;
	rc = ckpt_read_manifest(dir, &man, &e);
	const ckpt_tensor_info *ti = rc ? NULL : ckpt_manifest_tensor(&man, "model.norm.weight");
	CHECK(rc == 0 && man.n_tensors == NT && man.step == 7 && ti && ti->ndim == 1 && !ti->adam &&
		      ckpt_manifest_tensor(&man, names[0])->adam,
	      "ckpt/read_manifest", "rc %d: %s", rc, e.msg);
	if (!rc) {
		pp_real buf[32];
		rc = ckpt_read_tensor(dir, &man, names[0], "adam_v", buf, &e);
		CHECK(rc == 0 && memcmp(buf, want.t[0].v, sizeof buf) == 0, "ckpt/read_tensor",
		      "%s", e.msg);
		ckpt_manifest_free(&man);
	}
	fixture_free(&want);
	fixture_free(&got);
}

/* ------------------------------------------- the file, read by others */

static void test_hdf5_layout(void)
{
	const char *path = at("run1/checkpoints/step_00000007/shard-pp000-tp000.h5");
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	CHECK(f >= 0, "ckpt/h5_open", "cannot open %s", path);
	if (f < 0)
		return;
	bool names_ok = true;
	for (int t = 0; t < NT; t++) {
		char p[256];
		snprintf(p, sizeof p, "params/%s", names[t]);
		names_ok = names_ok && H5Lexists(f, p, H5P_DEFAULT) > 0;
	}
	names_ok = names_ok && H5Lexists(f, "adam_m/model.embed_tokens.weight", H5P_DEFAULT) > 0 &&
		   H5Lexists(f, "adam_m/model.norm.weight", H5P_DEFAULT) == 0;
	CHECK(names_ok, "ckpt/h5_hf_names", "datasets are not named by their Hugging Face names");

	hid_t a = H5Aopen(f, "format", H5P_DEFAULT), at_ = H5Aget_type(a);
	hid_t mt = H5Tcopy(H5T_C_S1);
	H5Tset_size(mt, H5T_VARIABLE);
	H5Tset_cset(mt, H5T_CSET_UTF8);
	char *fmt = NULL;
	herr_t r = H5Aread(a, mt, &fmt);
	CHECK(r >= 0 && fmt && strcmp(fmt, "pp-checkpoint") == 0 &&
		      H5Tget_cset(at_) == H5T_CSET_UTF8,
	      "ckpt/h5_format_attr_utf8", "format attribute %s", fmt ? fmt : "(unreadable)");
	if (fmt)
		H5free_memory(fmt);
	H5Tclose(mt);
	H5Tclose(at_);
	H5Aclose(a);

	hid_t ds = H5Dopen2(f, "params/model.embed_tokens.weight", H5P_DEFAULT),
	      ty = H5Dget_type(ds);
	float x[32];
	int64_t gs[2] = {0}, off[2] = {9, 9};
	hid_t ga = H5Aopen(ds, "global_shape", H5P_DEFAULT),
	      oa = H5Aopen(ds, "offset", H5P_DEFAULT);
	H5Aread(ga, H5T_NATIVE_INT64, gs);
	H5Aread(oa, H5T_NATIVE_INT64, off);
	H5Aclose(ga);
	H5Aclose(oa);
	bool ok = H5Tequal(ty, H5T_IEEE_F32LE) > 0 &&
		  H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0 &&
		  x[6] == (float)val(7, 0, 6) && gs[0] == 8 && gs[1] == 4 && off[0] == 0 &&
		  off[1] == 0;
	CHECK(ok, "ckpt/h5_dataset", "dtype, value or global_shape/offset attributes wrong");
	H5Tclose(ty);
	H5Dclose(ds);
	uint64_t rng[4] = {0};
	ds = H5Dopen2(f, "state/rng", H5P_DEFAULT);
	H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rng);
	H5Dclose(ds);
	CHECK(rng[1] == 0x9e3779b97f4a7c15ull * 2 + 7, "ckpt/h5_state_rng", "rng[1] %llu",
	      (unsigned long long)rng[1]);
	H5Fclose(f);

	if (sh("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0) {
		th_skip("ckpt/h5py_reads", "h5py not available to /usr/bin/python3");
		return;
	}
	char cmd[2048], out[512] = "";
	snprintf(
		cmd, sizeof cmd,
		"/usr/bin/python3 -c 'import h5py, json\n"
		"f = h5py.File(\"%s\", \"r\")\n"
		"w = f[\"params/model.embed_tokens.weight\"]\n"
		"c = json.loads(f[\"config\"].asstr()[()])\n"
		"print(f.attrs[\"format\"], int(f.attrs[\"version\"]), int(f.attrs[\"step\"]), w.dtype, w.shape, "
		"repr(float(w[1, 2])), list(w.attrs[\"global_shape\"]), c[\"note\"] == \"h\\u00e9llo\")' 2>&1",
		path);
	FILE *p = popen(cmd, "r");
	size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
	out[n] = '\0';
	if (p)
		pclose(p);
	/* w[1, 2] is element 6 */
	char num[64];
	snprintf(num, sizeof num, "%.17g", (double)(float)val(7, 0, 6));
	const char *want = "pp-checkpoint 1 7 float32 (8, 4) ";
	bool py_ok = strncmp(out, want, strlen(want)) == 0 && strstr(out, "[8, 4] True") != NULL;
	double got = py_ok ? strtod(out + strlen(want), NULL) : 0;
	CHECK(py_ok && got == (double)(float)val(7, 0, 6), "ckpt/h5py_reads",
	      "python printed: %s (want value %s)", out, num);
}

/* --------------------------------------------------------------- keep */

static void test_keep(void)
{
	const char *run = at("run2");
	pp_err e = {0};
	int rc = 0;
	for (long s = 1; s <= 4 && !rc; s++)
		rc = save_step(run, s, 2, &e);
	CHECK(rc == 0 && !exists(at("run2/checkpoints/step_00000001")) &&
		      !exists(at("run2/checkpoints/step_00000002")) &&
		      exists(at("run2/checkpoints/step_00000003")) &&
		      exists(at("run2/checkpoints/step_00000004")) &&
		      count_entries(at("run2/checkpoints"), "\\.") == 2,
	      "ckpt/keep_2", "rc %d: %s", rc, e.msg);
	/* an older step saved now (a rerun from an earlier checkpoint) is kept
	 * beside the newest two */
	rc = save_step(run, 2, 2, &e);
	CHECK(rc == 0 && exists(at("run2/checkpoints/step_00000002")) &&
		      exists(at("run2/checkpoints/step_00000004")) &&
		      exists(at("run2/checkpoints/step_00000003")),
	      "ckpt/keep_just_saved", "rc %d: %s", rc, e.msg);
	rc = save_step(run, 5, 1, &e);
	CHECK(rc == 0 && count_entries(at("run2/checkpoints"), "step_") == 1 &&
		      exists(at("run2/checkpoints/step_00000005")),
	      "ckpt/keep_1", "rc %d: %s", rc, e.msg);
}

/* --------------------------------------------------------- find_latest */

static void test_find_latest(void)
{
	const char *run = at("run3");
	pp_err e = {0};
	char dir[1024];
	long step = 5;
	int rc = ckpt_find_latest(at("no-such-run"), dir, sizeof dir, &step, &e);
	CHECK(rc == 0 && step == -1, "ckpt/find_latest_none", "rc %d step %ld: %s", rc, step,
	      e.msg);
	for (long s = 5; s <= 7; s++)
		save_step(run, s, 0, &e);
	const char *c = at("run3/checkpoints");
	sh("cp -a '%s/step_00000007' '%s/step_00000009' && rm '%s/step_00000009/manifest.json'", c,
	   c, c);
	sh("cp -a '%s/step_00000007' '%s/step_00000008' && truncate -s -1000 '%s/step_00000008/shard-pp000-tp000.h5'",
	   c, c, c);
	sh("mkdir '%s/step_junk' '%s/step_00000010' '%s/.tmp-step_00000011-1'", c, c, c);
	rc = ckpt_find_latest(run, dir, sizeof dir, &step, &e);
	CHECK(rc == 0 && step == 7 && strstr(dir, "step_00000007"),
	      "ckpt/find_latest_skips_incomplete", "rc %d step %ld %s: %s", rc, step, dir, e.msg);
	char small[8];
	rc = ckpt_find_latest(run, small, sizeof small, &step, &e);
	CHECK(rc != 0, "ckpt/find_latest_small_buffer", "no error for an 8-byte buffer");
}

/* ------------------------------------------------------- load failures */

/* a private copy of run1's checkpoint to break */
static const char *copy_ckpt(const char *name)
{
	const char *dst = at(name);
	sh("rm -rf '%s' && cp -a '%s' '%s'", dst, at("run1/checkpoints/step_00000007"), dst);
	return dst;
}

static int load_into(const char *dir, pp_err *e)
{
	fixture f;
	fixture_init(&f, 0, false);
	int rc = ckpt_load(dir, &f.s, e);
	fixture_free(&f);
	return rc;
}

static void test_load_errors(void)
{
	pp_err e = {0};
	int rc = load_into(at("no-such-ckpt"), &e);
	CHECK(rc == PP_ERUNTIME && strstr(e.msg, "no-such-ckpt"), "ckpt/err_missing_dir",
	      "rc %d: %s", rc, e.msg);

	const char *d = copy_ckpt("err_missing_file");
	sh("rm '%s/shard-pp000-tp000.h5'", d);
	rc = load_into(d, &e);
	CHECK(rc && strstr(e.msg, "shard-pp000-tp000.h5"), "ckpt/err_missing_shard", "rc %d: %s",
	      rc, e.msg);

	d = copy_ckpt("err_truncated");
	sh("truncate -s -100 '%s/shard-pp000-tp000.h5'", d);
	rc = load_into(d, &e);
	CHECK(rc && strstr(e.msg, "shard-pp000-tp000.h5") && strstr(e.msg, "bytes"),
	      "ckpt/err_truncated", "rc %d: %s", rc, e.msg);

	d = copy_ckpt("err_flipped");
	char path[1100];
	snprintf(path, sizeof path, "%s/shard-pp000-tp000.h5", d);
	long long n = file_size(path);
	int fd = open(path, O_RDWR);
	unsigned char b = 0;
	bool flipped = fd >= 0 && pread(fd, &b, 1, n / 2) == 1 &&
		       (b ^= 0x10, pwrite(fd, &b, 1, n / 2) == 1);
	if (fd >= 0)
		close(fd);
	rc = load_into(d, &e);
	CHECK(flipped && rc && strstr(e.msg, "sha256") && strstr(e.msg, "shard-pp000-tp000.h5"),
	      "ckpt/err_flipped_byte", "rc %d: %s", rc, e.msg);
	rc = ckpt_verify(d, &e);
	CHECK(rc && strstr(e.msg, "sha256"), "ckpt/verify_flipped_byte", "rc %d: %s", rc, e.msg);

	d = copy_ckpt("err_version");
	snprintf(path, sizeof path, "%s/manifest.json", d);
	char *text = slurp(path), *v = text ? strstr(text, "\"version\": 1") : NULL;
	if (v)
		v[11] = '4';
	if (text)
		spit(path, text);
	free(text);
	rc = load_into(d, &e);
	CHECK(v && rc && strstr(e.msg, "version 4") && strstr(e.msg, "reads versions 1 to 3"),
	      "ckpt/err_version", "rc %d: %s", rc, e.msg);
	rc = ckpt_verify(d, &e);
	CHECK(rc && strstr(e.msg, "version 4"), "ckpt/verify_version", "rc %d: %s", rc, e.msg);
	/* a version-1 checkpoint relabelled 2 lacks the optimizer files, and
	 * its shard says 1 */
	d = copy_ckpt("err_version2");
	snprintf(path, sizeof path, "%s/manifest.json", d);
	text = slurp(path);
	v = text ? strstr(text, "\"version\": 1") : NULL;
	if (v)
		v[11] = '2';
	if (text)
		spit(path, text);
	free(text);
	rc = load_into(d, &e);
	CHECK(v && rc && strstr(e.msg, "optim-pp000-tp000-dp000.h5") && strstr(e.msg, "version 2"),
	      "ckpt/err_version2_without_optim_files", "rc %d: %s", rc, e.msg);

	d = copy_ckpt("err_manifest");
	snprintf(path, sizeof path, "%s/manifest.json", d);
	spit(path, "{\"format\": \"pp-checkpoint\", \"version\": 1, \"step\": ");
	rc = load_into(d, &e);
	CHECK(rc && strstr(e.msg, "manifest.json"), "ckpt/err_bad_manifest", "rc %d: %s", rc,
	      e.msg);

	const char *ok = at("run1/checkpoints/step_00000007");
	fixture f;
	fixture_init(&f, 0, false);
	f.t[1].shape[1] = 5;
	pp_real *big = calloc(20, sizeof(pp_real)), *saved = f.t[1].param;
	f.t[1].param = big;
	f.t[1].m = f.t[1].v = NULL;
	rc = ckpt_load(ok, &f.s, &e);
	CHECK(rc && strstr(e.msg, "model.layers.0.self_attn.q_proj.weight") &&
		      strstr(e.msg, "[4, 4]") && strstr(e.msg, "[4, 5]"),
	      "ckpt/err_shape_mismatch", "rc %d: %s", rc, e.msg);
	f.t[1].param = saved;
	free(big);
	fixture_free(&f);

	fixture_init(&f, 0, false);
	f.t[2].name = "model.layers.9.mlp.up_proj.weight";
	rc = ckpt_load(ok, &f.s, &e);
	CHECK(rc && strstr(e.msg, "model.layers.9.mlp.up_proj.weight") &&
		      strstr(e.msg, "shard-pp000-tp000.h5"),
	      "ckpt/err_missing_tensor", "rc %d: %s", rc, e.msg);
	fixture_free(&f);

	fixture_init(&f, 0, false);
	pp_real mm[4], vv[4];
	f.t[3].m = mm;
	f.t[3].v = vv;
	rc = ckpt_load(ok, &f.s, &e);
	CHECK(rc && strstr(e.msg, "model.norm.weight") && strstr(e.msg, "adam"),
	      "ckpt/err_no_optimizer_state", "rc %d: %s", rc, e.msg);
	f.t[3].m = f.t[3].v = NULL;
	/* a tensor in the file that is not requested is fine */
	f.s.n_tensors = 2;
	rc = ckpt_load(ok, &f.s, &e);
	CHECK(rc == 0, "ckpt/load_subset", "%s", e.msg);
	fixture_free(&f);

	fixture_init(&f, 3, true);
	f.t[0].v = NULL;
	rc = ckpt_save(at("run-bad"), &f.s, 0, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, names[0]), "ckpt/err_save_m_without_v", "rc %d: %s",
	      rc, e.msg);
	f.t[0].v = f.buf[0][2];
	f.t[1].name = names[0];
	rc = ckpt_save(at("run-bad"), &f.s, 0, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "twice"), "ckpt/err_save_duplicate", "rc %d: %s", rc,
	      e.msg);
	f.t[1].name = names[1];
	f.s.tp_size = 2;
	rc = ckpt_save(at("run-bad"), &f.s, 0, &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "ckpt_commit"), "ckpt/err_save_multi_shard",
	      "rc %d: %s", rc, e.msg);
	fixture_free(&f);
}

/* ------------------------------------------------ stale tmp, replacing */

static pid_t dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return p;
}

static void test_stale_and_replace(void)
{
	const char *c = at("run4/checkpoints");
	pid_t dead = dead_pid(), live = getppid();
	sh("mkdir -p '%s/.tmp-step_00000003-%d/x' '%s/.trash-step_00000001-%d' '%s/.tmp-step_00000004-%d' && "
	   "echo junk > '%s/.tmp-step_00000003-%d/x/shard-pp000-tp000.h5'",
	   c, (int)dead, c, (int)dead, c, (int)live, c, (int)dead);
	pp_err e = {0};
	int rc = save_step(at("run4"), 5, 0, &e);
	char p1[1100], p2[1100], p3[1100];
	snprintf(p1, sizeof p1, "%s/.tmp-step_00000003-%d", c, (int)dead);
	snprintf(p2, sizeof p2, "%s/.trash-step_00000001-%d", c, (int)dead);
	snprintf(p3, sizeof p3, "%s/.tmp-step_00000004-%d", c, (int)live);
	CHECK(rc == 0 && !exists(p1) && !exists(p2) && exists(p3), "ckpt/stale_tmp_removed",
	      "rc %d dead tmp %d dead trash %d live tmp %d: %s", rc, exists(p1), exists(p2),
	      exists(p3), e.msg);
	rmdir(p3);
	rc = ckpt_verify(at("run4/checkpoints/step_00000005"), &e);
	CHECK(rc == 0, "ckpt/save_beside_stale_tmp", "%s", e.msg);

	/* saving a step that exists replaces it */
	fixture f, g;
	fixture_init(&f, 99, true);
	f.s.step = 5;
	rc = ckpt_save(at("run4"), &f.s, 0, &e);
	fixture_init(&g, 0, false);
	if (!rc)
		rc = ckpt_load(at("run4/checkpoints/step_00000005"), &g.s, &e);
	CHECK(rc == 0 && same_tensors(&f, &g) && count_entries(c, "\\.") == 2 &&
		      count_entries(c, "step_") == 1,
	      "ckpt/replace_existing_step", "rc %d: %s", rc, e.msg);
	fixture_free(&f);
	fixture_free(&g);
}

/* ------------------------------------------------ several shards (tp 2) */

static void test_multi_shard(void)
{
	/* q (4, 4) split by rows, o (4, 6) by columns, norm (4) replicated:
	 * saved by tp rank 0 only */
	pp_real q[16], o[24], n[4];
	for (int i = 0; i < 16; i++)
		q[i] = val(3, 1, i);
	for (int i = 0; i < 24; i++)
		o[i] = val(3, 2, i);
	for (int i = 0; i < 4; i++)
		n[i] = val(3, 3, i);
	pp_real qs[2][8], os[2][12];
	for (int r = 0; r < 2; r++) {
		memcpy(qs[r], q + 8 * r, sizeof qs[r]);
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 3; j++)
				os[r][i * 3 + j] = o[i * 6 + 3 * r + j];
	}
	ckpt_tensor t[2][3];
	ckpt_state s[2];
	for (int r = 0; r < 2; r++) {
		t[r][0] = (ckpt_tensor){.name = names[1],
					.ndim = 2,
					.shape = {2, 4},
					.global_shape = {4, 4},
					.offset = {2 * r, 0},
					.param = qs[r]};
		t[r][1] = (ckpt_tensor){.name = names[2],
					.ndim = 2,
					.shape = {4, 3},
					.global_shape = {4, 6},
					.offset = {0, 3 * r},
					.param = os[r]};
		t[r][2] = (ckpt_tensor){.name = names[3], .ndim = 1, .shape = {4}, .param = n};
		s[r] = (ckpt_state){.step = 3,
				    .rng = {1, 2, 3, (uint64_t)r},
				    .config_json = "{}",
				    .tp_rank = r,
				    .pp_size = 1,
				    .tp_size = 2,
				    .dp_size = 4,
				    .n_tensors = r ? 2 : 3,
				    .tensors = t[r]};
	}
	const char *run = at("run5");
	pp_err e = {0};
	char tmp[1024];
	int rc = ckpt_begin(run, 3, tmp, sizeof tmp, &e);
	if (!rc)
		rc = ckpt_write_shard(tmp, &s[0], &e);
	int rc_partial = rc ? rc : ckpt_commit(run, tmp, 3, 0, &e);
	CHECK(rc == 0 && rc_partial && strstr(e.msg, "shard-pp000-tp001.h5") &&
		      strstr(e.msg, "missing"),
	      "ckpt/commit_missing_shard", "rc %d/%d: %s", rc, rc_partial, e.msg);
	if (!rc)
		rc = ckpt_write_shard(tmp, &s[1], &e);
	if (!rc)
		rc = ckpt_commit(run, tmp, 3, 0, &e);
	CHECK(rc == 0, "ckpt/commit_two_shards", "%s", e.msg);
	const char *dir = at("run5/checkpoints/step_00000003");
	rc = ckpt_verify(dir, &e);
	CHECK(rc == 0, "ckpt/verify_two_shards", "%s", e.msg);

	ckpt_manifest m;
	rc = ckpt_read_manifest(dir, &m, &e);
	if (rc == 0) {
		const ckpt_tensor_info *ti = ckpt_manifest_tensor(&m, names[2]);
		CHECK(m.n_files == 2 && m.tp_size == 2 && m.dp_size == 4 && ti && ti->n_shards == 2,
		      "ckpt/manifest_two_shards", "files %d tp %d", m.n_files, m.tp_size);
		pp_real full[24];
		rc = ckpt_read_tensor(dir, &m, names[2], "params", full, &e);
		CHECK(rc == 0 && memcmp(full, o, sizeof o) == 0, "ckpt/reassemble_columns", "%s",
		      e.msg);
		ckpt_manifest_free(&m);
	} else {
		CHECK(0, "ckpt/manifest_two_shards", "%s", e.msg);
	}

	/* load whole tensors on one rank (tp 2 -> 1) */
	pp_real q1[16], o1[24], n1[4];
	ckpt_tensor w[3] = {{.name = names[1], .ndim = 2, .shape = {4, 4}, .param = q1},
			    {.name = names[2], .ndim = 2, .shape = {4, 6}, .param = o1},
			    {.name = names[3], .ndim = 1, .shape = {4}, .param = n1}};
	ckpt_state one = {.n_tensors = 3, .tensors = w, .pp_size = 1, .tp_size = 1, .dp_size = 1};
	rc = ckpt_load(dir, &one, &e);
	CHECK(rc == 0 && !memcmp(q1, q, sizeof q) && !memcmp(o1, o, sizeof o) &&
		      !memcmp(n1, n, sizeof n) && one.step == 3 && one.rng[3] == 0,
	      "ckpt/load_resharded_tp2_to_tp1", "rc %d: %s", rc, e.msg);

	/* and as tp rank 1: its own slices, its own rng */
	pp_real q2[8], o2[12];
	ckpt_tensor w2[2] = {{.name = names[1],
			      .ndim = 2,
			      .shape = {2, 4},
			      .global_shape = {4, 4},
			      .offset = {2, 0},
			      .param = q2},
			     {.name = names[2],
			      .ndim = 2,
			      .shape = {4, 3},
			      .global_shape = {4, 6},
			      .offset = {0, 3},
			      .param = o2}};
	ckpt_state r1 = {.n_tensors = 2,
			 .tensors = w2,
			 .tp_rank = 1,
			 .pp_size = 1,
			 .tp_size = 2,
			 .dp_size = 1};
	rc = ckpt_load(dir, &r1, &e);
	CHECK(rc == 0 && !memcmp(q2, qs[1], sizeof q2) && !memcmp(o2, os[1], sizeof o2) &&
		      r1.rng[3] == 1,
	      "ckpt/load_tp_rank1_slices", "rc %d: %s", rc, e.msg);

	/* a replicated tensor written by both tp ranks overlaps */
	s[1].n_tensors = 3;
	s[1].step = s[0].step = 4;
	rc = ckpt_begin(run, 4, tmp, sizeof tmp, &e);
	if (!rc)
		rc = ckpt_write_shard(tmp, &s[0], &e);
	if (!rc)
		rc = ckpt_write_shard(tmp, &s[1], &e);
	int rc2 = rc ? rc : ckpt_commit(run, tmp, 4, 0, &e);
	CHECK(rc == 0 && rc2 && strstr(e.msg, "overlap") && strstr(e.msg, names[3]),
	      "ckpt/commit_overlap", "rc %d/%d: %s", rc, rc2, e.msg);
}

/* ------------------------------------------- ZeRO-1: optimizer files */

/* Two dp ranks of one (pp, tp) shard, simulated in one process. A, B and D
 * lie in a flat buffer of 60 elements, [0, 30) on dp rank 0 and [30, 60) on
 * rank 1 (A straddles the two); C's state is split into interleaved ranges
 * of its rows, two per rank, the way a fused projection's is. */
enum { ZN = 4, ZC = 2 /* index of C */ };
static const char *znames[ZN] = {"model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight",
				 "transformer.h.0.attn.c_attn.weight", "model.norm.weight"};
static const int64_t zshape[ZN][2] = {{8, 4}, {4, 6}, {6, 2}, {4, 0}};
static const int64_t zflat_off[ZN] = {0, 32, -1, 56}; /* C is not in the flat buffer */
static const int64_t zc_begin[2][2] = {{0, 4}, {2, 6}}, zc_end[2][2] = {{2, 6}, {4, 12}};

typedef struct {
	pp_real *x[ZN][3]; /* whole param, m, v */
	ckpt_tensor t[ZN]; /* the shard: params only */
	ckpt_optim_part parts[2][ZN];
	int64_t begin[2][ZN][2], end[2][ZN][2];
	pp_real *cm[2], *cv[2]; /* C's ranges, concatenated */
	ckpt_state s[2];
} zero_fixture;

static int64_t znumel(int i) { return zshape[i][0] * (zshape[i][1] ? zshape[i][1] : 1); }

/* lo_shift moves dp rank 1's first range (overlap: -1, gap: +1) */
static void zero_init(zero_fixture *z, long step, int lo_shift)
{
	memset(z, 0, sizeof *z);
	for (int i = 0; i < ZN; i++) {
		for (int k = 0; k < 3; k++) {
			z->x[i][k] = malloc((size_t)znumel(i) * sizeof(pp_real));
			for (int64_t j = 0; j < znumel(i); j++)
				z->x[i][k][j] = val(step, 20 + i + 10 * k, j);
		}
		z->t[i] = (ckpt_tensor){.name = znames[i],
					.ndim = zshape[i][1] ? 2 : 1,
					.shape = {zshape[i][0], zshape[i][1]},
					.param = z->x[i][0]};
	}
	for (int r = 0; r < 2; r++) {
		int n = 0;
		int64_t lo = 30 * r + (r ? lo_shift : 0), hi = 30 * (r + 1);
		for (int i = 0; i < ZN; i++) {
			ckpt_optim_part *q = &z->parts[r][n];
			*q = (ckpt_optim_part){.name = znames[i],
					       .ndim = z->t[i].ndim,
					       .shape = {zshape[i][0], zshape[i][1]},
					       .n_ranges = 1,
					       .begin = z->begin[r][n],
					       .end = z->end[r][n]};
			if (i == ZC) {
				z->cm[r] = malloc(8 * sizeof(pp_real));
				z->cv[r] = malloc(8 * sizeof(pp_real));
				int at = 0;
				for (int g = 0; g < 2; g++)
					for (int64_t j = zc_begin[r][g]; j < zc_end[r][g];
					     j++, at++) {
						z->cm[r][at] = z->x[i][1][j];
						z->cv[r][at] = z->x[i][2][j];
					}
				memcpy(z->begin[r][n], zc_begin[r], sizeof zc_begin[r]);
				memcpy(z->end[r][n], zc_end[r], sizeof zc_end[r]);
				/* described as part of the whole tensor: global_shape set */
				q->global_shape[0] = zshape[i][0];
				q->global_shape[1] = zshape[i][1];
				q->n_ranges = 2;
				q->m = z->cm[r];
				q->v = z->cv[r];
				n++;
				continue;
			}
			int64_t off = zflat_off[i], a = lo > off ? lo : off,
				b = hi < off + znumel(i) ? hi : off + znumel(i);
			if (a >= b)
				continue;
			z->begin[r][n][0] = a - off;
			z->end[r][n][0] = b - off;
			q->m = z->x[i][1] + (a - off);
			q->v = z->x[i][2] + (a - off);
			n++;
		}
		z->s[r] = (ckpt_state){.step = step,
				       .config_json = "{}",
				       .pp_size = 1,
				       .tp_size = 1,
				       .dp_size = 2,
				       .dp_rank = r,
				       .n_tensors = ZN,
				       .tensors = z->t,
				       .optim_per_dp = true,
				       .n_optim = n,
				       .optim = z->parts[r]};
	}
}

static void zero_free(zero_fixture *z)
{
	for (int i = 0; i < ZN; i++)
		for (int k = 0; k < 3; k++)
			free(z->x[i][k]);
	for (int r = 0; r < 2; r++) {
		free(z->cm[r]);
		free(z->cv[r]);
	}
}

/* begin, the shard, the optimizer files of the ranks in mask, commit */
static int zero_save(const char *run, zero_fixture *z, int mask, pp_err *e)
{
	char tmp[1024];
	int rc = ckpt_begin(run, z->s[0].step, tmp, sizeof tmp, e);
	if (!rc)
		rc = ckpt_write_shard(tmp, &z->s[0], e);
	for (int r = 0; r < 2 && !rc; r++)
		if (mask & (1 << r))
			rc = ckpt_write_optim_shard(tmp, &z->s[r], e);
	return rc ? rc : ckpt_commit(run, tmp, z->s[0].step, 0, e);
}

/* Loads the given block of tensor i (m and v too) and compares it with the
 * saved whole, bitwise. */
static bool zero_load_matches(const char *dir, const zero_fixture *z, int i, const int64_t *offset,
			      const int64_t *shape, pp_err *e)
{
	int nd = z->t[i].ndim;
	int64_t n = shape[0] * (nd == 2 ? shape[1] : 1), cols = nd == 2 ? zshape[i][1] : 1;
	pp_real *buf[3];
	for (int k = 0; k < 3; k++)
		buf[k] = calloc((size_t)n, sizeof(pp_real));
	ckpt_tensor t = {.name = znames[i],
			 .ndim = nd,
			 .shape = {shape[0], nd == 2 ? shape[1] : 0},
			 .global_shape = {zshape[i][0], zshape[i][1]},
			 .offset = {offset[0], nd == 2 ? offset[1] : 0},
			 .param = buf[0],
			 .m = buf[1],
			 .v = buf[2]};
	ckpt_state s = {.n_tensors = 1, .tensors = &t, .pp_size = 1, .tp_size = 1, .dp_size = 1};
	bool ok = ckpt_load(dir, &s, e) == 0;
	int64_t w = nd == 2 ? shape[1] : 1;
	for (int64_t j = 0; ok && j < n; j++) {
		int64_t row = offset[0] + j / w, col = (nd == 2 ? offset[1] : 0) + j % w;
		for (int k = 0; k < 3; k++)
			ok = ok && memcmp(&buf[k][j], &z->x[i][k][row * cols + col],
					  sizeof(pp_real)) == 0;
	}
	for (int k = 0; k < 3; k++)
		free(buf[k]);
	return ok;
}

static void test_zero(void)
{
	const char *run = at("run7");
	pp_err e = {0};
	zero_fixture z;
	zero_init(&z, 9, 0);
	int rc = zero_save(run, &z, 1, &e);
	CHECK(rc && strstr(e.msg, "optim-pp000-tp000-dp001.h5") && strstr(e.msg, "missing"),
	      "ckpt/zero_commit_missing_optim_file", "rc %d: %s", rc, e.msg);
	rc = zero_save(run, &z, 3, &e);
	CHECK(rc == 0, "ckpt/zero_save", "%s", e.msg);
	const char *dir = at("run7/checkpoints/step_00000009");
	rc = ckpt_verify(dir, &e);
	CHECK(rc == 0, "ckpt/zero_verify", "%s", e.msg);

	ckpt_manifest m;
	rc = ckpt_read_manifest(dir, &m, &e);
	if (rc == 0) {
		const ckpt_tensor_info *a = ckpt_manifest_tensor(&m, znames[0]),
				       *c = ckpt_manifest_tensor(&m, znames[2]);
		CHECK(m.version == 2 && m.n_files == 3 &&
			      strcmp(m.files[0].name, "optim-pp000-tp000-dp000.h5") == 0 &&
			      strcmp(m.files[1].name, "optim-pp000-tp000-dp001.h5") == 0 && a &&
			      a->adam && a->n_shards == 1 && !a->shards[0].adam &&
			      a->n_ranges == 2 && c && c->n_ranges == 4,
		      "ckpt/zero_manifest", "version %d, %d files", m.version, m.n_files);
		pp_real whole[12];
		rc = ckpt_read_tensor(dir, &m, znames[2], "adam_v", whole, &e);
		CHECK(rc == 0 && memcmp(whole, z.x[2][2], sizeof whole) == 0,
		      "ckpt/zero_read_tensor_adam_v", "rc %d: %s", rc, e.msg);
		ckpt_manifest_free(&m);
	} else {
		CHECK(0, "ckpt/zero_manifest", "%s", e.msg);
	}
	json_error_t jerr;
	char mpath[1100];
	snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
	json_t *mj = json_load_file(mpath, 0, &jerr);
	json_t *o0 = json_array_get(
		json_object_get(json_object_get(json_object_get(mj, "tensors"), znames[2]),
				"optim"),
		0);
	CHECK(json_integer_value(json_object_get(mj, "version")) == 2 &&
		      json_integer_value(json_array_get(json_object_get(o0, "slice_begin"), 1)) ==
			      4 &&
		      json_integer_value(json_array_get(json_object_get(o0, "slice_end"), 1)) == 6,
	      "ckpt/zero_manifest_json", "optim entry of %s unexpected", znames[2]);
	json_decref(mj);

	/* the optimizer file, read with the HDF5 API */
	char path[1100];
	snprintf(path, sizeof path, "%s/optim-pp000-tp000-dp000.h5", dir);
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	bool ok = f >= 0 && H5Lexists(f, "params", H5P_DEFAULT) == 0;
	char dpath[256];
	snprintf(dpath, sizeof dpath, "adam_m/%s", znames[2]);
	hid_t ds = ok ? H5Dopen2(f, dpath, H5P_DEFAULT) : -1, sp = ds >= 0 ? H5Dget_space(ds) : -1;
	int64_t sb[2] = {0}, se[2] = {0}, dp = -1;
	float mv[4] = {0};
	if (ds >= 0) {
		hid_t x = H5Aopen(ds, "slice_begin", H5P_DEFAULT),
		      y = H5Aopen(ds, "slice_end", H5P_DEFAULT),
		      d = H5Aopen(f, "dp_rank", H5P_DEFAULT);
		ok = H5Aread(x, H5T_NATIVE_INT64, sb) >= 0 &&
		     H5Aread(y, H5T_NATIVE_INT64, se) >= 0 &&
		     H5Aread(d, H5T_NATIVE_INT64, &dp) >= 0 &&
		     H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_npoints(sp) == 4 &&
		     H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, mv) >= 0;
		H5Aclose(x);
		H5Aclose(y);
		H5Aclose(d);
	}
	ok = ok && sb[0] == 0 && se[0] == 2 && sb[1] == 4 && se[1] == 6 && dp == 0 &&
	     mv[2] == (float)z.x[2][1][4];
	CHECK(ok, "ckpt/zero_h5_optim_file",
	      "1-d adam_m with slice_begin/slice_end of its ranges expected in %s", path);
	if (sp >= 0)
		H5Sclose(sp);
	if (ds >= 0)
		H5Dclose(ds);
	if (f >= 0)
		H5Fclose(f);

	/* into a layout without ZeRO: whole tensors, bitwise; and slices of
	 * another split (tp = 2 by columns, rows of the interleaved one) */
	ok = true;
	for (int i = 0; i < ZN && ok; i++)
		ok = zero_load_matches(dir, &z, i, (int64_t[2]){0, 0}, zshape[i], &e);
	CHECK(ok, "ckpt/zero_load_whole_bitwise", "%s", e.msg);
	ok = zero_load_matches(dir, &z, 1, (int64_t[2]){0, 3}, (int64_t[2]){4, 3}, &e) &&
	     zero_load_matches(dir, &z, 0, (int64_t[2]){4, 0}, (int64_t[2]){4, 4}, &e) &&
	     zero_load_matches(dir, &z, 2, (int64_t[2]){1, 1}, (int64_t[2]){4, 1}, &e);
	CHECK(ok, "ckpt/zero_load_other_split", "%s", e.msg);

	/* a missing optimizer file is named */
	const char *d = at("err_zero_missing");
	sh("rm -rf '%s' && cp -a '%s' '%s' && rm '%s/optim-pp000-tp000-dp001.h5'", d, dir, d, d);
	ok = !zero_load_matches(d, &z, 0, (int64_t[2]){0, 0}, zshape[0], &e);
	CHECK(ok && strstr(e.msg, "optim-pp000-tp000-dp001.h5"), "ckpt/zero_err_missing_optim_file",
	      "%s", e.msg);
	zero_free(&z);

	/* ranges that overlap or leave a gap are refused at commit */
	zero_init(&z, 10, -1);
	rc = zero_save(run, &z, 3, &e);
	CHECK(rc && strstr(e.msg, "both hold") && strstr(e.msg, "optim-pp000-tp000-dp000.h5") &&
		      strstr(e.msg, "optim-pp000-tp000-dp001.h5") && strstr(e.msg, znames[0]),
	      "ckpt/zero_commit_overlap", "rc %d: %s", rc, e.msg);
	zero_free(&z);
	zero_init(&z, 10, 1);
	rc = zero_save(run, &z, 3, &e);
	CHECK(rc && strstr(e.msg, "[30, 31)") && strstr(e.msg, "no optimizer file") &&
		      strstr(e.msg, znames[0]),
	      "ckpt/zero_commit_gap", "rc %d: %s", rc, e.msg);

	/* the shard of a checkpoint with optimizer files says version 2 */
	z.s[0].optim_per_dp = false;
	rc = zero_save(run, &z, 2, &e);
	CHECK(rc && strstr(e.msg, "version"), "ckpt/zero_commit_mixed_versions", "rc %d: %s", rc,
	      e.msg);
	char tmp[1024];
	rc = ckpt_begin(run, 11, tmp, sizeof tmp, &e);
	rc = rc ? rc : ckpt_write_optim_shard(tmp, &z.s[0], &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, "optim_per_dp"), "ckpt/zero_err_optim_without_flag",
	      "rc %d: %s", rc, e.msg);
	z.s[1].tensors[0].m = z.x[0][1];
	z.s[1].tensors[0].v = z.x[0][2];
	rc = ckpt_write_shard(tmp, &z.s[1], &e);
	CHECK(rc == PP_EUSAGE && strstr(e.msg, znames[0]), "ckpt/zero_err_shard_with_adam",
	      "rc %d: %s", rc, e.msg);
	z.s[1].tensors[0].m = z.s[1].tensors[0].v = NULL;
	zero_free(&z);
	sh("rm -rf '%s'", tmp);
}

/* ------------------------------------------------------- full disk */

/* A save onto a full file system must fail with an error naming the file,
 * leave no temporary directory, and leave HDF5 usable (1.10 crashes at
 * exit when a file's closing flush fails). The child mounts a 64 KiB
 * tmpfs in a mount namespace of its own, so nothing outlives it; where
 * mounting is not allowed the test is skipped. */
static void test_disk_full(void)
{
	const char *mnt = at("tinyfs");
	mkdir(mnt, 0755);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("tmpfs", mnt, "tmpfs", 0, "size=64k") != 0)
			_exit(77);
		char run[1100], ckpts[1100];
		snprintf(run, sizeof run, "%s/run", mnt);
		snprintf(ckpts, sizeof ckpts, "%s/run/checkpoints", mnt);
		static pp_real w[256 * 256];
		ckpt_tensor t = {.name = "model.embed_tokens.weight",
				 .ndim = 2,
				 .shape = {256, 256},
				 .param = w};
		ckpt_state st = {.step = 1,
				 .pp_size = 1,
				 .tp_size = 1,
				 .dp_size = 1,
				 .n_tensors = 1,
				 .tensors = &t};
		pp_err e = {0};
		int rc = ckpt_save(run, &st, 0, &e);
		printf("# full disk: %s\n", e.msg);
		bool named = strstr(e.msg, "shard-pp000-tp000.h5") &&
			     strstr(e.msg, "No space left on device");
		int left = count_entries(ckpts, "\\.");
		t.shape[0] = t.shape[1] = 16; /* fits */
		e = (pp_err){0};
		int rc2 = ckpt_save(run, &st, 0, &e);
		long open_objs = (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
		printf("# then a small save: rc %d%s%s; open HDF5 objects %ld; temporaries left %d\n",
		       rc2, rc2 ? ": " : "", e.msg, open_objs, left - 2);
		fflush(stdout);
		_exit(rc == PP_ERUNTIME && named && left == 2 && rc2 == 0 && open_objs == 0 ? 0
											    : 1);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
		th_skip("ckpt/disk_full_clean_error",
			"cannot mount a small tmpfs here (needs CAP_SYS_ADMIN)");
		return;
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ckpt/disk_full_clean_error",
	      "child %s %d (0: the error named the file, no temporary left, HDF5 still usable)",
	      WIFEXITED(status) ? "exited" : "killed by signal",
	      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* ------------------------------------------------------- kill -9 */

enum { BIG = 4096 };

typedef struct {
	ckpt_tensor t[2];
	ckpt_state s;
	pp_real *p, *m, *v, *norm;
} big_state;

static void big_init(big_state *b)
{
	memset(b, 0, sizeof *b);
	size_t n = (size_t)BIG * BIG;
	b->p = malloc(n * sizeof(pp_real));
	b->m = malloc(n * sizeof(pp_real));
	b->v = malloc(n * sizeof(pp_real));
	b->norm = malloc(BIG * sizeof(pp_real));
	b->t[0] = (ckpt_tensor){.name = "model.embed_tokens.weight",
				.ndim = 2,
				.shape = {BIG, BIG},
				.param = b->p,
				.m = b->m,
				.v = b->v};
	b->t[1] = (ckpt_tensor){
		.name = "model.norm.weight", .ndim = 1, .shape = {BIG}, .param = b->norm};
	b->s = (ckpt_state){.config_json = "{}",
			    .pp_size = 1,
			    .tp_size = 1,
			    .dp_size = 1,
			    .n_tensors = 2,
			    .tensors = b->t};
}

static pp_real big_val(long step, size_t i)
{
	return (pp_real)(float)((double)step + (double)(i % 1024) / 1024.0);
}

static void big_fill(big_state *b, long step)
{
	size_t n = (size_t)BIG * BIG;
	for (size_t i = 0; i < n; i++) {
		b->p[i] = big_val(step, i);
		b->m[i] = -b->p[i];
		b->v[i] = (pp_real)step;
	}
	for (size_t i = 0; i < BIG; i++)
		b->norm[i] = big_val(step, i + 7);
	b->s.step = step;
	b->s.rng[0] = (uint64_t)step;
}

static bool big_check(const big_state *b, long step)
{
	size_t n = (size_t)BIG * BIG;
	for (size_t i = 0; i < n; i++)
		if (b->p[i] != big_val(step, i) || b->m[i] != -b->p[i] || b->v[i] != (pp_real)step)
			return false;
	for (size_t i = 0; i < BIG; i++)
		if (b->norm[i] != big_val(step, i + 7))
			return false;
	return b->s.step == step && b->s.rng[0] == (uint64_t)step;
}

static void big_free(big_state *b)
{
	free(b->p);
	free(b->m);
	free(b->v);
	free(b->norm);
}

/* The child resumes like a trainer: from the newest checkpoint, then saves
 * step after step until killed. */
static void saver_child(const char *run)
{
	big_state b;
	big_init(&b);
	char dir[1024];
	long step;
	pp_err e;
	if (ckpt_find_latest(run, dir, sizeof dir, &step, &e))
		_exit(3);
	for (long s = step + 1;; s++) {
		big_fill(&b, s);
		if (ckpt_save(run, &b.s, 2, &e)) {
			fprintf(stderr, "child: %s\n", e.msg);
			_exit(4);
		}
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_kill_mid_save(void)
{
	const char *run = at("run6");
	big_state b;
	big_init(&b);
	big_fill(&b, 0);
	pp_err e = {0};
	double t0 = now();
	int rc = ckpt_save(run, &b.s, 2, &e);
	double t_save = now() - t0;
	CHECK(rc == 0, "ckpt/big_save", "%s", e.msg);
	printf("# a %d MB checkpoint saves in %.2f s\n", (int)(3 * (size_t)BIG * BIG * 4 >> 20),
	       t_save);
	if (rc) {
		big_free(&b);
		return;
	}
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	/* delays in units of one save, so kills land at every phase: writing
	 * tensors, fsync, hashing, renaming, pruning */
	static const double frac[] = {0.15, 0.45, 0.8, 1.2, 1.7, 2.6};
	int rounds = (int)(sizeof frac / sizeof frac[0]), mid_write = 0;
	long last = 0;
	for (int r = 0; r < rounds; r++) {
		double delay = t_save * (frac[r] + 0.2 * rand() / (double)RAND_MAX) + 0.05;
		pid_t pid = fork();
		if (pid == 0)
			saver_child(run);
		struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
		nanosleep(&ts, NULL);
		int status = 0;
		bool alive = waitpid(pid, &status, WNOHANG) == 0;
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		if (!alive) {
			CHECK(0, "ckpt/kill9_child", "child exited early with status %d", status);
			continue;
		}
		if (count_entries(at("run6/checkpoints"), "\\.tmp-") > 0)
			mid_write++;
		char dir[1024];
		long step = -1;
		rc = ckpt_find_latest(run, dir, sizeof dir, &step, &e);
		bool found = rc == 0 && step >= last;
		int vrc = found ? ckpt_verify(dir, &e) : -1;
		big_state got;
		big_init(&got);
		int lrc = vrc == 0 ? ckpt_load(dir, &got.s, &e) : -1;
		bool ok = found && vrc == 0 && lrc == 0 && big_check(&got, step);
		big_free(&got);
		char name[64];
		snprintf(name, sizeof name, "ckpt/kill9_round%d", r + 1);
		CHECK(ok, name,
		      "killed after %.2f s: latest step %ld (previous %ld), verify %d, load %d: %s",
		      delay, step, last, vrc, lrc, e.msg);
		printf("# round %d: killed after %.2f s, latest complete step %ld\n", r + 1, delay,
		       step);
		if (step > last)
			last = step;
	}
	CHECK(mid_write > 0, "ckpt/kill9_hit_mid_write",
	      "no kill landed while a temporary directory existed");
	/* the next save clears what the killed ones left */
	big_fill(&b, last + 1);
	rc = ckpt_save(run, &b.s, 2, &e);
	CHECK(rc == 0 && count_entries(at("run6/checkpoints"), "\\.t") == 0 &&
		      count_entries(at("run6/checkpoints"), "step_") == 2,
	      "ckpt/kill9_cleanup", "rc %d, leftovers %d: %s", rc,
	      count_entries(at("run6/checkpoints"), "\\.t"), e.msg);
	big_free(&b);
	sh("rm -rf '%s'", run);
}

/* ------------------------------------------- damaged manifests (fuzzing) */

/* Manifests whose numbers overflowed int64 or int in the checks (found by
 * tests/fuzz/fuzz_manifest.c under UBSan): each was accepted, or checked
 * with undefined arithmetic. Each must now be an error naming the manifest. */
static void test_manifest_overflow(void)
{
	static const char *const sha =
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	static const struct {
		const char *name, *version, *mesh, *optim_file, *tensor, *want;
	} cases[] = {
		/* 2^62 * 4 elements: the count wrapped to 0, and so did the shard's */
		{"volume", "1", "1, \"tp\": 1, \"dp\": 1", NULL,
		 "\"global_shape\": [4611686018427387904, 4], \"shards\": [{\"file\": \"shard-pp000-tp000.h5\", "
		 "\"offset\": [0, 0], \"shape\": [4611686018427387904, 4]}]",
		 "global shape [4611686018427387904, 4]"},
		/* offset + shape wrapped below the global shape */
		{"offset", "1", "1, \"tp\": 1, \"dp\": 1", NULL,
		 "\"global_shape\": [10], \"shards\": [{\"file\": \"shard-pp000-tp000.h5\", \"offset\": [0], "
		 "\"shape\": [9]}, {\"file\": \"shard-pp000-tp000.h5\", \"offset\": [9223372036854775807], "
		 "\"shape\": [1]}]",
		 "lies outside its global shape"},
		/* read as pp=1 */
		{"mesh", "1", "4294967297, \"tp\": 1, \"dp\": 1", NULL,
		 "\"global_shape\": [2], \"shards\": [{\"file\": \"shard-pp000-tp000.h5\", \"offset\": [0], "
		 "\"shape\": [2]}]",
		 "\"mesh\" must be"},
		/* end - begin overflowed */
		{"range", "2", "1, \"tp\": 1, \"dp\": 1", "optim-pp000-tp000-dp000.h5",
		 "\"adam\": true, \"global_shape\": [2], \"shards\": [{\"file\": \"shard-pp000-tp000.h5\", "
		 "\"offset\": [0], \"shape\": [2], \"adam\": false}], \"optim\": [{\"file\": "
		 "\"optim-pp000-tp000-dp000.h5\", \"offset\": [0], \"shape\": [2], \"slice_begin\": "
		 "[-9223372036854775807], \"slice_end\": [2]}]",
		 "ranges must be non-empty"},
		/* the element count of a range's block overflowed */
		{"range_block", "2", "1, \"tp\": 1, \"dp\": 1", "optim-pp000-tp000-dp000.h5",
		 "\"adam\": true, \"global_shape\": [2], \"shards\": [{\"file\": \"shard-pp000-tp000.h5\", "
		 "\"offset\": [0], \"shape\": [2], \"adam\": false}], \"optim\": [{\"file\": "
		 "\"optim-pp000-tp000-dp000.h5\", \"offset\": [0], \"shape\": [4611686018427387904, 4], "
		 "\"slice_begin\": [0], \"slice_end\": [1]}]",
		 "tensor x"},
	};
	const char *d = at("manifest_overflow");
	mkdir(d, 0755);
	char path[1100], text[4096];
	snprintf(path, sizeof path, "%s/manifest.json", d);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char optim[256] = "";
		if (cases[i].optim_file)
			snprintf(optim, sizeof optim,
				 ", {\"name\": \"%s\", \"bytes\": 1, \"sha256\": \"%s\"}",
				 cases[i].optim_file, sha);
		snprintf(
			text, sizeof text,
			"{\"format\": \"pp-checkpoint\", \"version\": %s, \"step\": 0, \"mesh\": {\"pp\": %s}, "
			"\"files\": [{\"name\": \"shard-pp000-tp000.h5\", \"bytes\": 1, \"sha256\": \"%s\"}%s], "
			"\"tensors\": {\"x\": {%s}}}",
			cases[i].version, cases[i].mesh, sha, optim, cases[i].tensor);
		spit(path, text);
		ckpt_manifest m;
		pp_err e = {0};
		int rc = ckpt_read_manifest(d, &m, &e);
		char name[96];
		snprintf(name, sizeof name, "ckpt/manifest_overflow/%s", cases[i].name);
		CHECK(rc == PP_ERUNTIME && strstr(e.msg, "manifest.json") &&
			      strstr(e.msg, cases[i].want),
		      name, "rc %d: %s", rc, rc ? e.msg : "(accepted)");
		if (!rc)
			ckpt_manifest_free(&m);
	}
}

int main(void)
{
	snprintf(root, sizeof root, "/tmp/pp-test-ckpt.XXXXXX");
	if (!mkdtemp(root)) {
		CHECK(0, "ckpt/mkdtemp", "%s", strerror(errno));
		TH_EXIT();
	}
	test_sha256();
	test_round_trip();
	test_hdf5_layout();
	test_keep();
	test_find_latest();
	test_load_errors();
	test_manifest_overflow();
	test_stale_and_replace();
	test_multi_shard();
	test_zero();
	test_disk_full();
	test_kill_mid_save();
	if (!th_failed)
		sh("rm -rf '%s'", root);
	else
		printf("# files kept in %s\n", root);
	at_free();
	TH_EXIT();
}
