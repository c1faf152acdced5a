/* Causal GQA attention: fwd (out and P, upper triangle exactly 0) and bwd vs the naive twins,
 * including T beyond the kernel's causal row block (64) so the blocked gemms are exercised;
 * bwd (dq, dk, dv, with garbage in the outputs and the scratch beforehand) vs central finite
 * differences of a double-precision forward, for Nl=4,Kl=2 (GQA), Nl=Kl and Kl=1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attention.h"
#include "ktest.h"

/* L = Σ w ⊙ attention(q, k, v) in double; s is T doubles of scratch. */
typedef struct {
    const double *q, *k, *v;
    const float *w;
    int64_t B, T, Nl, Kl, H;
    double *s;
} attn_loss;

static double loss_d(const void *ctx) {
    const attn_loss *a = ctx;
    const double *q = a->q, *k = a->k, *v = a->v;
    const float *w = a->w;
    const int64_t B = a->B, T = a->T, Nl = a->Nl, Kl = a->Kl, H = a->H;
    double *s = a->s;
    const int64_t ldq = Nl * H, ldk = Kl * H, grp = Nl / Kl;
    double L = 0.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Nl; h++)
            for (int64_t i = 0; i < T; i++) {
                const double *qi = q + (b * T + i) * ldq + h * H;
                double m = -INFINITY, z = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *kj = k + (b * T + j) * ldk + (h / grp) * H;
                    double d = 0.0;
                    for (int64_t c = 0; c < H; c++) d += qi[c] * kj[c];
                    s[j] = d / sqrt((double)H);
                    m = s[j] > m ? s[j] : m;
                }
                for (int64_t j = 0; j <= i; j++) z += (s[j] = exp(s[j] - m));
                for (int64_t c = 0; c < H; c++) {
                    double o = 0.0;
                    for (int64_t j = 0; j <= i; j++)
                        o += s[j] / z * v[(b * T + j) * ldk + (h / grp) * H + c];
                    L += o * w[(b * T + i) * ldq + h * H + c];
                }
            }
    return L;
}

static void run(int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H, int do_fd) {
    int64_t nq = B * T * Nl * H, nk = B * T * Kl * H, nP = B * Nl * T * T;
    float *q = kt_floats(nq), *k = kt_floats(nk), *v = kt_floats(nk), *dout = kt_floats(nq);
    float *out = kt_floats(nq), *outr = kt_floats(nq), *P = kt_floats(nP), *Pr = kt_floats(nP),
          *scr = kt_floats(T * T);
    float *dq = kt_floats(nq), *dk = kt_floats(nk), *dv = kt_floats(nk), *dqr = kt_floats(nq),
          *dkr = kt_floats(nk), *dvr = kt_floats(nk);
    char what[128], shape[64];
    snprintf(shape, sizeof shape, "B=%lld T=%lld Nl=%lld Kl=%lld H=%lld", (long long)B,
             (long long)T, (long long)Nl, (long long)Kl, (long long)H);
    kt_fill(q, nq, 1, -1.5f, 1.5f);
    kt_fill(k, nk, 2, -1.5f, 1.5f);
    kt_fill(v, nk, 3, -1, 1);
    kt_fill(dout, nq, 4, -1, 1);
    for (int64_t i = 0; i < nP; i++) P[i] = NAN; /* both outputs are overwritten */
    for (int64_t i = 0; i < nq; i++) out[i] = dq[i] = NAN;
    for (int64_t i = 0; i < nk; i++) dk[i] = dv[i] = NAN;
    for (int64_t i = 0; i < T * T; i++) scr[i] = NAN;

    kern_attn_fwd(out, P, q, k, v, B, T, Nl, Kl, H);
    kern_attn_fwd_ref(outr, Pr, q, k, v, B, T, Nl, Kl, H);
    /* scores are H-term dots, then exp (a few ulp) and a T-term normalisation: k = 16 */
    snprintf(what, sizeof what, "attn fwd P vs ref %s", shape);
    kt_close(what, P, Pr, nP, 16);
    snprintf(what, sizeof what, "attn fwd out vs ref %s", shape);
    kt_close(what, out, outr, nq, 16);
    int upper_zero = 1;
    for (int64_t bh = 0; bh < B * Nl; bh++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = i + 1; j < T; j++) upper_zero &= P[bh * T * T + i * T + j] == 0.0f;
    check_expect(upper_zero, "attn fwd P above the diagonal exactly 0 %s", shape);

    kern_attn_bwd(dq, dk, dv, scr, dout, P, q, k, v, B, T, Nl, Kl, H);
    kern_attn_bwd_ref(dqr, dkr, dvr, dout, P, q, k, v, B, T, Nl, Kl, H);
    /* T-term sums of products that are themselves H-term dots: k = 64 */
    snprintf(what, sizeof what, "attn bwd dq vs ref %s", shape);
    kt_close(what, dq, dqr, nq, 64);
    snprintf(what, sizeof what, "attn bwd dk vs ref %s", shape);
    kt_close(what, dk, dkr, nk, 64);
    snprintf(what, sizeof what, "attn bwd dv vs ref %s", shape);
    kt_close(what, dv, dvr, nk, 64);

    if (do_fd) {
        double *qd = kt_doubles(nq), *kd = kt_doubles(nk);
        double *vd = kt_doubles(nk), *fd = kt_doubles(nq);
        double *s = kt_doubles(T);
        for (int64_t i = 0; i < nq; i++) qd[i] = q[i];
        for (int64_t i = 0; i < nk; i++) kd[i] = k[i], vd[i] = v[i];
        const attn_loss L = {qd, kd, vd, dout, B, T, Nl, Kl, H, s};
        kt_fd_grad(fd, qd, nq, 1e-6, loss_d, &L);
        snprintf(what, sizeof what, "attn bwd dq vs FD(double) %s", shape);
        kt_close_d(what, dq, fd, nq, 64);
        kt_fd_grad(fd, kd, nk, 1e-6, loss_d, &L);
        snprintf(what, sizeof what, "attn bwd dk vs FD(double) %s", shape);
        kt_close_d(what, dk, fd, nk, 64);
        kt_fd_grad(fd, vd, nk, 1e-6, loss_d, &L);
        snprintf(what, sizeof what, "attn bwd dv vs FD(double) %s", shape);
        kt_close_d(what, dv, fd, nk, 64);
        free(qd), free(kd), free(vd), free(fd), free(s);
    }
    free(q), free(k), free(v), free(dout), free(out), free(outr), free(P), free(Pr), free(scr);
    free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr);
}

int main(void) {
    run(2, 7, 4, 2, 6, 1);   /* GQA, group of 2 */
    run(1, 5, 3, 3, 4, 1);   /* Nl = Kl */
    run(2, 1, 2, 2, 3, 1);   /* T = 1: P = 1, dq = dk = 0 */
    run(1, 13, 3, 1, 5, 1);  /* Kl = 1, group of 3 */
    run(1, 67, 2, 1, 4, 1);  /* crosses the 64-row causal block */
    run(1, 131, 4, 2, 8, 0); /* three blocks, ragged last one */
    run(2, 64, 2, 2, 16, 0); /* exactly one block */
    return check_finish("test_kern_attention");
}
