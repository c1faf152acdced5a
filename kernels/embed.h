/* Token embedding on a (possibly vocabulary-sharded) table embed[Vl, D] holding rows
 * [v0, v0+Vl) of the global table. Memory passes (traffic.h): the lookup counts a copy of D
 * floats per token in the shard and a clear of D per other token, the backward an add of D per
 * token in the shard. */
#ifndef MT_KERNELS_EMBED_H
#define MT_KERNELS_EMBED_H
#include <stdint.h>

/* x[M,D] = embed[tok − v0] for tokens in this shard, 0 for the others. Overwrites x. */
void kern_embed_fwd(float *restrict x, const float *restrict embed, const int32_t *restrict tokens,
                    int64_t M, int64_t D, int64_t v0, int64_t Vl);
/* dembed[tok − v0] += dx[row] for tokens in this shard. Accumulates. */
void kern_embed_bwd(float *restrict dembed, const float *restrict dx,
                    const int32_t *restrict tokens, int64_t M, int64_t D, int64_t v0, int64_t Vl);
#endif
