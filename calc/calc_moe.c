/* calc_moe: the calculator's mixture of experts (see calc.h, calc_moe): parameters, the checks
 * of a plan and its printing. The step's pieces (the activated FLOPs, the experts' HBM floor, the
 * AllToAlls over the expert axis, the experts' weight collectives over the other data axes and
 * their memory) live beside the dense ones in calc.c.
 *
 * The book's transformers chapter: an MoE "is a dense model with E MLP blocks per layer"; each
 * token activates k of them, which "increases the parameter count by O(E), while keeping the
 * total number of activated parameters roughly the same as the dense model"; it "introduces new
 * comms, primarily two AllToAlls (one before and one after the MoE block)", needed only when the
 * batch is sharded over the expert axis, each "only 1/4 that of a comparable AllGather along a
 * single axis (for a bidirectional ring)". Its roofline: a matmul of B tokens against a weight is
 * FLOP-bound when B > C/W_hbm (240 on v5e), so an expert must see that many tokens: a batch of
 * B tokens gives each expert B·k/E, hence B > 240·E/k. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "calc/calc.h"
#include "calc/calc_cp.h"
#include "mesh/errmsg.h"

int calc_moe_preset(calc_moe *mo, const char *name) {
    *mo = (calc_moe){0, 0, 0, 0, 0};
    if (strcmp(name, "mixtral-8x7b") == 0) { /* Mistral's published sizes: 8 experts, top-2 */
        mo->E = 8;
        mo->k = 2;
        return 0;
    }
    return calc_model_preset(&(model_shape){0, 0, 0, 0, 0, 0, 0, 0, {0}}, name);
}

int64_t calc_moe_F(const model_shape *m, const calc_moe *mo) {
    return mo->F > 0 ? mo->F : m->F;
}

double calc_moe_block_params(const model_shape *m, const calc_moe *mo) {
    const double D = (double)m->D, Fe = (double)calc_moe_F(m, mo);
    return D * (double)mo->E + 3 * D * Fe * (double)(mo->E + mo->S);
}

double calc_moe_block_active(const model_shape *m, const calc_moe *mo) {
    const double D = (double)m->D, Fe = (double)calc_moe_F(m, mo);
    return D * (double)mo->E + 3 * D * Fe * (double)(mo->k + mo->S);
}

double calc_moe_meshtrain_acts(const calc_spec *s, const calc_result *r, double b) {
    const calc_moe *mo = &s->moe;
    const double E = (double)mo->E, k = (double)mo->k, Z = r->Z, D = (double)s->shape.D;
    const double Fe = (double)(mo->F ? mo->F : s->shape.F) / r->Y, SF = (double)mo->S * Fe;
    const double kz = k * Z, recv = Z > 1 ? kz * D : 0, a = s->act_bytes, T = (double)s->shape.T;
    /* the routed sequences a token's share: 1/T, or under a context axis of C the model's pieces
     * (C·pieces/T: the zigzag's two chunks, else one run), each with its statistics made whole
     * over C, f_e and P_e [2E] in fp32 (model_moe_cp.c) */
    const double C = s->cp_n > 1 ? s->cp_n : 1;
    const double pieces = calc_cp_pieces(s->cp_alg, T, C);
    const double g = C * pieces / T, stats = C > 1 ? 2 * E * g : 0;
    double f = 2 * E + 1 + 4 * k + E * g + stats + 2 * kz * Fe + k * D + recv + 2 * SF;
    const double per =
        a >= 4 ? 4 * (f + k * D + recv + kz * Fe + SF) : 4 * f + a * (kz * D + kz * Fe + SF);
    const double counts = Z > 1 ? 2 * (Z * E + 2 * Z * Z) : 0; /* model_moe_counts_n, int64 */
    return b * per + 4 * (6 * E + 4 + counts);
}

double calc_params_moe(const model_shape *m, const calc_moe *mo) {
    if (mo->E == 0) return shape_params(m);
    return shape_params(m) + (double)m->L * (calc_moe_block_params(m, mo) - 3.0 * m->D * m->F);
}

double calc_params_active(const model_shape *m, const calc_moe *mo) {
    if (mo->E == 0) return shape_params(m);
    return shape_params(m) + (double)m->L * (calc_moe_block_active(m, mo) - 3.0 * m->D * m->F);
}

int calc_moe_validate(const calc_spec *s, const calc_result *r, char *err, size_t errlen) {
    const calc_moe *mo = &s->moe;
    if (mo->E == 0) {
        if (mo->expert_mask || mo->k || mo->S || mo->F)
            return errmsg_fail(err, errlen,
                               "--expert, --moe-top-k, --shared-experts and --expert-d-ff need "
                               "--experts E (or --model mixtral-8x7b)");
        return 0;
    }
    if (mo->E < 1 || mo->k < 1 || mo->k > mo->E)
        return errmsg_fail(err, errlen,
                           "--moe-top-k %lld with --experts %lld: a token goes to k distinct "
                           "experts, 1 <= k <= E",
                           (long long)mo->k, (long long)mo->E);
    const int z = mo->expert_mask;
    if (z & (z - 1)) return errmsg_fail(err, errlen, "--expert takes one axis (the book's E_Z)");
    if (z && !(s->data_mask & z))
        return errmsg_fail(err, errlen,
                           "--expert %c is not a data axis: the experts are sharded over an axis "
                           "that also shards the batch (the book's case, with the two AllToAlls "
                           "of the tokens); add it to --dp or leave it out of --tensor and "
                           "--pipeline",
                           'x' + __builtin_ctz((unsigned)z));
    for (int i = 0; i < s->n_axes; i++)
        if ((z >> i & 1) && calc_axis_split(s, i))
            return errmsg_fail(err, errlen,
                               "--expert %c: the axis is split with --tensor %c:%d; give the "
                               "experts a whole axis",
                               s->names[i], s->names[i], s->tensor_block[i]);
    if ((double)mo->E != r->Z * (double)(int64_t)((double)mo->E / r->Z))
        return errmsg_fail(err, errlen,
                           "--experts %lld is not divisible by the expert axis's %.0f chips "
                           "(E_Z: each chip holds E/|Z| experts)",
                           (long long)mo->E, r->Z);
    if (calc_moe_F(&s->shape, mo) % (int64_t)r->Y)
        return errmsg_fail(err, errlen,
                           "tensor degree %.0f must divide the experts' width F_e = %lld", r->Y,
                           (long long)calc_moe_F(&s->shape, mo));
    return 0;
}

void calc_moe_print(FILE *out, const calc_spec *s, const calc_result *r) {
    const calc_moe *mo = &s->moe;
    if (mo->E == 0) return;
    char z[4] = "-";
    for (int i = 0; i < s->n_axes; i++)
        if (mo->expert_mask >> i & 1) snprintf(z, sizeof z, "%c", s->names[i]);
    const double Fe = (double)calc_moe_F(&s->shape, mo);
    fprintf(out,
            "experts: every block's MLP is %lld routed experts of F_e = %.0f, top-%lld, %lld "
            "shared, a router D x E; params %.4g of which the experts %.4g; %.4g per token "
            "(router + %lld experts a block): FLOPs and MFU count these\n",
            (long long)mo->E, Fe, (long long)mo->k, (long long)mo->S, r->params, r->expert_params,
            r->params_active, (long long)(mo->k + mo->S));
    fprintf(out, "  expert axis %s (Z=%.0f): W_in[E_Z, D_X, F_Y], each chip holds %.6g experts%s\n",
            z, r->Z, (double)mo->E / r->Z,
            r->Z > 1 ? "; the tokens' dispatch and return are two AllToAlls over Z each way"
                     : "; no AllToAll (the experts are not sharded over a batch axis)");
}

void calc_moe_print_thresholds(FILE *out, const calc_spec *s, const calc_result *r) {
    const calc_moe *mo = &s->moe;
    if (mo->E == 0) return;
    fprintf(out,
            "  experts: each copy of an expert takes (B/X)*Z*k/E = %.0f tokens a step vs "
            "C*param_bytes/(2*W_hbm) = %.0f (the roofline's C/W_hbm in bf16) -> %s\n",
            r->tokens_per_expert, r->expert_intensity,
            calc_weights_bound(r->tokens_per_expert, r->expert_intensity));
    fprintf(out,
            "    an expert group's batch B/X*Z = %.0f tokens must exceed %.0f*E/k = %.0f (the "
            "book's ~240*E/k); the experts' weight reads add %.3f ms a layer\n",
            s->tokens / r->X * r->Z, r->expert_intensity, r->moe_batch_threshold,
            r->t_expert_hbm * 1e3);
}
