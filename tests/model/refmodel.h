/* Independent double-precision reference of the model's loss (tests only). */
#ifndef MT_TESTS_REFMODEL_H
#define MT_TESTS_REFMODEL_H
#include <stdint.h>
#include "train/model/model.h"

/* What the reference computed besides the loss: with experts, the load-balancing and z-losses
 * (each summed over the MoE blocks of its mean over the sequences, or tokens) and the dropped
 * (token, expert) slots. */
typedef struct {
    double aux, z;
    int64_t dropped;
} ref_moe;

/* Mean next-token cross-entropy of B sequences tokens[B, T+1] under global parameters theta
 * (all tensors in param_id order, row-major); *moe (may be NULL) gets the experts' figures. */
double ref_loss(const model_shape *s, const double *theta, const int32_t *tokens, int64_t B,
                ref_moe *moe);
/* The training objective: the loss + aux_coef·aux + z_coef·z. */
double ref_objective(const model_shape *s, const double *theta, const int32_t *tokens, int64_t B);
#endif
