#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#ifndef PP_VERSION
#define PP_VERSION "dev"
#endif

static void usage(const cli_spec *s, FILE *f)
{
	fprintf(f, "usage: %s %s\n\n%s\n\noptions:\n", s->tool, s->usage, s->summary);
	if (s->takes_config) {
		fprintf(f, "  %-22s %s\n", "--cfg FILE", "run config (JSON); see pp-config(5)");
		fprintf(f, "  %-22s %s\n", "key=value",
			"override a config key (nested keys dotted)");
	}
	for (const cli_opt *o = s->opts; o && o->name; o++) {
		char left[64];
		snprintf(left, sizeof left, "%s%s%s", o->name, o->arg ? " " : "",
			 o->arg ? o->arg : "");
		fprintf(f, "  %-22s %s\n", left, o->help);
	}
	fprintf(f, "  %-22s %s\n  %-22s %s\n\nSee %s(1).\n", "--help", "show this help",
		"--version", "show the version", s->man ? s->man : s->tool);
}

int cli_parse(const cli_spec *s, int argc, char **argv, cli_args *out, pp_err *e)
{
	memset(out, 0, sizeof *out);
	out->overrides = calloc((size_t)argc + 1, sizeof(char *));
	out->positional = calloc((size_t)argc + 1, sizeof(char *));
	if (!out->overrides || !out->positional)
		return pp_errorf(e, PP_ERUNTIME, "out of memory");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(s, stdout);
			return -1;
		}
		if (!strcmp(a, "--version")) {
			printf("%s %s\n", s->tool, PP_VERSION);
			return -1;
		}
		if (s->takes_config && !strcmp(a, "--cfg")) {
			if (i + 1 >= argc)
				return pp_errorf(e, PP_EUSAGE, "--cfg needs a FILE");
			out->cfg = argv[++i];
			continue;
		}
		const cli_opt *o = s->opts;
		for (; o && o->name; o++)
			if (!strcmp(a, o->name))
				break;
		if (o && o->name) {
			if (o->flag) {
				*o->flag = true;
			} else {
				if (i + 1 >= argc)
					return pp_errorf(e, PP_EUSAGE, "%s needs %s", o->name,
							 o->arg);
				*o->value = argv[++i];
			}
			continue;
		}
		if (a[0] != '-' && s->takes_config && strchr(a, '=')) {
			out->overrides[out->n_overrides++] = argv[i];
			continue;
		}
		if ((a[0] != '-' || !a[1]) && out->n_positional < s->max_positional) {
			out->positional[out->n_positional++] = argv[i];
			continue;
		}
		return pp_errorf(e, PP_EUSAGE, "unknown argument '%s' (see %s --help)", a, s->tool);
	}
	return 0;
}

void cli_free(cli_args *a)
{
	free(a->overrides);
	free(a->positional);
	memset(a, 0, sizeof *a);
}

int cli_fail(const cli_spec *s, const pp_err *e)
{
	(void)s;
	if (e->msg[0]) /* empty when already printed */
		log_error("%s", e->msg);
	return e->code ? e->code : PP_ERUNTIME;
}

int cli_long(const char *opt, const char *s, long lo, long hi, long *v, pp_err *e)
{
	char *end;
	errno = 0;
	*v = strtol(s, &end, 10);
	if (!*s || *end || errno || *v < lo || *v > hi)
		return pp_errorf(e, PP_EUSAGE, "%s '%s': expected a whole number from %ld to %ld",
				 opt, s, lo, hi);
	return 0;
}

int cli_double(const char *opt, const char *s, double lo, double hi, double *v, pp_err *e)
{
	char *end;
	*v = strtod(s, &end);
	if (!*s || *end || !(*v >= lo && *v <= hi))
		return pp_errorf(e, PP_EUSAGE, "%s '%s': expected a number from %g to %g", opt, s,
				 lo, hi);
	return 0;
}
