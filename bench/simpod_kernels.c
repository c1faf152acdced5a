/* simpod_kernels: the FLOP-count backend of kernels/, built only in the SMPI tree (cmake
 * -DMESHTRAIN_SMPI=ON) as that tree's mt_kernels, for the dry-run trainer (simpod_dryrun.c).
 *
 * Every kernel that train/ calls in a training step keeps its signature (the headers in kernels/)
 * but, instead of computing, charges its FLOP count to the simulated clock (smpi_execute_flops):
 * the simulated rank is busy for flops / speed, the speed of its simulated host being the chip's
 * bf16 peak (bench/simpod_platform.c). Its outputs are left as they are (the dry run needs shapes,
 * not values; buffers of SMPI's shared allocator hold garbage anyway), except the few scalars that
 * steer the trainer: the cross-entropy's row statistics are those of all-zero logits (the loss is
 * log V, finite) and the squared norm is 0 (no clipping). Weight initialisation draws nothing.
 *
 * FLOP counts (a multiply-add is 2): a matmul [M,K]x[K,N] 2MKN, as the calculator (calc/) counts
 * them; causal attention per sequence and query head 2·T²·H forward (the q·kᵀ and P·v products,
 * each half of T×T×H) and twice that backward, as calc/ counts them; the elementwise kernels a
 * few FLOPs per element (the calculator leaves them out; at a TPU's matmul rate they are < 1% of
 * a step). The rest of kernels/rng.c (counter-based draws, used for tokens and sampling) is the
 * real one: the SMPI tree compiles kernels/rng.c beside this file with its fill renamed away.
 * The memory passes (kern_add, kern_scale, the embedding) count their floats as the real kernels
 * do (kernels/traffic.h), so that the dry run's step prediction prices them as a real run's. */
#include <smpi/smpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <simgrid/host.h>

#include "kernels/attention.h"
#include "kernels/attn_bf16.h"
#include "kernels/cpu.h"
#include "kernels/embed.h"
#include "kernels/gemm.h"
#include "kernels/gemm_nn.h"
#include "kernels/gemm_bf16.h"
#include "kernels/sgemm_lib.h"
#include "kernels/gemm_bf16_impl.h"
#include "kernels/optim.h"
#include "kernels/rmsnorm.h"
#include "kernels/rng.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/traffic.h"
#include "kernels/xent.h"

/* FLOPs charged on this simulated rank (SMPI privatises globals per rank). */
static double charged;
double simpod_flops_charged(void);
double simpod_flops_charged(void) {
    return charged;
}

/* How the FLOPs take simulated time: smpi_execute_flops, or the dry run's choice (mesh's
 * mesh_sim_compute, which lets non-blocking collectives progress meanwhile; this file knows no
 * mesh). */
static void (*execute)(double flops) = smpi_execute_flops;
void simpod_set_execute(void (*fn)(double flops));
void simpod_set_execute(void (*fn)(double flops)) {
    execute = fn ? fn : smpi_execute_flops;
}

static void charge(double flops) {
    if (flops <= 0) return;
    charged += flops;
    execute(flops);
}

void kern_set_bug_handler(kern_bug_fn fn) {
    (void)fn;
}
void kern_set_threads(int n) {
    (void)n;
}
/* The simulated host's speed: the chip's peak, which is what a kernel runs at here. */
double kern_measure_flops(int64_t n, double seconds) {
    (void)n, (void)seconds;
    return sg_host_get_speed(sg_host_self());
}

double kern_measure_core_flops(int64_t n, double seconds) {
    return kern_measure_flops(n, seconds);
}

void kern_gemm(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K, bool ta,
               bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
    (void)C, (void)A, (void)B, (void)ta, (void)tb, (void)lda, (void)ldb, (void)ldc, (void)alpha,
        (void)beta;
    charge(2.0 * (double)M * (double)N * (double)K);
}
void kern_matmul(float *restrict y, const float *restrict x, const float *restrict w, int64_t M,
                 int64_t K, int64_t N) {
    (void)y, (void)x, (void)w;
    charge(2.0 * (double)M * (double)K * (double)N);
}
void kern_matmul_dw(float *restrict dw, const float *restrict x, const float *restrict dy,
                    int64_t M, int64_t K, int64_t N) {
    (void)dw, (void)x, (void)dy;
    charge(2.0 * (double)M * (double)K * (double)N);
}
void kern_matmul_dx(float *restrict dx, const float *restrict dy, const float *restrict w,
                    int64_t M, int64_t K, int64_t N, bool acc) {
    (void)dx, (void)dy, (void)w, (void)acc;
    charge(2.0 * (double)M * (double)K * (double)N);
}

void kern_attn_fwd(float *restrict out, float *restrict P, const float *restrict q,
                   const float *restrict k, const float *restrict v, int64_t B, int64_t T,
                   int64_t Nl, int64_t Kl, int64_t H) {
    (void)out, (void)P, (void)q, (void)k, (void)v, (void)Kl;
    charge(2.0 * (double)B * (double)Nl * (double)T * (double)T * (double)H);
}
void kern_attn_bwd(float *restrict dq, float *restrict dk, float *restrict dv,
                   float *restrict scratch, const float *restrict dout, const float *restrict P,
                   const float *restrict q, const float *restrict k, const float *restrict v,
                   int64_t B, int64_t T, int64_t Nl, int64_t Kl, int64_t H) {
    (void)dq, (void)dk, (void)dv, (void)scratch, (void)dout, (void)P, (void)q, (void)k, (void)v,
        (void)Kl;
    charge(4.0 * (double)B * (double)Nl * (double)T * (double)T * (double)H);
}

void kern_embed_fwd(float *restrict x, const float *restrict embed, const int32_t *restrict tokens,
                    int64_t M, int64_t D, int64_t v0, int64_t Vl) {
    (void)x, (void)embed, (void)tokens, (void)v0, (void)Vl; /* a lookup, counted as a copy */
    kern_traffic_count(KERN_PASS_COPY, M * D);
}
void kern_embed_bwd(float *restrict dembed, const float *restrict dx,
                    const int32_t *restrict tokens, int64_t M, int64_t D, int64_t v0, int64_t Vl) {
    (void)dembed, (void)dx, (void)tokens, (void)v0, (void)Vl;
    kern_traffic_count(KERN_PASS_ADD, M * D);
    charge((double)M * (double)D);
}

void kern_rmsnorm_fwd(float *restrict y, float *restrict rstd, const float *restrict x,
                      const float *restrict g, int64_t M, int64_t D) {
    (void)y, (void)rstd, (void)x, (void)g;
    charge(4.0 * (double)M * (double)D);
}
void kern_rmsnorm_bwd(float *restrict dx, float *restrict dg, const float *restrict dy,
                      const float *restrict x, const float *restrict g, const float *restrict rstd,
                      int64_t M, int64_t D) {
    (void)dx, (void)dg, (void)dy, (void)x, (void)g, (void)rstd;
    charge(8.0 * (double)M * (double)D);
}

void kern_rope_table(float *restrict cos_t, float *restrict sin_t, int64_t T, int64_t H) {
    (void)cos_t, (void)sin_t, (void)T, (void)H; /* once, at creation */
}
void kern_rope_apply(float *restrict x, const float *restrict cos_t, const float *restrict sin_t,
                     int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld, int inverse) {
    (void)x, (void)cos_t, (void)sin_t, (void)ld, (void)inverse;
    charge(3.0 * (double)B * (double)T * (double)nh * (double)H);
}
void kern_rope_apply_pos(float *restrict x, const float *restrict cos_t,
                         const float *restrict sin_t, const int32_t *restrict pos, int64_t B,
                         int64_t Tl, int64_t nh, int64_t H, int64_t ld, int inverse) {
    kern_rope_apply(x, cos_t, sin_t, B, Tl, nh, H, ld, inverse);
    (void)pos;
}

void kern_swiglu_fwd(float *restrict h, const float *restrict a, const float *restrict b,
                     int64_t n) {
    (void)h, (void)a, (void)b;
    charge(6.0 * (double)n);
}
void kern_swiglu_bwd(float *restrict da, float *restrict db, const float *restrict dh,
                     const float *restrict a, const float *restrict b, int64_t n) {
    (void)da, (void)db, (void)dh, (void)a, (void)b;
    charge(12.0 * (double)n);
}

void kern_swiglu_bwd_inplace(float *restrict dh_da, float *restrict db, const float *restrict a,
                             const float *restrict b, int64_t n) {
    (void)dh_da, (void)db, (void)a, (void)b;
    charge(12.0 * (double)n);
}
/* kernels/moe.c's references call these: charged as the fast ones */
void kern_swiglu_fwd_ref(float *h, const float *a, const float *b, int64_t n) {
    kern_swiglu_fwd(h, a, b, n);
}
void kern_swiglu_bwd_ref(float *da, float *db, const float *dh, const float *a, const float *b,
                         int64_t n) {
    kern_swiglu_bwd(da, db, dh, a, b, n);
}

/* The statistics of all-zero logits: max 0, Σ exp = Vl, target logit 0 (the loss is log V). */
void kern_xent_stats(float *restrict rowmax, float *restrict rowsum, float *restrict tlogit,
                     const float *restrict logits, const int32_t *restrict targets, int64_t M,
                     int64_t Vl, int64_t v0) {
    (void)logits, (void)targets, (void)v0;
    for (int64_t r = 0; r < M; r++) rowmax[r] = 0.0f, rowsum[r] = (float)Vl, tlogit[r] = 0.0f;
    charge(3.0 * (double)M * (double)Vl);
}
void kern_xent_bwd(float *dlogits, const float *logits, const float *restrict lse,
                   const int32_t *restrict targets, int64_t M, int64_t Vl, int64_t v0,
                   float scale) {
    (void)dlogits, (void)logits, (void)lse, (void)targets, (void)v0, (void)scale;
    charge(4.0 * (double)M * (double)Vl);
}

void kern_adamw(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                int64_t n, const kern_adamw_cfg *cfg) {
    (void)p, (void)m, (void)v, (void)g, (void)cfg;
    charge(12.0 * (double)n);
}
void kern_sgd(float *restrict p, const float *restrict g, int64_t n, float lr, float wd) {
    (void)p, (void)g, (void)lr, (void)wd;
    charge(3.0 * (double)n);
}
double kern_sumsq(const float *x, int64_t n) {
    (void)x;
    charge(2.0 * (double)n);
    return 0.0;
}
void kern_scale(float *x, int64_t n, float s) {
    (void)x, (void)s;
    kern_traffic_count(KERN_PASS_COPY, n);
    charge((double)n);
}
void kern_add(float *restrict y, const float *restrict x, int64_t n) {
    (void)y, (void)x;
    kern_traffic_count(KERN_PASS_ADD, n);
    charge((double)n);
}

/* No weights are drawn: a 70B model's initialisation would be the whole run's CPU time. */
void kern_rng_fill_normal(float *out, uint64_t seed, uint64_t stream, uint64_t index0, int64_t n,
                          float std) {
    (void)out, (void)seed, (void)stream, (void)index0, (void)n, (void)std;
}

/* ---- bf16 (--compute-dtype bf16): the same FLOPs as fp32, charged at the chip's one rate (the
 * simulated chip's C is its bf16 rate); every path name is accepted, AUTO resolves to portable. */
struct kern_bf16_ctx {
    kern_bf16_path path;
};
const char *kern_bf16_path_name(kern_bf16_path p) {
    static const char *names[KERN_BF16_PATH_COUNT] = {"auto",   "amx",  "avx512bf16",
                                                      "avx512", "avx2", "portable"};
    return p >= 0 && p < KERN_BF16_PATH_COUNT ? names[p] : "?";
}
int kern_bf16_path_check(kern_bf16_path p, kern_bf16_path *resolved, char *msg, size_t size) {
    (void)msg, (void)size;
    *resolved = p == KERN_BF16_AUTO ? KERN_BF16_PORTABLE : p;
    return 0;
}
int kern_bf16_path_outruns_fp32(kern_bf16_path p) {
    return p == KERN_BF16_AMX || p == KERN_BF16_AVX512BF16; /* a simulated chip's matrix unit */
}
int kern_sgemm_lib_check(kern_sgemm_lib *lib, char *msg, size_t size) {
    (void)msg, (void)size;
    *lib = KERN_SGEMM_OPENBLAS;
    return 0;
}
void kern_sgemm_lib_describe(char *buf, size_t size) {
    snprintf(buf, size, "counted, not run (SimGrid's clock)");
}
int kern_bf16_path_from_env(kern_bf16_path *resolved, char *msg, size_t size) {
    const char *v = getenv(KERN_BF16_PATH_ENV);
    for (int p = 0; p < KERN_BF16_PATH_COUNT; p++)
        if (!v || !v[0] || strcmp(v, kern_bf16_path_name((kern_bf16_path)p)) == 0)
            return kern_bf16_path_check(v && v[0] ? (kern_bf16_path)p : KERN_BF16_AUTO, resolved,
                                        msg, size);
    snprintf(msg, size, "%s=%s: expected auto, amx, avx512bf16, avx512, avx2 or portable",
             KERN_BF16_PATH_ENV, v);
    return -1;
}
kern_bf16_ctx *kern_bf16_ctx_create(kern_bf16_path p, int threads, char *msg, size_t size) {
    (void)threads;
    kern_bf16_ctx *ctx = malloc(sizeof *ctx);
    if (!ctx || kern_bf16_path_check(p, &ctx->path, msg, size) < 0) {
        if (!ctx) snprintf(msg, size, "out of memory");
        free(ctx);
        return NULL;
    }
    return ctx;
}
void kern_bf16_ctx_destroy(kern_bf16_ctx *ctx) {
    free(ctx);
}
kern_bf16_path kern_bf16_ctx_path(const kern_bf16_ctx *ctx) {
    return ctx->path;
}
int64_t kern_bf16_ctx_fallbacks(const kern_bf16_ctx *ctx) {
    (void)ctx;
    return 0;
}
/* No panel copies (decode's one-row kernel): the products are charged alike. */
kern_bf16_panel_layout kern_bf16_ctx_panels(const kern_bf16_ctx *ctx) {
    (void)ctx;
    return KERN_BF16_PANELS_NONE;
}
int kern_bf16_ctx_add_panel(kern_bf16_ctx *ctx, const kern_bf16 *B, int64_t K, int64_t N,
                            int64_t ldb, const kern_bf16 *P) {
    (void)ctx, (void)B, (void)K, (void)N, (void)ldb, (void)P;
    return -1;
}
void kern_bf16_ctx_clear_panels(kern_bf16_ctx *ctx) {
    (void)ctx;
}
int64_t kern_bf16_ctx_panel_hits(const kern_bf16_ctx *ctx) {
    (void)ctx;
    return 0;
}
/* gemm_nn (gemm_f32_panel.c's plain path calls it; nothing calls that here): charged. */
void kern_gemm_nn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                  int64_t lda, int64_t ldb, int64_t ldc, int acc) {
    (void)C, (void)A, (void)B, (void)lda, (void)ldb, (void)ldc, (void)acc;
    charge(2.0 * (double)M * (double)N * (double)K);
}
/* No fp32 panel copies either (gemm_f32_panel.c packs; the products are charged alike): no
 * context is made where kern_f32_panels is 0, and kern_gemm_ctx is kern_gemm. */
int kern_f32_panels(void) {
    return 0;
}
kern_f32_ctx *kern_f32_ctx_create(void) {
    return NULL;
}
void kern_f32_ctx_destroy(kern_f32_ctx *ctx) {
    (void)ctx;
}
int kern_f32_ctx_add_panel(kern_f32_ctx *ctx, const float *B, int64_t K, int64_t N, int64_t ldb,
                           const float *P) {
    (void)ctx, (void)B, (void)K, (void)N, (void)ldb, (void)P;
    return KERN_F32_CANNOT;
}
void kern_f32_ctx_drop_panels(kern_f32_ctx *ctx, const float *P, int64_t elems) {
    (void)ctx, (void)P, (void)elems;
}
int64_t kern_f32_ctx_panel_hits(const kern_f32_ctx *ctx) {
    (void)ctx;
    return 0;
}
void kern_gemm_ctx(kern_f32_ctx *ctx, float *C, const float *A, const float *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   float alpha, float beta) {
    (void)ctx;
    kern_gemm(C, A, B, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
}
void kern_matmul_ctx(kern_f32_ctx *ctx, float *restrict y, const float *restrict x,
                     const float *restrict w, int64_t M, int64_t K, int64_t N) {
    (void)ctx;
    kern_matmul(y, x, w, M, K, N);
}
/* No CPU features (gemm_f32_panel.c's tiles are never chosen here). */
int kern_cpu_has(kern_cpu_feature f) {
    (void)f;
    return 0;
}
void kern_gemm_bf16(kern_bf16_ctx *ctx, float *C, const kern_bf16 *A, const kern_bf16 *B, int64_t M,
                    int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                    bool acc) {
    (void)ctx, (void)C, (void)A, (void)B, (void)ta, (void)tb, (void)lda, (void)ldb, (void)ldc,
        (void)acc;
    charge(2.0 * (double)M * (double)N * (double)K);
}
/* The own kernels' product, which the blockwise bf16 attention (kernels/attn_part_bf16.c,
 * attn_part_bwd.c, the real code here) calls: charged as kern_gemm_bf16. */
void bf16_gemm_own(struct kern_bf16_ctx *ctx, float *C, const kern_bf16 *A, const kern_bf16 *B,
                   int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb,
                   int64_t ldc, bool acc) {
    kern_gemm_bf16(ctx, C, A, B, M, N, K, ta, tb, lda, ldb, ldc, acc);
}
void kern_matmul_bf16(kern_bf16_ctx *ctx, float *restrict y, const kern_bf16 *restrict x,
                      const kern_bf16 *restrict w, int64_t M, int64_t K, int64_t N) {
    (void)ctx, (void)y, (void)x, (void)w;
    charge(2.0 * (double)M * (double)K * (double)N);
}
void kern_matmul_dx_bf16(kern_bf16_ctx *ctx, float *restrict dx, const kern_bf16 *restrict dy,
                         const kern_bf16 *restrict w, int64_t M, int64_t K, int64_t N, bool acc) {
    (void)ctx, (void)dx, (void)dy, (void)w, (void)acc;
    charge(2.0 * (double)M * (double)K * (double)N);
}
void kern_matmul_dw_bf16(kern_bf16_ctx *ctx, float *restrict dw, const kern_bf16 *restrict x,
                         const kern_bf16 *restrict dy, int64_t M, int64_t K, int64_t N) {
    (void)ctx, (void)dw, (void)x, (void)dy;
    charge(2.0 * (double)M * (double)K * (double)N);
}
double kern_bf16_measure_flops(kern_bf16_ctx *ctx, int64_t n, double seconds) {
    (void)ctx;
    return kern_measure_flops(n, seconds);
}
double kern_bf16_measure_flops_fwd(kern_bf16_ctx *ctx, int64_t n, double seconds) {
    (void)ctx;
    return kern_measure_flops(n, seconds);
}
double kern_bf16_measure_core_flops(kern_bf16_ctx *ctx, int64_t n, double seconds) {
    (void)ctx;
    return kern_measure_flops(n, seconds);
}
void kern_cpu_model(char *buf, size_t size) {
    snprintf(buf, size, "SimGrid host %s", sg_host_get_name(sg_host_self()));
}
int64_t kern_attn_bf16_scratch(int64_t T) {
    return 64 * T + T * T / 2;
}
void kern_attn_fwd_bf16(kern_bf16_ctx *ctx, float *restrict out, kern_bf16 *restrict P,
                        float *restrict scratch, const kern_bf16 *q, const kern_bf16 *k,
                        const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H) {
    (void)ctx, (void)out, (void)P, (void)scratch, (void)q, (void)k, (void)v, (void)Kl;
    charge(2.0 * (double)B * (double)Nl * (double)T * (double)T * (double)H);
}
void kern_attn_bwd_bf16(kern_bf16_ctx *ctx, float *restrict dq, float *restrict dk,
                        float *restrict dv, float *restrict scratch, const kern_bf16 *dout,
                        const kern_bf16 *P, const kern_bf16 *q, const kern_bf16 *k,
                        const kern_bf16 *v, int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                        int64_t H) {
    (void)ctx, (void)dq, (void)dk, (void)dv, (void)scratch, (void)dout, (void)P, (void)q, (void)k,
        (void)v, (void)Kl;
    charge(4.0 * (double)B * (double)Nl * (double)T * (double)T * (double)H);
}
