/* disagg_cli: disaggregated serving on two meshes (see disagg_cli.h). */
#include "train/serve/disagg_cli.h"

#include <stdio.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"

enum { DISAGG_ERR = 512 };

/* The prefill side's mesh: N/Yp replicas over p, Yp tensor ranks over t (an axis of 1 left out). */
static void prefill_spec(int64_t nprefill, int64_t yp, char *spec, size_t len) {
    const long long r = (long long)(nprefill / yp);
    if (yp == 1)
        snprintf(spec, len, "p=%lld", r);
    else if (r == 1)
        snprintf(spec, len, "t=%lld", (long long)yp);
    else
        snprintf(spec, len, "p=%lld,t=%lld", r, (long long)yp);
}

mesh *disagg_split(const config *c, int64_t nprefill, int64_t yp, mesh **own) {
    char err[DISAGG_ERR] = "";
    mesh *m = mesh_create(NULL, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    const int W = mesh_nranks(m);
    if (nprefill % yp)
        mesh_exit_error("--prefill-tensor %lld does not divide --prefill-ranks %lld: the prefill "
                        "side is whole replicas of --prefill-tensor ranks",
                        (long long)yp, (long long)nprefill);
    if (nprefill >= W)
        mesh_exit_error("--prefill-ranks %lld: fewer than the %d ranks, so that some decode",
                        (long long)nprefill, W);
    if (c->mesh_open[0] || c->cross_hosts[0])
        mesh_exit_error("--prefill-tensor splits the ranks into the prefill side's mesh and the "
                        "decode side's --mesh: --open and --cross-hosts do not go with it");
    char spec[64];
    prefill_spec(nprefill, yp, spec, sizeof spec);
    const int pre = mesh_rank(m) < nprefill;
    *own = mesh_split(m, pre ? 0 : 1, pre ? spec : c->mesh, err, sizeof err);
    if (mesh_agree_msg(mesh_world_comm(m), *own ? 0 : -1, err, sizeof err) < 0)
        mesh_exit_error("--prefill-ranks %lld: the decode side's %lld ranks as --mesh: %s",
                        (long long)nprefill, (long long)(W - nprefill), err);
    return m;
}

void disagg_side_config(const config *c, int64_t nprefill, int64_t yp, int prefill, config *sc) {
    *sc = *c;
    if (!prefill) return;
    prefill_spec(nprefill, yp, sc->mesh, sizeof sc->mesh);
    snprintf(sc->tensor_axis, sizeof sc->tensor_axis, "%s", yp > 1 ? "t" : "");
    /* the routed experts over the side's replicas (its axis p) when the decode side shards them */
    snprintf(sc->expert_axis, sizeof sc->expert_axis, "%s",
             c->expert_axis[0] && nprefill / yp > 1 ? "p" : "");
    sc->data_axes[0] = '\0';
}

/* Collective over: w. The replicas of the side of the last world rank (the decode side's), from
 * its mesh's data axes: on every rank. */
static int32_t decode_replicas(const config *c, mesh *w, mesh *own) {
    float in = 0, out = 0;
    if (mesh_rank(w) == mesh_nranks(w) - 1) {
        char axes[CONFIG_AXES_LEN];
        mesh_axes dax;
        config_data_axes(c, own, axes);
        in = mesh_axes_parse(own, axes, &dax) == 0 ? (float)mesh_axes_size(own, dax) : 1.0f;
    }
    const mesh_axes all = {.n = 1, .ax = {0}};
    mesh_all_reduce(w, all, &out, &in, 1, MESH_ALG_MPI);
    return (int32_t)out;
}

serve_engine *disagg_open(const config *c, mesh *w, mesh *own, int64_t nprefill, int64_t yp,
                          int kv_replicate, const char *ckpt, batch_opts *o) {
    char err[DISAGG_ERR] = "", why[DISAGG_ERR] = "";
    const int pre = mesh_rank(w) < nprefill;
    config sc;
    disagg_side_config(c, nprefill, yp, pre, &sc);
    const int32_t rp = (int32_t)(nprefill / yp), rd = decode_replicas(&sc, w, own);
    /* (past K each side's own layout: the AllToAll one's pools, or with kv_replicate the heads
     * replicated; kvroute routes between them) */
    const engine_dims d = {
        o->kv_blocks, o->kv_block, o->max_batch_tokens, pre ? 0 : rp, rp + rd, kv_replicate, 0};
    serve_engine *e = engine_create(&sc, own, &d, why, sizeof why);
    int rc = e ? 0 : -1;
    if (rc == 0 && ckpt[0])
        rc = ckpt_load_params(engine_model(e), engine_par(e), own, ckpt, why, sizeof why);
    if (rc < 0 && pre)
        snprintf(err, sizeof err, "the prefill side (%lld ranks, --prefill-tensor %lld): %s",
                 (long long)nprefill, (long long)yp, why);
    else if (rc < 0)
        snprintf(err, sizeof err, "the decode side (%d ranks, --mesh %s): %s", mesh_nranks(own),
                 c->mesh[0] ? c->mesh : "-", why);
    if (mesh_agree_msg(mesh_world_comm(w), rc, err, sizeof err) < 0) mesh_exit_error("%s", err);
    engine_link(e, w);
    o->replicas = rp + rd;
    o->prefill_replicas = rp;
    o->prefill_shards = engine_replica_pools(e, 0);
    CHECK(o->shards == engine_replica_pools(e, rp), "disagg: %d pools a decode replica, not %d",
          (int)engine_replica_pools(e, rp), (int)o->shards);
    return e;
}

void disagg_print(const config *c, const batch_opts *o, const serve_engine *e, int64_t nprefill,
                  int64_t yp) {
    if (!o->prefill_replicas) return;
    fprintf(stderr,
            "serve | disaggregated: replicas 0-%d (%lld ranks) prefill, replicas %d-%d decode; "
            "each request's KV blocks go from its prefill replica's ranks to its decode "
            "replica's, point to point\n",
            (int)o->prefill_replicas - 1, (long long)nprefill, (int)o->prefill_replicas,
            (int)o->replicas - 1);
    if (yp)
        fprintf(stderr,
                "serve | prefill side: ranks 0-%lld, %d replicas of tensor %lld | decode side: "
                "ranks %lld-%d as --mesh %s, %d replicas of tensor %lld | the KV blocks move by "
                "kv head between the two\n",
                (long long)nprefill - 1, (int)o->prefill_replicas, (long long)yp,
                (long long)nprefill, mesh_world_size() - 1, c->mesh[0] ? c->mesh : "-",
                (int)(o->replicas - o->prefill_replicas),
                (long long)engine_replica_tensor(e, o->prefill_replicas));
}
