/* plan_report: prints a plan (per layer, per step, memory, thresholds, notes) and searches
 * shardings. See plan.h. */
#include "train/plan.h"

#include <stdlib.h>
#include <string.h>

static const char *path_name(plan_path p) {
    return p == PLAN_PATH_CRITICAL ? "critical" : p == PLAN_PATH_PREFETCH ? "prefetch" : "async";
}

static const char *remat_name(const plan_spec *s, char *buf, size_t len) {
    static const char *names[] = {"none (~20 [B,D] tensors per layer)", "block (layer inputs only)",
                                  "ffw3 (3 FFW matmul outputs)"};
    if (s->remat == PLAN_REMAT_CKPT)
        snprintf(buf, len, "ckpt%d (%d [B,D] tensors per layer)", s->ckpt_n, s->ckpt_n);
    else
        snprintf(buf, len, "%s", names[s->remat]);
    return buf;
}

static void axes_str(const plan_spec *s, int mask, char *out) {
    int k = 0;
    for (int i = 0; i < s->n_axes; i++)
        if (mask & (1 << i)) out[k++] = s->names[i];
    if (k == 0) out[k++] = '-';
    out[k] = '\0';
}

static void topo_str(const plan_spec *s, char *buf, size_t len) {
    size_t k = 0;
    for (int i = 0; i < s->n_axes && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? "x" : "", s->sizes[i]);
}

static void print_header(FILE *out, const plan_spec *s, const plan_result *r) {
    const cost_chip *c = &s->chip;
    const model_shape *m = &s->shape;
    char topo[64], d[8], t[8], p[8], rb[64];
    topo_str(s, topo, sizeof topo);
    fprintf(out,
            "chip %s: C %.3g FLOP/s (bf16), HBM %.0f GB at %.3g B/s, ICI link %.3g B/s "
            "one-way (W = %.3g bidirectional), T_min %.3g us\n",
            c->name, c->flops_bf16, c->hbm_bytes / 1e9, c->hbm_bw, s->link.w_oneway,
            2 * s->link.w_oneway, s->link.hop_latency * 1e6);
    fprintf(out, "topology %s = %.0f chips:", topo, r->chips);
    for (int i = 0; i < s->n_axes; i++)
        fprintf(out, " %c=%d (%s)", s->names[i], s->sizes[i], s->wraps[i] ? "wraps" : "open");
    fprintf(out,
            "\nmodel: L=%lld D=%lld F=%lld N=%lld K=%lld H=%lld V=%lld T=%lld; params "
            "%.4g (MLP %.4g, attention %.4g, embeddings %.4g)\n",
            (long long)m->L, (long long)m->D, (long long)m->F, (long long)m->N, (long long)m->K,
            (long long)m->H, (long long)m->V, (long long)m->T, r->params,
            (double)m->L * 3 * m->D * m->F, (double)m->L * 2 * m->D * m->H * (m->N + m->K),
            2.0 * m->D * m->V);
    fprintf(out, "batch: B = %.0f tokens (%.6g sequences of %lld)\n", s->tokens,
            s->tokens / (double)m->T, (long long)m->T);
    axes_str(s, s->data_mask, d);
    axes_str(s, s->tensor_mask, t);
    axes_str(s, s->pipe_mask, p);
    fprintf(out,
            "sharding: data %s (X=%.0f, ZeRO-%d), tensor %s (Y=%.0f), pipeline %s (P=%.0f, "
            "%d microbatches); remat %s; collectives %s\n",
            d, r->X, s->zero, t, r->Y, p, r->P, s->microbatches, remat_name(s, rb, sizeof rb),
            cost_alg_name(s->alg));
    if (r->chips > r->X * r->Y * r->P)
        fprintf(out, "  warning: %.0f chips but X*Y*P = %.0f: the other axes replicate work\n",
                r->chips, r->X * r->Y * r->P);
}

static void print_segment(FILE *out, const plan_result *r, int seg) {
    static const char *phase_names[] = {"forward", "backward"};
    for (int k = 0; k < 2; k++) {
        const plan_phase *p = &r->phase[seg][k];
        double mx = p->t_math > p->t_comm ? p->t_math : p->t_comm;
        fprintf(out,
                "  %-8s  %.3e FLOP/chip  math %9.3f ms  comms %9.3f ms  -> max %9.3f ms, "
                "sum %9.3f ms (%s)\n",
                phase_names[k], p->flops, p->t_math * 1e3, p->t_comm * 1e3, mx * 1e3,
                (p->t_math + p->t_comm) * 1e3,
                p->t_math >= p->t_comm ? "compute-bound" : "communication-bound");
    }
    int any = 0;
    for (int i = 0; i < r->n_coll; i++) {
        const plan_coll *c = &r->coll[i];
        if (c->seg != seg) continue;
        if (!any)
            fprintf(out, "    %-4s %-13s %11s %5s %4s %10s %10s %-14s %-8s %s\n", "pass", "op",
                    "V bytes", "calls", "hops", "ms/call", "ms total", "regime", "path", "what");
        any = 1;
        fprintf(out, "    %-4s %-13s %11.4g %5d %4d %10.4f %10.4f %-14s %-8s %s\n",
                c->bwd ? "bwd" : "fwd", cost_op_name(c->op), c->bytes, c->count, c->est.hops,
                c->est.seconds * 1e3, c->count * c->est.seconds * 1e3, cost_regime_name(c->regime),
                path_name(c->path), c->what);
    }
    if (!any) fprintf(out, "    (no collectives)\n");
}

static void print_memory(FILE *out, const plan_spec *s, const plan_result *r) {
    char rb[64];
    fprintf(out, "memory per chip (GB = 1e9):\n");
    fprintf(out, "  params     %9.3f GB  (%.0f B/param%s)\n", r->mem_params / 1e9, s->param_bytes,
            s->zero >= 3 ? ", sharded by ZeRO-3" : "");
    fprintf(out, "  grads      %9.3f GB  (%.0f B/param%s)\n", r->mem_grads / 1e9, s->grad_bytes,
            s->zero >= 2 ? ", sharded by ZeRO-2+" : "");
    fprintf(out, "  optimizer  %9.3f GB  (%.0f B/param Adam moments%s)\n", r->mem_opt / 1e9,
            s->opt_bytes, s->zero >= 1 ? ", sharded by ZeRO-1+" : "");
    fprintf(out, "  activations%9.3f GB  (remat %s)\n", r->mem_acts / 1e9,
            remat_name(s, rb, sizeof rb));
    if (r->mem_gathered > 0)
        fprintf(out, "  gathered   %9.3f GB  (FSDP: 2 layers or the unembedding, gathered)\n",
                r->mem_gathered / 1e9);
    fprintf(out, "  total      %9.3f GB  of %.0f GB HBM: %s\n", r->mem_total / 1e9, r->hbm / 1e9,
            r->fits ? "fits" : "DOES NOT FIT");
    fprintf(out,
            "  book's total over all chips (params + optimizer + activations, no grads): "
            "%.4g TB -> at least %.1f chips of %.0f GB\n",
            r->mem_global / 1e12, r->min_chips_memory, r->hbm / 1e9);
}

static void print_thresholds(FILE *out, const plan_spec *s, const plan_result *r) {
    const int defaulted = !(r->M_X > 0 && r->M_Y > 0);
    fprintf(out, "thresholds (book §5):\n");
    fprintf(out,
            "  C/W_ici = alpha = %.0f FLOPs/byte; C/W_hbm = %.0f; a hop is latency-bound "
            "below W_oneway*T_min = %.3g kB\n",
            r->alpha, r->hbm_intensity, s->link.w_oneway * s->link.hop_latency / 1e3);
    if (r->X > 1)
        fprintf(out,
                "  DP/FSDP: B/X = %.0f tokens per data shard vs alpha/M_X = %.0f (M_X = %d) "
                "-> %s\n",
                r->tokens_per_x, r->dp_threshold, r->M_X,
                r->tokens_per_x > r->dp_threshold ? "compute-bound" : "communication-bound");
    if (r->Y > 1)
        fprintf(out, "  TP: Y = %.0f vs M_Y*F/alpha = %.1f (M_Y = %d) -> %s\n", r->Y, r->tp_limit,
                r->M_Y, r->Y < r->tp_limit ? "compute-bound" : "communication-bound");
    else
        fprintf(out, "  TP limit: Y < M_Y*F/alpha = %.1f per tensor axis\n", r->tp_limit);
    fprintf(out,
            "  mixed FSDP+TP over N = %.0f chips%s: X_opt = sqrt((B/F)(M_X/M_Y)N) = %.0f; "
            "B/N = %.0f vs 4 alpha^2/(M_X M_Y F) = %.0f -> %s; minimum batch %.3g tokens\n",
            r->chips / r->P,
            defaulted ? (s->chip.dims == 3 ? " (book's M_X=2, M_Y=1)" : " (M_X=1, M_Y=1)") : "",
            r->x_opt, s->tokens / (r->chips / r->P), r->mixed_threshold,
            s->tokens / (r->chips / r->P) > r->mixed_threshold ? "can be compute-bound"
                                                               : "communication-bound",
            r->mixed_min_batch);
}

static void print_notes(FILE *out, const plan_spec *s, const plan_result *r) {
    fprintf(out, "notes:\n");
    fprintf(out, "  - chip constants are the book's table values (digest §11 erratum 1: the prose "
                 "also uses 2.5e12/4.5e14 for v5p).\n");
    fprintf(out,
            "  - MFU = 6*params*B / (chips*C*t_step) (§9.2): params include embeddings; "
            "causal attention (%.3g FLOPs) and recompute (%.3g) count in the time, not in MFU.\n",
            r->flops_attn, r->flops_recompute);
    fprintf(out, "  - overlapped step = sum over phases of max(T_math, T_comms), X- and Y-axis "
                 "comms summed as in §5.6; serial = T_math + T_comms.\n");
    if (r->Y > 1)
        fprintf(out, "  - TP backward moves AllGather dOut + ReduceScatter dIn per block, the pure "
                     "MP row (4BD); the book's FSDP+MP row prints 8BD/X (erratum 6).\n");
    if (r->X > 1 && s->zero == 0)
        fprintf(out, "  - DP T_math drops the book's stray factor L (erratum 2).\n");
    if (s->remat == PLAN_REMAT_CKPT)
        fprintf(out,
                "  - ckpt%d: 2*D*B*n*L; the book's 20.9 TB for LLaMA-3-70B is n = 4 although "
                "its text says x3 (erratum 9).\n",
                s->ckpt_n);
    fprintf(out,
            "  - the mixed threshold is 4 alpha^2/(M_X M_Y F) with the M's stated; the "
            "book's X = 13.9 example needs M_X/M_Y = 2 (erratum 5), and its v5p 16x16x16 bound "
            "evaluates to 1.6e6, not 1.6e10 (erratum 4).\n");
    fprintf(out,
            "  - memory adds bf16 gradients (%.0f B/param) to the book's 10 B/param; the "
            "book's total is shown separately.\n",
            s->grad_bytes);
    if (r->P > 1)
        fprintf(out,
                "  - pipeline: GPipe bubble (M+P-1)/M = %.3f and ppermutes %.3f ms are "
                "EXTERNAL (not in the book at this commit).\n",
                r->bubble, r->t_pipe * 1e3);
}

void plan_print(FILE *out, const plan_spec *s, const plan_result *r) {
    print_header(out, s, r);
    fprintf(out, "\nper layer (x%.0f layers per chip), per chip:\n", r->layers_per_chip);
    print_segment(out, r, 0);
    fprintf(out, "head (embedding + unembedding, once per step), per chip:\n");
    print_segment(out, r, 1);
    fprintf(out, "\nstep:\n");
    fprintf(out, "  FLOPs: 6*params*B = %.4g; + causal attention %.3g; + recompute %.3g\n",
            r->flops_model, r->flops_attn, r->flops_recompute);
    fprintf(out, "  compute %.3f ms, communication %.3f ms per chip%s\n", r->t_math * 1e3,
            r->t_comm * 1e3, r->P > 1 ? " (compute includes the pipeline bubble)" : "");
    fprintf(out, "  step time: overlapped max %.3f ms, serial sum %.3f ms\n", r->t_step_max * 1e3,
            r->t_step_sum * 1e3);
    fprintf(out, "  MFU %.1f%% (overlapped), %.1f%% (serial); %.4g tokens/s\n", r->mfu * 100,
            r->flops_model / (r->chips * s->chip.flops_bf16 * r->t_step_sum) * 100,
            r->tokens_per_s);
    fprintf(out, "\n");
    print_memory(out, s, r);
    fprintf(out, "\n");
    print_thresholds(out, s, r);
    fprintf(out, "\n");
    print_notes(out, s, r);
}

/* ---- search ---- */

typedef struct {
    plan_spec s;
    double t, mem;
    int fits;
} candidate;

static int cand_cmp(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    return (x->t > y->t) - (x->t < y->t);
}

/* Topologies of `chips` as sorted sizes a >= b >= c that fit the chip's pod; axes of 1 dropped. */
static int topologies(const plan_spec *s, int chips, int (*out)[COST_MAX_AXES], int *n_axes,
                      int cap) {
    int n = 0;
    char err[128];
    for (int a = chips; a >= 1; a--) {
        if (chips % a) continue;
        for (int b = a; b >= 1; b--) {
            if ((chips / a) % b) continue;
            int c = chips / a / b, sz[COST_MAX_AXES] = {a, b, c}, k = 0;
            if (c > b || (s->chip.dims == 2 && c != 1)) continue;
            for (int i = 0; i < COST_MAX_AXES; i++)
                if (sz[i] > 1) out[n][k++] = sz[i];
            if (k == 0) out[n][k++] = 1;
            if (cost_topology_check(&s->chip, out[n], k, err, sizeof err) < 0) continue;
            n_axes[n] = k;
            if (++n == cap) return n;
        }
    }
    return n;
}

static int duplicate(const candidate *c, int n, const plan_spec *s, double t, double mem) {
    for (int i = 0; i < n; i++)
        if (c[i].t == t && c[i].mem == mem && c[i].s.zero == s->zero) return 1;
    return 0;
}

int plan_search(FILE *out, const plan_spec *base, int chips, int top) {
    enum { MAX_TOPO = 256 };
    int topo[MAX_TOPO][COST_MAX_AXES], topo_n[MAX_TOPO], n_topo;
    if (chips > 0) {
        n_topo = topologies(base, chips, topo, topo_n, MAX_TOPO);
    } else {
        n_topo = 1;
        topo_n[0] = base->n_axes;
        memcpy(topo[0], base->sizes, sizeof topo[0]);
    }
    const int cap = n_topo * 8 * 4;
    candidate *c = malloc(sizeof *c * (size_t)(cap > 0 ? cap : 1));
    if (!c) {
        fprintf(out, "search: out of memory\n");
        return 0;
    }
    int n = 0;
    char err[256];
    plan_result r;
    for (int t = 0; t < n_topo; t++) {
        plan_spec s = *base;
        s.pipe_mask = 0;
        s.microbatches = 1;
        if (chips > 0 && plan_spec_set_topology(&s, topo[t], topo_n[t], err, sizeof err) < 0)
            continue;
        const int all = (1 << s.n_axes) - 1;
        for (int tm = 0; tm <= all; tm++)
            for (int z = 0; z <= 3; z++) {
                s.tensor_mask = tm;
                s.data_mask = all & ~tm;
                s.zero = z;
                if (s.data_mask == 0 && z > 0) continue;
                if (plan_compute(&s, &r, err, sizeof err) < 0) continue;
                if (duplicate(c, n, &s, r.t_step_max, r.mem_total)) continue;
                c[n++] = (candidate){s, r.t_step_max, r.mem_total, r.fits};
            }
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    fprintf(out,
            "search: %d shardings of %s chips for B = %.0f tokens, ranked by overlapped step "
            "time (fitting ones first)\n",
            n, chips > 0 ? "the" : "this topology's", base->tokens);
    fprintf(out, "%4s %-10s %-5s %5s %4s %-5s %5s %11s %11s %6s %10s %s\n", "rank", "topology",
            "data", "X", "zero", "tens", "Y", "step max ms", "step sum ms", "MFU", "GB/chip",
            "fits");
    for (int i = 0; i < n && i < top; i++) {
        char topo_s[32], d[8], tn[8];
        const plan_spec *s = &c[i].s;
        plan_compute(s, &r, err, sizeof err);
        topo_str(s, topo_s, sizeof topo_s);
        axes_str(s, s->data_mask, d);
        axes_str(s, s->tensor_mask, tn);
        fprintf(out, "%4d %-10s %-5s %5.0f %4d %-5s %5.0f %11.2f %11.2f %5.1f%% %10.2f %s\n", i + 1,
                topo_s, d, r.X, s->zero, tn, r.Y, r.t_step_max * 1e3, r.t_step_sum * 1e3,
                r.mfu * 100, r.mem_total / 1e9, r.fits ? "yes" : "no");
    }
    free(c);
    return n;
}
