/* The bf16 KV cache (--kv-dtype bf16) against the fp32 cache, on the mesh and compute dtype given
 * by the arguments (--mesh SPEC --tensor AXIS --dp AXES --kv-replicate --compute-dtype D, and
 * --kv-shard AXIS: both caches' positions sharded over the axis, gen_create_kv; --cp AXIS: so
 * too, and the prefill's prompts over the axis, gen_create_cp, whose bf16 cache's keys and
 * values are gathered in bf16):
 *  - the cache's bytes on every rank are exactly half the fp32 cache's, and so is every step's
 *    count of cache bytes read and written (gen_step.kv_bytes);
 *  - --kv-dtype auto follows the compute dtype;
 *  - fed the same tokens (the fp32 cache's greedy ones), the logits of prefill and of every decode
 *    step are within TOL·(|a| + |b| + 1) of the fp32 cache's, TOL = 2^-7. The bound: bf16 rounds
 *    q, K, V and P each by at most 2^-9 relative (u_bf16), so one attention output moves by at
 *    most ~4·u_bf16 of its scale, and the two layers' residual stream carries it to the logits
 *    with the unembedding's gain (the measured worst is printed: ~1e-3 here);
 *  - the greedy picks are the same at every step but where the fp32 cache's top two logits are
 *    closer than that tolerance (a tie within bf16's rounding: then either pick is right);
 *  - the bf16 cache's rows are the prefill's and decode's alike: the last decode step's logits
 *    equal, within 200 fp32 eps units, a fresh bf16-cache prefill of the whole prefix. With
 *    --kv-shard each shard's partial rounds its probabilities normalised by its own sum, a bf16
 *    step from the whole row's at most, so decode and prefill agree within TOL only (2^-7 =
 *    65536 fp32 eps units; seen ~1e4).
 * fp32 compute where kern_gemm_ctx reads the model's fp32 panel copies (model_f32_panels):
 * prompt 2 alone (one row a decode product: the one-row kernel) gives, fed the same tokens, every
 * step's logits bit for bit as row 2 of the batch (the tiles) on 1 or 2 ranks, and the copies
 * are counted and read.
 * Fresh initialisation (seed 7), L=2 D=32 N=4 K=2 H=8 F=64 V=256, the 12 prompts of gen_test.h.
 * With --experts E block 1 is a mixture of E experts (top-2, F_e 48, a shared expert; with
 * --expert AXIS sharded over it), its experts' products in the compute dtype too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "gen_test.h"
#include "mesh/mesh.h"
#include "train/infer/gen.h"
#include "train/infer/gen_cli.h"
#include "train/model/sample.h"

#define NTOK 10
#define TOL (1.0 / 128)

static char kv_axis; /* --kv-shard's or --cp's, or 0 */
static int cp;       /* --cp: the prefill's prompts over kv_axis too */

static gen *make(const config *c0, mesh *m, const gen_dims *d, compute_dtype kv) {
    config c = *c0;
    c.kv_dtype = kv;
    char err[512];
    gen *g = (cp ? gen_create_cp : gen_create_kv)(&c, m, d, kv_axis, err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    return g;
}

/* max |a − b| / (|a| + |b| + 1) over n. */
static double worst_rel(const float *a, const float *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / (fabs(a[i]) + fabs(b[i]) + 1.0);
        w = d > w ? d : w;
    }
    return w;
}

/* Whether pick j is a right greedy pick of logits l[V]: the top one, or within the tolerance of
 * it. */
static int right_pick(const float *l, int64_t V, int32_t j) {
    float top = l[0];
    for (int64_t i = 1; i < V; i++) top = l[i] > top ? l[i] : top;
    return (double)top - l[j] <= TOL * (fabs(top) + fabs(l[j]) + 1.0);
}

/* The memory line's figures (model_weight_memory) of a bf16 model: the fp32 weights, their bf16
 * copy, and, where the path reads them (layout l), the panel copies: counted from the shape here
 * for a model whole on the rank (no tensor axis, no experts) — the 7 matrices of each layer and
 * the unembedding, each K x N padded to whole 16-column panels (PAIRS: K to even), 2 bytes a
 * value. */
static void memory_check(const config *c, model *mod, const char *label, kern_bf16_panel_layout l) {
    const model_weight_bytes w = model_weight_memory(mod);
    const int on = l != KERN_BF16_PANELS_NONE;
    int64_t n = 0;
    model_params_flat(mod, &n);
    const model_shape *s = &c->shape;
    const int64_t k2 = l == KERN_BF16_PANELS_PAIRS ? 2 : 1;
    const int64_t D = (s->D + k2 - 1) / k2 * k2, NH = s->N * s->H, KH = s->K * s->H;
    const int64_t F = s->F, NHk = (NH + k2 - 1) / k2 * k2, Fk = (F + k2 - 1) / k2 * k2;
#define R16(x) (((x) + 15) / 16 * 16)
    const int64_t layer =
        D * R16(NH) + 2 * D * R16(KH) + NHk * R16(s->D) + 2 * D * R16(F) + Fk * R16(s->D);
    const int64_t whole = 2 * (s->L * layer + D * R16(s->V));
#undef R16
    const int exact = !c->tensor_axis[0] && s->moe.E == 0;
    check_expect(w.params == 4 * n && w.params_bf16 == (n + 1) / 2 * 4 &&
                     w.panels == model_panel_bytes(mod) && (w.panels > 0) == on &&
                     (!exact || !on || w.panels == whole),
                 "%s: memory: weights %lld B, bf16 copy %lld, panel copies %lld (%s %lld)", label,
                 (long long)w.params, (long long)w.params_bf16, (long long)w.panels,
                 exact ? "from the shape" : "not counted here", (long long)whole);
}

/* bf16 compute, one prompt (decode at batch 1: one row a product): the run with the model's panel
 * copies against the same run whose context forgets them after the prefill: every step's logits
 * bit for bit equal on the avx2 path (K16: each one-row product reads the copy, else the
 * row-major kernels, the same chains), within 200 fp32 eps units on the avx512bf16 path (PAIRS:
 * the own vdpbf16ps kernel, else oneDNN: other sums of the same products); the copies made, their
 * bytes counted and read exactly when the path reads them. */
static void panels_check(const config *c, mesh *m, const char *label, int kv_rep) {
    const int tp = c->tensor_axis[0] != 0;
    if (tp && !kv_rep && mesh_nranks(m) > c->shape.K) return; /* AllToAll: 2 rows at least */
    prompt_set one = {0};
    char err[256];
    const int64_t B = tp || kv_axis ? 1 : mesh_nranks(m); /* one row on each replica */
    for (int64_t b = 0; b < B; b++)
        if (prompts_add(&one, "To be or not ", 13, "panel prompt", err, sizeof err) < 0)
            mesh_exit_error("%s", err);
    const gen_dims d = {B, one.max_len + NTOK, 64, kv_rep};
    gen *gp = make(c, m, &d, COMPUTE_BF16), *gr = make(c, m, &d, COMPUTE_BF16);
    kern_bf16_ctx *xp = gen_precision(gp)->ctx, *xr = gen_precision(gr)->ctx;
    const kern_bf16_panel_layout lay = kern_bf16_ctx_panels(xp);
    const int on = lay != KERN_BF16_PANELS_NONE;
    const gen_warm warm = gen_warm_model(gen_model(gp)); /* gp's copies made at load, gr's lazily */
    const int64_t made = model_bf16_copies(gen_model(gp));
    int64_t row0, nb, hits_r = 0;
    gen_rows(gp, &row0, &nb);
    int32_t cur[16] = {0}, np[16] = {0}, nr[16] = {0};
    gen_step st;
    int same = 1;
    double dev = 0;
    for (int64_t s = 0; s < NTOK; s++) {
        gen_test_step(gp, s, &one, cur, np, &st);
        gen_test_step(gr, s, &one, cur, nr, &st);
        if (s == 0) kern_bf16_ctx_clear_panels(xr), hits_r = kern_bf16_ctx_panel_hits(xr);
        same &= !memcmp(gen_logits(gp), gen_logits(gr),
                        (size_t)(nb * c->shape.V) * sizeof(float));
        const double w = check_worst_dev(gen_logits(gp), gen_logits(gr), nb * c->shape.V);
        dev = w > dev ? w : dev;
        memcpy(cur, np, sizeof cur);
    }
    const int64_t hits = kern_bf16_ctx_panel_hits(xp);
    if (lay == KERN_BF16_PANELS_PAIRS)
        check_expect(dev <= 200,
                     "%s: batch 1, %d steps: logits with the pair copies (own kernel) vs without "
                     "(oneDNN): worst %.1f eps units (k = 200)",
                     label, NTOK, dev);
    else
        check_expect(same,
                     "%s: batch 1, %d steps: logits with the panel copies bit-equal to without",
                     label, NTOK);
    check_expect((model_panel_bytes(gen_model(gp)) > 0) == on && (nb == 0 || (hits > 0) == on) &&
                     kern_bf16_ctx_panel_hits(xr) == hits_r,
                 "%s: panel copies %s (%lld bytes), read by %lld products; none read once "
                 "forgotten",
                 label, on ? "made" : "not made on this path",
                 (long long)model_panel_bytes(gen_model(gp)), (long long)hits);
    check_expect(warm.made == c->shape.L + 1 && model_bf16_copies(gen_model(gp)) == made,
                 "%s: the bf16 and panel copies made at load (%lld layers and unembeddings of "
                 "%lld), none by the steps after",
                 label, (long long)warm.made, (long long)c->shape.L + 1);
    memory_check(c, gen_model(gp), label, lay);
    gen_destroy(gp);
    gen_destroy(gr);
    prompts_free(&one);
}

/* fp32 compute on one replica (the whole batch on every rank): prompt 2 of the batch alone, fed
 * the batch's tokens for it (tok), against the batch's logits of row 2 at every step (l2). */
static void panels_f32_check(const config *c, mesh *m, const char *label, int kv_rep,
                             const float *l2, const int32_t *tok) {
    const int on = model_f32_panels();
    prompt_set one = {0};
    char err[256];
    if (prompts_add(&one, "To be or not ", 13, "panel prompt", err, sizeof err) < 0)
        mesh_exit_error("%s", err);
    const gen_dims d = {1, one.max_len + NTOK, 64, kv_rep};
    gen *g = make(c, m, &d, COMPUTE_FP32);
    const int64_t V = c->shape.V, h0 = model_f32_panel_hits(gen_model(g));
    int32_t cur[1] = {0}, next[1];
    gen_step st;
    int same = 1;
    for (int64_t s = 0; s < NTOK; s++) {
        gen_test_step(g, s, &one, cur, next, &st);
        same &= !memcmp(gen_logits(g), l2 + s * V, (size_t)V * sizeof(float));
        cur[0] = tok[s];
    }
    const int64_t hits = model_f32_panel_hits(gen_model(g)) - h0;
    /* elsewhere a row alone takes sgemv and the batch sgemm: other sums; past 2 tensor ranks the
     * reduction of the partial sums adds them in an order that depends on the row's place */
    if (on && mesh_nranks(m) <= 2)
        check_expect(same,
                     "%s: fp32 panels: prompt 2 alone, %d steps: logits bit-equal to row 2 "
                     "of the batch",
                     label, NTOK);
    check_expect((model_panel_bytes(gen_model(g)) > 0) == on && (hits > 0) == on,
                 "%s: fp32 panel copies %s (%lld bytes), read by %lld products", label,
                 on ? "made" : "not made on this CPU", (long long)model_panel_bytes(gen_model(g)),
                 (long long)hits);
    gen_destroy(g);
    prompts_free(&one);
}

int main(int argc, char **argv) {
    config c;
    int kv_rep;
    mesh *m = gen_test_start(&c, &kv_rep, &argc, &argv);
    kern_set_threads(1); /* fp32: kern_gemm reads panel copies on one BLAS thread, as generate */
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--compute-dtype"))
            c.compute = strcmp(argv[i + 1], "bf16") ? COMPUTE_FP32 : COMPUTE_BF16;
        if (!strcmp(argv[i], "--kv-shard")) kv_axis = argv[i + 1][0];
        if (!strcmp(argv[i], "--cp")) kv_axis = argv[i + 1][0], cp = 1;
        if (!strcmp(argv[i], "--experts")) /* block 1 a mixture: top-2, F_e 48, a shared one */
            c.shape.moe =
                (moe_shape){.E = atoll(argv[i + 1]), .k = 2, .every = 2, .F = 48, .shared = 1};
    }
    c.cp_axis[0] = 0; /* generate's --cp: the kv axis, and gen_create_cp (gen_cli.c does so) */
    char label[160];
    snprintf(label, sizeof label, "rank %d (%s, tensor %s, dp %s%s, %s %c, compute %s)",
             mesh_rank(m), c.mesh[0] ? c.mesh : "1D", c.tensor_axis[0] ? c.tensor_axis : "-",
             c.data_axes[0] ? c.data_axes : "default", kv_rep ? ", kv replicated" : "",
             cp ? "cp" : "kv-shard", kv_axis ? kv_axis : '-', compute_dtype_name(c.compute));
    const int64_t V = c.shape.V, B = GEN_TEST_PROMPTS;
    prompt_set ps = {0};
    gen_test_prompts(&ps);
    const gen_dims d = {B, ps.max_len + NTOK, 64, kv_rep};
    gen *g32 = make(&c, m, &d, COMPUTE_FP32), *g16 = make(&c, m, &d, COMPUTE_BF16);
    gen *ga = make(&c, m, &d, COMPUTE_AUTO);
    check_expect(gen_kv_dtype(g16) == COMPUTE_BF16 && gen_kv_dtype(g32) == COMPUTE_FP32 &&
                     gen_kv_dtype(ga) == c.compute,
                 "%s: --kv-dtype bf16, fp32 as asked; auto = the compute dtype (%s)", label,
                 compute_dtype_name(gen_kv_dtype(ga)));
    gen_destroy(ga);
    check_expect(2 * gen_cache_bytes(g16) == gen_cache_bytes(g32),
                 "%s: the bf16 cache holds %lld bytes, half the fp32 cache's %lld", label,
                 (long long)gen_cache_bytes(g16), (long long)gen_cache_bytes(g32));
    int64_t row0, nb;
    gen_rows(g32, &row0, &nb);
    int32_t cur[16], n32[16], n16[16], tok[16][NTOK];
    float *l2 = malloc((size_t)(NTOK * V) * sizeof *l2); /* row 2's fp32 logits, each step */
    const int one_replica = c.compute == COMPUTE_FP32 && !kv_axis && row0 == 0 && nb == B;
    gen_step s32, s16;
    double worst = 0;
    int bytes_half = 1, wrong = 0, same = 0;
    for (int64_t s = 0; s < NTOK; s++) {
        gen_test_step(g32, s, &ps, cur, n32, &s32);
        gen_test_step(g16, s, &ps, cur, n16, &s16);
        bytes_half &= 2 * s16.kv_bytes == s32.kv_bytes && s16.kv_bytes > 0;
        if (one_replica) memcpy(l2 + s * V, gen_logits(g32) + 2 * V, (size_t)V * sizeof *l2);
        const double w = worst_rel(gen_logits(g16), gen_logits(g32), nb * V);
        worst = w > worst ? w : worst;
        for (int64_t b = 0; b < nb; b++) {
            same += n16[b] == n32[b];
            if (!right_pick(gen_logits(g32) + b * V, V, n16[b])) {
                wrong++;
                printf("%s: sequence %lld step %lld: bf16 cache picks %d, fp32 %d\n", label,
                       (long long)(row0 + b), (long long)s, n16[b], n32[b]);
            }
            cur[b] = tok[b][s] = n32[b];
        }
    }
    check_expect(bytes_half, "%s: each step's cache bytes read and written: bf16 half of fp32's",
                 label);
    check_expect(worst <= TOL,
                 "%s: logits of the bf16 cache vs the fp32 cache over %d steps: worst %.2e (bound "
                 "%.2e)",
                 label, NTOK, worst, TOL);
    check_expect(wrong == 0,
                 "%s: greedy picks: %d of %lld equal the fp32 cache's, the rest within its tie "
                 "tolerance (%d not)",
                 label, same, (long long)(nb * NTOK), wrong);
    /* the last step's logits against a fresh bf16-cache prefill of each whole prefix */
    prompt_set full = {0};
    gen_test_prefixes(&full, &ps, &tok[0][0], NTOK, row0, nb);
    const gen_dims d2 = {B, full.max_len + 1, 64, kv_rep};
    gen *gf = make(&c, m, &d2, COMPUTE_BF16);
    gen_prefill(gf, &full, n16, &s16);
    const double wre = check_worst_dev(gen_logits(g16), gen_logits(gf), nb * V);
    const double kpre = kv_axis ? TOL / 0x1p-23 : 200;
    check_expect(wre <= kpre,
                 "%s: bf16 cache, last decode logits vs a prefill of the prefix: worst %.1f eps "
                 "units (k = %.0f)",
                 label, wre, kpre);
    gen_destroy(gf);
    if (c.compute == COMPUTE_BF16) panels_check(&c, m, label, kv_rep);
    if (one_replica) panels_f32_check(&c, m, label, kv_rep, l2, tok[2]);
    free(l2);
    gen_destroy(g16);
    gen_destroy(g32);
    prompts_free(&ps);
    prompts_free(&full);
    mesh_destroy(m);
    const int rc = check_finish("test_gen_kv_bf16");
    mesh_mpi_finalize();
    return rc;
}
