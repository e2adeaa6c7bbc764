/* Calibration of a cluster's description from pp's own profiles (pp-init
 * --calibrate): the profile files of one run (pp-train profile_steps) of
 * the configured model and layout on that cluster. */
#ifndef PP_SIM_CALIBRATE_H
#define PP_SIM_CALIBRATE_H

#include <stdio.h>

#include "../config/config.h"
#include "cluster.h"

/* From the profiles at path (a profile file, or a directory of them: a
 * run's profile/): the passes' measured times against the cost model's
 * (simulate.h) scale every efficiency of cl, and the messages between
 * stages and the dp gradient sums, where the profiles hold any, set the
 * bandwidth and latency of the link they crossed. A report of what was
 * measured and fitted goes to report. PP_EUSAGE for a profile of another
 * model or layout than c, naming both. */
int sim_calibrate(const pp_config *c, sim_cluster *cl, const char *path, FILE *report, pp_err *e);

/* cl as a cluster file, its efficiencies included. */
int sim_cluster_write(FILE *f, const sim_cluster *cl, pp_err *e);

#endif
