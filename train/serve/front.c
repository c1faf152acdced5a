#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* front: the request table and the serving loop's side of it (see front.h; the HTTP side is
 * http.c). */
#include "train/serve/front.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/mesh.h"
#include "train/serve/front_impl.h"

void front_req_unref(front_req *r) {
    if (--r->refs > 0) return;
    free(r->prompt), free(r->out), free(r->lp), free(r);
}

static void live_remove(serve_front *f, const front_req *r) {
    for (int64_t i = 0; i < f->nlive; i++)
        if (f->live[i] == r) {
            f->live[i] = f->live[--f->nlive];
            return;
        }
}

static front_req *live_find(serve_front *f, int64_t id) {
    for (int64_t i = 0; i < f->nlive; i++)
        if (f->live[i]->id == id) return f->live[i];
    return NULL;
}

static void incoming_remove(serve_front *f, const front_req *r) {
    for (front_req **at = &f->in_head, *prev = NULL; *at; prev = *at, at = &(*at)->next_in)
        if (*at == r) {
            *at = r->next_in;
            if (f->in_tail == r) f->in_tail = prev;
            f->nin--;
            return;
        }
}

/* The metrics of an ended request. */
static void account(serve_front *f, const front_req *r, batch_end end, int status) {
    serve_metrics *m = &f->met;
    const metrics_end e = status ? (r->t_admit > 0 ? METRICS_END_ERROR : METRICS_END_REJECTED)
                          : end == BATCH_END_STOP   ? METRICS_END_STOP
                          : end == BATCH_END_CANCEL ? METRICS_END_CANCELLED
                                                    : METRICS_END_LENGTH;
    m->requests[e]++;
    if (r->nout == 0) return;
    metrics_observe(&m->ttft, r->t_first - r->t_arrive);
    metrics_observe(&m->e2e, r->t_last - r->t_arrive);
    if (r->nout > 1) metrics_observe(&m->tpot, (r->t_last - r->t_first) / (double)(r->nout - 1));
}

void front_req_wake(front_req *r) {
    if (r->waiter) pthread_cond_signal(r->waiter);
}

void front_req_finish(serve_front *f, front_req *r, batch_end end, int status, const char *why) {
    if (r->state == REQ_DONE) return;
    if (r->state == REQ_INCOMING) incoming_remove(f, r);
    r->state = REQ_DONE;
    r->end = end;
    r->status = status;
    if (why) snprintf(r->error, sizeof r->error, "%s", why);
    if (r->cut > r->nout || end != BATCH_END_STOP) r->cut = r->nout;
    account(f, r, end, status);
    live_remove(f, r);
    front_req_wake(r);
    front_req_unref(r);
}

int front_req_enqueue(serve_front *f, front_req *r) {
    if (f->nlive == f->cap_live) {
        const int64_t cap = f->cap_live ? 2 * f->cap_live : 64;
        front_req **l = realloc(f->live, (size_t)cap * sizeof *l);
        if (!l) return -1;
        f->live = l, f->cap_live = cap;
    }
    f->live[f->nlive++] = r;
    r->state = REQ_INCOMING;
    r->next_in = NULL;
    if (f->in_tail)
        f->in_tail->next_in = r;
    else
        f->in_head = r;
    f->in_tail = r;
    f->nin++;
    pthread_cond_signal(&f->wake);
    return 0;
}

void front_req_cancel(serve_front *f, int64_t id) {
    if (f->ncancel == f->cap_cancel) {
        const int64_t cap = f->cap_cancel ? 2 * f->cap_cancel : 64;
        int64_t *c = realloc(f->cancel, (size_t)cap * sizeof *c);
        if (!c) return; /* the request then runs to its end */
        f->cancel = c, f->cap_cancel = cap;
    }
    f->cancel[f->ncancel++] = id;
    pthread_cond_signal(&f->wake);
}

/* ---------------------------------------------------------------- the serving loop's side */

static void refresh_gauges(serve_front *f, const batcher *s) {
    serve_metrics *m = &f->met;
    memset(&m->kv, 0, sizeof m->kv);
    for (int32_t i = 0; i < batcher_pools(s); i++) { /* every replica's, every shard's */
        const kvb_counts c = kvb_get_counts(batcher_pool(s, i));
        m->kv.total += c.total, m->kv.free += c.free, m->kv.used += c.used;
        m->kv.evictable += c.evictable, m->kv.published += c.published;
        m->kv.lookups += c.lookups, m->kv.hits += c.hits, m->kv.evictions += c.evictions;
    }
    m->sched = batcher_get_counts(s);
    m->running = batcher_running(s);
    m->waiting = f->nwaiting = batcher_waiting(s);
}

void front_sync(serve_front *f, batcher *s) {
    pthread_mutex_lock(&f->mu);
    while (f->in_head) {
        front_req *r = f->in_head;
        f->in_head = r->next_in;
        if (!f->in_head) f->in_tail = NULL;
        f->nin--;
        r->state = REQ_SCHEDULED;
        if (batcher_add(s, r->id, r->prompt, r->plen, r->max_new, &r->sp) < 0)
            front_req_finish(f, r, BATCH_END_NONE, 503, "out of memory queueing the request");
    }
    for (int64_t i = 0; i < f->ncancel; i++) {
        front_req *r = live_find(f, f->cancel[i]);
        if (r && batcher_cancel(s, r->id)) front_req_finish(f, r, BATCH_END_CANCEL, 0, NULL);
    }
    f->ncancel = 0;
    refresh_gauges(f, s);
    pthread_mutex_unlock(&f->mu);
}

batch_end front_emit(void *ctx, int64_t id, int32_t token, int64_t index, batch_end end,
                     const float *lp) {
    serve_front *f = ctx;
    pthread_mutex_lock(&f->mu);
    front_req *r = live_find(f, id);
    if (!r || r->gone) {
        if (r) front_req_finish(f, r, BATCH_END_CANCEL, 0, NULL);
        pthread_mutex_unlock(&f->mu);
        return BATCH_END_CANCEL;
    }
    const double now = mesh_now();
    if (index == 0) r->t_first = now;
    r->t_last = now;
    const size_t slot = 1 + 2 * (size_t)r->sp.top_logprobs;
    if (r->lp && lp) memcpy(r->lp + r->nout * slot, lp, slot * sizeof *lp);
    r->out[r->nout++] = (uint8_t)token;
    f->met.generation_tokens++;
    const int64_t at = text_stop_at_end(r->out, r->nout, &r->stops);
    if (at >= 0) {
        r->cut = (size_t)at;
        end = BATCH_END_STOP;
    }
    if (end != BATCH_END_NONE)
        front_req_finish(f, r, end, 0, NULL);
    else
        front_req_wake(r);
    pthread_mutex_unlock(&f->mu);
    return end == BATCH_END_STOP ? BATCH_END_STOP : BATCH_END_NONE;
}

void front_spec(void *ctx, int64_t id, int32_t drafted, int32_t kept) {
    serve_front *f = ctx;
    pthread_mutex_lock(&f->mu);
    front_req *r = live_find(f, id);
    const int rejected = kept < drafted;
    if (r) r->drafted += drafted, r->kept += kept, r->rejected += rejected;
    f->met.spec_drafted += drafted, f->met.spec_kept += kept, f->met.spec_rejected += rejected;
    pthread_mutex_unlock(&f->mu);
}

void front_transfers(serve_front *f, int32_t n, int64_t bytes, double seconds) {
    pthread_mutex_lock(&f->mu);
    f->met.kv_transfers += n, f->met.kv_transfer_bytes += bytes;
    f->met.kv_transfer_seconds += seconds;
    pthread_mutex_unlock(&f->mu);
}

void front_step_done(serve_front *f, const batch_plan *p, double seconds, double book) {
    pthread_mutex_lock(&f->mu);
    f->met.step_seconds += seconds, f->met.step_book_seconds += book;
    const double now = mesh_now();
    for (int32_t j = 0; j < p->nitems; j++) {
        front_req *r = live_find(f, p->items[j].id);
        if (r && r->t_admit == 0) {
            r->t_admit = now - seconds;
            f->met.prompt_tokens += r->plen;
            metrics_observe(&f->met.queue, r->t_admit - r->t_arrive);
        }
    }
    pthread_mutex_unlock(&f->mu);
}

void front_wait(serve_front *f, double seconds) {
    pthread_mutex_lock(&f->mu);
    if (!f->in_head && f->ncancel == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + seconds;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&f->wake, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
}

int64_t front_drain(serve_front *f, batcher *s) {
    pthread_mutex_lock(&f->mu);
    f->draining = 1;
    while (f->in_head)
        front_req_finish(f, f->in_head, BATCH_END_NONE, 503, "the server is shutting down");
    for (int64_t i = 0; i < f->nlive;) { /* queued in the scheduler but not running: refused */
        front_req *r = f->live[i];
        if (r->t_admit == 0 && batcher_cancel(s, r->id))
            front_req_finish(f, r, BATCH_END_NONE, 503, "the server is shutting down");
        else
            i++;
    }
    refresh_gauges(f, s);
    const int64_t running = batcher_running(s);
    pthread_mutex_unlock(&f->mu);
    return running;
}

void front_fail_all(serve_front *f, batcher *s, const char *why) {
    pthread_mutex_lock(&f->mu);
    f->draining = 1;
    while (f->nlive > 0) {
        front_req *r = f->live[0];
        if (s) batcher_cancel(s, r->id);
        front_req_finish(f, r, BATCH_END_NONE, 503, why);
    }
    if (s) refresh_gauges(f, s);
    pthread_mutex_unlock(&f->mu);
}

serve_metrics front_metrics(serve_front *f) {
    pthread_mutex_lock(&f->mu);
    const serve_metrics m = f->met;
    pthread_mutex_unlock(&f->mu);
    return m;
}
