/* coll: plans of the collectives over axis sets (which phases on which buffers), the public
 * blocking API, accounting and the debug signature check. See coll.h; the step schedules are in
 * coll_engine.c, the progress thread in coll_async.c. */
#include "mesh/coll_engine.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Scratch slots (per context): 0 the engine's buffers (coll_engine.c); then these. */
enum { SL_PAD = 12, SL_RED = 13, SL_T = 14, SL_A = 17, SL_B = 20 };

void mesh_set_wire(mesh *m, mesh_wire w) {
    CHECK(w >= 0 && w < MESH_WIRE_COUNT, "bad wire format %d", (int)w);
    m->wire = w;
}
mesh_wire mesh_get_wire(const mesh *m) {
    return m->wire;
}
void mesh_set_chunk(mesh *m, int64_t bytes) {
    CHECK(bytes >= 0, "chunk size must be >= 0, got %lld", (long long)bytes);
    m->chunk = bytes;
}
int64_t mesh_get_chunk(const mesh *m) {
    return m->chunk;
}
void mesh_set_default_alg(mesh *m, mesh_alg a) {
    CHECK(a >= 0 && a < MESH_ALG_COUNT, "bad algorithm %d", (int)a);
    m->default_alg = a;
}
mesh_alg mesh_alg_resolve(const mesh *m, mesh_axes a, mesh_alg alg) {
    if (alg == MESH_ALG_DEFAULT) alg = m->default_alg;
    if (alg == MESH_ALG_DEFAULT) alg = a.n > 1 ? MESH_ALG_MULTI : MESH_ALG_BIDIR;
    if ((alg == MESH_ALG_SEQ || alg == MESH_ALG_MULTI) && a.n <= 1) alg = MESH_ALG_BIDIR;
    return alg;
}

/* ---- plan building ---- */

/* A phase over the ordered set `s` treated as one ring (neighbours are index ± 1). */
static phase ph_over(const mesh *m, mesh_ctx *ctx, ph_kind k, mesh_axes s, mesh_alg alg) {
    phase p;
    memset(&p, 0, sizeof p);
    p.kind = k;
    p.comm = mesh_ctx_set(m, ctx, s);
    p.n = mesh_axes_size(m, s);
    p.r = mesh_axes_index(m, s);
    p.link_axis = s.n ? s.ax[s.n - 1] : -1;
    int wraps = s.n > 0;
    for (int i = 0; i < s.n; i++) wraps &= m->wrap[s.ax[i]];
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
static int lane_count(const mesh *m, int64_t maxlen) {
    if (m->chunk <= 0 || maxlen <= 0) return 1;
    int64_t c = m->chunk >= (int64_t)sizeof(float) ? m->chunk / (int64_t)sizeof(float) : 1;
    int64_t k = (maxlen + c - 1) / c;
    return k > ENGINE_MAX_CHAINS ? ENGINE_MAX_CHAINS : (int)k;
}

/* Sets p's blocks to lane k of K of the blocks (off[j] or j·bs, len[j] or bs), j < p->n. Returns
 * the start of lane k within block `j0` (to offset a per-block pointer). */
static int64_t set_lane(mesh_ctx *ctx, phase *p, const int64_t *off, const int64_t *len, int64_t bs,
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

static phase ph_reorder(const mesh *m, mesh_axes a, float *dst, const float *src, const int *os,
                        const int *od, int64_t item, int64_t ss, int64_t so, int64_t ds,
                        int64_t dof) {
    phase p;
    memset(&p, 0, sizeof p);
    p.kind = PH_REORDER;
    p.n = 1;
    p.link_axis = -1;
    p.buf = dst, p.src = src, p.nd = a.n;
    for (int k = 0; k < a.n; k++) {
        p.sizes[k] = m->size[a.ax[k]];
        p.ord_src[k] = os[k], p.ord_dst[k] = od[k];
    }
    p.item = item, p.s_stride = ss, p.s_off = so, p.d_stride = ds, p.d_off = dof;
    return p;
}

/* AllGather axis by axis (last of `ord` first) on T laid out in `ord` order, item ck; the own
 * item is copied from `own` by the first phase. */
static void seq_ag(const mesh *m, mesh_ctx *ctx, chain *c, mesh_axes a, const int *ord, float *T,
                   const float *own, int64_t ck) {
    int P = a.n;
    for (int k = P - 1; k >= 0; k--) {
        int64_t bs = ck, grp = 0;
        for (int j = k + 1; j < P; j++) bs *= m->size[a.ax[ord[j]]];
        for (int j = 0; j < k; j++) grp = grp * m->size[a.ax[ord[j]]] + m->coord[a.ax[ord[j]]];
        phase p = ph_over(m, ctx, PH_AG, one_axis(a.ax[ord[k]]), MESH_ALG_BIDIR);
        p.bs = bs;
        p.buf = T + grp * p.n * bs;
        p.src = k == P - 1 ? own : NULL;
        push(c, p);
    }
}

/* ReduceScatter axis by axis (first of `ord` first) from `in` laid out in `ord` order (item ck)
 * into out[ck], through scratch slots sa, sb. */
static void seq_rs(const mesh *m, mesh_ctx *ctx, chain *c, mesh_axes a, const int *ord,
                   const float *in, float *out, int64_t ck, int sa, int sb) {
    int P = a.n;
    const float *cur = in;
    for (int k = 0; k < P; k++) {
        int64_t bs = ck;
        for (int j = k + 1; j < P; j++) bs *= m->size[a.ax[ord[j]]];
        phase p = ph_over(m, ctx, PH_RS, one_axis(a.ax[ord[k]]), MESH_ALG_BIDIR);
        p.bs = bs;
        p.src = cur;
        p.buf = k == P - 1 ? out : mesh_scratch(ctx, k % 2 ? sb : sa, bs);
        cur = p.buf;
        push(c, p);
    }
}

/* AllToAll axis by axis: before the exchange over an axis its items are moved to the front of the
 * layout (so its blocks are contiguous); at the end the layout is put back in set order. Item ck
 * is read at in + i·in_stride + in_off and written at out + i·out_stride + out_off. */
static void seq_a2a(const mesh *m, mesh_ctx *ctx, chain *c, mesh_axes a, int first, const float *in,
                    int64_t in_stride, int64_t in_off, float *out, int64_t out_stride,
                    int64_t out_off, int64_t ck, int sa, int sb) {
    int P = a.n, n = mesh_axes_size(m, a);
    int L[MESH_MAX_AXES], id[MESH_MAX_AXES];
    for (int k = 0; k < P; k++) L[k] = id[k] = k;
    float *A = mesh_scratch(ctx, sa, (int64_t)n * ck), *B = mesh_scratch(ctx, sb, (int64_t)n * ck);
    const float *cur = in;
    int64_t cs = in_stride, co = in_off;
    for (int t = 0; t < P; t++) {
        int q = (first + t) % P, L2[MESH_MAX_AXES], w = 1;
        L2[0] = q;
        for (int k = 0; k < P; k++)
            if (L[k] != q) L2[w++] = L[k];
        push(c, ph_reorder(m, a, A, cur, L, L2, ck, cs, co, ck, 0));
        phase p = ph_over(m, ctx, PH_A2A, one_axis(a.ax[q]), MESH_ALG_BIDIR);
        p.bs = ck * (n / p.n);
        p.src = A;
        p.buf = B;
        push(c, p);
        cur = B, cs = ck, co = 0;
        memcpy(L, L2, sizeof L);
    }
    push(c, ph_reorder(m, a, out, cur, L, id, ck, cs, co, out_stride, out_off));
}

/* ---- MPI baseline ---- */
static int icount(int64_t n) {
    CHECK(n >= 0 && n <= INT_MAX, "count %lld does not fit MPI's int", (long long)n);
    return (int)n;
}

static void run_mpi(mesh *m, mesh_ctx *ctx, const coll_args *x, mesh_call *rec) {
    MPI_Comm comm = mesh_ctx_set(m, ctx, x->a);
    int n = mesh_axes_size(m, x->a), i = mesh_axes_index(m, x->a);
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
static void run_lanes(mesh *m, mesh_ctx *ctx, ph_kind kind, const coll_args *x, mesh_alg alg,
                      chain *ch, int64_t (*lb)[2]) {
    phase p = ph_over(m, ctx, kind, x->a, alg);
    const int64_t c = x->count;
    const int K = lane_count(m, c);
    p.buf = x->out, p.src = x->in;
    for (int k = 0; k < K; k++) {
        const int64_t at = set_lane(ctx, &p, NULL, NULL, c, K, k, p.r);
        if (kind == PH_AG) p.src = x->in + at;
        if (kind == PH_RS) p.buf = x->out + at;
        push(&ch[k], p);
    }
    engine_run(m, ctx, ch, K, lb);
}

/* SEQ/MULTI AllGather, ReduceScatter or AllToAll: part k of `parts` (1 for SEQ, |a| for MULTI)
 * moves elements [c·k/parts, c·(k+1)/parts) of every block on chain k, axis by axis in the set's
 * order rotated by k (so the parts load different links at once), with its own scratch slots. */
static void part_chain(mesh *m, mesh_ctx *ctx, ph_kind kind, const coll_args *x, chain *ch,
                       int parts, int k) {
    const mesh_axes a = x->a;
    const int n = mesh_axes_size(m, a);
    int id[MESH_MAX_AXES] = {0, 1, 2}, ord[MESH_MAX_AXES];
    const int64_t c = x->count, lo = c * k / parts, ck = c * (k + 1) / parts - lo;
    if (kind == PH_A2A) {
        seq_a2a(m, ctx, ch, a, k, x->in, c, lo, x->out, c, lo, ck, SL_A + k, SL_B + k);
    } else if (parts == 1) { /* SEQ: in the set's order, straight between in and out */
        if (kind == PH_AG)
            seq_ag(m, ctx, ch, a, id, x->out, x->in, c);
        else
            seq_rs(m, ctx, ch, a, id, x->in, x->out, c, SL_A, SL_B);
    } else { /* MULTI: through scratch laid out in the rotated order */
        rotated(a.n, k, ord);
        float *T = mesh_scratch(ctx, SL_T + k, (int64_t)n * ck);
        if (kind == PH_AG) {
            seq_ag(m, ctx, ch, a, ord, T, x->in + lo, ck);
            push(ch, ph_reorder(m, a, x->out, T, ord, id, ck, ck, 0, c, lo));
        } else {
            push(ch, ph_reorder(m, a, T, x->in, id, ord, ck, c, lo, ck, 0));
            seq_rs(m, ctx, ch, a, ord, T, x->out + lo, ck, SL_A + k, SL_B + k);
        }
    }
}

/* AllGather, ReduceScatter or AllToAll of blocks of x->count over the set x->a, by alg. */
static void run_blocks(mesh *m, mesh_ctx *ctx, ph_kind kind, const coll_args *x, mesh_alg alg,
                       chain *ch, int64_t (*lb)[2]) {
    CHECK(kind != PH_A2A || x->in != x->out || mesh_axes_size(m, x->a) == 1,
          "all_to_all cannot run in place");
    if (alg == MESH_ALG_RING || alg == MESH_ALG_BIDIR) {
        run_lanes(m, ctx, kind, x, alg, ch, lb);
        return;
    }
    const int parts = alg == MESH_ALG_SEQ ? 1 : x->a.n;
    for (int k = 0; k < parts; k++) part_chain(m, ctx, kind, x, &ch[k], parts, k);
    engine_run(m, ctx, ch, parts, lb);
}

static void run_ar(mesh *m, mesh_ctx *ctx, const coll_args *x, mesh_alg alg, chain *ch,
                   int64_t (*lb)[2]) {
    mesh_axes a = x->a;
    int n = mesh_axes_size(m, a), i = mesh_axes_index(m, a);
    int64_t count = x->count;
    if (alg == MESH_ALG_RING || alg == MESH_ALG_BIDIR) { /* uneven blocks, in place in out */
        for (int j = 0; j <= n; j++) ctx->boff[j] = count * j / n;
        for (int j = 0; j < n; j++) ctx->blen[j] = ctx->boff[j + 1] - ctx->boff[j];
        int K = lane_count(m, ctx->blen[0]);
        for (int k = 0; k < K; k++) { /* lane k: its ReduceScatter, then its AllGather */
            phase rs = ph_over(m, ctx, PH_RS, a, alg);
            rs.src = x->in;
            rs.buf = x->out + ctx->boff[i] + set_lane(ctx, &rs, ctx->boff, ctx->blen, 0, K, k, i);
            phase ag = rs;
            ag.kind = PH_AG, ag.buf = x->out, ag.src = NULL;
            push(&ch[k], rs);
            push(&ch[k], ag);
        }
        engine_run(m, ctx, ch, K, lb);
        return;
    }
    /* SEQ / MULTI: ReduceScatter then AllGather over blocks of ⌈count/n⌉, zero-padded if needed */
    int64_t cb = (count + n - 1) / n;
    const float *src = x->in;
    float *dst = x->out;
    if (cb * n != count) {
        float *pad = mesh_scratch(ctx, SL_PAD, cb * n);
        if (CTX_DATA(ctx)) {
            memcpy(pad, x->in, (size_t)count * sizeof(float));
            memset(pad + count, 0, (size_t)(cb * n - count) * sizeof(float));
        }
        src = dst = pad;
    }
    coll_args y = *x;
    y.in = src, y.out = mesh_scratch(ctx, SL_RED, cb), y.count = cb;
    run_blocks(m, ctx, PH_RS, &y, alg, ch, lb);
    for (int k = 0; k < ENGINE_MAX_CHAINS; k++) ch[k].nph = 0;
    y.in = y.out, y.out = dst;
    run_blocks(m, ctx, PH_AG, &y, alg, ch, lb);
    if (dst != x->out && CTX_DATA(ctx)) memcpy(x->out, dst, (size_t)count * sizeof(float));
}

static void validate(const mesh *m, const coll_args *x) {
    CHECK(x->count >= 0, "%s: negative count %lld", mesh_op_name(x->op), (long long)x->count);
    if (x->op == MESH_OP_PPERMUTE) {
        CHECK(x->axis >= 0 && x->axis < m->ndims, "ppermute: axis %d not in the mesh (%d axes)",
              x->axis, m->ndims);
        return;
    }
    CHECK(x->a.n >= 0 && x->a.n <= m->ndims, "%s: %d axes on a %d-axis mesh", mesh_op_name(x->op),
          x->a.n, m->ndims);
    for (int k = 0; k < x->a.n; k++) {
        CHECK(x->a.ax[k] >= 0 && x->a.ax[k] < m->ndims, "%s: axis %d not in the mesh",
              mesh_op_name(x->op), x->a.ax[k]);
        for (int j = 0; j < k; j++)
            CHECK(x->a.ax[j] != x->a.ax[k], "%s: axis '%c' listed twice", mesh_op_name(x->op),
                  m->name[x->a.ax[k]]);
    }
    CHECK(x->alg >= 0 && x->alg < MESH_ALG_COUNT, "bad algorithm %d", (int)x->alg);
    CHECK(x->count == 0 || (x->in && x->out), "%s: NULL buffer", mesh_op_name(x->op));
}

/* Debug mode: every rank of the set must be making the same call (where.c reports a mismatch). */
static void verify_signature(mesh *m, mesh_ctx *ctx, const coll_args *x, const mesh_call *rec) {
    where_verify(m, x->op == MESH_OP_PPERMUTE ? ctx->axis[x->axis] : mesh_ctx_set(m, ctx, x->a),
                 rec);
}

void coll_execute(mesh *m, int ci, const coll_args *x, mesh_call *rec) {
    mesh_ctx *ctx = &m->ctx[ci];
    validate(m, x);
    /* blocks and lanes: a set's ranks, at most lane_count(count) lanes (blocks are <= count) */
    comms_tables(ctx, x->op == MESH_OP_PPERMUTE ? m->size[x->axis] : mesh_axes_size(m, x->a),
                 lane_count(m, x->count));
    mesh_alg alg = x->op == MESH_OP_PPERMUTE ? MESH_ALG_DEFAULT : mesh_alg_resolve(m, x->a, x->alg);
    rec->alg = alg;
    /* the baselines move fp32; so does a call over no links */
    ctx->wire = alg == MESH_ALG_MPI || (alg == MESH_ALG_DIRECT && x->op != MESH_OP_PPERMUTE)
                    ? MESH_WIRE_F32
                    : x->wire;
    rec->wire = ctx->wire;
#ifdef MESHTRAIN_SMPI
    /* the array's bytes: all_reduce's and ppermute's count, the others' n·count */
    const int whole = x->op == MESH_OP_ALL_REDUCE || x->op == MESH_OP_PPERMUTE;
    ctx->no_data = mesh_no_data(x->count * (whole ? 1 : mesh_axes_size(m, x->a)) * 4);
#endif
    where_enter(m, ci, m->verify ? WHERE_CHECK : WHERE_COLL, rec);
    if (m->verify) verify_signature(m, ctx, x, rec), where_kind(m, ci, WHERE_COLL);
    rec->t_start = mesh_now();
    const int64_t polls0 = ctx->idle_polls;
    link_clock_reset(&ctx->clock);
    /* a plan per context: the non-blocking calls' coroutine (ctx[1], co_progress.c) shares the
     * caller's thread in the SMPI build and the inline mode (SMPI privatises statics per
     * simulated rank; a thread's own otherwise) */
#ifdef MESHTRAIN_SMPI
    static chain plans[2][ENGINE_MAX_CHAINS];
#else
    static _Thread_local chain plans[2][ENGINE_MAX_CHAINS];
#endif
    chain *ch = plans[ci];
    for (int k = 0; k < ENGINE_MAX_CHAINS; k++) ch[k].nph = 0;
    int64_t(*lb)[2] = rec->link_bytes;
    if (alg == MESH_ALG_MPI) {
        run_mpi(m, ctx, x, rec);
    } else if (alg == MESH_ALG_DIRECT && x->op != MESH_OP_PPERMUTE) {
        direct_run(m, ctx, x, lb);
    } else {
        switch (x->op) {
        case MESH_OP_ALL_GATHER:
            run_blocks(m, ctx, PH_AG, x, alg, ch, lb);
            break;
        case MESH_OP_REDUCE_SCATTER:
            run_blocks(m, ctx, PH_RS, x, alg, ch, lb);
            break;
        case MESH_OP_ALL_REDUCE:
            run_ar(m, ctx, x, alg, ch, lb);
            break;
        case MESH_OP_ALL_TO_ALL:
            run_blocks(m, ctx, PH_A2A, x, alg, ch, lb);
            break;
        case MESH_OP_PPERMUTE: {
            phase p = ph_over(m, ctx, PH_PERM, one_axis(x->axis), MESH_ALG_BIDIR);
            p.shift = x->shift, p.bs = x->count, p.buf = x->out, p.src = x->in;
            if (x->shift == 0) {
                if (x->out != x->in && CTX_DATA(ctx))
                    memcpy(x->out, x->in, (size_t)x->count * sizeof(float));
            } else {
                push(&ch[0], p);
                engine_run(m, ctx, ch, 1, lb);
            }
            break;
        }
        default:
            CHECK(0, "bad op %d", (int)x->op);
        }
    }
    rec->t_end = mesh_now();
    rec->t_emulated = ctx->clock.vclock;
    rec->idle_polls = ctx->idle_polls - polls0;
    where_leave(m, ci);
}

/* ---- accounting ---- */
void coll_record_begin(mesh *m, const coll_args *x, mesh_call *rec) {
    memset(rec, 0, sizeof *rec);
    rec->op = x->op;
    rec->axes = x->op == MESH_OP_PPERMUTE ? one_axis(x->axis) : x->a;
    const int set = mesh_set_id(rec->axes);
    pthread_mutex_lock(&m->acct_mu);
    rec->seq = m->seq++;
    if (x->op != MESH_OP_SEND && x->op != MESH_OP_RECV && set >= 0 && set < MESH_NSETS)
        rec->set_seq = m->set_seq[set]++;
    pthread_mutex_unlock(&m->acct_mu);
    rec->count = x->count;
    rec->shift = x->shift;
    rec->t_issue = mesh_now();
    rec->cpu_issue = mesh_thread_cpu();
}

void coll_record_end(mesh *m, const mesh_call *rec) {
    int64_t bytes = 0;
    for (int k = 0; k < MESH_MAX_AXES; k++) bytes += rec->link_bytes[k][0] + rec->link_bytes[k][1];
    pthread_mutex_lock(&m->acct_mu);
    mesh_stat *s = &m->stat[rec->op][rec->axes.n ? rec->axes.ax[0] + 1 : 0];
    s->calls++;
    s->bytes += bytes;
    s->seconds += rec->t_end - rec->t_start;
    s->idle_polls += rec->idle_polls;
    if (!rec->async) { /* completed on the caller's thread */
        s->wait_seconds += rec->t_end - rec->t_issue;
        s->wait_cpu += mesh_thread_cpu() - rec->cpu_issue;
    }
    m->trace[rec->seq % MESH_TRACE_LEN] = *rec;
    mesh_hook hk[MESH_MAX_HOOKS];
    memcpy(hk, m->hook, sizeof hk);
    pthread_mutex_unlock(&m->acct_mu);
    for (int i = 0; i < MESH_MAX_HOOKS; i++)
        if (hk[i].done) hk[i].done(rec, hk[i].ctx);
}

mesh_stat mesh_stats(const mesh *m, mesh_op op, int axis) {
    mesh_stat t = {0, 0, 0, 0, 0, 0};
    CHECK(op >= 0 && op < MESH_OP_COUNT, "bad op %d", (int)op);
    pthread_mutex_lock((pthread_mutex_t *)&m->acct_mu);
    for (int k = 0; k <= MESH_MAX_AXES; k++) {
        if (axis >= 0 && k != axis + 1) continue;
        const mesh_stat *s = &m->stat[op][k];
        t.calls += s->calls, t.bytes += s->bytes;
        t.seconds += s->seconds, t.wait_seconds += s->wait_seconds, t.wait_cpu += s->wait_cpu;
        t.idle_polls += s->idle_polls;
    }
    pthread_mutex_unlock((pthread_mutex_t *)&m->acct_mu);
    return t;
}

void mesh_stats_reset(mesh *m) {
    pthread_mutex_lock(&m->acct_mu);
    memset(m->stat, 0, sizeof m->stat);
    pthread_mutex_unlock(&m->acct_mu);
}

int mesh_trace_read(const mesh *m, int64_t from_seq, mesh_call *out, int max) {
    int got = 0;
    pthread_mutex_lock((pthread_mutex_t *)&m->acct_mu);
    int64_t lo = m->seq - MESH_TRACE_LEN;
    for (int64_t s = from_seq > lo ? from_seq : lo; s < m->seq && got < max; s++) {
        if (s < 0) continue;
        const mesh_call *r = &m->trace[s % MESH_TRACE_LEN];
        if (r->seq == s && r->t_end > 0) out[got++] = *r;
    }
    pthread_mutex_unlock((pthread_mutex_t *)&m->acct_mu);
    return got;
}

int mesh_add_trace_hook(mesh *m, mesh_trace_fn done, mesh_wait_fn waited, void *ctx) {
    CHECK(done, "mesh_add_trace_hook: done must not be NULL");
    int rc = -1;
    pthread_mutex_lock(&m->acct_mu);
    for (int i = 0; i < MESH_MAX_HOOKS && rc < 0; i++)
        if (!m->hook[i].done) m->hook[i] = (mesh_hook){done, waited, ctx}, rc = 0;
    pthread_mutex_unlock(&m->acct_mu);
    return rc;
}

void mesh_remove_trace_hook(mesh *m, void *ctx) {
    pthread_mutex_lock(&m->acct_mu);
    for (int i = 0; i < MESH_MAX_HOOKS; i++)
        if (m->hook[i].ctx == ctx) m->hook[i] = (mesh_hook){NULL, NULL, NULL};
    pthread_mutex_unlock(&m->acct_mu);
}

void mesh_set_verify(mesh *m, int on) {
    m->verify = on;
}

/* ---- blocking API ---- */
static void run_blocking(mesh *m, const coll_args *x) {
    mesh_call rec;
    coll_record_begin(m, x, &rec);
    coll_execute(m, 0, x, &rec);
    coll_record_end(m, &rec);
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
    run_blocking(m, &x);
}

#define ARGS(OP)                                                                                   \
    { .op = OP, .a = a, .out = out, .in = in, .count = count, .alg = alg, .wire = m->wire }
/* The four collectives over an axis set (coll.h): one body, the op fixed. */
#define SET_COLLECTIVE(name, OP)                                                                   \
    void name(mesh *m, mesh_axes a, float *out, const float *in, int64_t count, mesh_alg alg) {    \
        coll_args x = ARGS(OP);                                                                    \
        run_blocking(m, &x);                                                                       \
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
    run_blocking(m, &x);
}
void mesh_ppermute(mesh *m, int axis, int shift, float *out, const float *in, int64_t count) {
    const mesh_coll_call c = {MESH_OP_PPERMUTE, one_axis(axis), shift, count, 0, m->wire};
    mesh_coll_run(m, &c, out, in);
}
