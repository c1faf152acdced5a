/* par_report: the plan in the book's notation, printed at start-up: each parameter's sharding,
 * the activations', the collectives of one layer's forward and backward pass with their axis,
 * V (bytes) and whether they are on the critical path, and memory per rank by category. */
#include <string.h>

#include "train/parallel/par_impl.h"
#include "train/observe/report.h"

/* Axis-set subscript in the book's style: data axes "xy" → "XY". */
static const char *sub(const mesh *m, mesh_axes a, char *buf) {
    int k = 0;
    for (; k < a.n; k++) buf[k] = (char)(mesh_axis_name(m, a.ax[k]) - 'a' + 'A');
    buf[k] = 0;
    return buf;
}

static const char *dimstr(char *buf, size_t n, const char *dim, const char *s) {
    if (s && s[0])
        snprintf(buf, n, "%s_%s", dim, s);
    else
        snprintf(buf, n, "%s", dim);
    return buf;
}

typedef struct {
    FILE *out;
    const report *r;
    struct par *p;
} printer;

static void coll_row(printer *pr, const char *phase, mesh_op op, mesh_axes a, int64_t count,
                     int times, const char *what, const char *path) {
    char ax[8];
    int lat = 0;
    double t = report_predict(pr->r, op, a, pr->p->alg, count, &lat);
    int64_t n = mesh_axes_size(pr->p->m, a);
    double V = 4.0 * (double)count *
               (op == MESH_OP_ALL_GATHER || op == MESH_OP_REDUCE_SCATTER ? (double)n : 1.0);
    fprintf(pr->out, "  %-8s %-14s %-3s %-44s %2d× %9.3f MB  %-10s %8.3f ms %s\n", phase,
            mesh_op_name(op), sub(pr->p->m, a, ax), what, times, V / 1e6, path, 1e3 * t,
            lat ? "latency-bound" : "bandwidth-bound");
}

/* The scheme in one line: which axes shard what, the algorithm, overlap. */
static void print_scheme(const par *p, const char *X, const char *Y, FILE *out) {
    fprintf(out, "== plan (the book's notation; B = tokens) ==\n");
    if (!p) {
        fprintf(out, "single rank: every tensor whole, no communication\n");
    } else {
        char Zs[8] = "";
        sub(p->m, p->pipe_axis, Zs);
        fprintf(out,
                "data over %s (|%s| = %lld)%s%s | tensor over %s (|%s| = %lld) | pipeline "
                "over %s (|%s| = %lld) | algorithm %s | overlap %s\n",
                X[0] ? X : "-", X[0] ? X : "X", (long long)p->n_data, p->zero ? ", ZeRO-" : "",
                p->zero ? (p->zero == 1   ? "1 (optimizer state sharded)"
                           : p->zero == 2 ? "2 (+ gradients sharded)"
                                          : "3 / FSDP (+ weights sharded)")
                        : "",
                Y[0] ? Y : "-", Y[0] ? Y : "Y", (long long)p->n_tensor, Zs[0] ? Zs : "-",
                Zs[0] ? Zs : "Z", (long long)p->n_pipe, mesh_alg_name(p->alg),
                p->overlap ? "on" : "off");
    }
}

/* Every parameter's and the activations' sharding in the book's notation. */
static void print_shardings(const par *p, const char *X, const char *Y, FILE *out) {
    char b1[32], b2[32], b3[32];
    const char *Xw = p && p->zero == 3 ? X : "";
    fprintf(out,
            "parameters (global sharding; with ZeRO-1/2 the _%s shards are the optimizer "
            "state's):\n",
            X[0] ? X : "X");
    const char *Xs = p && p->zero ? X : "";
    char Ls[16] = "L", Z[8] = "";
    if (p && p->n_pipe > 1) snprintf(Ls, sizeof Ls, "L_%s", sub(p->m, p->pipe_axis, Z));
    fprintf(out, "  embed[%s, %s]  attn_norm[%s, %s]  mlp_norm[%s, %s]  final_norm[%s]\n",
            dimstr(b1, 32, "V", Y), dimstr(b2, 32, "D", Xs), Ls, b2, Ls, b2, b2);
    fprintf(out, "  wq[%s, %s, %s]  wk,wv[%s, %s, %s]%s  wo[%s, %s, %s]\n", Ls, b2,
            dimstr(b1, 32, "N·H", Y), Ls, b2, dimstr(b3, 32, "K·H", Y),
            p && p->g[P_WK].kv_group ? " (kv heads replicated over |Y|/K ranks)" : "", Ls, b1, b2);
    fprintf(out, "  w_gate,w_up[%s, %s, %s]  w_down[%s, %s, %s]  unembed[%s, %s]\n", Ls, b2,
            dimstr(b1, 32, "F", Y), Ls, b1, b2, b2, dimstr(b3, 32, "V", Y));
    fprintf(out, "  weights as stored on a rank: %s\n",
            Xw[0] ? "the _X shards (gathered per layer, just in time)"
                  : (p && p->zero ? "whole over X (replicated); optimizer state sharded"
                                  : "whole over the data axes (replicated)"));
    fprintf(out,
            "activations: In[%s, %s] between blocks (In[%s, D] inside a block), "
            "logits[%s, %s], never whole\n",
            dimstr(b1, 32, "B", X), dimstr(b2, 32, "D", Y), b1, b1, dimstr(b3, 32, "V", Y));
}

/* The collectives of one layer (and of the step), with V, path and predicted time. */
static void print_collectives(par *p, const config *c, const report *r, FILE *out) {
    const model_shape *s = &c->shape;
    printer pr = {out, r, p};
    const int64_t BT = c->micro_batch / p->n_data * s->T, D = s->D, Dl = p->loc.Dl;
    const int64_t nmb = c->batch / c->micro_batch;
    fprintf(out,
            "collectives of one layer (micro-batch of %lld tokens per data shard; "
            "%lld micro-batches per step; predicted with %s links):\n",
            (long long)BT, (long long)nmb, report_link_source(r));
    fprintf(out, "  %-8s %-14s %-3s %-44s %3s %12s  %-10s %11s\n", "pass", "op", "ax", "what", "n",
            "V", "path", "predicted");
    const int nwb = par_weight_buckets(p); /* ZeRO-3's gathers per layer: tensors or buckets */
    char wwhat[64];
    snprintf(wwhat, sizeof wwhat, "W[D_X, ...] → W[D, ...] (9 layer weights%s)",
             nwb < 9 ? ", bucketed" : "");
    if (p->zero == 3)
        coll_row(&pr, "forward", MESH_OP_ALL_GATHER, p->data_axes, p->layer_elems / p->n_data / nwb,
                 nwb, wwhat, p->overlap ? "prefetched" : "blocking");
    if (p->n_tensor > 1 &&
        p->cmatmul_scratch) { /* collective matmul (tensor.c): one ring step per row */
        mesh_axes one = {1, {p->tensor_axis.ax[0], 0, 0}};
        const mesh_op hop = p->n_tensor == 2 ? MESH_OP_ALL_GATHER : MESH_OP_PPERMUTE;
        const int line =
            p->n_tensor > 2 && !mesh_axis_wraps(p->m, p->tensor_axis.ax[0]); /* both ways */
        const int64_t cnt = BT * Dl,
                      steps = 2 * (line ? 2 : 1) * (p->n_tensor - 1); /* 2 sublayers */
        coll_row(&pr, "forward", hop, one, cnt, (int)steps,
                 "matmul-RS: Out[B, D_Y]{U_Y} round the ring", "hidden");
        coll_row(&pr, "forward", hop, one, cnt, (int)steps,
                 "AG-norm-matmul: In[B, D_Y] round the ring", "hidden");
        coll_row(&pr, "backward", hop, one, cnt, (int)steps,
                 "AG-matmul: dOut[B, D_Y] round the ring", "hidden");
    } else if (p->n_tensor > 1) {
        coll_row(&pr, "forward", MESH_OP_REDUCE_SCATTER, p->tensor_axis, BT * Dl, 2,
                 "Out[B, D]{U_Y} → Out[B, D_Y] (+ residual)", "critical");
        coll_row(&pr, "forward", MESH_OP_ALL_GATHER, p->tensor_axis, BT * Dl, 2,
                 "In[B, D_Y] → In[B, D] (next sublayer)", "critical");
        coll_row(&pr, "backward", MESH_OP_ALL_GATHER, p->tensor_axis, BT * Dl, 2,
                 "dOut[B, D_Y] → dOut[B, D]", "critical");
    }
    if (p->n_tensor > 1) {
        coll_row(&pr, "backward", MESH_OP_REDUCE_SCATTER, p->tensor_axis, BT * Dl, 2,
                 "dIn[B, D]{U_Y} → dIn[B, D_Y]", "critical");
        coll_row(&pr, "backward", MESH_OP_ALL_REDUCE, p->tensor_axis, D, 2,
                 "d(norm gain)[D]{U_Y} → [D]", "blocking");
    }
    if (p->zero == 3)
        coll_row(&pr, "backward", MESH_OP_ALL_GATHER, p->data_axes,
                 p->layer_elems / p->n_data / nwb, nwb, "W[D_X, ...] → W[D, ...] (unless resident)",
                 p->overlap ? "prefetched" : "blocking");
    if (p->n_pipe > 1) {
        mesh_axes one = p->pipe_axis;
        coll_row(&pr, "stage", MESH_OP_PPERMUTE, one, BT * D, 1,
                 "send In[b, D] to the next stage (per micro-batch)", "critical");
        coll_row(&pr, "stage", MESH_OP_PPERMUTE, one, BT * D, 1,
                 "send dIn[b, D] to the previous stage", "critical");
    }
    if (p->n_data > 1) {
        const char *path = p->overlap ? "async" : "blocking";
        if (p->zero == 0 && !p->dcn_axes.n)
            coll_row(&pr, "backward", MESH_OP_ALL_REDUCE, p->data_axes, p->layer_elems / 9, 9,
                     "dW{U_X} → dW (once per step)", path);
        else if (p->zero > 0)
            coll_row(&pr, "backward", MESH_OP_REDUCE_SCATTER, p->data_axes,
                     p->layer_elems / p->n_data / 9, 9,
                     p->zero == 1 ? "dW{U_X} → dW[D_X, ...] (once per step)"
                                  : "dW{U_X} → dW[D_X, ...] (every micro-batch)",
                     path);
        if (p->zero == 1 || p->zero == 2)
            coll_row(&pr, "update", MESH_OP_ALL_GATHER, p->data_axes,
                     p->layer_elems / p->n_data / 9, 9, "W[D_X, ...] → W[D, ...] after the update",
                     path); /* (a column-sharded block's blocks: zero.c) */
    }
    if (p->dcn_axes.n && p->zero == 0) { /* --dcn: the whole gradient, once per step (zero.c) */
        const int64_t cs = p->dcn_n / p->n_data;
        coll_row(&pr, "step", MESH_OP_REDUCE_SCATTER, p->data_axes, cs, 1,
                 "dG{U_X} → dG[_X] (whole gradient, ICI)", "blocking");
        coll_row(&pr, "step", MESH_OP_ALL_REDUCE, p->dcn_axes, cs, 1,
                 "dG[_X]{U_DCN} → dG[_X] (1/|ICI| over DCN)", "blocking");
        coll_row(&pr, "step", MESH_OP_ALL_GATHER, p->data_axes, cs, 1, "dG[_X] → dG (ICI)",
                 "blocking");
    } else if (p->dcn_axes.n) {
        coll_row(&pr, "step", MESH_OP_ALL_REDUCE, p->dcn_axes, p->shard_total, 1,
                 "dW[D_X, ...]{U_DCN} → dW[D_X, ...] (DCN)", "blocking");
    }
}

void par_print_layout(par *p, model *mod, const config *c, const report *r, FILE *out) {
    par_mem mem;
    par_memory(p, mod, c, &mem);
    if (mesh_world_rank() != 0) return;
    char X[8] = "", Y[8] = "";
    if (p) sub(p->m, p->data_axes, X), sub(p->m, p->tensor_axis, Y);
    print_scheme(p, X, Y, out);
    print_shardings(p, X, Y, out);
    if (p) print_collectives(p, c, r, out);
    const double MB = 1e6;
    fprintf(
        out,
        "memory per rank (MB): params %.2f | grads %.2f | optimizer %.2f | activations "
        "%.2f | gathered weights %.2f | comm/transient buffers %.2f | total %.2f\n",
        mem.params / MB, mem.grads / MB, mem.optimizer / MB, mem.activations / MB,
        mem.gathered / MB, mem.buffers / MB,
        (mem.params + mem.grads + mem.optimizer + mem.activations + mem.gathered + mem.buffers) /
            MB);
}

void par_report_case(par *p, const config *c, report_case *k, char *buf, size_t len) {
    memset(k, 0, sizeof *k);
    k->tokens = c->batch * c->shape.T;
    k->F = c->shape.F;
    k->nX = p ? p->n_data : 1;
    k->nY = p ? p->n_tensor : 1;
    k->n_data_axes = p ? p->data_axes.n : 0;
    k->data_axis = p && p->data_axes.n ? p->data_axes.ax[0] : -1;
    k->tensor_axis = p && p->tensor_axis.n ? p->tensor_axis.ax[0] : -1;
    k->layers = c->shape.L;
    k->params = model_param_total(&c->shape);
    k->scheme = buf;
    if (!p) {
        snprintf(buf, len, "single rank");
        return;
    }
    for (int a = 0; a < p->batch_axes.n; a++) k->data_mask |= 1u << p->batch_axes.ax[a];
    for (int a = 0; a < p->data_axes.n; a++) k->data_mask |= 1u << p->data_axes.ax[a];
    k->zero = p->zero;
    k->layers = p->l1 - p->l0;
    k->params /= p->n_tensor * p->n_pipe;
    char X[8], Y[8], d[64] = "", tp[32] = "";
    sub(p->m, p->data_axes, X), sub(p->m, p->tensor_axis, Y);
    if (p->n_data > 1)
        snprintf(d, sizeof d, "%s over %s",
                 p->zero == 0   ? "DP"
                 : p->zero == 3 ? "FSDP (ZeRO-3)"
                 : p->zero == 1 ? "ZeRO-1"
                                : "ZeRO-2",
                 X);
    if (p->dcn_axes.n) { /* --dcn: pure data parallelism across the data-center network */
        char R[8];
        const size_t o = strlen(d);
        snprintf(d + o, sizeof d - o, "%sDP over %s (DCN)", o ? " + " : "",
                 sub(p->m, p->dcn_axes, R));
    }
    if (p->n_tensor > 1) snprintf(tp, sizeof tp, "TP over %s", Y);
    char Z[8] = "", pp[64] = "";
    if (p->n_pipe > 1)
        snprintf(pp, sizeof pp, "pipeline over %s (%s)", sub(p->m, p->pipe_axis, Z),
                 c->schedule == PIPE_1F1B ? "1F1B" : "GPipe");
    snprintf(buf, len, "%s%s%s%s%s", d, d[0] && tp[0] ? " + " : "", tp,
             (d[0] || tp[0]) && pp[0] ? " + " : "", pp);
}
