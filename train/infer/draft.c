/* draft: speculative decoding in generate (see draft.h). */
#include "train/infer/draft.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/mesh.h"
#include "train/infer/spec_rule.h"
#include "train/model/model.h"

double spec_alpha(const spec_counts *c) {
    const int64_t judged = c->accepted + c->rejected;
    return judged > 0 ? (double)c->accepted / (double)judged : 0.0;
}

void spec_run_free(spec_run *r) {
    free(r->seq), free(r->draft_s), free(r->verify_s);
    memset(r, 0, sizeof *r);
}

/* One replica's state across rounds. */
typedef struct {
    gen *tg, *dg;
    const prompt_set *ps;
    int64_t nb, row0, n, V;
    int k;
    double temperature;
    int64_t top_k;
    uint64_t seed;
    int32_t *out;        /* [nb, n] */
    int64_t *ngen;       /* tokens produced per sequence */
    int32_t *kb;         /* drafts of this round per sequence; −1: done */
    int32_t *rows, *tok; /* one forward: rows per sequence, their tokens */
    int32_t *d;          /* drafted tokens [nb, k] */
    double *q;           /* the drafter's distributions [nb, k, V] (sampling only) */
    double *work;        /* 2·V */
    sample_item *scratch;
} spec_ctx;

/* The token at position x of local sequence b: the prompt's, then the generated ones. */
static int32_t token_at(const spec_ctx *c, int64_t b, int64_t x) {
    const int64_t plen = c->ps->len[c->row0 + b];
    return x < plen ? c->ps->tok[c->row0 + b][x] : c->out[b * c->n + (x - plen)];
}

/* Position of sequence b's latest token (not yet in either cache). */
static int64_t last_pos(const spec_ctx *c, int64_t b) {
    return c->ps->len[c->row0 + b] + c->ngen[b] - 1;
}

/* The RNG key of sequence b's next token (generate's layout: global index << 32 | token index). */
static uint64_t key_of(const spec_ctx *c, int64_t b) {
    return ((uint64_t)(c->row0 + b) << 32) | (uint64_t)c->ngen[b];
}

static void record(double *times, int64_t *count, gen_step *sum, const gen_step *st) {
    times[(*count)++] = st->seconds;
    sum->seconds += st->seconds, sum->rows += st->rows, sum->p_bytes += st->p_bytes;
    sum->kv_bytes += st->kv_bytes, sum->flops += st->flops;
}

/* The drafter's k_b tokens of every sequence: its first step catches up on the tokens it has not
 * seen (the latest, and d_k after a round that kept all k), the others feed its own drafts. */
static void draft_phase(spec_ctx *c, spec_run *r) {
    int32_t kmax = 0;
    for (int64_t b = 0; b < c->nb; b++) kmax = c->kb[b] > kmax ? c->kb[b] : kmax;
    for (int32_t j = 0; j < kmax; j++) {
        int64_t R = 0;
        for (int64_t b = 0; b < c->nb; b++) {
            c->rows[b] = 0;
            if (c->kb[b] <= j) continue;
            if (j == 0) {
                const int64_t p = last_pos(c, b), dpos = gen_pos(c->dg, b);
                CHECK(dpos <= p && dpos >= p - 1,
                      "draft: the drafter is at %lld, the token at %lld", (long long)dpos,
                      (long long)p);
                for (int64_t x = dpos; x <= p; x++) c->tok[R++] = token_at(c, b, x);
                c->rows[b] = (int32_t)(p - dpos + 1);
            } else {
                c->tok[R++] = c->d[b * c->k + j - 1];
                c->rows[b] = 1;
            }
        }
        gen_step st;
        gen_extend(c->dg, c->rows, c->tok, &st);
        record(r->draft_s, &r->draft_steps, &r->draft_sum, &st);
        const double t0 = mesh_now();
        const float *lg = gen_logits(c->dg);
        for (int64_t b = 0, r0 = 0; b < c->nb; r0 += c->rows[b++]) {
            if (!c->rows[b]) continue;
            const int64_t last = r0 + c->rows[b] - 1, at = b * c->k + j;
            c->d[at] =
                spec_draft_pick(c->q ? c->q + at * c->V : NULL, lg + last * c->V, c->V,
                                c->temperature, c->top_k, c->seed, key_of(c, b), j, c->scratch);
            gen_set_pos(c->dg, b, gen_pos(c->dg, b) + c->rows[b]);
        }
        r->pick_sec += mesh_now() - t0;
    }
}

/* The target scores [latest, d_1..d_kb] of every sequence in one forward; the rule keeps a prefix
 * and adds a token; both caches roll back to what was kept. */
static void verify_phase(spec_ctx *c, spec_run *r) {
    int64_t R = 0;
    for (int64_t b = 0; b < c->nb; b++) {
        c->rows[b] = 0;
        if (c->kb[b] < 0) continue;
        CHECK(gen_pos(c->tg, b) == last_pos(c, b),
              "draft: the target is at %lld, the token at %lld", (long long)gen_pos(c->tg, b),
              (long long)last_pos(c, b));
        c->tok[R++] = c->out[b * c->n + c->ngen[b] - 1];
        for (int32_t i = 0; i < c->kb[b]; i++) c->tok[R++] = c->d[b * c->k + i];
        c->rows[b] = c->kb[b] + 1;
    }
    gen_step st;
    gen_extend(c->tg, c->rows, c->tok, &st);
    record(r->verify_s, &r->rounds, &r->verify_sum, &st);
    const double t0 = mesh_now();
    const float *lg = gen_logits(c->tg);
    for (int64_t b = 0, r0 = 0; b < c->nb; r0 += c->rows[b++]) {
        if (c->kb[b] < 0) continue;
        const int32_t kb = c->kb[b];
        const spec_verdict v =
            spec_verify(lg + r0 * c->V, c->q ? c->q + b * c->k * c->V : NULL, c->d + b * c->k, kb,
                        c->V, c->temperature, c->top_k, c->seed, key_of(c, b), c->work, c->scratch);
        const int64_t p = last_pos(c, b);
        for (int32_t i = 0; i < v.accepted; i++)
            c->out[b * c->n + c->ngen[b] + i] = c->d[b * c->k + i];
        c->out[b * c->n + c->ngen[b] + v.accepted] = v.next;
        c->ngen[b] += v.accepted + 1;
        gen_set_pos(c->tg, b, p + v.accepted + 1);
        if (kb > 0) gen_set_pos(c->dg, b, v.accepted < kb ? p + v.accepted + 1 : p + kb);
        spec_counts *sc = &r->seq[b];
        sc->drafted += kb, sc->accepted += v.accepted, sc->rejected += v.accepted < kb;
        r->all.drafted += kb, r->all.accepted += v.accepted, r->all.rejected += v.accepted < kb;
        r->tokens += v.accepted + 1;
        r->seq_steps++;
    }
    r->rule_sec += mesh_now() - t0;
}

void spec_generate(gen *tg, gen *dg, const prompt_set *ps, int64_t n, int k, double temperature,
                   int64_t top_k, uint64_t seed, const int32_t *first, int32_t *out, spec_run *r) {
    spec_ctx c = {.tg = tg,
                  .dg = dg,
                  .ps = ps,
                  .n = n,
                  .k = k,
                  .temperature = temperature,
                  .top_k = top_k,
                  .seed = seed,
                  .out = out};
    gen_rows(tg, &c.row0, &c.nb);
    c.V = model_shape_of(gen_model(tg))->V;
    memset(r, 0, sizeof *r);
    const int64_t nb = c.nb > 0 ? c.nb : 1, maxr = nb * (k + 2);
    r->seq = calloc((size_t)nb, sizeof *r->seq);
    r->draft_s = calloc((size_t)(n * k + 1), sizeof *r->draft_s);
    r->verify_s = calloc((size_t)(n + 1), sizeof *r->verify_s);
    c.ngen = calloc((size_t)nb, sizeof *c.ngen);
    c.kb = calloc((size_t)nb, sizeof *c.kb);
    c.rows = calloc((size_t)nb, sizeof *c.rows);
    c.tok = calloc((size_t)maxr, sizeof *c.tok);
    c.d = calloc((size_t)(nb * k), sizeof *c.d);
    c.q = temperature > 0 ? calloc((size_t)(nb * k * c.V), sizeof *c.q) : NULL;
    c.work = calloc((size_t)(2 * c.V), sizeof *c.work);
    c.scratch = calloc((size_t)c.V, sizeof *c.scratch);
    CHECK(r->seq && r->draft_s && r->verify_s && c.ngen && c.kb && c.rows && c.tok && c.d &&
              (c.q || temperature <= 0) && c.work && c.scratch,
          "speculative decoding: out of memory");
    for (int64_t b = 0; b < c.nb; b++) {
        out[b * n] = first[b];
        c.ngen[b] = 1;
    }
    const double t0 = mesh_now();
    for (;;) {
        int active = 0;
        for (int64_t b = 0; b < c.nb; b++) {
            const int64_t left = n - c.ngen[b];
            c.kb[b] = left <= 0 ? -1 : (int32_t)(left - 1 < k ? left - 1 : k);
            active |= left > 0;
        }
        if (!active) break;
        draft_phase(&c, r);
        verify_phase(&c, r);
    }
    r->loop_sec = mesh_now() - t0;
    free(c.ngen), free(c.kb), free(c.rows), free(c.tok), free(c.d), free(c.q), free(c.work),
        free(c.scratch);
}
