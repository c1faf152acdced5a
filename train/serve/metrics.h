/* metrics: the serving counters, gauges and latency histograms, and their Prometheus text
 * exposition (GET /metrics). Names follow Prometheus conventions (seconds, _total counters,
 * cumulative _bucket{le} histograms with _sum and _count). Not thread-safe: the caller holds its
 * lock. Pure. */
#ifndef MT_TRAIN_SERVE_METRICS_H
#define MT_TRAIN_SERVE_METRICS_H
#include <stdint.h>
#include <stdio.h>

#include "train/serve/kvblocks.h"
#include "train/serve/batcher.h"

#define METRICS_BUCKETS 16

typedef struct {
    int64_t count[METRICS_BUCKETS + 1]; /* per bucket (not cumulative); the last is +Inf */
    double sum;
    int64_t n;
} metrics_hist;

typedef enum {
    METRICS_END_LENGTH,
    METRICS_END_STOP,
    METRICS_END_CANCELLED, /* the client went away */
    METRICS_END_ERROR,     /* ended by the server (shutting down) */
    METRICS_END_REJECTED,  /* refused before it ran: bad request, queue full, shutting down */
    METRICS_ENDS
} metrics_end;

typedef struct {
    int64_t requests[METRICS_ENDS];
    int64_t prompt_tokens, generation_tokens;
    metrics_hist ttft, tpot, e2e, queue;
    /* gauges, refreshed by the serving loop */
    int64_t running, waiting;
    kvb_counts kv; /* summed over the replicas */
    batch_counts sched;
    double step_seconds;      /* summed over steps */
    double step_book_seconds; /* the book's price of those steps (the report's prediction) */
    /* speculative decoding: drafted tokens, those kept, the rounds that rejected one */
    int64_t spec_drafted, spec_kept, spec_rejected;
    /* disaggregated serving: requests whose KV blocks were shipped, their bytes (every rank's),
     * rank 0's time moving them */
    int64_t kv_transfers, kv_transfer_bytes;
    double kv_transfer_seconds;
} serve_metrics;

void metrics_observe(metrics_hist *h, double seconds);
/* The whole exposition into f. */
void metrics_write(FILE *f, const serve_metrics *m);
#endif
