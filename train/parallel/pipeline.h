/* pipe: the pipeline axis's schedules shown as a timeline (the actions themselves: plan.h,
 * schedule.c; run by train/step/exec.c). Depends on the plan. */
#ifndef MT_TRAIN_PIPE_H
#define MT_TRAIN_PIPE_H
#include <stdint.h>
#include <stdio.h>

#include "train/parallel/plan.h"

/* The schedule as a text timeline (stage × time, F/B and micro-batch), from a unit-time
 * simulation of every stage's order (plan_stage_order). */
void pipe_timeline(pipe_schedule schedule, int64_t P, int64_t M, FILE *out);
#endif
