/* The plan's action lists (train/parallel/schedule.c), pure, without MPI: what the step executor
 * runs on each rank. Checked against independent truth:
 *  - without a pipeline axis: F0 B0 F1 B1 ... (training) and F0 F1 ... (evaluation), no sends;
 *  - 1F1B: each stage's forwards and backwards are calc/schedule.c's 1f1b table for that rank,
 *    action for action (sched_init: the calculator's own generator);
 *  - GPipe: F0 .. F(M−1), then B0 .. B(M−1) (calc's gpipe: the weight gradients summed in
 *    micro-batch order, as every other schedule sums them);
 *  - the pipeline's messages: every SEND_F of stage s has its RECV_F on stage s+1 and every SEND_B
 *    of stage s its RECV_B on stage s−1, in the same micro-batch order (each link's messages are
 *    matched in order), a receive right before the compute that needs it, a send right after
 *    the compute that made it; every micro-batch's F before its B on every stage;
 *  - a simulation of the lists with blocking receives and posted sends finishes (no deadlock);
 *  - interleaved (v = 2, 3 chunks per rank), zb-h1 and zb-v: every rank's list is calc's table for that
 *    rank, action for action, messages included; the lists put together are a table calc's
 *    validator accepts (every (stage, micro-batch) with its F and B, or I and W, in dependency
 *    order, weight gradients in micro-batch order), whose links deliver in send order (one tag per
 *    link suffices; zb-v: per kind of message, the executor's two channels) and whose unit-cost
 *    simulation ends (no deadlock) with calc's own bubble; and
 *    the same check refuses the lists with one action moved one place on one rank.
 * For P = 2, 3, 4 stages and M = 1, 2, 3, 5, 8 micro-batches (interleaved: M multiples of P). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calc/schedule.h"
#include "check.h"
#include "train/parallel/plan.h"

#define MAXA 1024

/* The plan of rank z of P with M micro-batches under schedule sched with v virtual stages (0: the
 * schedule's; no mesh). 72 layers: every P·v here divides them. */
static void plan_ofv(plan *p, int64_t P, int64_t z, int64_t M, pipe_schedule sched, int v) {
    config c;
    config_defaults(&c);
    c.shape = (model_shape){.L = 72, .D = 8, .N = 2, .K = 2, .H = 4, .F = 8, .V = 16, .T = 4};
    c.batch = M, c.micro_batch = 1, c.microbatches = M, c.schedule = sched;
    c.virtual_stages = v;
    plan_in in;
    plan_in_single(&in, &c);
    if (P > 1) {
        const mesh_axes a = {1, {2, 0, 0}};
        const int size = (int)P, wrap = P > 2, coord = (int)z;
        in.pipe = plan_axes_of(&a, &size, &wrap, &coord, "z", MESH_ALG_BIDIR);
    }
    char err[256];
    if (plan_build(p, &in, err, sizeof err) < 0) {
        fprintf(stderr, "plan_build: %s\n", err);
        exit(1);
    }
}

static void plan_of(plan *p, int64_t P, int64_t z, int64_t M, pipe_schedule sched) {
    plan_ofv(p, P, z, M, sched, 0);
}

/* The compute actions (F, B) of a list, in order. */
static int computes(const sched_action *a, int64_t n, sched_action *out) {
    int k = 0;
    for (int64_t i = 0; i < n; i++)
        if (a[i].op == SCHED_F || a[i].op == SCHED_B) out[k++] = a[i];
    return k;
}

static void check_trivial(void) {
    for (int64_t M = 1; M <= 5; M++) {
        plan p;
        plan_of(&p, 1, 0, M, PIPE_GPIPE);
        sched_action a[MAXA];
        const int64_t n = plan_actions(&p, 1, a), ne = plan_actions(&p, 0, a + n);
        int bad = n != 2 * M || ne != M;
        for (int64_t j = 0; j < M && !bad; j++)
            bad |= a[2 * j].op != SCHED_F || a[2 * j].mb != j || a[2 * j + 1].op != SCHED_B ||
                   a[2 * j + 1].mb != j || a[n + j].op != SCHED_F || a[n + j].mb != j;
        check_expect(!bad, "M %lld without a pipeline: F0 B0 F1 B1 ..., evaluation F0 F1 ...",
                     (long long)M);
    }
}

/* Stage z's compute order against calc's 1f1b table (1F1B) or the GPipe rule. */
static int order_ok(const sched_action *c, int k, int64_t P, int64_t z, int64_t M,
                    pipe_schedule sched) {
    if (k != 2 * M) return 0;
    if (sched == PIPE_GPIPE) {
        for (int64_t j = 0; j < M; j++)
            if (c[j].op != SCHED_F || c[j].mb != j || c[M + j].op != SCHED_B || c[M + j].mb != j)
                return 0;
        return 1;
    }
    sched_table t;
    char err[256];
    const sched_spec spec = {SCHED_1F1B, (int)P, 1, (int)M, 0};
    if (sched_init(&t, &spec, err, sizeof err) < 0) return 0;
    sched_action want[MAXA];
    const int kw = computes(t.act + t.off[z], t.off[z + 1] - t.off[z], want);
    int ok = kw == k;
    for (int i = 0; i < k && ok; i++) ok = want[i].op == c[i].op && want[i].mb == c[i].mb;
    sched_free(&t);
    return ok;
}

/* Runs every stage's list: a compute needs its receive done; a receive needs the matching send
 * (the link's next message, in order) posted. Returns 1 when every list finishes. */
static int simulate(sched_action (*a)[MAXA], const int64_t *n, int64_t P) {
    int64_t at[8] = {0}, sent_f[8] = {0}, sent_b[8] = {0}, recv_f[8] = {0}, recv_b[8] = {0};
    static int64_t fmb[8][MAXA], bmb[8][MAXA]; /* each link's messages in send order */
    for (int progress = 1; progress;) {
        progress = 0;
        for (int64_t s = 0; s < P; s++) {
            if (at[s] >= n[s]) continue;
            const sched_action x = a[s][at[s]];
            if (x.op == SCHED_RECV_F) {
                if (recv_f[s] >= sent_f[s - 1] || fmb[s - 1][recv_f[s]] != x.mb) continue;
                recv_f[s]++;
            } else if (x.op == SCHED_RECV_B) {
                if (recv_b[s] >= sent_b[s + 1] || bmb[s + 1][recv_b[s]] != x.mb) continue;
                recv_b[s]++;
            } else if (x.op == SCHED_SEND_F) {
                fmb[s][sent_f[s]++] = x.mb;
            } else if (x.op == SCHED_SEND_B) {
                bmb[s][sent_b[s]++] = x.mb;
            }
            at[s]++, progress = 1;
        }
    }
    int done = 1;
    for (int64_t s = 0; s < P; s++) done &= at[s] == n[s];
    return done;
}

/* Receives right before, sends right after their compute, on the stages that have neighbours. */
static int placed(const sched_action *a, int64_t n, int64_t z, int64_t P) {
    for (int64_t i = 0; i < n; i++) {
        const int op = a[i].op;
        const int64_t mb = a[i].mb;
        if (op == SCHED_RECV_F &&
            (z == 0 || i + 1 >= n || a[i + 1].op != SCHED_F || a[i + 1].mb != mb))
            return 0;
        if (op == SCHED_RECV_B &&
            (z == P - 1 || i + 1 >= n || a[i + 1].op != SCHED_B || a[i + 1].mb != mb))
            return 0;
        if (op == SCHED_SEND_F &&
            (z == P - 1 || i == 0 || a[i - 1].op != SCHED_F || a[i - 1].mb != mb))
            return 0;
        if (op == SCHED_SEND_B && (z == 0 || i == 0 || a[i - 1].op != SCHED_B || a[i - 1].mb != mb))
            return 0;
    }
    return 1;
}

static void check_pipeline(int64_t P, int64_t M, pipe_schedule sched) {
    static sched_action a[8][MAXA];
    int64_t n[8];
    int order = 1, place = 1, fb = 1;
    for (int64_t z = 0; z < P; z++) {
        plan p;
        plan_of(&p, P, z, M, sched);
        n[z] = plan_actions(&p, 1, a[z]);
        sched_action c[MAXA];
        const int k = computes(a[z], n[z], c);
        order &= order_ok(c, k, P, z, M, sched);
        place &= placed(a[z], n[z], z, P);
        for (int64_t j = 0; j < M; j++) { /* F before B */
            int64_t f = -1, b = -1;
            for (int i = 0; i < k; i++) {
                if (c[i].mb == j && c[i].op == SCHED_F) f = i;
                if (c[i].mb == j && c[i].op == SCHED_B) b = i;
            }
            fb &= f >= 0 && b > f;
        }
    }
    check_expect(order && place && fb && simulate(a, n, P),
                 "P %lld M %lld %s: the stages' orders%s, receives and sends in place, F before "
                 "B, every list runs to its end",
                 (long long)P, (long long)M, sched == PIPE_1F1B ? "1f1b" : "gpipe",
                 sched == PIPE_1F1B ? " = calc's 1f1b tables" : " (B in reverse)");
}

/* The lists lists[z][0 .. n[z]) of the P ranks against calc's table want: each rank's list equal
 * to the table's, action for action; put together, a table calc validates, whose links deliver in
 * order and whose unit-cost simulation ends with the table's bubble. 0, or −1 with the first
 * fault in err. */
static int lists_ok(sched_action (*lists)[MAXA], const int64_t *n, const sched_table *want,
                    char *err, size_t len) {
    const int P = want->spec.p;
    char x[48], y[48];
    for (int z = 0; z < P; z++) {
        const sched_action *w = want->act + want->off[z];
        const int64_t nw = want->off[z + 1] - want->off[z];
        for (int64_t i = 0; i < n[z] || i < nw; i++) {
            if (i < n[z] && i < nw && lists[z][i].op == w[i].op &&
                lists[z][i].stage == w[i].stage && lists[z][i].mb == w[i].mb)
                continue;
            snprintf(err, len, "rank %d, action %lld: the plan runs %s, calc's table %s", z,
                     (long long)i, i < n[z] ? sched_action_str(&lists[z][i], x, sizeof x) : "-",
                     i < nw ? sched_action_str(&w[i], y, sizeof y) : "-");
            return -1;
        }
    }
    sched_table got = *want; /* the table's placement, the plan's lists */
    int64_t off[9] = {0};
    static sched_action all[8 * MAXA];
    for (int z = 0; z < P; z++) {
        memcpy(all + off[z], lists[z], (size_t)n[z] * sizeof *all);
        off[z + 1] = off[z] + n[z];
    }
    got.off = off, got.act = all;
    sched_result r;
    const sched_costs unit = sched_unit_costs();
    sched_result rw;
    if (sched_validate(&got, err, len) < 0 || !sched_fifo(&got, want->v_shape, err, len) ||
        sched_simulate(&got, &unit, &r, err, len) < 0)
        return -1;
    int rc = 0;
    if (sched_simulate(want, &unit, &rw, err, len) == 0) {
        if (r.bubble != rw.bubble) rc = -1, snprintf(err, len, "bubble %g, calc's %g", r.bubble, rw.bubble);
        sched_result_free(&rw);
    }
    sched_result_free(&r);
    return rc;
}

/* Interleaved (v chunks) or zb-h1 on P ranks with M micro-batches: the plan's lists are calc's
 * table; one action moved on rank P−1 (it swaps places with the one after it) is refused. */
static void check_table(int64_t P, int64_t M, pipe_schedule sched, int v) {
    static sched_action a[8][MAXA];
    int64_t n[8];
    for (int64_t z = 0; z < P; z++) {
        plan p;
        plan_ofv(&p, P, z, M, sched, v);
        n[z] = plan_actions(&p, 1, a[z]);
        if (n[z] > MAXA) check_expect(0, "more than %d actions", MAXA), exit(1);
    }
    sched_table t;
    char err[256], err2[256] = "";
    const sched_spec sp = {plan_sched_kind(sched), (int)P, v, (int)M, 72};
    if (sched_init(&t, &sp, err, sizeof err) < 0) {
        check_expect(0, "calc refuses P %lld M %lld: %s", (long long)P, (long long)M, err);
        return;
    }
    const int ok = lists_ok(a, n, &t, err, sizeof err) == 0;
    /* the same lists with one action of the last rank moved one place later */
    const int64_t z = P - 1, i = n[z] / 2;
    const sched_action tmp = a[z][i];
    a[z][i] = a[z][i + 1], a[z][i + 1] = tmp;
    const int refused = lists_ok(a, n, &t, err2, sizeof err2) < 0;
    check_expect(ok && refused,
                 "%s P %lld v %d M %lld: every rank's list is calc's table (%s), validated, "
                 "deadlock-free, its bubble; a moved action refused (%s)",
                 sched_kind_name(plan_sched_kind(sched)), (long long)P, t.spec.v,
                 (long long)M, ok ? "yes" : err, err2);
    sched_free(&t);
}

int main(void) {
    check_trivial();
    const int64_t Ms[] = {1, 2, 3, 5, 8};
    for (int64_t P = 2; P <= 4; P++)
        for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
            for (int s = 0; s < 2; s++) check_pipeline(P, Ms[i], s ? PIPE_1F1B : PIPE_GPIPE);
    for (int64_t P = 2; P <= 4; P++)
        for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++) {
            check_table(P, Ms[i], PIPE_ZB_H1, 1);
            check_table(P, Ms[i], PIPE_ZB_V, 2);
            for (int v = 2; v <= 3; v++) check_table(P, Ms[i] * P, PIPE_INTERLEAVED, v);
        }
    return check_finish("test_actions");
}
