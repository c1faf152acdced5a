/* par: the sharding plan and its communication. This file holds the plan-independent routing of
 * the model hooks; with no plan (p == NULL) every hook is the single-rank version. */
#include "train/par.h"

#include <math.h>
#include <string.h>

#include "kernels/optim.h"
#include "train/model_par.h"

void mpar_local(struct par *p, const model_shape *s, par_local *out) {
    (void)p;
    mpar_local_full(s, out);
}

void mpar_slab(struct par *p, const model_shape *s, param_id id, param_slab *out) {
    (void)p;
    mpar_slab_full(s, id, out);
}

layer_w mpar_layer_weights(struct par *p, model *m, int64_t l) {
    (void)p;
    return mpar_layer_weights_local(m, l);
}

void mpar_layer_release(struct par *p, model *m, int64_t l) {
    (void)p, (void)m, (void)l;
}

layer_g mpar_layer_grads(struct par *p, model *m, int64_t l) {
    (void)p;
    return mpar_layer_grads_local(m, l);
}

void mpar_layer_grads_done(struct par *p, model *m, int64_t l) {
    (void)p, (void)m, (void)l;
}

void mpar_head_grads_done(struct par *p, model *m) {
    (void)p, (void)m;
}

void mpar_embed_grads_done(struct par *p, model *m) {
    (void)p, (void)m;
}

void mpar_sublayer_out(struct par *p, model *m, float *out, const float *xin, const float *act,
                       const float *w, int64_t BT, int64_t Kl) {
    (void)p;
    mpar_sublayer_out_local(out, xin, act, w, BT, Kl, model_shape_of(m)->D);
}

void mpar_embed_reduce(struct par *p, model *m, float *x, int64_t BT) {
    (void)p, (void)m, (void)x, (void)BT;
}

void mpar_xent_combine(struct par *p, model *m, float *stats, int64_t BT) {
    (void)p, (void)m, (void)stats, (void)BT;
}

void mpar_gather_vocab(struct par *p, model *m, float *logits, const float *logits_loc) {
    (void)p;
    memcpy(logits, logits_loc, (size_t)model_local(m)->Vl * sizeof(float));
}

const float *mpar_resid_grad_gather(struct par *p, model *m, float *full, float *dr, int64_t BT) {
    (void)p, (void)m, (void)full, (void)BT;
    return dr;
}

float *mpar_partial_begin(struct par *p, model *m, float *dr, float *part, int64_t BT) {
    (void)p, (void)m, (void)part, (void)BT;
    return dr;
}

void mpar_partial_end(struct par *p, model *m, float *dr, float *part, int64_t BT) {
    (void)p, (void)m, (void)dr, (void)part, (void)BT;
}

/* ---- step-level communication: single-rank versions ---- */

par *par_create(const config *c, mesh *m, int *trivial, char *err, size_t errlen) {
    (void)c, (void)m, (void)err, (void)errlen;
    *trivial = 1;
    return NULL;
}

void par_destroy(par *p) {
    (void)p;
}

int64_t par_data_shards(const par *p) {
    (void)p;
    return 1;
}

int64_t par_data_index(const par *p) {
    (void)p;
    return 0;
}

void par_finish_grads(par *p, model *m) {
    (void)p, (void)m;
}

double par_grad_sumsq(par *p, model *m) {
    (void)p;
    int64_t n;
    const float *g = model_grads_flat(m, &n);
    return kern_sumsq(g, n);
}

par_owned par_owned_slice(par *p, model *m, param_id id) {
    (void)p;
    int64_t n;
    float *w = model_param(m, id, &n);
    int64_t off = 0;
    for (int j = 0; j < (int)id; j++) {
        int64_t nj;
        model_param(m, (param_id)j, &nj);
        off += nj;
    }
    return (par_owned){w, model_grad(m, id, NULL), n, off};
}

int64_t par_state_size(par *p, model *m) {
    (void)p;
    int64_t n;
    model_params_flat(m, &n);
    return n;
}

void par_after_update(par *p, model *m) {
    (void)p, (void)m;
}

double par_data_mean(par *p, double v) {
    (void)p;
    return v;
}
