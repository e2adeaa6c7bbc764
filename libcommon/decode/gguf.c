/* Decoding straight from a GGUF file (gguf.h): its config, tokenizer and
 * weights through the GGUF tensorio source (formats/stageload.h), and its blocks as the products'
 * stored weights. */
#include "gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool decode_is_gguf(const char *path)
{
	char magic[4];
	FILE *f = fopen(path, "rb");
	bool yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
	if (f)
		fclose(f);
	return yes;
}

int decode_gguf_open(const char *path, int n_overrides, char *const *overrides, pp_config *cfg,
		     tio_source **src, pp_err *e)
{
	int rc = tio_open_gguf(path, src, e);
	if (rc)
		return rc;
	const tio_meta *m = &(*src)->meta;
	json_t *root = json_pack("{sOss}", "model", m->model, "data", "synthetic");
	if (root && m->tokenizer[0])
		json_object_set_new(root, "tokenizer", json_string(m->tokenizer));
	char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	rc = text ? pp_config_load_text(cfg, text, n_overrides, overrides, e)
		  : pp_errorf(e, PP_ERUNTIME, "out of memory");
	free(text);
	if (rc) {
		(*src)->close(*src);
		*src = NULL;
	}
	return rc;
}

/* the source tensor of a whole parameter, by name; -1 when there is none */
static int tensor_of(const tio_source *src, const pp_param *p)
{
	for (int i = 0; i < src->n; i++)
		if (!strcmp(src->tensors[i].name, p->name))
			return tio_numel(&src->tensors[i]) == (int64_t)p->n ? i : -1;
	return -1;
}

/* stage_stored.get: a parameter's blocks (or bf16) as the file stores them */
static int stored_get(void *ctx, const pp_param *p, int *fmt, void *out, pp_err *e)
{
	tio_source *src = ctx;
	const int t = tensor_of(src, p);
	*fmt = -1;
	if (t < 0 || !src->read_raw || !tio_raw_bytes(&src->tensors[t]))
		return 0;
	switch (src->tensors[t].dtype) {
	case TIO_Q8_0:
		*fmt = PP_WEIGHTS_Q8_0;
		break;
	case TIO_Q4_0:
		*fmt = PP_WEIGHTS_Q4_0;
		break;
	case TIO_Q4_1:
		*fmt = PP_WEIGHTS_Q4_1;
		break;
	case TIO_BF16:
		*fmt = PP_WEIGHTS_BF16;
		break;
	default:
		return 0;
	}
	return out ? src->read_raw(src, t, out, e) : 0;
}

stage_stored decode_gguf_stored(tio_source *src) { return (stage_stored){stored_get, src}; }
