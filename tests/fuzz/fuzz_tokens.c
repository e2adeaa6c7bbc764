/* libFuzzer target: the pp-tokens dataset reader (dataset.h) on arbitrary
 * bytes written to one temporary .h5 file per process: tokens_open (HDF5
 * open, then every check of the format), and on success the first and last
 * tokens, loss mask values (version 2: each 0 or 1, or an error) and
 * document offsets of each split, and reads past the end, which must
 * fail. HDF5 itself may reject the file (an error is fine); a crash, a
 * hang or a sanitizer report in pp's code is not. Built and run by
 * tests/fuzz/test_fuzz.sh, which tells reports inside libhdf5 itself (not built
 * with sanitizers; HDF5 bugs on corrupt files that pp does not validate
 * before calling HDF5) from pp's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/data/dataset.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WINDOW 64 /* tokens and offsets read at each end of a split */

static char path[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-tokens");
	snprintf(path, sizeof path, "%s", fuzz_file("fuzz.h5"));
	return 0;
}

static void read_split(tokens_file *f, int k)
{
	const tokens_info *m = tokens_get_info(f);
	uint64_t n_tok = m->tokens[k], n_off = m->docs[k] + 1;
	uint32_t tok[WINDOW];
	uint64_t off[WINDOW];
	pp_err e = {0};
	size_t n = n_tok < WINDOW ? (size_t)n_tok : WINDOW;
	/* a read may fail (a damaged chunk), but must say why */
	if (tokens_read(f, k, 0, n, tok, &e) && !e.msg[0])
		__builtin_trap();
	if (tokens_read(f, k, n_tok - n, n, tok, &e) && !e.msg[0])
		__builtin_trap();
	n = n_off < WINDOW ? (size_t)n_off : WINDOW;
	if (!tokens_read_offsets(f, k, 0, n, off, &e) && n && off[0] != 0)
		__builtin_trap(); /* tokens_open checked that doc_offsets starts at 0 */
	if (!tokens_read_offsets(f, k, n_off - n, n, off, &e) && n && off[n - 1] != n_tok)
		__builtin_trap(); /* ... and ends at the token count */
	uint8_t mask[WINDOW];
	n = n_tok < WINDOW ? (size_t)n_tok : WINDOW;
	for (int end = 0; end < 2; end++) {
		int rc = tokens_read_mask(f, k, end ? n_tok - n : 0, n, mask, &e);
		if (rc && !e.msg[0])
			__builtin_trap(); /* a failure says why */
		if (!m->has_mask && !rc)
			__builtin_trap(); /* version 1 has no mask */
		for (size_t i = 0; !rc && i < n; i++)
			if (mask[i] > 1)
				__builtin_trap(); /* values are checked as they are read */
	}
	/* past the end */
	if (!tokens_read(f, k, n_tok, 1, tok, &e) || !tokens_read(f, k, n_tok + 1, 0, tok, &e) ||
	    !tokens_read_offsets(f, k, n_off, 1, off, &e) ||
	    !tokens_read_mask(f, k, n_tok, 1, mask, &e))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp)) {
		perror("fuzz_tokens: writing the dataset");
		exit(2);
	}
	tokens_file *f;
	pp_err e = {0};
	if (tokens_open(&f, path, &e)) {
		if (!e.msg[0] || !strstr(e.msg, path))
			__builtin_trap(); /* an error must say what and where */
		return 0;
	}
	const tokens_info *m = tokens_get_info(f);
	if (m->vocab_size < 1 || m->bos_id < -1 || m->bos_id >= m->vocab_size || m->eos_id < -1 ||
	    m->eos_id >= m->vocab_size || m->n_sources < 0 || (m->n_sources && !m->sources))
		__builtin_trap();
	for (int i = 0; i < m->n_sources; i++)
		if (!m->sources[i])
			__builtin_trap();
	for (int k = 0; k < TOKENS_NSPLITS; k++)
		read_split(f, k);
	tokens_close(f);
	return 0;
}
