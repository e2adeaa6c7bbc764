/* Token data for training and evaluation. One interface, several sources:
 * "synthetic" (a seeded, learnable token stream), pp-tokens HDF5 datasets,
 * Megatron-LM indexed datasets and llm.c shards. A corpus is read as
 * windows of the stream of its documents (packing=false), as one document
 * per sequence (packing=false and a loss mask: instruction data), or as
 * whole documents packed into sequences (packing=true); the sequences are
 * shuffled per epoch from the seed; a source is sharded over the data
 * ranks as the layout says (layout_seq_index) and its exact (global)
 * position is saved in checkpoints, so a resumed run sees the same batches
 * bitwise. pp-config(5), "Reading token data", has the rules. */
#ifndef PP_DATA_H
#define PP_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/error.h"
#include "../config/config.h"
#include "../config/layout.h"

typedef struct pp_data pp_data;

/* split is "train" or "val"; seqs: which sequences this rank reads (its
 * layout's). packing=true with data that has no documents (synthetic,
 * llm.c shards) is an error (PP_EUSAGE). */
int data_open(pp_data **d, const pp_config *c, const char *split, const layout_seqs *seqs,
	      pp_err *e);
/* Fills tokens, targets and pos (may be NULL), each (n_seq, T).
 * targets[t] is the token after tokens[t] in its document, or
 * PP_IGNORE_INDEX: where there is none, where the loss mask leaves it out,
 * and in padding. pos[t] is the position of tokens[t] in its document:
 *   windows (packing=false, no mask): t; a window is one text, as
 *     attention sees it;
 *   one document per sequence (packing=false, a mask): t, padding too;
 *   packed (packing=true): from 0 at each document (or piece of a long
 *     one), 0 in padding; attention is to stay within a document.
 * Padding fills a sequence's tail with the EOS (or 0) as input. */
int data_next(pp_data *d, int n_seq, int T, int *tokens, int *targets, int *pos, pp_err *e);
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
/* Whether the file holds a loss mask (instruction data). */
bool data_docs_masked(const data_docs *d);
/* document i's tokens into *ids (realloc'd), their count in *n; with mask
 * (not NULL) and a file that holds one, its loss mask into *mask
 * (realloc'd; 1: a token that counts as a target) */
int data_docs_read(data_docs *d, uint64_t i, int **ids, uint8_t **mask, size_t *n, pp_err *e);
void data_docs_close(data_docs *d);

#endif
