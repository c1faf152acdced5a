/* cost_serve: the book's serving formulas (see cost_serve.h). */
#include "mesh/cost_serve.h"

#include <math.h>

double cost_spec_tokens(double alpha, int k) {
    if (alpha >= 1.0) return (double)k + 1.0;
    return (1.0 - pow(alpha, (double)k + 1.0)) / (1.0 - alpha);
}

double cost_spec_speedup(double alpha, int k, double c_draft, double c_verify) {
    return cost_spec_tokens(alpha, k) / ((double)k * c_draft + c_verify);
}

int cost_spec_best_k(double alpha, double c_draft, double slope, int kmax, double *speedup) {
    int best = 1;
    double s_best = -1;
    for (int k = 1; k <= kmax; k++) {
        const double s = cost_spec_speedup(alpha, k, c_draft, 1.0 + slope * (double)k);
        if (s > s_best) s_best = s, best = k;
    }
    if (speedup) *speedup = s_best;
    return best;
}

double cost_kv_transfer(double bytes, int senders, int receivers, double bw_per_chip,
                        double latency) {
    const int n = senders < receivers ? senders : receivers;
    return latency + bytes / ((double)(n > 0 ? n : 1) * bw_per_chip);
}

double cost_prefill_servers(double batch, double generated, double t_prefill, double t_step) {
    return batch / generated * t_prefill / t_step;
}
