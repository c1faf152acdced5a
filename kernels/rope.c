/* Rotary embedding ("rotate-half") from precomputed cos/sin tables, and a table-free twin. The
 * rotation is built twice, plainly and for AVX-512, with the same bits (kernels/vecwide.h). */
#include "kernels/rope.h"

#include <math.h>
#include <stddef.h>

#include "kernels/vecwide.h"

void kern_rope_table(float *restrict cos_t, float *restrict sin_t, int64_t T, int64_t H) {
    int64_t h2 = H / 2;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < h2; i++) {
            double a = (double)t * pow(KERN_ROPE_THETA, -2.0 * (double)i / (double)H);
            cos_t[t * h2 + i] = (float)cos(a);
            sin_t[t * h2 + i] = (float)sin(a);
        }
}

/* One row's nh heads rotated by the angles of one position: c, s its cos/sin table rows. */
KERN_BODY rope_row(float *restrict x, const float *restrict c, const float *restrict s, int64_t nh,
                   int64_t H, float sg) {
    const int64_t h2 = H / 2;
    for (int64_t h = 0; h < nh; h++) {
        float *x1 = x + h * H, *x2 = x1 + h2;
        for (int64_t i = 0; i < h2; i++) {
            float a = x1[i], b = x2[i], si = sg * s[i];
            x1[i] = a * c[i] - b * si;
            x2[i] = b * c[i] + a * si;
        }
    }
}

/* B·T rows; row r at the position pos[r % T], or r % T without pos. */
KERN_BODY rope_body(float *restrict x, const float *restrict cos_t, const float *restrict sin_t,
                    const int32_t *restrict pos, int64_t B, int64_t T, int64_t nh, int64_t H,
                    int64_t ld, float sg) {
    const int64_t h2 = H / 2;
    for (int64_t r = 0; r < B * T; r++) {
        const int64_t t = pos ? pos[r % T] : r % T;
        rope_row(x + r * ld, cos_t + t * h2, sin_t + t * h2, nh, H, sg);
    }
}

KERN_TWO_COPIES(rope, 512,
                (float *restrict x, const float *restrict cos_t, const float *restrict sin_t,
                 const int32_t *restrict pos, int64_t B, int64_t T, int64_t nh, int64_t H,
                 int64_t ld, float sg),
                (x, cos_t, sin_t, pos, B, T, nh, H, ld, sg))

void kern_rope_apply(float *restrict x, const float *restrict cos_t, const float *restrict sin_t,
                     int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld, int inverse) {
    KERN_PICK(rope)(x, cos_t, sin_t, NULL, B, T, nh, H, ld, inverse ? -1.0f : 1.0f);
}

void kern_rope_apply_pos(float *restrict x, const float *restrict cos_t,
                         const float *restrict sin_t, const int32_t *restrict pos, int64_t B,
                         int64_t Tl, int64_t nh, int64_t H, int64_t ld, int inverse) {
    KERN_PICK(rope)(x, cos_t, sin_t, pos, B, Tl, nh, H, ld, inverse ? -1.0f : 1.0f);
}

void kern_rope_apply_ref(float *x, int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld,
                         int inverse) {
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < H / 2; i++) {
                double ang = (double)(r % T) * pow(KERN_ROPE_THETA, -2.0 * (double)i / (double)H);
                double c = cos(ang), s = inverse ? -sin(ang) : sin(ang);
                float *x1 = x + r * ld + h * H + i, *x2 = x1 + H / 2;
                double a = *x1, b = *x2;
                *x1 = (float)(a * c - b * s);
                *x2 = (float)(b * c + a * s);
            }
}
