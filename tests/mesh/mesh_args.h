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
/* Collective over: all ranks. The mesh of test_mesh with --wire fp32|bf16 (default fp32) set as
 * its wire format and the debug signature check on; logs "<test> on mesh SPEC, N ranks, W on
 * the wire". */
mesh *test_mesh_wired(int argc, char **argv, const char *test);
/* Not collective. 1 (after one FAIL line naming the rank, its coordinates and the first
 * differing element) when got[n] and want[n] differ in any bit, else 0. */
int test_bits_differ(const mesh *m, const char *what, const float *got, const float *want,
                     int64_t n);
/* Not collective itself; fn is called on every rank in the same order. fn(m, axes) for every
 * ordered set of lo..hi distinct axes of m (lo = 0: the empty set first), each set followed by
 * its extensions: (), (0), (0,1), (0,1,2), (0,2), (0,2,1), (1), ... */
void test_each_axes(mesh *m, int lo, int hi, void (*fn)(mesh *m, mesh_axes axes));
/* Collective over: all ranks. Sums the ranks' failure counts, prints "<test>: N FAILURES" or
 * "<test>: all passed" once, destroys the mesh and finalizes MPI; returns the exit status. */
int test_mesh_finish(mesh *m, const char *test, int failures);
#endif
