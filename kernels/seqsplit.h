/* seqsplit: how the T tokens of a sequence are split over the n ranks of a context-parallel axis,
 * as the GLOBAL positions (places in the whole sequence) of each rank's rows, in local row order.
 * The positions feed RoPE (kern_rope_apply_pos) and the causal mask of the blockwise attention
 * (attn_part.h), so that a split sequence computes what the whole one does. Depends on nothing;
 * no MPI, no allocation.
 *
 *  zigzag      2n chunks of c = T/(2n) tokens; rank r holds chunk r, then chunk 2n−1−r
 *              (T % 2n = 0). Causal work is equal on every rank: rank r's rows see
 *              Σ (p + 1) = c·(r·c + (c+1)/2) + c·((2n−1−r)·c + (c+1)/2) = c·(2n·c + 1) keys,
 *              which does not depend on r. In a ring, each step's block is half visible on every
 *              rank (the diagonal step: one chunk fully, two causally).
 *  contiguous  rank r holds [r·T/n, (r+1)·T/n) (T % n = 0). Causal work grows with r: a row of
 *              rank r sees r·T/n + (T/n + 1)/2 keys on average, rank n−1 about 2n−1 times as
 *              many as rank 0. */
#ifndef MT_KERNELS_SEQSPLIT_H
#define MT_KERNELS_SEQSPLIT_H
#include <stdint.h>

/* pos[T/n] = the positions of rank r's rows under the zigzag split (ascending). T % (2n) = 0. */
void kern_seq_zigzag(int32_t *pos, int64_t T, int64_t n, int64_t r);
/* pos[T/n] = the positions of rank r's rows under the contiguous split. T % n = 0. */
void kern_seq_contig(int32_t *pos, int64_t T, int64_t n, int64_t r);
/* The rank holding position p under the zigzag split, and p's row there. */
void kern_seq_zigzag_owner(int64_t p, int64_t T, int64_t n, int64_t *rank, int64_t *row);
/* Σ_i (pos[i] + 1): the query-key pairs causal attention computes for rows at pos[Tl] against the
 * whole sequence (the exact work, without any blocking). */
int64_t kern_seq_causal_pairs(const int32_t *pos, int64_t Tl);
#endif
