/* calc_infer: the calculator's inference half (the book's inference and applied-inference
 * chapters). For a chip, a slice, a model, a batch of sequences with a KV cache of `context`
 * tokens each, and a model-parallel (Megatron) sharding over the --tensor axes, predicts the KV
 * cache's size, the memory per chip against HBM, the smallest slice that fits, the prefill time
 * (TTFT), the decode step time with its regime, tokens/s, the critical batch B_crit and the
 * book's tensor-parallel bounds. Pure arithmetic on mesh/cost.h and calc.h; no MPI.
 *
 * The serving model (the book's choices for generation):
 *  - the weights are sharded over the tensor axes (Y chips): W_Q, W_O and the MLP Megatron-style,
 *    the embeddings over the vocabulary; the small K/V projection weights are replicated rather
 *    than sharded beyond K ways;
 *  - the KV cache [2, B, S, K_Y, H] is sharded over kv heads first, then over batch (when
 *    Y > K), so each chip holds B·KV/min(Y, K·B) bytes;
 *  - no FSDP and no data parallelism: the axes outside --tensor hold R independent replicas, each
 *    serving B/R of the sequences;
 *  - a decode step of one replica takes T_kv + max(T_flops, T_params, T_ici), with
 *    T_kv = KV bytes per chip / W_hbm (attention is always bandwidth-bound),
 *    T_params = weight bytes per chip / W_hbm, T_flops = 2·(B/R)·P/(Y·C), and T_ici the
 *    Megatron collectives of the step (an AllGather and a ReduceScatter of [B/R, D] per block,
 *    two blocks a layer; two AllToAlls of the queries a layer when Y > K; an AllGather of the
 *    logits), priced by the collective cost model. The book's formula is the first three terms;
 *    T_ici inside the max is the regime the book's TP bound F/(B·β) speaks of;
 *  - prefill of one prompt (the book's interleaved or disaggregated engine, so the time is the
 *    TTFT) takes max(FLOPs/(Y·C·mfu), bytes/W_hbm, T_ici), FLOPs = 2·P·T + causal attention
 *    2·L·T²·N·H; prefilling the whole batch at once (the simplest engine) is shown beside it.
 * Units: bytes, seconds, FLOP/s; GB = 1e9. */
#ifndef MT_CALC_CALC_INFER_H
#define MT_CALC_CALC_INFER_H
#include "calc/calc.h"

/* The FLOP rate decode and prefill run at: the chip's bf16 or int8 peak. */
typedef enum { CALC_FLOPS_BF16, CALC_FLOPS_INT8 } calc_flops_dtype;

/* Which term sets a decode step (besides the KV reads, which are always HBM traffic). */
typedef enum { CALC_REGIME_HBM, CALC_REGIME_FLOPS, CALC_REGIME_ICI } calc_infer_regime;

/* The largest slice the calculator plans for when the chip has no pod (the cpu profile). */
#define CALC_MAX_SLICE (1 << 24)

typedef struct {
    double batch;       /* B: sequences decoded together (one token each per step), all replicas */
    double context;     /* S: tokens in each sequence's KV cache */
    double prefill;     /* prompt tokens of one request (default: the context) */
    double param_bytes; /* bytes per weight: 2 bf16, 1 int8, 0.5 int4 */
    double kv_bytes;    /* bytes per KV-cache element */
    calc_flops_dtype flops_dtype;
    double prefill_mfu; /* fraction of peak a prefill reaches (1 = the roofline bound) */
    /* A book problem may give these directly; 0 = derive from the shape. */
    double params;         /* parameter count */
    double kv_token_bytes; /* KV-cache bytes per token (all layers, K and V) */
} calc_infer_opt;

typedef struct {
    /* slice and sharding */
    double chips, Y, replicas, batch_per_replica; /* N; tensor degree; N/Y; B/R */
    int M_Y;                                      /* physical axes of the tensor sharding */
    double C;                                     /* FLOP/s per chip in the chosen dtype */
    double act_bytes;                             /* activation bytes on the wire (2, or 1 int8) */
    /* sizes */
    double params, param_bytes_total;                      /* P; P·param_bytes */
    double kv_bytes_per_token, kv_bytes_per_seq, kv_bytes; /* one token, one sequence, the batch */
    /* memory per chip */
    double mem_params, mem_kv, memory_per_chip, hbm;
    int fits;
    double max_batch; /* the largest batch (all replicas) whose caches fit beside the weights */
    double min_chips; /* (P·param_bytes + B·KV per sequence)/HBM, the book's count */
    int min_slice;    /* the smallest power-of-two slice holding that (the book's rule) */
    char min_slice_shape[32]; /* "4x4", or "" if it exceeds one pod */
    /* prefill of one prompt (= TTFT) and of the whole replica batch at once */
    double prefill_flops_dense, prefill_flops_attn; /* 2·P·T; 2·L·T²·N·H */
    double prefill_t_math, prefill_t_hbm, prefill_t_ici, prefill_s, ttft_s, prefill_batch_s;
    /* decode step of one replica */
    double t_kv, t_params, t_flops, t_ici, decode_step_s;
    calc_infer_regime regime;
    double tokens_per_s, tokens_per_s_per_chip;
    /* the book's thresholds */
    double b_crit;      /* C·param_bytes/(2·W_hbm): B/R above it makes the weights' FLOPs win */
    double alpha, beta; /* C/W_ici; W_hbm/W_ici (W bidirectional) */
    double tp_bound_flops; /* max(M_Y,1)·F/α: more tensor parallelism is ICI-bound in FLOPs */
    double tp_bound_hbm;   /* (param_bytes/act_bytes)·F/((B/R)·β): ICI-bound while HBM-bound */
    /* mixture of experts (spec moe.E > 0; else params_active = params, the rest 0) */
    double params_active; /* the parameters a token passes through: decode's and prefill's FLOPs */
    double experts_touched; /* E·(1 − (1 − k/E)^(B/R)): the experts a decode step's tokens reach
                               per block, routing uniform; only their weights are read */
    double t_alltoall;      /* decode: the two AllToAlls per block over the expert axis */
    double b_crit_moe;      /* B_crit·E/k: the batch per replica past which each expert's tokens
                               (B/R)·k/E make its weights FLOP-bound */
} calc_infer_result;

/* Defaults: batch 1, context 0 (must be given), prefill = context, bf16 weights, KV and FLOPs,
 * prefill at the roofline (mfu 1). */
void calc_infer_defaults(calc_infer_opt *o);
/* Predicts serving for spec s (chip, link, topology, model, tensor axes; its data, pipeline and
 * ZeRO settings must be empty) and options o. Returns 0, or −1 with err (a missing context, a
 * batch the replicas do not divide, FSDP, data or pipeline axes, a tensor degree that does not
 * divide the heads and d_ff). */
int calc_infer(const calc_spec *s, const calc_infer_opt *o, calc_infer_result *r, char *err,
               size_t errlen);
const char *calc_infer_regime_name(calc_infer_regime g); /* "HBM", "FLOP", "ICI" */
/* A decode step from its terms: *step = t_kv + max(t_flops, t_params, t_ici); returns the regime
 * of the largest of the three. */
calc_infer_regime calc_infer_decode_step(double t_kv, double t_flops, double t_params, double t_ici,
                                         double *step);
/* The Megatron collectives of one replica's forward over `tokens` tokens (an AllGather and a
 * ReduceScatter of [tokens, D] per block, two blocks a layer; the queries' two AllToAlls a layer
 * when Y > K; the logits' AllGather): seconds, 0 without tensor parallelism. */
double calc_infer_forward_ici(const calc_spec *s, const calc_infer_result *r, double tokens);
/* The smallest power-of-two slice of `chips` that fits the chip's pod, as "4x2" (largest axis
 * first); "" (and −1) if none does. */
int calc_pow2_slice(const cost_chip *chip, int chips, char *buf, size_t len);

/* Printing: a table (calc_infer.c), JSON with an "inference" object, CSV of one header row and
 * one row (calc_out.c). */
void calc_infer_print(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                      const calc_infer_result *r);
void calc_infer_print_json(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                           const calc_infer_result *r);
void calc_infer_print_csv(FILE *out, const calc_spec *s, const calc_infer_opt *o,
                          const calc_infer_result *r);
#endif
