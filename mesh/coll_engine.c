/* coll_engine: step schedules of the ring, bidirectional ring and line algorithms, and the driver
 * that runs chains of phases concurrently. See coll_engine.h.
 *
 * Directions: d = 0 sends to r+1 and receives from r−1; d = 1 sends to r−1, receives from r+1.
 * A block may move whole (FULL) or as its first (H0) or second (H1) half: with an even ring the
 * block at distance |X|/2 goes half each way. Schedules, for step s = 1..nsteps on n ranks
 * (a = ⌊n/2⌋, b = ⌊(n−1)/2⌋; indices mod n on a ring):
 *  AllGather   RING  d0: send block r−s+1, receive r−s                       (n−1 steps)
 *              BIDIR d0: send r−s+1, receive r−s; d1: send r+s−1, receive r+s; the last step of
 *                    an even ring moves H0 (d0) / H1 (d1)                    (a steps)
 *              LINE  as BIDIR without wraparound: blocks that fall off the ends are not sent
 *                                                                            (n−1 steps)
 *  ReduceScatter is the time-reverse: the partial sum of block i flows towards rank i, each rank
 *  adding its own contribution (partial = received + own), and rank i finishes with
 *  (own + from r−1) + from r+1. All chains of a step end on the last step.
 *              RING  d0: send r−s, receive r−s−1                             (n−1 steps)
 *              BIDIR d0: send r+a−s+1, receive r+a−s; d1: send r−a+s−1, receive r−a+s; the FIRST
 *                    step of an even ring moves H1 (d0) / H0 (d1)            (a steps)
 *              LINE  d0: send n+r−s, receive n+r−1−s; d1: send s+r−n, receive s+r+1−n, when
 *                    those blocks exist                                     (n−1 steps)
 *              A step's block may be partly covered by the partial received the step before
 *              (an even ring's first step moves halves): the covered part leaves from the
 *              partial, the rest straight from the input — one message each, no copy.
 *  AllToAll    the data leaving origin o in direction d is o's blocks for distances 1..D_d(o)
 *              (D = n−1 one way for RING, a both ways for BIDIR, up to the end of the line for
 *              LINE). At step s the holder sends two messages: the block for distance s, which
 *              lands in the receiver's output, and the rest (distances s+1..D), which lands in
 *              its scratch and is forwarded next step. The rest is laid out in memory order
 *              (distance ascending for d0, descending for d1), so step 1 sends it straight from
 *              the input when it is contiguous there; each later step peels one end off.
 *
 * Progress. Each direction of a phase is a stream: the send of step s waits only for the receive
 * of step s−1 (the data it forwards), a receive only for its buffer; sends are not waited for
 * until their buffer is reused. The driver posts whatever is ready across all chains, then
 * waits over every request in flight as the call's waiter says (progress.h): it naps rather
 * than spin when nothing arrives. */
#include "mesh/coll_engine.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "mesh/progress.h"

enum { R_FULL, R_H0, R_H1 };
typedef struct {
    int blk, rk;
} xfer;
typedef struct {
    float *ptr;
    int64_t n;
} msg;

static int mod(int a, int n) {
    a %= n;
    return a < 0 ? a + n : a;
}
static int64_t blk_off(const phase *p, int j) {
    return p->off ? p->off[j] : (int64_t)j * p->bs;
}
static int64_t blk_len(const phase *p, int j) {
    return p->len ? p->len[j] : p->bs;
}
/* The range [lo, lo+l) of block j that moves as rk. The halves split at the WHOLE block's middle
 * (mid[j] for a lane), so every element travels the same way with or without lanes. */
static void range_of(const phase *p, int j, int rk, int64_t *lo, int64_t *l) {
    int64_t len = blk_len(p, j), h0 = p->mid ? p->mid[j] : len - len / 2;
    *lo = rk == R_H1 ? h0 : 0;
    *l = rk == R_FULL ? len : rk == R_H0 ? h0 : len - h0;
}
static void add_into(float *restrict acc, const float *restrict x, int64_t n) {
    for (int64_t e = 0; e < n; e++) acc[e] += x[e];
}

/* ---- schedules (for rank r, so that a receiver can evaluate its sender's) ---- */
static void ag_sched(const phase *p, int r, int d, int s, xfer *snd, xfer *rcv) {
    int n = p->n;
    snd->blk = rcv->blk = -1;
    snd->rk = rcv->rk = R_FULL;
    if (p->sc == SCH_RING) {
        if (d == 0) snd->blk = mod(r - s + 1, n), rcv->blk = mod(r - s, n);
    } else if (p->sc == SCH_BIDIR) {
        int rk = s <= (n - 1) / 2 ? R_FULL : (d == 0 ? R_H0 : R_H1);
        snd->rk = rcv->rk = rk;
        if (d == 0)
            snd->blk = mod(r - s + 1, n), rcv->blk = mod(r - s, n);
        else
            snd->blk = mod(r + s - 1, n), rcv->blk = mod(r + s, n);
    } else if (d == 0) {
        if (r - s + 1 >= 0 && r + 1 < n) snd->blk = r - s + 1;
        if (r - s >= 0) rcv->blk = r - s;
    } else {
        if (r + s - 1 <= n - 1 && r >= 1) snd->blk = r + s - 1;
        if (r + s <= n - 1) rcv->blk = r + s;
    }
}

static void rs_sched(const phase *p, int r, int d, int s, xfer *snd, xfer *rcv) {
    int n = p->n;
    snd->blk = rcv->blk = -1;
    snd->rk = rcv->rk = R_FULL;
    if (s < 1) return;
    if (p->sc == SCH_RING) {
        if (d == 0) snd->blk = mod(r - s, n), rcv->blk = mod(r - s - 1, n);
    } else if (p->sc == SCH_BIDIR) {
        int a = n / 2, b = (n - 1) / 2;
        int rk = s > a - b ? R_FULL : (d == 0 ? R_H1 : R_H0);
        snd->rk = rcv->rk = rk;
        if (d == 0)
            snd->blk = mod(r + a - s + 1, n), rcv->blk = mod(r + a - s, n);
        else
            snd->blk = mod(r - (a - s + 1), n), rcv->blk = mod(r - (a - s), n);
    } else if (d == 0) {
        if (r + 1 < n && n + r - s <= n - 1) snd->blk = n + r - s;
        if (r >= 1 && n + r - 1 - s <= n - 1) rcv->blk = n + r - 1 - s;
    } else {
        if (r >= 1 && s + r - n >= 0) snd->blk = s + r - n;
        if (r + 1 < n && s + r + 1 - n >= 0) rcv->blk = s + r + 1 - n;
    }
}

/* The range [lo, lo+l) of the block rank r receives at step s in direction d (l = 0: none). */
static int rs_recv_range(const phase *p, int r, int d, int s, int64_t *lo, int64_t *l) {
    xfer sn, rc;
    rs_sched(p, r, d, s, &sn, &rc);
    *lo = *l = 0;
    if (rc.blk >= 0) range_of(p, rc.blk, rc.rk, lo, l);
    return rc.blk;
}

/* The messages rank r sends at step s in direction d of a ReduceScatter, as ranges of the block:
 * the part covered by the partial received at step s−1 (acc = 1) leaves from that partial, the
 * rest from the input. Returns their number (0..3) and the block. */
typedef struct {
    int64_t lo, n;
    int acc;
} piece;
static int rs_pieces(const phase *p, int r, int d, int s, int *blk, piece *pc) {
    xfer sn, rc;
    rs_sched(p, r, d, s, &sn, &rc);
    int64_t lo, l, plo, pl;
    if (sn.blk < 0) return 0;
    range_of(p, sn.blk, sn.rk, &lo, &l);
    if (l == 0) return 0;
    *blk = sn.blk;
    int pb = rs_recv_range(p, r, d, s - 1, &plo, &pl);
    if (pl == 0) {
        pc[0] = (piece){lo, l, 0};
        return 1;
    }
    CHECK(pb == sn.blk && plo >= lo && plo + pl <= lo + l, "RS schedule mismatch");
    int k = 0;
    if (plo > lo) pc[k++] = (piece){lo, plo - lo, 0};
    pc[k++] = (piece){plo, pl, 1};
    if (plo + pl < lo + l) pc[k++] = (piece){plo + pl, lo + l - plo - pl, 0};
    return k;
}

/* ---- AllToAll geometry ---- */
static int a2a_dmax(const phase *p, int d, int o) {
    if (p->sc == SCH_RING) return d == 0 ? p->n - 1 : 0;
    if (p->sc == SCH_BIDIR) return p->n / 2;
    return d == 0 ? p->n - 1 - o : o;
}
/* The block origin o sends to distance k in direction d, and the range of it that travels in d. */
static int a2a_part(const phase *p, int d, int o, int k, int64_t *lo, int64_t *c) {
    int dest = p->sc == SCH_LINE ? o + (d ? -k : k) : mod(o + (d ? -k : k), p->n);
    int half = p->sc == SCH_BIDIR && k == p->n / 2 && p->n % 2 == 0;
    range_of(p, dest, half ? (d ? R_H1 : R_H0) : R_FULL, lo, c);
    return dest;
}
/* Elements of origin o's blocks for distances k0..D in direction d. */
static int64_t a2a_size(const phase *p, int d, int o, int k0) {
    int64_t sz = 0, lo, c;
    for (int k = k0; k <= a2a_dmax(p, d, o); k++) sz += (a2a_part(p, d, o, k, &lo, &c), c);
    return sz;
}
/* Origin of the data sent (sent = 1) or received (sent = 0) at step s; −1 if none (line ends). */
static int a2a_origin(const phase *p, int d, int s, int sent) {
    int o = d == 0 ? p->r - s + sent : p->r + s - sent;
    if (p->sc == SCH_LINE) return o >= 0 && o < p->n ? o : -1;
    return mod(o, p->n);
}
/* Step 1's rest (distances 2..D) from the input: its start if contiguous there, else packed. */
static float *a2a_rest_from_input(phase *p, int d) {
    int D = a2a_dmax(p, d, p->r);
    const float *first = NULL, *next = NULL;
    int contiguous = 1;
    for (int i = 0; i < D - 1; i++) { /* memory order: k ascending for d0, descending for d1 */
        int k = d == 0 ? 2 + i : D - i;
        int64_t lo, c;
        const float *at = p->src + blk_off(p, a2a_part(p, d, p->r, k, &lo, &c)) + lo;
        if (!first)
            first = at;
        else if (at != next)
            contiguous = 0;
        next = at + c;
    }
    if (contiguous) return (float *)first;
    float *pk = p->st[d].pack;
    for (int i = 0; i < D - 1; i++) {
        int k = d == 0 ? 2 + i : D - i;
        int64_t lo, c;
        const float *at = p->src + blk_off(p, a2a_part(p, d, p->r, k, &lo, &c)) + lo;
        if (CTX_DATA(p->env->ctx)) memcpy(pk, at, (size_t)c * sizeof(float));
        pk += c;
    }
    return p->st[d].pack;
}

/* ---- the messages of a step ---- */
static int perm_dir(const phase *p) {
    return p->shift > 0 ? 0 : 1;
}
static int perm_peer(const phase *p, int to) {
    int q = p->r + (to ? p->shift : -p->shift);
    if (p->sc != SCH_LINE) return mod(q, p->n);
    return q >= 0 && q < p->n ? q : -1;
}
static int peer_of(const phase *p, int d, int sending) {
    if (p->kind == PH_PERM) return perm_peer(p, sending);
    return mod(p->r + ((d == 0) == (sending != 0) ? 1 : -1), p->n);
}

/* AllGather step s in direction d: the one message this rank sends (sending) or receives, a range
 * of a block of the output, into out; returns 0 or 1 (messages). The own block leaves from the
 * caller's input, not from our copy of it. */
static int ag_msgs(const phase *p, int d, int s, int sending, msg *out) {
    xfer sn, rc;
    int64_t lo, l;
    ag_sched(p, p->r, d, s, &sn, &rc);
    const xfer x = sending ? sn : rc;
    if (x.blk < 0) return 0;
    range_of(p, x.blk, x.rk, &lo, &l);
    if (l == 0) return 0;
    const float *from = sending && x.blk == p->r && p->src ? p->src : p->buf + blk_off(p, x.blk);
    out[0] = (msg){(float *)from + lo, l};
    return 1;
}
/* AllToAll step s in direction d: the origin of the data sent (sending) or received, the range
 * [lo, lo+c) of its block for distance s and the elements (rest) for distances s+1..D, which go
 * on; -1 when nothing moves. *dest: the block of that range. */
static int a2a_step(const phase *p, int d, int s, int sending, int64_t *lo, int64_t *c,
                    int64_t *rest, int *dest) {
    const int o = a2a_origin(p, d, s, sending);
    if (o < 0 || s > a2a_dmax(p, d, o)) return -1;
    *rest = a2a_size(p, d, o, s + 1);
    *dest = a2a_part(p, d, o, s, lo, c);
    return o;
}

/* Fills the messages this rank sends at step s in direction d (stream st); returns their number.
 * (AllGather: step_msgs.) */
static int step_sends(phase *p, stream *st, int d, int s, msg *out) {
    int k = 0;
    switch (p->kind) {
    case PH_RS: {
        piece pc[3];
        int blk = -1, np = rs_pieces(p, p->r, d, s, &blk, pc);
        for (int i = 0; i < np; i++) {
            const float *base =
                pc[i].acc ? st->sb[(s - 1) % ENGINE_NBUF] : p->src + blk_off(p, blk);
            out[k++] = (msg){(float *)base + pc[i].lo, pc[i].n};
        }
        break;
    }
    case PH_A2A: {
        int64_t lo, c, rest;
        int dest;
        if (a2a_step(p, d, s, 1, &lo, &c, &rest, &dest) < 0) break;
        float *mine, *rp;
        if (s == 1) {
            mine = (float *)p->src + blk_off(p, dest) + lo;
            rp = rest > 0 ? a2a_rest_from_input(p, d) : NULL;
        } else { /* what arrived at step s−1: distances s..D in memory order */
            float *h = st->sb[(s - 1) % ENGINE_NBUF];
            mine = d == 0 ? h : h + rest;
            rp = d == 0 ? h + c : h;
        }
        if (c > 0) out[k++] = (msg){mine, c};
        if (rest > 0) out[k++] = (msg){rp, rest};
        break;
    }
    case PH_PERM:
        if (d == perm_dir(p) && perm_peer(p, 1) >= 0 && p->bs > 0)
            out[k++] = (msg){(float *)p->src, p->bs};
        break;
    case PH_AG:
    case PH_REORDER:
        break;
    }
    return k;
}

/* Fills the messages this rank receives at step s in direction d (stream st); returns their
 * number. (AllGather: step_msgs.) */
static int step_recvs(phase *p, stream *st, int d, int s, msg *out) {
    int k = 0;
    switch (p->kind) {
    case PH_RS: {
        int64_t lo, l;
        int blk = rs_recv_range(p, p->r, d, s, &lo, &l), sblk = -1;
        if (blk < 0 || l == 0) break;
        piece pc[3]; /* cut as the sender cuts it */
        int np = rs_pieces(p, peer_of(p, d, 0), d, s, &sblk, pc);
        CHECK(sblk == blk && np > 0 && pc[0].lo == lo && pc[np - 1].lo + pc[np - 1].n == lo + l,
              "RS schedule mismatch");
        for (int i = 0; i < np; i++) out[k++] = (msg){st->sb[s % ENGINE_NBUF] + pc[i].lo, pc[i].n};
        break;
    }
    case PH_A2A: {
        int64_t lo, c, rest;
        int dest;
        const int o = a2a_step(p, d, s, 0, &lo, &c, &rest, &dest);
        if (o < 0) break;
        if (c > 0) out[k++] = (msg){p->buf + blk_off(p, o) + lo, c};
        if (rest > 0) out[k++] = (msg){st->sb[s % ENGINE_NBUF], rest};
        break;
    }
    case PH_PERM:
        if (d == perm_dir(p) && perm_peer(p, 0) >= 0 && p->bs > 0)
            out[k++] = (msg){p->buf == p->src ? st->sb[0] : p->buf, p->bs};
        break;
    case PH_AG:
    case PH_REORDER:
        break;
    }
    return k;
}

/* Fills the messages this rank sends (sending) or receives at step s in direction d; returns
 * their number. */
static int step_msgs(phase *p, int d, int s, int sending, msg *out) {
    if (p->kind == PH_AG) return ag_msgs(p, d, s, sending, out);
    return sending ? step_sends(p, &p->st[d], d, s, out) : step_recvs(p, &p->st[d], d, s, out);
}

/* After step s's receive in direction d arrived: a ReduceScatter adds its own contribution. */
static void recv_done(phase *p, int d, int s) {
    if (p->kind != PH_RS || !CTX_DATA(p->env->ctx)) return;
    int64_t lo, l;
    int blk = rs_recv_range(p, p->r, d, s, &lo, &l);
    if (blk < 0 || blk == p->r || l == 0) return; /* own block: kept for rs_end */
    add_into(p->st[d].sb[s % ENGINE_NBUF] + lo, p->src + blk_off(p, blk) + lo, l);
}

/* out = (own + from r−1) + from r+1, where those arrived; the first term fused with the copy. */
static void rs_end(phase *p) {
    int64_t len = blk_len(p, p->r), lo[2], l[2];
    const float *own = p->src + blk_off(p, p->r), *f[2];
    for (int d = 0; d < 2; d++) {
        f[d] = NULL;
        if (p->nsteps > 0 && rs_recv_range(p, p->r, d, p->nsteps, &lo[d], &l[d]) == p->r && l[d])
            f[d] = p->st[d].sb[p->nsteps % ENGINE_NBUF];
    }
    int first = f[0] && lo[0] == 0 && l[0] == len ? 0 : -1;
    if (first == 0) {
        for (int64_t e = 0; e < len; e++) p->buf[e] = own[e] + f[0][e];
    } else if (p->buf != own) {
        memmove(p->buf, own, (size_t)len * sizeof(float));
    }
    for (int d = 0; d < 2; d++)
        if (f[d] && d != first) add_into(p->buf + lo[d], f[d] + lo[d], l[d]);
}

void reorder_items(float *dst, const float *src, int nd, const int *sizes, const int *ord_src,
                   const int *ord_dst, int64_t item, int64_t s_stride, int64_t s_off,
                   int64_t d_stride, int64_t d_off) {
    int total = 1, t[MESH_MAX_AXES] = {0, 0, 0};
    for (int k = 0; k < nd; k++) total *= sizes[k];
    for (int i = 0; i < total; i++) {
        int q = i; /* i enumerates items in dst order: decode coordinates */
        for (int k = nd - 1; k >= 0; k--) {
            t[ord_dst[k]] = q % sizes[ord_dst[k]];
            q /= sizes[ord_dst[k]];
        }
        int64_t si = 0;
        for (int k = 0; k < nd; k++) si = si * sizes[ord_src[k]] + t[ord_src[k]];
        memcpy(dst + (int64_t)i * d_stride + d_off, src + si * s_stride + s_off,
               (size_t)item * sizeof(float));
    }
}

/* ---- scratch ---- */
static int64_t max_len(const phase *p) {
    int64_t mx = 0;
    for (int j = 0; j < p->n; j++) mx = blk_len(p, j) > mx ? blk_len(p, j) : mx;
    return mx;
}
static int phase_steps(const phase *p) {
    if (p->n <= 1 || p->kind == PH_REORDER) return 0;
    if (p->kind == PH_PERM) return 1;
    return p->sc == SCH_BIDIR ? p->n / 2 : p->n - 1;
}
/* The largest a2a_size(p, d, o, k0) over both directions and every origin. */
static int64_t a2a_max(const phase *p, int k0) {
    int64_t mx = 0;
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < p->n; o++) {
            const int64_t r = a2a_size(p, d, o, k0);
            mx = r > mx ? r : mx;
        }
    return mx;
}
/* Whether receive buffer q is used: steps s = 1..nsteps land in s % NBUF. */
static int buf_used(const phase *p, int q) {
    int ns = phase_steps(p);
    return ns >= ENGINE_NBUF || (q >= 1 && q <= ns);
}
/* Whether receive buffer q of a direction exists (as counted by stream_unit). */
static int sb_used(const phase *p, int q) {
    if (p->kind == PH_PERM) return q == 0 && p->buf == p->src;
    return (p->kind == PH_RS || p->kind == PH_A2A) && buf_used(p, q);
}
/* The most elements of one message of p: a block (AllGather, ReduceScatter), a2a_max(p, k0)
 * (AllToAll: what goes on from distance k0), the whole buffer (ppermute). */
static int64_t msg_max(const phase *p, int k0) {
    switch (p->kind) {
    case PH_AG:
    case PH_RS:
        return max_len(p);
    case PH_A2A:
        return a2a_max(p, k0);
    case PH_PERM:
        return p->bs;
    default:
        return 0;
    }
}
/* Floats per scratch buffer and buffers per direction (receive buffers in use, + the pack
 * buffer for AllToAll). */
static int64_t stream_unit(const phase *p, int *nbuf) {
    *nbuf = 0;
    if (p->n <= 1) return 0;
    for (int q = 0; q < ENGINE_NBUF; q++) *nbuf += p->kind != PH_PERM && sb_used(p, q);
    if (p->kind == PH_A2A) *nbuf += 1; /* the pack buffer */
    if (p->kind == PH_PERM) *nbuf = p->buf == p->src ? 1 : 0;
    return p->kind == PH_AG ? 0 : msg_max(p, 2); /* AllGather receives into its output */
}
static int64_t round16(int64_t n) {
    return (n + 15) / 16 * 16;
}
/* bf16 wire: the most elements one direction sends (or receives) in one step. */
static int64_t wire_unit(const phase *p) {
    return p->wire != MESH_WIRE_BF16 || p->n <= 1 ? 0 : msg_max(p, 1);
}
/* Floats of one direction's scratch: its receive buffers, then (bf16 wire) NBUF staged sends
 * and one staged receive of wire_unit bf16 values each. */
static int64_t stream_floats(const phase *p, int64_t *u, int64_t *wu) {
    int nb;
    *u = round16(stream_unit(p, &nb));
    *wu = round16((wire_unit(p) + 1) / 2);
    return nb * *u + (ENGINE_NBUF + 1) * *wu;
}
static int64_t phase_scratch(const phase *p) {
    int64_t u, wu;
    return (p->sc == SCH_RING || p->kind == PH_PERM ? 1 : 2) * stream_floats(p, &u, &wu);
}

/* ---- posting ---- */
static int tag_of(const phase *p, int d) {
    return (p->chain * 2 + d) * 2;
}
static MPI_Request *recv_rq(phase *p, int d) {
    return p->rq + d * ENGINE_RQ;
}
static MPI_Request *send_rq(phase *p, int d, int s) {
    return p->rq + d * ENGINE_RQ + (ENGINE_MAXT + 1) * (1 + s % ENGINE_NBUF);
}
static int all_null(const MPI_Request *r, int n) {
    for (int i = 0; i < n; i++)
        if (r[i] != MPI_REQUEST_NULL) return 0;
    return 1;
}

static void post_sends(phase *p, int d, int s) {
    msg ms[ENGINE_MAXT];
    int k = step_msgs(p, d, s, 1, ms), peer = peer_of(p, d, 1), tag = tag_of(p, d);
    MPI_Request *rq = send_rq(p, d, s);
    int64_t bytes = 0;
    uint16_t *w = p->st[d].wsend[s % ENGINE_NBUF];
    for (int i = 0; i < k; i++) {
        CHECK(ms[i].n <= INT_MAX, "message of %lld floats exceeds MPI's int count",
              (long long)ms[i].n);
        if (p->wire == MESH_WIRE_BF16) { /* this slot's previous sends have completed */
            if (CTX_DATA(p->env->ctx)) kern_bf16_pack(w, ms[i].ptr, ms[i].n);
            MPI_Isend(w, (int)ms[i].n, MPI_UINT16_T, peer, tag, p->comm, &rq[i]);
            w += ms[i].n;
        } else {
            MPI_Isend(ms[i].ptr, (int)ms[i].n, MPI_FLOAT, peer, tag, p->comm, &rq[i]);
        }
        bytes += ms[i].n * mesh_wire_bytes(p->wire);
    }
    if (k == 0) return;
    int hops = p->kind == PH_PERM ? abs(p->shift) : 1;
    mesh_links *L = p->env->links;
    double t = links_book(L, p->link_axis, d, bytes, hops);
    if (t > 0) {
        double *h = p->st[d].hdr_out[s % ENGINE_NBUF];
        h[0] = t;
        h[1] = links_book_virtual(L, &p->env->ctx->clock, p->link_axis, d, bytes, hops,
                                  p->st[d].vclock);
        MPI_Isend(h, 2, MPI_DOUBLE, peer, tag + 1, p->comm, &rq[ENGINE_MAXT]);
    }
    if (p->link_axis >= 0) p->link_bytes[p->link_axis][d] += bytes;
}

/* Posts step s's receives; returns how many (0: nothing arrives at this step). */
static int post_recvs(phase *p, int d, int s) {
    msg ms[ENGINE_MAXT];
    int k = step_msgs(p, d, s, 0, ms), peer = peer_of(p, d, 0), tag = tag_of(p, d);
    MPI_Request *rq = recv_rq(p, d);
    uint16_t *w = p->st[d].wrecv;
    for (int i = 0; i < k; i++) {
        CHECK(ms[i].n <= INT_MAX, "message of %lld floats exceeds MPI's int count",
              (long long)ms[i].n);
        if (p->wire == MESH_WIRE_BF16) { /* staged; recv_unpack puts it in place */
            MPI_Irecv(w, (int)ms[i].n, MPI_UINT16_T, peer, tag, p->comm, &rq[i]);
            w += ms[i].n;
        } else {
            MPI_Irecv(ms[i].ptr, (int)ms[i].n, MPI_FLOAT, peer, tag, p->comm, &rq[i]);
        }
    }
    p->st[d].hdr_in[0] = p->st[d].hdr_in[1] = 0;
    if (k > 0 && links_emulated(p->env->links, p->link_axis))
        MPI_Irecv(p->st[d].hdr_in, 2, MPI_DOUBLE, peer, tag + 1, p->comm, &rq[ENGINE_MAXT]);
    return k;
}

/* bf16 wire: step s's staged receive, converted to fp32 where the fp32 wire would have put it. */
static void recv_unpack(phase *p, int d, int s) {
    if (p->wire != MESH_WIRE_BF16 || !CTX_DATA(p->env->ctx)) return;
    msg ms[ENGINE_MAXT];
    int k = step_msgs(p, d, s, 0, ms);
    const uint16_t *w = p->st[d].wrecv;
    for (int i = 0; i < k; i++) {
        kern_bf16_unpack(ms[i].ptr, w, ms[i].n);
        w += ms[i].n;
    }
}

/* A receive of step s may land in sb[s % NBUF] once the send that last read it (step s−NBUF+1)
 * has completed. */
static int recv_buffer_free(phase *p, int d, int s) {
    if (p->kind != PH_RS && p->kind != PH_A2A) return 1;
    int prev = s - ENGINE_NBUF + 1;
    return prev < 1 || (p->st[d].sent >= prev && all_null(send_rq(p, d, prev), ENGINE_MAXT + 1));
}

/* Advances direction d as far as it can without blocking; returns 1 if it did anything. */
static int stream_progress(phase *p, int d, double *wake) {
    stream *st = &p->st[d];
    int did = 0;
    for (;;) {
        int acted = 0;
        if (st->posted > st->done && all_null(recv_rq(p, d), ENGINE_MAXT + 1)) {
            if (st->hdr_in[0] > 0 && mesh_now() < st->hdr_in[0]) { /* emulated link: not yet */
                *wake = *wake == 0 || st->hdr_in[0] < *wake ? st->hdr_in[0] : *wake;
            } else {
                if (st->hdr_in[1] > st->vclock) st->vclock = st->hdr_in[1];
                recv_unpack(p, d, st->posted);
                recv_done(p, d, st->posted);
                st->done = st->posted;
                acted = 1;
            }
        }
        if (st->sent < p->nsteps && st->done >= st->sent &&
            all_null(send_rq(p, d, st->sent + 1), ENGINE_MAXT + 1)) {
            post_sends(p, d, ++st->sent);
            acted = 1;
        }
        if (st->posted == st->done && st->posted < p->nsteps &&
            recv_buffer_free(p, d, st->posted + 1)) {
            if (post_recvs(p, d, ++st->posted) == 0) st->done = st->posted;
            acted = 1;
        }
        if (!acted) return did;
        did = 1;
    }
}

static int stream_finished(phase *p, int d) {
    const stream *st = &p->st[d];
    return st->sent == p->nsteps && st->done == p->nsteps &&
           all_null(p->rq + d * ENGINE_RQ, ENGINE_RQ);
}

/* ---- phase life cycle ---- */
static void phase_start(phase *p, double vready) {
    int64_t u, wu;
    p->nsteps = phase_steps(p);
    memset(p->st, 0, sizeof p->st);
    p->st[0].vclock = p->st[1].vclock = vready;
    const int64_t per_dir = stream_floats(p, &u, &wu);
    for (int d = 0; d < 2 && per_dir > 0; d++) {
        /* RING and ppermute use one direction: both share the first block */
        float *a = p->arena + (p->sc == SCH_RING || p->kind == PH_PERM ? 0 : d * per_dir);
        for (int q = 0; q < ENGINE_NBUF; q++)
            if (sb_used(p, q)) p->st[d].sb[q] = a, a += u;
        if (p->kind == PH_A2A) p->st[d].pack = a, a += u;
        if (wu > 0) {
            for (int q = 0; q < ENGINE_NBUF; q++) p->st[d].wsend[q] = (uint16_t *)a, a += wu;
            p->st[d].wrecv = (uint16_t *)a;
        }
    }
    if (p->kind == PH_REORDER && CTX_DATA(p->env->ctx))
        reorder_items(p->buf, p->src, p->nd, p->sizes, p->ord_src, p->ord_dst, p->item, p->s_stride,
                      p->s_off, p->d_stride, p->d_off);
    p->started = 1;
}

/* The own block's copy runs once step 1 is posted, overlapping the first transfers (this
 * measurably matters on shared memory). */
static void phase_copy_own(phase *p) {
    float *mine = NULL;
    if (!CTX_DATA(p->env->ctx)) {
        p->copied = 1;
        return;
    }
    if (p->kind == PH_AG) {
        mine = p->buf + blk_off(p, p->r);
        if (p->src && p->src != mine)
            memcpy(mine, p->src, (size_t)blk_len(p, p->r) * sizeof(float));
    } else if (p->kind == PH_A2A) {
        int64_t o = blk_off(p, p->r);
        mine = p->buf + o;
        memcpy(mine, p->src + o, (size_t)blk_len(p, p->r) * sizeof(float));
    }
    /* bf16 wire: the own block as the others receive it (its sends were staged already) */
    if (mine && p->wire == MESH_WIRE_BF16 && p->n > 1)
        kern_bf16_round_array(mine, blk_len(p, p->r));
    p->copied = 1;
}

static void phase_end(phase *p) {
    if (!CTX_DATA(p->env->ctx)) return;
    if (p->kind == PH_RS) rs_end(p);
    /* in place: the input left before the result may overwrite it */
    if (p->kind == PH_PERM && p->buf == p->src && p->nsteps && perm_peer(p, 0) >= 0)
        memcpy(p->buf, p->st[perm_dir(p)].sb[0], (size_t)p->bs * sizeof(float));
}

/* Advances chain c; returns 1 if anything happened. */
static int chain_progress(chain *c, double *wake) {
    int did = 0;
    while (c->cur < c->nph) {
        phase *p = &c->ph[c->cur];
        if (!p->started) phase_start(p, c->vclock), did = 1;
        did |= stream_progress(p, 0, wake);
        did |= stream_progress(p, 1, wake);
        if (!p->copied) phase_copy_own(p);
        if (!stream_finished(p, 0) || !stream_finished(p, 1)) break;
        phase_end(p);
        for (int d = 0; d < 2; d++)
            c->vclock = p->st[d].vclock > c->vclock ? p->st[d].vclock : c->vclock;
        c->cur++;
        did = 1;
    }
    return did;
}

/* Publishes how far the chains got, for the observers (activity.h): the least advanced chain's
 * phase and the steps it has done in it. */
static void publish(act_slot *slot, const chain *ch, int nch) {
    int best = -1, bcur = 0, bdone = 0, btotal = 0;
    for (int c = 0; c < nch; c++) {
        const int cur = ch[c].cur;
        int done = 0, total = 0;
        if (cur < ch[c].nph && ch[c].ph[cur].started) {
            const phase *p = &ch[c].ph[cur];
            done = p->st[0].done < p->st[1].done ? p->st[0].done : p->st[1].done;
            total = p->nsteps;
        }
        if (best < 0 || cur < bcur || (cur == bcur && done < bdone))
            best = c, bcur = cur, bdone = done, btotal = total;
    }
    if (best >= 0) act_steps(slot, bcur + 1, ch[best].nph, bdone, btotal);
}

/* The links of the chains, for the waiters (progress.h): the shortest hop latency of their
 * emulated links / 4, at most 2 ms (0: none), and *real = 1 when a real link takes part. */
static double emulated_cap(const mesh_links *L, const chain *ch, int nch, int *real) {
    double lat = 0;
    *real = 0;
    for (int c = 0; c < nch; c++)
        for (int k = 0; k < ch[c].nph; k++) {
            const int ax = ch[c].ph[k].link_axis;
            if (ax < 0 || ch[c].ph[k].n <= 1) continue;
            if (!links_emulated(L, ax))
                *real = 1;
            else if (lat == 0 || L->lat[ax] < lat)
                lat = L->lat[ax];
        }
    if (lat <= 0) return 0;
    return lat / 4 > 2e-3 ? 2e-3 : lat / 4;
}

void engine_run(const coll_env *e, chain *ch, int nch, int64_t (*link_bytes)[2]) {
    eng_ctx *ctx = e->ctx;
    CHECK(nch >= 1 && nch <= ENGINE_MAX_CHAINS, "engine: %d chains", nch);
    MPI_Request rq[ENGINE_MAX_CHAINS * 2 * ENGINE_RQ];
    int idx[ENGINE_MAX_CHAINS * 2 * ENGINE_RQ], nrq = nch * 2 * ENGINE_RQ;
    for (int i = 0; i < nrq; i++) rq[i] = MPI_REQUEST_NULL;
    int64_t base[ENGINE_MAX_CHAINS], total = 0;
    for (int c = 0; c < nch; c++) {
        int64_t need = 0;
        for (int k = 0; k < ch[c].nph; k++) {
            ch[c].ph[k].wire = ctx->wire; /* sizes the staging buffers */
            int64_t s = phase_scratch(&ch[c].ph[k]);
            need = s > need ? s : need;
        }
        base[c] = total;
        total += need;
    }
    float *arena = total ? eng_scratch(ctx, 0, total) : NULL;
    int active = nch;
    for (int c = 0; c < nch; c++) {
        ch[c].cur = 0;
        ch[c].vclock = ctx->clock.vclock;
        for (int k = 0; k < ch[c].nph; k++) {
            phase *p = &ch[c].ph[k];
            p->started = p->copied = 0;
            p->chain = c;
            p->arena = arena ? arena + base[c] : NULL;
            p->rq = rq + c * 2 * ENGINE_RQ;
            p->link_bytes = link_bytes;
            p->env = e;
        }
    }
    int real;
    const double emul = emulated_cap(e->links, ch, nch, &real);
    progress_wait w;
    progress_wait_init(&w, e->q, e->on_thread, emul, real);
    for (;;) {
        int progressed = 0;
        double wake = 0;
        for (int c = 0; c < nch; c++) {
            if (ch[c].cur == ch[c].nph) continue;
            progressed |= chain_progress(&ch[c], &wake);
            if (ch[c].cur == ch[c].nph) active--;
        }
        if (!active) {
            for (int c = 0; c < nch; c++)
                ctx->clock.vclock =
                    ch[c].vclock > ctx->clock.vclock ? ch[c].vclock : ctx->clock.vclock;
            return;
        }
        if (progressed) {
            progress_moved(&w);
            continue;
        }
        publish(e->slot, ch, nch); /* about to wait: say how far the call got */
        ctx->idle_polls++;
        const int outc = progress_waitsome(&w, nrq, rq, idx, wake);
        CHECK(outc != MPI_UNDEFINED || wake > 0,
              "collective engine stalled with nothing in flight");
    }
}
