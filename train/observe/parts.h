/* parts: where in a step a stretch of compute or a collective belongs, so that a step's compute
 * and communication can be compared pass by pass and block by block, as the book's crossovers
 * compare them (docs/fidelity.md): data parallelism's gradient AllReduce against the backward
 * pass, tensor parallelism's activation AllGather/ReduceScatter against the MLP block's forward
 * matmuls. The forward or backward pass, and within a transformer block its attention or MLP
 * sublayer (the norm in front of it, its matmuls, its output collectives); the rest of a pass
 * (embedding, head and loss, a layer's weight gathers and gradient hand-off) is *other*;
 * everything outside the passes (optimizer, the end of the gradient reduction) is REST. */
#ifndef MT_TRAIN_PARTS_H
#define MT_TRAIN_PARTS_H

typedef enum {
    PART_FWD_ATTN,
    PART_FWD_MLP,
    PART_FWD_OTHER,
    PART_BWD_ATTN,
    PART_BWD_MLP,
    PART_BWD_OTHER,
    PART_REST,
    PART_COUNT
} step_part;

/* "fwd-attn", "fwd-mlp", "fwd-other", "bwd-attn", "bwd-mlp", "bwd-other", "rest" */
const char *step_part_name(step_part p);
#endif
