/* libFuzzer target: the GGUF reader (tio_open_gguf) on arbitrary files:
 * header, metadata, tensor infos, the model they describe and the tokenizer
 * it writes as a file. An error must name the file; a file that opens must
 * list tensors whose shapes fit the model, and each must dequantize. Built
 * and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/formats/tensorio.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The registry in tensorio.c names every format; this target links GGUF's. */
#define NOT_HERE(fn, ...)                                                                          \
	__attribute__((weak)) int fn(__VA_ARGS__, pp_err *e)                                       \
	{                                                                                          \
		return pp_errorf(e, PP_EUSAGE, "not in the fuzz build");                           \
	}
NOT_HERE(tio_open_pp, const char *p, tio_source **o)
NOT_HERE(tio_open_safetensors, const char *p, tio_source **o)
NOT_HERE(tio_sink_pp, const char *p, const tio_sink_opts *x, tio_sink **o)
NOT_HERE(tio_sink_safetensors, const char *p, const tio_sink_opts *x, tio_sink **o)
NOT_HERE(tio_sink_llama2c, const char *p, const tio_sink_opts *x, tio_sink **o)
NOT_HERE(tio_sink_peft, const char *p, const tio_sink_opts *x, tio_sink **o)

static char path[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-gguf");
	snprintf(path, sizeof path, "%s", fuzz_file("model.gguf"));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f))
		__builtin_trap();
	tio_source *s = NULL;
	pp_err e = {0};
	if (tio_open_gguf(path, &s, &e)) {
		if (!e.msg[0] || !strstr(e.msg, path))
			__builtin_trap(); /* an error must say where */
		return 0;
	}
	pp_model_cfg m;
	if (tio_model_cfg(&s->meta, &m, &e))
		__builtin_trap(); /* the reader checked it */
	for (int i = 0; i < s->n; i++) {
		const tio_tensor *t = &s->tensors[i];
		const int64_t n = tio_numel(t);
		/* at most 2 elements a byte (Q4: 32 in 18 bytes); norms of d_model */
		if (n < 1 || n > 2 * (int64_t)size || t->ndim < 1 || t->ndim > 2 ||
		    (strstr(t->name, "norm") && t->shape[t->ndim - 1] != m.d_model))
			__builtin_trap();
		float *out = malloc((size_t)n * sizeof(float));
		if (!out || s->read(s, i, "params", out, &e))
			__builtin_trap();
		free(out);
	}
	s->close(s);
	return 0;
}
