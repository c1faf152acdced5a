/* skew: a collective's transfer time without the skew between its ranks' arrivals.
 *
 * A rank's own record of a collective runs from when it started the call to when the call ended
 * on it. If a peer of the call's axis set arrives later (its compute before the call took longer:
 * noise, load, a slower part), the early rank's record holds the wait for that peer too, and the
 * wait grows with the compute around the call. The book's T_comms is the transfer alone, which
 * cannot start before the last rank arrives: its last arriver's contribution must still cross
 * every hop of the ring (an AllGather's block, a ReduceScatter's partial sums), so
 *     transfer = max over the set's ranks of the end − max over the set's ranks of the start,
 * which needs one clock for all ranks (CLOCK_MONOTONIC on one host; what the link emulator needs
 * too). Without one (ranks on several hosts) the transfer is the smallest of the ranks' own
 * durations: the last arriver's, on links where a message moves only once its receiver has
 * arrived (MPI's rendezvous). Under emulated links a message travels from its send, so the last
 * arriver may find its data already there and its own duration can be 0: the shared-clock form is
 * the one that holds there.
 *
 * The calls are matched across ranks by (axis set, group, seq): the set's bit mask of axes, the
 * coordinates of the rank on the axes outside the set (equal on the ranks of one set), and the
 * call's number among this rank's calls over the set (mesh_call.set_seq; equal on the ranks of the
 * set). Pure: no MPI, no I/O; report.c exchanges the rows (skew_pack) between the ranks. */
#ifndef MT_TRAIN_SKEW_H
#define MT_TRAIN_SKEW_H
#include <stdint.h>

/* One collective call of one rank: its key and its start and end (seconds, any origin). */
typedef struct {
    int32_t set;   /* bit mask of the call's axes (>= 1) */
    int32_t group; /* the rank's coordinates outside the set, linearised (< 2^24) */
    int64_t seq;   /* mesh_call.set_seq (only its low 22 bits are kept) */
    double t0, t1; /* start, end */
} skew_call;

#define SKEW_FIELDS 5 /* floats per packed call: set, group, seq, start, end */

/* Packs n calls (n <= nmax) into nmax rows of SKEW_FIELDS floats, times relative to `ref` (the
 * ranks' common origin: a float then keeps microseconds over minutes); rows n..nmax−1 are
 * padding (set −1). Pure. */
void skew_pack(const skew_call *c, int n, int nmax, double ref, float *rows);

/* all = nranks blocks of nmax packed rows (rank r's at r·nmax·SKEW_FIELDS), as gathered from every
 * rank. For each of rank `me`'s calls, in its packed order, writes to out[i] the call's transfer:
 * with shared_clock, max over the ranks holding the same call of its end − max of its start; else
 * the smallest of their durations. A call no other rank holds (an axis set of one rank) keeps its
 * own duration. Returns the number of rank me's calls, or −1 when a scratch buffer cannot be
 * allocated (out untouched). Pure. */
int skew_transfers(const float *all, int nranks, int nmax, int me, int shared_clock, double *out);
#endif
