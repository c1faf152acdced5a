/* calc_cp_print: the context-parallel sections of meshplan's table (see calc_cp.h). */
#include "calc/calc_cp.h"

#include <math.h>
#include <string.h>

/* "AllGather 6.71e+08 x1, ReduceScatter 6.71e+08 x1" for one pass. */
static void colls_str(char *buf, size_t len, const cost_op *op, const double *v, const int *calls) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < 2 && k < len; i++)
        if (calls[i] > 0)
            k += (size_t)snprintf(buf + k, len - k, "%s%s %.3g x%d", k ? ", " : "",
                                  cost_op_name(op[i]), v[i], calls[i]);
}

static void print_rows(FILE *out, const calc_cp_opt *o, const calc_cp_result *cr) {
    fprintf(out, "  %-11s %-4s %-50s %10s %9s %9s %9s %11s\n", "algorithm", "pass",
            "collectives per layer (V bytes x calls)", "sent/chip", "ms/layer", "exposed",
            "buffers", "step");
    for (int a = 0; a < CALC_CP_N_ALGS; a++) {
        const calc_cp_row *w = &cr->row[a];
        char name[16], f[96], b[96];
        snprintf(name, sizeof name, "%s%s", calc_cp_alg_name((calc_cp_alg)a),
                 a == (int)o->alg ? " *" : "");
        if (!w->ok) {
            fprintf(out, "  %-11s refused: %s\n", name, w->why);
            continue;
        }
        colls_str(f, sizeof f, w->op_fwd, w->v_fwd, w->calls_fwd);
        colls_str(b, sizeof b, w->op_bwd, w->v_bwd, w->calls_bwd);
        fprintf(out, "  %-11s %-4s %-50s %10.3g %9.3f %9.3f %6.3f GB %8.0f ms\n", name, "fwd", f,
                w->sent_fwd, w->t_fwd * 1e3, w->exposed_fwd * 1e3, w->mem / 1e9, w->t_step * 1e3);
        fprintf(out, "  %-11s %-4s %-50s %10.3g %9.3f %9.3f\n", "", "bwd", b, w->sent_bwd,
                w->t_bwd * 1e3, w->exposed_bwd * 1e3);
    }
}

void calc_cp_print(FILE *out, const calc_spec *s, const calc_result *r, const calc_cp_opt *o,
                   const calc_cp_result *cr) {
    const char ax = s->names[o->axis];
    const double C = cr->C;
    if (cr->contig)
        fprintf(out,
                "\ncontext parallelism over %c (C = %.0f, --cp-alg %s): the contiguous split "
                "(2C does not divide T), chip i holds tokens [i*T/C, (i+1)*T/C) of T/%.0f = %.6g "
                "(ulysses: whole sequences' heads); %c counts among the data axes for the weights "
                "(X = %.0f without it)\n",
                ax, C, calc_cp_alg_name(o->alg), C, (double)s->shape.T / C, ax, cr->X);
    else
        fprintf(out,
                "\ncontext parallelism over %c (C = %.0f, --cp-alg %s): the zigzag split, chip i "
                "holds chunks i and %.0f-i of T/%.0f = %.6g tokens; %c counts among the data axes "
                "for the weights (X = %.0f without it)\n",
                ax, C, calc_cp_alg_name(o->alg), 2 * C - 1, 2 * C, (double)s->shape.T / (2 * C), ax,
                cr->X);
    fprintf(out,
            "  per chip: S_c = %.6g sequences x T/C = %.6g tokens; N_Y = %.0f query, K_Y = %.0f "
            "kv heads; K,V of a layer KV = 2*S_c*(T/C)*K_Y*H*a = %.4g bytes\n",
            cr->S_c, cr->T_l, cr->N_Y, cr->K_Y, cr->kv);
    print_rows(out, o, cr);
    if (cr->contig)
        fprintf(out,
                "  contiguous split: chip %.0f attends %.0f whole blocks and its own half, "
                "(2C-1)*t_block = %.4g ms a layer forward against zigzag's C*t_block = %.4g ms; "
                "allgather and ring add the busiest chip's (C-1)*t_block fwd + 2*(C-1)*t_block "
                "bwd = %.4g ms a layer to the step\n",
                C - 1, C - 1, (2 * C - 1) * cr->t_block * 1e3, C * cr->t_block * 1e3,
                3 * (C - 1) * cr->t_block * 1e3);
    const double T = (double)s->shape.T, thr = fmax(cr->T_overlap, cr->T_latency);
    const double total = r->mem_total + cr->row[o->alg].mem;
    fprintf(out,
            "  ring overlap: a step attends 2*S_c*(T/C)^2*N_Y*H FLOPs in %.4g ms, one KV block "
            "crosses a link in %.4g ms (backward: twice the compute, K,V with dK,dV in %.4g ms) "
            "-> %s\n",
            cr->t_block * 1e3, cr->t_xfer * 1e3, cr->t_xfer2 * 1e3,
            cr->t_block >= cr->t_xfer ? "hidden" : "exposed");
    fprintf(out,
            "    hidden for T >= C*(C_chip/W_1)*a*K_Y/N_Y = %.6g tokens (and >= %.6g for a step to "
            "outlast T_min); T = %.0f is %s\n",
            cr->T_overlap, cr->T_latency, T, T >= thr ? "above" : "below");
    fprintf(out,
            "  memory: activations %.3f GB per chip (with %c idle, whole sequences per chip: "
            "%.3f GB); + %s buffers %.3f GB -> %.3f GB of %.0f GB HBM: %s\n",
            cr->mem_acts / 1e9, ax, cr->mem_acts_idle / 1e9, calc_cp_alg_name(o->alg),
            cr->row[o->alg].mem / 1e9, total / 1e9, r->hbm / 1e9,
            total <= r->hbm ? "fits" : "DOES NOT FIT");
}

/* meshtrain's generate --kv-shard beside the book's variant. */
static void print_kv_shard(FILE *out, char ax, const calc_cp_infer_result *cr) {
    fprintf(out,
            "\nmeshtrain's generate --kv-shard %c: weights over Y = %.0f only (copied over %c), "
            "positions round-robin over %c:\n",
            ax, cr->Y, ax, ax);
    if (cr->ks.why[0]) {
        fprintf(out, "  not priced: %s\n", cr->ks.why);
        return;
    }
    const calc_infer_result *y = &cr->ks.y;
    fprintf(out, "  memory per chip: weights %.3f GB + KV %.3f GB = %.3f GB of %.0f GB -> %s\n",
            y->mem_params / 1e9, cr->ks.mem_kv / 1e9, cr->ks.memory_per_chip / 1e9, y->hbm / 1e9,
            cr->ks.fits ? "fits" : "does NOT fit");
    fprintf(out,
            "  decode step: KV %.4g ms + max(FLOPs %.4g ms, weights %.4g ms, ICI %.4g ms) = %.4g "
            "ms -> %s-bound; %.6g tokens/s\n",
            cr->ks.t_kv * 1e3, y->t_flops * 1e3, y->t_params * 1e3, cr->ks.t_ici * 1e3,
            cr->ks.decode_step_s * 1e3, calc_infer_regime_name(cr->ks.regime),
            cr->ks.tokens_per_s);
    fprintf(out,
            "    ICI: Megatron over Y %.4g ms + AllGather_%c of the fp32 partials (O, m, l) "
            "%.4g ms\n",
            y->t_ici * 1e3, ax, cr->ks.t_gather * 1e3);
}

void calc_cp_infer_print(FILE *out, const calc_spec *s, const calc_infer_opt *io,
                         const calc_cp_opt *o, const calc_cp_infer_result *cr) {
    const calc_infer_result *b = &cr->base;
    const char ax = s->names[o->axis];
    fprintf(out,
            "\nKV cache sharded over the sequence by %c (C = %.0f) and over kv heads by the "
            "tensor axes (Y = %.0f); weights model parallel over Y*C = %.0f chips:\n",
            ax, cr->C, cr->Y, cr->Y * cr->C);
    fprintf(out,
            "  memory per chip: weights %.3f GB + KV %.3f GB = %.3f GB of %.0f GB -> %s "
            "(KV over heads then batch on Y*C chips: %.3f GB)\n",
            cr->mem_params / 1e9, cr->mem_kv / 1e9, cr->memory_per_chip / 1e9, b->hbm / 1e9,
            cr->fits ? "fits" : "does NOT fit", b->mem_kv / 1e9);
    fprintf(out,
            "  decode step: KV %.4g ms + max(FLOPs %.4g ms, weights %.4g ms, ICI %.4g ms) = %.4g "
            "ms -> %s-bound; %.6g tokens/s (KV over heads then batch: %.4g ms)\n",
            cr->t_kv * 1e3, cr->t_flops * 1e3, cr->t_params * 1e3, cr->t_ici * 1e3,
            cr->decode_step_s * 1e3, calc_infer_regime_name(cr->regime), cr->tokens_per_s,
            b->decode_step_s * 1e3);
    fprintf(out,
            "    ICI: Megatron over Y*C %.4g ms + AllGather_%c Q %.4g ms + AllToAll_%c of the "
            "partials (O, m, l) %.4g ms\n",
            cr->t_tp * 1e3, ax, cr->t_gather_q * 1e3, ax, cr->t_combine * 1e3);
    fprintf(out,
            "  prefill of one prompt (%.0f tokens), tensor over Y, the prompt over %c (weights "
            "replicated over %c): %.3f GB per chip -> %s; compute %.4g s, HBM %.3g s, ICI (Y) "
            "%.3g s, + attention collectives:\n",
            io->prefill, ax, ax, cr->prefill_mem / 1e9,
            cr->prefill_mem <= b->hbm ? "fits" : "does NOT fit", cr->prefill_t_math,
            cr->prefill_t_hbm, cr->prefill_t_ici);
    for (int g = 0; g < CALC_CP_N_ALGS; g++) {
        if (cr->prefill_why[g][0])
            fprintf(out, "    %-10s refused: %s\n", calc_cp_alg_name((calc_cp_alg)g),
                    cr->prefill_why[g]);
        else
            fprintf(out, "    %-10s exposed %.4g s -> TTFT %.4g s%s\n",
                    calc_cp_alg_name((calc_cp_alg)g), cr->prefill_exposed[g], cr->prefill_s[g],
                    g == (int)o->alg ? "  *" : "");
    }
    fprintf(out, "    tensor parallel over all Y*C chips instead: TTFT %.4g s\n", b->prefill_s);
    print_kv_shard(out, ax, cr);
}
