/* coll_direct: the DIRECT algorithm. Every block goes straight to the rank that needs it, in one
 * round of messages (AllReduce: two rounds, ReduceScatter then AllGather). On a TPU torus this is
 * what the ICI routers do for an AllToAll: a packet for a chip that is not a neighbour crosses the
 * chips in between without their compute (dimension-ordered routing, shortest way round each
 * wrapping axis, an antipodal block half each way). On shared memory it is one copy per block,
 * the pattern of MPI's pairwise and linear algorithms.
 *
 * Link load. Over a set of N ranks, one block of b bytes between every ordered pair (AllGather:
 * the own block to every rank; ReduceScatter: block j to rank j; AllToAll: block j to rank j) puts
 * (N/n_k)·L(n_k)·b on the busiest directed link of axis k, where L(n) is the busiest link's load
 * of all-pairs unit traffic on one ring or line of n (dimension-ordered routing spreads the pairs
 * evenly over the N/n_k lines of the axis):
 *     ring of n:  Σ_{d=1}^{⌊(n−1)/2⌋} d (+ n/4 if n is even: the antipodal blocks, half each way)
 *     line of n:  ⌊n/2⌋·⌈n/2⌉ (every pair across the middle link)
 * The axes' links work at once, so a round takes max_k load_k / w_oneway plus the hop latency of
 * the farthest pair, Σ_k (farthest distance on axis k)·T_min. mesh/cost.c predicts exactly this
 * (MESH_ALG_DIRECT); on a ring of 4 it is the book's V/W for an AllGather, and on any even ring
 * the AllToAll is the book's V/(4W).
 *
 * Emulated links (link.h): every rank charges each direction of each emulated axis of the set with
 * that axis's busiest-link load (the same on every rank, so the round ends when the busiest link
 * drains) and sends the resulting delivery time with its data; a receiver does not consider a
 * block arrived before it. Accounting (mesh_call.link_bytes) counts the link crossings of this
 * rank's own blocks: a block of b bytes d hops away on axis k adds d·b to axis k's direction
 * (half each way for an antipodal one).
 *
 * Reductions add the n blocks in rank order 0..n−1, so results are deterministic (though, on
 * non-integer data, not bit-identical to RING/BIDIR, which add in ring order). */
#include "mesh/coll_impl.h"
#include "mesh/cost.h"
#include "mesh/progress.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Tags apart from the engine's (< 2·MESH_MAX_LANES·2); scratch slots after coll.c's (≤ 22). */
enum {
    TAG_DATA = 1000,
    TAG_HDR = 1001,
    SL_RQ = 23,
    SL_HDR = 24,
    SL_PARTS = 25,
    SL_ACC = 26,
    SL_IDX = 27
};

/* The set's geometry: rank index j of the set ↔ coordinates along its axes (a.ax[0] major). */
typedef struct {
    int n, me, P;
    int size[MESH_MAX_AXES], wrap[MESH_MAX_AXES], axis[MESH_MAX_AXES];
    MPI_Comm comm;
} dset;

static dset set_of(const coll_env *e, mesh_axes a) {
    dset s;
    memset(&s, 0, sizeof s);
    s.P = a.n;
    s.n = topo_axes_size(e->topo, a);
    s.me = topo_axes_index(e->topo, a);
    s.comm = comms_set(e->comms, e->topo, a);
    for (int k = 0; k < a.n; k++) {
        s.axis[k] = a.ax[k];
        s.size[k] = e->topo->size[a.ax[k]];
        s.wrap[k] = e->topo->wrap[a.ax[k]];
    }
    return s;
}

/* Coordinate of set index j along the set's k-th axis. */
static int coord_of(const dset *s, int j, int k) {
    for (int l = s->P - 1; l > k; l--) j /= s->size[l];
    return j % s->size[k];
}

/* One round's emulated delivery time for blocks of `bytes` (0 when no axis is emulated); the
 * same on ctx's virtual clock, which it advances. */
static double round_delivery(const coll_env *e, const dset *s, int64_t bytes) {
    mesh_links *L = e->links;
    eng_ctx *ctx = e->ctx;
    double t = 0, lat = 0, vt = ctx->clock.vclock;
    int emulated = 0;
    for (int k = 0; k < s->P; k++) {
        if (s->size[k] <= 1 || !links_emulated(L, s->axis[k])) continue;
        emulated = 1;
        double load =
            (double)(s->n / s->size[k]) * cost_direct_link_load(s->size[k], s->wrap[k]) * bytes;
        for (int d = 0; d < 2; d++) {
            const int64_t b = (int64_t)(load + 0.5);
            double td = links_book(L, s->axis[k], d, b, 0);
            t = td > t ? td : t;
            td = links_book_virtual(L, &ctx->clock, s->axis[k], d, b, 0, ctx->clock.vclock);
            vt = td > vt ? td : vt;
        }
        lat += cost_direct_farthest(s->size[k], s->wrap[k]) * L->lat[s->axis[k]];
    }
    if (emulated) ctx->clock.vclock = vt + lat;
    return emulated ? t + lat : 0;
}

/* Adds the link crossings of a block of `bytes` from me to set index j into lb. */
static void account(const dset *s, int j, int64_t bytes, int64_t (*lb)[2]) {
    for (int k = 0; k < s->P; k++) {
        int n = s->size[k], d = coord_of(s, j, k) - coord_of(s, s->me, k);
        if (d == 0) continue;
        if (s->wrap[k]) {
            d = ((d % n) + n) % n;
            if (2 * d == n) {
                lb[s->axis[k]][0] += d * (bytes / 2);
                lb[s->axis[k]][1] += d * (bytes - bytes / 2);
                continue;
            }
            if (2 * d > n) d -= n;
        }
        lb[s->axis[k]][d > 0 ? 0 : 1] += (int64_t)abs(d) * bytes;
    }
}

/* One round: block j of `send` (at soff[j], length slen[j] floats) goes to set index j and block j
 * of `recv` (at roff[j], rlen[j]) comes from j, for every j ≠ me. Offsets index into the given
 * base pointers. Blocks are posted nearest-first, receives before sends; then own_n floats are
 * copied from own_src to own_dst while the messages are in flight. */
typedef struct {
    const float *send;
    float *recv;
    const int64_t *soff, *slen, *roff, *rlen;
    float *own_dst;
    const float *own_src;
    int64_t own_n;
} dround;

static void run_round(const coll_env *e, const dset *s, const dround *r, int64_t maxblk, int ph,
                      int nph, int64_t (*lb)[2]) {
    eng_ctx *ctx = e->ctx;
    const int n = s->n, np = n - 1;
    if (np <= 0) {
        if (r->own_n > 0 && r->own_dst != r->own_src && CTX_DATA(ctx))
            memcpy(r->own_dst, r->own_src, (size_t)r->own_n * sizeof(float));
        return;
    }
    const int64_t rq_floats = (int64_t)((4 * (size_t)np * sizeof(MPI_Request) + 3) / 4);
    MPI_Request *rq = (MPI_Request *)(void *)eng_scratch(ctx, SL_RQ, rq_floats);
    MPI_Request *rrq = rq, *hrq = rq + np, *srq = rq + 2 * np, *shq = rq + 3 * np;
    double *hin = NULL, hout = round_delivery(e, s, maxblk * (int64_t)sizeof(float));
    const int emu = hout > 0;
    if (emu) hin = (double *)(void *)eng_scratch(ctx, SL_HDR, (int64_t)np * 2);
    for (int q = 1; q <= np; q++) { /* receive from me−q, send to me+q: pairs meet early */
        int from = (s->me - q + n) % n, i = q - 1;
        CHECK(r->rlen[from] <= INT_MAX, "message of %lld floats exceeds MPI's int count",
              (long long)r->rlen[from]);
        MPI_Irecv(r->recv + r->roff[from], (int)r->rlen[from], MPI_FLOAT, from, TAG_DATA, s->comm,
                  &rrq[i]);
        hrq[i] = MPI_REQUEST_NULL;
        if (emu) MPI_Irecv(&hin[i], 1, MPI_DOUBLE, from, TAG_HDR, s->comm, &hrq[i]);
    }
    for (int q = 1; q <= np; q++) {
        int to = (s->me + q) % n, i = q - 1;
        CHECK(r->slen[to] <= INT_MAX, "message of %lld floats exceeds MPI's int count",
              (long long)r->slen[to]);
        MPI_Isend(r->send + r->soff[to], (int)r->slen[to], MPI_FLOAT, to, TAG_DATA, s->comm,
                  &srq[i]);
        shq[i] = MPI_REQUEST_NULL;
        if (emu) MPI_Isend(&hout, 1, MPI_DOUBLE, to, TAG_HDR, s->comm, &shq[i]);
        account(s, to, r->slen[to] * (int64_t)sizeof(float), lb);
    }
    if (r->own_n > 0 && r->own_dst != r->own_src && CTX_DATA(ctx))
        memcpy(r->own_dst, r->own_src, (size_t)r->own_n * sizeof(float));
    act_slot *slot = e->slot;
    act_steps(slot, ph, nph, 0, np);
    int *idx = (int *)(void *)eng_scratch(ctx, SL_IDX, 3 * (int64_t)np);
    /* naps, or serves the coroutine (progress.h); counted by the requests still in flight, as
     * the caller's wait may complete those of the coroutine */
    for (int left = np; left > 0;) {
        progress_block(e->q, np, rrq, idx);
        left = 0;
        for (int i = 0; i < np; i++) left += rrq[i] != MPI_REQUEST_NULL;
        act_steps(slot, ph, nph, np - left, np);
    }
    progress_waitall(e->q, 3 * np, rq + np, idx);
    if (emu) {
        double t = 0;
        for (int i = 0; i < np; i++) t = hin[i] > t ? hin[i] : t;
        link_sleep_until(t);
    }
}

/* Uniform blocks: offsets j·c, lengths c (filled into ctx->boff/blen). */
static void uniform(eng_ctx *ctx, int n, int64_t c) {
    for (int j = 0; j < n; j++) ctx->boff[j] = j * c, ctx->blen[j] = c;
    ctx->boff[n] = n * c;
}

/* ReduceScatter of blocks boff/blen from `in` into `out` (length blen[me]). */
static void reduce_scatter(const coll_env *e, const dset *s, float *out, const float *in, int ph,
                           int nph, int64_t (*lb)[2]) {
    eng_ctx *ctx = e->ctx;
    const int n = s->n, me = s->me;
    const int64_t c = ctx->blen[me];
    int64_t maxblk = 0;
    for (int j = 0; j < n; j++) maxblk = ctx->blen[j] > maxblk ? ctx->blen[j] : maxblk;
    /* the partials from rank j land in slot j of the scratch (slot me unused) */
    float *parts = eng_scratch(ctx, SL_PARTS, (int64_t)n * c);
    int64_t *roff = ctx->loff, *rlen = ctx->llen; /* lanes are not used by DIRECT */
    for (int j = 0; j < n; j++) roff[j] = j * c, rlen[j] = c;
    dround r = {in, parts, ctx->boff, ctx->blen, roff, rlen, NULL, NULL, 0};
    run_round(e, s, &r, maxblk, ph, nph, lb);
    /* fixed order: rank 0's partial first; summed straight into out unless out is the own
     * partial (an AllReduce in place), which is still to be read in its turn */
    const float *own = in + ctx->boff[me];
    const float *first = me == 0 ? own : parts;
    if (!CTX_DATA(ctx)) return;
    float *acc = out == own ? eng_scratch(ctx, SL_ACC, c) : out;
    memcpy(acc, first, (size_t)c * sizeof(float));
    for (int j = 1; j < n; j++) {
        const float *p = j == me ? own : parts + j * c;
        for (int64_t i = 0; i < c; i++) acc[i] += p[i];
    }
    if (acc != out) memcpy(out, acc, (size_t)c * sizeof(float));
}

/* AllGather of blocks boff/blen into `buf`; the own block is sent from `own` (its copy into buf
 * overlaps the transfers; own may already be that block of buf). */
static void all_gather(const coll_env *e, const dset *s, float *buf, const float *own, int ph,
                       int nph, int64_t (*lb)[2]) {
    eng_ctx *ctx = e->ctx;
    int64_t maxblk = 0, *soff = ctx->loff, *slen = ctx->llen;
    for (int j = 0; j < s->n; j++) {
        maxblk = ctx->blen[j] > maxblk ? ctx->blen[j] : maxblk;
        soff[j] = 0, slen[j] = ctx->blen[s->me];
    }
    dround r = {
        own, buf, soff, slen, ctx->boff, ctx->blen, buf + ctx->boff[s->me], own, ctx->blen[s->me]};
    run_round(e, s, &r, maxblk, ph, nph, lb);
}

void direct_run(const coll_env *e, const coll_args *x, int64_t (*lb)[2]) {
    eng_ctx *ctx = e->ctx;
    const dset s = set_of(e, x->a);
    const int n = s.n, me = s.me;
    const int64_t c = x->count;
    CHECK(x->op != MESH_OP_ALL_TO_ALL || x->in != x->out || n == 1,
          "all_to_all cannot run in place");
    switch (x->op) {
    case MESH_OP_ALL_GATHER:
        uniform(ctx, n, c);
        all_gather(e, &s, x->out, x->in, 1, 1, lb);
        break;
    case MESH_OP_REDUCE_SCATTER:
        uniform(ctx, n, c);
        reduce_scatter(e, &s, x->out, x->in, 1, 1, lb);
        break;
    case MESH_OP_ALL_REDUCE: /* blocks of ⌊·⌋ or ⌈count/n⌉, in place in out */
        for (int j = 0; j <= n; j++) ctx->boff[j] = c * j / n;
        for (int j = 0; j < n; j++) ctx->blen[j] = ctx->boff[j + 1] - ctx->boff[j];
        reduce_scatter(e, &s, x->out + ctx->boff[me], x->in, 1, 2, lb);
        all_gather(e, &s, x->out, x->out + ctx->boff[me], 2, 2, lb);
        break;
    case MESH_OP_ALL_TO_ALL: {
        uniform(ctx, n, c);
        dround r = {x->in,     x->out,          ctx->boff,      ctx->blen, ctx->boff,
                    ctx->blen, x->out + me * c, x->in + me * c, c};
        run_round(e, &s, &r, c, 1, 1, lb);
        break;
    }
    default:
        CHECK(0, "no direct algorithm for %s", mesh_op_name(x->op));
    }
}

void direct_a2av(const coll_env *e, const coll_args *x, int64_t (*lb)[2]) {
    eng_ctx *ctx = e->ctx;
    const dset s = set_of(e, x->a);
    const int n = s.n, me = s.me;
    const int64_t *cnt = x->vcounts;
    CHECK(x->in != x->out || n == 1, "all_to_allv cannot run in place");
    /* sent blocks in boff/blen, received ones in loff/llen (lanes are not used by DIRECT) */
    int64_t *soff = ctx->boff, *slen = ctx->blen, *roff = ctx->loff, *rlen = ctx->llen;
    int64_t so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        soff[j] = so, slen[j] = cnt[(int64_t)me * n + j], so += slen[j];
        roff[j] = ro, rlen[j] = cnt[(int64_t)j * n + me], ro += rlen[j];
    }
    dround r = {x->in, x->out, soff, slen, roff, rlen, x->out + roff[me], x->in + soff[me], slen[me]};
    run_round(e, &s, &r, x->count, 1, 1, lb);
}
