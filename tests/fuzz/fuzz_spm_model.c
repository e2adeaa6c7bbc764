/* libFuzzer target: the tokenizer file parsers on arbitrary bytes. Input
 * starting with '{' goes to the JSON loader (tokenizer.json, vocab.json),
 * anything else to the SentencePiece protobuf parser. A file that loads
 * must then encode and decode a few strings. Built and run by
 * tests/fuzz/test_fuzz.sh. */
#include <stdint.h>
#include <string.h>

#include "../../libcommon/tok/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	pp_tokenizer *t = NULL;
	pp_err e = {0};
	char fp[SHA256_HEX];
	/* a directory that does not exist: no merges.txt or tokenizer_config.json
	 * beside it */
	const char *path = "/nonexistent/fuzz";
	int rc = size && data[0] == '{'
			 ? tok_bpe_load_json(&t, path, (const char *)data, size, fp, &e)
			 : tok_spm_load(&t, path, data, size, &e);
	if (rc) {
		if (!e.msg[0] || !strstr(e.msg, path))
			__builtin_trap(); /* an error must say what and where */
		tok_free(t);
		return 0;
	}
	static const char *const texts[] = {"Hello world", "  a  b ", "\xe2\x96\x81x\xff\xc3",
					    "it's 2023!\n\t", ""};
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		tok_ids ids = {0};
		tok_text out = {0};
		if (tok_encode(t, texts[i], strlen(texts[i]), &ids, &e) == 0) {
			for (size_t k = 0; k < ids.n; k++)
				if (ids.ids[k] < 0 || ids.ids[k] >= tok_vocab_size(t))
					__builtin_trap();
			tok_decode(t, ids.ids, ids.n, &out, &e);
		}
		tok_ids_free(&ids);
		tok_text_free(&out);
	}
	tok_free(t);
	return 0;
}
