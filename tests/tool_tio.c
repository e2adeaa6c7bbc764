/* tool_tio SRC_FORMAT SRC DST_FORMAT DST [--dtype T] [--adam] [--shard-mb N]
 *          [key=value...]
 * Copies a model from one format to another through tio_copy (the loop of
 * pp-ckpt import, export and convert), for the tests of each format. T:
 * F32, F16, BF16 or Q8_0 where the sink has a choice; key=value: the
 * layout of a pp sink (pp=, tp=, dp=, shard_optimizer=). A pp sink gets a
 * copy of the source's tokenizer in DST/tokenizer/ (a GGUF source's lives in
 * a directory removed when it closes), which the run's config names. Prints
 * the tensors copied and the model's family; exit 0, 1 (run-time) or 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/formats/tensorio.h"
#include "../libcommon/fsutil.h"

/* The tokenizer file (and the files read beside it) into dir; meta points
 * at the copy. */
static int keep_tokenizer(tio_meta *meta, const char *dir, pp_err *e)
{
	static const char *const beside[] = {"", "tokenizer_config.json", "merges.txt"};
	char file[PP_PATH_MAX], from[2 * PP_PATH_MAX], to[2 * PP_PATH_MAX];
	snprintf(file, sizeof file, "%s", meta->tokenizer);
	const char *slash = strrchr(file, '/');
	const int d = slash ? (int)(slash - file + 1) : 0;
	int rc = fs_mkdir_p(dir, e);
	for (size_t i = 0; !rc && i < sizeof beside / sizeof *beside; i++) {
		const char *name = i ? beside[i] : file + d;
		snprintf(from, sizeof from, "%.*s%s", d, file, name);
		snprintf(to, sizeof to, "%s/%s", dir, name);
		char *buf;
		size_t n;
		FILE *f;
		if (i && fs_read_file(from, &buf, &n, NULL))
			continue; /* not there */
		if (!i && (rc = fs_read_file(from, &buf, &n, e)))
			break;
		if (!(f = fopen(to, "wb")) || fwrite(buf, 1, n, f) != n || fclose(f))
			rc = pp_errorf(e, PP_ERUNTIME, "cannot write %s", to);
		free(buf);
	}
	if (!rc && snprintf(meta->tokenizer, sizeof meta->tokenizer, "%s/%s", dir, file + d) >=
			   (int)sizeof meta->tokenizer)
		rc = pp_errorf(e, PP_EUSAGE, "%s: path too long", dir);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: tool_tio SRC_FORMAT SRC DST_FORMAT DST [--dtype T] [--adam] "
				"[--shard-mb N] [key=value...]\n");
		return 2;
	}
	tio_sink_opts o = {.dtype = TIO_F32, .layout = json_object()};
	for (int i = 5; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--adam")) {
			o.with_adam = true;
		} else if (!strcmp(a, "--dtype") && i + 1 < argc) {
			const char *t = argv[++i];
			o.dtype = !strcmp(t, "F16")    ? TIO_F16
				  : !strcmp(t, "BF16") ? TIO_BF16
				  : !strcmp(t, "Q8_0") ? TIO_Q8_0
						       : TIO_F32;
		} else if (!strcmp(a, "--shard-mb") && i + 1 < argc) {
			o.shard_mb = atof(argv[++i]);
		} else if (strchr(a, '=')) {
			char key[64];
			snprintf(key, sizeof key, "%.*s", (int)(strchr(a, '=') - a), a);
			json_error_t je;
			json_t *v = json_loads(strchr(a, '=') + 1, JSON_DECODE_ANY, &je);
			json_object_set_new(o.layout, key, v ? v : json_string(strchr(a, '=') + 1));
		} else {
			fprintf(stderr, "tool_tio: unknown argument '%s'\n", a);
			return 2;
		}
	}
	pp_err e = {0};
	tio_source *src = NULL;
	tio_sink *sink = NULL;
	pp_model_cfg m;
	int rc = tio_open_source(argv[1], argv[2], &src, &e);
	if (!rc)
		rc = tio_model_cfg(&src->meta, &m, &e);
	if (!rc && !strcmp(argv[3], "pp") && src->meta.tokenizer[0]) {
		char dir[PP_PATH_MAX];
		snprintf(dir, sizeof dir, "%s/tokenizer", argv[4]);
		rc = keep_tokenizer(&src->meta, dir, &e);
	}
	if (!rc) {
		o.model = &m;
		o.meta = &src->meta;
		o.tensors = src->tensors;
		o.n = src->n;
		rc = tio_open_sink(argv[3], argv[4], &o, &sink, &e);
	}
	tio_stats st;
	if (!rc)
		rc = tio_copy(src, sink, o.with_adam, NULL, &st, &e);
	if (!rc)
		printf("%d tensors, %lld elements, family %s\n", st.tensors, (long long)st.elements,
		       pp_family_name(m.family));
	else
		fprintf(stderr, "tool_tio: %s\n", e.msg);
	if (src)
		src->close(src);
	json_decref(o.layout);
	return rc ? (rc == PP_EUSAGE ? 2 : 1) : 0;
}
