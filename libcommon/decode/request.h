/* Requests for decode_run from the command line, a file or stdin
 * (request.c).
 *
 * One request per line; blank lines are skipped (but counted: errors name
 * the line). A line whose first non-blank character is '{' is a JSON
 * object:
 *   {"prompt": TEXT} or {"messages": [{"role": R, "content": C}, ...]}
 *   (messages need --chat), with optional max_tokens, temperature, top_k,
 *   top_p, seed and stop (a string or an array of strings), which override
 *   the command line's for that prompt. Any other field is an error.
 * Any other line is a prompt as it stands (with --chat: a user message). A
 * line's error (malformed JSON, an unknown field, a value out of range, a
 * prompt the tokenizer or the vocabulary refuses) is kept in its request's
 * error and named by line; the other lines are read on. */
#ifndef PP_DECODE_REQUEST_H
#define PP_DECODE_REQUEST_H

#include "../tok/chat.h"
#include "decode.h"

typedef struct {
	int max_tokens; /* the command line's defaults */
	sample_params sample;
	char *const *stop;
	int n_stop;
	const chat_template *chat; /* --chat: prompts are user messages; NULL: plain text */
	const pp_tokenizer *tk;    /* NULL: prompts are token ids */
	int vocab;
} request_defaults;

/* Prompt ids: the tokenizer's BOS (unless it adds none: tok_adds_bos) then
 * the encoded text; without a tokenizer, the text is token ids separated by
 * spaces, each in [0, V). An empty result (no text, no BOS) is the single
 * token 0. */
int decode_prompt_ids(const pp_tokenizer *tk, const char *text, int V, tok_ids *ids, pp_err *e);

/* Continues prompt (text with the tokenizer at tokenizer_path, token ids
 * without one: "") by n tokens sampled at temperature with seed, from a
 * stage holding every layer, and writes the continuation's text (or ids)
 * to out: pp-train --sample. */
int decode_continue(pp_stage *s, const char *tokenizer_path, const char *prompt, int n,
		    double temperature, uint64_t seed, FILE *out, pp_err *e);

/* Appends the requests of text (n bytes) to *out (*count of them). Fails
 * only when out of memory. */
int requests_from_lines(const char *text, size_t n, const request_defaults *d, decode_request **out,
			int *count, pp_err *e);
/* Appends one request: a prompt given on the command line. */
int requests_from_prompt(const char *prompt, const request_defaults *d, decode_request **out,
			 int *count, pp_err *e);

#endif
