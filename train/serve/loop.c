/* loop: the serving loop's step on every rank (see loop.h). The plan goes out as two broadcasts:
 * a header (kind and sizes), then the items, tokens and block tables packed in one buffer. */
#include "train/serve/loop.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/bcast.h"
#include "train/serve/spec_engine.h"

int serve_loop_init(batch_plan *p, serve_wire *w, const batch_opts *o) {
    if (batch_plan_init(p, o) < 0) return -1;
    w->cap = (int64_t)p->cap_items * (int64_t)sizeof(batch_item) +
             ((int64_t)p->cap_tok + p->cap_tab + p->cap_xtab) * (int64_t)sizeof(int32_t) +
             (int64_t)p->cap_xfer * (int64_t)sizeof(batch_xfer);
    w->buf = malloc((size_t)w->cap);
    w->next = calloc((size_t)p->cap_items * (size_t)(o->draft_tokens + 1), sizeof *w->next);
    w->counts = calloc((size_t)p->cap_items, sizeof *w->counts);
    w->spec = NULL;
    w->lp = calloc((size_t)p->cap_items * (size_t)(o->draft_tokens + 1) *
                       (1 + 2 * BATCH_TOP_LOGPROBS_MAX),
                   sizeof *w->lp);
    return w->buf && w->next && w->counts && w->lp ? 0 : -1;
}

void serve_loop_free(batch_plan *p, serve_wire *w) {
    batch_plan_free(p);
    free(w->buf), free(w->next), free(w->counts), free(w->lp);
    w->buf = NULL, w->next = w->counts = NULL, w->lp = NULL;
}

/* Collective over: world. Rank 0's plan into p on every rank. */
static void send_plan(mesh *m, batch_plan *p, serve_wire *w) {
    const mesh_comm *world = mesh_world_comm(m);
    int32_t head[6] = {p->kind, p->nitems, p->ntok, p->ntab, p->nxfer, p->nxtab};
    mesh_bcast_bytes(world, head, sizeof head, 0);
    CHECK(head[1] <= p->cap_items && head[2] <= p->cap_tok && head[3] <= p->cap_tab &&
              head[4] <= p->cap_xfer && head[5] <= p->cap_xtab,
          "serve: a plan of %d items, %d tokens, %d table entries, %d transfers exceeds this "
          "rank's buffers",
          (int)head[1], (int)head[2], (int)head[3], (int)head[4]);
    struct {
        void *at;
        size_t n;
    } part[5] = {{p->items, (size_t)head[1] * sizeof(batch_item)},
                 {p->tok, (size_t)head[2] * sizeof(int32_t)},
                 {p->tab, (size_t)head[3] * sizeof(int32_t)},
                 {p->xfer, (size_t)head[4] * sizeof(batch_xfer)},
                 {p->xtab, (size_t)head[5] * sizeof(int32_t)}};
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        if (mesh_rank(m) == 0) memcpy(w->buf + off, part[i].at, part[i].n);
        off += part[i].n;
    }
    if (head[0] == BATCH_PLAN_STEP) mesh_bcast_bytes(world, w->buf, (int64_t)off, 0);
    if (mesh_rank(m) != 0) {
        p->kind = head[0], p->nitems = head[1], p->ntok = head[2], p->ntab = head[3];
        p->nxfer = head[4], p->nxtab = head[5];
        off = 0;
        for (int i = 0; i < 5; i++) {
            memcpy(part[i].at, w->buf + off, part[i].n);
            off += part[i].n;
        }
    }
}

int32_t serve_loop_step(serve_engine *e, mesh *m, batcher *s, batch_plan *p, serve_wire *w,
                        batch_emit_fn emit, void *ctx, gen_step *st) {
    if (st) memset(st, 0, sizeof *st);
    if (s && batcher_step(s, p) == 0) return 0;
    send_plan(m, p, w);
    if (p->kind != BATCH_PLAN_STEP) return -1;
    serve_spec *sp = e ? engine_spec(e) : w->spec;
    if (e) w->xfer = engine_transfer(e, p);
    if (sp)
        serve_spec_step(sp, p, w->next, w->counts, w->lp, st);
    else
        engine_step(e, p, w->next, w->lp, st);
    if (s) batcher_commit_counts(s, p, w->next, sp ? w->counts : NULL, w->lp, emit, ctx);
    return p->nitems;
}

void serve_loop_exit(mesh *m, batch_plan *p, serve_wire *w) {
    p->kind = BATCH_PLAN_EXIT;
    p->nitems = p->ntok = p->ntab = p->nxfer = p->nxtab = 0;
    send_plan(m, p, w);
}
