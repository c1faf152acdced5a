/* calc_pipe: the calculator's pipelines. See calc.h.
 *
 * How a pipelined step is priced (not in the book, which names microbatching and the split of
 * the dX and dW matmuls as the remedies for the bubble and gives no formula). The P ranks of the
 * pipeline axis run S = P·v stages of L/S layers each. One micro-batch (b/M tokens of the data
 * shard, b = B/X) costs on stage s:
 *   F_s = (L/S)·T_fwd/M, B_s = (L/S)·T_bwd/M, plus the head's T_fwd/M and T_bwd/M on the last
 *   stage (the unembedding and loss; the embedding lookup on stage 0 is free),
 * with T_fwd, T_bwd the plan's phase times of one layer for the whole shard, max(T_math, T_comms)
 * (overlapped) or T_math + T_comms (serial). A split backward gives I_s = W_s = B_s/2: the input-
 * and weight-gradient matmuls each do 2·params·tokens FLOPs. The boundary between two stages
 * carries one micro-batch's activations forward and its gradient back, [b/M, D_Y] in
 * act-bytes each: one hop, T_p2p = max(T_min, V/W_oneway) (the cost model's ppermute). The
 * schedule's table (calc/schedule.h) is simulated with these costs; its makespan is the step.
 * r->bubble = step / the busiest rank's compute. The activations held are the schedule's peak
 * (stage, micro-batch) pairs, each 1/(M·v) of the chip's whole-batch activations.
 *
 * Where pipelining over the axis beats the other roles (the book: pipelining dominates on GPUs
 * beyond one NVLink domain, where links are slow): the same plan with the axis joining the data
 * axes under ZeRO-3 (FSDP) and joining the tensor axes (TP), each priced by calc_compute. */
#include "calc/calc.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

/* The virtual stages schedule k runs with in this plan: the plan's v for the plan's schedule
 * (or for interleaved when v ≥ 2 was given), else k's own. */
static int v_of(const calc_spec *s, sched_kind k) {
    if (k == s->schedule && s->virtual_stages > 0) return s->virtual_stages;
    if (k == SCHED_INTERLEAVED && s->virtual_stages >= 2) return s->virtual_stages;
    const sched_spec d = {k, 2, 0, 1, 0};
    return sched_spec_v(&d);
}

static sched_spec spec_of(const calc_spec *s, const calc_result *r, sched_kind k, int v) {
    return (sched_spec){k, (int)r->P, v, s->microbatches, s->shape.L};
}

int calc_pipe_check(const calc_spec *s, const calc_result *r, char *err, size_t errlen) {
    if (r->P <= 1 && s->virtual_stages <= 1) return 0;
    const sched_spec sp = spec_of(s, r, s->schedule, s->virtual_stages);
    return sched_check(&sp, err, errlen);
}

/* Per-stage costs of one micro-batch into c (arrays of S in buf[4·S]). */
static void stage_costs(const calc_spec *s, const calc_result *r, int S, int serial, double *buf,
                        sched_costs *c) {
    double ph[2][2];
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 2; k++) {
            const calc_phase *p = &r->phase[g][k];
            ph[g][k] = serial                  ? p->t_math + p->t_comm
                       : p->t_math > p->t_comm ? p->t_math
                                               : p->t_comm;
        }
    const double M = s->microbatches, chunk = (double)s->shape.L / S;
    double *f = buf, *b = buf + S, *i = buf + 2 * S, *w = buf + 3 * S;
    for (int st = 0; st < S; st++) {
        f[st] = (chunk * ph[0][0] + (st == S - 1 ? ph[1][0] : 0)) / M;
        b[st] = (chunk * ph[0][1] + (st == S - 1 ? ph[1][1] : 0)) / M;
        i[st] = w[st] = b[st] / 2;
    }
    *c = (sched_costs){0, 0, 0, 0, r->t_p2p, f, b, i, w};
}

/* Simulates schedule k with v chunks per rank: the row (t_step, bubble, peak, sends; mem_acts is
 * the caller's), and in *busy the busiest rank's compute. serial: the serial phase costs. */
static int simulate(const calc_spec *s, const calc_result *r, sched_kind k, int v, int serial,
                    calc_sched_row *row, double *busy, char *err, size_t errlen) {
    const sched_spec sp = spec_of(s, r, k, v);
    sched_table t;
    memset(row, 0, sizeof *row);
    row->v = v;
    if (sched_init(&t, &sp, row->why, sizeof row->why) < 0) return 0;
    double *buf = malloc(sizeof(double) * 4 * (size_t)t.stages);
    sched_costs c, unit = sched_unit_costs();
    sched_result sr, su;
    int rc = buf ? 0 : errmsg_fail(err, errlen, "pipeline pricing: out of memory");
    if (rc == 0) stage_costs(s, r, t.stages, serial, buf, &c);
    if (rc == 0 && sched_simulate(&t, &c, &sr, err, errlen) < 0) rc = -1;
    if (rc == 0 && sched_simulate(&t, &unit, &su, err, errlen) < 0) {
        sched_result_free(&sr);
        rc = -1;
    }
    if (rc == 0) {
        row->ok = 1;
        row->t_step = sr.makespan;
        row->bubble = sr.bubble;
        row->bubble_unit = su.bubble;
        row->peak = sr.peak_max;
        row->sends = (double)sr.sends / r->P;
        *busy = 0;
        for (int q = 0; q < t.spec.p; q++) *busy = sr.busy[q] > *busy ? sr.busy[q] : *busy;
        sched_result_free(&sr);
        sched_result_free(&su);
    }
    free(buf);
    sched_free(&t);
    return rc;
}

int calc_pipe_price(const calc_spec *s, calc_result *r, double *t_max, double *t_sum, char *err,
                    size_t errlen) {
    const double M = s->microbatches, b = s->tokens / r->X;
    const double v_act = s->act_bytes * b / M * (double)s->shape.D / r->Y;
    int sizes[1] = {(int)r->P}, wraps[1] = {0};
    r->t_p2p =
        cost_collective(COST_OP_PPERMUTE, &s->link, sizes, wraps, 1, MESH_ALG_DEFAULT, v_act, NULL);
    const double acts_chip = r->mem_acts; /* the whole shard's activations of L/P layers */
    double busy = 0, busy_k;
    for (int k = 0; k < SCHED_N_KINDS; k++) {
        calc_sched_row *row = &r->sched[k];
        if (simulate(s, r, (sched_kind)k, v_of(s, (sched_kind)k), 0, row, &busy_k, err, errlen) < 0)
            return -1;
        row->mem_acts = acts_chip * row->peak / (M * row->v);
        if (k == (int)s->schedule) busy = busy_k;
    }
    const calc_sched_row *own = &r->sched[s->schedule];
    if (!own->ok) return errmsg_fail(err, errlen, "%s", own->why);
    calc_sched_row serial;
    if (simulate(s, r, s->schedule, own->v, 1, &serial, &busy_k, err, errlen) < 0) return -1;
    *t_max = own->t_step;
    *t_sum = serial.t_step;
    r->bubble = own->t_step / busy;
    r->pipe_bubble = own->bubble;
    r->pipe_peak = own->peak;
    r->t_pipe = 2 * M * own->v * r->t_p2p;
    r->act_mb_chunk = acts_chip / (M * own->v);
    r->mem_total += own->mem_acts - r->mem_acts;
    r->mem_acts = own->mem_acts;
    r->fits = r->mem_total <= r->hbm;
    return 0;
}

/* ------------------------------------------------------------------ printing */

void calc_print_pipe(FILE *out, const calc_spec *s, const calc_result *r) {
    char axis[8];
    calc_axes_str(s, CALC_ROLE_PIPE, axis, sizeof axis);
    const calc_sched_row *own = &r->sched[s->schedule];
    fprintf(out,
            "\npipeline over %s: P = %.0f ranks x v = %d = %.0f stages of %.4g layers, M = %d "
            "micro-batches, schedule %s\n",
            axis, r->P, own->v, r->P * own->v, (double)s->shape.L / (r->P * own->v),
            s->microbatches, sched_kind_name(s->schedule));
    fprintf(out,
            "  p2p per boundary and micro-batch: [b/M, D_Y] = %.4g MB one hop, max(T_min, V/W) = "
            "%.4g ms each way; %.0f sends per rank per step, %.4g ms in all\n",
            s->act_bytes * s->tokens / r->X / s->microbatches * (double)s->shape.D / r->Y / 1e6,
            r->t_p2p * 1e3, own->sends, r->t_pipe * 1e3);
    fprintf(out,
            "  simulated step %.4g ms, busiest rank computes %.4g ms: bubble %.1f%% of the step "
            "(mean idle), factor %.4f\n",
            own->t_step * 1e3, own->t_step / r->bubble * 1e3, own->bubble * 100, r->bubble);
    fprintf(out, "  %-13s %2s %8s %8s %11s %5s %13s %6s\n", "schedule", "v", "bubble", "unit",
            "step ms", "held", "act GB/chip", "sends");
    for (int k = 0; k < SCHED_N_KINDS; k++) {
        const calc_sched_row *w = &r->sched[k];
        fprintf(out, "%s %-13s %2d ", k == (int)s->schedule ? "*" : " ",
                sched_kind_name((sched_kind)k), w->v);
        if (!w->ok)
            fprintf(out, "refused: %s\n", w->why);
        else
            fprintf(out, "%8.4f %8.4f %11.4g %5.0f %13.4g %6.0f\n", w->bubble, w->bubble_unit,
                    w->t_step * 1e3, w->peak, w->mem_acts / 1e9, w->sends);
    }
    fprintf(out, "  (unit: the bubble with F = I = W = 1 and no p2p time, the closed forms: gpipe "
                 "and 1f1b (p-1)/(m+p-1), interleaved (p-1)/(v m+p-1), zb-h1 (p-1)/(3m+p-1) for "
                 "m >= p; held: (stage, micro-batch) pairs, each 1/v of a micro-batch)\n");
    const char *best = "pipelining";
    double t_best = r->t_step_max;
    fprintf(out, "  axis %s as: pipeline %.4g ms a step (bubble %.4g ms, p2p %.4g ms)", axis,
            r->t_step_max * 1e3, (own->t_step - own->t_step / r->bubble) * 1e3, r->t_pipe * 1e3);
    for (int a = 0; a < 2; a++) {
        const calc_axis_choice *c = &r->alt[a];
        if (!c->ok) {
            fprintf(out, "; %s: refused (%s)", c->label, c->why);
            continue;
        }
        fprintf(out, "; %s %.4g ms (comm %.4g ms)", c->label, c->t_step * 1e3, c->t_comm * 1e3);
        if (c->t_step < t_best) t_best = c->t_step, best = a == 0 ? "FSDP" : "TP";
    }
    fprintf(out, " -> %s is fastest\n", best);
}

void calc_print_pipe_grid(FILE *out, const calc_spec *s, const calc_result *r) {
    enum { MAX_ROWS = 400 };
    const calc_sched_row *own = &r->sched[s->schedule];
    if (r->P <= 1 || !own->ok) return;
    /* the unit-cost makespan: the work 3·v·M over the busy fraction */
    const double rows = 3.0 * own->v * s->microbatches / (1 - own->bubble_unit);
    fprintf(out, "\n");
    if (rows > MAX_ROWS) {
        fprintf(out,
                "schedule %s: the grid would take %.0f rows (more than %d); fewer "
                "--microbatches show it\n",
                sched_kind_name(s->schedule), rows, MAX_ROWS);
        return;
    }
    const sched_spec sp = spec_of(s, r, s->schedule, own->v);
    sched_table t;
    char err[256];
    if (sched_init(&t, &sp, err, sizeof err) < 0 || sched_print_grid(out, &t, err, sizeof err) < 0)
        fprintf(out, "schedule grid: %s\n", err);
    sched_free(&t);
}
