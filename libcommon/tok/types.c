/* The id and byte buffers (types.h). */
#include "types.h"

#include <stdlib.h>
#include <string.h>

int tok_ids_push(tok_ids *v, int id)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		int *p = realloc(v->ids, cap * sizeof *p);
		if (!p)
			return -1;
		v->ids = p;
		v->cap = cap;
	}
	v->ids[v->n++] = id;
	return 0;
}

int tok_text_append(tok_text *v, const char *s, size_t n)
{
	if (v->n + n + 1 > v->cap) {
		size_t cap = v->cap ? v->cap : 256;
		while (v->n + n + 1 > cap)
			cap *= 2;
		char *p = realloc(v->s, cap);
		if (!p)
			return -1;
		v->s = p;
		v->cap = cap;
	}
	memcpy(v->s + v->n, s, n);
	v->n += n;
	v->s[v->n] = 0; /* always a C string too */
	return 0;
}

void tok_ids_free(tok_ids *v)
{
	free(v->ids);
	*v = (tok_ids){0};
}

void tok_text_free(tok_text *v)
{
	free(v->s);
	*v = (tok_text){0};
}
