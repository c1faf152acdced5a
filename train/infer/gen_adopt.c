/* A checkpoint's model shape adopted for the flags not given (gen_cli.h): generate, its drafter
 * and serving open checkpoints through it. */
#include "train/infer/gen_cli.h"

#include "train/ckpt/ckpt.h"

int gen_adopt_ckpt_shape(config *c, mesh *m, const char *path, const int *given, char *err,
                         size_t errlen) {
    h5array *f = NULL;
    ckpt_meta k;
    int rc = h5array_open(&f, path, mesh_world_comm(m), err, errlen);
    if (rc == 0) rc = ckpt_meta_get(f, &k, err, errlen);
    h5array_close(f);
    if (rc < 0) return rc;
    int64_t *dst[GEN_SHAPE_FLAGS] = {&c->shape.L, &c->shape.D, &c->shape.N, &c->shape.K,
                                     &c->shape.H, &c->shape.F, &c->shape.V, &c->shape.T};
    const int64_t src[GEN_SHAPE_FLAGS] = {k.shape.L, k.shape.D, k.shape.N, k.shape.K,
                                          k.shape.H, k.shape.F, k.shape.V, k.shape.T};
    for (int i = 0; i < GEN_SHAPE_FLAGS; i++)
        if (!given[i]) *dst[i] = src[i];
    if (c->shape.moe.E == 0) c->shape.moe = k.shape.moe; /* no --experts: the checkpoint's */
    c->optimizer = k.optimizer;                          /* generation reads no optimizer state */
    return ckpt_check_config(&k, c, path, err, errlen);
}
