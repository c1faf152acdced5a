/* proc: the process-wide bottom of mesh/, which calls no other file of it: the world rank and
 * size (set by mesh_mpi_init), the program name of errors, the clock, mesh_abort, rank-0
 * logging (mesh.h) and the current mesh (parts.h). Private to mesh/. Depends on MPI (MPI_Abort)
 * and mesh.h. */
#ifndef MT_MESH_PROC_H
#define MT_MESH_PROC_H
#include "mesh/mesh.h"

/* Not collective: records this process's world rank and size (mesh_mpi_init). */
void proc_set_world(int rank, int size);
/* The program name that prefixes errors (mesh_set_progname; "meshtrain" unless set). */
const char *proc_progname(void);
#endif
