/* bf16: the bfloat16 format a TPU moves over its links (8 exponent bits like fp32, 8 significand
 * bits), as used by the collectives' bf16 wire (coll.h, mesh_set_wire). Conversion from fp32
 * rounds to nearest, ties to even; NaN stays a (quiet) NaN, ±inf stays ±inf, and values beyond
 * bf16's largest finite value round to ±inf as IEEE rounding does. bf16 → fp32 is exact.
 * The conversions are kernels/bf16.h's (mesh links mt_bf16, that leaf alone). Pure functions: no
 * MPI, no allocation. Not collective. */
#ifndef MT_MESH_BF16_H
#define MT_MESH_BF16_H
#include <stdint.h>

/* The bf16 bit pattern nearest to x (ties to even). */
uint16_t mesh_bf16_from_f32(float x);
/* The fp32 value of a bf16 bit pattern (exact). */
float mesh_f32_from_bf16(uint16_t h);
/* x rounded to the nearest bf16 value, as fp32: mesh_f32_from_bf16(mesh_bf16_from_f32(x)). */
float mesh_bf16_round(float x);
/* out[i] = bf16 of in[i], i < n. */
void mesh_bf16_pack(uint16_t *restrict out, const float *restrict in, int64_t n);
/* out[i] = fp32 of in[i], i < n. */
void mesh_bf16_unpack(float *restrict out, const uint16_t *restrict in, int64_t n);
/* x[i] = mesh_bf16_round(x[i]), in place, i < n. */
void mesh_bf16_round_array(float *x, int64_t n);
#endif
