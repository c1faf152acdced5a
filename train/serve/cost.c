/* cost: a step plan's roofline figures (see cost.h). */
#include "train/serve/cost.h"

/* The figures of p's items of replicas [lo, hi), at tensor degree nY. */
static gen_step cost_of(const model_shape *s, int64_t nY, int64_t kv_groups, int64_t kv_elem_bytes,
                        int64_t w_elem_bytes, const batch_plan *p, int32_t lo, int32_t hi) {
    const double Kr = (double)(s->K >= nY ? s->K : nY); /* kv heads' weights over the replica */
    const double Kc = Kr / (double)kv_groups;           /* their copies in the cache */
    const double layer_mm = (double)s->D * ((double)(s->N + s->K * 2) * (double)s->H) +
                            (double)(s->N * s->H * s->D) + 3.0 * (double)(s->D * s->F);
    const double layer_read = (double)s->D * ((double)s->N + 2.0 * Kr) * (double)s->H +
                              (double)(s->N * s->H * s->D) + 3.0 * (double)(s->D * s->F);
    const double gains = (2.0 * (double)s->L + 1.0) * (double)s->D * (double)nY; /* fp32 */
    const double weights =
        (double)w_elem_bytes * ((double)s->L * layer_read + (double)(s->D * s->V)) + 4.0 * gains;
    gen_step st = {0, 0, 0, 0, 0};
    for (int32_t j = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        if (it->replica < lo || it->replica >= hi) continue;
        int first = 1; /* the replica's first item: it reads the replica's weights */
        for (int32_t i = 0; i < j && first; i++) first = p->items[i].replica != it->replica;
        st.p_bytes += first ? weights : 0;
        const double n = (double)(it->n + it->draft); /* the target's rows (drafts scored) */
        st.rows += n;
        /* positions attended: Σ_{i<n} (p0 + i + 1) */
        const double att = n * (double)it->p0 + n * (n + 1) / 2.0;
        st.flops += 4.0 * att * (double)(s->L * s->N * s->H);
        st.kv_bytes += (att + n) * 2.0 * (double)s->L * Kc * (double)s->H * (double)kv_elem_bytes;
        if (it->sample) st.flops += 2.0 * (double)(s->D * s->V) * (double)(1 + it->draft);
    }
    st.p_bytes += 4.0 * st.rows * (double)s->D; /* the embedding rows */
    st.flops += 2.0 * st.rows * (double)s->L * layer_mm;
    return st;
}

gen_step serve_plan_cost(const model_shape *s, int64_t nY, int64_t kv_groups, int64_t kv_elem_bytes,
                         int64_t w_elem_bytes, const batch_plan *p) {
    return cost_of(s, nY, kv_groups, kv_elem_bytes, w_elem_bytes, p, 0, INT32_MAX);
}

gen_step serve_plan_cost_sides(const model_shape *s, const serve_side side[2],
                               int32_t prefill_replicas, int64_t kv_elem_bytes,
                               int64_t w_elem_bytes, const batch_plan *p) {
    const gen_step a = cost_of(s, side[0].nY, side[0].kv_groups, kv_elem_bytes, w_elem_bytes, p, 0,
                               prefill_replicas),
                   b = cost_of(s, side[1].nY, side[1].kv_groups, kv_elem_bytes, w_elem_bytes, p,
                               prefill_replicas, INT32_MAX);
    return (gen_step){0, a.rows + b.rows, a.p_bytes + b.p_bytes, a.kv_bytes + b.kv_bytes,
                      a.flops + b.flops};
}
