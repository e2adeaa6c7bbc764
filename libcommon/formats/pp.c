/* pp's own checkpoints as a tensorio source and sink. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fsutil.h"
#include "../ckpt/stage.h"
#include "../model/model.h"
#include "../parallel/gradsync.h"
#include "tensorio.h"

/* ---- source ------------------------------------------------------------------ */

typedef struct {
	char dir[PP_PATH_MAX + 64];
	ckpt_manifest m;
	char tok_dir[64]; /* the checkpoint's tokenizer, extracted; "" when none */
	/* the files' sha256 checked on a thread of its own while the tensors
	 * are read (plain reads beside the reader's HDF5 calls) */
	pthread_t hasher;
	bool hashing;
	int hash_rc;
	pp_err hash_err;
} pp_src;

static void *hash_files(void *arg)
{
	pp_src *p = arg;
	p->hash_rc = ckpt_check_files(p->dir, &p->m, &p->hash_err);
	return NULL;
}

/* The files' hashes: waits for the thread, once. */
static int src_check(tio_source *s, pp_err *e)
{
	pp_src *p = s->impl;
	if (p->hashing) {
		pthread_join(p->hasher, NULL);
		p->hashing = false;
		if (p->hash_rc && e)
			*e = p->hash_err;
	}
	return p->hash_rc;
}

/* Names in model order: digit runs compare as numbers (layers 2 before 10). */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			char *ea, *eb;
			unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
			if (x != y)
				return x < y ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

/* the parameters in natural order, then the training state */
static int cmp_tensor(const void *x, const void *y)
{
	const tio_tensor *a = x, *b = y;
	if (a->state != b->state)
		return a->state ? 1 : -1;
	return natural_cmp(a->name, b->name);
}

static int src_read(tio_source *s, int i, const char *group, float *out, pp_err *e)
{
	pp_src *p = s->impl;
	if (sizeof(pp_real) != sizeof(float))
		return pp_errorf(e, PP_EUSAGE, "tensor formats need the fp32 build of pp");
	return ckpt_read_tensor(p->dir, &p->m, s->tensors[i].name, group, (pp_real *)out, e);
}

static void src_close(tio_source *s)
{
	if (!s)
		return;
	pp_src *p = s->impl;
	if (p) {
		src_check(s, NULL);
		ckpt_manifest_free(&p->m);
		if (p->tok_dir[0])
			fs_rm_rf(p->tok_dir);
		free(p);
	}
	json_decref(s->meta.config);
	free(s->tensors);
	free(s);
}

int tio_open_pp(const char *path, tio_source **out, pp_err *e)
{
	*out = NULL;
	tio_source *s = calloc(1, sizeof *s);
	pp_src *p = calloc(1, sizeof *p);
	if (!s || !p) {
		free(s);
		free(p);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	s->format = "pp";
	s->impl = p;
	s->read = src_read;
	s->check = src_check;
	s->close = src_close;
	char *text = NULL;
	int rc = ckpt_resolve(path, p->dir, sizeof p->dir, e);
	if (!rc)
		rc = ckpt_read_manifest(p->dir, &p->m, e);
	if (!rc)
		rc = ckpt_read_config(p->dir, &text, e);
	if (!rc) {
		json_error_t je;
		s->meta.config = json_loads(text, 0, &je);
		s->meta.model = json_object_get(s->meta.config, "model");
		if (!json_is_object(s->meta.model))
			rc = pp_errorf(e, PP_ERUNTIME,
				       "checkpoint %s: its stored config has no model", p->dir);
	}
	free(text);
	if (!rc) { /* the training state (rng, data position) of shard pp000-tp000 */
		ckpt_state st = {0};
		rc = ckpt_read_state(p->dir, &st, e);
		s->meta.has_state = !rc;
		memcpy(s->meta.rng, st.rng, sizeof st.rng);
		s->meta.n_data_state = st.n_data_state;
		memcpy(s->meta.data_state, st.data_state, sizeof st.data_state);
	}
	if (!rc) {
		s->meta.step = p->m.step;
		/* the checkpoint's own copy of its tokenizer, else the config's file */
		snprintf(p->tok_dir, sizeof p->tok_dir, "/tmp/pp-tokenizer.XXXXXX");
		if (!mkdtemp(p->tok_dir))
			rc = pp_errorf(e, PP_ERUNTIME, "cannot make a temporary directory: %s",
				       strerror(errno));
		else
			rc = ckpt_read_tokenizer(p->dir, p->tok_dir, s->meta.tokenizer,
						 sizeof s->meta.tokenizer, e);
		const char *tk = json_string_value(json_object_get(s->meta.config, "tokenizer"));
		struct stat st;
		if (!rc && !s->meta.tokenizer[0] && tk && *tk && stat(tk, &st) == 0)
			snprintf(s->meta.tokenizer, sizeof s->meta.tokenizer, "%s", tk);
		s->n = p->m.n_tensors;
		s->tensors = calloc((size_t)s->n + 1, sizeof *s->tensors);
		if (!s->tensors)
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	for (int i = 0; !rc && i < s->n; i++) {
		const ckpt_tensor_info *t = &p->m.tensors[i];
		tio_tensor *d = &s->tensors[i];
		snprintf(d->name, sizeof d->name, "%s", t->name);
		d->ndim = t->ndim;
		for (int k = 0; k < t->ndim && k < TIO_MAXDIM; k++)
			d->shape[k] = t->global_shape[k];
		d->dtype = TIO_F32;
		d->adam = t->adam;
		int layer;
		d->state = ckpt_fp8_layer(t->name, &layer);
	}
	if (!rc)
		qsort(s->tensors, (size_t)s->n, sizeof *s->tensors, cmp_tensor);
	if (!rc && pthread_create(&p->hasher, NULL, hash_files, p) != 0)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot start a thread to hash %s", p->dir);
	p->hashing = !rc;
	if (rc) {
		src_close(s);
		return pp_err_prefix(e, "%s", path);
	}
	*out = s;
	return 0;
}

/* ---- sink: a checkpoint in any layout, one tensor at a time ----------------------- */

/* One (pp, tp, ep) rank of the target layout: its chunks' parameter tables
 * and its files (the shard; under ZeRO-1, on ep rank 0, the (pp, tp)
 * group's optimizer files, one per dp rank). */
typedef struct {
	int pp_rank, tp_rank, ep_rank;
	pp_stage *chunks; /* v, described only */
	ckpt_writer *shard;
	ckpt_writer **optim; /* dp, or NULL */
} pp_rank_files;

typedef struct {
	char run_dir[PP_PATH_MAX];
	char tmp[PP_PATH_MAX + 128];
	char tok_dir[PP_PATH_MAX + 32]; /* RUN_DIR/tokenizer when this sink made it */
	pp_config cfg;
	int pp, tp, dp, ep, v;
	bool zero;      /* ZeRO-1: AdamW state in per-dp optimizer files */
	bool with_adam; /* optimizer state kept (else parameters only) */
	long step;
	pp_rank_files *ranks; /* pp * tp * ep: ((pp_rank * tp) + tp_rank) * ep + ep_rank */
	char **expected;      /* the names the model's ranks save, sorted */
	bool *seen;
	int n_expected;
	pp_real *block, *bm, *bv, *part_m, *part_v; /* scratch: a block, an optimizer part */
	int64_t *begin, *end;
	size_t cap_block, cap_ranges;
} pp_sink;

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void sink_free(pp_sink *k, bool remove_tmp)
{
	for (int r = 0; k->ranks && r < k->pp * k->tp * k->ep; r++) {
		pp_rank_files *f = &k->ranks[r];
		ckpt_writer_abort(f->shard);
		for (int d = 0; f->optim && d < k->dp; d++)
			ckpt_writer_abort(f->optim[d]);
		free(f->optim);
		for (int c = 0; f->chunks && c < k->v; c++)
			stage_free(&f->chunks[c]);
		free(f->chunks);
	}
	free(k->ranks);
	if (remove_tmp && k->tmp[0])
		fs_rm_rf(k->tmp);
	if (remove_tmp && k->tok_dir[0])
		fs_rm_rf(k->tok_dir);
	for (int i = 0; i < k->n_expected; i++)
		free(k->expected[i]);
	free(k->expected);
	free(k->seen);
	free(k->block);
	free(k->bm);
	free(k->bv);
	free(k->part_m);
	free(k->part_v);
	free(k->begin);
	free(k->end);
	pp_config_free(&k->cfg);
	free(k);
}

/* room for n floats in each scratch buffer, and m ranges */
static int reserve(pp_sink *k, size_t n, size_t m, pp_err *e)
{
	if (n > k->cap_block) {
		pp_real **b[] = {&k->block, &k->bm, &k->bv, &k->part_m, &k->part_v};
		for (size_t i = 0; i < sizeof b / sizeof *b; i++) {
			free(*b[i]);
			if (!(*b[i] = malloc(n * sizeof(pp_real))))
				return pp_errorf(e, PP_ERUNTIME,
						 "out of memory for a block of %zu elements", n);
		}
		k->cap_block = n;
	}
	if (m > k->cap_ranges) {
		free(k->begin);
		free(k->end);
		k->begin = malloc(m * sizeof *k->begin);
		k->end = malloc(m * sizeof *k->end);
		if (!k->begin || !k->end)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		k->cap_ranges = m;
	}
	return 0;
}

/* rows [r0, r0 + rows) x cols [c0, c0 + cols) of a (R, C) matrix: in place
 * when the rows are whole (and pp_real is float), else copied into dst */
static pp_real *block_of(pp_real *dst, const float *src, int64_t C, int64_t r0, int64_t rows,
			 int64_t c0, int64_t cols)
{
	if (sizeof(pp_real) == sizeof(float) && cols == C)
		return (pp_real *)(uintptr_t)(src + r0 * C);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j < cols; j++)
			dst[r * cols + j] = (pp_real)src[(r0 + r) * C + c0 + j];
	return dst;
}

/* tensor t of one (pp, tp, ep) rank's chunk st: its block into the shard,
 * and under ZeRO-1 the part of its m and v that each dp rank holding it
 * updates into that rank's file (every dp rank for what the ep group
 * shares, those of the same ep rank for experts) */
static int put_param(pp_sink *k, pp_rank_files *f, const pp_stage *st, const pp_param *p,
		     const tio_tensor *t, const float *param, const float *m, const float *v,
		     pp_err *e)
{
	ckpt_tensor c = {0};
	ckpt_saved_block(p, &c);
	const int64_t rows = c.shape[0], cols = c.shape[1], C = c.global_shape[1];
	const bool fused = p->n_blocks > 1 && k->tp > 1;
	if (tio_numel(t) != c.global_shape[0] * C || (t->ndim == 2 && t->shape[1] != C))
		return pp_errorf(e, PP_EUSAGE, "%s has %lld elements; the model's is %lld x %lld",
				 t->name, (long long)tio_numel(t), (long long)c.global_shape[0],
				 (long long)C);
	size_t n = (size_t)(rows * cols);
	int rc = reserve(k, n, 1, e);
	if (rc)
		return rc;
	pp_real *bp = block_of(k->block, param, C, c.offset[0], rows, c.offset[1], cols),
		*bm = NULL, *bv = NULL;
	const bool adam = k->with_adam && m && v;
	if (adam) {
		bm = block_of(k->bm, m, C, c.offset[0], rows, c.offset[1], cols);
		bv = block_of(k->bv, v, C, c.offset[0], rows, c.offset[1], cols);
	}
	if (!(fused && f->tp_rank != 0)) { /* a fused projection: tp rank 0 saves it whole */
		c.param = bp;
		if (adam && !k->zero) {
			c.m = bm;
			c.v = bv;
		}
		if ((rc = ckpt_writer_put(f->shard, &c, e)))
			return rc;
	}
	const bool expert = stage_is_expert(st, p);
	ckpt_writer **optim = (f - f->ep_rank)->optim; /* ep rank 0 holds the group's files */
	for (int d = 0; adam && k->zero && d < k->dp; d++) {
		if (expert && d % k->ep != f->ep_rank)
			continue;
		optim_ranges or ;
		gradsync_ranges(st, true, k->dp, d, k->ep, & or);
		const size_t lo = or.lo[expert], hi = or.hi[expert];
		size_t max = ckpt_optim_max_ranges(p, lo, hi, fused);
		if (!max)
			continue;
		if ((rc = reserve(k, n, max, e)))
			return rc;
		int nr = ckpt_optim_ranges(p, lo, hi, fused, k->begin, k->end);
		size_t at = 0;
		for (int r = 0; r < nr; r++) {
			size_t len = (size_t)(k->end[r] - k->begin[r]);
			memcpy(k->part_m + at, bm + k->begin[r], len * sizeof(pp_real));
			memcpy(k->part_v + at, bv + k->begin[r], len * sizeof(pp_real));
			at += len;
		}
		ckpt_optim_part q = {.name = p->name,
				     .ndim = p->ndim,
				     .n_ranges = nr,
				     .begin = k->begin,
				     .end = k->end,
				     .m = k->part_m,
				     .v = k->part_v};
		memcpy(q.shape, c.shape, sizeof q.shape);
		memcpy(q.global_shape, c.global_shape, sizeof q.global_shape);
		memcpy(q.offset, c.offset, sizeof q.offset);
		if ((rc = ckpt_writer_put_optim(optim[d], &q, e)))
			return rc;
	}
	return 0;
}

/* FP8 scaling state of a layer (the head: layer < 0), whole: into the shard
 * of tp rank 0 (and ep rank 0) of the chunk that holds it, where the target
 * trains with delayed scaling; dropped where it does not. */
static int put_fp8(pp_sink *k, const tio_tensor *t, int layer, const float *param, pp_err *e)
{
	if (k->cfg.fp8.recipe != PP_FP8_DELAYED || (layer < 0 && !k->cfg.fp8.head))
		return 0;
	const int64_t cols = 1 + k->cfg.fp8.amax_history;
	if (t->ndim != 2 || t->shape[1] != cols)
		return pp_errorf(e, PP_EUSAGE,
				 "%s holds %lld amax values per tensor; fp8.amax_history is %d",
				 t->name, (long long)(t->ndim == 2 ? t->shape[1] - 1 : 0),
				 k->cfg.fp8.amax_history);
	int rc = 0;
	for (int r = 0; !rc && r < k->pp * k->tp * k->ep; r++) {
		pp_rank_files *f = &k->ranks[r];
		for (int c = 0; !rc && c < k->v && f->tp_rank == 0 && f->ep_rank == 0; c++) {
			const pp_stage *st = &f->chunks[c];
			if (layer >= 0 ? layer >= st->layer_begin && layer < st->layer_end
				       : st->last) {
				ckpt_tensor ct = {.name = t->name,
						  .ndim = 2,
						  .shape = {t->shape[0], t->shape[1]},
						  .param = (pp_real *)param};
				rc = ckpt_writer_put(f->shard, &ct, e);
			}
		}
	}
	return rc;
}

static int sink_put(tio_sink *s, const tio_tensor *t, const float *param, const float *m,
		    const float *v, pp_err *e)
{
	pp_sink *k = s->impl;
	int layer;
	if (t->state && ckpt_fp8_layer(t->name, &layer))
		return put_fp8(k, t, layer, param, e);
	char *key = (char *)t->name;
	char **hit = bsearch(&key, k->expected, (size_t)k->n_expected, sizeof *k->expected,
			     cmp_str);
	if (!hit)
		return pp_errorf(e, PP_EUSAGE, "%s is not a tensor of this %s model", t->name,
				 pp_family_name(k->cfg.model.family));
	bool *seen = &k->seen[hit - k->expected];
	if (*seen)
		return pp_errorf(e, PP_EUSAGE, "%s given twice", t->name);
	*seen = true;
	if (k->with_adam && (!m || !v))
		return pp_errorf(e, PP_EUSAGE, "%s comes without its optimizer state", t->name);
	int rc = 0;
	for (int r = 0; !rc && r < k->pp * k->tp * k->ep; r++) {
		pp_rank_files *f = &k->ranks[r];
		for (int c = 0; !rc && c < k->v; c++) {
			const pp_stage *st = &f->chunks[c];
			const pp_param *p = stage_find_param(st, t->name);
			if (p && ckpt_rank_saves(st, p) && ckpt_shard_holds(st, p))
				rc = put_param(k, f, st, p, t, param, m, v, e);
		}
	}
	return rc;
}

static int sink_finish(tio_sink *s, pp_err *e)
{
	pp_sink *k = s->impl;
	int rc = 0;
	for (int i = 0; i < k->n_expected && !rc; i++)
		if (!k->seen[i])
			rc = pp_errorf(e, PP_EUSAGE, "the model's %s was not given",
				       k->expected[i]);
	for (int r = 0; r < k->pp * k->tp * k->ep; r++) {
		pp_rank_files *f = &k->ranks[r];
		int rr = rc ? (ckpt_writer_abort(f->shard), 0) : ckpt_writer_close(f->shard, e);
		f->shard = NULL;
		rc = rc ? rc : rr;
		for (int d = 0; f->optim && d < k->dp; d++) {
			rr = rc ? (ckpt_writer_abort(f->optim[d]), 0)
				: ckpt_writer_close(f->optim[d], e);
			f->optim[d] = NULL;
			rc = rc ? rc : rr;
		}
	}
	if (!rc)
		rc = ckpt_commit(k->run_dir, k->tmp, k->step, 0, e);
	sink_free(k, rc != 0);
	free(s);
	return rc;
}

static void sink_abort(tio_sink *s)
{
	sink_free(s->impl, true);
	free(s);
}

/* path into dir/NAME (written whole, then renamed) */
static int copy_file(const char *path, const char *dir, char *out, size_t n, pp_err *e)
{
	char *buf = NULL, tmp[PP_PATH_MAX + 64];
	size_t len = 0;
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	snprintf(out, n, "%s/%s", dir, base);
	snprintf(tmp, sizeof tmp, "%s.tmp", out);
	int rc = fs_read_file(path, &buf, &len, e);
	FILE *f = rc ? NULL : fopen(tmp, "wb");
	if (!rc && (!f || fwrite(buf, 1, len, f) != len || fflush(f) || fsync(fileno(f))))
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
	if (f && fclose(f) && !rc)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
	if (!rc && rename(tmp, out) != 0)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot rename %s: %s", tmp, strerror(errno));
	if (rc)
		unlink(tmp);
	free(buf);
	return rc;
}

/* The source's tokenizer into RUN_DIR/tokenizer/ (with the merges.txt beside
 * a vocab.json and a tokenizer_config.json beside it), where the run's
 * config names it: a fixed place from which every later save copies it into
 * its checkpoint. */
static int keep_tokenizer(const char *run_dir, const char *tokenizer, char *out, size_t n,
			  pp_err *e)
{
	char dir[PP_PATH_MAX + 32], merges[PP_PATH_MAX + 32], ignore[PP_PATH_MAX + 64];
	snprintf(dir, sizeof dir, "%s/tokenizer", run_dir);
	int rc = fs_mkdir_p(dir, e);
	if (!rc)
		rc = copy_file(tokenizer, dir, out, n, e);
	const char *base = strrchr(tokenizer, '/') ? strrchr(tokenizer, '/') + 1 : tokenizer;
	struct stat st;
	if (!rc && !strcmp(base, "vocab.json")) {
		snprintf(merges, sizeof merges, "%.*smerges.txt", (int)(base - tokenizer),
			 tokenizer);
		rc = copy_file(merges, dir, ignore, sizeof ignore, e);
	}
	snprintf(merges, sizeof merges, "%.*stokenizer_config.json", (int)(base - tokenizer),
		 tokenizer);
	if (!rc && stat(merges, &st) == 0)
		rc = copy_file(merges, dir, ignore, sizeof ignore, e);
	return rc ? pp_err_prefix(e, "keeping the tokenizer in %s", run_dir) : 0;
}

/* The target config: the source's (or one around its model), the layout
 * keys over it, run_dir and the tokenizer. */
static int target_config(const char *run_dir, const tio_sink_opts *o, pp_config *c, pp_err *e)
{
	json_t *root = o->meta->config ? json_deep_copy(o->meta->config)
				       : json_pack("{sO}", "model", o->meta->model);
	json_object_del(root, "microbatches"); /* derived from the batch and the new dp */
	const char *key;
	json_t *val;
	json_object_foreach(o->layout, key, val) json_object_set(root, key, val);
	json_object_set_new(root, "run_dir", json_string(run_dir));
	char kept[PP_PATH_MAX + 64];
	if (o->meta->tokenizer[0]) {
		int rc = keep_tokenizer(run_dir, o->meta->tokenizer, kept, sizeof kept, e);
		if (rc) {
			json_decref(root);
			return rc;
		}
		json_object_set_new(root, "tokenizer", json_string(kept));
	}
	if (!o->meta->config) /* a model from elsewhere: its own numbers, no data yet */
		json_object_set_new(root, "data", json_string("synthetic"));
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	int rc = text ? pp_config_from_json(c, text, e)
		      : pp_errorf(e, PP_ERUNTIME, "out of memory");
	free(text);
	return rc;
}

int tio_sink_pp(const char *run_dir, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	*out = NULL;
	/* a step written beside a newer one would be passed over by a resume */
	int rc = ckpt_refuse_existing(run_dir, "pp-ckpt", e);
	if (rc)
		return rc;
	pp_sink *k = calloc(1, sizeof *k);
	tio_sink *s = calloc(1, sizeof *s);
	if (!k || !s) {
		free(k);
		free(s);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	snprintf(k->run_dir, sizeof k->run_dir, "%s", run_dir);
	k->with_adam = o->with_adam;
	k->step = o->meta->step;
	struct stat st;
	snprintf(k->tok_dir, sizeof k->tok_dir, "%s/tokenizer", run_dir);
	if (!o->meta->tokenizer[0] || stat(k->tok_dir, &st) == 0)
		k->tok_dir[0] = '\0'; /* none made here: nothing to take back */
	rc = target_config(run_dir, o, &k->cfg, e);
	if (!rc) {
		k->pp = k->cfg.pp;
		k->tp = k->cfg.tp;
		k->dp = k->cfg.dp;
		k->ep = k->cfg.ep;
		k->v = k->cfg.virtual_stages;
		k->zero = k->cfg.shard_optimizer && k->dp > 1;
		if (k->cfg.fsdp > 1) { /* cut as an fsdp run saves: AdamW state per fsdp rank */
			k->dp = k->cfg.fsdp;
			k->zero = true;
		}
		k->ranks = calloc((size_t)(k->pp * k->tp * k->ep), sizeof *k->ranks);
		if (!k->ranks)
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	/* every rank's chunks, described, and the names they save */
	int cap = 0;
	for (int r = 0; !rc && r < k->pp * k->tp * k->ep; r++) {
		pp_rank_files *f = &k->ranks[r];
		f->pp_rank = r / k->ep / k->tp;
		f->tp_rank = r / k->ep % k->tp;
		f->ep_rank = r % k->ep;
		if (!(f->chunks = calloc((size_t)k->v, sizeof *f->chunks)))
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		/* the ranks of the first ep group hold one copy of everything */
		pp_layout lay;
		if (!rc)
			rc = layout_build(
				&lay, &k->cfg,
				layout_rank_of(&k->cfg, f->pp_rank, f->ep_rank, f->tp_rank), e);
		for (int c = 0; !rc && c < k->v; c++) {
			stage_spec sp = stage_spec_of(&k->cfg, &lay, c);
			sp.B = sp.T = sp.n_slots = 1;
			sp.recompute = PP_RECOMPUTE_NONE;
			sp.split_backward = false;
			sp.no_grad = true;
			if ((rc = stage_describe(&f->chunks[c], &k->cfg.model, &sp, e)))
				break;
			const pp_stage *st = &f->chunks[c];
			for (int i = 0; i < st->n_params; i++) {
				if (!ckpt_rank_saves(st, &st->params[i]))
					continue;
				if (k->n_expected == cap) {
					cap = cap ? 2 * cap : 256;
					char **x = realloc(k->expected, (size_t)cap * sizeof *x);
					if (!x) {
						rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
						break;
					}
					k->expected = x;
				}
				k->expected[k->n_expected++] = strdup(st->params[i].name);
			}
		}
	}
	if (!rc) { /* one name per tensor */
		qsort(k->expected, (size_t)k->n_expected, sizeof *k->expected, cmp_str);
		int n = 0;
		for (int i = 0; i < k->n_expected; i++) {
			if (n && !strcmp(k->expected[n - 1], k->expected[i]))
				free(k->expected[i]);
			else
				k->expected[n++] = k->expected[i];
		}
		k->n_expected = n;
		if (!(k->seen = calloc((size_t)n + 1, sizeof *k->seen)))
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	if (!rc)
		rc = ckpt_begin(run_dir, k->step, k->tmp, sizeof k->tmp, e);
	char *json = rc ? NULL : pp_config_dump(&k->cfg);
	for (int r = 0; !rc && r < k->pp * k->tp * k->ep; r++) {
		pp_rank_files *f = &k->ranks[r];
		ckpt_state h = {.step = k->step,
				.config_json = json,
				.tokenizer = k->cfg.tokenizer,
				.pp_rank = f->pp_rank,
				.tp_rank = f->tp_rank,
				.ep_rank = f->ep_rank,
				.pp_size = k->pp,
				.tp_size = k->tp,
				.dp_size = k->dp,
				.ep_size = k->ep,
				.optim_per_dp = k->zero && k->with_adam};
		if (o->meta->has_state) {
			memcpy(h.rng, o->meta->rng, sizeof h.rng);
			h.n_data_state = o->meta->n_data_state;
			memcpy(h.data_state, o->meta->data_state, sizeof h.data_state);
		} else {
			h.rng[0] = k->cfg.seed; /* as pp-init writes a step-0 checkpoint */
			h.n_data_state = 1;
		}
		rc = ckpt_writer_open(k->tmp, &h, false, &f->shard, e);
		const bool files = h.optim_per_dp && f->ep_rank == 0;
		if (!rc && files && !(f->optim = calloc((size_t)k->dp, sizeof *f->optim)))
			rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
		for (int d = 0; !rc && files && d < k->dp; d++) {
			h.dp_rank = d;
			h.ep_rank = d % k->ep; /* as the trainer's rank d writes it */
			rc = ckpt_writer_open(k->tmp, &h, true, &f->optim[d], e);
		}
	}
	free(json);
	if (rc) {
		sink_free(k, true);
		free(s);
		return rc;
	}
	k->zero = k->zero && k->with_adam;
	s->impl = k;
	s->takes_state = true;
	s->put = sink_put;
	s->finish = sink_finish;
	s->abort = sink_abort;
	*out = s;
	return 0;
}
