/* run: the meshtrain command's jobs, so that main() stays parse → mesh → trainer → loop:
 * the `prepare` subcommand, finding and opening the data, the MFU peak, and a training run
 * (per-step report, evaluation, checkpoints and parameter files, sample text). The other jobs
 * have their own modules: --bench (bench.c), `plan` (calc/), `ckpt` (train/ckpt), `generate`
 * (train/infer). Depends on config, trainer, model, sample, metrics, ckpt, inspect, data/
 * (tokens), mesh/. */
#ifndef MT_TRAIN_RUN_H
#define MT_TRAIN_RUN_H
#include "data/tokens.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/step/trainer.h"

/* Collective over: world. `meshtrain prepare TEXT OUT.h5` (argv[0] = "prepare"): rank 0 writes
 * the token file, all ranks agree on the outcome. Returns 0; on failure every rank leaves through
 * mesh_exit_error. */
int run_prepare(int argc, char **argv);

/* Collective over: world. Resolves a relative data path that does not exist from the current
 * directory: tries $MESHTRAIN_HOME/<path>, then <directory of argv0>/../<path> (the build
 * directory sits in the source tree). Leaves c->data unchanged when nothing matches. */
void run_resolve_data(config *c, const char *argv0);

/* Collective over: world. Rank 0 prints (unless --quiet) which axes cross hosts and which stay
 * inside one, and how the ranks share the hosts' CPUs (trainer t's report). */
void run_print_hosts(const config *c, mesh *m, trainer *t);

/* The MFU peak: the trainer's sgemm measurement (every rank at the same moment, CPUPEAK_TRIALS ×
 * 0.1 s after a barrier, so ranks sharing cores measure the share they actually get; combined by
 * cpupeak_measured with the share of the CPU each trial had), summed. */
typedef struct {
    double rank;  /* this rank's sgemm FLOP/s */
    double total; /* sum over ranks: the peak MFU is measured against */
} run_peak;
/* Collective over: world. From trainer t's start-up trials (trainer_peak_trials). */
run_peak run_measure_peak(mesh *m, trainer *t);

/* Collective over: world. Opens c->data (token file or text) and checks it against the model
 * (vocabulary, sequence length) before anything big is allocated; on failure every rank leaves
 * through mesh_exit_error with one message. Close it with tokens_close. */
tokens *run_open_data(const config *c, mesh *m);

/* Collective over: world. The training run on mesh m with trainer t and the open data: per-step
 * lines from rank 0, evaluation, --metrics, checkpoints (--resume, --save-every, --save-init,
 * --save-final: train/ckpt/ckpt.h), --sample. Returns 0;
 * environment failures (reading batches, output files) leave through mesh_exit_error with one
 * message. */
int run_train(const config *c, mesh *m, trainer *t, tokens *data, const run_peak *pk);

#endif
