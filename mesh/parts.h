/* parts: how a file of mesh/ reaches the part of a mesh it works on, and the current mesh. A mesh
 * is made of parts, each with its own state struct and its own files (docs/architecture.md,
 * "mesh/ by idea"); the struct that holds them is seen by mesh.c and parts.c only. A file that
 * implements a public function taking a mesh asks here for the parts it uses and includes only
 * their headers, so that it sees only their state. Not collective; never NULL for a live mesh.
 * Private to mesh/. Depends on mesh.h only. */
#ifndef MT_MESH_PARTS_H
#define MT_MESH_PARTS_H
#include "mesh/mesh.h"

typedef struct mesh_topo mesh_topo;
typedef struct mesh_comms mesh_comms;
typedef struct mesh_p2p_comms mesh_p2p_comms;
typedef struct coll_conf coll_conf;
typedef struct eng_ctx eng_ctx;
typedef struct mesh_links mesh_links;
typedef struct mesh_stats_part mesh_stats_part;
typedef struct mesh_queue mesh_queue;
typedef struct mesh_activity mesh_activity;
typedef struct mesh_watchdog mesh_watchdog;

/* Topology: axes, coordinates, placement (topo.h). */
mesh_topo *mesh_part_topo(mesh *m);
/* Communicators of context ci (0: blocking calls; 1: the queue) and the point-to-point ones
 * (comms.h). */
mesh_comms *mesh_part_comms(mesh *m, int ci);
mesh_p2p_comms *mesh_part_p2p(mesh *m);
/* The collectives' settings and the engine's state on context ci (coll_impl.h). */
coll_conf *mesh_part_conf(mesh *m);
eng_ctx *mesh_part_engine(mesh *m, int ci);
/* The emulated links (links.h). */
mesh_links *mesh_part_links(mesh *m);
/* Accounting and trace (stats.h). */
mesh_stats_part *mesh_part_stats(mesh *m);
/* The queue of non-blocking calls and its mode (progress.h). */
mesh_queue *mesh_part_queue(mesh *m);
/* What the rank is doing inside mesh, for the observers (activity.h). */
mesh_activity *mesh_part_activity(mesh *m);
/* The --timeout watchdog (watchdog.h). */
mesh_watchdog *mesh_part_watchdog(mesh *m);

/* The current mesh: the oldest live one (NULL: none), whose where-line SIGUSR1 prints, into
 * which mesh_blocking_begin reports, whose coordinates mesh_abort prints and whose watchdog
 * mesh_exit_error stops. The only such pointer in mesh/ (proc.c). mesh_create attaches a mesh
 * with its coordinates ("(x=1,y=0)"): it becomes current if none is; mesh_destroy detaches it. */
mesh *mesh_current(void);
void mesh_current_attach(mesh *m, const char *coords);
void mesh_current_detach(mesh *m);
#endif
