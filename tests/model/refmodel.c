/* An independent double-precision implementation of the model's forward pass and loss, written
 * from the conventions of the README (not from model.c): naive loops, no BLAS, no kernels/.
 * Parameters are the global tensors in the order of param_id, flattened. With experts, block l's
 * MLP is MoE when (l + 1) % every == 0; each token, in position order, goes to the k experts of
 * largest router logit (ties to the lower index) with the softmax over those k as weights, and a
 * slot is dropped when its sequence has already given that expert ceil(c·k·T/E) slots. */
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

static double silu_mul(double a, double b) {
    return a / (1.0 + exp(-a)) * b;
}

/* y[D] = swiglu(h·wg, h·wu)·wd for one expert (wg, wu [D, F], wd [F, D]); a, b scratch [F]. */
static void expert(double *y, const double *h, const double *wg, const double *wu, const double *wd,
                   int64_t D, int64_t F, double *a, double *b) {
    vecmat(a, h, wg, D, F);
    vecmat(b, h, wu, D, F);
    for (int64_t i = 0; i < F; i++) a[i] = silu_mul(a[i], b[i]);
    vecmat(y, a, wd, F, D);
}

/* The experts' state of one sequence in one MoE block: each expert's slots so far, and the
 * balance statistics f (slots chosen) and P (probability summed). */
typedef struct {
    int64_t cnt[64];
    double f[64], P[64];
} ref_seq;

/* One token's MoE MLP output y[D] from h[D] (block lm's weights), updating its sequence's
 * state q; returns lse² and counts dropped slots. */
static double moe_token(const model_shape *s, const double *const *p, int64_t lm, const double *h,
                        double *y, ref_seq *q, int64_t *dropped, double *a, double *b, double *t) {
    const int64_t D = s->D, E = s->moe.E, k = s->moe.k, Fe = s->moe.F, S = s->moe.shared;
    const int64_t cap =
        s->moe.capacity > 0 ? (int64_t)ceil(s->moe.capacity * (double)(k * s->T) / (double)E) : 0;
    double lg[64], mx = -1e300, z = 0;
    int chosen[64] = {0};
    vecmat(lg, h, p[P_ROUTER] + lm * D * E, D, E);
    for (int64_t e = 0; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
    for (int64_t e = 0; e < E; e++) z += exp(lg[e] - mx);
    for (int64_t e = 0; e < E; e++) q->P[e] += exp(lg[e] - mx) / z;
    for (int64_t i = 0; i < D; i++) y[i] = 0;
    for (int64_t e = 0; e < S; e++) {
        expert(t, h, p[P_SHR_GATE] + (lm * S + e) * D * Fe, p[P_SHR_UP] + (lm * S + e) * D * Fe,
               p[P_SHR_DOWN] + (lm * S + e) * Fe * D, D, Fe, a, b);
        for (int64_t i = 0; i < D; i++) y[i] += t[i];
    }
    int64_t pick[64];
    double zs = 0;
    for (int64_t j = 0; j < k; j++) { /* largest remaining logit, the lower index on ties */
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++)
            if (!chosen[e] && (best < 0 || lg[e] > lg[best])) best = e;
        chosen[best] = 1;
        pick[j] = best;
        zs += exp(lg[best] - mx);
        q->f[best] += 1.0;
    }
    for (int64_t j = 0; j < k; j++) {
        const int64_t e = pick[j];
        if (cap > 0 && q->cnt[e] >= cap) {
            (*dropped)++;
            continue;
        }
        q->cnt[e]++;
        expert(t, h, p[P_EXP_GATE] + (lm * E + e) * D * Fe, p[P_EXP_UP] + (lm * E + e) * D * Fe,
               p[P_EXP_DOWN] + (lm * E + e) * Fe * D, D, Fe, a, b);
        const double wgt = exp(lg[e] - mx) / zs;
        for (int64_t i = 0; i < D; i++) y[i] += wgt * t[i];
    }
    const double lse = mx + log(z);
    return lse * lse;
}

double ref_loss(const model_shape *s, const double *theta, const int32_t *tokens, int64_t B,
                ref_moe *moe) {
    const int64_t L = s->L, D = s->D, N = s->N, K = s->K, H = s->H, F = s->F, V = s->V, T = s->T;
    const double *p[P_ALL];
    int64_t off = 0;
    for (int id = 0; id < P_ALL; id++) {
        p[id] = theta + off;
        off += model_param_numel(s, (param_id)id);
    }
    double *x = calloc((size_t)(T * D), sizeof(double));
    double *h = calloc((size_t)(T * D), sizeof(double));
    double *q = calloc((size_t)(T * N * H), sizeof(double));
    double *k = calloc((size_t)(T * K * H), sizeof(double));
    double *v = calloc((size_t)(T * K * H), sizeof(double));
    double *att = calloc((size_t)(T * N * H), sizeof(double));
    const int64_t E = s->moe.E, every = E ? s->moe.every : 1, FF = F > s->moe.F ? F : s->moe.F;
    double *tmp = calloc((size_t)(D > FF ? D : FF) + (size_t)V, sizeof(double));
    double *a = calloc((size_t)FF, sizeof(double)), *bb = calloc((size_t)FF, sizeof(double));
    double *et = calloc((size_t)D, sizeof(double));
    ref_moe acc = {0, 0, 0};
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
            const int is_moe = E > 0 && (l + 1) % every == 0;
            const int64_t lm = (l + 1) / every - 1, ld = E > 0 ? l - (l + 1) / every : l;
            ref_seq rs;
            memset(&rs, 0, sizeof rs);
            double zsum = 0;
            for (int64_t t = 0; t < T; t++) {
                vecmat(tmp, att + t * N * H, p[P_WO] + l * N * H * D, N * H, D);
                for (int64_t i = 0; i < D; i++) x[t * D + i] += tmp[i];
                rmsnorm(h + t * D, x + t * D, p[P_MLP_NORM] + l * D, D);
                if (is_moe)
                    zsum += moe_token(s, p, lm, h + t * D, tmp, &rs, &acc.dropped, a, bb, et);
                else
                    expert(tmp, h + t * D, p[P_W_GATE] + ld * D * F, p[P_W_UP] + ld * D * F,
                           p[P_W_DOWN] + ld * F * D, D, F, a, bb);
                for (int64_t i = 0; i < D; i++) x[t * D + i] += tmp[i];
            }
            if (is_moe) { /* this sequence's balance: E·Σ f_e·P_e, f over its T·k slots */
                double aux = 0;
                for (int64_t e = 0; e < E; e++)
                    aux += (double)E * rs.f[e] / (double)(T * s->moe.k) * rs.P[e] / (double)T;
                acc.aux += aux / (double)B;
                acc.z += zsum / (double)(B * T);
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
    free(et);
    if (moe) *moe = acc;
    return loss / (double)(B * T);
}

double ref_objective(const model_shape *s, const double *theta, const int32_t *tokens, int64_t B) {
    ref_moe r;
    const double ce = ref_loss(s, theta, tokens, B, &r);
    return ce + s->moe.aux_coef * r.aux + s->moe.z_coef * r.z;
}
