/* drafter: the drafters the speculative-decoding tests make from a copy of the target (a model
 * initialised as the target is): the target itself, which is always right; its unembedding
 * negated, so that its greedy pick is the target's argmin, always wrong; noise on its
 * unembedding, right some of the time. A drafter may be any deterministic model of the same
 * vocabulary: these need no training and no checkpoint. Depends on the model. */
#ifndef MT_TESTS_COMMON_DRAFTER_H
#define MT_TESTS_COMMON_DRAFTER_H
#include "train/model/model.h"

typedef enum { DRAFTER_RIGHT, DRAFTER_WRONG, DRAFTER_NOISY } drafter_kind;

/* Turns m (this rank's shard of a copy of the target) into a drafter of that kind. */
void test_drafter_make(model *m, drafter_kind kind);
const char *test_drafter_name(drafter_kind kind);
#endif
