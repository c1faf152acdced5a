/* boundary: the book's crossovers for the collectives a run actually put on the wire (see
 * boundary.h), and the book's own (report_book_boundaries, report.h) and the run's regime by
 * them (boundary_print_regime, report.h). */
#include "train/observe/boundary.h"

#include <math.h>

#include "train/observe/report.h" /* report_book_boundaries, boundary_print_regime */

double boundary_call_seconds(const int64_t *link_bytes, const double w_oneway[MESH_MAX_AXES],
                             mesh_alg alg) {
    const int at_once = alg == MESH_ALG_MULTI || alg == MESH_ALG_DIRECT;
    double t = 0;
    for (int a = 0; a < MESH_MAX_AXES; a++) {
        const int64_t up = link_bytes[2 * a], down = link_bytes[2 * a + 1],
                      b = up > down ? up : down;
        if (b <= 0 || !(w_oneway[a] > 0)) continue;
        const double ta = (double)b / w_oneway[a];
        if (at_once)
            t = ta > t ? ta : t;
        else
            t += ta;
    }
    return t;
}

double boundary_book_data_bytes(int zero, double params) {
    if (zero < 0 || zero > 3 || !(params > 0)) return -1;
    return (zero == 3 ? 3.0 : 2.0) * 2.0 * params;
}

double boundary_book_tensor_bytes(double layers, double tokens, double d_model) {
    if (!(layers > 0 && tokens > 0 && d_model > 0)) return -1;
    return layers * 2.0 * 2.0 * tokens * d_model;
}

double boundary_for_wire(double boundary_book, double wire_seconds, double book_bytes,
                         double w_oneway) {
    if (!(boundary_book > 0 && wire_seconds > 0 && book_bytes > 0 && w_oneway > 0)) return -1;
    return boundary_book * wire_seconds / (book_bytes / (2.0 * w_oneway));
}

double boundary_book_mixed_tokens(double alpha, double nX, double nY, int m_x, int m_y,
                                  double b_over_f, int mlp_mats) {
    if (!(alpha > 0 && nX > 0 && nY > 0 && b_over_f > 0) || m_x <= 0 || m_y <= 0 || mlp_mats <= 0)
        return -1;
    return alpha * (nX / m_x + 2.0 / mlp_mats * b_over_f * nY / m_y);
}

double boundary_mixed_for_wire(double tokens, double t_peak, double quad_share, double t_wire) {
    if (!(tokens > 0 && t_peak > 0 && quad_share > 0 && quad_share <= 1 && t_wire > 0)) return -1;
    const double s = (t_wire - (1 - quad_share) * t_peak) / (quad_share * t_peak);
    return s > 0 ? s * tokens : -1;
}

int report_book_boundaries(double C, double W, double wire_bytes, int n_data_axes, int64_t nY,
                           int mlp_mats, report_boundaries *out) {
    if (!(C > 0 && W > 0 && wire_bytes > 0) || n_data_axes < 1 || nY < 1 || mlp_mats < 1) return -1;
    const double alpha = C / W, aw = alpha * wire_bytes / 2.0;
    out->alpha = alpha;
    out->data_tokens = aw / n_data_axes;
    out->tensor_F = (double)nY * aw * 2.0 / mlp_mats;
    return 0;
}

void boundary_print_regime(double C, const cost_link *l, const char *source,
                           const report_case *k, FILE *out) {
    const double W = 2.0 * l->w_oneway, alpha = C / W;
    fprintf(out, "  regime: C = %.3g FLOP/s, W = %.3g B/s (%s) → α = C/W = %.0f\n", C, W, source,
            alpha);
    if (k->nX > 1) {
        const double bx = (double)k->tokens / (double)k->nX;
        fprintf(out, "    data/FSDP: B/X = %.0f tokens vs α/n_axes = %.0f → %s\n", bx,
                alpha / k->n_data_axes,
                bx > alpha / k->n_data_axes ? "compute-bound" : "communication-bound");
    }
    if (k->nY > 1) {
        const double ymax = (double)k->F / alpha;
        fprintf(out, "    tensor: |Y| = %lld vs n_axes·F/α = %.2f → %s\n", (long long)k->nY, ymax,
                (double)k->nY < ymax ? "compute-bound" : "communication-bound");
    }
    if (k->nX > 1 && k->nY > 1) {
        const double N = (double)(k->nX * k->nY),
                     thr = 4 * alpha * alpha / (k->n_data_axes * 1.0 * (double)k->F);
        fprintf(out,
                "    mixed FSDP+TP: B/N = %.0f vs 4α²/(M_X·M_Y·F) = %.0f → %s; "
                "X_opt = sqrt(B/F·M_X/M_Y·N) = %.2f\n",
                (double)k->tokens / N, thr,
                (double)k->tokens / N > thr ? "compute-bound" : "communication-bound",
                sqrt((double)k->tokens / (double)k->F * k->n_data_axes * N));
    }
}
