/* metrics: the serving metrics and their Prometheus text (see metrics.h). */
#include "train/serve/metrics.h"

/* Upper bounds of the latency buckets, seconds: 1 ms to 60 s. */
static const double bounds[METRICS_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.075, 0.1,    0.25,  0.5,  1.0,   2.5,
                                               5.0,   10.0,   30.0,  60.0};

void metrics_observe(metrics_hist *h, double seconds) {
    int b = 0;
    while (b < METRICS_BUCKETS && seconds > bounds[b]) b++;
    h->count[b]++;
    h->sum += seconds;
    h->n++;
}

static void hist(FILE *f, const char *name, const char *help, const metrics_hist *h) {
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (int b = 0; b < METRICS_BUCKETS; b++) {
        cum += h->count[b];
        fprintf(f, "%s_bucket{le=\"%g\"} %lld\n", name, bounds[b], (long long)cum);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.9g\n%s_count %lld\n", name, (long long)h->n,
            name, h->sum, name, (long long)h->n);
}

static void one(FILE *f, const char *name, const char *type, const char *help, double v) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

void metrics_write(FILE *f, const serve_metrics *m) {
    static const char *ends[METRICS_ENDS] = {"length", "stop", "cancelled", "error", "rejected"};
    fprintf(f, "# HELP meshtrain_requests_total Requests ended, by how they ended.\n"
               "# TYPE meshtrain_requests_total counter\n");
    for (int i = 0; i < METRICS_ENDS; i++)
        fprintf(f, "meshtrain_requests_total{end=\"%s\"} %lld\n", ends[i],
                (long long)m->requests[i]);
    one(f, "meshtrain_prompt_tokens_total", "counter", "Prompt tokens of the requests admitted.",
        (double)m->prompt_tokens);
    one(f, "meshtrain_generation_tokens_total", "counter", "Tokens generated.",
        (double)m->generation_tokens);
    hist(f, "meshtrain_time_to_first_token_seconds", "From arrival to the first token.", &m->ttft);
    hist(f, "meshtrain_time_per_output_token_seconds",
         "Mean time between a request's tokens after the first (one value per request).", &m->tpot);
    hist(f, "meshtrain_e2e_request_latency_seconds", "From arrival to the last token.", &m->e2e);
    hist(f, "meshtrain_request_queue_seconds", "From arrival to admission (first scheduled).",
         &m->queue);
    one(f, "meshtrain_requests_running", "gauge", "Sequences in the running batch.",
        (double)m->running);
    one(f, "meshtrain_requests_waiting", "gauge", "Requests queued (preempted ones included).",
        (double)m->waiting);
    one(f, "meshtrain_kv_blocks_total", "gauge", "KV blocks of every replica.",
        (double)m->kv.total);
    one(f, "meshtrain_kv_blocks_used", "gauge", "KV blocks held by sequences.", (double)m->kv.used);
    one(f, "meshtrain_kv_blocks_free", "gauge",
        "KV blocks not held by a sequence (never used, released, or cached and evictable).",
        (double)(m->kv.free + m->kv.evictable));
    one(f, "meshtrain_kv_blocks_cached", "gauge", "KV blocks in the prefix cache (held or not).",
        (double)m->kv.published);
    one(f, "meshtrain_prefix_cache_queries_total", "counter", "Full blocks looked up.",
        (double)m->kv.lookups);
    one(f, "meshtrain_prefix_cache_hits_total", "counter", "Full blocks found in the cache.",
        (double)m->kv.hits);
    one(f, "meshtrain_prefix_cache_hit_tokens_total", "counter",
        "Prompt tokens taken from the cache instead of computed.", (double)m->sched.cached_tokens);
    one(f, "meshtrain_kv_evictions_total", "counter", "Cached blocks reclaimed.",
        (double)m->kv.evictions);
    one(f, "meshtrain_preemptions_total", "counter", "Sequences preempted (recomputed later).",
        (double)m->sched.preemptions);
    one(f, "meshtrain_padding_rows_total", "counter",
        "--batching static-padded: rows computed as padding (filler rows of padded prompts, "
        "finished rows run on to their batch's end).",
        (double)m->sched.padding_rows);
    one(f, "meshtrain_steps_total", "counter", "Engine steps run.", (double)m->sched.steps);
    one(f, "meshtrain_step_seconds_total", "counter", "Wall time of the engine steps (rank 0).",
        m->step_seconds);
    one(f, "meshtrain_step_book_seconds_total", "counter",
        "The book's roofline price of the engine steps, at the BW and C the server printed at "
        "start-up (the report lines' book figure).",
        m->step_book_seconds);
    one(f, "meshtrain_kv_transfers_total", "counter",
        "Disaggregated serving: requests whose KV blocks went from a prefill to a decode replica.",
        (double)m->kv_transfers);
    one(f, "meshtrain_kv_transfer_bytes_total", "counter",
        "Disaggregated serving: KV bytes shipped (every rank's shard).",
        (double)m->kv_transfer_bytes);
    one(f, "meshtrain_kv_transfer_seconds_total", "counter",
        "Disaggregated serving: time rank 0 spent moving KV blocks.", m->kv_transfer_seconds);
    one(f, "meshtrain_spec_draft_tokens_total", "counter",
        "Speculative decoding: tokens the drafter proposed.", (double)m->spec_drafted);
    one(f, "meshtrain_spec_accepted_tokens_total", "counter",
        "Speculative decoding: drafted tokens the target kept.", (double)m->spec_kept);
    one(f, "meshtrain_spec_rejected_tokens_total", "counter",
        "Speculative decoding: drafted tokens the target judged and rejected (at most one a "
        "round; the drafts after it are not judged).",
        (double)m->spec_rejected);
    const int64_t judged = m->spec_kept + m->spec_rejected;
    one(f, "meshtrain_spec_alpha", "gauge",
        "Speculative decoding: accepted / (accepted + rejected), the probability that a drafted "
        "token is kept (the alpha of (1 - alpha^(k+1))/(1 - alpha) tokens a target step).",
        judged ? (double)m->spec_kept / (double)judged : 0.0);
}
