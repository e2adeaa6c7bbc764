/* Hugging Face checkpoints (safetensors + config.json) as a tensorio
 * sink (the format, and the reader: safetensors.c). The model goes into a
 * temporary directory beside the target, renamed into place once complete:
 * model.safetensors, or with shard_mb model-0000K-of-0000N.safetensors and
 * model.safetensors.index.json as transformers' save_pretrained shards;
 * config.json and generation_config.json (hfconfig.c); the tokenizer the
 * source carried. Every header is written at open (the tensor list fixes
 * every offset) and each tensor at its offset as it comes, converted to
 * the requested dtype (and GPT-2's Conv1D weights back to (in, out)). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/halffloat.h"
#include "../base/fsutil.h"
#include "../tok/tokenizer.h"
#include "fileio.h"
#include "hfconfig.h"
#include "lora.h"
#include "modeltable.h"
#include "safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this writer assumes a little-endian host"
#endif

typedef struct {
	char name[sizeof(((tio_tensor *)0)->name)];     /* Hugging Face's (= pp's) */
	char key[sizeof(((tio_tensor *)0)->name) + 32]; /* in the file (PEFT's prefixed) */
	int ndim;
	int64_t shape[TIO_MAXDIM]; /* Hugging Face's layout */
	bool transpose;            /* GPT-2 Conv1D: written (in, out) */
	int file;
	int64_t off, bytes; /* in the file */
	bool done;
} st_slot;

typedef struct {
	char dir[PP_PATH_MAX], tmp[PP_PATH_MAX + 16];
	int dtype; /* into dtypes */
	st_slot *slot;
	int n, next;
	int n_files;
	int *fd;
	json_t *config;
	const tio_meta *meta;
	int family, max_seq_len;
	unsigned char *buf;
	size_t cap;
	bool peft; /* PEFT's adapter_model.safetensors and adapter_config.json */
} st_sink;

static void shard_name(const st_sink *k, int i, char *buf, size_t n)
{
	if (k->peft)
		snprintf(buf, n, "adapter_model.safetensors");
	else if (k->n_files == 1)
		snprintf(buf, n, "model.safetensors");
	else
		snprintf(buf, n, "model-%05d-of-%05d.safetensors", i + 1, k->n_files);
}

static void sink_free(st_sink *k, bool remove_output)
{
	for (int i = 0; k->fd && i < k->n_files; i++)
		if (k->fd[i] >= 0)
			close(k->fd[i]);
	if (remove_output && k->tmp[0])
		fs_rm_rf(k->tmp);
	json_decref(k->config);
	free(k->fd);
	free(k->slot);
	free(k->buf);
	free(k);
}

static int sink_put(tio_sink *s, const tio_tensor *t, const float *param, const float *m,
		    const float *v, pp_err *e)
{
	(void)m;
	(void)v;
	st_sink *k = s->impl;
	int i = k->next < k->n && !strcmp(k->slot[k->next].name, t->name) ? k->next : -1;
	for (int j = 0; i < 0 && j < k->n; j++)
		if (!strcmp(k->slot[j].name, t->name))
			i = j;
	if (i < 0)
		return pp_errorf(e, PP_EUSAGE,
				 "%s was not in the tensor list the sink was opened with", t->name);
	st_slot *sl = &k->slot[i];
	if (sl->done)
		return pp_errorf(e, PP_EUSAGE, "%s given twice", t->name);
	const int64_t n = tio_numel(t);
	const int es = st_dtypes[k->dtype].size, tio = st_dtypes[k->dtype].tio;
	if (n * es != sl->bytes)
		return pp_errorf(e, PP_EUSAGE, "%s: %lld elements, %lld expected", t->name,
				 (long long)n, (long long)(sl->bytes / es));
	const void *data = param;
	if (tio != TIO_F32 || sl->transpose) {
		if ((size_t)sl->bytes > k->cap) {
			free(k->buf);
			k->cap = 0;
			if (!(k->buf = malloc((size_t)sl->bytes)))
				return pp_errorf(e, PP_ERUNTIME, "out of memory for %s", t->name);
			k->cap = (size_t)sl->bytes;
		}
		/* pp's (rows, cols) = (out, in); Conv1D is written (in, out) */
		const int64_t rows = sl->transpose ? t->shape[0] : 1, cols = n / (rows ? rows : 1);
		for (int64_t j = 0; j < n; j++) {
			const float x = sl->transpose ? param[(j % rows) * cols + j / rows]
						      : param[j];
			if (tio == TIO_F32) {
				memcpy(k->buf + 4 * j, &x, 4);
			} else {
				uint16_t h = tio == TIO_F16 ? f32_to_f16(x) : f32_to_bf16(x);
				memcpy(k->buf + 2 * j, &h, 2);
			}
		}
		data = k->buf;
	}
	char file[64], where[PP_PATH_MAX + 96];
	shard_name(k, sl->file, file, sizeof file);
	snprintf(where, sizeof where, "%s/%s", k->tmp, file);
	int rc = fio_pwrite(k->fd[sl->file], where, data, (size_t)sl->bytes, sl->off, e);
	if (!rc) {
		sl->done = true;
		k->next = i + 1;
	}
	return rc;
}

static int write_json(const char *dir, const char *name, const json_t *j, size_t flags, pp_err *e)
{
	char path[PP_PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (json_dump_file(j, path, flags | JSON_INDENT(2)))
		return pp_errorf(e, PP_ERUNTIME, "cannot write %s", path);
	return fs_fsync_path(path, e);
}

static int copy_file(const char *from, const char *dir, const char *name, pp_err *e)
{
	char *buf;
	size_t n;
	int rc = fs_read_file(from, &buf, &n, e);
	if (rc)
		return rc;
	char path[PP_PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", path, strerror(errno));
	else
		rc = fio_pwrite(fd, path, buf, n, 0, e);
	if (fd >= 0 && !rc && fsync(fd))
		rc = pp_errorf(e, PP_ERUNTIME, "fsync %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

/* The source's tokenizer as the directory's: tokenizer.model (and a
 * tokenizer_config.json saying how to use it), tokenizer.json, or GPT-2's
 * vocab.json + merges.txt. */
static int write_tokenizer(st_sink *k, pp_err *e)
{
	const char *from = k->meta ? k->meta->tokenizer : "";
	if (!from[0])
		return 0;
	pp_tokenizer *t = NULL;
	int rc = tok_load(&t, from, e);
	if (rc)
		return rc;
	json_t *tc = json_object();
	const int bos = tok_bos(t), eos = tok_eos(t);
	if (bos >= 0)
		json_object_set_new(tc, "bos_token", json_string(tok_piece(t, bos, NULL)));
	if (eos >= 0)
		json_object_set_new(tc, "eos_token", json_string(tok_piece(t, eos, NULL)));
	if (tok_piece_id(t, "<unk>", 5) >= 0)
		json_object_set_new(tc, "unk_token", json_string("<unk>"));
	json_object_set_new(tc, "add_bos_token", json_boolean(k->meta->add_bos));
	json_object_set_new(tc, "add_eos_token", json_false());
	json_object_set_new(tc, "model_max_length", json_integer(k->max_seq_len));
	json_object_set_new(tc, "clean_up_tokenization_spaces", json_false());
	if (!strcmp(tok_kind(t), "sentencepiece-bpe")) {
		json_object_set_new(tc, "tokenizer_class",
				    json_string(k->family == PP_FAMILY_GEMMA ? "GemmaTokenizer"
									     : "LlamaTokenizer"));
		json_object_set_new(tc, "legacy", json_true());
		rc = copy_file(from, k->tmp, "tokenizer.model", e);
	} else {
		json_t *j = json_load_file(from, 0, NULL);
		bool full = json_is_object(json_object_get(j, "model"));
		json_decref(j);
		if (full) {
			json_object_set_new(tc, "tokenizer_class",
					    json_string("PreTrainedTokenizerFast"));
			rc = copy_file(from, k->tmp, "tokenizer.json", e);
		} else { /* GPT-2's pair: merges.txt beside vocab.json */
			char merges[PP_PATH_MAX + 16];
			const char *slash = strrchr(from, '/');
			snprintf(merges, sizeof merges, "%.*smerges.txt",
				 slash ? (int)(slash + 1 - from) : 0, from);
			json_object_set_new(tc, "tokenizer_class", json_string("GPT2Tokenizer"));
			if (!(rc = copy_file(from, k->tmp, "vocab.json", e)))
				rc = copy_file(merges, k->tmp, "merges.txt", e);
		}
	}
	/* the chat template, where the tokenizer came with one beside it */
	char beside[PP_PATH_MAX + 32];
	const char *slash = strrchr(from, '/');
	snprintf(beside, sizeof beside, "%.*stokenizer_config.json",
		 slash ? (int)(slash + 1 - from) : 0, from);
	json_t *src = json_load_file(beside, 0, NULL);
	json_t *chat = json_object_get(src, "chat_template");
	if (json_is_string(chat))
		json_object_set(tc, "chat_template", chat);
	json_decref(src);
	if (!rc)
		rc = write_json(k->tmp, "tokenizer_config.json", tc, 0, e);
	json_decref(tc);
	tok_free(t);
	return rc;
}

static int sink_finish(tio_sink *s, pp_err *e)
{
	st_sink *k = s->impl;
	int rc = 0;
	for (int i = 0; i < k->n && !rc; i++)
		if (!k->slot[i].done)
			rc = pp_errorf(e, PP_EUSAGE, "the model's %s was not given",
				       k->slot[i].name);
	for (int i = 0; i < k->n_files && !rc; i++) {
		char name[64];
		shard_name(k, i, name, sizeof name);
		if (fsync(k->fd[i]))
			rc = pp_errorf(e, PP_ERUNTIME, "fsync %s/%s: %s", k->tmp, name,
				       strerror(errno));
	}
	if (!rc && k->peft)
		rc = write_json(k->tmp, "adapter_config.json", k->config, JSON_SORT_KEYS, e);
	else if (!rc)
		rc = write_json(k->tmp, "config.json", k->config, 0, e);
	json_t *gen = rc || k->peft ? NULL : hf_generation_config(k->config);
	if (!rc && gen)
		rc = write_json(k->tmp, "generation_config.json", gen, 0, e);
	json_decref(gen);
	if (!rc && k->n_files > 1) {
		json_t *map = json_object();
		int64_t total = 0;
		for (int i = 0; i < k->n; i++) {
			char name[64];
			shard_name(k, k->slot[i].file, name, sizeof name);
			json_object_set_new(map, k->slot[i].key, json_string(name));
			total += k->slot[i].bytes;
		}
		json_t *index = json_pack("{s{sI}so}", "metadata", "total_size", (json_int_t)total,
					  "weight_map", map);
		rc = write_json(k->tmp, "model.safetensors.index.json", index, JSON_SORT_KEYS, e);
		json_decref(index);
	}
	if (!rc && !k->peft)
		rc = write_tokenizer(k, e);
	if (!rc)
		rc = fs_fsync_path(k->tmp, e);
	if (!rc && !(rc = fs_rename_durable(k->tmp, k->dir, e)))
		k->tmp[0] = '\0'; /* in place: nothing to remove */
	sink_free(k, true);
	free(s);
	return rc;
}

static void sink_abort(tio_sink *s)
{
	sink_free(s->impl, true);
	free(s);
}

/* dir may be created, or be an empty directory (the rename replaces it) */
static int check_target(const char *dir, pp_err *e)
{
	struct stat st;
	if (lstat(dir, &st))
		return errno == ENOENT ? 0 : pp_errorf(e, PP_ERUNTIME, "%s", strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return pp_errorf(e, PP_EUSAGE, "exists and is not a directory");
	DIR *d = opendir(dir);
	if (!d)
		return pp_errorf(e, PP_ERUNTIME, "%s", strerror(errno));
	int entries = 0;
	for (struct dirent *de; (de = readdir(d));)
		entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return entries ? pp_errorf(e, PP_EUSAGE,
				   "exists and is not empty: export into a new directory")
		       : 0;
}

/* Every header, written now: the tensors go to consecutive offsets, and
 * with shard_mb to a new file once the next would pass it (HF's rule: a
 * tensor larger than a shard gets one of its own). */
static int lay_out(st_sink *k, double shard_mb, pp_err *e)
{
	const int64_t limit = shard_mb > 0 ? (int64_t)(shard_mb * 1048576.0) : 0;
	int64_t total = 0, in_file = 0;
	for (int i = 0; i < k->n; i++)
		total += k->slot[i].bytes;
	k->n_files = 1;
	for (int i = 0; i < k->n; i++) {
		st_slot *sl = &k->slot[i];
		if (limit && total > limit && in_file > 0 && in_file + sl->bytes > limit) {
			k->n_files++;
			in_file = 0;
		}
		sl->file = k->n_files - 1;
		sl->off = in_file; /* in the data section, for now */
		in_file += sl->bytes;
	}
	if (!(k->fd = malloc((size_t)k->n_files * sizeof *k->fd)))
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int f = 0; f < k->n_files; f++)
		k->fd[f] = -1;
	int rc = 0;
	for (int f = 0; f < k->n_files && !rc; f++) {
		json_t *h = json_pack("{s{ss}}", "__metadata__", "format", "pt");
		int64_t data = 0;
		for (int i = 0; i < k->n; i++) {
			const st_slot *sl = &k->slot[i];
			if (sl->file != f)
				continue;
			json_t *shape = json_array();
			for (int d = 0; d < sl->ndim; d++)
				json_array_append_new(shape, json_integer(sl->shape[d]));
			json_object_set_new(h, sl->key,
					    json_pack("{ss so s[II]}", "dtype",
						      st_dtypes[k->dtype].name, "shape", shape,
						      "data_offsets", (json_int_t)sl->off,
						      (json_int_t)(sl->off + sl->bytes)));
			data = sl->off + sl->bytes;
		}
		char *text = json_dumps(h, JSON_COMPACT);
		json_decref(h);
		if (!text)
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		size_t len = strlen(text), padded = (len + 7) / 8 * 8; /* data 8-byte aligned */
		unsigned char *head = malloc(8 + padded);
		if (!head) {
			free(text);
			return pp_errorf(e, PP_ERUNTIME, "out of memory");
		}
		for (int b = 0; b < 8; b++)
			head[b] = (unsigned char)((uint64_t)padded >> (8 * b));
		memcpy(head + 8, text, len);
		memset(head + 8 + len, ' ', padded - len);
		free(text);
		char name[64], path[PP_PATH_MAX + 96];
		shard_name(k, f, name, sizeof name);
		snprintf(path, sizeof path, "%s/%s", k->tmp, name);
		k->fd[f] = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (k->fd[f] < 0)
			rc = pp_errorf(e, PP_ERUNTIME, "cannot create %s: %s", path,
				       strerror(errno));
		if (!rc)
			rc = fio_pwrite(k->fd[f], path, head, 8 + padded, 0, e);
		if (!rc && ftruncate(k->fd[f], (off_t)(8 + padded + data)))
			rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", path, strerror(errno));
		free(head);
		for (int i = 0; i < k->n; i++)
			if (k->slot[i].file == f)
				k->slot[i].off += 8 + (int64_t)padded;
	}
	return rc;
}

/* PEFT's adapter_config.json for the adapters of o (lora.h) */
static int peft_config(const tio_sink_opts *o, json_t **out, pp_err *e)
{
	tio_lora l;
	int rc = tio_lora_settings(o->meta, o->tensors, o->n, &l, e);
	if (rc)
		return rc;
	*out = json_pack("{ss ss si sf sf so sb ss sb sb sb sn sn sn s{} s{} sb sn}", "peft_type",
			 "LORA", "task_type", "CAUSAL_LM", "r", l.rank, "lora_alpha", l.alpha,
			 "lora_dropout", l.dropout, "target_modules", l.targets, "use_rslora",
			 l.rslora, "bias", "none", "fan_in_fan_out", false, "init_lora_weights",
			 true, "inference_mode", true, "base_model_name_or_path", "modules_to_save",
			 "layers_to_transform", "rank_pattern", "alpha_pattern", "use_dora", false,
			 "revision");
	return *out ? 0 : pp_errorf(e, PP_ERUNTIME, "out of memory");
}

static int open_sink(const char *dir, const tio_sink_opts *o, bool peft, tio_sink **out, pp_err *e)
{
	*out = NULL;
	st_sink *k = calloc(1, sizeof *k);
	tio_sink *s = calloc(1, sizeof *s);
	if (!k || !s) {
		free(k);
		free(s);
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	}
	int rc = 0;
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	if (len == 0 || len >= sizeof k->dir)
		rc = pp_errorf(e, PP_EUSAGE, "output directory '%s': empty or too long", dir);
	else
		snprintf(k->dir, sizeof k->dir, "%.*s", (int)len, dir);
	k->dtype = st_dtype_of_tio(o->dtype);
	k->meta = o->meta;
	k->peft = peft;
	k->family = o->model->family;
	k->max_seq_len = o->model->max_seq_len;
	if (!rc && (o->dtype != TIO_F32 && o->dtype != TIO_F16 && o->dtype != TIO_BF16))
		rc = pp_errorf(e, PP_EUSAGE, "safetensors export writes F32, F16 or BF16, not %s",
			       tio_dtype_name(o->dtype));
	if (!rc && o->with_adam)
		rc = pp_errorf(e, PP_EUSAGE,
			       "safetensors holds parameters only (no optimizer state)");
	if (!rc && !peft)
		rc = modeltable_check(o->model, o->tensors, o->n, e);
	int bos = -1, eos = -1;
	if (!rc && !peft && o->meta && o->meta->tokenizer[0]) {
		pp_tokenizer *t = NULL;
		if (!(rc = tok_load(&t, o->meta->tokenizer, e))) {
			bos = tok_bos(t);
			eos = tok_eos(t);
			tok_free(t);
		}
	}
	static const char *const torch_dtype[] = {
		[TIO_F32] = "float32", [TIO_F16] = "float16", [TIO_BF16] = "bfloat16"};
	hf_export x = {rc ? "" : torch_dtype[o->dtype], bos, eos};
	if (!rc)
		rc = peft ? peft_config(o, &k->config, e)
			  : hf_config_from_model(o->model, &x, &k->config, e);
	if (!rc && !(k->slot = calloc((size_t)o->n + 1, sizeof *k->slot)))
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 0; !rc && i < o->n; i++) {
		const tio_tensor *t = &o->tensors[i];
		st_slot *sl = &k->slot[k->n++];
		snprintf(sl->name, sizeof sl->name, "%s", t->name);
		snprintf(sl->key, sizeof sl->key, "%s%s", peft ? "base_model.model." : "", t->name);
		sl->transpose = o->model->family == PP_FAMILY_GPT && t->ndim == 2 &&
				st_gpt2_conv1d(t->name);
		sl->ndim = t->ndim;
		for (int d = 0; d < t->ndim; d++)
			sl->shape[d] = t->shape[sl->transpose ? t->ndim - 1 - d : d];
		sl->bytes = tio_numel(t) * st_dtypes[k->dtype].size;
	}
	if (!rc)
		rc = check_target(k->dir, e);
	if (!rc)
		rc = fio_make_parent(k->dir, e);
	if (!rc) {
		snprintf(k->tmp, sizeof k->tmp, "%s.tmp-XXXXXX", k->dir);
		if (!mkdtemp(k->tmp)) {
			rc = pp_errorf(e, PP_ERUNTIME, "cannot create a directory beside %s: %s",
				       k->dir, strerror(errno));
			k->tmp[0] = '\0';
		} else if (chmod(k->tmp, 0755)) { /* mkdtemp's 0700 would stay after the rename */
			rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", k->tmp, strerror(errno));
		}
	}
	if (!rc)
		rc = lay_out(k, peft ? 0 : o->shard_mb, e);
	if (rc) {
		sink_free(k, true);
		free(s);
		return pp_err_prefix(e, "%s", dir);
	}
	s->impl = k;
	s->put = sink_put;
	s->finish = sink_finish;
	s->abort = sink_abort;
	*out = s;
	return 0;
}

int tio_sink_safetensors(const char *dir, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	return open_sink(dir, o, false, out, e);
}

int tio_sink_peft(const char *dir, const tio_sink_opts *o, tio_sink **out, pp_err *e)
{
	return open_sink(dir, o, true, out, e);
}
