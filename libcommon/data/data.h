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

/* A token file's documents one by one, in order (pp-eval --data): a
 * pp-tokens file's /val split when it has documents, else /train; the
 * other formats whole. Errors name the file. */
typedef struct data_docs data_docs;
int data_docs_open(data_docs **d, const char *path, pp_err *e);
uint64_t data_docs_count(const data_docs *d);
/* the file as messages name it (with the split of a pp-tokens file) */
const char *data_docs_name(const data_docs *d);
/* document i's tokens into *ids (realloc'd), their count in *n */
int data_docs_read(data_docs *d, uint64_t i, int **ids, size_t *n, pp_err *e);
void data_docs_close(data_docs *d);

#endif
