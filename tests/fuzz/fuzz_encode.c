/* libFuzzer target: encode + decode round trips on arbitrary bytes. The
 * tokenizers come from PP_FUZZ_MODELS (files separated by ':', e.g. the
 * Llama 2 model and GPT-2's vocab.json); the first input byte picks one,
 * the rest is the text. Checks: ids inside the vocabulary, and
 * decode(encode(text)) == text for byte-level BPE always and for
 * SentencePiece models that keep whitespace (Llama's) when the text has no
 * U+2581, with U+FFFD for each byte that does not begin a valid UTF-8
 * character (spm's normalizer). Built and run by tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/tok/internal.h"
#include "../../libcommon/tok/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pp_tokenizer *toks[8];
static int ntoks;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *env = getenv("PP_FUZZ_MODELS");
	if (!env || !*env) {
		fprintf(stderr, "fuzz_encode: set PP_FUZZ_MODELS=model[:model...]\n");
		exit(2);
	}
	char *list = strdup(env), *save = NULL;
	for (char *p = strtok_r(list, ":", &save); p && ntoks < 8; p = strtok_r(NULL, ":", &save)) {
		pp_err e = {0};
		if (tok_load(&toks[ntoks], p, &e)) {
			fprintf(stderr, "fuzz_encode: %s\n", e.msg);
			exit(2);
		}
		ntoks++;
	}
	free(list);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || !ntoks)
		return 0;
	pp_tokenizer *t = toks[data[0] % ntoks];
	const char *text = (const char *)data + 1;
	size_t n = size - 1;
	tok_ids ids = {0};
	tok_text out = {0};
	pp_err e = {0};
	if (tok_encode(t, text, n, &ids, &e))
		__builtin_trap();
	for (size_t i = 0; i < ids.n; i++)
		if (ids.ids[i] < 0 || ids.ids[i] >= tok_vocab_size(t))
			__builtin_trap();
	if (tok_decode(t, ids.ids, ids.n, &out, &e))
		__builtin_trap();
	int bpe = !strcmp(tok_kind(t), "byte-level-bpe");
	int exact = bpe || (n == 0 || !memmem(text, n, "\xe2\x96\x81", 3));
	/* what comes back: the text, or SentencePiece's with U+FFFD per bad byte */
	char *want = bpe ? NULL : malloc(3 * n + 1);
	size_t nwant = bpe ? n : 0;
	if (!bpe) {
		if (!want)
			__builtin_trap();
		for (size_t i = 0, len; i < n; i += len) {
			uint32_t cp;
			len = tok_utf8_char((const unsigned char *)text + i, n - i, &cp);
			int bad = cp == TOK_INVALID;
			memcpy(want + nwant, bad ? "\xef\xbf\xbd" : text + i, bad ? 3 : len);
			nwant += bad ? 3 : len;
		}
	}
	const char *w = bpe ? text : want;
	if (exact && (out.n != nwant || (nwant && memcmp(out.s, w, nwant))))
		__builtin_trap(); /* decode(encode(x)) != x */
	free(want);
	tok_ids_free(&ids);
	tok_text_free(&out);
	return 0;
}
