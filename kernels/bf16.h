/* bf16: the bfloat16 format (fp32's sign and 8 exponent bits, 8 significand bits) and its
 * conversions, the one copy in meshtrain: the bf16 kernels, the model's weight copies and the
 * collectives' bf16 wire (mesh/coll_engine.c) all convert here.
 *
 * fp32 → bf16 rounds to nearest, ties to even, on the 16 bits dropped. NaN stays a quiet NaN (its
 * sign and top payload bits kept, the quiet bit set); ±inf stays ±inf; values past bf16's largest
 * finite value (3.3895e38) round to ±inf as IEEE rounding does; denormals are rounded like any
 * value (never flushed). bf16 → fp32 is exact. The array forms are vectorised (AVX2 where the CPU
 * has it, picked at run time) and give the same bits as the scalar forms.
 * A leaf: depends on nothing; its own library (mt_bf16), so that mesh/ links it without the rest
 * of kernels/. No MPI, no allocation. */
#ifndef MT_KERNELS_BF16_H
#define MT_KERNELS_BF16_H
#include <stdint.h>

/* A bf16 value as its bit pattern. */
typedef uint16_t kern_bf16;

/* The bf16 nearest to x (ties to even). */
kern_bf16 kern_bf16_of(float x);
/* The fp32 value of h (exact). */
float kern_bf16_val(kern_bf16 h);
/* x rounded to the nearest bf16, as fp32: kern_bf16_val(kern_bf16_of(x)). */
float kern_bf16_round(float x);

/* out[i] = kern_bf16_of(in[i]), i < n. The model's fp32 → bf16 copies (weights once per update,
 * activations and gradients before a matmul consumes them). */
void kern_bf16_pack(kern_bf16 *restrict out, const float *restrict in, int64_t n);
/* out[i] = kern_bf16_val(in[i]), i < n. */
void kern_bf16_unpack(float *restrict out, const kern_bf16 *restrict in, int64_t n);
/* x[i] = kern_bf16_round(x[i]) in place, i < n. */
void kern_bf16_round_array(float *x, int64_t n);
#endif
