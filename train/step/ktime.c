/* ktime: the step's compute from the kernels' measured speeds. See ktime.h. The list of calls
 * mirrors the model's step (train/model/model.c block_fwd/block_bwd, the loss, the optimizer). */
#include "train/step/ktime.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/attn_bf16.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/moe_bf16.h"
#include "kernels/optim.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/traffic.h"
#include "kernels/swiglu.h"
#include "kernels/xent.h"
#include "mesh/mesh.h"
#include "train/config/alloc.h"

typedef enum {
    K_MM,     /* y[M,N] = x[M,K]·w[K,N] */
    K_DW,     /* dw[K,N] += xᵀ·dy */
    K_DX,     /* dx[M,K] = dy·wᵀ */
    K_RMS_F,  /* rmsnorm forward, M rows of K */
    K_RMS_B,  /* rmsnorm backward */
    K_ROPE,   /* rope on M sequences × T tokens × K heads of H */
    K_ATT_F,  /* attention forward, M sequences */
    K_ATT_B,  /* attention backward */
    K_SWI_F,  /* swiglu forward, M elements */
    K_SWI_B,  /* swiglu backward */
    K_XENT_S, /* cross-entropy statistics, M rows of K logits */
    K_XENT_B, /* cross-entropy backward */
    K_ADAMW,  /* AdamW over M parameters */
    K_SUMSQ,  /* Σ g² over M gradients (the global norm) */
    K_COPY,   /* the memory passes (kernels/traffic.h), M floats: floats_copy */
    K_CLEAR,  /* floats_clear */
    K_ADD,    /* kern_add */
    K_PACK,   /* bf16: M floats copied to bf16 (kern_bf16_pack) */
    K_RT_F,   /* the router's softmax and top-N of M rows of K logits (kern_router_fwd) */
    K_RT_B,   /* its backward */
    K_MOE_F,  /* the grouped SwiGLU experts: M rows split evenly over K experts of width N */
    K_MOE_B   /* their backward, weight gradients included */
} kind;

typedef struct {
    kind k;
    int64_t M, K, N;
    int f32; /* a product in fp32 whatever the compute (the router) */
} call;

/* Buffers of one timed call, of the sizes `sizes` sets (floats), and targets t. */
#define NBUF 17
typedef struct {
    float *f[NBUF];
    int32_t *t;
} bufs;

/* x[i] = 0.01·((7·i mod 13) − 5.5): the first period, then doubling copies (a multiple of it);
 * bf16: the same values as bf16, two in each float. None is zero: a float whose high bf16 half
 * is 0 is a denormal (its low half the mantissa), and the fp32 kernels that read a bf16-filled
 * buffer as floats (SwiGLU, the norms) then took Intel's denormal assists: SwiGLU timed 45-70
 * ns an element on an Emerald Rapids core, and the bf16 step's prediction 2.3-2.5x too long. */
static void fill(float *x, int64_t n, int bf16) {
    float per[26];
    for (int64_t i = 0; i < 26; i++) per[i] = 0.01f * ((float)((i * 7) % 13) - 5.5f);
    if (bf16) kern_bf16_pack((kern_bf16 *)(void *)x, per, 2 * (n < 13 ? n : 13));
    int64_t have = n < 13 ? n : 13;
    if (!bf16) memcpy(x, per, (size_t)have * sizeof(float));
    while (have < n) {
        const int64_t m = have < n - have ? have : n - have;
        memcpy(x + have, x, (size_t)m * sizeof(float));
        have += m;
    }
}

/* Floats of one copy of a call's buffers, each rounded up to a cache line (16 floats). */
static int64_t copy_floats(const int64_t *n) {
    int64_t f = 0;
    for (int i = 0; i < NBUF; i++) f += (n[i] + 15) / 16 * 16;
    return f;
}

/* Copy j of a call's buffers in the arena (copy_floats(n) floats each). */
static void bufs_at(bufs *b, float *arena, const int64_t *n, int j, int32_t *t) {
    float *p = arena + (int64_t)j * copy_floats(n);
    for (int i = 0; i < NBUF; i++) b->f[i] = p, p += (n[i] + 15) / 16 * 16;
    b->t = t;
}

/* The bf16 calls (s->bf16): the products and attention on bf16 operands (buffers that hold
 * bf16 are the float buffers' bytes), and the copies to bf16. Returns 0 for any other kind. */
static int run_bf16(const call *c, const ktime_shape *s, bufs *b) {
    float **f = b->f;
    kern_bf16_ctx *x = s->bf16;
    const int64_t M = c->M, K = c->K, N = c->N, T = s->T, H = s->H;
#define B16(i) ((kern_bf16 *)(void *)f[i])
    switch (c->k) {
    case K_MM:
        kern_matmul_bf16(x, f[0], B16(1), B16(2), M, K, N);
        return 1;
    case K_DW:
        kern_matmul_dw_bf16(x, f[2], B16(1), B16(0), M, K, N);
        return 1;
    case K_DX:
        kern_matmul_dx_bf16(x, f[1], B16(0), B16(2), M, K, N, false);
        return 1;
    case K_ATT_F:
        kern_attn_fwd_bf16(x, f[0], B16(1), f[0] + M * T * s->Nl * H, B16(2), B16(3), B16(4), M,
                           T, s->Nl, s->Kl, H);
        return 1;
    case K_ATT_B:
        kern_attn_bwd_bf16(x, f[5], f[6], f[7], f[0] + M * T * s->Nl * H, B16(0), B16(1), B16(2),
                           B16(3), B16(4), M, T, s->Nl, s->Kl, H);
        return 1;
    case K_PACK:
        kern_bf16_pack(B16(0), f[1], M);
        return 1;
    default:
        return 0;
    }
#undef B16
}

/* Floats of n bf16 values. */
static int64_t half(int64_t n) {
    return (n + 1) / 2;
}

/* The experts' offsets (int64, in buffer o): M rows split as evenly as they go over K experts,
 * as a balanced router sends them. */
static const int64_t *even_offs(float *o, int64_t M, int64_t K) {
    int64_t *offs = (int64_t *)(void *)o;
    for (int64_t e = 0; e <= K; e++) offs[e] = M * e / K;
    return offs;
}

/* The mixture-of-experts calls: the router (fp32 in either compute) and the grouped experts
 * (kernels/moe.h, on bf16 operands with s->bf16: moe_bf16.h). */
static void run_moe(const call *c, const ktime_shape *s, bufs *b) {
    float **f = b->f;
    const int64_t M = c->M, K = c->K, N = c->N, D = s->D;
    kern_bf16_ctx *x = s->bf16;
#define B16(i) ((kern_bf16 *)(void *)f[i])
    switch (c->k) {
    case K_RT_F:
        kern_router_fwd(f[0], f[1], b->t, f[2], f[3], M, K, N);
        break;
    case K_RT_B:
        kern_router_bwd(f[0], f[1], b->t, f[2], f[3], f[4], NULL, 1e-3f, M, K, N, M);
        break;
    case K_MOE_F:
        if (x)
            kern_moe_mlp_fwd_bf16(x, f[0], f[1], f[2], f[3], B16(4), B16(5), B16(6), B16(7),
                                  B16(8), even_offs(f[9], M, K), K, D, N);
        else
            kern_moe_mlp_fwd(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
                             even_offs(f[8], M, K), K, D, N);
        break;
    case K_MOE_B:
        if (x)
            kern_moe_mlp_bwd_bf16(x, f[0], f[1], f[2], f[3], f[4], f[5], B16(6), B16(7), B16(8),
                                  B16(9), f[10], f[11], B16(12), B16(13), B16(14), B16(15),
                                  even_offs(f[16], M, K), K, D, N);
        else
            kern_moe_mlp_bwd(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10],
                             f[11], f[12], f[13], even_offs(f[14], M, K), K, D, N);
        break;
    default:
        break;
    }
#undef B16
}

/* Floats of each buffer of a mixture-of-experts call (run_moe); targets: the router's choices. */
static void sizes_moe(const call *c, const ktime_shape *s, int64_t *n, int64_t *nt) {
    const int64_t M = c->M, K = c->K, N = c->N, D = s->D, off = 2 * (K + 1);
    const int64_t rows = M * D, hid = M * N, w = K * D * N, h16 = half(hid), x16 = half(rows);
    switch (c->k) {
    case K_RT_F: /* prob, lse, w, logits */
    case K_RT_B: /* dlogits, dw, w, prob, lse */
        n[0] = n[3] = M * K, n[1] = c->k == K_RT_F ? M : M * N, n[2] = M * N;
        n[4] = c->k == K_RT_B ? M : 0;
        *nt = M * N;
        break;
    case K_MOE_F:
        if (s->bf16) { /* ys, a, b, h, hb, xs, wg, wu, wd, offs */
            const int64_t v[10] = {rows, hid, hid, hid, h16, x16, half(w), half(w), half(w), off};
            memcpy(n, v, sizeof v);
        } else { /* ys, a, b, h, xs, wg, wu, wd, offs */
            const int64_t v[9] = {rows, hid, hid, hid, rows, w, w, w, off};
            memcpy(n, v, sizeof v);
        }
        break;
    case K_MOE_B:
        if (s->bf16) { /* dxs, dwg, dwu, dwd, da, db, dab, dbb, dys, xs, a, b, hb, wg, wu, wd */
            const int64_t v[17] = {rows, w,       w,       w,       hid,     hid, h16, h16, x16,
                                   x16,  hid,     hid,     h16,     half(w), half(w), half(w), off};
            memcpy(n, v, sizeof v);
        } else { /* dxs, dwg, dwu, dwd, da, db, dys, xs, a, b, h, wg, wu, wd, offs */
            const int64_t v[15] = {rows, w, w, w, hid, hid, rows, rows, hid, hid, hid, w, w, w, off};
            memcpy(n, v, sizeof v);
        }
        break;
    default:
        break;
    }
}

static void run(const call *c, const ktime_shape *s, bufs *b) {
    float **f = b->f;
    const int64_t M = c->M, K = c->K, N = c->N, T = s->T, H = s->H;
    if (c->k >= K_RT_F) {
        run_moe(c, s, b);
        return;
    }
    if (s->bf16 && !c->f32 && run_bf16(c, s, b)) return;
    switch (c->k) {
    case K_MM:
        kern_matmul(f[0], f[1], f[2], M, K, N);
        break;
    case K_DW:
        kern_matmul_dw(f[2], f[1], f[0], M, K, N);
        break;
    case K_DX:
        kern_matmul_dx(f[1], f[0], f[2], M, K, N, false);
        break;
    case K_RMS_F:
        kern_rmsnorm_fwd(f[0], f[3], f[1], f[2], M, K);
        break;
    case K_RMS_B:
        kern_rmsnorm_bwd(f[0], f[5], f[4], f[1], f[2], f[3], M, K);
        break;
    case K_ROPE:
        kern_rope_apply(f[0], f[1], f[2], M, T, K, H, K * H, 0);
        break;
    case K_ATT_F:
        kern_attn_fwd(f[0], f[1], f[2], f[3], f[4], M, T, s->Nl, s->Kl, H);
        break;
    case K_ATT_B:
        kern_attn_bwd(f[5], f[6], f[7], f[0] + M * T * s->Nl * H, f[0], f[1], f[2], f[3], f[4], M,
                      T, s->Nl, s->Kl, H);
        break;
    case K_SWI_F:
        kern_swiglu_fwd(f[0], f[1], f[2], M);
        break;
    case K_SWI_B:
        kern_swiglu_bwd(f[3], f[4], f[0], f[1], f[2], M);
        break;
    case K_XENT_S:
        kern_xent_stats(f[1], f[2], f[3], f[0], b->t, M, K, 0);
        break;
    case K_XENT_B:
        kern_xent_bwd(f[0], f[0], f[1], b->t, M, K, 0, 1.0f / (float)M);
        break;
    case K_ADAMW: {
        const kern_adamw_cfg cfg = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
        kern_adamw(f[0], f[1], f[2], f[3], M, &cfg);
        break;
    }
    case K_SUMSQ:
        f[1][0] = (float)kern_sumsq(f[0], M);
        break;
    case K_COPY:
        floats_copy(f[0], f[1], M);
        break;
    case K_CLEAR:
        floats_clear(f[0], M);
        break;
    case K_ADD:
        kern_add(f[0], f[1], M);
        break;
    case K_PACK: /* bf16 only (run_bf16) */
    default:     /* the experts' calls: run_moe */
        break;
    }
}

/* Floats of each buffer a bf16 call needs (run_bf16); 0 for a kind it does not run. */
static int sizes_bf16(const call *c, const ktime_shape *s, int64_t *n) {
    const int64_t M = c->M, K = c->K, N = c->N, T = s->T, H = s->H;
    const int64_t q = M * T * s->Nl * H, kv = M * T * s->Kl * H;
    switch (c->k) {
    case K_MM: /* y, x, w */
        n[0] = M * N, n[1] = half(M * K), n[2] = half(K * N);
        return 1;
    case K_DW: /* dy, x, dw */
        n[0] = half(M * N), n[1] = half(M * K), n[2] = K * N;
        return 1;
    case K_DX: /* dy, dx, w */
        n[0] = half(M * N), n[1] = M * K, n[2] = half(K * N);
        return 1;
    case K_ATT_F:
    case K_ATT_B: /* out/dout (+ scratch), P, q, k, v (bf16), dq, dk, dv */
        n[0] = q + kern_attn_bf16_scratch(T), n[1] = half(M * s->Nl * T * T);
        n[2] = half(q), n[3] = n[4] = half(kv), n[5] = q, n[6] = n[7] = kv;
        return 1;
    case K_PACK:
        n[0] = half(M), n[1] = M;
        return 1;
    default:
        return 0;
    }
}

/* Floats of each buffer a call needs. */
static void sizes(const call *c, const ktime_shape *s, int64_t *n, int64_t *nt) {
    const int64_t M = c->M, K = c->K, N = c->N, T = s->T, H = s->H;
    for (int i = 0; i < NBUF; i++) n[i] = 0;
    *nt = 0;
    if (c->k >= K_RT_F) {
        sizes_moe(c, s, n, nt);
        return;
    }
    if (s->bf16 && !c->f32 && sizes_bf16(c, s, n)) return;
    switch (c->k) {
    case K_MM:
    case K_DW:
    case K_DX:
        n[0] = M * N, n[1] = M * K, n[2] = K * N;
        break;
    case K_RMS_F:
    case K_RMS_B:
        n[0] = n[1] = n[4] = M * K, n[2] = n[5] = K, n[3] = M; /* y/dx, x, g, rstd, dy, dg */
        break;
    case K_ROPE:
        n[0] = M * T * K * H, n[1] = n[2] = T * H / 2;
        break;
    case K_ATT_F:
    case K_ATT_B: /* out/dout (+ T·T scratch), P, q, k, v, dq, dk, dv */
        n[0] = M * T * s->Nl * H + T * T, n[1] = M * s->Nl * T * T;
        n[2] = n[5] = M * T * s->Nl * H, n[3] = n[4] = n[6] = n[7] = M * T * s->Kl * H;
        break;
    case K_SWI_F:
    case K_SWI_B:
        for (int i = 0; i < 5; i++) n[i] = M;
        break;
    case K_XENT_S:
    case K_XENT_B:
        n[0] = M * K, n[1] = n[2] = n[3] = M, *nt = M;
        break;
    case K_ADAMW:
        n[0] = n[1] = n[2] = n[3] = M;
        break;
    case K_SUMSQ:
        n[0] = M, n[1] = 1;
        break;
    case K_COPY:
    case K_CLEAR:
    case K_ADD:
    case K_PACK:
        n[0] = n[1] = M;
        break;
    default: /* sizes_moe */
        break;
    }
}

/* The clock a call is timed by: this thread's CPU time when BLAS runs on the calling thread
 * alone (a share of the core lost to other processes is then not counted: the prediction is of
 * a rank that has its core), else the wall clock. */
static double clock_of(int cpu) {
    return cpu ? mesh_thread_cpu() : mesh_now();
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ktime_median(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The bytes of buffers a call's samples rotate through (time_call): twice the last-level cache
 * (at least 32 MB of it), so that a sample finds none of its data in any cache level, as in a
 * step, whose parameters, gradients, optimizer state and activations are many times the caches
 * (a call's weights were last read a pass earlier). Writing a 4 MB buffer before each sample
 * emptied only the core's private caches: a call smaller than the shared one then ran with its
 * data there, faster than in a step, on an idle machine. 0 in the SMPI dry run (its kernels take
 * simulated time, and its ranks share one process's memory). */
static int64_t cold_bytes(void) {
#ifdef MESHTRAIN_SMPI
    return 0;
#else
    int64_t llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = (int64_t)sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    llc = llc < (32 << 20) ? (32 << 20) : llc > (256 << 20) ? (256 << 20) : llc;
    return 2 * llc;
#endif
}

#define KTIME_MIN_SAMPLES 5
#define KTIME_MAX_SAMPLES 64
#define KTIME_COPIES 64 /* copies of a call's buffers the samples rotate through, at most */

/* How many copies of a call's buffers its samples rotate through: together at least
 * cold_bytes, at most KTIME_COPIES; one at budget 0 (a quick start: its few samples need not
 * start cold, and 64 cold copies of every call cost a small model's trainer ~1 s of filling). */
static int copies(const int64_t *n, double budget) {
    if (budget <= 0) return 1;
    const int64_t foot = copy_floats(n) * (int64_t)sizeof(float), cold = cold_bytes();
    const int64_t k = foot > 0 && foot < cold ? (cold + foot - 1) / foot : 1;
    return k > KTIME_COPIES ? KTIME_COPIES : (int)k;
}

/* Seconds per call: the median of single calls until the samples add up to `budget` (at least
 * KTIME_MIN_SAMPLES of them), after one warm-up call. Sample i runs on copy i mod k of the
 * buffers (copies(n, budget) of them, in the arena, refilled for this call; t: the targets,
 * zeros), the k copies together at least cold_bytes: each sample starts with its data in no
 * cache. The median, not the best: the step runs each call once, cold. */
static double time_call(const call *c, const ktime_shape *s, double budget, float *arena,
                        int32_t *t) {
    int64_t n[NBUF], nt;
    sizes(c, s, n, &nt);
    const int k = copies(n, budget);
    const int64_t used = (int64_t)k * copy_floats(n);
    if (!mesh_no_data(used * (int64_t)sizeof(float))) fill(arena, used, s->bf16 != NULL);
    bufs b[KTIME_COPIES];
    for (int j = 0; j < k; j++) bufs_at(&b[j], arena, n, j, t);
    if (c->k == K_ATT_B) /* valid probabilities in P */
        for (int j = 0; j < k; j++) {
            if (s->bf16)
                run_bf16(&(call){K_ATT_F, c->M, 0, 0, 0}, s, &b[j]);
            else
                kern_attn_fwd(b[j].f[0], b[j].f[1], b[j].f[2], b[j].f[3], b[j].f[4], c->M, s->T,
                              s->Nl, s->Kl, s->H);
        }
    run(c, s, &b[k - 1]);
    const int cpu = s->threads <= 1;
    double smp[KTIME_MAX_SAMPLES], sum = 0;
    int ns = 0;
    while (ns < KTIME_MAX_SAMPLES && (ns < KTIME_MIN_SAMPLES || sum < budget)) {
        bufs *x = &b[ns % k];
        const double t0 = clock_of(cpu);
        run(c, s, x);
        smp[ns] = clock_of(cpu) - t0;
        sum += smp[ns++];
    }
    return ktime_median(smp, ns);
}

#define KTIME_CALLS 96

/* Appends a call (count cnt, part P_, fp32 whatever the compute when F_) to c[n], count[n],
 * part[n] unless its count or size is 0. */
#define ADDF(K_, M_, KK_, N_, cnt, P_, F_)                                                         \
    do {                                                                                           \
        if ((cnt) > 0 && (M_) > 0)                                                                 \
            c[n] = (call){K_, M_, KK_, N_, F_}, count[n] = (cnt), part[n++] = (P_);                \
    } while (0)
#define ADD(K_, M_, KK_, N_, cnt, P_) ADDF(K_, M_, KK_, N_, cnt, P_, 0)

/* bf16 compute: the roundings to bf16 of what the products consume (model/mixed.c), appended to
 * the n calls in c[]; returns how many there are. */
static int bf16_packs(const ktime_shape *s, call *c, double *count, step_part *part, int n) {
    const int64_t r = s->seqs * s->T, D = s->D, NH = s->Nl * s->H, KH = s->Kl * s->H;
    const double lm = (double)(s->L * s->micro), mb = (double)s->micro;
    const double ld = (double)((s->L - s->Lm) * s->micro), lmm = (double)(s->Lm * s->micro);
    const int64_t SF = s->S * s->Fel;
    /* the blocks' count: every block's [3] = 0, the dense MLPs' 1, the MoE blocks' 2 */
    const int64_t rk = r * s->k;
    const int64_t packs[][4] = {
        /* forward: h1, q and att, k and v; h2, g; a MoE block's h2, its experts' rows, the
         * shared experts' hidden values */
        {r * D, 1, PART_FWD_ATTN, 0}, {r * NH, 2, PART_FWD_ATTN, 0},
        {r * KH, 2, PART_FWD_ATTN, 0}, {r * D, 1, PART_FWD_MLP, 1},
        {r * s->Fl, 1, PART_FWD_MLP, 1}, {r * D, 1, PART_FWD_MLP, 2},
        {rk * D, 1, PART_FWD_MLP, 2}, {r * SF, 1, PART_FWD_MLP, 2},
        /* backward: dOut and h2; g and the gates' gradients; dOut and h1; att, d(att), q and
         * dq; k, v, dk and dv; a MoE block's rows' gradients, the shared experts' dOut and
         * their gates' gradients */
        {r * D, 2, PART_BWD_MLP, 1}, {r * s->Fl, 3, PART_BWD_MLP, 1},
        {r * D, 2, PART_BWD_ATTN, 0}, {r * NH, 4, PART_BWD_ATTN, 0},
        {r * KH, 4, PART_BWD_ATTN, 0}, {rk * D, 1, PART_BWD_MLP, 2},
        {SF ? r * D : 0, 1, PART_BWD_MLP, 2}, {r * SF, 2, PART_BWD_MLP, 2}};
    const double blocks[3] = {lm, ld, lmm};
    for (size_t i = 0; i < sizeof packs / sizeof *packs; i++)
        ADD(K_PACK, packs[i][0], 0, 0, (double)packs[i][1] * blocks[packs[i][3]],
            (step_part)packs[i][2]);
    if (s->last) {
        ADD(K_PACK, r * D, 0, 0, mb, PART_FWD_OTHER);      /* the final norm's output */
        ADD(K_PACK, r * s->Vl, 0, 0, mb, PART_BWD_OTHER); /* the logits' gradient */
    }
    ADD(K_PACK, s->wpack, 0, 0, 1, PART_FWD_OTHER); /* the weights (ktime_shape.wpack) */
    return n;
}

/* The calls of one step, with their counts and parts, into c[] (at most KTIME_CALLS); returns
 * how many. */
static int step_calls(const ktime_shape *s, call *c, double *count, step_part *part) {
    const int64_t r = s->seqs * s->T, D = s->D, NH = s->Nl * s->H, KH = s->Kl * s->H;
    const double lm = (double)(s->L * s->micro), mb = (double)s->micro;
    int n = 0;
    /* linear layers: forward, weight gradient, input gradient (wk, wv, w_gate, w_up twice; the
     * dense MLPs' in the dense blocks only, the shared experts' in the MoE blocks) */
    const int64_t SF = s->S * s->Fel;
    const double ld = (double)((s->L - s->Lm) * s->micro), lmm = (double)(s->Lm * s->micro);
    const int64_t lin[8][3] = {{r, D, NH},    {r, D, KH},     {r, NH, D}, {r, D, s->Fl},
                               {r, s->Fl, D}, {r, D, s->Fel}, {r, SF, D}, {r, D, s->E}};
    const double per[8] = {lm, 2 * lm, lm, 2 * ld, ld, 2 * (double)s->S * lmm, lmm, lmm};
    for (int i = 0; i < 8; i++)
        for (kind k = K_MM; k <= K_DX; k++) {
            const int mlp = i >= 3, bwd = k != K_MM;
            const step_part p =
                bwd ? (mlp ? PART_BWD_MLP : PART_BWD_ATTN) : (mlp ? PART_FWD_MLP : PART_FWD_ATTN);
            if (lin[i][1] > 0) /* the router (7) in fp32 */
                ADDF(k, lin[i][0], lin[i][1], lin[i][2], per[i], p, i == 7);
        }
    if (s->Lm > 0) { /* the router's softmax and top-k, the experts on the rows they take */
        ADD(K_RT_F, r, s->E, s->k, lmm, PART_FWD_MLP);
        ADD(K_RT_B, r, s->E, s->k, lmm, PART_BWD_MLP);
        ADD(K_MOE_F, r * s->k, s->El, s->Fel, lmm, PART_FWD_MLP);
        ADD(K_MOE_B, r * s->k, s->El, s->Fel, lmm, PART_BWD_MLP);
        ADD(K_SWI_F, r * SF, 0, 0, lmm, PART_FWD_MLP); /* the shared experts' */
        ADD(K_SWI_B, r * SF, 0, 0, lmm, PART_BWD_MLP);
    }
    ADD(K_RMS_F, r, D, 0, lm, PART_FWD_ATTN); /* each sublayer's norm */
    ADD(K_RMS_F, r, D, 0, lm, PART_FWD_MLP);
    ADD(K_RMS_B, r, D, 0, lm, PART_BWD_ATTN);
    ADD(K_RMS_B, r, D, 0, lm, PART_BWD_MLP);
    ADD(K_ROPE, s->seqs, s->Nl, 0, lm, PART_FWD_ATTN); /* q forward and backward */
    ADD(K_ROPE, s->seqs, s->Nl, 0, lm, PART_BWD_ATTN);
    ADD(K_ROPE, s->seqs, s->Kl, 0, lm, PART_FWD_ATTN); /* k */
    ADD(K_ROPE, s->seqs, s->Kl, 0, lm, PART_BWD_ATTN);
    ADD(K_ATT_F, s->seqs, 0, 0, lm, PART_FWD_ATTN);
    ADD(K_ATT_B, s->seqs, 0, 0, lm, PART_BWD_ATTN);
    ADD(K_SWI_F, r * s->Fl, 0, 0, ld, PART_FWD_MLP);
    ADD(K_SWI_B, r * s->Fl, 0, 0, ld, PART_BWD_MLP);
    if (s->last) { /* final norm, unembed, loss */
        ADD(K_RMS_F, r, D, 0, mb, PART_FWD_OTHER);
        ADD(K_RMS_B, r, D, 0, mb, PART_BWD_OTHER);
        for (kind k = K_MM; k <= K_DX; k++)
            ADD(k, r, D, s->Vl, mb, k == K_MM ? PART_FWD_OTHER : PART_BWD_OTHER);
        ADD(K_XENT_S, r, s->Vl, 0, mb, PART_FWD_OTHER);
        ADD(K_XENT_B, r, s->Vl, 0, mb, PART_BWD_OTHER);
    }
    if (s->bf16) n = bf16_packs(s, c, count, part, n);
    /* the gradients' zeroing at the step's start is a memory pass (floats_clear): counted as
     * the run makes it and priced at the clear's rate (ktime.h), not timed here, so that it is
     * not counted twice and is counted where and how often the run actually clears */
    ADD(K_ADAMW, s->params, 0, 0, 1, PART_REST);
    ADD(K_SUMSQ, s->params, 0, 0, 1, PART_REST);
#undef ADD
#undef ADDF
    return n;
}

/* The floats of one timed memory pass: 4 MB, a few times a core's private caches, the size of a
 * layer's weight matrix that a sharded run gathers (D·F for D = 512, F = 2048) and a few times a
 * micro-batch's activations (B·T·D); the samples start cold (time_call) and a pass's rate per
 * float varies little with its length beyond this. */
#define KTIME_PASS_FLOATS (1 << 20)
_Static_assert(K_CLEAR - K_COPY == KERN_PASS_CLEAR && K_ADD - K_COPY == KERN_PASS_ADD,
               "the timed passes in traffic.h's order");

int ktime_measure(const ktime_shape *s, double budget, ktime_step *out) {
    call c[KTIME_CALLS];
    double count[KTIME_CALLS];
    step_part part[KTIME_CALLS];
    int n = step_calls(s, c, count, part);
    const int npass = n; /* then the memory passes, timed for their rate: not in the step's sum */
    /* budget 0 (a quick start: tests that check numbers, not times): the passes at the size of
     * a micro-batch's activations, at least 16K floats, so that a small model's arena stays the
     * size its kernels need (4 MB passes made every trainer of a small test map, fill and unmap
     * 64 MB cold copies: 10 s of system time in a 4-rank test of many trainers) */
    int64_t pass_floats = KTIME_PASS_FLOATS;
    if (budget <= 0) {
        const int64_t act = s->seqs * s->T * s->D;
        pass_floats = act < (1 << 14) ? (1 << 14) : act > pass_floats ? pass_floats : act;
    }
    for (kind k = K_COPY; k <= K_ADD; k++) c[n++] = (call){k, pass_floats, 0, 0, 0};
    ktime_step r;
    memset(&r, 0, sizeof r);
    /* one arena for every call's copies, and the targets */
    int64_t floats = 1, targets = 1;
    for (int i = 0; i < n; i++) {
        int64_t nb[NBUF], nt;
        sizes(&c[i], s, nb, &nt);
        const int64_t f = (int64_t)copies(nb, budget) * copy_floats(nb);
        floats = f > floats ? f : floats, targets = nt > targets ? nt : targets;
    }
    float *arena = alloc_floats(floats);
    int32_t *tg = calloc((size_t)targets, sizeof(int32_t));
    if (!arena || !tg) {
        alloc_release(arena, floats);
        free(tg);
        return -1;
    }
    for (int i = npass; i < n; i++)
        r.pass[c[i].k - K_COPY] = time_call(&c[i], s, budget, arena, tg) / (double)c[i].M;
    for (int i = 0; i < npass; i++) {
        const double t = count[i] * time_call(&c[i], s, budget, arena, tg);
        r.part[part[i]] += t;
        if (c[i].k == K_DW) r.wgrad[part[i] == PART_BWD_OTHER] += t;
        switch (c[i].k) {
        case K_MM:
        case K_DW:
        case K_DX:
            r.matmul += t;
            r.matmul_flops += count[i] * 2.0 * (double)(c[i].M * c[i].K * c[i].N);
            break;
        case K_MOE_F: /* 3 products of the rows by D·F_e each, 6 in the backward */
        case K_MOE_B:
            r.experts[c[i].k == K_MOE_B] += t;
            if (c[i].k == K_MOE_F) r.expert_rows = count[i] * (double)c[i].M;
            r.matmul += t;
            r.matmul_flops +=
                count[i] * (c[i].k == K_MOE_F ? 6.0 : 12.0) * (double)(c[i].M * s->D * c[i].N);
            break;
        case K_ATT_F:
        case K_ATT_B:
            r.attention += t;
            break;
        case K_ADAMW:
        case K_SUMSQ:
            r.optimizer += t;
            break;
        default:
            r.elementwise += t;
        }
    }
    alloc_release(arena, floats);
    free(tg);
    r.total = r.matmul + r.attention + r.elementwise + r.optimizer;
    *out = r;
    return 0;
}

void ktime_scale_tokens(ktime_step *k, double f) {
    const double rest = k->part[PART_REST] - k->optimizer;
    for (int i = 0; i < PART_COUNT; i++) k->part[i] *= f;
    k->experts[0] *= f, k->experts[1] *= f, k->expert_rows *= f;
    k->part[PART_REST] = rest * f + k->optimizer;
    k->matmul *= f, k->attention *= f, k->elementwise *= f, k->matmul_flops *= f;
    k->wgrad[0] *= f, k->wgrad[1] *= f;
    k->total = k->matmul + k->attention + k->elementwise + k->optimizer;
}
