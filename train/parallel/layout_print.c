/* layout_print: the plan (plan.h) in the book's notation, printed at start-up: each parameter's
 * sharding, the activations', the plan's collectives of one layer and of the step with their
 * axes, V (bytes in their wire format), path and predicted time, and memory per rank by category
 * from the plan's list of buffers. Reads the plan only. */
#include <string.h>

#include "train/parallel/par.h"
#include "train/observe/report.h"

static const char *dimstr(char *buf, size_t n, const char *dim, const char *s) {
    if (s && s[0])
        snprintf(buf, n, "%s_%s", dim, s);
    else
        snprintf(buf, n, "%s", dim);
    return buf;
}

/* One row of the table: a planned call with its V, path and predicted time. */
static void coll_row(const plan *p, const report *r, const plan_call *c, FILE *out) {
    const plan_axes *a = plan_role_axes(p, c->role);
    const mesh_coll_call call = plan_coll_call(p, c->kind, c->count);
    int lat = 0;
    const double t = report_predict(r, &call, &lat);
    const double V =
        (double)mesh_wire_bytes(c->wire) * report_book_elems(c->op, c->count, (int)a->n);
    fprintf(out, "  %-8s %-14s %-3s %-44s %2d× %9.3f MB  %-10s %8.3f ms %s\n",
            plan_pass_name(c->pass), mesh_op_name(c->op), a->sub, c->what, c->times, V / 1e6,
            plan_path_name(c->path), 1e3 * t, lat ? "latency-bound" : "bandwidth-bound");
}

/* The scheme in one line: which axes shard what, the algorithm, overlap. */
static void print_scheme(const plan *p, FILE *out) {
    fprintf(out, "== plan (the book's notation; B = tokens) ==\n");
    if (plan_trivial(p)) {
        fprintf(out, "single rank: every tensor whole, no communication\n");
        return;
    }
    const char *X = p->data.sub, *Y = p->tensor.sub, *Z = p->pipe.sub;
    fprintf(out,
            "data over %s (|%s| = %lld)%s%s | tensor over %s (|%s| = %lld) | pipeline "
            "over %s (|%s| = %lld) | algorithm %s | overlap %s\n",
            X[0] ? X : "-", X[0] ? X : "X", (long long)p->data.n, p->zero ? ", ZeRO-" : "",
            p->zero ? (p->zero == 1   ? "1 (optimizer state sharded)"
                       : p->zero == 2 ? "2 (+ gradients sharded)"
                                      : "3 / FSDP (+ weights sharded)")
                    : "",
            Y[0] ? Y : "-", Y[0] ? Y : "Y", (long long)p->tensor.n, Z[0] ? Z : "-", Z[0] ? Z : "Z",
            (long long)p->pipe.n, mesh_alg_name(p->alg), p->overlap ? "on" : "off");
    if (p->cp.n > 1)
        fprintf(out,
                "context over %s (|C| = %lld, --cp-alg %s): each sequence's T = %lld tokens "
                "split %s, %lld per rank (In[B, T_C, D]); %s is among the data axes above for the "
                "gradients and ZeRO, not for the batch\n",
                p->cp.sub, (long long)p->cp.n, p->c.cp_alg, (long long)p->s.T,
                p->cp_pieces == 2 ? "zigzag (chunks i and 2|C|-1-i)" : "contiguously",
                (long long)(p->s.T / p->cp.n), p->cp.sub);
}

/* Every parameter's and the activations' sharding in the book's notation. */
static void print_shardings(const plan *p, FILE *out) {
    char b1[32], b2[32], b3[32];
    const int one = plan_trivial(p);
    const char *X = one ? "" : p->data.sub, *Y = one ? "" : p->tensor.sub;
    const char *Xw = p->zero == 3 ? X : "";
    fprintf(out,
            "parameters (global sharding; with ZeRO-1/2 the _%s shards are the optimizer "
            "state's):\n",
            X[0] ? X : "X");
    const char *Xs = p->zero ? X : "";
    char Ls[16] = "L";
    if (p->pipe.n > 1) snprintf(Ls, sizeof Ls, "L_%s", p->pipe.sub);
    fprintf(out, "  embed[%s, %s]  attn_norm[%s, %s]  mlp_norm[%s, %s]  final_norm[%s]\n",
            dimstr(b1, 32, "V", Y), dimstr(b2, 32, "D", Xs), Ls, b2, Ls, b2, b2);
    fprintf(out, "  wq[%s, %s, %s]  wk,wv[%s, %s, %s]%s  wo[%s, %s, %s]\n", Ls, b2,
            dimstr(b1, 32, "N·H", Y), Ls, b2, dimstr(b3, 32, "K·H", Y),
            p->g[P_WK].kv_group ? " (kv heads replicated over |Y|/K ranks)" : "", Ls, b1, b2);
    fprintf(out, "  w_gate,w_up[%s, %s, %s]  w_down[%s, %s, %s]  unembed[%s, %s]\n", Ls, b2,
            dimstr(b1, 32, "F", Y), Ls, b1, b2, b2, dimstr(b3, 32, "V", Y));
    if (p->s.moe.E > 0) { /* ZeRO: the routed experts' D over the data axes without Z */
        char b4[32], b5[32];
        dimstr(b4, 32, "D", p->zero && p->erep.n > 1 ? p->erep.sub : "");
        fprintf(out,
                "  MoE blocks: router[Lm, %s, E] shared_gate,shared_up[Lm, S, %s, F_e] "
                "shared_down[Lm, S, F_e, %s]\n  routed experts expert_gate,expert_up[Lm, %s, %s, "
                "F_e] expert_down[Lm, %s, F_e, %s]\n",
                b2, b2, b2, dimstr(b5, 32, "E", p->expert.sub), b4, b5, b4);
    }
    fprintf(out, "  weights as stored on a rank: %s\n",
            Xw[0] ? "the _X shards (gathered per layer, just in time)"
                  : (p->zero ? "whole over X (replicated); optimizer state sharded"
                             : "whole over the data axes (replicated)"));
    fprintf(out,
            "activations: In[%s, %s] between blocks (In[%s, D] inside a block), "
            "logits[%s, %s], never whole\n",
            dimstr(b1, 32, "B", X), dimstr(b2, 32, "D", Y), b1, b1, dimstr(b3, 32, "V", Y));
}

/* The plan's collectives: one layer's (per micro-batch) and the step's. */
static void print_collectives(const plan *p, const report *r, FILE *out) {
    fprintf(out,
            "collectives of one layer (micro-batch of %lld tokens per data shard; "
            "%lld micro-batches per step; predicted with %s links):\n",
            (long long)p->rows, (long long)p->n_micro, report_link_source(r));
    fprintf(out, "  %-8s %-14s %-3s %-44s %3s %12s  %-10s %11s\n", "pass", "op", "ax", "what", "n",
            "V", "path", "predicted");
    for (int i = 0; i < p->ncall; i++) coll_row(p, r, &p->call[i], out);
}

void plan_print_layout(const plan *p, const report *r, FILE *out) {
    plan_mem_bytes mem;
    plan_memory(p, &mem);
    print_scheme(p, out);
    print_shardings(p, out);
    if (!plan_trivial(p)) print_collectives(p, r, out);
    const double MB = 1e6;
    const int64_t *b = mem.bytes;
    int64_t total = 0;
    for (int k = 0; k < PLAN_MEM_COUNT; k++) total += b[k];
    fprintf(out,
            "memory per rank (MB): params %.2f | grads %.2f | optimizer %.2f | activations "
            "%.2f | gathered weights %.2f | comm/transient buffers %.2f | total %.2f\n",
            b[PLAN_MEM_PARAMS] / MB, b[PLAN_MEM_GRADS] / MB, b[PLAN_MEM_OPTIMIZER] / MB,
            b[PLAN_MEM_ACTIVATIONS] / MB, b[PLAN_MEM_GATHERED] / MB, b[PLAN_MEM_BUFFERS] / MB,
            total / MB);
}

void plan_report_case(const plan *p, report_case *k, char *buf, size_t len) {
    const config *c = &p->c;
    memset(k, 0, sizeof *k);
    k->tokens = c->batch * c->shape.T;
    k->F = c->shape.F;
    k->layers = c->shape.L;
    k->params = model_param_total(&c->shape);
    k->scheme = buf;
    k->nX = 1, k->nY = 1;
    k->data_axis = k->tensor_axis = -1;
    if (plan_trivial(p)) {
        snprintf(buf, len, "single rank");
        return;
    }
    k->nX = p->data.n;
    k->nY = p->tensor.n;
    k->n_data_axes = p->data.axes.n;
    k->data_axis = p->data.axes.n ? p->data.axes.ax[0] : -1;
    k->tensor_axis = p->tensor.axes.n ? p->tensor.axes.ax[0] : -1;
    for (int a = 0; a < p->batch.axes.n; a++) k->data_mask |= 1u << p->batch.axes.ax[a];
    for (int a = 0; a < p->data.axes.n; a++) k->data_mask |= 1u << p->data.axes.ax[a];
    k->zero = p->zero;
    k->layers = p->l1 - p->l0;
    k->params /= p->tensor.n * p->pipe.n;
    char d[64] = "", tp[32] = "", pp[64] = "";
    if (p->data.n > 1)
        snprintf(d, sizeof d, "%s over %s",
                 p->zero == 0   ? "DP"
                 : p->zero == 3 ? "FSDP (ZeRO-3)"
                 : p->zero == 1 ? "ZeRO-1"
                                : "ZeRO-2",
                 p->data.sub);
    if (p->dcn.axes.n) { /* --dcn: pure data parallelism across the data-center network */
        const size_t o = strlen(d);
        snprintf(d + o, sizeof d - o, "%sDP over %s (DCN)", o ? " + " : "", p->dcn.sub);
    }
    if (p->tensor.n > 1) snprintf(tp, sizeof tp, "TP over %s", p->tensor.sub);
    if (p->pipe.n > 1)
        snprintf(pp, sizeof pp, "pipeline over %s (%s)", p->pipe.sub,
                 c->schedule == PIPE_1F1B ? "1F1B" : "GPipe");
    snprintf(buf, len, "%s%s%s%s%s", d, d[0] && tp[0] ? " + " : "", tp,
             (d[0] || tp[0]) && pp[0] ? " + " : "", pp);
}
