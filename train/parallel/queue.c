/* queue: the sharded run's non-blocking calls in flight (gradient reductions of blocks and of
 * buckets, gathers of updated shards), oldest first, and their tickets (par_impl.h). Calls on
 * one mesh complete in the order they were started, so waiting for a ticket completes every
 * call before it; a completion adds an RS result into its shard gradient, or hands a bucket's
 * result to its blocks. */
#include <string.h>

#include "kernels/optim.h"
#include "train/parallel/par_impl.h"

int64_t queue_push(struct par *p, par_pending c) {
    par_queue *q = &p->q;
    if (q->n == PAR_MAX_PENDING) queue_drain(p);
    q->call[q->n++] = c;
    return queue_last(q);
}

void queue_wait(struct par *p, int64_t t) {
    par_queue *q = &p->q;
    if (t <= q->retired) return;
    const int count = (int)(t - q->retired < q->n ? t - q->retired : q->n);
    for (int i = 0; i < count; i++) {
        const par_pending *c = &q->call[i];
        mesh_wait(c->req);
        if (c->done)
            c->done(p, c->arg);
        else if (c->acc)
            kern_add(c->acc, c->out, c->n);
    }
    memmove(q->call, q->call + count, (size_t)(q->n - count) * sizeof q->call[0]);
    q->n -= count;
    q->retired += count;
}

void queue_drain(struct par *p) {
    queue_wait(p, queue_last(&p->q));
}
