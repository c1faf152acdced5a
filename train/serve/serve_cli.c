#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* serve_cli: `meshtrain serve` (see serve_cli.h). */
#include "train/serve/serve_cli.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/lockfile.h"
#include "kernels/gemm.h"
#include "mesh/bcast.h"
#include "mesh/cost_serve.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"
#include "train/infer/draft_cli.h"
#include "train/infer/gen_cli.h"
#include "train/model/hooks.h"
#include "train/serve/cost.h"
#include "train/serve/disagg_cli.h"
#include "train/serve/front.h"
#include "train/serve/loop.h"
#include "train/serve/sim.h"
#include "train/serve/spec_engine.h"
#include "train/serve/stop.h"

#define SERVE_ERR 512
#define REPORT_EVERY 5.0 /* seconds between report lines while requests run */

typedef struct {
    char ckpt[1024], host[64], prefix_cache[8], batching[16];
    char simulate[1024], sim_out[1024], sim_machine[64], draft[1024], expert[4];
    int64_t port, kv_block, kv_blocks, max_batch_tokens, prefill_chunk, max_seqs, max_queue;
    int64_t max_tokens, drain, draft_tokens, prefill_ranks, draft_ranks, prefill_tensor;
    int64_t kv_replicate;
} serve_flags;

/* One row per flag: parsing, range check, default and --help come from here. kind: 0 string, 1
 * integer in [lo, hi], 2 one of the words in `words`, 3 a switch (no value: 1 when given). def: the
 * value before the command line's (NULL: 0 or empty). */
typedef struct {
    const char *name;
    int kind;
    size_t off, size;
    int64_t lo, hi;
    const char *words, *def, *help;
} serve_flag_def;

#define F_(field) offsetof(serve_flags, field), sizeof(((serve_flags *)0)->field)
static const serve_flag_def serve_flag_table[] = {
    {"ckpt", 0, F_(ckpt), 0, 0, NULL, NULL,
     "parameters from a checkpoint of any mesh (default: fresh "
     "init from --seed); the shape flags default to its"},
    {"host", 0, F_(host), 0, 0, NULL, "127.0.0.1",
     "address to listen on (default 127.0.0.1, loopback only)"},
    {"port", 1, F_(port), 0, 65535, NULL, "8080", "TCP port (default 8080; 0 = any free port)"},
    {"kv-block", 1, F_(kv_block), 1, 4096, NULL, "16", "positions per KV block (default 16)"},
    {"kv-blocks", 1, F_(kv_blocks), 0, INT32_MAX, NULL, NULL,
     "KV blocks of each rank's pool (default 0 = --max-seqs full contexts a replica)"},
    {"kv-replicate", 3, F_(kv_replicate), 0, 0, NULL, NULL,
     "with |Y| > K: each rank holds its kv head for every sequence (default: the ranks sharing a "
     "kv head split the sequences, AllToAll attention)"},
    {"max-batch-tokens", 1, F_(max_batch_tokens), 1, 1 << 20, NULL, "256",
     "rows of one forward per replica: decodes + prefill chunks (default 256)"},
    {"prefill-chunk", 1, F_(prefill_chunk), 1, 1 << 20, NULL, "128",
     "most prompt tokens of one sequence per step (default 128)"},
    {"max-seqs", 1, F_(max_seqs), 1, 1 << 20, NULL, "32",
     "running sequences per replica (default 32)"},
    {"max-queue", 1, F_(max_queue), 1, 1 << 30, NULL, "256",
     "requests waiting before new ones get 503 (default 256)"},
    {"max-tokens", 1, F_(max_tokens), 1, 1 << 30, NULL, "16",
     "max_tokens of a request that gives none (default 16)"},
    {"drain", 1, F_(drain), 0, 3600, NULL, "10",
     "seconds running requests may finish after SIGTERM or SIGINT (default 10; from mpirun at "
     "most half its odls_base_sigkill_timeout)"},
    {"prefix-cache", 2, F_(prefix_cache), 0, 0, "on off", "on",
     "share full KV blocks of equal prefixes "
     "(default on)"},
    {"simulate", 0, F_(simulate), 0, 0, NULL, NULL,
     "no server: run the workload FILE (JSON lines t, prompt, max_tokens) on the book's virtual "
     "clock"},
    {"sim-out", 0, F_(sim_out), 0, 0, NULL, NULL, "--simulate: the requests' times, JSON lines"},
    {"sim-machine", 0, F_(sim_machine), 0, 0, NULL, NULL,
     "--simulate: BW,C (GB/s, GFLOP/s summed over ranks) to price steps at (default: measured)"},
    {"batching", 2, F_(batching), 0, 0, "continuous static static-padded", "continuous",
     "continuous: admit every step; static: a replica admits only when empty and runs only the "
     "rows still going; static-padded: generate's batch, prompts padded to the longest, every row "
     "run until the longest ends (the baselines)"},
    {"draft", 0, F_(draft), 0, 0, NULL, NULL,
     "speculative decoding: the drafter's checkpoint (the target's vocabulary), on the same "
     "ranks and sharding"},
    {"prefill-ranks", 1, F_(prefill_ranks), 1, 1 << 20, NULL, NULL,
     "disaggregated serving: the ranks of the first replicas, N in all, only prefill and ship each "
     "request's KV blocks to the other replicas, which only decode"},
    {"prefill-tensor", 1, F_(prefill_tensor), 1, 1 << 20, NULL, NULL,
     "--prefill-ranks on a mesh of their own: the first N ranks prefill as N/Y replicas of Y "
     "tensor ranks, the others decode as --mesh, --tensor and --dp describe them; the KV blocks "
     "move by kv head between the two shardings"},
    {"draft-tokens", 1, F_(draft_tokens), 1, 64, NULL, NULL,
     "--draft: tokens a decode drafts each step (default 4)"},
    {"draft-ranks", 1, F_(draft_ranks), 1, 1 << 20, NULL, NULL,
     "--draft on ranks of its own: the last N ranks run the drafter (its heads over them) and send "
     "each step's drafts to the target's ranks, which --mesh describes"},
    {"expert", 0, F_(expert), 0, 0, NULL, NULL,
     "shard the routed experts of a mixture-of-experts checkpoint over this data axis (--dp): "
     "every replica joins each step's AllToAlls"},
};
#undef F_
enum { N_SERVE_FLAGS = sizeof serve_flag_table / sizeof serve_flag_table[0] };

static void print_help(FILE *out) {
    fprintf(out, "usage: mpirun -np R meshtrain serve [--ckpt FILE] [flags]\n");
    for (int i = 0; i < N_SERVE_FLAGS; i++) {
        const serve_flag_def *d = &serve_flag_table[i];
        char name[64];
        snprintf(name, sizeof name, "--%s %s", d->name,
                 d->kind == 1   ? "N"
                 : d->kind == 2 ? d->words
                 : d->kind == 3 ? ""
                                : "STR");
        fprintf(out, "  %-32s %s\n", name, d->help);
    }
    fprintf(out,
            "  --temperature X, --top-k K, --seed S: defaults of a request's sampling fields\n"
            "  --tensor AXIS, --dp AXES, --mesh SPEC: as in training (Megatron over heads and F; "
            "replicas)\n"
            "Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /health, GET "
            "/metrics, GET /v1/models, GET /.\n"
            "Model flags (--layers, --d-model, ...) are meshtrain's; see meshtrain --help.\n");
}

static int set_flag(serve_flags *f, const serve_flag_def *d, const char *val, char *err,
                    size_t errlen) {
    char *field = (char *)f + d->off;
    if (d->kind == 1) {
        char *end;
        const long long v = strtoll(val, &end, 10);
        if (*end || end == val || v < d->lo || v > d->hi)
            return errmsg_fail(err, errlen, "--%s %s: expected a whole number in [%lld, %lld]",
                               d->name, val, (long long)d->lo, (long long)d->hi);
        *(int64_t *)field = v;
        return 0;
    }
    if (strlen(val) >= d->size)
        return errmsg_fail(err, errlen, "--%s: longer than %zu characters", d->name, d->size - 1);
    if (d->kind == 2) {
        const size_t n = strlen(val);
        const char *w = strstr(d->words, val);
        if (!n || !w || (w != d->words && w[-1] != ' ') || (w[n] && w[n] != ' '))
            return errmsg_fail(err, errlen, "--%s %s: expected one of: %s", d->name, val, d->words);
    }
    memcpy(field, val, strlen(val) + 1);
    return 0;
}

/* Every flag's default (its row's def). */
static void serve_defaults(serve_flags *f) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < N_SERVE_FLAGS; i++) {
        const serve_flag_def *d = &serve_flag_table[i];
        char err[SERVE_ERR] = "";
        CHECK(!d->def || set_flag(f, d, d->def, err, sizeof err) == 0, "serve: %s", err);
    }
}

/* Splits argv into serve's flags (into f) and the rest (rest[0..*nrest), for config_parse);
 * notes which shape flags were given. */
static int split_args(int argc, char **argv, serve_flags *f, char **rest, int *nrest, int *given,
                      char *err, size_t errlen) {
    *nrest = 0;
    rest[(*nrest)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *name = strncmp(argv[i], "--", 2) == 0 ? argv[i] + 2 : NULL;
        const size_t len = name ? strcspn(name, "=") : 0;
        const serve_flag_def *d = NULL;
        for (int k = 0; name && k < N_SERVE_FLAGS; k++)
            if (strlen(serve_flag_table[k].name) == len &&
                !strncmp(name, serve_flag_table[k].name, len))
                d = &serve_flag_table[k];
        gen_shape_mark(name, len, given);
        if (!d) {
            rest[(*nrest)++] = argv[i];
            continue;
        }
        if (d->kind == 3) { /* a switch */
            if (name[len] == '=') return errmsg_fail(err, errlen, "--%s takes no value", d->name);
            *(int64_t *)((char *)f + d->off) = 1;
            continue;
        }
        const char *val = name[len] == '=' ? name + len + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!val) return errmsg_fail(err, errlen, "--%s needs a value", d->name);
        if (set_flag(f, d, val, err, errlen) < 0) return -1;
    }
    return 0;
}

/* Rank 0's report: a line every REPORT_EVERY seconds while requests run, the window's tokens/s,
 * running and waiting requests, the pool, the prefix cache, and the engine's step time beside the
 * book's prediction for the same steps (serve_plan_cost against the measured machine). */
typedef struct {
    double t0, measured, predicted, rows;
    int64_t steps, tokens0;
    double link_bw;  /* disaggregated: a rank's share of the measured bandwidth (bytes/s) */
    int64_t nY, nYd; /* ranks of a prefill and of a decode replica holding a sequence's kv heads
                      * (the tensor ranks; K in the AllToAll layout) */
} report_window;

static void report_line(serve_front *f, report_window *w, int final) {
    const serve_metrics m = front_metrics(f);
    const double now = mesh_now(), dt = now - w->t0;
    if (w->steps == 0 && !final) {
        w->t0 = now;
        return;
    }
    const double hits = m.kv.lookups ? 100.0 * (double)m.kv.hits / (double)m.kv.lookups : 0.0;
    fprintf(stderr,
            "serve%s | %lld running, %lld waiting | %.0f tok/s | %lld steps, %.0f rows | step "
            "%.2f ms, book %.2f ms (%.2fx) | KV %lld/%lld blocks used, %lld cached | prefix "
            "hits %.0f%% | preempted %lld | requests %lld done, %lld rejected\n",
            final ? " summary" : "", (long long)m.running, (long long)m.waiting,
            (double)(m.generation_tokens - w->tokens0) / (dt > 0 ? dt : 1), (long long)w->steps,
            w->rows, w->steps ? 1e3 * w->measured / (double)w->steps : 0.0,
            w->steps ? 1e3 * w->predicted / (double)w->steps : 0.0,
            w->predicted > 0 ? w->measured / w->predicted : 0.0, (long long)m.kv.used,
            (long long)m.kv.total, (long long)m.kv.published, hits, (long long)m.sched.preemptions,
            (long long)(m.requests[METRICS_END_LENGTH] + m.requests[METRICS_END_STOP]),
            (long long)m.requests[METRICS_END_REJECTED]);
    if (m.kv_transfers > 0) {
        const double each = (double)m.kv_transfer_bytes / (double)m.kv_transfers;
        fprintf(stderr,
                "serve | disaggregated: %lld requests' KV shipped, %.3f MB, %.3f ms each (rank "
                "0's sends), book %.3f ms (%d ranks to %d at %.2f GB/s) | prefill side: TTFT "
                "mean %.2f ms | decode side: TPOT mean %.2f ms\n",
                (long long)m.kv_transfers, (double)m.kv_transfer_bytes / 1e6,
                1e3 * m.kv_transfer_seconds / (double)m.kv_transfers,
                1e3 * cost_kv_transfer(each, (int)w->nY, (int)w->nYd, w->link_bw, 0), (int)w->nY,
                (int)w->nYd, w->link_bw / 1e9, m.ttft.n ? 1e3 * m.ttft.sum / (double)m.ttft.n : 0.0,
                m.tpot.n ? 1e3 * m.tpot.sum / (double)m.tpot.n : 0.0);
    }
    if (m.spec_drafted > 0)
        fprintf(stderr, "serve | speculative: %lld drafted, %lld kept, %lld rejected, alpha %.3f\n",
                (long long)m.spec_drafted, (long long)m.spec_kept, (long long)m.spec_rejected,
                (double)m.spec_kept / (double)(m.spec_kept + m.spec_rejected));
    *w = (report_window){now, 0, 0, 0, 0, m.generation_tokens, w->link_bw, w->nY, w->nYd};
}

typedef struct {
    const config *c;
    const serve_flags *f;
    serve_engine *e;
    mesh *m;
    gen_machine mc;
    double step_sleep; /* MESHTRAIN_SERVE_STEP_SLEEP: seconds rank 0 sleeps after each step (a
                        * test hook that keeps requests in flight long enough to disconnect or
                        * signal in the middle of them) */
} serve_run;

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Rank 0: the front, the scheduler and the loop until a signal and the drain. */
static void loop_rank0(const serve_run *sr, serve_front *front, batcher *s, batch_plan *p,
                       serve_wire *w, double *linger) {
    const int32_t dr = batcher_options(s)->prefill_replicas;
    const int64_t nY = engine_tensor_ranks(sr->e);
    const int32_t kv_eb = engine_kv_elem_bytes(sr->e), w_eb = engine_weight_elem_bytes(sr->e);
    const serve_side sides[2] = {
        /* each side's steps at its own tensor degree */
        {engine_replica_tensor(sr->e, 0), engine_replica_pools(sr->e, 0)},
        {engine_replica_tensor(sr->e, dr), engine_replica_pools(sr->e, dr)}};
    report_window rw = {mesh_now(),
                        0,
                        0,
                        0,
                        0,
                        0,
                        sr->mc.bw / mesh_world_size(),
                        nY / engine_kv_shards(sr->e),
                        engine_replica_tensor(sr->e, dr) / engine_replica_pools(sr->e, dr)};
    double deadline = 0;
    for (;;) {
        if (stop_requested() && deadline == 0) {
            const double d = stop_drain_seconds((double)sr->f->drain, linger);
            deadline = mesh_now() + d;
            const int64_t left = front_drain(front, s);
            fprintf(stderr,
                    "serve | %s%s: no new requests; %lld running may finish within %.1f s\n",
                    stop_requested() == SIGINT ? "SIGINT" : "SIGTERM",
                    stop_from_launcher() ? " from the launcher" : "", (long long)left, d);
        }
        front_sync(front, s);
        if (deadline > 0 &&
            (batcher_running(s) + batcher_waiting(s) == 0 || mesh_now() >= deadline))
            break;
        gen_step st;
        const int32_t n = serve_loop_step(sr->e, sr->m, s, p, w, front_emit, front, &st);
        if (n == 0) {
            front_wait(front, 0.1);
        } else {
            const gen_step cost = serve_plan_cost_sides(&sr->c->shape, sides, dr, kv_eb, w_eb, p);
            const double book = gen_predict(&cost, &sr->mc);
            front_step_done(front, p, st.seconds, book);
            if (p->nxfer)
                front_transfers(front, p->nxfer, engine_xfer_bytes(sr->e, p), w->xfer.seconds);
            if (sr->step_sleep > 0) sleep_s(sr->step_sleep);
            rw.measured += st.seconds, rw.predicted += book;
            rw.rows += cost.rows, rw.steps++;
        }
        if (mesh_now() - rw.t0 >= REPORT_EVERY && !sr->c->quiet) report_line(front, &rw, 0);
    }
    front_fail_all(front, s, "the server is shutting down and the drain time ran out");
    serve_loop_exit(sr->m, p, w);
    report_line(front, &rw, 1);
}

/* The scheduler's options; shards: the pools of a replica (engine_kv_groups), each by default
 * holding its share of --max-seqs full contexts. */
static batch_opts batcher_options_of(const serve_flags *f, const config *c, int32_t replicas,
                                     int32_t shards) {
    batch_opts o = {replicas,
                    (int32_t)f->kv_blocks,
                    (int32_t)f->kv_block,
                    (int32_t)f->max_batch_tokens,
                    (int32_t)f->prefill_chunk,
                    (int32_t)f->max_seqs,
                    (int32_t)c->shape.T,
                    !strcmp(f->prefix_cache, "on"),
                    !strcmp(f->batching, "static")          ? BATCH_STATIC
                    : !strcmp(f->batching, "static-padded") ? BATCH_STATIC_PADDED
                                                            : BATCH_CONTINUOUS,
                    f->draft[0] ? (int32_t)f->draft_tokens : 0,
                    0,
                    shards,
                    0};
    if (o.kv_blocks == 0)
        o.kv_blocks = (o.max_seqs + shards - 1) / shards *
                      (int32_t)((c->shape.T + o.kv_block - 1) / o.kv_block);
    return o;
}

/* Not collective (the same answer on every rank). --prefill-ranks N: the replicas that prefill,
 * N over the ranks of a replica; bad input leaves through mesh_exit_error. */
static int32_t prefill_replicas_of(const serve_flags *f, serve_engine *e) {
    if (!f->prefill_ranks) return 0;
    const int64_t R = engine_replicas(e), per = mesh_world_size() / R;
    if (f->prefill_ranks % per || f->prefill_ranks / per >= R)
        mesh_exit_error("--prefill-ranks %lld: whole replicas of %lld ranks, fewer than the %lld "
                        "ranks (%lld replicas over --dp), so that some decode",
                        (long long)f->prefill_ranks, (long long)per, (long long)mesh_world_size(),
                        (long long)R);
    return (int32_t)(f->prefill_ranks / per);
}

/* Collective over: m. The drafter's engine into *de (its pool mirroring the target's block for
 * block; on ranks of its own, own > 1: its heads over all of m's, nothing else sharded), its
 * parameters loaded; 0, or −1 with err. */
static int draft_engine(const config *c, const serve_flags *f, mesh *m, const batch_opts *o,
                        int64_t own, serve_engine **de, char *err, size_t errlen) {
    char why[SERVE_ERR] = "";
    config dc;
    if (draft_config(c, m, f->draft, c->shape.T,
                     "of the target's context (serve runs sequences "
                     "up to it)",
                     &dc, err, errlen) < 0)
        return -1;
    if (own) { /* the drafter's own mesh: one axis d, its tensor axis */
        snprintf(dc.mesh, sizeof dc.mesh, "d=%lld", (long long)own);
        snprintf(dc.tensor_axis, sizeof dc.tensor_axis, "%s", own > 1 ? "d" : "");
        dc.data_axes[0] = dc.expert_axis[0] = '\0';
    }
    /* (its kv heads replicated past its K: its pool mirrors the target's one pool a replica) */
    const engine_dims dd = {o->kv_blocks, o->kv_block, o->max_batch_tokens + o->max_seqs, 0, 0, 1,
                            o->shards};
    *de = engine_create(&dc, m, &dd, why, sizeof why);
    if (!*de) return errmsg_fail(err, errlen, "the drafter %s: %s", f->draft, why);
    if (ckpt_load_params(engine_model(*de), engine_par(*de), m, f->draft, err, errlen) < 0)
        return -1;
    if (mesh_rank(m) == 0 && !c->quiet)
        fprintf(stderr,
                "serve | speculative decoding: drafter %s (L=%lld D=%lld), up to %d tokens "
                "drafted a decode, its KV pool %.2f MB per rank%s\n",
                f->draft, (long long)dc.shape.L, (long long)dc.shape.D, (int)o->draft_tokens,
                (double)engine_pool_bytes(*de) / 1e6, own ? ", on ranks of its own" : "");
    return 0;
}

/* Collective over: world. --draft: the drafter's engine (*de) on the same ranks, and speculative
 * decoding on e. Bad input leaves through mesh_exit_error. */
static serve_spec *open_draft(const config *c, const serve_flags *f, mesh *m, serve_engine *e,
                              const batch_opts *o, serve_engine **de) {
    char err[SERVE_ERR] = "";
    if (draft_engine(c, f, m, o, 0, de, err, sizeof err) < 0) mesh_exit_error("%s", err);
    serve_spec *sp = serve_spec_create(e, *de, o, err, sizeof err);
    if (mesh_agree_msg(mesh_world_comm(m), sp ? 0 : -1, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    engine_set_spec(e, sp);
    return sp;
}

/* Collective over: world (w). --draft-ranks N: the target's engine on the first ranks (own, the
 * --mesh of them: returned, with *de NULL), the drafter's on the last N (own, one axis: *de, the
 * engine returned NULL), speculative decoding between them (*sp). Every failure is agreed over w,
 * so both sides leave together. */
static serve_engine *open_remote(const config *c, const serve_flags *f, mesh *w, mesh *own,
                                 batch_opts *o, serve_engine **de, serve_spec **sp) {
    char err[SERVE_ERR] = "";
    const int ntarget = mesh_nranks(w) - (int)f->draft_ranks;
    const int target = mesh_rank(w) < ntarget;
    engine_dims d = {o->kv_blocks, o->kv_block, o->max_batch_tokens, 0, 0, (int)f->kv_replicate, 0};
    serve_engine *e = NULL;
    int rc = 0;
    if (target) {
        e = engine_create(c, own, &d, err, sizeof err);
        rc = e ? 0 : -1;
        if (rc == 0 && f->ckpt[0])
            rc = ckpt_load_params(engine_model(e), engine_par(e), own, f->ckpt, err, sizeof err);
        if (rc == 0 && engine_replicas(e) > 1)
            rc = errmsg_fail(err, sizeof err,
                             "--draft-ranks: the target is one replica (its ranks over --tensor "
                             "only); its --dp gives %d",
                             (int)engine_replicas(e));
    } else {
        rc = draft_engine(c, f, own, o, f->draft_ranks, de, err, sizeof err);
    }
    if (mesh_agree_msg(mesh_world_comm(w), rc, err, sizeof err) < 0) mesh_exit_error("%s", err);
    *sp = serve_spec_create(e, *de, o, err, sizeof err);
    if (mesh_agree_msg(mesh_world_comm(w), *sp ? 0 : -1, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    serve_spec_remote(*sp, mesh_world_comm(w), mesh_rank(w), ntarget);
    if (e) engine_set_spec(e, *sp);
    return e;
}

/* Collective over: world. The engine on m, its checkpoint loaded; the replicas (and those that
 * prefill) into *o; with --draft the drafter's engine (*de) and speculative decoding (*sp). Bad
 * input leaves through mesh_exit_error. */
static serve_engine *open_engine(const config *c, const serve_flags *f, mesh *m, batch_opts *o,
                                 serve_engine **de, serve_spec **sp) {
    char err[SERVE_ERR] = "";
    engine_dims d = {o->kv_blocks, o->kv_block, o->max_batch_tokens, 0, 0, (int)f->kv_replicate, 0};
    serve_engine *e = engine_create(c, m, &d, err, sizeof err);
    if (!e) mesh_exit_error("%s", err);
    if (f->ckpt[0] &&
        ckpt_load_params(engine_model(e), engine_par(e), m, f->ckpt, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    o->replicas = engine_replicas(e);
    o->prefill_replicas = prefill_replicas_of(f, e);
    *sp = f->draft[0] ? open_draft(c, f, m, e, o, de) : NULL;
    return e;
}

/* Collective over: world. Rank 0's start-up lines on stderr (none with --quiet): the model, the
 * mesh, its sharding and hosts, the pool and the scheduler, the machine measured. */
static void print_plan(const config *c, const serve_flags *f, mesh *m, const batch_opts *o,
                       double pool_bytes, const char *kv_dtype, const gen_machine *mc) {
    char hosts[160], mspec[96];
    mesh_hosts_str(m, hosts, sizeof hosts); /* collective */
    if (mesh_rank(m) != 0 || c->quiet) return;
    const model_shape *s = &c->shape;
    fprintf(stderr,
            "serve | model L=%lld D=%lld N=%lld K=%lld H=%lld F=%lld V=%lld T=%lld%s | mesh %s, "
            "%d replicas, tensor %s%s%s | hosts: %s%s%s%s | %lld BLAS thread%s per rank\n",
            (long long)s->L, (long long)s->D, (long long)s->N, (long long)s->K, (long long)s->H,
            (long long)s->F, (long long)s->V, (long long)s->T, s->moe.E > 0 ? " (MoE)" : "",
            f->prefill_tensor ? "of the two sides (below)" : mesh_spec_str(m, mspec, sizeof mspec),
            (int)o->replicas,
            f->prefill_tensor   ? "per side"
            : c->tensor_axis[0] ? c->tensor_axis
                                : "-",
            c->alg != MESH_ALG_DEFAULT ? ", --alg " : "",
            c->alg != MESH_ALG_DEFAULT ? mesh_alg_name(c->alg) : "", hosts,
            c->cross_hosts[0] ? " (across hosts first: --cross-hosts " : "",
            c->cross_hosts[0] ? c->cross_hosts : "", c->cross_hosts[0] ? ")" : "",
            (long long)c->threads, c->threads > 1 ? "s" : "");
    char pool[200];
    if (o->shards > 1) /* the AllToAll layout */
        snprintf(pool, sizeof pool,
                 "%d x %d blocks (the %d ranks sharing a kv head each hold %d, for their share of "
                 "the sequences: AllToAll attention)",
                 (int)o->shards, (int)o->kv_blocks, (int)o->shards, (int)o->kv_blocks);
    else
        snprintf(pool, sizeof pool, "%d blocks", (int)o->kv_blocks);
    if (f->prefill_tensor && o->prefill_shards != o->shards) /* each side its own layout */
        snprintf(pool + strlen(pool), sizeof pool - strlen(pool),
                 " on a decode replica, %d x %d on a prefill one", (int)o->prefill_shards,
                 (int)o->kv_blocks);
    fprintf(stderr,
            "serve | KV pool %s x %d positions per replica (%.2f MB per rank, %s), prefix "
            "cache %s | batching %s, max-batch-tokens %d, prefill-chunk %d, max-seqs %d, "
            "max-queue %lld | %s BW %.2f GB/s, C %.2f GFLOP/s\n",
            pool, (int)o->kv_block, pool_bytes / 1e6, kv_dtype,
            o->static_batches == BATCH_STATIC_PADDED ? "off (static-padded)" : f->prefix_cache,
            f->batching, (int)o->max_batch_tokens, (int)o->prefill_chunk, (int)o->max_seqs,
            (long long)f->max_queue, f->sim_machine[0] ? "--sim-machine" : "measured", mc->bw / 1e9,
            mc->flops / 1e9);
}

/* Every rank, after the plan's lines: the bf16 and panel copies of the engines' weights made now,
 * at load, so that the first request finds them made; then rank 0's precision, memory and
 * disaggregation lines (none with --quiet). */
static void warm_and_report(const config *c, const serve_flags *f, const batch_opts *o,
                            const mesh *m, serve_engine *e, serve_engine *de) {
    const gen_warm warm = e ? gen_warm_model(engine_model(e)) : (gen_warm){0, 0.0};
    if (de) gen_warm_model(engine_model(de));
    if (mesh_rank(m) != 0 || c->quiet) return;
    fprintf(stderr, "serve | ");
    precision_print(engine_precision(e), stderr);
    gen_print_memory(stderr, "serve", engine_model(e), (double)engine_pool_bytes(e), &warm);
    disagg_print(c, o, e, f->prefill_ranks, f->prefill_tensor);
}

/* Collective over: world (m). The pools of a replica (engine_kv_groups) of the target's mesh, the
 * same on every rank: with --draft-ranks the target's (world rank 0's), with --prefill-tensor the
 * decode side's (the last world rank's; disagg_open adds the prefill side's). */
static int32_t kv_pools(const config *c, const serve_flags *f, mesh *m, const mesh *own) {
    int32_t z = engine_kv_groups(c, own, (int)f->kv_replicate);
    if (f->draft_ranks || f->prefill_tensor)
        mesh_bcast_bytes(mesh_world_comm(m), &z, sizeof z, f->draft_ranks ? 0 : mesh_nranks(m) - 1);
    return z;
}

/* Every rank: the scheduler's options (checked), the engine, the front on rank 0; then the loop.
 * m: every rank's mesh; own: this rank's part's (the target's or, with --draft-ranks, the
 * drafter's; m without). */
static int run_serve(const config *c, const serve_flags *f, mesh *m, mesh *own) {
    char err[SERVE_ERR] = "";
    const int me = mesh_rank(m);
    if (f->max_batch_tokens < f->max_seqs)
        mesh_exit_error("--max-batch-tokens %lld < --max-seqs %lld: every running sequence "
                        "decodes one token each step",
                        (long long)f->max_batch_tokens, (long long)f->max_seqs);
    batch_opts o = batcher_options_of(f, c, 1, kv_pools(c, f, m, own));
    serve_engine *e = NULL, *de = NULL;
    serve_spec *sp = NULL;
    if (f->draft_ranks) {
        e = open_remote(c, f, m, own, &o, &de, &sp);
    } else if (f->prefill_tensor) {
        e = disagg_open(c, m, own, f->prefill_ranks, f->prefill_tensor, (int)f->kv_replicate,
                        f->ckpt, &o);
    } else {
        e = open_engine(c, f, m, &o, &de, &sp);
    }
    batcher *s = NULL;
    serve_front *front = NULL;
    batch_plan p;
    serve_wire w;
    double linger = 2.0;
    int rc = serve_loop_init(&p, &w, &o) < 0 ? errmsg_fail(err, sizeof err, "out of memory") : 0;
    if (rc == 0 && me == 0) {
        s = batcher_create(&o, err, sizeof err);
        /* a test hook: the idle connections' timeout, short enough to outlast in a test */
        const char *idle_hook = getenv("MESHTRAIN_SERVE_IDLE_TIMEOUT");
        front_opts fo = {.port = (int)f->port,
                         .max_queue = f->max_queue,
                         .vocab = c->shape.V,
                         .default_max_tokens = f->max_tokens,
                         .temperature = c->temperature,
                         .top_k = c->top_k,
                         .seed = c->seed,
                         .idle_timeout = idle_hook ? (unsigned)atoi(idle_hook) : 0u};
        snprintf(fo.host, sizeof fo.host, "%s", f->host);
        if (s) front = front_create(&fo, s, err, sizeof err);
        if (front) batcher_set_spec_fn(s, front_spec, front);
        rc = s && front ? 0 : -1;
    }
    if (mesh_agree_msg(mesh_world_comm(m), rc, err, sizeof err) < 0) mesh_exit_error("%s", err);
    const char *hook = getenv("MESHTRAIN_SERVE_STEP_SLEEP");
    const serve_run sr = {c, f, e, m, gen_measure_machine_dtype(c, m), hook ? atof(hook) : 0.0};
    stop_install();
    print_plan(c, f, m, &o, e ? (double)engine_pool_bytes(e) : 0.0,
               e ? compute_dtype_name(engine_kv_dtype(e)) : "-", &sr.mc);
    warm_and_report(c, f, &o, m, e, de);
    if (me == 0) {
        fprintf(stderr, "serve | listening on http://%s%s%s:%d/ (rank 0 is pid %ld)\n",
                strchr(f->host, ':') ? "[" : "", f->host, strchr(f->host, ':') ? "]" : "",
                front_port(front), stop_pid());
        loop_rank0(&sr, front, s, &p, &w, &linger);
    } else {
        w.spec = e ? NULL : sp; /* a drafter's rank of its own runs the drafter's part */
        while (serve_loop_step(e, m, NULL, &p, &w, NULL, NULL, NULL) >= 0) {
        }
    }
    front_destroy(front, linger);
    batcher_destroy(s);
    serve_loop_free(&p, &w);
    serve_spec_destroy(sp);
    engine_destroy(de);
    engine_destroy(e);
    return 0;
}

/* --simulate: the batcher on the book's virtual clock, on rank 0; no engine, no server. */
static int run_simulation(const config *c, const serve_flags *f, mesh *m) {
    char err[SERVE_ERR] = "", axes[CONFIG_AXES_LEN];
    if (engine_refuse(c, err, sizeof err) < 0) mesh_exit_error("%s", err);
    if (c->shape.moe.E > 0)
        mesh_exit_error("--experts with --simulate: the virtual clock prices dense steps only");
    mesh_axes dax;
    config_data_axes(c, m, axes);
    const int ty = c->tensor_axis[0] ? mesh_axis_index(m, c->tensor_axis[0]) : -1;
    const int32_t replicas =
        mesh_axes_parse(m, axes, &dax) == 0 ? (int32_t)mesh_axes_size(m, dax) : 1;
    const int32_t groups = engine_kv_groups(c, m, (int)f->kv_replicate);
    const batch_opts o = batcher_options_of(f, c, replicas, groups);
    if (c->compute == COMPUTE_AUTO)
        mesh_exit_error("--compute-dtype auto with --simulate: give fp32 or bf16 (the virtual "
                        "clock prices the dtype given, not this CPU's choice)");
    /* bf16 compute reads the weights' bf16 copy, and its cache is bf16 unless --kv-dtype says */
    const compute_dtype kvd = c->kv_dtype == COMPUTE_AUTO ? c->compute : c->kv_dtype;
    sim_opts so = {f->simulate,
                   f->sim_out,
                   ty >= 0 ? mesh_axis_size(m, ty) : 1,
                   f->max_queue,
                   {0, 0, 0, 0, COMPUTE_FP32},
                   compute_dtype_bytes(kvd),
                   compute_dtype_bytes(c->compute),
                   groups};
    double bw = 0, fl = 0;
    if (f->sim_machine[0] &&
        (sscanf(f->sim_machine, "%lf,%lf", &bw, &fl) != 2 || bw <= 0 || fl <= 0))
        mesh_exit_error("--sim-machine %s: expected BW,C in GB/s and GFLOP/s, e.g. 30,120",
                        f->sim_machine);
    so.mc = f->sim_machine[0] ? (gen_machine){.bw = bw * 1e9, .flops = fl * 1e9}
                              : gen_measure_machine_dtype(c, m);
    const model_shape *sh = &c->shape; /* a rank's kv heads: K/|Y|, or one where |Y| > K */
    const int64_t kvh = so.nY <= sh->K ? sh->K / so.nY : 1;
    print_plan(c, f, m, &o,
               (double)o.kv_blocks * o.kv_block * 2.0 * sh->L * kvh * sh->H * so.kv_elem_bytes,
               compute_dtype_name(kvd), &so.mc);
    int rc = 0;
    if (mesh_rank(m) == 0) rc = serve_simulate(&c->shape, &o, &so, err, sizeof err);
    if (mesh_agree_msg(mesh_world_comm(m), rc, err, sizeof err) < 0) mesh_exit_error("%s", err);
    return 0;
}

/* The flags against each other (the same answer on every rank): one message, status 2. */
static void check_combinations(const serve_flags *f) {
    if (!f->simulate[0] && (f->sim_out[0] || f->sim_machine[0]))
        mesh_exit_error("--sim-out and --sim-machine go with --simulate FILE");
    if (f->simulate[0] && !f->sim_out[0])
        mesh_exit_error("--simulate needs --sim-out FILE (where the requests' times go)");
    if (f->draft_tokens && !f->draft[0])
        mesh_exit_error("--draft-tokens goes with --draft CKPT (the drafter)");
    if (f->draft_ranks && !f->draft[0])
        mesh_exit_error("--draft-ranks goes with --draft CKPT (the drafter it runs)");
    if (f->draft[0] && f->simulate[0])
        mesh_exit_error("--draft with --simulate: the virtual clock prices plain steps only");
    if (f->draft[0] && !strcmp(f->batching, "static-padded"))
        mesh_exit_error("--draft with --batching static-padded: a padded static batch runs no "
                        "drafter (--draft goes with continuous or static batching)");
    if (f->prefill_ranks && (f->draft[0] || f->simulate[0] || strcmp(f->batching, "continuous")))
        mesh_exit_error("--prefill-ranks goes with continuous batching, without --draft and "
                        "--simulate");
    if (f->prefill_tensor && !f->prefill_ranks)
        mesh_exit_error("--prefill-tensor goes with --prefill-ranks N (the ranks it shards)");
}

/* Collective over: world (w). --kv-replicate against the mesh m (this rank's part's: the
 * target's, or with --draft-ranks the drafter's, whose kv heads are replicated anyway, so only
 * the target's ranks judge); with --prefill-tensor against the decode side's, unless the prefill
 * side's Yp is past K (it applies to both sides, so it is used there: no rank judges). One
 * message, status 2. */
static void check_kv_layout(const config *c, const serve_flags *f, mesh *w, const mesh *m) {
    char err[SERVE_ERR] = "";
    const int judge = !(f->draft_ranks && mesh_rank(w) >= mesh_nranks(w) - f->draft_ranks) &&
                      !(f->prefill_tensor && mesh_rank(w) < f->prefill_ranks) &&
                      !(f->prefill_tensor > c->shape.K);
    const int rc = judge ? gen_check_kv_replicate(c, (int)f->kv_replicate, m, err, sizeof err) : 0;
    if (mesh_agree_msg(mesh_world_comm(w), rc, err, sizeof err) < 0) mesh_exit_error("%s", err);
}

/* Rank 0: serve's paths, before any work: the inputs are readable files, and --sim-out can be
 * written, is no input, and belongs to this run alone (data/lockfile.h). 0 or −1 with err. */
static int check_paths(const serve_flags *f, char *err, size_t errlen) {
    const lockfile_named in[] = {
        {"--ckpt", f->ckpt}, {"--draft", f->draft}, {"--simulate", f->simulate}};
    return lockfile_check_io(in, 3, (lockfile_named){"--sim-out", f->sim_out}, "the times", err,
                             errlen);
}

/* Collective over: world. --draft-ranks N: every rank's mesh (one axis over all), returned, and
 * this rank's part's into *own: the target's --mesh over the first ranks, the drafter's d=N over
 * the last N. Bad input leaves through mesh_exit_error. */
static mesh *split_meshes(const config *c, const serve_flags *f, mesh **own) {
    char err[SERVE_ERR] = "";
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int64_t ntarget = mesh_nranks(m) - f->draft_ranks;
    if (ntarget < 1)
        mesh_exit_error("--draft-ranks %lld: fewer than the %d ranks, so that some run the target",
                        (long long)f->draft_ranks, mesh_nranks(m));
    if (c->mesh_open[0] || c->cross_hosts[0])
        mesh_exit_error("--draft-ranks splits the ranks into the target's --mesh and the "
                        "drafter's: --open and --cross-hosts do not go with it");
    char spec[32];
    snprintf(spec, sizeof spec, "d=%lld", (long long)f->draft_ranks);
    const int target = mesh_rank(m) < ntarget;
    *own = mesh_split(m, target ? 0 : 1, target ? c->mesh : spec, err, sizeof err);
    if (mesh_agree_msg(mesh_world_comm(m), *own ? 0 : -1, err, sizeof err) < 0)
        mesh_exit_error("--draft-ranks %lld: the target's %lld ranks: %s",
                        (long long)f->draft_ranks, (long long)ntarget, err);
    return m;
}

int serve_main(int argc, char **argv) {
    char err[SERVE_ERR] = "";
    if (config_help_asked(argc, argv)) {
        if (mesh_world_rank() == 0) print_help(stdout);
        return 0;
    }
    serve_flags f;
    serve_defaults(&f);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0, given[GEN_SHAPE_FLAGS] = {0};
    CHECK(rest, "serve: out of memory");
    if (split_args(argc, argv, &f, rest, &nrest, given, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    config c;
    config_defaults(&c);
    if (config_parse_for(&c, CONFIG_MODE_SERVE, nrest, rest, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    c.quick_start = config_env_quick_start();
    free(rest);
    if (c.timeout > 0)
        mesh_exit_error("--timeout is refused by serve: an idle server waits for requests "
                        "without bound, which the watchdog would take for a hang");
    kern_set_threads(c.threads);
    if (f.simulate[0] && sim_check_flags(argc, argv, f.sim_machine[0], err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    check_combinations(&f);
    mesh *own = NULL,
         *m = f.draft_ranks ? split_meshes(&c, &f, &own)
              : f.prefill_tensor
                  ? disagg_split(&c, f.prefill_ranks, f.prefill_tensor, &own)
                  : mesh_create_placed(c.mesh, c.mesh_open, c.cross_hosts, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int st = mesh_world_rank() == 0 ? check_paths(&f, err, sizeof err) : 0;
    if (mesh_agree(mesh_world_comm(m), st) < 0) mesh_exit_error("%s", err);
    if (f.ckpt[0] && gen_adopt_ckpt_shape(&c, m, f.ckpt, given, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    if (f.draft[0] && !f.draft_tokens) f.draft_tokens = 4;
    check_kv_layout(&c, &f, m, own ? own : m);
    if (f.expert[0] && c.shape.moe.E == 0)
        mesh_exit_error("--expert %s shards the routed experts, and the model has none (a "
                        "checkpoint with experts, or --experts E)",
                        f.expert);
    snprintf(c.expert_axis, sizeof c.expert_axis, "%s", f.expert);
    const int rc = f.simulate[0] ? run_simulation(&c, &f, m) : run_serve(&c, &f, m, own ? own : m);
    mesh_destroy(own);
    mesh_destroy(m);
    return rc;
}
