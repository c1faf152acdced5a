/* gen_cli: `meshtrain generate` (see gen_cli.h).
 *
 * Report (stderr, rank 0), per step: tokens, wall time, tokens/s, the bytes read by all ranks
 * (weights + KV cache), the achieved bandwidth against the one measured at start-up, the FLOP
 * rate, and the book's step time T = KV/BW + max(FLOPs/C, weight bytes/BW) with measured /
 * predicted, where KV, FLOPs and weight bytes are the step's totals over the ranks and BW, C the
 * ranks' summed bandwidth and sgemm rate. Texts go to stdout: each prompt followed by its
 * continuation and a newline, in prompt order. */
#include "train/infer/gen_cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/lockfile.h"
#include "kernels/attn_cache.h"
#include "kernels/gemm.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"
#include "train/infer/draft_cli.h"
#include "train/model/hooks.h"

#define GEN_ERR 512

/* Every axis of the mesh, as one axis set. */

/* ---------------------------------------------------------------- flags */

typedef struct {
    const char *name;
    int kind; /* 0 string, 1 int64, 2 switch, 3 --prompt (repeatable) */
    size_t off, size;
    const char *meta, *help; /* for --help */
} gen_flag_def;

#define G_(field) offsetof(gen_flags, field), sizeof(((gen_flags *)0)->field)
static const gen_flag_def gen_flag_table[] = {
    {"ckpt", 0, G_(ckpt), "FILE",
     "parameters from a checkpoint written on any mesh (default: fresh init from --seed); the "
     "model's shape flags default to the checkpoint's"},
    {"prompt", 3, 0, 0, "STR", "a prompt (repeatable)"},
    {"prompts", 0, G_(prompts_file), "FILE", "one prompt per line (instead of --prompt)"},
    {"tokens", 1, G_(tokens), "N", "new tokens per sequence (default 64); prompt + N <= --seq-len"},
    {"kv-replicate", 2, G_(kv_replicate), NULL,
     "with |Y| > K: replicate kv heads instead of the AllToAll attention"},
    {"kv-shard", 0, G_(kv_shard), "AXIS",
     "the KV cache's positions round-robin over this mesh axis (not --dp nor --tensor): each "
     "rank attends its positions, the partials merged in rank order; KV memory / |AXIS|"},
    {"bench", 2, G_(bench), NULL,
     "decode batch sweep on the roofline, synthetic prompts (--tokens N: decode steps + 1)"},
    {"bench-batches", 0, G_(bench_batches), "B,...",
     "--bench: decode batch sizes (default 1,2,4,8,16,32,64)"},
    {"bench-prompt", 1, G_(bench_prompt), "P", "--bench: prompt bytes (default 64)"},
    {"csv", 0, G_(csv), "FILE", "--bench: the table as CSV, written whole at the end"},
    {"draft", 0, G_(draft), "CKPT",
     "speculative decoding: the drafter's checkpoint (same vocabulary), on the same ranks and "
     "sharding"},
    {"draft-tokens", 1, G_(draft_tokens), "k", "--draft: tokens drafted a round (default 4)"},
};
#undef G_

static int gen_flag_index(const char *name) {
    for (size_t k = 0; k < sizeof gen_flag_table / sizeof *gen_flag_table; k++)
        if (!strcmp(gen_flag_table[k].name, name)) return (int)k;
    return 0;
}

const char *const gen_shape_flags[GEN_SHAPE_FLAGS] = {"layers",   "d-model", "heads", "kv-heads",
                                                      "head-dim", "d-ff",    "vocab", "seq-len"};

void gen_shape_mark(const char *name, size_t len, int *given) {
    for (int k = 0; name && k < GEN_SHAPE_FLAGS; k++)
        if (strlen(gen_shape_flags[k]) == len && !strncmp(name, gen_shape_flags[k], len))
            given[k] = 1;
}

static void print_help(FILE *out) {
    fprintf(out, "usage: mpirun -np R meshtrain generate [--ckpt FILE] (--prompt STR ... | "
                 "--prompts FILE) [flags]\n");
    for (size_t k = 0; k < sizeof gen_flag_table / sizeof *gen_flag_table; k++) {
        const gen_flag_def *d = &gen_flag_table[k];
        char lhs[48];
        snprintf(lhs, sizeof lhs, "--%s%s%s", d->name, d->meta ? " " : "", d->meta ? d->meta : "");
        fprintf(out, "  %-22s %s\n", lhs, d->help);
    }
    fprintf(out,
            "meshtrain's flags that apply: the model's shape (--layers, --d-model, ...), "
            "--temperature (0 = greedy),\n--top-k, --seed (sampling is a pure function of the "
            "seed), --quiet (no line per decode step), --threads,\n--mesh, --open, --cross-hosts, "
            "--dp (replicas), --tensor (Megatron over heads and F), --alg,\n--cp AXIS (the "
            "prefill's prompts over AXIS, each rank computing the positions it caches as "
            "--kv-shard AXIS);\nthe others do nothing in generation and are refused. See "
            "meshtrain --help.\n"
            "Texts go to stdout, the per-step report (TTFT, ms/token, bytes, bandwidth, the "
            "book's prediction) to stderr.\n");
}

enum { GEN_MAX_COUNT = 1 << 30 }; /* --tokens, --bench-prompt */

/* Splits argv into generate's own flags (into f, ps) and the rest (rest[0..*nrest), for
 * config_parse); notes which shape flags were given. */
static int split_args(int argc, char **argv, gen_flags *f, prompt_set *ps, char **rest, int *nrest,
                      int *shape_given, char *err, size_t errlen) {
    *nrest = 0;
    rest[(*nrest)++] = argv[0];
    int nprompt = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *name = strncmp(a, "--", 2) == 0 ? a + 2 : NULL;
        const size_t len = name ? strcspn(name, "=") : 0;
        const gen_flag_def *d = NULL;
        for (size_t k = 0; name && k < sizeof gen_flag_table / sizeof *gen_flag_table; k++)
            if (strlen(gen_flag_table[k].name) == len &&
                !strncmp(name, gen_flag_table[k].name, len))
                d = &gen_flag_table[k];
        gen_shape_mark(name, len, shape_given);
        if (name && len == 6 && !strncmp(name, "expert", 6)) { /* (kept for expert_axis) */
            const char *val = name[len] == '=' ? name + len + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (!val || !*val || strlen(val) >= sizeof f->expert)
                return errmsg_fail(err, errlen, "--expert needs one mesh axis");
            snprintf(f->expert, sizeof f->expert, "%s", val);
            continue;
        }
        if (!d) {
            rest[(*nrest)++] = argv[i];
            continue;
        }
        const unsigned bit = 1u << (d - gen_flag_table);
        if ((f->given & bit) && d->kind != 3)
            return errmsg_fail(err, errlen, "--%s is given twice: give each flag once", d->name);
        f->given |= bit;
        char *field = (char *)f + d->off;
        if (d->kind == 2) {
            if (name[len] == '=') return errmsg_fail(err, errlen, "--%s takes no value", d->name);
            *(int *)field = 1;
            continue;
        }
        const char *val = name[len] == '=' ? name + len + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!val) return errmsg_fail(err, errlen, "--%s needs a value", d->name);
        if (d->kind == 3) {
            char what[32];
            snprintf(what, sizeof what, "--prompt %d", ++nprompt);
            if (prompts_add(ps, val, strlen(val), what, err, errlen) < 0) return -1;
        } else if (d->kind == 0) {
            if (!*val) return errmsg_fail(err, errlen, "--%s: the value is empty", d->name);
            if (strlen(val) >= d->size)
                return errmsg_fail(err, errlen, "--%s: the value is longer than %zu characters",
                                   d->name, d->size - 1);
            memcpy(field, val, strlen(val) + 1);
        } else {
            char *end;
            errno = 0;
            const long long v = strtoll(val, &end, 10);
            if (*end || end == val || errno || v < 1 || v > GEN_MAX_COUNT)
                return errmsg_fail(err, errlen, "--%s %s: expected a whole number from 1 to %d",
                                   d->name, val, GEN_MAX_COUNT);
            *(int64_t *)field = v;
        }
    }
    return 0;
}

/* Generate's own flags against each other: each must matter for what the command does. */
static int check_own_flags(const gen_flags *f, char *err, size_t errlen) {
#define GIVEN(n) (f->given & (1u << gen_flag_index(n)))
    if (GIVEN("prompt") && GIVEN("prompts"))
        return errmsg_fail(err, errlen,
                           "--prompt and --prompts are alternatives: give the prompts on the "
                           "command line or in a file, not both");
    const char *bench_only[] = {"bench-batches", "bench-prompt", "csv"};
    for (int k = 0; k < 3 && !f->bench; k++)
        if (GIVEN(bench_only[k]))
            return errmsg_fail(err, errlen,
                               "--%s does nothing in meshtrain generate without --bench (it is an "
                               "option of the decode sweep): add --bench, or drop it",
                               bench_only[k]);
    for (int k = 0; k < 2 && f->bench; k++)
        if (GIVEN(k ? "prompts" : "prompt"))
            return errmsg_fail(err, errlen,
                               "--%s does nothing in meshtrain generate --bench, which decodes "
                               "synthetic prompts of --bench-prompt bytes: drop it, or --bench",
                               k ? "prompts" : "prompt");
#undef GIVEN
    return 0;
}

/* ---------------------------------------------------------------- the run */

static void report_prefill(const gen_step *t, const gen_machine *mc, int64_t B) {
    const double pred = gen_predict(t, mc);
    fprintf(stderr,
            "prefill | %lld seqs, %.0f tokens | TTFT %.2f ms | %.0f tok/s | %.2f GFLOP/s (%.0f%% "
            "of C %.1f) | read %.2f MB weights + wrote %.3f MB KV | book %.2f ms (%.2fx)\n",
            (long long)B, t->rows, 1e3 * t->seconds, t->rows / t->seconds,
            t->flops / t->seconds / 1e9, 100.0 * t->flops / t->seconds / mc->flops, mc->flops / 1e9,
            t->p_bytes / 1e6, t->kv_bytes / 1e6, 1e3 * pred, t->seconds / pred);
}

static void report_decode(int64_t step, const gen_step *t, const gen_machine *mc) {
    const double pred = gen_predict(t, mc), bytes = t->p_bytes + t->kv_bytes;
    fprintf(stderr,
            "decode %lld | B %.0f | %.3f ms/token | %.0f tok/s | read %.3f MB (weights %.3f + KV "
            "%.3f) | %.2f GB/s (%.0f%% of %.2f) | %.2f GFLOP/s | book %.3f ms (%.2fx)\n",
            (long long)step, t->rows, 1e3 * t->seconds, t->rows / t->seconds, bytes / 1e6,
            t->p_bytes / 1e6, t->kv_bytes / 1e6, bytes / t->seconds / 1e9,
            100.0 * bytes / t->seconds / mc->bw, mc->bw / 1e9, t->flops / t->seconds / 1e9,
            1e3 * pred, t->seconds / pred);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Generated tokens of every sequence on every rank: out[B, n] (a sum over the world in which
 * only the tensor axis's first rank of each replica contributes its rows). */
static void gather_tokens(mesh *m, gen *g, const int32_t *mine, int64_t n, int64_t B, float *out) {
    int64_t row0, nb;
    gen_rows(g, &row0, &nb);
    float *in = calloc((size_t)(B * n), sizeof *in);
    CHECK(in, "gather_tokens: out of memory");
    int64_t kv_index;
    gen_kv_shard(g, &kv_index);
    if (model_extents_of(gen_model(g))->n0 == 0 && kv_index == 0)
        for (int64_t i = 0; i < nb * n; i++) in[row0 * n + i] = (float)mine[i];
    mesh_all_reduce(m, mesh_all_axes(m), out, in, B * n, MESH_ALG_MPI);
    free(in);
}

static void run_generate(const config *c, const gen_flags *f, mesh *m, gen *g, gen *dg,
                         const prompt_set *ps, const gen_machine *mc) {
    int64_t row0, nb;
    gen_rows(g, &row0, &nb);
    const int64_t n = f->tokens, B = ps->n;
    int32_t *mine = calloc((size_t)(nb * n + 1), sizeof *mine), *cur = malloc((size_t)nb * 4 + 4),
            *next = malloc((size_t)nb * 4 + 4);
    double *ms = calloc((size_t)n + 1, sizeof *ms);
    float *all = calloc((size_t)(B * n + 1), sizeof *all);
    CHECK(mine && cur && next && ms && all, "generate: out of memory");
    gen_step st, t;
    if (dg) draft_tokens(c, m, g, dg, ps, n, (int)f->draft_tokens, mine);
    if (!dg) {
        gen_prefill(g, ps, next, &st);
        t = gen_step_total(m, &st);
        if (mesh_rank(m) == 0) report_prefill(&t, mc, B);
        for (int64_t i = 0; i < nb; i++) mine[i * n] = next[i];
    }
    for (int64_t s = 1; s < n && !dg; s++) {
        memcpy(cur, next, (size_t)nb * sizeof *cur);
        gen_decode(g, cur, next, &st);
        for (int64_t i = 0; i < nb; i++) mine[i * n + s] = next[i];
        t = gen_step_total(m, &st);
        ms[s - 1] = 1e3 * t.seconds;
        if (mesh_rank(m) == 0 && !c->quiet) report_decode(s, &t, mc);
    }
    gather_tokens(m, g, mine, n, B, all);
    if (mesh_rank(m) == 0) {
        if (n > 1 && !dg) {
            double total = 0; /* the decode's time: its steps, one after the other */
            for (int64_t s = 0; s < n - 1; s++) total += ms[s];
            qsort(ms, (size_t)(n - 1), sizeof *ms, cmp_double);
            fprintf(stderr,
                    "decode summary | %lld steps | median %.3f ms/token, min %.3f | "
                    "%.0f tok/s at the median | decode %.3f ms in all, %.3f ms/token\n",
                    (long long)(n - 1), ms[(n - 2) / 2], ms[0], (double)B * 1e3 / ms[(n - 2) / 2],
                    total, total / (double)(n - 1));
        }
        for (int64_t b = 0; b < B; b++) {
            for (int64_t i = 0; i < ps->len[b]; i++) putchar(ps->tok[b][i]);
            for (int64_t i = 0; i < n; i++) putchar((int)all[b * n + i]);
            putchar('\n');
        }
        fflush(stdout);
    }
    free(mine), free(cur), free(next), free(ms), free(all);
}

/* Collective over: world. Rank 0's first line on stderr: the model, the mesh and its sharding,
 * the hosts; then the experts, if any. */
static void print_plan(const config *c, mesh *m, char kv_axis) {
    char hosts[160], spec[96], dp[CONFIG_AXES_LEN], kv[32] = "";
    mesh_hosts_str(m, hosts, sizeof hosts); /* collective */
    if (mesh_rank(m) != 0) return;
    const model_shape *s = &c->shape;
    config_data_axes(c, m, dp);
    char *at = kv_axis ? strchr(dp, kv_axis) : NULL; /* the kv axis holds no replicas */
    if (at) memmove(at, at + 1, strlen(at));
    if (kv_axis) snprintf(kv, sizeof kv, ", KV positions over %c", kv_axis);
    fprintf(stderr,
            "generate | model L=%lld D=%lld N=%lld K=%lld H=%lld F=%lld V=%lld T=%lld | mesh %s: "
            "replicas over %s, tensor over %s%s%s%s | hosts: %s%s%s%s\n",
            (long long)s->L, (long long)s->D, (long long)s->N, (long long)s->K, (long long)s->H,
            (long long)s->F, (long long)s->V, (long long)s->T, mesh_spec_str(m, spec, sizeof spec),
            dp[0] ? dp : "-", c->tensor_axis[0] ? c->tensor_axis : "-", kv,
            c->alg != MESH_ALG_DEFAULT ? ", --alg " : "",
            c->alg != MESH_ALG_DEFAULT ? mesh_alg_name(c->alg) : "", hosts,
            c->cross_hosts[0] ? " (across hosts first: --cross-hosts " : "",
            c->cross_hosts[0] ? c->cross_hosts : "", c->cross_hosts[0] ? ")" : "");
    const moe_shape *mo = &s->moe;
    if (mo->E > 0)
        fprintf(stderr,
                "generate | experts E=%lld, top-%lld, %lld shared, F_e=%lld, every %lld blocks, "
                "capacity %s%g, %s%s\n",
                (long long)mo->E, (long long)mo->k, (long long)mo->shared, (long long)mo->F,
                (long long)mo->every, mo->capacity > 0 ? "" : "(dropless) ", mo->capacity,
                c->expert_axis[0] ? "routed experts sharded over " : "every expert on every rank",
                c->expert_axis);
}

/* Collective over: world. print_plan, then the run: prompts, the cache's layout, threads and
 * the machine measured. */
static void print_header(const config *c, const gen_flags *f, mesh *m, gen *g, const prompt_set *ps,
                         const gen_machine *mc, const gen_warm *warm) {
    print_plan(c, m, f->kv_shard[0]);
    if (mesh_rank(m) != 0) return;
    const char *mode[] = {"kv heads over the tensor axis", "kv heads replicated",
                          "AllToAll attention, cache split by batch in each kv group"};
    int64_t kv_index;
    const int64_t P = gen_kv_shard(g, &kv_index), S = ps->max_len + f->tokens;
    char shard[128] = "";
    if (f->kv_shard[0])
        snprintf(shard, sizeof shard, ", positions round-robin over %c: %lld of %lld per rank%s",
                 f->kv_shard[0], (long long)((S + P - 1) / P), (long long)S,
                 f->cp_prefill ? ", the prefill's prompts so too (--cp)" : "");
    fprintf(stderr,
            "generate | %lld prompts, %lld new tokens each | KV cache %s, %lld bytes a position "
            "of a sequence, %.3f MB per rank (%s%s) | measured: BW %.2f GB/s, C %.2f GFLOP/s "
            "(%s products; sums over %d ranks, %d BLAS thread%s each)\n",
            (long long)ps->n, (long long)f->tokens, compute_dtype_name(gen_kv_dtype(g)),
            (long long)(2 * c->shape.L * c->shape.K * c->shape.H *
                        compute_dtype_bytes(gen_kv_dtype(g))),
            (double)gen_cache_bytes(g) / 1e6, mode[gen_mode(g)], shard, mc->bw / 1e9,
            mc->flops / 1e9, compute_dtype_name(mc->flops_dtype), mesh_nranks(m), c->threads,
            c->threads > 1 ? "s" : "");
    precision_print(gen_precision(g), stderr);
    gen_print_memory(stderr, "generate", gen_model(g), (double)gen_cache_bytes(g), warm);
}

void gen_print_memory(FILE *out, const char *who, const model *m, double kv_bytes,
                      const gen_warm *warm) {
    const model_weight_bytes w = model_weight_memory(m);
    const double MB = 1e6;
    fprintf(out, "%s | memory on rank 0 (MB): weights %.2f (fp32 master)", who, w.params / MB);
    if (w.params_bf16) fprintf(out, " + bf16 copy %.2f", w.params_bf16 / MB);
    if (w.panels)
        fprintf(out, " + panel copies %.2f (%s)", w.panels / MB,
                w.params_bf16 ? "bf16 in 16-column panels, for one-row products: decode at batch 1"
                              : "fp32 in 16-column panels, packed once for every product");
    fprintf(out, " + KV cache %.2f = %.2f", kv_bytes / MB,
            (w.params + w.params_bf16 + w.panels + kv_bytes) / MB);
    if (warm && warm->made > 0)
        fprintf(out, " | the bf16%s copies made at load (%lld layers and unembeddings, %.1f ms), "
                     "not by the first request",
                w.panels ? " and panel" : "", (long long)warm->made, 1e3 * warm->seconds);
    fprintf(out, "\n");
}

gen_warm gen_warm_model(model *m) {
    const double t0 = mesh_now();
    const int64_t made = model_make_bf16(m);
    return (gen_warm){made, mesh_now() - t0};
}

/* Rank 0: generate's paths, before any work: the inputs can be read, and --csv can be written, is
 * no input, and belongs to this run alone (data/lockfile.h). 0 or −1 with err. */
static int check_paths(const gen_flags *f, char *err, size_t errlen) {
    const lockfile_named in[] = {
        {"--ckpt", f->ckpt}, {"--prompts", f->prompts_file}, {"--draft", f->draft}};
    return lockfile_check_io(in, 3, (lockfile_named){"--csv", f->csv}, "the table", err, errlen);
}

int gen_check_kv_replicate(const config *c, int kv_replicate, const mesh *m, char *err,
                           size_t errlen) {
    const int ty = c->tensor_axis[0] ? mesh_axis_index(m, c->tensor_axis[0]) : -1;
    const int64_t nY = ty >= 0 ? mesh_axis_size(m, ty) : 1;
    if (!kv_replicate || nY > c->shape.K) return 0;
    return errmsg_fail(err, errlen,
                       "--kv-replicate is unused: the tensor axis has %lld rank%s, no more than "
                       "the %lld kv heads, so each rank holds kv heads of its own",
                       (long long)nY, nY == 1 ? "" : "s", (long long)c->shape.K);
}

/* generate --cp AXIS: the prefill's prompts over AXIS, each rank computing the positions it
 * then caches as --kv-shard AXIS lays them out (kvshard.h); the prefill's attention gathers the
 * keys and values (allgather). Moves the axis from c to f->kv_shard. Not collective. 0 or −1. */
static int cp_kv_shard(config *c, gen_flags *f, char *err, size_t errlen) {
    if (!c->cp_axis[0]) return 0;
    if (f->kv_shard[0] && strcmp(f->kv_shard, c->cp_axis) != 0)
        return errmsg_fail(err, errlen,
                           "--cp %s with --kv-shard %s: the prefill's shards of the prompt are "
                           "the cache's (each rank keeps the keys it computed), so they are one "
                           "axis: drop --kv-shard",
                           c->cp_axis, f->kv_shard);
    if (config_cp_alg(c) != CONFIG_CP_ALLGATHER)
        return errmsg_fail(err, errlen,
                           "--cp-alg %s: generate's prefill gathers the prompt's keys and values "
                           "over the axis (--cp-alg allgather); ring and ulysses are training's",
                           c->cp_alg);
    snprintf(f->kv_shard, sizeof f->kv_shard, "%s", c->cp_axis);
    f->cp_prefill = 1;
    c->cp_axis[0] = 0;
    return 0;
}

/* Collective over: world. --bench: every check first, then the machine, then the sweep. */
static int run_bench(const config *c, const gen_flags *f, mesh *m) {
    char err[GEN_ERR + GEN_BENCH_ERR];
    gen_bench_plan sweep;
    if (gen_bench_check(c, f, m, &sweep, err, sizeof err) < 0) mesh_exit_error("%s", err);
    const gen_machine mc = gen_measure_machine_dtype(c, m);
    print_plan(c, m, 0);
    return gen_bench_run(c, f, m, &sweep, &mc);
}

/* The command line into f, ps and c (generate's own flags, then the trainer's config); exits on
 * bad input. 1 when it asks for --help (printed by rank 0), else 0. Not collective. */
static int parse_cli(int argc, char **argv, gen_flags *f, prompt_set *ps, config *c, int *given) {
    char err[GEN_ERR] = "";
    if (config_help_asked(argc, argv)) {
        if (mesh_world_rank() == 0) print_help(stdout);
        return 1;
    }
    *f = (gen_flags){.tokens = 64, .bench_prompt = 64};
    snprintf(f->bench_batches, sizeof f->bench_batches, "1,2,4,8,16,32,64");
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    CHECK(rest, "generate: out of memory");
    if (split_args(argc, argv, f, ps, rest, &nrest, given, err, sizeof err) < 0 ||
        check_own_flags(f, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    config_defaults(c);
    if (config_parse_for(c, f->bench ? CONFIG_MODE_GEN_BENCH : CONFIG_MODE_GENERATE, nrest, rest,
                         err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    free(rest);
    c->quick_start = config_env_quick_start();
    return 0;
}

/* Collective over: world. Every check that needs the mesh (the files, the prompts, the
 * checkpoint's shape, the flags' combinations), each rank leaving with one message; settles the
 * expert axis, the draft's tokens and --cp's cache shard. */
static void check_on_mesh(config *c, gen_flags *f, mesh *m, prompt_set *ps, const int *given) {
    char err[GEN_ERR] = "";
    const int paths = mesh_world_rank() == 0 ? check_paths(f, err, sizeof err) : 0;
    if (mesh_agree(mesh_world_comm(m), paths) < 0) mesh_exit_error("%s", err);
    const int read =
        f->prompts_file[0] ? prompts_read_file(ps, f->prompts_file, err, sizeof err) : 0;
    if (mesh_agree_msg(mesh_world_comm(m), read, err, sizeof err) < 0) mesh_exit_error("%s", err);
    if ((f->ckpt[0] && gen_adopt_ckpt_shape(c, m, f->ckpt, given, err, sizeof err) < 0) ||
        gen_check_kv_replicate(c, f->kv_replicate, m, err, sizeof err) < 0 ||
        draft_check(c, f, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    if (f->expert[0] && c->shape.moe.E == 0)
        mesh_exit_error("--expert %s shards the routed experts, and the model has none (a "
                        "checkpoint with experts, or --experts E)",
                        f->expert);
    snprintf(c->expert_axis, sizeof c->expert_axis, "%s", f->expert);
    if (f->draft[0] && !f->draft_tokens) f->draft_tokens = 4;
    if (f->kv_shard[0] && strlen(f->kv_shard) != 1)
        mesh_exit_error("--kv-shard %s: name one mesh axis", f->kv_shard);
    if (cp_kv_shard(c, f, err, sizeof err) < 0) mesh_exit_error("%s", err);
    if (f->kv_shard[0] && (f->bench || f->draft[0]))
        mesh_exit_error("--%s is not supported with %s: it shards plain greedy or sampled "
                        "decode only",
                        f->cp_prefill ? "cp" : "kv-shard",
                        f->bench ? "--bench" : "--draft (speculative decoding)");
}

/* The cache's extents for the prompts: every prompt plus its new tokens, and the rows of a forward
 * (a prefill chunk of at most 1024, a decode step, a verify step of the draft's tokens). */
static gen_dims dims_of(const gen_flags *f, const prompt_set *ps) {
    int64_t total = 0;
    for (int64_t i = 0; i < ps->n; i++) total += ps->len[i];
    const int64_t S = ps->max_len + f->tokens;
    gen_dims d = {ps->n, S, total < 1024 ? total : 1024, f->kv_replicate};
    if (d.max_rows < S) d.max_rows = S;
    if (d.max_rows < ps->n) d.max_rows = ps->n;
    if (f->draft[0] && d.max_rows < ps->n * (f->draft_tokens + 2)) /* a verify step's rows */
        d.max_rows = ps->n * (f->draft_tokens + 2);
    return d;
}

/* Collective over: world. The target model's generator (its checkpoint loaded) and the draft's
 * (NULL without --draft); exits on failure. */
static gen *open_gens(const config *c, const gen_flags *f, mesh *m, const gen_dims *d, gen **dg,
                      gen_warm *warm) {
    char err[GEN_ERR] = "";
    gen *g =
        (f->cp_prefill ? gen_create_cp : gen_create_kv)(c, m, d, f->kv_shard[0], err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    if (f->ckpt[0] && ckpt_load_params(gen_model(g), gen_par(g), m, f->ckpt, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    if (f->draft[0] && gen_mode(g) == GEN_KV_ALLTOALL)
        mesh_exit_error("--draft needs the kv heads over the tensor axis or replicated (|Y| > K "
                        "puts the target's cache in the AllToAll layout): add --kv-replicate");
    *dg = f->draft[0] ? draft_open(c, m, f->draft, d, err, sizeof err) : NULL;
    if (f->draft[0] && !*dg) mesh_exit_error("%s", err);
    *warm = gen_warm_model(gen_model(g)); /* the bf16 copies now, not in the first prefill */
    if (*dg) gen_warm_model(gen_model(*dg));
    return g;
}

int gen_main(int argc, char **argv) {
    char err[GEN_ERR] = "";
    gen_flags f;
    prompt_set ps = {0};
    int given[GEN_SHAPE_FLAGS] = {0};
    config c;
    if (parse_cli(argc, argv, &f, &ps, &c, given)) return 0;
    kern_set_threads(c.threads);
    mesh *m = mesh_create_placed(c.mesh, c.mesh_open, c.cross_hosts, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    check_on_mesh(&c, &f, m, &ps, given);
    if (f.bench) {
        const int rc = run_bench(&c, &f, m);
        mesh_destroy(m);
        return rc;
    }
    if (ps.n == 0) mesh_exit_error("no prompt: give --prompt STR (repeatable) or --prompts FILE");
    if (prompts_check_fit(&ps, f.tokens, c.shape.T, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    const gen_dims d = dims_of(&f, &ps);
    gen_warm warm;
    gen *dg, *g = open_gens(&c, &f, m, &d, &dg, &warm);
    /* after every check: bad input fails fast */
    const gen_machine mc = gen_measure_machine_dtype(&c, m);
    print_header(&c, &f, m, g, &ps, &mc, &warm);
    run_generate(&c, &f, m, g, dg, &ps, &mc);
    gen_destroy(dg);
    gen_destroy(g);
    prompts_free(&ps);
    mesh_destroy(m);
    return 0;
}
