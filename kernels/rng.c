/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
 * counter-based generator of Random123. Key = seed (lo, hi 32 bits); counter = (index lo,
 * index hi, stream lo, stream hi). Every value is a pure function of (seed, stream, index). */
#include "kernels/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void philox4x32_10(uint32_t out[4], uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Exposed for the known-answer test with the raw 128-bit counter and 64-bit key of Random123. */
void kern_rng_philox_block(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]) {
    philox4x32_10(out, (uint64_t)key[0] | (uint64_t)key[1] << 32,
                  (uint64_t)ctr[2] | (uint64_t)ctr[3] << 32,
                  (uint64_t)ctr[0] | (uint64_t)ctr[1] << 32);
}

uint64_t kern_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t x[4];
    philox4x32_10(x, seed, stream, index);
    return (uint64_t)x[0] | (uint64_t)x[1] << 32;
}

double kern_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (double)(kern_rng_u64(seed, stream, index) >> 11) * 0x1.0p-53;
}

/* u1 = (53 bits of words 0,1 + 1)·2^-53 ∈ (0, 1] (log never sees 0), u2 ∈ [0, 1) from words 2,3;
 * z = sqrt(−2 ln u1)·cos(2π u2). */
double kern_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t x[4];
    philox4x32_10(x, seed, stream, index);
    uint64_t a = (uint64_t)x[0] | (uint64_t)x[1] << 32, b = (uint64_t)x[2] | (uint64_t)x[3] << 32;
    double u1 = (double)((a >> 11) + 1) * 0x1.0p-53, u2 = (double)(b >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

void kern_rng_fill_normal(float *out, uint64_t seed, uint64_t stream, uint64_t index0, int64_t n,
                          float std) {
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)((double)std * kern_rng_normal(seed, stream, index0 + (uint64_t)i));
}
