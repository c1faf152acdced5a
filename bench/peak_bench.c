#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* peak_bench: the core's arithmetic ceilings, instruction by instruction. Register-only loops (no
 * loads, 24 independent accumulators, so neither memory nor an instruction's latency bounds them)
 * of fp32 fused multiply-adds (vfmadd231ps, 256- and 512-bit) and of bf16 pair dot products
 * (vdpbf16ps, 256- and 512-bit), each where this CPU has it, timed on the thread's CPU clock (a
 * loaded machine's other processes do not add to it) and reported as GFLOP/s (an fma: 2 FLOPs a
 * lane; a vdpbf16ps: 4 a 32-bit lane, two products and their sums). Variants alternate within
 * each round; the table gives the best and the median over the rounds. What a matmul kernel can
 * reach on one core is at most its instruction's figure: on an Intel Xeon (Emerald Rapids, KVM,
 * 2026-12-06) vdpbf16ps ran 85 GFLOP/s against the fp32 fma's 175, so there bf16's peak is half
 * fp32's. AMX's tdpbf16ps is not timed (no AMX machine to check it on). Not a test.
 *
 * usage: peak_bench [--rounds R] [--iters N] (N loop trips of 24 instructions a variant a round) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu.h"

#define ACC 24
#define MAX_ROUNDS 64

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define X86 1
/* The asm statement keeps the compiler from computing the loop's result without running it. */
#define KEEP(v) __asm__ volatile("" : "+v"(v))
#define LOOP(type, init, step, sum, store)                                                         \
    type c[ACC];                                                                                   \
    for (int i = 0; i < ACC; i++) c[i] = init;                                                     \
    for (long r = 0; r < n; r++) {                                                                 \
        _Pragma("GCC unroll 24") for (int i = 0; i < ACC; i++) c[i] = step;                        \
        KEEP(a);                                                                                   \
        KEEP(b);                                                                                   \
    }                                                                                              \
    for (int i = 1; i < ACC; i++) c[0] = sum;                                                      \
    store;

__attribute__((target("avx2,fma"), noinline)) static void fma256(float *out, long n) {
    __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(0.5f);
    LOOP(__m256, _mm256_set1_ps((float)i), _mm256_fmadd_ps(a, b, c[i]), _mm256_add_ps(c[0], c[i]),
         _mm256_storeu_ps(out, c[0]))
}
__attribute__((target("avx512f"), noinline)) static void fma512(float *out, long n) {
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0.5f);
    LOOP(__m512, _mm512_set1_ps((float)i), _mm512_fmadd_ps(a, b, c[i]), _mm512_add_ps(c[0], c[i]),
         _mm512_storeu_ps(out, c[0]))
}
__attribute__((target("avx512f,avx512vl,avx512bf16"), noinline)) static void dp256(float *out,
                                                                                   long n) {
    __m256bh a = (__m256bh)_mm256_set1_epi32(0x3f803f80),
             b = (__m256bh)_mm256_set1_epi32(0x3f003f00);
    LOOP(__m256, _mm256_set1_ps((float)i), _mm256_dpbf16_ps(c[i], a, b), _mm256_add_ps(c[0], c[i]),
         _mm256_storeu_ps(out, c[0]))
}
__attribute__((target("avx512f,avx512bf16"), noinline)) static void dp512(float *out, long n) {
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80),
             b = (__m512bh)_mm512_set1_epi32(0x3f003f00);
    LOOP(__m512, _mm512_set1_ps((float)i), _mm512_dpbf16_ps(c[i], a, b), _mm512_add_ps(c[0], c[i]),
         _mm512_storeu_ps(out, c[0]))
}
#endif

typedef struct {
    const char *name;
    kern_cpu_feature needs;
    double flops; /* FLOPs an instruction */
#if X86
    void (*run)(float *, long);
#endif
    double gflops[MAX_ROUNDS];
} variant;

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    int rounds = 5;
    long iters = 20000000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: peak_bench [--rounds R (1..%d)] [--iters N]\n", MAX_ROUNDS);
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || iters < 1000) {
        fprintf(stderr, "peak_bench: --rounds must be 1..%d and --iters at least 1000\n",
                MAX_ROUNDS);
        return 2;
    }
    char model[64];
    kern_cpu_model(model, sizeof model);
    printf("peak_bench: %s, one thread, %d rounds of %ld x %d instructions a variant (thread CPU "
           "clock)\n",
           model, rounds, iters, ACC);
#if X86
    variant v[] = {{"fp32 fma 256-bit (vfmadd231ps ymm)", KERN_CPU_AVX2_FMA, 16, fma256, {0}},
                   {"fp32 fma 512-bit (vfmadd231ps zmm)", KERN_CPU_AVX512, 32, fma512, {0}},
                   {"bf16 dot 256-bit (vdpbf16ps ymm)", KERN_CPU_AVX512BF16, 32, dp256, {0}},
                   {"bf16 dot 512-bit (vdpbf16ps zmm)", KERN_CPU_AVX512BF16, 64, dp512, {0}}};
    const int nv = (int)(sizeof v / sizeof v[0]);
    float sink[16];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nv; k++) {
            if (!kern_cpu_has(v[k].needs)) continue;
            const double t0 = cpu_seconds();
            v[k].run(sink, iters);
            const double dt = cpu_seconds() - t0;
            v[k].gflops[r] = v[k].flops * ACC * (double)iters / (dt > 0 ? dt : 1e-9) / 1e9;
        }
    printf("| instruction | GFLOP/s best | median |\n|---|---|---|\n");
    for (int k = 0; k < nv; k++) {
        if (!kern_cpu_has(v[k].needs)) {
            printf("| %s | (not on this CPU) | |\n", v[k].name);
            continue;
        }
        qsort(v[k].gflops, (size_t)rounds, sizeof(double), cmp);
        printf("| %s | %.1f | %.1f |\n", v[k].name, v[k].gflops[rounds - 1],
               v[k].gflops[rounds / 2]);
    }
    return sink[0] == 12345.0f; /* reads the sink: the loops' results are used */
#else
    printf("peak_bench: not an x86-64 build: nothing to time\n");
    return 0;
#endif
}
