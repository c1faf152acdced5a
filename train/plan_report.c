/* plan_report: prints a plan (per layer, per step, memory, thresholds, notes) and searches
 * shardings. See plan.h. */
#include "train/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* plan_axes_str, "-" for none. */
static void axes_str(const plan_spec *s, plan_role role, char *out, size_t len) {
    plan_axes_str(s, role, out, len);
    if (!out[0]) snprintf(out, len, "-");
}

static void print_header(FILE *out, const plan_spec *s, const plan_result *r) {
    const cost_chip *c = &s->chip;
    const model_shape *m = &s->shape;
    char topo[64], d[16], t[16], p[16], rb[64];
    plan_topology_str(s, topo, sizeof topo);
    fprintf(out,
            "chip %s: C %.3g FLOP/s (bf16), HBM %.0f GB at %.3g B/s, ICI link %.3g B/s "
            "one-way (W = %.3g bidirectional), T_min %.3g us\n",
            c->name, c->flops_bf16, c->hbm_bytes / 1e9, c->hbm_bw, s->link.w_oneway,
            2 * s->link.w_oneway, s->link.hop_latency * 1e6);
    fprintf(out, "topology %s = %.0f chips:", topo, r->chips);
    for (int i = 0; i < s->n_axes; i++) {
        fprintf(out, " %c=%d (%s", s->names[i], s->sizes[i], s->wraps[i] ? "wraps" : "open");
        if (plan_axis_split(s, i))
            fprintf(out, "; split: tensor blocks of %d, data %d strided by %d", s->tensor_block[i],
                    s->sizes[i] / s->tensor_block[i], s->tensor_block[i]);
        fprintf(out, ")");
    }
    fprintf(out,
            "\nmodel: L=%lld D=%lld F=%lld N=%lld K=%lld H=%lld V=%lld T=%lld; params "
            "%.4g (MLP %.4g, attention %.4g, embeddings %.4g)\n",
            (long long)m->L, (long long)m->D, (long long)m->F, (long long)m->N, (long long)m->K,
            (long long)m->H, (long long)m->V, (long long)m->T, r->params,
            (double)m->L * 3 * m->D * m->F, (double)m->L * 2 * m->D * m->H * (m->N + m->K),
            2.0 * m->D * m->V);
    fprintf(out, "batch: B = %.0f tokens (%.6g sequences of %lld)\n", s->tokens,
            s->tokens / (double)m->T, (long long)m->T);
    axes_str(s, PLAN_ROLE_DATA, d, sizeof d);
    axes_str(s, PLAN_ROLE_TENSOR, t, sizeof t);
    axes_str(s, PLAN_ROLE_PIPE, p, sizeof p);
    fprintf(out,
            "sharding: data %s (X=%.0f, ZeRO-%d), tensor %s (Y=%.0f), pipeline %s (P=%.0f, "
            "%d microbatches); remat %s; collectives %s\n",
            d, r->X, s->zero, t, r->Y, p, r->P, s->microbatches,
            plan_remat_str(s, 1, rb, sizeof rb), cost_alg_name(s->alg));
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
                plan_path_name(c->path), c->what);
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
            plan_remat_str(s, 1, rb, sizeof rb));
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

/* Appends one note if there is room. */
static void note(char (*notes)[PLAN_NOTE_LEN], int *n, const char *fmt, ...) {
    if (*n >= PLAN_MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes[*n], PLAN_NOTE_LEN, fmt, ap);
    va_end(ap);
    (*n)++;
}

/* The layer collective of `role` with the most bytes, or NULL. */
static const plan_coll *largest(const plan_result *r, plan_role role) {
    const plan_coll *best = NULL;
    for (int i = 0; i < r->n_coll; i++) {
        const plan_coll *c = &r->coll[i];
        if (c->seg == 0 && c->role == role && (!best || c->bytes > best->bytes)) best = c;
    }
    return best;
}

/* The book's bandwidth-bound time of c over M full-W axes (§3.3) against ours, in one note. */
static void note_vs_book(char (*notes)[PLAN_NOTE_LEN], int *n, const plan_spec *s,
                         const plan_coll *c, const char *m_name, int M) {
    const double W = 2 * s->link.w_oneway;
    const double f = c->op == COST_OP_ALL_REDUCE ? 2 : c->op == COST_OP_ALL_TO_ALL ? 0.25 : 1;
    const double book = f * c->bytes / (W * M), ours = c->est.t_bandwidth;
    note(notes, n,
         "%s over %s: the book's V/(W %s) with %s = %d (every touched axis at full W) gives "
         "%.4g ms; the link-sharing cost gives %.4g ms (x%.3g), i.e. an effective %s of %.3g.",
         cost_op_name(c->op), c->axes, m_name, m_name, M, book * 1e3, ours * 1e3, ours / book,
         m_name, M * book / ours);
}

int plan_notes(const plan_spec *s, const plan_result *r, char (*notes)[PLAN_NOTE_LEN]) {
    int n = 0, any_split = 0;
    note(notes, &n,
         "chip constants are the book's table values (digest §11 erratum 1: the prose also uses "
         "2.5e12/4.5e14 for v5p).");
    note(notes, &n,
         "MFU = 6*params*B / (chips*C*t_step) (§9.2): params include embeddings; causal attention "
         "(%.3g FLOPs) and recompute (%.3g) count in the time, not in MFU.",
         r->flops_attn, r->flops_recompute);
    note(notes, &n,
         "overlapped step = sum over phases of max(T_math, T_comms), X- and Y-axis comms summed "
         "as in §5.6; serial = T_math + T_comms.");
    if (r->Y > 1)
        note(notes, &n,
             "TP backward moves AllGather dOut + ReduceScatter dIn per block, the pure MP row "
             "(4BD); the book's FSDP+MP row prints 8BD/X (erratum 6).");
    if (r->X > 1 && s->zero == 0)
        note(notes, &n, "DP T_math drops the book's stray factor L (erratum 2).");
    if (s->remat == PLAN_REMAT_CKPT)
        note(notes, &n,
             "ckpt%d: 2*D*B*n*L; the book's 20.9 TB for LLaMA-3-70B is n = 4 although its text "
             "says x3 (erratum 9).",
             s->ckpt_n);
    note(notes, &n,
         "the mixed threshold is 4 alpha^2/(M_X M_Y F) with the M's stated; the book's X = 13.9 "
         "example needs M_X/M_Y = 2 (erratum 5), and its v5p 16x16x16 bound evaluates to 1.6e6, "
         "not 1.6e10 (erratum 4).");
    note(notes, &n,
         "memory adds bf16 gradients (%.0f B/param) to the book's 10 B/param; the book's total "
         "is shown separately.",
         s->grad_bytes);
    if (r->P > 1)
        note(notes, &n,
             "pipeline: GPipe bubble (M+P-1)/M = %.3f and ppermutes %.3f ms are EXTERNAL (not in "
             "the book at this commit).",
             r->bubble, r->t_pipe * 1e3);
    for (int i = 0; i < s->n_axes; i++) {
        if (!plan_axis_split(s, i)) continue;
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
        const plan_coll *cd = largest(r, PLAN_ROLE_DATA), *ct = largest(r, PLAN_ROLE_TENSOR);
        if (cd && r->M_X > 0) note_vs_book(notes, &n, s, cd, "M_X", r->M_X);
        if (ct && r->M_Y > 0) note_vs_book(notes, &n, s, ct, "M_Y", r->M_Y);
        if (s->alg == COST_ALG_DIRECT)
            note(notes, &n,
                 "--alg direct is costed by its busiest-link load and ignores the link sharing of "
                 "the strided sub-axes: use auto, multi, seq, bidir or ring for split axes.");
    }
    return n;
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
    char notes[PLAN_MAX_NOTES][PLAN_NOTE_LEN];
    const int n_notes = plan_notes(s, r, notes);
    fprintf(out, "notes:\n");
    for (int i = 0; i < n_notes; i++) fprintf(out, "  - %s\n", notes[i]);
}

/* ---- search ---- */

/* One enumerated sharding before its full result is kept. */
typedef struct {
    plan_spec s;
    double t, t_sum, mem;
    int fits, idx;
} entry;

static int near(double a, double b) {
    return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b));
}

/* Groups equal shardings (ZeRO stage, step time, memory) together, in enumeration order. */
static int dedup_cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->s.zero != y->s.zero) return x->s.zero - y->s.zero;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->mem != y->mem) return x->mem < y->mem ? -1 : 1;
    return x->idx - y->idx;
}

/* Fitting ones first, then by overlapped step time; ties (compute-bound shardings all take
 * T_math) by serial step time, the comms there are to hide; then in enumeration order. */
static int rank_cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (!near(x->t, y->t)) return x->t < y->t ? -1 : 1;
    if (x->t_sum != y->t_sum) return x->t_sum < y->t_sum ? -1 : 1;
    return x->idx - y->idx;
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

enum { MAX_OPT = 64 };

/* The roles axis of size n can take: -1 data, 0 tensor (whole axis), k > 1 a tensor block of k
 * with data on the strided rest. */
static int axis_options(int n, int whole_axes, int *opt) {
    int c = 0;
    opt[c++] = -1;
    opt[c++] = 0;
    for (int k = 2; !whole_axes && k < n && c < MAX_OPT; k++)
        if (n % k == 0) opt[c++] = k;
    return c;
}

/* Appends every sharding of s's topology to *e (growing it), numbering them from *idx. */
static int enumerate(const plan_spec *topo, int whole_axes, entry **e, int *n, int *cap, int *idx) {
    int opt[COST_MAX_AXES][MAX_OPT], n_opt[COST_MAX_AXES], pick[COST_MAX_AXES] = {0, 0, 0};
    const int na = topo->n_axes;
    char err[256];
    plan_result r;
    for (int i = 0; i < na; i++) n_opt[i] = axis_options(topo->sizes[i], whole_axes, opt[i]);
    for (;;) {
        plan_spec s = *topo;
        s.data_mask = s.tensor_mask = 0;
        for (int i = 0; i < na; i++) {
            const int o = opt[i][pick[i]];
            s.tensor_block[i] = o > 0 ? o : 0;
            if (o >= 0) s.tensor_mask |= 1 << i;
            if (o != 0) s.data_mask |= 1 << i;
        }
        for (int z = 0; z <= 3; z++) {
            s.zero = z;
            if (s.data_mask == 0 && z > 0) continue;
            if (plan_compute(&s, &r, err, sizeof err) < 0) continue;
            if (*n == *cap) {
                const int nc = *cap ? 2 * *cap : 1024;
                entry *ne = realloc(*e, sizeof **e * (size_t)nc);
                if (!ne) return -1;
                *e = ne;
                *cap = nc;
            }
            (*e)[(*n)++] = (entry){s, r.t_step_max, r.t_step_sum, r.mem_total, r.fits, (*idx)++};
        }
        int i = na - 1; /* the last axis varies fastest: z's splits come before x's */
        while (i >= 0 && ++pick[i] == n_opt[i]) pick[i--] = 0;
        if (i < 0) return 0;
    }
}

plan_candidate *plan_search_list(const plan_spec *base, const plan_search_opt *o, int *n_out) {
    enum { MAX_TOPO = 256 };
    int topo[MAX_TOPO][COST_MAX_AXES], topo_n[MAX_TOPO], n_topo, n = 0, cap = 0, idx = 0;
    entry *e = NULL;
    char err[256];
    *n_out = 0;
    if (o->chips > 0) {
        n_topo = topologies(base, o->chips, topo, topo_n, MAX_TOPO);
    } else {
        n_topo = 1;
        topo_n[0] = base->n_axes;
        memcpy(topo[0], base->sizes, sizeof topo[0]);
    }
    for (int t = 0; t < n_topo; t++) {
        plan_spec s = *base;
        s.pipe_mask = 0;
        s.microbatches = 1;
        memset(s.tensor_block, 0, sizeof s.tensor_block);
        if (o->chips > 0 && plan_spec_set_topology(&s, topo[t], topo_n[t], err, sizeof err) < 0)
            continue;
        if (enumerate(&s, o->whole_axes, &e, &n, &cap, &idx) < 0) {
            free(e);
            return NULL;
        }
    }
    if (n > 1) qsort(e, (size_t)n, sizeof *e, dedup_cmp);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (kept == 0 || e[kept - 1].s.zero != e[i].s.zero || !near(e[kept - 1].t, e[i].t) ||
            !near(e[kept - 1].mem, e[i].mem))
            e[kept++] = e[i];
    if (kept > 1) qsort(e, (size_t)kept, sizeof *e, rank_cmp);
    plan_candidate *c = malloc(sizeof *c * (size_t)(kept > 0 ? kept : 1));
    if (!c) {
        free(e);
        return NULL;
    }
    for (int i = 0; i < kept; i++) {
        c[i].s = e[i].s;
        plan_compute(&c[i].s, &c[i].r, err, sizeof err);
    }
    free(e);
    *n_out = kept;
    return c;
}

static void search_print_table(FILE *out, const plan_spec *base, const plan_search_opt *o,
                               const plan_candidate *c, int n) {
    fprintf(out,
            "search: %d shardings of %s chips for B = %.0f tokens, ranked by overlapped step "
            "time (fitting ones first)%s\n",
            n, o->chips > 0 ? "the" : "this topology's", base->tokens,
            o->whole_axes ? "; whole axes only"
                          : "; z:4 = tensor on contiguous blocks of 4 of z, z/4 = data on the "
                            "strided rest");
    fprintf(out, "%4s %-10s %-12s %5s %4s %-8s %4s %11s %11s %6s %9s %s\n", "rank", "topology",
            "data", "X", "zero", "tensor", "Y", "step max ms", "step sum ms", "MFU", "GB/chip",
            "fits");
    for (int i = 0; i < n && i < o->top; i++) {
        char topo_s[32], d[16], tn[16];
        const plan_spec *s = &c[i].s;
        const plan_result *r = &c[i].r;
        plan_topology_str(s, topo_s, sizeof topo_s);
        axes_str(s, PLAN_ROLE_DATA, d, sizeof d);
        axes_str(s, PLAN_ROLE_TENSOR, tn, sizeof tn);
        fprintf(out, "%4d %-10s %-12s %5.0f %4d %-8s %4.0f %11.2f %11.2f %5.1f%% %9.2f %s\n", i + 1,
                topo_s, d, r->X, s->zero, tn, r->Y, r->t_step_max * 1e3, r->t_step_sum * 1e3,
                r->mfu * 100, r->mem_total / 1e9, r->fits ? "yes" : "no");
    }
}

int plan_search(FILE *out, const plan_spec *base, const plan_search_opt *o) {
    int n;
    plan_candidate *c = plan_search_list(base, o, &n);
    if (!c) {
        fprintf(stderr, "meshplan: error: search: out of memory\n");
        return 0;
    }
    const int shown = n < o->top ? n : o->top;
    if (o->format == PLAN_FORMAT_CSV)
        plan_search_print_csv(out, c, shown);
    else if (o->format == PLAN_FORMAT_JSON)
        plan_search_print_json(out, c, shown);
    else
        search_print_table(out, base, o, c, n);
    free(c);
    return n;
}
