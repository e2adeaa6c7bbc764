/* pp-train: trains a model from a config; resumes from the newest checkpoint. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcommon/base/cli.h"
#include "../libcommon/base/log.h"
#include "../libcommon/decode/request.h"
#include "../libcommon/train/train.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

int main(int argc, char **argv)
{
	bool print_config = false, quiet = false;
	const char *sample = NULL, *prompt = "", *temperature = "0.8";
	const cli_opt opts[] = {
		{"--sample", "N", "after training, generate N tokens and print them on stdout",
		 &sample, NULL},
		{"--prompt", "TEXT",
		 "with --sample: the text to continue (token ids without a tokenizer)", &prompt,
		 NULL},
		{"--temperature", "T",
		 "with --sample: softmax temperature, 0 for greedy (default 0.8)", &temperature,
		 NULL},
		{"--print-config", NULL, "print the resolved config as JSON and exit", NULL,
		 &print_config},
		{"--quiet", NULL, "no per-step log lines", NULL, &quiet},
		{0},
	};
	const cli_spec spec = {
		"pp-train",
		"--cfg FILE [key=value ...] [--print-config] [--quiet] [--sample N [--prompt TEXT]]",
		"Train a model; resume from the newest sound checkpoint in run_dir.",
		opts,
		true,
		0,
		NULL};
	log_set_prefix("pp-train", 0, 1);
	pp_err e = {0};
	cli_args args;
	pp_config cfg = {0};
	int rc = cli_parse(&spec, argc, argv, &args, &e);
	if (rc < 0)
		return 0;
	long n_sample = 0;
	double temp = 0;
	if (!rc && sample)
		rc = cli_long("--sample", sample, 1, 1000000, &n_sample, &e);
	if (!rc)
		rc = cli_double("--temperature", temperature, 0, 100, &temp, &e);
	if (!rc)
		rc = pp_config_load(&cfg, args.cfg, args.n_overrides, args.overrides, &e);
	if (!rc && print_config) {
		char *s = pp_config_dump(&cfg);
		puts(s);
		free(s);
	} else if (!rc) {
		struct sigaction sa = {.sa_handler = on_signal};
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGUSR1, &sa, NULL);
		trainer t;
		bool resumed = false;
		rc = trainer_open(&t, &cfg, false, &e);
		if (!rc)
			rc = trainer_resume(&t, &resumed, &e);
		if (!rc && !resumed)
			rc = trainer_init(&t, &e);
		if (!rc && resumed && trainer_leader(&t))
			log_info("resumed from step %ld in %s%s", t.step, cfg.run_dir,
				 cfg.load_parameters_path[0]
					 ? " (its own checkpoint: load_parameters_path is not read)"
					 : "");
		if (!rc) {
			train_opts o = {.quiet = quiet, .stop = &stop_requested};
			rc = trainer_run(&t, &o, &e);
		}
		if (!rc && sample && t.lay.world * t.lay.v != 1)
			rc = pp_errorf(&e, PP_EUSAGE,
				       "--sample runs in a single process (pp=1 dp=1 tp=1)");
		else if (!rc && sample)
			rc = decode_continue(&t.chunks[0], cfg.tokenizer, prompt, (int)n_sample,
					     temp, cfg.seed, stdout, &e);
		if (rc == PP_ESTOPPED)
			e.msg[0] = 0; /* a clean stop, logged as such: exit 75 asks for a requeue */
		if (rc && rc != PP_ESTOPPED) {
			/* the other ranks may be waiting on this one: end the job */
			log_error("%s", e.msg);
			trainer_abort(&t, rc, e.msg);
			e.msg[0] = 0;
		}
		trainer_close(&t);
	}
	pp_config_free(&cfg);
	cli_free(&args);
	return rc ? cli_fail(&spec, &e) : 0;
}
