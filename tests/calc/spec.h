/* spec: the starting point of the calculator tests' specs: the defaults, chip `chip` (from the
 * chip table) with its links, topology sizes[n] and model m. Depends on calc/calc.h and calc/calc_infer.h. */
#ifndef MT_TESTS_CALC_SPEC_H
#define MT_TESTS_CALC_SPEC_H
#include "calc/calc.h"
#include "calc/calc_infer.h"

/* Prints "FAIL topology: ..." and exits 1 when calc_spec_set_topology refuses sizes[n]. */
calc_spec test_spec(const char *chip, const int *sizes, int n, const model_shape *m);
/* calc_compute(s); prints "FAIL calc_compute: ..." and exits 1 when it refuses s. */
calc_result test_run(const calc_spec *s);
/* calc_infer(s, o); prints "FAIL calc_infer: ..." and exits 1 when it refuses them. */
calc_infer_result test_infer_run(const calc_spec *s, const calc_infer_opt *o);
#endif
