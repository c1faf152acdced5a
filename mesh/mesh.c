/* mesh: MPI start-up, creating and destroying a mesh (axes, communicators, placement), the
 * agreement of ranks and the job's clean exit. See mesh.h; the process-wide base (world rank,
 * clock, mesh_abort, axis-set arithmetic, names) is base.c. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, clock_nanosleep, gethostname */
#include "mesh/mesh_impl.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mesh/cost.h"
#include "mesh/errmsg.h"
#include "mesh/nap.h"
#include "mesh/parts.h"
#include "mesh/where.h"

void mesh_mpi_init(int *argc, char ***argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mesh_g_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mesh_g_world_size);
#ifndef MESHTRAIN_SMPI /* SMPI: non-blocking calls run on the caller's thread (coll_async.c) */
    if (provided < MPI_THREAD_MULTIPLE)
        mesh_exit_error("this MPI does not provide MPI_THREAD_MULTIPLE (got level %d); "
                        "meshtrain's non-blocking collectives need it",
                        provided);
#endif
}

void mesh_mpi_finalize(void) {
    MPI_Finalize();
}

/* ---- errors and logging ---- */

int mesh_agree_msg(const mesh_comm *c, int status, char *err, size_t errlen) {
    const MPI_Comm comm = c->mpi;
    int rank;
    MPI_Comm_rank(comm, &rank);
    struct {
        int status, rank;
    } in = {status, rank}, out = in;
    MPI_Request rq;
    mesh_blocking_begin("MPI_Allreduce (ranks agreeing on a status)");
    MPI_Iallreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm, &rq);
    nap_waitall(1, &rq); /* naps while a peer is late (nap.h) */
    mesh_blocking_end();
    if (out.status >= 0 || !err || errlen == 0) return out.status;
    int most = status; /* did every rank fail? */
    char msg[MESH_MSG_MAX] = "";
    if (rank == out.rank) snprintf(msg, sizeof msg, "%s", err);
    mesh_blocking_begin("MPI_Bcast (the message of a failed status)");
    MPI_Iallreduce(&status, &most, 1, MPI_INT, MPI_MAX, comm, &rq);
    nap_waitall(1, &rq);
    MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, out.rank, comm, &rq);
    nap_waitall(1, &rq);
    mesh_blocking_end();
    if (out.rank != 0 && most >= 0)
        snprintf(err, errlen, "rank %d: %s", out.rank, msg);
    else
        snprintf(err, errlen, "%s", msg);
    return out.status;
}

int mesh_agree(const mesh_comm *comm, int status) {
    return mesh_agree_msg(comm, status, NULL, 0);
}

int64_t mesh_agree_max(const mesh_comm *comm, int64_t value) {
    int64_t most = value;
    MPI_Request rq;
    mesh_blocking_begin("MPI_Allreduce (ranks agreeing on a maximum)");
    MPI_Iallreduce(&value, &most, 1, MPI_INT64_T, MPI_MAX, comm->mpi, &rq);
    nap_waitall(1, &rq);
    mesh_blocking_end();
    return most;
}

void mesh_agree_or_exit(const mesh_comm *comm, int status, const char *fmt, ...) {
    char msg[MESH_MSG_MAX] = "";
    if (status < 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    if (mesh_agree_msg(comm, status, msg, sizeof msg) < 0) mesh_exit_error("%s", msg);
}

_Noreturn void mesh_exit_error(const char *fmt, ...) {
    if (mesh_g_world_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: error: ", mesh_g_progname);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        fflush(stderr);
        va_end(ap);
    }
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (mesh_g_last_mesh)
        where_stop_thread((mesh *)mesh_g_last_mesh); /* no watchdog past MPI_Finalize */
    if (inited && !finalized) {
        MPI_Barrier(MPI_COMM_WORLD); /* let rank 0's message out before anyone exits */
        MPI_Finalize();
    }
    exit(2);
}

/* ---- axis sets ---- */

int mesh_axes_member(const mesh *m, mesh_axes a, int j) {
    int c[MESH_MAX_AXES];
    for (int k = 0; k < m->ndims; k++) c[k] = m->coord[k];
    for (int k = a.n - 1; k >= 0; k--) {
        c[a.ax[k]] = j % m->size[a.ax[k]];
        j /= m->size[a.ax[k]];
    }
    int r = 0;
    for (int k = 0; k < m->ndims; k++) r = r * m->size[k] + c[k];
    return r;
}

int mesh_axes_parse(const mesh *m, const char *names, mesh_axes *out) {
    mesh_axes a = {0, {0, 0, 0}};
    for (const char *p = names; *p; p++) {
        if (*p == ',') continue;
        int ax = mesh_axis_index(m, *p);
        if (ax < 0 || a.n == MESH_MAX_AXES) return -1;
        for (int k = 0; k < a.n; k++)
            if (a.ax[k] == ax) return -1;
        a.ax[a.n++] = ax;
    }
    *out = a;
    return 0;
}

const char *mesh_axes_str(const mesh *m, mesh_axes a, char *buf, size_t len) {
    size_t k = 0;
    for (; k < (size_t)a.n && k + 1 < len; k++) buf[k] = m->name[a.ax[k]];
    if (len) buf[k < len ? k : len - 1] = 0;
    return buf;
}

const mesh_comm *mesh_axes_comm(mesh *m, mesh_axes a) {
    mesh_ctx_set(m, &m->ctx[0], a);
    return &m->ctx[0].set[mesh_set_id(a)];
}

const mesh_comm *mesh_world_comm(const mesh *m) {
    return &m->ctx[0].world;
}

const mesh_comm *mesh_self_comm(void) {
    static mesh_comm self;
    self.mpi = MPI_COMM_SELF; /* not a constant expression in every MPI */
    return &self;
}

/* ---- creation ---- */

/* Parses spec into names/sizes; returns the number of axes or −1 with err set. */
static int parse_spec(const char *spec, char *name, int *size, char *err, size_t errlen) {
    int n = 0;
    const char *p = spec;
    int named = strchr(spec, '=') != NULL;
    while (*p) {
        if (n == MESH_MAX_AXES) {
            return errmsg_fail(err, errlen, "--mesh '%s': at most %d axes", spec, MESH_MAX_AXES);
        }
        char nm = "xyz"[n];
        if (named) {
            if (!isalpha((unsigned char)p[0]) || p[1] != '=') {
                return errmsg_fail(err, errlen,
                                   "--mesh '%s': expected NAME=SIZE items like x=4,y=2", spec);
            }
            nm = p[0];
            p += 2;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20) {
            return errmsg_fail(err, errlen, "--mesh '%s': axis sizes must be positive integers",
                               spec);
        }
        for (int k = 0; k < n; k++)
            if (name[k] == nm) {
                return errmsg_fail(err, errlen, "--mesh '%s': axis '%c' appears twice", spec, nm);
            }
        name[n] = nm;
        size[n++] = (int)v;
        p = end;
        if (*p == (named ? ',' : 'x')) {
            p++;
            if (!*p) break;
        } else if (*p) {
            return errmsg_fail(err, errlen, "--mesh '%s': unexpected '%c' (use x=4,y=2 or 4x2)",
                               spec, *p);
        }
    }
    if (n == 0) errmsg_fail(err, errlen, "--mesh is empty (use x=4,y=2, 2x2x2 or 4)");
    return n ? n : -1;
}

/* Parses `cross` (axis names of the mesh, e.g. "zx") into order[]: those axes first, then the
 * others in mesh order. Returns 0, or −1 with err set. */
static int cross_order(const char *cross, const char *spec, const char *name, int nd, int *order,
                       char *err, size_t errlen) {
    int n = 0, used[MESH_MAX_AXES] = {0};
    for (const char *p = cross ? cross : ""; *p; p++) {
        if (*p == ',' || *p == ' ') continue;
        int k = 0;
        while (k < nd && name[k] != *p) k++;
        if (k == nd || used[k]) {
            return errmsg_fail(err, errlen, "--cross-hosts '%s': %s axis '%c' (--mesh %s)", cross,
                               k == nd ? "no" : "repeated", *p, spec);
        }
        used[k] = 1, order[n++] = k;
    }
    for (int k = 0; k < nd; k++)
        if (!used[k]) order[n++] = k;
    return 0;
}

mesh *mesh_create(const char *spec, const char *open, char *err, size_t errlen) {
    return mesh_create_placed(spec, open, NULL, err, errlen);
}

mesh *mesh_create_placed(const char *spec, const char *open, const char *cross, char *err,
                         size_t errlen) {
    char name[MESH_MAX_AXES];
    int size[MESH_MAX_AXES];
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    char specbuf[32];
    if (!spec || !*spec) { /* default: one axis over all ranks */
        snprintf(specbuf, sizeof specbuf, "%d", nranks);
        spec = specbuf;
    }
    int nd = parse_spec(spec, name, size, err, errlen);
    if (nd < 0) return NULL;
    int64_t prod = 1; /* each size is at most 2^20, so three fit in 64 bits */
    for (int k = 0; k < nd; k++) prod *= size[k];
    if (prod > INT_MAX) {
        errmsg_fail(err, errlen, "--mesh %s needs %lld ranks, more than MPI can run (%d); got %d",
                    spec, (long long)prod, INT_MAX, nranks);
        return NULL;
    }
    if (prod != nranks) {
        errmsg_fail(err, errlen, "--mesh %s needs %lld ranks, got %d (run with mpirun -np %lld)",
                    spec, (long long)prod, nranks, (long long)prod);
        return NULL;
    }
    int wrap[MESH_MAX_AXES] = {1, 1, 1};
    for (const char *p = open ? open : ""; *p; p++) {
        if (*p == ',' || *p == ' ') continue;
        int k = 0;
        while (k < nd && name[k] != *p) k++;
        if (k == nd) {
            errmsg_fail(err, errlen, "--open '%s': no axis named '%c' in --mesh %s", open, *p,
                        spec);
            return NULL;
        }
        wrap[k] = 0;
    }
    int order[MESH_MAX_AXES];
    if (cross_order(cross, spec, name, nd, order, err, errlen) < 0) return NULL;
    /* (calloc): the function, not SMPI's calloc macro, whose auto-shared mode (bench/simpod
     * --shared) would share this rank-private state between simulated ranks */
    mesh *m = (calloc)(1, sizeof *m);
    CHECK(m, "out of memory");
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    m->nranks = nranks;
    m->ndims = nd;
    for (int i = nd - 1; i >= 0; i--) { /* in MPI rank order, the last of order[] fastest */
        m->coord[order[i]] = r % size[order[i]];
        r /= size[order[i]];
    }
    for (int k = 0; k < nd; k++) m->rank = m->rank * size[k] + m->coord[k]; /* last fastest */
    for (int k = 0; k < nd; k++) {
        m->size[k] = size[k];
        m->name[k] = name[k];
        m->wrap[k] = size[k] > 2 ? wrap[k] : 0; /* a ring of 2 is one link: open */
    }
    for (int k = nd; k < MESH_MAX_AXES; k++) m->size[k] = 1;
    m->chunk = MESH_CHUNK_DEFAULT;
    links_init(&m->links);
    pthread_mutex_init(&m->acct_mu, NULL);
    comms_create(m, &m->ctx[0]);
    comms_create(m, &m->ctx[1]);
    for (int k = 0; k < MESH_MAX_AXES; k++)
        if (k < nd)
            MPI_Comm_dup(m->ctx[0].axis[k], &m->p2p[k]);
        else
            m->p2p[k] = MPI_COMM_NULL;
    mesh_g_last_mesh = m;
    where_attach(m);
    return m;
}

void mesh_destroy(mesh *m) {
    if (!m) return;
    where_destroy(m);
    coll_async_destroy(m);
    comms_free(&m->ctx[0]);
    comms_free(&m->ctx[1]);
    for (int k = 0; k < MESH_MAX_AXES; k++)
        if (m->p2p[k] != MPI_COMM_NULL) MPI_Comm_free(&m->p2p[k]);
    links_destroy(&m->links);
    pthread_mutex_destroy(&m->acct_mu);
    if (mesh_g_last_mesh == m) mesh_g_last_mesh = NULL;
    free(m);
}

/* ---- parts (parts.h) ---- */

mesh_links *mesh_part_links(mesh *m) {
    return &m->links;
}

/* ---- queries ---- */

int mesh_rank(const mesh *m) {
    return m->rank;
}
int mesh_nranks(const mesh *m) {
    return m->nranks;
}
int mesh_ndims(const mesh *m) {
    return m->ndims;
}
mesh_axes mesh_all_axes(const mesh *m) {
    mesh_axes a = {.n = m->ndims};
    for (int k = 0; k < a.n; k++) a.ax[k] = k;
    return a;
}
/* axis, checked to be one of the mesh's. */
static int valid_axis(const mesh *m, int axis) {
    CHECK(axis >= 0 && axis < m->ndims, "axis %d out of range (mesh has %d)", axis, m->ndims);
    return axis;
}
int mesh_axis_size(const mesh *m, int axis) {
    return m->size[valid_axis(m, axis)];
}
int mesh_axis_coord(const mesh *m, int axis) {
    return m->coord[valid_axis(m, axis)];
}
int mesh_axis_wraps(const mesh *m, int axis) {
    return m->wrap[valid_axis(m, axis)];
}
char mesh_axis_name(const mesh *m, int axis) {
    return m->name[valid_axis(m, axis)];
}
int mesh_axis_index(const mesh *m, char name) {
    for (int k = 0; k < m->ndims; k++)
        if (m->name[k] == name) return k;
    return -1;
}

const char *mesh_spec_str(const mesh *m, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < m->ndims && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%c=%d", k ? "," : "", m->name[k], m->size[k]);
    int first = 1;
    for (int k = 0; k < m->ndims && o < len; k++)
        if (!m->wrap[k] && m->size[k] > 1) {
            o += (size_t)snprintf(buf + o, len - o, "%s%c", first ? " (open: " : ",", m->name[k]);
            first = 0;
        }
    if (!first && o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

/* Host of every rank (by mesh rank): the lowest mesh rank sharing its memory. Collective over:
 * world. Returns a malloc'ed array of nranks ints. */
static int *host_ids(const mesh *m) {
    MPI_Comm host;
    int id = m->rank, *all = malloc((size_t)m->nranks * sizeof(int));
    CHECK(all, "out of memory");
    mesh_blocking_begin("MPI_Comm_split_type, MPI_Allgather (which host each rank is on)");
    MPI_Comm_split_type(m->ctx[0].world.mpi, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &host);
    MPI_Allreduce(MPI_IN_PLACE, &id, 1, MPI_INT, MPI_MIN, host);
    MPI_Comm_free(&host);
    MPI_Allgather(&id, 1, MPI_INT, all, 1, MPI_INT, m->ctx[0].world.mpi);
    mesh_blocking_end();
    return all;
}

int mesh_hosts(mesh *m, int crosses[MESH_MAX_AXES]) {
    int *id = host_ids(m), nhosts = 0;
    for (int k = 0; k < MESH_MAX_AXES; k++) crosses[k] = 0;
    for (int r = 0; r < m->nranks; r++) {
        nhosts += id[r] == r;
        /* r's neighbour at +1 along each axis (stride = product of the faster axes' sizes) */
        for (int k = m->ndims - 1, stride = 1; k >= 0; stride *= m->size[k--]) {
            int c = r / stride % m->size[k];
            int q = r + ((c + 1) % m->size[k] - c) * stride;
            crosses[k] |= id[q] != id[r];
        }
    }
    free(id);
    return nhosts;
}

const char *mesh_hosts_str(mesh *m, char *buf, size_t len) {
    int crosses[MESH_MAX_AXES], nh = mesh_hosts(m, crosses);
    char across[MESH_MAX_AXES + 1] = "", inside[MESH_MAX_AXES + 1] = "";
    for (int k = 0, a = 0, i = 0; k < m->ndims; k++) {
        if (m->size[k] == 1) continue;
        if (crosses[k])
            across[a++] = m->name[k], across[a] = 0;
        else
            inside[i++] = m->name[k], inside[i] = 0;
    }
    snprintf(buf, len, "%d host%s; axes across hosts: %s; inside a host: %s", nh, nh > 1 ? "s" : "",
             *across ? across : "none", *inside ? inside : "none");
    return buf;
}

void mesh_print_placement(mesh *m, FILE *out) {
    char host[64] = "", hosts[128];
    gethostname(host, sizeof host - 1);
    int mpi_rank = mesh_world_rank(),
        *mpi = m->rank == 0 ? malloc((size_t)m->nranks * sizeof(int)) : NULL;
    char *all = m->rank == 0 ? malloc((size_t)m->nranks * 64) : NULL;
    mesh_blocking_begin("MPI_Gather (the placement table)");
    MPI_Gather(host, 64, MPI_CHAR, all, 64, MPI_CHAR, 0, m->ctx[0].world.mpi);
    MPI_Gather(&mpi_rank, 1, MPI_INT, mpi, 1, MPI_INT, 0, m->ctx[0].world.mpi);
    mesh_blocking_end();
    mesh_hosts_str(m, hosts, sizeof hosts);
    if (m->rank == 0) {
        char spec[96];
        fprintf(out,
                "placement of mesh %s (rank = flattened coordinates, last axis fastest; "
                "mpi = MPI_COMM_WORLD rank)\n",
                mesh_spec_str(m, spec, sizeof spec));
        fprintf(out, "%6s %6s", "rank", "mpi");
        for (int k = 0; k < m->ndims; k++) fprintf(out, " %4c", m->name[k]);
        fprintf(out, "  host\n");
        for (int r = 0; r < m->nranks; r++) {
            fprintf(out, "%6d %6d", r, mpi[r]);
            int c[MESH_MAX_AXES], q = r;
            for (int k = m->ndims - 1; k >= 0; k--) {
                c[k] = q % m->size[k];
                q /= m->size[k];
            }
            for (int k = 0; k < m->ndims; k++) fprintf(out, " %4d", c[k]);
            fprintf(out, "  %s\n", all + (size_t)r * 64);
        }
        fprintf(out, "%s\n", hosts);
        fflush(out);
    }
    free(all);
    free(mpi);
}
