/* passes: a step's memory passes by part. See passes.h. */
#include "train/observe/passes.h"

#include <string.h>

void pass_count_begin(pass_count *c) {
    memset(c->part, 0, sizeof c->part);
    kern_traffic_read(c->last);
}

void pass_count_charge(pass_count *c, step_part p) {
    int64_t now[KERN_PASS_COUNT];
    kern_traffic_read(now);
    for (int k = 0; k < KERN_PASS_COUNT; k++) c->part[p][k] += now[k] - c->last[k];
    memcpy(c->last, now, sizeof c->last);
}

void pass_count_total(const pass_count *c, int64_t floats[KERN_PASS_COUNT]) {
    for (int k = 0; k < KERN_PASS_COUNT; k++) {
        floats[k] = 0;
        for (int p = 0; p < PART_COUNT; p++) floats[k] += c->part[p][k];
    }
}

double pass_count_seconds(const pass_count *c, const double sec_per_float[KERN_PASS_COUNT],
                          double *part_seconds) {
    double total = 0;
    for (int p = 0; p < PART_COUNT; p++) {
        double s = 0;
        for (int k = 0; k < KERN_PASS_COUNT; k++) s += (double)c->part[p][k] * sec_per_float[k];
        if (part_seconds) part_seconds[p] = s;
        total += s;
    }
    return total;
}
