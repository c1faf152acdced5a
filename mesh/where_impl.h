/* where_impl: the observers' entries inside mesh/: the where-line (where.c), the debug signature
 * check (verify.c). Private to mesh/. Depends on coll.h, topo.h and MPI. */
#ifndef MT_MESH_WHERE_IMPL_H
#define MT_MESH_WHERE_IMPL_H
#include "mesh/coll.h"
#include "mesh/mesh_mpi.h"
#include "mesh/topo.h"

/* Not collective, async-signal-safe: "meshtrain: where: <where-line><tail>\n" to stderr with one
 * write. */
void where_write(const mesh *m, const char *tail);
/* Not collective: once no mesh is current, SIGUSR1 gets its default action again (if
 * mesh_where_signal installed the handler). */
void where_release(void);
/* Debug mode, collective over comm (the call's axis set): every rank of it compares rec's
 * signature (number on the set, op, axes, count, algorithm, shift); if they differ, the set's
 * first rank prints one message naming every rank (mesh ranks of topology t) with its
 * coordinates and call, and the job ends with MPI_Abort on world (status 3). */
void verify_signature(const mesh_topo *t, MPI_Comm world, MPI_Comm comm, const mesh_call *rec);
#endif
