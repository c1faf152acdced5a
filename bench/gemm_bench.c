#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* gemm_bench: GFLOP/s of the fp32 matmul (kern_gemm: OpenBLAS, or gemm_nn on AVX-512) and of the
 * bf16 matmul on each bf16 path this CPU has (kern_gemm_bf16), on meshtrain's shapes: the
 * forward, dX and dW products of configs (a) L=4 D=256 N=K=4 F=1024 T=128 B=16 and (b) L=8 D=512
 * N=K=8 F=2048 T=256 B=8 (B·T = 2048 rows; the products [BT,D]·[D,D], [BT,D]·[D,F] and
 * [BT,F]·[F,D]), inference's prefill (M = 32, 64, 128 and 2048 rows against the weights of
 * bench/infer_bench.sh's model, D=512 F=1408 V=256, and of F=2048), and decode's rows (M = 1, 8,
 * 32) against a weight far past the last-level cache, whose read rate is reported as GB/s beside
 * the machine's read bandwidth (kern_measure_read_bw on a buffer as large). Variants alternate
 * product by product within each round, so that all see the same machine; the table gives the
 * minimum and the median time over the rounds, as GFLOP/s. One thread (--threads: OpenBLAS's and
 * the bf16 contexts'). Where the CPU has AVX2 and FMA, the variant "fp32 panels" times the
 * forward's products (untransposed) on a copy of the weight packed beforehand (kern_f32_panel_gemm:
 * what kern_gemm_ctx runs on a copy registered on its context), beside "fp32 kern_gemm" on the
 * weight as it is. Likewise "bf16 P copy" for a bf16 path P whose context reads panel copies (avx2,
 * avx512bf16: kern_bf16_ctx_panels): the weight's copy in P's layout registered, as inference does
 * (avx2: one-row products read it; avx512bf16: every product, on its own vdpbf16ps kernel). Not a
 * test: nothing is asserted.
 *
 * usage: gemm_bench [--rounds R] [--paths avx2,portable,...] [--decode-mb MB] [--csv FILE]
 *                   [--decode-rows M,M,...]
 *                   [--no-train] [--no-prefill] [--no-decode] [--cpu-clock] [--threads N]
 * --paths: the bf16 paths to time (default: every path this CPU has; one oneDNN path at most,
 * since oneDNN's ISA cap is per process). --decode-mb: the bf16 weight's size (default 256 MB;
 * its fp32 copy is twice that). CSV columns: part,shape,product,variant,min_ms,median_ms,gflops,gbs
 * (gflops and gbs from the median; gbs: the weight's bytes read per second, decode only); the file
 * is this run's alone (a second live writer is refused) and ends on a whole row even on a full
 * disk (data/linefile.h), which ends the run with status 2. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/linefile.h"
#include "data/lockfile.h"
#include "data/paths.h"
#include "kernels/attn_cache.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

#define MAX_VARIANTS 8
#define MAX_ROUNDS 64

typedef struct {
    char name[32];
    kern_bf16_ctx *ctx; /* NULL: fp32 */
    int packed;         /* fp32 on the weight's panel copy (forward products only) */
    int copy;           /* bf16 with the weight's panel copy registered on ctx (its layout) */
} variant;

typedef struct {
    variant v[MAX_VARIANTS];
    int nv, rounds;
    linefile *csv;        /* --csv */
    const char *csv_path; /* its path, for messages */
} bench;

static void csv_row(bench *bn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The clock: monotonic, or (--cpu-clock) the thread's CPU time, which a loaded machine's other
 * processes do not add to (they still evict caches). */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *alloc_or_die(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "gemm_bench: out of memory for %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* The operands of one product shape C[M,N] = op(A)·op(B), in fp32 and in bf16. */
typedef struct {
    int64_t M, N, K;
    bool ta, tb, acc;
    float *a, *b, *c, *pb; /* pb: B's panel copy (untransposed B, AVX2) */
    kern_bf16 *ha, *hb;
} operands;

static void operands_make(operands *o, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                          bool acc) {
    *o = (operands){M, N, K, ta, tb, acc, NULL, NULL, NULL, NULL, NULL, NULL};
    o->a = alloc_or_die((size_t)(M * K) * sizeof(float));
    o->b = alloc_or_die((size_t)(K * N) * sizeof(float));
    o->c = alloc_or_die((size_t)(M * N) * sizeof(float));
    o->ha = alloc_or_die((size_t)(M * K) * sizeof(kern_bf16));
    o->hb = alloc_or_die((size_t)(K * N) * sizeof(kern_bf16));
    for (int64_t i = 0; i < M * K; i++) o->a[i] = (float)((i * 7 % 13) - 6) / 13.0f;
    for (int64_t i = 0; i < K * N; i++) o->b[i] = (float)((i * 5 % 11) - 5) / 11.0f;
    for (int64_t i = 0; i < M * N; i++) o->c[i] = 0.0f;
    kern_bf16_pack(o->ha, o->a, M * K);
    kern_bf16_pack(o->hb, o->b, K * N);
    if (!tb && kern_f32_panel_available()) {
        o->pb = alloc_or_die((size_t)kern_f32_panel_elems(K, N) * sizeof(float));
        kern_f32_panel_pack(o->pb, o->b, K, N, N);
    }
}

static void operands_free(operands *o) {
    free(o->a), free(o->b), free(o->c), free(o->pb), free(o->ha), free(o->hb);
}

static double run(const variant *v, operands *o) {
    const int64_t lda = o->ta ? o->M : o->K, ldb = o->tb ? o->K : o->N;
    const double t0 = now_s();
    if (v->packed)
        kern_f32_panel_gemm(o->c, o->a, o->pb, 16 * o->K, o->M, o->N, o->K, lda, o->N, o->acc);
    else if (v->ctx)
        kern_gemm_bf16(v->ctx, o->c, o->ha, o->hb, o->M, o->N, o->K, o->ta, o->tb, lda, ldb, o->N,
                       o->acc);
    else
        kern_gemm(o->c, o->a, o->b, o->M, o->N, o->K, o->ta, o->tb, lda, ldb, o->N, 1.0f,
                  o->acc ? 1.0f : 0.0f);
    return now_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times every variant on o, alternating, and prints (and writes) one row per variant. wbytes:
 * the bytes of B read per product by the fp32 and the bf16 variants (decode; 0: no GB/s). */
static void time_product(bench *bn, const char *part, const char *shape, const char *product,
                         operands *o, double wbytes) {
    double t[MAX_VARIANTS][MAX_ROUNDS];
    int skip[MAX_VARIANTS]; /* the panel variant on a product with A transposed or no copy */
    kern_bf16 *copy[MAX_VARIANTS] = {NULL};
    for (int v = 0; v < bn->nv; v++) {
        skip[v] = (bn->v[v].packed && (o->ta || !o->pb)) || (bn->v[v].copy && (o->ta || o->tb));
        if (skip[v] || !bn->v[v].copy) continue;
        const kern_bf16_panel_layout l = kern_bf16_ctx_panels(bn->v[v].ctx);
        copy[v] = kern_bf16_panel_alloc(kern_bf16_panel_elems(l, o->K, o->N));
        if (!copy[v]) {
            fprintf(stderr, "gemm_bench: out of memory for a panel copy\n");
            exit(1);
        }
        kern_bf16_panel_pack(l, copy[v], o->hb, o->K, o->N, o->N);
        (void)kern_bf16_ctx_add_panel(bn->v[v].ctx, o->hb, o->K, o->N, o->N, copy[v]);
    }
    for (int v = 0; v < bn->nv; v++)
        if (!skip[v]) run(&bn->v[v], o); /* warm-up: primitives, pages */
    for (int r = 0; r < bn->rounds; r++)
        for (int v = 0; v < bn->nv; v++) t[v][r] = skip[v] ? 0.0 : run(&bn->v[v], o);
    for (int v = 0; v < bn->nv; v++)
        if (copy[v]) kern_bf16_ctx_clear_panels(bn->v[v].ctx), free(copy[v]);
    const double flops = 2.0 * (double)o->M * (double)o->N * (double)o->K;
    for (int v = 0; v < bn->nv; v++) {
        if (skip[v]) continue;
        qsort(t[v], (size_t)bn->rounds, sizeof(double), cmp_double);
        const double med = t[v][bn->rounds / 2], mn = t[v][0];
        const double bytes = wbytes * (bn->v[v].ctx ? 1.0 : 2.0);
        char gbs[32] = "";
        if (wbytes > 0) snprintf(gbs, sizeof gbs, "%7.1f GB/s", bytes / med * 1e-9);
        printf("%-6s %-22s %-4s %-16s %9.3f %9.3f ms %8.1f GFLOP/s %s\n", part, shape, product,
               bn->v[v].name, mn * 1e3, med * 1e3, flops / med * 1e-9, gbs);
        csv_row(bn, "%s,%s,%s,%s,%.6f,%.6f,%.3f,%.3f\n", part, shape, product, bn->v[v].name,
                mn * 1e3, med * 1e3, flops / med * 1e-9, wbytes > 0 ? bytes / med * 1e-9 : 0.0);
    }
    fflush(stdout);
}

/* A training config's three product shapes, each as forward (y = x·w), dX (dx = dy·wᵀ) and dW
 * (dw += xᵀ·dy), with M = B·T. */
static void train_part(bench *bn, const char *cfg, int64_t BT, int64_t D, int64_t F) {
    const int64_t kn[3][2] = {{D, D}, {D, F}, {F, D}};
    for (int s = 0; s < 3; s++) {
        const int64_t K = kn[s][0], N = kn[s][1];
        char shape[64];
        snprintf(shape, sizeof shape, "%s %lldx%lldx%lld", cfg, (long long)BT, (long long)K,
                 (long long)N);
        operands o;
        operands_make(&o, BT, N, K, false, false, false); /* y[BT,N] = x[BT,K]·w[K,N] */
        time_product(bn, "train", shape, "fwd", &o, 0);
        operands_free(&o);
        operands_make(&o, BT, K, N, false, true, false); /* dx[BT,K] = dy[BT,N]·w[K,N]ᵀ */
        time_product(bn, "train", shape, "dx", &o, 0);
        operands_free(&o);
        operands_make(&o, K, N, BT, true, false, true); /* dw[K,N] += x[BT,K]ᵀ·dy[BT,N] */
        time_product(bn, "train", shape, "dw", &o, 0);
        operands_free(&o);
    }
}

/* Inference's prefill: y = x·w for M rows against the weights [K, N] of bench/infer_bench.sh's
 * model (D=512 F=1408 V=256: its q/k/v/o, gate/up, down and unembedding) and of F=2048. */
static void prefill_part(bench *bn) {
    static const int64_t ms[4] = {32, 64, 128, 2048};
    static const int64_t kn[6][2] = {{512, 512},  {512, 1408}, {1408, 512},
                                     {512, 2048}, {2048, 512}, {512, 256}};
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 6; s++) {
            operands o;
            operands_make(&o, ms[i], kn[s][1], kn[s][0], false, false, false);
            char shape[64];
            snprintf(shape, sizeof shape, "M=%lld %lldx%lld", (long long)ms[i], (long long)kn[s][0],
                     (long long)kn[s][1]);
            time_product(bn, "prefill", shape, "fwd", &o, 0);
            operands_free(&o);
        }
}

/* Decode: y[M,N] = x[M,K]·w[K,N] with w of wbytes in bf16, for each M of rows (--decode-rows:
 * 1, 8, 32 by default). */
static void decode_part(bench *bn, double mb, const char *rows) {
    const int64_t K = 8192, N = (int64_t)(mb * 1e6 / 2.0 / (double)K) / 16 * 16;
    const double wbytes = 2.0 * (double)K * (double)N;
    const double bw = kern_measure_read_bw((int64_t)(2.0 * wbytes), 2.0);
    printf("decode: weight %lldx%lld, %.0f MB in bf16 (%.0f MB fp32); read bandwidth %.1f GB/s "
           "(kern_measure_read_bw, %.0f MB)\n",
           (long long)K, (long long)N, wbytes * 1e-6, 2 * wbytes * 1e-6, bw * 1e-9,
           2 * wbytes * 1e-6);
    csv_row(bn, "decode,read_bw,-,kern_read_sum,0,0,0,%.3f\n", bw * 1e-9);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", rows);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const int64_t M = atoll(tok);
        if (M < 1 || M > 4096) continue;
        operands o;
        operands_make(&o, M, N, K, false, false, false);
        char shape[64];
        snprintf(shape, sizeof shape, "M=%lld %lldx%lld", (long long)M, (long long)K, (long long)N);
        time_product(bn, "decode", shape, "fwd", &o, wbytes);
        operands_free(&o);
    }
}

/* Adds the bf16 variants of the comma-separated list (NULL: every path this CPU has). */
static void add_paths(bench *bn, const char *list, int threads) {
    char buf[128], msg[256];
    snprintf(buf, sizeof buf, "%s", list ? list : "amx,avx512bf16,avx512,avx2,portable");
    int dnnl_used = 0;
    for (char *tok = strtok(buf, ","); tok && bn->nv < MAX_VARIANTS; tok = strtok(NULL, ",")) {
        kern_bf16_path p = KERN_BF16_PATH_COUNT, r;
        for (int q = 1; q < KERN_BF16_PATH_COUNT; q++)
            if (strcmp(tok, kern_bf16_path_name((kern_bf16_path)q)) == 0) p = (kern_bf16_path)q;
        if (p == KERN_BF16_PATH_COUNT || kern_bf16_path_check(p, &r, msg, sizeof msg)) {
            if (list) fprintf(stderr, "gemm_bench: %s\n", p == KERN_BF16_PATH_COUNT ? tok : msg);
            continue;
        }
        const int dnnl = p == KERN_BF16_AMX || p == KERN_BF16_AVX512BF16;
        if (dnnl && dnnl_used++) continue; /* oneDNN's ISA cap: one oneDNN path per process */
        kern_bf16_ctx *ctx = kern_bf16_ctx_create(p, threads, msg, sizeof msg);
        if (!ctx) {
            fprintf(stderr, "gemm_bench: %s\n", msg);
            continue;
        }
        bn->v[bn->nv].ctx = ctx;
        snprintf(bn->v[bn->nv++].name, sizeof bn->v[0].name, "bf16 %s", tok);
        if (!kern_bf16_ctx_panels(ctx) || bn->nv == MAX_VARIANTS) continue;
        /* the same path reading the weight's panel copy (inference's products) */
        if (!(bn->v[bn->nv].ctx = kern_bf16_ctx_create(p, threads, msg, sizeof msg))) continue;
        bn->v[bn->nv].copy = 1;
        snprintf(bn->v[bn->nv++].name, sizeof bn->v[0].name, "bf16 %s copy", tok);
    }
}

/* One CSV row, whole (data/linefile.h); a failed write ends the run at once, with status 2 (the
 * file ends on its last whole row). */
static void csv_row(bench *bn, const char *fmt, ...) {
    if (!bn->csv) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const int rc = linefile_write(bn->csv, line, strlen(line));
    if (rc == 0) return;
    fprintf(stderr,
            "gemm_bench: error: --csv %s: writing failed (%s); the file ends on its last "
            "whole row\n",
            bn->csv_path, strerror(-rc));
    exit(2);
}

/* --csv FILE, before any work: writable, this run's alone, opened. NULL after a message. */
static linefile *open_csv(const char *csv) {
    char why[512], err[1024];
    if (paths_can_write(csv, why, sizeof why) < 0) {
        fprintf(stderr, "gemm_bench: error: --csv %s: cannot create it (%s)\n", csv, why);
        return NULL;
    }
    if (lockfile_output(csv, "--csv", err, sizeof err) < 0) {
        fprintf(stderr, "gemm_bench: error: %s\n", err);
        return NULL;
    }
    linefile *f = linefile_open(csv, 0, why, sizeof why);
    if (!f) fprintf(stderr, "gemm_bench: error: --csv %s: cannot write it (%s)\n", csv, why);
    return f;
}

/* A whole number in [lo, hi] from v: 0, or −1 after a message naming the flag and the range. */
static int whole(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "gemm_bench: error: %s %s: expected a whole number from %ld to %ld\n", flag,
                v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int main(int argc, char **argv) {
    bench bn = {.nv = 1, .rounds = 5};
    snprintf(bn.v[0].name, sizeof bn.v[0].name, "fp32 kern_gemm");
    const char *paths = NULL, *csv = NULL, *rows = "1,8,32";
    double mb = 256;
    int train = 1, prefill = 1, decode = 1, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            if (whole("--rounds", argv[++i], 1, MAX_ROUNDS, &bn.rounds) < 0) return 2;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (whole("--threads", argv[++i], 1, 256, &threads) < 0) return 2;
        } else if (!strcmp(argv[i], "--paths") && i + 1 < argc)
            paths = argv[++i];
        else if (!strcmp(argv[i], "--decode-mb") && i + 1 < argc)
            mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--decode-rows") && i + 1 < argc)
            rows = argv[++i];
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else if (!strcmp(argv[i], "--no-train"))
            train = 0;
        else if (!strcmp(argv[i], "--no-prefill"))
            prefill = 0;
        else if (!strcmp(argv[i], "--no-decode"))
            decode = 0;
        else if (!strcmp(argv[i], "--cpu-clock"))
            clock_id = CLOCK_THREAD_CPUTIME_ID;
        else {
            fprintf(stderr, "usage: gemm_bench [--rounds R] [--paths avx2,portable,...] "
                            "[--decode-mb MB] [--decode-rows 1,8,32] [--csv FILE] [--no-train] "
                            "[--no-prefill] [--no-decode] [--cpu-clock] [--threads N]\n");
            return 2;
        }
    }
    if (bn.rounds < 1 || bn.rounds > MAX_ROUNDS || mb < 1 || threads < 1 || threads > 256) {
        fprintf(stderr, "gemm_bench: --rounds must be 1..%d, --decode-mb ≥ 1, --threads 1..256\n",
                MAX_ROUNDS);
        return 2;
    }
    kern_set_threads(threads);
    if (kern_f32_panel_available()) {
        bn.v[bn.nv].packed = 1;
        snprintf(bn.v[bn.nv++].name, sizeof bn.v[0].name, "fp32 panels");
    }
    add_paths(&bn, paths, threads);
    if (csv && !(bn.csv = open_csv(csv))) return 2;
    bn.csv_path = csv;
    char cpu[64];
    kern_cpu_model(cpu, sizeof cpu);
    printf("gemm_bench on %s, %d thread(s), %d rounds, %s clock (min and median ms; GFLOP/s and "
           "GB/s of the median)\n",
           cpu, threads, bn.rounds, clock_id == CLOCK_MONOTONIC ? "monotonic" : "thread CPU");
    csv_row(&bn, "part,shape,product,variant,min_ms,median_ms,gflops,gbs\n");
    if (train) {
        train_part(&bn, "(a)", 2048, 256, 1024);
        train_part(&bn, "(b)", 2048, 512, 2048);
    }
    if (prefill) prefill_part(&bn);
    if (decode) decode_part(&bn, mb, rows);
    for (int v = 1; v < bn.nv; v++) kern_bf16_ctx_destroy(bn.v[v].ctx);
    if (linefile_close(bn.csv) < 0) {
        fprintf(stderr, "gemm_bench: error: --csv %s: closing it failed\n", csv);
        return 2;
    }
    return 0;
}
