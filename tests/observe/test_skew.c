/* test_skew: a collective's transfer without the skew between its ranks' arrivals
 * (train/observe/skew.h), on calls made up by hand (times in seconds, as mesh records them):
 *  - two ranks on emulated links (a message travels from its send): rank 0 starts an AllGather at
 *    t, rank 1 50 ms later; each block takes 10 ms on the wire, so rank 0 ends at t + 60 ms and
 *    rank 1 finds rank 0's block already there and ends at t + 50 ms. Both ranks' transfer is the
 *    10 ms (rank 0's own record says 60, rank 1's 0);
 *  - the same call on links where data moves only once the receiver has arrived, without a shared
 *    clock (ranks on several hosts): the shortest of the ranks' durations, the last arriver's;
 *  - a 2x2 mesh: calls over y are matched only with the rank of the same x (the other pair's
 *    skew does not leak in); calls over x with the same set_seq are another set;
 *  - ranks that completed their calls in different orders, and padding rows;
 *  - a call over an axis set of one rank keeps its own duration;
 *  - times taken on a clock far from 0 (CLOCK_MONOTONIC after days) keep microseconds once
 *    packed against a common origin. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "train/observe/skew.h"

#define NMAX 8

static float rows[4 * NMAX * SKEW_FIELDS];

/* Packs rank r's n calls into rows (the gather's layout). */
static void put(int r, const skew_call *c, int n, double ref) {
    skew_pack(c, n, NMAX, ref, rows + (int64_t)r * NMAX * SKEW_FIELDS);
}

static int near(double got, double want) {
    return fabs(got - want) <= 2e-6;
}

int main(void) {
    const double t = 1e5; /* a monotonic clock after a day: floats alone would keep ~8 ms */
    double out[NMAX];

    /* two ranks, one AllGather over x (set 1), emulated links: rank 1 arrives 50 ms late */
    skew_call r0[1] = {{1, 0, 7, t + 0.000, t + 0.060}};
    skew_call r1[1] = {{1, 0, 7, t + 0.050, t + 0.050}};
    put(0, r0, 1, t), put(1, r1, 1, t);
    int n = skew_transfers(rows, 2, NMAX, 0, 1, out);
    check_expect(n == 1 && near(out[0], 0.010),
                 "emulated links, shared clock: rank 0's transfer is 10 ms, not its own 60 (%.6f)",
                 out[0]);
    n = skew_transfers(rows, 2, NMAX, 1, 1, out);
    check_expect(n == 1 && near(out[0], 0.010),
                 "emulated links, shared clock: rank 1's transfer is 10 ms, not its own 0 (%.6f)",
                 out[0]);

    /* the same on rendezvous links without a shared clock: rank 1 ends 10 ms after it arrives */
    r1[0].t1 = t + 0.060;
    put(1, r1, 1, t);
    n = skew_transfers(rows, 2, NMAX, 0, 0, out);
    check_expect(n == 1 && near(out[0], 0.010),
                 "no shared clock: the last arriver's duration, 10 ms (%.6f)", out[0]);

    /* 2x2 mesh (x major): ranks (x, y) = (0,0) (0,1) (1,0) (1,1). Over y (set 2) the group is the
     * x coordinate; over x (set 1) the y coordinate. Pair x = 1 has a 200 ms skew over y, pair
     * x = 0 none; the x calls share set_seq 0 with the y calls. Rank (1,1) completed its calls in
     * the other order. */
    const skew_call a00[2] = {{2, 0, 0, t + 0.100, t + 0.120}, {1, 0, 0, t + 0.200, t + 0.230}};
    const skew_call a01[2] = {{2, 0, 0, t + 0.100, t + 0.121}, {1, 1, 0, t + 0.200, t + 0.230}};
    const skew_call a10[3] = {{2, 1, 0, t + 0.000, t + 0.220},
                              {1, 0, 0, t + 0.225, t + 0.230},
                              {4, 0, 0, t + 0.300, t + 0.304}};
    const skew_call a11[2] = {{1, 1, 0, t + 0.201, t + 0.231}, {2, 1, 0, t + 0.200, t + 0.220}};
    put(0, a00, 2, t), put(1, a01, 2, t), put(2, a10, 3, t), put(3, a11, 2, t);
    n = skew_transfers(rows, 4, NMAX, 0, 1, out);
    check_expect(
        n == 2 && near(out[0], 0.021) && near(out[1], 0.005),
        "2x2: rank (0,0)'s y call from its pair alone (21 ms), its x call from rank (1,0)'s "
        "late start (5 ms): %.6f %.6f",
        out[0], out[1]);
    n = skew_transfers(rows, 4, NMAX, 2, 1, out);
    check_expect(
        n == 3 && near(out[0], 0.020) && near(out[1], 0.005) && near(out[2], 0.004),
        "2x2: rank (1,0)'s y call without its 200 ms skew (20 ms, own 220), x call 5 ms, a "
        "call no one else holds its own 4 ms: %.6f %.6f %.6f",
        out[0], out[1], out[2]);
    n = skew_transfers(rows, 4, NMAX, 3, 1, out);
    check_expect(n == 2 && near(out[0], 0.030) && near(out[1], 0.020),
                 "2x2: rank (1,1), calls in the other order, matched by key: %.6f %.6f", out[0],
                 out[1]);
    n = skew_transfers(rows, 4, NMAX, 3, 0, out);
    check_expect(n == 2 && near(out[0], 0.030) && near(out[1], 0.020),
                 "2x2, no shared clock: the shortest durations, 30 and 20 ms: %.6f %.6f", out[0],
                 out[1]);

    /* set_seq beyond the packed bits: the low 22 bits still match */
    const skew_call big0[1] = {{1, 0, (1LL << 40) + 5, t + 1.0, t + 1.5}};
    const skew_call big1[1] = {{1, 0, (1LL << 40) + 5, t + 1.4, t + 1.5}};
    put(0, big0, 1, t), put(1, big1, 1, t);
    n = skew_transfers(rows, 2, NMAX, 0, 1, out);
    check_expect(n == 1 && near(out[0], 0.1), "a large set_seq still matches: %.6f", out[0]);

    /* padding: a rank with no calls */
    put(1, NULL, 0, t);
    n = skew_transfers(rows, 2, NMAX, 1, 1, out);
    check_expect(n == 0, "a rank without calls has none (%d)", n);
    n = skew_transfers(rows, 2, NMAX, 0, 1, out);
    check_expect(n == 1 && near(out[0], 0.5), "rank 0's call, alone, keeps its 500 ms (%.6f)",
                 out[0]);
    return check_finish("test_skew");
}
