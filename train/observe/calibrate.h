/* calibrate: the link constants of a mesh axis that no emulation gave, measured at start-up by a
 * one-hop ping-pong along the axis (mesh_ppermute to the next rank): the hop latency α from 1
 * float, the one-way bandwidth from 1 MiB, the medians of 5 (on a loaded machine the best times,
 * else a stated fallback, noted on stderr). Every rank of the axis runs it at once, so on a
 * shared host the hop waits for the ranks' turns as the step's collectives do (share.h).
 * Collective over: the axis. */
#ifndef MT_TRAIN_CALIBRATE_H
#define MT_TRAIN_CALIBRATE_H

#include "mesh/cost.h"
#include "mesh/coll.h"

cost_link calibrate_axis(mesh *m, int axis);

#endif
