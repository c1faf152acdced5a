/* cpu: what this CPU offers the kernels, read from cpuid (no I/O, no allocation): its model name
 * for the start-up plan, and the instruction sets the bf16 kernels choose their path by, each
 * counted only when the OS saves its registers too (xgetbv). AMX tiles need one more step on
 * Linux: the process must ask for the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA)), which the kernel may refuse; kern_cpu_amx_grant asks. On a CPU that is
 * not x86-64 (or a compiler without <cpuid.h>) every feature is absent. Depends on nothing. */
#ifndef MT_KERNELS_CPU_H
#define MT_KERNELS_CPU_H
#include <stddef.h>

typedef enum {
    KERN_CPU_AVX2_FMA,   /* AVX2 and FMA3 (256-bit integer and fused multiply-add) */
    KERN_CPU_AVX512,     /* AVX-512 F, BW, DQ and VL */
    KERN_CPU_AVX512BF16, /* AVX512_BF16 (vdpbf16ps) on top of KERN_CPU_AVX512 */
    KERN_CPU_AMX_BF16,   /* AMX-TILE and AMX-BF16 (the OS's grant is kern_cpu_amx_grant's) */
    KERN_CPU_FEATURE_COUNT
} kern_cpu_feature;

/* 1 if this CPU and its OS support feature f, else 0. */
int kern_cpu_has(kern_cpu_feature f);
/* Writes the CPU's model name (cpuid's brand string, spaces trimmed; "unknown CPU" without one)
 * into buf[size], truncated to fit. The brand string has at most 48 characters. */
void kern_cpu_model(char *buf, size_t size);
/* Asks Linux for the AMX tile data state for this process (idempotent; once granted, every thread
 * may use the tiles). Returns 1 if granted, 0 if the CPU lacks AMX-BF16 or the OS refused. */
int kern_cpu_amx_grant(void);
/* 1 if the kernels built twice (kernels/vecwide.h: SwiGLU, RoPE, AdamW, kern_sumsq) take
 * their AVX-512 copy: the CPU has KERN_CPU_AVX512 and kern_cpu_vec_plain has not asked otherwise.
 */
int kern_cpu_vec_wide(void);
/* Tests: on != 0 makes those kernels take their plain copy (to compare the copies bit for bit). */
void kern_cpu_vec_plain(int on);
/* 1 if the CPU's vendor is Intel (cpuid's "GenuineIntel"), else 0. */
int kern_cpu_intel(void);
#endif
