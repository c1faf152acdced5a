/* test_boundary: the book's crossovers for what a run put on the wire (train/observe/boundary.h)
 * against cases worked by hand, each from the bytes a call sends on each link direction:
 *  - DP on 2 chips (a line): the AllReduce of P bf16 gradients sends V = 2·P bytes one way, the
 *    book's 2·V/W exactly: 2550 tokens per rank;
 *  - ZeRO-3 with L = 4 layers on 2 chips: 4 forward and 2 backward AllGathers and 4
 *    ReduceScatters of a layer, 10 of the book's 12: 10/12 · 2550 = 2125; and with fp32 on the
 *    wire, twice that;
 *  - DP on a wrapping ring of 4: a bidirectional AllReduce sends 2·(3/4)·V/2 each way: ¾ · 2550;
 *  - TP on a ring of 4 with the collective matmul: per layer a bidirectional AllGather (3/8 of
 *    V each way) and 3 ppermutes of V/4 one way, 9/8 of the book's 2 collectives: F = 9/8 · 6800;
 *  - several axes: MULTI's axes at once (the busiest), SEQ's one after the other;
 *  - FSDP + TP: the book's threshold against its own inequality evaluated term by term, and
 *    its B/N = 4α²/(M_X·M_Y·F) at the optimal split; a whole step of ZeRO-3 with 2 layers and TP
 *    on a 2x2 mesh of lines, its compute and the bytes each call sends counted one by one: the
 *    threshold along B = 1.5·F is 4α = 10200 tokens per step, the book's own figure;
 *  - bad input refused. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "train/observe/boundary.h"

#define W1 9e10 /* v5p: bytes/s per link per direction */

typedef struct {
    int64_t b[MESH_MAX_AXES][2];
} bytes;

static double secs(bytes x, mesh_alg alg) {
    const double w[MESH_MAX_AXES] = {W1, W1, W1};
    return boundary_call_seconds(&x.b[0][0], w, alg);
}

static void near(const char *what, double got, double want) {
    check_expect(fabs(got - want) <= 1e-9 * fabs(want), "%s: %.6g (want %.6g)", what, got, want);
}

/* The book's FSDP + TP terms for one MLP's forward per chip (its training chapter), mats D×F
 * matrices, bf16 */
static double book_math(double B, double D, double F, double N, double mats, double C) {
    return 2 * mats * B * D * F / (N * C);
}
static double book_comms(double B, double D, double F, double X, double Y, double mx, double my,
                         double mats, double W) {
    return 2 * mats * D * F / (Y * W * mx) + 4 * B * D / (X * W * my);
}

static void mixed(void) {
    const double alpha = 2550, W = 2 * W1, C = alpha * W, D = 128;
    /* the book's MLP (2 matrices) and a SwiGLU (3), several splits and ratios B/F: at the
     * threshold the compute equals the communication */
    const double split[][5] = {/* X, Y, M_X, M_Y, B/F */
                               {2, 2, 1, 1, 1},
                               {2, 2, 1, 1, 1.5},
                               {4, 2, 1, 1, 0.5},
                               {8, 4, 2, 1, 3},
                               {2, 8, 1, 2, 2}};
    for (int mats = 2; mats <= 3; mats++)
        for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
            const double *v = split[i];
            const double B = boundary_book_mixed_tokens(alpha, v[0], v[1], (int)v[2], (int)v[3],
                                                        v[4], mats),
                         F = B / v[4], N = v[0] * v[1];
            near("FSDP + TP: at the threshold the book's compute = its communication",
                 book_math(B, D, F, N, mats, C),
                 book_comms(B, D, F, v[0], v[1], v[2], v[3], mats, W));
        }
    /* the book's optimal split X = sqrt((B/F)·(M_X/M_Y)·N): N = 4, B = F, X = 2: B/N = 4α²/F */
    const double B4 = boundary_book_mixed_tokens(alpha, 2, 2, 1, 1, 1, 2);
    near("FSDP + TP, N = 4, B = F: the book's B/N = 4α²/(M_X·M_Y·F)", B4 / 4,
         4 * alpha * alpha / B4);
    near("FSDP + TP, a SwiGLU along B = 1.5·F: the book's B = F_book, 4α",
         boundary_book_mixed_tokens(alpha, 2, 2, 1, 1, 1.5, 3), 4 * alpha);

    /* A whole step on a 2x2 mesh of lines (X = Y = 2), L = 2 layers of a SwiGLU (MLP only),
     * B = 9216 tokens, F = 6144, bf16. ZeRO-3 keeps both layers gathered into the backward: a
     * layer's weights (3·D·F/Y per shard of Y) are gathered once and their gradients scattered
     * once, each sending half the gathered bytes one way. TP: per layer the attention's and the
     * MLP's AllGather and ReduceScatter of [B/X, D] forward, and as many backward, each sending
     * half of 2·B·D/X bytes one way. */
    const double L = 2, B = 9216, F = 6144, X = 2, Y = 2;
    double wire = 0;
    for (int l = 0; l < L; l++) {
        for (int k = 0; k < 2; k++)
            wire += secs((bytes){{{(int64_t)(2 * 3 * D * F / Y / 2), 0}}}, MESH_ALG_BIDIR);
        for (int k = 0; k < 8; k++)
            wire += secs((bytes){{{0}, {(int64_t)(2 * B * D / X / 2), 0}}}, MESH_ALG_BIDIR);
    }
    const double peak = 18 * L * D * F * B / (X * Y) / C;
    /* in units of 6·D/W: compute 3·L·B·F/(N·α), transfer (3L−2)·F/Y + (8/3)·L·B/X; at L = 2,
     * X = Y = 2, F = B/1.5: B²/α = 4·B */
    near("ZeRO-3 (2 layers) + TP on 2x2, a whole step along B = 1.5·F: 4α = 10200",
         boundary_mixed_for_wire(B, peak, 1, wire), 4 * alpha);
    /* with a part of the compute growing with B only: exact where the run is at the threshold */
    near("FSDP + TP: a run at the threshold is its own boundary",
         boundary_mixed_for_wire(B, 1.25, 0.8, 1.25), B);
    near("FSDP + TP: compute q·s² + (1−q)·s = transfer s·t_wire",
         boundary_mixed_for_wire(1000, 2, 0.75, 3), 1000 * (3 - 0.25 * 2) / (0.75 * 2));
    check_expect(boundary_book_mixed_tokens(alpha, 2, 2, 0, 1, 1, 3) < 0 &&
                     boundary_book_mixed_tokens(alpha, 2, 2, 1, 1, 0, 3) < 0 &&
                     boundary_mixed_for_wire(B, peak, 1.5, wire) < 0 &&
                     boundary_mixed_for_wire(B, 1, 0.5, 0.4) < 0,
                 "FSDP + TP: bad input refused, and no threshold when the B-linear compute alone "
                 "exceeds the transfer");
}

int main(void) {
    /* DP, 2 chips on a line: P gradients in bf16, V = 2·P; ring AllReduce on 2 = V/2 + V/2 */
    const double P = 4.2e6;
    bytes ar2 = {{{(int64_t)(2 * P), 0}}};
    near("DP, 2 chips: the AllReduce takes the book's 2·V/W", secs(ar2, MESH_ALG_BIDIR),
         2 * (2 * P) / (2 * W1));
    near("DP, 2 chips: 2550 tokens per rank",
         boundary_for_wire(2550, secs(ar2, MESH_ALG_BIDIR), boundary_book_data_bytes(0, P), W1),
         2550);
    near("ZeRO-1, 2 chips: ReduceScatter + AllGather, the same 2550",
         boundary_for_wire(2550, 2 * secs((bytes){{{(int64_t)P, 0}}}, MESH_ALG_BIDIR),
                           boundary_book_data_bytes(1, P), W1),
         2550);

    /* ZeRO-3, L = 4 layers of Pl parameters on 2 chips: each AllGather / ReduceScatter of a
     * layer sends V/2 = Pl bytes (bf16) one way */
    const double Pl = 1.05e6;
    double t = 0;
    for (int i = 0; i < 10; i++) t += secs((bytes){{{0, (int64_t)Pl}}}, MESH_ALG_BIDIR);
    near("ZeRO-3, L = 4, 2 chips: 10 of the book's 12 layer collectives: 2125",
         boundary_for_wire(2550, t, boundary_book_data_bytes(3, 4 * Pl), W1), 2550.0 * 10 / 12);
    near("ZeRO-3, L = 4, fp32 on the wire: twice as many bytes, 4250",
         boundary_for_wire(2550, 2 * t, boundary_book_data_bytes(3, 4 * Pl), W1),
         2 * 2550.0 * 10 / 12);

    /* DP on a wrapping ring of 4: the bidirectional AllReduce sends (3/4)·V/2 each way twice */
    const int64_t q = (int64_t)(2 * P * 3 / 8);
    near("DP, ring of 4: ¾ of the book's bytes per link, 1912.5",
         boundary_for_wire(2550, secs((bytes){{{2 * q, 2 * q}}}, MESH_ALG_BIDIR),
                           boundary_book_data_bytes(0, P), W1),
         0.75 * 2550);

    /* TP with the collective matmul on a ring of 4, L = 2 layers, [tokens, D] = 8192 × 256 */
    const double tok = 8192, D = 256, V = 2 * tok * D;
    t = 0;
    for (int l = 0; l < 2; l++) {
        t += secs((bytes){{{(int64_t)(V * 3 / 8), (int64_t)(V * 3 / 8)}}}, MESH_ALG_BIDIR);
        for (int s = 0; s < 3; s++) t += secs((bytes){{{(int64_t)(V / 4), 0}}}, MESH_ALG_RING);
    }
    near("TP, collective matmul, ring of 4: 9/8 of the book's bytes, F = 7650",
         boundary_for_wire(6800, t, boundary_book_tensor_bytes(2, tok, D), W1), 6800 * 9.0 / 8);

    /* several axes */
    bytes two = {{{1000, 400}, {0, 3000}}};
    near("MULTI: the axes at once, the busiest", secs(two, MESH_ALG_MULTI), 3000 / W1);
    near("DIRECT: the axes at once", secs(two, MESH_ALG_DIRECT), 3000 / W1);
    near("SEQ: one axis after the other", secs(two, MESH_ALG_SEQ), 4000 / W1);
    near("nothing sent: 0", secs((bytes){{{0}}}, MESH_ALG_RING) + 1, 1);

    mixed();
    check_expect(boundary_book_data_bytes(4, P) < 0 && boundary_book_data_bytes(0, 0) < 0 &&
                     boundary_book_tensor_bytes(0, tok, D) < 0 &&
                     boundary_for_wire(2550, 0, 1, W1) < 0 && boundary_for_wire(2550, 1, 1, 0) < 0,
                 "bad input refused");
    return check_finish("test_boundary");
}
