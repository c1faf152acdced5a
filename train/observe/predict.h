/* predict: the step predictor. It replays the order of one step's events on this rank — compute
 * stretches, blocking collectives, non-blocking collectives started and later waited for — with
 * predicted durations, and so predicts what may overlap what:
 *  - compute: the measured stretches between the caller's collectives, rescaled so that they sum
 *    to the predicted compute (their order and proportions are the program's; their total is the
 *    prediction's);
 *  - a blocking collective: the caller waits its predicted duration;
 *  - a non-blocking collective starts when it is issued (on the caller's predicted clock) or when
 *    the one before it in the queue ends, whichever is later (mesh runs them one at a time, in
 *    order: coll.h), and lasts its predicted duration;
 *  - a wait: the caller resumes when the awaited collective ends, if that is later.
 * The predicted step is the caller's clock at the end. Pure: no MPI, no I/O, no allocation.
 * Not collective. */
#ifndef MT_TRAIN_PREDICT_H
#define MT_TRAIN_PREDICT_H
#include <stdint.h>

typedef enum {
    PREDICT_BLOCKING, /* a blocking collective, on the caller's thread over [t0, t1] */
    PREDICT_ISSUE,    /* a non-blocking collective started at t0 */
    PREDICT_WAIT      /* the caller blocked in mesh_wait for call `seq` over [t0, t1] */
} predict_kind;

typedef struct {
    predict_kind kind;
    double t0, t1; /* measured, on the caller's clock (ISSUE: t1 unused) */
    int64_t seq;   /* ISSUE, WAIT: the call's sequence number */
    double dur;    /* BLOCKING, ISSUE: predicted duration of the collective, seconds */
    double lat;    /* BLOCKING, ISSUE: the part of dur that is hop latency */
} predict_event;

typedef struct {
    double step;            /* predicted step */
    double compute;         /* predicted compute (the input) */
    double comm;            /* Σ predicted durations of the collectives */
    double exposed;         /* step − compute: predicted time the caller is blocked */
    double exposed_latency; /* the part of `exposed` due to hop latency (in proportion lat/dur) */
    const char *dominant;   /* "compute", "bandwidth" or "latency": the largest of compute,
                               exposed − exposed_latency and exposed_latency */
} predict_result;

/* Sorts ev[0..n) by t0 (in place) and replays the step [t_begin, t_end] with compute_pred seconds
 * of compute, as above. Events outside the step are ignored; a wait for a call not issued in the
 * step costs nothing. */
void predict_replay(predict_event *ev, int n, double t_begin, double t_end, double compute_pred,
                    predict_result *out);

/* The rows of the experts' calls on the step's critical path: rows[q·stride + 1 + i] is rank q's
 * i-th grouped-expert call's rows and rows[q·stride] how many calls it made (of nranks ranks;
 * at most kept ≤ stride − 1 kept, later ones added to the last; the rest of a rank's stride is
 * not read). A MoE block's return AllToAll waits for the rank whose experts took the most rows,
 * so call i counts the most any rank ran in it; when the ranks made different numbers of calls
 * (ranks of different pipeline stages, which hold different blocks) the caller's own rows,
 * `mine` (laid out as one rank's in rows), are counted. Returns the sum. */
double predict_expert_rows(const float *rows, int nranks, int stride, int kept,
                           const float *mine);
#endif
