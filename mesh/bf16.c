/* bf16: the wire's fp32 <-> bfloat16 conversions, which are kernels/bf16's (see bf16.h). */
#include "mesh/bf16.h"

#include "kernels/bf16.h"

uint16_t mesh_bf16_from_f32(float x) {
    return kern_bf16_of(x);
}

float mesh_f32_from_bf16(uint16_t h) {
    return kern_bf16_val(h);
}

float mesh_bf16_round(float x) {
    return kern_bf16_round(x);
}

void mesh_bf16_pack(uint16_t *restrict out, const float *restrict in, int64_t n) {
    kern_bf16_pack(out, in, n);
}

void mesh_bf16_unpack(float *restrict out, const uint16_t *restrict in, int64_t n) {
    kern_bf16_unpack(out, in, n);
}

void mesh_bf16_round_array(float *x, int64_t n) {
    kern_bf16_round_array(x, n);
}
