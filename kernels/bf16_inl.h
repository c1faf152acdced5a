/* Kernel-private (not part of the kernels/ API): the scalar bf16 conversions as static inline
 * functions, for the loops of the bf16 kernels, where a call would block vectorisation; bf16.h's
 * exported forms are these. Integer arithmetic only, so that GCC vectorises the loops with plain
 * SSE2. Depends on nothing. */
#ifndef MT_KERNELS_BF16_INL_H
#define MT_KERNELS_BF16_INL_H
#include <stdint.h>
#include <string.h>

/* The rounded bf16 of the fp32 bit pattern u, in its top 16 bits (the low 16 are garbage):
 * round to nearest even by adding 0x7fff plus the kept part's last bit (a carry into the exponent
 * is the correct rounding, up to ±inf past the largest value); a NaN keeps its top bits with the
 * quiet bit set, so that rounding cannot carry it into an infinity. */
static inline uint32_t kern_bf16_round_bits_inl(uint32_t u) {
    const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    const int32_t is_nan = (int32_t)(u & 0x7fffffffu) > 0x7f800000;
    return is_nan ? (u | 0x00400000u) : rounded;
}

static inline uint16_t kern_bf16_of_inl(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(kern_bf16_round_bits_inl(u) >> 16);
}

static inline float kern_bf16_val_inl(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float kern_bf16_round_inl(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = kern_bf16_round_bits_inl(u) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}
#endif
