/* parts: a mesh's parts for the files that work on them (see parts.h). Calls nothing. */
#include "mesh/parts.h"

#include "mesh/mesh_impl.h"

/* One accessor per part: its type, name and field of struct mesh. */
#define PART(type, name, field)                                                                    \
    type *mesh_part_##name(mesh *m) {                                                              \
        return &m->field;                                                                          \
    }
PART(mesh_topo, topo, topo)
PART(mesh_p2p_comms, p2p, p2p)
PART(coll_conf, conf, conf)
PART(mesh_links, links, links)
PART(mesh_stats_part, stats, stats)
PART(mesh_queue, queue, queue)
PART(mesh_activity, activity, act)
PART(mesh_watchdog, watchdog, wd)

mesh_comms *mesh_part_comms(mesh *m, int ci) {
    return &m->comms[ci];
}
eng_ctx *mesh_part_engine(mesh *m, int ci) {
    return &m->eng[ci];
}
