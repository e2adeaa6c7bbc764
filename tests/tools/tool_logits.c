/* tool_logits CKPT_DIR OUT.f32 TOKEN...: the logits pp computes for the
 * tokens (one sequence) from a checkpoint's weights, on the CPU in fp32,
 * the model config taken from the checkpoint. Writes OUT.f32: T x V floats,
 * row-major, raw little-endian; prints "T V". For the tests that compare pp
 * with an independent reader of an exported or imported model. */
#include <stdio.h>
#include <stdlib.h>

#include "../../libcommon/ckpt/stage.h"
#include "../../libcommon/config/config.h"
#include "../../libcommon/formats/stageload.h"
#include "../../libcommon/model/model.h"

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: tool_logits CKPT_DIR OUT.f32 TOKEN...\n");
		return 2;
	}
	pp_err e = {0};
	pp_config cfg;
	char *text = NULL, found[PP_PATH_MAX + 64];
	const pp_ops *ops = NULL;
	int T = argc - 3, rc = ckpt_read_config(argv[1], &text, &e);
	if (!rc)
		rc = pp_config_from_json(&cfg, text, &e);
	free(text);
	if (rc) {
		fprintf(stderr, "tool_logits: %s\n", e.msg);
		return 1;
	}
	int *tok = malloc((size_t)T * sizeof *tok), *tgt = malloc((size_t)T * sizeof *tgt);
	for (int i = 0; i < T; i++) {
		tok[i] = atoi(argv[3 + i]);
		tgt[i] = 0;
	}
	pp_stage s = {0};
	stage_spec spec = stage_spec_whole(&cfg.model, 1, T, PP_RECOMPUTE_NONE);
	stage_spec_set_lora(&spec, &cfg);
	spec.no_grad = true;
	spec.keep_logits = true;
	long step;
	double loss = 0;
	long valid = 0;
	if (!(rc = pp_ops_select(PP_DEVICE_CPU, PP_TYPE_REAL, &ops, &e)) &&
	    !(rc = stage_create(&s, &cfg.model, ops, &spec, &e)) &&
	    !(rc = tio_load_base(&s, &cfg, &e)) &&
	    !(rc = ckpt_load_stage(&s, &cfg, argv[1], found, sizeof found, &step, &e)))
		rc = stage_forward(&s, 0, tok, NULL, tgt, 0, &loss, &valid, NULL, &e);
	if (!rc) {
		const size_t n = (size_t)T * (size_t)cfg.model.vocab_size;
		float *host = malloc(n * sizeof(float));
		ops->to_host(host, stage_logits(&s, 0), n * sizeof(float));
		FILE *f = fopen(argv[2], "wb");
		if (!f || fwrite(host, sizeof(float), n, f) != n || fclose(f))
			rc = pp_errorf(&e, PP_ERUNTIME, "cannot write %s", argv[2]);
		free(host);
		if (!rc)
			printf("%d %d\n", T, cfg.model.vocab_size);
	}
	if (rc)
		fprintf(stderr, "tool_logits: %s\n", e.msg);
	stage_free(&s);
	pp_config_free(&cfg);
	free(tok);
	free(tgt);
	return rc ? 1 : 0;
}
