/* spec_engine: speculative decoding in the serving engine (see spec_engine.h). */
#include "train/serve/spec_engine.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/rng.h"
#include "mesh/bcast.h"
#include "mesh/errmsg.h"
#include "train/infer/gen.h"
#include "train/infer/spec_rule.h"
#include "train/model/model.h"

struct serve_spec {
    serve_engine *e, *d;
    int32_t K;   /* most drafts of an item */
    int32_t cap; /* items of a plan */
    int64_t V;
    engine_seg *segs; /* one forward's segments [cap] */
    int32_t *dtok;    /* the drafter's first rows: lag token + the item's tokens [cap + rows] */
    int32_t *vtok;    /* the target's rows of a drafting item [cap, K + 1] */
    int32_t *drafts;  /* [cap, K] */
    double *q;        /* the drafter's distributions [cap, K, V] */
    double *work;     /* 2·V */
    sample_item *scratch;
    float *share_in, *share_out; /* per sampling item: count, then K + 1 tokens */
    /* the drafter on ranks of its own (serve_spec_remote): the drafts travel from world rank
     * ntarget (the drafter's first) to world ranks [0, ntarget) (the target's) */
    const mesh_comm *world;
    int me, ntarget;     /* this rank's world rank; the target's ranks */
    unsigned char *xbuf; /* the drafts of a step, packed */
};

void serve_spec_remote(serve_spec *sp, const mesh_comm *world, int me, int ntarget) {
    sp->world = world, sp->me = me, sp->ntarget = ntarget;
}

serve_spec *serve_spec_create(serve_engine *e, serve_engine *d, const batch_opts *o, char *err,
                              size_t errlen) {
    if (o->draft_tokens < 1) {
        errmsg_fail(err, errlen, "speculative decoding needs --draft-tokens >= 1");
        return NULL;
    }
    serve_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return NULL;
    sp->e = e, sp->d = d, sp->K = o->draft_tokens;
    sp->cap = o->replicas * o->max_seqs;
    sp->V = model_shape_of(engine_model(e ? e : d))->V;
    const size_t cap = (size_t)sp->cap, K = (size_t)sp->K, V = (size_t)sp->V;
    sp->segs = calloc(cap, sizeof *sp->segs);
    sp->dtok = calloc(cap + (size_t)o->max_batch_tokens, sizeof *sp->dtok);
    sp->vtok = calloc(cap * (K + 1), sizeof *sp->vtok);
    sp->drafts = calloc(cap * K, sizeof *sp->drafts);
    sp->q = calloc(cap * K * V, sizeof *sp->q);
    sp->work = calloc(2 * V, sizeof *sp->work);
    sp->scratch = calloc(V, sizeof *sp->scratch);
    sp->share_in = calloc(cap * (K + 2), sizeof *sp->share_in);
    sp->share_out = calloc(cap * (K + 2), sizeof *sp->share_out);
    sp->xbuf = malloc(cap * K * (sizeof *sp->drafts + V * sizeof *sp->q));
    if (!sp->segs || !sp->dtok || !sp->vtok || !sp->drafts || !sp->q || !sp->work || !sp->scratch ||
        !sp->share_in || !sp->share_out || !sp->xbuf) {
        serve_spec_destroy(sp);
        errmsg_fail(err, errlen, "out of memory for speculative decoding's buffers");
        return NULL;
    }
    return sp;
}

void serve_spec_destroy(serve_spec *sp) {
    if (!sp) return;
    free(sp->segs), free(sp->dtok), free(sp->vtok), free(sp->drafts), free(sp->q), free(sp->work);
    free(sp->scratch), free(sp->share_in), free(sp->share_out), free(sp->xbuf), free(sp);
}

/* Whether this rank runs item it: its replica's, or every item on a drafter of its own ranks. */
static int mine(const serve_spec *sp, const batch_item *it) {
    return !sp->e || it->replica == engine_replica(sp->e);
}

/* The drafts of plan p, and the drafter's distributions of the sampled items, to or from xbuf in
 * plan order (pack: 1 into the buffer, 0 out of it); returns the bytes. */
static int64_t pack_drafts(serve_spec *sp, const batch_plan *p, int pack) {
    int64_t off = 0;
    for (int32_t j = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        if (it->draft <= 0) continue;
        void *at[2] = {sp->drafts + (int64_t)j * sp->K, sp->q + (int64_t)j * sp->K * sp->V};
        const size_t n[2] = {(size_t)it->draft * sizeof *sp->drafts,
                             it->temperature > 0 ? (size_t)(it->draft * sp->V) * sizeof *sp->q : 0};
        for (int k = 0; k < 2; k++) {
            if (sp->xbuf && pack)
                memcpy(sp->xbuf + off, at[k], n[k]);
            else if (sp->xbuf)
                memcpy(at[k], sp->xbuf + off, n[k]);
            off += (int64_t)n[k];
        }
    }
    return off;
}

/* A drafter on ranks of its own: its first rank sends the step's drafts to every rank of the
 * target, point to point; the target's ranks take them in. */
static void exchange(serve_spec *sp, const batch_plan *p) {
    const int src = sp->ntarget;
    if (sp->me == src) {
        const int64_t n = pack_drafts(sp, p, 1);
        for (int t = 0; t < sp->ntarget && n > 0; t++)
            mesh_move_bytes(sp->world, sp->xbuf, n, src, t);
    } else if (sp->me < sp->ntarget) {
        unsigned char *buf = sp->xbuf;
        sp->xbuf = NULL; /* the bytes, from the plan alone */
        const int64_t n = pack_drafts(sp, p, 0);
        sp->xbuf = buf;
        if (n > 0) mesh_move_bytes(sp->world, sp->xbuf, n, src, sp->me);
        pack_drafts(sp, p, 0);
    }
}

/* The drafter's pick j of item j0 from the forward's wanted row r. */
static void pick(serve_spec *sp, int32_t j0, const batch_item *it, int32_t j, int64_t r) {
    const int64_t at = (int64_t)j0 * sp->K + j;
    sp->drafts[at] =
        spec_draft_pick(sp->q + at * sp->V, engine_row_logits(sp->d, r), sp->V, it->temperature,
                        it->top_k, it->seed, (uint64_t)it->tok_index, j, sp->scratch);
}

/* Steps 1 and 2: the drafter catches up on every item of this replica, then drafts. */
static void draft_phase(serve_spec *sp, const batch_plan *p) {
    int32_t nseg = 0, kmax = 0;
    int64_t off = 0;
    for (int32_t j = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        if (!mine(sp, it)) continue;
        const int32_t lag = it->p0 - it->d0;
        CHECK(lag == 0 || lag == 1, "spec: the drafter lags %d positions", (int)lag);
        int32_t *t = sp->dtok + off;
        if (lag) t[0] = it->dtok;
        memcpy(t + lag, p->tok + it->tok_off, (size_t)it->n * sizeof *t);
        sp->segs[nseg++] = (engine_seg){t,
                                        p->tab + it->tab_off,
                                        it->d0,
                                        it->n + lag,
                                        it->draft > 0 ? ENGINE_OUT_LAST : ENGINE_OUT_NONE,
                                        it->shard};
        off += it->n + lag;
    }
    for (int32_t j = 0; j < p->nitems; j++) /* every replica's: an expert axis joins them all */
        kmax = p->items[j].draft > kmax ? p->items[j].draft : kmax;
    engine_forward(sp->d, sp->segs, nseg, NULL);
    for (int32_t j = 0, r = 0; j < p->nitems; j++)
        if (mine(sp, &p->items[j]) && p->items[j].draft > 0) pick(sp, j, &p->items[j], 0, r++);
    for (int32_t i = 1; i < kmax; i++) {
        nseg = 0;
        for (int32_t j = 0; j < p->nitems; j++) {
            const batch_item *it = &p->items[j];
            if (mine(sp, it) && it->draft > i)
                sp->segs[nseg++] = (engine_seg){sp->drafts + (int64_t)j * sp->K + i - 1,
                                                p->tab + it->tab_off,
                                                it->p0 + i,
                                                1,
                                                ENGINE_OUT_LAST,
                                                it->shard};
        }
        engine_forward(sp->d, sp->segs, nseg, NULL);
        for (int32_t j = 0, r = 0; j < p->nitems; j++)
            if (mine(sp, &p->items[j]) && p->items[j].draft > i) pick(sp, j, &p->items[j], i, r++);
    }
}

/* Step 3: the target's forward; returns its rows. */
static int64_t verify_phase(serve_spec *sp, const batch_plan *p) {
    int32_t nseg = 0;
    int64_t rows = 0;
    for (int32_t j = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        if (!mine(sp, it)) continue;
        const int32_t *tok = p->tok + it->tok_off, *tab = p->tab + it->tab_off;
        if (it->draft > 0) {
            int32_t *v = sp->vtok + (int64_t)j * (sp->K + 1);
            v[0] = tok[0];
            memcpy(v + 1, sp->drafts + (int64_t)j * sp->K, (size_t)it->draft * sizeof *v);
            sp->segs[nseg++] =
                (engine_seg){v, tab, it->p0, it->draft + 1, ENGINE_OUT_ALL, it->shard};
        } else {
            sp->segs[nseg++] = (engine_seg){
                tok, tab, it->p0, it->n, it->sample ? ENGINE_OUT_LAST : ENGINE_OUT_NONE, it->shard};
        }
        rows += it->n + it->draft;
    }
    engine_forward(sp->e, sp->segs, nseg, NULL);
    return rows;
}

/* The log-probability records of item it's n tokens tok[0..n), the target's rows from r. */
static void records(serve_spec *sp, float *lp, const batch_item *it, int64_t r, const float *tok,
                    int32_t n) {
    for (int32_t i = 0; lp && it->logprobs && i < n; i++)
        engine_lp_record(sp->e, lp + i * batch_lp_floats(it), it, engine_row_logits(sp->e, r + i),
                         (int32_t)tok[i]);
}

/* Step 4: this replica's verdicts into the share buffer (count, tokens per sampling item), and
 * their log-probability records into lp (NULL: none asked). */
static int32_t decide(serve_spec *sp, const batch_plan *p, float *lp) {
    const int64_t slot = sp->K + 2;
    int32_t ns = 0;
    for (int32_t j = 0, r = 0; j < p->nitems; j++) {
        const batch_item *it = &p->items[j];
        if (!it->sample) continue;
        float *out = sp->share_in + (int64_t)ns++ * slot, *rec = lp;
        if (lp) lp += (it->draft + 1) * batch_lp_floats(it);
        memset(out, 0, (size_t)slot * sizeof *out);
        if (!mine(sp, it)) continue;
        if (it->draft > 0) {
            const int32_t *d = sp->drafts + (int64_t)j * sp->K;
            const spec_verdict v =
                spec_verify(engine_row_logits(sp->e, r), sp->q + (int64_t)j * sp->K * sp->V, d,
                            it->draft, sp->V, it->temperature, it->top_k, it->seed,
                            (uint64_t)it->tok_index, sp->work, sp->scratch);
            out[0] = (float)(v.accepted + 1);
            for (int32_t i = 0; i < v.accepted; i++) out[1 + i] = (float)d[i];
            out[1 + v.accepted] = (float)v.next;
            records(sp, rec, it, r, out + 1, v.accepted + 1);
            r += it->draft + 1;
        } else {
            const double u = kern_rng_uniform(it->seed, GEN_STREAM, (uint64_t)it->tok_index);
            out[0] = 1;
            out[1] = (float)sample_pick(engine_row_logits(sp->e, r), sp->V, it->temperature,
                                        it->top_k, u, sp->scratch);
            records(sp, rec, it, r++, out + 1, 1);
        }
    }
    return ns;
}

void serve_spec_step(serve_spec *sp, const batch_plan *p, int32_t *next, int32_t *counts, float *lp,
                     gen_step *st) {
    const int64_t nlp = lp ? batch_plan_lp_floats(p) : 0;
    const double t0 = mesh_now();
    CHECK(p->nitems <= sp->cap, "spec: a plan of %d items, more than %d", (int)p->nitems,
          (int)sp->cap);
    if (sp->d) draft_phase(sp, p);
    if (sp->world) exchange(sp, p);
    if (!sp->e) { /* the drafter's ranks: their part is done */
        if (st) *st = (gen_step){mesh_now() - t0, 0, 0, 0, 0};
        return;
    }
    const int64_t rows = verify_phase(sp, p);
    float *lp_in = nlp ? engine_lp_buffer(sp->e, nlp) : NULL;
    const int32_t ns = decide(sp, p, lp_in);
    const int64_t slot = sp->K + 2;
    engine_share(sp->e, sp->share_out, sp->share_in, ns * slot);
    if (nlp) engine_share(sp->e, lp, lp_in, nlp);
    for (int32_t k = 0, off = 0; k < ns; k++) {
        const float *in = sp->share_out + k * slot;
        counts[k] = (int32_t)in[0];
        for (int32_t i = 0; i < counts[k]; i++) next[off++] = (int32_t)in[1 + i];
    }
    if (st) *st = (gen_step){mesh_now() - t0, (double)rows, 0, 0, 0};
}
