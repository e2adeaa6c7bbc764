/* A command's model for text: config, backend, tokenizer, weights
 * (open.h). */
#include "open.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fsutil.h"
#include "../ckpt/stage.h"
#include "../formats/stageload.h"
#include "gguf.h"

const char *decode_weights_name(int fmt)
{
	return fmt == DECODE_WEIGHTS_GGUF ? "gguf" : pp_weights_name(fmt);
}

/* the config: a GGUF file's, a checkpoint's own, or --cfg's; the
 * checkpoint's tokenizer extracted into m->tmp */
static int open_config(decode_model *m, const decode_source *a, pp_err *e)
{
	const bool gguf = a->ckpt && decode_is_gguf(a->ckpt), ckpt = a->ckpt && !gguf;
	int rc = 0;
	if (gguf && a->cfg)
		return pp_errorf(e, PP_EUSAGE,
				 "--ckpt %s: a GGUF file carries its model; give key=value "
				 "overrides, not --cfg",
				 a->ckpt);
	if (gguf) {
		snprintf(m->source, sizeof m->source, "%s", a->ckpt);
		if (!(rc = decode_gguf_open(a->ckpt, a->n_overrides, a->overrides, &m->cfg,
					    &m->gguf, e)))
			snprintf(m->tok_path, sizeof m->tok_path, "%s", m->gguf->meta.tokenizer);
		return rc;
	}
	if (ckpt && !a->cfg)
		rc = ckpt_config_load(a->ckpt, a->n_overrides, a->overrides, &m->cfg, m->dir,
				      sizeof m->dir, e);
	else
		rc = pp_config_load(&m->cfg, a->cfg, a->n_overrides, a->overrides, e);
	if (!rc && ckpt && a->cfg)
		rc = ckpt_resolve(a->ckpt, m->dir, sizeof m->dir, e);
	if (!rc && ckpt) {
		snprintf(m->tmp, sizeof m->tmp, "/tmp/pp-model.XXXXXX");
		if (!mkdtemp(m->tmp)) {
			m->tmp[0] = '\0';
			return pp_errorf(e, PP_ERUNTIME, "cannot make a temporary directory: %s",
					 strerror(errno));
		}
		rc = ckpt_read_tokenizer(m->dir, m->tmp, m->tok_path, sizeof m->tok_path, e);
	}
	return rc;
}

int decode_model_open(decode_model *m, const decode_source *a, pp_err *e)
{
	memset(m, 0, sizeof *m);
	m->weights = -1;
	m->step = -1;
	m->random_init = a->random_init;
	snprintf(m->source, sizeof m->source, "random-init");
	int fmt = -1, rc = open_config(m, a, e);
	if (rc)
		return rc;
	for (int i = PP_WEIGHTS_F32; a->weights && i <= PP_WEIGHTS_Q8_0; i++)
		fmt = strcmp(a->weights, pp_weights_name(i)) ? fmt : i;
	if (a->weights && !strcmp(a->weights, "gguf"))
		fmt = DECODE_WEIGHTS_GGUF;
	if (a->weights && fmt < 0)
		return pp_errorf(e, PP_EUSAGE, "--weights '%s': expected fp32, bf16, q8_0 or gguf",
				 a->weights);
	if (fmt == DECODE_WEIGHTS_GGUF && (!m->gguf || a->random_init))
		return pp_errorf(e, PP_EUSAGE,
				 "--weights gguf: the weights of a GGUF file given to "
				 "--ckpt; this model is not one");
	const pp_config *cfg = &m->cfg;
	if ((rc = pp_ops_select(cfg->device, cfg->dtype, &m->ops, e)))
		return rc;
	if (fmt >= 0 && !m->ops->matmul_packed)
		return pp_errorf(e, PP_EUSAGE,
				 "--weights: device=%s decodes from its compute copy "
				 "(dtype=%s); --weights is for the CPU",
				 pp_device_name(cfg->device), pp_type_name(cfg->dtype));
	if (fmt < 0 && m->ops->matmul_packed)
		fmt = m->gguf && !a->random_init ? DECODE_WEIGHTS_GGUF : PP_WEIGHTS_F32;
	m->weights = fmt;
#ifdef PP_CUDA
	if (cfg->device == PP_DEVICE_CUDA && (rc = pp_cuda_init(a->device, e)))
		return rc;
#endif
	const char *tok = m->tok_path[0] ? m->tok_path : cfg->tokenizer;
	if (tok[0] && (rc = tok_load(&m->tk, tok, e)))
		return rc;
	if (tok != m->tok_path)
		snprintf(m->tok_path, sizeof m->tok_path, "%s", tok);
	if (m->tk && tok_vocab_size(m->tk) > cfg->model.vocab_size)
		return pp_errorf(e, PP_EUSAGE,
				 "tokenizer %s has %d tokens but model.vocab_size=%d: the model "
				 "cannot read its ids",
				 tok, tok_vocab_size(m->tk), cfg->model.vocab_size);
	return 0;
}

int decode_model_load(decode_model *m, pp_err *e)
{
	const pp_config *cfg = &m->cfg;
	stage_spec spec = stage_spec_whole(&cfg->model, 1, 1, PP_RECOMPUTE_NONE);
	stage_spec_set_lora(&spec, cfg); /* a LoRA run's adapters, as it trained them */
	spec.no_grad = true;
	int rc = stage_create(&m->s, &cfg->model, m->ops, &spec, e);
	if (rc)
		return rc;
	m->loaded = true;
	if (m->random_init)
		stage_init_params(&m->s, cfg->seed);
	else if (m->gguf)
		rc = tio_load_stage(&m->s, m->gguf, m->source, e);
	else if (!(rc = tio_load_base(&m->s, cfg, e))) /* a LoRA run's base, then */
		/* --ckpt's, or the newest sound one in the config's run_dir */
		rc = ckpt_load_stage(&m->s, cfg, m->dir[0] ? m->dir : NULL, m->source,
				     sizeof m->source, &m->step, e);
	if (m->random_init)
		snprintf(m->source, sizeof m->source, "random-init");
	/* a GGUF file's own blocks where it has them, the loaded fp32 elsewhere */
	stage_stored stored = m->gguf ? decode_gguf_stored(m->gguf) : (stage_stored){0};
	if (!rc && m->weights >= 0)
		rc = stage_pack_weights(
			&m->s, m->weights == DECODE_WEIGHTS_GGUF ? PP_WEIGHTS_F32 : m->weights,
			m->weights == DECODE_WEIGHTS_GGUF ? &stored : NULL, e);
	return rc;
}

void decode_model_close(decode_model *m)
{
	if (m->loaded)
		stage_free(&m->s);
	if (m->tk)
		tok_free(m->tk);
	if (m->tmp[0])
		fs_rm_rf(m->tmp);
	if (m->gguf)
		m->gguf->close(m->gguf);
	pp_config_free(&m->cfg);
	memset(m, 0, sizeof *m);
}
