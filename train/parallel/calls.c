/* calls: every collective of the sharded run, made by kind as the plan lists it (par_run,
 * par_start: the op, axes and algorithm are the plan's, the wire format the one in force,
 * par_in_step), counted by kind; and the step's agreements over the axes (sums and means of a
 * double, identical on every rank). Every file of train/parallel calls these; they call only the
 * mesh. */
#include <string.h>

#include "mesh/errmsg.h"
#include "train/parallel/par_impl.h"

/* ---------------------------------------------------------------- the collectives */

void par_in_step(par *p, int on) {
    if (p) p->wire = on ? p->pl->wire : MESH_WIRE_F32;
}

mesh_coll_call par_call(const struct par *p, plan_coll k, int64_t count) {
    mesh_coll_call c = plan_coll_call(p->pl, k, count);
    if (!plan_coll_wire_fixed(k)) c.wire = p->wire;
    return c;
}

void par_run(struct par *p, plan_coll k, float *out, const float *in, int64_t count) {
    const mesh_coll_call c = par_call(p, k, count);
    p->calls[k]++;
    mesh_coll_run(p->m, &c, out, in);
}

void par_run_v(struct par *p, plan_coll k, float *out, const float *in, const int64_t *counts) {
    const mesh_coll_call c = par_call(p, k, 0);
    p->calls[k]++;
    mesh_coll_run_v(p->m, &c, out, in, counts);
}

mesh_req *par_start_v(struct par *p, plan_coll k, float *out, const float *in,
                      const int64_t *counts) {
    const mesh_coll_call c = par_call(p, k, 0);
    p->calls[k]++;
    return mesh_coll_start_v(p->m, &c, out, in, counts);
}

double par_wait_hidden(mesh_req *r) {
    if (!r) return 0;
    mesh_call rec;
    const double blocked = mesh_wait_rec(r, &rec), hid = rec.t_end - rec.t_start - blocked;
    return hid > 0 ? hid : 0;
}

int64_t par_calls(const par *p, plan_coll k) {
    return p ? p->calls[k] : 0;
}

mesh_req *par_start(struct par *p, plan_coll k, float *out, const float *in, int64_t count) {
    const mesh_coll_call c = par_call(p, k, count);
    p->calls[k]++;
    return mesh_coll_start(p->m, &c, out, in);
}

void par_run_b(struct par *p, plan_coll k, uint16_t *out, const uint16_t *in, int64_t count) {
    const mesh_coll_call c = par_call(p, k, count);
    CHECK(c.op == MESH_OP_ALL_GATHER && count % 2 == 0, "par_run_b: kind %d, count %lld", (int)k,
          (long long)count);
    p->calls[k]++;
    mesh_all_gather_bf16(p->m, c.axes, out, in, count, c.alg);
}

mesh_req *par_start_b(struct par *p, plan_coll k, uint16_t *out, const uint16_t *in,
                      int64_t count) {
    const mesh_coll_call c = par_call(p, k, count);
    CHECK(c.op == MESH_OP_ALL_GATHER && count % 2 == 0, "par_start_b: kind %d, count %lld", (int)k,
          (long long)count);
    p->calls[k]++;
    return mesh_iall_gather_bf16(p->m, c.axes, out, in, count, c.alg);
}

/* ---------------------------------------------------------------- the step's agreements */

double par_allsum(struct par *p, mesh_axes a, double v) {
    const int n = mesh_axes_size(p->m, a);
    if (n == 1) return v;
    float mine[2], all[2 * 64];
    memcpy(mine, &v, sizeof v);
    CHECK(n <= 64, "allsum over %d ranks", n);
    mesh_all_gather(p->m, a, all, mine, 2, MESH_ALG_MPI);
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        double x;
        memcpy(&x, all + 2 * i, sizeof x);
        s += x;
    }
    return s;
}

double par_data_mean(par *p, double v) {
    if (!p) return v;
    /* the context axis's ranks hold equal shares of the same sequences' tokens */
    const double b = par_allsum(p, p->pl->batch.axes, v);
    return par_allsum(p, p->pl->cp.axes, b) / (double)(p->pl->batch.n * p->pl->cp.n);
}

double par_pipe_mean(par *p, double v) {
    return p && p->pl->pipe.n > 1 ? par_allsum(p, p->pl->pipe.axes, v) / (double)p->pl->pipe.n : v;
}

double par_pipe_last_value(par *p, double v) {
    if (!p) return v;
    return par_data_mean(p, par_allsum(p, p->pl->pipe.axes, v));
}
