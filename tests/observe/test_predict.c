/* test_predict: the step predictor's replay (train/observe/predict.h) against steps worked by hand:
 * compute alone; a blocking collective; a non-blocking one hidden behind compute and one that
 * is not; two in the queue at once; a step with no compute stretch; events given out of order.
 * The compute model (train/step/ktime.h) times the linear layers of exactly 6·P·tokens FLOPs, P the
 * matmul parameters held (the unembedding only on the last stage), counted by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "train/step/ktime.h"
#include "train/observe/predict.h"

static void expect(const char *what, const predict_result *r, double step, double exposed,
                   double exposed_lat, double comm, const char *dominant) {
    const double tol = 1e-12;
    check_expect(fabs(r->step - step) < tol && fabs(r->exposed - exposed) < tol &&
                     fabs(r->exposed_latency - exposed_lat) < tol && fabs(r->comm - comm) < tol &&
                     strcmp(r->dominant, dominant) == 0,
                 "%s: step %g (want %g), exposed %g (%g), latency %g (%g), comm %g (%g), %s (%s)",
                 what, r->step, step, r->exposed, exposed, r->exposed_latency, exposed_lat, r->comm,
                 comm, r->dominant, dominant);
}

/* predict_replay of the n events ev over the step [0, t_end] with `compute` s of predicted
 * compute, checked against the result worked by hand. */
static void replay(const char *what, predict_event *ev, int n, double t_end, double compute,
                   double step, double exposed, double exposed_lat, double comm,
                   const char *dominant) {
    predict_result r;
    predict_replay(ev, n, 0, t_end, compute, &r);
    expect(what, &r, step, exposed, exposed_lat, comm, dominant);
}

int main(void) {
    replay("compute only: the predicted compute", NULL, 0, 10, 5, 5, 0, 0, 0, "compute");

    /* 8 s measured compute around a blocking call [4, 6] → scale 0.5: 2 + 1 + 2 */
    predict_event b[] = {{PREDICT_BLOCKING, 4, 6, 0, 1.0, 0.25}};
    replay("blocking call: compute + its predicted time", b, 1, 10, 4, 5, 1, 0.25, 1, "compute");

    /* issued at 2 for 3 s, waited for at [8, 9]: done at 5, long before T = 8 → hidden */
    predict_event h[] = {{PREDICT_WAIT, 8, 9, 7, 0, 0}, {PREDICT_ISSUE, 2, 0, 7, 3.0, 1.0}};
    replay("non-blocking call hidden behind compute (events out of order)", h, 2, 10, 9, 9, 0, 0, 3,
           "compute");

    /* the same call lasting 10 s: ends at 12, the caller waits 4 s (half of it latency) */
    predict_event x[] = {{PREDICT_ISSUE, 2, 0, 7, 10.0, 5.0}, {PREDICT_WAIT, 8, 9, 7, 0, 0}};
    replay("non-blocking call longer than the compute after it", x, 2, 10, 9, 13, 4, 2, 10,
           "compute");

    /* two 3 s calls issued at 1 and 2 run one after the other: [1, 4], [4, 7]; waited at 6 */
    predict_event q[] = {{PREDICT_ISSUE, 1, 0, 1, 3.0, 0},
                         {PREDICT_ISSUE, 2, 0, 2, 3.0, 0},
                         {PREDICT_WAIT, 6, 6, 1, 0, 0},
                         {PREDICT_WAIT, 6, 6, 2, 0, 0}};
    replay("the queue runs one call at a time", q, 4, 6, 6, 7, 1, 0, 6, "compute");

    /* a step that is all collective: the compute goes at the end; latency dominates */
    predict_event l[] = {{PREDICT_BLOCKING, 0, 2, 0, 3.0, 2.0}};
    replay("no compute stretch; a latency-bound call", l, 1, 2, 1, 4, 3, 2, 3, "latency");

    /* a wait for a call issued before the step, and an event after it: both ignored */
    predict_event o[] = {{PREDICT_WAIT, 1, 1, 99, 0, 0}, {PREDICT_BLOCKING, 11, 12, 0, 5, 0}};
    replay("waits for unknown calls and events after the step cost nothing", o, 2, 10, 2, 2, 0, 0,
           0, "compute");
    /* ktime: L=2 D=16 N·H=16 K·H=8 F=32 V=64, 3 sequences of 8 tokens, 2 micro-batches:
     * per layer D·NH + 2·D·KH + NH·D + 3·D·F = 256 + 256 + 256 + 1536 = 2304, D·V = 1024 */
    ktime_shape ks = {.L = 2,
                      .D = 16,
                      .H = 4,
                      .T = 8,
                      .Nl = 4,
                      .Kl = 2,
                      .Fl = 32,
                      .Vl = 64,
                      .seqs = 3,
                      .micro = 2,
                      .params = 1000,
                      .last = 1};
    ktime_step kt;
    const int rc = ktime_measure(&ks, 1e-4, &kt);
    check_expect(rc == 0 && kt.matmul_flops == 6.0 * (2 * 2304 + 1024) * 48,
                 "ktime: linear-layer FLOPs %.0f = 6·(2·2304 + 1024)·48 = %.0f", kt.matmul_flops,
                 6.0 * (2 * 2304 + 1024) * 48);
    check_expect(kt.matmul > 0 && kt.attention > 0 && kt.elementwise > 0 && kt.optimizer > 0 &&
                     kt.total == kt.matmul + kt.attention + kt.elementwise + kt.optimizer,
                 "ktime: every part timed, total = their sum (%.3g s)", kt.total);
    ks.last = 0;
    ktime_measure(&ks, 1e-4, &kt);
    check_expect(kt.matmul_flops == 6.0 * 2 * 2304 * 48,
                 "ktime: not the last stage: no unembedding (%.0f FLOPs)", kt.matmul_flops);
    return check_finish("test_predict");
}
