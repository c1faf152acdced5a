/* front: the serving engine's face to clients, on rank 0 only. An HTTP server (libmicrohttpd, a
 * thread per connection) with an OpenAI-style API, JSON by jansson:
 *   POST /v1/completions  {"prompt", "max_tokens", "temperature", "top_k", "seed", "stop",
 *                          "n", "stream", "stream_options"}: the completion as one JSON object,
 *                          or with "stream": true as server-sent events (one per chunk of text,
 *                          the last with usage, then "data: [DONE]"; with "stream_options":
 *                          {"continuous_usage_stats": true} every chunk has usage, the tokens
 *                          so far, as vLLM's); n (at most 8) completions, choice i drawn with
 *                          seed + i, each a request of its own to the scheduler; "logprobs": N,
 *                          each token's log-probability and the N most likely;
 *   POST /v1/chat/completions  the same with "messages" for "prompt" (chat.h's template), as a
 *                          chat.completion, or chat.completion.chunk deltas;
 *   GET /health, GET /metrics (Prometheus text), GET /v1/models, GET / (a page to type a prompt
 *   and watch it stream).
 * Requests are checked when they arrive (400 with the reason: malformed JSON, a prompt past the
 * context, max_tokens too large, ...), queued up to --max-queue (503 past it), and handed to the
 * scheduler by the serving loop (front_sync), which calls front_emit for every token. A client
 * that goes away ends its request at the next step, and its blocks come back.
 *
 * Threads: the HTTP threads and the serving loop share the request table under one mutex; the
 * scheduler itself is touched only by the serving loop. Depends on batcher, text, metrics, mesh's
 * clock. */
#ifndef MT_TRAIN_SERVE_FRONT_H
#define MT_TRAIN_SERVE_FRONT_H
#include <stddef.h>
#include <stdint.h>

#include "train/serve/metrics.h"
#include "train/serve/batcher.h"

typedef struct serve_front serve_front;

typedef struct {
    char host[64];              /* IPv4 or IPv6 address, or "localhost" */
    int port;                   /* 0: any free port (front_port tells which) */
    int64_t max_queue;          /* requests waiting (not running) before 503 */
    int64_t vocab;              /* tokens are bytes below this */
    int64_t default_max_tokens; /* when the request has no max_tokens */
    double temperature;         /* defaults of the sampling fields */
    int64_t top_k;
    uint64_t seed;
    /* seconds a connection may stay silent before it is closed (0: 120), except while a request
     * of it waits in the queue or runs: its answer may be slow to start */
    unsigned idle_timeout;
} front_opts;

/* Not collective (rank 0). Listens on host:port; s is the scheduler the requests are checked
 * against (its options only, read from the HTTP threads). NULL with the reason in err. */
serve_front *front_create(const front_opts *o, const batcher *s, char *err, size_t errlen);
int front_port(const serve_front *f);
/* Ends every request left with an error, waits at most `linger` seconds for the answers of every
 * request to go out, stops listening (joining the HTTP threads) and frees. Accepts NULL. */
void front_destroy(serve_front *f, double linger);

/* ---- the serving loop's side (one thread) ---- */
/* Hands new requests to s, ends those whose clients left, refreshes the gauges. */
void front_sync(serve_front *f, batcher *s);
/* batch_emit_fn for batcher_commit (ctx = f): appends the token (and its log-probability record),
 * ends the request on a stop string or when its client left, wakes its HTTP thread. */
batch_end front_emit(void *ctx, int64_t id, int32_t token, int64_t index, batch_end end,
                     const float *lp);
/* batch_spec_fn for batcher_set_spec_fn (ctx = f): a drafting item's drafted and kept tokens,
 * counted for its request and in the metrics. */
void front_spec(void *ctx, int64_t id, int32_t drafted, int32_t kept);
/* After a step that shipped n requests' KV blocks (bytes over every rank; rank 0's seconds). */
void front_transfers(serve_front *f, int32_t n, int64_t bytes, double seconds);
/* After a step: the step's wall time and book price, and the admission time of requests
 * scheduled first. */
void front_step_done(serve_front *f, const batch_plan *p, double seconds, double book);
/* Waits until a request arrives or leaves, at most `seconds`. */
void front_wait(serve_front *f, double seconds);
/* Shutting down: from now on new requests, and those not yet running, get 503 and /health says
 * so. Returns the number of requests still running. */
int64_t front_drain(serve_front *f, batcher *s);
/* Ends every request left (running or queued) with a 503 error ("why"), removing it from s. */
void front_fail_all(serve_front *f, batcher *s, const char *why);
/* A copy of the metrics (the gauges as of the last front_sync). */
serve_metrics front_metrics(serve_front *f);
#endif
