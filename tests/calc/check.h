/* check: expected-vs-got helpers for the book's worked problems. Every check prints one line;
 * book answers are rounded, so each states its relative tolerance: |got − want| ≤ rtol·|want|. */
#ifndef MT_TESTS_CALC_CHECK_H
#define MT_TESTS_CALC_CHECK_H
#include <math.h>
#include <stdio.h>

static int check_failures;

static void check_near(const char *what, double got, double want, double rtol) {
    const int ok = fabs(got - want) <= rtol * fabs(want);
    printf("%-4s %-62s expected %-12.6g got %-12.6g (tol %g%%)\n", ok ? "ok" : "FAIL", what, want,
           got, rtol * 100);
    check_failures += !ok;
}

static void check_true(const char *what, int cond) {
    printf("%-4s %s\n", cond ? "ok" : "FAIL", what);
    check_failures += !cond;
}

static int check_report(const char *name) {
    printf("%s: %d failure%s\n", name, check_failures, check_failures == 1 ? "" : "s");
    return check_failures ? 1 : 0;
}
#endif
