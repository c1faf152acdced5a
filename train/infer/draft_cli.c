/* draft_cli: `meshtrain generate --draft CKPT --draft-tokens k` (see draft_cli.h). */
#include "train/infer/draft_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/cost_serve.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"
#include "train/model/model.h"

int draft_check(const config *c, const gen_flags *f, char *err, size_t errlen) {
    if (!f->draft[0]) {
        if (f->draft_tokens)
            return errmsg_fail(err, errlen, "--draft-tokens goes with --draft CKPT (the drafter)");
        return 0;
    }
    if (f->bench)
        return errmsg_fail(err, errlen,
                           "--draft with --bench: the sweep times plain decode steps; run "
                           "speculative decoding without --bench (bench/spec_bench.sh)");
    if (model_moe_capacity(&c->shape) > 0)
        return errmsg_fail(err, errlen,
                           "--draft with experts of a capacity (--capacity-factor %g): the "
                           "target's verify step would count the rejected tokens' slots",
                           c->shape.moe.capacity);
    return 0;
}

int draft_config(const config *c, mesh *m, const char *path, int64_t positions,
                 const char *why_positions, config *dc, char *err, size_t errlen) {
    *dc = *c;
    memset(&dc->shape, 0, sizeof dc->shape); /* every dimension from the drafter's checkpoint */
    const int given[GEN_SHAPE_FLAGS] = {0};
    if (gen_adopt_ckpt_shape(dc, m, path, given, err, errlen) < 0) return -1;
    if (dc->shape.moe.E == 0) dc->expert_axis[0] = '\0'; /* a dense drafter has none to shard */
    if (dc->shape.V != c->shape.V)
        return errmsg_fail(err, errlen,
                           "the drafter %s has a vocabulary of %lld tokens, the target %lld: a "
                           "drafter must share the target's vocabulary",
                           path, (long long)dc->shape.V, (long long)c->shape.V);
    if (dc->shape.T < positions)
        return errmsg_fail(err, errlen,
                           "the drafter %s has a context of %lld positions, fewer than the %lld "
                           "%s",
                           path, (long long)dc->shape.T, (long long)positions, why_positions);
    if (model_moe_capacity(&dc->shape) > 0)
        return errmsg_fail(err, errlen, "the drafter %s has experts with a capacity: not supported",
                           path);
    return 0;
}

gen *draft_open(const config *c, mesh *m, const char *path, const gen_dims *d, char *err,
                size_t errlen) {
    config dc;
    if (draft_config(c, m, path, d->S, "this run needs (the longest prompt + --tokens)", &dc, err,
                     errlen) < 0)
        return NULL;
    char why[400];
    gen *g = gen_create(&dc, m, d, why, sizeof why);
    if (!g) {
        errmsg_fail(err, errlen, "the drafter %s: %s", path, why);
        return NULL;
    }
    if (gen_mode(g) == GEN_KV_ALLTOALL) {
        gen_destroy(g);
        errmsg_fail(err, errlen,
                    "--draft needs the kv heads over the tensor axis or replicated: with |Y| > "
                    "K the AllToAll attention splits sequences over ranks, which the verify "
                    "step's rows per sequence do not fit; add --kv-replicate");
        return NULL;
    }
    if (ckpt_load_params(gen_model(g), gen_par(g), m, path, err, errlen) < 0) {
        gen_destroy(g);
        return NULL;
    }
    return g;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0..n) (sorted in place), 0 for none. */
static double median(double *t, int64_t n) {
    if (n <= 0) return 0;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[(n - 1) / 2];
}

/* Collective over: world. The counts summed over the replicas (the tensor axis's first rank of
 * each contributes). */
static spec_counts counts_total(mesh *m, gen *g, const spec_counts *c) {
    const int lead = model_extents_of(gen_model(g))->n0 == 0;
    float in[3] = {lead ? (float)c->drafted : 0, lead ? (float)c->accepted : 0,
                   lead ? (float)c->rejected : 0},
          out[3];
    mesh_all_reduce(m, mesh_all_axes(m), out, in, 3, MESH_ALG_MPI);
    return (spec_counts){(int64_t)out[0], (int64_t)out[1], (int64_t)out[2]};
}

/* Where a round's time goes, per round (ms): the drafter's steps (how many a round) and its
 * token picks, the verify step, the acceptance rule with the caches' rollback, and the rest of
 * the loop; then the rounds' share of the decode's wall time. */
static void report_phases(const spec_run *r, double wall) {
    const double n = r->rounds > 0 ? (double)r->rounds : 1.0;
    const double other = r->loop_sec - r->draft_sum.seconds - r->pick_sec -
                         r->verify_sum.seconds - r->rule_sec;
    fprintf(stderr,
            "speculative phases | per round: %.3f drafter steps %.4f ms, drafter picks %.4f "
            "ms, verify step %.4f ms, acceptance %.4f ms, other %.4f ms | rounds %.3f ms of the "
            "decode's %.3f ms\n",
            (double)r->draft_steps / n, 1e3 * r->draft_sum.seconds / n, 1e3 * r->pick_sec / n,
            1e3 * r->verify_sum.seconds / n, 1e3 * r->rule_sec / n, 1e3 * other / n,
            1e3 * r->loop_sec, 1e3 * wall);
}

static void report_spec(const spec_run *r, const spec_counts *all, int64_t B, int64_t n, int k,
                        double wall, int quiet) {
    double *ds = malloc((size_t)(r->draft_steps + 1) * sizeof *ds),
           *vs = malloc((size_t)(r->rounds + 1) * sizeof *vs);
    CHECK(ds && vs, "generate: out of memory");
    memcpy(ds, r->draft_s, (size_t)r->draft_steps * sizeof *ds);
    memcpy(vs, r->verify_s, (size_t)r->rounds * sizeof *vs);
    const double td = median(ds, r->draft_steps), tv = median(vs, r->rounds);
    const double alpha = spec_alpha(all), c = tv > 0 ? td / tv : 0;
    const double per_step = r->seq_steps ? (double)r->tokens / (double)r->seq_steps : 0;
    const double rows = r->rounds ? r->verify_sum.rows / (double)r->rounds : 0;
    if (!quiet)
        for (int64_t b = 0; b < (int64_t)(r->seq ? B : 0); b++)
            fprintf(stderr,
                    "speculative | sequence %lld | drafted %lld, kept %lld, rejected %lld "
                    "| alpha %.3f\n",
                    (long long)b, (long long)r->seq[b].drafted, (long long)r->seq[b].accepted,
                    (long long)r->seq[b].rejected, spec_alpha(&r->seq[b]));
    fprintf(stderr,
            "draft summary | %lld drafter steps | median %.3f ms, min %.3f, mean %.3f | %lld "
            "verify steps of %.1f rows | median %.3f ms, min %.3f, mean %.3f\n",
            (long long)r->draft_steps, 1e3 * td, r->draft_steps ? 1e3 * ds[0] : 0.0,
            r->draft_steps ? 1e3 * r->draft_sum.seconds / (double)r->draft_steps : 0.0,
            (long long)r->rounds, rows, 1e3 * tv, r->rounds ? 1e3 * vs[0] : 0.0,
            r->rounds ? 1e3 * r->verify_sum.seconds / (double)r->rounds : 0.0);
    fprintf(stderr,
            "speculative summary | k %d | drafted %lld, kept %lld, rejected %lld | alpha %.3f | "
            "tokens per target step %.3f (formula (1-a^(k+1))/(1-a) %.3f) | decode "
            "%.3f ms for %lld tokens a sequence, %.3f ms/token | c = drafter/verify step %.3f -> "
            "predicted speed-up %.2fx over a plain step as long as the verify step\n",
            k, (long long)all->drafted, (long long)all->accepted, (long long)all->rejected, alpha,
            per_step, cost_spec_tokens(alpha, k), 1e3 * wall, (long long)(n - 1),
            n > 1 ? 1e3 * wall / (double)(n - 1) : 0.0, c, cost_spec_speedup(alpha, k, c, 1.0));
    free(ds), free(vs);
    report_phases(r, wall);
}

void draft_tokens(const config *c, mesh *m, gen *tg, gen *dg, const prompt_set *ps, int64_t n,
                  int k, int32_t *mine) {
    int64_t row0, nb;
    gen_rows(tg, &row0, &nb);
    int32_t *first = calloc((size_t)nb + 1, sizeof *first),
            *dfirst = calloc((size_t)nb + 1, sizeof *dfirst);
    CHECK(first && dfirst, "generate: out of memory");
    gen_step st, dst;
    gen_prefill(tg, ps, first, &st);
    gen_prefill(dg, ps, dfirst, &dst);
    const gen_step t = gen_step_total(m, &st);
    if (mesh_rank(m) == 0)
        fprintf(stderr,
                "prefill | %lld seqs, %.0f tokens | TTFT %.2f ms (target) + %.2f ms (drafter)\n",
                (long long)ps->n, t.rows, 1e3 * st.seconds, 1e3 * dst.seconds);
    spec_run r;
    const double t0 = mesh_now();
    spec_generate(tg, dg, ps, n, k, c->temperature, c->top_k, c->seed, first, mine, &r);
    const double wall = mesh_now() - t0;
    const spec_counts all = counts_total(m, tg, &r.all);
    if (mesh_rank(m) == 0) report_spec(&r, &all, nb, n, k, wall, c->quiet);
    spec_run_free(&r);
    free(first), free(dfirst);
}
