/* A token file's documents in order, for scoring (data.h). */
#include <stdlib.h>

#include "data.h"
#include "source.h"

struct data_docs {
	data_corpus c;
	uint64_t off[2];
};

int data_docs_open(data_docs **out, const char *path, pp_err *e)
{
	*out = NULL;
	const corpus_format *fmt = corpus_probe(path);
	if (!fmt)
		return corpus_unknown("--data", path, e);
	data_docs *d = calloc(1, sizeof *d);
	if (!d)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	int rc = fmt->open(&d->c, path, CORPUS_ANY, e);
	if (rc) {
		free(d);
		return rc;
	}
	d->c.fmt = fmt;
	*out = d;
	return 0;
}

uint64_t data_docs_count(const data_docs *d) { return d->c.n_docs; }

const char *data_docs_name(const data_docs *d) { return d->c.path; }

bool data_docs_masked(const data_docs *d) { return d->c.has_mask; }

int data_docs_read(data_docs *d, uint64_t i, int **ids, uint8_t **mask, size_t *n, pp_err *e)
{
	if (i >= d->c.n_docs)
		return pp_errorf(e, PP_EUSAGE, "%s: document %llu of %llu", d->c.path,
				 (unsigned long long)i, (unsigned long long)d->c.n_docs);
	int rc = d->c.fmt->offsets(&d->c, i, 2, d->off, e);
	if (rc)
		return rc;
	*n = (size_t)(d->off[1] - d->off[0]);
	int *p = realloc(*ids, (*n + 1) * sizeof *p);
	if (!p)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	*ids = p;
	rc = *n ? d->c.fmt->read(&d->c, d->off[0], *n, p, e) : 0;
	if (rc || !mask || !d->c.has_mask)
		return rc;
	uint8_t *m = realloc(*mask, *n + 1);
	if (!m)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	*mask = m;
	return *n ? d->c.fmt->read_mask(&d->c, d->off[0], *n, m, e) : 0;
}

void data_docs_close(data_docs *d)
{
	if (!d)
		return;
	d->c.fmt->close(&d->c);
	free(d);
}
