/* config: every meshtrain option in one struct, parsed from argv and validated up front (before
 * any collective), with a message that says what was wrong and what would be right. Knows the
 * model's hyper-parameters; no MPI. */
#ifndef MT_TRAIN_CONFIG_H
#define MT_TRAIN_CONFIG_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "calc/shape.h" /* model_shape: the transformer's shape, shared with the calculator */
#include "data/tokens_order.h"
#include "mesh/coll.h" /* mesh_alg, mesh_wire */

#define CONFIG_AXES_LEN 8 /* --dp AXES, with its terminator */

typedef enum { OPT_ADAMW = 0, OPT_SGD = 1 } optim_kind;
/* --compute-dtype: what the matmuls multiply. FP32: fp32 kernels (kernels/gemm.h). BF16: bf16
 * inputs with fp32 accumulation (kernels/gemm_bf16.h), as a TPU's matrix unit. AUTO: BF16 where
 * the bf16 path resolves to a matrix unit that outruns fp32 (amx; avx512bf16 but on Intel), else
 * FP32 (train/step/precision.h resolves it at start-up). */
typedef enum { COMPUTE_FP32 = 0, COMPUTE_BF16 = 1, COMPUTE_AUTO = 2 } compute_dtype;
/* "fp32", "bf16", "auto". */
const char *compute_dtype_name(compute_dtype d);
/* Bytes of one element of a resolved dtype: 2 for bf16, else 4. */
int compute_dtype_bytes(compute_dtype d);
/* --schedule: all forwards then all backwards, one forward one backward, Megatron's interleaved
 * 1F1B (--virtual-stages chunks per rank), zero bubble H1 (the backward split into the input
 * gradient and the deferred weight gradient), zero bubble V (two chunks per rank in a V, the
 * backward split); calc/schedule.h's tables, in its sched_kind order. */
typedef enum {
    PIPE_GPIPE = 0,
    PIPE_1F1B = 1,
    PIPE_INTERLEAVED = 2,
    PIPE_ZB_H1 = 3,
    PIPE_ZB_V = 4
} pipe_schedule;
/* --progress: who runs the non-blocking collectives; auto is resolved by the trainer. */
typedef enum {
    CONFIG_PROGRESS_AUTO = 0,
    CONFIG_PROGRESS_THREAD,
    CONFIG_PROGRESS_INLINE
} config_progress;
/* --emulate-rate: the CPU rate a chip's peak FLOP/s stand for, the core's sgemm or the model's
 * linear layers. */
typedef enum { CONFIG_RATE_PEAK = 0, CONFIG_RATE_MODEL } config_rate;
const char *config_progress_name(config_progress p); /* "auto", "thread", "inline" */
const char *config_rate_name(config_rate r);         /* "peak", "model" */

typedef struct {
    model_shape shape;
    /* batch */
    int64_t batch;       /* global sequences per step */
    int64_t micro_batch; /* global sequences per micro-batch (batch % micro_batch == 0) */
    int64_t steps;
    /* optimizer and schedule */
    optim_kind optimizer;
    double lr, min_lr, weight_decay, clip, beta1, beta2, eps;
    int64_t warmup;
    uint64_t seed;
    /* data */
    char data[1024];    /* HDF5 token file, or a text file (prepared on the fly) */
    tokens_order order; /* --data-order (data/tokens.h) */
    int64_t eval_every, eval_batches;
    /* outputs */
    int64_t sample; /* bytes to generate at the end (0 = none) */
    double temperature;
    int64_t top_k;
    char prompt[256];      /* text the sample continues ("" = a newline) */
    char metrics[1024];    /* JSON lines, one per step ("" = none) */
    char save_init[1024];  /* write initial params to this HDF5 file */
    char save_final[1024]; /* write final params to this HDF5 file */
    /* checkpoints (train/ckpt/ckpt.h) */
    int64_t save_every; /* checkpoint every N steps and after the last (0 = never) */
    int64_t keep;       /* keep the newest K checkpoints in ckpt_dir (0 = all) */
    char ckpt_dir[1024];
    char resume[1024];     /* checkpoint to continue from, "latest" in ckpt_dir, "" = none */
    int take_over;         /* resume another run's checkpoint or save into another run's ckpt_dir */
    char run_id[24];       /* set by ckpt_run_setup: this run's id (a resumed run keeps its own) */
    int threads;           /* BLAS threads per rank (and the bf16 kernels' threads) */
    compute_dtype compute; /* --compute-dtype (AUTO until precision_setup resolves it) */
    compute_dtype kv_dtype; /* --kv-dtype: the KV cache's elements (generate, serve); AUTO: the
                               compute dtype's */
    int bench;             /* --bench: timing run, no data file needed */
    /* --no-matmul-bound: --bench without timing the matmul-only bound */
    int no_matmul_bound;
    int quiet;
    int quick_start; /* set by tests that check numbers only: one short trial of the sgemm rate
                        and the fewest samples per kernel at start-up (rougher predictions) */
    int demo;        /* --demo given: the README's main job (see config_demo_mesh) */
    /* mesh and sharding (train/parallel/par.h) */
    char mesh[64];       /* "x=2,y=2"; "" = 1D mesh over all ranks */
    char mesh_open[16];  /* axes without wraparound */
    char cross_hosts[8]; /* axes made slowest in MPI rank order: they cross hosts ("" = first) */
    char data_axes[CONFIG_AXES_LEN]; /* batch sharded over these axes, e.g. "x" */
    char dcn_axis[4];    /* --dcn AXIS: a data axis across the data-center network, "" = none */
    int zero;            /* 0 (replicated DP), 1, 2, 3 over data_axes */
    char tensor_axis[4]; /* Megatron TP axis, "" = none */
    char expert_axis[4]; /* --expert AXIS: the routed experts sharded over this data axis */
    char cp_axis[4];     /* --cp AXIS: every sequence's T tokens sharded over it, "" = none */
    char cp_alg[12];     /* --cp-alg: "allgather", "ring" or "ulysses" (config_cp_alg) */
    int overlap;
    config_progress progress; /* --progress (mesh_set_progress; trainer.c resolves auto) */
    mesh_alg alg;             /* --alg; MESH_ALG_DEFAULT when not given */
    mesh_wire comm_dtype;     /* --comm-dtype: what the training's collectives carry */
    int64_t bucket;   /* --bucket: gradient bucket bytes; 0 = per tensor, −1 = the cost model's
                         (the default) */
    int cmatmul;      /* --collective-matmul: 1 on, 0 off, −1 the cost model's choice */
    char emulate[16]; /* chip preset for link emulation, "" = none */
    config_rate emulate_rate; /* --emulate-rate */
    /* pipelining (train/parallel/pipeline.h) */
    char pipe_axis[4];      /* --pipeline AXIS: layers split into |Z| stages, "" = none */
    int64_t microbatches;   /* --microbatches M: pipeline micro-batches per step */
    pipe_schedule schedule; /* --schedule */
    int64_t virtual_stages; /* --virtual-stages v: chunks of layers per rank (0: the schedule's) */
    /* a look inside the run (docs/inspect.md) */
    char trace[1024];      /* --trace FILE: Chrome trace-event timeline, "" = none */
    int debug_collectives; /* check every collective's signature across its axis set */
    double timeout;        /* --timeout S: watchdog on calls into mesh and steps, 0 = off */
} config;

/* Fills defaults. */
void config_defaults(config *c);
/* Parses argv[1..argc) into c (after defaults), derives --head-dim, --kv-heads, --d-ff and
 * --micro-batch when not given, and validates. Returns 0; 1 when --help was asked for (the caller
 * prints config_print_help from one rank and exits 0); −1 on bad input with the reason in err,
 * naming the flag and what would be right. Not collective; prints nothing. */
int config_parse(config *c, int argc, char **argv, char *err, size_t errlen);
/* What a command does with the flags: train (config_parse; --bench makes it CONFIG_MODE_BENCH),
 * `meshtrain generate`, its decode sweep `generate --bench`, or `meshtrain serve` (generation's
 * rules). */
typedef enum {
    CONFIG_MODE_TRAIN,
    CONFIG_MODE_BENCH,
    CONFIG_MODE_GENERATE,
    CONFIG_MODE_GEN_BENCH,
    CONFIG_MODE_SERVE
} config_mode;
/* config_parse for the command `mode`; a flag that does nothing there, or nothing with the other
 * flags given (config_check_used), is refused: no flag is silently ignored. */
int config_parse_for(config *c, config_mode mode, int argc, char **argv, char *err,
                     size_t errlen);
/* Config_used.c's rules: each name in given[0..ngiven) (flags given on the command line, table
 * names) must matter in `mode` with the values of c. Returns 0, or −1 with err naming the flag
 * and why it does nothing. */
int config_check_used(const config *c, config_mode mode, const char *const *given, int ngiven,
                      char *err, size_t errlen);
/* Checks shapes (N % K, even H, batch % micro_batch, ...). Returns 0 or −1 with err. */
int config_validate(const config *c, char *err, size_t errlen);
/* The sharding flags against a mesh (config_mesh.c), the one place for the rules that need it.
 * Not collective (every rank computes the same). config_for_mesh resolves what depends on the
 * mesh: with --pipeline, --microbatches 0 becomes |Z| and the pipeline's micro-batch replaces
 * --micro-batch. It then checks that every named axis exists, that every axis of size > 1 is
 * used, and that each sharded dimension (L by |Z|; N, K, F, V, D by |Y|; D by the ZeRO axes;
 * batch and micro-batch by the data shards) divides. Returns 0, or −1 with the reason in err.
 * Expects a config that passed config_validate. config_data_axes: --dp, or by default every axis
 * that --tensor and --pipeline leave free. */
struct mesh;
int config_for_mesh(config *c, const struct mesh *m, char *err, size_t errlen);
void config_data_axes(const config *c, const struct mesh *m, char out[CONFIG_AXES_LEN]);
/* The pipeline's rule, checked by config_validate for an explicit --microbatches and by
 * config_for_mesh for the default |Z|: --batch divisible by c->microbatches (> 0). */
int config_check_microbatches(const config *c, char *err, size_t errlen);
/* --demo's mesh part: on exactly 4 ranks, unless the user chose a mesh or sharding, sets
 * --mesh x=2,y=2 --dp x --zero 3 --tensor y (ZeRO-3 over x, Megatron over y). No-op otherwise. */
void config_demo_mesh(config *c, int nranks);
/* config_limits.c: the sizes formed by multiplying flags fit the int64_t counts of the arrays,
 * and --emulate names a chip of the table. 0, or −1 with err naming the flags. */
int config_check_limits(const config *c, char *err, size_t errlen);
/* What string flag `flag` (its table name) accepts, for a message ("thread, inline or auto"; the
 * chips for "emulate", formatted into buf); NULL for free text and paths. */
const char *config_str_expect(const char *flag, char *buf, size_t len);
/* Test hook (config_env.c): MESHTRAIN_QUICK_START=1 in the environment asks for
 * config.quick_start, for the shell tests that check what a run computed rather than its timing.
 * 1 when set, else 0. */
int config_env_quick_start(void);
/* --cp's algorithm (config_cp.c). ALLGATHER: K and V gathered over the axis, each rank attends its
 * own queries; RING: K and V blocks travel round the axis, partial softmaxes merged online;
 * ULYSSES: an AllToAll turns the sequence shards into head shards for attention and back. */
typedef enum { CONFIG_CP_ALLGATHER = 0, CONFIG_CP_RING, CONFIG_CP_ULYSSES } config_cp_alg_t;
/* c->cp_alg as the enum; −1 for a name it does not know. */
int config_cp_alg(const config *c);
/* How the split of T over n context ranks is made for c's algorithm: the pieces of a sequence
 * each rank holds, 2 for the zigzag split (ring and allgather when 2n divides T), 1 for the
 * contiguous split (ulysses, ring and allgather otherwise: a ring then skips the blocks its
 * queries cannot see, and the last rank does the most work). */
int config_cp_pieces(const config *c, int64_t n);
/* config_cp.c: --cp's rules. config_check_cp: the flag alone (one axis, not one of the other
 * roles', a known algorithm, what it does not compose with); config_check_cp_mesh: against the
 * axis size n and wraparound (T and, for ulysses, the heads divisible; ring's wraparound link). 0,
 * or −1 with err. */
int config_check_cp(const config *c, char *err, size_t errlen);
int config_check_cp_mesh(const config *c, int64_t n, int wraps, int64_t nY, char *err,
                         size_t errlen);
/* The --help text (flags, defaults, and the FLOP formula used for MFU). */
void config_print_help(FILE *out);
/* Whether argv[1..argc) holds --help or -h (a subcommand's help, asked for anywhere). */
int config_help_asked(int argc, char **argv);
#endif
