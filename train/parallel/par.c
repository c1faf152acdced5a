/* par: the sharding plan's lifetime: the flags checked against the mesh and the model, the
 * layout computed (layout.c), the buffers every scheme needs allocated once, and the model's hook
 * table assembled from each scheme's entries (layout.c, zero.c, tensor.c, pipeline.c). */
#include <stdlib.h>
#include <string.h>

#include "train/config/alloc.h"
#include "train/config/errmsg.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- validation */

static int check_div(char *err, size_t errlen, const char *what, int64_t n, const char *by,
                     int64_t d) {
    if (d > 0 && n % d == 0) return 0;
    snprintf(err, errlen, "%s = %lld is not divisible by %s = %lld", what, (long long)n, by,
             (long long)d);
    return -1;
}

static int validate(struct par *p, const config *c, char *err, size_t errlen) {
    const model_shape *s = &p->s;
    mesh *m = p->m;
    char buf[64];
    int used[MESH_MAX_AXES] = {0};
    for (int k = 0; k < p->dax.n; k++) used[p->dax.ax[k]]++;
    if (p->pax.n) {
        const int a = p->pax.ax[0];
        if (used[a] || (p->tax.n && p->tax.ax[0] == a)) {
            snprintf(err, errlen,
                     "mesh axis %c is used twice: --pipeline shards the layers L_%c "
                     "and cannot also shard the batch or the model's width",
                     mesh_axis_name(m, a), mesh_axis_name(m, a) - 'a' + 'A');
            return -1;
        }
        used[a]++;
        snprintf(buf, sizeof buf, "|%c| (--pipeline)", mesh_axis_name(m, a));
        if (check_div(err, errlen, "layers L", s->L, buf, p->nZ)) return -1;
    }
    if (p->tax.n) {
        if (used[p->tax.ax[0]]) {
            snprintf(err, errlen,
                     "mesh axis %c is used twice: by --dp (batch B_%c) and by --tensor (D_%c, "
                     "F_%c): one axis can shard only one dimension of a tensor",
                     mesh_axis_name(m, p->tax.ax[0]), mesh_axis_name(m, p->tax.ax[0]),
                     mesh_axis_name(m, p->tax.ax[0]), mesh_axis_name(m, p->tax.ax[0]));
            return -1;
        }
        used[p->tax.ax[0]]++;
    }
    for (int a = 0; a < mesh_ndims(m); a++)
        if (!used[a] && mesh_axis_size(m, a) > 1) {
            snprintf(err, errlen,
                     "mesh axis %c (size %d) is used by none of --dp, --tensor, --pipeline: "
                     "every rank along it would repeat the same work; add it to --dp",
                     mesh_axis_name(m, a), mesh_axis_size(m, a));
            return -1;
        }
    if (p->zero > 0 && p->dax.n == 0)
        return errmsg_fail(err, errlen, "--zero needs data axes to shard over (--dp AXES)");
    if (p->nY > 1) {
        snprintf(buf, sizeof buf, "|%c| (--tensor)", mesh_axis_name(m, p->tax.ax[0]));
        if (check_div(err, errlen, "query heads N", s->N, buf, p->nY) ||
            check_div(err, errlen, "d_ff F", s->F, buf, p->nY) ||
            check_div(err, errlen, "vocabulary V", s->V, buf, p->nY) ||
            check_div(err, errlen, "d_model D (residual In[B, D_Y])", s->D, buf, p->nY))
            return -1;
        if (s->K >= p->nY) {
            if (check_div(err, errlen, "kv heads K", s->K, buf, p->nY)) return -1;
        } else if (check_div(err, errlen, "tensor axis size", p->nY, "kv heads K", s->K)) {
            return -1;
        }
    }
    if (p->zero > 0) {
        mesh_axes_str(m, p->dax, buf, sizeof buf);
        char by[160];
        snprintf(by, sizeof by, "|%s| (--dp, ZeRO shards D_%s)", buf, buf);
        if (check_div(err, errlen, "d_model D", s->D, by, p->nX)) return -1;
    }
    (void)c;
    return 0;
}

/* ---------------------------------------------------------------- create / destroy */

static int alloc_buffers(struct par *p) {
    const int64_t BT = p->cfg.micro_batch / p->nX * p->s.T, D = p->s.D;
    int64_t layer = 0, big = 0;
    for (int id = 0; id < P_COUNT; id++) {
        if (par_is_layer_param((param_id)id))
            layer += pgeo_block(&p->g[id]);
        else if (pgeo_block(&p->g[id]) > big)
            big = pgeo_block(&p->g[id]);
    }
    p->layer_elems = layer;
    int64_t packn = layer > big ? layer : big;
    int ok = 1;
    if (p->nY > 1) {
        int64_t tp = BT * D > 3 * BT * p->nY ? BT * D : 3 * BT * p->nY;
        if (p->s.V > tp) tp = p->s.V;
        ok &= (p->tp_a = alloc_floats(tp)) != NULL;
        ok &= (p->tp_b = alloc_floats(tp)) != NULL;
        ok &= (p->kvx = alloc_floats(D * p->s.H * p->nY)) != NULL;
    }
    ok &= (p->pack = alloc_floats(packn)) != NULL;
    if (p->zero >= 1) {
        p->sh_total = 0;
        for (int id = 0; id < P_COUNT; id++) {
            p->sh_off[id] = p->sh_total;
            p->sh_total += p->g[id].shard_n;
        }
        ok &= (p->sh_g = alloc_floats(p->sh_total)) != NULL;
        int64_t most = 0;
        for (int id = 0; id < P_COUNT; id++)
            most = p->g[id].shard_n > most ? p->g[id].shard_n : most;
        if (p->zero <= 2) ok &= (p->ustage = alloc_floats(most)) != NULL;
    }
    if (p->zero >= 2) {
        for (int k = 0; k < 2; k++) {
            ok &= (p->gbuf[k] = alloc_floats(layer)) != NULL;
            ok &= (p->gout[k] = alloc_floats(layer / p->nX)) != NULL;
        }
        for (int id = 0; id < P_COUNT; id++)
            if (!par_is_layer_param((param_id)id))
                ok &= (p->ngbuf[id] = alloc_floats(pgeo_block(&p->g[id]))) != NULL;
    }
    if (p->zero == 3) {
        for (int k = 0; k < 2; k++) {
            ok &= (p->wbuf[k] = alloc_floats(layer)) != NULL;
            ok &= (p->wstage[k] = alloc_floats(layer)) != NULL;
            p->wlayer[k] = -1;
        }
        ok &= (p->ebuf = alloc_floats(pgeo_block(&p->g[P_EMBED]))) != NULL;
        ok &= (p->hbuf_norm = alloc_floats(pgeo_block(&p->g[P_FINAL_NORM]))) != NULL;
        ok &= (p->hbuf_un = alloc_floats(pgeo_block(&p->g[P_UNEMBED]))) != NULL;
    }
    return ok ? 0 : -1;
}

par *par_create(const config *c, mesh *m, int *trivial, char *err, size_t errlen) {
    *trivial = 0;
    struct par *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->m = m;
    p->cfg = *c;
    p->s = c->shape;
    p->zero = c->zero;
    p->overlap = c->overlap;
    p->alg = MESH_ALG_DEFAULT;
    if (c->alg[0]) {
        int a = mesh_alg_parse(c->alg);
        if (a < 0) {
            snprintf(err, errlen, "--alg %s: unknown algorithm (ring, bidir, seq, multi, mpi)",
                     c->alg);
            free(p);
            return NULL;
        }
        p->alg = (mesh_alg)a;
    }
    const char *dp = c->data_axes;
    char all[MESH_MAX_AXES + 1] = {0};
    if (!dp[0]) { /* default: the batch over every axis that --tensor/--pipeline leave free */
        int n = 0;
        for (int a = 0; a < mesh_ndims(m); a++) {
            const char name = mesh_axis_name(m, a);
            if (c->tensor_axis[0] != name && c->pipe_axis[0] != name) all[n++] = name;
        }
        dp = all;
    }
    if (mesh_axes_parse(m, dp, &p->dax) != 0) {
        snprintf(err, errlen, "--dp %s: not a list of distinct mesh axes", dp);
        free(p);
        return NULL;
    }
    if (mesh_axes_parse(m, c->tensor_axis, &p->tax) != 0 || p->tax.n > 1) {
        snprintf(err, errlen, "--tensor %s: must name one mesh axis", c->tensor_axis);
        free(p);
        return NULL;
    }
    p->nX = mesh_axes_size(m, p->dax);
    p->xi = mesh_axes_index(m, p->dax);
    p->nY = mesh_axes_size(m, p->tax);
    p->yi = mesh_axes_index(m, p->tax);
    if (mesh_axes_parse(m, c->pipe_axis, &p->pax) != 0 || p->pax.n > 1) {
        snprintf(err, errlen, "--pipeline %s: must name one mesh axis", c->pipe_axis);
        free(p);
        return NULL;
    }
    p->nZ = mesh_axes_size(m, p->pax);
    p->zi = mesh_axes_index(m, p->pax);
    if (validate(p, c, err, errlen) != 0) {
        free(p);
        return NULL;
    }
    if (p->nX == 1 && p->nY == 1 && p->nZ == 1) {
        *trivial = 1;
        free(p);
        return NULL;
    }
    p->l0 = p->zi * (p->s.L / p->nZ);
    p->l1 = p->l0 + p->s.L / p->nZ;
    const int64_t M = c->microbatches > 0 ? c->microbatches : 1;
    p->nslots = p->nZ == 1 ? 1 : (int)(c->schedule == 1 && M > p->nZ ? p->nZ : M);
    if (p->nX == 1) p->zero = 0;
    par_layout_extents(p);
    par_layout_geometry(p);
    p->hooks = (model_hooks){.ctx = p};
    par_layout_hooks(&p->hooks);
    par_zero_hooks(&p->hooks);
    par_tensor_hooks(&p->hooks);
    par_pipeline_hooks(&p->hooks);
    int ok = alloc_buffers(p) == 0;
    if (mesh_agree(mesh_world_comm(m), ok ? 0 : -1) < 0) {
        snprintf(err, errlen, "out of memory allocating the sharding buffers");
        par_destroy(p);
        return NULL;
    }
    return p;
}

void par_destroy(par *p) {
    if (!p) return;
    par_drain(p);
    for (int k = 0; k < 2; k++) {
        free(p->wbuf[k]);
        free(p->wstage[k]);
        free(p->gbuf[k]);
        free(p->gout[k]);
    }
    for (int id = 0; id < P_COUNT; id++) free(p->ngbuf[id]);
    free(p->ebuf);
    free(p->hbuf_norm);
    free(p->hbuf_un);
    free(p->ustage); /* (zero 3's sh_p is the model's storage) */
    free(p->sh_g);
    free(p->tp_a);
    free(p->tp_b);
    free(p->kvx);
    free(p->pack);
    free(p);
}

const model_hooks *par_model_hooks(par *p) {
    return p ? &p->hooks : &model_hooks_single;
}

int64_t par_data_shards(const par *p) {
    return p ? p->nX : 1;
}
int64_t par_data_index(const par *p) {
    return p ? p->xi : 0;
}
