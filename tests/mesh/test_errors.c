/* test_errors: invalid input and invalid calls end the whole job cleanly, never a hang. Run by
 * expect_fail.sh, which checks the exit status and that the message appears the expected number
 * of times. Usage: test_errors MODE [--mesh SPEC]
 *   mesh    mesh_create fails (e.g. --mesh 2x3 on 4 ranks) → one message, exit 2 on every rank
 *   axis    an unknown axis name → one message, exit 2
 *   call    a collective over an axis the mesh lacks → CHECK → MPI_Abort (rank, coords, line)
 *   verify  ranks disagree on the count of a collective; debug mode catches it → abort */
#include <stdio.h>
#include <string.h>

#include "mesh/coll.h"

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "mesh";
    const char *spec = argc > 3 && !strcmp(argv[2], "--mesh") ? argv[3] : NULL;
    char err[256];
    mesh *m = mesh_create(spec, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    mesh_axes a;
    float in[8] = {0}, out[64];
    if (!strcmp(mode, "axis") && mesh_axes_parse(m, "q", &a) < 0)
        mesh_exit_error("--axes q: the mesh has no axis 'q'");
    if (!strcmp(mode, "call")) {
        mesh_axes bad = {1, {2, 0, 0}};
        mesh_all_gather(m, bad, out, in, 1, MESH_ALG_DEFAULT);
    }
    if (!strcmp(mode, "verify")) {
        mesh_set_verify(m, 1);
        mesh_axes x = {1, {0, 0, 0}};
        mesh_all_reduce(m, x, out, in, mesh_rank(m) == 0 ? 2 : 3, MESH_ALG_DEFAULT);
    }
    mesh_destroy(m);
    mesh_mpi_finalize();
    return 0;
}
