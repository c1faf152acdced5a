/* coll_names: the names of the collectives' operations and wire formats (coll.h, where.h). */
#include <string.h>

#include "mesh/coll.h"
#include "mesh/where.h"

static const char *op_names[MESH_OP_COUNT] = {
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ppermute", "send", "recv"};
static const char *op_titles[MESH_OP_COUNT] = {
    "AllGather", "ReduceScatter", "AllReduce", "AllToAll", "ppermute", "send", "recv"};
static const char *wire_names[MESH_WIRE_COUNT] = {"fp32", "bf16"};

const char *mesh_op_name(mesh_op op) {
    return op >= 0 && op < MESH_OP_COUNT ? op_names[op] : "?";
}
const char *mesh_op_title(mesh_op op) {
    return op >= 0 && op < MESH_OP_COUNT ? op_titles[op] : "?";
}
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
