/* gemm_bf16_x86: kernel-private, the AVX2 path's shared build pieces for the files that hold its
 * kernels (gemm_bf16_avx2.c, gemm_bf16_panel.c) and the fp32 panel tiles (gemm_f32_panel.c).
 * BF16_X86 is 1 where this build has those kernels (x86-64, GCC or Clang: the target attribute
 * compiles AVX2 code whatever -march says; kern_bf16_path_check and kern_f32_panel_available
 * refuse them elsewhere), and there AVX2 marks a function built for AVX2 and FMA, INL one inlined
 * into its caller. */
#ifndef MT_KERNELS_GEMM_BF16_X86_H
#define MT_KERNELS_GEMM_BF16_X86_H

#if defined(__GNUC__) && defined(__x86_64__)
#define BF16_X86 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))
#define INL __attribute__((always_inline)) inline
#else
#define BF16_X86 0
#endif

#endif
