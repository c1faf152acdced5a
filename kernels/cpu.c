#define _DEFAULT_SOURCE /* syscall() */
/* cpu: cpuid feature bits and brand string, xgetbv for the OS's register state (see cpu.h). */
#include "kernels/cpu.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* XCR0: which register states the OS saves and restores on a context switch. */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* cpuid leaf 7 (subleaf sub) registers; all zero when the leaf does not exist. */
static void leaf7(unsigned sub, unsigned r[4]) {
    r[0] = r[1] = r[2] = r[3] = 0;
    if (__get_cpuid_max(0, NULL) >= 7) __cpuid_count(7, sub, r[0], r[1], r[2], r[3]);
}

static int detect(kern_cpu_feature f) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return 0;
    const uint64_t x = xcr0();
    const int os_ymm = (x & 0x6) == 0x6, os_zmm = (x & 0xe6) == 0xe6,
              os_tile = (x & 0x60000) == 0x60000;
    unsigned l7[4], l71[4];
    leaf7(0, l7);
    leaf7(1, l71);
    const unsigned ebx = l7[1], edx = l7[3];
    const int avx512 = os_zmm && ((ebx >> 16) & 1) /* F */ && ((ebx >> 17) & 1) /* DQ */ &&
                       ((ebx >> 30) & 1) /* BW */ && ((ebx >> 31) & 1) /* VL */;
    switch (f) {
    case KERN_CPU_AVX2_FMA:
        return os_ymm && fma && ((ebx >> 5) & 1);
    case KERN_CPU_AVX512:
        return avx512;
    case KERN_CPU_AVX512BF16:
        return avx512 && ((l71[0] >> 5) & 1);
    case KERN_CPU_AMX_BF16:
        return os_tile && ((edx >> 22) & 1) && ((edx >> 24) & 1);
    default:
        return 0;
    }
}

/* Each answer is read from cpuid once and kept: under a hypervisor every cpuid is a VM exit (tens
 * of microseconds on the KVM guest this was measured on), and the kernels ask per product (a
 * decode step's bf16 products at batch 32 took 650 ms instead of 410 when each asked cpuid).
 * 0 = not asked yet, else 1 + the answer; racing threads store the same value. */
static _Atomic int known[KERN_CPU_FEATURE_COUNT];

int kern_cpu_has(kern_cpu_feature f) {
    if (f < 0 || f >= KERN_CPU_FEATURE_COUNT) return 0;
    int k = atomic_load_explicit(&known[f], memory_order_relaxed);
    if (!k) {
        k = 1 + detect(f);
        atomic_store_explicit(&known[f], k, memory_order_relaxed);
    }
    return k - 1;
}

void kern_cpu_model(char *buf, size_t size) {
    if (size == 0) return;
    char brand[49] = {0};
    unsigned r[12];
    if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
        memcpy(brand, r, 48);
    }
    const char *s = brand;
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == ' ') n--;
    if (n == 0) s = "unknown CPU", n = strlen(s);
    if (n >= size) n = size - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

int kern_cpu_intel(void) {
    unsigned a, v[3];
    if (!__get_cpuid(0, &a, &v[0], &v[2], &v[1])) return 0; /* ebx, edx, ecx: "GenuineIntel" */
    return memcmp(v, "GenuineIntel", 12) == 0;
}

int kern_cpu_amx_grant(void) {
    if (!detect(KERN_CPU_AMX_BF16)) return 0;
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 1; /* no permission step outside Linux */
#endif
}

#else /* not x86-64: no feature, no brand */
int kern_cpu_has(kern_cpu_feature f) {
    (void)f;
    return 0;
}
void kern_cpu_model(char *buf, size_t size) {
    if (size == 0) return;
    const char *s = "unknown CPU";
    size_t n = strlen(s) < size ? strlen(s) : size - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}
int kern_cpu_amx_grant(void) {
    return 0;
}
int kern_cpu_intel(void) {
    return 0;
}
#endif

/* Kept here, not per kernel: the tests flip it for all the kernels built twice. */
static _Atomic int vec_plain;

int kern_cpu_vec_wide(void) {
    return !atomic_load_explicit(&vec_plain, memory_order_relaxed) && kern_cpu_has(KERN_CPU_AVX512);
}

void kern_cpu_vec_plain(int on) {
    atomic_store_explicit(&vec_plain, on != 0, memory_order_relaxed);
}
