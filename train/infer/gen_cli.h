/* gen_cli: `meshtrain generate` — flags, checkpoint, prompts, the prefill and decode loop with
 * its per-step report against the book's roofline (stderr), the texts (stdout), and --bench's
 * decode batch sweep (gen_bench.c). Depends on gen, prompts, ckpt, config, mesh, kernels. */
#ifndef MT_TRAIN_INFER_GEN_CLI_H
#define MT_TRAIN_INFER_GEN_CLI_H
#include <stdint.h>
#include <stdio.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/infer/gen.h"

/* The machine the roofline is drawn against, measured at start-up by every rank at once (ranks
 * that share cores measure their share): sums over the ranks. */
typedef struct {
    double bw;                 /* read bandwidth from memory, bytes/s */
    double flops;              /* the products' FLOP/s: sgemm's, or the bf16 kernels' */
    double bw_buffer, llc;     /* bytes: the buffer bw was read from, the last-level cache (0: not
                                * known); measured: the buffer is at least 4 x llc */
    compute_dtype flops_dtype; /* the products flops was timed on (fp32: sgemm) */
} gen_machine;

/* Copies of the weights made at load (gen_warm_model): how many layers and unembeddings, in how
 * many seconds. */
typedef struct {
    int64_t made;
    double seconds;
} gen_warm;
/* model_make_bf16 on m, timed: a server's (and generate's) load makes the bf16 and panel copies,
 * so that the first request does not. Not collective. */
gen_warm gen_warm_model(model *m);
/* Rank 0's memory line of generate and serve on out, "who | memory on rank 0 (MB): ...": the
 * model's weights by copy (model_weight_memory), kv_bytes of KV cache and their total; warm (or
 * NULL): the copies made at load. */
void gen_print_memory(FILE *out, const char *who, const model *m, double kv_bytes,
                      const gen_warm *warm);
/* Collective over: world. Measures this rank's bandwidth and sgemm rate, sums them; `quick`
 * (config.quick_start): one short trial of each. */
gen_machine gen_measure_machine(mesh *m, int quick);
/* Collective over: world. gen_measure_machine for c's compute dtype: with bf16 compute (given,
 * or --compute-dtype auto resolved to it) C is the bf16 forward product's rate
 * (kern_bf16_measure_flops_fwd on the bf16 kernels' path), summed over the ranks, not sgemm's. */
gen_machine gen_measure_machine_dtype(const config *c, mesh *m);
/* mc with C the bf16 products' rate bf16_flops (summed over the ranks), flops_dtype bf16, when d
 * is bf16. */
gen_machine gen_machine_dtype(const gen_machine *mc, compute_dtype d, double bf16_flops);
/* Collective over: world. Sums a step's figures over the ranks. */
gen_step gen_step_total(mesh *m, const gen_step *st);
/* The book's step time for totals st: KV/BW + max(FLOPs/C, weight bytes/BW), seconds. */
double gen_predict(const gen_step *st, const gen_machine *mc);

typedef struct {
    char ckpt[1024];
    char prompts_file[1024];
    int64_t tokens;
    int kv_replicate;
    char kv_shard[8]; /* --kv-shard AXIS: the cache's positions over that mesh axis */
    int cp_prefill;   /* --cp AXIS: the prefill's prompts over AXIS too (kv_shard then AXIS) */
    int bench;
    char bench_batches[256]; /* --bench: comma list of decode batch sizes */
    int64_t bench_prompt;    /* --bench: prompt length */
    char csv[1024];          /* --bench: CSV output */
    char draft[1024];        /* --draft: the drafter's checkpoint (speculative decoding) */
    int64_t draft_tokens;    /* --draft-tokens: tokens drafted a round */
    char expert[4]; /* --expert AXIS, set once the model's experts are known (the checkpoint's) */
    unsigned given; /* bit k: the k-th flag of generate's table was given */
} gen_flags;

/* The model-shape flags (--layers, --d-model, --heads, --kv-heads, --head-dim, --d-ff, --vocab,
 * --seq-len) that a checkpoint's shape fills in when they are not given. */
#define GEN_SHAPE_FLAGS 8
extern const char *const gen_shape_flags[GEN_SHAPE_FLAGS];
/* given[k] = 1 if the flag name[0..len) (without "--"; NULL: none) is gen_shape_flags[k]. */
void gen_shape_mark(const char *name, size_t len, int *given);
/* Collective over: world. The model's shape from the checkpoint at path for every shape flag not
 * given (given[i] for gen_shape_flags[i]), then the check that the given ones agree. 0, or −1
 * with the reason in err. Serving (train/serve) shares it. */
int gen_adopt_ckpt_shape(config *c, mesh *m, const char *path, const int *given, char *err,
                         size_t errlen);
/* Not collective (every rank computes the same). --kv-replicate changes the cache's layout only
 * where the tensor axis has more ranks than kv heads (gen.h); elsewhere it is refused. 0, or −1
 * with err. Serving shares it. */
int gen_check_kv_replicate(const config *c, int kv_replicate, const mesh *m, char *err,
                           size_t errlen);

/* The --bench sweep's batch sizes, checked. */
enum { GEN_BENCH_MAX = 32, GEN_BENCH_MAX_B = 1 << 20, GEN_BENCH_ERR = 400 };
typedef struct {
    int64_t B[GEN_BENCH_MAX];
    int n;
} gen_bench_plan;
/* Collective over: world. Everything the sweep could refuse, before any of it runs: the batch
 * list, --tokens >= 2, --bench-prompt + --tokens against --seq-len, and each batch's request
 * (gen_check). 0, or −1 with err (the same on every rank) naming the flag to change. */
int gen_bench_check(const config *c, const gen_flags *f, mesh *m, gen_bench_plan *p, char *err,
                    size_t errlen);
/* Collective over: world. The --bench sweep of a checked plan (gen_bench.c); the --csv table is
 * written at the end, whole. Returns 0; a failed write leaves through mesh_exit_error. */
int gen_bench_run(const config *c, const gen_flags *f, mesh *m, const gen_bench_plan *p,
                  const gen_machine *mc);

/* Collective over: world. `meshtrain generate ...` (argv[0] = "generate"). Returns the exit
 * status; bad input leaves through mesh_exit_error (one message, status 2). */
int gen_main(int argc, char **argv);
#endif
