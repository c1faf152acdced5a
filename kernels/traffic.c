/* traffic: the per-thread counts of the memory passes. See traffic.h. */
#include "kernels/traffic.h"

#ifdef KERN_TRAFFIC_PER_PROCESS
static int64_t floats[KERN_PASS_COUNT], rows[KERN_TRAFFIC_ROWS], calls;
#else
static _Thread_local int64_t floats[KERN_PASS_COUNT], rows[KERN_TRAFFIC_ROWS], calls;
#endif

void kern_traffic_rows(int64_t n) {
    rows[calls < KERN_TRAFFIC_ROWS ? calls : KERN_TRAFFIC_ROWS - 1] += n;
    calls++;
}

int64_t kern_traffic_rows_read(int64_t *out) {
    for (int i = 0; i < KERN_TRAFFIC_ROWS; i++) out[i] = rows[i];
    return calls;
}

void kern_traffic_rows_reset(void) {
    for (int i = 0; i < KERN_TRAFFIC_ROWS; i++) rows[i] = 0;
    calls = 0;
}

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
