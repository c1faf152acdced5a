/* Softmax cross-entropy over a vocabulary that may be sharded: a rank holds columns
 * [v0, v0+Vl) of logits[M, Vl]. The pieces combine across shards as
 *   m = max_s m_s,  Z = Σ_s z_s·exp(m_s − m),  lse = m + log Z,  loss_row = lse − t_row
 * where t_row comes from the one shard that holds the target. */
#ifndef MT_KERNELS_XENT_H
#define MT_KERNELS_XENT_H
#include <stdint.h>

/* Per row: rowmax[M] = max of the local logits; rowsum[M] = Σ exp(logit − rowmax);
 * tlogit[M] = logit of the target if it is in this shard, else 0. Overwrites all three. */
void kern_xent_stats(float *restrict rowmax, float *restrict rowsum, float *restrict tlogit,
                     const float *restrict logits, const int32_t *restrict targets, int64_t M,
                     int64_t Vl, int64_t v0);
/* dlogits[M,Vl] = scale · (exp(logits − lse[row]) − onehot(target)). Overwrites; dlogits
 * may alias logits (in place). */
void kern_xent_bwd(float *dlogits, const float *logits, const float *restrict lse,
                   const int32_t *restrict targets, int64_t M, int64_t Vl, int64_t v0, float scale);
void kern_xent_stats_ref(float *rowmax, float *rowsum, float *tlogit, const float *logits,
                         const int32_t *targets, int64_t M, int64_t Vl, int64_t v0);
void kern_xent_bwd_ref(float *dlogits, const float *logits, const float *lse,
                       const int32_t *targets, int64_t M, int64_t Vl, int64_t v0, float scale);
#endif
