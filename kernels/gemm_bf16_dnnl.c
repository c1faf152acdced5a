/* The oneDNN paths of kern_gemm_bf16 (amx, avx512bf16): each product is a oneDNN matmul
 * primitive on strided row-major views (a transpose is a swap of strides), dst fp32, accumulation
 * through a sum post-op. Primitives are made on a product's first call and kept in a table keyed
 * by everything that defines them (sizes, strides, transposes, accumulate, data type); the
 * operands' addresses are set on the primitive's memory objects at each call. The same code runs
 * on fp32 operands (f32), which oneDNN implements on every CPU: that is how the glue is tested on
 * a CPU whose oneDNN has no bf16 matmul. Built with oneDNN where CMake found it (MT_HAVE_DNNL);
 * elsewhere the stubs at the end say it is absent. */
#include "kernels/gemm_bf16_impl.h"

#include <stdio.h>

#include "kernels/gemm_bf16.h"

#ifdef MT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdlib.h>

/* One primitive and its memory objects (A, B, C), with the key it was made for. */
typedef struct {
    int64_t M, N, K, lda, ldb, ldc;
    bool ta, tb, acc, f32;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3];
    uint64_t used; /* the call count at its last use (eviction: the smallest) */
} prim_entry;

struct bf16_dnnl {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    prim_entry prims[KERN_BF16_MAX_PRIMS];
    int n;
    uint64_t calls;
};

int bf16_dnnl_built(void) {
    return 1;
}

bf16_dnnl *bf16_dnnl_create(bf16_dnnl_isa isa, int threads, char *msg, size_t size) {
    /* oneDNN takes its ISA cap once a process, before its first use; a second context on the
     * same path (a model's beside the start-up timing's, generate's beside its measurement's)
     * finds it already set and only checks it. */
    static dnnl_cpu_isa_t capped = dnnl_cpu_isa_all;
    if (isa != BF16_DNNL_ANY) {
        const dnnl_cpu_isa_t cap =
            isa == BF16_DNNL_AMX ? dnnl_cpu_isa_avx512_core_amx : dnnl_cpu_isa_avx512_core_bf16;
        if (capped != cap && capped != dnnl_cpu_isa_all) {
            snprintf(msg, size,
                     "oneDNN's ISA is already capped at 0x%x in this process; one process takes "
                     "one bf16 path",
                     (unsigned)capped);
            return NULL;
        }
        /* (a first use, such as the fp32 sgemm of sgemm_lib.c, fixes the cap at the CPU's
         * best: that is this path's where the CPU's best is it) */
        if (capped != cap && dnnl_set_max_cpu_isa(cap) != dnnl_success &&
            dnnl_get_effective_cpu_isa() != cap) {
            snprintf(msg, size,
                     "oneDNN refused to cap its ISA (already in use in this process, or "
                     "ONEDNN_MAX_CPU_ISA set)");
            return NULL;
        }
        capped = cap;
        if (dnnl_get_effective_cpu_isa() != cap) {
            snprintf(msg, size,
                     "oneDNN does not reach the ISA of this path on this CPU (it "
                     "reports 0x%x)",
                     (unsigned)dnnl_get_effective_cpu_isa());
            return NULL;
        }
    }
    bf16_dnnl *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(msg, size, "oneDNN context: out of memory");
        return NULL;
    }
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(msg, size, "oneDNN: no CPU engine or stream");
        bf16_dnnl_destroy(d);
        return NULL;
    }
    omp_set_num_threads(threads);
    return d;
}

static void entry_free(prim_entry *e) {
    for (int i = 0; i < 3; i++)
        if (e->mem[i]) dnnl_memory_destroy(e->mem[i]);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    *e = (prim_entry){0};
}

void bf16_dnnl_destroy(bf16_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) entry_free(&d->prims[i]);
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->eng) dnnl_engine_destroy(d->eng);
    free(d);
}

/* A row-major [rows, cols] view with row stride ld, or (t) the transpose of a stored [cols, rows]
 * one: the same numbers, strides swapped. */
static dnnl_status_t view(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld, bool t,
                          dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : ld, t ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* Makes e's primitive and memory objects for the key already in e. 0, or -1 (e left empty). */
static int entry_make(bf16_dnnl *d, prim_entry *e) {
    const dnnl_data_type_t dt = e->f32 ? dnnl_f32 : dnnl_bf16;
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t mm;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok = view(&md[0], e->M, e->K, e->lda, e->ta, dt) == dnnl_success &&
             view(&md[1], e->K, e->N, e->ldb, e->tb, dt) == dnnl_success &&
             view(&md[2], e->M, e->N, e->ldc, false, dnnl_f32) == dnnl_success &&
             dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && e->acc) /* C += A·B: dst = A·B + 1·dst */
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &mm, attr, d->eng, NULL) == dnnl_success &&
         dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    for (int i = 0; i < 3 && ok; i++)
        ok = dnnl_memory_create(&e->mem[i], &md[i], d->eng, DNNL_MEMORY_NONE) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) entry_free(e);
    return ok ? 0 : -1;
}

/* The table's entry for the key in k: found, or made in a free slot (the least recently used one
 * when the table is full). NULL if oneDNN cannot make it. */
static prim_entry *entry_for(bf16_dnnl *d, const prim_entry *k) {
    int slot = -1;
    for (int i = 0; i < d->n; i++) {
        const prim_entry *e = &d->prims[i];
        if (e->M == k->M && e->N == k->N && e->K == k->K && e->lda == k->lda && e->ldb == k->ldb &&
            e->ldc == k->ldc && e->ta == k->ta && e->tb == k->tb && e->acc == k->acc &&
            e->f32 == k->f32)
            return &d->prims[i];
        if (slot < 0 || e->used < d->prims[slot].used) slot = i;
    }
    if (d->n < KERN_BF16_MAX_PRIMS) slot = d->n++;
    prim_entry *e = &d->prims[slot];
    entry_free(e);
    *e = *k;
    if (entry_make(d, e) == 0) return e;
    if (slot == d->n - 1) d->n--; /* keep the table dense: drop the failed last slot */
    return NULL;
}

int bf16_dnnl_gemm(bf16_dnnl *d, bool f32, float *C, const void *A, const void *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc) {
    const prim_entry key = {M, N, K, lda, ldb, ldc, ta, tb, acc, f32, NULL, {NULL}, 0};
    prim_entry *e = entry_for(d, &key);
    if (!e) return -1;
    e->used = ++d->calls;
    void *const ptr[3] = {(void *)A, (void *)B, C};
    for (int i = 0; i < 3; i++)
        if (dnnl_memory_set_data_handle(e->mem[i], ptr[i]) != dnnl_success) return -1;
    const dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, e->mem[0]}, {DNNL_ARG_WEIGHTS, e->mem[1]}, {DNNL_ARG_DST, e->mem[2]}};
    if (dnnl_primitive_execute(e->prim, d->stream, 3, args) != dnnl_success) return -1;
    return dnnl_stream_wait(d->stream) == dnnl_success ? 0 : -1;
}

#else /* built without oneDNN */
int bf16_dnnl_built(void) {
    return 0;
}
bf16_dnnl *bf16_dnnl_create(bf16_dnnl_isa isa, int threads, char *msg, size_t size) {
    (void)isa, (void)threads;
    snprintf(msg, size, "this build has no oneDNN (libdnnl-dev)");
    return NULL;
}
void bf16_dnnl_destroy(bf16_dnnl *d) {
    (void)d;
}
int bf16_dnnl_gemm(bf16_dnnl *d, bool f32, float *C, const void *A, const void *B, int64_t M,
                   int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
                   bool acc) {
    (void)d, (void)f32, (void)C, (void)A, (void)B, (void)M, (void)N, (void)K, (void)ta, (void)tb;
    (void)lda, (void)ldb, (void)ldc, (void)acc;
    return -1;
}
#endif
