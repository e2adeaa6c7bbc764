/* Decoding: a KV cache for a stage holding every layer, its cached
 * forward, and the products' weights stored for decoding. */
#ifndef PP_KVCACHE_H
#define PP_KVCACHE_H

#include "model.h"

/* A KV cache for a stage holding every layer without tp: B slots, one per
 * sequence, each with its own length, holding per layer the keys and
 * values of positions [0, len[slot]) ((B,Tmax,Hkv*D) per layer, on the
 * stage's device), and the scratch of one cached forward of up to `rows`
 * new rows. A forward runs a range of slots [slot0, slot0 + nseq) with n new
 * tokens each, every sequence at its own position: a prompt prefilled into
 * one slot (nseq 1, n its length) while the others wait, or one token for
 * each of nseq slots of different lengths (a ragged batch step). Positions
 * run to Tmax <= max_seq_len (a sliding window still keeps every position:
 * the kernel skips the old). */
typedef struct {
	const pp_ops *ops;
	int B, Tmax, rows;
	int *len;           /* (B) host: positions cached per slot */
	int slot0, nseq, n; /* the forward kv_cache_tokens set; n is 0 after it */
	size_t kv_bytes;    /* of k and v together */
	int layers;
	size_t pos_bytes; /* of one position's keys (or values) in one layer */
	/* in the compute type but stat (pp_real) */
	pp_act *k, *v;                                 /* (L,B,Tmax,Hkv*D) */
	pp_act *x[2], *h, *qkv, *att, *mid, *up, *act; /* (rows, ...) scratch */
	pp_real *stat;                                 /* (2*rows) norm statistics */
	pp_act *last;     /* (keep_cap,C) each sequence's last `keep` new rows */
	pp_act *logits;   /* (nseq,keep,V) after stage_forward_cached */
	int keep;         /* new rows per sequence whose logits the next forward gives */
	int keep_cap;     /* rows last and logits hold (B at first) */
	int width, vocab; /* C and V of those rows */
	/* on the device and on the host: the positions of the nseq sequences'
	 * first new tokens, then their (nseq,n) new tokens */
	int *dev, *host;
	moe_acts moe; /* the MoE layers' buffers (one set serves every layer) */
	moe_scratch moe_sc;
	lora_scratch lora; /* the adapters' (rows of them) */
	bool graphs;       /* record the step of one token per sequence (never with
			     * experts, whose routing is read on the host) */
	bool warm;   /* that step ran eagerly, for these slots, since the last other forward */
	void *graph; /* that recording, once made */
	int graph_slot0, graph_nseq; /* the slots of the step warm and graph are for */
} pp_kv_cache;

/* graphs: record the cached forward of one new token per sequence as a
 * backend graph, once that step has run eagerly, and replay it afterwards
 * for the same slots, where the backend has graphs. rows: the most new rows
 * (nseq * n) one forward takes. */
int kv_cache_create(pp_kv_cache *c, const pp_stage *s, int B, int Tmax, int rows, bool graphs,
		    pp_err *e);
void kv_cache_free(pp_kv_cache *c);

/* The next n new tokens of the nseq sequences in slots slot0.., tokens
 * (nseq,n) host ints: checked against the vocabulary and each slot's room,
 * and copied to the device with the slots' positions. */
int kv_cache_tokens(const pp_stage *s, pp_kv_cache *c, int slot0, int nseq, const int *tokens,
		    int n, pp_err *e);

/* The next forward gives the logits of each sequence's last `keep` new
 * rows (1 <= keep <= n), (nseq,keep,V) in c->logits, instead of its last
 * row's alone; after it keep is 1 again. Call after kv_cache_tokens. The
 * buffers grow to nseq * keep rows where they hold fewer (an error: memory),
 * which drops a graph recorded for them. For scoring given text
 * (pp-eval). */
int kv_cache_keep(pp_kv_cache *c, int keep, pp_err *e);

/* Empties slot (a new sequence starts there). */
void kv_cache_reset(pp_kv_cache *c, int slot);
/* Moves the sequence in slot `from` to slot `to` (its keys, values and
 * length), so that the busy slots stay contiguous; `from` is left empty. */
void kv_cache_move(pp_kv_cache *c, int from, int to);
/* Copies the sequence in slot `from` to slot `to` (its keys, values and
 * length): a shared prefix that several continuations go on from. */
void kv_cache_copy(pp_kv_cache *c, int from, int to);

/* Forward of the tokens set by kv_cache_tokens, sequence b at positions
 * len[slot0+b]..+n-1: appends their keys and values to the cache, leaves
 * the logits of each sequence's last new token in c->logits (nseq,V) on the
 * device (its last `keep` tokens' after kv_cache_keep) and advances the
 * slots' lengths. The same layer code as
 * stage_forward; only attention reads the cache. With n == 1 it only issues
 * ops that read the tokens and the positions from the device, so one
 * recorded graph serves every such step of the same slots after the first
 * (c->graphs); any other forward drops the recording, and the step after it
 * runs eagerly again. */
int stage_forward_cached(pp_stage *s, pp_kv_cache *c, pp_err *e);

/* Where a product's weights may already be stored in a form decoding reads
 * (a GGUF file's blocks). get, for parameter p (rows of a product, in pp's
 * layout), gives the format (PP_WEIGHTS_*, or -1 for none) and, when out
 * is not NULL, writes its rows so stored there (pp_weights_bytes of them). */
typedef struct {
	int (*get)(void *ctx, const pp_param *p, int *fmt, void *out, pp_err *e);
	void *ctx;
} stage_stored;

/* Stores the weights of every matrix product (attention, MLP, head) for the
 * products of decoding (ops pack_weight and matmul_packed); the forwards
 * then read those. A product whose parameters all have one stored format
 * in `stored` (may be NULL) takes those bytes as they are; the others are
 * made from the compute copy as fmt (PP_WEIGHTS_F32: the compute copy
 * itself). Errors: a backend without packed products, a width the format
 * does not take (naming the tensor), or memory. For decoding only:
 * training reads the master weights. */
int stage_pack_weights(pp_stage *s, int fmt, const stage_stored *stored, pp_err *e);
/* Drops the stored weights: the forwards read the compute copy again. */
void stage_unpack_weights(pp_stage *s);

#endif
