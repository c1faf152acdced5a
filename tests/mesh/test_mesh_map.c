/* test_mesh_map: rank ↔ coordinate mapping (last axis fastest), axis sets and their
 * communicators, spec parsing, default wraparound and the chips' wraparound presets.
 * Usage: mpirun -np N test_mesh_map SPEC */
#include <stdio.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/link.h"

static int failures;
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL rank %d line %d: ", mesh_world_rank(), __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[256];
    mesh *m = mesh_create(argc > 1 ? argv[1] : NULL, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    int nd = mesh_ndims(m), r = 0;
    for (int k = 0; k < nd; k++) r = r * mesh_axis_size(m, k) + mesh_axis_coord(m, k);
    EXPECT(r == mesh_rank(m), "rank %d but coordinates flatten to %d", mesh_rank(m), r);
    for (int k = 0; k < nd; k++)
        EXPECT(mesh_axis_wraps(m, k) == (mesh_axis_size(m, k) > 2), "default wrap of axis %d", k);
    /* every ordered set: communicator size and rank = flattened index */
    const char *sets[] = {"x", "y", "z", "xy", "yx", "xz", "zx", "yz", "zy", "xyz", "zyx", "yxz"};
    for (int i = 0; i < 12; i++) {
        mesh_axes a;
        if (mesh_axes_parse(m, sets[i], &a) < 0) continue;
        int cs, cr;
        MPI_Comm_size(mesh_axes_comm(m, a), &cs);
        MPI_Comm_rank(mesh_axes_comm(m, a), &cr);
        EXPECT(cs == mesh_axes_size(m, a) && cr == mesh_axes_index(m, a),
               "set %s: comm %d/%d vs %d/%d", sets[i], cr, cs, mesh_axes_index(m, a),
               mesh_axes_size(m, a));
    }
    mesh_axes a;
    EXPECT(mesh_axes_parse(m, "xx", &a) < 0, "repeated axis accepted");
    EXPECT(mesh_axes_parse(m, "w", &a) < 0, "unknown axis accepted");
    EXPECT(mesh_axes_parse(m, "", &a) == 0 && a.n == 0, "empty set");
    /* chip presets (book §2.2) */
    EXPECT(mesh_apply_chip_wrap(m, "v9") < 0, "unknown chip accepted");
    int cubes = 1;
    for (int k = 0; k < nd; k++)
        cubes &= mesh_axis_size(m, k) == 1 || mesh_axis_size(m, k) % 4 == 0;
    mesh_apply_chip_wrap(m, "v5p");
    for (int k = 0; k < nd; k++)
        EXPECT(mesh_axis_wraps(m, k) == (cubes && mesh_axis_size(m, k) > 2), "v5p wrap axis %d", k);
    mesh_apply_chip_wrap(m, "v5e");
    for (int k = 0; k < nd; k++)
        EXPECT(mesh_axis_wraps(m, k) == (mesh_axis_size(m, k) == 16), "v5e wrap axis %d", k);
    /* emulation: bw = W·measured/C, latency = T_min·C/measured */
    mesh_emulation e;
    EXPECT(
        mesh_emulate(m, "v5e", 1.97e9, &e) == 0 && e.time_scale > 99999 && e.time_scale < 100001 &&
            e.bw > 4.49e5 && e.bw < 4.51e5 && e.latency > 0.0999 && e.latency < 0.1001,
        "v5e emulation at 1.97 GFLOP/s: scale %g bw %g latency %g", e.time_scale, e.bw, e.latency);
    char spec[64];
    mesh_log("test_mesh_map %s: %s\n", mesh_spec_str(m, spec, sizeof spec),
             failures ? "FAIL" : "ok");
    mesh_print_placement(m, stdout);
    int bad = 0;
    MPI_Allreduce(&failures, &bad, 1, MPI_INT, MPI_MAX, mesh_world_comm(m));
    mesh_destroy(m);
    mesh_mpi_finalize();
    return bad;
}
