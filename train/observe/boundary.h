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
#endif
