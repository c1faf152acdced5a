/* parts: how a file of mesh/ reaches the part of a mesh it works on. A mesh is made of parts, each
 * with its own state struct and its own files (docs/architecture.md, "mesh/ by idea"); the struct
 * that holds them is mesh.c's. A file that implements a public function taking a mesh asks here
 * for the parts it uses and includes only their headers, so that it sees only their state.
 * Not collective; never NULL for a live mesh. Private to mesh/. */
#ifndef MT_MESH_PARTS_H
#define MT_MESH_PARTS_H
#include "mesh/mesh.h"

typedef struct mesh_links mesh_links;

/* The emulated links (links.h). */
mesh_links *mesh_part_links(mesh *m);
#endif
