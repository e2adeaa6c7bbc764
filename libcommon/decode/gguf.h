/* Decoding straight from a GGUF file (pp-decode --ckpt FILE.gguf): the
 * model, config and tokenizer as pp-ckpt import would make them, and the
 * products' weights as the file stores them (Q8_0, Q4_0 and Q4_1 blocks,
 * bf16), read without expanding them. */
#ifndef PP_DECODE_GGUF_H
#define PP_DECODE_GGUF_H

#include <stdbool.h>

#include "../config/config.h"
#include "../formats/tensorio.h"
#include "../model/kvcache.h"

/* Whether path is a GGUF file (its magic). */
bool decode_is_gguf(const char *path);

/* Opens the file (*src, closed by the caller) and makes its config: the
 * model's, the tokenizer it carries (in a directory the source removes
 * when closed), then the overrides. */
int decode_gguf_open(const char *path, int n_overrides, char *const *overrides, pp_config *cfg,
		     tio_source **src, pp_err *e);

/* The file's stored forms for stage_pack_weights. */
stage_stored decode_gguf_stored(tio_source *src);

#endif
