/* Checkpoints: RUN/checkpoints/step_NNNNNNNN/ holding one HDF5 file per
 * shard and a manifest.json written last. See checkpoints-format/README.md.
 *
 * A checkpoint directory is complete when its manifest exists and every file
 * it lists has the recorded size and sha256. Saving writes into a temporary
 * directory, fsyncs every file and the directory, and renames it into place,
 * so a process killed mid-save leaves the previous checkpoint intact. */
#ifndef PP_CKPT_H
#define PP_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "../kernels/ops.h"

#define PP_CKPT_FORMAT "pp-checkpoint"
#define PP_CKPT_VERSION 1
#define PP_CKPT_MAXDIM 4
#define PP_CKPT_DATA_STATE 16

/* One tensor slice held by this shard. Host pointers; m and v may be NULL
 * when optimizer state is not saved or loaded. */
typedef struct {
	const char *name; /* Hugging Face name, e.g. model.layers.0.mlp.up_proj.weight */
	int ndim;
	int64_t shape[PP_CKPT_MAXDIM];        /* of this slice */
	int64_t global_shape[PP_CKPT_MAXDIM]; /* of the whole tensor */
	int64_t offset[PP_CKPT_MAXDIM];       /* where the slice starts in the whole */
	pp_real *param, *m, *v;
} ckpt_tensor;

typedef struct {
	long step;
	uint64_t rng[4];
	int n_data_state;
	uint64_t data_state[PP_CKPT_DATA_STATE]; /* owned by the data loader */
	const char *config_json;                 /* resolved config, saved as-is */
	/* this shard's coordinates in the mesh and the mesh size */
	int pp_rank, tp_rank, dp_rank, pp_size, tp_size, dp_size;
	int n_tensors;
	ckpt_tensor *tensors;
} ckpt_state;

/* Saves s as RUN/checkpoints/step_<s->step> (single process: writes the
 * shard and the manifest), then deletes all but the newest `keep`
 * complete checkpoints (keep 0 keeps all). */
int ckpt_save(const char *run_dir, const ckpt_state *s, int keep, pp_err *e);

/* Finds the newest complete checkpoint under RUN/checkpoints. Returns 0 and
 * sets *step = -1 when there is none; incomplete directories are skipped. */
int ckpt_find_latest(const char *run_dir, char *dir, size_t dir_size, long *step, pp_err *e);

/* Verifies the manifest, versions, sizes and checksums of a checkpoint dir. */
int ckpt_verify(const char *dir, pp_err *e);

/* Reads the resolved config JSON saved in a checkpoint (caller frees). */
int ckpt_read_config(const char *dir, char **json_text, pp_err *e);

/* Loads into s: fills step, rng, data state, and every tensor of s->tensors
 * by name (m and v too when not NULL). A missing tensor, a shape mismatch
 * or a missing file is an error naming it. */
int ckpt_load(const char *dir, ckpt_state *s, pp_err *e);

#endif
