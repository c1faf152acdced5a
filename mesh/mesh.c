/* mesh: a mesh's life: mesh_create makes its parts (topology, communicators, the collectives'
 * settings and engine state, links, accounting, the observers' state) and mesh_destroy frees
 * them. See mesh.h and mesh_impl.h (the parts). */
#include <stdio.h>
#include <stdlib.h>

#include "mesh/mesh_impl.h"
#include "mesh/parts.h"
#include "mesh/where_impl.h"

mesh *mesh_create(const char *spec, const char *open, char *err, size_t errlen) {
    return mesh_create_placed(spec, open, NULL, err, errlen);
}

/* Collective over: base. The mesh of spec over base's ranks. */
static mesh *create_on(MPI_Comm base, const char *spec, const char *open, const char *cross,
                       char *err, size_t errlen) {
    int nranks, r;
    MPI_Comm_size(base, &nranks);
    MPI_Comm_rank(base, &r);
    mesh_topo topo;
    if (topo_init(&topo, spec, open, cross, r, nranks, err, errlen) < 0) return NULL;
    /* (calloc): the function, not SMPI's calloc macro, whose auto-shared mode (bench/simpod
     * --shared) would share this rank-private state between simulated ranks */
    mesh *m = (calloc)(1, sizeof *m);
    CHECK(m, "out of memory");
    m->topo = topo;
    m->conf.chunk = MESH_CHUNK_DEFAULT;
    links_init(&m->links);
    stats_init(&m->stats);
    comms_create(&m->comms[0], &m->topo, base);
    comms_create(&m->comms[1], &m->topo, base);
    comms_p2p_create(&m->p2p, &m->comms[0], m->topo.ndims);
    m->wd.m = m;
    char coords[64];
    mesh_current_attach(m, mesh_coord_str(m, coords, sizeof coords));
    return m;
}

mesh *mesh_create_placed(const char *spec, const char *open, const char *cross, char *err,
                         size_t errlen) {
    return create_on(MPI_COMM_WORLD, spec, open, cross, err, errlen);
}

mesh *mesh_split(mesh *parent, int color, const char *spec, char *err, size_t errlen) {
    MPI_Comm base;
    MPI_Comm_split(parent->comms[0].world.mpi, color, mesh_rank(parent), &base);
    mesh *m = create_on(base, spec, NULL, NULL, err, errlen);
    MPI_Comm_free(&base);
    return m;
}

void mesh_destroy(mesh *m) {
    if (!m) return;
    watchdog_destroy(&m->wd);
    coll_async_destroy(m);
    for (int c = 0; c < 2; c++) comms_free(&m->comms[c]), eng_free(&m->eng[c]);
    comms_p2p_free(&m->p2p);
    links_destroy(&m->links);
    stats_destroy(&m->stats);
    mesh_current_detach(m);
    where_release();
    free(m);
}
