/* calc_search: enumerates the shardings of a topology (or of every topology of a chip count),
 * ranks them by predicted step time and prints the best as a table, CSV or JSON. See calc.h. */
#include "calc/calc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

/* One enumerated sharding before its full result is kept. */
typedef struct {
    calc_spec s;
    double t, t_sum, mem;
    int fits, idx;
} entry;

static int near(double a, double b) {
    return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b));
}

/* Groups equal shardings (ZeRO stage, step time, memory) together, in enumeration order. */
static int dedup_cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->s.zero != y->s.zero) return x->s.zero - y->s.zero;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->mem != y->mem) return x->mem < y->mem ? -1 : 1;
    return x->idx - y->idx;
}

/* Fitting ones first, then by overlapped step time; ties (compute-bound shardings all take
 * T_math) by serial step time, the comms there are to hide; then in enumeration order. */
static int rank_cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (!near(x->t, y->t)) return x->t < y->t ? -1 : 1;
    if (x->t_sum != y->t_sum) return x->t_sum < y->t_sum ? -1 : 1;
    return x->idx - y->idx;
}

/* Topologies of `chips` as sorted sizes a >= b >= c that fit the chip's pod; axes of 1 dropped. */
static int topologies(const calc_spec *s, int chips, int (*out)[COST_MAX_AXES], int *n_axes,
                      int cap) {
    int n = 0;
    char err[128];
    for (int a = chips; a >= 1; a--) {
        if (chips % a) continue;
        for (int b = a; b >= 1; b--) {
            if ((chips / a) % b) continue;
            int c = chips / a / b, sz[COST_MAX_AXES] = {a, b, c}, k = 0;
            if (c > b || (s->chip.dims == 2 && c != 1)) continue;
            for (int i = 0; i < COST_MAX_AXES; i++)
                if (sz[i] > 1) out[n][k++] = sz[i];
            if (k == 0) out[n][k++] = 1;
            if (cost_topology_check(&s->chip, out[n], k, err, sizeof err) < 0) continue;
            n_axes[n] = k;
            if (++n == cap) return n;
        }
    }
    return n;
}

enum { MAX_OPT = 64 };

/* The roles axis of size n can take: -1 data, 0 tensor (whole axis), k > 1 a tensor block of k
 * with data on the strided rest. */
static int axis_options(int n, int whole_axes, int *opt) {
    int c = 0;
    opt[c++] = -1;
    opt[c++] = 0;
    for (int k = 2; !whole_axes && k < n && c < MAX_OPT; k++)
        if (n % k == 0) opt[c++] = k;
    return c;
}

/* Appends every sharding of s's topology to *e (growing it), numbering them from *idx. */
static int enumerate(const calc_spec *topo, int whole_axes, entry **e, int *n, int *cap, int *idx) {
    int opt[COST_MAX_AXES][MAX_OPT], n_opt[COST_MAX_AXES], pick[COST_MAX_AXES] = {0, 0, 0};
    const int na = topo->n_axes;
    char err[256];
    calc_result r;
    for (int i = 0; i < na; i++) n_opt[i] = axis_options(topo->sizes[i], whole_axes, opt[i]);
    for (;;) {
        calc_spec s = *topo;
        s.data_mask = s.tensor_mask = 0;
        for (int i = 0; i < na; i++) {
            const int o = opt[i][pick[i]];
            s.tensor_block[i] = o > 0 ? o : 0;
            if (o >= 0) s.tensor_mask |= 1 << i;
            if (o != 0) s.data_mask |= 1 << i;
        }
        for (int z = 0; z <= 3; z++) {
            s.zero = z;
            if (s.data_mask == 0 && z > 0) continue;
            if (calc_compute(&s, &r, err, sizeof err) < 0) continue;
            if (*n == *cap) {
                const int nc = *cap ? 2 * *cap : 1024;
                entry *ne = realloc(*e, sizeof **e * (size_t)nc);
                if (!ne) return -1;
                *e = ne;
                *cap = nc;
            }
            (*e)[(*n)++] = (entry){s, r.t_step_max, r.t_step_sum, r.mem_total, r.fits, (*idx)++};
        }
        int i = na - 1; /* the last axis varies fastest: z's splits come before x's */
        while (i >= 0 && ++pick[i] == n_opt[i]) pick[i--] = 0;
        if (i < 0) return 0;
    }
}

calc_candidate *calc_search_list(const calc_spec *base, const calc_search_opt *o, int *n_out) {
    enum { MAX_TOPO = 256 };
    int topo[MAX_TOPO][COST_MAX_AXES], topo_n[MAX_TOPO], n_topo, n = 0, cap = 0, idx = 0;
    entry *e = NULL;
    char err[256];
    *n_out = 0;
    if (o->chips > 0) {
        n_topo = topologies(base, o->chips, topo, topo_n, MAX_TOPO);
    } else {
        n_topo = 1;
        topo_n[0] = base->n_axes;
        memcpy(topo[0], base->sizes, sizeof topo[0]);
    }
    for (int t = 0; t < n_topo; t++) {
        calc_spec s = *base;
        s.pipe_mask = 0;
        s.microbatches = 1;
        memset(s.tensor_block, 0, sizeof s.tensor_block);
        if (o->chips > 0 && calc_spec_set_topology(&s, topo[t], topo_n[t], err, sizeof err) < 0)
            continue;
        if (enumerate(&s, o->whole_axes, &e, &n, &cap, &idx) < 0) {
            free(e);
            return NULL;
        }
    }
    if (n > 1) qsort(e, (size_t)n, sizeof *e, dedup_cmp);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (kept == 0 || e[kept - 1].s.zero != e[i].s.zero || !near(e[kept - 1].t, e[i].t) ||
            !near(e[kept - 1].mem, e[i].mem))
            e[kept++] = e[i];
    if (kept > 1) qsort(e, (size_t)kept, sizeof *e, rank_cmp);
    calc_candidate *c = malloc(sizeof *c * (size_t)(kept > 0 ? kept : 1));
    if (!c) {
        free(e);
        return NULL;
    }
    for (int i = 0; i < kept; i++) {
        c[i].s = e[i].s;
        calc_compute(&c[i].s, &c[i].r, err, sizeof err);
    }
    free(e);
    *n_out = kept;
    return c;
}

static void search_print_table(FILE *out, const calc_spec *base, const calc_search_opt *o,
                               const calc_candidate *c, int n) {
    fprintf(out,
            "search: %d shardings of %s chips for B = %.0f tokens, ranked by overlapped step "
            "time (fitting ones first)%s\n",
            n, o->chips > 0 ? "the" : "this topology's", base->tokens,
            o->whole_axes ? "; whole axes only"
                          : "; z:4 = tensor on contiguous blocks of 4 of z, z/4 = data on the "
                            "strided rest");
    if (base->pods > 1)
        fprintf(out,
                "pods: %d, each one of these topologies, %.0f tokens per pod, data parallel "
                "across them over DCN\n",
                base->pods, base->tokens / base->pods);
    fprintf(out, "%4s %-10s %-12s %5s %4s %-8s %4s %11s %11s %6s %9s %s\n", "rank", "topology",
            "data", "X", "zero", "tensor", "Y", "step max ms", "step sum ms", "MFU", "GB/chip",
            "fits");
    for (int i = 0; i < n && i < o->top; i++) {
        char topo_s[32], d[16], tn[16];
        const calc_spec *s = &c[i].s;
        const calc_result *r = &c[i].r;
        calc_topology_str(s, topo_s, sizeof topo_s);
        calc_axes_label(s, CALC_ROLE_DATA, d, sizeof d);
        calc_axes_label(s, CALC_ROLE_TENSOR, tn, sizeof tn);
        fprintf(out, "%4d %-10s %-12s %5.0f %4d %-8s %4.0f %11.2f %11.2f %5.1f%% %9.2f %s\n", i + 1,
                topo_s, d, r->X, s->zero, tn, r->Y, r->t_step_max * 1e3, r->t_step_sum * 1e3,
                r->mfu * 100, r->mem_total / 1e9, r->fits ? "yes" : "no");
    }
}

int calc_search(FILE *out, const calc_spec *base, const calc_search_opt *o) {
    int n;
    calc_candidate *c = calc_search_list(base, o, &n);
    if (!c) return -1;
    const int shown = n < o->top ? n : o->top;
    if (n == 0 || !out)
        ; /* nothing to print (a search with no candidate: see calc_search_explain) */
    else if (o->format == CALC_FORMAT_CSV)
        calc_search_print_csv(out, c, shown);
    else if (o->format == CALC_FORMAT_JSON)
        calc_search_print_json(out, c, shown);
    else
        search_print_table(out, base, o, c, n);
    free(c);
    return n;
}

/* The largest count below `chips` that has a slice fitting the pod (0 if none). */
static int nearest_fitting(const calc_spec *s, int chips) {
    int topo[1][COST_MAX_AXES], n_axes[1];
    for (int c = chips - 1; c >= 1; c--)
        if (topologies(s, c, topo, n_axes, 1) > 0) return c;
    return 0;
}

int calc_search_explain(const calc_spec *s, const calc_search_opt *o, char *err, size_t len) {
    int topo[1][COST_MAX_AXES], n_axes[1];
    const int *pod = s->chip.pod;
    if (o->chips > 0 && topologies(s, o->chips, topo, n_axes, 1) == 0) {
        int prime = o->chips > 1;
        for (int d = 2; prime && (long)d * d <= o->chips; d++) prime = o->chips % d != 0;
        char podstr[48];
        snprintf(podstr, sizeof podstr, s->chip.dims == 3 ? "%dx%dx%d" : "%dx%d", pod[0], pod[1],
                 pod[2]);
        const int near = nearest_fitting(s, o->chips);
        return errmsg_fail(err, len,
                           "--chips %d: no slice of %d chips fits the %s pod %s (at most %d axes, "
                           "each no longer than the pod's)%s; try a count that factors into the "
                           "pod, e.g. --chips %d",
                           o->chips, o->chips, s->chip.name, podstr, s->chip.dims,
                           prime ? ": the count is prime, so its only slice is one axis of that "
                                   "length"
                                 : "",
                           near);
    }
    /* Slices exist, so every sharding was rejected: show why the plainest one was. */
    calc_spec d = *s;
    calc_result r;
    char why[256] = "";
    if (o->chips > 0) calc_spec_set_topology(&d, topo[0], n_axes[0], why, sizeof why);
    d.tensor_mask = d.pipe_mask = 0;
    d.data_mask = (1 << d.n_axes) - 1;
    memset(d.tensor_block, 0, sizeof d.tensor_block);
    d.zero = 0;
    if (calc_compute(&d, &r, why, sizeof why) == 0)
        snprintf(why, sizeof why, "every sharding was rejected");
    return errmsg_fail(err, len, "search found no sharding that applies: %s", why);
}
