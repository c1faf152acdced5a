/* cost: what a step plan costs by the book's roofline, the figures `generate` reports per step
 * (gen.h's gen_step, summed over every rank): the weight bytes read (each replica with work
 * reads its weights once, wherever the tensor axis splits them; kv heads replicated past K count
 * once per copy), the matmul and attention FLOPs (2 per multiply-add; each row attends to every
 * position up to its own), and the KV bytes read and written. gen_predict turns them into the
 * book's step time against the machine's measured bandwidth and FLOP rate; the serving report
 * and the virtual clock of bench/serve_bench both use it. With speculative decoding the target's
 * forward counts the drafted rows it scores; the drafter's forwards are not counted. Pure
 * arithmetic. */
#ifndef MT_TRAIN_SERVE_COST_H
#define MT_TRAIN_SERVE_COST_H
#include <stdint.h>

#include "train/config/config.h"
#include "train/infer/gen.h"
#include "train/serve/batcher.h"

/* Totals over every rank of a mesh with |Y| = nY tensor ranks per replica (w_elem_bytes per
 * element of the weight matrices a step reads: 4 fp32, or 2 with --compute-dtype bf16, whose
 * matmuls read the bf16 copy of the layers' matrices and the unembedding; the norm gains and the
 * embedding rows stay fp32; kv_elem_bytes per cache element), the kv heads past K replicated
 * (kv_groups = 1) or, in the AllToAll layout, their sequences split over the kv_groups = |Y|/K
 * ranks sharing each (the cache read once). seconds is left 0. */
gen_step serve_plan_cost(const model_shape *s, int64_t nY, int64_t kv_groups, int64_t kv_elem_bytes,
                         int64_t w_elem_bytes, const batch_plan *p);

/* One side of a mesh a plan runs on: its replicas' tensor degree and pools (kv_groups). */
typedef struct {
    int64_t nY, kv_groups;
} serve_side;
/* serve_plan_cost with each side at its own degree: the items of replicas [0, prefill_replicas)
 * at side[0]'s (disaggregated serving's prefill side), the others at side[1]'s; the totals of
 * both (prefill_replicas 0: every item at side[1]'s). */
gen_step serve_plan_cost_sides(const model_shape *s, const serve_side side[2],
                               int32_t prefill_replicas, int64_t kv_elem_bytes,
                               int64_t w_elem_bytes, const batch_plan *p);
#endif
