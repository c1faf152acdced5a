/* model_moe_cp: a MoE block's routing under a context axis C (model_extents.cp_n > 1), where the
 * model's sequences are pieces of the training sequences (the zigzag split's two chunks, or the
 * contiguous split's one run; plan_cp.c) and the other pieces of each sequence are on the other
 * ranks of C.
 *
 * The balance loss and the capacity are defined per training sequence (model_moe.c), so each
 * piece's router statistics are made whole over C before the plan (the hook moe_cp_sum):
 *  - f_e (the share of the sequence's T·k slots sent to e) and P_e (e's mean probability over
 *    its T tokens) from the sequence's counts and probability sums, added over its pieces in
 *    sequence order: the same numbers on every rank of C, which the tally and the balance loss's
 *    gradient read (gbal) instead of the piece's own;
 *  - the capacity's counters at the piece's start: the slots the router sent to each expert from
 *    the sequence's tokens before the piece (the chunks before it in sequence order, wherever
 *    they live), capped at the capacity. A slot (t, j) is kept iff fewer than cap earlier slots of
 *    its sequence chose its expert, i.e. iff min(earlier choices, cap) < cap: so counting the
 *    earlier pieces' choices, not their kept slots, gives the 1-rank plan's drops exactly. */
#include <string.h>

#include "kernels/moe.h"
#include "train/model/model_impl.h"

float *moe_cp_carve(const model *m, carver *c, int64_t groups) {
    return m->loc.cp_n > 1 ? carve(c, groups * 2 * m->s.moe.E) : NULL;
}

double *moe_cp_carve_scratch(const model *m, carver *c) {
    return m->loc.cp_n > 1 ? (double *)(void *)carve(c, 2 * m->Bl * 3 * m->s.moe.E) : NULL;
}

void moe_cp_plan(model *m, layer_act *A, int64_t BT, int64_t G) {
    const int64_t E = m->s.moe.E, k = m->s.moe.k, n = BT / G;
    double *rec = m->ms.cprec;
    for (int64_t g = 0; g < n; g++) { /* the piece's choices and probability sums */
        double *r = rec + g * 3 * E;
        memset(r, 0, (size_t)(2 * E) * sizeof *r);
        for (int64_t i = g * G * k; i < (g + 1) * G * k; i++) r[A->idx[i]] += 1.0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t t = g * G; t < (g + 1) * G; t++) r[E + e] += A->prob[t * E + e];
    }
    m->hk.moe_cp_sum(m->hk.ctx, m, rec, n, E);
    double Tk = 0; /* a sequence's slots, T·k (the model's T is a piece's) */
    for (int64_t e = 0; e < E; e++) Tk += rec[e];
    model_shape whole = m->s;
    whole.T = (int64_t)Tk / k;
    const int64_t cap = model_moe_capacity(&whole);
    for (int64_t g = 0; g < n; g++) {
        const double *r = rec + g * 3 * E;
        for (int64_t e = 0; e < E; e++) { /* as kern_router_balance rounds them on one rank */
            A->gbal[g * 2 * E + e] = (float)r[e] / (float)Tk;
            A->gbal[g * 2 * E + E + e] = (float)(r[E + e] / (Tk / (double)k));
            const double before = r[2 * E + e];
            A->cnt[g * E + e] =
                cap > 0 ? (int32_t)(before < (double)cap ? before : (double)cap) : 0;
        }
    }
    kern_moe_plan(A->pos, A->src, A->offs, A->kept, A->cnt, A->idx, NULL, BT, E, k, G, E, cap);
}
