/* mesh_args: the frame of the mesh tests: flags given as `--name value`, the mesh of
 * `--mesh SPEC [--open AXES]`, and the verdict over all ranks at the end. Depends on mesh/mesh.h
 * and MPI. */
#ifndef MT_TESTS_MESH_ARGS_H
#define MT_TESTS_MESH_ARGS_H
#include "mesh/mesh.h"

/* The value after the last `name` in argv[1..argc), or dflt when it is absent. */
const char *test_flag(int argc, char **argv, const char *name, const char *dflt);
/* Collective over: all ranks. The mesh of --mesh and --open (mesh_create's defaults when absent);
 * a bad spec ends the job with one error line (mesh_exit_error). */
mesh *test_mesh(int argc, char **argv);
/* Collective over: all ranks. Sums the ranks' failure counts, prints "<test>: N FAILURES" or
 * "<test>: all passed" once, destroys the mesh and finalizes MPI; returns the exit status. */
int test_mesh_finish(mesh *m, const char *test, int failures);
#endif
