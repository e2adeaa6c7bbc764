/* Cluster descriptions (cluster.h). */
#include "cluster.h"

#include <dirent.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"

/* pp on one H100 SXM (docs/PERFORMANCE.md, 2026-11-26..28): llama-1b at seq
 * 2048 and 4096 (47.2% and 45.0% MFU, the mean of two days) and twelve
 * llama2-7b layers at 4 x 4096 (53.5%), fitted with the cost model of
 * simulate.c (it gives 47.1%, 45.2% and 53.2%). */
const sim_efficiency sim_efficiency_h100 = {
	.gemm_max = 0.74,
	.gemm_half_flops = 2e9,
	.attn_max = 0.35,
	.attn_half_seq = 1024,
	.mem_eff = 0.80,
	.launch_us = 4,
	.source = "pp on one H100 SXM (docs/PERFORMANCE.md: llama-1b, llama2-7b layers)"};

static int list_known(const char *name, const char *dir, pp_err *e)
{
	char known[1024] = "";
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));) {
		size_t n = strlen(de->d_name);
		if (n > 5 && !strcmp(de->d_name + n - 5, ".json"))
			snprintf(known + strlen(known), sizeof known - strlen(known), "%s%.*s",
				 known[0] ? ", " : "", (int)(n - 5), de->d_name);
	}
	if (d)
		closedir(d);
	return pp_errorf(e, PP_EUSAGE, "unknown cluster '%s'; known: %s (in %s), or a file", name,
			 known[0] ? known : "none", dir);
}

/* a number field of o, > 0 unless zero_ok */
static int num(const char *file, json_t *o, const char *parent, const char *key, bool zero_ok,
	       double *out, pp_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_number(v))
		return pp_errorf(e, PP_EUSAGE, "%s: %s%s%s: a number is missing", file,
				 parent ? parent : "", parent ? "." : "", key);
	*out = json_number_value(v);
	if (!(*out > 0 || (zero_ok && *out == 0)))
		return pp_errorf(e, PP_EUSAGE, "%s: %s%s%s=%g must be %s", file,
				 parent ? parent : "", parent ? "." : "", key, *out,
				 zero_ok ? ">= 0" : "> 0");
	return 0;
}

static int obj(const char *file, json_t *root, const char *key, json_t **out, pp_err *e)
{
	*out = json_object_get(root, key);
	return json_is_object(*out)
		       ? 0
		       : pp_errorf(e, PP_EUSAGE, "%s: %s: an object is missing", file, key);
}

static int link_of(const char *file, json_t *root, const char *key, sim_link *l, pp_err *e)
{
	json_t *o;
	int rc = obj(file, root, key, &o, e);
	if (!rc)
		snprintf(l->name, sizeof l->name, "%s",
			 json_string_value(json_object_get(o, "name"))
				 ? json_string_value(json_object_get(o, "name"))
				 : key);
	if (!rc)
		rc = num(file, o, key, "bus_gbps", false, &l->bus_gbps, e);
	if (!rc)
		rc = num(file, o, key, "latency_us", true, &l->latency_us, e);
	return rc;
}

int sim_cluster_load(const char *name, sim_cluster *c, pp_err *e)
{
	memset(c, 0, sizeof *c);
	char path[PP_PATH_MAX + 64], dir[PP_PATH_MAX + 16];
	snprintf(dir, sizeof dir, "%s/clusters", pp_config_dir());
	const size_t n = strlen(name);
	const bool file = strchr(name, '/') || (n > 5 && !strcmp(name + n - 5, ".json"));
	if (file)
		snprintf(path, sizeof path, "%s", name);
	else
		snprintf(path, sizeof path, "%s/%s.json", dir, name);
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!root && !file)
		return list_known(name, dir, e);
	if (!root)
		return pp_errorf(e, PP_EUSAGE, "cluster %s: %s (line %d)", path, je.text, je.line);
	json_t *gpu = NULL;
	double gpn = 0;
	int rc = json_is_object(root)
			 ? obj(path, root, "gpu", &gpu, e)
			 : pp_errorf(e, PP_EUSAGE, "cluster %s: not a JSON object", path);
	if (!rc)
		rc = num(path, gpu, "gpu", "bf16_tflops", false, &c->bf16_tflops, e);
	if (!rc)
		rc = num(path, gpu, "gpu", "fp8_tflops", true, &c->fp8_tflops, e);
	if (!rc && json_object_get(gpu, "fp32_tflops"))
		rc = num(path, gpu, "gpu", "fp32_tflops", false, &c->fp32_tflops, e);
	else if (!rc)
		c->fp32_tflops = c->bf16_tflops / 16;
	if (!rc)
		rc = num(path, gpu, "gpu", "hbm_gib", false, &c->hbm_gib, e);
	if (!rc)
		rc = num(path, gpu, "gpu", "hbm_gbps", false, &c->hbm_gbps, e);
	if (!rc)
		rc = num(path, root, NULL, "gpus_per_node", false, &gpn, e);
	if (!rc)
		rc = link_of(path, root, "intra_node", &c->intra, e);
	if (!rc)
		rc = link_of(path, root, "inter_node", &c->inter, e);
	if (!rc) {
		const char *s = json_string_value(json_object_get(root, "name"));
		snprintf(c->name, sizeof c->name, "%s", s ? s : name);
		s = json_string_value(json_object_get(root, "description"));
		snprintf(c->description, sizeof c->description, "%s", s ? s : "");
		s = json_string_value(json_object_get(gpu, "name"));
		snprintf(c->gpu, sizeof c->gpu, "%s", s ? s : "GPU");
		c->gpus_per_node = (int)gpn;
		c->eff = sim_efficiency_h100;
	}
	json_t *cal = json_object_get(root, "efficiency");
	if (!rc && cal) { /* a calibration of its own (pp-init --calibrate writes one) */
		sim_efficiency *f = &c->eff;
		const char *k[] = {"gemm_max",      "gemm_half_flops", "attn_max",
				   "attn_half_seq", "mem_eff",         "launch_us"};
		double *v[] = {&f->gemm_max,      &f->gemm_half_flops, &f->attn_max,
			       &f->attn_half_seq, &f->mem_eff,         &f->launch_us};
		for (int i = 0; i < 6 && !rc; i++)
			rc = num(path, cal, "efficiency", k[i], i == 5, v[i], e);
		const char *s = json_string_value(json_object_get(cal, "source"));
		snprintf(f->source, sizeof f->source, "%.200s", s ? s : path);
	}
	json_decref(root);
	return rc;
}

int sim_kernels_set(sim_kernels *k, const char *kv, pp_err *e)
{
	static const struct {
		const char *key, *pp, *other;
		size_t field;
	} keys[] = {
		{"sim.attention", "fused", "materialized",
		 offsetof(sim_kernels, attention_materialized)},
		{"sim.embedding", "gather", "onehot", offsetof(sim_kernels, embedding_onehot)},
	};
	const char *eq = strchr(kv, '=');
	const size_t n = eq ? (size_t)(eq - kv) : strlen(kv);
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
		if (strlen(keys[i].key) != n || strncmp(kv, keys[i].key, n))
			continue;
		bool *f = (bool *)((char *)k + keys[i].field);
		if (eq && !strcmp(eq + 1, keys[i].pp))
			*f = false;
		else if (eq && !strcmp(eq + 1, keys[i].other))
			*f = true;
		else
			return pp_errorf(e, PP_EUSAGE, "%s=%s: expected %s (pp's) or %s",
					 keys[i].key, eq ? eq + 1 : "", keys[i].pp, keys[i].other);
		return 0;
	}
	return pp_errorf(e, PP_EUSAGE, "%.*s: unknown key (sim.attention, sim.embedding)", (int)n,
			 kv);
}
