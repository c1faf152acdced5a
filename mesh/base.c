/* base: the process-wide bottom of mesh/, which every other file of mesh/ may call and which calls
 * none of them: the world rank, the program name, the clock, mesh_abort (a bug: rank,
 * coordinates, file and line, then the whole job ends), rank-0 logging, the arithmetic of axis
 * sets, coordinates and wraparound, scratch buffers, and the names of algorithms, operations and
 * wire formats. See mesh.h and coll.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/cost.h"
#include "mesh/mesh_impl.h"

int mesh_g_world_rank = 0, mesh_g_world_size = 1;
const mesh *mesh_g_last_mesh; /* for coordinates in mesh_abort */
const char *mesh_g_progname = "meshtrain";

void mesh_set_progname(const char *name) {
    mesh_g_progname = name ? name : "meshtrain";
}

int mesh_world_rank(void) {
    return mesh_g_world_rank;
}
int mesh_world_size(void) {
    return mesh_g_world_size;
}

double mesh_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mesh_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

_Noreturn void mesh_abort(const char *file, int line, const char *fmt, ...) {
    char coords[64] = "";
    if (mesh_g_last_mesh) mesh_coord_str(mesh_g_last_mesh, coords, sizeof coords);
    va_list ap;
    va_start(ap, fmt);
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "meshtrain: rank %d %s: %s:%d: %s\n", mesh_g_world_rank, coords, file, line,
            msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    abort();
}

void mesh_log(const char *fmt, ...) {
    if (mesh_g_world_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

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

int mesh_axes_size(const mesh *m, mesh_axes a) {
    int n = 1;
    for (int k = 0; k < a.n; k++) n *= m->size[a.ax[k]];
    return n;
}

int mesh_axes_index(const mesh *m, mesh_axes a) {
    int i = 0;
    for (int k = 0; k < a.n; k++) i = i * m->size[a.ax[k]] + m->coord[a.ax[k]];
    return i;
}

#ifdef MESHTRAIN_SMPI
static int64_t no_data_min; /* 0: off (SMPI privatises it per simulated rank) */

/* SMPI's own payload copy (simgrid 3.32 declares it in C++ only: its mangled name). */
void mesh_smpi_copy_payload(smx_activity_t comm, void *buf, size_t bytes) __asm__(
    "_Z30smpi_comm_copy_buffer_callbackPN7simgrid6kernel8activity8CommImplEPvm");

/* When a simulated message arrives, SMPI copies its payload into the receive buffer (unless one
 * side is one of its shared blocks): "no data" copies the small ones only, so that the big
 * buffers, lazily allocated and never touched, cost neither memory nor time. */
static void no_data_copy(smx_activity_t comm, void *buf, size_t bytes) {
    if (!mesh_no_data((int64_t)bytes)) mesh_smpi_copy_payload(comm, buf, bytes);
}

void mesh_set_no_data(int64_t min_bytes) {
    no_data_min = min_bytes > 0 ? min_bytes : 0;
    if (no_data_min) smpi_comm_set_copy_data_callback(no_data_copy);
}
int mesh_no_data(int64_t bytes) {
    return no_data_min > 0 && bytes >= no_data_min;
}
#endif

float *mesh_scratch(mesh_ctx *c, int slot, int64_t n) {
    CHECK(slot >= 0 && slot < MESH_NSCRATCH, "scratch slot %d out of range", slot);
    if (c->scratch_n[slot] < n) {
        free(c->scratch[slot]);
        size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
#ifdef MESHTRAIN_SMPI
        /* SMPI's malloc, so that smpi/auto-shared-malloc-thresh (simpod --shared) shares big
         * scratch, with or without "no data": SMPI copies no message into a shared block, while
         * the C library's fresh pages were touched by the copies of a no-data call's small
         * messages (a MULTI AllGather's steps), every rank's scratch in full. */
        c->scratch[slot] = malloc(bytes);
#else
        c->scratch[slot] = aligned_alloc(64, bytes);
#endif
        CHECK(c->scratch[slot], "out of memory for %lld floats of scratch", (long long)n);
        c->scratch_n[slot] = n;
    }
    return c->scratch[slot];
}

void mesh_set_axis_wrap(mesh *m, int axis, int wraps) {
    CHECK(axis >= 0 && axis < m->ndims, "axis %d out of range (mesh has %d)", axis, m->ndims);
    m->wrap[axis] = m->size[axis] > 2 && wraps;
}

int mesh_apply_chip_wrap(mesh *m, const char *chip) {
    const cost_chip *c = cost_chip_find(chip);
    if (!c) return -1;
    for (int k = 0; k < m->ndims; k++)
        mesh_set_axis_wrap(m, k, cost_axis_wraps(c, m->size, m->ndims, k));
    return 0;
}

const char *mesh_coord_str(const mesh *m, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf, len, "(");
    for (int k = 0; k < m->ndims && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%c=%d", k ? "," : "", m->name[k], m->coord[k]);
    if (o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

static const char *op_names[MESH_OP_COUNT] = {
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ppermute", "send", "recv"};

const char *mesh_op_name(mesh_op op) {
    return op >= 0 && op < MESH_OP_COUNT ? op_names[op] : "?";
}
static const char *wire_names[MESH_WIRE_COUNT] = {"fp32", "bf16"};
const char *mesh_wire_name(mesh_wire w) {
    return w >= 0 && w < MESH_WIRE_COUNT ? wire_names[w] : "?";
}
int mesh_wire_parse(const char *s) {
    for (int w = 0; w < MESH_WIRE_COUNT; w++)
        if (s && strcmp(s, wire_names[w]) == 0) return w;
    return -1;
}
int mesh_wire_bytes(mesh_wire w) {
    return w == MESH_WIRE_BF16 ? 2 : (int)sizeof(float);
}
