/* Moving a model between pp checkpoints and other formats, one whole tensor
 * at a time (pp-ckpt import, export and convert share one loop, tio_copy).
 *
 * A source lists its tensors up front and reads any one of them, as fp32
 * in pp's names and layout; a sink is opened with that list and takes the
 * tensors in the list's order. Either may need only a few tensors' memory:
 * a source reads (or maps) one tensor at a time, a sink writes each as it
 * comes (a format whose layout is known from the list alone writes at
 * computed offsets).
 *
 * pp's names are the Hugging Face ones (model.layers.N.self_attn.q_proj.weight,
 * transformer.h.N.attn.c_attn.weight, ...), and its layout is row-major with
 * every linear weight (out, in): GPT-2's Conv1D weights too, which Hugging
 * Face stores (in, out). q_proj and k_proj are in Hugging Face's rotate-half
 * order (Meta's checkpoints, llama.cpp and llama2.c use interleaved pairs).
 * Tied embeddings are one tensor (the embedding; no lm_head.weight). */
#ifndef PP_TENSORIO_H
#define PP_TENSORIO_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/error.h"
#include "../config/config.h"

#define TIO_MAXDIM 4

/* How a source stores a tensor (what it was dequantized from). */
typedef enum { TIO_F32, TIO_F16, TIO_BF16, TIO_Q8_0, TIO_Q4_0, TIO_Q4_1, TIO_F64 } tio_dtype;
const char *tio_dtype_name(tio_dtype t); /* "F32", "F16", "BF16", "Q8_0", ... */

typedef struct {
	char name[128]; /* pp's (Hugging Face) name */
	int ndim;
	int64_t shape[TIO_MAXDIM]; /* pp's layout, row-major */
	tio_dtype dtype;           /* as the source stores it */
	bool adam;                 /* the source holds AdamW m and v for it too (pp checkpoints) */
	bool state; /* training state, not a parameter (FP8 scaling, stage_fp8_meta): never
		     * optimizer state, listed after the parameters, and only a sink
		     * that takes_state takes it */
} tio_tensor;

/* The product of t's dims. */
int64_t tio_numel(const tio_tensor *t);
/* Bytes of t as its source stores it (dtype), 0 when its rows are not whole
 * blocks. */
uint64_t tio_raw_bytes(const tio_tensor *t);

/* What travels with the tensors. */
typedef struct {
	json_t *model;  /* pp's "model" object (family, d_model, ...); owned by the source */
	json_t *config; /* a whole resolved pp config where the source has one (a pp
			 * checkpoint), else NULL; owned by the source */
	long step;      /* a pp checkpoint's step, else 0 */
	/* a tokenizer file that tok_load reads (SentencePiece .model,
	 * tokenizer.json, or vocab.json with merges.txt beside it), written by
	 * the source where it carried one; "" when none */
	char tokenizer[PP_PATH_MAX];
	bool add_bos; /* the tokenizer's text begins with BOS (GGUF: tokenizer.ggml.add_bos_token) */
	/* a pp checkpoint's training state, carried by pp-ckpt convert so that
	 * the converted run resumes where the original would */
	bool has_state;
	uint64_t rng[4];
	int n_data_state;
	uint64_t data_state[16];
} tio_meta;

typedef struct tio_source tio_source;
struct tio_source {
	const char *format; /* "pp", "safetensors", "gguf" */
	tio_meta meta;
	int n;
	tio_tensor *tensors;
	/* Tensor i into out (tio_numel floats): group "params", or "adam_m" /
	 * "adam_v" where tensors[i].adam. */
	int (*read)(tio_source *s, int i, const char *group, float *out, pp_err *e);
	/* NULL, or tensor i's parameters as the source stores them
	 * (tensors[i].dtype; rows in pp's order) into out (tio_raw_bytes):
	 * for readers that take stored blocks as they are (pp-decode) */
	int (*read_raw)(tio_source *s, int i, void *out, pp_err *e);
	/* NULL, or after the last read: whether the source as a whole was sound
	 * (a pp checkpoint's files against their sha256, hashed meanwhile) */
	int (*check)(tio_source *s, pp_err *e);
	void (*close)(tio_source *s); /* frees s too */
	void *impl;
};

typedef struct tio_sink tio_sink;
struct tio_sink {
	/* The next tensor of the list the sink was opened with (in its order):
	 * its parameters, and m and v (both or neither) where the sink keeps
	 * optimizer state. */
	int (*put)(tio_sink *k, const tio_tensor *t, const float *param, const float *m,
		   const float *v, pp_err *e);
	/* Writes what remains and puts the output in place (write to a
	 * temporary name, fsync, rename). */
	int (*finish)(tio_sink *k, pp_err *e);
	/* Removes whatever the sink wrote (after an error) and frees it. finish
	 * frees it too, on success or failure. */
	void (*abort)(tio_sink *k);
	bool takes_state; /* it keeps the tensors that are training state (a pp checkpoint) */
	void *impl;
};

/* What a sink needs to know before the first tensor. */
typedef struct {
	const pp_model_cfg *model;
	const tio_meta *meta; /* the source's: config, step, tokenizer */
	const tio_tensor *tensors;
	int n;
	tio_dtype dtype; /* the element type to write where the format has a choice */
	bool with_adam;  /* keep optimizer state (pp checkpoints) */
	json_t *layout; /* pp checkpoints: pp, tp, dp, shard_optimizer, virtual_stages... overrides */
	double shard_mb; /* safetensors: split into files of at most this many MiB (0: one file) */
	int llama2c_version; /* llama2.c: 0 (run.c's), 1 or 2 (runq.c's, int8 groups) */
} tio_sink_opts;

/* meta->model (a pp "model" object) as pp_model_cfg, checked and with
 * defaults filled as a config's model is. */
int tio_model_cfg(const tio_meta *meta, pp_model_cfg *out, pp_err *e);

/* ---- the formats: sources ---- */
int tio_open_pp(const char *ckpt_or_run_dir, tio_source **out, pp_err *e);
int tio_open_safetensors(const char *dir_or_file, tio_source **out, pp_err *e);
int tio_open_gguf(const char *path, tio_source **out, pp_err *e);

/* PEFT's adapter_model.safetensors in dir, as the adapters of the LoRA run
 * of config c (its lora.* settings; names less PEFT's base_model.model.):
 * every adapter c gives, of its shape, and nothing else. meta.config is c's
 * (a copy), meta.tokenizer c->tokenizer. */
int tio_open_peft(const char *dir, const pp_config *c, tio_source **out, pp_err *e);

/* ---- the formats: sinks ---- */
int tio_sink_pp(const char *run_dir, const tio_sink_opts *o, tio_sink **out, pp_err *e);
int tio_sink_safetensors(const char *dir, const tio_sink_opts *o, tio_sink **out, pp_err *e);
int tio_sink_gguf(const char *path, const tio_sink_opts *o, tio_sink **out, pp_err *e);
int tio_sink_llama2c(const char *path, const tio_sink_opts *o, tio_sink **out, pp_err *e);
/* PEFT's adapter_model.safetensors and adapter_config.json in a directory:
 * the tensors are a LoRA run's adapters (lora.h's adapters view) */
int tio_sink_peft(const char *dir, const tio_sink_opts *o, tio_sink **out, pp_err *e);

/* By name: "pp", "safetensors", "gguf", "llama2c" (sinks only). PP_EUSAGE
 * for an unknown name. */
int tio_open_source(const char *format, const char *path, tio_source **out, pp_err *e);
int tio_open_sink(const char *format, const char *path, const tio_sink_opts *o, tio_sink **out,
		  pp_err *e);

/* ---- the loop ---- */
typedef struct {
	int tensors;
	int64_t elements;
	double bytes_read, seconds; /* bytes moved as fp32: 4 per element and group */
	size_t peak_buffer_bytes;   /* the largest tensor buffers held at once */
} tio_stats;

/* Every tensor of src, in order, into sink (m and v too with with_adam),
 * then the source's check and the sink's finish; on an error, abort. progress: a line per tensor and an ETA
 * on stderr when not NULL ("import", "export", "convert"). */
int tio_copy(tio_source *src, tio_sink *sink, bool with_adam, const char *progress, tio_stats *st,
	     pp_err *e);

#endif
