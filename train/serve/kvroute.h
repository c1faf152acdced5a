/* kvroute: which kv heads of a KV block go from which rank of one tensor sharding to which rank
 * of another, when a sequence's cache moves between replicas of different tensor degrees
 * (disaggregated serving with --prefill-tensor). A rank at tensor coordinate y of Y holds the kv
 * heads the sharding plan gives it (model_tensor_kv_heads): K/Y of them from y·K/Y when Y ≤ K,
 * else the one head its query heads use (replicated over the Y/K ranks sharing it). Pure
 * arithmetic on the model's shape: no MPI. */
#ifndef MT_TRAIN_SERVE_KVROUTE_H
#define MT_TRAIN_SERVE_KVROUTE_H
#include <stdint.h>

#include "train/model/model.h"

/* One piece of a block's move: kv heads [h0, h1) from source coordinate src. */
typedef struct {
    int32_t src;
    int64_t h0, h1;
} kvroute_piece;

/* The pieces destination coordinate yd (of Yd) receives from a sharding of Ys, in a fixed order
 * (by source coordinate), into out[] (at most Ys of them); returns their number. With Ys = Yd the
 * one piece is the whole shard of the source at the same coordinate (every rank ships its own);
 * otherwise each head comes from the lowest source coordinate that holds it, and the pieces
 * cover the destination's heads exactly once. */
int32_t kvroute_pieces(const model_shape *s, int64_t Ys, int64_t Yd, int64_t yd,
                       kvroute_piece *out);
#endif
