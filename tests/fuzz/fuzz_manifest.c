/* libFuzzer target: the checkpoint manifest parser (ckpt_read_manifest) on
 * arbitrary manifest.json contents, written into one temporary checkpoint
 * directory per process. A manifest that parses must describe what the
 * parser promises: files sorted and distinct, tensors sorted and found by
 * name, every shard in a listed file and inside its tensor, the shards of
 * each tensor covering it exactly, and (format version 2) every optimizer
 * range inside its block. Built and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/ckpt/ckpt.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-manifest");
	snprintf(path, sizeof path, "%s", fuzz_file("manifest.json"));
	return 0;
}

/* format version 2 (optimizer files) added the oldest readable version and
 * the optimizer ranges */
#ifdef PP_CKPT_VERSION_OLDEST
#define PP_CKPT_VERSION_OLDEST_IS_DEFINED
#else
#define PP_CKPT_VERSION_OLDEST PP_CKPT_VERSION
#endif

/* The block (offset, shape) lies inside the tensor; its element count. */
static unsigned __int128 inside(const ckpt_tensor_info *t, const int64_t *offset,
				const int64_t *shape)
{
	unsigned __int128 v = 1;
	for (int d = 0; d < t->ndim; d++) {
		if (offset[d] < 0 || shape[d] < 1 || shape[d] > t->global_shape[d] ||
		    offset[d] > t->global_shape[d] - shape[d])
			__builtin_trap();
		v *= (uint64_t)shape[d];
	}
	return v;
}

static void check(const ckpt_manifest *m)
{
	if (m->version < PP_CKPT_VERSION_OLDEST || m->version > PP_CKPT_VERSION || m->step < 0 ||
	    m->n_files < 1 || m->pp_size < 1 || m->tp_size < 1 || m->dp_size < 1)
		__builtin_trap();
	for (int i = 1; i < m->n_files; i++)
		if (strcmp(m->files[i - 1].name, m->files[i].name) >= 0)
			__builtin_trap(); /* not sorted, or listed twice */
	for (int i = 0; i < m->n_tensors; i++) {
		const ckpt_tensor_info *t = &m->tensors[i];
		if (i && strcmp(m->tensors[i - 1].name, t->name) >= 0)
			__builtin_trap();
		if (ckpt_manifest_tensor(m, t->name) != t)
			__builtin_trap();
		if (t->ndim < 1 || t->ndim > PP_CKPT_MAXDIM || t->n_shards < 1)
			__builtin_trap();
		/* inside the tensor; the volumes add up (no overflow: each slice is
		 * inside, and they do not overlap) */
		unsigned __int128 total = 1, covered = 0;
		for (int d = 0; d < t->ndim; d++)
			total *= (uint64_t)t->global_shape[d];
		if (total > INT64_MAX)
			__builtin_trap(); /* its element count does not fit int64_t */
		for (int j = 0; j < t->n_shards; j++) {
			const ckpt_slice_info *s = &t->shards[j];
			if (s->file < 0 || s->file >= m->n_files)
				__builtin_trap();
			covered += inside(t, s->offset, s->shape);
		}
		if (covered != total)
			__builtin_trap();
#ifdef PP_CKPT_VERSION_OLDEST_IS_DEFINED
		/* optimizer ranges: inside their blocks, which are inside the tensor */
		for (int j = 0; j < t->n_ranges; j++) {
			const ckpt_range_info *r = &t->ranges[j];
			if (!t->adam || r->file < 0 || r->file >= m->n_files)
				__builtin_trap();
			unsigned __int128 v = inside(t, r->offset, r->shape);
			if (r->begin < 0 || r->begin >= r->end || (unsigned __int128)r->end > v ||
			    r->at < 0)
				__builtin_trap();
		}
#endif
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f)) {
		perror("fuzz_manifest: writing the manifest");
		exit(2);
	}
	ckpt_manifest m;
	pp_err e = {0};
	if (ckpt_read_manifest(fuzz_dir_path, &m, &e)) {
		if (!e.msg[0])
			__builtin_trap(); /* an error must say what is wrong */
		if (m.files || m.tensors || m.n_files || m.n_tensors)
			__builtin_trap(); /* a failed read leaves nothing to free */
		return 0;
	}
	check(&m);
	ckpt_manifest_free(&m);
	return 0;
}
