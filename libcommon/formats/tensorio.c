/* The format registry and the one loop that import, export and convert
 * share (tensorio.h). */
#include "tensorio.h"
#include "../base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *tio_dtype_name(tio_dtype t)
{
	static const char *const names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "F64"};
	return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

int64_t tio_numel(const tio_tensor *t)
{
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

uint64_t tio_raw_bytes(const tio_tensor *t)
{
	static const int block[] = {
		[TIO_F32] = 1,   [TIO_F16] = 1,   [TIO_BF16] = 1, [TIO_Q8_0] = 32,
		[TIO_Q4_0] = 32, [TIO_Q4_1] = 32, [TIO_F64] = 1};
	static const int bytes[] = {
		[TIO_F32] = 4,   [TIO_F16] = 2,   [TIO_BF16] = 2, [TIO_Q8_0] = 34,
		[TIO_Q4_0] = 18, [TIO_Q4_1] = 20, [TIO_F64] = 8};
	const int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 1;
	if (cols % block[t->dtype])
		return 0;
	return (uint64_t)(tio_numel(t) / block[t->dtype]) * (uint64_t)bytes[t->dtype];
}

int tio_model_cfg(const tio_meta *meta, pp_model_cfg *out, pp_err *e)
{
	if (!meta->model || !json_is_object(meta->model))
		return pp_errorf(e, PP_EUSAGE, "no model configuration");
	json_t *root = json_pack("{sO}", "model", meta->model);
	char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	if (!text)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	pp_config c;
	int rc = pp_config_from_json(&c, text, e);
	free(text);
	if (!rc)
		*out = c.model;
	pp_config_free(&c);
	return rc;
}

typedef struct {
	const char *name;
	int (*source)(const char *path, tio_source **out, pp_err *e);
	int (*sink)(const char *path, const tio_sink_opts *o, tio_sink **out, pp_err *e);
	bool takes_state; /* its sink keeps training state (tio_tensor.state) */
} format;

static const format formats[] = {
	{"pp", tio_open_pp, tio_sink_pp, true},
	{"safetensors", tio_open_safetensors, tio_sink_safetensors, false},
	{"gguf", tio_open_gguf, tio_sink_gguf, false},
	{"llama2c", NULL, tio_sink_llama2c, false},
	{"peft", NULL, tio_sink_peft, false},
};

static const format *find(const char *name, bool sink, pp_err *e)
{
	for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
		if (name && !strcmp(name, formats[i].name) &&
		    (sink ? formats[i].sink != NULL : formats[i].source != NULL))
			return &formats[i];
	pp_errorf(e, PP_EUSAGE, "format '%s': expected %s", name ? name : "(none)",
		  sink ? "pp, safetensors, gguf, llama2c or peft" : "pp, safetensors or gguf");
	return NULL;
}

int tio_open_source(const char *fmt, const char *path, tio_source **out, pp_err *e)
{
	*out = NULL;
	const format *f = find(fmt, false, e);
	return f ? f->source(path, out, e) : PP_EUSAGE;
}

int tio_open_sink(const char *fmt, const char *path, const tio_sink_opts *o, tio_sink **out,
		  pp_err *e)
{
	*out = NULL;
	const format *f = find(fmt, true, e);
	if (!f)
		return PP_EUSAGE;
	/* a source lists its training state last (tio_tensor.state): a sink of
	 * parameters alone sees the tensors before it, and tio_copy skips it */
	tio_sink_opts params = *o;
	while (!f->takes_state && params.n > 0 && params.tensors[params.n - 1].state)
		params.n--;
	return f->sink(path, &params, out, e);
}

/* "12.3 s" / "4 min 05 s" */
static void duration(char *buf, size_t n, double s)
{
	if (s < 60)
		snprintf(buf, n, "%.1f s", s);
	else
		snprintf(buf, n, "%d min %02d s", (int)(s / 60), (int)s % 60);
}

int tio_copy(tio_source *src, tio_sink *sink, bool with_adam, const char *progress, tio_stats *st,
	     pp_err *e)
{
	tio_stats s = {0};
	int64_t total = 0, done = 0, largest = 0;
	for (int i = 0; i < src->n; i++) {
		int64_t n = tio_numel(&src->tensors[i]);
		total += n;
		largest = n > largest ? n : largest;
	}
	const int groups = with_adam ? 3 : 1;
	float *buf[3] = {NULL, NULL, NULL};
	int rc = 0;
	for (int g = 0; g < groups && !rc; g++)
		if (!(buf[g] = malloc((size_t)(largest > 0 ? largest : 1) * sizeof(float))))
			rc = pp_errorf(e, PP_ERUNTIME,
				       "out of memory for a tensor of %lld elements (%.1f MB)",
				       (long long)largest, 4e-6 * (double)largest);
	s.peak_buffer_bytes = (size_t)groups * (size_t)largest * sizeof(float);
	const double t0 = clock_seconds();
	double last = t0;
	static const char *const group[3] = {"params", "adam_m", "adam_v"};
	for (int i = 0; i < src->n && !rc; i++) {
		const tio_tensor *t = &src->tensors[i];
		const int64_t n = tio_numel(t);
		if (t->state) { /* the parameters alone, where the sink keeps them */
			if (sink->takes_state && !(rc = src->read(src, i, group[0], buf[0], e)))
				rc = sink->put(sink, t, buf[0], NULL, NULL, e);
			if (rc)
				pp_err_prefix(e, "%s", t->name);
			continue;
		}
		if (with_adam && !t->adam) {
			rc = pp_errorf(e, PP_EUSAGE,
				       "%s holds no optimizer state for %s (--params-only copies "
				       "parameters alone)",
				       src->format, t->name);
			break;
		}
		for (int g = 0; g < groups && !rc; g++)
			rc = src->read(src, i, group[g], buf[g], e);
		if (!rc)
			rc = sink->put(sink, t, buf[0], with_adam ? buf[1] : NULL,
				       with_adam ? buf[2] : NULL, e);
		if (rc) {
			pp_err_prefix(e, "%s", t->name);
			break;
		}
		done += n;
		s.tensors++;
		s.elements += n;
		s.bytes_read += (double)groups * (double)n * sizeof(float);
		const double tn = clock_seconds();
		if (progress && (tn - last >= 1.0 || i + 1 == src->n)) {
			char el[32], eta[32];
			duration(el, sizeof el, tn - t0);
			duration(eta, sizeof eta,
				 done > 0 ? (tn - t0) * (double)(total - done) / (double)done : 0);
			fprintf(stderr, "%s: %d/%d tensors, %.1f%% of %.3g elements, %s, ETA %s\n",
				progress, i + 1, src->n,
				total ? 100.0 * (double)done / (double)total : 100.0, (double)total,
				el, eta);
			last = tn;
		}
	}
	for (int g = 0; g < 3; g++)
		free(buf[g]);
	if (!rc && src->check)
		rc = src->check(src, e);
	if (rc)
		sink->abort(sink);
	else
		rc = sink->finish(sink, e);
	s.seconds = clock_seconds() - t0;
	if (st)
		*st = s;
	return rc;
}
