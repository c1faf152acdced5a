/* traffic: the per-thread counts of the memory passes. See traffic.h. */
#include "kernels/traffic.h"

#ifdef KERN_TRAFFIC_PER_PROCESS
static int64_t floats[KERN_PASS_COUNT];
#else
static _Thread_local int64_t floats[KERN_PASS_COUNT];
#endif

void kern_traffic_count(kern_pass k, int64_t n) {
    floats[k] += n;
}

void kern_traffic_read(int64_t out[KERN_PASS_COUNT]) {
    for (int k = 0; k < KERN_PASS_COUNT; k++) out[k] = floats[k];
}

const char *kern_pass_name(kern_pass k) {
    static const char *const n[KERN_PASS_COUNT] = {"copy", "clear", "add"};
    return k >= 0 && k < KERN_PASS_COUNT ? n[k] : "?";
}
