/* mesh_args: see mesh_args.h. */
#include "mesh_args.h"

#include <stdio.h>
#include <string.h>

#include "mesh/coll.h"
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

/* Extends the set a (its first a.n axes chosen) by each unused axis, depth first. */
static void each_from(mesh *m, mesh_axes a, int lo, int hi, void (*fn)(mesh *m, mesh_axes axes)) {
    if (a.n >= lo) fn(m, a);
    if (a.n >= hi || a.n >= MESH_MAX_AXES) return;
    for (int k = 0; k < mesh_ndims(m); k++) {
        int used = 0;
        for (int i = 0; i < a.n; i++) used |= a.ax[i] == k;
        if (used) continue;
        mesh_axes b = a;
        b.ax[b.n++] = k;
        each_from(m, b, lo, hi, fn);
    }
}

void test_each_axes(mesh *m, int lo, int hi, void (*fn)(mesh *m, mesh_axes axes)) {
    each_from(m, (mesh_axes){0, {0, 0, 0}}, lo, hi, fn);
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

mesh *test_mesh_wired(int argc, char **argv, const char *test) {
    mesh *m = test_mesh(argc, argv);
    const char *wire = test_flag(argc, argv, "--wire", "fp32");
    if (mesh_wire_parse(wire) < 0) mesh_exit_error("--wire %s: want fp32 or bf16", wire);
    mesh_set_wire(m, (mesh_wire)mesh_wire_parse(wire));
    mesh_set_verify(m, 1);
    char s[96];
    mesh_log("%s on mesh %s, %d ranks, %s on the wire\n", test, mesh_spec_str(m, s, sizeof s),
             mesh_nranks(m), wire);
    return m;
}

int test_bits_differ(const mesh *m, const char *what, const float *got, const float *want,
                     int64_t n) {
    for (int64_t e = 0; e < n; e++)
        if (memcmp(&got[e], &want[e], sizeof(float)) != 0) {
            char co[64];
            fprintf(stderr, "FAIL rank %d %s: %s: element %lld of %lld: got %.9g want %.9g\n",
                    mesh_rank(m), mesh_coord_str(m, co, sizeof co), what, (long long)e,
                    (long long)n, (double)got[e], (double)want[e]);
            return 1;
        }
    return 0;
}
