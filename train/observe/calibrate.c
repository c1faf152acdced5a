/* calibrate: see calibrate.h. */
#include "train/observe/calibrate.h"

#include <stdio.h>
#include <stdlib.h>

/* A measured link's plausible one-way bandwidth (bytes/s): no memory copy moves 1 MiB in under
 * 10 µs, and a link slower than 1 MB/s is a timing gone wrong; the value assumed instead. */
#define CALIBRATE_W_MIN 1e6
#define CALIBRATE_W_MAX 1e11
#define CALIBRATE_W_FALLBACK 1e9

cost_link calibrate_axis(mesh *m, int axis) {
    const int64_t big = 1 << 18;
    float *a = calloc((size_t)big, sizeof(float)), *b = calloc((size_t)big, sizeof(float));
    double ts[5], tb[5];
    for (int rep = 0; rep < 5; rep++) {
        double t = mesh_now();
        for (int i = 0; i < 10; i++) mesh_ppermute(m, axis, 1, b, a, 1);
        ts[rep] = (mesh_now() - t) / 10;
        t = mesh_now();
        mesh_ppermute(m, axis, 1, b, a, big);
        tb[rep] = mesh_now() - t;
    }
    for (int i = 0; i < 5; i++) /* insertion sort, for the medians */
        for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
            double x = ts[j];
            ts[j] = ts[j - 1], ts[j - 1] = x;
        }
    for (int i = 0; i < 5; i++)
        for (int j = i; j > 0 && tb[j] < tb[j - 1]; j--) {
            double x = tb[j];
            tb[j] = tb[j - 1], tb[j - 1] = x;
        }
    /* the medians; on a loaded machine a busy moment can make the 1 MiB time no longer than the
     * 1-float one: then the best times (load only adds time), else a stated fallback */
    double w = tb[2] > ts[2] ? 4.0 * (double)big / (tb[2] - ts[2]) : 0;
    if (!(w >= CALIBRATE_W_MIN && w <= CALIBRATE_W_MAX))
        w = tb[0] > ts[0] ? 4.0 * (double)big / (tb[0] - ts[0]) : 0;
    if (!(w >= CALIBRATE_W_MIN && w <= CALIBRATE_W_MAX)) {
        fprintf(stderr,
                "meshtrain: note: rank %d: axis %c's link timing gave no bandwidth within "
                "[%.0e, %.0e] B/s (a loaded machine); the predictions assume %.0e B/s\n",
                mesh_world_rank(), mesh_axis_name(m, axis), CALIBRATE_W_MIN, CALIBRATE_W_MAX,
                CALIBRATE_W_FALLBACK);
        w = CALIBRATE_W_FALLBACK;
    }
    free(a);
    free(b);
    return (cost_link){.w_oneway = w, .hop_latency = ts[2] > 0 ? ts[2] : 1e-6};
}
