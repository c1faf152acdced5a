/* memory: the plan's buffers, listed once. par_alloc_buffers allocates the list and par_memory
 * sums the same list, so the memory per rank that the plan prints is what was allocated:
 *   grads     the ZeRO gradient shards (shard_grads), beside the model's own gradients;
 *   gathered  ZeRO-3's gathered weights: two layer slots (and their column staging), the
 *             non-layer weights;
 *   buffers   everything else: the tensor axis's packing of [BT, D] and the kv-group exchange,
 *             the column packing of a block, ZeRO-1/2's staged shard, ZeRO-2/3's transient
 *             gradients of a layer (two slots) and their reduce-scatter results, the gradient
 *             buckets (bucket.c), --dcn's flat gradient (zero.c), the collective matmuls'
 *             scratch (tensor.c). */
#include <string.h>

#include "train/config/alloc.h"
#include "train/parallel/par_impl.h"

enum { MEM_BUFFERS, MEM_GATHERED, MEM_GRADS };

typedef struct {
    float **ptr;
    int64_t n; /* floats */
    int cat;
} pbuf;

#define PAR_MAX_BUFS (16 + P_COUNT)

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* The tensor axis's scratch and the column packing; sets p->layer_elems. */
static int list_common(struct par *p, pbuf *b, int n) {
    const int64_t BT = p->cfg.micro_batch / p->n_batch * p->s.T, D = p->s.D;
    int64_t layer = 0, big = 0;
    for (int id = 0; id < P_COUNT; id++) {
        if (par_is_layer_param((param_id)id))
            layer += pgeo_block(&p->g[id]);
        else
            big = max64(big, pgeo_block(&p->g[id]));
    }
    p->layer_elems = layer;
    if (p->n_tensor > 1) {
        const int64_t tp = max64(max64(BT * D, 3 * BT * p->n_tensor), p->s.V);
        b[n++] = (pbuf){&p->tensor_scratch_a, tp, MEM_BUFFERS};
        b[n++] = (pbuf){&p->tensor_scratch_b, tp, MEM_BUFFERS};
        b[n++] = (pbuf){&p->kv_exchange, D * p->s.H * p->n_tensor, MEM_BUFFERS};
    }
    b[n++] = (pbuf){&p->column_pack, max64(layer, big), MEM_BUFFERS};
    if (p->zero == 0 &&
        p->dcn_axes.n) { /* --dcn: the flat gradient padded to n_data shards, + a shard */
        int64_t all = 0;
        for (int id = 0; id < P_COUNT; id++) all += p->g[id].nb * pgeo_block(&p->g[id]);
        p->dcn_n = (all + p->n_data - 1) / p->n_data * p->n_data;
        b[n++] = (pbuf){&p->dcn_buf, p->dcn_n + p->dcn_n / p->n_data, MEM_BUFFERS};
    }
    return n;
}

/* ZeRO's shards and staging; sets p->shard_offset and p->shard_total. */
static int list_zero(struct par *p, pbuf *b, int n) {
    const int64_t layer = p->layer_elems;
    if (p->zero >= 1) {
        p->shard_total = 0;
        int64_t most = 0;
        for (int id = 0; id < P_COUNT; id++) {
            p->shard_offset[id] = p->shard_total;
            p->shard_total += p->g[id].shard_n;
            most = max64(most, p->g[id].shard_n);
        }
        b[n++] = (pbuf){&p->shard_grads, p->shard_total, MEM_GRADS};
        if (p->zero <= 2) /* --overlap: every shard, gathered after the update (zero.c) */
            b[n++] = (pbuf){&p->update_stage, p->overlap ? p->shard_total : most, MEM_BUFFERS};
    }
    if (p->zero >= 2) {
        for (int k = 0; k < 2; k++) {
            b[n++] = (pbuf){&p->layer_grads_full[k], layer, MEM_BUFFERS};
            b[n++] = (pbuf){&p->layer_grads_scattered[k], layer / p->n_data, MEM_BUFFERS};
        }
        for (int id = 0; id < P_COUNT; id++)
            if (!par_is_layer_param((param_id)id))
                b[n++] = (pbuf){&p->param_grads_full[id], pgeo_block(&p->g[id]), MEM_BUFFERS};
    }
    if (p->zero == 3) {
        for (int k = 0; k < 2; k++) {
            b[n++] = (pbuf){&p->gathered_layer[k], layer, MEM_GATHERED};
            b[n++] = (pbuf){&p->gather_stage[k], layer, MEM_GATHERED};
        }
        b[n++] = (pbuf){&p->gathered_embed, pgeo_block(&p->g[P_EMBED]), MEM_GATHERED};
        b[n++] = (pbuf){&p->gathered_final_norm, pgeo_block(&p->g[P_FINAL_NORM]), MEM_GATHERED};
        b[n++] = (pbuf){&p->gathered_unembed, pgeo_block(&p->g[P_UNEMBED]), MEM_GATHERED};
    }
    return n;
}

static int list_buffers(struct par *p, pbuf *b) {
    return list_zero(p, b, list_common(p, b, 0));
}

int par_alloc_buffers(struct par *p) {
    pbuf b[PAR_MAX_BUFS];
    const int n = list_buffers(p, b);
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= (*b[i].ptr = alloc_floats(b[i].n)) != NULL;
    if (p->zero == 3) p->gathered_layer_id[0] = p->gathered_layer_id[1] = -1;
    return ok ? 0 : -1;
}

void par_memory(par *p, model *mod, const config *c, par_mem *out) {
    memset(out, 0, sizeof *out);
    int64_t np;
    model_params_flat(mod, &np);
    out->params = 4 * np;
    out->grads = model_grads_flat(mod, NULL) ? 4 * np : 0;
    out->activations = model_activation_bytes(mod);
    const int64_t state = c->optimizer == OPT_ADAMW ? 2 : 0;
    out->optimizer = 4 * state * (p && p->zero ? p->shard_total : np);
    if (!p) return;
    pbuf b[PAR_MAX_BUFS];
    const int n = list_buffers(p, b);
    for (int i = 0; i < n; i++) {
        int64_t *to = b[i].cat == MEM_GRADS      ? &out->grads
                      : b[i].cat == MEM_GATHERED ? &out->gathered
                                                 : &out->buffers;
        *to += 4 * b[i].n;
    }
    out->buffers += 4 * p->cmatmul_n;
    if (p->bucket_cap > 0)
        out->buffers += 4 * 2 * (p->bucket_cap + (p->zero ? p->bucket_cap / p->n_data : 0));
    if (p->bucket_cap > 0 && p->zero == 3) out->gathered += 4 * 2 * (p->layer_elems / p->n_data);
}
