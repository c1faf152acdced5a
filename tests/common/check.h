/* check: the pass/fail bookkeeping of the tests that report from one process (kernels, train
 * units): one "ok"/"FAIL" line per check, a failure count, and the exit status. Callers that print
 * their own line (with numbers) count their failures here too; the worst deviation of two float
 * arrays in epsilons. Depends on nothing. */
#ifndef MT_TESTS_COMMON_CHECK_H
#define MT_TESTS_COMMON_CHECK_H
#include <stdint.h>

/* Prints "ok   <message>" or "FAIL <message>" and counts a failure when !ok. Returns 1 on
 * failure. */
int check_expect(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* quiet (an MPI test's ranks but the first): check_expect prints only its FAIL lines (so another
 * rank's failure shows its numbers), check_finish nothing; both count and return as before. */
void check_quiet(int quiet);
/* Counts a failure that the caller has reported itself. */
void check_count_failure(void);
/* Prints "<test>: N failure(s)"; returns the exit status: 0 if nothing failed, else 1. */
int check_finish(const char *test);
/* The worst deviation of a[n] from b[n] in float epsilons: max |a − b| / (FLT_EPSILON·(|a| + |b|
 * + 1)), for tolerances of k·FLT_EPSILON·(|a| + |b| + 1). */
double check_worst_dev(const float *a, const float *b, int64_t n);
#endif
