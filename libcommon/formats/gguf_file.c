/* The GGUF container: reading a mapped file that is checked whole at open,
 * metadata by key, and the byte buffer writers fill (gguf_file.h). */
#include "gguf_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const vtype_names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
					  "int32",  "float32", "bool",   "string", "array",
					  "uint64", "int64",   "float64"};
static const int vtype_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static const char *vtype_name(uint32_t t) { return t < GV_NTYPES ? vtype_names[t] : "?"; }

/* ---- reading ---- */

typedef struct {
	gguf_file *f;
	uint64_t pos;
	pp_err *e;
} cursor;

static uint64_t left(const cursor *c) { return c->f->size - c->pos; }

static int truncated(cursor *c, const char *what, uint64_t need)
{
	return pp_errorf(c->e, PP_ERUNTIME,
			 "%s: truncated GGUF file: %s at byte %llu needs %llu bytes, %llu are left",
			 c->f->path, what, (unsigned long long)c->pos, (unsigned long long)need,
			 (unsigned long long)left(c));
}

static int rd(cursor *c, void *out, size_t n, const char *what)
{
	if (n > left(c)) {
		truncated(c, what, n);
		return PP_ERUNTIME;
	}
	memcpy(out, c->f->map + c->pos, n);
	c->pos += n;
	return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static int rd_str(cursor *c, gguf_str *s, uint64_t max, const char *what)
{
	uint64_t n;
	if (rd_u64(c, &n, what))
		return PP_ERUNTIME;
	if (n > left(c))
		return pp_errorf(
			c->e, PP_ERUNTIME,
			"%s: %s at byte %llu is a string of %llu bytes, past the end of the "
			"file (%llu bytes left)",
			c->f->path, what, (unsigned long long)(c->pos - 8), (unsigned long long)n,
			(unsigned long long)left(c));
	if (n > max)
		return pp_errorf(c->e, PP_ERUNTIME,
				 "%s: %s at byte %llu is %llu bytes long (at most %llu)",
				 c->f->path, what, (unsigned long long)(c->pos - 8),
				 (unsigned long long)n, (unsigned long long)max);
	s->s = (const char *)c->f->map + c->pos;
	s->n = n;
	c->pos += n;
	return 0;
}

/* "key 'xyz'" for messages (the key may hold anything) */
static const char *kname(const gguf_str *k, char buf[96])
{
	size_t n = k->n < 64 ? (size_t)k->n : 64, j = 0;
	for (size_t i = 0; i < n; i++)
		buf[j++] = k->s[i] >= 0x20 && k->s[i] < 0x7F ? k->s[i] : '?';
	buf[j] = 0;
	if (k->n > 64)
		strcpy(buf + j, "...");
	return buf;
}

/* Skips (checking) one value of type t; arrays nest at most 8 deep. */
static int skip_value(cursor *c, uint32_t t, int depth, const char *key)
{
	if (t >= GV_NTYPES)
		return pp_errorf(c->e, PP_ERUNTIME, "%s: key '%s': unknown value type %u (0 to 12)",
				 c->f->path, key, t);
	if (t == GV_STRING) {
		gguf_str s;
		return rd_str(c, &s, UINT64_MAX, "a string value");
	}
	if (t != GV_ARRAY) {
		if ((uint64_t)vtype_size[t] > left(c))
			return truncated(c, "a value", (uint64_t)vtype_size[t]);
		c->pos += (uint64_t)vtype_size[t];
		return 0;
	}
	if (depth >= 8)
		return pp_errorf(c->e, PP_ERUNTIME, "%s: key '%s': arrays nested more than 8 deep",
				 c->f->path, key);
	uint32_t at;
	uint64_t n;
	if (rd_u32(c, &at, "an array's type") || rd_u64(c, &n, "an array's length"))
		return PP_ERUNTIME;
	if (at >= GV_NTYPES)
		return pp_errorf(c->e, PP_ERUNTIME,
				 "%s: key '%s': array of unknown value type %u (0 to 12)",
				 c->f->path, key, at);
	/* the least each element takes */
	uint64_t min = at == GV_STRING ? 8 : at == GV_ARRAY ? 12 : (uint64_t)vtype_size[at];
	if (n > left(c) / min)
		return pp_errorf(
			c->e, PP_ERUNTIME,
			"%s: key '%s': an array of %llu %s values at byte %llu does not fit "
			"in the %llu bytes left",
			c->f->path, key, (unsigned long long)n, vtype_name(at),
			(unsigned long long)c->pos, (unsigned long long)left(c));
	if (at != GV_STRING && at != GV_ARRAY) {
		c->pos += n * min;
		return 0;
	}
	for (uint64_t i = 0; i < n; i++)
		if (skip_value(c, at, depth + 1, key))
			return PP_ERUNTIME;
	return 0;
}

static int cmp_kv(const void *a, const void *b)
{
	const gguf_kv *x = *(const gguf_kv *const *)a, *y = *(const gguf_kv *const *)b;
	int r = memcmp(x->key.s, y->key.s, x->key.n < y->key.n ? x->key.n : y->key.n);
	return r ? r : x->key.n < y->key.n ? -1 : x->key.n > y->key.n;
}

static int cmp_offset(const void *a, const void *b)
{
	const gguf_tinfo *x = *(const gguf_tinfo *const *)a, *y = *(const gguf_tinfo *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int read_kvs(cursor *c)
{
	gguf_file *f = c->f;
	char kb[96];
	for (uint64_t i = 0; i < f->n_kv; i++) {
		gguf_kv *kv = &f->kv[i];
		if (rd_str(c, &kv->key, 65535, "a metadata key") ||
		    rd_u32(c, &kv->type, "a value type"))
			return pp_err_prefix(c->e, "metadata pair %llu", (unsigned long long)i);
		if (!kv->key.n)
			return pp_errorf(c->e, PP_ERUNTIME,
					 "%s: metadata pair %llu has an empty key", f->path,
					 (unsigned long long)i);
		kname(&kv->key, kb);
		kv->at = c->pos;
		if (kv->type == GV_ARRAY) {
			if (c->f->size - c->pos < 12)
				return truncated(c, "an array header", 12);
			memcpy(&kv->atype, f->map + c->pos, 4);
			memcpy(&kv->count, f->map + c->pos + 4, 8);
			kv->at = c->pos + 12;
		}
		if (skip_value(c, kv->type, 0, kb))
			return PP_ERUNTIME;
	}
	/* keys are unique */
	const gguf_kv **order = malloc((f->n_kv + 1) * sizeof *order);
	if (!order)
		return pp_errorf(c->e, PP_ERUNTIME, "%s: out of memory", f->path);
	for (uint64_t i = 0; i < f->n_kv; i++)
		order[i] = &f->kv[i];
	qsort(order, f->n_kv, sizeof *order, cmp_kv);
	int rc = 0;
	for (uint64_t i = 1; i < f->n_kv && !rc; i++)
		if (!cmp_kv(&order[i - 1], &order[i]))
			rc = pp_errorf(c->e, PP_ERUNTIME, "%s: metadata key '%s' appears twice",
				       f->path, kname(&order[i]->key, kb));
	free(order);
	return rc;
}

static int read_tensor_infos(cursor *c)
{
	gguf_file *f = c->f;
	char nb[96];
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		gguf_tinfo *t = &f->ti[i];
		uint32_t nd, type;
		if (rd_str(c, &t->name, GGUF_MAX_NAME, "a tensor name"))
			return pp_err_prefix(c->e, "tensor info %llu", (unsigned long long)i);
		const char *name = kname(&t->name, nb);
		if (rd_u32(c, &nd, "a tensor's dimension count"))
			return pp_err_prefix(c->e, "tensor '%s'", name);
		if (nd < 1 || nd > GGUF_MAX_DIMS)
			return pp_errorf(c->e, PP_ERUNTIME,
					 "%s: tensor '%s' has %u dimensions (1 to %d)", f->path,
					 name, nd, GGUF_MAX_DIMS);
		t->ndim = (int)nd;
		t->numel = 1;
		for (uint32_t d = 0; d < nd; d++) {
			uint64_t ne;
			if (rd_u64(c, &ne, "a tensor dimension"))
				return pp_err_prefix(c->e, "tensor '%s'", name);
			if (ne < 1 || ne > (uint64_t)INT64_MAX / (uint64_t)t->numel ||
			    ne * (uint64_t)t->numel > ((uint64_t)1 << 50))
				return pp_errorf(
					c->e, PP_ERUNTIME,
					"%s: tensor '%s': dimension %u is %llu (the tensor "
					"must have 1 to 2^50 elements)",
					f->path, name, d, (unsigned long long)ne);
			t->ne[d] = (int64_t)ne;
			t->numel *= (int64_t)ne;
		}
		if (rd_u32(c, &type, "a tensor type") || rd_u64(c, &t->offset, "a tensor offset"))
			return pp_err_prefix(c->e, "tensor '%s'", name);
		if (!(t->type = gguf_type_of(type))) {
			const char *other = gguf_type_other_name(type);
			if (other)
				return pp_errorf(
					c->e, PP_EUSAGE,
					"%s: tensor '%s' is of type %s, which pp does not read "
					"(F32, F16, BF16, F64, Q8_0, Q4_0, Q4_1)",
					f->path, name, other);
			return pp_errorf(c->e, PP_ERUNTIME,
					 "%s: tensor '%s' has an unknown type %u", f->path, name,
					 type);
		}
		if (t->ne[0] % t->type->block)
			return pp_errorf(
				c->e, PP_ERUNTIME,
				"%s: tensor '%s' of type %s has rows of %lld elements, not a "
				"multiple of its block of %d",
				f->path, name, t->type->name, (long long)t->ne[0], t->type->block);
		t->nbytes = gguf_nbytes(t->type, t->numel);
	}
	return 0;
}

/* Offsets aligned, inside the data section, and no two tensors overlapping. */
static int check_extents(gguf_file *f, pp_err *e)
{
	char nb[96], nb2[96];
	const uint64_t room = f->size - f->data;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const gguf_tinfo *t = &f->ti[i];
		if (t->offset % f->alignment)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: tensor '%s' is at offset %llu, not a multiple of the "
					 "alignment %llu",
					 f->path, kname(&t->name, nb),
					 (unsigned long long)t->offset,
					 (unsigned long long)f->alignment);
		if (t->offset > room || t->nbytes > room - t->offset)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: tensor '%s' (%llu bytes at offset %llu of the data "
					 "section) ends past the end of the file (the data section "
					 "holds %llu bytes): truncated or corrupt",
					 f->path, kname(&t->name, nb),
					 (unsigned long long)t->nbytes,
					 (unsigned long long)t->offset, (unsigned long long)room);
	}
	const gguf_tinfo **order = malloc((f->n_tensors + 1) * sizeof *order);
	if (!order)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", f->path);
	for (uint64_t i = 0; i < f->n_tensors; i++)
		order[i] = &f->ti[i];
	qsort(order, f->n_tensors, sizeof *order, cmp_offset);
	int rc = 0;
	for (uint64_t i = 1; i < f->n_tensors && !rc; i++)
		if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
			rc = pp_errorf(e, PP_ERUNTIME,
				       "%s: tensors '%s' and '%s' overlap in the data section",
				       f->path, kname(&order[i - 1]->name, nb),
				       kname(&order[i]->name, nb2));
	free(order);
	return rc;
}

static int parse(gguf_file *f, pp_err *e)
{
	cursor c = {f, 0, e};
	char magic[4];
	if (f->size < 24)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: %zu bytes: too short for a GGUF header (24 bytes)", f->path,
				 f->size);
	rd(&c, magic, 4, "the magic");
	if (memcmp(magic, "GGUF", 4))
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: not a GGUF file: it starts with %02X %02X %02X %02X, not \"GGUF\"",
			f->path, (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2],
			(uint8_t)magic[3]);
	rd_u32(&c, &f->version, "the version");
	if ((f->version & 0xFFFF) == 0 && f->version)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: a big-endian GGUF file (version %u byte-swapped): pp reads "
				 "little-endian ones",
				 f->path, __builtin_bswap32(f->version));
	if (f->version != 2 && f->version != 3)
		return pp_errorf(e, PP_ERUNTIME, "%s: GGUF version %u: pp reads versions 2 and 3",
				 f->path, f->version);
	rd_u64(&c, &f->n_tensors, "the tensor count");
	rd_u64(&c, &f->n_kv, "the metadata count");
	/* each tensor info takes at least 28 bytes, each pair 13 */
	if (f->n_tensors > GGUF_MAX_TENSORS || f->n_tensors > left(&c) / 28)
		return pp_errorf(e, PP_ERUNTIME,
				 "%s: %llu tensors: more than the file can hold (or than %d)",
				 f->path, (unsigned long long)f->n_tensors, GGUF_MAX_TENSORS);
	if (f->n_kv > GGUF_MAX_KV || f->n_kv > left(&c) / 13)
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: %llu metadata pairs: more than the file can hold (or than %d)",
			f->path, (unsigned long long)f->n_kv, GGUF_MAX_KV);
	f->kv = calloc(f->n_kv + 1, sizeof *f->kv);
	f->ti = calloc(f->n_tensors + 1, sizeof *f->ti);
	if (!f->kv || !f->ti)
		return pp_errorf(e, PP_ERUNTIME, "%s: out of memory", f->path);
	int rc = read_kvs(&c);
	if (!rc)
		rc = read_tensor_infos(&c);
	uint64_t a = 32;
	if (!rc)
		rc = gguf_get_uint(f, "general.alignment", false, &a, e);
	if (rc)
		return rc;
	if (a == 0 || (a & (a - 1)) || a > (1u << 20))
		return pp_errorf(
			e, PP_ERUNTIME,
			"%s: general.alignment is %llu: expected a power of two up to 2^20",
			f->path, (unsigned long long)a);
	f->alignment = a;
	f->data = (c.pos + a - 1) / a * a;
	if (f->data > f->size) {
		if (f->n_tensors)
			return pp_errorf(e, PP_ERUNTIME,
					 "%s: truncated GGUF file: the data section would start at "
					 "byte %llu, past the end (%zu bytes)",
					 f->path, (unsigned long long)f->data, f->size);
		f->data = f->size;
	}
	return check_extents(f, e);
}

int gguf_file_open(gguf_file *f, const char *path, pp_err *e)
{
	memset(f, 0, sizeof *f);
	snprintf(f->path, sizeof f->path, "%s", path);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pp_errorf(e, errno == ENOENT ? PP_EUSAGE : PP_ERUNTIME, "%s: %s", path,
				 strerror(errno));
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st))
		rc = pp_errorf(e, PP_ERUNTIME, "%s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = pp_errorf(e, PP_EUSAGE, "%s: not a regular file (expected a .gguf file)",
			       path);
	else if (st.st_size < 24)
		rc = pp_errorf(e, PP_ERUNTIME,
			       "%s: %lld bytes: too short for a GGUF header (24 bytes)", path,
			       (long long)st.st_size);
	if (!rc) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED)
			rc = pp_errorf(e, PP_ERUNTIME, "%s: mmap: %s", path, strerror(errno));
		else {
			f->map = m;
			f->size = (size_t)st.st_size;
		}
	}
	close(fd);
	if (!rc)
		rc = parse(f, e);
	if (rc)
		gguf_file_close(f);
	return rc;
}

void gguf_file_close(gguf_file *f)
{
	if (f->map)
		munmap((void *)f->map, f->size);
	free(f->kv);
	free(f->ti);
	f->map = NULL;
	f->kv = NULL;
	f->ti = NULL;
}

/* ---- metadata by key ---- */

bool gguf_str_is(gguf_str s, const char *c) { return s.n == strlen(c) && !memcmp(s.s, c, s.n); }

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
	for (uint64_t i = 0; i < f->n_kv; i++)
		if (gguf_str_is(f->kv[i].key, key))
			return &f->kv[i];
	return NULL;
}

static int missing(const gguf_file *f, const char *key, pp_err *e)
{
	return pp_errorf(e, PP_ERUNTIME, "%s: the required metadata key %s is missing", f->path,
			 key);
}

static int wrong_type(const gguf_file *f, const gguf_kv *kv, const char *key, const char *want,
		      pp_err *e)
{
	return pp_errorf(e, PP_ERUNTIME, "%s: metadata %s is of type %s%s%s, expected %s", f->path,
			 key, vtype_name(kv->type), kv->type == GV_ARRAY ? " of " : "",
			 kv->type == GV_ARRAY ? vtype_name(kv->atype) : "", want);
}

/* A numeric scalar at p of type t. */
static int num_at(const uint8_t *p, uint32_t t, double *d, int64_t *i, bool *is_int)
{
	union {
		uint8_t u8;
		int8_t i8;
		uint16_t u16;
		int16_t i16;
		uint32_t u32;
		int32_t i32;
		float f32;
		uint64_t u64;
		int64_t i64;
		double f64;
	} v;
	if (t >= GV_NTYPES || !vtype_size[t])
		return -1;
	memcpy(&v, p, (size_t)vtype_size[t]);
	*is_int = true;
	switch (t) {
	case GV_U8:
	case GV_BOOL:
		*i = v.u8;
		break;
	case GV_I8:
		*i = v.i8;
		break;
	case GV_U16:
		*i = v.u16;
		break;
	case GV_I16:
		*i = v.i16;
		break;
	case GV_U32:
		*i = v.u32;
		break;
	case GV_I32:
		*i = v.i32;
		break;
	case GV_I64:
		*i = v.i64;
		break;
	case GV_U64:
		if (v.u64 > INT64_MAX)
			return -1;
		*i = (int64_t)v.u64;
		break;
	case GV_F32:
		*d = v.f32;
		*is_int = false;
		return 0;
	case GV_F64:
		*d = v.f64;
		*is_int = false;
		return 0;
	}
	*d = (double)*i;
	return 0;
}

int gguf_get_uint(const gguf_file *f, const char *key, bool required, uint64_t *out, pp_err *e)
{
	const gguf_kv *kv = gguf_find(f, key);
	if (!kv)
		return required ? missing(f, key, e) : 0;
	double d;
	int64_t i;
	bool is_int;
	if (kv->type == GV_BOOL || num_at(f->map + kv->at, kv->type, &d, &i, &is_int) || !is_int)
		return wrong_type(f, kv, key, "an integer", e);
	if (i < 0)
		return pp_errorf(e, PP_ERUNTIME, "%s: metadata %s is %lld, expected a count >= 0",
				 f->path, key, (long long)i);
	*out = (uint64_t)i;
	return 0;
}

int gguf_get_float(const gguf_file *f, const char *key, bool required, double *out, pp_err *e)
{
	const gguf_kv *kv = gguf_find(f, key);
	if (!kv)
		return required ? missing(f, key, e) : 0;
	double d;
	int64_t i;
	bool is_int;
	if (kv->type == GV_BOOL || num_at(f->map + kv->at, kv->type, &d, &i, &is_int))
		return wrong_type(f, kv, key, "a number", e);
	*out = d;
	return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, pp_err *e)
{
	const gguf_kv *kv = gguf_find(f, key);
	if (!kv)
		return 0;
	if (kv->type != GV_BOOL)
		return wrong_type(f, kv, key, "a bool", e);
	*out = f->map[kv->at] != 0;
	return 0;
}

int gguf_get_string(const gguf_file *f, const char *key, bool required, gguf_str *out, pp_err *e)
{
	const gguf_kv *kv = gguf_find(f, key);
	if (!kv)
		return required ? missing(f, key, e) : 0;
	if (kv->type != GV_STRING)
		return wrong_type(f, kv, key, "a string", e);
	uint64_t pos = kv->at;
	*out = gguf_array_next_str(f, &pos);
	return 0;
}

int gguf_get_array(const gguf_file *f, const char *key, int atype, bool required,
		   const gguf_kv **out, pp_err *e)
{
	const gguf_kv *kv = gguf_find(f, key);
	*out = NULL;
	if (!kv)
		return required ? missing(f, key, e) : 0;
	if (kv->type != GV_ARRAY || (atype >= 0 && kv->atype != (uint32_t)atype)) {
		char want[32];
		snprintf(want, sizeof want, "an array of %s",
			 atype >= 0 ? vtype_name((uint32_t)atype) : "values");
		return wrong_type(f, kv, key, want, e);
	}
	*out = kv;
	return 0;
}

double gguf_array_num(const gguf_file *f, const gguf_kv *kv, uint64_t i)
{
	double d = 0;
	int64_t v;
	bool is_int;
	if (kv->atype < GV_NTYPES && vtype_size[kv->atype] && i < kv->count &&
	    num_at(f->map + kv->at + i * (uint64_t)vtype_size[kv->atype], kv->atype, &d, &v,
		   &is_int))
		d = 0;
	return d;
}

gguf_str gguf_array_next_str(const gguf_file *f, uint64_t *pos)
{
	uint64_t n;
	memcpy(&n, f->map + *pos, 8);
	gguf_str s = {(const char *)f->map + *pos + 8, n};
	*pos += 8 + n;
	return s;
}

/* ---- writing ---- */

void gguf_put_bytes(gguf_buf *b, const void *p, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (b->n + n > cap)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

void gguf_put_u32(gguf_buf *b, uint32_t v) { gguf_put_bytes(b, &v, 4); }
void gguf_put_u64(gguf_buf *b, uint64_t v) { gguf_put_bytes(b, &v, 8); }

void gguf_put_str(gguf_buf *b, const char *s, size_t n)
{
	gguf_put_u64(b, n);
	gguf_put_bytes(b, s, n);
}

static void key(gguf_buf *b, const char *k, uint32_t type)
{
	gguf_put_str(b, k, strlen(k));
	gguf_put_u32(b, type);
	b->n_kv++;
}

void gguf_kv_u32(gguf_buf *b, const char *k, uint32_t v)
{
	key(b, k, GV_U32);
	gguf_put_u32(b, v);
}

void gguf_kv_i32(gguf_buf *b, const char *k, int32_t v)
{
	key(b, k, GV_I32);
	gguf_put_bytes(b, &v, 4);
}

void gguf_kv_f32(gguf_buf *b, const char *k, float v)
{
	key(b, k, GV_F32);
	gguf_put_bytes(b, &v, 4);
}

void gguf_kv_bool(gguf_buf *b, const char *k, bool v)
{
	uint8_t x = v;
	key(b, k, GV_BOOL);
	gguf_put_bytes(b, &x, 1);
}

void gguf_kv_str(gguf_buf *b, const char *k, const char *v)
{
	key(b, k, GV_STRING);
	gguf_put_str(b, v, strlen(v));
}

void gguf_kv_array(gguf_buf *b, const char *k, uint32_t atype, uint64_t count)
{
	key(b, k, GV_ARRAY);
	gguf_put_u32(b, atype);
	gguf_put_u64(b, count);
}
