/* mesh_impl: a mesh as the sum of its parts. Seen by mesh.c (which makes and frees the parts) and
 * parts.c (which hands each part to the files that work on it) only; every other file of mesh/
 * reaches the parts it uses through parts.h. Private to mesh/. */
#ifndef MT_MESH_IMPL_H
#define MT_MESH_IMPL_H
#include "mesh/activity.h"
#include "mesh/coll_impl.h"
#include "mesh/comms.h"
#include "mesh/links.h"
#include "mesh/progress.h"
#include "mesh/stats.h"
#include "mesh/topo.h"
#include "mesh/watchdog.h"

struct mesh {
    mesh_topo topo;        /* axes, coordinates, placement (topo.c) */
    mesh_comms comms[2];   /* communicators: 0 the caller's blocking calls, 1 the queue's */
    mesh_p2p_comms p2p;    /* point-to-point communicators along each axis (p2p.c) */
    coll_conf conf;        /* the collectives' settings (coll.c) */
    eng_ctx eng[2];        /* the engine's state on each context (coll_ctx.c) */
    mesh_links links;      /* the emulated links (link_book.c) */
    mesh_stats_part stats; /* accounting and trace (stats.c) */
    mesh_queue queue;      /* the non-blocking calls' queue (coll_async.c, progress.h) */
    mesh_activity act;     /* what the rank is doing, for the observers (activity.c) */
    mesh_watchdog wd;      /* the --timeout watchdog (watchdog.c) */
};
#endif
