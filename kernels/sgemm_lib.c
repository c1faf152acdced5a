/* sgemm_lib: OpenBLAS or oneDNN for kern_gemm's fp32 products (see sgemm_lib.h). */
#include "kernels/sgemm_lib.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu.h"

#ifdef MT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#define HAVE_ONEDNN 1
#else
#define HAVE_ONEDNN 0
#endif

char *openblas_get_corename(void);

/* OpenBLAS's cores with AVX-512 kernels (its names, any case). */
static int openblas_avx512_core(const char *core) {
    static const char *const names[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (core && strcasecmp(core, names[i]) == 0) return 1;
    return 0;
}

static int resolved = -1; /* kern_sgemm_lib, once resolved */
static char why[160];

int kern_sgemm_lib_check(kern_sgemm_lib *lib, char *msg, size_t size) {
    static int rc;
    if (resolved >= 0) {
        *lib = (kern_sgemm_lib)resolved;
        if (rc) snprintf(msg, size, "%s", why);
        return rc;
    }
    const char *v = getenv(KERN_SGEMM_ENV);
    const char *core = openblas_get_corename();
    resolved = KERN_SGEMM_OPENBLAS;
    if (v && *v && strcmp(v, "auto") != 0) {
        if (strcmp(v, "openblas") == 0) {
            snprintf(why, sizeof why, "OpenBLAS (%s kernels; %s=openblas)", core, KERN_SGEMM_ENV);
        } else if (strcmp(v, "onednn") == 0 && HAVE_ONEDNN) {
            resolved = KERN_SGEMM_ONEDNN;
            snprintf(why, sizeof why, "oneDNN's sgemm (%s=onednn)", KERN_SGEMM_ENV);
        } else {
            rc = -1;
            snprintf(why, sizeof why,
                     strcmp(v, "onednn") == 0
                         ? "%s=%s: this build has no oneDNN (libdnnl-dev)"
                         : "%s=%s: unknown fp32 matmul library (known: auto, openblas, onednn)",
                     KERN_SGEMM_ENV, v);
        }
    } else if (HAVE_ONEDNN && kern_cpu_has(KERN_CPU_AVX512) && !openblas_avx512_core(core)) {
        resolved = KERN_SGEMM_ONEDNN;
        snprintf(why, sizeof why,
                 "oneDNN's sgemm (OpenBLAS took its %s kernels on this AVX-512 CPU)", core);
    } else {
        snprintf(why, sizeof why, "OpenBLAS (%s kernels)", core);
    }
    *lib = (kern_sgemm_lib)resolved;
    if (rc) snprintf(msg, size, "%s", why);
    return rc;
}

kern_sgemm_lib kern_sgemm_lib_get(void) {
    if (resolved < 0) {
        kern_sgemm_lib lib;
        char msg[sizeof why];
        kern_sgemm_lib_check(&lib, msg, sizeof msg);
    }
    return (kern_sgemm_lib)resolved;
}

void kern_sgemm_lib_describe(char *buf, size_t size) {
    (void)kern_sgemm_lib_get();
    snprintf(buf, size, "%s", why);
}

#if HAVE_ONEDNN
int kern_sgemm_onednn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                      bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                      float beta) {
    /* oneDNN threads with OpenMP, whose default is a thread per CPU: follow OpenBLAS's count
     * (kern_set_threads, OPENBLAS_NUM_THREADS), or ranks sharing cores spin on each other */
    const int want = openblas_get_num_threads();
    if (omp_get_max_threads() != want) omp_set_num_threads(want);
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                      ldc) == dnnl_success
               ? 0
               : -1;
}
#else
int kern_sgemm_onednn(float *C, const float *A, const float *B, int64_t M, int64_t N, int64_t K,
                      bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha,
                      float beta) {
    (void)C, (void)A, (void)B, (void)M, (void)N, (void)K, (void)ta, (void)tb, (void)lda;
    (void)ldb, (void)ldc, (void)alpha, (void)beta;
    return -1;
}
#endif
