/* bf16: fp32 <-> bfloat16 conversion. See bf16.h. */
#include "mesh/bf16.h"

#include <string.h>

uint16_t mesh_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    /* round to nearest even on the 16 bits dropped: add 0x7fff, plus 1 if the kept LSB is odd;
     * a carry into the exponent is the correct rounding (up to ±inf past the largest value) */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float mesh_f32_from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float mesh_bf16_round(float x) {
    return mesh_f32_from_bf16(mesh_bf16_from_f32(x));
}

void mesh_bf16_pack(uint16_t *restrict out, const float *restrict in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = mesh_bf16_from_f32(in[i]);
}

void mesh_bf16_unpack(float *restrict out, const uint16_t *restrict in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = mesh_f32_from_bf16(in[i]);
}

void mesh_bf16_round_array(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = mesh_bf16_round(x[i]);
}
