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
 *  AllToAll    the message leaving origin o in direction d holds o's blocks for distances
 *              1..D_d(o) (D = n−1 one way for RING, a both ways for BIDIR, up to the end of the
 *              line for LINE); each step a rank keeps the first block of what it received and
 *              forwards the rest (shrinking payloads). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, clock_nanosleep, gethostname */
#include "mesh/coll_engine.h"

#include <limits.h>
#include <sched.h>
#include <string.h>

enum { R_FULL, R_H0, R_H1 };
typedef struct {
    int blk, rk;
} xfer;

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
static void range_of(int64_t len, int rk, int64_t *lo, int64_t *l) {
    int64_t h0 = len - len / 2;
    *lo = rk == R_H1 ? h0 : 0;
    *l = rk == R_FULL ? len : rk == R_H0 ? h0 : len - h0;
}

static void ag_sched(const phase *p, int d, int s, xfer *snd, xfer *rcv) {
    int n = p->n, r = p->r;
    snd->blk = rcv->blk = -1;
    snd->rk = rcv->rk = R_FULL;
    if (p->sc == SCH_RING) {
        if (d == 0) snd->blk = mod(r - s + 1, n), rcv->blk = mod(r - s, n);
    } else if (p->sc == SCH_BIDIR) {
        int rk = s <= (n - 1) / 2 ? R_FULL : (d == 0 ? R_H0 : R_H1);
        snd->rk = rcv->rk = rk;
        if (d == 0) snd->blk = mod(r - s + 1, n), rcv->blk = mod(r - s, n);
        else snd->blk = mod(r + s - 1, n), rcv->blk = mod(r + s, n);
    } else if (d == 0) {
        if (r - s + 1 >= 0 && r + 1 < n) snd->blk = r - s + 1;
        if (r - s >= 0) rcv->blk = r - s;
    } else {
        if (r + s - 1 <= n - 1 && r >= 1) snd->blk = r + s - 1;
        if (r + s <= n - 1) rcv->blk = r + s;
    }
}

static void rs_sched(const phase *p, int d, int s, xfer *snd, xfer *rcv) {
    int n = p->n, r = p->r;
    snd->blk = rcv->blk = -1;
    snd->rk = rcv->rk = R_FULL;
    if (p->sc == SCH_RING) {
        if (d == 0) snd->blk = mod(r - s, n), rcv->blk = mod(r - s - 1, n);
    } else if (p->sc == SCH_BIDIR) {
        int a = n / 2, b = (n - 1) / 2;
        int rk = s > a - b ? R_FULL : (d == 0 ? R_H1 : R_H0);
        snd->rk = rcv->rk = rk;
        if (d == 0) snd->blk = mod(r + a - s + 1, n), rcv->blk = mod(r + a - s, n);
        else snd->blk = mod(r - (a - s + 1), n), rcv->blk = mod(r - (a - s), n);
    } else if (d == 0) {
        if (r + 1 < n && n + r - s <= n - 1) snd->blk = n + r - s;
        if (r >= 1 && n + r - 1 - s <= n - 1) rcv->blk = n + r - 1 - s;
    } else {
        if (r >= 1 && s + r - n >= 0) snd->blk = s + r - n;
        if (r + 1 < n && s + r + 1 - n >= 0) rcv->blk = s + r + 1 - n;
    }
}

/* ---- AllToAll geometry ---- */
static int a2a_dmax(const phase *p, int d, int o) {
    if (p->sc == SCH_RING) return d == 0 ? p->n - 1 : 0;
    if (p->sc == SCH_BIDIR) return p->n / 2;
    return d == 0 ? p->n - 1 - o : o;
}
/* Elements of the distance-k block that travel in direction d, and their offset in the block. */
static int64_t a2a_cnt(const phase *p, int d, int k, int64_t *lo) {
    *lo = 0;
    if (p->sc == SCH_BIDIR && k == p->n / 2 && p->n % 2 == 0) {
        int64_t h0 = p->bs - p->bs / 2;
        *lo = d == 0 ? 0 : h0;
        return d == 0 ? h0 : p->bs - h0;
    }
    return p->bs;
}
static int64_t a2a_msg(const phase *p, int d, int o, int s) {
    int64_t sz = 0, lo;
    for (int k = s; k <= a2a_dmax(p, d, o); k++) sz += a2a_cnt(p, d, k, &lo);
    return sz;
}
/* Origin of the message sent (hop = s, sent = 1) or received (hop = s, sent = 0) at step s; −1
 * if it does not exist (line ends). */
static int a2a_origin(const phase *p, int d, int s, int sent) {
    int o = d == 0 ? p->r - s + sent : p->r + s - sent;
    if (p->sc == SCH_LINE) return o >= 0 && o < p->n ? o : -1;
    return mod(o, p->n);
}

/* ---- posting ---- */
static int emulated(const mesh *m, int axis) {
    return axis >= 0 && m->link_bw[axis] > 0;
}

static void post_send(mesh *m, phase *p, int d, int peer, const float *ptr, int64_t cnt,
                      int hops) {
    CHECK(cnt <= INT_MAX, "message of %lld floats exceeds MPI's int count", (long long)cnt);
    int tag = p->chain * 8 + d * 2;
    double t = link_schedule(m, p->link_axis, d, cnt * (int64_t)sizeof(float), hops);
    if (t > 0) {
        p->hdr_out[d] = t;
        MPI_Isend(&p->hdr_out[d], 1, MPI_DOUBLE, peer, tag + 1, p->comm, &p->req[p->nreq++]);
    }
    MPI_Isend(ptr, (int)cnt, MPI_FLOAT, peer, tag, p->comm, &p->req[p->nreq++]);
    if (p->link_axis >= 0) p->link_bytes[p->link_axis][d] += cnt * (int64_t)sizeof(float);
}

static void post_recv(mesh *m, phase *p, int d, int peer, float *ptr, int64_t cnt) {
    CHECK(cnt <= INT_MAX, "message of %lld floats exceeds MPI's int count", (long long)cnt);
    int tag = p->chain * 8 + d * 2;
    if (emulated(m, p->link_axis)) {
        MPI_Irecv(&p->hdr_in[d], 1, MPI_DOUBLE, peer, tag + 1, p->comm, &p->req[p->nreq++]);
        p->hdr_in_used[d] = 1;
    }
    MPI_Irecv(ptr, (int)cnt, MPI_FLOAT, peer, tag, p->comm, &p->req[p->nreq++]);
}

static int peer_of(const phase *p, int d, int sending) {
    return mod(p->r + ((d == 0) == (sending != 0) ? 1 : -1), p->n);
}

/* ---- per-kind steps ---- */
static void ag_post(mesh *m, phase *p, int s) {
    for (int d = 0; d < 2; d++) {
        xfer sn, rc;
        int64_t lo, l;
        ag_sched(p, d, s, &sn, &rc);
        if (rc.blk >= 0) {
            range_of(blk_len(p, rc.blk), rc.rk, &lo, &l);
            if (l > 0) post_recv(m, p, d, peer_of(p, d, 0), p->buf + blk_off(p, rc.blk) + lo, l);
        }
        if (sn.blk >= 0) {
            range_of(blk_len(p, sn.blk), sn.rk, &lo, &l);
            /* the own block leaves from the caller's input, not from our copy of it */
            const float *from = sn.blk == p->r && p->src ? p->src : p->buf + blk_off(p, sn.blk);
            if (l > 0) post_send(m, p, d, peer_of(p, d, 1), from + lo, l, 1);
        }
    }
}

/* Copies the own block into the gathered array: done while step 1 is in flight (it overlaps with
 * the transfer, which measurably matters on shared memory). */
static void ag_copy_own(phase *p) {
    float *mine = p->buf + blk_off(p, p->r);
    if (p->src && p->src != mine) memcpy(mine, p->src, (size_t)blk_len(p, p->r) * sizeof(float));
}

static void rs_post(mesh *m, phase *p, int s) {
    for (int d = 0; d < 2; d++) {
        xfer sn, rc;
        int64_t lo, l;
        rs_sched(p, d, s, &sn, &rc);
        p->rblk[d] = -1;
        if (rc.blk >= 0) {
            range_of(blk_len(p, rc.blk), rc.rk, &lo, &l);
            p->rblk[d] = rc.blk, p->rlo[d] = lo, p->rlen[d] = l;
            if (l > 0) post_recv(m, p, d, peer_of(p, d, 0), p->sbuf[d][p->par[d] ^ 1] + lo, l);
        }
        if (sn.blk < 0) continue;
        range_of(blk_len(p, sn.blk), sn.rk, &lo, &l);
        if (l == 0) continue;
        const float *own = p->src + blk_off(p, sn.blk);
        const float *from = own;
        if (p->have[d]) { /* the partial covers [plo, plo+plen) ⊆ [lo, lo+l): fill in the rest */
            float *acc = p->sbuf[d][p->par[d]];
            CHECK(p->plo[d] >= lo && p->plo[d] + p->plen[d] <= lo + l, "RS schedule mismatch");
            memcpy(acc + lo, own + lo, (size_t)(p->plo[d] - lo) * sizeof(float));
            int64_t e = p->plo[d] + p->plen[d];
            memcpy(acc + e, own + e, (size_t)(lo + l - e) * sizeof(float));
            from = acc;
        }
        post_send(m, p, d, peer_of(p, d, 1), from + lo, l, 1);
    }
}

static void rs_finish_step(phase *p) {
    for (int d = 0; d < 2; d++) {
        p->have[d] = 0;
        if (p->rblk[d] < 0 || p->rlen[d] == 0) continue;
        p->par[d] ^= 1;
        p->plo[d] = p->rlo[d], p->plen[d] = p->rlen[d];
        if (p->rblk[d] == p->r) {
            p->have[d] = 2; /* final: kept for rs_end */
            continue;
        }
        float *acc = p->sbuf[d][p->par[d]] + p->plo[d];
        const float *own = p->src + blk_off(p, p->rblk[d]) + p->plo[d];
        for (int64_t e = 0; e < p->plen[d]; e++) acc[e] += own[e];
        p->have[d] = 1;
    }
}

/* out = (own + from r−1) + from r+1, where those arrived; the first term fused with the copy. */
static void rs_end(phase *p) {
    int64_t len = blk_len(p, p->r);
    const float *own = p->src + blk_off(p, p->r);
    int first = p->have[0] == 2 && p->plo[0] == 0 && p->plen[0] == len ? 0 : -1;
    if (first == 0) {
        const float *f = p->sbuf[0][p->par[0]];
        for (int64_t e = 0; e < len; e++) p->buf[e] = own[e] + f[e];
    } else if (p->buf != own) {
        memmove(p->buf, own, (size_t)len * sizeof(float));
    }
    for (int d = 0; d < 2; d++) {
        if (p->have[d] != 2 || d == first) continue;
        float *o = p->buf + p->plo[d];
        const float *f = p->sbuf[d][p->par[d]] + p->plo[d];
        for (int64_t e = 0; e < p->plen[d]; e++) o[e] += f[e];
    }
}

static void a2a_post(mesh *m, phase *p, int s) {
    for (int d = 0; d < 2; d++) {
        p->rblk[d] = -1;
        int o = a2a_origin(p, d, s, 0);
        if (o >= 0) {
            int64_t sz = a2a_msg(p, d, o, s);
            p->rblk[d] = o, p->rlen[d] = sz;
            if (sz > 0) post_recv(m, p, d, peer_of(p, d, 0), p->sbuf[d][p->par[d] ^ 1], sz);
        }
        o = a2a_origin(p, d, s, 1);
        if (o < 0) continue;
        int64_t sz = a2a_msg(p, d, o, s), lo;
        if (sz == 0) continue;
        float *msg = p->sbuf[d][p->par[d]];
        if (s == 1) { /* pack my blocks for distances 1..D in order */
            int64_t at = 0;
            for (int k = 1; k <= a2a_dmax(p, d, p->r); k++) {
                int64_t c = a2a_cnt(p, d, k, &lo);
                int dest = p->sc == SCH_LINE ? p->r + (d ? -k : k) : mod(p->r + (d ? -k : k), p->n);
                memcpy(msg + at, p->src + (int64_t)dest * p->bs + lo, (size_t)c * sizeof(float));
                at += c;
            }
        } else {
            msg += a2a_cnt(p, d, s - 1, &lo); /* the first block was mine */
        }
        post_send(m, p, d, peer_of(p, d, 1), msg, sz, 1);
    }
}

static void a2a_finish_step(phase *p) {
    for (int d = 0; d < 2; d++) {
        if (p->rblk[d] < 0 || p->rlen[d] == 0) continue;
        p->par[d] ^= 1;
        int64_t lo, c = a2a_cnt(p, d, p->step, &lo);
        memcpy(p->buf + (int64_t)p->rblk[d] * p->bs + lo, p->sbuf[d][p->par[d]],
               (size_t)c * sizeof(float));
    }
}

static void perm_post(mesh *m, phase *p) {
    int d = p->shift > 0 ? 0 : 1, n = p->n;
    int to = p->r + p->shift, from = p->r - p->shift;
    int hops = p->shift > 0 ? p->shift : -p->shift;
    if (p->sc != SCH_LINE) to = mod(to, n), from = mod(from, n);
    float *dst = p->buf == p->src ? p->sbuf[0][0] : p->buf;
    p->rblk[0] = -1;
    if (from >= 0 && from < n && p->bs > 0) {
        post_recv(m, p, d, from, dst, p->bs);
        p->rblk[0] = 0;
    }
    if (to >= 0 && to < n && p->bs > 0) post_send(m, p, d, to, p->src, p->bs, hops);
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

/* ---- phase life cycle ---- */
static void scratch_for(phase *p, int64_t n) {
    for (int d = 0; d < 2; d++)
        for (int q = 0; q < 2; q++) p->sbuf[d][q] = mesh_scratch(p->ctx, p->chain * 4 + d * 2 + q, n);
}

static void phase_start(phase *p) {
    p->step = 0;
    p->nreq = 0;
    p->have[0] = p->have[1] = 0;
    p->par[0] = p->par[1] = 0;
    int n = p->n;
    p->nsteps = n <= 1 ? 0 : p->sc == SCH_BIDIR ? n / 2 : n - 1;
    switch (p->kind) {
    case PH_AG:
        if (p->nsteps == 0) ag_copy_own(p);
        break;
    case PH_RS: {
        int64_t mx = 1;
        for (int j = 0; j < n; j++) mx = blk_len(p, j) > mx ? blk_len(p, j) : mx;
        scratch_for(p, mx);
        break;
    }
    case PH_A2A:
        scratch_for(p, (int64_t)(n > 1 ? n - 1 : 1) * (p->bs > 0 ? p->bs : 1));
        memcpy(p->buf + (int64_t)p->r * p->bs, p->src + (int64_t)p->r * p->bs,
               (size_t)p->bs * sizeof(float));
        break;
    case PH_PERM:
        p->nsteps = n <= 1 ? 0 : 1;
        if (p->buf == p->src) scratch_for(p, p->bs > 0 ? p->bs : 1);
        break;
    case PH_REORDER:
        reorder_items(p->buf, p->src, p->nd, p->sizes, p->ord_src, p->ord_dst, p->item,
                      p->s_stride, p->s_off, p->d_stride, p->d_off);
        p->nsteps = 0;
        break;
    }
}

static void phase_post(mesh *m, phase *p) {
    p->hdr_in_used[0] = p->hdr_in_used[1] = 0;
    switch (p->kind) {
    case PH_AG:
        ag_post(m, p, p->step);
        if (p->step == 1) ag_copy_own(p);
        break;
    case PH_RS:
        rs_post(m, p, p->step);
        break;
    case PH_A2A:
        a2a_post(m, p, p->step);
        break;
    case PH_PERM:
        perm_post(m, p);
        break;
    case PH_REORDER:
        break;
    }
}

static void phase_finish_step(phase *p) {
    if (p->kind == PH_RS) rs_finish_step(p);
    if (p->kind == PH_A2A) a2a_finish_step(p);
    if (p->kind == PH_PERM && p->rblk[0] == 0 && p->buf == p->src)
        memcpy(p->buf, p->sbuf[0][0], (size_t)p->bs * sizeof(float));
}

/* Starts phases of chain c until one has a step in flight; returns 0 when the chain is done. */
static int chain_advance(mesh *m, chain *c) {
    while (c->cur < c->nph) {
        phase *p = &c->ph[c->cur];
        if (p->step == 0) phase_start(p);
        if (p->step < p->nsteps) {
            p->step++;
            phase_post(m, p);
            return 1;
        }
        if (p->kind == PH_RS) rs_end(p);
        c->cur++;
    }
    return 0;
}

void engine_run(mesh *m, mesh_ctx *ctx, chain *ch, int nch, int64_t (*link_bytes)[2]) {
    int active = 0;
    for (int c = 0; c < nch; c++) {
        ch[c].cur = 0;
        for (int k = 0; k < ch[c].nph; k++) {
            ch[c].ph[k].step = 0;
            ch[c].ph[k].chain = c;
            ch[c].ph[k].ctx = ctx;
            ch[c].ph[k].link_bytes = link_bytes;
        }
        active += chain_advance(m, &ch[c]);
    }
    while (active) {
        int progressed = 0, pending = 0, last = -1;
        double wake = 0;
        for (int c = 0; c < nch; c++) {
            if (ch[c].cur >= ch[c].nph) continue;
            phase *p = &ch[c].ph[ch[c].cur];
            if (p->nreq) {
                int flag = 0;
                MPI_Testall(p->nreq, p->req, &flag, MPI_STATUSES_IGNORE);
                if (!flag) {
                    pending++, last = c;
                    continue;
                }
                p->nreq = 0;
            }
            double ready = 0;
            for (int d = 0; d < 2; d++)
                if (p->hdr_in_used[d] && p->hdr_in[d] > ready) ready = p->hdr_in[d];
            if (ready > 0 && mesh_now() < ready) {
                wake = wake == 0 || ready < wake ? ready : wake;
                continue;
            }
            p->hdr_in_used[0] = p->hdr_in_used[1] = 0;
            phase_finish_step(p);
            progressed = 1;
            if (!chain_advance(m, &ch[c])) active--;
        }
        if (progressed) continue;
        if (wake > 0) { /* emulated links: sleep, but not past other chains' messages */
            double t = pending ? mesh_now() + 50e-6 : wake;
            link_sleep_until(t < wake ? t : wake);
        } else if (pending == 1) {
            phase *p = &ch[last].ph[ch[last].cur];
            MPI_Waitall(p->nreq, p->req, MPI_STATUSES_IGNORE);
            p->nreq = 0;
        } else {
            sched_yield();
        }
    }
}
