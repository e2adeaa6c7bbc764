/* tool_h5_same A.h5 B.h5 PATH...: every dataset under each PATH of the two
 * files (a group, or a dataset itself) is bitwise equal (same names, types,
 * shapes and bytes). Prints the
 * number of datasets compared; exit 0 when all are equal, 1 when any
 * differs or when there is nothing to compare (a missing file or group, a
 * group with no dataset), 2 on a usage error. The shell tests' stand-in for
 * h5diff, which the GPU machines lack. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	hid_t other;       /* the same group in file B */
	const char *a, *b; /* file names, for messages */
	const char *group;
	int n, bad;
} walk;

static int same_dataset(hid_t da, hid_t db, const char *name, walk *w)
{
	hid_t ta = H5Dget_type(da), tb = H5Dget_type(db);
	hid_t sa = H5Dget_space(da), sb = H5Dget_space(db);
	int ok = H5Tequal(ta, tb) > 0 && H5Sextent_equal(sa, sb) > 0;
	if (!ok)
		fprintf(stderr, "tool_h5_same: %s%s%s: type or shape differs\n", w->group,
			*name ? "/" : "", name);
	size_t bytes = (size_t)H5Sget_select_npoints(sa) * H5Tget_size(ta);
	char *x = ok ? malloc(bytes + 1) : NULL, *y = ok ? malloc(bytes + 1) : NULL;
	if (ok && (!x || !y || H5Dread(da, ta, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0 ||
		   H5Dread(db, ta, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) < 0)) {
		fprintf(stderr, "tool_h5_same: %s%s%s: cannot read\n", w->group, *name ? "/" : "",
			name);
		ok = 0;
	}
	if (ok && memcmp(x, y, bytes) != 0) {
		fprintf(stderr, "tool_h5_same: %s%s%s differs\n", w->group, *name ? "/" : "", name);
		ok = 0;
	}
	free(x);
	free(y);
	H5Tclose(ta);
	H5Tclose(tb);
	H5Sclose(sa);
	H5Sclose(sb);
	return ok;
}

static herr_t visit(hid_t ga, const char *name, const H5O_info_t *info, void *arg)
{
	walk *w = arg;
	if (info->type != H5O_TYPE_DATASET)
		return 0;
	hid_t da = H5Dopen2(ga, name, H5P_DEFAULT);
	hid_t db = H5Lexists(w->other, name, H5P_DEFAULT) > 0
			   ? H5Dopen2(w->other, name, H5P_DEFAULT)
			   : -1;
	if (db < 0) {
		fprintf(stderr, "tool_h5_same: %s/%s is in %s only\n", w->group, name, w->a);
		w->bad = 1;
	} else if (!same_dataset(da, db, name, w)) {
		w->bad = 1;
	}
	w->n++;
	H5Dclose(da);
	if (db >= 0)
		H5Dclose(db);
	return w->bad; /* the first difference is enough */
}

/* the number of datasets under group g */
static herr_t count(hid_t g, const char *name, const H5O_info_t *info, void *arg)
{
	(void)g;
	(void)name;
	*(int *)arg += info->type == H5O_TYPE_DATASET;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: tool_h5_same A.h5 B.h5 GROUP...\n");
		return 2;
	}
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	hid_t fa = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
	hid_t fb = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
	if (fa < 0 || fb < 0) {
		fprintf(stderr, "tool_h5_same: cannot open %s as HDF5\n", argv[fa < 0 ? 1 : 2]);
		return 1;
	}
	int total = 0, bad = 0;
	for (int i = 3; i < argc && !bad; i++) {
		const char *g = argv[i];
		if (H5Lexists(fa, g, H5P_DEFAULT) <= 0 || H5Lexists(fb, g, H5P_DEFAULT) <= 0) {
			fprintf(stderr, "tool_h5_same: no %s in %s\n", g,
				argv[H5Lexists(fa, g, H5P_DEFAULT) <= 0 ? 1 : 2]);
			bad = 1;
			break;
		}
		H5O_info_t info;
		if (H5Oget_info_by_name2(fa, g, &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 &&
		    info.type == H5O_TYPE_DATASET) {
			hid_t da = H5Dopen2(fa, g, H5P_DEFAULT), db = H5Dopen2(fb, g, H5P_DEFAULT);
			walk w = {.a = argv[1], .b = argv[2], .group = g};
			bad = db < 0 || !same_dataset(da, db, "", &w);
			total++;
			H5Dclose(da);
			if (db >= 0)
				H5Dclose(db);
			continue;
		}
		hid_t ga = H5Gopen2(fa, g, H5P_DEFAULT), gb = H5Gopen2(fb, g, H5P_DEFAULT);
		walk w = {.other = gb, .a = argv[1], .b = argv[2], .group = g};
		int nb = 0;
		H5Ovisit2(ga, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &w, H5O_INFO_BASIC);
		H5Ovisit2(gb, H5_INDEX_NAME, H5_ITER_NATIVE, count, &nb, H5O_INFO_BASIC);
		if (!w.bad && w.n != nb) {
			fprintf(stderr, "tool_h5_same: %s: %d datasets in %s, %d in %s\n", g, w.n,
				argv[1], nb, argv[2]);
			w.bad = 1;
		}
		if (!w.bad && w.n == 0) {
			fprintf(stderr, "tool_h5_same: %s holds no dataset\n", g);
			w.bad = 1;
		}
		total += w.n;
		bad |= w.bad;
		H5Gclose(ga);
		H5Gclose(gb);
	}
	H5Fclose(fa);
	H5Fclose(fb);
	if (!bad)
		printf("%d datasets bitwise equal\n", total);
	return bad;
}
