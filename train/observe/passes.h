/* passes: the memory passes a step makes (copies, clears, additions of float arrays, counted by
 * the helpers that make them on the calling thread: kernels/traffic.h), by part of the step
 * (parts.h), and their predicted time. The report (report.c) charges the floats the step's
 * thread touched since the last span switch to the part it leaves, as it charges its CPU time,
 * and prices them at the seconds per float of each kind that train/step/ktime.h timed at
 * start-up. Not collective; depends on kernels/traffic.h. */
#ifndef MT_TRAIN_PASSES_H
#define MT_TRAIN_PASSES_H
#include <stdint.h>

#include "kernels/traffic.h"
#include "train/observe/parts.h"

typedef struct {
    int64_t last[KERN_PASS_COUNT];             /* the thread's counts at the last charge */
    int64_t part[PART_COUNT][KERN_PASS_COUNT]; /* floats by part and kind since the start */
} pass_count;

/* Starts a step: no floats in any part, counting from the calling thread's counts now. */
void pass_count_begin(pass_count *c);
/* Charges the calling thread's floats since the last charge (or the start) to part p. */
void pass_count_charge(pass_count *c, step_part p);
/* The floats of every part by kind (into floats[KERN_PASS_COUNT]). */
void pass_count_total(const pass_count *c, int64_t floats[KERN_PASS_COUNT]);
/* The passes' predicted seconds, Σ floats × sec_per_float[kind]: by part into
 * part_seconds[PART_COUNT] (NULL: not wanted), and in total (returned). */
double pass_count_seconds(const pass_count *c, const double sec_per_float[KERN_PASS_COUNT],
                          double *part_seconds);
#endif
