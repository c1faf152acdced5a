/* mesh: the emulated TPU slice. Owns MPI start-up and shut-down (the only module that touches
 * MPI_COMM_WORLD), named axes on a 1D/2D/3D torus, coordinates and wraparound, one communicator
 * per axis and per ordered set of axes, rank-aware logging, and errors that end the whole job.
 * Knows no tensors and no model. Built on MPI, but this header does not include <mpi.h>: a
 * communicator is the opaque mesh_comm, so code that only passes communicators along (the model,
 * the trainer, checkpoints) never sees MPI. Code that calls MPI itself includes mesh/mesh_mpi.h.
 *
 * Rank ↔ coordinate mapping (fixed, documented in the README): axes are listed in the order given
 * to --mesh; the LAST axis varies fastest. rank = ((c0·s1) + c1)·s2 + c2. This mesh rank is the
 * MPI rank unless mesh_create_placed reorders the axes for hosts. */
#ifndef MT_MESH_MESH_H
#define MT_MESH_MESH_H
#include <stdint.h>
#include <stdio.h>

#define MESH_MAX_AXES 3

typedef struct mesh mesh;

/* A communicator: the world of a mesh, one ordered set of its axes, or this rank alone. Opaque
 * here; mesh/mesh_mpi.h gives its MPI_Comm. Owned by the mesh (or static: mesh_self_comm). */
typedef struct mesh_comm mesh_comm;

/* An ordered set of mesh axes (the book's X, XY, ...): ax[0] is the major (slowest) one. */
typedef struct {
    int n;
    int ax[MESH_MAX_AXES];
} mesh_axes;

/* Not collective. MPI_Init_thread; records the world rank for logging. Call first. */
void mesh_mpi_init(int *argc, char ***argv);
/* Collective over: world. MPI_Finalize. */
/* Not collective. Under Open MPI's mpirun: the seconds between the SIGTERM it forwards to the
 * ranks and its SIGKILL (odls_base_sigkill_timeout, 1 by default); −1 under any other launcher. */
double mesh_launcher_kill_grace(void);
void mesh_mpi_finalize(void);
int mesh_world_rank(void);
int mesh_world_size(void);

/* Collective over: world. Parses `spec` ("x=4,y=2", "2x2x2", "4"; axes named x,y,z when not
 * named) and `open` (comma list of axes without wraparound, or NULL), checks that the product of
 * sizes equals the number of ranks. Every axis of 3 or more wraps unless listed in `open`; an axis
 * of 1 or 2 never wraps (a ring of 2 is a single link each way). spec NULL or "" = one axis over
 * all ranks. On bad input returns NULL and writes the reason into
 * err[errlen] (the same on every rank; nothing printed). */
mesh *mesh_create(const char *spec, const char *open, char *err, size_t errlen);
/* Collective over: world. As mesh_create, with the axes named in `cross` ("y", "zx"; NULL or ""
 * = none) made the slowest-varying in MPI rank order, the others following in mesh order. mpirun
 * fills each host with consecutive MPI ranks, so the listed axes are the ones that cross hosts;
 * by default (none listed) that is the first axis, and the last, fastest one stays inside a
 * host. The mesh rank (mesh_rank, the rank in every mesh communicator) is still the flattened
 * coordinates, last axis fastest; only which MPI process holds which coordinates changes. */
mesh *mesh_create_placed(const char *spec, const char *open, const char *cross, char *err,
                         size_t errlen);
/* Collective over: parent's world. The ranks of parent that give the same color form a mesh of
 * spec (as mesh_create's; NULL: one axis) over them, in parent's rank order: a sub-mesh for a part
 * of a job that runs on ranks of its own (a speculative drafter beside its target). Each mesh's
 * collectives are its own ranks'; mesh_world_comm(sub) is the sub-mesh's. NULL with the reason in
 * err when spec does not fit the group (the same on the group's ranks). */
mesh *mesh_split(mesh *parent, int color, const char *spec, char *err, size_t errlen);
/* Collective over: the mesh's world. Frees communicators. Accepts NULL. */
void mesh_destroy(mesh *m);

int mesh_rank(const mesh *m);
int mesh_nranks(const mesh *m);
int mesh_ndims(const mesh *m);
int mesh_axis_size(const mesh *m, int axis);
int mesh_axis_coord(const mesh *m, int axis);
int mesh_axis_wraps(const mesh *m, int axis);
/* Not collective (do it identically on every rank). Sets whether `axis` has a wraparound link. */
void mesh_set_axis_wrap(mesh *m, int axis, int wraps);
/* Not collective. Applies a chip family's wraparound rule (the book's TPU chapter, via cost.h's
 * table) to every axis: v5e/v6e wrap only an axis of 16, v3 only an axis of 32, v4p/v5p wrap every
 * axis when the slice is made of whole 4x4x4 cubes; axes of 1 or 2 never count as wrapping. Returns
 * 0, or −1 for an unknown chip (mesh unchanged). */
int mesh_apply_chip_wrap(mesh *m, const char *chip);
char mesh_axis_name(const mesh *m, int axis);
/* Index of the axis named `name` ('x'), or -1. */
int mesh_axis_index(const mesh *m, char name);
/* Parses "xy" / "x" into an ordered axis set; returns 0, or -1 for an unknown or repeated axis.
 * The empty string gives n = 0 (a collective over no axes is a copy). */
int mesh_axes_parse(const mesh *m, const char *names, mesh_axes *out);
/* Product of the sizes of the axes in the set; this rank's index within the flattened set
 * (ax[0] major: index = Σ coord(ax[k])·Π_{j>k} size(ax[j])). */
int mesh_axes_size(const mesh *m, mesh_axes a);
int mesh_axes_index(const mesh *m, mesh_axes a);
/* Every axis of the mesh in order (x, y, …): the set whose collectives span the world. */
mesh_axes mesh_all_axes(const mesh *m);
/* World rank of the member with index j (0 ≤ j < mesh_axes_size) of this rank's copy of set a:
 * my coordinates, with a's axes set from j (a.ax[0] major). */
int mesh_axes_member(const mesh *m, mesh_axes a, int j);
/* Communicator over the ordered set (rank in it = mesh_axes_index). Owned by the mesh. */
const mesh_comm *mesh_axes_comm(mesh *m, mesh_axes a);
/* All ranks of the mesh (rank in it = mesh_rank). Owned by the mesh. */
const mesh_comm *mesh_world_comm(const mesh *m);
/* This rank alone (MPI_COMM_SELF), for single-rank work such as inspecting a file. */
const mesh_comm *mesh_self_comm(void);
/* "xy" into buf (the set's axis names, major first). */
const char *mesh_axes_str(const mesh *m, mesh_axes a, char *buf, size_t len);
/* "x=4,y=2 (open: y)" into buf. */
const char *mesh_spec_str(const mesh *m, char *buf, size_t len);
/* "(x=1,y=0)" into buf. */
const char *mesh_coord_str(const mesh *m, char *buf, size_t len);
/* Collective over: world. Prints the placement table (rank, MPI rank, coordinates, host) from
 * rank 0, then the mesh_hosts_str line. */
void mesh_print_placement(mesh *m, FILE *out);
/* Collective over: world. The number of hosts (groups of ranks that share memory); crosses[k] =
 * 1 when two ranks that differ only in their coordinate along axis k are on different hosts. */
int mesh_hosts(mesh *m, int crosses[MESH_MAX_AXES]);
/* Collective over: world. "2 hosts; axes across hosts: x; inside a host: y" into buf. */
const char *mesh_hosts_str(mesh *m, char *buf, size_t len);
/* Collective over: world. The number of ranks on this rank's host (that share its memory). */
int mesh_host_ranks(const mesh *m);
/* Collective over: world. The CPUs the ranks on this rank's host may run on: the union of their
 * affinity masks (sched_getaffinity), at most the CPUs a cgroup v2 quota (cpu.max) allows; at
 * least 1. In the SMPI build, the host's ranks (each simulated rank is a chip of its own). */
int mesh_host_cpus(const mesh *m);
/* Not collective. Whether MPI's waits give the CPU away when nothing has arrived: 1 when they
 * yield (Open MPI's mpi_yield_when_idle, which it sets when ranks outnumber its slots), 0 when
 * they spin, −1 when MPI does not say. */
int mesh_mpi_yields(void);

/* ---- errors and logging ---- */
/* The one way ranks agree on an outcome. Collective over: comm. Returns the minimum of `status`
 * over comm on every rank. When it is negative and err is given, every rank's err then holds one
 * message: the lowest failing rank's err, as "rank R: <its err>" when only some ranks failed and
 * R is not rank 0 (rank 0 alone does the job's single-rank work; its failures are the job's).
 * err must be given on every rank or on none. */
#define MESH_MSG_MAX 1024
int mesh_agree_msg(const mesh_comm *comm, int status, char *err, size_t errlen);
/* mesh_agree_msg without a message. */
int mesh_agree(const mesh_comm *comm, int status);
/* Collective over: comm. The largest `value` over comm, on every rank. */
int64_t mesh_agree_max(const mesh_comm *comm, int64_t value);
/* Collective over: comm, then world when a rank failed. The ranks agree on status; when one is
 * negative every rank ends the job (mesh_exit_error) with the message the lowest failing rank
 * formatted from fmt. */
void mesh_agree_or_exit(const mesh_comm *comm, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Not collective. The program name that prefixes errors ("meshtrain" unless set); `name` must
 * have static storage. */
void mesh_set_progname(const char *name);
/* Collective over: world (every rank must call it, with the same message). Rank 0 prints
 * "<progname>: error: <msg>" to stderr, every rank finalizes MPI and exits with status 2. */
_Noreturn void mesh_exit_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Not collective: one rank hit a bug. Prints rank, coordinates, file and line, then MPI_Abort. */
_Noreturn void mesh_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) mesh_abort(__FILE__, __LINE__, __VA_ARGS__);                                  \
    } while (0)
/* Prints from world rank 0 only. */
void mesh_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Monotonic wall clock in seconds. */
double mesh_now(void);

/* ---- "no data" (the SMPI build only) ---- */
/* For a dry run on a simulated pod, where only the schedule and the messages' sizes matter:
 * after mesh_set_no_data(b), b > 0, the collectives on arrays of b bytes or more, and every caller
 * that asks mesh_no_data(bytes) before touching such an array, skip the work on the floats
 * (additions, copies, bf16 conversions, clears) while every message still goes through MPI with
 * its real size, peer and order. Smaller arrays keep their data. Not collective; per process (a
 * simulated rank under SMPI). Elsewhere there is no switch: mesh_no_data is the constant 0. */
#ifdef MESHTRAIN_SMPI
void mesh_set_no_data(int64_t min_bytes);
int mesh_no_data(int64_t bytes);
/* Simulated compute (the dry run's kernels): keeps this simulated rank busy for `flops` at its
 * host's speed, as smpi_execute_flops, while the non-blocking collectives in flight progress:
 * their next steps are posted after every `poll` seconds of it (mesh_sim_set_poll, default
 * 10 µs), so they overlap the compute in simulated time (mesh/sim_progress.c). */
void mesh_sim_compute(double flops);
void mesh_sim_set_poll(double seconds);
#else
#define mesh_no_data(bytes) (0 && (bytes) != 0) /* bytes is not evaluated */
#endif
/* The calling thread's CPU time in seconds (it does not advance while the thread waits for a
 * core or sleeps). */
double mesh_thread_cpu(void);
#endif
