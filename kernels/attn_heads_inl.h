/* Kernel-private (not part of the kernels/ API): the walk over the heads of the training
 * attention's layout, shared by the fp32 and bf16 kernels (attention.c, attn_bf16.c): q, out and
 * their gradients [B, T, Nl·H], k, v and theirs [B, T, Kl·H], the probabilities P [B, Nl, T, T].
 * Query head h reads kv head h / (Nl/Kl). The naive twins keep their own indexing. Depends on
 * nothing. */
#ifndef MT_KERNELS_ATTN_HEADS_INL_H
#define MT_KERNELS_ATTN_HEADS_INL_H
#include <stdint.h>

/* After each successful kern_attn_heads_next, the head h of sequence b: the element offsets of its
 * first row in q (q), of its kv head's in k and v (kv) and of its [T, T] slab of P (P). */
typedef struct {
    int64_t B, T, Nl, Kl, H;
    int64_t b, h, q, kv, P;
} kern_attn_heads;

static inline kern_attn_heads kern_attn_heads_start(int64_t B, int64_t T, int64_t Nl, int64_t Kl,
                                                    int64_t H) {
    return (kern_attn_heads){.B = B, .T = T, .Nl = Nl, .Kl = Kl, .H = H, .b = 0, .h = -1};
}

/* Steps to the next head, in (b, h) order; 0 past the last. */
static inline int kern_attn_heads_next(kern_attn_heads *a) {
    if (++a->h == a->Nl) a->h = 0, a->b++;
    if (a->b >= a->B) return 0;
    a->q = (a->b * a->T * a->Nl + a->h) * a->H;
    a->kv = a->b * a->T * a->Kl * a->H + (a->h / (a->Nl / a->Kl)) * a->H;
    a->P = (a->b * a->Nl + a->h) * a->T * a->T;
    return 1;
}
#endif
