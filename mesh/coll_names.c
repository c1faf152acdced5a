/* coll_names: the names of the collectives' operations and wire formats (coll.h, where.h). */
#include <string.h>

#include "mesh/coll.h"
#include "mesh/names.h"
#include "mesh/where.h"

static const char *op_names[MESH_OP_COUNT] = {
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ppermute", "send", "recv"};
static const char *op_titles[MESH_OP_COUNT] = {
    "AllGather", "ReduceScatter", "AllReduce", "AllToAll", "ppermute", "send", "recv"};
static const char *const wire_names[MESH_WIRE_COUNT] = {"fp32", "bf16"};

const char *mesh_op_name(mesh_op op) {
    return op >= 0 && op < MESH_OP_COUNT ? op_names[op] : "?";
}
const char *mesh_op_title(mesh_op op) {
    return op >= 0 && op < MESH_OP_COUNT ? op_titles[op] : "?";
}
const char *mesh_wire_name(mesh_wire w) {
    return names_of(wire_names, MESH_WIRE_COUNT, w);
}
int mesh_wire_parse(const char *s) {
    return names_find(wire_names, MESH_WIRE_COUNT, s);
}
int mesh_wire_bytes(mesh_wire w) {
    return w == MESH_WIRE_BF16 ? 2 : (int)sizeof(float);
}
