/* bench: the --bench timing run and the matmul-only bound (see bench.h). */
#include "train/cli/bench.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/rng.h"
#include "train/observe/cpupeak.h"
#include "train/observe/metrics.h"
#include "train/model/model.h"
#include "train/cli/run.h"
#include "train/step/ktime.h"
#include "mesh/cost.h"
#include "mesh/coll.h"
#include "train/observe/report.h"
#include "train/observe/boundary.h"
#include "train/parallel/par.h"

/* RNG stream of the synthetic tokens (ASCII "bench"). */
#define BENCH_STREAM UINT64_C(0x62656e6368)

static int add_gemm(bench_gemm *out, int n, int cap, int64_t M, int64_t N, int64_t K, int ta,
                    int tb, double count) {
    if (count <= 0) return n;
    for (int i = 0; i < n; i++) {
        bench_gemm *g = &out[i];
        if (g->M == M && g->N == N && g->K == K && g->ta == ta && g->tb == tb) {
            g->count += count;
            return n;
        }
    }
    if (n < cap) out[n++] = (bench_gemm){M, N, K, ta, tb, count};
    return n;
}

/* y[M,N] = x[M,K]·w[K,N], its weight gradient xᵀ·dy and its input gradient dy·wᵀ. */
static int add_linear(bench_gemm *out, int n, int cap, int64_t M, int64_t K, int64_t N,
                      double count, int input_grad) {
    n = add_gemm(out, n, cap, M, N, K, 0, 0, count);
    n = add_gemm(out, n, cap, K, N, M, 1, 0, count);
    if (input_grad) n = add_gemm(out, n, cap, M, K, N, 0, 1, count);
    return n;
}

int bench_step_gemms(const model_shape *s, int64_t B, int64_t mb, bench_gemm *out, int cap) {
    const int64_t BT = mb * s->T, T = s->T, H = s->H, D = s->D;
    const double micro = (double)(B / mb), layers = micro * (double)s->L;
    int n = 0;
    n = add_linear(out, n, cap, BT, D, s->N * H, layers, 1);     /* wq */
    n = add_linear(out, n, cap, BT, D, s->K * H, 2 * layers, 1); /* wk, wv */
    n = add_linear(out, n, cap, BT, s->N * H, D, layers, 1);     /* wo */
    const double Lm = micro * (double)model_moe_layers(s), dense = layers - Lm;
    n = add_linear(out, n, cap, BT, D, s->F, 2 * dense, 1); /* w_gate, w_up */
    n = add_linear(out, n, cap, BT, s->F, D, dense, 1);     /* w_down */
    if (Lm > 0) { /* MoE blocks, the routing balanced: each expert takes BT·k/E rows */
        const moe_shape *mo = &s->moe;
        const int64_t Me = (BT * mo->k + mo->E - 1) / mo->E;
        n = add_linear(out, n, cap, BT, D, mo->E, Lm, 1);                     /* router */
        n = add_linear(out, n, cap, Me, D, mo->F, 2 * Lm * (double)mo->E, 1); /* experts */
        n = add_linear(out, n, cap, Me, mo->F, D, Lm * (double)mo->E, 1);
        n = add_linear(out, n, cap, BT, D, mo->F, 2 * Lm * (double)mo->shared, 1); /* shared */
        n = add_linear(out, n, cap, BT, mo->F, D, Lm * (double)mo->shared, 1);
    }
    n = add_linear(out, n, cap, BT, D, s->V, micro, 1); /* unembed (its dx feeds the blocks) */
    /* Attention, per sequence and query head, half of each T×T product (causal). */
    const double heads = layers * (double)mb * (double)s->N * 0.5;
    n = add_gemm(out, n, cap, T, T, H, 0, 1, heads);     /* S = q·kᵀ */
    n = add_gemm(out, n, cap, T, H, T, 0, 0, heads);     /* o = P·v */
    n = add_gemm(out, n, cap, T, T, H, 0, 1, heads);     /* dP = do·vᵀ */
    n = add_gemm(out, n, cap, T, H, T, 0, 0, heads);     /* dq = dS·k */
    n = add_gemm(out, n, cap, T, H, T, 1, 0, 2 * heads); /* dv = Pᵀ·do, dk = dSᵀ·q */
    return n;
}

/* One product of g on a, b (or their bf16 copies with x) into c. */
static void gemm_once(const bench_gemm *g, kern_bf16_ctx *x, const float *a, const float *b,
                      const kern_bf16 *a16, const kern_bf16 *b16, float *c) {
    const int64_t lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    if (x)
        kern_gemm_bf16(x, c, a16, b16, g->M, g->N, g->K, g->ta, g->tb, lda, ldb, g->N, false);
    else
        kern_gemm(c, a, b, g->M, g->N, g->K, g->ta, g->tb, lda, ldb, g->N, 1.0f, 0.0f);
}

double bench_time_gemm(const bench_gemm *g, kern_bf16_ctx *x, int quick) {
    const int64_t na = g->M * g->K, nb = g->K * g->N, nc = g->M * g->N;
    float *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)nb * sizeof *b);
    float *c = malloc((size_t)nc * sizeof *c);
    kern_bf16 *a16 = malloc((size_t)na * sizeof *a16), *b16 = malloc((size_t)nb * sizeof *b16);
    CHECK(a && b && c && a16 && b16, "bench: out of memory for a %lldx%lldx%lld sgemm",
          (long long)g->M, (long long)g->N, (long long)g->K);
    for (int64_t i = 0; i < na; i++) a[i] = (float)((i * 7 % 13) - 6) / 13.0f;
    for (int64_t i = 0; i < nb; i++) b[i] = (float)((i * 5 % 11) - 5) / 11.0f;
    kern_bf16_pack(a16, a, na);
    kern_bf16_pack(b16, b, nb);
    gemm_once(g, x, a, b, a16, b16, c);
    double best = 1e30;
    for (int trial = 0; trial < (quick ? 1 : 3); trial++) {
        int64_t reps = 0;
        const double t0 = mesh_now();
        double t;
        do {
            gemm_once(g, x, a, b, a16, b16, c);
            reps++;
            t = mesh_now() - t0;
        } while (t < (quick ? 0.002 : 0.05) || reps < 2);
        if (t / (double)reps < best) best = t / (double)reps;
    }
    free(a), free(b), free(c), free(a16), free(b16);
    return best;
}

/* Sums over the timed steps of the split and the prediction (report.h). */
typedef struct {
    double cpu, xfer, xfer_last, comp, comm, idle, pred, bub, bub_ideal, bub_sim;
    double bub_wait, bub_other, bub_run, mk, mk_run, mk_sim; /* exec_stats, over the steps */
    double pcomp, pcomm, pexp, book, bcomp, pded;
    int64_t dom[3]; /* steps whose predicted dominant term: compute, bandwidth, latency */
    int64_t peak_inflight;
    /* by part of the step (parts.h): compute CPU, transfer (each rank's own, and from the last
     * rank's start), predicted compute and comm */
    double pcpu[PART_COUNT], pxfer[PART_COUNT], pxlast[PART_COUNT], ppcomp[PART_COUNT],
        ppcomm[PART_COUNT];
    double pwire[PART_COUNT][MESH_MAX_AXES]; /* on the wire, by major axis (step_split) */
    double progress; /* rank 0's progress thread's CPU seconds (mesh_progress_cpu) */
    double pass_floats[KERN_PASS_COUNT], ppass_kind[KERN_PASS_COUNT], ppass; /* report.h */
} bench_sums;

static void sums_add(bench_sums *u, const step_stats *st) {
    u->cpu += st->split.compute_cpu;
    u->comp += st->split.compute, u->idle += st->split.idle, u->pred += st->split.pred_step;
    u->pcomp += st->split.pred_compute, u->pcomm += st->split.pred_comm;
    u->pexp += st->split.pred_exposed, u->book += st->split.book_step;
    u->bcomp += st->split.book_compute, u->pded += st->split.pred_dedicated;
    if (st->split.dominant)
        u->dom[st->split.dominant[0] == 'c' ? 0 : st->split.dominant[0] == 'b' ? 1 : 2]++;
    for (int op = 0; op < MESH_OP_COUNT; op++) u->comm += st->split.exposed[op];
    for (int op = 0; op < MESH_OP_SEND; op++) u->xfer += st->split.xfer[op];
    u->xfer_last += st->split.xfer_last;
    u->bub += st->pipe.bubble, u->bub_ideal = st->pipe.bubble_ideal;
    u->bub_sim = st->pipe.bubble_sim, u->mk_sim = st->pipe.makespan_sim;
    u->bub_wait += st->pipe.bubble_wait, u->bub_run += st->pipe.bubble_run;
    u->bub_other += st->pipe.bubble_other;
    u->mk += st->pipe.makespan, u->mk_run += st->pipe.makespan_run;
    for (int p = 0; p < PART_COUNT; p++) {
        u->pcpu[p] += st->split.part_cpu[p], u->pxfer[p] += st->split.part_xfer[p];
        u->pxlast[p] += st->split.part_xfer_last[p];
        u->ppcomp[p] += st->split.part_pred_compute[p];
        u->ppcomm[p] += st->split.part_pred_comm[p];
        for (int a = 0; a < MESH_MAX_AXES; a++) u->pwire[p][a] += st->split.part_wire[p][a];
    }
    if (st->pipe.peak_inflight > u->peak_inflight) u->peak_inflight = st->pipe.peak_inflight;
    for (int k = 0; k < KERN_PASS_COUNT; k++) {
        u->pass_floats[k] += (double)st->split.pass_floats[k];
        u->ppass_kind[k] += st->split.pred_pass[k];
    }
    u->ppass += st->split.pred_passes;
}

/* The matmul-only bound of the whole global step on one rank, in seconds (printed). */
static double matmul_bound(const config *c, const run_peak *pk, kern_bf16_ctx *x) {
    const model_shape *s = &c->shape;
    bench_gemm gemms[48];
    const int ng = bench_step_gemms(s, c->batch, c->micro_batch, gemms, 48);
    double bound = 0.0, bound_flops = 0.0;
    for (int i = 0; i < ng; i++) {
        const double sec = bench_time_gemm(&gemms[i], x, c->quick_start);
        bound += gemms[i].count * sec;
        bound_flops += gemms[i].count * 2.0 * (double)(gemms[i].M * gemms[i].N * gemms[i].K);
    }
    const double ntok = (double)(c->batch * s->T);
    mesh_log("bench: matmul-only bound %.1f ms/step = %.0f tok/s (%d %s shapes at %.1f GFLOP/s "
             "on average) | %s %.1f GFLOP/s per rank, %.1f all ranks (MFU peak)\n",
             1e3 * bound, ntok / bound, ng, x ? "bf16" : "sgemm", bound_flops / bound / 1e9,
             x ? "bf16" : "sgemm", pk->rank / 1e9, pk->total / 1e9);
    return bound;
}

/* The summary lines of the timed steps: secs (sorted here) and their sums. */
static void print_summary(const config *c, const run_peak *pk, double bound, double *secs,
                          const bench_sums *u, const share_model *sh) {
    const double ntok = (double)(c->batch * c->shape.T);
    const double flops = shape_flops_per_token(&c->shape) * ntok;
    const double med = ktime_median(secs, c->steps);
    const double best = secs[0]; /* sorted by ktime_median */
    char b[96] = "matmul bound not timed (--no-matmul-bound)";
    if (bound > 0)
        snprintf(b, sizeof b, "matmul bound %.0f tok/s | %.0f%% of bound", ntok / bound,
                 100.0 * bound / med);
    /* the peak at least the best step's rate: a start-up measurement that came out low (the
     * machine busy then) cannot give an MFU above 100% */
    const double peak = cpupeak_measured(&(cpupeak_trial){pk->total, 0}, 1, 1, flops / best);
    mesh_log("bench | tok/s median %.0f best %.0f | ms/step median %.1f best %.1f | GFLOP/s "
             "%.1f | MFU %.0f%% | %s\n",
             ntok / med, ntok / best, 1e3 * med, 1e3 * best, flops / med / 1e9,
             100.0 * flops / med / peak, b);
    mesh_log("bench peak | start-up %.1f GFLOP/s | best step %.1f GFLOP/s | MFU against %.1f "
             "GFLOP/s (the larger: a step's rate bounds the peak from below)\n",
             pk->total / 1e9, flops / best / 1e9, peak / 1e9);
    const double n = (double)c->steps;
    /* compute-cpu: the compute's CPU time (train/observe/report.h), what the compute takes
     * when the rank has its core; progress-cpu: the progress thread's (--overlap's collectives);
     * transfer: the collectives' start → end on this rank; transfer-last: from the last rank's
     * start (train/observe/skew.h). compute-cpu in µs, as its parts below: they add up to it */
    mesh_log("bench split | compute %.1f ms | compute-cpu %.3f ms | progress-cpu %.1f ms | exposed "
             "comm %.1f ms | transfer %.1f ms | transfer-last %.1f ms | idle %.1f ms | predicted "
             "%.1f ms/step | measured/predicted %.2f\n",
             1e3 * u->comp / n, 1e3 * u->cpu / n, 1e3 * u->progress / n, 1e3 * u->comm / n,
             1e3 * u->xfer / n, 1e3 * u->xfer_last / n, 1e3 * u->idle / n, 1e3 * u->pred / n,
             u->pred > 0 ? (u->comp + u->comm) / u->pred : 0.0);
    const int64_t *dom = u->dom;
    const int d = dom[0] >= dom[1] && dom[0] >= dom[2] ? 0 : dom[1] >= dom[2] ? 1 : 2;
    static const char *dname[3] = {"compute", "bandwidth", "latency"};
    /* at-peak: the book's compute, this rank's FLOPs at the peak sgemm rate */
    /* step: on the host as shared (share.h), whose compute is share × compute; dedicated: the
     * step on a CPU per rank */
    mesh_log("bench predict | step %.1f ms | compute %.1f ms | comm %.1f ms | exposed %.1f ms "
             "| book-ideal %.1f ms | at-peak %.1f ms | dedicated %.1f ms | share %.3f | "
             "threads-per-cpu %.3f | measured/predicted %.2f (best %.2f) | dominant %s\n",
             1e3 * u->pred / n, 1e3 * u->pcomp / n, 1e3 * u->pcomm / n, 1e3 * u->pexp / n,
             1e3 * u->book / n, 1e3 * u->bcomp / n, 1e3 * u->pded / n,
             sh->shared ? sh->compute : 1.0, sh->per_cpu, u->pred > 0 ? med / (u->pred / n) : 0.0,
             u->pred > 0 ? best / (u->pred / n) : 0.0, dname[d]);
    /* the memory passes between the kernels, counted (kernels/traffic.h), and their predicted
     * time, which the predicted compute includes */
    {
        char line[256];
        int len = snprintf(line, sizeof line, "bench passes");
        for (int k = 0; k < KERN_PASS_COUNT && len < (int)sizeof line; k++)
            len += snprintf(line + len, sizeof line - (size_t)len, " | %s %.3f M floats %.1f ms",
                            kern_pass_name((kern_pass)k), u->pass_floats[k] / n / 1e6,
                            1e3 * u->ppass_kind[k] / n);
        mesh_log("%s | predicted %.1f ms (in the predicted compute)\n", line, 1e3 * u->ppass / n);
    }
    /* the step by part: what the book's crossovers compare (docs/fidelity.md); the compute CPU
     * in µs (a small model's parts take a few hundredths of a ms), the others in 0.1 ms */
    const double *what[5] = {u->pcpu, u->pxfer, u->pxlast, u->ppcomp, u->ppcomm};
    static const char *wname[5] = {"compute-cpu", "transfer", "transfer-last", "predicted-compute",
                                   "predicted-comm"};
    for (int w = 0; w < 5; w++) {
        char line[512];
        int len = snprintf(line, sizeof line, "bench parts %s", wname[w]);
        for (int p = 0; p < PART_COUNT && len < (int)sizeof line; p++)
            len += snprintf(line + len, sizeof line - (size_t)len,
                            w == 0 ? " | %s %.3f ms" : " | %s %.1f ms",
                            step_part_name((step_part)p), 1e3 * what[w][p] / n);
        mesh_log("%s\n", line);
    }
    /* the pipeline phase (exec.h): measured, and calc's simulation of the run's table with the
     * costs measured at start-up (sim), with those each step measured (sim-run), with unit costs
     * (ideal: the closed forms) */
    if (u->bub_ideal > 0)
        mesh_log("bench pipeline | bubble %.3f (1 - compute / (ranks x makespan), mean over steps) "
                 "| sim %.3f (start-up costs) | sim-run %.3f (the steps' measured costs) | ideal "
                 "%.3f (unit costs) | wait %.3f (of the bubble, in receives) | other %.3f (of the "
                 "bubble, neither compute nor receive inside the ranks' spans) | makespan-ms %.2f | "
                 "makespan-sim-ms %.2f | makespan-run-ms %.2f | peak micro-batches in flight "
                 "%lld\n",
                 u->bub / n, u->bub_sim, u->bub_run / n, u->bub_ideal, u->bub_wait / n,
                 u->bub_other / n,
                 1e3 * u->mk / n, 1e3 * u->mk_sim, 1e3 * u->mk_run / n,
                 (long long)u->peak_inflight);
}

/* The data boundary for what the timed steps put on the wire (boundary.h): the step's
 * collectives over the data axes against the book's AllReduce (or gathers and scatter) of the
 * parameters. Seconds per step on the wire in *ws; −1 when there is nothing to compare. */
static double wire_data(const report_case *k, const bench_sums *u, int64_t steps, double book,
                        double w, double *ws) {
    double t = 0;
    for (int p = 0; p < PART_COUNT; p++)
        for (int a = 0; a < MESH_MAX_AXES; a++)
            if (k->data_mask >> a & 1u) t += u->pwire[p][a];
    *ws = t / (double)steps;
    if (k->nX < 2) return -1;
    return boundary_for_wire(book, *ws, boundary_book_data_bytes(k->zero, (double)k->params), w);
}

/* The tensor boundary for what the MLPs' forward passes put on the wire over the tensor axis,
 * against the book's AllGather and ReduceScatter of each layer's activations. */
static double wire_tensor(const report_case *k, const config *c, const bench_sums *u, int64_t steps,
                          double book, double w, double *ws) {
    *ws = k->tensor_axis >= 0 ? u->pwire[PART_FWD_MLP][k->tensor_axis] / (double)steps : 0;
    if (k->nY < 2) return -1;
    const double ntok = (double)k->tokens / (double)(k->nX > 0 ? k->nX : 1);
    return boundary_for_wire(
        book, *ws, boundary_book_tensor_bytes((double)k->layers, ntok, (double)c->shape.D), w);
}

/* FSDP (ZeRO-3) over the data axes and TP over the tensor axis, and nothing else on the mesh:
 * the book's mixed threshold applies (boundary_book_mixed_tokens). */
static int is_mixed(const report_case *k, int nranks) {
    return k->zero == 3 && k->nX >= 2 && k->nY >= 2 && k->nX * k->nY == (int64_t)nranks;
}

/* The mixed threshold for what the timed steps put on the wire (boundary_mixed_for_wire): the
 * step's FLOPs at `rate` (the emulated chip's peak: em->measured_flops, the rate the links are
 * scaled to; without emulation the rate measured at start-up), against every collective of the
 * step on the links. Seconds per step in *wire and *peak; −1 when there is nothing to compare. */
static double wire_mixed(const config *c, const report_case *k, const bench_sums *u, double rate,
                         int nranks, double *wire, double *peak) {
    const model_shape *s = &c->shape;
    double t = 0;
    for (int p = 0; p < PART_COUNT; p++)
        for (int a = 0; a < MESH_MAX_AXES; a++) t += u->pwire[p][a];
    *wire = t / (double)c->steps;
    const double per_token = shape_flops_per_token(s);
    *peak = rate > 0 ? per_token * (double)k->tokens / nranks / rate : 0;
    /* the MLPs' share, 6·3·D·F per token a layer (a SwiGLU's three D×F matrices, ×3 for
     * training), grows with B·F; the rest of the FLOPs with B */
    const double mlp = 18.0 * (double)s->L * (double)s->D * (double)s->F / per_token;
    return boundary_mixed_for_wire((double)k->tokens, *peak, mlp, *wire);
}

/* The book's crossovers for this run (report_book_boundaries), with the bytes of --comm-dtype
 * and, under --emulate, the chip's C and W; without it, on several ranks, this machine's: the
 * rate measured at start-up and the link calibrated (`bench regime`'s α). Then the same for
 * what the timed steps put on the wire (the collectives counted by mesh, boundary.h), against
 * the book's bf16 figures. */
static void print_boundaries(const config *c, trainer *t, const bench_sums *u, int nranks) {
    const cost_chip *chip = c->emulate[0] ? cost_chip_find(c->emulate) : NULL;
    report_case k;
    char name[128];
    plan_report_case(trainer_plan(t), &k, name, sizeof name);
    const report *r = trainer_report(t);
    const int ax = k.data_axis >= 0 ? k.data_axis : k.tensor_axis >= 0 ? k.tensor_axis : 0;
    const double w = r ? report_link(r, ax)->w_oneway : 0;
    const mesh_emulation *em = trainer_emulation(t);
    /* C and W (both ways) of the chip or of this machine; the rate the step's FLOPs run at on
     * the emulated links (em->measured_flops, the rate they are scaled to) or here */
    double C = r ? report_flops(r) : 0, W = 2.0 * w, rate = C;
    if (chip) {
        C = chip->flops_bf16, W = chip->ici_bidi, rate = em ? em->measured_flops : 0;
    } else if (nranks < 2 || !(C > 0 && W > 0)) {
        return;
    }
    const char *where = chip ? chip->name : "this machine (C and W measured)";
    const double wire = mesh_wire_bytes(c->comm_dtype);
    report_boundaries b, b16;
    /* the model's MLP is a SwiGLU: three D×F matrices (w_gate, w_up, w_down) */
    const int nax = k.n_data_axes > 0 ? k.n_data_axes : 1;
    if (report_book_boundaries(C, W, wire, nax, k.nY, 3, &b) < 0 ||
        report_book_boundaries(C, W, 2, nax, k.nY, 3, &b16) < 0)
        return;
    /* FSDP + TP: the book's threshold in tokens per step along this run's B/F */
    const int mixed = is_mixed(&k, nranks);
    const double bf = k.F > 0 ? (double)k.tokens / (double)k.F : 0;
    const double mx =
        mixed ? boundary_book_mixed_tokens(b.alpha, (double)k.nX, (double)k.nY, nax, 1, bf, 3) : 0;
    const double mx16 =
        mixed ? boundary_book_mixed_tokens(b16.alpha, (double)k.nX, (double)k.nY, nax, 1, bf, 3)
              : 0;
    mesh_log("bench boundary | alpha %.0f | data-tokens-per-rank %.0f | tensor-F %.0f | "
             "mixed-tokens %.0f | the book's, %s on %s with %s on the wire, %d data axes, |Y| = "
             "%lld, an MLP of 3 matrices (mixed: FSDP + TP, tokens per step at this B/F; 0: "
             "none)\n",
             b.alpha, b.data_tokens, b.tensor_F, mx > 0 ? mx : 0, name, where,
             mesh_wire_name(c->comm_dtype), k.n_data_axes, (long long)k.nY);
    double wd = 0, wt = 0, wm = 0, pm = 0, d = -1, f = -1, mw = -1;
    if (c->steps > 0 && r) {
        d = wire_data(&k, u, c->steps, b16.data_tokens, w, &wd);
        f = wire_tensor(&k, c, u, c->steps, b16.tensor_F, w, &wt);
        if (mixed) mw = wire_mixed(c, &k, u, rate, nranks, &wm, &pm);
    }
    /* the ratios to the book's bf16 figures: what the run's collectives and bytes change */
    if (c->steps > 0 && r)
        mesh_log("bench wire-boundary | data-tokens-per-rank %.0f | data-ratio %.4f | data-wire "
                 "%.1f ms | tensor-F %.0f | tensor-ratio %.4f | tensor-wire %.1f ms | the book's "
                 "boundaries for the collectives this run put on the wire (mesh's link bytes at "
                 "%.4g B/s per direction): the step's over the data axes, the MLPs' forward over "
                 "the tensor axis (0: none)\n",
                 d > 0 ? d : 0, d > 0 ? d / b16.data_tokens : 0, 1e3 * wd, f > 0 ? f : 0,
                 f > 0 ? f / b16.tensor_F : 0, 1e3 * wt, w);
    /* FSDP + TP: the whole step's compute at the chip's peak against all its collectives */
    if (c->steps > 0 && r && mixed)
        mesh_log("bench wire-boundary mixed | mixed-tokens %.0f | mixed-ratio %.4f | mixed-wire "
                 "%.1f ms | mixed-peak %.1f ms | the book's FSDP + TP threshold in tokens per "
                 "step along this run's B/F for the whole step: its compute at the chip's peak "
                 "against all its collectives on the wire (0: none)\n",
                 mw > 0 ? mw : 0, mw > 0 && mx16 > 0 ? mw / mx16 : 0, 1e3 * wm, 1e3 * pm);
    if (em && chip)
        mesh_log("bench emulate | %s | rate %.4g FLOP/s (--emulate-rate %s: %s) | time-scale %.4g "
                 "| links %.4g B/s per direction | hop %.4g s\n",
                 chip->name, em->measured_flops, config_rate_name(c->emulate_rate),
                 c->emulate_rate == CONFIG_RATE_MODEL
                     ? "this model's linear layers, timed at start-up"
                     : "the core's sgemm",
                 em->time_scale, em->bw, em->latency);
}

int bench_run(const config *c, mesh *m, trainer *t, const run_peak *pk) {
    const model_shape *s = &c->shape;
    const int nranks = mesh_nranks(m);
    char spec[96];
    mesh_log("bench: L=%lld D=%lld N=%lld K=%lld H=%lld F=%lld V=%lld T=%lld B=%lld (micro %lld) "
             "| %d rank%s (mesh %s), %d BLAS thread%s per rank, progress %s (--progress %s, core "
             "share %.2f), waits spin %.3g ms | "
             "%.3g threads per CPU on the most shared host | %d warm-up + %lld timed steps\n",
             (long long)s->L, (long long)s->D, (long long)s->N, (long long)s->K, (long long)s->H,
             (long long)s->F, (long long)s->V, (long long)s->T, (long long)c->batch,
             (long long)c->micro_batch, nranks, nranks > 1 ? "s" : "",
             mesh_spec_str(m, spec, sizeof spec), c->threads, c->threads > 1 ? "s" : "",
             mesh_get_progress(m) == MESH_PROGRESS_INLINE ? "inline" : "thread",
             config_progress_name(c->progress), trainer_core_share(t), mesh_get_spin() * 1e3,
             report_share(trainer_report(t))->per_cpu, BENCH_WARMUP_STEPS, (long long)c->steps);
    if (!c->quiet) trainer_print_layout(t, stdout); /* the plan the timed steps run */
    run_print_hosts(c, m, t);
    if (c->quiet && mesh_world_rank() == 0) precision_print(trainer_precision(t), stdout);
    const double bound = c->no_matmul_bound ? 0.0 : matmul_bound(c, pk, trainer_precision(t)->ctx);
    const double ntok = (double)(c->batch * s->T);

    int64_t row0, nrows;
    trainer_rows(t, &row0, &nrows);
    const int64_t T1 = s->T + 1;
    int32_t *rows = malloc((size_t)(nrows * T1) * sizeof *rows);
    double *secs = malloc((size_t)(c->steps > 0 ? c->steps : 1) * sizeof *secs);
    CHECK(rows && secs, "bench: out of memory");
    bench_sums sums = {0};
    for (int64_t step = 0; step < BENCH_WARMUP_STEPS + c->steps; step++) {
        for (int64_t r = 0; r < nrows; r++)
            for (int64_t j = 0; j < T1; j++) {
                const uint64_t g = (uint64_t)((step * c->batch + row0 + r) * T1 + j);
                rows[r * T1 + j] =
                    (int32_t)(kern_rng_u64(c->seed, BENCH_STREAM, g) % (uint64_t)s->V);
            }
        step_stats st;
        const double prog0 = mesh_progress_cpu(m);
        trainer_step(t, step, rows, &st);
        if (step < BENCH_WARMUP_STEPS) continue;
        sums.progress += mesh_progress_cpu(m) - prog0;
        secs[step - BENCH_WARMUP_STEPS] = st.seconds;
        sums_add(&sums, &st);
        if (!c->quiet)
            mesh_log("bench step %lld | loss %.4f | %.1f ms | %.0f tok/s\n",
                     (long long)(step - BENCH_WARMUP_STEPS + 1), st.loss, 1e3 * st.seconds,
                     ntok / st.seconds);
    }
    if (c->steps > 0) print_summary(c, pk, bound, secs, &sums, report_share(trainer_report(t)));
    if (nranks > 1 && mesh_world_rank() == 0) { /* the book's verdict on this run's links */
        report_case k;
        char name[128];
        plan_report_case(trainer_plan(t), &k, name, sizeof name);
        printf("bench regime | %s\n", name);
        report_print_regime(trainer_report(t), &k, stdout);
    }
    print_boundaries(c, t, &sums, nranks);
    free(rows);
    free(secs);
    return 0;
}
