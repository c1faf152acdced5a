/* The sharding layout (train/parallel/layout.c) as pure arithmetic, without MPI: for every rank
 * of several (data × tensor × pipeline) grids, including non-power-of-two axes and kv heads
 * replicated over tensor ranks, the local extents, the TP slabs and the ZeRO-3 shard slabs are
 * checked against counting: over all ranks, every element of every global parameter must be
 * covered exactly as often as the scheme replicates it (|X| times for a TP slab, once for a ZeRO
 * shard, times |Y| for norm gains, times |Y|/K for a shared kv head, zero times on the other
 * pipeline stages). The plans come from the real constructor (plan_build) on axis sizes and
 * indices alone. Column packing is checked against its definition and as a round trip. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/parallel/par_impl.h"
#include "train/parallel/plan.h"

typedef struct {
    int64_t n_data, n_tensor, n_pipe;
    model_shape s;
} grid;

/* One role's axes: mesh axis `ax` (named `name`) of size n with this rank at index i; none when
 * n is 1. */
static plan_axes role(int ax, char name, int64_t n, int64_t i) {
    const mesh_axes none = {0, {0, 0, 0}}, one = {1, {ax, 0, 0}};
    const int size = (int)n, wrap = n > 2, coord = (int)i;
    const char names[2] = {name, 0};
    return n == 1 ? plan_axes_of(&none, NULL, NULL, NULL, "", MESH_ALG_DEFAULT)
                  : plan_axes_of(&one, &size, &wrap, &coord, names, MESH_ALG_BIDIR);
}

/* The plan of rank (xi, yi, zi) of the grid, from the real constructor (no mesh). */
static plan *plan_at(const grid *gr, int zero, int64_t xi, int64_t yi, int64_t zi) {
    plan_in in;
    config c;
    config_defaults(&c);
    c.shape = gr->s;
    c.zero = zero;
    c.batch = c.micro_batch = 2 * gr->n_data;
    plan_in_single(&in, &c);
    in.batch = in.data = role(0, 'x', gr->n_data, xi);
    in.tensor = role(1, 'y', gr->n_tensor, yi);
    in.pipe = role(2, 'z', gr->n_pipe, zi);
    plan *p = malloc(sizeof *p);
    char err[256];
    if (plan_build(p, &in, err, sizeof err) < 0) {
        fprintf(stderr, "plan_build: %s\n", err);
        exit(1);
    }
    return p;
}

static int64_t volume(const param_slab *sl) {
    return sl->cnt[0] * sl->cnt[1] * sl->cnt[2];
}

/* Adds 1 to count[] for every global element of parameter id inside slab. */
static void cover(int *count, const model_shape *s, param_id id, const param_slab *sl) {
    param_info pi = model_param_info(s, id);
    const int64_t *S = pi.shape, *o = sl->off, *c = sl->cnt;
    for (int64_t i = 0; i < c[0]; i++)
        for (int64_t j = 0; j < c[1]; j++)
            for (int64_t k = 0; k < c[2]; k++)
                count[((o[0] + i) * S[1] + o[1] + j) * S[2] + o[2] + k]++;
}

/* The replication the scheme intends over the tensor axis. */
static int64_t tensor_copies(const grid *gr, param_id id) {
    if (id == P_ATTN_NORM || id == P_MLP_NORM || id == P_FINAL_NORM) return gr->n_tensor;
    if ((id == P_WK || id == P_WV) && gr->s.K < gr->n_tensor) return gr->n_tensor / gr->s.K;
    return 1;
}

static void check_extents(const grid *gr, const char *name) {
    const model_shape *s = &gr->s;
    int bad = 0;
    int64_t next_n = 0, next_f = 0, next_v = 0, next_d = 0;
    for (int64_t y = 0; y < gr->n_tensor; y++) {
        plan *p = plan_at(gr, 0, 0, y, 0);
        const model_extents *e = &p->loc;
        /* consecutive tensor ranks hold consecutive, disjoint ranges that end at the global size */
        bad |= e->n0 != next_n || e->f0 != next_f || e->v0 != next_v || e->d0 != next_d;
        next_n += e->Nl, next_f += e->Fl, next_v += e->Vl, next_d += e->Dl;
        /* every local query head finds its kv head among the local kv heads */
        for (int64_t h = e->n0; h < e->n0 + e->Nl; h++) {
            const int64_t kv = h / (s->N / s->K);
            bad |= kv < e->k0 || kv >= e->k0 + e->Kl;
        }
        free(p);
    }
    bad |= next_n != s->N || next_f != s->F || next_v != s->V || next_d != s->D;
    check_expect(!bad, "%s: local extents partition N, F, V, D; kv heads local", name);
}

static void check_slabs(const grid *gr, int zero, const char *name) {
    const model_shape *s = &gr->s;
    for (int id = 0; id < P_COUNT; id++) {
        const int64_t n = model_param_numel(s, (param_id)id);
        int *tp = calloc((size_t)n, sizeof *tp), *sh = calloc((size_t)n, sizeof *sh);
        int bad_size = 0;
        for (int64_t x = 0; x < gr->n_data; x++)
            for (int64_t y = 0; y < gr->n_tensor; y++)
                for (int64_t z = 0; z < gr->n_pipe; z++) {
                    plan *p = plan_at(gr, zero, x, y, z);
                    const plan_geo *g = &p->g[id];
                    param_slab t = plan_tp_slab(p, (param_id)id);
                    bad_size |= volume(&t) != g->nb * g->R * g->C;
                    cover(tp, s, (param_id)id, &t);
                    if (p->zero >= 1) {
                        param_slab z3 = plan_shard_slab(p, (param_id)id);
                        bad_size |= volume(&z3) != g->shard_n;
                        cover(sh, s, (param_id)id, &z3);
                    }
                    free(p);
                }
        const int64_t want = tensor_copies(gr, (param_id)id);
        int bad_tp = 0, bad_sh = 0;
        for (int64_t i = 0; i < n; i++) {
            bad_tp |= tp[i] != gr->n_data * want;
            bad_sh |= zero >= 1 && gr->n_data > 1 && sh[i] != want;
        }
        check_expect(!bad_tp && !bad_sh && !bad_size,
                     "%s zero %d: %s covered %lld× by TP slabs%s, sizes match", name, zero,
                     model_param_info(s, (param_id)id).name, (long long)(gr->n_data * want),
                     zero >= 1 && gr->n_data > 1 ? " and once (per tensor copy) by shards" : "");
        free(tp);
        free(sh);
    }
}

static void check_packing(void) {
    const int64_t R = 3, C = 10, n = 5, c = C / n;
    float src[30], packed[30], back[30];
    for (int i = 0; i < 30; i++) src[i] = (float)i;
    par_pack_cols(packed, src, R, C, n);
    int bad = 0;
    for (int64_t j = 0; j < n; j++) /* chunk j is columns [j·c, (j+1)·c) of every row */
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < c; k++)
                bad |= packed[(j * R + r) * c + k] != src[r * C + j * c + k];
    par_unpack_cols(back, packed, R, C, n);
    check_expect(!bad, "pack_cols: chunk j holds columns j·C/n .. of every row (R 3, C 10, n 5)");
    check_expect(memcmp(back, src, sizeof src) == 0, "unpack_cols(pack_cols(x)) == x");
}

int main(void) {
    check_packing();
    const grid grids[] = {
        {1, 1, 1, {2, 12, 4, 2, 4, 10, 14, 8, {0}}},
        {3, 2, 1, {2, 12, 4, 2, 4, 10, 14, 8, {0}}}, /* non-power-of-two data axis */
        {2, 4, 1, {2, 8, 4, 2, 2, 8, 12, 8, {0}}}, /* K < |Y|: kv heads shared by 2 tensor ranks */
        {1, 3, 1, {2, 9, 3, 3, 2, 6, 9, 8, {0}}},  /* tensor axis of 3 */
        {2, 1, 2, {4, 8, 2, 2, 4, 8, 6, 8, {0}}},  /* 2 pipeline stages */
        {2, 2, 3, {3, 4, 2, 1, 2, 4, 6, 8, {0}}},  /* 3 stages, one kv head over 2 tensor ranks */
    };
    char name[64];
    for (size_t i = 0; i < sizeof grids / sizeof *grids; i++) {
        const grid *gr = &grids[i];
        snprintf(name, sizeof name, "X %lld Y %lld Z %lld", (long long)gr->n_data,
                 (long long)gr->n_tensor, (long long)gr->n_pipe);
        check_extents(gr, name);
        for (int zero = 0; zero <= 3; zero += 3) check_slabs(gr, zero, name);
    }
    return check_finish("test_layout");
}
