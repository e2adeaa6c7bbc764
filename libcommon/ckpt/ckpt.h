/* Checkpoints: RUN/checkpoints/step_NNNNNNNN/ holding one HDF5 file per
 * shard (plus, under ZeRO-1, one optimizer file per rank) and a
 * manifest.json written last. See checkpoints-format/README.md.
 *
 * A checkpoint directory is complete when its manifest exists and every file
 * it lists has the recorded size and sha256. Saving writes into a temporary
 * directory, fsyncs every file and the directory, and renames it into place,
 * so a process killed mid-save leaves the previous checkpoint intact. */
#ifndef PP_CKPT_H
#define PP_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "../../kernels/ops.h"
#include "../base/error.h"

#define PP_CKPT_FORMAT "pp-checkpoint"
/* Format versions this pp reads. A checkpoint is written as version 1 unless
 * it has per-dp optimizer files (ZeRO-1), which version 2 added, or shards
 * per expert-parallel rank (ep > 1), which version 3 added. */
#define PP_CKPT_VERSION_OLDEST 1
#define PP_CKPT_VERSION        3
#define PP_CKPT_MAXDIM         4
#define PP_CKPT_DATA_STATE     16

/* The names of training state that is not a parameter: FP8 delayed
 * scaling's per layer (global layer; -1: the head), model.layers.N.fp8_meta
 * and lm_head.fp8_meta (checkpoints-format/README.md). ckpt_fp8_layer: whether
 * name is one, and of which layer. */
void ckpt_fp8_name(int layer, char *name, size_t size);
bool ckpt_fp8_layer(const char *name, int *layer);

/* One tensor slice held by this shard. Host pointers; m and v may be NULL
 * when optimizer state is not saved or loaded (both or neither).
 * A slice is one rectangular block of the whole tensor. global_shape all
 * zero means "not sliced": the slice is the whole tensor (offset 0).
 * Across the shards of one checkpoint every element of a tensor is saved
 * exactly once: a tensor replicated over tp ranks is passed by tp rank 0
 * only. */
typedef struct {
	const char *name; /* Hugging Face name, e.g. model.layers.0.mlp.up_proj.weight */
	int ndim;
	int64_t shape[PP_CKPT_MAXDIM];        /* of this slice */
	int64_t global_shape[PP_CKPT_MAXDIM]; /* of the whole tensor */
	int64_t offset[PP_CKPT_MAXDIM];       /* where the slice starts in the whole */
	pp_real *param, *m, *v;
	bool optional; /* loading: absent from the checkpoint, param is left as it is */
} ckpt_tensor;

/* Part of one tensor's AdamW state, as one data-parallel rank holds it under
 * ZeRO-1 (a range of its stage's flat buffer). The part is n_ranges element
 * ranges [begin[i], end[i]) of a block of the tensor (shape, global_shape,
 * offset: as for ckpt_tensor), counted in the block's row-major order,
 * ascending and disjoint; m and v hold the ranges' elements one range after
 * another. The block is the tensor's (pp, tp) slice, or the whole tensor
 * where the rank's part of it is not one rectangle (a fused projection). */
typedef struct {
	const char *name;
	int ndim;
	int64_t shape[PP_CKPT_MAXDIM];
	int64_t global_shape[PP_CKPT_MAXDIM];
	int64_t offset[PP_CKPT_MAXDIM];
	int n_ranges;
	const int64_t *begin, *end;
	const pp_real *m, *v;
} ckpt_optim_part;

typedef struct {
	long step;
	uint64_t rng[4];
	int n_data_state;
	uint64_t data_state[PP_CKPT_DATA_STATE]; /* owned by the data loader */
	const char *config_json;                 /* resolved config, saved as-is */
	/* a tokenizer file (with merges.txt beside a vocab.json) that shard
	 * pp000-tp000 keeps a copy of in /tokenizer, so that the checkpoint
	 * decodes text on its own; NULL or "" for none */
	const char *tokenizer;
	/* this shard's coordinates in the mesh and the mesh size; ep_size 0
	 * counts as 1 (no expert parallelism) */
	int pp_rank, tp_rank, dp_rank, pp_size, tp_size, dp_size;
	int ep_rank, ep_size;
	int n_tensors;
	ckpt_tensor *tensors;
	/* ZeRO-1 (format version 2): AdamW state is saved per dp rank, each
	 * rank's parts by ckpt_write_optim_shard, and the shard holds parameters
	 * only (the tensors' m and v are NULL when saving). */
	bool optim_per_dp;
	int n_optim;
	ckpt_optim_part *optim;
} ckpt_state;

/* Saves s as RUN/checkpoints/step_<s->step> (single process: writes the
 * shard, the optimizer file when s->optim_per_dp, and the manifest), then
 * deletes all but the newest `keep` complete checkpoints (keep 0 keeps
 * all). */
int ckpt_save(const char *run_dir, const ckpt_state *s, int keep, pp_err *e);

/* Finds the newest complete checkpoint under RUN/checkpoints. Returns 0 and
 * sets *step = -1 when there is none; incomplete directories are skipped. */
int ckpt_find_latest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e);

/* The newest published step_N directory, complete or not. Saving publishes a
 * directory only once it is whole, so a defect there is damage that resuming
 * must report rather than silently fall back to an older step. */
int ckpt_find_newest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e);

/* PP_EUSAGE when run_dir holds a checkpoint already, naming its newest step:
 * "RUN already holds checkpoint step N; WHO writes new runs only". A tool
 * that makes a run (pp-init -o, pp-ckpt convert and import) writes step 0,
 * which a resume would pass over for the newer step. */
int ckpt_refuse_existing(const char *run_dir, const char *who, pp_err *e);

/* The steps of RUN/checkpoints/step_* (sound or not), newest first, in a
 * malloc'd array (none: NULL and 0). */
int ckpt_list_steps(const char *run_dir, long **steps, int *n, pp_err *e);

/* path: a checkpoint directory (it holds manifest.json), or a run directory
 * (its newest sound checkpoint, with a warning on stderr naming any newer
 * one that fails verification) into dir. */
int ckpt_resolve(const char *path, char *dir, size_t n, pp_err *e);

/* RUN/checkpoints/step_NNNNNNNN, the directory of a step's checkpoint. */
int ckpt_step_dir(const char *run_dir, long step, char *buf, size_t n, pp_err *e);

/* The checkpoint to resume from: step want of RUN/checkpoints (want >= 0;
 * an error when it is missing or fails ckpt_verify), or the newest one that
 * passes ckpt_verify (want < 0): the newer ones that fail are skipped, each
 * named with its reason in skipped ("step_N fails verification (why); ...").
 * *step = -1 when
 * there is no checkpoint; PP_ERUNTIME when there are only damaged ones. */
int ckpt_find_resume(const char *run_dir, long want, char *dir, size_t dir_size, long *step,
		     char *skipped, size_t skipped_size, pp_err *e);

/* Verifies the manifest (format, version, the mesh's files, every tensor's
 * blocks tiling it exactly once), and every file: its size and sha256, its
 * attributes, state, config and datasets against the manifest. */
int ckpt_verify(const char *dir, pp_err *e);
/* The same, going on past each problem to report every one to fn (one
 * line each; the first also in e), and with values every tensor's
 * parameters and AdamW state read back and checked for NaN and Inf. Returns
 * the number of problems: 0 means sound. */
int ckpt_verify_each(const char *dir, bool values, void (*fn)(void *ctx, const char *msg),
		     void *ctx, pp_err *e);

/* The tokenizer a checkpoint keeps (shard pp000-tp000's /tokenizer), written
 * as its files into out_dir (which must exist); path gets the one tok_load
 * takes, or "" when the checkpoint keeps none. */
int ckpt_read_tokenizer(const char *dir, const char *out_dir, char *path, size_t n, pp_err *e);

/* Reads the resolved config JSON saved in a checkpoint (caller frees). */
int ckpt_read_config(const char *dir, char **json_text, pp_err *e);

/* Loads into s: fills step, rng, data state, and every tensor of s->tensors
 * by name (m and v too when not NULL), assembled from whichever files hold
 * the requested slice: shards, and optimizer files for m and v. Any saved
 * layout loads into any other (pp, tp, dp, ZeRO-1 or not). A missing
 * tensor, a shape mismatch or a missing file is an error naming it. The
 * ckpt_optim_part fields of s are not used. */
int ckpt_load(const char *dir, ckpt_state *s, pp_err *e);

/* The step, rng and data state (s's shard's /state, as ckpt_load reads
 * them), without loading tensors or hashing files. */
int ckpt_read_state(const char *dir, ckpt_state *s, pp_err *e);

/* ---- multi-rank save, and the pieces of ckpt_save ----
 * ckpt_save(run, s, keep) is ckpt_begin + ckpt_write_shard (+
 * ckpt_write_optim_shard) + ckpt_commit in one process. With a pp x tp x dp
 * mesh:
 *   rank 0:                 ckpt_begin(run, step, tmp, ...); share tmp
 *   dp rank 0 of each (pp, tp): ckpt_write_shard(tmp, s)
 *   under ZeRO-1, every rank:   ckpt_write_optim_shard(tmp, s)
 *   barrier, then rank 0:   ckpt_commit(run, tmp, step, keep)
 * Without ZeRO-1 the shard holds params, m and v, and dp ranks other than 0
 * write nothing (their copies are identical). With expert parallelism the
 * first ep dp ranks of each (pp, tp) each write a shard (pp, tp, ep): their
 * experts, and on ep rank 0 the rest. */

/* Creates RUN/checkpoints (mkdir -p) and an empty temporary directory
 * RUN/checkpoints/.tmp-step_NNNNNNNN-PID, returned in tmp_dir. Removes stale
 * .tmp-* and .trash-* directories left by processes no longer alive. */
int ckpt_begin(const char *run_dir, long step, char *tmp_dir, size_t tmp_size, pp_err *e);

/* Writes this process's shard file (s->pp_rank, s->tp_rank, and s->ep_rank
 * when s->ep_size > 1) into dir and fsyncs it. */
int ckpt_write_shard(const char *dir, const ckpt_state *s, pp_err *e);

/* Writes this rank's optimizer file (s->pp_rank, s->tp_rank, s->dp_rank)
 * holding s->optim into dir and fsyncs it (s->tensors is not used). Every
 * rank of the mesh writes one, possibly with no parts. */
int ckpt_write_optim_shard(const char *dir, const ckpt_state *s, pp_err *e);

/* Builds manifest.json from the files in tmp_dir (checking that every
 * pp x tp shard, and every pp x tp x dp optimizer file if there are any, is
 * there, that all have one version, and that every tensor's params, and its
 * m and v, are covered exactly once), fsyncs, renames tmp_dir to
 * RUN/checkpoints/step_NNNNNNNN (replacing an existing one safely) and
 * keeps the newest `keep` complete checkpoints plus this one (keep 0 keeps
 * all). */
int ckpt_commit(const char *run_dir, const char *tmp_dir, long step, int keep, pp_err *e);

/* The same one tensor at a time (pp-ckpt convert streams a model through
 * these): a shard file (this rank's (pp, tp); s's header: step, rng, data
 * state, config, ranks, optim_per_dp; s's tensors are not used) or, with
 * optim, its optimizer file (pp, tp, dp). put adds one tensor slice (params,
 * m and v when not NULL) to a shard, put_optim one part to an optimizer
 * file; close writes what remains, flushes and fsyncs; on any failure, and
 * on abort, the file is removed. Both free the writer. */
typedef struct ckpt_writer ckpt_writer;
int ckpt_writer_open(const char *dir, const ckpt_state *s, bool optim, ckpt_writer **w, pp_err *e);
int ckpt_writer_put(ckpt_writer *w, const ckpt_tensor *t, pp_err *e);
int ckpt_writer_put_optim(ckpt_writer *w, const ckpt_optim_part *p, pp_err *e);
int ckpt_writer_close(ckpt_writer *w, pp_err *e);
void ckpt_writer_abort(ckpt_writer *w);

/* File names inside a checkpoint directory: the (pp, tp) shard, or with
 * ep_rank >= 0 the (pp, tp, ep) one (version 3), and the per-rank optimizer
 * file (ZeRO-1, version 2). */
void ckpt_shard_name(char *buf, size_t size, int pp_rank, int tp_rank, int ep_rank);
void ckpt_optim_name(char *buf, size_t size, int pp_rank, int tp_rank, int dp_rank);

/* ---- reading the manifest (for pp-ckpt: list, inspect, reshard) ---- */
typedef struct {
	char name[64]; /* inside the checkpoint directory */
	int64_t bytes;
	char sha256[65];
} ckpt_file_info;

typedef struct {
	int file; /* index into ckpt_manifest.files */
	int64_t offset[PP_CKPT_MAXDIM], shape[PP_CKPT_MAXDIM];
	bool adam; /* the file holds m and v of this slice too */
} ckpt_slice_info;

/* One range of a tensor's m and v in an optimizer file: elements
 * [begin, end) of the block (offset, shape) in the block's row-major order,
 * stored at elements [at, at + end - begin) of the file's 1-d datasets
 * /adam_m/NAME and /adam_v/NAME. */
typedef struct {
	int file;
	int64_t offset[PP_CKPT_MAXDIM], shape[PP_CKPT_MAXDIM];
	int64_t begin, end, at;
} ckpt_range_info;

typedef struct {
	char *name;
	int ndim;
	int64_t global_shape[PP_CKPT_MAXDIM];
	bool adam; /* m and v saved too (in shards, optimizer files or both) */
	int n_shards;
	ckpt_slice_info *shards;
	int n_ranges;
	ckpt_range_info *ranges; /* grouped by file, in dataset order */
} ckpt_tensor_info;

typedef struct {
	int version;
	long step;
	int pp_size, tp_size, dp_size, ep_size;
	int n_files;
	ckpt_file_info *files; /* sorted by name */
	int n_tensors;
	ckpt_tensor_info *tensors; /* sorted by name */
} ckpt_manifest;

/* Parses and checks DIR/manifest.json (format, version, the files of the
 * mesh, slices and optimizer ranges inside their tensors, disjoint and
 * covering). Files are not opened. */
int ckpt_read_manifest(const char *dir, ckpt_manifest *m, pp_err *e);
void ckpt_manifest_free(ckpt_manifest *m);
/* The tensor called name, or NULL. */
const ckpt_tensor_info *ckpt_manifest_tensor(const ckpt_manifest *m, const char *name);

/* Every file the manifest m lists is in dir with its recorded size and
 * sha256 (the files hashed in parallel). Plain reads, no HDF5: a thread may
 * run it while another reads the checkpoint through HDF5. */
int ckpt_check_files(const char *dir, const ckpt_manifest *m, pp_err *e);

/* Whether the checkpoint holds AdamW state (m and v): for every tensor
 * (true) or none (false, a parameters-only checkpoint: an import, or
 * pp-ckpt convert --params-only); only some is an error. */
int ckpt_holds_optimizer(const ckpt_manifest *m, bool *holds, pp_err *e);

/* Reads a whole tensor, reassembled from its shards (and optimizer files for
 * m and v), into out (global_shape, row-major). group is "params", "adam_m"
 * or "adam_v". Checks the sizes of the files it reads, not their sha256
 * (ckpt_verify does that). */
int ckpt_read_tensor(const char *dir, const ckpt_manifest *m, const char *name, const char *group,
		     pp_real *out, pp_err *e);

#endif
