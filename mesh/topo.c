/* topo: the topology of a mesh (see topo.h) and the public queries on it (mesh.h). */
#include "mesh/topo.h"

#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/cost.h"
#include "mesh/errmsg.h"
#include "mesh/parts.h"

/* ---- parsing and placement ---- */

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

/* Marks the axes listed in `open` as without wraparound; returns 0, or −1 with err set. */
static int open_axes(const char *open, const char *spec, const char *name, int nd, int *wrap,
                     char *err, size_t errlen) {
    for (const char *p = open ? open : ""; *p; p++) {
        if (*p == ',' || *p == ' ') continue;
        int k = 0;
        while (k < nd && name[k] != *p) k++;
        if (k == nd)
            return errmsg_fail(err, errlen, "--open '%s': no axis named '%c' in --mesh %s", open,
                               *p, spec);
        wrap[k] = 0;
    }
    return 0;
}

int topo_init(mesh_topo *t, const char *spec, const char *open, const char *cross, int mpi_rank,
              int nranks, char *err, size_t errlen) {
    char name[MESH_MAX_AXES], specbuf[32];
    int size[MESH_MAX_AXES], wrap[MESH_MAX_AXES] = {1, 1, 1}, order[MESH_MAX_AXES];
    if (!spec || !*spec) { /* default: one axis over all ranks */
        snprintf(specbuf, sizeof specbuf, "%d", nranks);
        spec = specbuf;
    }
    const int nd = parse_spec(spec, name, size, err, errlen);
    if (nd < 0) return -1;
    int64_t prod = 1; /* each size is at most 2^20, so three fit in 64 bits */
    for (int k = 0; k < nd; k++) prod *= size[k];
    if (prod > INT_MAX)
        return errmsg_fail(err, errlen,
                           "--mesh %s needs %lld ranks, more than MPI can run (%d); got %d", spec,
                           (long long)prod, INT_MAX, nranks);
    if (prod != nranks)
        return errmsg_fail(err, errlen,
                           "--mesh %s needs %lld ranks, got %d (run with mpirun -np %lld)", spec,
                           (long long)prod, nranks, (long long)prod);
    if (open_axes(open, spec, name, nd, wrap, err, errlen) < 0) return -1;
    if (cross_order(cross, spec, name, nd, order, err, errlen) < 0) return -1;
    *t = (mesh_topo){.nranks = nranks, .ndims = nd};
    for (int i = nd - 1, r = mpi_rank; i >= 0; i--) { /* MPI rank order: last of order[] fastest */
        t->coord[order[i]] = r % size[order[i]];
        r /= size[order[i]];
    }
    for (int k = 0; k < nd; k++) t->rank = t->rank * size[k] + t->coord[k]; /* last fastest */
    for (int k = 0; k < MESH_MAX_AXES; k++) {
        t->size[k] = k < nd ? size[k] : 1;
        t->name[k] = k < nd ? name[k] : 0;
        t->wrap[k] = k < nd && size[k] > 2 ? wrap[k] : 0; /* a ring of 2 is one link: open */
    }
    return 0;
}

/* ---- axis sets ---- */

int mesh_set_id(mesh_axes a) {
    switch (a.n) {
    case 0:
        return 0;
    case 1:
        return 1 + a.ax[0];
    case 2:
        return 4 + a.ax[0] * 3 + a.ax[1];
    default:
        return 13 + a.ax[0] * 9 + a.ax[1] * 3 + a.ax[2];
    }
}

mesh_axes mesh_set_axes(int id) {
    mesh_axes a = {0, {0, 0, 0}};
    if (id <= 0 || id >= MESH_NSETS)
        a.n = 0;
    else if (id < 4)
        a.n = 1, a.ax[0] = id - 1;
    else if (id < 13)
        a.n = 2, a.ax[0] = (id - 4) / 3, a.ax[1] = (id - 4) % 3;
    else
        a.n = 3, a.ax[0] = (id - 13) / 9, a.ax[1] = (id - 13) / 3 % 3, a.ax[2] = (id - 13) % 3;
    return a;
}

int topo_axes_size(const mesh_topo *t, mesh_axes a) {
    int n = 1;
    for (int k = 0; k < a.n; k++) n *= t->size[a.ax[k]];
    return n;
}

int topo_axes_index(const mesh_topo *t, mesh_axes a) {
    int i = 0;
    for (int k = 0; k < a.n; k++) i = i * t->size[a.ax[k]] + t->coord[a.ax[k]];
    return i;
}

int topo_axes_member(const mesh_topo *t, mesh_axes a, int j) {
    int c[MESH_MAX_AXES];
    for (int k = 0; k < t->ndims; k++) c[k] = t->coord[k];
    for (int k = a.n - 1; k >= 0; k--) {
        c[a.ax[k]] = j % t->size[a.ax[k]];
        j /= t->size[a.ax[k]];
    }
    int r = 0;
    for (int k = 0; k < t->ndims; k++) r = r * t->size[k] + c[k];
    return r;
}

int topo_wraps(const mesh_topo *t, mesh_axes a) {
    int wraps = a.n > 0;
    for (int i = 0; i < a.n; i++) wraps &= t->wrap[a.ax[i]];
    return wraps;
}

void topo_coords(const mesh_topo *t, int rank, int *c) {
    for (int k = t->ndims - 1; k >= 0; k--) c[k] = rank % t->size[k], rank /= t->size[k];
}

/* ---- the public queries (mesh.h) ---- */

static const mesh_topo *topo_of(const mesh *m) {
    return mesh_part_topo((mesh *)m);
}
/* m's topology, after checking that axis is one of its axes. */
static const mesh_topo *checked(const mesh *m, int axis) {
    const mesh_topo *t = topo_of(m);
    CHECK(axis >= 0 && axis < t->ndims, "axis %d out of range (mesh has %d)", axis, t->ndims);
    return t;
}

int mesh_rank(const mesh *m) {
    return topo_of(m)->rank;
}
int mesh_nranks(const mesh *m) {
    return topo_of(m)->nranks;
}
int mesh_ndims(const mesh *m) {
    return topo_of(m)->ndims;
}
mesh_axes mesh_all_axes(const mesh *m) {
    mesh_axes a = {.n = topo_of(m)->ndims};
    for (int k = 0; k < a.n; k++) a.ax[k] = k;
    return a;
}
int mesh_axis_size(const mesh *m, int axis) {
    return checked(m, axis)->size[axis];
}
int mesh_axis_coord(const mesh *m, int axis) {
    return checked(m, axis)->coord[axis];
}
int mesh_axis_wraps(const mesh *m, int axis) {
    return checked(m, axis)->wrap[axis];
}
char mesh_axis_name(const mesh *m, int axis) {
    return checked(m, axis)->name[axis];
}
int mesh_axis_index(const mesh *m, char name) {
    const mesh_topo *t = topo_of(m);
    for (int k = 0; k < t->ndims; k++)
        if (t->name[k] == name) return k;
    return -1;
}
int mesh_axes_size(const mesh *m, mesh_axes a) {
    return topo_axes_size(topo_of(m), a);
}
int mesh_axes_index(const mesh *m, mesh_axes a) {
    return topo_axes_index(topo_of(m), a);
}
int mesh_axes_member(const mesh *m, mesh_axes a, int j) {
    return topo_axes_member(topo_of(m), a, j);
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
    const mesh_topo *t = topo_of(m);
    size_t k = 0;
    for (; k < (size_t)a.n && k + 1 < len; k++) buf[k] = t->name[a.ax[k]];
    if (len) buf[k < len ? k : len - 1] = 0;
    return buf;
}

const char *mesh_coord_str(const mesh *m, char *buf, size_t len) {
    const mesh_topo *t = topo_of(m);
    size_t o = 0;
    o += (size_t)snprintf(buf, len, "(");
    for (int k = 0; k < t->ndims && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%c=%d", k ? "," : "", t->name[k], t->coord[k]);
    if (o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

const char *mesh_spec_str(const mesh *m, char *buf, size_t len) {
    const mesh_topo *t = topo_of(m);
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < t->ndims && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%c=%d", k ? "," : "", t->name[k], t->size[k]);
    int first = 1;
    for (int k = 0; k < t->ndims && o < len; k++)
        if (!t->wrap[k] && t->size[k] > 1) {
            o += (size_t)snprintf(buf + o, len - o, "%s%c", first ? " (open: " : ",", t->name[k]);
            first = 0;
        }
    if (!first && o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

void mesh_set_axis_wrap(mesh *m, int axis, int wraps) {
    checked(m, axis);
    mesh_topo *t = mesh_part_topo(m);
    t->wrap[axis] = t->size[axis] > 2 && wraps;
}

int mesh_apply_chip_wrap(mesh *m, const char *chip) {
    const cost_chip *c = cost_chip_find(chip);
    if (!c) return -1;
    mesh_topo *t = mesh_part_topo(m);
    for (int k = 0; k < t->ndims; k++)
        mesh_set_axis_wrap(m, k, cost_axis_wraps(c, t->size, t->ndims, k));
    return 0;
}
