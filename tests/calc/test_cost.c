/* test_cost: mesh/cost.c against the book — the chip table, the wraparound rules, the sharding
 * chapter's collective formulas, the worked problems that only need chip constants and
 * collective times (roofline, tpus, sharding, inference and profiling chapters), and the
 * link-sharing cost of strided sub-axes. */
#include "check.h"
#include "mesh/cost.h"

#include <string.h>

static const cost_chip *chip(const char *name) {
    const cost_chip *c = cost_chip_find(name);
    if (!c) {
        printf("FAIL chip %s missing from the table\n", name);
        check_failures++;
        c = cost_chip_at(0);
    }
    return c;
}

static void test_table(void) {
    const cost_chip *v5e = chip("v5e"), *v5p = chip("v5p");
    check_true("five chips in the table", cost_chip_count() == 5);
    check_true("\"v4\" finds v4p", cost_chip_find("v4") == cost_chip_find("v4p"));
    check_true("unknown chip is NULL", cost_chip_find("h100") == NULL);
    /* roofline: C/W_hbm; the book's 240 uses 8.2e11, the table 8.1e11 (the book's prose and table
     * disagree) → 243. */
    check_near("roofline: v5e critical intensity C/W_hbm (book 240, 8.2e11)",
               v5e->flops_bf16 / v5e->hbm_bw, 240.2, 0.015);
    /* roofline: D/2 > C/W_uni with the 2 chips on one link. */
    check_near("roofline: 2-chip D-sharded matmul compute-bound iff D > 2C/W",
               2 * v5e->flops_bf16 / v5e->ici_oneway, 8755, 0.001);
    check_near("roofline Q1-2: int8 x int8 intensity C_int8/W_hbm", v5e->flops_int8 / v5e->hbm_bw,
               486, 0.002);
    check_near("roofline Q1-2: int8 x int8 critical batch (intensity ~2B)",
               v5e->flops_int8 / v5e->hbm_bw / 2, 243, 0.002);
    check_near("roofline Q1-2: int8 weights, bf16 FLOPs critical batch",
               v5e->flops_bf16 / v5e->hbm_bw / 2, 120, 0.015);
    /* tpus Q2: whole-pod totals. The book's v5p 4e18 uses 4.5e14 (the prose's rounding), the
     * table 4.59e14. */
    const double n5e = 256, n5p = 8960;
    check_near("tpus Q2: v5e pod hosts", n5e / cost_chip_per_host(v5e), 32, 0);
    check_near("tpus Q2: v5e pod cores", n5e * v5e->cores_per_chip, 256, 0);
    check_near("tpus Q2: v5e pod FLOP/s", n5e * v5e->flops_bf16, 5.1e16, 0.015);
    check_near("tpus Q2: v5e pod HBM bytes (4 TB)", n5e * v5e->hbm_bytes, 4e12, 0.03);
    check_near("tpus Q2: v5p pod hosts", n5p / cost_chip_per_host(v5p), 2240, 0);
    check_near("tpus Q2: v5p pod cores", n5p * v5p->cores_per_chip, 17920, 0);
    check_near("tpus Q2: v5p pod FLOP/s", n5p * v5p->flops_bf16, 4e18, 0.03);
    check_near("tpus Q2: v5p pod HBM bytes (860 TB)", n5p * v5p->hbm_bytes, 860e12, 0.001);
    check_near("v5p pod chips 16x20x28", v5p->pod[0] * v5p->pod[1] * v5p->pod[2], 8960, 0);
    /* sharding Q4: alpha = C / W_bidi. */
    check_near("sharding Q4: v5p C/W", v5p->flops_bf16 / v5p->ici_bidi, 2550, 0.001);
    check_near("sharding Q4: reduce outputs beats gathering weights iff D > 2C/W",
               2 * v5p->flops_bf16 / v5p->ici_bidi, 5100, 0.001);
}

static int wraps_all(const char *name, int a, int b, int c, int n) {
    int s[3] = {a, b, c}, w = 0;
    for (int i = 0; i < n; i++) w |= cost_axis_wraps(chip(name), s, n, i) << i;
    return w;
}

/* training chapter, across pods: "~2000 hosts x 2.5e10 = 5e13 B/s" of DCN per v5p pod. */
static void test_dcn(void) {
    const cost_chip *v5p = chip("v5p"), *v5e = chip("v5e");
    check_near("v5p DCN per chip = 2.5e10 per host / 4 chips", cost_chip_dcn_bw(v5p), 6.25e9, 0);
    check_near("v5e DCN per chip = 2.5e10 per host / 8 chips", cost_chip_dcn_bw(v5e), 3.125e9, 0);
    check_near("v5p pod DCN: 8960 chips (2240 hosts) x per chip (book ~5e13 B/s)",
               8960 * cost_chip_dcn_bw(v5p), 5e13, 0.13);
}

static void test_wraps(void) {
    char err[160];
    check_true("v5e 16x16 wraps on both axes", wraps_all("v5e", 16, 16, 1, 2) == 3);
    check_true("v5e 8x16 wraps on its 16-long axis only", wraps_all("v5e", 8, 16, 1, 2) == 2);
    check_true("v5e 4x4 has no wraparound", wraps_all("v5e", 4, 4, 1, 2) == 0);
    check_true("v6e 16x16 wraps, 8x8 does not",
               wraps_all("v6e", 16, 16, 1, 2) == 3 && wraps_all("v6e", 8, 8, 1, 2) == 0);
    check_true("v5p 4x4x4 (a whole cube) wraps on every axis", wraps_all("v5p", 4, 4, 4, 3) == 7);
    check_true("v5p 4x4x8 wraps on every axis", wraps_all("v5p", 4, 4, 8, 3) == 7);
    check_true("v5p 16x16x16 wraps on every axis", wraps_all("v5p", 16, 16, 16, 3) == 7);
    check_true("v5p 16x20x28 wraps on every axis", wraps_all("v5p", 16, 20, 28, 3) == 7);
    check_true("v5p 2x2x4 (sub-cube) has no wraparound", wraps_all("v5p", 2, 2, 4, 3) == 0);
    check_true("v4p 2x2x2 has no wraparound", wraps_all("v4p", 2, 2, 2, 3) == 0);
    check_true("v3 32x32 wraps, 16x16 does not (our rule)",
               wraps_all("v3", 32, 32, 1, 2) == 3 && wraps_all("v3", 16, 16, 1, 2) == 0);
    int ok1[3] = {16, 20, 28}, ok2[3] = {28, 16, 20}, big[3] = {32, 16, 16}, v5e3[3] = {4, 4, 4};
    check_true("v5p 16x20x28 and 28x16x20 fit the pod",
               cost_topology_check(chip("v5p"), ok1, 3, err, sizeof err) == 0 &&
                   cost_topology_check(chip("v5p"), ok2, 3, err, sizeof err) == 0);
    check_true("v5p 32x16x16 does not fit the pod",
               cost_topology_check(chip("v5p"), big, 3, err, sizeof err) < 0);
    check_true("v5e (2D) rejects a 4x4x4 topology",
               cost_topology_check(chip("v5e"), v5e3, 3, err, sizeof err) < 0);
}

static double t(cost_op op, const cost_link *l, const int *s, const int *w, int n, mesh_alg a,
                double V, cost_est *e) {
    return cost_collective(op, l, s, w, n, a, V, e);
}

/* sharding chapter on v5p links: V = 1 GB, axes of 16. */
static void test_formulas(void) {
    const cost_link l = cost_chip_link(chip("v5p"));
    const int s16[3] = {16, 16, 16}, wrap[3] = {1, 1, 1}, open[3] = {0, 0, 0};
    const double V = 1e9, W = 1.8e11, Wu = 9e10;
    cost_est e;
    check_near("bidir ring AllGather = V/W",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 1, MESH_ALG_BIDIR, V, &e), V / W, 1e-12);
    check_true("  ... bandwidth-bound with ceil(16/2) = 8 hops",
               e.regime == COST_REGIME_BANDWIDTH && e.hops == 8);
    check_near("unidirectional ring = (n-1)/n V/W_uni",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 1, MESH_ALG_RING, V, &e), 15.0 / 16 * V / Wu,
               1e-12);
    check_true("  ... 15 hops", e.hops == 15);
    check_near("open axis charged the unidirectional cost (pop quiz 2)",
               t(COST_OP_ALL_GATHER, &l, s16, open, 1, MESH_ALG_BIDIR, V, NULL), 15.0 / 16 * V / Wu,
               1e-12);
    check_near("latency-bound: max(T_min |X|/2, V/W) = 8 us at 1 kB",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 1, MESH_ALG_BIDIR, 1e3, &e), 8e-6, 1e-12);
    check_true("  ... regime latency", e.regime == COST_REGIME_LATENCY);
    check_near("multi-axis 3 axes: V/(3W)",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 3, MESH_ALG_MULTI, V, &e), V / (3 * W), 1e-12);
    check_true("  ... hops sum |X_i|/2 = 24 over 3 axes", e.hops == 24 && e.n_axes == 3);
    check_near("multi-axis latency-bound: T_min sum|X_i|/2 = 24 us",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 3, MESH_ALG_DEFAULT, 1e3, NULL), 24e-6, 1e-12);
    check_near("ReduceScatter = AllGather",
               t(COST_OP_REDUCE_SCATTER, &l, s16, wrap, 3, MESH_ALG_MULTI, V, NULL), V / (3 * W),
               1e-12);
    check_near("AllReduce = 2 AllGather",
               t(COST_OP_ALL_REDUCE, &l, s16, wrap, 1, MESH_ALG_BIDIR, V, &e), 2 * V / W, 1e-12);
    check_true("  ... 16 hops (RS then AG)", e.hops == 16);
    check_near("AllToAll = 1/4 AllGather (bidirectional ring)",
               t(COST_OP_ALL_TO_ALL, &l, s16, wrap, 1, MESH_ALG_BIDIR, V, NULL), V / (4 * W),
               1e-12);
    check_near("AllToAll = 1/2 AllGather (unidirectional ring)",
               t(COST_OP_ALL_TO_ALL, &l, s16, wrap, 1, MESH_ALG_RING, V, NULL),
               0.5 * 15.0 / 16 * V / Wu, 1e-12);
    /* Sequential 16x16 gather: last axis first on V/16, then the first axis on V. */
    check_near("sequential 2-axis AllGather = V/(16W) + V/W",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 2, MESH_ALG_SEQ, V, &e), V / 16 / W + V / W,
               1e-12);
    check_near("sequential 2-axis ReduceScatter = the same",
               t(COST_OP_REDUCE_SCATTER, &l, s16, wrap, 2, MESH_ALG_SEQ, V, NULL),
               V / 16 / W + V / W, 1e-12);
    check_near("multi-axis 2 axes beats sequential: V/(2W)",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 2, MESH_ALG_MULTI, V, NULL), V / (2 * W),
               1e-12);
    check_near("ppermute one hop = V/W_uni",
               t(COST_OP_PPERMUTE, &l, s16, wrap, 1, MESH_ALG_DEFAULT, V, NULL), V / Wu, 1e-12);
    const int s1[2] = {1, 16};
    check_near("axes of size 1 are ignored",
               t(COST_OP_ALL_GATHER, &l, s1, wrap, 2, MESH_ALG_DEFAULT, V, &e), V / W, 1e-12);
    check_true("  ... n_axes counts 1", e.n_axes == 1);
    check_true("ppermute over two axes is misuse",
               t(COST_OP_PPERMUTE, &l, s16, wrap, 2, MESH_ALG_DEFAULT, V, NULL) < 0);
    check_true("negative bytes is misuse",
               t(COST_OP_ALL_GATHER, &l, s16, wrap, 1, MESH_ALG_DEFAULT, -1, NULL) < 0);
    cost_est hid = {1e-3, 0, 1e-3, 8, 1, COST_REGIME_BANDWIDTH};
    check_true("compute-hidden when overlapping compute covers the collective",
               cost_classify(&hid, 2e-3) == COST_REGIME_COMPUTE &&
                   cost_classify(&hid, 0.5e-3) == COST_REGIME_BANDWIDTH);
    check_true("algorithm names round-trip", mesh_alg_parse("multi") == MESH_ALG_MULTI &&
                                                 mesh_alg_parse("auto") < 0 &&
                                                 strcmp(mesh_alg_name(MESH_ALG_SEQ), "seq") == 0);
}

static void test_book(void) {
    const cost_link v5e = cost_chip_link(chip("v5e"));
    const int one[1] = {2}, eight[1] = {8}, w1[1] = {1};
    /* sharding: one hop on v5e is latency-bound below W_uni · T_min. */
    check_near("sharding: v5e latency-bound hop message size (bytes)",
               cost_crossover_bytes(COST_OP_PPERMUTE, &v5e, one, w1, 1, MESH_ALG_DEFAULT), 45e3,
               1e-9);
    /* inference App. C: 8-way Megatron gather latency-bound below 8 · 45 kB; 16·8192 int8 is below
     * it. */
    check_near("inference App. C: 8-way gather latency-bound below (bytes)",
               cost_crossover_bytes(COST_OP_ALL_GATHER, &v5e, eight, w1, 1, MESH_ALG_BIDIR), 360e3,
               1e-9);
    cost_est e;
    cost_collective(COST_OP_ALL_GATHER, &v5e, eight, w1, 1, MESH_ALG_BIDIR, 16 * 8192, &e);
    check_true("inference App. C: BS=16 x D=8192 int8 (131 kB) is latency-bound",
               e.regime == COST_REGIME_LATENCY);
    /* profiling: TPU v2 profile, ReduceScatter of 134 MB at 1.2e11 B/s bidirectional over 8 cores.
     */
    const cost_link v2 = {6e10, 1e-6};
    check_near(
        "profiling: ReduceScatter 134 MB at 1.2e11 (s)",
        cost_collective(COST_OP_REDUCE_SCATTER, &v2, eight, w1, 1, MESH_ALG_BIDIR, 134e6, NULL),
        1.1e-3, 0.02);
    check_near("profiling: matmul 2*32*1024*8192*32768/(23e12*8) (s)",
               2.0 * 32 * 1024 * 8192 * 32768 / (23e12 * 8), 95.6e-3, 0.001);
}

/* AllGather over one sub-axis of 4 (wrapping or not, at a stride): its time for V bytes against
 * want, its hops and its latency-bound time at 1 kB. */
static void check_gather4(const char *what, const cost_link *l, int wraps, int stride, double V,
                          double want, const char *hops_why, int hops, const char *lat_why,
                          double lat) {
    const int four[1] = {4};
    char line[160];
    cost_est e;
    check_near(what,
               cost_collective_strided(COST_OP_ALL_GATHER, l, four, &wraps, &stride, 1,
                                       MESH_ALG_DEFAULT, V, &e),
               want, 1e-12);
    snprintf(line, sizeof line, "  ... %s = %d hops", hops_why, hops);
    check_true(line, e.hops == hops);
    snprintf(line, sizeof line, "  ... latency-bound at 1 kB: %s", lat_why);
    check_near(line,
               cost_collective_strided(COST_OP_ALL_GATHER, l, four, &wraps, &stride, 1,
                                       MESH_ALG_DEFAULT, 1e3, NULL),
               lat, 1e-12);
}

/* Sub-axes of a physical axis (cost_collective_strided): a wrapping 16 split into a contiguous
 * block of 4 (an open line of 4) and a strided sub-axis of 4 whose ring steps cross 4 links each
 * shared by the 4 strided groups: W/4 per group and 4·T_min per step. */
static void test_strided(void) {
    const cost_link l = cost_chip_link(chip("v5p"));
    const int four[1] = {4}, wrap1[1] = {1}, k4[1] = {4};
    const double V = 1e9, W = 1.8e11, Wu = 9e10, T = 1e-6;
    cost_est e;
    check_gather4("strided 4 of a wrapping 16: bidir ring at W/4 -> 4V/W", &l, 1, 4, V, 4 * V / W,
                  "ceil(4/2) = 2 ring steps of 4 physical hops", 8, "2 steps x 4 T_min = 8 us",
                  8 * T);
    check_near("  ... crossover where 8 T_min = 4V/W", 8 * T * W / 4, 360e3, 1e-12);
    check_near("strided 4 AllReduce = 2 x 4V/W",
               cost_collective_strided(COST_OP_ALL_REDUCE, &l, four, wrap1, k4, 1, MESH_ALG_DEFAULT,
                                       V, NULL),
               8 * V / W, 1e-12);
    /* The contiguous block: an open line of 4, the open-line formula of cost.h
     * max(T_min·(n−1), (n−1)/n · V/w_oneway). */
    check_gather4("contiguous block of 4 = open line: 3/4 V/W_uni", &l, 0, 1, V, 0.75 * V / Wu,
                  "3 links of an open line of 4", 3, "3 T_min", 3 * T);
    /* 16x16x16 with z split 4 (tensor) x 4 strided (data): data axes x, y, z/4 at 2W + W/4. */
    const int s3[3] = {16, 16, 4}, w3[3] = {1, 1, 1}, st3[3] = {1, 1, 4};
    check_near(
        "multi over x, y and strided z/4: V/(2W + W/4)",
        cost_collective_strided(COST_OP_ALL_GATHER, &l, s3, w3, st3, 3, MESH_ALG_DEFAULT, V, &e),
        V / (2.25 * W), 1e-12);
    check_true("  ... hops 8 + 8 + 2*4 = 24", e.hops == 24 && e.n_axes == 3);
    check_near("  ... the book's V/(W M_X) with M_X = 3 is 3/2.25 = 1.33x faster",
               (V / (2.25 * W)) / (V / (3 * W)), 3 / 2.25, 1e-12);
    check_near(
        "seq over x, y, z/4: (V/256)/(W/4) + (V/16)/W + V/W (last axis first)",
        cost_collective_strided(COST_OP_ALL_GATHER, &l, s3, w3, st3, 3, MESH_ALG_SEQ, V, NULL),
        V / 256 / (W / 4) + V / 16 / W + V / W, 1e-12);
    check_near(
        "strides NULL = cost_collective",
        cost_collective_strided(COST_OP_ALL_TO_ALL, &l, s3, w3, NULL, 3, MESH_ALG_DEFAULT, V, NULL),
        cost_collective(COST_OP_ALL_TO_ALL, &l, s3, w3, 3, MESH_ALG_DEFAULT, V, NULL), 1e-15);
    const int bad[1] = {0};
    check_true("a stride below 1 is misuse",
               cost_collective_strided(COST_OP_ALL_GATHER, &l, four, wrap1, bad, 1,
                                       MESH_ALG_DEFAULT, V, NULL) < 0);
}

/* DIRECT (mesh/coll_direct.c): the busiest link's load of routed all-pairs blocks. */
static void test_direct(void) {
    const cost_link l = {1e9, 1e-6}; /* w_oneway 1 GB/s, so W = 2e9 */
    const double V = 1 << 24, W = 2e9, w = 1e9;
    const int r4[1] = {4}, r8[1] = {8}, r5[1] = {5}, y1[1] = {1}, n1[1] = {0};
    cost_est e;
    check_near("direct AllGather, ring of 4 = the book's bidir V/W",
               cost_collective(COST_OP_ALL_GATHER, &l, r4, y1, 1, MESH_ALG_DIRECT, V, &e), V / W,
               1e-12);
    check_true("  ... 2 hops (the farthest chip)", e.hops == 2);
    check_near("direct AllGather, ring of 8: load (1+2+3+2) blocks of V/8 = V/w",
               cost_collective(COST_OP_ALL_GATHER, &l, r8, y1, 1, MESH_ALG_DIRECT, V, NULL),
               8 * (V / 8) / w, 1e-12);
    check_near("direct AllToAll, ring of 8 = the book's V/(4W)",
               cost_collective(COST_OP_ALL_TO_ALL, &l, r8, y1, 1, MESH_ALG_DIRECT, V, NULL),
               V / (4 * W), 1e-12);
    check_near("direct AllToAll, ring of 5: (1+2) blocks of V/25",
               cost_collective(COST_OP_ALL_TO_ALL, &l, r5, y1, 1, MESH_ALG_DIRECT, V, NULL),
               3 * V / 25 / w, 1e-12);
    check_near("direct ReduceScatter, line of 4: 2·2 pairs cross the middle link",
               cost_collective(COST_OP_REDUCE_SCATTER, &l, r4, n1, 1, MESH_ALG_DIRECT, V, &e),
               4 * (V / 4) / w, 1e-12);
    check_true("  ... 3 hops end to end", e.hops == 3);
    const int s2[2] = {4, 2}, w2[2] = {1, 0};
    check_near("direct AllReduce 4x2 (x wraps): 2x max(2·2, 4·1) blocks of V/8",
               cost_collective(COST_OP_ALL_REDUCE, &l, s2, w2, 2, MESH_ALG_DIRECT, V, NULL),
               2 * 4 * (V / 8) / w, 1e-12);
}

/* The serialized (step-by-step) time and bucket sizes, by hand on v5p links (w = 9e10 B/s one way,
 * T_min = 1 µs). AllReduce over 2 chips (an open axis): RS + AG, each one hop moving V/2. */
static void test_serialized(void) {
    const cost_link l = cost_chip_link(chip("v5p"));
    const int s2[1] = {2}, w0[1] = {0}, s16[1] = {16}, w1[1] = {1};
    cost_est e;
    const double V = 1.8e5; /* V/2 / 9e10 = 1 µs: latency = bandwidth per hop */
    check_near("AllReduce on 2, V = 180 kB: the book's max-form 2·max(1, 1) µs",
               cost_collective(COST_OP_ALL_REDUCE, &l, s2, w0, 1, MESH_ALG_BIDIR, V, &e), 2e-6,
               1e-12);
    check_true("  ... 2 hops, 2 µs of latency, 2 µs on the wire",
               e.hops == 2 && fabs(e.t_latency - 2e-6) < 1e-18 &&
                   fabs(e.t_bandwidth - 2e-6) < 1e-18);
    check_near("  serialized, one lane: 2·(1 + 1) µs", cost_serialized(&e, 1), 4e-6, 1e-12);
    check_near("  serialized, 4 lanes: max(1, 1 + 1/4) + 1 + 1 µs", cost_serialized(&e, 4), 3.25e-6,
               1e-12);
    check_near("  serialized, 1000 lanes: the latency all but hidden", cost_serialized(&e, 1000),
               3.001e-6, 1e-12);
    check_near("bucket for AllReduce on 2 at 10% latency: 180 kB / 0.1",
               cost_bucket_bytes(COST_OP_ALL_REDUCE, &l, s2, w0, 1, MESH_ALG_DEFAULT, 0.1), 1.8e6,
               1e-12);
    check_near("bucket for AllGather on a ring of 16 at 25%: 8 hops · 1 µs · 1.8e11 / 0.25",
               cost_bucket_bytes(COST_OP_ALL_GATHER, &l, s16, w1, 1, MESH_ALG_BIDIR, 0.25), 5.76e6,
               1e-12);
    check_true("bucket with overhead 0 is misuse",
               cost_bucket_bytes(COST_OP_ALL_GATHER, &l, s16, w1, 1, MESH_ALG_BIDIR, 0) < 0);
    const int one[1] = {1};
    check_true("bucket over one chip is 0",
               cost_bucket_bytes(COST_OP_ALL_REDUCE, &l, one, w0, 1, MESH_ALG_DEFAULT, 0.1) == 0);
}

int main(void) {
    test_dcn();
    test_table();
    test_wraps();
    test_formulas();
    test_book();
    test_strided();
    test_direct();
    test_serialized();
    return check_report("test_cost");
}
