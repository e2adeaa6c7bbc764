/* tool_hf_dump: one forward and backward of a whole model (one stage holding
 * every layer), written to HDF5 for tests/ref/hf_reference.py to compare with
 * Hugging Face transformers.
 *
 *   tool_hf_dump --cfg FILE [key=value...] -o OUT.h5 [--batch B] [--seed N] [--generate N]
 *
 * OUT.h5:
 *   /tokens (B,T) int32, /targets (B,T) int32 (a few PP_IGNORE_INDEX)
 *   /logits (B,T,V)      from a forward with dscale = 0
 *   /loss   scalar f64   mean cross-entropy over the valid targets
 *   /moe_aux scalar f64  MoE models: the load-balancing loss of the forward, summed
 *                        over the MoE layers (its gradient, at the config's
 *                        router_aux_loss_coef, is in /grads)
 *   /params/NAME, /grads/NAME  every tensor of the params table, stored layout
 *                        (Linear weights (out, in), GPT-2's Conv1D included)
 *   attribute "config"   the resolved config JSON (pp_config_dump)
 *   with --generate N:   /generate/prompt (P) int32, the first P = T/2 tokens of
 *                        row 0, and /generate/tokens (P+N) int32, the prompt and
 *                        N greedy tokens from pp's decoder (KV cache, no EOS)
 * Tensors are float32 (float64 in a -DPP_F64 build). The config's fp8.*
 * keys apply (tests/ref/fp8_reference.py checks an FP8 model's dump). The
 * file is written under a temporary name and renamed into place. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../libcommon/base/cli.h"
#include "../../libcommon/base/log.h"
#include "../../libcommon/base/rng.h"
#include "../../libcommon/config/config.h"
#include "../../libcommon/decode/decode.h"
#include "../../libcommon/model/model.h"

#define H5_REAL_MEM  (sizeof(pp_real) == sizeof(double) ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT)
#define H5_REAL_FILE (sizeof(pp_real) == sizeof(double) ? H5T_IEEE_F64LE : H5T_IEEE_F32LE)

/* Norm weights and biases start at constants (1 or 0), which would hide a
 * swapped or ignored tensor; matrices start small, which makes attention
 * nearly uniform. Noise on every element makes each tensor matter. */
static void perturb(pp_real *w, const pp_stage *s, uint64_t seed)
{
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		double std = p->ndim == 1 ? 0.1 : 0.5 * (p->init_std > 0 ? p->init_std : 0.02);
		uint64_t key = rng_key(seed ^ 0x68665f64756d70ULL, p->name); /* "hf_dump" */
		for (size_t j = 0; j < p->n; j++)
			w[p->off + j] += (pp_real)(std * rng_normal(key, j));
	}
}

static int write_array(hid_t loc, const char *name, hid_t mem, hid_t file, int ndim,
		       const hsize_t *dims, const void *data, pp_err *e)
{
	hid_t sp = H5Screate_simple(ndim, dims, NULL);
	hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
	H5Pset_create_intermediate_group(lcpl, 1);
	hid_t ds = sp < 0 ? -1 : H5Dcreate2(loc, name, file, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
	herr_t rc = ds < 0 ? -1 : H5Dwrite(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
	if (ds >= 0)
		H5Dclose(ds);
	H5Pclose(lcpl);
	if (sp >= 0)
		H5Sclose(sp);
	return rc < 0 ? pp_errorf(e, PP_ERUNTIME, "cannot write dataset %s", name) : 0;
}

static int write_tensors(hid_t f, const char *group, const pp_stage *s, const pp_real *buf,
			 pp_err *e)
{
	for (int i = 0; i < s->n_params; i++) {
		const pp_param *p = &s->params[i];
		char path[160];
		hsize_t dims[PP_MAXDIM];
		for (int d = 0; d < p->ndim; d++)
			dims[d] = (hsize_t)p->shape[d];
		snprintf(path, sizeof path, "%s/%s", group, p->name);
		if (write_array(f, path, H5_REAL_MEM, H5_REAL_FILE, p->ndim, dims, buf + p->off, e))
			return e->code;
	}
	return 0;
}

static int write_config_attr(hid_t f, const char *json, pp_err *e)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, strlen(json) + 1);
	H5Tset_strpad(t, H5T_STR_NULLTERM);
	H5Tset_cset(t, H5T_CSET_UTF8);
	hid_t sp = H5Screate(H5S_SCALAR);
	hid_t a = H5Acreate2(f, "config", t, sp, H5P_DEFAULT, H5P_DEFAULT);
	herr_t rc = a < 0 ? -1 : H5Awrite(a, t, json);
	if (a >= 0)
		H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
	return rc < 0 ? pp_errorf(e, PP_ERUNTIME, "cannot write the config attribute") : 0;
}

typedef struct {
	int B, T, V;
	int *tokens, *targets;
	pp_real *logits; /* (B,T,V) host */
	double loss, moe_aux;
	pp_real *w, *g;      /* host copies, n_elems */
	int n_prompt, n_gen; /* --generate: P and N */
	int *gen;            /* (P+N) */
} dump;

static int write_dump(const char *out, const pp_config *c, const pp_stage *s, const dump *d,
		      pp_err *e)
{
	char tmp[PP_PATH_MAX + 32];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
	hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (f < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: cannot create", tmp);
	hsize_t bt[2] = {(hsize_t)d->B, (hsize_t)d->T}, btv[3] = {bt[0], bt[1], (hsize_t)d->V};
	char *json = pp_config_dump(c);
	int rc = 0;
	if (!json)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot serialise the config");
	if (!rc)
		rc = write_config_attr(f, json, e);
	if (!rc)
		rc = write_array(f, "tokens", H5T_NATIVE_INT, H5T_STD_I32LE, 2, bt, d->tokens, e);
	if (!rc)
		rc = write_array(f, "targets", H5T_NATIVE_INT, H5T_STD_I32LE, 2, bt, d->targets, e);
	if (!rc)
		rc = write_array(f, "logits", H5_REAL_MEM, H5_REAL_FILE, 3, btv, d->logits, e);
	if (!rc)
		rc = write_array(f, "loss", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 0, NULL, &d->loss,
				 e);
	if (!rc && s->cfg->n_experts > 0)
		rc = write_array(f, "moe_aux", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 0, NULL,
				 &d->moe_aux, e);
	if (!rc)
		rc = write_tensors(f, "params", s, d->w, e);
	if (!rc)
		rc = write_tensors(f, "grads", s, d->g, e);
	hsize_t np = (hsize_t)d->n_prompt, ng = (hsize_t)(d->n_prompt + d->n_gen);
	if (!rc && d->gen)
		rc = write_array(f, "generate/prompt", H5T_NATIVE_INT, H5T_STD_I32LE, 1, &np,
				 d->gen, e);
	if (!rc && d->gen)
		rc = write_array(f, "generate/tokens", H5T_NATIVE_INT, H5T_STD_I32LE, 1, &ng,
				 d->gen, e);
	free(json);
	if (H5Fclose(f) < 0 && !rc)
		rc = pp_errorf(e, PP_ERUNTIME, "%s: cannot close", tmp);
	if (!rc && rename(tmp, out) != 0)
		rc = pp_errorf(e, PP_ERUNTIME, "cannot rename %s to %s", tmp, out);
	if (rc) {
		unlink(tmp);
		pp_err_prefix(e, "%s", out);
	}
	return rc;
}

static int run(const pp_config *c, int B, uint64_t seed, int n_gen, const char *out, pp_err *e)
{
	const pp_model_cfg *m = &c->model;
	const pp_ops *ops = NULL;
	if (pp_ops_select(c->device, c->dtype, &ops, e))
		return e->code;
	pp_stage s;
	stage_spec spec = stage_spec_whole(m, B, c->seq_len, c->recompute);
	spec.keep_logits = true; /* the dump holds the full logits */
	stage_spec_set_fp8(&spec, c);
	if (stage_create(&s, m, ops, &spec, e))
		return e->code;
	stage_fp8_begin_step(&s);

	dump d = {.B = B, .T = c->seq_len, .V = m->vocab_size};
	size_t N = (size_t)B * (size_t)d.T;
	d.tokens = malloc(N * sizeof *d.tokens);
	d.targets = malloc(N * sizeof *d.targets);
	d.logits = malloc(N * (size_t)d.V * sizeof *d.logits);
	d.w = malloc(s.n_elems * sizeof *d.w);
	d.g = malloc(s.n_elems * sizeof *d.g);
	int rc = 0;
	if (!d.tokens || !d.targets || !d.logits || !d.w || !d.g) {
		rc = pp_errorf(e, PP_ERUNTIME, "out of memory for %zu parameters", s.n_elems);
		goto done;
	}

	stage_init_params(&s, seed);
	ops->to_host(d.w, s.w, s.n_elems * sizeof *d.w);
	perturb(d.w, &s, seed);
	ops->to_device(s.w, d.w, s.n_elems * sizeof *d.w);
	stage_weights_changed(&s);

	uint64_t ktok = rng_key(seed, "hf_dump.tokens"), ktgt = rng_key(seed, "hf_dump.targets");
	for (size_t i = 0; i < N; i++) {
		d.tokens[i] = (int)rng_below(ktok, i, (uint64_t)d.V);
		d.targets[i] = i % 7 == 3 ? PP_IGNORE_INDEX
					  : (int)rng_below(ktgt, i, (uint64_t)d.V);
	}
	/* token 0 always in the batch: a model that set its row apart (a
	 * padding row) would show in the embedding's gradient */
	d.tokens[N - 1] = 0;

	/* logits first: the training forward overwrites them with their gradient */
	double loss0 = 0;
	long n_valid = 0;
	if ((rc = stage_forward(&s, 0, d.tokens, NULL, d.targets, 0, &loss0, &n_valid, NULL, e)))
		goto done;
	ops->act_to_host(d.logits, stage_logits(&s, 0), N * (size_t)d.V);
	if (n_valid <= 0) {
		rc = pp_errorf(e, PP_ERUNTIME, "no valid targets");
		goto done;
	}

	double loss_sum = 0;
	long n_valid2 = 0;
	stage_zero_grad(&s);
	memset(&s.moe, 0, sizeof s.moe);
	if ((rc = stage_forward(&s, 0, d.tokens, NULL, d.targets, (pp_real)(1.0 / (double)n_valid),
				&loss_sum, &n_valid2, NULL, e)))
		goto done;
	if ((rc = stage_backward(&s, 0, STAGE_BWD_FULL, NULL, NULL, e)))
		goto done;
	if (n_valid2 != n_valid || !(fabs(loss_sum - loss0) <= 1e-6 * fabs(loss0))) {
		rc = pp_errorf(e, PP_ERUNTIME,
			       "the two forwards disagree: loss sum %.9g over %ld vs %.9g over %ld",
			       loss0, n_valid, loss_sum, n_valid2);
		goto done;
	}
	d.loss = loss_sum / (double)n_valid;
	d.moe_aux = s.moe.aux;
	ops->to_host(d.g, s.g, s.n_elems * sizeof *d.g);
	if (n_gen > 0) {
		sample_params sp = sample_defaults();
		sp.temperature = 0;
		d.n_prompt = d.T / 2 > 0 ? d.T / 2 : 1;
		d.n_gen = n_gen;
		d.gen = malloc((size_t)(d.n_prompt + n_gen) * sizeof *d.gen);
		if (!d.gen ||
		    (rc = decode_one(&s, d.tokens, d.n_prompt, n_gen, &sp, NULL, NULL, d.gen, e)))
			goto done;
	}
	rc = write_dump(out, c, &s, &d, e);
	if (!rc)
		log_info(
			"%s: %s, B=%d T=%d, %d tensors, %zu parameters, loss %.6f over %ld targets",
			out, pp_family_name(m->family), B, d.T, s.n_params, s.n_elems, d.loss,
			n_valid);
done:
	free(d.tokens);
	free(d.targets);
	free(d.logits);
	free(d.w);
	free(d.g);
	free(d.gen);
	stage_free(&s);
	return rc;
}

int main(int argc, char **argv)
{
	const char *out = NULL, *batch = "2", *seed = "1234", *gen = "0";
	const cli_opt opts[] = {
		{"-o", "OUT.h5", "output file (required)", &out, NULL},
		{"--batch", "B", "sequences in the batch (default 2)", &batch, NULL},
		{"--seed", "N", "seed of weights, noise and tokens (default 1234)", &seed, NULL},
		{"--generate", "N", "also N greedy tokens after half of row 0 (default 0)", &gen,
		 NULL},
		{NULL, NULL, NULL, NULL, NULL},
	};
	const cli_spec spec = {
		.tool = "tool_hf_dump",
		.usage = "--cfg FILE [key=value...] -o OUT.h5 [--batch B] [--seed N] [--generate N]",
		.summary = "Writes one forward and backward of the whole model to HDF5 for "
			   "tests/ref/hf_reference.py.",
		.opts = opts,
		.takes_config = true,
	};
	log_set_prefix(spec.tool, 0, 1);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	pp_err e = {0};
	cli_args args;
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0) {
		cli_free(&args);
		return 0;
	}
	char *bend, *send, *gend;
	long B = strtol(batch, &bend, 10), G = strtol(gen, &gend, 10);
	unsigned long long sd = strtoull(seed, &send, 10);
	if (!rc && !out)
		rc = pp_errorf(&e, PP_EUSAGE, "-o OUT.h5 is required");
	if (!rc && (*bend || B < 1 || B > 1024))
		rc = pp_errorf(&e, PP_EUSAGE, "--batch %s: expected an integer in [1, 1024]",
			       batch);
	if (!rc && (*gend || G < 0 || G > 4096))
		rc = pp_errorf(&e, PP_EUSAGE, "--generate %s: expected an integer in [0, 4096]",
			       gen);
	if (!rc && (*send || seed[0] == '-'))
		rc = pp_errorf(&e, PP_EUSAGE, "--seed %s: expected a non-negative integer", seed);
	pp_config c;
	memset(&c, 0, sizeof c);
	if (!rc)
		rc = pp_config_load(&c, args.cfg, args.n_overrides, args.overrides, &e);
	if (!rc)
		rc = run(&c, (int)B, (uint64_t)sd, (int)G, out, &e);
	if (rc)
		rc = cli_fail(&spec, &e);
	pp_config_free(&c);
	cli_free(&args);
	return rc;
}
