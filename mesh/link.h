/* link: emulated ICI links. Every axis may be given a bandwidth (bytes/s per direction) and a
 * per-hop latency; the explicit collectives of coll.h then move data no faster than such links
 * would, so that a CPU cluster shows a TPU's compute/communication ratios. Depends on mesh.h and
 * cost.h (the chip table).
 *
 * Model. Each rank owns two directed links per axis (to coord+1 and to coord−1); the directions
 * are independent. A message of b bytes sent at time t over h hops of axis a, direction d:
 *     start    = max(t, busy[a][d])          (transfers on one link share it: they serialize)
 *     busy     = start + b / bw               (the link is busy while the bytes go out)
 *     delivery = start + h·latency + b / bw
 * The sender computes `delivery` and sends it with the data (a small header message); the
 * receiver does not treat the data as arrived before `delivery`. Both sides read the same
 * CLOCK_MONOTONIC, which is exact for ranks on one host. On several hosts the clocks differ by
 * their (unsynchronised) offsets, so emulation is only meaningful on one host (mesh_emulate says
 * whether the ranks share one).
 * The real transfer must be faster than the emulated one (true for slow emulated links).
 * Sends are not delayed on the sender's side beyond the link's serialization. */
#ifndef MT_MESH_LINK_H
#define MT_MESH_LINK_H
#include "mesh/coll.h"
#include "mesh/cost.h"
#include "mesh/mesh.h"

/* Not collective, but every rank should set the same values. bw = 0 turns emulation off for the
 * axis. latency in seconds per hop. */
void mesh_link_set(mesh *m, int axis, double bw, double latency);
void mesh_link_get(const mesh *m, int axis, double *bw, double *latency);

/* What mesh_emulate chose. time_scale = C / measured_flops: one emulated chip-second lasts
 * time_scale real seconds. */
typedef struct {
    double chip_flops;    /* C of the chip (bf16) */
    double chip_w_oneway; /* W_ici one way per link */
    double chip_latency;  /* T_min per hop */
    double measured_flops;
    double time_scale;
    double bw;      /* emulated bytes/s per link per direction */
    double latency; /* emulated seconds per hop */
    int one_host;   /* every rank on one host; 0: the emulated delays rely on one shared clock
                       and will be off by the hosts' clock offsets (a caller should warn) */
} mesh_emulation;

/* Collective over: world. Emulates `chip` ("v3", "v4p", "v5e", "v5p", "v6e"): measured_flops is
 * the FLOP/s this rank's matmul reaches (averaged over ranks, so all links agree); every axis gets
 * bw = W_ici_oneway / time_scale and latency = T_min · time_scale, so that
 * measured_flops / bw = C / W_ici_oneway; then the chip's wraparound rules are applied. Returns 0,
 * or −1 on every rank with the reason in err[errlen] (an unknown chip, or a rank whose
 * measured_flops is not positive), nothing changed. Prints nothing. */
int mesh_emulate(mesh *m, const char *chip, double measured_flops, mesh_emulation *out, char *err,
                 size_t errlen);
/* The cost model's name for a collective (mesh/cost.h): ppermute, send and recv map to
 * COST_OP_PPERMUTE. (The algorithm needs none: mesh_alg is the cost model's enum.) */
cost_op mesh_cost_op(mesh_op op);
#endif
