/* calc_report: prints a plan as a table (per layer, per step, memory, thresholds) and its notes.
 * See calc.h. */
#include "calc/calc.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void print_header(FILE *out, const calc_spec *s, const calc_result *r) {
    const cost_chip *c = &s->chip;
    const model_shape *m = &s->shape;
    char topo[64], d[16], t[16], p[16], rb[64];
    calc_topology_str(s, topo, sizeof topo);
    fprintf(out,
            "chip %s: C %.3g FLOP/s (bf16), HBM %.0f GB at %.3g B/s, ICI link %.3g B/s "
            "one-way (W = %.3g bidirectional), T_min %.3g us\n",
            c->name, c->flops_bf16, c->hbm_bytes / 1e9, c->hbm_bw, s->link.w_oneway,
            2 * s->link.w_oneway, s->link.hop_latency * 1e6);
    fprintf(out, "topology %s = %.0f chips:", topo, r->chips_pod);
    for (int i = 0; i < s->n_axes; i++) {
        fprintf(out, " %c=%d (%s", s->names[i], s->sizes[i], s->wraps[i] ? "wraps" : "open");
        if (calc_axis_split(s, i))
            fprintf(out, "; split: tensor blocks of %d, data %d strided by %d", s->tensor_block[i],
                    s->sizes[i] / s->tensor_block[i], s->tensor_block[i]);
        fprintf(out, ")");
    }
    fprintf(out,
            "\nmodel: L=%lld D=%lld F=%lld N=%lld K=%lld H=%lld V=%lld T=%lld; params "
            "%.4g (MLP %.4g, attention %.4g, embeddings %.4g)\n",
            (long long)m->L, (long long)m->D, (long long)m->F, (long long)m->N, (long long)m->K,
            (long long)m->H, (long long)m->V, (long long)m->T, r->params,
            s->moe.E ? (double)m->L * calc_moe_block_params(m, &s->moe)
                     : (double)m->L * shape_mlp_params(m),
            (double)m->L * shape_attn_params(m), 2.0 * m->D * m->V);
    calc_moe_print(out, s, r);
    if (r->pods > 1)
        fprintf(out,
                "pods: %.0f of %s (%.0f chips) joined by DCN at %.3g B/s per chip; data parallel "
                "across pods, the gradient reduced hierarchically (ReduceScatter in the pod, the "
                "shard AllReduced over DCN, AllGather in the pod)\n",
                r->pods, topo, r->chips, r->dcn_bw);
    fprintf(out, "batch: B = %.0f tokens (%.6g sequences of %lld)", s->tokens,
            s->tokens / (double)m->T, (long long)m->T);
    if (r->pods > 1) fprintf(out, "; %.0f tokens per pod", r->tokens_per_pod);
    fprintf(out, "\n");
    calc_axes_label(s, CALC_ROLE_DATA, d, sizeof d);
    calc_axes_label(s, CALC_ROLE_TENSOR, t, sizeof t);
    calc_axes_label(s, CALC_ROLE_PIPE, p, sizeof p);
    fprintf(out,
            "sharding: data %s (X=%.0f, ZeRO-%d), tensor %s (Y=%.0f), pipeline %s (P=%.0f, "
            "%d microbatches); remat %s; collectives %s\n",
            d, r->X, s->zero, t, r->Y, p, r->P, s->microbatches,
            calc_remat_str(s, 1, rb, sizeof rb), calc_alg_name(s->alg));
    if (r->chips_pod > r->X * r->Y * r->P)
        fprintf(out, "  warning: %.0f chips but X*Y*P = %.0f: the other axes replicate work\n",
                r->chips_pod, r->X * r->Y * r->P);
}

static void print_segment(FILE *out, const calc_result *r, int seg) {
    static const char *phase_names[] = {"forward", "backward"};
    for (int k = 0; k < 2; k++) {
        const calc_phase *p = &r->phase[seg][k];
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
        const calc_coll *c = &r->coll[i];
        if (c->seg != seg) continue;
        if (!any)
            fprintf(out, "    %-4s %-13s %11s %5s %4s %10s %10s %-14s %-8s %s\n", "pass", "op",
                    "V bytes", "calls", "hops", "ms/call", "ms total", "regime", "path", "what");
        any = 1;
        fprintf(out, "    %-4s %-13s %11.4g %5d %4d %10.4f %10.4f %-14s %-8s %s\n",
                c->bwd ? "bwd" : "fwd", cost_op_name(c->op), c->bytes, c->count, c->est.hops,
                c->est.seconds * 1e3, c->count * c->est.seconds * 1e3, cost_regime_name(c->regime),
                calc_path_name(c->path), c->what);
    }
    if (!any) fprintf(out, "    (no collectives)\n");
}

static void print_memory(FILE *out, const calc_spec *s, const calc_result *r) {
    char rb[64];
    fprintf(out, "memory per chip (GB = 1e9):\n");
    fprintf(out, "  params     %9.3f GB  (%.0f B/param%s)\n", r->mem_params / 1e9, s->param_bytes,
            s->zero >= 3 ? ", sharded by ZeRO-3" : "");
    fprintf(out, "  grads      %9.3f GB  (%.0f B/param%s)\n", r->mem_grads / 1e9, s->grad_bytes,
            s->zero >= 2 ? ", sharded by ZeRO-2+" : "");
    fprintf(out, "  optimizer  %9.3f GB  (%.0f B/param Adam moments%s)\n", r->mem_opt / 1e9,
            s->opt_bytes, s->zero >= 1 ? ", sharded by ZeRO-1+" : "");
    fprintf(out, "  activations%9.3f GB  (remat %s)\n", r->mem_acts / 1e9,
            calc_remat_str(s, 1, rb, sizeof rb));
    if (r->mem_gathered > 0)
        fprintf(out, "  gathered   %9.3f GB  (FSDP: 2 layers or the unembedding, gathered)\n",
                r->mem_gathered / 1e9);
    fprintf(out, "  total      %9.3f GB  of %.0f GB HBM: %s\n", r->mem_total / 1e9, r->hbm / 1e9,
            r->fits ? "fits" : "DOES NOT FIT");
    fprintf(out,
            "  book's total over all chips%s (params + optimizer + activations, no grads): "
            "%.4g TB -> at least %.1f chips of %.0f GB\n",
            r->pods > 1 ? " of a pod" : "", r->mem_global / 1e12, r->min_chips_memory,
            r->hbm / 1e9);
}

/* One threshold line: "  <fmt...> -> compute-bound" when above, else "-> <otherwise>". */
static void bound_line(FILE *out, int above, const char *otherwise, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void bound_line(FILE *out, int above, const char *otherwise, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("  ", out);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fprintf(out, " -> %s\n", above ? "compute-bound" : otherwise);
}

static void print_thresholds(FILE *out, const calc_spec *s, const calc_result *r) {
    const int defaulted = !(r->M_X > 0 && r->M_Y > 0);
    fprintf(out, "thresholds (the book's training chapter):\n");
    fprintf(out,
            "  C/W_ici = alpha = %.0f FLOPs/byte; C/W_hbm = %.0f; a hop is latency-bound "
            "below W_oneway*T_min = %.3g kB\n",
            r->alpha, r->hbm_intensity, s->link.w_oneway * s->link.hop_latency / 1e3);
    if (r->X > 1)
        bound_line(out, r->tokens_per_x > r->dp_threshold, "communication-bound",
                   "DP/FSDP: B/X = %.0f tokens per data shard vs alpha/M_X = %.0f (M_X = %d)",
                   r->tokens_per_x, r->dp_threshold, r->M_X);
    if (r->Y > 1)
        fprintf(out, "  TP: Y = %.0f vs M_Y*F/alpha = %.1f (M_Y = %d) -> %s\n", r->Y, r->tp_limit,
                r->M_Y, r->Y < r->tp_limit ? "compute-bound" : "communication-bound");
    else
        fprintf(out, "  TP limit: Y < M_Y*F/alpha = %.1f per tensor axis\n", r->tp_limit);
    fprintf(out,
            "  mixed FSDP+TP over N = %.0f chips%s: X_opt = sqrt((B/F)(M_X/M_Y)N) = %.0f; "
            "B/N = %.0f vs 4 alpha^2/(M_X M_Y F) = %.0f -> %s; minimum batch %.3g tokens\n",
            r->chips_pod / r->P,
            defaulted ? (s->chip.dims == 3 ? " (book's M_X=2, M_Y=1)" : " (M_X=1, M_Y=1)") : "",
            r->x_opt, r->tokens_per_pod / (r->chips_pod / r->P), r->mixed_threshold,
            r->tokens_per_pod / (r->chips_pod / r->P) > r->mixed_threshold ? "can be compute-bound"
                                                                           : "communication-bound",
            r->mixed_min_batch);
    calc_moe_print_thresholds(out, s, r);
    if (r->pods > 1)
        bound_line(out, r->tokens_per_pod > r->dcn_threshold, "DCN-bound",
                   "DCN: B per pod = %.0f tokens vs C/W_dcn = %.0f (W_dcn = %.3g B/s per chip)",
                   r->tokens_per_pod, r->dcn_threshold, r->dcn_bw);
}

/* Appends one note if there is room. */
static void note(char (*notes)[CALC_NOTE_LEN], int *n, const char *fmt, ...) {
    if (*n >= CALC_MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes[*n], CALC_NOTE_LEN, fmt, ap);
    va_end(ap);
    (*n)++;
}

/* The layer collective of `role` with the most bytes, or NULL. */
static const calc_coll *largest(const calc_result *r, calc_role role) {
    const calc_coll *best = NULL;
    for (int i = 0; i < r->n_coll; i++) {
        const calc_coll *c = &r->coll[i];
        if (c->seg == 0 && c->role == role && (!best || c->bytes > best->bytes)) best = c;
    }
    return best;
}

/* The book's bandwidth-bound time of c over M full-W axes (sharding chapter) against ours, in one
 * note. */
static void note_vs_book(char (*notes)[CALC_NOTE_LEN], int *n, const calc_spec *s,
                         const calc_coll *c, const char *m_name, int M) {
    const double W = 2 * s->link.w_oneway;
    const double f = c->op == COST_OP_ALL_REDUCE ? 2 : c->op == COST_OP_ALL_TO_ALL ? 0.25 : 1;
    const double book = f * c->bytes / (W * M), ours = c->est.t_bandwidth;
    note(notes, n,
         "%s over %s: the book's V/(W %s) with %s = %d (every touched axis at full W) gives "
         "%.4g ms; the link-sharing cost gives %.4g ms (x%.3g), i.e. an effective %s of %.3g.",
         cost_op_name(c->op), c->axes, m_name, m_name, M, book * 1e3, ours * 1e3, ours / book,
         m_name, M * book / ours);
}

int calc_notes(const calc_spec *s, const calc_result *r, char (*notes)[CALC_NOTE_LEN]) {
    int n = 0, any_split = 0;
    note(notes, &n,
         "chip constants are the book's table values (the book's prose also uses "
         "2.5e12/4.5e14 for v5p).");
    note(notes, &n,
         "MFU = 6*params*B / (chips*C*t_step) (profiling chapter): params include embeddings%s; "
         "causal attention "
         "(%.3g FLOPs) and recompute (%.3g) count in the time, not in MFU.",
         s->moe.E ? " and, with experts, count the ones a token activates" : "", r->flops_attn,
         r->flops_recompute);
    if (s->moe.E)
        note(notes, &n,
             "experts: routing taken as balanced (each expert B*k/E tokens); dropless; the "
             "AllToAll's V is |Z| x a chip's k*(B/X)/M token rows of D/Y, the book's 1/4 of an "
             "AllGather of that on a bidirectional ring; activations use the dense 20*B*D per "
             "layer; the experts' weight reads add to the math time where HBM-bound.");
    note(notes, &n,
         "overlapped step = sum over phases of max(T_math, T_comms), X- and Y-axis comms summed "
         "as in the training chapter; serial = T_math + T_comms.");
    if (r->Y > 1)
        note(notes, &n,
             "TP backward moves AllGather dOut + ReduceScatter dIn per block, the pure MP row "
             "(4BD); the book's FSDP+MP row prints 8BD/X (its tables disagree).");
    if (r->X > 1 && s->zero == 0) note(notes, &n, "DP T_math drops the book's stray factor L.");
    if (s->remat == CALC_REMAT_CKPT)
        note(notes, &n,
             "ckpt%d: 2*D*B*n*L; the book's 20.9 TB for LLaMA-3-70B is n = 4 although its text "
             "says x3.",
             s->ckpt_n);
    note(notes, &n,
         "the mixed threshold is 4 alpha^2/(M_X M_Y F) with the M's stated; the book's X = 13.9 "
         "example needs M_X/M_Y = 2 (unstated), and its v5p 16x16x16 bound evaluates to 1.6e6, "
         "not the printed 1.6e10.");
    note(notes, &n,
         "memory adds bf16 gradients (%.0f B/param) to the book's 10 B/param; the book's total "
         "is shown separately.",
         s->grad_bytes);
    if (r->P > 1)
        note(notes, &n,
             "pipeline: the step is the %s schedule simulated with per-stage costs and the p2p "
             "time (bubble %.3f of it, ppermutes %.3f ms a rank) - EXTERNAL: the book gives no "
             "bubble formula.",
             sched_kind_name(s->schedule), r->pipe_bubble, r->t_pipe * 1e3);
    if (r->pods > 1)
        note(notes, &n,
             "pods: DCN is priced as a bidirectional ring of the %.0f pods at the chip's share of "
             "its host's DCN (2.5e10 B/s per host) with the ICI hop latency; its AllReduce of "
             "each chip's gradient shard runs in the backward phase beside the ICI comms.",
             r->pods);
    for (int i = 0; i < s->n_axes; i++) {
        if (!calc_axis_split(s, i)) continue;
        const int k = s->tensor_block[i], m = s->sizes[i] / k;
        const char a = s->names[i];
        any_split = 1;
        note(notes, &n,
             "axis %c (%d, %s) is split (not in the book): tensor %c:%d is a contiguous block of "
             "%d chips, an open line (no wraparound link inside a block); data %c/%d is a ring of "
             "%d chips %d apart that %s, each step crossing %d links that the %d strided groups "
             "(one per tensor rank) share: W/%d per link, %d T_min per step.",
             a, s->sizes[i], s->wraps[i] ? "wraps" : "open", a, k, k, a, k, m, k,
             s->wraps[i] ? "wraps like its axis" : "is open like its axis", k, k, k, k);
    }
    if (any_split) {
        note(notes, &n,
             "M_X = %d and M_Y = %d count the physical axes each role touches (a split axis counts "
             "for both); the thresholds above use them, as the book would.",
             r->M_X, r->M_Y);
        const calc_coll *cd = largest(r, CALC_ROLE_DATA), *ct = largest(r, CALC_ROLE_TENSOR);
        if (cd && r->M_X > 0) note_vs_book(notes, &n, s, cd, "M_X", r->M_X);
        if (ct && r->M_Y > 0) note_vs_book(notes, &n, s, ct, "M_Y", r->M_Y);
        if (s->alg == MESH_ALG_DIRECT)
            note(notes, &n,
                 "--alg direct is costed by its busiest-link load and ignores the link sharing of "
                 "the strided sub-axes: use auto, multi, seq, bidir or ring for split axes.");
    }
    return n;
}

void calc_print(FILE *out, const calc_spec *s, const calc_result *r) {
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
    if (r->P > 1) calc_print_pipe(out, s, r);
    fprintf(out, "\n");
    print_memory(out, s, r);
    fprintf(out, "\n");
    print_thresholds(out, s, r);
    fprintf(out, "\n");
    char notes[CALC_MAX_NOTES][CALC_NOTE_LEN];
    const int n_notes = calc_notes(s, r, notes);
    fprintf(out, "notes:\n");
    for (int i = 0; i < n_notes; i++) fprintf(out, "  - %s\n", notes[i]);
}
