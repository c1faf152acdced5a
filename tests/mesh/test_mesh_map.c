/* test_mesh_map: rank ↔ coordinate mapping (last axis fastest), axis sets and their
 * communicators, spec parsing, default wraparound and the chips' wraparound presets; with CROSS
 * (mesh_create_placed), the MPI rank ↔ coordinate mapping with those axes slowest, and on one
 * host, mesh_hosts finding one host and no axis across hosts; mesh_emulate's scale and its
 * refusals (an unknown chip; a rank that measured no FLOP/s), the same on every rank.
 * Usage: mpirun -np N test_mesh_map SPEC [CROSS] */
#include <stdio.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/link.h"
#include "mesh/mesh_mpi.h"
#include "rank_expect.h"

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[256];
    const char *cross = argc > 2 ? argv[2] : "";
    mesh *m = mesh_create_placed(argc > 1 ? argv[1] : NULL, NULL, cross, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    int nd = mesh_ndims(m), r = 0;
    for (int k = 0; k < nd; k++) r = r * mesh_axis_size(m, k) + mesh_axis_coord(m, k);
    EXPECT(r == mesh_rank(m), "rank %d but coordinates flatten to %d", mesh_rank(m), r);
    int wr = -1;
    MPI_Comm_rank(mesh_world_comm(m)->mpi, &wr);
    EXPECT(wr == mesh_rank(m), "rank %d in the mesh's world communicator, mesh rank %d", wr,
           mesh_rank(m));
    /* the MPI rank flattens the coordinates with CROSS's axes first, then the others */
    int order[MESH_MAX_AXES], no = 0, used[MESH_MAX_AXES] = {0}, q = 0;
    for (const char *p = cross; *p; p++) used[order[no++] = mesh_axis_index(m, *p)] = 1;
    for (int k = 0; k < nd; k++)
        if (!used[k]) order[no++] = k;
    for (int i = 0; i < nd; i++) q = q * mesh_axis_size(m, order[i]) + mesh_axis_coord(m, order[i]);
    EXPECT(q == mesh_world_rank(), "MPI rank %d, but --cross-hosts '%s' order gives %d",
           mesh_world_rank(), cross, q);
    int crosses[MESH_MAX_AXES], nh = mesh_hosts(m, crosses);
    EXPECT(nh == 1 && !crosses[0] && !crosses[1] && !crosses[2],
           "one host: mesh_hosts found %d, crossing %d%d%d", nh, crosses[0], crosses[1],
           crosses[2]);
    mesh *badm = mesh_create_placed(argv[1], NULL, "w", err, sizeof err);
    EXPECT(!badm && strstr(err, "--cross-hosts 'w': no axis 'w'"), "unknown cross axis: %s", err);
    mesh_destroy(badm);
    for (int k = 0; k < nd; k++)
        EXPECT(mesh_axis_wraps(m, k) == (mesh_axis_size(m, k) > 2), "default wrap of axis %d", k);
    /* every ordered set: communicator size and rank = flattened index */
    const char *sets[] = {"x", "y", "z", "xy", "yx", "xz", "zx", "yz", "zy", "xyz", "zyx", "yxz"};
    for (int i = 0; i < 12; i++) {
        mesh_axes a;
        if (mesh_axes_parse(m, sets[i], &a) < 0) continue;
        int cs, cr;
        MPI_Comm_size(mesh_axes_comm(m, a)->mpi, &cs);
        MPI_Comm_rank(mesh_axes_comm(m, a)->mpi, &cr);
        EXPECT(cs == mesh_axes_size(m, a) && cr == mesh_axes_index(m, a),
               "set %s: comm %d/%d vs %d/%d", sets[i], cr, cs, mesh_axes_index(m, a),
               mesh_axes_size(m, a));
    }
    mesh_axes a;
    EXPECT(mesh_axes_parse(m, "xx", &a) < 0, "repeated axis accepted");
    EXPECT(mesh_axes_parse(m, "w", &a) < 0, "unknown axis accepted");
    EXPECT(mesh_axes_parse(m, "", &a) == 0 && a.n == 0, "empty set");
    /* chip presets (the book's TPU chapter) */
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
    err[0] = 0;
    EXPECT(mesh_emulate(m, "v5e", 1.97e9, &e, err, sizeof err) == 0 && e.time_scale > 99999 &&
               e.time_scale < 100001 && e.bw > 4.49e5 && e.bw < 4.51e5 && e.latency > 0.0999 &&
               e.latency < 0.1001 && e.one_host,
           "v5e emulation at 1.97 GFLOP/s: scale %g bw %g latency %g, one host %d", e.time_scale,
           e.bw, e.latency, e.one_host);
    /* bad input: the reason, on every rank (a rank that measured nothing fails them all) */
    EXPECT(mesh_emulate(m, "v9", 1e9, &e, err, sizeof err) < 0 &&
               !strcmp(err, "--emulate v9: unknown chip (v3, v4p, v5e, v5p, v6e)"),
           "unknown chip: '%s'", err);
    err[0] = 0;
    EXPECT(mesh_emulate(m, "v5e", mesh_rank(m) == mesh_nranks(m) - 1 ? 0 : 1e9, &e, err,
                        sizeof err) < 0 &&
               strstr(err, "a rank measured no FLOP/s"),
           "a rank without a rate: '%s'", err);
    char spec[64];
    mesh_log("test_mesh_map %s: %s\n", mesh_spec_str(m, spec, sizeof spec),
             failures ? "FAIL" : "ok");
    mesh_print_placement(m, stdout);
    int bad = 0;
    MPI_Allreduce(&failures, &bad, 1, MPI_INT, MPI_MAX, mesh_world_comm(m)->mpi);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return bad;
}
