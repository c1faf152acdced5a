/* bf16 conversions against a naive twin in double arithmetic (the value of every bf16 pattern
 * from its fields; round to nearest even by comparing distances to the two neighbours):
 *  - bf16 → fp32: all 65536 patterns, scalar and array;
 *  - fp32 → bf16: every bf16 neighbourhood (all 65536 upper halves) with the lower halves that
 *    decide rounding (0, 1, just below, at and above the tie 0x8000, 0xffff, a few random ones),
 *    which covers ties to even and odd, the carry into the exponent and into ±inf, NaNs of every
 *    payload, ±inf, ±0 and denormals; then a million random patterns. Scalar, array (odd lengths,
 *    unaligned starts) and in-place rounding must agree with the twin bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "ktest.h"

/* The value of a bf16 pattern from its fields; the all-ones exponent with a zero fraction counts
 * as 2^128 (the next value as if the exponent were unbounded: IEEE rounds to ±inf past the
 * midpoint between the largest finite value and it). NaN patterns are not asked for. */
static double bf16_field_value(uint32_t h) {
    const int e = (int)((h >> 7) & 0xff), m = (int)(h & 0x7f);
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return s * ldexp((double)m / 128.0, -126);
    return s * ldexp(1.0 + (double)m / 128.0, e - 127);
}

static float bits_f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The bf16 nearest to the fp32 pattern u, ties to even; a NaN gives its top bits, quiet. */
static uint16_t naive_of(uint32_t u) {
    const float x = bits_f(u);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    if (isinf(x)) return (uint16_t)(u >> 16);
    const uint32_t lo = u >> 16, hi = lo + 1; /* same sign: truncated and next magnitude up */
    const double dl = fabs((double)x - bf16_field_value(lo));
    const double dh = fabs(bf16_field_value(hi) - (double)x);
    return (uint16_t)((dl < dh || (dl == dh && (lo & 1) == 0)) ? lo : hi);
}

static void test_to_f32(void) {
    int bad = 0;
    static kern_bf16 h[65536];
    static float out[65536];
    for (uint32_t i = 0; i < 65536; i++) h[i] = (kern_bf16)i;
    kern_bf16_unpack(out, h, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        const int e = (int)((i >> 7) & 0xff);
        const float want = e == 255 ? bits_f(i << 16) : (float)bf16_field_value(i);
        const float got = kern_bf16_val((kern_bf16)i);
        if (memcmp(&got, &want, 4) != 0 || memcmp(&out[i], &want, 4) != 0) {
            if (bad++ < 5)
                printf("FAIL bf16 0x%04x: scalar %.9g, array %.9g, want %.9g\n", i, (double)got,
                       (double)out[i], (double)want);
        }
    }
    check_expect(bad == 0, "bf16 -> fp32: all 65536 patterns, scalar and array (%d wrong)", bad);
}

/* Converts the n patterns u[] every way and checks each against naive_of. */
static int check_patterns(const uint32_t *u, int64_t n, const char *what) {
    float *x = kt_floats(n + 1), *r = kt_floats(n + 1);
    kern_bf16 *h = malloc((size_t)(n + 1) * sizeof *h);
    if (!h) exit(1);
    memcpy(x + 1, u, (size_t)n * 4); /* x + 1: an unaligned start for the vector loop */
    memcpy(r + 1, u, (size_t)n * 4);
    kern_bf16_pack(h + 1, x + 1, n);
    kern_bf16_round_array(r + 1, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t want = naive_of(u[i]);
        const uint32_t want_r = (uint32_t)want << 16;
        const uint16_t s = kern_bf16_of(x[i + 1]);
        const float sr = kern_bf16_round(x[i + 1]);
        uint32_t rb, srb;
        memcpy(&rb, &r[i + 1], 4);
        memcpy(&srb, &sr, 4);
        if (s != want || h[i + 1] != want || rb != want_r || srb != want_r) {
            if (bad++ < 5)
                printf("FAIL %s: fp32 0x%08x (%.9g): scalar 0x%04x array 0x%04x round 0x%08x "
                       "round_array 0x%08x, want 0x%04x\n",
                       what, u[i], (double)x[i + 1], s, h[i + 1], srb, rb, want);
        }
    }
    free(x), free(r), free(h);
    return bad;
}

static void test_to_bf16(void) {
    static const uint32_t lows[] = {0x0000, 0x0001, 0x0002, 0x3fff, 0x7ffe, 0x7fff,
                                    0x8000, 0x8001, 0x8002, 0xbfff, 0xfffe, 0xffff};
    const int nl = (int)(sizeof lows / sizeof lows[0]) + 3;
    const int64_t n = 65536 * (int64_t)nl;
    uint32_t *u = malloc((size_t)(n > 1000000 ? n : 1000000) * 4);
    if (!u) exit(1);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t hi = 0; hi < 65536; hi++)
        for (int l = 0; l < nl; l++) {
            uint32_t low = l < nl - 3 ? lows[l] : 0;
            if (l >= nl - 3) { /* xorshift: a few random low halves per neighbourhood */
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                low = (uint32_t)(s & 0xffff);
            }
            u[hi * nl + l] = (uint32_t)hi << 16 | low;
        }
    int bad = check_patterns(u, n, "neighbourhoods");
    check_expect(bad == 0, "fp32 -> bf16: %lld patterns, all 65536 neighbourhoods (%d wrong)",
                 (long long)n, bad);
    for (int64_t i = 0; i < 1000000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        u[i] = (uint32_t)(s >> 21);
    }
    bad = check_patterns(u, 1000000, "random");
    check_expect(bad == 0, "fp32 -> bf16: 1e6 random patterns (%d wrong)", bad);
    for (int64_t len = 0; len < 40; len++) /* every tail length of the vector loops */
        bad += check_patterns(u + 7, len, "tail");
    check_expect(bad == 0, "fp32 -> bf16: lengths 0..39 (%d wrong)", bad);
    free(u);
}

int main(void) {
    test_to_f32();
    test_to_bf16();
    return check_finish("kern_bf16");
}
