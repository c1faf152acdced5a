/* config_cp: the rules of --cp AXIS and --cp-alg (context parallelism), in one place: the flag
 * alone (config_check_cp, from config_validate) and against the axis's size (config_check_cp_mesh,
 * from config_for_mesh). The axis shards the sequence and nothing else of its own; it joins the
 * data axes for the gradients' reduction and ZeRO's shards (a CP rank holds the same weights as
 * its neighbours and gradients of its own tokens), but it loads no batch of its own: the ranks of
 * the axis read the same sequences and each keeps its share of the tokens. */
#include <string.h>

#include "mesh/errmsg.h"
#include "train/config/config.h"

static const char *const alg_names[] = {"allgather", "ring", "ulysses"};

int config_cp_alg(const config *c) {
    for (int a = 0; a < 3; a++)
        if (strcmp(c->cp_alg, alg_names[a]) == 0) return a;
    return -1;
}

int config_cp_pieces(const config *c, int64_t n) {
    const int a = config_cp_alg(c);
    if (a != CONFIG_CP_ULYSSES && n > 0 && c->shape.T % (2 * n) == 0) return 2;
    return 1;
}

/* The other role an axis letter plays, or NULL. */
static const char *other_role(const config *c, char a) {
    if (strchr(c->data_axes, a)) return "--dp";
    if (c->tensor_axis[0] == a) return "--tensor";
    if (c->pipe_axis[0] == a) return "--pipeline";
    if (c->dcn_axis[0] == a) return "--dcn";
    return NULL; /* (--expert may be the context axis: its ranks hold different tokens) */
}

int config_check_cp(const config *c, char *err, size_t errlen) {
    if (!c->cp_axis[0]) return 0;
    const char *a = c->cp_axis;
    if (strlen(a) != 1 || (a[0] != 'x' && a[0] != 'y' && a[0] != 'z'))
        return errmsg_fail(err, errlen, "--cp %s: give one axis, x, y or z", a);
    if (config_cp_alg(c) < 0)
        return errmsg_fail(err, errlen,
                           "--cp-alg %s: unknown (expected allgather, ring or ulysses)", c->cp_alg);
    const char *role = other_role(c, a[0]);
    if (role)
        return errmsg_fail(err, errlen,
                           "--cp %s is also the %s axis: an axis is used twice; the context axis "
                           "shards the sequence only (it shares the gradients with --dp by "
                           "itself)",
                           a, role);
    const char *no = c->sample > 0 ? "--sample" : c->demo ? "--demo" : NULL;
    if (no)
        return errmsg_fail(err, errlen,
                           "--cp with %s is not implemented yet: context parallelism runs a "
                           "model (dense or with --experts) with --dp, --zero, --tensor and "
                           "--pipeline",
                           no);
    return 0;
}

int config_check_cp_mesh(const config *c, int64_t n, int wraps, int64_t nY, char *err,
                         size_t errlen) {
    if (!c->cp_axis[0]) return 0;
    const int alg = config_cp_alg(c);
    const int64_t T = c->shape.T;
    if (T % n)
        return errmsg_fail(err, errlen,
                           "--seq-len %lld is not divisible by |axis| = %lld (--cp %s of %lld "
                           "ranks, --cp-alg %s): every rank holds an equal share of each sequence",
                           (long long)T, (long long)n, c->cp_axis, (long long)n, c->cp_alg);
    if (alg == CONFIG_CP_RING && n > 2 && !wraps)
        return errmsg_fail(err, errlen,
                           "--cp-alg ring over %s, an open axis of %lld: the blocks go round the "
                           "ring, whose last hop is the wraparound link (drop --open %s, or use "
                           "--cp-alg allgather)",
                           c->cp_axis, (long long)n, c->cp_axis);
    if (alg != CONFIG_CP_ULYSSES) return 0;
    const int64_t Nl = c->shape.N / nY;
    int64_t k0, Kl; /* the kv heads of a tensor rank (the plan's rule) */
    model_tensor_kv_heads(&c->shape, nY, 0, &k0, &Kl);
    const int q = Nl % n != 0; /* the query heads, else the kv heads */
    if (q || (Kl % n && n % Kl))
        return errmsg_fail(err, errlen,
                           "--cp-alg ulysses: the %lld %s heads of a rank%s %s |%s| = %lld: %s "
                           "(use --cp-alg allgather or ring)",
                           (long long)(q ? Nl : Kl), q ? "query" : "kv",
                           nY > 1 ? " (after --tensor)" : "",
                           q ? "are not divisible by" : "neither divide nor are divided by",
                           c->cp_axis, (long long)n,
                           q ? "the AllToAll deals whole heads to the axis's ranks"
                             : "each rank's query heads must use whole kv heads, dealt out or "
                               "replicated");
    return 0;
}
