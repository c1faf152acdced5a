/* meshbench_a2av: meshbench's AllToAllv points (--op a2av, a2av-skew). The same array as an
 * AllToAll's (size bytes of input per rank: total = size/4 floats), cut into n blocks:
 *   a2av:      uniform, total/n each (the AllToAll's blocks, through mesh_all_to_allv);
 *   a2av-skew: rank i sends half its array plus its share to (i+1) mod n, total/(2n) to every
 *              other rank (the largest block (n+1)/(2n) of the array: what a router that
 *              sends most tokens to one expert's rank does).
 * The counts are exchanged once per point (mesh_all_to_allv_counts), the blocks timed. */
#ifndef MT_BENCH_MESHBENCH_A2AV_H
#define MT_BENCH_MESHBENCH_A2AV_H
#include "mesh/coll.h"

enum { BENCH_OP_A2AV = MESH_OP_COUNT, BENCH_OP_A2AV_SKEW, BENCH_OP_END };

/* "a2av", "a2av-skew" (or NULL for another op). */
const char *a2av_op_name(int op);
/* The op of a name, or −1. */
int a2av_op_parse(const char *s);
/* Collective over: a. counts[n·n] (mesh_all_to_allv_counts) for op with `total` floats per rank;
 * returns the floats this rank receives. */
int64_t a2av_counts(mesh *m, mesh_axes a, int op, int64_t total, int64_t *counts);
/* Max |out − truth| on this rank, the inputs being val(rank, e) over each rank's packed blocks. */
double a2av_check(const mesh *m, mesh_axes a, const int64_t *counts, const float *out,
                  float (*val)(int, int64_t));
#endif
