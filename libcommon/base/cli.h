/* Shared command-line parsing: every tool takes --help, --version,
 * --cfg FILE and key=value overrides, plus its own options from a table. */
#ifndef PP_CLI_H
#define PP_CLI_H

#include <stdbool.h>

#include "error.h"

typedef struct {
	const char *name; /* "--plan" */
	const char *arg;  /* argument name for --help ("DIR"), NULL for a flag */
	const char *help;
	const char **value; /* receives the argument */
	bool *flag;         /* set for a flag */
} cli_opt;

typedef struct {
	const char *tool;
	const char *usage;   /* one line after the tool name */
	const char *summary; /* one sentence */
	const cli_opt *opts; /* terminated by an entry with name NULL */
	bool takes_config;   /* --cfg FILE and key=value */
	int max_positional;  /* arguments that are neither options nor key=value (0: none) */
	const char *man;     /* the page --help points to, when not the tool's own */
} cli_spec;

typedef struct {
	const char *cfg;
	int n_overrides;
	char **overrides;
	int n_positional;
	char **positional; /* in order, at most spec->max_positional */
} cli_args;

/* Returns 0 to go on, -1 when --help or --version was printed (exit 0), or
 * PP_EUSAGE with a message naming the bad argument. */
int cli_parse(const cli_spec *spec, int argc, char **argv, cli_args *out, pp_err *e);
void cli_free(cli_args *a);

/* The argument s of option `opt` as a whole number in [lo, hi], or as a
 * finite number in [lo, hi]; PP_EUSAGE naming the option and the range
 * otherwise. */
int cli_long(const char *opt, const char *s, long lo, long hi, long *v, pp_err *e);
int cli_double(const char *opt, const char *s, double lo, double hi, double *v, pp_err *e);

/* Prints the error once as "tool: error: msg" and returns the exit status. */
int cli_fail(const cli_spec *spec, const pp_err *e);

#endif
