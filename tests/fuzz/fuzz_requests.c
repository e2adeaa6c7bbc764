/* libFuzzer target: pp-decode's prompt lines (requests_from_lines), plain
 * and JSON, on arbitrary bytes. The first byte picks the mode: without a
 * tokenizer (prompts are token ids) or with the byte-level BPE vocabulary
 * named by $PP_FUZZ_VOCAB and --chat (ChatML when the vocabulary has
 * <|im_start|>, else the plain template). Checks: every request either
 * holds an error that names its line, or ids within the vocabulary and a
 * prompt text; the requests come in line order. Built and run by
 * tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/decode/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VOCAB 256

static pp_tokenizer *vocab(void)
{
	static pp_tokenizer *tk;
	static int tried;
	const char *path = getenv("PP_FUZZ_VOCAB");
	if (!tried && path) {
		pp_err e = {0};
		tried = 1;
		if (tok_load(&tk, path, &e))
			__builtin_trap(); /* the harness gives a loadable one */
	}
	return tk;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	pp_tokenizer *tk = data[0] & 1 ? vocab() : NULL;
	chat_template chat = {0};
	pp_err e = {0};
	if (tk && chat_load(&chat, NULL, tk, &e))
		__builtin_trap();
	const int V = tk ? tok_vocab_size(tk) : VOCAB;
	request_defaults d = {.max_tokens = 8,
			      .sample = sample_defaults(),
			      .chat = tk ? &chat : NULL,
			      .tk = tk,
			      .vocab = V};
	decode_request *r = NULL;
	int n = 0;
	if (requests_from_lines((const char *)data + 1, size - 1, &d, &r, &n, &e) == 0) {
		int last = 0;
		for (int i = 0; i < n; i++) {
			if (r[i].line <= last)
				__builtin_trap(); /* out of line order */
			last = r[i].line;
			if (r[i].error) {
				char want[32];
				snprintf(want, sizeof want, "line %d: ", r[i].line);
				if (strncmp(r[i].error, want, strlen(want)))
					__builtin_trap(); /* an error that does not name its line */
				continue;
			}
			if (!r[i].prompt || r[i].ids.n < 1 || r[i].max_tokens < 1 ||
			    r[i].n_stop > 16)
				__builtin_trap();
			for (size_t k = 0; k < r[i].ids.n; k++)
				if (r[i].ids.ids[k] < 0 || r[i].ids.ids[k] >= V)
					__builtin_trap(); /* an id outside the vocabulary */
		}
	} else if (!e.msg[0]) {
		__builtin_trap(); /* a failure without a message */
	}
	for (int i = 0; i < n; i++)
		decode_request_free(&r[i]);
	free(r);
	chat_free(&chat);
	return 0;
}
