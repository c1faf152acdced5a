/* coll: the collectives' settings, the plans of the collectives over axis sets (which phases on
 * which buffers), the execution of one call in its environment (coll_impl.h) and the blocking
 * API. See coll.h; the step schedules are coll_engine.c's, DIRECT is coll_direct.c, the queue of
 * non-blocking calls coll_async.c. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll_engine.h"
#include "mesh/parts.h"
#include "mesh/progress.h"
#include "mesh/stats.h"
#include "mesh/where_impl.h"

/* Scratch slots (per context): 0 the engine's buffers (coll_engine.c); then these. */
enum { SL_PAD = 12, SL_RED = 13, SL_T = 14, SL_A = 17, SL_B = 20 };

void mesh_set_wire(mesh *m, mesh_wire w) {
    CHECK(w >= 0 && w < MESH_WIRE_COUNT, "bad wire format %d", (int)w);
    mesh_part_conf(m)->wire = w;
}
mesh_wire mesh_get_wire(const mesh *m) {
    return mesh_part_conf((mesh *)m)->wire;
}
void mesh_set_chunk(mesh *m, int64_t bytes) {
    CHECK(bytes >= 0, "chunk size must be >= 0, got %lld", (long long)bytes);
    mesh_part_conf(m)->chunk = bytes;
}
int64_t mesh_get_chunk(const mesh *m) {
    return mesh_part_conf((mesh *)m)->chunk;
}
void mesh_set_default_alg(mesh *m, mesh_alg a) {
    CHECK(a >= 0 && a < MESH_ALG_COUNT, "bad algorithm %d", (int)a);
    mesh_part_conf(m)->default_alg = a;
}
void mesh_set_verify(mesh *m, int on) {
    mesh_part_conf(m)->verify = on;
}
static mesh_alg alg_resolve(const coll_conf *c, mesh_axes a, mesh_alg alg) {
    if (alg == MESH_ALG_DEFAULT) alg = c->default_alg;
    if (alg == MESH_ALG_DEFAULT) alg = a.n > 1 ? MESH_ALG_MULTI : MESH_ALG_BIDIR;
    if ((alg == MESH_ALG_SEQ || alg == MESH_ALG_MULTI) && a.n <= 1) alg = MESH_ALG_BIDIR;
    return alg;
}
mesh_alg mesh_alg_resolve(const mesh *m, mesh_axes a, mesh_alg alg) {
    return alg_resolve(mesh_part_conf((mesh *)m), a, alg);
}

/* ---- plan building ---- */

/* A phase over the ordered set `s` treated as one ring (neighbours are index ± 1). */
static phase ph_over(const coll_env *e, ph_kind k, mesh_axes s, mesh_alg alg) {
    phase p;
    memset(&p, 0, sizeof p);
    p.kind = k;
    p.comm = comms_set(e->comms, e->topo, s);
    p.n = topo_axes_size(e->topo, s);
    p.r = topo_axes_index(e->topo, s);
    p.link_axis = s.n ? s.ax[s.n - 1] : -1;
    int wraps = s.n > 0;
    for (int i = 0; i < s.n; i++) wraps &= e->topo->wrap[s.ax[i]];
    p.sc = !wraps ? SCH_LINE : alg == MESH_ALG_RING ? SCH_RING : SCH_BIDIR;
    return p;
}

static mesh_axes one_axis(int ax) {
    mesh_axes s = {1, {ax, 0, 0}};
    return s;
}

/* ---- lanes ----
 * A RING/BIDIR collective with blocks above the chunk size runs as K copies of itself over
 * sub-blocks, one engine chain each: lane k takes elements [len·k/K, len·(k+1)/K) of every block.
 * The lanes are independent, so one lane's adds and copies overlap another's transfers. */
static int lane_count(const coll_env *e, int64_t maxlen) {
    if (e->conf->chunk <= 0 || maxlen <= 0) return 1;
    int64_t c =
        e->conf->chunk >= (int64_t)sizeof(float) ? e->conf->chunk / (int64_t)sizeof(float) : 1;
    int64_t k = (maxlen + c - 1) / c;
    return k > ENGINE_MAX_CHAINS ? ENGINE_MAX_CHAINS : (int)k;
}

/* Sets p's blocks to lane k of K of the blocks (off[j] or j·bs, len[j] or bs), j < p->n. Returns
 * the start of lane k within block `j0` (to offset a per-block pointer). */
static int64_t set_lane(eng_ctx *ctx, phase *p, const int64_t *off, const int64_t *len, int64_t bs,
                        int K, int k, int j0) {
    CHECK((int64_t)K * p->n <= ctx->tab_ln, "lane tables of %lld for %d lanes of %d blocks",
          (long long)ctx->tab_ln, K, p->n);
    int64_t *lo = ctx->loff + (int64_t)k * p->n, *ll = ctx->llen + (int64_t)k * p->n;
    int64_t *mid = ctx->lmid + (int64_t)k * p->n, at0 = 0;
    for (int j = 0; j < p->n; j++) {
        int64_t o = off ? off[j] : j * bs, L = len ? len[j] : bs;
        int64_t a = L * k / K, b = L * (k + 1) / K, h = L - L / 2 - a;
        lo[j] = o + a, ll[j] = b - a, mid[j] = h < 0 ? 0 : h > b - a ? b - a : h;
        if (j == j0) at0 = a;
    }
    p->off = lo, p->len = ll, p->mid = mid;
    return at0;
}

static void push(chain *c, phase p) {
    CHECK(c->nph < CHAIN_MAX_PHASES, "plan too long");
    c->ph[c->nph++] = p;
}

/* Layout orders are lists of positions in the set a (0 = a.ax[0]). */
static void rotated(int P, int k, int *ord) {
    for (int t = 0; t < P; t++) ord[t] = (t + k) % P;
}

static phase ph_reorder(const coll_env *e, mesh_axes a, float *dst, const float *src, const int *os,
                        const int *od, int64_t item, int64_t ss, int64_t so, int64_t ds,
                        int64_t dof) {
    phase p;
    memset(&p, 0, sizeof p);
    p.kind = PH_REORDER;
    p.n = 1;
    p.link_axis = -1;
    p.buf = dst, p.src = src, p.nd = a.n;
    for (int k = 0; k < a.n; k++) {
        p.sizes[k] = e->topo->size[a.ax[k]];
        p.ord_src[k] = os[k], p.ord_dst[k] = od[k];
    }
    p.item = item, p.s_stride = ss, p.s_off = so, p.d_stride = ds, p.d_off = dof;
    return p;
}

/* AllGather axis by axis (last of `ord` first) on T laid out in `ord` order, item ck; the own
 * item is copied from `own` by the first phase. */
static void seq_ag(const coll_env *e, chain *c, mesh_axes a, const int *ord, float *T,
                   const float *own, int64_t ck) {
    int P = a.n;
    for (int k = P - 1; k >= 0; k--) {
        int64_t bs = ck, grp = 0;
        for (int j = k + 1; j < P; j++) bs *= e->topo->size[a.ax[ord[j]]];
        for (int j = 0; j < k; j++)
            grp = grp * e->topo->size[a.ax[ord[j]]] + e->topo->coord[a.ax[ord[j]]];
        phase p = ph_over(e, PH_AG, one_axis(a.ax[ord[k]]), MESH_ALG_BIDIR);
        p.bs = bs;
        p.buf = T + grp * p.n * bs;
        p.src = k == P - 1 ? own : NULL;
        push(c, p);
    }
}

/* ReduceScatter axis by axis (first of `ord` first) from `in` laid out in `ord` order (item ck)
 * into out[ck], through scratch slots sa, sb. */
static void seq_rs(const coll_env *e, chain *c, mesh_axes a, const int *ord, const float *in,
                   float *out, int64_t ck, int sa, int sb) {
    int P = a.n;
    const float *cur = in;
    for (int k = 0; k < P; k++) {
        int64_t bs = ck;
        for (int j = k + 1; j < P; j++) bs *= e->topo->size[a.ax[ord[j]]];
        phase p = ph_over(e, PH_RS, one_axis(a.ax[ord[k]]), MESH_ALG_BIDIR);
        p.bs = bs;
        p.src = cur;
        p.buf = k == P - 1 ? out : eng_scratch(e->ctx, k % 2 ? sb : sa, bs);
        cur = p.buf;
        push(c, p);
    }
}

/* AllToAll axis by axis: before the exchange over an axis its items are moved to the front of the
 * layout (so its blocks are contiguous); at the end the layout is put back in set order. Item ck
 * is read at in + i·in_stride + in_off and written at out + i·out_stride + out_off. */
static void seq_a2a(const coll_env *e, chain *c, mesh_axes a, int first, const float *in,
                    int64_t in_stride, int64_t in_off, float *out, int64_t out_stride,
                    int64_t out_off, int64_t ck, int sa, int sb) {
    int P = a.n, n = topo_axes_size(e->topo, a);
    int L[MESH_MAX_AXES], id[MESH_MAX_AXES];
    for (int k = 0; k < P; k++) L[k] = id[k] = k;
    float *A = eng_scratch(e->ctx, sa, (int64_t)n * ck),
          *B = eng_scratch(e->ctx, sb, (int64_t)n * ck);
    const float *cur = in;
    int64_t cs = in_stride, co = in_off;
    for (int t = 0; t < P; t++) {
        int q = (first + t) % P, L2[MESH_MAX_AXES], w = 1;
        L2[0] = q;
        for (int k = 0; k < P; k++)
            if (L[k] != q) L2[w++] = L[k];
        push(c, ph_reorder(e, a, A, cur, L, L2, ck, cs, co, ck, 0));
        phase p = ph_over(e, PH_A2A, one_axis(a.ax[q]), MESH_ALG_BIDIR);
        p.bs = ck * (n / p.n);
        p.src = A;
        p.buf = B;
        push(c, p);
        cur = B, cs = ck, co = 0;
        memcpy(L, L2, sizeof L);
    }
    push(c, ph_reorder(e, a, out, cur, L, id, ck, cs, co, out_stride, out_off));
}

/* ---- MPI baseline ---- */
static int icount(int64_t n) {
    CHECK(n >= 0 && n <= INT_MAX, "count %lld does not fit MPI's int", (long long)n);
    return (int)n;
}

static void run_mpi(const coll_env *e, const coll_args *x, mesh_call *rec) {
    MPI_Comm comm = comms_set(e->comms, e->topo, x->a);
    int n = topo_axes_size(e->topo, x->a), i = topo_axes_index(e->topo, x->a);
    int c = icount(x->count);
    int64_t bytes = 0;
    switch (x->op) {
    case MESH_OP_ALL_GATHER:
        MPI_Allgather(x->in == x->out + (int64_t)i * c ? MPI_IN_PLACE : x->in, c, MPI_FLOAT, x->out,
                      c, MPI_FLOAT, comm);
        bytes = (int64_t)(n - 1) * c;
        break;
    case MESH_OP_REDUCE_SCATTER:
        MPI_Reduce_scatter_block(x->in, x->out, c, MPI_FLOAT, MPI_SUM, comm);
        bytes = (int64_t)(n - 1) * c;
        break;
    case MESH_OP_ALL_REDUCE:
        MPI_Allreduce(x->in == x->out ? MPI_IN_PLACE : x->in, x->out, c, MPI_FLOAT, MPI_SUM, comm);
        bytes = 2 * (int64_t)(n - 1) * c / n;
        break;
    case MESH_OP_ALL_TO_ALL:
        MPI_Alltoall(x->in, c, MPI_FLOAT, x->out, c, MPI_FLOAT, comm);
        bytes = (int64_t)(n - 1) * c;
        break;
    default:
        CHECK(0, "no MPI algorithm for %s", mesh_op_name(x->op));
    }
    if (x->a.n) rec->link_bytes[x->a.ax[0]][0] += bytes * (int64_t)sizeof(float);
}

/* ---- the collectives ---- */

/* RING/BIDIR AllGather, ReduceScatter or AllToAll of blocks of x->count over the flattened set,
 * as lanes (one chain each): lane k moves elements [c·k/K, c·(k+1)/K) of every block. The own
 * block's lane is read from (AllGather) or written to (ReduceScatter) the caller's count-long
 * buffer at that lane's offset. */
static void run_lanes(const coll_env *e, ph_kind kind, const coll_args *x, mesh_alg alg, chain *ch,
                      int64_t (*lb)[2]) {
    phase p = ph_over(e, kind, x->a, alg);
    const int64_t c = x->count;
    const int K = lane_count(e, c);
    p.buf = x->out, p.src = x->in;
    for (int k = 0; k < K; k++) {
        const int64_t at = set_lane(e->ctx, &p, NULL, NULL, c, K, k, p.r);
        if (kind == PH_AG) p.src = x->in + at;
        if (kind == PH_RS) p.buf = x->out + at;
        push(&ch[k], p);
    }
    engine_run(e, ch, K, lb);
}

/* SEQ/MULTI AllGather, ReduceScatter or AllToAll: part k of `parts` (1 for SEQ, |a| for MULTI)
 * moves elements [c·k/parts, c·(k+1)/parts) of every block on chain k, axis by axis in the set's
 * order rotated by k (so the parts load different links at once), with its own scratch slots. */
static void part_chain(const coll_env *e, ph_kind kind, const coll_args *x, chain *ch, int parts,
                       int k) {
    const mesh_axes a = x->a;
    const int n = topo_axes_size(e->topo, a);
    int id[MESH_MAX_AXES] = {0, 1, 2}, ord[MESH_MAX_AXES];
    const int64_t c = x->count, lo = c * k / parts, ck = c * (k + 1) / parts - lo;
    if (kind == PH_A2A) {
        seq_a2a(e, ch, a, k, x->in, c, lo, x->out, c, lo, ck, SL_A + k, SL_B + k);
    } else if (parts == 1) { /* SEQ: in the set's order, straight between in and out */
        if (kind == PH_AG)
            seq_ag(e, ch, a, id, x->out, x->in, c);
        else
            seq_rs(e, ch, a, id, x->in, x->out, c, SL_A, SL_B);
    } else { /* MULTI: through scratch laid out in the rotated order */
        rotated(a.n, k, ord);
        float *T = eng_scratch(e->ctx, SL_T + k, (int64_t)n * ck);
        if (kind == PH_AG) {
            seq_ag(e, ch, a, ord, T, x->in + lo, ck);
            push(ch, ph_reorder(e, a, x->out, T, ord, id, ck, ck, 0, c, lo));
        } else {
            push(ch, ph_reorder(e, a, T, x->in, id, ord, ck, c, lo, ck, 0));
            seq_rs(e, ch, a, ord, T, x->out + lo, ck, SL_A + k, SL_B + k);
        }
    }
}

/* AllGather, ReduceScatter or AllToAll of blocks of x->count over the set x->a, by alg. */
static void run_blocks(const coll_env *e, ph_kind kind, const coll_args *x, mesh_alg alg, chain *ch,
                       int64_t (*lb)[2]) {
    CHECK(kind != PH_A2A || x->in != x->out || topo_axes_size(e->topo, x->a) == 1,
          "all_to_all cannot run in place");
    if (alg == MESH_ALG_RING || alg == MESH_ALG_BIDIR) {
        run_lanes(e, kind, x, alg, ch, lb);
        return;
    }
    const int parts = alg == MESH_ALG_SEQ ? 1 : x->a.n;
    for (int k = 0; k < parts; k++) part_chain(e, kind, x, &ch[k], parts, k);
    engine_run(e, ch, parts, lb);
}

/* ---- AllToAllv (coll_a2av.c: the API): MPI_Alltoallv; DIRECT, each block at its own size in
 * one round (coll_direct.c); RING, BIDIR, SEQ and MULTI, the engine's AllToAll over blocks padded
 * to the matrix's largest count (the padding moves as zeros and is dropped on arrival) ---- */

/* Scratch slots (per context) after coll_direct.c's (≤ 27). */
enum { SL_VIN = 28, SL_VOUT = 29 };

static void a2av_mpi(const coll_env *e, const coll_args *x, int64_t (*lb)[2]) {
    const int n = topo_axes_size(e->topo, x->a), me = topo_axes_index(e->topo, x->a);
    int *v = malloc(4 * (size_t)n * sizeof(int));
    CHECK(v, "out of memory");
    int *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
    int64_t so = 0, ro = 0, bytes = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = icount(x->vcounts[(int64_t)me * n + j]), sd[j] = icount(so), so += sc[j];
        rc[j] = icount(x->vcounts[(int64_t)j * n + me]), rd[j] = icount(ro), ro += rc[j];
        if (j != me) bytes += sc[j];
    }
    MPI_Alltoallv(x->in, sc, sd, MPI_FLOAT, x->out, rc, rd, MPI_FLOAT,
                  comms_set(e->comms, e->topo, x->a));
    free(v);
    if (x->a.n) lb[x->a.ax[0]][0] += bytes * (int64_t)sizeof(float);
}

/* The engine's AllToAll on blocks of x->count (the largest), through padded copies. */
static void a2av_padded(const coll_env *e, const coll_args *x, mesh_alg alg, chain *ch,
                        int64_t (*lb)[2]) {
    /* every block empty (every rank holds the matrix): nothing moves, and blocks of 0 have no
     * scratch to copy through */
    if (x->count == 0) return;
    const int n = topo_axes_size(e->topo, x->a), me = topo_axes_index(e->topo, x->a);
    const int64_t c = x->count;
    float *pin = eng_scratch(e->ctx, SL_VIN, (int64_t)n * c);
    float *pout = eng_scratch(e->ctx, SL_VOUT, (int64_t)n * c);
    if (CTX_DATA(e->ctx)) {
        memset(pin, 0, (size_t)(n * c) * sizeof(float));
        const float *src = x->in;
        for (int j = 0; j < n; j++) {
            const int64_t l = x->vcounts[(int64_t)me * n + j];
            memcpy(pin + j * c, src, (size_t)l * sizeof(float));
            src += l;
        }
    }
    coll_args y = *x;
    y.vcounts = NULL, y.in = pin, y.out = pout;
    run_blocks(e, PH_A2A, &y, alg, ch, lb);
    if (!CTX_DATA(e->ctx)) return;
    float *dst = x->out;
    for (int j = 0; j < n; j++) {
        const int64_t l = x->vcounts[(int64_t)j * n + me];
        memcpy(dst, pout + j * c, (size_t)l * sizeof(float));
        dst += l;
    }
}

static void a2av_run(const coll_env *e, const coll_args *x, mesh_alg alg, chain *ch,
                     int64_t (*lb)[2]) {
    if (alg == MESH_ALG_MPI)
        a2av_mpi(e, x, lb);
    else if (alg == MESH_ALG_DIRECT)
        direct_a2av(e, x, lb);
    else
        a2av_padded(e, x, alg, ch, lb);
}

static void run_ar(const coll_env *e, const coll_args *x, mesh_alg alg, chain *ch,
                   int64_t (*lb)[2]) {
    mesh_axes a = x->a;
    int n = topo_axes_size(e->topo, a), i = topo_axes_index(e->topo, a);
    int64_t count = x->count;
    if (alg == MESH_ALG_RING || alg == MESH_ALG_BIDIR) { /* uneven blocks, in place in out */
        for (int j = 0; j <= n; j++) e->ctx->boff[j] = count * j / n;
        for (int j = 0; j < n; j++) e->ctx->blen[j] = e->ctx->boff[j + 1] - e->ctx->boff[j];
        int K = lane_count(e, e->ctx->blen[0]);
        for (int k = 0; k < K; k++) { /* lane k: its ReduceScatter, then its AllGather */
            phase rs = ph_over(e, PH_RS, a, alg);
            rs.src = x->in;
            rs.buf = x->out + e->ctx->boff[i] +
                     set_lane(e->ctx, &rs, e->ctx->boff, e->ctx->blen, 0, K, k, i);
            phase ag = rs;
            ag.kind = PH_AG, ag.buf = x->out, ag.src = NULL;
            push(&ch[k], rs);
            push(&ch[k], ag);
        }
        engine_run(e, ch, K, lb);
        return;
    }
    /* SEQ / MULTI: ReduceScatter then AllGather over blocks of ⌈count/n⌉, zero-padded if needed */
    int64_t cb = (count + n - 1) / n;
    const float *src = x->in;
    float *dst = x->out;
    if (cb * n != count) {
        float *pad = eng_scratch(e->ctx, SL_PAD, cb * n);
        if (CTX_DATA(e->ctx)) {
            memcpy(pad, x->in, (size_t)count * sizeof(float));
            memset(pad + count, 0, (size_t)(cb * n - count) * sizeof(float));
        }
        src = dst = pad;
    }
    coll_args y = *x;
    y.in = src, y.out = eng_scratch(e->ctx, SL_RED, cb), y.count = cb;
    run_blocks(e, PH_RS, &y, alg, ch, lb);
    for (int k = 0; k < ENGINE_MAX_CHAINS; k++) ch[k].nph = 0;
    y.in = y.out, y.out = dst;
    run_blocks(e, PH_AG, &y, alg, ch, lb);
    if (dst != x->out && CTX_DATA(e->ctx)) memcpy(x->out, dst, (size_t)count * sizeof(float));
}

static void validate(const mesh_topo *t, const coll_args *x) {
    CHECK(x->count >= 0, "%s: negative count %lld", mesh_op_name(x->op), (long long)x->count);
    if (x->op == MESH_OP_PPERMUTE) {
        CHECK(x->axis >= 0 && x->axis < t->ndims, "ppermute: axis %d not in the mesh (%d axes)",
              x->axis, t->ndims);
        return;
    }
    CHECK(x->a.n >= 0 && x->a.n <= t->ndims, "%s: %d axes on a %d-axis mesh", mesh_op_name(x->op),
          x->a.n, t->ndims);
    for (int k = 0; k < x->a.n; k++) {
        CHECK(x->a.ax[k] >= 0 && x->a.ax[k] < t->ndims, "%s: axis %d not in the mesh",
              mesh_op_name(x->op), x->a.ax[k]);
        for (int j = 0; j < k; j++)
            CHECK(x->a.ax[j] != x->a.ax[k], "%s: axis '%c' listed twice", mesh_op_name(x->op),
                  t->name[x->a.ax[k]]);
    }
    CHECK(x->alg >= 0 && x->alg < MESH_ALG_COUNT, "bad algorithm %d", (int)x->alg);
    CHECK(x->count == 0 || (x->in && x->out), "%s: NULL buffer", mesh_op_name(x->op));
}

/* Debug mode: every rank of the set must be making the same call (verify.c reports a
 * mismatch). */
static void verify(const coll_env *e, const coll_args *x, const mesh_call *rec) {
    const MPI_Comm set =
        x->op == MESH_OP_PPERMUTE ? e->comms->axis[x->axis] : comms_set(e->comms, e->topo, x->a);
    verify_signature(e->topo, e->comms->world.mpi, set, rec);
}

/* ppermute: one phase on x's axis, or a local copy for a shift of 0. */
static void run_perm(const coll_env *e, const coll_args *x, chain *ch, int64_t (*lb)[2]) {
    phase p = ph_over(e, PH_PERM, one_axis(x->axis), MESH_ALG_BIDIR);
    p.shift = x->shift, p.bs = x->count, p.buf = x->out, p.src = x->in;
    if (x->shift == 0) {
        if (x->out != x->in && CTX_DATA(e->ctx))
            memcpy(x->out, x->in, (size_t)x->count * sizeof(float));
    } else {
        push(&ch[0], p);
        engine_run(e, ch, 1, lb);
    }
}

/* Runs x by algorithm alg on the chains ch (one plan per context). */
static void run_plan(const coll_env *e, const coll_args *x, mesh_alg alg, chain *ch,
                     mesh_call *rec) {
    int64_t(*lb)[2] = rec->link_bytes;
    for (int k = 0; k < ENGINE_MAX_CHAINS; k++) ch[k].nph = 0;
    if (x->vcounts) {
        a2av_run(e, x, alg, ch, lb);
        return;
    }
    if (alg == MESH_ALG_MPI) {
        run_mpi(e, x, rec);
        return;
    }
    if (alg == MESH_ALG_DIRECT && x->op != MESH_OP_PPERMUTE) {
        direct_run(e, x, lb);
        return;
    }
    static const ph_kind block_kind[] = {[MESH_OP_ALL_GATHER] = PH_AG,
                                         [MESH_OP_REDUCE_SCATTER] = PH_RS,
                                         [MESH_OP_ALL_TO_ALL] = PH_A2A};
    switch (x->op) {
    case MESH_OP_ALL_GATHER:
    case MESH_OP_REDUCE_SCATTER:
    case MESH_OP_ALL_TO_ALL:
        run_blocks(e, block_kind[x->op], x, alg, ch, lb);
        break;
    case MESH_OP_ALL_REDUCE:
        run_ar(e, x, alg, ch, lb);
        break;
    case MESH_OP_PPERMUTE:
        run_perm(e, x, ch, lb);
        break;
    default:
        CHECK(0, "bad op %d", (int)x->op);
    }
}

void coll_execute(const coll_env *e, const coll_args *x0, mesh_call *rec) {
    eng_ctx *ctx = e->ctx;
    /* 2-byte elements in memory: the engine moves them in pairs, as the four-byte units of an
     * fp32 call that leaves its bits alone (AllGather only copies) */
    coll_args pairs = *x0;
    if (x0->bf16_mem) pairs.count = x0->count / 2, pairs.wire = MESH_WIRE_F32;
    const coll_args *x = &pairs;
    validate(e->topo, x);
    /* blocks and lanes: a set's ranks, at most lane_count(count) lanes (blocks are <= count) */
    eng_tables(ctx,
               x->op == MESH_OP_PPERMUTE ? e->topo->size[x->axis] : topo_axes_size(e->topo, x->a),
               lane_count(e, x->count));
    const mesh_alg alg =
        x->op == MESH_OP_PPERMUTE ? MESH_ALG_DEFAULT : alg_resolve(e->conf, x->a, x->alg);
    rec->alg = alg;
    /* the baselines move fp32; so does a call over no links */
    ctx->wire = alg == MESH_ALG_MPI || (alg == MESH_ALG_DIRECT && x->op != MESH_OP_PPERMUTE)
                    ? MESH_WIRE_F32
                    : x->wire;
    rec->wire = x0->bf16_mem ? MESH_WIRE_BF16 : ctx->wire;
#ifdef MESHTRAIN_SMPI
    /* the array's bytes: all_reduce's and ppermute's count, the others' n·count */
    const int whole = x->op == MESH_OP_ALL_REDUCE || x->op == MESH_OP_PPERMUTE;
    ctx->no_data = mesh_no_data(x->count * (whole ? 1 : topo_axes_size(e->topo, x->a)) * 4);
#endif
    act_enter(e->slot, e->conf->verify ? ACT_CHECK : ACT_COLL, rec);
    if (e->conf->verify) verify(e, x, rec), act_kind(e->slot, ACT_COLL);
    rec->t_start = mesh_now();
    const int64_t polls0 = ctx->idle_polls;
    link_clock_reset(&ctx->clock);
    /* a plan per context: the non-blocking calls' coroutine (context 1, co_progress.c) shares
     * the caller's thread in the SMPI build and the inline mode (SMPI privatises statics per
     * simulated rank; a thread's own otherwise) */
#ifdef MESHTRAIN_SMPI
    static chain plans[2][ENGINE_MAX_CHAINS];
#else
    static _Thread_local chain plans[2][ENGINE_MAX_CHAINS];
#endif
    run_plan(e, x, alg, plans[e->on_thread], rec);
    rec->t_end = mesh_now();
    rec->t_emulated = ctx->clock.vclock;
    rec->idle_polls = ctx->idle_polls - polls0;
    act_leave(e->slot);
}

coll_env coll_env_of(mesh *m, int ci) {
    return (coll_env){mesh_part_topo(m),
                      mesh_part_comms(m, ci),
                      mesh_part_engine(m, ci),
                      mesh_part_links(m),
                      &mesh_part_activity(m)->slot[ci],
                      mesh_part_queue(m)->q,
                      ci,
                      mesh_part_conf(m)};
}

void coll_issue(mesh *m, const coll_args *x, mesh_call *rec) {
    stats_issue(mesh_part_stats(m), rec, x->op,
                x->op == MESH_OP_PPERMUTE ? one_axis(x->axis) : x->a, x->count, x->shift);
}

/* ---- blocking API ---- */
void coll_run_blocking(mesh *m, const coll_args *x) {
    mesh_call rec;
    coll_issue(m, x, &rec);
    const coll_env e = coll_env_of(m, 0);
    coll_execute(&e, x, &rec);
    stats_complete(mesh_part_stats(m), &rec);
}

coll_args coll_args_of(const mesh_coll_call *c, float *out, const float *in) {
    CHECK(c->op >= MESH_OP_ALL_GATHER && c->op <= MESH_OP_PPERMUTE,
          "mesh_coll_run: %s is not a collective", mesh_op_name(c->op));
    CHECK(c->op != MESH_OP_PPERMUTE || c->axes.n == 1, "mesh_coll_run: ppermute over %d axes",
          c->axes.n);
    CHECK(c->wire >= 0 && c->wire < MESH_WIRE_COUNT, "bad wire format %d", (int)c->wire);
    coll_args x = {.op = c->op,
                   .a = c->axes,
                   .out = out,
                   .in = in,
                   .count = c->count,
                   .alg = c->alg,
                   .wire = c->wire};
    if (c->op == MESH_OP_PPERMUTE) x.axis = c->axes.ax[0], x.shift = c->shift, x.alg = 0;
    return x;
}

void mesh_coll_run(mesh *m, const mesh_coll_call *c, float *out, const float *in) {
    const coll_args x = coll_args_of(c, out, in);
    coll_run_blocking(m, &x);
}

#define ARGS(OP)                                                                                   \
    {                                                                                              \
        .op = OP, .a = a, .out = out, .in = in, .count = count, .alg = alg,                        \
        .wire = mesh_part_conf(m)->wire                                                            \
    }
/* The four collectives over an axis set (coll.h): one body, the op fixed. */
#define SET_COLLECTIVE(name, OP)                                                                   \
    void name(mesh *m, mesh_axes a, float *out, const float *in, int64_t count, mesh_alg alg) {    \
        coll_args x = ARGS(OP);                                                                    \
        coll_run_blocking(m, &x);                                                                  \
    }
SET_COLLECTIVE(mesh_all_gather, MESH_OP_ALL_GATHER)
SET_COLLECTIVE(mesh_reduce_scatter, MESH_OP_REDUCE_SCATTER)
SET_COLLECTIVE(mesh_all_reduce, MESH_OP_ALL_REDUCE)
SET_COLLECTIVE(mesh_all_to_all, MESH_OP_ALL_TO_ALL)
void mesh_collective(mesh *m, mesh_op op, mesh_axes a, float *out, const float *in, int64_t count,
                     mesh_alg alg) {
    CHECK(op >= MESH_OP_ALL_GATHER && op <= MESH_OP_ALL_TO_ALL,
          "mesh_collective: %s is not a collective over an axis set", mesh_op_name(op));
    coll_args x = ARGS(op);
    coll_run_blocking(m, &x);
}
coll_args coll_args_bf16(mesh_axes a, uint16_t *out, const uint16_t *in, int64_t count,
                         mesh_alg alg) {
    CHECK(count % 2 == 0, "mesh_all_gather_bf16: an odd count %lld (the caller pads its blocks)",
          (long long)count);
    return (coll_args){.op = MESH_OP_ALL_GATHER,
                       .a = a,
                       .out = (float *)(void *)out,
                       .in = (const float *)(const void *)in,
                       .count = count,
                       .alg = alg,
                       .wire = MESH_WIRE_F32,
                       .bf16_mem = 1};
}
void mesh_all_gather_bf16(mesh *m, mesh_axes a, uint16_t *out, const uint16_t *in, int64_t count,
                          mesh_alg alg) {
    const coll_args x = coll_args_bf16(a, out, in, count, alg);
    coll_run_blocking(m, &x);
}
void mesh_ppermute(mesh *m, int axis, int shift, float *out, const float *in, int64_t count) {
    const mesh_coll_call c = {MESH_OP_PPERMUTE,       one_axis(axis), shift, count, 0,
                              mesh_part_conf(m)->wire};
    mesh_coll_run(m, &c, out, in);
}
