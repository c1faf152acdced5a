/* cost: the book's chip table, wraparound rules and collective cost model. See cost.h. */
#include "mesh/cost.h"
#include "mesh/names.h"

#include <stdio.h>
#include <string.h>

#include "mesh/errmsg.h"

/* The tpus chapter's table values (the canonical constants; the book's prose disagrees in places,
 * e.g. 2.5e12 B/s HBM for v5p). T_min = 1 µs on every chip (the tpus chapter's "per-hop ICI
 * latency"). */
/* clang-format off */
static const cost_chip chip_table[] = {
    {"v3", 1.4e14, 1.4e14, 32e9, 9.0e11, 1e11, 2e11, 1e-6, 2, {32, 32, 1}, {4, 2, 1}, 2,
     COST_WRAP_POD_EDGE32},
    {"v4p", 2.75e14, 2.75e14, 32e9, 1.2e12, 4.5e10, 9e10, 1e-6, 3, {16, 16, 16}, {2, 2, 1}, 2,
     COST_WRAP_CUBES},
    {"v5e", 1.97e14, 3.94e14, 16e9, 8.1e11, 4.5e10, 9e10, 1e-6, 2, {16, 16, 1}, {4, 2, 1}, 1,
     COST_WRAP_POD_EDGE16},
    {"v5p", 4.59e14, 9.18e14, 96e9, 2.8e12, 9e10, 1.8e11, 1e-6, 3, {16, 20, 28}, {2, 2, 1}, 2,
     COST_WRAP_CUBES},
    {"v6e", 9.2e14, 1.84e15, 32e9, 1.6e12, 9e10, 1.8e11, 1e-6, 2, {16, 16, 1}, {4, 2, 1}, 1,
     COST_WRAP_POD_EDGE16},
};
/* clang-format on */
#define N_CHIPS ((int)(sizeof chip_table / sizeof chip_table[0]))

int cost_chip_count(void) {
    return N_CHIPS;
}

const cost_chip *cost_chip_at(int i) {
    return i >= 0 && i < N_CHIPS ? &chip_table[i] : NULL;
}

const cost_chip *cost_chip_find(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "v4") == 0) name = "v4p";
    for (int i = 0; i < N_CHIPS; i++)
        if (strcmp(chip_table[i].name, name) == 0) return &chip_table[i];
    return NULL;
}

int cost_chip_per_host(const cost_chip *chip) {
    return chip->host[0] * chip->host[1] * chip->host[2];
}

double cost_chip_dcn_bw(const cost_chip *chip) {
    const int per_host = cost_chip_per_host(chip);
    return COST_DCN_PER_HOST / (per_host > 0 ? per_host : 1);
}

/* The tpus chapter. v5e/v6e: wraparound links exist only along a full pod edge of 16. v4p/v5p: a
 * slice made of whole 4x4x4 cubes (every axis a multiple of 4) wraps on every axis; sub-cube slices
 * (2x2x1, 2x2x2, 2x2x4) wrap on none — this reconciles the tpus footnote ("an axis that is a
 * multiple of 4") with the book's explicit 2x2x4 example. Axes of length 1 are not physical axes
 * and are skipped, so a 16x16 view of a v5p slice wraps. v3: the book only says "2D torus"; we
 * apply the rule of the other 2D-torus chips, scaled to v3's 32x32 pod: an axis wraps only if it
 * spans the whole pod edge (32). */
int cost_axis_wraps(const cost_chip *chip, const int *sizes, int n_axes, int axis) {
    if (axis < 0 || axis >= n_axes || sizes[axis] <= 1) return 0;
    switch (chip->wrap) {
    case COST_WRAP_POD_EDGE16:
        return sizes[axis] == 16;
    case COST_WRAP_POD_EDGE32:
        return sizes[axis] == 32;
    case COST_WRAP_CUBES:
        for (int i = 0; i < n_axes; i++)
            if (sizes[i] > 1 && sizes[i] % 4 != 0) return 0;
        return 1;
    case COST_WRAP_ALWAYS:
        return 1;
    case COST_WRAP_NEVER:
        return 0;
    }
    return 0;
}

static void sort_desc(int *a, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && a[j] > a[j - 1]; j--) {
            int t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

int cost_topology_check(const cost_chip *chip, const int *sizes, int n_axes, char *err,
                        size_t errlen) {
    int s[COST_MAX_AXES] = {1, 1, 1}, p[COST_MAX_AXES] = {1, 1, 1}, used = 0;
    if (n_axes < 1 || n_axes > COST_MAX_AXES) {
        return errmsg_fail(err, errlen, "a topology has 1 to %d axes, got %d", COST_MAX_AXES,
                           n_axes);
    }
    for (int i = 0; i < n_axes; i++) {
        if (sizes[i] < 1) {
            return errmsg_fail(err, errlen, "axis %d has size %d; sizes must be >= 1", i, sizes[i]);
        }
        if (sizes[i] > 1) s[used++] = sizes[i];
    }
    if (used > chip->dims) {
        return errmsg_fail(err, errlen, "%s is a %dD torus; the topology has %d axes longer than 1",
                           chip->name, chip->dims, used);
    }
    if (chip->pod[0] <= 0) return 0; /* unbounded (a host profile) */
    memcpy(p, chip->pod, sizeof p);
    sort_desc(s, COST_MAX_AXES);
    sort_desc(p, COST_MAX_AXES);
    for (int i = 0; i < COST_MAX_AXES; i++)
        if (s[i] > p[i]) {
            return errmsg_fail(err, errlen,
                               "the topology does not fit a %s pod (%dx%dx%d): an axis of %d "
                               "exceeds %d",
                               chip->name, chip->pod[0], chip->pod[1], chip->pod[2], s[i], p[i]);
        }
    return 0;
}

cost_link cost_chip_link(const cost_chip *chip) {
    return (cost_link){chip->ici_oneway, chip->hop_latency};
}

const char *cost_op_name(cost_op op) {
    static const char *names[] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll",
                                  "ppermute"};
    return op >= 0 && op < COST_OP_COUNT ? names[op] : "?";
}

static const char *const alg_names[MESH_ALG_COUNT] = {"default", "ring", "bidir", "seq",
                                                      "multi",   "mpi",  "direct"};

const char *mesh_alg_name(mesh_alg a) {
    return names_of(alg_names, MESH_ALG_COUNT, a);
}

int mesh_alg_parse(const char *s) {
    return names_find(alg_names, MESH_ALG_COUNT, s);
}

const char *cost_regime_name(cost_regime r) {
    switch (r) {
    case COST_REGIME_LATENCY:
        return "latency";
    case COST_REGIME_BANDWIDTH:
        return "bandwidth";
    case COST_REGIME_COMPUTE:
        return "compute-hidden";
    }
    return "?";
}

/* ---- the model ----
 * A prediction is a sum of stages; a stage overlaps its hop latency with its transfer, so it
 * costs max(latency, bytes/bandwidth) (the sharding chapter's "latency-bound regime"). */
typedef struct {
    double lat, bw, seconds;
    int hops;
} stage;

static void stage_add(stage *acc, double lat, double bw, int hops) {
    acc->lat += lat;
    acc->bw += bw;
    acc->seconds += lat > bw ? lat : bw;
    acc->hops += hops;
}

/* Effective bandwidth and hops of an AllGather on one ring of n chips: a bidirectional ring on a
 * wrapping axis moves V at W = 2·w_oneway in ⌈n/2⌉ hops; one direction (or an open line, which the
 * book charges the same, sharding pop quiz 2) moves (n−1)/n·V at w_oneway in n−1 hops. `a2a`
 * scales the bytes for an AllToAll (¼ bidirectional, ½ one direction). */
static void ring_rate(int n, int bidir, double w, int a2a, double *rate, int *hops) {
    if (bidir) {
        *rate = 2.0 * w / (a2a ? 0.25 : 1.0);
        *hops = (n + 1) / 2;
    } else {
        *rate = w * n / (n - 1) / (a2a ? 0.5 : 1.0);
        *hops = n - 1;
    }
}

static int valid(const cost_link *link, const int *sizes, int n_axes, double V) {
    if (!link || link->w_oneway <= 0 || link->hop_latency < 0 || V < 0) return 0;
    if (n_axes < 0 || n_axes > COST_MAX_AXES || (n_axes > 0 && !sizes)) return 0;
    for (int i = 0; i < n_axes; i++)
        if (sizes[i] < 1) return 0;
    return 1;
}

/* Stride of axis i (see cost_collective_strided): 1 when strides is NULL. */
static int stride_of(const int *strides, int i) {
    return strides && strides[i] > 1 ? strides[i] : 1;
}

double cost_direct_link_load(int n, int wraps) {
    if (n <= 1) return 0;
    if (!wraps) return (double)(n / 2) * (double)((n + 1) / 2);
    double l = 0;
    for (int d = 1; d <= (n - 1) / 2; d++) l += d;
    return n % 2 == 0 ? l + n / 4.0 : l;
}

int cost_direct_farthest(int n, int wraps) {
    return n <= 1 ? 0 : wraps ? n / 2 : n - 1;
}

/* AllGather (or AllToAll when a2a) of V bytes; ReduceScatter is the same by symmetry. A strided
 * axis (stride k) runs at w_oneway/k per link with k hops of T_min per ring step. */
/* MULTI: all axes at once. The book's V/(W·n_axes) (sharding chapter), summing the axes' link
 * bandwidths: W = 2·w_oneway on a wrapping axis, W_uni = w_oneway on an open one (pop quiz 2
 * charges it one direction). Like the book's bidirectional formula it drops the (N−1)/N of the
 * data a rank actually receives — except when an axis is open, where the book keeps that factor
 * (pop quiz 2: (|X|−1)/|X|·V/W_uni), so a gather does too, once, over all N = Π|X_i| chips.
 * Folding it into each open axis's rate instead (w·n/(n−1), right for ONE axis) counts it once
 * per axis: on a 2x2 slice, whose axes of 2 never wrap, that predicted V/(4w) while each rank
 * receives 3V/4 over one link per axis, 3V/(8w) (measured: test_link, meshbench). An AllToAll is
 * different: MULTI runs one part of V per axis, each part axis by axis (SEQ, whose stage over
 * axis i is an AllToAll of V·n_i/N at that axis's ring_rate) in a rotated order, all parts at
 * once, so it takes SEQ's time over n_axes: Σ_i (V·n_i/N)/rate_i / n_axes (2x2: V/(8w), as
 * measured on emulated links; 4x4x4 v5p, 16 MiB: 93 µs, simulated 102 µs, docs/simpod.md). */
static void multi_cost(stage *st, const cost_link *l, const int *sizes, const int *wraps,
                       const int *strides, int n_axes, double V, int a2a, int prod, int all_wrap) {
    double rate_sum = 0, rate, a2a_time = 0;
    int hop_sum = 0, hops, n_used = 0;
    for (int i = 0; i < n_axes; i++) {
        if (sizes[i] <= 1) continue;
        int w = wraps && wraps[i], k = stride_of(strides, i);
        ring_rate(sizes[i], w, l->w_oneway / k, a2a, &rate, &hops);
        rate_sum += (w ? 2.0 : 1.0) * l->w_oneway / k;
        a2a_time += V * sizes[i] / prod / rate;
        hop_sum += k * hops;
        n_used++;
    }
    double frac = all_wrap ? 1.0 : (prod - 1.0) / prod;
    const double t_bw = a2a ? a2a_time / n_used : frac * V / rate_sum;
    stage_add(st, l->hop_latency * hop_sum, t_bw, hop_sum);
}

/* DIRECT: see cost.h and mesh/coll_direct.c. */
static void direct_cost(stage *st, const cost_link *l, const int *sizes, const int *wraps,
                        int n_axes, double V, int a2a, int prod) {
    const double b = a2a ? V / ((double)prod * prod) : V / prod;
    double worst = 0;
    int hop_sum = 0;
    for (int i = 0; i < n_axes; i++) {
        const int n = sizes[i], w = wraps && wraps[i];
        if (n <= 1) continue;
        const double t = (double)(prod / n) * cost_direct_link_load(n, w) * b / l->w_oneway;
        worst = t > worst ? t : worst;
        hop_sum += cost_direct_farthest(n, w);
    }
    stage_add(st, l->hop_latency * hop_sum, worst, hop_sum);
}

/* SEQ: gather, last axis first, the per-device array grows to V; scatter, first axis first, it
 * shrinks from V; AllToAll, each stage an AllToAll of n_i blocks of V/prod. */
static void seq_cost(stage *st, const cost_link *l, const int *sizes, const int *wraps,
                     const int *strides, int n_axes, double V, int a2a, int scatter_order,
                     int prod) {
    double rate;
    int done = 1, hops;
    for (int k = 0; k < n_axes; k++) {
        int i = scatter_order ? k : n_axes - 1 - k;
        if (sizes[i] <= 1) continue;
        double Vs;
        if (a2a)
            Vs = V * sizes[i] / prod;
        else if (scatter_order)
            Vs = V / done;
        else
            Vs = V * done * sizes[i] / prod;
        done *= sizes[i];
        const int stride = stride_of(strides, i);
        ring_rate(sizes[i], wraps && wraps[i], l->w_oneway / stride, a2a, &rate, &hops);
        stage_add(st, l->hop_latency * stride * hops, Vs / rate, stride * hops);
    }
}

static stage gather_cost(const cost_link *l, const int *sizes, const int *wraps, const int *strides,
                         int n_axes, mesh_alg alg, double V, int a2a, int scatter_order) {
    stage st = {0, 0, 0, 0};
    int n_used = 0, prod = 1, all_wrap = 1, kmax = 1;
    for (int i = 0; i < n_axes; i++)
        if (sizes[i] > 1) {
            n_used++;
            prod *= sizes[i];
            all_wrap &= wraps && wraps[i] ? 1 : 0;
            kmax = stride_of(strides, i) > kmax ? stride_of(strides, i) : kmax;
        }
    if (n_used == 0) return st;
    if (alg == MESH_ALG_DEFAULT || alg == MESH_ALG_MPI) /* the book's model */
        alg = n_used > 1 ? MESH_ALG_MULTI : MESH_ALG_BIDIR;
    double rate;
    int hops;
    switch (alg) {
    case MESH_ALG_RING:
    case MESH_ALG_BIDIR:
        /* One ring through all prod chips; it closes only if every axis wraps. Its slowest
         * step (the largest stride) paces every step. */
        ring_rate(prod, alg == MESH_ALG_BIDIR && all_wrap, l->w_oneway / kmax, a2a, &rate, &hops);
        stage_add(&st, l->hop_latency * kmax * hops, V / rate, kmax * hops);
        break;
    case MESH_ALG_MULTI:
        multi_cost(&st, l, sizes, wraps, strides, n_axes, V, a2a, prod, all_wrap);
        break;
    case MESH_ALG_DIRECT:
        direct_cost(&st, l, sizes, wraps, n_axes, V, a2a, prod);
        break;
    case MESH_ALG_SEQ:
        seq_cost(&st, l, sizes, wraps, strides, n_axes, V, a2a, scatter_order, prod);
        break;
    default:
        break;
    }
    return st;
}

double cost_collective(cost_op op, const cost_link *link, const int *sizes, const int *wraps,
                       int n_axes, mesh_alg alg, double bytes_V, cost_est *est) {
    return cost_collective_strided(op, link, sizes, wraps, NULL, n_axes, alg, bytes_V, est);
}

double cost_collective_strided(cost_op op, const cost_link *link, const int *sizes,
                               const int *wraps, const int *strides, int n_axes, mesh_alg alg,
                               double bytes_V, cost_est *est) {
    if (!valid(link, sizes, n_axes, bytes_V) || alg < 0 || alg >= MESH_ALG_COUNT) return -1;
    int n_used = 0, axis = -1;
    for (int i = 0; i < n_axes; i++) {
        if (strides && strides[i] < 1) return -1;
        if (sizes[i] > 1) {
            n_used++;
            axis = i;
        }
    }
    stage st = {0, 0, 0, 0};
    switch (op) {
    case COST_OP_ALL_GATHER:
        st = gather_cost(link, sizes, wraps, strides, n_axes, alg, bytes_V, 0, 0);
        break;
    case COST_OP_REDUCE_SCATTER:
        st = gather_cost(link, sizes, wraps, strides, n_axes, alg, bytes_V, 0, 1);
        break;
    case COST_OP_ALL_REDUCE: { /* ReduceScatter, then AllGather of the same V: 2× (sharding chapter)
                                */
        stage rs = gather_cost(link, sizes, wraps, strides, n_axes, alg, bytes_V, 0, 1);
        st = (stage){2 * rs.lat, 2 * rs.bw, 2 * rs.seconds, 2 * rs.hops};
        break;
    }
    case COST_OP_ALL_TO_ALL:
        st = gather_cost(link, sizes, wraps, strides, n_axes, alg, bytes_V, 1, 0);
        break;
    case COST_OP_PPERMUTE:
        if (n_used > 1) return -1;
        if (axis >= 0) {
            const int k = stride_of(strides, axis);
            stage_add(&st, k * link->hop_latency, k * bytes_V / link->w_oneway, k);
        }
        break;
    default:
        return -1;
    }
    if (est) {
        est->seconds = st.seconds;
        est->t_latency = st.lat;
        est->t_bandwidth = st.bw;
        est->hops = st.hops;
        est->n_axes = n_used;
        est->regime = st.lat > st.bw ? COST_REGIME_LATENCY : COST_REGIME_BANDWIDTH;
    }
    return st.seconds;
}

double cost_crossover_bytes(cost_op op, const cost_link *link, const int *sizes, const int *wraps,
                            int n_axes, mesh_alg alg) {
    cost_est e;
    if (cost_collective(op, link, sizes, wraps, n_axes, alg, 1.0, &e) < 0) return -1;
    return e.t_bandwidth > 0 ? e.t_latency / e.t_bandwidth : 0;
}

double cost_serialized(const cost_est *est, int lanes) {
    if (!est || est->hops <= 0) return est ? est->t_bandwidth : 0;
    const double h = est->hops, l = est->t_latency / h, w = est->t_bandwidth / h;
    const double k = lanes > 1 ? lanes : 1, step = l + w / k > w ? l + w / k : w;
    return (h - 1) * step + l + w;
}

double cost_bucket_bytes(cost_op op, const cost_link *link, const int *sizes, const int *wraps,
                         int n_axes, mesh_alg alg, double overhead) {
    if (!(overhead > 0)) return -1;
    const double v = cost_crossover_bytes(op, link, sizes, wraps, n_axes, alg);
    return v < 0 ? -1 : v / overhead;
}

cost_regime cost_classify(const cost_est *est, double t_overlap) {
    return t_overlap >= est->seconds ? COST_REGIME_COMPUTE : est->regime;
}
