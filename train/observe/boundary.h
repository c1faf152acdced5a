/* boundary: the book's crossovers for the collectives a run actually put on the wire.
 *
 * The book derives each boundary (report_book_boundaries) from its own collectives, in bf16 and
 * priced at V/W: DP's AllReduce of the gradients (2·V), FSDP's two AllGathers of the weights and
 * ReduceScatter of the gradients (3·V), TP's AllGather and ReduceScatter of each MLP's [B, D]
 * activations. A run sends what it sends: ZeRO-3 keeps the last layers gathered into the
 * backward, a collective matmul's ppermutes use one direction of each link, fp32 doubles the
 * bytes, a ring of N moves (N−1)/N of V per link. On the book's side of each boundary the compute
 * grows with the swept variable (tokens per data shard, d_ff) and the communication does not, so
 * the boundary for what the run sent is the book's scaled by the two communication times:
 *     boundary_wire = boundary_book · T_wire / T_book,
 * with T_wire = Σ over the compared calls of boundary_call_seconds (the bytes mesh counted on
 * each link direction, at the link's one-way bandwidth) and T_book = the book's bytes / W,
 * W = 2·w_oneway. Pure: no MPI, no I/O. */
#ifndef MT_TRAIN_BOUNDARY_H
#define MT_TRAIN_BOUNDARY_H
#include <stdint.h>

#include "mesh/cost.h"
#include "mesh/mesh.h"

/* The time the bytes one call sent take on its links: link_bytes[2·a + d] = bytes this rank
 * sent on axis a in direction d (mesh_call's link_bytes[a][d], flattened), w_oneway[a] = the axis's
 * bandwidth per direction. Per axis the busier direction; the axes one after another (RING, BIDIR,
 * SEQ and ppermute), or at once for MULTI and DIRECT (the busiest axis). Axes with no bytes cost 0.
 */
double boundary_call_seconds(const int64_t *link_bytes, const double w_oneway[MESH_MAX_AXES],
                             mesh_alg alg);

/* The bytes the book's data boundary sets against a step, with bf16 on the wire and an
 * AllReduce counted twice (2·V/W): 2·2·params for DP, ZeRO-1 and ZeRO-2 (an AllReduce of the
 * gradients, or their ReduceScatter and the parameters' AllGather), 3·2·params for ZeRO-3 (two
 * AllGathers of the weights, a ReduceScatter of the gradients). params = the parameters the
 * data axes reduce per rank (all of them, over |Y| with a tensor axis). −1 for zero outside
 * 0..3 or params ≤ 0. */
double boundary_book_data_bytes(int zero, double params);
/* The bytes the book's tensor boundary sets against the MLPs' forward passes: per layer an
 * AllGather and a ReduceScatter of the [tokens, D] activations in bf16, layers·2·2·tokens·D.
 * −1 unless all three are > 0. */
double boundary_book_tensor_bytes(double layers, double tokens, double d_model);
/* boundary_book · wire_seconds / (book_bytes / (2·w_oneway)); −1 unless every input is > 0. */
double boundary_for_wire(double boundary_book, double wire_seconds, double book_bytes,
                         double w_oneway);

/* The book's FSDP + TP threshold (FSDP over X chips on M_X axes, TP over Y on M_Y, N = X·Y),
 * as global tokens per step B along the path through (B, F) at the run's ratio B/F. The book
 * sets an MLP's forward, 2·mats·B·D·F/(N·C), against its weights' AllGather over X,
 * 2·mats·D·F/(Y·W·M_X) in bf16, and its activations' AllGather and ReduceScatter over Y,
 * 4·B·D/(X·W·M_Y): compute-bound iff F/(Y·M_X) + (2/mats)·B/(X·M_Y) < B·F/(N·α). At a fixed B/F
 * the compute grows as B², the communication as B, so the threshold is
 *     B = α·(X/M_X + (2/mats)·(B/F)·Y/M_Y).
 * With mats = 2 (the book's MLP) at the book's optimal split X = sqrt((B/F)·(M_X/M_Y)·N) this
 * is its B/N = 4α²/(M_X·M_Y·F); a SwiGLU (mats = 3) is the book's MLP with F_book = 1.5·F.
 * −1 unless alpha, nX, nY, m_x, m_y, b_over_f and mats are > 0. */
double boundary_book_mixed_tokens(double alpha, double nX, double nY, int m_x, int m_y,
                                  double b_over_f, int mlp_mats);
/* The same threshold for a whole step and the collectives it put on the wire, from one run at
 * `tokens` per step: t_peak = the step's compute at the chip's peak, of which the share
 * quad_share grows with B·F (the MLPs) and the rest with B (attention's projections and scores,
 * the head); t_wire = the step's collectives on the wire (all axes), which grow with F (the
 * weights' gathers and scatters) or with B (the activations'). Along the run's path B = s·tokens,
 * F = s·F_run the compute is q·t_peak·s² + (1−q)·t_peak·s and the transfer t_wire·s, equal at
 *     s = (t_wire − (1 − q)·t_peak) / (q·t_peak);
 * returns s·tokens, or −1 unless every input is > 0 (quad_share ≤ 1) and s > 0. The constant
 * part of the transfer (the embedding's, the norms') is counted as growing with s: exact at the
 * run's own point, a few percent off two-fold away from it when the MLPs dominate. */
double boundary_mixed_for_wire(double tokens, double t_peak, double quad_share, double t_wire);
#endif
