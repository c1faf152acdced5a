/* cost: the book's cost model of a TPU slice (its tpus and sharding chapters): a table of
 * chips with their canonical constants, the wraparound rules of each chip family, and the
 * predicted time of AllGather / ReduceScatter / AllReduce / AllToAll / ppermute over a set of
 * mesh axes, for any link constants (a chip's, or ones measured or emulated on this machine).
 * Pure functions: no MPI, no I/O, no allocation, no model knowledge. Depends on libm only.
 *
 * Units: seconds, bytes, bytes/s, FLOP/s. GB = 1e9 bytes. Not collective (nothing here is).
 *
 * The bytes V passed to every prediction is the book's V (sharding chapter):
 *  - AllGather: bytes of the per-device array AFTER the gather (V excludes axes the array stays
 *    sharded over: AllGather_X of [B_X, D_Y] in bf16 has V = 2·B·D/|Y|);
 *  - ReduceScatter, AllReduce: bytes of the per-device UNREDUCED input;
 *  - AllToAll: bytes of the per-device array after an AllGather of the same array over the same
 *    axes, i.e. |X| × the per-device input (the book's "¼ of an AllGather of the same array");
 *  - ppermute: bytes each device sends to its neighbour. */
#ifndef MT_MESH_COST_H
#define MT_MESH_COST_H

#include <stddef.h>

#define COST_MAX_AXES 3

/* ---- chips (tpus chapter) ---- */

typedef enum {
    COST_WRAP_POD_EDGE16, /* v5e, v6e: an axis wraps only if its length is 16 (a full pod edge) */
    COST_WRAP_POD_EDGE32, /* v3 (our decision, see cost.c): only if its length is 32 */
    COST_WRAP_CUBES,      /* v4p, v5p: every axis wraps iff the slice is whole 4x4x4 cubes */
    COST_WRAP_ALWAYS,     /* a host profile or an emulated torus: every axis wraps */
    COST_WRAP_NEVER       /* every axis is an open line */
} cost_wrap_rule;

typedef struct {
    const char *name;   /* "v5p" */
    double flops_bf16;  /* C: peak bf16 FLOP/s per chip */
    double flops_int8;  /* peak int8 OP/s per chip */
    double hbm_bytes;   /* HBM capacity per chip */
    double hbm_bw;      /* W_hbm, bytes/s */
    double ici_oneway;  /* W_ici per link, one direction, bytes/s */
    double ici_bidi;    /* W_ici per link, both directions (the book's W), bytes/s */
    double hop_latency; /* T_min, seconds per hop (≈1 µs) */
    int dims;           /* torus dimensions: 2 or 3 */
    int pod[3];         /* largest ICI slice, e.g. 16x20x28 (unused dims are 1) */
    int host[3];        /* chips per host, e.g. 2x2x1 */
    int cores_per_chip; /* TensorCores per chip (megacore counts as 2 cores, 1 device) */
    cost_wrap_rule wrap;
} cost_chip;

/* The table's chip named `name` ("v3", "v4p", "v5e", "v5p", "v6e"; "v4" = "v4p"), or NULL. */
const cost_chip *cost_chip_find(const char *name);
/* The i-th chip of the table, 0 ≤ i < cost_chip_count(); NULL past the end. */
const cost_chip *cost_chip_at(int i);
int cost_chip_count(void);
/* Chips per host (product of chip->host). */
int cost_chip_per_host(const cost_chip *chip);
/* The book's data-center network (DCN) figure: ~2.5e10 bytes/s per host (ingress + egress),
 * the same for every chip family. */
#define COST_DCN_PER_HOST 2.5e10
/* DCN bandwidth per chip, bytes/s: the host's COST_DCN_PER_HOST shared by its chips
 * (v5p: 2.5e10 / 4 = 6.25e9; v5e: 2.5e10 / 8 = 3.1e9). */
double cost_chip_dcn_bw(const cost_chip *chip);

/* 1 if `axis` of the slice sizes[0..n_axes) has a wraparound link under the chip's rule, else 0.
 * An axis of length 1 never wraps (on a ring of 2 both formulas give the same time). */
int cost_axis_wraps(const cost_chip *chip, const int *sizes, int n_axes, int axis);
/* Checks that sizes[0..n_axes) fits the chip's pod (at most chip->dims axes, each sorted size ≤
 * the sorted pod size). Returns 0, or −1 with the reason in err[errlen]. */
int cost_topology_check(const cost_chip *chip, const int *sizes, int n_axes, char *err,
                        size_t errlen);

/* ---- links ---- */

/* The link constants a prediction uses: a chip's (cost_chip_link) or measured / emulated ones
 * (e.g. meshbench's α–β fit, or the link emulator's scaled constants). */
typedef struct {
    double w_oneway;    /* bytes/s per link per direction (the bidirectional W is 2× this) */
    double hop_latency; /* T_min: seconds per hop */
} cost_link;

cost_link cost_chip_link(const cost_chip *chip);

/* ---- collectives (sharding chapter) ---- */

typedef enum {
    COST_OP_ALL_GATHER,
    COST_OP_REDUCE_SCATTER,
    COST_OP_ALL_REDUCE,
    COST_OP_ALL_TO_ALL,
    COST_OP_PPERMUTE,
    COST_OP_COUNT
} cost_op;

/* A collective's algorithm: the one list that mesh/coll.c runs and this model prices. It lives
 * here, not in coll.h, because the cost model builds without MPI and the mesh builds on it. */
typedef enum {
    MESH_ALG_DEFAULT = 0, /* mesh: whatever mesh_set_default_alg chose (initially BIDIR on one
                           * axis, MULTI on several); priced as that (the book's model) */
    MESH_ALG_RING,        /* unidirectional ring over the flattened axes: |X|−1 hops of V/|X| */
    MESH_ALG_BIDIR,       /* bidirectional ring (a line on an open axis, using only real links) */
    MESH_ALG_SEQ,         /* multi-axis: axis by axis, each with BIDIR; V grows (gather) /
                           * shrinks (scatter) */
    MESH_ALG_MULTI,       /* multi-axis: payload split across axes, all axes' links at once */
    MESH_ALG_MPI,         /* MPI's built-in on the axis-set communicator; priced as DEFAULT */
    MESH_ALG_DIRECT,      /* every block straight to its rank, routed over the torus, in one
                           * round (coll_direct.c) */
    MESH_ALG_COUNT
} mesh_alg;

typedef enum {
    COST_REGIME_LATENCY,   /* hop latency term dominates: T = hops·T_min */
    COST_REGIME_BANDWIDTH, /* bytes/bandwidth term dominates */
    COST_REGIME_COMPUTE    /* hidden behind overlapping compute (see cost_classify) */
} cost_regime;

/* The breakdown of one prediction. */
typedef struct {
    double seconds;     /* predicted time = Σ over stages of max(t_latency, t_bandwidth) */
    double t_latency;   /* Σ stages hops·T_min */
    double t_bandwidth; /* Σ stages bytes/bandwidth */
    int hops;           /* hops on the critical path, summed over stages */
    int n_axes;         /* axes of size > 1 that the collective ran over */
    cost_regime regime; /* LATENCY if t_latency > t_bandwidth, else BANDWIDTH */
} cost_est;

const char *cost_op_name(cost_op op);        /* "AllGather", ... */
const char *cost_regime_name(cost_regime r); /* "latency", "bandwidth", "compute-hidden" */
/* "default", "ring", "bidir", "seq", "multi", "mpi", "direct"; "?" out of range. */
const char *mesh_alg_name(mesh_alg a);
/* Parses one of mesh_alg_name's names; returns -1 when unknown. */
int mesh_alg_parse(const char *s);

/* Predicted time of `op` over the axes sizes[0..n_axes) (wraps[i] = 1 if axis i wraps; axes of
 * size 1 are ignored), each with link constants `link`, by algorithm `alg`, moving the book's V =
 * bytes_V (see the top of this file). Returns seconds and, if est != NULL, the breakdown. Returns
 * −1 on misuse (n_axes outside 0..COST_MAX_AXES, a size < 1, negative bytes, ppermute over more
 * than one axis of size > 1). Formulas, per axis of size n (W = 2·w_oneway):
 *   BIDIR, wrapping axis  : max(T_min·⌈n/2⌉, V/W)                                  sharding ch.
 *   RING, or an open axis : max(T_min·(n−1), (n−1)/n · V/w_oneway)   sharding ch., pop quiz 2
 *   MULTI over axes i     : max(T_min·Σ hops_i, f·V/Σ W_i), W_i = W (wrapping) or w_oneway
 *                           (open); f = 1 if every axis wraps (V/(W·n_axes), sharding ch.), else
 *                           (N−1)/N with N = Π|X_i|, as the book's open-axis cost keeps it
 *                           (pop quiz 2); one open axis gives the RING formula. AllToAll:
 *                           SEQ's bandwidth term over n_axes (one part of V per axis, each
 *                           run axis by axis in a rotated order, all parts at once)
 *   SEQ                   : Σ stages of the one-axis cost; an AllGather gathers the last axis first
 *                           (stage V = V·Π(done)/Π(all)), a ReduceScatter scatters the first axis
 *                           first (stage V = V/Π(done))                                   sharding
 * ch. ReduceScatter = AllGather (adds ignored); AllReduce = 2 × AllGather (RS then AG) sharding ch.
 *   AllToAll: bandwidth term × ¼ on a bidirectional wrapping ring, × ½ otherwise (a ring in one
 *             direction, or an open axis, which the book charges as one direction); same hops
 * sharding ch. ppermute (shift by one along one axis): max(T_min, V/w_oneway)                (not
 * in the book) DIRECT (not in the book): one round of routed blocks of b bytes between all N chips
 *             (b = V/N for AllGather and ReduceScatter, V/N² for AllToAll): max(T_min·Σ_k D_k,
 *             max_k (N/n_k)·L_k·b / w_oneway) with D_k the farthest distance on axis k and L_k
 *             the busiest link's all-pairs load: Σ_{d ≤ (n−1)/2} d (+ n/4 for even n) on a
 *             ring, ⌊n/2⌋⌈n/2⌉ on a line. Ring of 4: V/W (AllGather); AllToAll on any even
 *             ring: V/(4W)
 */
double cost_collective(cost_op op, const cost_link *link, const int *sizes, const int *wraps,
                       int n_axes, mesh_alg alg, double bytes_V, cost_est *est);

/* cost_collective over sub-axes of physical axes: strides[i] = k ≥ 1 says that the neighbours of
 * axis i are k physical hops apart — the strided part of a physical axis of n·k chips split into
 * a contiguous inner block of k (another role's sub-axis) and n strided groups — and that every
 * physical link it crosses is shared by the k such groups, one per position in the block. Each
 * ring step then costs k·T_min and moves data at w_oneway/k per direction (W/k bidirectional);
 * the axis wraps if its parent does. RING/BIDIR over several axes pace every step by the largest
 * stride. est->hops counts physical hops. strides NULL (or all 1) is cost_collective. The
 * contiguous block itself needs no stride: pass it as an axis of k with wraps 0 unless k is the
 * whole axis (no wraparound link inside a block). MESH_ALG_DIRECT ignores strides. */
double cost_collective_strided(cost_op op, const cost_link *link, const int *sizes,
                               const int *wraps, const int *strides, int n_axes, mesh_alg alg,
                               double bytes_V, cost_est *est);

/* DIRECT's pieces, shared with its implementation (mesh/coll_direct.c): the busiest directed
 * link's load, in blocks, when every ordered pair of the n chips of one ring (wraps) or line
 * exchanges one block over the shortest path (Σ_{d ≤ (n−1)/2} d, + n/4 for even n, on a ring;
 * ⌊n/2⌋⌈n/2⌉ on a line); and the farthest distance on it (hops). 0 for n ≤ 1. */
double cost_direct_link_load(int n, int wraps);
int cost_direct_farthest(int n, int wraps);

/* The V at which the latency and bandwidth terms of cost_collective are equal: smaller messages
 * are latency-bound (e.g. one v5e hop: 4.5e10 × 1 µs = 45 kB, tpus chapter). −1 on misuse. */
double cost_crossover_bytes(cost_op op, const cost_link *link, const int *sizes, const int *wraps,
                            int n_axes, mesh_alg alg);

/* The time of a prediction when each ring step's hop latency ADDS to its transfer instead of
 * overlapping it, as on links where a step forwards only what it has received (this project's
 * emulated links and real point-to-point messages), with the payload cut into `lanes` ≥ 1
 * independent pipelines (mesh_set_chunk): with h = est->hops, l = t_latency/h, w = t_bandwidth/h,
 *     T = (h − 1)·max(w, l + w/lanes) + l + w,
 * i.e. h·(l + w) for one lane, and down to the book's max-form as lanes hide the latency.
 * 0 when est moved nothing. */
double cost_serialized(const cost_est *est, int lanes);

/* Gradient buckets: the smallest V (bytes) at which the latency term of the collective is at
 * most `overhead` × its bandwidth term (overhead > 0), i.e. cost_crossover_bytes / overhead: a
 * bucket this large is bandwidth-bound within that margin. 0 when the axes hold one chip; −1 on
 * misuse. */
double cost_bucket_bytes(cost_op op, const cost_link *link, const int *sizes, const int *wraps,
                         int n_axes, mesh_alg alg, double overhead);

/* Regime of a collective whose time is est->seconds when `t_overlap` seconds of independent
 * compute can run beside it: COMPUTE if t_overlap ≥ est->seconds, else est->regime. */
cost_regime cost_classify(const cost_est *est, double t_overlap);
#endif
