/* bcast: bytes from one rank to every rank of a communicator (or to one other rank), for a loop
 * whose decisions are made on one rank (the serving loop's step plan, made by the rank that talks
 * to the clients). The waiting ranks nap while nothing arrives, so a rank left idle for minutes (a
 * server without requests) does not spin on its core. Depends on MPI, mesh.h and nap.h. */
#ifndef MT_MESH_BCAST_H
#define MT_MESH_BCAST_H
#include <stdint.h>

#include "mesh/mesh.h"

/* Collective over: comm. Copies n bytes (0 ≤ n ≤ INT_MAX) of buf on the comm's rank root into buf
 * on every other rank of comm. A rank left waiting polls the transfer and naps between polls, as
 * every wait of mesh/ does (mesh/nap.h: after 50 µs (mesh_set_spin), naps of 2 µs growing to 2% of
 * the time waited, at most 1 ms), so the latency a nap adds is at most 2% of the wait. Covered by
 * the watchdog (--timeout) like a collective: a loop that may wait for long (an idle server) should
 * not run under one. */
void mesh_bcast_bytes(const mesh_comm *comm, void *buf, int64_t n, int root);
/* Called by the comm's ranks src and dst (src ≠ dst; the others need not call): n bytes
 * (0 ≤ n ≤ INT_MAX) of buf on src into buf on dst, point to point, waiting as mesh_bcast_bytes
 * waits. Two ranks' moves arrive in the order they were made. */
void mesh_move_bytes(const mesh_comm *comm, void *buf, int64_t n, int src, int dst);
#endif
