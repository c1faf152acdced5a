/* Independent double-precision reference of the model's loss (tests only). */
#ifndef MT_TESTS_REFMODEL_H
#define MT_TESTS_REFMODEL_H
#include <stdint.h>
#include "train/model/model.h"

/* Mean next-token cross-entropy of B sequences tokens[B, T+1] under global parameters theta
 * (all tensors in param_id order, row-major). */
double ref_loss(const model_shape *s, const double *theta, const int32_t *tokens, int64_t B);
#endif
