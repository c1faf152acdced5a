/* coll: the book's collectives as explicit algorithms over the mesh's links, plus MPI's built-ins
 * as the baseline, on float buffers, blocking and non-blocking, every call accounted.
 * Depends on mesh.h and cost.h (the algorithms); MPI stays behind it (mesh_comm is opaque).
 *
 * Layouts. Over an ordered axis set A of n ranks (index i = mesh_axes_index):
 *  - all_gather: in[count] from each rank → out[n·count], block i at out + i·count.
 *  - reduce_scatter: in[n·count] (unreduced) → out[count] = Σ_ranks in[i·count ...], block i.
 *  - all_reduce: in[count] → out[count] = Σ_ranks in (any count).
 *  - all_to_all: in[n·count] → out[n·count]; block j of rank i's input lands as block i of
 *    rank j's output.
 *  - ppermute (neighbour shift) along ONE axis by `shift` (+1: send to coord+1, receive from
 *    coord−1); on an open axis the ends send/receive nothing (their out is left untouched).
 * Reductions add in a fixed order, so results are deterministic and identical on every rank.
 * in == out is allowed for all_reduce (in place); all_gather allows in == out + i·count;
 * ppermute allows in == out. Otherwise in and out must not overlap.
 *
 * Algorithms (how data moves; costs in the book's notation, V bytes, |X| ranks on the axis):
 *  - RING: unidirectional ring, |X|−1 steps of V/|X| to coord+1.
 *  - BIDIR: each block travels both ways at once: ⌊|X|/2⌋ steps of V/|X| each way (with |X| even
 *    the last step moves half a block each way). On an axis without wraparound both RING and
 *    BIDIR run as a line that uses only existing links: |X|−1 steps, blocks flowing both ways,
 *    which costs as much as the unidirectional ring (the book's sharding pop quiz 2).
 *  - SEQ: several axes one after the other, each with BIDIR (AllGather gathers the last, minor,
 *    axis first so blocks stay contiguous; ReduceScatter scatters the first axis first).
 *  - MULTI: the payload is split into n_axes parts; part k runs SEQ with the axis order rotated by
 *    k, all parts concurrently, so every axis's links are busy at once (bandwidth × n_axes).
 *  - MPI: MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce / MPI_Alltoall on the set's
 *    communicator.
 *  - DIRECT: one round in which every block goes straight to the rank that needs it (AllReduce:
 *    a ReduceScatter round, then an AllGather round), as a TPU's ICI routers forward packets
 *    through intermediate chips (dimension-ordered, shortest way round). Link load, emulation
 *    and accounting: see coll_direct.c; cost: mesh/cost.h. On a ring of 4 it
 *    loads the links as the book's bidirectional formula charges, and its AllToAll does on any
 *    even ring (V/(4W)); on larger axes its AllGather loads the links more than a ring does
 *    (O(n²) block-hops). Reduces in rank order.
 *  RING and BIDIR over several axes run over the flattened set as if it were one ring (the
 *  neighbours of index i are i±1 on the set's communicator; it wraps if every axis of the set
 *  wraps; emulated links are those of the last, minor, axis). MESH_ALG_DEFAULT is BIDIR for one
 * axis and MULTI for several, unless mesh_set_default_alg chose otherwise. AllReduce =
 * ReduceScatter + AllGather with blocks of ⌈count/|X|⌉ or ⌊count/|X|⌋ elements (any count).
 * AllToAll with RING/BIDIR is a ring with shrinking payloads (each step forwards what is still
 * travelling). */
#ifndef MT_MESH_COLL_H
#define MT_MESH_COLL_H
#include "mesh/cost.h" /* mesh_alg, the algorithms (shared with the cost model) */
#include "mesh/mesh.h"

typedef enum {
    MESH_OP_ALL_GATHER,
    MESH_OP_REDUCE_SCATTER,
    MESH_OP_ALL_REDUCE,
    MESH_OP_ALL_TO_ALL,
    MESH_OP_PPERMUTE,
    MESH_OP_SEND, /* point-to-point to a neighbour (pipelining) */
    MESH_OP_RECV,
    MESH_OP_COUNT
} mesh_op;

const char *mesh_op_name(mesh_op op);
/* Not collective (set it identically on every rank). DEFAULT restores the per-arity default. */
void mesh_set_default_alg(mesh *m, mesh_alg a);
/* Not collective (set it identically on every rank). RING and BIDIR collectives whose blocks are
 * larger than `bytes` run as up to 16 concurrent lanes, lane k taking elements
 * [len·k/K, len·(k+1)/K) of every block, so that the transfers, copies and adds of different lanes
 * overlap (a pipeline). Results are bit-identical for any setting: every element travels the same
 * way and is added in the same order. Default 1 MiB; 0 turns lanes off. */
void mesh_set_chunk(mesh *m, int64_t bytes);
int64_t mesh_get_chunk(const mesh *m);
/* What the collectives carry on the wire. BF16 (a TPU's format): every message is converted to
 * bf16 (kernels/bf16.h, round to nearest even) when it leaves and back to fp32 when it arrives, so
 * the bytes sent and the emulated link time are halved; reductions still add in fp32 (a rank
 * adds its fp32 contribution to the fp32 value of the partial it received, then rounds once to
 * send it on), and the result of a ReduceScatter is fp32. Every element an AllGather, AllToAll or
 * ppermute delivers is bf16-rounded, the rank's own block included, so every rank holds the same
 * values (an AllReduce's result is identical on every rank). A call over one rank moves nothing
 * and stays exact. RING, BIDIR, SEQ and MULTI honour it; MPI and DIRECT, the baselines, always
 * move fp32. */
typedef enum { MESH_WIRE_F32 = 0, MESH_WIRE_BF16, MESH_WIRE_COUNT } mesh_wire;
const char *mesh_wire_name(mesh_wire w); /* "fp32", "bf16" */
/* Parses "fp32" / "bf16"; returns −1 when unknown. */
int mesh_wire_parse(const char *s);
/* Bytes per element on the wire: 4 or 2. */
int mesh_wire_bytes(mesh_wire w);
/* Not collective (set it identically on every rank). The wire format of the calls made from now
 * on through the functions below that take no format (mesh_all_gather, ..., mesh_ippermute): the
 * mesh's default format, fp32 unless set. A call made with mesh_coll_run or mesh_coll_start
 * carries its own format and ignores this one. */
void mesh_set_wire(mesh *m, mesh_wire w);
mesh_wire mesh_get_wire(const mesh *m);
/* The algorithm `alg` resolves to for a collective over `a` (DEFAULT → BIDIR or MULTI; SEQ and
 * MULTI over one axis → BIDIR). */
mesh_alg mesh_alg_resolve(const mesh *m, mesh_axes a, mesh_alg alg);

/* Blocking. Collective over: the axes in `a`. */
void mesh_all_gather(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
void mesh_reduce_scatter(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                         mesh_alg alg);
void mesh_all_reduce(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
void mesh_all_to_all(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
/* The same four by op (MESH_OP_ALL_GATHER .. MESH_OP_ALL_TO_ALL), for callers that loop over
 * operations (benchmarks, tests). */
void mesh_collective(mesh *m, mesh_op op, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg);
/* Collective over: axis. */
void mesh_ppermute(mesh *m, int axis, int shift, float *out, const float *in, int64_t count);

/* AllToAllv: an AllToAll of variable blocks over the set a of n ranks, counts first.
 * mesh_all_to_allv_counts gathers every rank's n send counts (send[j]: elements for set index j)
 * into counts[n·n] on every rank: counts[i·n + j] elements go from set index i to j. It is an
 * AllGather by alg, moved bit for bit.
 * mesh_all_to_allv then moves the blocks: rank i's `in` holds its blocks for j = 0..n−1 packed in
 * that order (block j: counts[i·n + j] elements), and its `out` receives the blocks from
 * i' = 0..n−1 packed in that order (Σ_i' counts[i'·n + i] elements); in and out must not overlap.
 * The same counts on every rank of the set (those of mesh_all_to_allv_counts, or their transpose
 * for the reverse exchange). By alg: MPI is MPI_Alltoallv; DIRECT sends each block at its own
 * size in one round (its emulated round is charged as if every block had the largest count);
 * RING, BIDIR, SEQ and MULTI run the AllToAll above over blocks padded to the largest count of
 * the matrix (zeros on the wire, dropped on arrival), so a skewed matrix moves n blocks of its
 * largest. The wire format is the mesh's (mesh_set_wire; MPI and DIRECT move fp32). Recorded
 * (stats, trace, observers) as an AllToAll whose count is the largest block.
 * Collective over: the axes in a. */
void mesh_all_to_allv_counts(mesh *m, mesh_axes a, int64_t *counts, const int64_t *send,
                             mesh_alg alg);
void mesh_all_to_allv(mesh *m, mesh_axes a, float *out, const float *in, const int64_t *counts,
                      mesh_alg alg);
/* Not collective. The largest entry of the n×n counts. */
int64_t mesh_all_to_allv_max(const mesh *m, mesh_axes a, const int64_t *counts);

/* One collective as a value: what a plan lists for each call and mesh_coll_run executes. Its wire
 * format is its own (the functions above take the mesh's default, mesh_set_wire). */
typedef struct {
    mesh_op op;     /* MESH_OP_ALL_GATHER .. MESH_OP_PPERMUTE */
    mesh_axes axes; /* the ordered axis set; ppermute: its one axis */
    int shift;      /* ppermute: +1 sends to coord+1 (see mesh_ppermute); otherwise 0 */
    int64_t count;  /* as the op's function above takes it */
    mesh_alg alg;   /* MESH_ALG_DEFAULT: the mesh's default (mesh_alg_resolve); ppermute: ignored */
    mesh_wire wire; /* what its messages carry; MPI and DIRECT (not ppermute) always move fp32 */
} mesh_coll_call;
/* Blocking. Collective over: c->axes. As the op's function above, with c's wire format. */
void mesh_coll_run(mesh *m, const mesh_coll_call *c, float *out, const float *in);
/* Blocking. Collective over: c->axes. mesh_all_to_allv with c's algorithm and wire format (c->op
 * is MESH_OP_ALL_TO_ALL; c->count is ignored: the blocks are the counts' n×n matrix). */
void mesh_coll_run_v(mesh *m, const mesh_coll_call *c, float *out, const float *in,
                     const int64_t *counts);

/* bf16 in memory (a TPU's FSDP gathers its bf16 weights so): AllGather of `count` 2-byte
 * elements from each rank (bf16 bit patterns, or anything else), moved bit for bit: nothing
 * converted on the way, 2 bytes per element on the wire, every algorithm (MPI and DIRECT move
 * them too). count must be even: the engine moves the elements in pairs, as the four-byte units
 * of an fp32 call (a caller with a block of odd length pads it). Recorded (stats, trace,
 * observers) as an AllGather of `count` elements in MESH_WIRE_BF16. Blocking, and non-blocking
 * below. Collective over: the axes in `a`. */
void mesh_all_gather_bf16(mesh *m, mesh_axes a, uint16_t *out, const uint16_t *in, int64_t count,
                          mesh_alg alg);

/* Non-blocking: start returns a handle; buffers must stay valid until mesh_wait. Calls on one
 * mesh complete in the order they were started. */
typedef struct mesh_req mesh_req;
mesh_req *mesh_iall_gather(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                           mesh_alg alg);
mesh_req *mesh_ireduce_scatter(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                               mesh_alg alg);
mesh_req *mesh_iall_reduce(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                           mesh_alg alg);
mesh_req *mesh_iall_to_all(mesh *m, mesh_axes a, float *out, const float *in, int64_t count,
                           mesh_alg alg);
/* counts (n·n) and the buffers must stay valid until mesh_wait. */
mesh_req *mesh_iall_to_allv(mesh *m, mesh_axes a, float *out, const float *in,
                            const int64_t *counts, mesh_alg alg);
mesh_req *mesh_ippermute(mesh *m, int axis, int shift, float *out, const float *in, int64_t count);
mesh_req *mesh_iall_gather_bf16(mesh *m, mesh_axes a, uint16_t *out, const uint16_t *in,
                                int64_t count, mesh_alg alg);
/* Non-blocking mesh_coll_run: the call keeps c's wire format (c itself need not outlive it). */
mesh_req *mesh_coll_start(mesh *m, const mesh_coll_call *c, float *out, const float *in);
/* Non-blocking mesh_coll_run_v: the same blocks, bit for bit (counts and the buffers valid until
 * mesh_wait; c need not outlive the call). */
mesh_req *mesh_coll_start_v(mesh *m, const mesh_coll_call *c, float *out, const float *in,
                            const int64_t *counts);
/* How non-blocking calls progress: one progress thread per mesh (started at the first mesh_i*
 * call; MPI_THREAD_MULTIPLE) executes queued calls in order on duplicated communicators, so they
 * overlap with the caller's compute without the caller calling into mesh; it sleeps on a
 * condition variable when idle. Blocking calls run on the caller's thread and never mix messages
 * with the queue. Every rank must start the same non-blocking calls in the same order. */
/* Not collective. Returns 1 if done (the handle stays valid until mesh_wait). */
int mesh_test(mesh_req *r);
/* Not collective. Blocks until done, then frees the handle. Accepts NULL. */
void mesh_wait(mesh_req *r);
/* Not collective. CPU seconds the progress thread has used so far (0 before the first mesh_i*
 * call): what running the non-blocking calls cost, beside the caller's own CPU time. In the
 * inline mode: the caller's CPU time on the coroutine that runs them. */
double mesh_progress_cpu(const mesh *m);
/* Not collective. How many times this process's waits inside mesh have slept so far, every
 * thread counted: a wait blocked on a peer naps between polls instead of spinning (mesh/nap.h),
 * so the count grows while one waits. For tests and benchmarks. */
int64_t mesh_naps(void);
/* Who runs the non-blocking calls. THREAD (the default): the progress thread above. INLINE: a
 * coroutine of the caller's own thread (mesh/co_progress.c), resumed at issue, in mesh_test,
 * mesh_poll and mesh_wait and while the caller blocks in any other call of the mesh: no thread
 * takes a core from the caller's compute, but a call moves on only when the caller polls, so a
 * caller that wants overlap calls mesh_poll between pieces of its compute. For real links only:
 * link emulation (mesh_emulate, mesh_set_link) sleeps until a message's emulated delivery, which
 * needs the thread. The same messages in the same order either way: bit-identical results. The
 * SMPI build always runs the queue on the coroutine (and its simulated compute polls). Not
 * collective; ranks may differ (each runs its own queue). Ignored while a non-blocking call is in
 * flight. */
typedef enum { MESH_PROGRESS_THREAD, MESH_PROGRESS_INLINE } mesh_progress;
void mesh_set_progress(mesh *m, mesh_progress mode);
mesh_progress mesh_get_progress(const mesh *m);
/* Collective over: world. The mode for a caller that computes on compute_threads threads: INLINE
 * when the mesh's ranks on this host, each with its compute threads and a progress thread, would
 * outnumber the host's cores (the thread would take cores from the compute), THREAD otherwise and
 * whenever a link is emulated. core_share: the share of a core the caller's thread had while
 * every rank computed at once (its CPU time / wall time; pass 1 when not measured); under 0.9
 * the cores are oversubscribed (by the ranks or by other jobs) and the mode is THREAD too: a
 * progress thread, scheduled on its own when a message arrives, moves the calls on while the
 * caller waits for a core, where inline they would move only when the caller runs. */
mesh_progress mesh_progress_auto(const mesh *m, int compute_threads, double core_share);
/* Not collective. How long this process's waits inside mesh/ poll a late peer before they start
 * to nap (mesh/nap.h), every thread's: 50 µs at first (NAP_SPIN), which costs the fast path
 * nothing and gives a shared core away soon. Set before the waits it should govern. */
void mesh_set_spin(double seconds);
/* Collective over: world. The spin for a caller that computes on compute_threads threads:
 * NAP_SPIN_OWN_CORE (20 ms) when the mesh's ranks on this host, each with its compute threads,
 * fit on the host's cores and this rank had a whole core while every rank computed at once
 * (core_share >= 0.9, as mesh_progress_auto: 1 when not measured); NAP_SPIN otherwise, and
 * whenever a link is emulated (its waits sleep until a delivery). */
double mesh_spin_auto(const mesh *m, int compute_threads, double core_share);
/* Not collective. The spin mesh_set_spin set (NAP_SPIN at first). */
double mesh_get_spin(void);
/* Not collective. In the inline mode, moves the non-blocking calls in flight on as far as they go
 * without waiting (a few µs when nothing arrived); otherwise nothing. */
void mesh_poll(mesh *m);

/* ---- point-to-point between neighbours along one axis (pipeline stages) ----
 * dir = +1: the neighbour at coord+1, −1: coord−1 (with wraparound if the axis wraps). Sends are
 * non-blocking (the buffer must stay valid until mesh_p2p_wait); receives block, or are started
 * with mesh_irecv. Messages between a pair arrive in the order sent. Emulated links delay
 * delivery like a one-hop transfer. The receiver's blocked time is accounted as MESH_OP_RECV
 * (a pipeline's bubble shows there). Not collective: only the two neighbours take part. */
typedef struct mesh_p2p mesh_p2p;
mesh_p2p *mesh_isend(mesh *m, int axis, int dir, const float *buf, int64_t count);
mesh_p2p *mesh_irecv(mesh *m, int axis, int dir, float *buf, int64_t count);
void mesh_recv(mesh *m, int axis, int dir, float *buf, int64_t count);
/* The same on channel ch (0 ≤ ch < MESH_P2P_CHANNELS; the calls above use channel 0): messages
 * between a pair arrive in the order sent per channel, and the channels do not mix (a pipeline's
 * activations and gradients, whose receives may come in another order than their sends). */
#define MESH_P2P_CHANNELS 2
mesh_p2p *mesh_isend_on(mesh *m, int axis, int dir, int ch, const float *buf, int64_t count);
void mesh_recv_on(mesh *m, int axis, int dir, int ch, float *buf, int64_t count);
/* Completes and frees. Accepts NULL. */
void mesh_p2p_wait(mesh_p2p *r);

/* ---- accounting ---- */
typedef struct {
    int64_t calls;
    int64_t bytes;       /* bytes this rank sent over links */
    double seconds;      /* wall time from start to completion, summed */
    double wait_seconds; /* time the caller spent blocked in this op (blocking call or wait) */
    double wait_cpu;     /* the caller's CPU time while blocked (polling, copies, reductions) */
    int64_t idle_polls;  /* summed mesh_call.idle_polls: how often waiting for messages woke up */
} mesh_stat;
/* Totals for op over every axis set (axis < 0) or for sets whose major axis is `axis`. Not
 * collective. Call when no non-blocking call is in flight for exact figures. */
mesh_stat mesh_stats(const mesh *m, mesh_op op, int axis);
void mesh_stats_reset(mesh *m);

/* One call, as recorded at completion. seq counts calls on this rank from 0 in issue order (so
 * equal seq on two ranks means the same collective if the program is correct); with
 * (op, axes, count, alg) it is the call's signature for hang forensics. */
typedef struct {
    int64_t seq;
    int64_t set_seq; /* collectives: the call's number among this rank's calls over its axis
                        set, from 0 (equal on the ranks of the set if the program is correct;
                        unlike seq it does not count calls over other sets). send/recv: 0 */
    mesh_op op;
    mesh_axes axes; /* for ppermute, send and recv: the one axis */
    mesh_alg alg;   /* as resolved */
    int64_t count;  /* the count argument */
    int shift;      /* ppermute: the shift; send, recv: the direction, +1 or −1 */
    int async;      /* 1 if started with mesh_i* */
    mesh_wire wire; /* the format its messages moved in (MPI, DIRECT, send/recv: always fp32) */
    int64_t link_bytes[MESH_MAX_AXES][2]; /* bytes this rank sent per axis, to coord+1 / coord−1
                                             (MPI alg: bytes handed to MPI, under [major][0];
                                             DIRECT: d·b per block of b bytes routed d hops
                                             along the axis, i.e. its link crossings) */
    double t_issue;     /* mesh_now() at the call (or at mesh_i*); send/recv: when the caller
                           started waiting for it (mesh_p2p_wait) */
    double t_start;     /* when execution started (send/recv: posted) */
    double t_end;       /* when it completed */
    double cpu_issue;   /* mesh_thread_cpu() of the caller at t_issue (blocking calls, p2p waits) */
    double t_emulated;  /* the call on the link emulator's own clock: the time its messages take
                           on the emulated links alone (no compute, every rank starting at 0 on
                           idle links), up to this rank's last emulated delivery; the max over
                           ranks is what the links allow, independent of the machine's load.
                           0 without emulated links (and for MPI's built-ins) */
    int64_t idle_polls; /* the engine's rounds for this call that found no message ready to
                           move on, on the thread that ran it; each polls MPI, then naps (up to
                           the next emulated delivery, or a growing interval: progress.h,
                           nap.h), or is the spin at the start of an idle stretch of a blocking
                           call on real links (mesh_set_spin: 50 µs unless each rank has a core
                           of its own), which polls without sleeping (counted once), or waits
                           inside MPI (the SMPI build, once). A wait that polled without napping
                           would count about one per µs; load makes naps overshoot, so it
                           lowers the count, never raises it. 0 for MPI's built-ins and
                           DIRECT */
} mesh_call;
/* Not collective. mesh_wait, and the call's record as it completed into out (NULL: not wanted;
 * its t_end − t_start is the transfer the report counts); returns the seconds the caller was
 * blocked here (0 for NULL), so the transfer hidden behind the caller's compute is the transfer
 * less that. */
double mesh_wait_rec(mesh_req *r, mesh_call *out);
/* Not collective. Copies up to max records with seq >= from_seq (oldest first) from the ring
 * buffer of the last 1024 calls into out; returns how many. */
int mesh_trace_read(const mesh *m, int64_t from_seq, mesh_call *out, int max);
/* Not collective. Observers of the calls (up to 4): done(rec, ctx) at each completion, from the
 * thread that completed the call (the progress thread for mesh_i* calls); waited(rec, t0, t1,
 * ctx), if not NULL, when mesh_wait for a non-blocking call returns, the caller having been
 * blocked in it over [t0, t1]. Both must be quick and thread-safe. Returns 0, or −1 when four
 * observers are registered already. */
typedef void (*mesh_trace_fn)(const mesh_call *rec, void *ctx);
typedef void (*mesh_wait_fn)(const mesh_call *rec, double t0, double t1, void *ctx);
int mesh_add_trace_hook(mesh *m, mesh_trace_fn done, mesh_wait_fn waited, void *ctx);
/* Not collective. Removes the observers registered with ctx. */
void mesh_remove_trace_hook(mesh *m, void *ctx);
/* Debug mode (not collective; set on every rank): before each collective, the ranks of the axis
 * set compare the signature (set_seq, op, axes, count, alg, shift); if they differ, the set's
 * first rank prints one message naming every rank (with coordinates) and the call it makes, and
 * the job ends with MPI_Abort (status 3). Costs one small MPI_Allgather per call. A rank calling
 * over another axis set never joins the check: that shows as a hang (see mesh_watchdog_start). */
void mesh_set_verify(mesh *m, int on);
#endif
