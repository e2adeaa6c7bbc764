/* Chat templates (tok/chat.h) for prompts and for training: with a
 * byte-level BPE vocabulary written here (GPT-2's byte alphabet and
 * ChatML's special tokens, a tokenizer_config.json with a ChatML template
 * beside it) and with the Llama 2 SentencePiece model (the plain template):
 *   - the prompt chat_apply builds for the messages before an assistant
 *     turn is, id for id, the start of chat_render's ids for the whole
 *     conversation, and the turn's mask starts right there;
 *   - the ids that count are each assistant turn's content and <|im_end|>
 *     (ChatML), " CONTENT\n" and the final EOS (plain); train[] picks the
 *     turns; chat_render_completion is a user turn and an assistant turn
 *     with a template, prompt + completion + EOS without;
 *   - a token that straddles the start of the completion counts. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/tok/chat.h"
#include "../tools/harness.h"

static char dir[] = "/tmp/pp-test-chat.XXXXXX";

/* tokenizer.json: the 256 byte tokens (GPT-2's alphabet), a merge or two,
 * <|im_start|> 258, <|im_end|> 259, <|endoftext|> 260 */
static void write_chatml(const char *path, const char *config)
{
	int cp[256], n = 0;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		cp[b] = printable ? b : 256 + n++;
	}
	FILE *f = fopen(path, "w");
	fprintf(f, "{\"added_tokens\": [");
	const char *special[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
	for (int i = 0; i < 3; i++)
		fprintf(f, "%s{\"id\": %d, \"content\": \"%s\", \"special\": true}", i ? ", " : "",
			258 + i, special[i]);
	fprintf(f, "], \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
		   "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
		   "\"vocab\": {");
	for (int b = 0; b < 256; b++)
		fprintf(f, "%s\"\\u%04x\": %d", b ? ", " : "", cp[b], b);
	/* "he" and "Ġt" */
	fprintf(f, ", \"he\": 256, \"\\u0120t\": 257}, \"merges\": [\"h e\", \"\\u0120 t\"]}}");
	fclose(f);
	f = fopen(config, "w");
	fprintf(f, "{\"add_bos_token\": false, \"chat_template\": \"{%% for m in messages %%}"
		   "<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{%% endfor %%}\"}");
	fclose(f);
}

static const chat_message conv[] = {
	{"system", "Be brief."}, {"user", "hello there"},   {"assistant", "hi, the end"},
	{"user", "again?"},      {"assistant", "the same"},
};
enum { N_CONV = 5 };

/* prompt(messages before turn k) == render's first ids, and the render's
 * next id (the reply's first) counts */
static void check_prefixes(const char *name, const chat_template *c, const pp_tokenizer *tk)
{
	tok_ids all = {0};
	tok_text mask = {0};
	pp_err e = {0};
	int rc = chat_render(c, tk, conv, N_CONV, NULL, &all, &mask, &e);
	char sub[128];
	snprintf(sub, sizeof sub, "%s/one_mask_byte_per_id", name);
	CHECK(!rc && mask.n == all.n, sub, "rc %d %s, %zu ids %zu mask", rc, e.msg, all.n, mask.n);
	for (int k = 2; k < N_CONV && !rc; k += 2) {
		tok_ids p = {0};
		char *text = NULL;
		rc = chat_apply(c, tk, conv, k, &p, &text, &e);
		bool prefix = !rc && p.n < all.n && !memcmp(p.ids, all.ids, p.n * sizeof(int));
		snprintf(sub, sizeof sub, "%s/prompt_%d_is_the_render_up_to_the_reply", name, k);
		CHECK(prefix && mask.s[p.n] == 1, sub, "rc %d %s: %zu prompt ids", rc, e.msg, p.n);
		free(text);
		tok_ids_free(&p);
	}
	tok_ids_free(&all);
	tok_text_free(&mask);
}

/* the text of the ids that count, runs joined by '|' */
static void counted(const pp_tokenizer *tk, const tok_ids *ids, const tok_text *mask, char *out,
		    size_t cap)
{
	out[0] = 0;
	for (size_t i = 0; i < ids->n;) {
		if (!mask->s[i]) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < ids->n && mask->s[j])
			j++;
		tok_text t = {0};
		pp_err e = {0};
		tok_decode(tk, ids->ids + i, j - i, &t, &e);
		snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "|" : "",
			 t.s ? t.s : "");
		tok_text_free(&t);
		i = j;
	}
}

static void test_chatml(void)
{
	char path[128], config[128];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
	write_chatml(path, config);
	pp_tokenizer *tk = NULL;
	pp_err e = {0};
	chat_template c = {0};
	int rc = tok_load(&tk, path, &e);
	if (!rc)
		rc = chat_load_beside(&c, path, tk, &e);
	CHECK(!rc && c.kind == CHAT_CHATML && c.start == 258 && c.end == 259, "chat/chatml/load",
	      "rc %d %s kind %d", rc, e.msg, c.kind);
	if (rc)
		return;
	check_prefixes("chat/chatml", &c, tk);
	tok_ids ids = {0};
	tok_text mask = {0};
	char got[512];
	rc = chat_render(&c, tk, conv, N_CONV, NULL, &ids, &mask, &e);
	counted(tk, &ids, &mask, got, sizeof got);
	/* <|im_end|> decodes to nothing: each run is the content alone */
	int ends = 0;
	for (size_t i = 0; i < ids.n; i++)
		ends += ids.ids[i] == 259 && mask.s[i];
	CHECK(!rc && !strcmp(got, "hi, the end|the same") && ends == 2,
	      "chat/chatml/assistant_turns_count", "rc %d: '%s', %d ends", rc, got, ends);
	/* the first assistant turn only */
	const bool train[N_CONV] = {false, false, true, false, false};
	ids.n = mask.n = 0;
	rc = chat_render(&c, tk, conv, N_CONV, train, &ids, &mask, &e);
	counted(tk, &ids, &mask, got, sizeof got);
	CHECK(!rc && !strcmp(got, "hi, the end"), "chat/chatml/train_picks_turns", "'%s'", got);
	ids.n = mask.n = 0;
	rc = chat_render_completion(&c, tk, "hello there", "the reply", &ids, &mask, &e);
	counted(tk, &ids, &mask, got, sizeof got);
	CHECK(!rc && !strcmp(got, "the reply") && ids.ids[0] == 258 && ids.ids[ids.n - 1] != 259,
	      "chat/chatml/completion_is_two_turns", "'%s'", got);
	tok_ids_free(&ids);
	tok_text_free(&mask);
	chat_free(&c);
	tok_free(tk);
}

static void test_plain(void)
{
	const char *root = getenv("PP_ROOT");
	char path[4200];
	snprintf(path, sizeof path, "%s/../shared/data/llama2-tokenizer.model", root ? root : ".");
	if (access(path, R_OK)) {
		th_skip("chat/plain", "no Llama 2 tokenizer at ../shared/data");
		return;
	}
	pp_tokenizer *tk = NULL;
	pp_err e = {0};
	chat_template c = {0};
	int rc = tok_load(&tk, path, &e);
	if (!rc)
		rc = chat_load(&c, NULL, tk, &e);
	CHECK(!rc && c.kind == CHAT_PLAIN, "chat/plain/load", "rc %d %s", rc, e.msg);
	if (rc)
		return;
	check_prefixes("chat/plain", &c, tk);
	tok_ids ids = {0};
	tok_text mask = {0};
	char got[512];
	rc = chat_render(&c, tk, conv, N_CONV, NULL, &ids, &mask, &e);
	counted(tk, &ids, &mask, got, sizeof got);
	/* SentencePiece drops a run's leading space when decoding it alone */
	CHECK(!rc && !strcmp(got, "hi, the end\n|the same\n") && ids.ids[ids.n - 1] == 2 &&
		      mask.s[ids.n - 1] && ids.ids[0] == 1 && !mask.s[0],
	      "chat/plain/assistant_turns_and_eos_count", "rc %d '%s'", rc, got);
	/* prompt + completion: BOS, one encoding, EOS; "▁sat" straddles the
	 * prompt's end ("The cat sa" + "t down") and counts */
	ids.n = mask.n = 0;
	rc = chat_render_completion(&c, tk, "The cat sa", "t down", &ids, &mask, &e);
	tok_ids whole = {0};
	tok_ids_push(&whole, 1);
	tok_encode(tk, "The cat sat down", 16, &whole, &e);
	tok_ids_push(&whole, 2);
	int first = -1;
	for (size_t i = 0; i < mask.n && first < 0; i++)
		if (mask.s[i])
			first = (int)i;
	bool ones = first >= 0;
	for (size_t i = (size_t)(first < 0 ? 0 : first); i < mask.n && ones; i++)
		ones = mask.s[i];
	const char *piece = first >= 0 ? tok_piece(tk, ids.ids[first], NULL) : NULL;
	CHECK(!rc && ids.n == whole.n && !memcmp(ids.ids, whole.ids, ids.n * sizeof(int)) && ones &&
		      piece && !strcmp(piece, "\xe2\x96\x81sat"),
	      "chat/plain/straddling_token_counts", "rc %d first %d piece %s", rc, first,
	      piece ? piece : "-");
	tok_ids_free(&whole);
	tok_ids_free(&ids);
	tok_text_free(&mask);
	chat_free(&c);
	tok_free(tk);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_chatml();
	test_plain();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd))
		printf("could not remove %s\n", dir);
	TH_EXIT();
}
