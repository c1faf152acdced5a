/* cmatmul: the book's collective matmuls over one mesh axis Y of n ranks (this rank's index i):
 * a tensor-parallel matmul whose AllGather or ReduceScatter is split into n chunks that travel
 * round the ring, the matmul of the chunk in hand computed while the next one is on the wire, so
 * that the communication hides behind the compute (up to one chunk's worth). Depends on mesh/
 * (the ring steps) and kernels/ (gemm, rmsnorm); knows no model.
 *
 * Matrices are row-major; column block j of an [M, N] matrix is its columns [j·N/n, (j+1)·N/n).
 * The ring: at each step every rank passes what it holds to i+1 and receives from i−1 — a
 * ppermute by +1 on an axis that wraps; on an axis of 2 (one link, both directions) one exchange
 * (an AllGather of the two blocks). On an axis of 3 or more without wraparound (a line: an open
 * axis, or a TPU slice smaller than a cube) the chunks travel both ways, a ppermute by +1 and one
 * by −1 per step, n − 1 steps (cmatmul.c).
 *
 * Sums. The matmul-ReduceScatter adds the ranks' partial products of block b in ring order,
 * starting at rank b+1 (((p_{b+1} + p_{b+2}) + ...) + p_b; on a line from both ends), and the
 * AllGather-matmuls add the chunks' products in the order they arrive (i, i−1, ...): all differ
 * from one gemm over the whole contraction only by the order of additions (results within k·eps of
 * it), and are the same on every run. With bf16 on the wire (mesh_set_wire) the travelling partial
 * sums and the chunks received are bf16-rounded as every collective's messages are; the rank's own
 * contribution stays fp32. */
#ifndef MT_TRAIN_CMATMUL_H
#define MT_TRAIN_CMATMUL_H
#include <stdint.h>

#include "mesh/mesh.h"

/* Floats of scratch the two functions need for an [M, N] product over n ranks: 6·M·N/n. */
int64_t cmm_scratch(int64_t M, int64_t N, int64_t n);

/* Collective over: axis. matmul-ReduceScatter: out[M, N/n] = column block i of Σ over the ranks
 * of a[M, K] · w[K, N] (each rank its own a and w). Block b's partial sum starts at rank b+1 and
 * travels round the ring, each rank adding its a · w[:, block b] (computed while the previous
 * step's sum was on the wire); after n−1 steps it ends, complete, at rank b. Overwrites out.
 * scratch: cmm_scratch(M, N, n) floats, disjoint from the others. */
void cmm_matmul_reduce_scatter(mesh *m, int axis, float *out, const float *a, const float *w,
                               int64_t M, int64_t K, int64_t N, float *scratch);

/* Collective over: axis. AllGather-matmul, in the transposed form of a matmul's backward pass:
 * x[M, N] is gathered over the ranks by column blocks (rank j holds block j as xi[M, N/n]), and
 *   y[M, K] = x · wᵀ (w[K, N], overwrites y);  dw[K, N] += aᵀ · x (a[M, K]; skipped if dw NULL).
 * The blocks travel round the ring; block j's two products are computed while the next block is
 * on the wire. x is never whole on any rank. scratch: cmm_scratch(M, N, n) floats. */
void cmm_all_gather_matmul_t(mesh *m, int axis, float *y, float *dw, const float *xi,
                             const float *w, const float *a, int64_t M, int64_t K, int64_t N,
                             float *scratch);

/* Collective over: axis. AllGather-norm-matmul, an RMSNorm and the matmuls that take its output
 * (a sublayer's in-projections): x[M, N] is gathered over the ranks by column blocks (rank j
 * holds block j, packed as xi[M, N/n]), and
 *   h = rmsnorm(x) ∘ g (rstd[M] its rows' 1/rms),  y_k[M, nk[k]] = h · w_k[N, nk[k]] for k < nw.
 * The norm is a per-row scale, so h · w_k = diag(rstd) · Σ_j (x_j ∘ g_j) · w_k[block j rows, :]:
 * block j's products are computed while the next block is on the wire (in the order the blocks
 * arrive, the rank's own first), the rows scaled by rstd after the last. Writes all of x (the
 * gathered whole), h and rstd (the same bits as rmsnorm on the whole x) and overwrites y_k.
 * scratch: cmm_scratch(M, N, n) floats, of which this uses the first 4·M·N/n (xi may lie in the
 * rest). */
void cmm_all_gather_norm_matmul(mesh *m, int axis, float *x, float *h, float *rstd, const float *g,
                                const float *xi, int nw, const float *const *w, const int64_t *nk,
                                float *const *y, int64_t M, int64_t N, float *scratch);
#endif
