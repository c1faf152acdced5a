/* where: hang forensics. Each rank publishes what it is doing inside mesh — the call in progress
 * on the caller's thread and on the progress thread (op, axis set, its number on that set, ring
 * steps done of total, since when) — plus a label and a step number that the program sets, in
 * lock-free atomics, so that a signal handler or a watchdog thread can print, while the rank is
 * stuck,
 *     meshtrain: where: rank 5 (x=1,y=0): in AllGather #57 over y, 2 of 3 hops done (12.0 s)
 * "#57" counts the collectives this rank started over that axis set, from 0: ranks of one set
 * that show different numbers are at different calls. Also here: the watchdog (--timeout) and
 * the SIGUSR1 handler. The where-line and the watchdog are observers of what the rank publishes
 * (mesh/activity.h: where.c, watchdog.c); the debug signature check is verify.c.
 * Depends on mesh.h and coll.h (MPI, pthreads, C11 atomics behind it). */
#ifndef MT_MESH_WHERE_H
#define MT_MESH_WHERE_H
#include "mesh/coll.h"

/* The book's name of an op: "AllGather", "ReduceScatter", "AllReduce", "AllToAll", "ppermute",
 * "send", "recv". */
const char *mesh_op_title(mesh_op op);

/* Not collective. What the program is doing, shown after the call in the where-line: `label`
 * with its first '#' replaced by i ("layer # backward"). Only the pointer is kept: label must
 * have static storage (a string literal). NULL clears. */
void mesh_where_note(mesh *m, const char *label, int64_t i);
/* Not collective. Step `step` (>= 0) begins, which starts the watchdog's step clock; a negative
 * step means "between steps" (no step clock). */
void mesh_where_step(mesh *m, int64_t step);
/* Not collective, async-signal-safe (callable from a signal handler). Writes this rank's
 * where-line, "rank 5 (x=1,y=0): in ... | step 3, layer 2 backward | progress thread: ...",
 * into buf (always terminated; no newline) and returns its length. */
size_t mesh_where_str(const mesh *m, char *buf, size_t len);

/* Not collective. Brackets a blocking call into MPI made outside mesh's collectives (a status
 * agreement, a broadcast, parallel HDF5's collective I/O), so that the watchdog covers it like a
 * collective and the where-line names it: "in MPI_Allreduce (ranks agreeing on a status), for
 * 3.0 s". `what` must have static storage. Brackets nest (the outermost names the call); inside a
 * mesh call, which the watchdog already covers, they change nothing. No-op when no mesh exists.
 * Call from the thread that makes the mesh's blocking calls. */
void mesh_blocking_begin(const char *what);
void mesh_blocking_end(void);

/* Not collective. Installs a SIGUSR1 handler that writes "meshtrain: where: <where-line>" to
 * stderr and lets the run continue (mpirun forwards SIGUSR1 to every rank). The line is the
 * current mesh's: the oldest live one (m itself when it is the only one); once no mesh is left,
 * SIGUSR1 gets its default action again. */
void mesh_where_signal(mesh *m);

/* Collective over: world. Starts a watchdog thread on this rank. It fires when a single call
 * into mesh (a collective, a wait for a non-blocking one, a point-to-point wait) or a step (see
 * mesh_where_step) has lasted more than `timeout` seconds: it prints this rank's where-line, asks
 * every other rank to print theirs (a message on a communicator of its own), waits for them (until
 * all have answered, 5 s at most; MESHTRAIN_WATCHDOG_GRACE=S sets the most), then ends the job
 * with MPI_Abort (exit status 4), naming the rank, what timed out and any rank that did not
 * answer. One message per failure: each rank prints its where-line once, and a rank that has
 * heard another rank's watchdog never fires its own (that rank ends the job) nor answers after
 * the asker stopped waiting (a rank stopped with SIGSTOP that resumes as the job ends adds
 * nothing). Returns 0, or −1 if the thread could not start. */
int mesh_watchdog_start(mesh *m, double timeout);
/* Collective over: world. Stops the watchdog (no-op if none). mesh_destroy calls it. */
void mesh_watchdog_stop(mesh *m);
#endif
