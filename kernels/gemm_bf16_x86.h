/* gemm_bf16_x86: kernel-private, the AVX2 path's shared build pieces for the files that hold its
 * kernels (gemm_bf16_avx2.c, gemm_bf16_panel.c) and the fp32 panel tiles (gemm_f32_panel.c).
 * BF16_X86 is 1 where this build has those kernels (x86-64, GCC or Clang: the target attribute
 * compiles AVX2 code whatever -march says; kern_bf16_path_check and kern_f32_panel_available
 * refuse them elsewhere), and there AVX2 marks a function built for AVX2 and FMA, INL one inlined
 * into its caller. BF16_X86_512 is 1 where the compiler also knows AVX512-BF16 (GCC 10, Clang 9
 * on): AVX512BF16 marks a function built for it (gemm_bf16_pairs.c), called only on a CPU that has
 * it (kern_cpu_has(KERN_CPU_AVX512BF16): the avx512bf16 path). */
#ifndef MT_KERNELS_GEMM_BF16_X86_H
#define MT_KERNELS_GEMM_BF16_X86_H

#if defined(__GNUC__) && defined(__x86_64__)
#define BF16_X86 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))
#define INL __attribute__((always_inline)) inline
#if defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10
#define BF16_X86_512 1
#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#endif
#else
#define BF16_X86 0
#endif
#ifndef BF16_X86_512
#define BF16_X86_512 0
#endif

#endif
