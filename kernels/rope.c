/* Rotary embedding ("rotate-half") from precomputed cos/sin tables, and a table-free twin. */
#include "kernels/rope.h"

#include <math.h>

void kern_rope_table(float *restrict cos_t, float *restrict sin_t, int64_t T, int64_t H) {
    int64_t h2 = H / 2;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < h2; i++) {
            double a = (double)t * pow(KERN_ROPE_THETA, -2.0 * (double)i / (double)H);
            cos_t[t * h2 + i] = (float)cos(a);
            sin_t[t * h2 + i] = (float)sin(a);
        }
}

void kern_rope_apply(float *restrict x, const float *restrict cos_t, const float *restrict sin_t,
                     int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld, int inverse) {
    int64_t h2 = H / 2;
    float sg = inverse ? -1.0f : 1.0f;
    for (int64_t r = 0; r < B * T; r++) {
        const float *c = cos_t + (r % T) * h2, *s = sin_t + (r % T) * h2;
        for (int64_t h = 0; h < nh; h++) {
            float *x1 = x + r * ld + h * H, *x2 = x1 + h2;
            for (int64_t i = 0; i < h2; i++) {
                float a = x1[i], b = x2[i], si = sg * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
    }
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
