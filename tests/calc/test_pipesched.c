/* test_pipesched: pipeline tables (calc/schedule.[ch]) against closed forms. With unit costs
 * (F = I = W = 1 per chunk, B = 2) and no p2p time, the simulated makespan, bubble and peak
 * activations per rank EQUAL (==, not within a tolerance) these formulas, for every p ≤ 8,
 * m ≤ 17 and v ≤ 4 the schedule accepts, and the refusals are exactly the rules below:
 *
 *   gpipe        makespan 3(m+p−1)        bubble (p−1)/(m+p−1)      peak_r = m
 *   1f1b         makespan 3(m+p−1)        bubble (p−1)/(m+p−1)      peak_r = min(p−r, m)
 *   interleaved  makespan 3(v·m+p−1)      bubble (p−1)/(v·m+p−1)    peak_r = min((v−1)p + 2(p−1−r)
 *                (Narayanan et al. 2021: bubble time (p−1)(F+B)/v)             + 1, v·m) chunks
 *   zb-h1        makespan 3m + (p−1) + max(0, p−m)                   peak_r = min(p, m)
 *                m ≥ p: bubble (p−1)/(3m+p−1), the paper's (p−1)(T_F+T_B−T_W) bubble time
 *                with T_F = T_B = T_W = 1 (its B is our I, the input gradient)
 *   zb-v         makespan 6m + max(p−1, 4p−2m−2)                     peak_r = min(m+r+1, 2m, 2p)
 *                m ≥ 3p/2: idle p−1 = (p−1)·T_F of a chunk, the least possible (rank p−1 cannot
 *                start before micro-batch 0 has crossed p−1 chunks)
 * Refusals: v > 1 without a pipeline (p = 1); v ≠ 1 for gpipe, 1f1b, zb-h1; v < 2 for
 * interleaved; v ≠ 2 for zb-v; m not a multiple of p for interleaved; layers not divisible by p·v.
 * Beyond unit costs: gpipe, 1f1b and interleaved keep (v·m+p−1)(F+B) for any F, B; zb-h1 (m ≥ p)
 * idles (p−1)·max(F+I−W, F, I) per rank, the paper's (p−1)(F+I−W) when W ≤ min(F, I); gpipe with
 * per-stage costs f_s, b_s and a p2p time c ≤ every cost takes Σf + (m−1)·max f + Σb +
 * (m−1)·max b + 2(p−1)·c (a flow shop). Every simulated run is checked against the dependencies
 * independently (its action times), and broken tables are refused or found deadlocked.
 * Ranks sharing CPUs (sched_simulate_shared): on one CPU with free messages the makespan is the
 * whole work, 3·p·v·m in unit costs, for every schedule; 1f1b p = 2, m = 2 by hand: 9 on 2 CPUs,
 * 10 on 1.5 (each rank busy 7 of it), 12 on 1 (busy 9); with per-stage costs and p2p on p − 1 CPUs the
 * dependencies hold and the makespan lies between the dedicated one and p/(p−1) times it. */
#include "check.h"
#include "calc/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int imin(int a, int b) {
    return a < b ? a : b;
}
static int imax(int a, int b) {
    return a > b ? a : b;
}

/* The rules, written out independently of sched_check: 1 if the schedule accepts (p, v, m). */
static int accepts(sched_kind k, int p, int v, int m) {
    if (v > 1 && p == 1) return 0;
    switch (k) {
    case SCHED_INTERLEAVED:
        return v >= 2 && m % p == 0;
    case SCHED_ZB_V:
        return v == 2;
    default:
        return v == 1;
    }
}

static double want_makespan(sched_kind k, int p, int v, int m) {
    switch (k) {
    case SCHED_GPIPE:
    case SCHED_1F1B:
        return 3.0 * (m + p - 1);
    case SCHED_INTERLEAVED:
        return 3.0 * (v * m + p - 1);
    case SCHED_ZB_H1:
        return 3.0 * m + (p - 1) + imax(0, p - m);
    default:
        return 6.0 * m + imax(p - 1, 4 * p - 2 * m - 2);
    }
}

static int want_peak(sched_kind k, int p, int v, int m, int r) {
    switch (k) {
    case SCHED_GPIPE:
        return m;
    case SCHED_1F1B:
        return imin(p - r, m);
    case SCHED_INTERLEAVED:
        return imin((v - 1) * p + 2 * (p - 1 - r) + 1, v * m);
    case SCHED_ZB_H1:
        return imin(p, m);
    default:
        return imin(imin(m + r + 1, 2 * m), 2 * p);
    }
}

/* The published bubble fractions where they apply; −1 elsewhere. */
static double want_bubble(sched_kind k, int p, int v, int m) {
    switch (k) {
    case SCHED_GPIPE:
    case SCHED_1F1B:
        return (double)(p - 1) / (m + p - 1);
    case SCHED_INTERLEAVED:
        return (double)(p - 1) / (v * m + p - 1);
    case SCHED_ZB_H1:
        return m >= p ? (double)(p - 1) / (3 * m + p - 1) : -1;
    default:
        return 2 * m >= 3 * p ? (double)(p - 1) / (6 * m + p - 1) : -1;
    }
}

/* Where each (stage, micro-batch)'s compute and messages sit: index into t->act, −1 if none. */
typedef struct {
    int64_t *at[SCHED_N_OPS];
    int m;
} where;

static void where_init(where *w, const sched_table *t) {
    const size_t n = (size_t)t->stages * t->spec.m;
    w->m = t->spec.m;
    for (int o = 0; o < SCHED_N_OPS; o++) {
        w->at[o] = malloc(n * sizeof(int64_t));
        for (size_t k = 0; k < n; k++) w->at[o][k] = -1;
    }
    for (int64_t k = 0; k < t->off[t->spec.p]; k++) {
        const sched_action *a = &t->act[k];
        w->at[a->op][(size_t)a->stage * w->m + a->mb] = k;
    }
}

static void where_free(where *w) {
    for (int o = 0; o < SCHED_N_OPS; o++) free(w->at[o]);
}

static int64_t W_(const where *w, int op, int s, int j) {
    return w->at[op][(size_t)s * w->m + j];
}

/* The simulated times respect every dependency, with the p2p time c across ranks, and no rank
 * runs two computes at once; each (s, j) has one F and one B or one I and one W. Counts
 * violations. */
static int deps_violated(const sched_table *t, const sched_result *r, double c) {
    where w;
    where_init(&w, t);
    const int S = t->stages, m = t->spec.m, bwd = t->split ? SCHED_I : SCHED_B;
    int bad = 0;
    for (int s = 0; s < S; s++)
        for (int j = 0; j < m; j++) {
            const int64_t f = W_(&w, SCHED_F, s, j), b = W_(&w, bwd, s, j);
            const int64_t x = W_(&w, SCHED_W, s, j), whole = W_(&w, SCHED_B, s, j);
            bad += f < 0 || b < 0 || (t->split ? x < 0 || whole >= 0 : x >= 0);
            if (f < 0 || b < 0) continue;
            bad += r->start[b] < r->end[f];
            if (t->split && x >= 0) bad += r->start[x] < r->end[b];
            if (s > 0) {
                const double lag = t->stage_rank[s - 1] != t->stage_rank[s] ? c : 0;
                bad += r->start[f] < r->end[W_(&w, SCHED_F, s - 1, j)] + lag;
            }
            if (s < S - 1) {
                const double lag = t->stage_rank[s + 1] != t->stage_rank[s] ? c : 0;
                bad += r->start[b] < r->end[W_(&w, bwd, s + 1, j)] + lag;
            }
        }
    for (int q = 0; q < t->spec.p; q++) {
        double last = 0;
        for (int64_t k = t->off[q]; k < t->off[q + 1]; k++) {
            if (t->act[k].op > SCHED_W) continue;
            bad += r->start[k] < last;
            last = r->end[k];
        }
    }
    where_free(&w);
    return bad;
}

/* Builds (kind, p, v, m); NULL-free t on refusal with err. */
static int build(sched_table *t, sched_kind k, int p, int v, int m, char *err, size_t len) {
    const sched_spec s = {k, p, v, m, 0};
    return sched_init(t, &s, err, len);
}

/* One grid point: refusal as the rules say, else the unit-cost closed forms exactly. */
static int grid_point(sched_kind k, int p, int v, int m, int *built) {
    sched_table t;
    char err[512];
    const int vv = v ? v : (k == SCHED_INTERLEAVED || k == SCHED_ZB_V ? 2 : 1);
    const int ok = build(&t, k, p, v, m, err, sizeof err) == 0;
    if (ok != accepts(k, p, vv, m)) {
        printf("FAIL %s p=%d v=%d m=%d: %s (%s)\n", sched_kind_name(k), p, v, m,
               ok ? "built" : "refused", ok ? "should refuse" : err);
        if (ok) sched_free(&t);
        return 1;
    }
    if (!ok) return 0;
    (*built)++;
    const sched_costs unit = sched_unit_costs();
    sched_result r;
    if (sched_simulate(&t, &unit, &r, err, sizeof err) < 0) {
        printf("FAIL %s p=%d v=%d m=%d: %s\n", sched_kind_name(k), p, vv, m, err);
        sched_free(&t);
        return 1;
    }
    int bad = r.makespan != want_makespan(k, p, vv, m);
    const double wb = want_bubble(k, p, vv, m);
    const double idle = want_makespan(k, p, vv, m) - 3.0 * vv * m;
    bad += r.bubble != idle / want_makespan(k, p, vv, m) || (wb >= 0 && r.bubble != wb);
    for (int q = 0; q < p; q++) bad += r.peak[q] != want_peak(k, p, vv, m, q);
    bad += deps_violated(&t, &r, 0);
    if (bad)
        printf("FAIL %s p=%d v=%d m=%d: makespan %g (want %g), bubble %.17g (want %.17g), peak[0] "
               "%d (want %d)\n",
               sched_kind_name(k), p, vv, m, r.makespan, want_makespan(k, p, vv, m), r.bubble, wb,
               r.peak[0], want_peak(k, p, vv, m, 0));
    sched_result_free(&r);
    sched_free(&t);
    return bad != 0;
}

static void test_grid(void) {
    static const int ps[] = {1, 2, 3, 4, 5, 6, 8};
    for (int k = 0; k < SCHED_N_KINDS; k++) {
        int points = 0, built = 0, fails = 0;
        for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
            for (int v = 0; v <= 4; v++)
                for (int m = 1; m <= 17; m++, points++)
                    fails += grid_point((sched_kind)k, ps[a], v, m, &built);
        char what[160];
        snprintf(what, sizeof what,
                 "%s: %d grid points (%d built), unit-cost closed forms exact, refusals as the "
                 "rules",
                 sched_kind_name((sched_kind)k), points, built);
        check_true(what, fails == 0 && built > 0);
    }
}

/* Megatron's activation memory of interleaving (Korthikanti et al. 2022): rank 0 holds
 * p·(1 + (p−1)/(p·v)) micro-batches' worth of its layers' activations, a chunk being 1/v of them.
 */
static void test_interleaved_memory(void) {
    char err[512];
    for (int v = 2; v <= 4; v += 2) {
        sched_table t;
        build(&t, SCHED_INTERLEAVED, 4, v, 8, err, sizeof err);
        const sched_costs unit = sched_unit_costs();
        sched_result r;
        sched_simulate(&t, &unit, &r, err, sizeof err);
        char what[128];
        snprintf(what, sizeof what,
                 "interleaved p=4 v=%d m=8: rank 0 holds p(1+(p-1)/(p v)) "
                 "micro-batches of activations",
                 v);
        check_near(what, (double)r.peak[0] / v, 4 * (1 + 3.0 / (4 * v)), 0);
        sched_result_free(&r);
        sched_free(&t);
    }
}

/* Non-unit uniform costs: (v·m+p−1)(F+B) for gpipe, 1f1b, interleaved; zb-h1's idle. */
static void test_costs(void) {
    static const double fb[][2] = {{1, 1}, {2, 1}, {1, 3}, {0.5, 1.25}};
    int bad = 0, n = 0;
    char err[512];
    for (int k = SCHED_GPIPE; k <= SCHED_INTERLEAVED; k++)
        for (int p = 2; p <= 5; p++)
            for (int m = p; m <= 3 * p; m += p)
                for (size_t c = 0; c < 4; c++) {
                    sched_table t;
                    build(&t, (sched_kind)k, p, 0, m, err, sizeof err);
                    const sched_costs cost = {fb[c][0], fb[c][1], 0, 0, 0, NULL, NULL, NULL, NULL};
                    sched_result r;
                    sched_simulate(&t, &cost, &r, err, sizeof err);
                    const int v = t.spec.v;
                    bad += r.makespan != (v * m + p - 1) * (fb[c][0] + fb[c][1]);
                    bad += deps_violated(&t, &r, 0);
                    n++;
                    sched_result_free(&r);
                    sched_free(&t);
                }
    char what[128];
    snprintf(what, sizeof what, "gpipe, 1f1b, interleaved: makespan (v*m+p-1)(F+B) for %d (F, B)",
             n);
    check_true(what, bad == 0);
    bad = n = 0;
    for (int F = 1; F <= 3; F++)
        for (int I = 1; I <= 3; I++)
            for (int Wc = 1; Wc <= 3; Wc++)
                for (int p = 2; p <= 6; p++)
                    for (int m = p; m <= 2 * p + 1; m++) {
                        sched_table t;
                        build(&t, SCHED_ZB_H1, p, 1, m, err, sizeof err);
                        const sched_costs cost = {F, F + I + Wc, I, Wc, 0, NULL, NULL, NULL, NULL};
                        sched_result r;
                        sched_simulate(&t, &cost, &r, err, sizeof err);
                        const int per = imax(F + I - Wc, imax(F, I));
                        bad += r.makespan - m * (F + I + Wc) != (p - 1) * per;
                        bad += Wc <= imin(F, I) &&
                               r.makespan - m * (F + I + Wc) != (p - 1) * (F + I - Wc);
                        n++;
                        sched_result_free(&r);
                        sched_free(&t);
                    }
    snprintf(what, sizeof what,
             "zb-h1 (m >= p): idle (p-1)*max(F+I-W, F, I) per rank, the paper's (p-1)(F+I-W) "
             "when W <= min(F, I); %d cases",
             n);
    check_true(what, bad == 0);
}

/* GPipe as a flow shop: per-stage costs and a p2p time no larger than any cost. */
static void test_measured(void) {
    int bad = 0, n = 0;
    char err[512];
    unsigned seed = 12345;
    for (int p = 2; p <= 6; p++)
        for (int m = 1; m <= 9; m += 4) {
            double f[6], b[6], sf = 0, sb = 0, mf = 0, mb = 0, cmin = 1e9;
            for (int s = 0; s < p; s++) {
                seed = seed * 1103515245u + 12345u;
                f[s] = 1 + (seed >> 16) % 5;
                seed = seed * 1103515245u + 12345u;
                b[s] = 1 + (seed >> 16) % 7;
                sf += f[s], sb += b[s];
                mf = f[s] > mf ? f[s] : mf, mb = b[s] > mb ? b[s] : mb;
                cmin = f[s] < cmin ? f[s] : cmin, cmin = b[s] < cmin ? b[s] : cmin;
            }
            sched_table t;
            build(&t, SCHED_GPIPE, p, 1, m, err, sizeof err);
            const double c = cmin / 2;
            const sched_costs cost = {0, 0, 0, 0, c, f, b, NULL, NULL};
            sched_result r;
            sched_simulate(&t, &cost, &r, err, sizeof err);
            const double want = sf + (m - 1) * mf + sb + (m - 1) * mb + 2 * (p - 1) * c;
            if (r.makespan != want || deps_violated(&t, &r, c)) {
                bad++;
                printf("  gpipe p=%d m=%d: makespan %g, flow shop %g\n", p, m, r.makespan, want);
            }
            n++;
            sched_result_free(&r);
            sched_free(&t);
        }
    check_true("gpipe with per-stage costs and p2p c: sum f + (m-1) max f + sum b + (m-1) max b "
               "+ 2(p-1)c",
               bad == 0);
    /* Every schedule with p2p > 0 and per-stage costs still respects its dependencies. */
    bad = 0;
    for (int k = 0; k < SCHED_N_KINDS; k++) {
        sched_table t;
        build(&t, (sched_kind)k, 4, 0, 8, err, sizeof err);
        double f[8], b[8], i[8], w[8];
        for (int s = 0; s < t.stages; s++)
            f[s] = 1 + s % 3, i[s] = 1 + s % 2, w[s] = 0.5, b[s] = i[s] + w[s];
        const sched_costs cost = {0, 0, 0, 0, 0.3, f, b, i, w};
        sched_result r;
        sched_simulate(&t, &cost, &r, err, sizeof err);
        bad += deps_violated(&t, &r, 0.3);
        sched_result_free(&r);
        sched_free(&t);
    }
    check_true("every schedule, p = 4, m = 8, per-stage costs, p2p 0.3: dependencies hold",
               bad == 0);
}

/* Layers: 24 layers split into p·v chunks. */
static void test_refusals(void) {
    char err[512];
    sched_table t;
    struct {
        sched_spec s;
        const char *want;
    } cases[] = {
        {{SCHED_1F1B, 1, 2, 4, 0}, "needs a pipeline axis"},
        {{SCHED_INTERLEAVED, 1, 2, 4, 0}, "needs a pipeline axis"},
        {{SCHED_GPIPE, 4, 2, 8, 0}, "runs one stage per rank"},
        {{SCHED_ZB_H1, 4, 3, 8, 0}, "runs one stage per rank"},
        {{SCHED_INTERLEAVED, 4, 1, 8, 0}, "needs --virtual-stages >= 2"},
        {{SCHED_INTERLEAVED, 4, 2, 6, 0}, "--microbatches 6 is not a multiple of 4; use 4 or 8 "},
        {{SCHED_INTERLEAVED, 4, 2, 3, 0}, "--microbatches 3 is not a multiple of 4; use 4 "},
        {{SCHED_ZB_V, 4, 3, 8, 0}, "exactly 2 stages per rank"},
        {{SCHED_1F1B, 5, 1, 8, 24}, "24 layers do not divide into 5 pipeline ranks x 1"},
        {{SCHED_INTERLEAVED, 4, 4, 8, 24},
         "24 layers do not divide into 4 pipeline ranks x 4 virtual stages = 16"},
        {{SCHED_1F1B, 4, 1, 0, 0}, "m >= 1 micro-batches"},
        {{SCHED_1F1B, 64, 1, 8192, 0}, "more than the 262144 (stage, micro-batch) pairs"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        err[0] = '\0';
        const int rc = sched_init(&t, &cases[c].s, err, sizeof err);
        char what[200];
        snprintf(what, sizeof what, "refuses %s p=%d v=%d m=%d L=%lld: \"%s\"",
                 sched_kind_name(cases[c].s.kind), cases[c].s.p, cases[c].s.v, cases[c].s.m,
                 (long long)cases[c].s.layers, err);
        check_true(what, rc < 0 && strstr(err, cases[c].want) != NULL);
    }
    const sched_spec fine = {SCHED_INTERLEAVED, 4, 3, 8, 24};
    check_true("interleaved p=4 v=3 over 24 layers (12 chunks of 2) is built",
               sched_init(&t, &fine, err, sizeof err) == 0);
    sched_free(&t);
}

/* ------------------------------------------------------------------ broken tables */

/* Copies a table so that one rank's list can be edited. */
static void clone(sched_table *d, const sched_table *s) {
    *d = *s;
    const int p = s->spec.p;
    d->stage_rank = malloc(sizeof(int) * (size_t)s->stages);
    d->off = malloc(sizeof(int64_t) * (size_t)(p + 1));
    d->act = malloc(sizeof(sched_action) * (size_t)(s->off[p] + 1));
    memcpy(d->stage_rank, s->stage_rank, sizeof(int) * (size_t)s->stages);
    memcpy(d->off, s->off, sizeof(int64_t) * (size_t)(p + 1));
    memcpy(d->act, s->act, sizeof(sched_action) * (size_t)s->off[p]);
}

static int64_t find(const sched_table *t, int op, int s, int j) {
    for (int64_t k = 0; k < t->off[t->spec.p]; k++)
        if (t->act[k].op == op && t->act[k].stage == s && t->act[k].mb == j) return k;
    return -1;
}

/* Moves action k to position to (within its rank), shifting the others. */
static void move(sched_table *t, int64_t k, int64_t to) {
    const sched_action a = t->act[k];
    if (to < k)
        memmove(&t->act[to + 1], &t->act[to], sizeof a * (size_t)(k - to));
    else
        memmove(&t->act[k], &t->act[k + 1], sizeof a * (size_t)(to - k));
    t->act[to] = a;
}

/* Removes action k of rank r, or inserts a at position k of rank r (room for one: clone). */
static void drop(sched_table *t, int r, int64_t k) {
    const int64_t n = t->off[t->spec.p];
    memmove(&t->act[k], &t->act[k + 1], sizeof *t->act * (size_t)(n - k - 1));
    for (int q = r + 1; q <= t->spec.p; q++) t->off[q]--;
}

static void insert(sched_table *t, int r, int64_t k, sched_action a) {
    const int64_t n = t->off[t->spec.p];
    memmove(&t->act[k + 1], &t->act[k], sizeof a * (size_t)(n - k));
    t->act[k] = a;
    for (int q = r + 1; q <= t->spec.p; q++) t->off[q]++;
}

static void expect_fault(const char *what, sched_table *t, const char *want) {
    char err[512] = "", line[700];
    sched_result r;
    const sched_costs unit = sched_unit_costs();
    const int rc = sched_simulate(t, &unit, &r, err, sizeof err);
    snprintf(line, sizeof line, "%s: \"%s\"", what, err);
    check_true(line, rc < 0 && strstr(err, want) != NULL);
    if (rc == 0) sched_result_free(&r);
    sched_free(t);
}

/* The table that the next broken copies come from: k on p ranks, v stages a rank, m micro-batches
 * (the previous one freed, when there is one). */
static void next_base(sched_table *base, int first, sched_kind k, int p, int v, int m) {
    char err[512];
    if (!first) sched_free(base);
    check_true("the base table builds", build(base, k, p, v, m, err, sizeof err) == 0);
}

static void test_broken(void) {
    sched_table base, t;
    next_base(&base, 1, SCHED_1F1B, 3, 1, 4);
    /* rank 0 waits for micro-batch 0's gradient before sending its activation: a cycle */
    clone(&t, &base);
    move(&t, find(&t, SCHED_RECV_B, 0, 0), t.off[0]);
    expect_fault("deadlock: rank 0 receives 0's gradient before its first forward", &t,
                 "deadlock: rank 0 waits at 0RECV_B0 for rank 1's 1SEND_B0; rank 1 waits at "
                 "1RECV_F0 for rank 0's 0SEND_F0");
    clone(&t, &base);
    move(&t, find(&t, SCHED_B, 2, 0), find(&t, SCHED_RECV_F, 2, 0));
    expect_fault("a backward before its forward", &t, "2F0 comes after 2B0");
    clone(&t, &base);
    t.act[find(&t, SCHED_F, 2, 3)].mb = 2;
    expect_fault("a forward run twice, another missing", &t, "rank 2 runs 2F2 twice");
    clone(&t, &base);
    drop(&t, 1, find(&t, SCHED_SEND_F, 1, 0));
    expect_fault("a send left out", &t, "1SEND_F0 is missing");
    clone(&t, &base);
    t.act[find(&t, SCHED_F, 0, 0)].stage = 1;
    expect_fault("an action on the wrong rank", &t, "rank 0 runs 1F0, but stage 1 is on rank 1");
    clone(&t, &base);
    t.act[find(&t, SCHED_RECV_F, 2, 2)].op = SCHED_SEND_F;
    expect_fault("a send past the last stage", &t, "2SEND_F2 should not be there");
    next_base(&base, 0, SCHED_GPIPE, 1, 1, 3);
    clone(&t, &base);
    move(&t, find(&t, SCHED_B, 0, 0), find(&t, SCHED_B, 0, 1));
    expect_fault("weight gradients out of micro-batch order", &t,
                 "0B0 comes after 0B1: the weight gradients of a stage accumulate in "
                 "micro-batch order");
    /* A whole-backward table with an I in it; a split table with a B in it. */
    next_base(&base, 0, SCHED_ZB_H1, 2, 1, 2);
    clone(&t, &base);
    t.act[find(&t, SCHED_W, 1, 0)].op = SCHED_B;
    expect_fault("zb-h1 with a whole backward", &t, "1B0 should not be there");
    /* ZB-V: 2 stages on one rank need no message between them. */
    next_base(&base, 0, SCHED_ZB_V, 2, 2, 3);
    clone(&t, &base);
    insert(&t, 1, find(&t, SCHED_F, 1, 0) + 1, (sched_action){SCHED_SEND_F, 1, 0});
    expect_fault("zb-v: a message at the V's turn", &t,
                 "1SEND_F0 should not be there (both stages are on one rank");
    sched_free(&base);
}

/* Link order: every round-robin table matches messages in order with one tag per link; zb-v
 * needs one per kind (its first chunk's activations and second chunk's gradients share links). */
static void test_fifo(void) {
    char err[512];
    int bad = 0;
    for (int k = 0; k < SCHED_N_KINDS; k++)
        for (int p = 2; p <= 6; p++)
            for (int m = p; m <= 3 * p; m += p) {
                sched_table t;
                build(&t, (sched_kind)k, p, 0, m, err, sizeof err);
                bad += !sched_fifo(&t, 1, err, sizeof err);
                if (k != SCHED_ZB_V) bad += !sched_fifo(&t, 0, err, sizeof err);
                sched_free(&t);
            }
    check_true("every table: receives in send order per link and kind; round-robin per link",
               bad == 0);
    sched_table t;
    build(&t, SCHED_ZB_V, 4, 2, 8, err, sizeof err);
    err[0] = '\0';
    const int fifo = sched_fifo(&t, 0, err, sizeof err);
    char what[600];
    snprintf(what, sizeof what, "zb-v p=4 m=8 mixes kinds on a link: \"%s\"", err);
    check_true(what, !fifo && strstr(err, "link rank") != NULL);
    check_true("zb-v stays on an open line: no message from rank p-1 to rank 0",
               sched_needs_wrap(&t) == 0);
    sched_free(&t);
    build(&t, SCHED_INTERLEAVED, 4, 2, 8, err, sizeof err);
    check_true("interleaved needs the axis to wrap (stage 3 on rank 3 feeds stage 4 on rank 0)",
               sched_needs_wrap(&t) == 1 && sched_msg_dir(&t, 3, 4) == 1 &&
                   sched_msg_dir(&t, 4, 3) == -1);
    sched_free(&t);
}

/* The grid: one row per unit of time, the idle cells dots; its busy cells add up to the work. */
static void test_grid_print(void) {
    char err[512];
    sched_table t;
    build(&t, SCHED_1F1B, 2, 1, 2, err, sizeof err);
    FILE *f = tmpfile();
    sched_print_grid(f, &t, err, sizeof err);
    static char buf[4096];
    rewind(f);
    buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
    fclose(f);
    fputs(buf, stdout);
    const char *want = "     0 | 0F0    .     \n"
                       "     1 | 0F1    1F0   \n"
                       "     2 | .      1B0   \n"
                       "     3 | .      1B0   \n"
                       "     4 | 0B0    1F1   \n"
                       "     5 | 0B0    1B1   \n"
                       "     6 | .      1B1   \n"
                       "     7 | 0B1    .     \n"
                       "     8 | 0B1    .     \n"
                       "  makespan 9 units, bubble 0.3333; activations held at most (stage, "
                       "micro-batch pairs): 2 1; 4 messages";
    check_true("1f1b p=2 m=2 grid: the rows of the 1F1B picture", strstr(buf, want) != NULL);
    sched_free(&t);
}

/* Per-stage costs and a p2p time, worked by hand on p = 2, m = 2 (stage 0 / stage 1: F 1 / 2,
 * B 3 / 4 or I 2 / 3 with W 1 / 1; a message 0.5).
 * 1f1b: rank 0 F0 F1 B0 B1, rank 1 F0 B0 F1 B1. Rank 0's F0 [0, 1], F1 [1, 2]: the activations
 * arrive at 1.5 and 2.5. Rank 1: F0 [1.5, 3.5], B0 [3.5, 7.5] (its gradient arrives at 8),
 * F1 [7.5, 9.5], B1 [9.5, 13.5] (arrives at 14). Rank 0: B0 [8, 11], B1 [14, 17]. Makespan 17,
 * busy 8 and 12: bubble 1 − 20/34.
 * zb-h1: rank 0 F0 F1 I0 W0 I1 W1, rank 1 F0 I0 F1 I1 W0 W1. Rank 1: F0 [1.5, 3.5], I0 [3.5, 6.5]
 * (arrives at 7), F1 [6.5, 8.5], I1 [8.5, 11.5] (arrives at 12), W0, W1 [11.5, 13.5]. Rank 0:
 * I0 [7, 9], W0 [9, 10], I1 [12, 14], W1 [14, 15]. Makespan 15, busy 8 and 12: bubble 1/3. */
static void test_hand(void) {
    const double f[2] = {1, 2}, b[2] = {3, 4}, i[2] = {2, 3}, w[2] = {1, 1};
    const sched_costs cost = {0, 0, 0, 0, 0.5, f, b, i, w};
    static const struct {
        sched_kind k;
        double makespan, busy0, busy1;
    } want[] = {{SCHED_1F1B, 17, 8, 12}, {SCHED_ZB_H1, 15, 8, 12}};
    char err[512], what[160];
    for (size_t c = 0; c < sizeof want / sizeof *want; c++) {
        sched_table t;
        build(&t, want[c].k, 2, 1, 2, err, sizeof err);
        sched_result r;
        const int rc = sched_simulate(&t, &cost, &r, err, sizeof err);
        const double bub = 1 - (want[c].busy0 + want[c].busy1) / (2 * want[c].makespan);
        snprintf(what, sizeof what, "%s p=2 m=2 by hand: makespan %g, busy %g and %g, bubble %.4f",
                 sched_kind_name(want[c].k), want[c].makespan, want[c].busy0, want[c].busy1, bub);
        check_true(what, rc == 0 && r.makespan == want[c].makespan && r.busy[0] == want[c].busy0 &&
                             r.busy[1] == want[c].busy1 && fabs(r.bubble - bub) < 1e-15);
        if (rc == 0) {
            printf("     got makespan %g, busy %g and %g, bubble %.4f\n", r.makespan, r.busy[0],
                   r.busy[1], r.bubble);
            sched_result_free(&r);
        }
        sched_free(&t);
    }
}

static void test_shared(void) {
    sched_table t;
    sched_result r;
    char err[256] = "";
    const sched_costs unit = sched_unit_costs();
    build(&t, SCHED_1F1B, 2, 1, 2, err, sizeof err);
    const double cores[3] = {2, 1.5, 1}, want[3] = {9, 10, 12}, busy[3] = {6, 7, 9};
    for (int c = 0; c < 3; c++) {
        const int rc = sched_simulate_shared(&t, &unit, cores[c], &r, err, sizeof err);
        char what[160];
        snprintf(what, sizeof what, "1f1b p=2 m=2 on %.1f CPUs: makespan %g (want %g), busy %g %g",
                 cores[c], rc ? -1 : r.makespan, want[c], rc ? -1 : r.busy[0], rc ? -1 : r.busy[1]);
        check_true(what, rc == 0 && fabs(r.makespan - want[c]) < 1e-12 &&
                             fabs(r.busy[0] - busy[c]) < 1e-12 && fabs(r.busy[1] - busy[c]) < 1e-12);
        if (rc == 0) sched_result_free(&r);
    }
    sched_free(&t);
    int bad = 0, n = 0;
    for (int k = 0; k < SCHED_N_KINDS; k++)
        for (int p = 2; p <= 4; p++)
            for (int m = 1; m <= 6; m++) {
                const int v = k == SCHED_INTERLEAVED || k == SCHED_ZB_V ? 2 : 1;
                if (!accepts((sched_kind)k, p, v, m) || build(&t, (sched_kind)k, p, v, m, err, sizeof err))
                    continue;
                double f[8], b[8], i[8], w[8];
                for (int st = 0; st < p * v; st++)
                    f[st] = 1 + 0.25 * st, b[st] = 2 + 0.5 * st, w[st] = 0.75, i[st] = b[st] - w[st];
                const sched_costs cc = {0, 0, 0, 0, 0.3, f, b, i, w};
                sched_result one, ded, sh;
                const int ok = sched_simulate_shared(&t, &unit, 1, &one, err, sizeof err) == 0 &&
                               sched_simulate(&t, &cc, &ded, err, sizeof err) == 0 &&
                               sched_simulate_shared(&t, &cc, p - 1, &sh, err, sizeof err) == 0;
                if (!ok || fabs(one.makespan - 3.0 * p * v * m) > 1e-9 || deps_violated(&t, &sh, 0.3) ||
                    sh.makespan < ded.makespan - 1e-9 || sh.makespan > ded.makespan * p / (p - 1) + 1e-9) {
                    bad++;
                    printf("     %s p=%d m=%d: on 1 CPU %g (want %d); on %d: %g, dedicated %g %s\n",
                           sched_kind_name((sched_kind)k), p, m, ok ? one.makespan : -1, 3 * p * v * m,
                           p - 1, ok ? sh.makespan : -1, ok ? ded.makespan : -1, err);
                }
                if (ok) sched_result_free(&one), sched_result_free(&ded), sched_result_free(&sh);
                sched_free(&t);
                n++;
            }
    char what[96];
    snprintf(what, sizeof what, "shared CPUs: whole work on 1 CPU, bounds on p-1, in %d cases", n);
    check_true(what, bad == 0 && n > 30);
}

int main(void) {
    test_shared();
    test_grid();
    test_interleaved_memory();
    test_costs();
    test_measured();
    test_hand();
    test_refusals();
    test_broken();
    test_fifo();
    test_grid_print();
    return check_report("test_pipesched");
}
