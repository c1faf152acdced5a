/* Kernel-private (not part of the kernels/ API): an elementwise loop written once, as an
 * always-inlined body (KERN_BODY), and compiled twice by KERN_TWO_COPIES: plainly (SSE2 on x86-64,
 * the kernels are built without -march) and for AVX-512 (KERN_WIDE(bits)), the latter taken where
 * kern_cpu_vec_wide() says so. Both copies run the same C: without -ffast-math the compiler may not
 * reassociate a sum, and with contraction off (ISO C mode for GCC; the pragma below for Clang) it
 * fuses no a·b + c, so the two give the same bits. Depends on kernels/cpu.h. */
#ifndef MT_KERNELS_VECWIDE_H
#define MT_KERNELS_VECWIDE_H
#include "kernels/cpu.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#define KERN_BODY static inline __attribute__((always_inline)) void

#if defined(__GNUC__) && defined(__x86_64__)
#define KERN_WIDE(bits) __attribute__((target("avx512f,avx512dq,prefer-vector-width=" #bits)))
#else
#define KERN_WIDE(bits)
#endif

/* name##_plain and name##_wide, each running name##_body(args) with the parameters params; the
 * latter's vectors bits wide. Mind a loop of 8 float accumulators (kern_dot_inl): at 512 bits GCC
 * keeps their order by transposing 16 iterations and adding one lane at a time (RMSNorm's rows
 * ran 1.7x slower than the plain copy); at 256 it is one ymm, but RMSNorm gained only 3-13% there
 * (its time is the dependent chain of D/8 additions a row), so RMSNorm stays plain. */
#define KERN_TWO_COPIES(name, bits, params, args)                                                  \
    static void name##_plain params {                                                              \
        name##_body args;                                                                          \
    }                                                                                              \
    static KERN_WIDE(bits) void name##_wide params {                                               \
        name##_body args;                                                                          \
    }

/* The copy to run: (KERN_PICK(name) args). */
#define KERN_PICK(name) (kern_cpu_vec_wide() ? name##_wide : name##_plain)
#endif
