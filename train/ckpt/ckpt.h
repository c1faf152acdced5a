/* ckpt: checkpoints — the whole training state as global logical arrays in one HDF5 file, so that
 * any mesh and any sharding can resume it (resharding is reading different slabs), plus the
 * run-level policy: --save-every / --keep / --ckpt-dir / --resume. docs/checkpoints.md is the
 * user's documentation (format, flags, guarantees, benchmark).
 * Depends on trainer, model, par (which slab of each array this rank holds and whether it writes
 * it), data/h5array (collective hyperslab I/O, temp-then-rename commit), mesh.
 *
 * File format "meshtrain-checkpoint", version 1:
 *   /params/<name>        float32, the parameter's global shape (model.h's names and shapes)
 *   /optimizer/m/<name>   float32, same shape: AdamW first moment   (absent for SGD)
 *   /optimizer/v/<name>   float32, same shape: AdamW second moment  (absent for SGD)
 *   each dataset: int64 attribute `checksum` (see ckpt_checksum_add)
 *   attributes on "/":   format, version, step, tokens_seen, data_step, seed, data_order, data,
 *     batch, optimizer, lr, min_lr, warmup, schedule_steps, weight_decay, beta1, beta2, eps, clip,
 *     lr_next; layers, d_model, heads, kv_heads, head_dim, d_ff, vocab, seq_len; and for
 *     information only: written_by_ranks, written_by_mesh, written_by_sharding.
 * `step` is the number of optimizer steps done, i.e. the 0-based index of the next step. Batches,
 * the learning rate and AdamW's bias correction are pure functions of (seed, step), so params,
 * m, v, step and seed are the whole state: resuming on the same mesh and scheme is bit-exact.
 *
 * Errors: functions return 0 or a negative status with a message in err naming the file and the
 * problem, the same on every rank of the communicator (nothing is printed unless stated). */
#ifndef MT_TRAIN_CKPT_H
#define MT_TRAIN_CKPT_H
#include <stddef.h>
#include <stdint.h>

#include "data/h5array.h"
#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/step/trainer.h"

#define CKPT_FORMAT "meshtrain-checkpoint"
#define CKPT_VERSION 1

/* What a checkpoint says about itself (its root attributes). */
typedef struct {
    int64_t version;
    int64_t step;        /* optimizer steps done = 0-based index of the next step */
    int64_t tokens_seen; /* training tokens consumed (Σ over the steps done of batch·seq_len) */
    uint64_t seed;
    tokens_order order;
    optim_kind optimizer;
    model_shape shape;
    int64_t batch;
    int64_t schedule_steps, warmup; /* the learning-rate schedule (trainer_lr) */
    double lr, min_lr;
    int64_t ranks; /* for information: who wrote it */
    char run_id[24]; /* the run that wrote it ("" for checkpoints older than run ids) */
    char mesh[96], sharding[160], data[256];
} ckpt_meta;

/* Bytes of array data moved (float32 payload, summed over every array of the file, each counted
 * once) and the wall time, for the MB/s the run and the benchmark report. */
typedef struct {
    double bytes, seconds;
} ckpt_io;

/* ---- files ---- */

/* Collective over: world. Writes the trainer's state after `step` steps to `path` atomically
 * (path.tmp.<pid>, then fsync and rename): every parameter and, for AdamW, m and v, each rank
 * writing its own slab and one rank each block that several hold; attributes from c (the run's
 * flags) and tokens_seen. On failure nothing is left at path's temp name and an existing `path`
 * is untouched. */
int ckpt_write(trainer *t, mesh *m, const config *c, int64_t step, int64_t tokens_seen,
               const char *path, ckpt_io *io, char *err, size_t errlen);
/* Collective over: the handle's comm. Reads and checks the root attributes of an open file:
 * format (a file without it, or with another, is "not a meshtrain checkpoint"), a version this
 * build reads (newer is refused with both numbers), and the rest into *k. */
int ckpt_meta_get(h5array *f, ckpt_meta *k, char *err, size_t errlen);
/* Not collective. 0 when the checkpoint's model has the flags' parameter shapes (layers,
 * d_model, heads, kv_heads, head_dim, d_ff, vocab) and optimizer kind; else −1 with the first
 * disagreement as "checkpoint has --d-model 128, flags say 64". */
int ckpt_check_config(const ckpt_meta *k, const config *c, const char *path, char *err,
                      size_t errlen);
/* Collective over: world. Opens `path`, checks it (ckpt_meta_get, ckpt_check_config against the
 * trainer's model) and reads this rank's slabs of every parameter (model_slab) and, for AdamW,
 * of m and v (par_state_slab) into the trainer, verifying every array's checksum; then
 * par_params_loaded. *k receives the metadata. On failure the trainer's state is undefined. */
int ckpt_load(trainer *t, mesh *m, const config *c, const char *path, ckpt_meta *k, ckpt_io *io,
              char *err, size_t errlen);

/* Collective over: world. Reads this rank's slab (model_slab) of every parameter of the open
 * model from checkpoint `path` (any mesh wrote it), verifying every array's checksum; the caller
 * has checked the shape (ckpt_meta_get, ckpt_check_config). No optimizer state (inference). */
int ckpt_load_params(model *mod, par *run, mesh *m, const char *path, char *err, size_t errlen);

/* Not collective. Adds the checksum terms of the slab data[count] at offset[] of an array of
 * shape dims[ndim] to *sum. The checksum of an array is Σ over its elements (mod 2^64) of
 * mix(g·0x9e3779b97f4a7c15 + u), g the element's row-major global index, u its float32 bit
 * pattern, mix data/hash.h's splitmix64 output function; order-free, so slabs add up. */
void ckpt_checksum_add(uint64_t *sum, const float *data, int ndim, const int64_t *dims,
                       const int64_t *offset, const int64_t *count);

/* ---- the run's policy ---- */

/* Not collective. DIR/step_NNNNNN.h5 (six digits at least). */
void ckpt_step_path(char *buf, size_t len, const char *dir, int64_t step);
/* Not collective. The newest complete checkpoint in dir: the file step_<digits>.h5 with the
 * highest step (temp files `*.tmp.*` of interrupted saves are never complete). Returns 0 with
 * path and *step, or −1 when the directory cannot be read or holds none. */
int ckpt_latest(const char *dir, char *path, size_t len, int64_t *step, char *err, size_t errlen);
/* Not collective (call it on one rank, after a new checkpoint of `step` is committed). Deletes
 * checkpoints of dir older than `step` beyond the newest keep − 1 of them (keep ≤ 0: none), and
 * temp files of interrupted saves of steps before `step`. Returns how many files it could not
 * delete (their names in err). */
int ckpt_prune(const char *dir, int64_t keep, int64_t step, char *err, size_t errlen);
/* Collective over: world. Called before the trainer is built. With --save-every, creates
 * --ckpt-dir when missing and checks a file can be created in it. With --resume, resolves
 * `latest`, writes the resolved path back into c->resume, opens the file and checks it against
 * the flags (ckpt_meta_get, ckpt_check_config, its step ≤ --steps), and adopts its seed and data
 * order (rank 0 prints a note for each setting that differs from the flags, and for a schedule
 * or batch that changes). Returns 0 or −1 with one message for every rank. */
int ckpt_run_setup(config *c, mesh *m, char *err, size_t errlen);

/* Collective over: world (from ckpt_run_setup; in ckpt_dir.c). Gives the run its id: the resumed
 * checkpoint's (k, when it has one: a resumed run is the same run) or a new random one. With
 * --save-every, claims --ckpt-dir for it: rank 0 takes an advisory lock on DIR/.meshtrain-owner
 * for the life of the process (the kernel drops it when the process dies, so a crashed run never
 * leaves it stuck) and records the run's id, pid and host there. Refused, unless --take-over:
 * a directory locked by a running job (always refused), and one whose checkpoints belong to
 * another run; with --resume latest, a newest checkpoint of a run other than the directory's
 * owner (latest: c->resume was `latest`). Returns 0 or −1 with one message for every rank. */
int ckpt_dir_claim(config *c, mesh *m, const ckpt_meta *k, int latest, char *err,
                   size_t errlen);

/* Collective over: world. `meshtrain ckpt info FILE` and `meshtrain ckpt diff A B [--tol K]`
 * (argv[0] = "ckpt"): rank 0 reads and prints, every rank returns its status: 0, 1 when diff
 * finds arrays that differ (beyond K units of FLT_EPSILON·(|a|+|b|+1) with --tol), and on bad
 * input or files every rank leaves through mesh_exit_error (status 2). In ckpt_cli.c. */
int ckpt_cli_main(int argc, char **argv);
#endif
