/* test_topo: the topology part alone (mesh/topo.h, private to mesh/): no mesh, no MPI. Against
 * the README's rank ↔ coordinate rule (the last axis fastest), worked by hand:
 *  - every MPI rank of x=4,y=2, 2x3 (--open y) and x=2,y=3 with --cross-hosts y: coordinates,
 *    mesh rank, wraparound (never on an axis of 2; not on an --open axis); the default spec (one
 *    axis named x over all ranks);
 *  - bad specs refused with the message a user sees (the same checks as mesh_create);
 *  - the 40 axis-set ids and back; a set's size, this rank's index and every member, against a
 *    brute force over the mesh's ranks; topo_wraps; topo_coords inverts the rank. */
#include <stdio.h>
#include <string.h>

#include "mesh/topo.h"

static int failures;

static void expect_i(const char *what, long long got, long long want) {
    if (got == want) return;
    printf("FAIL %s: %lld, want %lld\n", what, got, want);
    failures++;
}

/* Every MPI rank of spec: coordinates from the placement rule, mesh rank, wraparound. */
static void placements(const char *spec, const char *open, const char *cross, int n,
                       const int *slow_first, const int *wraps) {
    for (int r = 0; r < n; r++) {
        mesh_topo t;
        char err[256], what[128];
        if (topo_init(&t, spec, open, cross, r, n, err, sizeof err) < 0) {
            printf("FAIL %s: %s\n", spec, err);
            failures++;
            return;
        }
        /* MPI rank r in the order slow_first[0] slowest ... last fastest */
        int c[MESH_MAX_AXES] = {0, 0, 0}, q = r;
        for (int i = t.ndims - 1; i >= 0; i--) {
            const int ax = slow_first[i];
            c[ax] = q % t.size[ax], q /= t.size[ax];
        }
        int rank = 0;
        for (int k = 0; k < t.ndims; k++) rank = rank * t.size[k] + c[k];
        for (int k = 0; k < t.ndims; k++) {
            snprintf(what, sizeof what, "%s MPI rank %d: coordinate %c", spec, r, t.name[k]);
            expect_i(what, t.coord[k], c[k]);
            snprintf(what, sizeof what, "%s: axis %c wraps", spec, t.name[k]);
            expect_i(what, t.wrap[k], wraps[k]);
        }
        snprintf(what, sizeof what, "%s MPI rank %d: mesh rank", spec, r);
        expect_i(what, t.rank, rank);
        int back[MESH_MAX_AXES];
        topo_coords(&t, t.rank, back);
        for (int k = 0; k < t.ndims; k++) expect_i("topo_coords(rank)", back[k], c[k]);
    }
}

static void refused(const char *spec, const char *open, const char *cross, int n,
                    const char *want) {
    mesh_topo t;
    char err[256] = "";
    const int rc = topo_init(&t, spec, open, cross, 0, n, err, sizeof err);
    if (rc == 0 || !strstr(err, want)) {
        printf("FAIL --mesh %s on %d ranks: rc %d, '%s' (want '%s')\n", spec, n, rc, err, want);
        failures++;
    }
}

static void sets(void) {
    for (int id = 0; id < MESH_NSETS; id++) {
        const mesh_axes a = mesh_set_axes(id);
        int distinct = 1;
        for (int i = 0; i < a.n; i++)
            for (int j = 0; j < i; j++) distinct &= a.ax[i] != a.ax[j];
        if (distinct || a.n < 2) expect_i("mesh_set_id(mesh_set_axes(id))", mesh_set_id(a), id);
    }
    mesh_topo t;
    char err[256];
    for (int r = 0; r < 6; r++) { /* x=3,y=2: the set yx, major axis y */
        topo_init(&t, "x=3,y=2", NULL, NULL, r, 6, err, sizeof err);
        const mesh_axes yx = {2, {1, 0, 0}}, x = {1, {0, 0, 0}};
        expect_i("size of yx", topo_axes_size(&t, yx), 6);
        expect_i("index in yx", topo_axes_index(&t, yx), t.coord[1] * 3 + t.coord[0]);
        for (int j = 0; j < 6; j++) { /* member j of yx: y = j / 3, x = j % 3 */
            expect_i("member of yx", topo_axes_member(&t, yx, j), (j % 3) * 2 + j / 3);
        }
        for (int j = 0; j < 3; j++)
            expect_i("member of x", topo_axes_member(&t, x, j), j * 2 + t.coord[1]);
        expect_i("x wraps (3)", topo_wraps(&t, x), 1);
        expect_i("yx does not (y is 2)", topo_wraps(&t, yx), 0);
    }
}

int main(void) {
    const int xy[] = {0, 1, 2}, yx[] = {1, 0, 2};
    const int w10[] = {1, 0, 0}, w00[] = {0, 0, 0}, w01[] = {0, 1, 0};
    placements("x=4,y=2", NULL, NULL, 8, xy, w10);
    placements("2x3", "y", NULL, 6, xy, w00);
    placements("x=2,y=3", NULL, "y", 6, yx, w01);
    placements(NULL, NULL, NULL, 5, xy, w10);
    mesh_topo t;
    char err[256];
    topo_init(&t, "", NULL, NULL, 0, 5, err, sizeof err);
    expect_i("default: one axis", t.ndims, 1);
    expect_i("default: named x", t.name[0], 'x');
    expect_i("default: of all ranks", t.size[0], 5);
    refused("2x3", NULL, NULL, 4, "--mesh 2x3 needs 6 ranks, got 4");
    refused("x=2,x=1", NULL, NULL, 2, "axis 'x' appears twice");
    refused("x=20,y=2665,z=80581", NULL, NULL, 4, "more than MPI can run");
    refused("x=2,y=2", "q", NULL, 4, "--open 'q': no axis named 'q'");
    refused("x=2,y=2", NULL, "yy", 4, "--cross-hosts 'yy': repeated axis 'y'");
    refused("4,2", NULL, NULL, 8, "unexpected ','");
    refused("", NULL, NULL, 0, "axis sizes must be positive");
    sets();
    printf("test_topo: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
