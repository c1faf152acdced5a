/* calc_out: a plan and a search as CSV and JSON (`meshplan --format csv|json`). See calc.h.
 *
 * Conventions, also in the field names: times in seconds (_s in CSV), sizes in bytes (_bytes),
 * rates in bytes/s, FLOPs as counts; B is tokens; numbers carry 15 significant digits; a value
 * that is not finite is JSON null (an empty CSV field). Strings are escaped (JSON) or quoted when
 * they hold a comma or a quote (CSV). */
#include "calc/calc.h"
#include "calc/calc_cp.h"
#include "calc/calc_infer.h"

#include <math.h>
#include <string.h>

static const char *role_name(calc_role r) {
    return r == CALC_ROLE_TENSOR        ? "tensor"
           : r == CALC_ROLE_DCN         ? "dcn"
           : r == CALC_ROLE_EXPERT      ? "expert"
           : r == CALC_ROLE_EXPERT_DATA ? "expert_data"
                                        : "data";
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

/* One `"key": value` of an object: a number (JSON null when not finite), true/false, or a
 * string. The writers below list their objects as tables of these. */
typedef struct {
    const char *key;
    enum { J_NUM, J_BOOL, J_STR } type;
    double num;
    const char *str;
} json_field;
#define NUM(k, v)                                                                                  \
    { k, J_NUM, (double)(v), NULL }
#define BOOL(k, v)                                                                                 \
    { k, J_BOOL, (v) ? 1 : 0, NULL }
#define STR(k, v)                                                                                  \
    { k, J_STR, 0, (v) }

/* The n fields separated by ", "; *first: none of this object's fields is written yet. */
static void json_fields(FILE *out, int *first, const json_field *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%s\"%s\": ", *first ? "" : ", ", f[i].key);
        if (f[i].type == J_STR)
            json_str(out, f[i].str);
        else if (f[i].type == J_BOOL)
            fputs(f[i].num != 0 ? "true" : "false", out);
        else
            json_num(out, f[i].num);
        *first = 0;
    }
}
/* FIELDS(out, &first, NUM(...), STR(...), ...): json_fields over the listed table. */
#define FIELDS(out, first, ...)                                                                    \
    do {                                                                                           \
        const json_field fields_[] = {__VA_ARGS__};                                                \
        json_fields(out, first, fields_, sizeof fields_ / sizeof fields_[0]);                      \
    } while (0)
/* OBJECT(out, NUM(...), ...): the listed fields as one object in braces. */
#define OBJECT(out, ...)                                                                           \
    do {                                                                                           \
        int first_ = 1;                                                                            \
        fputs("{", out);                                                                           \
        FIELDS(out, &first_, __VA_ARGS__);                                                         \
        fputs("}", out);                                                                           \
    } while (0)

static void json_spec(FILE *out, const calc_spec *s, const calc_result *r) {
    const model_shape *m = &s->shape;
    char topo[64], data[64], tensor[64], pipe[64], remat[64];
    int f = 1;
    calc_topology_str(s, topo, sizeof topo);
    fputs("{", out);
    FIELDS(out, &f, STR("chip", s->chip.name), STR("topology", topo), NUM("chips", r->chips));
    fputs(", \"axes\": [", out);
    for (int i = 0; i < s->n_axes; i++) {
        const int bit = 1 << i, split = calc_axis_split(s, i);
        const int k = split ? s->tensor_block[i] : 1;
        const char *role = split                    ? "split"
                           : (s->tensor_mask & bit) ? "tensor"
                           : (s->pipe_mask & bit)   ? "pipeline"
                           : (s->data_mask & bit)   ? "data"
                                                    : "replicated";
        char name[2] = {s->names[i], '\0'};
        fputs(i ? ", " : "", out);
        OBJECT(out, STR("name", name), NUM("size", s->sizes[i]), BOOL("wraps", s->wraps[i]),
               STR("role", role),
               NUM("tensor_block", (s->tensor_mask & bit) ? (split ? k : s->sizes[i]) : 0),
               NUM("data_size", (s->data_mask & bit) ? s->sizes[i] / k : 0),
               NUM("data_stride", (s->data_mask & bit) ? k : 0));
    }
    fputs("], \"sharding\": ", out);
    calc_axes_str(s, CALC_ROLE_DATA, data, sizeof data);
    calc_axes_str(s, CALC_ROLE_TENSOR, tensor, sizeof tensor);
    calc_axes_str(s, CALC_ROLE_PIPE, pipe, sizeof pipe);
    OBJECT(
        out, STR("data", data), STR("tensor", tensor), STR("pipeline", pipe), NUM("zero", s->zero),
        NUM("X", r->X), NUM("Y", r->Y), NUM("P", r->P), NUM("M_X", r->M_X), NUM("M_Y", r->M_Y),
        NUM("microbatches", s->microbatches), STR("schedule", sched_kind_name(s->schedule)),
        NUM("virtual_stages", r->P > 1 ? r->sched[s->schedule].v : 1),
        STR("remat", calc_remat_str(s, 0, remat, sizeof remat)), STR("alg", calc_alg_name(s->alg)));
    fputs(", \"model\": ", out);
    OBJECT(out, NUM("L", m->L), NUM("D", m->D), NUM("F", m->F), NUM("N", m->N), NUM("K", m->K),
           NUM("H", m->H), NUM("V", m->V), NUM("T", m->T), NUM("params", r->params));
    fputs(", \"batch\": ", out);
    OBJECT(out, NUM("tokens", s->tokens), NUM("sequences", s->tokens / (double)m->T));
    fputs(", \"link\": ", out);
    OBJECT(out, NUM("flops_bf16", s->chip.flops_bf16), NUM("w_oneway", s->link.w_oneway),
           NUM("hop_latency_s", s->link.hop_latency), NUM("hbm_bytes", s->chip.hbm_bytes));
    fputs("}", out);
}

static void json_step(FILE *out, const calc_spec *s, const calc_result *r) {
    OBJECT(out, NUM("flops_model", r->flops_model), NUM("flops_attn", r->flops_attn),
           NUM("flops_recompute", r->flops_recompute), NUM("t_math", r->t_math),
           NUM("t_comm", r->t_comm), NUM("t_pipe", r->t_pipe), NUM("t_p2p", r->t_p2p),
           NUM("pipe_bubble", r->pipe_bubble), NUM("t_step_max", r->t_step_max),
           NUM("t_step_sum", r->t_step_sum), NUM("mfu", r->mfu),
           NUM("mfu_serial", r->flops_model / (r->chips * s->chip.flops_bf16 * r->t_step_sum)),
           NUM("tokens_per_s", r->tokens_per_s));
}

static void json_memory(FILE *out, const calc_result *r) {
    OBJECT(out, NUM("params", r->mem_params), NUM("grads", r->mem_grads),
           NUM("optimizer", r->mem_opt), NUM("activations", r->mem_acts),
           NUM("gathered", r->mem_gathered), NUM("total", r->mem_total), NUM("hbm", r->hbm),
           BOOL("fits", r->fits), NUM("global_book", r->mem_global),
           NUM("min_chips_memory", r->min_chips_memory));
}

static void json_thresholds(FILE *out, const calc_result *r) {
    int f = 1;
    fputs("{", out);
    FIELDS(out, &f, NUM("alpha", r->alpha), NUM("hbm_intensity", r->hbm_intensity),
           NUM("M_X", r->M_X), NUM("M_Y", r->M_Y), NUM("tokens_per_x", r->tokens_per_x),
           NUM("dp_threshold", r->dp_threshold), NUM("tp_limit", r->tp_limit),
           NUM("x_opt", r->x_opt), NUM("mixed_threshold", r->mixed_threshold),
           NUM("mixed_min_batch", r->mixed_min_batch));
    if (r->pods > 1)
        FIELDS(out, &f, NUM("pods", r->pods), NUM("chips_per_pod", r->chips_pod),
               NUM("tokens_per_pod", r->tokens_per_pod), NUM("dcn_bw", r->dcn_bw),
               NUM("dcn_threshold", r->dcn_threshold),
               BOOL("dcn_bound", r->tokens_per_pod <= r->dcn_threshold));
    fputs("}", out);
}

/* The plan's object without its closing brace. */
static void json_plan(FILE *out, const calc_spec *s, const calc_result *r) {
    fputs("{\"units\": {\"time\": \"s\", \"bytes\": \"B\", \"batch\": \"tokens\", "
          "\"bytes_V\": \"the book's V per call (sharding chapter)\"},\n\"spec\": ",
          out);
    json_spec(out, s, r);
    fputs(",\n\"collectives\": [", out);
    for (int i = 0; i < r->n_coll; i++) {
        const calc_coll *c = &r->coll[i];
        fputs(i ? ",\n  " : "\n  ", out);
        OBJECT(out, STR("what", c->what), STR("op", cost_op_name(c->op)), STR("axes", c->axes),
               STR("role", role_name(c->role)), STR("seg", c->seg ? "head" : "layer"),
               BOOL("bwd", c->bwd), NUM("count", c->count), STR("path", calc_path_name(c->path)),
               NUM("bytes", c->bytes), NUM("hops", c->est.hops), NUM("time", c->est.seconds),
               NUM("time_total", c->count * c->est.seconds), NUM("t_latency", c->est.t_latency),
               NUM("t_bandwidth", c->est.t_bandwidth), STR("regime", cost_regime_name(c->regime)));
    }
    fputs("],\n\"phases\": [", out);
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 2; k++) {
            const calc_phase *p = &r->phase[g][k];
            fputs(g || k ? ", " : "", out);
            OBJECT(out, STR("seg", g ? "head" : "layer"), BOOL("bwd", k),
                   NUM("repeats", g ? 1 : r->layers_per_chip), NUM("flops", p->flops),
                   NUM("t_math", p->t_math), NUM("t_comm", p->t_comm));
        }
    fputs("],\n\"step\": ", out);
    json_step(out, s, r);
    fputs(",\n\"memory\": ", out);
    json_memory(out, r);
    fputs(",\n\"thresholds\": ", out);
    json_thresholds(out, r);
    if (s->moe.E) {
        fputs(",\n\"experts\": ", out);
        OBJECT(out, NUM("E", s->moe.E), NUM("k", s->moe.k), NUM("shared", s->moe.S),
               NUM("F_e", calc_moe_F(&s->shape, &s->moe)), NUM("Z", r->Z), NUM("params", r->params),
               NUM("params_active", r->params_active), NUM("expert_params", r->expert_params),
               NUM("tokens_per_expert", r->tokens_per_expert),
               NUM("expert_intensity", r->expert_intensity),
               NUM("batch_threshold", r->moe_batch_threshold),
               NUM("t_expert_hbm", r->t_expert_hbm));
    }
    fputs(",\n\"notes\": [", out);
    char notes[CALC_MAX_NOTES][CALC_NOTE_LEN];
    const int n = calc_notes(s, r, notes);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",\n  " : "\n  ", out);
        json_str(out, notes[i]);
    }
    fputs("]", out);
}

void calc_print_json(FILE *out, const calc_spec *s, const calc_result *r) {
    json_plan(out, s, r);
    fputs("}\n", out);
}

/* One algorithm's row of calc_cp_row: its collectives (up to two a pass) and times a layer. */
static void json_cp_row(FILE *out, const calc_cp_row *w, calc_cp_alg a) {
    OBJECT(out, STR("alg", calc_cp_alg_name(a)), BOOL("ok", w->ok), STR("why", w->why),
           STR("op_fwd0", w->calls_fwd[0] ? cost_op_name(w->op_fwd[0]) : ""),
           NUM("bytes_fwd0", w->v_fwd[0]), NUM("calls_fwd0", w->calls_fwd[0]),
           STR("op_fwd1", w->calls_fwd[1] ? cost_op_name(w->op_fwd[1]) : ""),
           NUM("bytes_fwd1", w->v_fwd[1]), NUM("calls_fwd1", w->calls_fwd[1]),
           STR("op_bwd0", w->calls_bwd[0] ? cost_op_name(w->op_bwd[0]) : ""),
           NUM("bytes_bwd0", w->v_bwd[0]), NUM("calls_bwd0", w->calls_bwd[0]),
           STR("op_bwd1", w->calls_bwd[1] ? cost_op_name(w->op_bwd[1]) : ""),
           NUM("bytes_bwd1", w->v_bwd[1]), NUM("calls_bwd1", w->calls_bwd[1]),
           NUM("sent_fwd", w->sent_fwd), NUM("sent_bwd", w->sent_bwd), NUM("t_fwd", w->t_fwd),
           NUM("t_bwd", w->t_bwd), NUM("exposed_fwd", w->exposed_fwd),
           NUM("exposed_bwd", w->exposed_bwd), NUM("imbalance_fwd", w->imbalance_fwd),
           NUM("imbalance_bwd", w->imbalance_bwd), NUM("mem", w->mem), NUM("t_step", w->t_step));
}

void calc_print_json_cp(FILE *out, const calc_spec *s, const calc_result *r, const calc_cp_opt *o,
                        const calc_cp_result *cr) {
    json_plan(out, s, r);
    const char axis[2] = {(char)('x' + o->axis), 0};
    fputs(",\n\"context_parallel\": {", out);
    int f = 1;
    FIELDS(out, &f, STR("axis", axis), STR("alg", calc_cp_alg_name(o->alg)), NUM("C", cr->C),
           NUM("X", cr->X), NUM("S_c", cr->S_c), NUM("T_l", cr->T_l), NUM("N_Y", cr->N_Y),
           NUM("K_Y", cr->K_Y), NUM("K_e", cr->K_e), BOOL("contiguous", cr->contig),
           NUM("kv_bytes", cr->kv), NUM("t_block", cr->t_block), NUM("t_xfer", cr->t_xfer),
           NUM("t_xfer2", cr->t_xfer2), NUM("T_overlap", cr->T_overlap),
           NUM("T_latency", cr->T_latency), NUM("activations", cr->mem_acts),
           NUM("activations_cp_idle", cr->mem_acts_idle), NUM("t_step", cr->row[o->alg].t_step));
    fputs(", \"algorithms\": [", out);
    for (int a = 0; a < CALC_CP_N_ALGS; a++) {
        fputs(a ? ",\n  " : "\n  ", out);
        json_cp_row(out, &cr->row[a], (calc_cp_alg)a);
    }
    fputs("]}}\n", out);
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
    const model_shape *m = &s->shape;
    char topo[64], tensor[64];
    int f = 1;
    calc_topology_str(s, topo, sizeof topo);
    calc_axes_str(s, CALC_ROLE_TENSOR, tensor, sizeof tensor);
    fputs("{\"units\": {\"time\": \"s\", \"bytes\": \"B\", \"batch\": \"sequences\", "
          "\"context\": \"tokens\"},\n\"spec\": {",
          out);
    FIELDS(out, &f, STR("chip", s->chip.name), STR("topology", topo), NUM("chips", r->chips),
           STR("tensor", tensor), NUM("Y", r->Y), NUM("M_Y", r->M_Y), NUM("replicas", r->replicas),
           NUM("batch", o->batch), NUM("batch_per_replica", r->batch_per_replica),
           NUM("context", o->context), NUM("prefill", o->prefill),
           NUM("param_bytes", o->param_bytes), NUM("kv_bytes_per_element", o->kv_bytes),
           STR("flops_dtype", o->flops_dtype == CALC_FLOPS_INT8 ? "int8" : "bf16"),
           NUM("flops", r->C), NUM("prefill_mfu", o->prefill_mfu));
    fputs(", \"model\": ", out);
    OBJECT(out, NUM("L", m->L), NUM("D", m->D), NUM("F", m->F), NUM("N", m->N), NUM("K", m->K),
           NUM("H", m->H), NUM("V", m->V), NUM("params", r->params));
    fputs("},\n\"inference\": ", out);
    OBJECT(out, NUM("kv_bytes_per_token", r->kv_bytes_per_token),
           NUM("kv_bytes_per_seq", r->kv_bytes_per_seq), NUM("kv_bytes", r->kv_bytes),
           NUM("mem_params", r->mem_params), NUM("mem_kv", r->mem_kv),
           NUM("memory_per_chip", r->memory_per_chip), NUM("hbm", r->hbm), BOOL("fits", r->fits),
           NUM("max_batch", r->max_batch), NUM("min_chips", ceil(r->min_chips)),
           NUM("min_slice_chips", r->min_slice), STR("min_slice", r->min_slice_shape),
           NUM("prefill_flops", r->prefill_flops_dense + r->prefill_flops_attn),
           NUM("prefill_s", r->prefill_s), NUM("ttft_s", r->ttft_s),
           NUM("prefill_batch_s", r->prefill_batch_s), NUM("t_kv", r->t_kv),
           NUM("t_params", r->t_params), NUM("t_flops", r->t_flops), NUM("t_ici", r->t_ici),
           NUM("decode_step_s", r->decode_step_s), STR("regime", calc_infer_regime_name(r->regime)),
           NUM("tokens_per_s", r->tokens_per_s),
           NUM("tokens_per_s_per_chip", r->tokens_per_s_per_chip), NUM("b_crit", r->b_crit),
           NUM("alpha", r->alpha), NUM("beta", r->beta), NUM("tp_bound_flops", r->tp_bound_flops),
           NUM("tp_bound_hbm", r->tp_bound_hbm));
    if (s->moe.E) {
        fputs(",\n\"experts\": ", out);
        OBJECT(out, NUM("E", s->moe.E), NUM("k", s->moe.k), NUM("shared", s->moe.S),
               NUM("params_active", r->params_active), NUM("experts_touched", r->experts_touched),
               NUM("t_alltoall", r->t_alltoall), NUM("b_crit_moe", r->b_crit_moe));
    }
    fputs("}\n", out);
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
