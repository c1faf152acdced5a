/* shape: parameter counts and FLOPs of the transformer's shape (see shape.h). Every count is a
 * whole number below 2^53, so the doubles are exact and the order of the terms does not matter. */
#include "calc/shape.h"

double shape_attn_params(const model_shape *s) {
    return 2.0 * (double)s->D * (double)s->H * (double)(s->N + s->K);
}

double shape_mlp_params(const model_shape *s) {
    return 3.0 * (double)s->D * (double)s->F;
}

double shape_params(const model_shape *s) {
    const double D = (double)s->D;
    return (double)s->L * (shape_mlp_params(s) + shape_attn_params(s) + 2 * D) +
           2 * D * (double)s->V + D;
}

int64_t shape_moe_layers(const model_shape *s) {
    return s->moe.E > 0 ? s->L / s->moe.every : 0;
}

double shape_matmul_params(const model_shape *s) {
    const double D = (double)s->D, Lm = (double)shape_moe_layers(s), Ld = (double)s->L - Lm;
    const double moe_mlp =
        D * (double)s->moe.E + 3 * D * (double)s->moe.F * (double)(s->moe.k + s->moe.shared);
    return (double)s->L * shape_attn_params(s) + Ld * shape_mlp_params(s) + Lm * moe_mlp +
           D * (double)s->V;
}

double shape_attn_flops(const model_shape *s) {
    return 6.0 * (double)s->L * (double)(s->N * s->H) * (double)s->T;
}

double shape_flops_per_token(const model_shape *s) {
    return 6.0 * shape_matmul_params(s) + shape_attn_flops(s);
}

void model_tensor_kv_heads(const model_shape *s, int64_t Y, int64_t y, int64_t *k0, int64_t *kl) {
    if (s->K >= Y) {
        *kl = s->K / Y;
        *k0 = y * *kl;
    } else { /* the kv head of the coordinate's first query head, y·N/Y */
        *kl = 1;
        *k0 = y * (s->N / Y) / (s->N / s->K);
    }
}
