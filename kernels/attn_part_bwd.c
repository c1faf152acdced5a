/* attn_part_bwd: the backward of one key block of blockwise causal attention (see attn_part.h).
 *
 * Per (sequence, query head), two passes over scratch P[Tq, Tk] and dS[Tq, Tk], laid out and
 * blocked as kern_attn_bwd's (blocks also end where positions jump): row blocks [i0, i1) recompute
 * the scores against the keys their last row sees, P = exp(s − m)·(1/l) (the forward softmax's own
 * two roundings), dP = dO·Vᵀ, dS = P ∘ (dP − D)/sqrt(H) and dQ += dS·K; then key blocks [j0, j1)
 * take dV += Pᵀ·dO and dK += dSᵀ·Q over the rows from the first that sees key j0. Entries of P and
 * dS that a key block reads beyond its rows' scored keys are zeroed, so no product sees garbage. */
#include "kernels/attn_part.h"

#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/vecmath.h"

/* One (sequence, query head): q, dout and dq rows ldq apart, k, v, dk, dv rows ldk apart, m, l, D
 * entries ldml apart (D may be NULL), P and dS [Tq, Tk]. */
typedef struct {
    const float *q, *k, *v, *dout, *m, *l, *D;
    float *dq, *dk, *dv, *P, *dS;
    const int32_t *qpos, *kpos;
    int64_t Tq, Tk, ldq, ldk, ldml, H;
} head_job;

/* The end of the key block (kern_attn_part_block_end from key 0 on) that holds key j. */
static int64_t key_block_end(const int32_t *kpos, int64_t Tk, int64_t j) {
    int64_t j1 = 0;
    while (j1 <= j) j1 = kern_attn_part_block_end(kpos, Tk, j1);
    return j1;
}

/* P and dS of row block [i0, i1), and its dQ. */
static void rows_bwd(const head_job *J, int64_t i0, int64_t i1) {
    const int64_t nk = kern_attn_part_seen(J->kpos, J->Tk, J->qpos[i1 - 1]), Tk = J->Tk, H = J->H;
    if (nk == 0) return; /* these rows see no key: no key block reads them either */
    /* the key blocks that read these rows end at most where the key block holding nk − 1 ends */
    const int64_t zend = key_block_end(J->kpos, Tk, nk - 1);
    const float scale = 1.0f / sqrtf((float)H);
    float *P = J->P + i0 * Tk, *dS = J->dS + i0 * Tk;
    kern_gemm(P, J->q + i0 * J->ldq, J->k, i1 - i0, nk, H, false, true, J->ldq, J->ldk, Tk, scale,
              0.0f);
    kern_gemm(dS, J->dout + i0 * J->ldq, J->v, i1 - i0, nk, H, false, true, J->ldq, J->ldk, Tk,
              1.0f, 0.0f);
    for (int64_t i = i0; i < i1; i++) {
        float *p = P + (i - i0) * Tk, *d = dS + (i - i0) * Tk;
        const int64_t seen = kern_attn_part_seen(J->kpos, nk, J->qpos[i]);
        if (seen > 0) {
            const float mi = J->m[i * J->ldml], inv = 1.0f / J->l[i * J->ldml];
            for (int64_t j = 0; j < seen; j++) p[j] = kern_expf_inl(p[j] - mi) * inv;
            const float pd = J->D ? J->D[i * J->ldml] : kern_dot_inl(p, d, seen);
            for (int64_t j = 0; j < seen; j++) d[j] = p[j] * (d[j] - pd) * scale;
        }
        memset(p + seen, 0, (size_t)(zend - seen) * sizeof *p);
        memset(d + seen, 0, (size_t)(zend - seen) * sizeof *d);
    }
    kern_gemm(J->dq + i0 * J->ldq, dS, J->k, i1 - i0, H, nk, false, false, Tk, J->ldk, J->ldq, 1.0f,
              1.0f);
}

static void head_bwd(const head_job *J) {
    const int64_t Tq = J->Tq, Tk = J->Tk, H = J->H;
    for (int64_t i0 = 0, i1; i0 < Tq; i0 = i1) {
        i1 = kern_attn_part_block_end(J->qpos, Tq, i0);
        rows_bwd(J, i0, i1);
    }
    for (int64_t j0 = 0, j1; j0 < Tk; j0 = j1) {
        j1 = kern_attn_part_block_end(J->kpos, Tk, j0);
        /* the first row that sees key j0: rows above it see none of [j0, j1) */
        int64_t r0 = 0;
        while (r0 < Tq && J->qpos[r0] < J->kpos[j0]) r0++;
        if (r0 == Tq) break; /* later keys sit later still */
        kern_gemm(J->dv + j0 * J->ldk, J->P + r0 * Tk + j0, J->dout + r0 * J->ldq, j1 - j0, H,
                  Tq - r0, true, false, Tk, J->ldq, J->ldk, 1.0f, 1.0f);
        kern_gemm(J->dk + j0 * J->ldk, J->dS + r0 * Tk + j0, J->q + r0 * J->ldq, j1 - j0, H,
                  Tq - r0, true, false, Tk, J->ldq, J->ldk, 1.0f, 1.0f);
    }
}

void kern_attn_part_bwd(float *restrict dq, float *restrict dk, float *restrict dv,
                        float *restrict scratch, const float *restrict dout, const float *D,
                        const float *restrict m, const float *restrict l, const float *restrict q,
                        const float *restrict k, const float *restrict v,
                        const int32_t *restrict qpos, const int32_t *restrict kpos, int64_t B,
                        int64_t Tq, int64_t Tk, int64_t Nl, int64_t Kl, int64_t H) {
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++) {
            const int64_t qo = b * Tq * ldq + h * H, kvo = b * Tk * ldk + (h / grp) * H;
            const int64_t mo = b * Tq * Nl + h;
            const head_job J = {.q = q + qo,
                                .dout = dout + qo,
                                .dq = dq + qo,
                                .ldq = ldq,
                                .k = k + kvo,
                                .v = v + kvo,
                                .dk = dk + kvo,
                                .dv = dv + kvo,
                                .ldk = ldk,
                                .m = m + mo,
                                .l = l + mo,
                                .D = D ? D + mo : NULL,
                                .ldml = Nl,
                                .P = scratch,
                                .dS = scratch + Tq * Tk,
                                .qpos = qpos,
                                .kpos = kpos,
                                .Tq = Tq,
                                .Tk = Tk,
                                .H = H};
            head_bwd(&J);
        }
}
