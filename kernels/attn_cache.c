#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* Attention against a KV cache and the read-bandwidth probe (see attn_cache.h).
 *
 * One new token (n = 1, decode): the Nl/Kl query heads of kv head j are contiguous in the query
 * row, so they form a [G, H] matrix and one sgemm per kv head scores them against the cache's
 * [p0+1, H] keys, one more multiplies by the values: each cache row is read once per step, not
 * once per query head. Several new tokens (prefill, n > 1): per query head, row blocks of
 * ATTN_CACHE_BLOCK queries score against the keys they may see (block [i0, i1) needs keys
 * [0, p0 + i1)), masked to the causal part, as the training kernel does. */
#include "kernels/attn_cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gemm.h"
#include "kernels/vecmath.h"

#define ATTN_CACHE_BLOCK 64

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* s[0..n) = softmax(s[0..n)) in place, n ≥ 1. */
static void softmax_row(float *s, int64_t n) {
    const float m = kern_max_inl(s, n);
    float z = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = kern_expf_inl(s[j] - m);
        z += s[j];
    }
    const float inv = 1.0f / z;
    for (int64_t j = 0; j < n; j++) s[j] *= inv;
}

int64_t kern_attn_cached_scratch(int64_t p0, int64_t n, int64_t Nl, int64_t Kl) {
    if (n <= 1) return (Nl / Kl) * (p0 + 1);
    return min64(n, ATTN_CACHE_BLOCK) * (p0 + n);
}

void kern_attn_cached(float *restrict out, float *restrict scratch, const float *restrict q,
                      const float *restrict kc, const float *restrict vc, int64_t p0, int64_t n,
                      int64_t Nl, int64_t Kl, int64_t H, int64_t ldk) {
    const int64_t ldq = Nl * H, G = Nl / Kl;
    const float scale = 1.0f / sqrtf((float)H);
    if (n == 1) {
        const int64_t S = p0 + 1;
        for (int64_t j = 0; j < Kl; j++) {
            kern_gemm(scratch, q + j * G * H, kc + j * H, G, S, H, false, true, H, ldk, S, scale,
                      0.0f);
            for (int64_t g = 0; g < G; g++) softmax_row(scratch + g * S, S);
            kern_gemm(out + j * G * H, scratch, vc + j * H, G, H, S, false, false, S, ldk, H, 1.0f,
                      0.0f);
        }
        return;
    }
    const int64_t ld = p0 + n;
    for (int64_t h = 0; h < Nl; h++) {
        const float *kh = kc + (h / G) * H, *vh = vc + (h / G) * H;
        for (int64_t i0 = 0; i0 < n; i0 += ATTN_CACHE_BLOCK) {
            const int64_t i1 = min64(n, i0 + ATTN_CACHE_BLOCK), keys = p0 + i1;
            kern_gemm(scratch, q + i0 * ldq + h * H, kh, i1 - i0, keys, H, false, true, ldq, ldk,
                      ld, scale, 0.0f);
            for (int64_t i = i0; i < i1; i++) {
                float *s = scratch + (i - i0) * ld;
                softmax_row(s, p0 + i + 1);
                memset(s + p0 + i + 1, 0, (size_t)(keys - p0 - i - 1) * sizeof *s);
            }
            kern_gemm(out + i0 * ldq + h * H, scratch, vh, i1 - i0, H, keys, false, false, ld, ldk,
                      ldq, 1.0f, 0.0f);
        }
    }
}

/* Score of query row qi against key row kj, in double. */
static double dot_d(const float *qi, const float *kj, int64_t H) {
    double s = 0.0;
    for (int64_t d = 0; d < H; d++) s += (double)qi[d] * kj[d];
    return s;
}

void kern_attn_cached_ref(float *out, const float *q, const float *kc, const float *vc, int64_t p0,
                          int64_t n, int64_t Nl, int64_t Kl, int64_t H, int64_t ldk) {
    const int64_t ldq = Nl * H, G = Nl / Kl;
    const double scale = 1.0 / sqrt((double)H);
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < Nl; h++) {
            const float *qi = q + i * ldq + h * H;
            const float *kh = kc + (h / G) * H, *vh = vc + (h / G) * H;
            const int64_t S = p0 + i + 1;
            double m = -INFINITY, z = 0.0;
            for (int64_t j = 0; j < S; j++) m = fmax(m, dot_d(qi, kh + j * ldk, H) * scale);
            for (int64_t j = 0; j < S; j++) z += exp(dot_d(qi, kh + j * ldk, H) * scale - m);
            for (int64_t d = 0; d < H; d++) {
                double o = 0.0;
                for (int64_t j = 0; j < S; j++)
                    o += exp(dot_d(qi, kh + j * ldk, H) * scale - m) * vh[j * ldk + d];
                out[i * ldq + h * H + d] = (float)(o / z);
            }
        }
}

float kern_read_sum(const float *restrict x, int64_t n) {
    /* Eight streams, the buffer's eighths walked side by side, 8 partial sums each. One stream
     * alone leaves the hardware prefetchers short of requests: on a Zen 3 EPYC one stream read
     * 13 GB/s from a 134 MB buffer, eight 23-24 GB/s, and a decode step's matrix-vector products,
     * which read many rows at once, 17; the bound must not sit below what decode reaches. The 64
     * sums keep the additions' latency off the loop. */
    enum { S = 8, W = 8 };
    float acc[S][W] = {{0}};
    const int64_t part = n / S, body = part / W * W;
    for (int64_t i = 0; i < body; i += W)
        for (int s = 0; s < S; s++)
            for (int l = 0; l < W; l++) acc[s][l] += x[s * part + i + l];
    float t = 0;
    for (int s = 0; s < S; s++) {
        for (int64_t i = body; i < part; i++) t += x[s * part + i];
        for (int l = 0; l < W; l++) t += acc[s][l];
    }
    for (int64_t i = S * part; i < n; i++) t += x[i];
    return t;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kern_measure_read_bw(int64_t bytes, double seconds) {
    const int64_t n = bytes / (int64_t)sizeof(float);
    if (n < 1) return 0.0;
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) return 0.0;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i & 7); /* touch every page */
    volatile float sink = kern_read_sum(x, n);
    double best = 0.0, t0 = now_s();
    do {
        const double t = now_s();
        sink += kern_read_sum(x, n);
        const double bw = (double)n * sizeof(float) / (now_s() - t);
        best = bw > best ? bw : best;
    } while (now_s() - t0 < seconds);
    (void)sink;
    free(x);
    return best;
}

int64_t kern_llc_bytes(void) {
    int64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], unit = 0;
        int level = 0;
        long long size = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        const int ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!ok || !(f = fopen(path, "r"))) continue;
        const int got = fscanf(f, "%lld%c", &size, &unit);
        fclose(f);
        if (got < 1 || size <= 0 || level < best_level) continue;
        const int64_t bytes = size * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
        if (level > best_level || bytes > best) best = bytes, best_level = level;
    }
    return best;
}
