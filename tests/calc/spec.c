/* spec: see spec.h. */
#include "spec.h"

#include <stdio.h>
#include <stdlib.h>

calc_spec test_spec(const char *chip, const int *sizes, int n, const model_shape *m) {
    calc_spec s;
    char err[256];
    calc_spec_defaults(&s);
    s.chip = *cost_chip_find(chip);
    s.link = cost_chip_link(&s.chip);
    if (calc_spec_set_topology(&s, sizes, n, err, sizeof err) < 0) {
        printf("FAIL topology: %s\n", err);
        exit(1);
    }
    s.shape = *m;
    return s;
}

calc_result test_run(const calc_spec *s) {
    calc_result r;
    char err[256];
    if (calc_compute(s, &r, err, sizeof err) < 0) {
        printf("FAIL calc_compute: %s\n", err);
        exit(1);
    }
    return r;
}

calc_infer_result test_infer_run(const calc_spec *s, const calc_infer_opt *o) {
    calc_infer_result r;
    char err[256];
    if (calc_infer(s, o, &r, err, sizeof err) < 0) {
        printf("FAIL calc_infer: %s\n", err);
        exit(1);
    }
    return r;
}
