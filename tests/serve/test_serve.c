/* Batch invariance of the serving engine, on the mesh given by the arguments (--mesh SPEC
 * --tensor AXIS --dp AXES, as `meshtrain serve` takes them): requests arrive by a randomised
 * schedule (fixed seeds) and run under many settings (block sizes 1 to 16, prefill chunks 1 to
 * 64, token budgets, prefix cache on and off, pools small enough to force preemption by
 * recompute, static batches, padded static batches), and every request is compared with `generate`
 * (gen.h) run on that prompt alone on the same mesh (one copy per replica):
 *  - its tokens, greedy and sampled (temperature 0.8, top-k 20, the request's seed as generate's
 *    --seed), equal generate's exactly;
 *  - its logits at every step match generate's within |a − b| ≤ k·FLT_EPSILON·(|a| + |b| + 1),
 *    k = 200 (the paged attention is row-independent, but the matmuls through OpenBLAS and sgemv
 *    are not: a row's bits depend on the rows beside it, so bit-equality is not asked for here);
 *  - the block pool's invariants hold after every step and every block comes back;
 *  - across the settings, preemption, prefix-cache hits and chunked prefill all happened;
 *  - log-probabilities (most requests ask, with 0 to 6 alternatives): every token of a request
 *    that asks comes with its record and no other does; each record is the log-softmax of the
 *    engine's own logits computed here in double, within 2 eps units of rounding (ids: the top n
 *    of that row, sorted), and of generate's logits within the bound their deviation allows
 *    (2·k·eps·(2·max|logit| + 1)); a greedy token is the first alternative;
 *  - speculative decoding (spec_engine.h), under settings of its own with drafters made from the
 *    target (tests/common/drafter.h: always right, always wrong, right some of the time) and 2 to
 *    5 drafted tokens, preemption and the prefix cache among them: greedy tokens equal
 *    generate's exactly (sampled ones, of the same distribution but other draws, just complete),
 *    and the right drafter has every greedy draft kept, the wrong one none, the noisy one some.
 * With --compute-dtype bf16 and --kv-dtype bf16 (serve's flags) both sides run so: the bf16 pool's
 * paged attention has generate's bf16 cache's arithmetic (attn_paged.h), so the same bounds hold.
 * With a tensor axis past the kv heads (--kv-heads 1 or 2 with --tensor over 2 to 4 ranks) the
 * engine's pool is in the AllToAll layout (engine.h: the ranks sharing a kv head split the
 * sequences, a pool each) and generate runs in its AllToAll layout (each replica's prompt copied
 * once per rank of a group, every copy fed the first one's tokens); --kv-replicate runs both
 * replicated. A setting of pools of one block of the whole context then checks the pools' share:
 * a replica runs at most, and at its peak exactly, one sequence per pool (replicas × groups); a
 * drafter then holds every pool of its replica (engine_dims.mirror_shards).
 * With --prefill-ranks N --prefill-tensor Yp the world splits in two meshes (disagg_cli.h), each
 * side its own tensor degree and kv layout and its own generate as the reference, and only the
 * disaggregated settings run; with --draft-ranks N the drafter runs on the last N ranks of its own
 * (serve_spec_remote), mirroring every pool of the target, and only the drafting settings run.
 * With --experts E (and --expert AXIS: the routed experts sharded over a data axis, every replica
 * joining each step's AllToAlls, a forward without rows too) the model has experts, and generate
 * runs the same. Fresh initialisation (seed 7), L=2 D=32 N=4 K=2 H=8 F=64 V=256 T=64 unless
 * --d-model, --heads, --kv-heads, --d-ff or --vocab say otherwise. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "drafter.h"
#include "mesh/bcast.h"
#include "mesh/mesh.h"
#include "train/infer/gen.h"
#include "train/infer/gen_cli.h"
#include "train/serve/engine.h"
#include "train/serve/batcher.h"
#include "train/serve/disagg_cli.h"
#include "train/serve/loop.h"
#include "train/serve/spec_engine.h"

#define TOL_K 200.0
#define NPROMPT 10
#define MAXNEW 12

static const char *texts[NPROMPT] = {"R",
                                     "ROMEO: To be or not",
                                     "ROMEO: To be, that is",
                                     "ab",
                                     "First Citizen:",
                                     "ROMEO: To",
                                     "Now is the winter of our",
                                     "O",
                                     "KING RICHARD III: Now is",
                                     "thou"};

typedef struct {
    int64_t plen, max_new;
    batch_sampling sp;
    int32_t tok[64];
    float *ref_logits;   /* [MAXNEW, V]: generate's, on this rank's replica */
    int32_t ref[MAXNEW]; /* generate's tokens */
} prompt_ref;

/* generate on prompt k alone (one copy per replica, each fed the tokens of rank 0's copy): its
 * tokens and its logits at every step. */
static void reference(const config *c0, mesh *m, int32_t nrep, int32_t groups, int kvrep,
                      prompt_ref *pr, int sampled) {
    char err[512];
    config c = *c0;
    c.temperature = sampled ? 0.8 : 0.0;
    c.top_k = sampled ? 20 : 0;
    c.seed = pr->sp.seed;
    prompt_set ps = {0};
    char text[64];
    for (int64_t i = 0; i < pr->plen; i++) text[i] = (char)pr->tok[i];
    for (int32_t r = 0; r < nrep * groups; r++)
        prompts_add(&ps, text, (size_t)pr->plen, "p", err, sizeof err);
    gen_dims d = {nrep * groups, pr->plen + pr->max_new, 64, kvrep};
    gen *g = gen_create(&c, m, &d, err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    /* generate's weights are initialised from c.seed: load the serving model's (seed 7) */
    model *gm = gen_model(g);
    model *sm = model_create(&c0->shape, 0, c0->seed, par_model_hooks(gen_par(g)));
    int64_t n1, n2;
    float *a = model_params_flat(gm, &n1), *b = model_params_flat(sm, &n2);
    memcpy(a, b, (size_t)n1 * sizeof(float));
    model_params_changed(gm); /* bf16 compute: the weights' copy made again */
    model_destroy(sm);
    int32_t cur[16], next[16];
    gen_step st;
    const int64_t V = c.shape.V;
    for (int64_t s = 0; s < pr->max_new; s++) {
        if (s == 0)
            gen_prefill(g, &ps, next, &st);
        else
            gen_decode(g, cur, next, &st);
        memcpy(pr->ref_logits + s * V, gen_logits(g), (size_t)V * sizeof(float));
        /* rank 0's copy is the prompt alone (generate's first sequence); the other replicas'
         * copies draw from other RNG counters, so they are fed rank 0's tokens */
        mesh_bcast_bytes(mesh_world_comm(m), next, sizeof next[0], 0);
        pr->ref[s] = next[0];
        for (int32_t i = 0; i < groups; i++) cur[i] = next[0];
    }
    gen_destroy(g);
    prompts_free(&ps);
}

/* log softmax(lg[V])[v] in double. */
static double lsm(const float *lg, int64_t V, int64_t v) {
    double mx = lg[0], sum = 0;
    for (int64_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int64_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    return (double)lg[v] - mx - log(sum);
}

/* Record rec (logprob.h) of token tok with n alternatives against logits lg: its worst deviation
 * in units of bound(value), or 1e9 when ids or order are wrong. tight: the record must be the
 * n largest of lg exactly (lg is the row it came from). */
static double lp_dev(const float *rec, int32_t tok, int32_t n, const float *lg, int64_t V,
                     int tight, double slack) {
    double worst = fabs(rec[0] - lsm(lg, V, tok)) / (slack + 2 * FLT_EPSILON * (1 + fabs(rec[0])));
    for (int32_t i = 0; i < n; i++) {
        const int32_t id = (int32_t)rec[1 + 2 * i];
        const double d = fabs(rec[2 + 2 * i] - lsm(lg, V, id)) /
                         (slack + 2 * FLT_EPSILON * (1 + fabs(rec[2 + 2 * i])));
        worst = d > worst ? d : worst;
        if (i > 0 && rec[2 + 2 * i] > rec[2 * i]) return 1e9; /* not decreasing */
        if (id == tok && rec[2 + 2 * i] != rec[0]) return 1e9;
        int64_t above = 0; /* the id is the i-th largest (ties to the lower id) */
        for (int64_t v = 0; tight && v < V; v++)
            above += lg[v] > lg[id] || (lg[v] == lg[id] && v < id);
        if (tight && above != i) return 1e9;
    }
    return worst;
}

typedef struct {
    prompt_ref *pr;
    int64_t V;       /* the vocabulary */
    int64_t *which;  /* request id → prompt */
    int drafting;    /* the setting drafts (sampled tokens are not generate's) */
    double lp_worst; /* records vs generate's logits, in units of their bound */
    int64_t lp_n, lp_bad;
    int32_t out[512][MAXNEW];
    int64_t nout[512];
    int bad;
    int64_t drafted, kept; /* greedy requests' drafts, this setting */
} harness;

static void spec_seen(void *ctx, int64_t id, int32_t drafted, int32_t kept) {
    harness *h = ctx;
    if (h->pr[h->which[id]].sp.temperature > 0) return;
    h->drafted += drafted, h->kept += kept;
}

static batch_end emit(void *ctx, int64_t id, int32_t token, int64_t index, batch_end end,
                      const float *lp) {
    harness *h = ctx;
    const prompt_ref *q = &h->pr[h->which[id]];
    (void)end;
    if ((lp != NULL) != (q->sp.logprobs != 0)) h->lp_bad++;
    if (lp && q->sp.temperature == 0 && q->sp.top_logprobs > 0 && (int32_t)lp[1] != token)
        h->lp_bad++;
    if (lp && (!h->drafting || q->sp.temperature == 0)) { /* the same tokens as generate */
        const float *ref = q->ref_logits + index * h->V;
        double mx = 0;
        for (int64_t v = 0; v < h->V; v++) mx = fabs(ref[v]) > mx ? fabs(ref[v]) : mx;
        const double d = lp_dev(lp, token, q->sp.top_logprobs, ref, h->V, 0,
                                2 * TOL_K * FLT_EPSILON * (2 * mx + 1));
        h->lp_worst = d > h->lp_worst ? d : h->lp_worst;
        h->lp_n++;
    }
    h->out[id][index] = token;
    h->nout[id] = index + 1;
    return BATCH_END_NONE;
}

typedef struct {
    int32_t kv_block, kv_blocks, chunk, budget, seqs, prefix, stat;
    int32_t draft;   /* speculative decoding: tokens drafted a decode (0: none) */
    int32_t dkind;   /* its drafter (drafter_kind) */
    int32_t prefill; /* disaggregated: prefill replicas, at most all but one (0: none; the
                      * setting runs only with 2 or more replicas) */
} setting;

/* Pools of one block of the whole context: each holds one sequence at a time. */
static int one_seq_pools(const setting *st) {
    return st->kv_blocks == 1 && st->kv_block == 64;
}

/* One setting: the requests (every prompt, greedy and sampled) by a random arrival schedule, on
 * the world m (split_pre > 0: two meshes linked by disagg_open, its prefill replicas). */
static void run_setting(const setting *st, serve_engine *e, mesh *m, int32_t split_pre, harness *h,
                        uint64_t seed, double *worst, int *mismatch, int *invariants,
                        batch_counts *tot) {
    const int me = mesh_rank(m);
    const int32_t nrep = engine_replicas(e), groups = engine_replica_pools(e, nrep - 1);
    int32_t npre = st->prefill < nrep - 1 ? st->prefill : nrep - 1;
    if (split_pre) npre = split_pre;
    batch_opts o = {nrep,
                    st->kv_blocks,
                    st->kv_block,
                    st->budget,
                    st->chunk,
                    st->seqs,
                    64,
                    st->prefix,
                    st->stat,
                    st->draft,
                    npre,
                    groups,
                    engine_replica_pools(e, 0)};
    int64_t peak = 0; /* running sequences at most */
    batch_plan p;
    serve_wire w;
    char err[512];
    batcher *s = me == 0 ? batcher_create(&o, err, sizeof err) : NULL;
    if ((me == 0 && !s) || serve_loop_init(&p, &w, &o) < 0)
        mesh_abort(__FILE__, __LINE__, "%s", err);
    if (s) batcher_set_spec_fn(s, spec_seen, h);
    h->drafted = h->kept = 0;
    h->drafting = st->draft > 0;
    const int64_t nreq = 2 * NPROMPT;
    uint64_t r = seed;
    int64_t added = 0;
    memset(h->nout, 0, sizeof h->nout);
    for (int steps = 0; me != 0 || steps < 20000; steps++) {
        int go = 1;
        if (me == 0) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            for (int64_t n = (int64_t)((r >> 40) % 3); n > 0 && added < nreq; n--, added++) {
                prompt_ref *q = &h->pr[h->which[added]];
                batcher_add(s, added, q->tok, q->plen, q->max_new, &q->sp);
            }
            go = added < nreq || batcher_waiting(s) + batcher_running(s) > 0;
        }
        if (!go) break;
        const int32_t n = serve_loop_step(e, m, s, &p, &w, emit, h, NULL);
        if (n < 0) break;
        for (int32_t j = 0, k = 0, lpo = 0; j < n && !st->draft; j++) { /* vs generate's */
            const batch_item *it = &p.items[j];
            const float *lg = engine_logits(e, j), *rec = w.lp + lpo;
            if (!it->sample) continue;
            const int32_t tok = w.next[k++];
            lpo += (int32_t)batch_lp_floats(it);
            const prompt_ref *q = &h->pr[h->which[it->id]];
            if (!lg || it->tok_index >= q->max_new) continue; /* a padded batch's finished row */
            const double dev = check_worst_dev(lg, q->ref_logits + it->tok_index * h->V, h->V);
            if (dev > *worst) *worst = dev;
            /* the record against the row it came from: rounding only, the exact top ids */
            if (it->logprobs && lp_dev(rec, tok, it->top_logprobs, lg, h->V, 1, 0) > 1) h->lp_bad++;
        }
        if (s && batcher_check(s, err, sizeof err) < 0 && (*invariants)++ == 0)
            printf("  step %d: %s\n", steps, err);
        if (s && batcher_running(s) > peak) peak = batcher_running(s);
    }
    if (me == 0) {
        serve_loop_exit(m, &p, &w);
        for (int64_t id = 0; id < nreq; id++) {
            const prompt_ref *q = &h->pr[h->which[id]];
            const int exact = !st->draft || q->sp.temperature == 0; /* drafting: greedy only */
            if (h->nout[id] != q->max_new ||
                (exact && memcmp(h->out[id], q->ref, (size_t)q->max_new * 4))) {
                if ((*mismatch)++ < 4)
                    printf("  request %lld (prompt %lld, %s): %lld tokens, differ from generate\n",
                           (long long)id, (long long)h->which[id],
                           q->sp.temperature > 0 ? "sampled" : "greedy", (long long)h->nout[id]);
            }
        }
        for (int32_t i = 0; i < batcher_pools(s); i++)
            if (kvb_get_counts(batcher_pool(s, i)).used != 0 && (*invariants)++ == 0)
                printf("  pool %d: blocks still used at the end\n", (int)i);
        if (one_seq_pools(st)) { /* each pool holds one sequence: a replica holds `groups` */
            printf("  pools of one sequence: %d replicas x %d pools (%d tensor ranks, K = %lld), "
                   "at most %lld sequences running at once\n",
                   (int)nrep, (int)groups, (int)engine_tensor_ranks(e),
                   (long long)model_shape_of(engine_model(e))->K, (long long)peak);
            if (peak != (int64_t)nrep * groups) (*mismatch)++;
        }
        const batch_counts c = batcher_get_counts(s);
        if (st->draft) {
            const int ok = st->dkind == DRAFTER_RIGHT   ? h->kept == h->drafted
                           : st->dkind == DRAFTER_WRONG ? h->kept == 0
                                                        : h->kept > 0 && h->kept < h->drafted;
            printf("  %s drafter, %d drafted a decode: greedy requests drafted %lld, %lld kept "
                   "(%lld preemptions, %lld prompt tokens from the prefix cache)\n",
                   test_drafter_name((drafter_kind)st->dkind), (int)st->draft,
                   (long long)h->drafted, (long long)h->kept, (long long)c.preemptions,
                   (long long)c.cached_tokens);
            if (!ok || h->drafted == 0) (*mismatch)++;
        }
        if (npre > 0) {
            printf("  disaggregated, %d prefill + %d decode replicas: %lld requests' KV shipped "
                   "(%lld blocks), %lld preemptions, %lld prompt tokens from the prefix cache\n",
                   (int)npre, (int)(nrep - npre), (long long)c.transfers,
                   (long long)c.transfer_blocks, (long long)c.preemptions,
                   (long long)c.cached_tokens);
            if (c.transfers < 2 * NPROMPT) (*mismatch)++; /* every request moved at least once */
        }

        tot->preemptions += c.preemptions, tot->cached_tokens += c.cached_tokens;
        tot->prefill_tokens += c.prefill_tokens, tot->steps += c.steps;
    }
    batcher_destroy(s);
    serve_loop_free(&p, &w);
}

/* A drafter's rank of its own: its part of every step until rank 0 sends the exit plan. */
static void drafter_loop(serve_spec *sp, mesh *w, const batch_opts *o) {
    batch_plan p;
    serve_wire wire;
    if (serve_loop_init(&p, &wire, o) < 0) mesh_abort(__FILE__, __LINE__, "out of memory");
    wire.spec = sp;
    while (serve_loop_step(NULL, w, NULL, &p, &wire, NULL, NULL, NULL) >= 0) {
    }
    serve_loop_free(&p, &wire);
}

/* Whether argv gives flag (exactly). */
static int given(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], flag)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    config c;
    char err[512];
    config_defaults(&c);
    /* serve's flags, not the config's: --kv-replicate (generate's too), and --prefill-ranks N
     * --prefill-tensor Yp (two meshes, disagg_cli.h) */
    int kvrep = 0, nargs = 0;
    int64_t npre_ranks = 0, yp = 0, draft_ranks = 0;
    int drafter = 0; /* this rank holds the drafter on ranks of its own (--draft-ranks N) */
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--kv-replicate"))
            kvrep = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--prefill-ranks"))
            npre_ranks = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--prefill-tensor"))
            yp = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--draft-ranks"))
            draft_ranks = atoll(argv[++i]);
        else
            argv[nargs++] = argv[i];
    }
    argc = nargs;
    if (config_parse_for(&c, CONFIG_MODE_SERVE, argc, argv, err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    const model_shape a = c.shape; /* --experts E (and --expert AXIS): a MoE model */
    c.shape = (model_shape){.L = 2, .D = 32, .N = 4, .K = 2, .H = 8, .F = 64, .V = 256, .T = 64};
    c.shape.moe = a.moe;
    /* the shape flags a mesh needs (a tensor axis of 3: heads, F and V over it; K past it) */
    if (given(argc, argv, "--d-model")) c.shape.D = a.D;
    if (given(argc, argv, "--heads")) c.shape.N = a.N;
    if (given(argc, argv, "--kv-heads")) c.shape.K = a.K;
    if (given(argc, argv, "--d-ff")) c.shape.F = a.F;
    if (given(argc, argv, "--vocab")) c.shape.V = a.V;
    c.seed = 7;
    mesh *w = NULL, *m = NULL; /* the world; this rank's side's mesh (w without a split) */
    config cs = c;             /* this rank's side's config */
    if (npre_ranks) {
        w = disagg_split(&c, npre_ranks, yp, &m);
        disagg_side_config(&c, npre_ranks, yp, mesh_rank(w) < npre_ranks, &cs);
    } else if (draft_ranks) { /* the target on the first ranks (c.mesh), the drafter on d=N */
        w = mesh_create(NULL, NULL, err, sizeof err);
        if (!w) mesh_exit_error("%s", err);
        drafter = mesh_rank(w) >= mesh_nranks(w) - draft_ranks;
        if (drafter) {
            snprintf(cs.mesh, sizeof cs.mesh, "d=%lld", (long long)draft_ranks);
            snprintf(cs.tensor_axis, sizeof cs.tensor_axis, "%s", draft_ranks > 1 ? "d" : "");
            cs.data_axes[0] = cs.expert_axis[0] = '\0';
        }
        m = mesh_split(w, drafter, cs.mesh[0] ? cs.mesh : NULL, err, sizeof err);
        if (!m) mesh_exit_error("%s", err);
    } else {
        w = m = mesh_create(c.mesh, NULL, err, sizeof err);
        if (!m) mesh_exit_error("%s", err);
    }
    const int64_t V = c.shape.V;
    static const setting settings[] = {
        {16, 64, 64, 64, 8, 1, 0, 0, 0, 0},
        {4, 12, 5, 16, 6, 1, 0, 0, 0, 0},
        {1, 40, 3, 8, 4, 0, 0, 0, 0, 0},
        {3, 30, 64, 70, 8, 1, 1, 0, 0, 0},
        {8, 6, 7, 12, 3, 1, 0, 0, 0, 0},
        {16, 4, 1, 4, 4, 0, 0, 0, 0, 0},
        {4, 24, 8, 24, 6, 1, 0, 3, DRAFTER_RIGHT, 0},
        {3, 14, 5, 20, 5, 1, 0, 4, DRAFTER_NOISY, 0}, /* a small pool: preemption while drafting */
        {16, 64, 64, 64, 8, 0, 0, 2, DRAFTER_WRONG, 0},
        {1, 60, 64, 40, 8, 1, 0, 5, DRAFTER_NOISY, 0},
        {4, 24, 8, 24, 6, 1, 0, 0, 0, 1},
        {3, 14, 5, 16, 4, 1, 0, 0, 0, 2},  /* a small pool: the decode side preempts */
        {64, 1, 64, 64, 8, 1, 0, 0, 0, 0}, /* pools of one sequence (one_seq_pools) */
        {4, 24, 8, 24, 6, 1, BATCH_STATIC_PADDED, 0, 0, 0}, /* padded, a small pool: preemption */
    };
    const int nset = (int)(sizeof settings / sizeof *settings);
    int ndraft = 0, nrun = 0, warm_bad = 0;
    int64_t warm_made = 0;
    /* the references: generate on each prompt alone, greedy and sampled */
    engine_dims d0 = {4, 16, 64, 0, 0, kvrep, 0};
    serve_engine *e0 = engine_create(&cs, m, &d0, err, sizeof err);
    if (!e0) mesh_exit_error("%s", err);
    const int32_t nrep = engine_replicas(e0), groups = engine_kv_shards(e0);
    int32_t dgroups = groups; /* the pools of the decode side (the last rank's) or the target */
    mesh_bcast_bytes(mesh_world_comm(w), &dgroups, sizeof dgroups,
                     draft_ranks ? 0 : mesh_nranks(w) - 1);
    engine_destroy(e0);
    prompt_ref pr[2 * NPROMPT];
    for (int k = 0; k < 2 * NPROMPT; k++) {
        const char *t = texts[k % NPROMPT];
        pr[k].plen = (int64_t)strlen(t);
        pr[k].max_new = 4 + (k * 5) % (MAXNEW - 3);
        for (int64_t i = 0; i < pr[k].plen; i++) pr[k].tok[i] = (unsigned char)t[i];
        pr[k].sp = (batch_sampling){k < NPROMPT ? 0.0 : 0.8, k < NPROMPT ? 0 : 20,
                                    100 + (uint64_t)k, k % 4 != 3, (k * 3) % 7};
        pr[k].ref_logits = malloc(sizeof(float) * (size_t)(MAXNEW * V));
        if (!drafter) reference(&cs, m, nrep, groups, kvrep, &pr[k], k >= NPROMPT);
    }
    harness *h = calloc(1, sizeof *h);
    int64_t which[2 * NPROMPT];
    h->pr = pr, h->which = which, h->V = V;
    double worst = 0;
    int mismatch = 0, invariants = 0;
    batch_counts tot = {0};
    for (int si = 0; si < nset; si++) {
        uint64_t r = 99 + (uint64_t)si; /* arrival order: a permutation of the requests */
        for (int k = 0; k < 2 * NPROMPT; k++) which[k] = k;
        for (int k = 2 * NPROMPT - 1; k > 0; k--) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            const int j = (int)((r >> 33) % (uint64_t)(k + 1));
            const int64_t t = which[k];
            which[k] = which[j], which[j] = t;
        }
        const setting *st = &settings[si];
        if (st->prefill > 0 && nrep < 2 && !npre_ranks) continue;
        if (npre_ranks && !st->prefill) continue; /* two meshes: the disaggregated settings */
        if (draft_ranks && !st->draft) continue;  /* a drafter of its own: the drafting ones */
        nrun++;
        ndraft += st->draft > 0;
        engine_dims d = {st->kv_blocks, st->kv_block, st->budget, 0, 0, kvrep, 0};
        batch_opts so = {.kv_blocks = st->kv_blocks,
                         .kv_block = st->kv_block,
                         .max_batch_tokens = st->budget,
                         .shards = dgroups};
        serve_engine *de = NULL, *e = drafter ? NULL
                                      : npre_ranks
                                          ? disagg_open(&c, w, m, npre_ranks, yp, kvrep, "", &so)
                                          : engine_create(&c, m, &d, err, sizeof err);
        if (!e && !drafter) mesh_exit_error("%s", err);
        int64_t made0 = 0; /* serve's load: the bf16 and panel copies made before any request */
        if (e) {
            const model *em = engine_model(e);
            const gen_warm wm = gen_warm_model(engine_model(e));
            made0 = model_bf16_copies(em);
            warm_made = wm.made;
            warm_bad += wm.made != (model_compute_of(em)->bf16 ? c.shape.L + 1 : 0) ||
                        made0 != wm.made;
        }
        serve_spec *sp = NULL;
        /* a drafter from a copy of the target, its pool mirroring the target's (every pool) */
        const batch_opts o = {nrep,   st->kv_blocks, st->kv_block, st->budget, st->chunk, st->seqs,
                              64,     st->prefix,    st->stat,     st->draft,  0,         dgroups,
                              dgroups};
        if (st->draft) {
            engine_dims dd = {st->kv_blocks, st->kv_block, st->budget + st->seqs, 0, 0, 1, dgroups};
            if (!draft_ranks || drafter) {
                de = engine_create(&cs, m, &dd, err, sizeof err);
                if (!de) mesh_exit_error("%s", err);
                test_drafter_make(engine_model(de), (drafter_kind)st->dkind);
            }
            sp = serve_spec_create(e, de, &o, err, sizeof err);
            if (!sp) mesh_exit_error("%s", err);
            if (draft_ranks)
                serve_spec_remote(sp, mesh_world_comm(w), mesh_rank(w),
                                  mesh_nranks(w) - (int)draft_ranks);
            if (e) engine_set_spec(e, sp);
        }
        if (drafter)
            drafter_loop(sp, w, &o);
        else
            run_setting(st, e, w, npre_ranks ? so.prefill_replicas : 0, h, 1234 + (uint64_t)si,
                        &worst, &mismatch, &invariants, &tot);
        if (e) warm_bad += model_bf16_copies(engine_model(e)) != made0; /* none by a request */
        serve_spec_destroy(sp);
        engine_destroy(de);
        engine_destroy(e);
    }
    char label[160];
    snprintf(label, sizeof label,
             "rank %d (%s, tensor %s, dp %s, %d replicas, K = %lld%s, %lld experts%s%s)",
             mesh_rank(w), cs.mesh[0] ? cs.mesh : "1D", cs.tensor_axis[0] ? cs.tensor_axis : "-",
             cs.data_axes[0] ? cs.data_axes : "default", (int)nrep, (long long)c.shape.K,
             groups > 1 ? ", AllToAll kv layout"
             : kvrep    ? ", kv replicated"
                        : "",
             (long long)c.shape.moe.E, cs.expert_axis[0] ? " over " : "", cs.expert_axis);
    check_expect(worst <= TOL_K,
                 "%s: logits of every step of %d requests x %d settings without a drafter vs "
                 "generate alone: worst %.1f eps units (k = %.0f)",
                 label, 2 * NPROMPT, nrun - ndraft, worst, TOL_K);
    check_expect(warm_bad == 0,
                 "%s: the bf16 and panel copies made at load (gen_warm_model: %lld layers and "
                 "unembeddings, L + 1 in bf16, none in fp32) and none by the requests after, "
                 "under every setting (%d wrong)",
                 label, (long long)warm_made, warm_bad);
    check_expect(h->lp_bad == 0,
                 "%s: log-probability records: every token of the requests that ask and none "
                 "other, each the double log-softmax of its row of logits within 2 eps units, "
                 "the top ids in order, a greedy token first (%lld wrong)",
                 label, (long long)h->lp_bad);
    if (mesh_rank(w) == 0) {
        check_expect(h->lp_n > 0 && h->lp_worst <= 1,
                     "%s: %lld log-probability records vs the log-softmax of generate's logits: "
                     "worst %.3f of the bound 2·k·eps·(2·max|logit| + 1) + 2·eps·(|lp| + 1)",
                     label, (long long)h->lp_n, h->lp_worst);
        check_expect(mismatch == 0 && invariants == 0,
                     "%s: tokens (greedy and sampled; greedy only in the %d with a drafter, "
                     "whose drafts were kept as its kind says) equal generate alone under %d "
                     "settings (%d requests or drafters wrong), pool invariants after every step "
                     "(%d broken)",
                     label, ndraft, nrun, mismatch, invariants);
        check_expect(tot.preemptions > 0 && tot.cached_tokens > 0,
                     "%s: the settings exercised preemption (%lld) and the prefix cache (%lld "
                     "tokens) over %lld steps",
                     label, (long long)tot.preemptions, (long long)tot.cached_tokens,
                     (long long)tot.steps);
    }
    for (int k = 0; k < 2 * NPROMPT; k++) free(pr[k].ref_logits);
    free(h);
    if (w != m) mesh_destroy(m);
    mesh_destroy(w);
    const int rc = check_finish("test_serve");
    mesh_mpi_finalize();
    return rc;
}
