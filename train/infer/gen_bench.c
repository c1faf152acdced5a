/* gen_bench: `meshtrain generate --bench`, the decode roofline. For each batch B of
 * --bench-batches: B synthetic prompts of --bench-prompt bytes, prefill (timed after one untimed
 * prefill), then --tokens − 1 decode steps; the step time's minimum and median beside the book's
 * prediction
 * T = B·KV/BW + max(2·B·P/C, P_bytes/BW). While memory-bound the step time is flat in B (every
 * step reads all weights once); once 2·B·P/C exceeds P_bytes/BW it grows linearly. The book's
 * B_crit = P_bytes·C / (2·P·BW) is where the two meet; the measured one is where the flat level
 * (the smallest batch's fastest step) meets the FLOP-bound line B·T(B_max)/B_max, the book's
 * T = B·(KV/BW + 2P/C) through the origin, fitted at the largest batch. CSV columns (times in
 * ms, bytes in MB = 1e6 B, per step, totals over ranks): batch, prefill_ms, ms_min, ms_median,
 * ms_book, ms_book_memory, ms_book_flops, tok_per_s, weight_mb, kv_mb, gb_per_s, gflop_per_s. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/linefile.h"
#include "mesh/errmsg.h"

#include "kernels/attn_cache.h"
#include "kernels/gemm.h"
#include "kernels/rng.h"
#include "mesh/coll.h"
#include "train/infer/gen_cli.h"
#include "train/step/precision.h"

/* ---------------------------------------------------------------- the machine and the
 * prediction (also used by the one-batch run of gen_cli.c) */

gen_machine gen_measure_machine(mesh *m, int quick) {
    /* the read bandwidth from memory: a buffer of at least 4 x the last-level cache (128 MiB at
     * least), or part of it would be read from the cache */
    const int64_t llc = kern_llc_bytes();
    int64_t buf = (int64_t)(quick ? 16 : 128) << 20; /* (MiB) */
    if (!quick && 4 * llc > buf) buf = 4 * llc;
    mesh_agree(mesh_world_comm(m), 0);
    double bw = kern_measure_read_bw(buf, quick ? 0.02 : 0.3), fl = 0;
    for (int trial = 0; trial < (quick ? 1 : 3); trial++) {
        const double f = kern_measure_flops_fwd(quick ? 256 : 1024, quick ? 0.01 : 0.1,
                                                model_f32_panels());
        fl = f > fl ? f : fl;
    }
    float in[2] = {(float)bw, (float)fl}, out[2];
    mesh_all_reduce(m, mesh_all_axes(m), out, in, 2, MESH_ALG_MPI);
    return (gen_machine){out[0], out[1], (double)buf, (double)llc, COMPUTE_FP32};
}

gen_machine gen_machine_dtype(const gen_machine *mc, compute_dtype d, double bf16_flops) {
    gen_machine out = *mc;
    if (d == COMPUTE_BF16) out.flops = bf16_flops, out.flops_dtype = COMPUTE_BF16;
    return out;
}

gen_machine gen_measure_machine_dtype(const config *c, mesh *m) {
    const gen_machine mc = gen_measure_machine(m, c->quick_start);
    precision p;
    char err[512] = "";
    if (precision_setup(&p, c, m, 0, 0, err, sizeof err) < 0) mesh_exit_error("%s", err);
    float in = 0, out = 0;
    if (p.dtype == COMPUTE_BF16) {
        mesh_agree(mesh_world_comm(m), 0); /* every rank at once, as the sgemm rate is timed */
        for (int trial = 0; trial < (c->quick_start ? 1 : 3); trial++) {
            const double f = kern_bf16_measure_flops_fwd(p.ctx, c->quick_start ? 256 : 1024,
                                                         c->quick_start ? 0.01 : 0.1);
            in = (float)f > in ? (float)f : in;
        }
        mesh_all_reduce(m, mesh_all_axes(m), &out, &in, 1, MESH_ALG_MPI);
    }
    const compute_dtype d = p.dtype;
    precision_free(&p);
    return gen_machine_dtype(&mc, d, out);
}

gen_step gen_step_total(mesh *m, const gen_step *st) {
    float in[5] = {(float)st->seconds, (float)st->rows, (float)st->p_bytes, (float)st->kv_bytes,
                   (float)st->flops};
    float out[5];
    mesh_all_reduce(m, mesh_all_axes(m), out, in, 5, MESH_ALG_MPI);
    return (gen_step){st->seconds, out[1], out[2], out[3], out[4]};
}

double gen_predict(const gen_step *st, const gen_machine *mc) {
    const double flop_t = st->flops / mc->flops, mem_t = st->p_bytes / mc->bw;
    return st->kv_bytes / mc->bw + (flop_t > mem_t ? flop_t : mem_t);
}

typedef struct {
    int64_t B;
    double ms_prefill, ms_min, ms_med, ms_book, ms_mem, ms_flop;
    gen_step t;     /* totals of the median step */
    float panel_mb; /* the model's panel copies (model_panel_bytes), MB summed over ranks */
} bench_row;

static int cmp_step(const void *a, const void *b) {
    const double x = ((const gen_step *)a)->seconds, y = ((const gen_step *)b)->seconds;
    return (x > y) - (x < y);
}

/* The request of batch B: B prompts of --bench-prompt bytes, then --tokens new ones. */
static gen_dims bench_dims(const gen_flags *f, int64_t B) {
    const int64_t S = f->bench_prompt + f->tokens;
    gen_dims d = {B, S, B * f->bench_prompt < 1024 ? B * f->bench_prompt : 1024, f->kv_replicate};
    if (d.max_rows < S) d.max_rows = S;
    if (d.max_rows < B) d.max_rows = B;
    return d;
}

/* One batch size: B prompts, prefill, decode; the row of the table. */
static bench_row bench_one(const config *c, const gen_flags *f, mesh *m, const gen_machine *mc,
                           int64_t B) {
    char err[512];
    prompt_set ps = {0};
    char *text = malloc((size_t)f->bench_prompt + 1);
    CHECK(text, "bench: out of memory");
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < f->bench_prompt; i++)
            text[i] =
                (char)(32 + (int)(95 * kern_rng_uniform(c->seed, 7, (uint64_t)(b << 32 | i))));
        if (prompts_add(&ps, text, (size_t)f->bench_prompt, "bench prompt", err, sizeof err) < 0)
            mesh_exit_error("%s", err);
    }
    free(text);
    const gen_dims d = bench_dims(f, B);
    gen *g = gen_create(c, m, &d, err, sizeof err);
    if (!g) mesh_exit_error("%s", err);
    int64_t row0, nb;
    gen_rows(g, &row0, &nb);
    int32_t *cur = calloc((size_t)nb + 1, 4), *next = calloc((size_t)nb + 1, 4);
    const int64_t steps = f->tokens - 1;
    gen_step *all = calloc((size_t)steps + 1, sizeof *all), st;
    CHECK(cur && next && all, "bench: out of memory");
    /* one untimed prefill first, as bench/torch_infer.py warms up: the timed one (it restarts
     * the positions and overwrites the cache) then finds the pages touched and the bf16 and panel
     * copies made, which a server pays once at its first request */
    gen_prefill(g, &ps, next, &st);
    gen_prefill(g, &ps, next, &st);
    const double prefill_s = st.seconds;
    for (int64_t s = 0; s < steps; s++) {
        memcpy(cur, next, (size_t)nb * 4);
        gen_decode(g, cur, next, &st);
        all[s] = gen_step_total(m, &st);
    }
    qsort(all, (size_t)steps, sizeof *all, cmp_step);
    bench_row r = {.B = B, .t = all[(steps - 1) / 2]};
    r.ms_prefill = 1e3 * prefill_s;
    r.ms_min = 1e3 * all[0].seconds;
    r.ms_med = 1e3 * r.t.seconds;
    r.ms_book = 1e3 * gen_predict(&r.t, mc);
    r.ms_mem = 1e3 * (r.t.kv_bytes + r.t.p_bytes) / mc->bw;
    r.ms_flop = 1e3 * (r.t.kv_bytes / mc->bw + r.t.flops / mc->flops);
    const float pan = (float)((double)model_panel_bytes(gen_model(g)) / 1e6);
    mesh_all_reduce(m, mesh_all_axes(m), &r.panel_mb, &pan, 1, MESH_ALG_MPI);
    free(cur), free(next), free(all);
    gen_destroy(g);
    prompts_free(&ps);
    return r;
}

int gen_bench_check(const config *c, const gen_flags *f, mesh *m, gen_bench_plan *p, char *err,
                    size_t errlen) {
    p->n = 0;
    for (const char *s = f->bench_batches; *s;) {
        char *end;
        errno = 0;
        const long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 1 || v > GEN_BENCH_MAX_B || (*end && *end != ','))
            return errmsg_fail(err, errlen,
                               "--bench-batches %s: expected a comma list of batch sizes from 1 "
                               "to %d",
                               f->bench_batches, GEN_BENCH_MAX_B);
        if (p->n == GEN_BENCH_MAX)
            return errmsg_fail(err, errlen, "--bench-batches %s: at most %d batch sizes",
                               f->bench_batches, GEN_BENCH_MAX);
        p->B[p->n++] = v;
        s = *end ? end + 1 : end;
    }
    if (p->n == 0) return errmsg_fail(err, errlen, "--bench-batches is empty");
    if (f->tokens < 2)
        return errmsg_fail(err, errlen, "--bench needs --tokens >= 2 (decode steps + 1), got %lld",
                           (long long)f->tokens);
    if (f->bench_prompt + f->tokens > c->shape.T)
        return errmsg_fail(err, errlen,
                           "--bench-prompt %lld + --tokens %lld = %lld positions, more than "
                           "--seq-len %lld: give a smaller --bench-prompt or --tokens",
                           (long long)f->bench_prompt, (long long)f->tokens,
                           (long long)(f->bench_prompt + f->tokens), (long long)c->shape.T);
    for (int i = 0; i < p->n; i++) {
        const gen_dims d = bench_dims(f, p->B[i]);
        char why[GEN_BENCH_ERR];
        if (gen_check(c, m, &d, why, sizeof why) < 0)
            return errmsg_fail(err, errlen, "--bench-batches: batch %lld: %s", (long long)p->B[i],
                               why);
    }
    return 0;
}

/* Rank 0: the table as CSV at path, written whole through a temp file renamed into place (a
 * failure leaves no partial file, and an existing one as it was). 0 or −1 with err. */
static int write_csv(const char *path, const bench_row *rows, int n, char *err, size_t errlen) {
    char tmp[1100], why[256];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    linefile *f = linefile_open(tmp, 0, why, sizeof why);
    if (!f) return errmsg_fail(err, errlen, "--csv %s: cannot write %s (%s)", path, tmp, why);
    int rc = linefile_printf(f, "batch,prefill_ms,ms_min,ms_median,ms_book,ms_book_memory,"
                                "ms_book_flops,tok_per_s,weight_mb,kv_mb,gb_per_s,gflop_per_s\n");
    for (int i = 0; i < n && rc == 0; i++) {
        const bench_row *r = &rows[i];
        const double s = r->t.seconds, bytes = r->t.p_bytes + r->t.kv_bytes;
        rc = linefile_printf(f, "%lld,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.4f,%.4f,%.3f,%.3f\n",
                             (long long)r->B, r->ms_prefill, r->ms_min, r->ms_med, r->ms_book,
                             r->ms_mem, r->ms_flop, (double)r->B / s, r->t.p_bytes / 1e6,
                             r->t.kv_bytes / 1e6, bytes / s / 1e9, r->t.flops / s / 1e9);
    }
    const int closed = linefile_close(f);
    if (rc == 0) rc = closed;
    if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
    if (rc < 0) {
        remove(tmp);
        return errmsg_fail(err, errlen, "--csv %s: writing it failed (%s); no file was left", path,
                           strerror(-rc));
    }
    return 0;
}

int gen_bench_run(const config *c, const gen_flags *f, mesh *m, const gen_bench_plan *p,
                  const gen_machine *mc) {
    const int64_t *batches = p->B;
    const int64_t nbat = p->n;
    if (mesh_rank(m) == 0) {
        fprintf(stderr,
                "decode roofline | L=%lld D=%lld N=%lld K=%lld H=%lld F=%lld V=%lld T=%lld | "
                "prompt %lld, %lld decode steps per batch | compute %s, KV cache %s | BW %.2f "
                "GB/s, C %.2f GFLOP/s (%s products; measured, %d ranks, %d BLAS thread%s each)\n",
                (long long)c->shape.L, (long long)c->shape.D, (long long)c->shape.N,
                (long long)c->shape.K, (long long)c->shape.H, (long long)c->shape.F,
                (long long)c->shape.V, (long long)c->shape.T, (long long)f->bench_prompt,
                (long long)(f->tokens - 1), compute_dtype_name(c->compute),
                compute_dtype_name(c->kv_dtype == COMPUTE_AUTO ? c->compute : c->kv_dtype),
                mc->bw / 1e9, mc->flops / 1e9, compute_dtype_name(mc->flops_dtype), mesh_nranks(m),
                c->threads, c->threads > 1 ? "s" : "");
        fprintf(stderr, "%6s %11s | decode: %9s %10s %10s %8s %10s %9s %9s %9s\n", "batch",
                "prefill ms", "ms min", "ms median", "book ms", "meas/bk", "tok/s", "GB/s", "%BW",
                "GFLOP/s");
    }
    bench_row rows[GEN_BENCH_MAX] = {{0}};
    for (int64_t i = 0; i < nbat; i++) {
        bench_row *r = &rows[i];
        *r = bench_one(c, f, m, mc, batches[i]);
        const double s = r->t.seconds, bytes = r->t.p_bytes + r->t.kv_bytes;
        if (mesh_rank(m) != 0) continue;
        fprintf(stderr,
                "%6lld %11.3f | decode: %9.3f %10.3f %10.3f %8.2f %10.0f %9.2f %8.0f%% %9.2f\n",
                (long long)r->B, r->ms_prefill, r->ms_min, r->ms_med, r->ms_book,
                r->ms_med / r->ms_book, (double)r->B / s, bytes / s / 1e9,
                100.0 * bytes / s / mc->bw, r->t.flops / s / 1e9);
    }
    if (mesh_rank(m) == 0) {
        const bench_row *a = &rows[0];
        /* the bound's meaning: BW read beyond the cache, and weights that do not fit in it */
        fprintf(stderr,
                "decode bound | batch %lld: weights %.2f MB + KV cache %.2f MB a step (%s) | BW "
                "read from a %.0f MB buffer, last-level cache %.1f MB%s | the weights %s\n",
                (long long)a->B, a->t.p_bytes / 1e6, a->t.kv_bytes / 1e6,
                compute_dtype_name(c->compute), mc->bw_buffer / 1e6, mc->llc / 1e6,
                mc->llc <= 0                   ? " (not known)"
                : mc->bw_buffer >= 4 * mc->llc ? " (the buffer >= 4x it)"
                                               : " (the buffer < 4x it: BW partly cached)",
                mc->llc <= 0             ? "against an unknown cache"
                : a->t.p_bytes > mc->llc ? "exceed the last-level cache: the bound is meaningful"
                                         : "FIT in the last-level cache: the bound is meaningless "
                                           "(decode reads them from the cache), take a larger "
                                           "model");
        if (a->panel_mb > 0)
            fprintf(stderr,
                    "decode memory | a second copy of the matrices in 16-column panels (bf16: for "
                    "one-row products, decode at batch 1; fp32: for every product, packed once): "
                    "%.2f MB over all ranks, kept beside the %.2f MB of weights\n",
                    (double)a->panel_mb, a->t.p_bytes / 1e6);
        const double book = a->t.p_bytes * mc->flops / (a->t.flops / a->t.rows * mc->bw);
        fprintf(stderr, "B_crit: book %.1f (= weight bytes · C / (2·P · BW))", book);
        const bench_row *z = &rows[nbat - 1];
        if (nbat >= 2 && z->ms_min > 0)
            fprintf(stderr,
                    ", measured %.1f (the flat level, %.3f ms at B = %lld, meets the FLOP-bound "
                    "line through the origin and %.3f ms at B = %lld)",
                    a->ms_min * (double)z->B / z->ms_min, a->ms_min, (long long)a->B, z->ms_min,
                    (long long)z->B);
        fprintf(stderr, "\n");
    }
    char err[512] = "";
    const int st =
        mesh_rank(m) == 0 && f->csv[0] ? write_csv(f->csv, rows, (int)nbat, err, sizeof err) : 0;
    mesh_agree_or_exit(mesh_world_comm(m), st, "%s", err);
    return 0;
}
