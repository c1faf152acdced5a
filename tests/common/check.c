/* check: see check.h. */
#include "check.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int failures, quiet;

void check_quiet(int q) {
    quiet = q != 0;
}

int check_expect(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!quiet || !ok) { /* a quiet rank still says what failed, with its numbers */
        printf("%-4s ", ok ? "ok" : "FAIL");
        vprintf(fmt, ap);
        printf("\n");
    }
    va_end(ap);
    failures += !ok;
    return !ok;
}

void check_count_failure(void) {
    failures++;
}

int check_finish(const char *test) {
    if (!quiet) printf("%s: %d failure%s\n", test, failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

double check_worst_dev(const float *a, const float *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / (FLT_EPSILON * (fabs(a[i]) + fabs(b[i]) + 1));
        w = d > w ? d : w;
    }
    return w;
}
