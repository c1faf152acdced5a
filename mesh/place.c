/* place: where the ranks of a mesh run: hosts, the axes that cross them, the placement table
 * (mesh.h). Collective over the world communicator (comms.h); reads the topology (topo.h). */
#define _POSIX_C_SOURCE 200809L /* gethostname */
#include <stdlib.h>
#include <unistd.h>

#include "mesh/comms.h"
#include "mesh/parts.h"
#include "mesh/topo.h"
#include "mesh/where.h"

static MPI_Comm world_of(const mesh *m) {
    return mesh_part_comms((mesh *)m, 0)->world.mpi;
}

/* Host of every rank (by mesh rank): the lowest mesh rank sharing its memory. Collective over:
 * world. Returns a malloc'ed array of nranks ints. */
static int *host_ids(const mesh *m) {
    const mesh_topo *t = mesh_part_topo((mesh *)m);
    MPI_Comm host;
    int id = t->rank, *all = malloc((size_t)t->nranks * sizeof(int));
    CHECK(all, "out of memory");
    mesh_blocking_begin("MPI_Comm_split_type, MPI_Allgather (which host each rank is on)");
    MPI_Comm_split_type(world_of(m), MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &host);
    MPI_Allreduce(MPI_IN_PLACE, &id, 1, MPI_INT, MPI_MIN, host);
    MPI_Comm_free(&host);
    MPI_Allgather(&id, 1, MPI_INT, all, 1, MPI_INT, world_of(m));
    mesh_blocking_end();
    return all;
}

int mesh_hosts(mesh *m, int crosses[MESH_MAX_AXES]) {
    const mesh_topo *t = mesh_part_topo(m);
    int *id = host_ids(m), nhosts = 0;
    for (int k = 0; k < MESH_MAX_AXES; k++) crosses[k] = 0;
    for (int r = 0; r < t->nranks; r++) {
        nhosts += id[r] == r;
        /* r's neighbour at +1 along each axis (stride = product of the faster axes' sizes) */
        for (int k = t->ndims - 1, stride = 1; k >= 0; stride *= t->size[k--]) {
            int c = r / stride % t->size[k];
            int q = r + ((c + 1) % t->size[k] - c) * stride;
            crosses[k] |= id[q] != id[r];
        }
    }
    free(id);
    return nhosts;
}

const char *mesh_hosts_str(mesh *m, char *buf, size_t len) {
    const mesh_topo *t = mesh_part_topo(m);
    int crosses[MESH_MAX_AXES], nh = mesh_hosts(m, crosses);
    char across[MESH_MAX_AXES + 1] = "", inside[MESH_MAX_AXES + 1] = "";
    for (int k = 0, a = 0, i = 0; k < t->ndims; k++) {
        if (t->size[k] == 1) continue;
        if (crosses[k])
            across[a++] = t->name[k], across[a] = 0;
        else
            inside[i++] = t->name[k], inside[i] = 0;
    }
    snprintf(buf, len, "%d host%s; axes across hosts: %s; inside a host: %s", nh, nh > 1 ? "s" : "",
             *across ? across : "none", *inside ? inside : "none");
    return buf;
}

void mesh_print_placement(mesh *m, FILE *out) {
    const mesh_topo *t = mesh_part_topo(m);
    char host[64] = "", hosts[128];
    gethostname(host, sizeof host - 1);
    int mpi_rank = mesh_world_rank(),
        *mpi = t->rank == 0 ? malloc((size_t)t->nranks * sizeof(int)) : NULL;
    char *all = t->rank == 0 ? malloc((size_t)t->nranks * 64) : NULL;
    mesh_blocking_begin("MPI_Gather (the placement table)");
    MPI_Gather(host, 64, MPI_CHAR, all, 64, MPI_CHAR, 0, world_of(m));
    MPI_Gather(&mpi_rank, 1, MPI_INT, mpi, 1, MPI_INT, 0, world_of(m));
    mesh_blocking_end();
    mesh_hosts_str(m, hosts, sizeof hosts);
    if (t->rank == 0) {
        char spec[96];
        fprintf(out,
                "placement of mesh %s (rank = flattened coordinates, last axis fastest; "
                "mpi = MPI_COMM_WORLD rank)\n",
                mesh_spec_str(m, spec, sizeof spec));
        fprintf(out, "%6s %6s", "rank", "mpi");
        for (int k = 0; k < t->ndims; k++) fprintf(out, " %4c", t->name[k]);
        fprintf(out, "  host\n");
        for (int r = 0; r < t->nranks; r++) {
            fprintf(out, "%6d %6d", r, mpi[r]);
            int c[MESH_MAX_AXES], q = r;
            for (int k = t->ndims - 1; k >= 0; k--) {
                c[k] = q % t->size[k];
                q /= t->size[k];
            }
            for (int k = 0; k < t->ndims; k++) fprintf(out, " %4d", c[k]);
            fprintf(out, "  %s\n", all + (size_t)r * 64);
        }
        fprintf(out, "%s\n", hosts);
        fflush(out);
    }
    free(all);
    free(mpi);
}

int mesh_host_ranks(const mesh *m) {
    MPI_Comm host;
    int n = 1;
    mesh_blocking_begin("MPI_Comm_split_type (counting the ranks of each host)");
    MPI_Comm_split_type(world_of(m), MPI_COMM_TYPE_SHARED, mesh_rank(m), MPI_INFO_NULL, &host);
    mesh_blocking_end();
    MPI_Comm_size(host, &n);
    MPI_Comm_free(&host);
    return n;
}
