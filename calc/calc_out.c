/* calc_out: a plan and a search as CSV and JSON (`meshplan --format csv|json`). See calc.h.
 *
 * Conventions, also in the field names: times in seconds (_s in CSV), sizes in bytes (_bytes),
 * rates in bytes/s, FLOPs as counts; B is tokens; numbers carry 15 significant digits; a value
 * that is not finite is JSON null (an empty CSV field). Strings are escaped (JSON) or quoted when
 * they hold a comma or a quote (CSV). */
#include "calc/calc.h"
#include "calc/calc_infer.h"

#include <math.h>
#include <string.h>

static const char *role_name(calc_role r) {
    return r == CALC_ROLE_TENSOR ? "tensor" : r == CALC_ROLE_DCN ? "dcn" : "data";
}

/* ---- JSON ---- */

static void json_str(FILE *out, const char *v) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void json_num(FILE *out, double v) {
    if (isfinite(v))
        fprintf(out, "%.15g", v);
    else
        fputs("null", out);
}

/* `"key": value` pairs: the first of an object has no leading comma. */
static void kv_num(FILE *out, int *first, const char *k, double v) {
    fprintf(out, "%s\"%s\": ", *first ? "" : ", ", k);
    json_num(out, v);
    *first = 0;
}

static void kv_str(FILE *out, int *first, const char *k, const char *v) {
    fprintf(out, "%s\"%s\": ", *first ? "" : ", ", k);
    json_str(out, v);
    *first = 0;
}

static void kv_bool(FILE *out, int *first, const char *k, int v) {
    fprintf(out, "%s\"%s\": %s", *first ? "" : ", ", k, v ? "true" : "false");
    *first = 0;
}

static void json_spec(FILE *out, const calc_spec *s, const calc_result *r) {
    const calc_shape *m = &s->shape;
    char buf[64];
    int f = 1;
    fputs("{", out);
    kv_str(out, &f, "chip", s->chip.name);
    calc_topology_str(s, buf, sizeof buf);
    kv_str(out, &f, "topology", buf);
    kv_num(out, &f, "chips", r->chips);
    fputs(", \"axes\": [", out);
    for (int i = 0; i < s->n_axes; i++) {
        const int bit = 1 << i, split = calc_axis_split(s, i);
        const int k = split ? s->tensor_block[i] : 1;
        const char *role = split                    ? "split"
                           : (s->tensor_mask & bit) ? "tensor"
                           : (s->pipe_mask & bit)   ? "pipeline"
                           : (s->data_mask & bit)   ? "data"
                                                    : "replicated";
        int g = 1;
        char name[2] = {s->names[i], '\0'};
        fputs(i ? ", {" : "{", out);
        kv_str(out, &g, "name", name);
        kv_num(out, &g, "size", s->sizes[i]);
        kv_bool(out, &g, "wraps", s->wraps[i]);
        kv_str(out, &g, "role", role);
        kv_num(out, &g, "tensor_block", (s->tensor_mask & bit) ? (split ? k : s->sizes[i]) : 0);
        kv_num(out, &g, "data_size", (s->data_mask & bit) ? s->sizes[i] / k : 0);
        kv_num(out, &g, "data_stride", (s->data_mask & bit) ? k : 0);
        fputs("}", out);
    }
    fputs("], \"sharding\": {", out);
    int g = 1;
    calc_axes_str(s, CALC_ROLE_DATA, buf, sizeof buf);
    kv_str(out, &g, "data", buf);
    calc_axes_str(s, CALC_ROLE_TENSOR, buf, sizeof buf);
    kv_str(out, &g, "tensor", buf);
    calc_axes_str(s, CALC_ROLE_PIPE, buf, sizeof buf);
    kv_str(out, &g, "pipeline", buf);
    kv_num(out, &g, "zero", s->zero);
    kv_num(out, &g, "X", r->X);
    kv_num(out, &g, "Y", r->Y);
    kv_num(out, &g, "P", r->P);
    kv_num(out, &g, "M_X", r->M_X);
    kv_num(out, &g, "M_Y", r->M_Y);
    kv_num(out, &g, "microbatches", s->microbatches);
    kv_str(out, &g, "remat", calc_remat_str(s, 0, buf, sizeof buf));
    kv_str(out, &g, "alg", calc_alg_name(s->alg));
    fputs("}, \"model\": {", out);
    g = 1;
    kv_num(out, &g, "L", (double)m->L);
    kv_num(out, &g, "D", (double)m->D);
    kv_num(out, &g, "F", (double)m->F);
    kv_num(out, &g, "N", (double)m->N);
    kv_num(out, &g, "K", (double)m->K);
    kv_num(out, &g, "H", (double)m->H);
    kv_num(out, &g, "V", (double)m->V);
    kv_num(out, &g, "T", (double)m->T);
    kv_num(out, &g, "params", r->params);
    fputs("}, \"batch\": {", out);
    g = 1;
    kv_num(out, &g, "tokens", s->tokens);
    kv_num(out, &g, "sequences", s->tokens / (double)m->T);
    fputs("}, \"link\": {", out);
    g = 1;
    kv_num(out, &g, "flops_bf16", s->chip.flops_bf16);
    kv_num(out, &g, "w_oneway", s->link.w_oneway);
    kv_num(out, &g, "hop_latency_s", s->link.hop_latency);
    kv_num(out, &g, "hbm_bytes", s->chip.hbm_bytes);
    fputs("}}", out);
}

static void json_step(FILE *out, const calc_spec *s, const calc_result *r) {
    int f = 1;
    fputs("{", out);
    kv_num(out, &f, "flops_model", r->flops_model);
    kv_num(out, &f, "flops_attn", r->flops_attn);
    kv_num(out, &f, "flops_recompute", r->flops_recompute);
    kv_num(out, &f, "t_math", r->t_math);
    kv_num(out, &f, "t_comm", r->t_comm);
    kv_num(out, &f, "t_pipe", r->t_pipe);
    kv_num(out, &f, "t_step_max", r->t_step_max);
    kv_num(out, &f, "t_step_sum", r->t_step_sum);
    kv_num(out, &f, "mfu", r->mfu);
    kv_num(out, &f, "mfu_serial", r->flops_model / (r->chips * s->chip.flops_bf16 * r->t_step_sum));
    kv_num(out, &f, "tokens_per_s", r->tokens_per_s);
    fputs("}", out);
}

static void json_memory(FILE *out, const calc_result *r) {
    int f = 1;
    fputs("{", out);
    kv_num(out, &f, "params", r->mem_params);
    kv_num(out, &f, "grads", r->mem_grads);
    kv_num(out, &f, "optimizer", r->mem_opt);
    kv_num(out, &f, "activations", r->mem_acts);
    kv_num(out, &f, "gathered", r->mem_gathered);
    kv_num(out, &f, "total", r->mem_total);
    kv_num(out, &f, "hbm", r->hbm);
    kv_bool(out, &f, "fits", r->fits);
    kv_num(out, &f, "global_book", r->mem_global);
    kv_num(out, &f, "min_chips_memory", r->min_chips_memory);
    fputs("}", out);
}

static void json_thresholds(FILE *out, const calc_result *r) {
    int f = 1;
    fputs("{", out);
    kv_num(out, &f, "alpha", r->alpha);
    kv_num(out, &f, "hbm_intensity", r->hbm_intensity);
    kv_num(out, &f, "M_X", r->M_X);
    kv_num(out, &f, "M_Y", r->M_Y);
    kv_num(out, &f, "tokens_per_x", r->tokens_per_x);
    kv_num(out, &f, "dp_threshold", r->dp_threshold);
    kv_num(out, &f, "tp_limit", r->tp_limit);
    kv_num(out, &f, "x_opt", r->x_opt);
    kv_num(out, &f, "mixed_threshold", r->mixed_threshold);
    kv_num(out, &f, "mixed_min_batch", r->mixed_min_batch);
    if (r->pods > 1) {
        kv_num(out, &f, "pods", r->pods);
        kv_num(out, &f, "chips_per_pod", r->chips_pod);
        kv_num(out, &f, "tokens_per_pod", r->tokens_per_pod);
        kv_num(out, &f, "dcn_bw", r->dcn_bw);
        kv_num(out, &f, "dcn_threshold", r->dcn_threshold);
        kv_bool(out, &f, "dcn_bound", r->tokens_per_pod <= r->dcn_threshold);
    }
    fputs("}", out);
}

void calc_print_json(FILE *out, const calc_spec *s, const calc_result *r) {
    fputs("{\"units\": {\"time\": \"s\", \"bytes\": \"B\", \"batch\": \"tokens\", "
          "\"bytes_V\": \"the book's V per call (sharding chapter)\"},\n\"spec\": ",
          out);
    json_spec(out, s, r);
    fputs(",\n\"collectives\": [", out);
    for (int i = 0; i < r->n_coll; i++) {
        const calc_coll *c = &r->coll[i];
        int f = 1;
        fputs(i ? ",\n  {" : "\n  {", out);
        kv_str(out, &f, "what", c->what);
        kv_str(out, &f, "op", cost_op_name(c->op));
        kv_str(out, &f, "axes", c->axes);
        kv_str(out, &f, "role", role_name(c->role));
        kv_str(out, &f, "seg", c->seg ? "head" : "layer");
        kv_bool(out, &f, "bwd", c->bwd);
        kv_num(out, &f, "count", c->count);
        kv_str(out, &f, "path", calc_path_name(c->path));
        kv_num(out, &f, "bytes", c->bytes);
        kv_num(out, &f, "hops", c->est.hops);
        kv_num(out, &f, "time", c->est.seconds);
        kv_num(out, &f, "time_total", c->count * c->est.seconds);
        kv_num(out, &f, "t_latency", c->est.t_latency);
        kv_num(out, &f, "t_bandwidth", c->est.t_bandwidth);
        kv_str(out, &f, "regime", cost_regime_name(c->regime));
        fputs("}", out);
    }
    fputs("],\n\"phases\": [", out);
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 2; k++) {
            const calc_phase *p = &r->phase[g][k];
            int f = 1;
            fputs(g || k ? ", {" : "{", out);
            kv_str(out, &f, "seg", g ? "head" : "layer");
            kv_bool(out, &f, "bwd", k);
            kv_num(out, &f, "repeats", g ? 1 : r->layers_per_chip);
            kv_num(out, &f, "flops", p->flops);
            kv_num(out, &f, "t_math", p->t_math);
            kv_num(out, &f, "t_comm", p->t_comm);
            fputs("}", out);
        }
    fputs("],\n\"step\": ", out);
    json_step(out, s, r);
    fputs(",\n\"memory\": ", out);
    json_memory(out, r);
    fputs(",\n\"thresholds\": ", out);
    json_thresholds(out, r);
    fputs(",\n\"notes\": [", out);
    char notes[CALC_MAX_NOTES][CALC_NOTE_LEN];
    const int n = calc_notes(s, r, notes);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",\n  " : "\n  ", out);
        json_str(out, notes[i]);
    }
    fputs("]}\n", out);
}

void calc_search_print_json(FILE *out, const calc_candidate *c, int n) {
    fputs("[", out);
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s{\"rank\": %d, \"spec\": ", i ? ",\n " : "\n ", i + 1);
        json_spec(out, &c[i].s, &c[i].r);
        fputs(", \"step\": ", out);
        json_step(out, &c[i].s, &c[i].r);
        fputs(", \"memory\": ", out);
        json_memory(out, &c[i].r);
        fputs(", \"thresholds\": ", out);
        json_thresholds(out, &c[i].r);
        fputs("}", out);
    }
    fputs("\n]\n", out);
}

/* ---- CSV ---- */

static void csv_str(FILE *out, const char *v) {
    if (!strpbrk(v, ",\"\n")) {
        fputs(v, out);
        return;
    }
    fputc('"', out);
    for (const char *p = v; *p; p++) {
        if (*p == '"') fputc('"', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

static void csv_num(FILE *out, double v) {
    if (isfinite(v)) fprintf(out, "%.15g", v);
}

void calc_print_csv(FILE *out, const calc_spec *s, const calc_result *r) {
    (void)s;
    fputs("seg,pass,op,axes,role,count,path,bytes_V,hops,time_s,time_total_s,t_latency_s,"
          "t_bandwidth_s,regime,what\n",
          out);
    for (int i = 0; i < r->n_coll; i++) {
        const calc_coll *c = &r->coll[i];
        fprintf(out, "%s,%s,%s,", c->seg ? "head" : "layer", c->bwd ? "bwd" : "fwd",
                cost_op_name(c->op));
        csv_str(out, c->axes);
        fprintf(out, ",%s,%d,%s,", role_name(c->role), c->count, calc_path_name(c->path));
        const double v[] = {c->bytes,         c->est.hops,
                            c->est.seconds,   c->count * c->est.seconds,
                            c->est.t_latency, c->est.t_bandwidth};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            csv_num(out, v[k]);
            fputc(',', out);
        }
        fprintf(out, "%s,", cost_regime_name(c->regime));
        csv_str(out, c->what);
        fputc('\n', out);
    }
}

void calc_search_print_csv(FILE *out, const calc_candidate *c, int n) {
    fputs("rank,chip,topology,wrapping,data,tensor,zero,X,Y,M_X,M_Y,t_math_s,t_comm_s,"
          "t_step_max_s,t_step_sum_s,mfu,tokens_per_s,mem_params_bytes,mem_grads_bytes,"
          "mem_opt_bytes,mem_acts_bytes,mem_gathered_bytes,mem_total_bytes,hbm_bytes,fits\n",
          out);
    for (int i = 0; i < n; i++) {
        const calc_spec *s = &c[i].s;
        const calc_result *r = &c[i].r;
        char topo[64], d[16], t[16], w[COST_MAX_AXES + 1];
        int k = 0;
        calc_topology_str(s, topo, sizeof topo);
        calc_axes_str(s, CALC_ROLE_DATA, d, sizeof d);
        calc_axes_str(s, CALC_ROLE_TENSOR, t, sizeof t);
        for (int a = 0; a < s->n_axes; a++)
            if (s->wraps[a]) w[k++] = s->names[a];
        w[k] = '\0';
        fprintf(out, "%d,%s,%s,%s,%s,%s,%d", i + 1, s->chip.name, topo, w, d, t, s->zero);
        const double v[] = {
            r->X,          r->Y,          r->M_X,        r->M_Y,      r->t_math,
            r->t_comm,     r->t_step_max, r->t_step_sum, r->mfu,      r->tokens_per_s,
            r->mem_params, r->mem_grads,  r->mem_opt,    r->mem_acts, r->mem_gathered,
            r->mem_total,  r->hbm};
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
            fputc(',', out);
            csv_num(out, v[j]);
        }
        fprintf(out, ",%d\n", r->fits);
    }
}

/* ---- inference ---- */

void calc_infer_print_json(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                           const calc_infer_result *r) {
    const calc_shape *m = &s->shape;
    char buf[64];
    int f = 1;
    fputs("{\"units\": {\"time\": \"s\", \"bytes\": \"B\", \"batch\": \"sequences\", "
          "\"context\": \"tokens\"},\n\"spec\": {",
          out);
    kv_str(out, &f, "chip", s->chip.name);
    calc_topology_str(s, buf, sizeof buf);
    kv_str(out, &f, "topology", buf);
    kv_num(out, &f, "chips", r->chips);
    calc_axes_str(s, CALC_ROLE_TENSOR, buf, sizeof buf);
    kv_str(out, &f, "tensor", buf);
    kv_num(out, &f, "Y", r->Y);
    kv_num(out, &f, "M_Y", r->M_Y);
    kv_num(out, &f, "replicas", r->replicas);
    kv_num(out, &f, "batch", o->batch);
    kv_num(out, &f, "batch_per_replica", r->batch_per_replica);
    kv_num(out, &f, "context", o->context);
    kv_num(out, &f, "prefill", o->prefill);
    kv_num(out, &f, "param_bytes", o->param_bytes);
    kv_num(out, &f, "kv_bytes_per_element", o->kv_bytes);
    kv_str(out, &f, "flops_dtype", o->flops_dtype == CALC_FLOPS_INT8 ? "int8" : "bf16");
    kv_num(out, &f, "flops", r->C);
    kv_num(out, &f, "prefill_mfu", o->prefill_mfu);
    fputs(", \"model\": {", out);
    int g = 1;
    const double dims[] = {(double)m->L, (double)m->D, (double)m->F, (double)m->N,
                           (double)m->K, (double)m->H, (double)m->V, r->params};
    const char *names[] = {"L", "D", "F", "N", "K", "H", "V", "params"};
    for (int i = 0; i < 8; i++) kv_num(out, &g, names[i], dims[i]);
    fputs("}},\n\"inference\": {", out);
    f = 1;
    kv_num(out, &f, "kv_bytes_per_token", r->kv_bytes_per_token);
    kv_num(out, &f, "kv_bytes_per_seq", r->kv_bytes_per_seq);
    kv_num(out, &f, "kv_bytes", r->kv_bytes);
    kv_num(out, &f, "mem_params", r->mem_params);
    kv_num(out, &f, "mem_kv", r->mem_kv);
    kv_num(out, &f, "memory_per_chip", r->memory_per_chip);
    kv_num(out, &f, "hbm", r->hbm);
    kv_bool(out, &f, "fits", r->fits);
    kv_num(out, &f, "max_batch", r->max_batch);
    kv_num(out, &f, "min_chips", ceil(r->min_chips));
    kv_num(out, &f, "min_slice_chips", r->min_slice);
    kv_str(out, &f, "min_slice", r->min_slice_shape);
    kv_num(out, &f, "prefill_flops", r->prefill_flops_dense + r->prefill_flops_attn);
    kv_num(out, &f, "prefill_s", r->prefill_s);
    kv_num(out, &f, "ttft_s", r->ttft_s);
    kv_num(out, &f, "prefill_batch_s", r->prefill_batch_s);
    kv_num(out, &f, "t_kv", r->t_kv);
    kv_num(out, &f, "t_params", r->t_params);
    kv_num(out, &f, "t_flops", r->t_flops);
    kv_num(out, &f, "t_ici", r->t_ici);
    kv_num(out, &f, "decode_step_s", r->decode_step_s);
    kv_str(out, &f, "regime", calc_infer_regime_name(r->regime));
    kv_num(out, &f, "tokens_per_s", r->tokens_per_s);
    kv_num(out, &f, "tokens_per_s_per_chip", r->tokens_per_s_per_chip);
    kv_num(out, &f, "b_crit", r->b_crit);
    kv_num(out, &f, "alpha", r->alpha);
    kv_num(out, &f, "beta", r->beta);
    kv_num(out, &f, "tp_bound_flops", r->tp_bound_flops);
    kv_num(out, &f, "tp_bound_hbm", r->tp_bound_hbm);
    fputs("}}\n", out);
}

void calc_infer_print_csv(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                          const calc_infer_result *r) {
    char topo[64], t[16];
    calc_topology_str(s, topo, sizeof topo);
    calc_axes_str(s, CALC_ROLE_TENSOR, t, sizeof t);
    fputs("chip,topology,tensor,Y,replicas,batch,context,prefill,kv_bytes_per_token,"
          "kv_bytes_per_seq,kv_bytes,memory_per_chip_bytes,hbm_bytes,fits,max_batch,min_chips,"
          "min_slice_chips,prefill_s,ttft_s,t_kv_s,t_params_s,t_flops_s,t_ici_s,decode_step_s,"
          "regime,tokens_per_s,tokens_per_s_per_chip,b_crit,tp_bound_flops,tp_bound_hbm\n",
          out);
    fprintf(out, "%s,%s,%s", s->chip.name, topo, t);
    const double a[] = {r->Y,
                        r->replicas,
                        o->batch,
                        o->context,
                        o->prefill,
                        r->kv_bytes_per_token,
                        r->kv_bytes_per_seq,
                        r->kv_bytes,
                        r->memory_per_chip,
                        r->hbm,
                        r->fits,
                        r->max_batch,
                        ceil(r->min_chips),
                        r->min_slice,
                        r->prefill_s,
                        r->ttft_s,
                        r->t_kv,
                        r->t_params,
                        r->t_flops,
                        r->t_ici,
                        r->decode_step_s};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        fputc(',', out);
        csv_num(out, a[i]);
    }
    fprintf(out, ",%s", calc_infer_regime_name(r->regime));
    const double b[] = {r->tokens_per_s, r->tokens_per_s_per_chip, r->b_crit, r->tp_bound_flops,
                        r->tp_bound_hbm};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        fputc(',', out);
        csv_num(out, b[i]);
    }
    fputc('\n', out);
}
