/* kvroute: which kv heads of a KV block go from which rank of one tensor sharding to which rank
 * of another, when a sequence's cache moves between replicas of different tensor degrees
 * (disaggregated serving with --prefill-tensor). A rank at tensor coordinate y of Y holds the kv
 * heads the sharding plan gives it (model_tensor_kv_heads): K/Y of them from y·K/Y when Y ≤ K,
 * else the one head its query heads use, shared by the Z = Y/K coordinates of its group. Past K
 * a side either replicates that head over its group (every group rank holds it for every
 * sequence), or keeps the AllToAll layout (engine.h): the replica's sequences split over Z pools,
 * group rank z (coordinate y with y mod Z = z) holding pool z, so a sequence of pool z is held by
 * one rank of each group. Pure arithmetic on the model's shape: no MPI. */
#ifndef MT_TRAIN_SERVE_KVROUTE_H
#define MT_TRAIN_SERVE_KVROUTE_H
#include <stdint.h>

#include "train/model/model.h"

/* One side of a move, for one sequence: the tensor degree Y, the pools of the replica in the
 * AllToAll layout (Z = Y/K; 1: one pool, kv heads over Y or replicated past K) and the
 * sequence's pool z. */
typedef struct {
    int64_t Y;
    int32_t Z, z;
} kvroute_side;

/* Whether coordinate y of side sd holds the sequence's kv heads (the AllToAll layout: y mod Z =
 * z; otherwise every coordinate holds its heads). */
int kvroute_holds(const kvroute_side *sd, int64_t y);

/* The kv heads of one position that side sd's coordinates hold for the sequence, summed over
 * them (a head replicated over a group counts once for each of its ranks). */
int64_t kvroute_heads_held(const model_shape *s, const kvroute_side *sd);

/* One piece of a block's move: kv heads [h0, h1) from source coordinate src. */
typedef struct {
    int32_t src;
    int64_t h0, h1;
} kvroute_piece;

/* The pieces destination coordinate yd of dst receives from src, in a fixed order (by source
 * coordinate), into out[] (at most src.Y of them); returns their number: none when yd does not
 * hold the sequence. With equal degrees, when the source at yd holds the sequence, the one piece
 * is its whole shard (every rank ships its own); otherwise each head comes from the lowest
 * source coordinate that holds it for the sequence, and the pieces cover the destination's heads
 * exactly once. */
int32_t kvroute_pieces(const model_shape *s, const kvroute_side *src, const kvroute_side *dst,
                       int64_t yd, kvroute_piece *out);
#endif
