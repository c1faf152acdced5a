/* inspect: a look inside a run, wired from the config (docs/inspect.md): --debug-collectives
 * (mesh_set_verify), --timeout (mesh's watchdog), SIGUSR1 (every rank prints where it is),
 * --trace (train/observe/trace.h), and the honest-MFU lines: the FLOP formula with this model's numbers
 * and both peaks MFU is measured against (the sgemm rate the ranks measured, the CPU's nominal
 * peak from train/observe/cpupeak.c). Depends on trace, cpupeak, model, mesh. */
#ifndef MT_TRAIN_INSPECT_H
#define MT_TRAIN_INSPECT_H
#include <stdio.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/observe/cpupeak.h"
#include "train/observe/trace.h"

/* Collective over: world; right after mesh_create. Turns on what the flags ask for and the
 * SIGUSR1 handler; creates the trace (its notes always, recording with --trace), which the caller
 * hands to the trainer and destroys (trace_destroy) before mesh_destroy. On failure (the trace
 * file cannot be created, the watchdog cannot start) every rank leaves through mesh_exit_error. */
trace *inspect_start(const config *c, mesh *m);
/* Collective over: world; after the last step. Writes the trace tr (rank 0 says where), stops
 * the watchdog. A failed write leaves through mesh_exit_error. */
void inspect_finish(const config *c, mesh *m, trace *tr);

/* Collective over: world. The job's nominal CPU peak in FLOP/s (FP32): every rank adds its share
 * of its host's, core_flops × min(threads, physical cores / ranks on the host), so that a host
 * counts min(physical cores, ranks × threads) cores. 0 when any rank's host is unknown.
 * *host (may be NULL) = this rank's detection. */
double inspect_cpu_peak(mesh *m, int threads, cpupeak *host);
/* Rank 0 prints the FLOP formula evaluated for s, and the two peaks: sgemm_peak (the sum of the
 * ranks' measured sgemm rates) and cpu_peak (inspect_cpu_peak; 0 prints "unknown" and why). */
void inspect_print_mfu(const model_shape *s, double sgemm_peak, double cpu_peak,
                       const cpupeak *host, int nranks, FILE *out);
#endif
