/* Rotary position embedding, "rotate-half" pairing of element i with i + H/2 of each head,
 * angle pos · θ^(−2i/H), θ = 10000, pos = position of the token within its sequence. */
#ifndef MT_KERNELS_ROPE_H
#define MT_KERNELS_ROPE_H
#include <stdint.h>

#define KERN_ROPE_THETA 10000.0

/* cos/sin tables [T, H/2]: entry (t, i) = cos/sin(t · θ^(−2i/H)). Overwrites. H even. */
void kern_rope_table(float *restrict cos_t, float *restrict sin_t, int64_t T, int64_t H);
/* In place on x[B·T, ld] (row = token t of sequence b; heads at columns [h·H, (h+1)·H),
 * h < nh): forward rotation when inverse = 0; rotation by the negative angle (the exact
 * transpose, i.e. the backward pass) when inverse = 1. */
void kern_rope_apply(float *restrict x, const float *restrict cos_t, const float *restrict sin_t,
                     int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld, int inverse);
/* kern_rope_apply with each row at a given position: x[B·Tl, ld], row b·Tl + t at position
 * pos[t] < the table's T (the same Tl positions for every sequence: a context-parallel rank's
 * global positions, seqsplit.h). Row t gets the rotation kern_rope_apply gives row pos[t] of a
 * whole sequence, with the same arithmetic, bit for bit. */
void kern_rope_apply_pos(float *restrict x, const float *restrict cos_t,
                         const float *restrict sin_t, const int32_t *restrict pos, int64_t B,
                         int64_t Tl, int64_t nh, int64_t H, int64_t ld, int inverse);
void kern_rope_apply_ref(float *x, int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld,
                         int inverse);
#endif
