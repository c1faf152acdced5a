/* test_cpupeak: the MFU's measured peak from its start-up trials (cpupeak_measured), on trials
 * made up by hand (FLOP/s and the share of the CPU the timing thread had; nothing timed):
 *  - the best trial's rate, whatever the order; none: 0;
 *  - a trial during which another process took half the CPU counts at its rate while it ran
 *    (twice its wall-clock rate), but two ranks sharing a CPU (2 threads per CPU) get half of
 *    it: their trial at share 0.5 counts as measured, and a trial at share 1 is not lowered;
 *  - a share that is not known (0), 1, or below CPUPEAK_MIN_SHARE is not scaled;
 *  - a rate the run reached (a step) raises the peak: the start-up trials all came out low (the
 *    machine busy then) and every step's MFU against the result is at most 1; a lower one
 *    changes nothing. */
#include <math.h>

#include "check.h"
#include "train/observe/cpupeak.h"

static int near(double got, double want) {
    return fabs(got - want) <= 1e-9 * fabs(want);
}

int main(void) {
    const double G = 1e9;
    const cpupeak_trial plain[3] = {{50 * G, 1}, {80 * G, 1}, {60 * G, 1}};
    check_expect(near(cpupeak_measured(plain, 3, 1, 0), 80 * G), "the best of three trials: 80");
    check_expect(cpupeak_measured(plain, 0, 1, 0) == 0, "no trial, nothing seen: 0");

    const cpupeak_trial busy[2] = {{30 * G, 1}, {40 * G, 0.5}};
    check_expect(near(cpupeak_measured(busy, 2, 1, 0), 80 * G),
                 "a trial with half the CPU counts at its rate while it ran: 80, got %.1f",
                 cpupeak_measured(busy, 2, 1, 0) / G);
    check_expect(near(cpupeak_measured(busy, 2, 2, 0), 40 * G),
                 "two ranks a CPU: the same trial counts as measured: 40, got %.1f",
                 cpupeak_measured(busy, 2, 2, 0) / G);
    check_expect(near(cpupeak_measured(plain, 3, 2, 0), 80 * G),
                 "two ranks a CPU: a trial at share 1 is not lowered");
    const cpupeak_trial third[1] = {{30 * G, 1.0 / 3.0}};
    check_expect(near(cpupeak_measured(third, 1, 1.5, 0), 60 * G),
                 "a third of the CPU, 1.5 threads per CPU: 30 / (1/3) / 1.5 = 60, got %.1f",
                 cpupeak_measured(third, 1, 1.5, 0) / G);

    const cpupeak_trial odd[3] = {{20 * G, 0}, {25 * G, 0.1}, {10 * G, 1}};
    check_expect(near(cpupeak_measured(odd, 3, 1, 0), 25 * G),
                 "shares unknown (0) or below %.2f not scaled: 25, got %.1f", CPUPEAK_MIN_SHARE,
                 cpupeak_measured(odd, 3, 1, 0) / G);

    /* the steps of a run against a peak from trials that all came out low */
    const cpupeak_trial low[3] = {{40 * G, 1}, {42 * G, 1}, {41 * G, 1}};
    const double steps[4] = {49 * G, 52 * G, 50 * G, 51 * G}; /* the run's FLOP/s, step by step */
    double seen = 0, peak = cpupeak_measured(low, 3, 1, 0);
    for (int i = 0; i < 4; i++) seen = steps[i] > seen ? steps[i] : seen;
    const double raised = cpupeak_measured(low, 3, 1, seen);
    int all_le = 1;
    for (int i = 0; i < 4; i++) all_le &= steps[i] / raised <= 1.0;
    check_expect(peak < seen && near(raised, 52 * G) && all_le,
                 "start-up 42 below the steps' best 52: the peak 52, every step's MFU <= 1 "
                 "(was %.0f%% against 42)",
                 100.0 * steps[1] / peak);
    check_expect(near(cpupeak_measured(plain, 3, 1, 70 * G), 80 * G),
                 "a step below the measured peak changes nothing");
    /* the training loop's form: the running peak as one trial of unknown share, the step seen */
    const cpupeak_trial run_peak = {80 * G, 0};
    check_expect(near(cpupeak_measured(&run_peak, 1, 1, 90 * G), 90 * G) &&
                     near(cpupeak_measured(&run_peak, 1, 1, 60 * G), 80 * G),
                 "a running peak: raised by a faster step, kept by a slower one");
    return check_finish("test_cpupeak");
}
