/* test_moe: the calculator's mixture of experts against the book's transformers chapter and its
 * roofline, and Mixtral 8x7B's published sizes:
 *  - Mixtral-8x7B: 46.7e9 parameters, 12.9e9 per token (Mistral's announcement);
 *  - "an MoE is a dense model with E MLP blocks per layer", of which "each token activates k":
 *    the MLP's parameters grow xE, the activated ones (and the FLOPs) xk;
 *  - "two AllToAlls (one before and one after the MoE block)", "only if we are data or sequence
 *    sharded along the same axis as our experts", each "only 1/4 that of a comparable AllGather
 *    along a single axis (for a bidirectional ring)";
 *  - the roofline: a matmul is compute-bound when its tokens exceed C/W_hbm ("240 tokens" on v5e),
 *    so each expert needs that many, and the batch ~240·E/k; the experts' HBM floor appears below
 *    it and vanishes above;
 *  - the experts' memory sharded over the expert axis (E_Z), inference's experts reached and
 *    B_crit·E/k, and bad input. */
#include "calc/calc.h"
#include "calc/calc_infer.h"
#include "check.h"
#include "spec.h"

#include <stdlib.h>
#include <string.h>

static calc_result run(const calc_spec *s) {
    return test_run(s);
}

static const calc_coll *find(const calc_result *r, cost_op op, int bwd) {
    for (int i = 0; i < r->n_coll; i++)
        if (r->coll[i].op == op && r->coll[i].bwd == bwd && r->coll[i].seg == 0) return &r->coll[i];
    return NULL;
}

static calc_spec mixtral(const char *chip, const int *sizes, int n, double tokens) {
    model_shape m;
    calc_model_preset(&m, "mixtral-8x7b");
    calc_spec s = test_spec(chip, sizes, n, &m);
    calc_moe_preset(&s.moe, "mixtral-8x7b");
    s.data_mask = (1 << n) - 1;
    s.tokens = tokens;
    return s;
}

static void test_params(void) {
    model_shape m;
    calc_model_preset(&m, "mixtral-8x7b");
    calc_moe mo;
    calc_moe_preset(&mo, "mixtral-8x7b");
    check_near("Mixtral 8x7B: \"46.7B total parameters\"", calc_params_moe(&m, &mo), 46.7e9, 0.001);
    check_near("Mixtral 8x7B: \"only uses 12.9B parameters per token\"",
               calc_params_active(&m, &mo), 12.9e9, 0.002);
    /* the book: "an MoE is a dense model with E MLP blocks per layer ... each token activates k" */
    const double dense_mlp = 3.0 * m.D * m.F, router = (double)m.D * mo.E;
    check_near("book: MoE MLP = E dense MLP blocks (+ the router D*E)",
               calc_moe_block_params(&m, &mo) - router, mo.E * dense_mlp, 1e-12);
    check_near("book: activated MLP = k dense MLP blocks (+ the router)",
               calc_moe_block_active(&m, &mo) - router, mo.k * dense_mlp, 1e-12);
    check_near(
        "book: \"increases the parameter count by O(E)\": total - dense = L*(E-1)*3DF + L*D*E",
        calc_params_moe(&m, &mo) - shape_params(&m), (double)m.L * ((mo.E - 1) * dense_mlp + router),
        1e-12);
    calc_moe sh = mo;
    sh.S = 1;
    sh.F = 1792; /* fine-grained experts, one shared: DeepSeek's shape of an MoE block */
    check_near("shared experts count in both: active - total = (k - E)*3*D*F_e",
               calc_moe_block_active(&m, &sh) - calc_moe_block_params(&m, &sh),
               (sh.k - sh.E) * 3.0 * m.D * 1792, 1e-12);
}

static void test_flops_and_a2a(void) {
    const int cube[3] = {4, 4, 4};
    calc_spec s = mixtral("v5p", cube, 3, 4e6);
    s.zero = 3;
    calc_result dense_z = run(&s); /* experts on every chip: no AllToAll */
    check_true("book: no AllToAll when the batch is not sharded over the experts' axis",
               find(&dense_z, COST_OP_ALL_TO_ALL, 0) == NULL);
    check_near("6*params*B counts the activated parameters", dense_z.flops_model,
               6 * calc_params_active(&s.shape, &s.moe) * s.tokens, 1e-12);
    s.moe.expert_mask = 1; /* experts over x (|Z| = 4) */
    calc_result r = run(&s);
    const calc_coll *f = find(&r, COST_OP_ALL_TO_ALL, 0), *b = find(&r, COST_OP_ALL_TO_ALL, 1);
    check_true("book: \"two AllToAlls (one before and one after the MoE block)\" per pass",
               f && b && f->count == 2 && b->count == 2);
    if (!f) return;
    const double V = 4 * 2 * (s.tokens / 64) * 4096 * 2; /* |Z|·k·(B/X)·D·2 bytes */
    check_near("AllToAll V = |Z| x a chip's k*(B/X) rows of D in bf16", f->bytes, V, 1e-12);
    const int sizes[1] = {4}, wraps[1] = {1};
    const double ag =
        cost_collective(COST_OP_ALL_GATHER, &s.link, sizes, wraps, 1, MESH_ALG_BIDIR, V, NULL);
    check_near("book: each AllToAll \"only 1/4 that of a comparable AllGather along a single axis "
               "(for a bidirectional ring)\"",
               f->est.seconds / ag, 0.25, 0.001);
    check_near("memory: the experts sharded over Z too (ZeRO-3: over all of X)", r.mem_params,
               r.params * 2 / 64, 1e-9);
    s.zero = 0;
    r = run(&s);
    check_near("memory, ZeRO-0: the experts /|Z|, the rest replicated", r.mem_params,
               (r.params - r.expert_params) * 2 + r.expert_params * 2 / 4, 1e-12);
    s.remat = CALC_REMAT_BLOCK;
    r = run(&s);
    b = find(&r, COST_OP_ALL_TO_ALL, 1);
    check_true("block remat repeats the forward's two AllToAlls in the backward",
               b && b->count == 4);
    /* meshtrain in bf16 with fp32 gradients on the wire: the rows go out in bf16, the experts'
     * fp32 outputs (and in the backward their gradients) come back at --grad-bytes */
    s.remat = CALC_REMAT_NONE;
    s.grad_bytes = 4;
    r = run(&s);
    double sent[2] = {0, 0};
    int rows_n[2] = {0, 0};
    for (int i = 0; i < r.n_coll; i++)
        if (r.coll[i].op == COST_OP_ALL_TO_ALL) {
            sent[r.coll[i].bwd] += r.coll[i].count * r.coll[i].bytes;
            rows_n[r.coll[i].bwd]++;
        }
    check_true("act 2 B, grad 4 B: a dispatch row and a return row each pass",
               rows_n[0] == 2 && rows_n[1] == 2);
    check_near("act 2 B, grad 4 B: forward bytes = V (bf16 dispatch) + 2V (fp32 return)", sent[0],
               3 * V, 1e-12);
    check_near("act 2 B, grad 4 B: backward bytes as the forward's", sent[1], 3 * V, 1e-12);
}

static void test_threshold(void) {
    const int pod[2] = {4, 4};
    calc_spec s = mixtral("v5e", pod, 2, 0);
    s.moe.expert_mask = 1;
    /* the roofline: compute-bound iff tokens > C/W_hbm, "240 tokens" on v5e; each expert takes
     * B·k/E of them, so the batch must exceed ~240·E/k */
    const double ratio = 1.97e14 / 8.1e11;
    for (int side = 0; side < 2; side++) {
        const double per_expert = ratio * (side ? 1.1 : 0.9);
        /* B/X·Z·k/E = per_expert: B = per_expert·E/k·X/Z */
        s.tokens = per_expert * 8 / 2 * 16 / 4;
        calc_result r = run(&s);
        if (!side) {
            check_near("roofline: C/W_hbm on v5e (book: \"240 tokens\")", r.expert_intensity, 243.2,
                       0.001);
            check_near("book: the batch must exceed ~240*E/k (E 8, k 2: 960)",
                       r.moe_batch_threshold, 960, 0.015);
        }
        char what[160];
        snprintf(what, sizeof what,
                 "%s the threshold (%.0f tokens per expert): the experts' weight reads %s",
                 side ? "above" : "below", r.tokens_per_expert,
                 side ? "hide under their matmuls" : "add to the step");
        check_true(what, side ? r.t_expert_hbm == 0 : r.t_expert_hbm > 0);
    }
}

static void test_infer(void) {
    const int pod[2] = {4, 4};
    model_shape m;
    calc_model_preset(&m, "mixtral-8x7b");
    calc_spec s = test_spec("v5e", pod, 2, &m);
    calc_moe_preset(&s.moe, "mixtral-8x7b");
    s.tensor_mask = 3;
    calc_infer_opt o;
    calc_infer_defaults(&o);
    o.context = o.prefill = 4096;
    calc_infer_result r;
    char err[256];
    if (calc_infer(&s, &o, &r, err, sizeof err) < 0) {
        printf("FAIL calc_infer: %s\n", err);
        exit(1);
    }
    check_near("decode of one sequence reaches exactly k experts a block", r.experts_touched, 2,
               1e-12);
    check_near("decode FLOPs: 2*B*(activated params)/(Y*C)", r.t_flops,
               2 * calc_params_active(&m, &s.moe) / (16 * r.C), 1e-12);
    check_near("B_crit for an expert: B_crit*E/k", r.b_crit_moe, r.b_crit * 4, 1e-12);
    check_true("no expert axis: no AllToAll", r.t_alltoall == 0);
    s.moe.expert_mask = 1;
    o.batch = 64;
    calc_infer(&s, &o, &r, err, sizeof err);
    check_true("64 sequences reach (almost) all 8 experts; the AllToAlls cost time",
               r.experts_touched > 7.99 && r.t_alltoall > 0);
}

static void test_bad(void) {
    const int cube[3] = {4, 4, 4};
    char err[256];
    calc_result r;
    calc_spec s = mixtral("v5p", cube, 3, 4e6);
    s.moe.k = 9;
    check_true("k > E refused",
               calc_compute(&s, &r, err, sizeof err) < 0 && strstr(err, "--moe-top-k 9"));
    s = mixtral("v5p", cube, 3, 4e6);
    s.data_mask = 3, s.tensor_mask = 4, s.moe.expert_mask = 4;
    check_true("an expert axis that shards no batch is refused",
               calc_compute(&s, &r, err, sizeof err) < 0 && strstr(err, "is not a data axis"));
    const int six[3] = {6, 4, 4};
    s = mixtral("v5p", six, 3, 4e6);
    s.moe.expert_mask = 1;
    check_true("E not divisible by the expert axis is refused",
               calc_compute(&s, &r, err, sizeof err) < 0 && strstr(err, "not divisible"));
    printf("     (%s)\n", err);
}

int main(void) {
    test_params();
    test_flops_and_a2a();
    test_threshold();
    test_infer();
    test_bad();
    return check_report("test_moe");
}
