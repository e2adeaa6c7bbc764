/* Token data for training and evaluation. One interface, several sources:
 * "synthetic" (a seeded, learnable token stream), pp-tokens HDF5 datasets,
 * Megatron-LM indexed datasets and llm.c shards. Documents are packed into
 * windows and shuffled per epoch from the seed; a source is sharded over
 * the data ranks as the layout says (layout_seq_index) and its exact
 * (global) position is saved in checkpoints, so a resumed run sees the same batches bitwise. */
#ifndef PP_DATA_H
#define PP_DATA_H

#include <stdint.h>

#include "../base/error.h"
#include "../config/config.h"
#include "../config/layout.h"

typedef struct pp_data pp_data;

/* split is "train" or "val"; seqs: which sequences this rank reads (its
 * layout's). */
int data_open(pp_data **d, const pp_config *c, const char *split, const layout_seqs *seqs,
	      pp_err *e);
/* Fills tokens and targets, each (n_seq, T); targets[t] is the token after
 * tokens[t] (PP_IGNORE_INDEX where there is none). */
int data_next(pp_data *d, int n_seq, int T, int *tokens, int *targets, pp_err *e);
/* Position, for checkpoints: writes at most max words, returns the count. */
int data_get_state(const pp_data *d, uint64_t *state, int max);
int data_set_state(pp_data *d, const uint64_t *state, int n, pp_err *e);
/* Back to the start (evaluation walks the same validation batches each time). */
void data_rewind(pp_data *d);
void data_close(pp_data *d);

#endif
