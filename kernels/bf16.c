/* bf16 conversions (see bf16.h): the scalar forms of bf16_inl.h, and array forms in AVX2 (16
 * values a step) where the CPU has it, else the scalar loop (which GCC vectorises with SSE2);
 * fp32 → bf16 in AVX-512 (16 values a register) where the CPU has that. All compute the same
 * integer expression, so they give the same bits. */
#include "kernels/bf16.h"

#include "kernels/bf16_inl.h"

kern_bf16 kern_bf16_of(float x) {
    return kern_bf16_of_inl(x);
}

float kern_bf16_val(kern_bf16 h) {
    return kern_bf16_val_inl(h);
}

float kern_bf16_round(float x) {
    return kern_bf16_round_inl(x);
}

static void pack_plain(kern_bf16 *restrict out, const float *restrict in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = kern_bf16_of_inl(in[i]);
}

static void unpack_plain(float *restrict out, const kern_bf16 *restrict in, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = kern_bf16_val_inl(in[i]);
}

static void round_plain(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = kern_bf16_round_inl(x[i]);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define BF_AVX2 __attribute__((target("avx2")))

/* What the array forms run here, asked once (the CPU does not change while the program runs): 2
 * AVX-512 F and BW (with AVX2), 1 AVX2, 0 neither. This file is a leaf library of its own (mesh/
 * links it), so it asks the compiler's cpu builtins, not kernels/cpu.h. */
static int simd_level(void) {
    static int level = -1;
    if (level < 0) {
        __builtin_cpu_init();
        const int avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
        level = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                    ? 2
                    : avx2;
    }
    return level;
}

/* kern_bf16_round_bits_inl on 8 lanes. */
static BF_AVX2 inline __m256i round_bits8(__m256i u) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

static BF_AVX2 void pack_avx2(kern_bf16 *restrict out, const float *restrict in, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a =
            _mm256_srli_epi32(round_bits8(_mm256_loadu_si256((const void *)(in + i))), 16);
        const __m256i b =
            _mm256_srli_epi32(round_bits8(_mm256_loadu_si256((const void *)(in + i + 8))), 16);
        /* packus works within 128-bit lanes: a0-3 b0-3 a4-7 b4-7; the permute restores order */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((void *)(out + i), p);
    }
    pack_plain(out + i, in + i, n - i);
}

#define BF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* round_bits8 on 16 lanes, the NaN blend a masked or. */
static BF_AVX512 inline __m512i round_bits16(__m512i u) {
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, is_nan, u, _mm512_set1_epi32(0x00400000));
}

/* The model's activations and gradients (millions of values a layer): twice pack_avx2's values
 * an instruction, the top halves narrowed by one vpmovdw. */
static BF_AVX512 void pack_avx512(kern_bf16 *restrict out, const float *restrict in, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i a = _mm512_srli_epi32(round_bits16(_mm512_loadu_si512(in + i)), 16);
        const __m512i b = _mm512_srli_epi32(round_bits16(_mm512_loadu_si512(in + i + 16)), 16);
        _mm256_storeu_si256((void *)(out + i), _mm512_cvtepi32_epi16(a));
        _mm256_storeu_si256((void *)(out + i + 16), _mm512_cvtepi32_epi16(b));
    }
    pack_avx2(out + i, in + i, n - i);
}

static BF_AVX2 void unpack_avx2(float *restrict out, const kern_bf16 *restrict in, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(in + i)));
        _mm256_storeu_si256((void *)(out + i), _mm256_slli_epi32(h, 16));
    }
    unpack_plain(out + i, in + i, n - i);
}

static BF_AVX2 void round_avx2(float *x, int64_t n) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256((const void *)(x + i));
        _mm256_storeu_si256((void *)(x + i), _mm256_and_si256(round_bits8(u), hi));
    }
    round_plain(x + i, n - i);
}

void kern_bf16_pack(kern_bf16 *restrict out, const float *restrict in, int64_t n) {
    if (simd_level() == 2)
        pack_avx512(out, in, n);
    else if (simd_level() == 1)
        pack_avx2(out, in, n);
    else
        pack_plain(out, in, n);
}

void kern_bf16_unpack(float *restrict out, const kern_bf16 *restrict in, int64_t n) {
    if (simd_level() >= 1)
        unpack_avx2(out, in, n);
    else
        unpack_plain(out, in, n);
}

void kern_bf16_round_array(float *x, int64_t n) {
    if (simd_level() >= 1)
        round_avx2(x, n);
    else
        round_plain(x, n);
}

#else /* not x86-64 with GCC or Clang: the scalar loops */
void kern_bf16_pack(kern_bf16 *restrict out, const float *restrict in, int64_t n) {
    pack_plain(out, in, n);
}
void kern_bf16_unpack(float *restrict out, const kern_bf16 *restrict in, int64_t n) {
    unpack_plain(out, in, n);
}
void kern_bf16_round_array(float *x, int64_t n) {
    round_plain(x, n);
}
#endif
