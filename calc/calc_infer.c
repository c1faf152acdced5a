/* calc_infer: the inference half of the calculator. See calc_infer.h for the serving model. */
#include "calc/calc_infer.h"

#include <math.h>
#include <string.h>

#include "mesh/errmsg.h"

void calc_infer_defaults(calc_infer_opt *o) {
    memset(o, 0, sizeof *o);
    o->batch = 1;
    o->param_bytes = 2;
    o->kv_bytes = 2;
    o->flops_dtype = CALC_FLOPS_BF16;
    o->prefill_mfu = 1;
}

const char *calc_infer_regime_name(calc_infer_regime g) {
    return g == CALC_REGIME_FLOPS ? "FLOP" : g == CALC_REGIME_ICI ? "ICI" : "HBM";
}

int calc_pow2_slice(const cost_chip *chip, int chips, char *buf, size_t len) {
    int sizes[COST_MAX_AXES] = {1, 1, 1}, bits = 0;
    char err[128];
    buf[0] = '\0';
    while ((1 << bits) < chips) bits++;
    if ((1 << bits) != chips || chip->dims < 1 || chip->dims > COST_MAX_AXES) return -1;
    for (int b = 0; b < bits; b++) sizes[b % chip->dims] *= 2; /* as square as possible */
    if (cost_topology_check(chip, sizes, chip->dims, err, sizeof err) < 0) return -1;
    size_t k = 0;
    for (int i = 0; i < chip->dims && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? "x" : "", sizes[i]);
    return 0;
}

static int validate(const calc_spec *s, const calc_infer_opt *o, const calc_infer_result *r,
                    char *err, size_t errlen) {
    const model_shape *m = &s->shape;
    if (s->n_axes < 1) return errmsg_fail(err, errlen, "no topology (give --topology or --mesh)");
    if (m->L < 1 || m->D < 1 || m->N < 1 || m->K < 1 || m->H < 1 || m->F < 1 || m->V < 1)
        return errmsg_fail(err, errlen, "the model needs every dimension (or a --model preset)");
    if (m->N % m->K)
        return errmsg_fail(err, errlen, "--heads %lld is not divisible by --kv-heads %lld",
                           (long long)m->N, (long long)m->K);
    if (s->zero != 0)
        return errmsg_fail(
            err, errlen,
            "--zero %d with --infer: FSDP/ZeRO would move the weights over ICI every "
            "decode step, which the book rules out for generation (HBM is far faster); "
            "shard the model with --tensor",
            s->zero);
    if (s->pipe_mask)
        return errmsg_fail(err, errlen, "--pipeline with --infer: not modelled for serving");
    if (s->data_mask)
        return errmsg_fail(err, errlen,
                           "--dp with --infer: the book runs independent replicas rather than data "
                           "parallelism for generation; the axes outside --tensor hold replicas");
    if (!(o->context >= 1))
        return errmsg_fail(err, errlen, "--infer needs --context (tokens in the cache)");
    if (!(o->batch >= 1) || o->batch != floor(o->batch))
        return errmsg_fail(err, errlen, "--batch %g: a whole number of sequences >= 1", o->batch);
    if (!(o->prefill >= 1)) return errmsg_fail(err, errlen, "--prefill must be >= 1 token");
    if (!(o->param_bytes > 0) || !(o->kv_bytes > 0))
        return errmsg_fail(err, errlen, "--param-bytes and --kv-bytes must be positive");
    if (!(o->prefill_mfu > 0 && o->prefill_mfu <= 1))
        return errmsg_fail(err, errlen, "--prefill-mfu %g: a fraction in (0, 1]", o->prefill_mfu);
    if (m->N % (long long)r->Y || m->F % (long long)r->Y)
        return errmsg_fail(
            err, errlen,
            "tensor degree %lld must divide the heads and d_ff (N = %lld, F = %lld); "
            "pick other --tensor axes",
            (long long)r->Y, (long long)m->N, (long long)m->F);
    const calc_moe *mo = &s->moe;
    if (mo->E && (mo->k < 1 || mo->k > mo->E))
        return errmsg_fail(err, errlen, "--moe-top-k %lld with --experts %lld: 1 <= k <= E",
                           (long long)mo->k, (long long)mo->E);
    if (mo->expert_mask && !(mo->expert_mask & s->tensor_mask))
        return errmsg_fail(err, errlen,
                           "--expert with --infer: the experts are sharded over one of the model "
                           "axes (--tensor; default every axis), each chip holding E/|Z|");
    if (!mo->E && (mo->expert_mask || mo->k || mo->S || mo->F))
        return errmsg_fail(err, errlen,
                           "--expert, --moe-top-k, --shared-experts and --expert-d-ff need "
                           "--experts E (or --model mixtral-8x7b)");
    if (fmod(o->batch, r->replicas) != 0)
        return errmsg_fail(
            err, errlen,
            "--batch %g is not divisible by the %g replicas (the axes outside --tensor "
            "each hold a copy of the model)",
            o->batch, r->replicas);
    return 0;
}

/* Time of `op` over the tensor axes moving the book's V = bytes. */
static double tensor_coll(const calc_spec *s, cost_op op, double bytes) {
    int sizes[COST_MAX_AXES], wraps[COST_MAX_AXES], strides[COST_MAX_AXES], n;
    calc_role_axes(s, CALC_ROLE_TENSOR, sizes, wraps, strides, &n);
    return cost_collective_strided(op, &s->link, sizes, wraps, strides, n, s->alg, bytes, NULL);
}

/* The Megatron collectives of a forward over `tokens` tokens per replica: per layer two blocks,
 * each an AllGather of the block input and a ReduceScatter of its output ([tokens, D]); when
 * Y > K the two AllToAlls of the queries / attention outputs; then an AllGather of the logits
 * [tokens, V_Y]. 0 without tensor parallelism. */
double calc_infer_forward_ici(const calc_spec *s, const calc_infer_result *r, double tokens) {
    const model_shape *m = &s->shape;
    if (r->Y <= 1) return 0;
    const double a = r->act_bytes, act = a * tokens * (double)m->D;
    double layer =
        2 * (tensor_coll(s, COST_OP_ALL_GATHER, act) + tensor_coll(s, COST_OP_REDUCE_SCATTER, act));
    if (r->Y > (double)m->K)
        layer += 2 * tensor_coll(s, COST_OP_ALL_TO_ALL, a * tokens * (double)(m->N * m->H));
    return (double)m->L * layer + tensor_coll(s, COST_OP_ALL_GATHER, a * tokens * (double)m->V);
}

/* A decode step's two AllToAlls per block over the expert axis: the replica's B/R tokens' k
 * routed rows of D (the book's V; each chip sends its 1/|Z| share). 0 without an expert axis. */
static double expert_ici(const calc_spec *s, const calc_infer_result *r) {
    const calc_moe *mo = &s->moe;
    if (!mo->E || !mo->expert_mask) return 0;
    int sizes[COST_MAX_AXES], wraps[COST_MAX_AXES], strides[COST_MAX_AXES], n;
    calc_role_axes(s, CALC_ROLE_EXPERT, sizes, wraps, strides, &n);
    const double V = r->act_bytes * r->batch_per_replica * (double)mo->k * (double)s->shape.D;
    return 2 * (double)s->shape.L *
           cost_collective_strided(COST_OP_ALL_TO_ALL, &s->link, sizes, wraps, strides, n, s->alg,
                                   V, NULL);
}

/* Weight and KV bytes per chip, the batch that fits, the smallest slice. */
static void memory(const calc_spec *s, const calc_infer_opt *o, calc_infer_result *r) {
    const model_shape *m = &s->shape;
    const double K = (double)m->K, Y = r->Y, Br = r->batch_per_replica;
    /* K/V projection weights are replicated beyond K-way sharding. */
    const double kv_w = (double)m->L * 2 * (double)m->D * K * (double)m->H * o->param_bytes;
    const double kv_w_chip = kv_w / fmin(Y, K);
    r->mem_params = (r->param_bytes_total - kv_w) / Y + kv_w_chip;
    r->mem_kv = Br * r->kv_bytes_per_seq / fmin(Y, K * Br);
    r->memory_per_chip = r->mem_params + r->mem_kv;
    r->hbm = s->chip.hbm_bytes;
    r->fits = r->memory_per_chip <= r->hbm;
    r->max_batch = r->mem_params < r->hbm
                       ? floor((r->hbm - r->mem_params) * Y / r->kv_bytes_per_seq) * r->replicas
                       : 0;
    r->min_chips = (r->param_bytes_total + r->kv_bytes) / r->hbm;
    r->min_slice = 1;
    while (r->min_slice < r->min_chips && r->min_slice < CALC_MAX_SLICE) r->min_slice *= 2;
    calc_pow2_slice(&s->chip, r->min_slice, r->min_slice_shape, sizeof r->min_slice_shape);
}

/* The request must fit some slice of the chip: weights and every cache within the HBM of the
 * largest slice (the chip's pod; the cpu profile has none: CALC_MAX_SLICE chips). */
static int check_exists(const calc_spec *s, const calc_infer_opt *o, const calc_infer_result *r,
                        char *err, size_t errlen) {
    double pod = 1;
    for (int i = 0; i < s->chip.dims && i < COST_MAX_AXES; i++) pod *= s->chip.pod[i];
    const int has_pod = pod >= 1;
    if (!has_pod) pod = CALC_MAX_SLICE;
    if (r->min_chips <= pod) return 0;
    return errmsg_fail(err, errlen,
                       "no slice of %s holds this request: the weights (%.4g GB) and the KV "
                       "caches of --batch %.17g x --context %.17g tokens (%.4g GB) need at least "
                       "%.4g chips of %.0f GB HBM, more than the %.0f chips of %s; use a smaller "
                       "--batch or --context, or fewer --param-bytes or --kv-bytes",
                       s->chip.name, r->param_bytes_total / 1e9, o->batch, o->context,
                       r->kv_bytes / 1e9, r->min_chips, r->hbm / 1e9, pod,
                       has_pod ? "its largest slice (a pod)" : "the largest slice planned for");
}

/* A forward over `seqs` prompts of T tokens on one replica (Y chips), overlapped. */
static void prefill(const calc_spec *s, const calc_infer_opt *o, calc_infer_result *r) {
    const model_shape *m = &s->shape;
    const double T = o->prefill, Y = r->Y, K = (double)m->K;
    r->prefill_flops_dense = 2 * r->params_active * T;
    r->prefill_flops_attn = 2 * (double)m->L * T * T * (double)(m->N * m->H);
    const double flops = r->prefill_flops_dense + r->prefill_flops_attn;
    const double kv_written = T * r->kv_bytes_per_token / fmin(Y, K);
    r->prefill_t_math = flops / (Y * r->C * o->prefill_mfu);
    r->prefill_t_hbm = (r->mem_params + kv_written) / s->chip.hbm_bw;
    r->prefill_t_ici = calc_infer_forward_ici(s, r, T);
    r->prefill_s = fmax(r->prefill_t_math, fmax(r->prefill_t_hbm, r->prefill_t_ici));
    r->ttft_s = r->prefill_s;
    const double n = r->batch_per_replica;
    r->prefill_batch_s =
        fmax(n * r->prefill_t_math, fmax((r->mem_params + n * kv_written) / s->chip.hbm_bw,
                                         calc_infer_forward_ici(s, r, n * T)));
}

calc_infer_regime calc_infer_decode_step(double t_kv, double t_flops, double t_params, double t_ici,
                                         double *step) {
    const double t = fmax(t_flops, fmax(t_params, t_ici));
    *step = t_kv + t;
    return t == t_ici && t_ici > 0 ? CALC_REGIME_ICI
           : t == t_flops          ? CALC_REGIME_FLOPS
                                   : CALC_REGIME_HBM;
}

/* One decode step of a replica: the book's T_kv + max(T_flops, T_params), with T_ici. */
static void decode(const calc_spec *s, calc_infer_result *r) {
    const double Br = r->batch_per_replica;
    r->t_kv = r->mem_kv / s->chip.hbm_bw;
    const calc_moe *mo = &s->moe;
    double read = r->mem_params; /* with experts: the ones the step's tokens reach */
    if (mo->E) {
        const double Ek = (double)mo->E, k = (double)mo->k;
        r->experts_touched = Ek * (1 - pow(1 - k / Ek, Br));
        read -= (double)s->shape.L * (Ek - r->experts_touched) * 3 * (double)s->shape.D *
                (double)calc_moe_F(&s->shape, mo) * r->param_bytes_total / r->params / r->Y;
        r->t_alltoall = expert_ici(s, r);
    }
    r->t_params = read / s->chip.hbm_bw;
    r->t_flops = 2 * Br * r->params_active / (r->Y * r->C);
    r->t_ici = calc_infer_forward_ici(s, r, Br) + r->t_alltoall;
    r->regime =
        calc_infer_decode_step(r->t_kv, r->t_flops, r->t_params, r->t_ici, &r->decode_step_s);
    r->tokens_per_s = Br * r->replicas / r->decode_step_s;
    r->tokens_per_s_per_chip = r->tokens_per_s / r->chips;
}

int calc_infer(const calc_spec *s, const calc_infer_opt *o, calc_infer_result *r, char *err,
               size_t errlen) {
    const model_shape *m = &s->shape;
    memset(r, 0, sizeof *r);
    if (calc_check_blocks(s, err, errlen) < 0) return -1;
    r->chips = 1;
    for (int i = 0; i < s->n_axes; i++) r->chips *= s->sizes[i];
    r->Y = calc_role_degree(s, CALC_ROLE_TENSOR, &r->M_Y);
    r->replicas = r->chips / r->Y;
    if (validate(s, o, r, err, errlen) < 0) return -1;
    r->batch_per_replica = o->batch / r->replicas;
    r->C = o->flops_dtype == CALC_FLOPS_INT8 ? s->chip.flops_int8 : s->chip.flops_bf16;
    r->act_bytes = o->flops_dtype == CALC_FLOPS_INT8 ? 1 : 2;
    r->params = o->params > 0 ? o->params : calc_params_moe(m, &s->moe);
    r->params_active = o->params > 0 ? o->params : calc_params_active(m, &s->moe);
    r->param_bytes_total = r->params * o->param_bytes;
    r->kv_bytes_per_token =
        o->kv_token_bytes > 0 ? o->kv_token_bytes : 2 * o->kv_bytes * (double)(m->H * m->K * m->L);
    r->kv_bytes_per_seq = r->kv_bytes_per_token * o->context;
    r->kv_bytes = r->kv_bytes_per_seq * o->batch;
    memory(s, o, r);
    if (check_exists(s, o, r, err, errlen) < 0) return -1;
    prefill(s, o, r);
    decode(s, r);
    const double W = 2 * s->link.w_oneway;
    r->b_crit = r->C * o->param_bytes / (2 * s->chip.hbm_bw);
    r->alpha = r->C / W;
    r->beta = s->chip.hbm_bw / W;
    r->tp_bound_flops = (r->M_Y > 0 ? r->M_Y : 1) * (double)m->F / r->alpha;
    r->tp_bound_hbm =
        o->param_bytes / r->act_bytes * (double)m->F / (r->batch_per_replica * r->beta);
    if (s->moe.E) r->b_crit_moe = r->b_crit * (double)s->moe.E / (double)s->moe.k;
    return 0;
}

/* ---- the table ---- */

static void print_setup(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                        const calc_infer_result *r) {
    const model_shape *m = &s->shape;
    char topo[64], t[16];
    calc_topology_str(s, topo, sizeof topo);
    calc_axes_label(s, CALC_ROLE_TENSOR, t, sizeof t);
    fprintf(out,
            "inference on %s %s = %.0f chips: C %.3g FLOP/s (%s), HBM %.0f GB at %.3g B/s, ICI "
            "W = %.3g B/s bidirectional, T_min %.3g us\n",
            s->chip.name, topo, r->chips, r->C, o->flops_dtype == CALC_FLOPS_INT8 ? "int8" : "bf16",
            s->chip.hbm_bytes / 1e9, s->chip.hbm_bw, 2 * s->link.w_oneway,
            s->link.hop_latency * 1e6);
    fprintf(out,
            "model: L=%lld D=%lld F=%lld N=%lld K=%lld H=%lld V=%lld; %.4g params at %g B = "
            "%.4g GB\n",
            (long long)m->L, (long long)m->D, (long long)m->F, (long long)m->N, (long long)m->K,
            (long long)m->H, (long long)m->V, r->params, o->param_bytes,
            r->param_bytes_total / 1e9);
    fprintf(out,
            "sharding: model parallel over %s (Y=%.0f, %d axes); %.0f replica%s of %.0f "
            "sequences each; batch B = %.0f sequences, context S = %.0f tokens, prompt %.0f "
            "tokens\n",
            t, r->Y, r->M_Y, r->replicas, r->replicas == 1 ? "" : "s", r->batch_per_replica,
            o->batch, o->context, o->prefill);
}

static void print_memory(FILE *out, const calc_infer_opt *o, const calc_infer_result *r) {
    fprintf(out,
            "\nKV cache (%g B per element): %.6g bytes per token (2*bytes*H*K*L), %.4g GB per "
            "sequence of %.0f tokens, %.4g GB for the batch\n",
            o->kv_bytes, r->kv_bytes_per_token, r->kv_bytes_per_seq / 1e9, o->context,
            r->kv_bytes / 1e9);
    fprintf(out,
            "memory per chip: weights %.3f GB + KV %.3f GB = %.3f GB of %.0f GB HBM -> %s; "
            "at most %.0f sequences fit\n",
            r->mem_params / 1e9, r->mem_kv / 1e9, r->memory_per_chip / 1e9, r->hbm / 1e9,
            r->fits ? "fits" : "does NOT fit", r->max_batch);
    fprintf(out, "smallest slice: (weights + every cache) / HBM = %.3g chips -> %d chips",
            r->min_chips, r->min_slice);
    if (r->min_slice_shape[0])
        fprintf(out, " (%s)\n", r->min_slice_shape);
    else
        fprintf(out, " (more than one pod of this chip)\n");
}

static void print_times(FILE *out, const calc_infer_opt *o, const calc_infer_result *r) {
    fprintf(out,
            "\nprefill of one prompt (%.0f tokens): FLOPs 2*P*T = %.4g + causal attention %.3g; "
            "compute %.4g s at %.0f%% of peak, HBM %.3g s, ICI %.3g s -> %.4g s = TTFT\n",
            o->prefill, r->prefill_flops_dense, r->prefill_flops_attn, r->prefill_t_math,
            o->prefill_mfu * 100, r->prefill_t_hbm, r->prefill_t_ici, r->prefill_s);
    fprintf(out, "  prefilling the %.0f prompts of a replica at once: %.4g s\n",
            r->batch_per_replica, r->prefill_batch_s);
    fprintf(out,
            "decode step: KV %.4g ms + max(FLOPs %.4g ms, weights %.4g ms, ICI %.4g ms) = "
            "%.4g ms -> %s-bound\n",
            r->t_kv * 1e3, r->t_flops * 1e3, r->t_params * 1e3, r->t_ici * 1e3,
            r->decode_step_s * 1e3, calc_infer_regime_name(r->regime));
    fprintf(out, "  %.6g tokens/s, %.6g tokens/s per chip\n", r->tokens_per_s,
            r->tokens_per_s_per_chip);
}

static void print_thresholds(FILE *out, const calc_infer_opt *o, const calc_infer_result *r) {
    fprintf(out, "\nthresholds (the book's inference chapters):\n");
    fprintf(out,
            "  B_crit = C*param_bytes/(2*W_hbm) = %.1f sequences per replica; B/R = %.0f -> "
            "the weights are %s\n",
            r->b_crit, r->batch_per_replica, calc_weights_bound(r->batch_per_replica, r->b_crit));
    fprintf(out,
            "  TP FLOP bound: Y < M_Y*F/alpha = %.1f (alpha = C/W = %.0f, M_Y = %d); Y = %.0f\n",
            r->tp_bound_flops, r->alpha, r->M_Y > 0 ? r->M_Y : 1, r->Y);
    fprintf(out,
            "  TP bound while HBM-bound: Y < (param_bytes/act_bytes)*F/((B/R)*beta) = %.1f "
            "(beta = W_hbm/W = %.2f, %g/%g B)\n",
            r->tp_bound_hbm, r->beta, o->param_bytes, r->act_bytes);
}

/* With experts: what a token activates, the experts a decode step reaches, the AllToAlls and the
 * batch past which the experts' weights are FLOP-bound. */
static void print_moe(FILE *out, const calc_spec *s, const calc_infer_result *r) {
    const calc_moe *mo = &s->moe;
    if (!mo->E) return;
    fprintf(out,
            "  experts: %lld routed (top-%lld) + %lld shared per block; %.4g params, %.4g per "
            "token (FLOPs); a decode step of %.0f sequences reaches %.2f of the %lld experts a "
            "block (routing uniform): only their weights are read; AllToAlls over the expert "
            "axis %.4g ms a step\n",
            (long long)mo->E, (long long)mo->k, (long long)mo->S, r->params, r->params_active,
            r->batch_per_replica, r->experts_touched, (long long)mo->E, r->t_alltoall * 1e3);
    fprintf(out,
            "  experts' B_crit: each expert takes (B/R)*k/E = %.3g tokens a step; its weights "
            "are FLOP-bound past B/R = B_crit*E/k = %.1f\n",
            r->batch_per_replica * (double)mo->k / (double)mo->E, r->b_crit_moe);
}

void calc_infer_print(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                      const calc_infer_result *r) {
    print_setup(out, s, o, r);
    print_memory(out, o, r);
    print_times(out, o, r);
    print_thresholds(out, o, r);
    print_moe(out, s, r);
}
