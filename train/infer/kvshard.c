/* kvshard: the KV cache sharded over the sequence on one mesh axis (see kvshard.h). */
#include "train/infer/kvshard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_part.h"
#include "kernels/bf16.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/config/alloc.h"

int kvshard_config(const config *c, const mesh *m, char axis, config *plan_c, char *err,
                   size_t errlen) {
    *plan_c = *c;
    if (!axis) return 0;
    char names[MESH_MAX_AXES + 1] = "";
    for (int a = 0; a < mesh_ndims(m); a++) names[a] = mesh_axis_name(m, a);
    if (mesh_axis_index(m, axis) < 0)
        return errmsg_fail(err, errlen, "--kv-shard %c: the mesh has no axis %c (its axes: %s)",
                           axis, axis, names);
    if (c->tensor_axis[0] == axis)
        return errmsg_fail(err, errlen,
                           "--kv-shard %c is also --tensor: an axis shards one thing; give the "
                           "KV cache's sequence its own mesh axis",
                           axis);
    if (strchr(c->data_axes, axis))
        return errmsg_fail(err, errlen,
                           "--kv-shard %c is also in --dp %s: an axis shards one thing (the "
                           "replicas split the prompts, --kv-shard splits each one's cache); "
                           "give it its own mesh axis",
                           axis, c->data_axes);
    const size_t n = strlen(c->data_axes);
    if (n > 0) { /* explicit --dp: the plan replicates the weights over the kv axis too */
        if (n + 1 >= sizeof plan_c->data_axes)
            return errmsg_fail(err, errlen, "--kv-shard %c: too many axes with --dp %s", axis,
                               c->data_axes);
        plan_c->data_axes[n] = axis;
        plan_c->data_axes[n + 1] = 0;
    }
    return 0;
}

mesh_axes kvshard_replica_axes(const config *c, const mesh *m, char axis) {
    char dp[CONFIG_AXES_LEN], keep[CONFIG_AXES_LEN] = "";
    config_data_axes(c, m, dp);
    for (size_t i = 0, k = 0; dp[i]; i++)
        if (dp[i] != axis) keep[k++] = dp[i];
    mesh_axes out = {0};
    CHECK(mesh_axes_parse(m, keep, &out) == 0, "kvshard: data axes %s not validated", keep);
    return out;
}

int kvshard_init(kvshard *ks, const mesh *m, char axis, int64_t R, int64_t Nl, int64_t Kl,
                 int64_t H, int64_t S) {
    memset(ks, 0, sizeof *ks);
    ks->P = 1;
    if (!axis) return 0;
    const int a = mesh_axis_index(m, axis);
    CHECK(a >= 0, "kvshard_init: no axis %c (not validated)", axis);
    ks->ax = (mesh_axes){.n = 1, .ax = {a}};
    ks->P = mesh_axis_size(m, a);
    ks->p = mesh_axis_coord(m, a);
    ks->R = R, ks->Nl = Nl, ks->Kl = Kl, ks->H = H, ks->S = S;
    const int64_t rows = kvshard_rows(ks, S), blk = R * (Nl * H + 2 * Nl);
    ks->part = alloc_floats(blk);
    ks->all = alloc_floats(ks->P * blk);
    const int64_t s32 = kern_attn_part_cached_scratch(1, rows, Nl, Kl),
                  s16 = kern_attn_part_cached_bf16_scratch(rows, Nl, Kl, H);
    ks->scr = alloc_floats((s32 > s16 ? s32 : s16) + 64); /* either cache dtype */
    ks->kpos = calloc((size_t)rows + 1, sizeof *ks->kpos);
    if (!ks->part || !ks->all || !ks->scr || !ks->kpos) return -1;
    for (int64_t j = 0; j < rows; j++) ks->kpos[j] = (int32_t)(j * ks->P + ks->p);
    return 0;
}

void kvshard_free(kvshard *ks) {
    ALLOC_FREE_ALL(ks->part, ks->all, ks->scr, ks->kpos, ks->pf_send, ks->pf_all, ks->pf_kv,
                   ks->pf_ml, ks->pf_scr, ks->pf_qpos, ks->pf_iota);
    memset(ks, 0, sizeof *ks);
}

int64_t kvshard_rows(const kvshard *ks, int64_t S) {
    return (S + ks->P - 1) / ks->P;
}

int64_t kvshard_row(const kvshard *ks, int64_t t) {
    return t % ks->P == ks->p ? t / ks->P : -1;
}

int64_t kvshard_held(const kvshard *ks, int64_t n) {
    return n > ks->p ? (n - ks->p + ks->P - 1) / ks->P : 0;
}

void kvshard_attend(kvshard *ks, mesh *m, float *out, const float *q, const void *kc,
                    const void *vc, int64_t seq_stride, const int32_t *pos, int64_t ldk, int bf16) {
    const int64_t R = ks->R, Nl = ks->Nl, NH = Nl * ks->H, blk = R * (NH + 2 * Nl);
    for (int64_t r = 0; r < R; r++) { /* this rank's partial (O, m, l) of each sequence */
        float *o = ks->part + r * NH, *mx = ks->part + R * NH + r * Nl,
              *l = ks->part + R * (NH + Nl) + r * Nl;
        const int64_t held = kvshard_held(ks, (int64_t)pos[r] + 1);
        if (held == 0) { /* no key of this rank is visible yet: the empty partial */
            memset(o, 0, (size_t)NH * sizeof *o);
            for (int64_t h = 0; h < Nl; h++) mx[h] = -INFINITY, l[h] = 0;
            continue;
        }
        if (bf16)
            kern_attn_part_cached_bf16(o, mx, l, ks->scr, q + r * NH,
                                       (const kern_bf16 *)kc + r * seq_stride,
                                       (const kern_bf16 *)vc + r * seq_stride, pos + r, 1, ks->kpos,
                                       held, Nl, ks->Kl, ks->H, ldk);
        else
            kern_attn_part_cached(o, mx, l, ks->scr, q + r * NH, (const float *)kc + r * seq_stride,
                                  (const float *)vc + r * seq_stride, pos + r, 1, ks->kpos, held,
                                  Nl, ks->Kl, ks->H, ldk);
    }
    mesh_all_gather(m, ks->ax, ks->all, ks->part, blk, MESH_ALG_DEFAULT);
    /* merged in rank order into rank 0's block, then out */
    float *o0 = ks->all, *m0 = ks->all + R * NH, *l0 = ks->all + R * (NH + Nl);
    for (int64_t i = 1; i < ks->P; i++) {
        const float *b = ks->all + i * blk;
        kern_attn_part_merge(o0, m0, l0, b, b + R * NH, b + R * (NH + Nl), R, Nl, ks->H);
    }
    memcpy(out, o0, (size_t)(R * NH) * sizeof *out);
}

/* ---------------------------------------------------------------- the sharded prefill */

int kvshard_prefill_init(kvshard *ks, int64_t max_rows) {
    const int64_t KH = ks->Kl * ks->H, S = ks->S, q = kvshard_rows(ks, S);
    const int64_t s1 = kern_attn_part_cached_scratch(1, S, ks->Nl, ks->Kl),
                  sn = kern_attn_part_cached_scratch(q, S, ks->Nl, ks->Kl),
                  sb = kern_attn_part_cached_bf16_scratch(S, ks->Nl, ks->Kl, ks->H);
    ks->pf_send = alloc_floats(2 * max_rows * KH);
    ks->pf_all = alloc_floats(ks->P * 2 * max_rows * KH);
    ks->pf_kv = alloc_floats(2 * S * KH);
    ks->pf_ml = alloc_floats(2 * q * ks->Nl);
    const int64_t s = s1 > sn ? s1 : sn;
    ks->pf_scr = alloc_floats((s > sb ? s : sb) + 64);
    ks->pf_qpos = calloc((size_t)q + 1, sizeof *ks->pf_qpos);
    ks->pf_iota = calloc((size_t)S + 1, sizeof *ks->pf_iota);
    if (!ks->pf_send || !ks->pf_all || !ks->pf_kv || !ks->pf_ml || !ks->pf_scr || !ks->pf_qpos ||
        !ks->pf_iota)
        return -1;
    for (int64_t t = 0; t < S; t++) ks->pf_iota[t] = (int32_t)t;
    return 0;
}

int64_t kvshard_prefill_rows(const kvshard *ks, int64_t len) {
    return kvshard_rows(ks, len);
}

int64_t kvshard_take(const kvshard *ks, const int32_t *tok, int64_t len, int32_t *rtok,
                     int32_t *rpos) {
    int64_t n = 0;
    for (int64_t t = ks->p; t < len; t += ks->P, n++) rtok[n] = tok[t], rpos[n] = (int32_t)t;
    return n;
}

/* The chunk's keys and values of this rank (each sequence's held rows, at its offset of the
 * chunk's pad rows), as they are or rounded to bf16 (es = 2), AllGathered over the axis into
 * pf_all [P, 2, pad, KH]. */
static void prefill_gather(kvshard *ks, mesh *m, const float *k, const float *v, const int64_t *len,
                           int64_t n, int64_t pad, size_t es) {
    const int64_t KH = ks->Kl * ks->H;
    char *send = (char *)ks->pf_send;
    for (int64_t i = 0, r0 = 0, off = 0; i < n; i++) {
        const int64_t held = kvshard_held(ks, len[i]);
        const float *src[2] = {k + r0 * KH, v + r0 * KH};
        for (int a = 0; a < 2; a++) {
            void *dst = send + (size_t)((a * pad + off) * KH) * es;
            if (es == 2)
                kern_bf16_pack(dst, src[a], held * KH);
            else
                floats_copy(dst, src[a], held * KH);
        }
        r0 += held, off += kvshard_prefill_rows(ks, len[i]);
    }
    if (es == 2)
        mesh_all_gather_bf16(m, ks->ax, (uint16_t *)(void *)ks->pf_all,
                             (const uint16_t *)(const void *)ks->pf_send, 2 * pad * KH,
                             MESH_ALG_DEFAULT);
    else
        mesh_all_gather(m, ks->ax, ks->pf_all, ks->pf_send, 2 * pad * KH, MESH_ALG_DEFAULT);
}

double kvshard_prefill(kvshard *ks, mesh *m, float *out, const float *q, const float *k,
                       const float *v, const int64_t *len, int64_t n, int bf16) {
    const int64_t KH = ks->Kl * ks->H, NH = ks->Nl * ks->H;
    const size_t es = bf16 ? 2 : sizeof(float);
    int64_t pad = 0; /* the chunk's rows per rank, each sequence's ceil(len/P) */
    for (int64_t i = 0; i < n; i++) pad += kvshard_prefill_rows(ks, len[i]);
    prefill_gather(ks, m, k, v, len, n, pad, es);
    double seen = 0;
    char *all = (char *)ks->pf_all, *kf = (char *)ks->pf_kv, *vf = kf + (size_t)(ks->S * KH) * es;
    for (int64_t i = 0, r0 = 0, off = 0; i < n; i++) {
        for (int64_t t = 0; t < len[i]; t++) { /* position t: rank t mod P, its row t div P */
            const char *b = all + (size_t)((t % ks->P) * 2 * pad * KH) * es;
            memcpy(kf + (size_t)(t * KH) * es, b + (size_t)((off + t / ks->P) * KH) * es,
                   (size_t)KH * es);
            memcpy(vf + (size_t)(t * KH) * es, b + (size_t)((pad + off + t / ks->P) * KH) * es,
                   (size_t)KH * es);
        }
        const int64_t held = kvshard_held(ks, len[i]);
        for (int64_t a = 0; a < held; a++) {
            ks->pf_qpos[a] = (int32_t)(ks->p + a * ks->P);
            seen += (double)ks->pf_qpos[a] + 1.0;
        }
        float *ml = ks->pf_ml, *o = out + r0 * NH;
        if (held > 0 && bf16) /* the cache's bf16 keys: as kern_attn_cached_bf16 sees them */
            kern_attn_part_cached_bf16(o, ml, ml + held * ks->Nl, ks->pf_scr, q + r0 * NH,
                                       (const kern_bf16 *)(void *)kf,
                                       (const kern_bf16 *)(void *)vf, ks->pf_qpos, held,
                                       ks->pf_iota, len[i], ks->Nl, ks->Kl, ks->H, KH);
        else if (held > 0)
            kern_attn_part_cached(o, ml, ml + held * ks->Nl, ks->pf_scr, q + r0 * NH,
                                  (const float *)(void *)kf, (const float *)(void *)vf,
                                  ks->pf_qpos, held, ks->pf_iota, len[i], ks->Nl, ks->Kl, ks->H,
                                  KH);
        r0 += held, off += kvshard_prefill_rows(ks, len[i]);
    }
    return seen;
}

/* ---------------------------------------------------------------- the AllToAll layout's group */

mesh *kv_group_mesh(mesh *m, char t, int64_t K, int64_t Z, mesh_axes *gax, char *err,
                    size_t errlen) {
    char spec[96] = "", name = 0;
    for (const char *cand = "wvutsrqponmlkjihgfedcba"; *cand && !name; cand++)
        if (mesh_axis_index(m, *cand) < 0) name = *cand;
    for (int a = 0; a < mesh_ndims(m); a++) {
        char part[32];
        const char n = mesh_axis_name(m, a);
        if (n == t)
            snprintf(part, sizeof part, "%s%c=%lld,%c=%lld", a ? "," : "", n, (long long)K, name,
                     (long long)Z);
        else
            snprintf(part, sizeof part, "%s%c=%d", a ? "," : "", n, mesh_axis_size(m, a));
        strncat(spec, part, sizeof spec - strlen(spec) - 1);
    }
    mesh *gm = mesh_split(m, 0, spec, err, errlen);
    const char gn[2] = {name, 0};
    if (gm && mesh_axes_parse(gm, gn, gax) < 0) {
        mesh_destroy(gm);
        return NULL;
    }
    return gm;
}
