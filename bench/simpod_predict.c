/* simpod-predict: re-computes the prediction columns of meshbench CSV rows (predicted_s,
 * meas_over_pred) with the current cost model (mesh/cost.h) for a chip's slice, so that a table
 * of simulated times made before a change of the model shows the model as it is now. Runs on the
 * host, like simpod-platform.
 *
 *   simpod-predict --chip v5p --topology 4x4x4 < meshbench.csv > out.csv
 *
 * A row's prediction is meshbench's: the algorithm as mesh_alg_resolve gives it (mpi and default:
 * the book's model; seq and multi over one axis: bidir), V = size (AllToAll: size × the set's
 * ranks), the axes' wraparound by the chip's rule, the chip's link constants.
 *
 * With --pods N [--dcn-bw X] (the platform of simpod --pods): x is the pods' axis and the
 * topology's axes are y, z. A row over x alone is priced as the calculator prices the DCN: a ring
 * of the pods (wrapping when N > 2) on links of X/2 bytes/s each way (X: bytes/s per chip, default
 * cost_chip_dcn_bw) and T_min per hop; rows mixing x with ICI axes get no prediction (0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/cost.h"

enum { MAXF = 24, COL_OP = 2, COL_AXES = 3, COL_ALG = 4, COL_TIME = 5, COL_PRED = 12 };

static int split(char *line, char **f) {
    int n = 0;
    for (char *p = line; n < MAXF; p++) {
        f[n++] = p;
        p = strchr(p, ',');
        if (!p) break;
        *p = 0;
    }
    return n;
}

static int op_of(const char *s) {
    static const char *names[] = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"};
    static const cost_op ops[] = {COST_OP_ALL_GATHER, COST_OP_REDUCE_SCATTER, COST_OP_ALL_REDUCE,
                                  COST_OP_ALL_TO_ALL};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return (int)ops[i];
    return -1;
}

int main(int argc, char **argv) {
    const char *chipname = NULL, *topology = NULL;
    int pods = 1;
    double dcn_bw = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--chip")) chipname = argv[i + 1];
        if (!strcmp(argv[i], "--topology")) topology = argv[i + 1];
        if (!strcmp(argv[i], "--pods")) pods = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--dcn-bw")) dcn_bw = atof(argv[i + 1]);
    }
    const cost_chip *chip = cost_chip_find(chipname);
    int sizes[COST_MAX_AXES] = {1, 1, 1}, n = 0;
    for (const char *p = topology; p && *p && n < COST_MAX_AXES; n++) {
        char *end;
        sizes[n] = (int)strtol(p, &end, 10);
        p = *end == 'x' ? end + 1 : end;
    }
    if (!chip || n < 1) {
        fprintf(stderr, "usage: simpod-predict --chip v5p --topology 4x4x4 [--pods N [--dcn-bw X]] "
                        "< IN.csv > OUT.csv\n");
        return 2;
    }
    const cost_link link = cost_chip_link(chip);
    const cost_link dcn = {(dcn_bw > 0 ? dcn_bw : cost_chip_dcn_bw(chip)) / 2, link.hop_latency};
    const int base = pods > 1 ? 'y' : 'x'; /* with pods, the slice's first axis is y */
    char line[4096];
    for (int row = 0; fgets(line, sizeof line, stdin); row++) {
        line[strcspn(line, "\n")] = 0;
        char copy[4096], *f[MAXF];
        snprintf(copy, sizeof copy, "%s", line);
        const int nf = split(copy, f);
        const int op = row ? op_of(f[COL_OP]) : -1;
        if (!row || nf <= COL_PRED + 1 || op < 0) {
            puts(line);
            continue;
        }
        int s[COST_MAX_AXES], w[COST_MAX_AXES], k = 0, ranks = 1, on_dcn = 0;
        for (const char *a = f[COL_AXES]; *a && k < COST_MAX_AXES; a++, k++) {
            const int ax = *a - base;
            if (pods > 1 && *a == 'x') {
                s[k] = pods, w[k] = pods > 2, on_dcn = 1;
            } else {
                s[k] = ax >= 0 && ax < n ? sizes[ax] : 1;
                w[k] = ax >= 0 && ax < n ? cost_axis_wraps(chip, sizes, n, ax) : 0;
            }
            ranks *= s[k];
        }
        int alg = mesh_alg_parse(f[COL_ALG]);
        if (alg < 0) alg = MESH_ALG_DEFAULT; /* MPI's and the default are priced as the book's */
        const double V = atof(f[0]) * (op == COST_OP_ALL_TO_ALL ? ranks : 1);
        double pred = 0;
        if (!on_dcn || k == 1)
            pred = cost_collective((cost_op)op, on_dcn ? &dcn : &link, s, w, k, (mesh_alg)alg, V,
                                   NULL);
        const double t = atof(f[COL_TIME]);
        for (int i = 0; i < nf; i++) {
            if (i == COL_PRED)
                printf(",%.6e", pred);
            else if (i == COL_PRED + 1)
                printf(",%.4f", pred > 0 ? t / pred : 0);
            else
                printf("%s%s", i ? "," : "", f[i]);
        }
        printf("\n");
    }
    return 0;
}
