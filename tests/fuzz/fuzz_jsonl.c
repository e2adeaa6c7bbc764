/* libFuzzer target: pp-tokenize's JSON lines reader (data/jsonl.h) on
 * arbitrary bytes written to one temporary file per process, plain or
 * gzip/zstd as their bytes say, every record encoded with the byte-level
 * BPE vocabulary named by $PP_FUZZ_VOCAB through a chat template.
 *
 * Input: byte 0 flags, then the file.
 *   flags & 1   the ChatML template (the vocabulary's EOS and the id below
 *               it as <|im_start|> and <|im_end|>); else the plain one
 *   flags & 6   the file's name: .jsonl, .jsonl.gz, .jsonl.zst, or none
 * Checks: an error names the file; a record's ids are in the vocabulary; instruction data
 * has one mask byte per id, each 0 or 1, and text none; records come
 * until the end or an error, never after one.
 * Built and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/data/jsonl.h"

#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RECORDS 256

static pp_tokenizer *tk;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_dir_init("fuzz-jsonl");
	const char *path = getenv("PP_FUZZ_VOCAB");
	pp_err e = {0};
	if (!path || tok_load(&tk, path, &e)) {
		fprintf(stderr, "fuzz_jsonl: PP_FUZZ_VOCAB names no vocabulary: %s\n", e.msg);
		exit(2);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static const char *const names[] = {"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "in"};
	const char *path = fuzz_file(names[(data[0] >> 1) & 3]);
	char *paths[1] = {(char *)path};
	FILE *fp = fopen(path, "wb");
	if (!fp || (size > 1 && fwrite(data + 1, 1, size - 1, fp) != size - 1) || fclose(fp)) {
		perror("fuzz_jsonl: writing the input");
		exit(2);
	}
	const int V = tok_vocab_size(tk);
	chat_template chat = {.kind = CHAT_PLAIN, .start = -1, .end = -1};
	if (data[0] & 1)
		chat = (chat_template){
			.kind = CHAT_CHATML, .start = tok_eos(tk) - 1, .end = tok_eos(tk)};
	jsonl_reader *r = NULL;
	pp_err e = {0};
	tok_ids ids = {0};
	tok_text mask = {0};
	int rc = jsonl_open(&r, paths, 1, &e);
	for (int k = 0; !rc && k < MAX_RECORDS; k++) {
		jsonl_record rec;
		bool got, masked;
		if ((rc = jsonl_next(r, &rec, &got, &e)) || !got)
			break;
		ids.n = mask.n = 0;
		if ((rc = jsonl_encode(&rec, &chat, tk, &ids, &mask, &masked, &e))) {
			if (!e.msg[0])
				__builtin_trap();
			break;
		}
		if (masked != (rec.kind != JSONL_TEXT) || (masked && mask.n != ids.n) ||
		    (!masked && mask.n))
			__builtin_trap(); /* one mask byte per id, for instruction data */
		for (size_t i = 0; i < ids.n; i++)
			if (ids.ids[i] < 0 || ids.ids[i] >= V || (masked && (uint8_t)mask.s[i] > 1))
				__builtin_trap();
		if (rec.kind == JSONL_MESSAGES) {
			bool any = false;
			for (int i = 0; i < rec.n_messages; i++)
				any |= rec.train[i];
			if (!any)
				__builtin_trap(); /* a conversation without a turn to learn */
		}
	}
	if (rc && (!e.msg[0] || !strstr(e.msg, path)))
		__builtin_trap(); /* an error must name the file */
	tok_ids_free(&ids);
	tok_text_free(&mask);
	jsonl_close(r);
	return 0;
}
