/* cp_moe: a MoE block's router statistics over the context axis C (hooks.h's moe_cp_sum).
 *
 * The balance loss and the capacity are per training sequence, whose pieces live on the ranks of
 * C (plan_cp.c): the zigzag split's chunks r and 2|C|−1−r on rank r, or the contiguous split's
 * chunk r. One AllGather_C of every rank's records (per piece: the slots the router sent to each
 * expert and each expert's probabilities summed over the piece, as doubles moved bit for bit)
 * gives every rank all of its sequences' pieces; each then walks a sequence's chunks in sequence
 * order, 0 … (pieces·|C| − 1), wherever they live: the sum over all of them is the sequence's
 * (the same additions in the same order on every rank of C), and the counts of the chunks before
 * a piece's are the capacity's counters at its start (an exclusive prefix sum in sequence order,
 * which under zigzag runs through every rank's first chunk before any second one). */
#include <string.h>

#include "kernels/seqsplit.h"
#include "train/parallel/par_impl.h"

/* The rank holding chunk q of a sequence cut into pieces·|C| chunks, and which of its pieces:
 * the contiguous split's chunk q is rank q's; the zigzag split's is where a sequence of one token
 * a chunk puts position q (its row there: the piece). */
static void chunk_owner(int64_t q, int64_t C, int64_t pieces, int64_t *rank, int64_t *piece) {
    *rank = q, *piece = 0;
    if (pieces == 2) kern_seq_zigzag_owner(q, 2 * C, C, rank, piece);
}

void par_hk_moe_cp_sum(void *ctx, model *mod, double *rec, int64_t n, int64_t E) {
    struct par *p = ctx;
    (void)mod;
    const plan *pl = p->pl;
    const int64_t C = pl->cp.n, np = pl->cp_pieces, cnt = plan_cp_moe_floats(pl);
    CHECK(n == pl->model_seqs && cnt == n * 4 * E, "cp_moe: %lld records, the plan's %lld",
          (long long)n, (long long)pl->model_seqs);
    double *send = p->bufs.p[BUF_CP_MOE][0], *all = send + n * 2 * E;
    for (int64_t i = 0; i < n; i++)
        memcpy(send + i * 2 * E, rec + i * 3 * E, (size_t)(2 * E) * sizeof(double));
    par_run(p, PLAN_CP_MOE_STATS, (float *)(void *)all, (const float *)(const void *)send, cnt);
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = i / np, mine = plan_cp_piece_start(pl, i % np) / pl->ms.T; /* my chunk */
        double *r = rec + i * 3 * E;
        memset(r, 0, (size_t)(3 * E) * sizeof *r);
        for (int64_t q = 0; q < C * np; q++) {
            int64_t rank, piece;
            chunk_owner(q, C, np, &rank, &piece);
            const double *x = all + (rank * n + b * np + piece) * 2 * E;
            for (int64_t e = 0; e < 2 * E; e++) r[e] += x[e];
            if (q < mine)
                for (int64_t e = 0; e < E; e++) r[2 * E + e] += x[e];
        }
    }
}
