/* Philox4x32-10 known-answer vectors of Random123 (kat_vectors: counter, key → output), the
 * (seed, stream, index) mapping, uniform and normal statistics, and slab independence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"
#include "ktest.h"

static void kat(void) {
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int c = 0; c < 3; c++) {
        uint32_t out[4];
        kern_rng_philox_block(out, v[c], v[c] + 4);
        check_expect(memcmp(out, v[c] + 6, sizeof out) == 0,
                     "philox4x32-10 KAT %d: got %08x %08x %08x %08x want %08x %08x %08x %08x", c,
                     out[0], out[1], out[2], out[3], v[c][6], v[c][7], v[c][8], v[c][9]);
    }
    /* (seed, stream, index) → (key, counter) mapping and u64 = word0 | word1 << 32 */
    uint64_t seed = 0x299f31d0a4093822ull, stream = 0x0370734413198a2eull,
             index = 0x85a308d3243f6a88ull;
    uint64_t u = kern_rng_u64(seed, stream, index);
    check_expect(u == 0x94fdccebd16cfe09ull, "kern_rng_u64 on the KAT-3 inputs = %016llx",
                 (unsigned long long)u);
}

static void stats(void) {
    const int64_t n = 100000;
    double s1 = 0, s2 = 0, s4 = 0, us = 0, umin = 1, umax = 0;
    for (int64_t i = 0; i < n; i++) {
        double z = kern_rng_normal(42, 7, (uint64_t)i), u = kern_rng_uniform(42, 8, (uint64_t)i);
        s1 += z, s2 += z * z, s4 += z * z * z * z;
        us += u, umin = u < umin ? u : umin, umax = u > umax ? u : umax;
        if (!isfinite(z) || u < 0 || u >= 1) {
            check_expect(0, "rng value out of range at %lld: z=%g u=%g", (long long)i, z, u);
            return;
        }
    }
    double mean = s1 / n, var = s2 / n - mean * mean, kurt = s4 / n / (var * var);
    /* 5-sigma bounds: sd(mean) = 1/sqrt(n), sd(var) = sqrt(2/n), sd(kurtosis) ≈ sqrt(24/n) */
    check_expect(fabs(mean) < 5 / sqrt((double)n), "normal mean %.5f (|·| < %.4f)", mean,
                 5 / sqrt((double)n));
    check_expect(fabs(var - 1) < 5 * sqrt(2.0 / n), "normal var %.5f (1 ± %.4f)", var,
                 5 * sqrt(2.0 / n));
    check_expect(fabs(kurt - 3) < 5 * sqrt(24.0 / n), "normal kurtosis %.4f (3 ± %.3f)", kurt,
                 5 * sqrt(24.0 / n));
    check_expect(fabs(us / n - 0.5) < 5 * sqrt(1.0 / 12 / n) && umin < 1e-3 && umax > 1 - 1e-3,
                 "uniform mean %.5f, range [%.2g, %.6f]", us / n, umin, umax);
}

static void slabs(void) {
    const int64_t n = 1000;
    float *all = malloc(sizeof(float) * n), *part = malloc(sizeof(float) * n);
    kern_rng_fill_normal(all, 5, 3, 0, n, 0.02f);
    const int64_t cuts[][2] = {{0, 1}, {0, 333}, {333, 334}, {334, 1000}, {999, 1000}, {17, 700}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        int64_t a = cuts[c][0], b = cuts[c][1];
        kern_rng_fill_normal(part, 5, 3, (uint64_t)a, b - a, 0.02f);
        char what[64];
        snprintf(what, sizeof what, "fill [%lld,%lld) = slice of fill [0,%lld)", (long long)a,
                 (long long)b, (long long)n);
        kt_equal(what, part, all + a, b - a);
    }
    kern_rng_fill_normal(part, 5, 4, 0, n, 0.02f);
    int same = 0;
    for (int64_t i = 0; i < n; i++) same += part[i] == all[i];
    kern_rng_fill_normal(part, 6, 3, 0, n, 0.02f);
    for (int64_t i = 0; i < n; i++) same += part[i] == all[i];
    check_expect(same == 0, "other stream / other seed share %d of %lld values", same,
                 (long long)n);
    double z = kern_rng_normal(5, 3, 10);
    check_expect(all[10] == (float)(0.02 * z), "fill = std·normal: %.9g vs %.9g", all[10],
                 0.02 * z);
    free(all), free(part);
}

int main(void) {
    kat();
    stats();
    slabs();
    return check_finish("test_kern_rng");
}
