/* Prints the ids of each input line the way `spm_encode --output_format=id`
 * does: one output line per input line, ids separated by spaces (an empty
 * line for an empty input line). Used by tests/e2e/test_tokenizer_ref.sh and
 * bench/tokenize-vs-spm.sh.
 *
 *   tool_tokenize MODEL [--decode] [--pieces] [--info] < text
 *
 * --decode: read lines of ids instead and print the decoded text of each.
 * --pieces: print the pieces instead of the ids (spm's --output_format=piece).
 * --info:   print kind, vocabulary size, bos, eos and fingerprint, and exit.
 * Exit status 0, 1 on a tokenizer error (the message on stderr), 2 on usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libcommon/tok/tokenizer.h"

static int usage(void)
{
	fprintf(stderr, "usage: tool_tokenize MODEL [--decode | --pieces | --info] < text\n");
	return 2;
}

/* ids of one line, written into a stdio buffer */
static void put_ids(const tok_ids *v, size_t from, FILE *out)
{
	char buf[16];
	for (size_t i = from; i < v->n; i++) {
		int x = v->ids[i], k = 0;
		char tmp[12];
		do
			tmp[k++] = (char)('0' + x % 10);
		while ((x /= 10) > 0);
		int j = 0;
		if (i > from)
			buf[j++] = ' ';
		while (k)
			buf[j++] = tmp[--k];
		fwrite(buf, 1, (size_t)j, out);
	}
	putc('\n', out);
}

int main(int argc, char **argv)
{
	const char *model = NULL;
	int decode = 0, pieces = 0, info = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--decode"))
			decode = 1;
		else if (!strcmp(argv[i], "--pieces"))
			pieces = 1;
		else if (!strcmp(argv[i], "--info"))
			info = 1;
		else if (argv[i][0] == '-' || model)
			return usage();
		else
			model = argv[i];
	}
	if (!model)
		return usage();
	pp_err e = {0};
	pp_tokenizer *t;
	if (tok_load(&t, model, &e)) {
		fprintf(stderr, "tool_tokenize: %s\n", e.msg);
		return 1;
	}
	if (info) {
		printf("kind %s\nvocab %d\nbos %d\neos %d\nfingerprint %s\n", tok_kind(t),
		       tok_vocab_size(t), tok_bos(t), tok_eos(t), tok_fingerprint(t));
		tok_free(t);
		return 0;
	}
	static char obuf[1 << 16];
	setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	tok_ids ids = {0};
	tok_text text = {0};
	int rc = 0;
	while ((len = getline(&line, &cap, stdin)) >= 0) {
		if (len > 0 && line[len - 1] == '\n')
			len--;
		if (decode) {
			ids.n = 0;
			char *p = line, *end;
			line[len] = 0;
			for (long v; (v = strtol(p, &end, 10)), end != p; p = end) {
				if (ids.n == ids.cap) {
					ids.cap = ids.cap ? 2 * ids.cap : 256;
					ids.ids = realloc(ids.ids, ids.cap * sizeof *ids.ids);
					if (!ids.ids) {
						fprintf(stderr, "tool_tokenize: out of memory\n");
						return 1;
					}
				}
				ids.ids[ids.n++] = (int)v;
			}
			text.n = 0;
			if (tok_decode(t, ids.ids, ids.n, &text, &e)) {
				rc = 1;
				break;
			}
			fwrite(text.s, 1, text.n, stdout);
			putchar('\n');
			continue;
		}
		ids.n = 0;
		if (tok_encode(t, line, (size_t)len, &ids, &e)) {
			rc = 1;
			break;
		}
		if (pieces) {
			for (size_t i = 0; i < ids.n; i++)
				printf("%s%s", i ? " " : "", tok_piece(t, ids.ids[i], NULL));
			putchar('\n');
		} else {
			put_ids(&ids, 0, stdout);
		}
	}
	if (rc)
		fprintf(stderr, "tool_tokenize: %s\n", e.msg);
	free(line);
	tok_ids_free(&ids);
	tok_text_free(&text);
	tok_free(t);
	return rc;
}
