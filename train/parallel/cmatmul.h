/* cmatmul: the book's collective matmuls over one mesh axis Y of n ranks (this rank's index i):
 * a tensor-parallel matmul whose AllGather or ReduceScatter is split into n chunks that travel
 * round the ring, the matmul of the chunk in hand computed while the next one is on the wire, so
 * that the communication hides behind the compute (up to one chunk's worth). This file moves the
 * chunks; the caller does the math, through a callback per chunk: the model's (train/model/
 * sublayer.c), which the tensor axis's hooks (tensor.c) pass in. Depends on mesh/ (the ring
 * steps); knows no model.
 *
 * Matrices are row-major; column block j of an [M, N] matrix is its columns [j·N/n, (j+1)·N/n).
 * The ring: at each step every rank passes what it holds to i+1 and receives from i−1 — a
 * ppermute by +1 on an axis that wraps; on an axis of 2 (one link, both directions) one exchange
 * (an AllGather of the two blocks). On an axis of 3 or more without wraparound (a line: an open
 * axis, or a TPU slice smaller than a cube) the chunks travel both ways, a ppermute by +1 and one
 * by −1 per step, n − 1 steps (cmatmul.c).
 *
 * Sums. The matmul-ReduceScatter adds the ranks' partial products of block b in ring order,
 * starting at rank b+1 (((p_{b+1} + p_{b+2}) + ...) + p_b; on a line from both ends); the gather
 * hands the blocks over in the order they arrive (i, i−1, ...), and a caller that accumulates
 * products over them adds in that order: all differ from one gemm over the whole contraction only
 * by the order of additions (results within k·eps of it), and are the same on every run. The
 * ring's steps move in the caller's wire format w (the plan's): with bf16 the travelling partial
 * sums and the chunks received are bf16-rounded as every collective's messages are; the rank's
 * own contribution stays fp32. */
#ifndef MT_TRAIN_CMATMUL_H
#define MT_TRAIN_CMATMUL_H
#include <stdint.h>

#include "mesh/coll.h"

/* Floats of scratch the two functions need for an [M, N] product over n ranks: 6·M·N/n. */
int64_t cmm_scratch(int64_t M, int64_t N, int64_t n);

/* dst[M, N/nb] = column block b of nb of the caller's product (overwrites). */
typedef void (*cmm_product_fn)(void *ctx, float *dst, int64_t b, int64_t nb);
/* blk[M, N/n] is column block j of the gathered array; first: the rank's own, handed over first. */
typedef void (*cmm_block_fn)(void *ctx, const float *blk, int64_t j, int first);

/* Collective over: axis. matmul-ReduceScatter: out[M, N/n] = column block i of the sum over the
 * ranks of each rank's product P[M, N] (fn computes P's column block b of n on demand). Block b's
 * partial sum starts at rank b+1 and travels round the ring, each rank adding its block b
 * (computed while the previous step's sum was on the wire); after n−1 steps it ends, complete,
 * at rank b. Overwrites out. scratch: cmm_scratch(M, N, n) floats, disjoint from out. */
void cmm_matmul_reduce_scatter(mesh *m, int axis, mesh_wire w, float *out, cmm_product_fn fn,
                               void *ctx, int64_t M, int64_t N, float *scratch);

/* Collective over: axis. The AllGather of the ranks' column blocks xi[c] (c = M·N/n floats each),
 * fn called on each block as it arrives (the rank's own first), the next one on the wire
 * meanwhile: the AllGather-matmul when fn multiplies each block in. Uses the first 4·c floats of
 * scratch (2·c on an axis that wraps or of 2); xi may lie in the rest. */
void cmm_gather_blocks(mesh *m, int axis, mesh_wire w, const float *xi, int64_t c, float *scratch,
                       cmm_block_fn fn, void *ctx);
#endif
