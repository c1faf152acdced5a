/* smpi_opts: the command line of the SMPI tests that bench/simpod runs on a simulated slice:
 * `--mesh SPEC [--open AXES]` (appended by simpod), `--chip NAME` (a chip of mesh/cost.c's
 * table, default v5p) and, for the programs that take one, `--alg NAME` (default ring). Depends
 * on mesh/mesh.h, mesh/cost.h and MPI. */
#ifndef MT_TESTS_SMPI_OPTS_H
#define MT_TESTS_SMPI_OPTS_H
#include "mesh/cost.h"
#include "mesh/mesh.h"

typedef struct {
    mesh *m;               /* the mesh of --mesh and --open */
    const cost_chip *chip; /* the chip of --chip */
    mesh_alg alg;          /* the algorithm of --alg (ring where absent) */
    const char *alg_name;  /* --alg as given */
} smpi_opts;

/* Collective over: all ranks. Parses argv[1..argc) as `--name value` pairs and makes the mesh.
 * --alg is accepted only when with_alg is nonzero. An unknown option, chip or algorithm, or a
 * bad mesh, ends the job with one error line naming prog (mesh_exit_error). */
smpi_opts smpi_opts_parse(int argc, char **argv, const char *prog, int with_alg);
#endif
