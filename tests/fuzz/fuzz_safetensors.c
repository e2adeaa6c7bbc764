/* libFuzzer target: the safetensors reader (libcommon/formats/safetensors.c:
 * tio_open_safetensors, then every tensor's read) on arbitrary bytes,
 * written with a config.json into one temporary directory per process.
 *
 * Input: byte 0 flags, then the file.
 *   flags & 3   the config.json beside it: 0 llama, 1 llama with tied
 *               embeddings, 2 gpt2 (tied), 3 gpt2 untied; each a one-layer
 *               model of width 8 and 16 tokens (tests/fuzz/test_fuzz.sh exports
 *               the same models as seeds)
 *   flags & 4   open the file's path; else the directory
 *   flags & 8   sharded: a 2-byte little-endian length n, n bytes of
 *               model.safetensors.index.json, then the file, as
 *               model-00001-of-00001.safetensors
 *   flags & 16  PEFT's adapter_model.safetensors instead (tio_open_peft),
 *               the adapters of rank 2 on every projection of the llama
 *               model of flags & 3 = 0
 * Checks: an error has a message; a tensor read after a successful open
 * fills its buffer (ASan sees any overrun) and a second read gives the same
 * bytes. Built and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/config/config.h"
#include "../../libcommon/formats/lora.h"
#include "../../libcommon/formats/tensorio.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* tensorio.c's registry names every format; this target links one */
static int absent(pp_err *e) { return pp_errorf(e, PP_EUSAGE, "not in this target"); }
int tio_open_pp(const char *p, tio_source **out, pp_err *e)
{
	(void)p;
	*out = NULL;
	return absent(e);
}
int tio_open_gguf(const char *p, tio_source **out, pp_err *e)
{
	(void)p;
	*out = NULL;
	return absent(e);
}
int tio_sink_pp(const char *p, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	(void)p;
	(void)o;
	*out = NULL;
	return absent(e);
}
int tio_sink_gguf(const char *p, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	(void)p;
	(void)o;
	*out = NULL;
	return absent(e);
}

/* the PEFT sink's (formats/lora.c, not in this target) */
int tio_lora_settings(const tio_meta *meta, const tio_tensor *tensors, int n, tio_lora *l,
		      pp_err *e)
{
	(void)meta, (void)tensors, (void)n;
	l->targets = NULL;
	return absent(e);
}

static const char *const configs[4] = {
	"{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": "
	"8, "
	"\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
	"\"num_key_value_heads\": 1, \"vocab_size\": 16, \"max_position_embeddings\": 16, "
	"\"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false}",
	"{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 8, "
	"\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
	"\"vocab_size\": 16, \"max_position_embeddings\": 16, \"tie_word_embeddings\": true}",
	"{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, \"vocab_size\": "
	"16, "
	"\"n_positions\": 16, \"n_inner\": null}",
	"{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, \"vocab_size\": "
	"16, "
	"\"n_positions\": 16, \"tie_word_embeddings\": false}",
};

/* flags & 16: the LoRA run whose adapters the file holds (the seeds' too) */
static const char *const peft_config =
	"{\"model\": {\"family\": \"llama\", \"d_model\": 8, \"n_heads\": 2, \"n_kv_heads\": 1, "
	"\"d_ff\": 8, \"n_layers\": 1, \"vocab_size\": 16, \"max_seq_len\": 16, \"mlp\": "
	"\"swiglu\", \"norm\": \"rmsnorm\", \"norm_eps\": 1e-5, \"pos\": \"rope\", "
	"\"tied_embeddings\": false}, \"lora\": {\"rank\": 2}}";

static void put(const char *name, const void *p, size_t n)
{
	FILE *f = fopen(fuzz_file(name), "wb");
	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
		perror("fuzz_safetensors: writing a file");
		exit(2);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-safetensors");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const int flags = data[0];
	const uint8_t *body = data + 1;
	size_t n = size - 1;
	unlink(fuzz_file("model.safetensors"));
	unlink(fuzz_file("model.safetensors.index.json"));
	unlink(fuzz_file("model-00001-of-00001.safetensors"));
	unlink(fuzz_file("adapter_model.safetensors"));
	put("config.json", configs[flags & 3], strlen(configs[flags & 3]));
	const char *file = "model.safetensors";
	if (flags & 8) {
		if (n < 2)
			return 0;
		size_t len = (size_t)body[0] | (size_t)body[1] << 8;
		if (len > n - 2)
			return 0;
		put("model.safetensors.index.json", body + 2, len);
		body += 2 + len;
		n -= 2 + len;
		file = "model-00001-of-00001.safetensors";
	}
	if (flags & 16)
		file = "adapter_model.safetensors";
	put(file, body, n);

	pp_err e = {0};
	tio_source *s = NULL;
	const char *path = flags & 4 ? fuzz_file(flags & 8 ? "model.safetensors.index.json" : file)
				     : fuzz_file("");
	int rc;
	if (flags & 16) {
		pp_config c;
		if (pp_config_load_text(&c, peft_config, 0, NULL, &e))
			__builtin_trap(); /* the target's own config */
		rc = tio_open_peft(fuzz_file(""), &c, &s, &e);
		pp_config_free(&c);
	} else {
		rc = tio_open_safetensors(path, &s, &e);
	}
	if (rc) {
		if (!e.msg[0] || s)
			__builtin_trap(); /* an error without a message, or a source anyway */
		return 0;
	}
	for (int i = 0; i < s->n; i++) {
		const size_t numel = (size_t)tio_numel(&s->tensors[i]);
		float *a = malloc((numel + 1) * sizeof *a), *b = malloc((numel + 1) * sizeof *b);
		if (!a || !b)
			abort();
		int r1 = s->read(s, i, "params", a, &e), r2 = s->read(s, i, "params", b, &e);
		if (r1 != r2 || (!r1 && memcmp(a, b, numel * sizeof *a)))
			__builtin_trap(); /* reads of an unchanged file differ */
		free(a);
		free(b);
		if (s->read(s, i, "adam_m", NULL, &e) == 0)
			__builtin_trap(); /* safetensors has no optimizer state */
	}
	s->close(s);
	return 0;
}
