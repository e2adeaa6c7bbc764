#include "data.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/ops.h"
#include "rng.h"

/* A source fills whole sequences of T+1 tokens by global sequence index; the
 * loader walks indices dp_rank, dp_rank + dp_size, ... so every rank reads
 * its own share and the position is one counter. */
typedef struct {
	const char *name;
	int (*sequence)(pp_data *d, uint64_t index, int T, int *seq, pp_err *e); /* seq (T+1) */
	void (*close)(pp_data *d);
} data_source;

struct pp_data {
	const data_source *src;
	int dp_rank, dp_size;
	uint64_t pos; /* sequences this rank has consumed */
	int *seq;     /* (T+1) scratch */
	int seq_cap;
	/* synthetic */
	uint64_t key;
	int vocab;
	int *next; /* (vocab) successor of each token */
};

/* Synthetic data: a seeded first-order Markov chain. Each token is followed
 * by a fixed successor with probability 0.9 (a seeded permutation) and by a
 * uniform random token otherwise, so a model can learn it: the loss floor is
 * about 0.9 * -ln(0.9) + 0.1 * ln(vocab / 0.1), far below ln(vocab). */
#define SYNTH_FOLLOW 0.9

static int synthetic_sequence(pp_data *d, uint64_t index, int T, int *seq, pp_err *e)
{
	(void)e;
	uint64_t base = index * (uint64_t)(2 * (T + 1) + 1);
	seq[0] = (int)rng_below(d->key, base, (uint64_t)d->vocab);
	for (int t = 1; t <= T; t++) {
		uint64_t i = base + 2 * (uint64_t)t;
		seq[t] = rng_uniform(d->key, i) < SYNTH_FOLLOW
				 ? d->next[seq[t - 1]]
				 : (int)rng_below(d->key, i + 1, (uint64_t)d->vocab);
	}
	return 0;
}

static void synthetic_close(pp_data *d) { free(d->next); }

static const data_source synthetic = {"synthetic", synthetic_sequence, synthetic_close};

int data_open(pp_data **out, const pp_config *c, const char *split, int dp_rank, int dp_size,
	      pp_err *e)
{
	*out = NULL;
	if (strcmp(c->data, "synthetic") != 0)
		return pp_errorf(e, PP_EUSAGE,
				 "data '%s': this pp reads data=synthetic only; token datasets come with "
				 "pp-tokenize",
				 c->data);
	pp_data *d = calloc(1, sizeof *d);
	d->src = &synthetic;
	d->dp_rank = dp_rank;
	d->dp_size = dp_size;
	d->vocab = c->model.vocab_size;
	/* the chain is shared by both splits; the samples drawn from it are not */
	uint64_t chain = rng_key(c->seed, "synthetic/chain");
	d->key = rng_key(c->seed, strcmp(split, "val") == 0 ? "synthetic/val" : "synthetic/train");
	d->next = malloc((size_t)d->vocab * sizeof(int));
	for (int i = 0; i < d->vocab; i++)
		d->next[i] = i;
	for (int i = d->vocab - 1; i > 0; i--) { /* Fisher-Yates */
		int j = (int)rng_below(chain, (uint64_t)i, (uint64_t)i + 1);
		int t = d->next[i];
		d->next[i] = d->next[j];
		d->next[j] = t;
	}
	*out = d;
	return 0;
}

int data_next(pp_data *d, int n_seq, int T, int *tokens, int *targets, pp_err *e)
{
	if (d->seq_cap < T + 1) {
		free(d->seq);
		d->seq = malloc((size_t)(T + 1) * sizeof(int));
		d->seq_cap = T + 1;
	}
	for (int b = 0; b < n_seq; b++) {
		uint64_t index = d->pos * (uint64_t)d->dp_size + (uint64_t)d->dp_rank;
		int rc = d->src->sequence(d, index, T, d->seq, e);
		if (rc)
			return rc;
		memcpy(tokens + (size_t)b * T, d->seq, (size_t)T * sizeof(int));
		memcpy(targets + (size_t)b * T, d->seq + 1, (size_t)T * sizeof(int));
		d->pos++;
	}
	return 0;
}

int data_get_state(const pp_data *d, uint64_t *state, int max)
{
	if (max < 1)
		return 0;
	state[0] = d->pos;
	return 1;
}

int data_set_state(pp_data *d, const uint64_t *state, int n, pp_err *e)
{
	if (n < 1)
		return pp_errorf(e, PP_ERUNTIME, "data position missing from the checkpoint");
	d->pos = state[0];
	return 0;
}

void data_rewind(pp_data *d) { d->pos = 0; }

void data_close(pp_data *d)
{
	if (!d)
		return;
	if (d->src->close)
		d->src->close(d);
	free(d->seq);
	free(d);
}
