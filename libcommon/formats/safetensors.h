/* What the safetensors reader and writer share: the format's element
 * types, and GPT-2's names that differ from pp's layout. Internal to
 * safetensors.c and safetensors_write.c. */
#ifndef PP_FORMATS_SAFETENSORS_H
#define PP_FORMATS_SAFETENSORS_H

#include <stdbool.h>

#include "tensorio.h"

typedef struct {
	const char *name; /* "F32", "BF16", ... */
	int size;         /* bytes per element */
	int tio;          /* the tio_dtype pp reads it as, or -1 */
} st_dtype;

extern const st_dtype st_dtypes[];
extern const int st_n_dtypes;

/* index into st_dtypes, or -1 */
int st_dtype_of_tio(tio_dtype t);

bool st_ends_with(const char *s, const char *suffix);

/* GPT-2's Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj):
 * (in, out) in Hugging Face's files, (out, in) in pp */
bool st_gpt2_conv1d(const char *name);

#endif
