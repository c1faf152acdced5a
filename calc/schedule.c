/* schedule: the generators and the checks of pipeline tables. See schedule.h.
 *
 * How each generator orders a rank's compute (r = rank, p ranks, m micro-batches):
 *   gpipe       F0 … F(m−1), then B0 … B(m−1).
 *   1f1b        w = min(p−r−1, m) forwards, then (F, B) pairs, then the last w backwards: at
 *               most p−r micro-batches held (Narayanan et al. 2019, PipeDream-Flush).
 *   interleaved Megatron's (Narayanan et al. 2021): v·m forwards and as many backwards, taken in
 *               groups of p micro-batches per chunk: forward k runs chunk (k/p) mod v on
 *               micro-batch (k/(p·v))·p + k mod p, backward k the chunks from the last down.
 *               w = min((v−1)·p + 2·(p−r−1), v·m) forwards first, then (F, B) pairs, then the
 *               rest. Megatron requires m to be a multiple of p: the groups must be whole.
 *   zb-h1       1f1b with each B split into I and W; rank r runs W(b−r) right after I(b) once
 *               b ≥ r, and the r last W's at the end (Qi et al. 2023, "ZB-H1"): every rank then
 *               holds at most p micro-batches, as 1F1B's first rank does.
 *   zb-v        two chunks per rank in a V (rank r: stages r and 2p−1−r), split backward
 *               (Qi et al. 2023, §6): 2(p−r)−1 forwards of chunk 0; r pairs (F chunk 1, F
 *               chunk 0); p−r triples (F, I, W) of chunk 1; then, while forwards remain,
 *               (F, I, W) of chunk 0 then of chunk 1; then r pairs (I chunk 0, I chunk 1), p−r
 *               pairs (I, W) of chunk 0, and the W's left, chunk 1's first. It is built for
 *               max(m, 2p−1) micro-batches and the actions of micro-batches ≥ m are dropped.
 * The sends and receives are then added around the compute (schedule.h). */
#include "calc/schedule.h"
#include "mesh/names.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

static const char *const kind_names[SCHED_N_KINDS] = {"gpipe", "1f1b", "interleaved", "zb-h1",
                                                      "zb-v"};
static const char *const op_names[SCHED_N_OPS] = {"F",      "B",      "I",      "W",
                                                  "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

const char *sched_kind_name(sched_kind k) {
    return names_of(kind_names, SCHED_N_KINDS, k);
}

int sched_kind_parse(const char *s) {
    return names_find(kind_names, SCHED_N_KINDS, s);
}

const char *sched_kind_names(void) {
    return "gpipe|1f1b|interleaved|zb-h1|zb-v";
}

int sched_spec_v(const sched_spec *s) {
    if (s->v > 0) return s->v;
    return s->kind == SCHED_INTERLEAVED || s->kind == SCHED_ZB_V ? 2 : 1;
}

/* Largest table built: p·v·m (stage, micro-batch) pairs. */
#define SCHED_MAX_PAIRS (1 << 18)

int sched_check(const sched_spec *s, char *err, size_t len) {
    const char *name = sched_kind_name(s->kind);
    const int p = s->p, v = sched_spec_v(s), m = s->m;
    if (s->kind < 0 || s->kind >= SCHED_N_KINDS)
        return errmsg_fail(err, len, "--schedule: expected %s", sched_kind_names());
    if (p < 1 || m < 1 || v < 1)
        return errmsg_fail(err, len,
                           "a pipeline needs p >= 1 ranks, m >= 1 micro-batches and v "
                           ">= 1 virtual stages (got %d, %d, %d)",
                           p, m, v);
    if (v > 1 && p == 1)
        return errmsg_fail(err, len,
                           "--virtual-stages %d needs a pipeline axis: with one pipeline rank "
                           "there is nothing to interleave (give --pipeline, or drop "
                           "--virtual-stages)",
                           v);
    if ((s->kind == SCHED_GPIPE || s->kind == SCHED_1F1B || s->kind == SCHED_ZB_H1) && v != 1)
        return errmsg_fail(err, len,
                           "--schedule %s runs one stage per rank: --virtual-stages %d needs "
                           "--schedule interleaved (or zb-v with 2)",
                           name, v);
    if (s->kind == SCHED_INTERLEAVED && v < 2)
        return errmsg_fail(
            err, len, "--schedule interleaved needs --virtual-stages >= 2 (with 1 it is 1f1b)");
    if (s->kind == SCHED_ZB_V && v != 2)
        return errmsg_fail(err, len,
                           "--schedule zb-v places exactly 2 stages per rank in a V: "
                           "--virtual-stages %d should be 2",
                           v);
    if (s->kind == SCHED_INTERLEAVED && m % p) {
        char use[48];
        const int lo = m / p * p;
        if (lo > 0)
            snprintf(use, sizeof use, "%d or %d", lo, lo + p);
        else
            snprintf(use, sizeof use, "%d", p);
        return errmsg_fail(err, len,
                           "--schedule interleaved runs the micro-batches in groups of the %d "
                           "pipeline ranks (Megatron's rule): --microbatches %d is not a multiple "
                           "of %d; use %s (or another multiple)",
                           p, m, p, use);
    }
    if (s->layers > 0 && s->layers % ((int64_t)p * v))
        return errmsg_fail(err, len,
                           "%lld layers do not divide into %d pipeline ranks x %d virtual stages "
                           "= %d chunks of equal size",
                           (long long)s->layers, p, v, p * v);
    if ((int64_t)p * v * m > SCHED_MAX_PAIRS)
        return errmsg_fail(err, len,
                           "%d ranks x %d virtual stages x %d micro-batches is more than the %d "
                           "(stage, micro-batch) pairs a table may hold",
                           p, v, m, SCHED_MAX_PAIRS);
    return 0;
}

int sched_stage_rank(const sched_table *t, int s) {
    return t->stage_rank[s];
}

int sched_rank_stage(const sched_table *t, int r, int k) {
    const int p = t->spec.p;
    if (t->v_shape) return k == 0 ? r : 2 * p - 1 - r;
    return k * p + r;
}

int sched_msg_dir(const sched_table *t, int from, int to) {
    if (t->v_shape) return t->stage_rank[to] > t->stage_rank[from] ? 1 : -1;
    return to > from ? 1 : -1;
}

int sched_needs_wrap(const sched_table *t) {
    return !t->v_shape && t->spec.p > 1 && t->stages > t->spec.p;
}

const char *sched_action_str(const sched_action *a, char *buf, size_t len) {
    const char *op = a->op >= 0 && a->op < SCHED_N_OPS ? op_names[a->op] : "?";
    snprintf(buf, len, "%d%s%d", a->stage, op, a->mb);
    return buf;
}

/* ------------------------------------------------------------------ the generators */

typedef struct {
    sched_action *a;
    int64_t n;
} emit;

static void put(emit *e, int op, int stage, int mb) {
    e->a[e->n++] = (sched_action){op, stage, mb};
}

static void gen_gpipe(emit *e, int r, int m) {
    for (int j = 0; j < m; j++) put(e, SCHED_F, r, j);
    for (int j = 0; j < m; j++) put(e, SCHED_B, r, j);
}

/* 1F1B, and with split = 1 ZB-H1 (W(b−r) after I(b) once b ≥ r, the rest at the end). */
static void gen_1f1b(emit *e, int r, int p, int m, int split) {
    const int warm = p - r - 1 < m ? p - r - 1 : m;
    int f = 0, b = 0, w = 0;
    for (; f < warm; f++) put(e, SCHED_F, r, f);
    while (b < m) {
        if (f < m) put(e, SCHED_F, r, f++);
        put(e, split ? SCHED_I : SCHED_B, r, b);
        if (split && b >= r) put(e, SCHED_W, r, w++);
        b++;
    }
    while (split && w < m) put(e, SCHED_W, r, w++);
}

static void gen_interleaved(emit *e, int r, int p, int v, int m) {
    const int n = v * m, w0 = (v - 1) * p + 2 * (p - r - 1), warm = w0 < n ? w0 : n;
#define MB_OF(k) (((k) / (p * v)) * p + (k) % p)
#define FSTAGE(k) ((((k) / p) % v) * p + r)
#define BSTAGE(k) ((v - 1 - ((k) / p) % v) * p + r)
    int f = 0, b = 0;
    for (; f < warm; f++) put(e, SCHED_F, FSTAGE(f), MB_OF(f));
    for (; f < n; f++, b++) {
        put(e, SCHED_F, FSTAGE(f), MB_OF(f));
        put(e, SCHED_B, BSTAGE(b), MB_OF(b));
    }
    for (; b < n; b++) put(e, SCHED_B, BSTAGE(b), MB_OF(b));
#undef MB_OF
#undef FSTAGE
#undef BSTAGE
}

/* ZB-V counters: next F, I and W micro-batch of each chunk; actions of micro-batches ≥ m are
 * dropped (the generator runs max(m, 2p−1) of them). */
typedef struct {
    emit *e;
    int stage[2], f[2], i[2], w[2], m;
} zbv;

static void zbv_put(zbv *z, int op, int c) {
    int *cnt = op == SCHED_F ? z->f : op == SCHED_I ? z->i : z->w;
    const int j = cnt[c]++;
    if (j < z->m) put(z->e, op, z->stage[c], j);
}

static void gen_zbv(emit *e, int r, int p, int m) {
    const int n = m > 2 * p - 1 ? m : 2 * p - 1;
    zbv z = {e, {r, 2 * p - 1 - r}, {0, 0}, {0, 0}, {0, 0}, m};
    for (int k = 0; k < 2 * (p - r) - 1; k++) zbv_put(&z, SCHED_F, 0);
    for (int k = 0; k < r; k++) zbv_put(&z, SCHED_F, 1), zbv_put(&z, SCHED_F, 0);
    for (int k = 0; k < p - r; k++)
        zbv_put(&z, SCHED_F, 1), zbv_put(&z, SCHED_I, 1), zbv_put(&z, SCHED_W, 1);
    while (z.f[1] < z.f[0] || z.f[0] < n) {
        if (z.f[0] < n) zbv_put(&z, SCHED_F, 0);
        zbv_put(&z, SCHED_I, 0), zbv_put(&z, SCHED_W, 0);
        zbv_put(&z, SCHED_F, 1), zbv_put(&z, SCHED_I, 1), zbv_put(&z, SCHED_W, 1);
    }
    for (int k = 0; k < r; k++) zbv_put(&z, SCHED_I, 0), zbv_put(&z, SCHED_I, 1);
    for (int k = 0; k < p - r; k++) zbv_put(&z, SCHED_I, 0), zbv_put(&z, SCHED_W, 0);
    while (z.w[1] < z.i[1]) zbv_put(&z, SCHED_W, 1);
    while (z.w[0] < z.i[0]) zbv_put(&z, SCHED_W, 0);
}

/* Copies rank r's compute list c[0..n) into e with the sends and receives around it. */
static void add_comms(emit *e, const sched_table *t, int r, const sched_action *c, int64_t n) {
    const int S = t->stages;
    for (int64_t k = 0; k < n; k++) {
        const int s = c[k].stage, j = c[k].mb, op = c[k].op;
        const int prev = s > 0 && t->stage_rank[s - 1] != r;
        const int next = s < S - 1 && t->stage_rank[s + 1] != r;
        if (op == SCHED_F && prev) put(e, SCHED_RECV_F, s, j);
        if ((op == SCHED_B || op == SCHED_I) && next) put(e, SCHED_RECV_B, s, j);
        put(e, op, s, j);
        if (op == SCHED_F && next) put(e, SCHED_SEND_F, s, j);
        if ((op == SCHED_B || op == SCHED_I) && prev) put(e, SCHED_SEND_B, s, j);
    }
}

void sched_free(sched_table *t) {
    if (!t) return;
    free(t->stage_rank), free(t->off), free(t->act);
    memset(t, 0, sizeof *t);
}

int sched_init(sched_table *t, const sched_spec *s, char *err, size_t len) {
    memset(t, 0, sizeof *t);
    if (sched_check(s, err, len) < 0) return -1;
    const int p = s->p, v = sched_spec_v(s), m = s->m;
    t->spec = *s;
    t->spec.v = v;
    t->stages = p * v;
    t->split = s->kind == SCHED_ZB_H1 || s->kind == SCHED_ZB_V;
    t->v_shape = s->kind == SCHED_ZB_V;
    /* per rank: v·m pairs, each with ≤ 3 compute actions and ≤ 4 messages */
    const int64_t per_rank = (int64_t)v * m * 7;
    t->stage_rank = malloc(sizeof(int) * (size_t)t->stages);
    t->off = malloc(sizeof(int64_t) * (size_t)(p + 1));
    t->act = malloc(sizeof(sched_action) * (size_t)(per_rank * p));
    sched_action *c = malloc(sizeof(sched_action) * (size_t)per_rank);
    if (!t->stage_rank || !t->off || !t->act || !c) {
        free(c);
        sched_free(t);
        return errmsg_fail(err, len, "schedule: out of memory for %d x %lld actions", p,
                           (long long)per_rank);
    }
    for (int r = 0; r < p; r++)
        for (int k = 0; k < v; k++) t->stage_rank[sched_rank_stage(t, r, k)] = r;
    emit out = {t->act, 0};
    for (int r = 0; r < p; r++) {
        emit e = {c, 0};
        switch (s->kind) {
        case SCHED_GPIPE:
            gen_gpipe(&e, r, m);
            break;
        case SCHED_1F1B:
            gen_1f1b(&e, r, p, m, 0);
            break;
        case SCHED_ZB_H1:
            gen_1f1b(&e, r, p, m, 1);
            break;
        case SCHED_INTERLEAVED:
            gen_interleaved(&e, r, p, v, m);
            break;
        default:
            gen_zbv(&e, r, p, m);
            break;
        }
        t->off[r] = out.n;
        add_comms(&out, t, r, c, e.n);
    }
    t->off[p] = out.n;
    free(c);
    return 0;
}

/* ------------------------------------------------------------------ validation */

/* Positions (index in the rank's list) of each kind of action of each (s, j); −1 = none. */
typedef struct {
    int64_t *pos[SCHED_N_OPS];
    int S, m;
} posmap;

static void posmap_free(posmap *pm) {
    for (int o = 0; o < SCHED_N_OPS; o++) free(pm->pos[o]);
}

static int posmap_init(posmap *pm, const sched_table *t, char *err, size_t len) {
    pm->S = t->stages, pm->m = t->spec.m;
    const size_t n = (size_t)pm->S * (size_t)pm->m;
    int ok = 1;
    for (int o = 0; o < SCHED_N_OPS; o++) {
        pm->pos[o] = malloc(sizeof(int64_t) * n);
        ok = ok && pm->pos[o];
        for (size_t k = 0; pm->pos[o] && k < n; k++) pm->pos[o][k] = -1;
    }
    if (!ok) {
        posmap_free(pm);
        return errmsg_fail(err, len, "schedule: out of memory");
    }
    return 0;
}

/* Records every action's position; refuses actions on the wrong rank, out of range, or twice. */
static int fill_positions(posmap *pm, const sched_table *t, char *err, size_t len) {
    char a[48];
    for (int r = 0; r < t->spec.p; r++)
        for (int64_t k = t->off[r]; k < t->off[r + 1]; k++) {
            const sched_action *x = &t->act[k];
            if (x->op < 0 || x->op >= SCHED_N_OPS || x->stage < 0 || x->stage >= pm->S ||
                x->mb < 0 || x->mb >= pm->m)
                return errmsg_fail(err, len,
                                   "rank %d, action %lld: %s is out of range (%d stages, %d "
                                   "micro-batches)",
                                   r, (long long)(k - t->off[r]), sched_action_str(x, a, sizeof a),
                                   pm->S, pm->m);
            if (t->stage_rank[x->stage] != r)
                return errmsg_fail(err, len, "rank %d runs %s, but stage %d is on rank %d", r,
                                   sched_action_str(x, a, sizeof a), x->stage,
                                   t->stage_rank[x->stage]);
            int64_t *slot = &pm->pos[x->op][(size_t)x->stage * pm->m + x->mb];
            if (*slot >= 0)
                return errmsg_fail(err, len, "rank %d runs %s twice", r,
                                   sched_action_str(x, a, sizeof a));
            *slot = k;
        }
    return 0;
}

static int64_t at(const posmap *pm, int op, int s, int j) {
    return pm->pos[op][(size_t)s * pm->m + j];
}

/* "a before b" on one rank, else a message naming both. A missing action is reported first. */
static int before(const posmap *pm, int op_a, int op_b, int s_a, int s_b, int j, const char *why,
                  char *err, size_t len) {
    char x[48], y[48];
    const sched_action a = {op_a, s_a, j}, b = {op_b, s_b, j};
    const int64_t pa = at(pm, op_a, s_a, j), pb = at(pm, op_b, s_b, j);
    if (pa < 0) return errmsg_fail(err, len, "%s is missing", sched_action_str(&a, x, sizeof x));
    if (pb < 0) return errmsg_fail(err, len, "%s is missing", sched_action_str(&b, y, sizeof y));
    if (pa > pb)
        return errmsg_fail(err, len, "%s comes after %s (%s)", sched_action_str(&a, x, sizeof x),
                           sched_action_str(&b, y, sizeof y), why);
    return 0;
}

static int absent(const posmap *pm, int op, int s, int j, const char *why, char *err, size_t len) {
    char x[48];
    const sched_action a = {op, s, j};
    if (at(pm, op, s, j) >= 0)
        return errmsg_fail(err, len, "%s should not be there (%s)",
                           sched_action_str(&a, x, sizeof x), why);
    return 0;
}

/* The compute of (s, j): F, then B, or I then W. */
static int check_compute(const posmap *pm, const sched_table *t, int s, int j, char *err,
                         size_t len) {
    const char *need = "a backward needs its forward's activations";
    if (!t->split)
        return absent(pm, SCHED_I, s, j, "this table runs whole backwards (B)", err, len) ||
               absent(pm, SCHED_W, s, j, "this table runs whole backwards (B)", err, len) ||
               before(pm, SCHED_F, SCHED_B, s, s, j, need, err, len);
    return absent(pm, SCHED_B, s, j, "this table splits the backward into I and W", err, len) ||
           before(pm, SCHED_F, SCHED_I, s, s, j, need, err, len) ||
           before(pm, SCHED_I, SCHED_W, s, s, j, "W follows I", err, len);
}

/* Stage 0 reads the tokens and the last stage computes the loss: no messages past either end. */
static int check_ends(const posmap *pm, const sched_table *t, int j, char *err, size_t len) {
    const int S = t->stages;
    return absent(pm, SCHED_RECV_F, 0, j, "stage 0 reads the tokens", err, len) ||
           absent(pm, SCHED_SEND_B, 0, j, "stage 0 sends no gradient", err, len) ||
           absent(pm, SCHED_SEND_F, S - 1, j, "the last stage sends no activation", err, len) ||
           absent(pm, SCHED_RECV_B, S - 1, j, "the last stage receives no gradient", err, len);
}

/* The boundary between stage s and s+1 for micro-batch j: a send and a receive each way when
 * the stages are on two ranks, the order of the compute when they share one. */
static int check_boundary(const posmap *pm, const sched_table *t, int s, int j, char *err,
                          size_t len) {
    const int bwd = t->split ? SCHED_I : SCHED_B;
    if (t->stage_rank[s] == t->stage_rank[s + 1]) {
        const char *why = "both stages are on one rank: no message";
        return absent(pm, SCHED_SEND_F, s, j, why, err, len) ||
               absent(pm, SCHED_RECV_F, s + 1, j, why, err, len) ||
               absent(pm, SCHED_SEND_B, s + 1, j, why, err, len) ||
               absent(pm, SCHED_RECV_B, s, j, why, err, len) ||
               before(pm, SCHED_F, SCHED_F, s, s + 1, j, "the next stage needs this one's output",
                      err, len) ||
               before(pm, bwd, bwd, s + 1, s, j, "the gradient flows from the next stage", err,
                      len);
    }
    return before(pm, SCHED_F, SCHED_SEND_F, s, s, j, "a send follows its forward", err, len) ||
           before(pm, SCHED_RECV_F, SCHED_F, s + 1, s + 1, j, "a forward needs its input", err,
                  len) ||
           before(pm, bwd, SCHED_SEND_B, s + 1, s + 1, j, "a send follows its backward", err,
                  len) ||
           before(pm, SCHED_RECV_B, bwd, s, s, j, "a backward needs its output gradient", err, len);
}

int sched_validate(const sched_table *t, char *err, size_t len) {
    posmap pm;
    if (posmap_init(&pm, t, err, len) < 0) return -1;
    int rc = fill_positions(&pm, t, err, len);
    const int wgrad = t->split ? SCHED_W : SCHED_B;
    for (int s = 0; rc == 0 && s < t->stages; s++)
        for (int j = 0; rc == 0 && j < t->spec.m; j++) {
            rc = check_compute(&pm, t, s, j, err, len) ||
                 (s == 0 && check_ends(&pm, t, j, err, len)) ||
                 (s < t->stages - 1 && check_boundary(&pm, t, s, j, err, len));
            if (rc == 0 && j > 0 && at(&pm, wgrad, s, j - 1) > at(&pm, wgrad, s, j)) {
                char x[48], y[48];
                const sched_action a = {wgrad, s, j - 1}, b = {wgrad, s, j};
                rc = errmsg_fail(err, len,
                                 "%s comes after %s: the weight gradients of a stage accumulate "
                                 "in micro-batch order",
                                 sched_action_str(&a, x, sizeof x),
                                 sched_action_str(&b, y, sizeof y));
            }
        }
    posmap_free(&pm);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ link order */

/* The stage a message lands on: SEND_F(s) → s+1, SEND_B(s) → s−1. */
static int dest_stage(const sched_action *a) {
    return a->op == SCHED_SEND_F ? a->stage + 1 : a->stage - 1;
}

/* Is action a a send from src to dst (a receive on dst from src, when recv = 1) of the kind
 * (0 activations, 1 gradients, −1 either)? */
static int on_link(const sched_table *t, const sched_action *a, int src, int dst, int recv,
                   int kind) {
    const int grad = a->op == SCHED_SEND_B || a->op == SCHED_RECV_B;
    if (kind >= 0 && grad != kind) return 0;
    if (recv) {
        if (a->op == SCHED_RECV_F) return t->stage_rank[a->stage - 1] == src;
        return a->op == SCHED_RECV_B && t->stage_rank[a->stage + 1] == src;
    }
    return (a->op == SCHED_SEND_F || a->op == SCHED_SEND_B) && t->stage_rank[dest_stage(a)] == dst;
}

/* Does the k-th receive on rank dst from rank src (of the kind) match the k-th send? */
static int link_order(const sched_table *t, int src, int dst, int kind, char *err, size_t len) {
    int64_t i = t->off[src], k = t->off[dst];
    for (;; i++, k++) {
        while (i < t->off[src + 1] && !on_link(t, &t->act[i], src, dst, 0, kind)) i++;
        while (k < t->off[dst + 1] && !on_link(t, &t->act[k], src, dst, 1, kind)) k++;
        if (i == t->off[src + 1] || k == t->off[dst + 1]) return 1;
        const sched_action *a = &t->act[i], *b = &t->act[k];
        if ((a->op == SCHED_SEND_F) != (b->op == SCHED_RECV_F) || dest_stage(a) != b->stage ||
            a->mb != b->mb) {
            char x[48], y[48];
            errmsg_fail(err, len,
                        "link rank %d -> rank %d: rank %d sends %s when rank %d waits "
                        "for %s",
                        src, dst, src, sched_action_str(a, x, sizeof x), dst,
                        sched_action_str(b, y, sizeof y));
            return 0;
        }
    }
}

int sched_fifo(const sched_table *t, int per_kind, char *err, size_t len) {
    const int p = t->spec.p;
    for (int r = 0; r < p; r++)
        for (int d = -1; d <= 1; d += 2) {
            const int q = ((r + d) % p + p) % p;
            if (q == r || (d == 1 && p == 2)) continue; /* p = 2: one peer, walked once */
            for (int kind = per_kind ? 0 : -1; kind <= (per_kind ? 1 : -1); kind++)
                if (!link_order(t, r, q, kind, err, len)) return 0;
        }
    return 1;
}
