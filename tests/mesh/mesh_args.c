/* mesh_args: see mesh_args.h. */
#include "mesh_args.h"

#include <string.h>

#include "mesh/mesh_mpi.h"

const char *test_flag(int argc, char **argv, const char *name, const char *dflt) {
    const char *v = dflt;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) v = argv[++i];
    return v;
}

mesh *test_mesh(int argc, char **argv) {
    char err[256];
    mesh *m = mesh_create(test_flag(argc, argv, "--mesh", NULL),
                          test_flag(argc, argv, "--open", NULL), err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    return m;
}

int test_mesh_finish(mesh *m, const char *test, int failures) {
    int bad = 0;
    MPI_Allreduce(&failures, &bad, 1, MPI_INT, MPI_SUM, mesh_world_comm(m)->mpi);
    if (bad)
        mesh_log("%s: %d FAILURES\n", test, bad);
    else
        mesh_log("%s: all passed\n", test);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return bad ? 1 : 0;
}
