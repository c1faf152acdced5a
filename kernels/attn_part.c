/* attn_part: the forward of blockwise causal attention, the merge of partials, D for the
 * backward, and decode against a shard of a KV cache (see attn_part.h; the backward is in
 * attn_part_bwd.c, the naive twins in attn_part_ref.c).
 *
 * One routine, rows_fwd, does every forward: a set of query rows of one head against the keys of
 * one kv head, scores by one sgemm against the keys the last row sees, a causal softmax per row
 * over the keys that row sees (kern_softmax_row_inl, kern_attn_fwd's own), then O = P·V by one
 * more sgemm. The training forward calls it on row blocks of one head (rows a token apart); the
 * decode of one token calls it on the Nl/Kl query heads of one kv head (rows a head apart, all at
 * the same position), so each kv head's cache is read once. */
#include "kernels/attn_part.h"

#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/vecmath.h"

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

int64_t kern_attn_part_seen(const int32_t *kpos, int64_t Tk, int32_t p) {
    int64_t lo = 0, hi = Tk; /* the first j with kpos[j] > p */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (kpos[mid] <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t kern_attn_part_block_end(const int32_t *pos, int64_t n, int64_t i0) {
    int64_t i1 = i0 + 1;
    while (i1 < n && i1 - i0 < KERN_ATTN_BLOCK && pos[i1] == pos[i1 - 1] + 1) i1++;
    return i1;
}

kern_attn_part_vis kern_attn_part_visibility(const int32_t *qpos, int64_t Tq, const int32_t *kpos,
                                             int64_t Tk) {
    if (kpos[0] > qpos[Tq - 1]) return KERN_ATTN_PART_NONE;
    if (kpos[Tk - 1] <= qpos[0]) return KERN_ATTN_PART_ALL;
    return KERN_ATTN_PART_SOME;
}

int64_t kern_attn_part_fwd_scratch(int64_t Tq, int64_t Tk) {
    return min64(Tq, KERN_ATTN_BLOCK) * Tk;
}

int64_t kern_attn_part_bwd_scratch(int64_t Tq, int64_t Tk) {
    return 2 * Tq * Tk;
}

int64_t kern_attn_part_cached_scratch(int64_t n, int64_t S, int64_t Nl, int64_t Kl) {
    return (n <= 1 ? Nl / Kl : min64(n, KERN_ATTN_BLOCK)) * S;
}

/* `rows` query rows of one head against keys [0, Tk) of one kv head. Row i's query is
 * q + i·ldq, its position qpos[i·qstep] (qstep 0: every row at one position), its output
 * o + i·ldo and its m, l at i·ldml; scores go to S[rows, Tk]. */
typedef struct {
    const float *q, *k, *v;
    int64_t ldq, ldk, ldo, ldml, qstep, Tk, H;
    const int32_t *qpos, *kpos;
    float *o, *m, *l, *S;
} rows_job;

static void rows_fwd(const rows_job *J, int64_t rows) {
    const int64_t nk = kern_attn_part_seen(J->kpos, J->Tk, J->qpos[(rows - 1) * J->qstep]);
    if (nk == 0) { /* the ring's fully masked block: nothing seen */
        for (int64_t i = 0; i < rows; i++) {
            memset(J->o + i * J->ldo, 0, (size_t)J->H * sizeof *J->o);
            J->m[i * J->ldml] = -INFINITY;
            J->l[i * J->ldml] = 0.0f;
        }
        return;
    }
    const float scale = 1.0f / sqrtf((float)J->H);
    kern_gemm(J->S, J->q, J->k, rows, nk, J->H, false, true, J->ldq, J->ldk, J->Tk, scale, 0.0f);
    for (int64_t i = 0; i < rows; i++) {
        float *s = J->S + i * J->Tk;
        const int64_t seen = kern_attn_part_seen(J->kpos, nk, J->qpos[i * J->qstep]);
        float mi = -INFINITY, zi = 0.0f;
        if (seen > 0) kern_softmax_row_inl(s, seen, &mi, &zi);
        memset(s + seen, 0, (size_t)(nk - seen) * sizeof *s);
        J->m[i * J->ldml] = mi;
        J->l[i * J->ldml] = zi;
    }
    kern_gemm(J->o, J->S, J->v, rows, J->H, nk, false, false, J->Tk, J->ldk, J->ldo, 1.0f, 0.0f);
}

/* Every row block of one query head of one sequence: query rows q[Tq] (ldq apart, at qpos)
 * against keys k, v[Tk] (ldk apart, at kpos); outputs o (ldq apart), m, l (ldml apart). */
static void head_fwd(rows_job J, int64_t Tq) {
    const int32_t *qpos = J.qpos;
    const float *q = J.q;
    float *o = J.o, *m = J.m, *l = J.l;
    for (int64_t i0 = 0, i1; i0 < Tq; i0 = i1) {
        i1 = kern_attn_part_block_end(qpos, Tq, i0);
        J.q = q + i0 * J.ldq, J.qpos = qpos + i0, J.o = o + i0 * J.ldo;
        J.m = m + i0 * J.ldml, J.l = l + i0 * J.ldml;
        rows_fwd(&J, i1 - i0);
    }
}

/* The job of a head whose query rows start qo into q and o, whose m, l start mo, and whose kv
 * head's rows start kvo into k and v. */
static rows_job at_head(const rows_job *all, int64_t qo, int64_t kvo, int64_t mo) {
    rows_job J = *all;
    J.q += qo, J.o += qo, J.k += kvo, J.v += kvo, J.m += mo, J.l += mo;
    return J;
}

/* kern_attn_part_fwd with key rows ldk apart (a cache's stride, or Kl·H). decode (B = Tq = 1):
 * the G = Nl/Kl query heads of each kv head as one block of G rows a head apart, all at one
 * position, so each kv head's keys are read once; else each head's rows, a token apart. */
static void heads_fwd(float *o, float *m, float *l, float *scratch, const float *q, const float *k,
                      const float *v, const int32_t *qpos, const int32_t *kpos, int64_t B,
                      int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk,
                      int decode) {
    const int64_t ldq = Nl * H, G = Nl / Kl;
    const rows_job all = {.q = q,
                          .qpos = qpos,
                          .H = H,
                          .ldq = decode ? H : ldq,
                          .qstep = !decode,
                          .o = o,
                          .S = scratch,
                          .ldo = decode ? H : ldq,
                          .m = m,
                          .l = l,
                          .ldml = decode ? 1 : Nl,
                          .k = k,
                          .v = v,
                          .kpos = kpos,
                          .ldk = ldk,
                          .Tk = Tk};
    if (decode) {
        for (int64_t j = 0; j < Kl; j++) {
            const rows_job J = at_head(&all, j * G * H, j * H, j * G);
            rows_fwd(&J, G);
        }
        return;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++)
            head_fwd(
                at_head(&all, b * Tq * ldq + h * H, b * Tk * ldk + (h / G) * H, b * Tq * Nl + h),
                Tq);
}

void kern_attn_part_fwd(float *restrict o, float *restrict m, float *restrict l,
                        float *restrict scratch, const float *restrict q, const float *restrict k,
                        const float *restrict v, const int32_t *restrict qpos,
                        const int32_t *restrict kpos, int64_t B, int64_t Tq, int64_t Tk, int64_t Nl,
                        int64_t Kl, int64_t H) {
    heads_fwd(o, m, l, scratch, q, k, v, qpos, kpos, B, Tq, Tk, Nl, Kl, H, Kl * H, 0);
}

void kern_attn_part_cached(float *restrict o, float *restrict m, float *restrict l,
                           float *restrict scratch, const float *restrict q,
                           const float *restrict kc, const float *restrict vc,
                           const int32_t *restrict qpos, int64_t n, const int32_t *restrict kpos,
                           int64_t S, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk) {
    heads_fwd(o, m, l, scratch, q, kc, vc, qpos, kpos, 1, n, S, Nl, Kl, H, ldk, n <= 1);
}

/* The merge's weights for one row and head: w1, w2 with w1 + w2 = 1 (in double), and the merged
 * m, l. Returns 0 when partial 2 is empty (nothing to do), 2 when partial 1 is (copy 2). */
static int merge_weights(float m1, float l1, float m2, float l2, double *w1, double *w2, float *m,
                         float *l) {
    if (l2 == 0.0f) return 0;
    if (l1 == 0.0f) return 2;
    const double mx = m1 > m2 ? m1 : m2;
    const double a1 = (double)l1 * exp((double)m1 - mx), a2 = (double)l2 * exp((double)m2 - mx);
    *w1 = a1 / (a1 + a2);
    *w2 = a2 / (a1 + a2);
    *m = (float)mx;
    *l = (float)(a1 + a2);
    return 1;
}

void kern_attn_part_merge(float *restrict o, float *restrict m, float *restrict l,
                          const float *restrict o2, const float *restrict m2,
                          const float *restrict l2, int64_t R, int64_t Nl, int64_t H) {
    for (int64_t rh = 0; rh < R * Nl; rh++) {
        double w1 = 0, w2 = 0;
        float *od = o + rh * H;
        const float *os = o2 + rh * H;
        const int how = merge_weights(m[rh], l[rh], m2[rh], l2[rh], &w1, &w2, &m[rh], &l[rh]);
        if (how == 2) {
            memcpy(od, os, (size_t)H * sizeof *od);
            m[rh] = m2[rh];
            l[rh] = l2[rh];
        } else if (how == 1) {
            for (int64_t c = 0; c < H; c++) od[c] = (float)(w1 * od[c] + w2 * os[c]);
        }
    }
}

void kern_attn_part_delta(float *restrict D, const float *restrict dout, const float *restrict o,
                          int64_t R, int64_t Nl, int64_t H) {
    for (int64_t rh = 0; rh < R * Nl; rh++) D[rh] = kern_dot_inl(dout + rh * H, o + rh * H, H);
}

double kern_attn_part_flops(const int32_t *qpos, int64_t Tq, const int32_t *kpos, int64_t Tk,
                            int64_t H) {
    double f = 0;
    for (int64_t i0 = 0, i1; i0 < Tq; i0 = i1) {
        i1 = kern_attn_part_block_end(qpos, Tq, i0);
        f += 4.0 * (double)(i1 - i0) * (double)kern_attn_part_seen(kpos, Tk, qpos[i1 - 1]) *
             (double)H;
    }
    return f;
}
