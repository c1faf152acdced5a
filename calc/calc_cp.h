/* calc_cp: context parallelism in the calculator. One mesh axis, the CP axis of C chips, splits
 * every sequence's T tokens: the zigzag split (2C chunks; chip i holds chunks i and 2C−1−i, so
 * causal work is the same on every chip), for training (calc_cp) and for serving with the KV
 * cache sharded over the sequence (calc_cp_infer). Pure arithmetic on calc.h, calc_infer.h and
 * the collective cost model (mesh/cost.h); no MPI.
 *
 * Training. The CP axis joins the data axes for everything but attention: tokens per chip are
 * B/(X·C), and the weights' gradients reduce (FSDP shards) over data × CP, as Megatron's DP×CP
 * group does; calc_compute prices all that with the axis among the data axes. Attention then
 * needs the K and V of every earlier token. Per layer and chip, with X the data degree without
 * the CP axis, S_c = B/(T·X) sequences per chip, T_l = T/C, a = the activation bytes, N_Y and
 * K_Y the query and kv heads per tensor rank (K_Y = 1 when K < Y, as TP replicates them), one
 * chip's K and V is KV = 2·S_c·T_l·K_Y·H·a bytes, their gradients dKV = KV·g/a (g = the
 * gradients' bytes on the wire, --grad-bytes: meshtrain's --comm-dtype, which moves dK, dV fp32
 * by default also where K, V travel in bf16), and:
 *   allgather  fwd AllGather_C K, V [B, T_C, K_Y, H] (V = C·KV); bwd AllGather_C again and
 *              ReduceScatter_C dK, dV (V = C·dKV). On the critical path (the gather waits for
 *              the layer's own projections): exposed.
 *   ring       fwd C−1 ppermutes of one chip's KV block, each while the block in hand is
 *              attended; bwd C−1 ppermutes of K, V with dK, dV (KV + dKV) and the last dK, dV
 *              home (dKV). A zigzag step attends half of a T_l × T_l block, 2·S_c·T_l²·N_Y·H FLOPs
 *              forward (twice that backward, with (a + g)/a times the bytes: at g = a the same
 *              threshold), so a step hides its transfer when
 *                  2·S_c·T_l²·N_Y·H / C_chip ≥ KV / W_1  ⟺  T ≥ C·(C_chip/W_1)·a·K_Y/N_Y
 *              (W_1 = one link one way, the ppermute's bandwidth; and the step must outlast the
 *              hop latency T_min). A step exposes max(0, t_transfer − t_step), backward also
 *              max(0, t_dKV − t_step/2): a block's dK, dV must arrive within the next block's
 *              rows' half (the book's dP, dQ: 2 of its 4 backward products), as meshtrain's
 *              --overlap schedules them; the last dK, dV home is exposed. With a hop priced
 *              max(T_min, V/W_1) that term binds when t_x2 − t_dKV < t_step/2 < t_dKV: on
 *              bandwidth alone only when g > a (dK, dV bigger than K, V), but at g = a too
 *              when a hop's latency shows, v = KV/W_1 < T_min: whenever
 *              2v − T_min < t_step/2 < T_min.
 *   ulysses    fwd AllToAll_C of Q, K, V from sequence shards [T_C, heads] to head shards
 *              [T, heads_C], and of O back; bwd the same for dO (at a: it is rounded to bf16
 *              before use, as meshtrain's bf16 compute moves it) and for dQ, dK, dV (at g). N_Y
 *              must divide by C, and K_Y by C or C by K_Y (each kv head then goes to C/K_Y chips):
 *              K_e = max(K_Y, C) kv heads travel. V = C × the chip's input. Exposed.
 * The contiguous split, where 2C does not divide T (meshtrain's for allgather and ring then):
 * chip i holds tokens [i·T_l, (i+1)·T_l), and causal attention cannot be balanced: chip C−1's
 * queries see the C−1 earlier blocks whole and its own causally, (2C−1)·t_block of attention a
 * layer forward where every chip does C·t_block under zigzag (the same total). The busiest
 * chip's extra (C−1)·t_block forward and 2·(C−1)·t_block backward are added to the step
 * (calc_compute counts the average), and the ring's steps on it attend whole blocks, 2·t_block,
 * which hide the transfer from T ≥ T_overlap/2: it exposes (C−1)·max(0, t_x − 2·t_block)
 * forward, (C−1)·max(0, t_x2 − 4·t_block, t_dx − 2·t_block) + t_dx backward. Ulysses attends
 * whole sequences: balanced.
 * The step is calc_compute's overlapped step plus L/P × the exposed time of a layer. Memory:
 * calc_compute's activations (the axis divides the tokens; with the axis idle they are C times
 * larger) plus the algorithm's buffers: the gathered K, V (and dK, dV) of one layer, the blocks
 * in flight (with --remat meshtrain also the scratch meshtrain's --overlap ring keeps between a
 * block's backward halves, every sequence's and head's P and dS of one micro-batch's block:
 * 2·(S_c/M)·N_Y·T_l²·a), or the AllToAll's head-sharded copies.
 *
 * Serving (--infer), the book's inference chapter: "sequence sharding: first AllGather the Q
 * activations, then accumulate the KVs as flash attention does". The KV cache
 * [2, B, S_C, K_Y, H] is sharded over kv heads by the tensor axes Y and over the sequence by the
 * CP axis C. Decode: the weights are model parallel over Y·C (never replicated, never moved),
 * so Q comes out [B, N_YC, H]; per layer AllGather_C Q → [B, N_Y, H], each chip attends its
 * shard of the cache, and an AllToAll_C hands each chip the partials (O, m, l) of its N_YC
 * heads to merge. Step = T_kv + max(T_flops, T_params, T_ici) as calc_infer's, with
 * T_kv = B/R·KV_seq/(min(Y, K·B/R)·C)/W_hbm: against head-then-batch sharding over all Y·C chips
 * (calc_infer's, min(Y·C, K·B/R)), the cache keeps spreading when K·B/R < Y·C. Prefill of one
 * prompt: tensor parallel over Y, the prompt over C with the chosen algorithm (weights
 * replicated over C, as the book's prefill does beyond the TP bound: a disaggregated prefill
 * slice), max(T_math, T_hbm, T_ici over Y) + L × the exposed attention collectives; beside it
 * calc_infer's prefill with tensor parallelism over all Y·C. */
#ifndef MT_CALC_CALC_CP_H
#define MT_CALC_CALC_CP_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "calc/calc.h"
#include "calc/calc_infer.h"

/* The split's rules, shared with calc.c and calc_moe.c (inline: those are below calc_cp.c in the
 * link order). The contiguous split where 2C does not divide T; the pieces a chip holds of each
 * sequence: 2 under the zigzag split (allgather, ring), 1 contiguous or under ulysses (whole
 * head shards) or without a context axis; ulysses' kv heads per chip: K_Y/C, or 1 when C does not
 * divide K_Y (K_Y < C: each kv head goes to C/K_Y chips; K_e = C·that kv heads travel). */
static inline int calc_cp_contiguous(double T, double C) {
    return fmod(T, 2 * C) != 0;
}
static inline int calc_cp_pieces(calc_cp_alg alg, double T, double C) {
    return C > 1 && alg != CALC_CP_ULYSSES && !calc_cp_contiguous(T, C) ? 2 : 1;
}
static inline double calc_cp_kv_heads(double K_Y, double C) {
    return fmod(K_Y, C) == 0 ? K_Y / C : 1;
}

/* "allgather", "ring", "ulysses"; parse returns −1 for anything else. */
const char *calc_cp_alg_name(calc_cp_alg a);
int calc_cp_alg_parse(const char *s);

typedef struct {
    int axis; /* the CP axis (0 = x), −1: none */
    calc_cp_alg alg;
} calc_cp_opt;

/* One algorithm on one layer, per chip. */
typedef struct {
    int ok; /* 0: refused (why) */
    char why[160];
    double v_fwd[2], v_bwd[2];      /* the book's V of each collective (up to 2 per pass) */
    int calls_fwd[2], calls_bwd[2]; /* how many of each per layer */
    cost_op op_fwd[2], op_bwd[2];
    double sent_fwd, sent_bwd;       /* bytes a chip sends per layer */
    double t_fwd, t_bwd;             /* the collectives' time per layer */
    double exposed_fwd, exposed_bwd; /* the part no compute hides */
    double imbalance_fwd,
        imbalance_bwd;               /* the contiguous split: the busiest chip's attention
                                        past the balanced share, (C−1)·t_block, 2·(C−1)·t_block */
    double mem;                      /* buffers per chip at the peak (bytes) */
    double t_step; /* calc_compute's step + L/P·(exposed_fwd + exposed_bwd + imbalance_*) */
} calc_cp_row;

typedef struct {
    double C, X, S_c, T_l, N_Y, K_Y, K_e; /* K_e: kv heads ulysses moves */
    int contig;                           /* the contiguous split (2C does not divide T) */
    double kv;                            /* KV: one chip's K and V of one layer, bytes */
    double t_block, t_xfer, t_xfer2;      /* ring step: attention (fwd); ppermute of KV, KV + dKV */
    double T_overlap;     /* the ring hides its transfers for T above this (bandwidth term) */
    double T_latency;     /* ... and above this a step outlasts T_min */
    double mem_acts;      /* activations per chip (calc_compute's) */
    double mem_acts_idle; /* the same with the CP axis idle: mem_acts·C */
    calc_cp_row row[CALC_CP_N_ALGS];
} calc_cp_result;

/* Context parallelism over o->axis for the training plan s, r (computed by calc_compute with the
 * axis among s's data axes). Returns 0, or −1 with err: no such axis, the axis in another role,
 * T not divisible by C, fewer than one sequence per chip,
 * or the chosen algorithm refused (ulysses: heads). */
int calc_cp(const calc_spec *s, const calc_result *r, const calc_cp_opt *o, calc_cp_result *cr,
            char *err, size_t errlen);
void calc_cp_print(FILE *out, const calc_spec *s, const calc_result *r, const calc_cp_opt *o,
                   const calc_cp_result *cr);
/* The plan as calc_print_json writes it, with the section above as its "context_parallel"
 * object: the spec's figures, then "algorithms", one object per algorithm (calc_cp_row: its
 * calls' ops, the book's V in bytes and counts per layer, times in seconds, buffers in bytes). */
void calc_print_json_cp(FILE *out, const calc_spec *s, const calc_result *r, const calc_cp_opt *o,
                        const calc_cp_result *cr);

/* Serving with the KV cache sharded over the sequence. */
typedef struct {
    double Y, C, replicas, batch_per_replica;
    calc_infer_result base; /* calc_infer with tensor parallelism over Y·C (no sequence sharding) */
    /* decode, per chip and step */
    double mem_params, mem_kv, memory_per_chip, max_batch;
    int fits;
    double t_kv, t_params, t_flops, t_ici, t_tp, t_gather_q, t_combine, decode_step_s;
    calc_infer_regime regime;
    double tokens_per_s;
    /* prefill of one prompt: tensor over Y, the prompt over C */
    double prefill_mem; /* weights over Y + the prompt's KV over kv heads and C, per chip */
    double prefill_t_math, prefill_t_hbm, prefill_t_ici, prefill_exposed[CALC_CP_N_ALGS];
    double prefill_s[CALC_CP_N_ALGS];
    char prefill_why[CALC_CP_N_ALGS][160]; /* non-empty: the algorithm is refused */
    /* meshtrain's `generate --kv-shard`: the weights model parallel over Y only (copied over C),
     * each sequence's positions dealt round-robin over C (ceil(S/C) per chip), and per layer one
     * AllGather over C of every chip's fp32 partials (O, m, l), [B, N_Y·(H + 2)] each. The weight
     * reads and the FLOPs are those of Y chips: only the cache's memory and reads fall by C. */
    struct {
        char why[160];   /* non-empty: calc_infer refused the weights over Y alone */
        calc_infer_result y; /* calc_infer with tensor parallelism over Y, B/R sequences a group */
        double mem_kv, memory_per_chip;
        int fits;
        double t_kv, t_gather, t_ici, decode_step_s, tokens_per_s;
        calc_infer_regime regime;
    } ks;
} calc_cp_infer_result;

/* s: the serving spec with the tensor axes WITHOUT the CP axis; o: calc_infer's options.
 * Returns 0, or −1 with err (calc_infer's refusals on Y·C, the CP axis among the tensor axes,
 * the chosen algorithm refused for the prompt). */
int calc_cp_infer(const calc_spec *s, const calc_infer_opt *io, const calc_cp_opt *o,
                  calc_cp_infer_result *cr, char *err, size_t errlen);
void calc_cp_infer_print(FILE *out, const calc_spec *s, const calc_infer_opt *io,
                         const calc_cp_opt *o, const calc_cp_infer_result *cr);
#endif
