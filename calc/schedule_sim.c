/* schedule_sim: runs a pipeline table on a model of the machine, and prints it. See schedule.h.
 *
 * How the simulation works. Each rank keeps a clock and walks its list: a compute action adds its
 * cost; a SEND stamps its message with an arrival time (when the link is free, plus the p2p
 * time; the link then stays busy until that arrival) and costs the rank nothing; a RECV moves
 * the clock to its message's arrival, or blocks if the message has not been sent. The ranks are
 * swept in turn, each as far as it can go, until every list is done or a sweep moves none of
 * them: a deadlock. Within a rank the order of the list is the only constraint besides the
 * messages (sched_validate has checked that the list respects the local dependencies), so the
 * times are exact for this model whatever order the sweep takes. Activations in flight depend on
 * the order alone: +1 at F, −1 at B (or at W). */
#include "calc/schedule.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

sched_costs sched_unit_costs(void) {
    return (sched_costs){1, 2, 1, 1, 0, NULL, NULL, NULL, NULL};
}

static double cost_of(const sched_costs *c, int op, int s) {
    switch (op) {
    case SCHED_F:
        return c->f ? c->f[s] : c->F;
    case SCHED_B:
        return c->b ? c->b[s] : c->B;
    case SCHED_I:
        return c->i ? c->i[s] : c->I;
    case SCHED_W:
        return c->w ? c->w[s] : c->W;
    default:
        return 0;
    }
}

void sched_result_free(sched_result *r) {
    if (!r) return;
    free(r->busy), free(r->peak), free(r->start), free(r->end);
    memset(r, 0, sizeof *r);
}

/* The simulation's state: per rank its position, clock and activations held; per message its
 * arrival (−1: not sent); per link (rank, direction) when it is free. */
typedef struct {
    const sched_table *t;
    const sched_costs *c;
    sched_result *r;
    int64_t *next;
    double *clock, *arrive_f, *arrive_b, *link_free;
    int *held;
} sim;

static void sim_free(sim *z) {
    free(z->next), free(z->clock), free(z->arrive_f), free(z->arrive_b), free(z->link_free);
    free(z->held);
}

static int sim_init(sim *z, const sched_table *t, const sched_costs *c, sched_result *r) {
    const int p = t->spec.p;
    const size_t pairs = (size_t)t->stages * (size_t)t->spec.m, n = (size_t)t->off[p];
    memset(r, 0, sizeof *r);
    *z = (sim){t, c, r, NULL, NULL, NULL, NULL, NULL, NULL};
    z->next = calloc((size_t)p, sizeof *z->next);
    z->clock = calloc((size_t)p, sizeof *z->clock);
    z->held = calloc((size_t)p, sizeof *z->held);
    z->link_free = calloc((size_t)p * 2, sizeof *z->link_free);
    z->arrive_f = malloc(pairs * sizeof *z->arrive_f);
    z->arrive_b = malloc(pairs * sizeof *z->arrive_b);
    r->busy = calloc((size_t)p, sizeof *r->busy);
    r->peak = calloc((size_t)p, sizeof *r->peak);
    r->start = calloc(n ? n : 1, sizeof *r->start);
    r->end = calloc(n ? n : 1, sizeof *r->end);
    if (!z->next || !z->clock || !z->held || !z->link_free || !z->arrive_f || !z->arrive_b ||
        !r->busy || !r->peak || !r->start || !r->end)
        return -1;
    for (size_t k = 0; k < pairs; k++) z->arrive_f[k] = z->arrive_b[k] = -1;
    for (int q = 0; q < p; q++) z->next[q] = t->off[q];
    return 0;
}

/* The message a receive waits for: its arrival slot. */
static double *awaited(const sim *z, const sched_action *a) {
    const int m = z->t->spec.m;
    return a->op == SCHED_RECV_F ? &z->arrive_f[(size_t)(a->stage - 1) * m + a->mb]
                                 : &z->arrive_b[(size_t)(a->stage + 1) * m + a->mb];
}

/* Runs rank q as far as it can. Returns the number of actions done. */
static int64_t sim_rank(sim *z, int q) {
    const sched_table *t = z->t;
    const int m = t->spec.m;
    int64_t done = 0;
    for (; z->next[q] < t->off[q + 1]; z->next[q]++, done++) {
        const int64_t k = z->next[q];
        const sched_action *a = &t->act[k];
        double now = z->clock[q];
        if (a->op == SCHED_RECV_F || a->op == SCHED_RECV_B) {
            const double arr = *awaited(z, a);
            if (arr < 0) break;
            if (arr > now) now = arr;
        } else if (a->op == SCHED_SEND_F || a->op == SCHED_SEND_B) {
            const int to = a->op == SCHED_SEND_F ? a->stage + 1 : a->stage - 1;
            double *link = &z->link_free[2 * q + (sched_msg_dir(t, a->stage, to) > 0)];
            const double go = *link > now ? *link : now;
            *link = go + z->c->p2p;
            (a->op == SCHED_SEND_F ? z->arrive_f : z->arrive_b)[(size_t)a->stage * m + a->mb] =
                *link;
            z->r->sends++;
        } else {
            const double d = cost_of(z->c, a->op, a->stage);
            z->r->start[k] = now;
            z->clock[q] = now + d;
            z->r->end[k] = now + d;
            z->r->busy[q] += d;
            const int frees = a->op == (t->split ? SCHED_W : SCHED_B);
            z->held[q] += a->op == SCHED_F ? 1 : frees ? -1 : 0;
            if (z->held[q] > z->r->peak[q]) z->r->peak[q] = z->held[q];
            continue;
        }
        z->r->start[k] = z->r->end[k] = now;
        z->clock[q] = now;
    }
    return done;
}

/* The deadlock message: what each unfinished rank waits for. */
static int deadlock(const sim *z, char *err, size_t len) {
    const sched_table *t = z->t;
    size_t n = (size_t)snprintf(err, len, "deadlock:");
    for (int q = 0; q < t->spec.p && n < len; q++) {
        if (z->next[q] >= t->off[q + 1]) continue;
        const sched_action *a = &t->act[z->next[q]];
        const int from = a->op == SCHED_RECV_F ? a->stage - 1 : a->stage + 1;
        const sched_action want = {a->op == SCHED_RECV_F ? SCHED_SEND_F : SCHED_SEND_B, from,
                                   a->mb};
        char x[48], y[48];
        n += (size_t)snprintf(err + n, len - n, " rank %d waits at %s for rank %d's %s;", q,
                              sched_action_str(a, x, sizeof x), t->stage_rank[from],
                              sched_action_str(&want, y, sizeof y));
    }
    if (n > 0 && n < len) err[n - 1] = '\0';
    return -1;
}

int sched_simulate(const sched_table *t, const sched_costs *c, sched_result *r, char *err,
                   size_t len) {
    memset(r, 0, sizeof *r);
    if (sched_validate(t, err, len) < 0) return -1;
    sim z;
    if (sim_init(&z, t, c, r) < 0) {
        sim_free(&z);
        sched_result_free(r);
        return errmsg_fail(err, len, "schedule simulation: out of memory");
    }
    const int p = t->spec.p;
    int64_t left = t->off[p];
    for (;;) {
        int64_t moved = 0;
        for (int q = 0; q < p; q++) moved += sim_rank(&z, q);
        left -= moved;
        if (left == 0 || moved == 0) break;
    }
    int rc = 0;
    if (left > 0) {
        rc = deadlock(&z, err, len);
    } else {
        double busy = 0;
        for (int q = 0; q < p; q++) {
            if (z.clock[q] > r->makespan) r->makespan = z.clock[q];
            if (r->peak[q] > r->peak_max) r->peak_max = r->peak[q];
            busy += r->busy[q];
        }
        /* idle over total, one division: exact integers in give the correctly rounded ratio */
        const double total = p * r->makespan;
        r->bubble = total > 0 ? (total - busy) / total : 0;
    }
    sim_free(&z);
    if (rc < 0) sched_result_free(r);
    return rc;
}

/* ------------------------------------------------------------------ shared CPUs */

/* Rank q's actions from time `now` that need no CPU time (sends, receives whose message has
 * arrived), up to a compute action, which it starts (rem[q]: the work it has left). Returns the
 * number of actions done. */
static int64_t ps_advance(sim *z, int q, double now, double *rem) {
    const sched_table *t = z->t;
    const int m = t->spec.m;
    int64_t done = 0;
    for (; rem[q] < 0 && z->next[q] < t->off[q + 1]; z->next[q]++, done++) {
        const int64_t k = z->next[q];
        const sched_action *a = &t->act[k];
        if (a->op == SCHED_RECV_F || a->op == SCHED_RECV_B) {
            const double arr = *awaited(z, a);
            if (arr < 0 || arr > now) break;
        } else if (a->op == SCHED_SEND_F || a->op == SCHED_SEND_B) {
            const int to = a->op == SCHED_SEND_F ? a->stage + 1 : a->stage - 1;
            double *link = &z->link_free[2 * q + (sched_msg_dir(t, a->stage, to) > 0)];
            *link = (*link > now ? *link : now) + z->c->p2p;
            (a->op == SCHED_SEND_F ? z->arrive_f : z->arrive_b)[(size_t)a->stage * m + a->mb] =
                *link;
            z->r->sends++;
        } else {
            const int frees = a->op == (t->split ? SCHED_W : SCHED_B);
            z->held[q] += a->op == SCHED_F ? 1 : frees ? -1 : 0;
            if (z->held[q] > z->r->peak[q]) z->r->peak[q] = z->held[q];
            z->r->start[k] = now;
            rem[q] = cost_of(z->c, a->op, a->stage);
            if (rem[q] > 0) break; /* computing: the action ends in ps_step */
            rem[q] = -1;
        }
        z->r->start[k] = z->r->end[k] = now;
    }
    return done;
}

/* The next event after `now` (a compute's end at the shared rate, a blocked receive's message
 * arriving): advances the computing ranks to it and ends the computes that end there (*ended of
 * them). Returns the new time, or −1 when nothing is pending (a deadlock). */
static double ps_step(sim *z, double now, double cores, double *rem, int64_t *ended) {
    const sched_table *t = z->t;
    const int p = t->spec.p;
    int active = 0;
    for (int q = 0; q < p; q++) active += rem[q] >= 0;
    const double rate = active > cores ? cores / active : 1.0;
    double dt = -1;
    for (int q = 0; q < p; q++) {
        double d = -1;
        if (rem[q] >= 0) {
            d = rem[q] / rate;
        } else if (z->next[q] < t->off[q + 1]) {
            const double arr = *awaited(z, &t->act[z->next[q]]);
            d = arr > now ? arr - now : -1;
        }
        if (d >= 0 && (dt < 0 || d < dt)) dt = d;
    }
    if (dt < 0) return -1;
    for (int q = 0; q < p; q++) {
        if (rem[q] < 0) continue;
        if (rem[q] / rate <= dt * (1 + 1e-12)) { /* ends now */
            const int64_t k = z->next[q]++;
            z->r->end[k] = now + dt;
            z->r->busy[q] += now + dt - z->r->start[k];
            rem[q] = -1;
            ++*ended;
        } else {
            rem[q] -= dt * rate;
        }
    }
    return now + dt;
}

int sched_simulate_shared(const sched_table *t, const sched_costs *c, double cores,
                          sched_result *r, char *err, size_t len) {
    if (!(cores > 0) || cores >= t->spec.p) return sched_simulate(t, c, r, err, len);
    memset(r, 0, sizeof *r);
    if (sched_validate(t, err, len) < 0) return -1;
    sim z;
    const int p = t->spec.p;
    double *rem = malloc((size_t)p * sizeof *rem);
    if (!rem || sim_init(&z, t, c, r) < 0) {
        free(rem), sim_free(&z);
        sched_result_free(r);
        return errmsg_fail(err, len, "schedule simulation: out of memory");
    }
    for (int q = 0; q < p; q++) rem[q] = -1;
    double now = 0;
    int64_t left = t->off[p];
    for (;;) {
        for (int64_t moved = 1; moved;) {
            moved = 0;
            for (int q = 0; q < p; q++) moved += ps_advance(&z, q, now, rem);
            left -= moved;
        }
        int64_t ended = 0;
        const double next = left > 0 ? ps_step(&z, now, cores, rem, &ended) : -1;
        if (next < 0) break;
        left -= ended;
        now = next;
    }
    int rc = 0;
    if (left > 0) {
        rc = deadlock(&z, err, len);
    } else {
        double busy = 0;
        r->makespan = now;
        for (int q = 0; q < p; q++) {
            if (r->peak[q] > r->peak_max) r->peak_max = r->peak[q];
            busy += r->busy[q];
        }
        const double total = p * r->makespan;
        r->bubble = total > 0 ? (total - busy) / total : 0;
    }
    free(rem);
    sim_free(&z);
    if (rc < 0) sched_result_free(r);
    return rc;
}

/* ------------------------------------------------------------------ printing */

int sched_print_grid(FILE *out, const sched_table *t, char *err, size_t len) {
    const sched_costs unit = sched_unit_costs();
    sched_result r;
    if (sched_simulate(t, &unit, &r, err, len) < 0) return -1;
    const int p = t->spec.p, rows = (int)r.makespan;
    enum { W = 12 };
    char *cell = calloc((size_t)rows * (size_t)p, W);
    if (!cell) {
        sched_result_free(&r);
        return errmsg_fail(err, len, "schedule grid: out of memory");
    }
    int width = 6;
    for (int q = 0; q < p; q++)
        for (int64_t k = t->off[q]; k < t->off[q + 1]; k++) {
            const sched_action *a = &t->act[k];
            if (a->op > SCHED_W) continue;
            char s[W];
            sched_action_str(a, s, sizeof s);
            if ((int)strlen(s) > width) width = (int)strlen(s);
            for (int u = (int)r.start[k]; u < (int)r.end[k] && u < rows; u++)
                memcpy(cell + ((size_t)u * p + q) * W, s, W);
        }
    fprintf(out,
            "schedule %s: %d pipeline ranks x %d virtual stages = %d stages, %d micro-batches; "
            "`2F0` = stage 2 forward of micro-batch 0 (B whole backward, I input gradient, W "
            "weight gradient); one row per unit of time, F = I = W = 1, B = 2\n",
            sched_kind_name(t->spec.kind), p, t->spec.v, t->stages, t->spec.m);
    fprintf(out, "  step |");
    for (int q = 0; q < p; q++) fprintf(out, " rank %-*d", width - 4, q);
    fprintf(out, "\n");
    for (int u = 0; u < rows; u++) {
        fprintf(out, "  %4d |", u);
        for (int q = 0; q < p; q++) {
            const char *s = cell + ((size_t)u * p + q) * W;
            fprintf(out, " %-*s", width, s[0] ? s : ".");
        }
        fprintf(out, "\n");
    }
    fprintf(out,
            "  makespan %d units, bubble %.4f; activations held at most (stage, micro-batch "
            "pairs):",
            rows, r.bubble);
    for (int q = 0; q < p; q++) fprintf(out, " %d", r.peak[q]);
    fprintf(out, "; %lld messages\n", (long long)r.sends);
    free(cell);
    sched_result_free(&r);
    return 0;
}

void sched_print_lists(FILE *out, const sched_table *t) {
    char s[48];
    for (int q = 0; q < t->spec.p; q++) {
        fprintf(out, "  rank %d:", q);
        for (int64_t k = t->off[q]; k < t->off[q + 1]; k++)
            fprintf(out, " %s", sched_action_str(&t->act[k], s, sizeof s));
        fprintf(out, "\n");
    }
}
