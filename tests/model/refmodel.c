/* An independent double-precision implementation of the model's forward pass and loss, written
 * from the conventions of the README (not from model.c): naive loops, no BLAS, no kernels/.
 * Parameters are the global tensors in the order of param_id, flattened. */
#include "refmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void rmsnorm(double *y, const double *x, const double *g, int64_t D) {
    double ss = 0;
    for (int64_t i = 0; i < D; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)D + 1e-5);
    for (int64_t i = 0; i < D; i++) y[i] = x[i] * r * g[i];
}

/* y[n] = x[k] · W[k, n] (row vector times matrix) */
static void vecmat(double *y, const double *x, const double *W, int64_t k, int64_t n) {
    for (int64_t j = 0; j < n; j++) y[j] = 0;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < n; j++) y[j] += x[i] * W[i * n + j];
}

static void rope(double *x, int64_t nh, int64_t H, int64_t pos) {
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < H / 2; i++) {
            double ang = (double)pos * pow(10000.0, -2.0 * (double)i / (double)H);
            double c = cos(ang), s = sin(ang);
            double *a = x + h * H + i, *b = x + h * H + i + H / 2;
            double x1 = *a, x2 = *b;
            *a = x1 * c - x2 * s;
            *b = x2 * c + x1 * s;
        }
}

double ref_loss(const model_shape *s, const double *theta, const int32_t *tokens, int64_t B) {
    const int64_t L = s->L, D = s->D, N = s->N, K = s->K, H = s->H, F = s->F, V = s->V, T = s->T;
    const double *p[P_COUNT];
    int64_t off = 0;
    for (int id = 0; id < P_COUNT; id++) {
        p[id] = theta + off;
        off += model_param_numel(s, (param_id)id);
    }
    double *x = calloc((size_t)(T * D), sizeof(double));
    double *h = calloc((size_t)(T * D), sizeof(double));
    double *q = calloc((size_t)(T * N * H), sizeof(double));
    double *k = calloc((size_t)(T * K * H), sizeof(double));
    double *v = calloc((size_t)(T * K * H), sizeof(double));
    double *att = calloc((size_t)(T * N * H), sizeof(double));
    double *tmp = calloc((size_t)(D > F ? D : F) + (size_t)V, sizeof(double));
    double *a = calloc((size_t)F, sizeof(double)), *bb = calloc((size_t)F, sizeof(double));
    double *sc = calloc((size_t)T, sizeof(double));
    double loss = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *tok = tokens + b * (T + 1);
        for (int64_t t = 0; t < T; t++)
            memcpy(x + t * D, p[P_EMBED] + tok[t] * D, D * sizeof(double));
        for (int64_t l = 0; l < L; l++) {
            for (int64_t t = 0; t < T; t++) {
                rmsnorm(h + t * D, x + t * D, p[P_ATTN_NORM] + l * D, D);
                vecmat(q + t * N * H, h + t * D, p[P_WQ] + l * D * N * H, D, N * H);
                vecmat(k + t * K * H, h + t * D, p[P_WK] + l * D * K * H, D, K * H);
                vecmat(v + t * K * H, h + t * D, p[P_WV] + l * D * K * H, D, K * H);
                rope(q + t * N * H, N, H, t);
                rope(k + t * K * H, K, H, t);
            }
            for (int64_t n = 0; n < N; n++) {
                int64_t kv = n / (N / K);
                for (int64_t i = 0; i < T; i++) {
                    double mx = -1e300;
                    for (int64_t j = 0; j <= i; j++) {
                        double d = 0;
                        for (int64_t e = 0; e < H; e++)
                            d += q[i * N * H + n * H + e] * k[j * K * H + kv * H + e];
                        sc[j] = d / sqrt((double)H);
                        if (sc[j] > mx) mx = sc[j];
                    }
                    double z = 0;
                    for (int64_t j = 0; j <= i; j++) z += (sc[j] = exp(sc[j] - mx));
                    for (int64_t e = 0; e < H; e++) {
                        double o = 0;
                        for (int64_t j = 0; j <= i; j++) o += sc[j] / z * v[j * K * H + kv * H + e];
                        att[i * N * H + n * H + e] = o;
                    }
                }
            }
            for (int64_t t = 0; t < T; t++) {
                vecmat(tmp, att + t * N * H, p[P_WO] + l * N * H * D, N * H, D);
                for (int64_t i = 0; i < D; i++) x[t * D + i] += tmp[i];
                rmsnorm(h + t * D, x + t * D, p[P_MLP_NORM] + l * D, D);
                vecmat(a, h + t * D, p[P_W_GATE] + l * D * F, D, F);
                vecmat(bb, h + t * D, p[P_W_UP] + l * D * F, D, F);
                for (int64_t i = 0; i < F; i++) a[i] = a[i] / (1.0 + exp(-a[i])) * bb[i];
                vecmat(tmp, a, p[P_W_DOWN] + l * F * D, F, D);
                for (int64_t i = 0; i < D; i++) x[t * D + i] += tmp[i];
            }
        }
        for (int64_t t = 0; t < T; t++) {
            rmsnorm(h + t * D, x + t * D, p[P_FINAL_NORM], D);
            double *lg = tmp;
            vecmat(lg, h + t * D, p[P_UNEMBED], D, V);
            double mx = -1e300;
            for (int64_t i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
            double z = 0;
            for (int64_t i = 0; i < V; i++) z += exp(lg[i] - mx);
            loss += mx + log(z) - lg[tok[t + 1]];
        }
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(tmp), free(a), free(bb), free(sc);
    return loss / (double)(B * T);
}
