/* Calibration of a cluster's description from pp's own profiles (pp-init
 * --calibrate): the profile files of one run (pp-train profile_steps) of
 * the configured model and layout on that cluster, or the CUDA backend's
 * per-op table of one (optable.h). */
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
 * model or layout than c, naming both.
 * path may instead be a text file holding the CUDA backend's per-op table
 * of such a run (optable.h): the matrix products' times, shape by shape,
 * fit the GEMM efficiency curve (1/efficiency is linear in 1/FLOPs: a least
 * squares weighted by each shape's time gives gemm_max and
 * gemm_half_flops), attention's forward calls its attn_max at c's sequence
 * length, and the other figures stay; PP_EUSAGE naming the line of a
 * product row without its shape, or for a table without products. */
int sim_calibrate(const pp_config *c, sim_cluster *cl, const char *path, FILE *report, pp_err *e);

/* cl as a cluster file, its efficiencies included. */
int sim_cluster_write(FILE *f, const sim_cluster *cl, pp_err *e);

#endif
