/* The memory line's activations against meshplan's: the trainer's plan lists every activation
 * buffer as model_create carves it (model_sizes_of), `meshplan --remat meshtrain` counts them
 * from the shapes alone (calc_meshtrain_acts). On the mesh given (argv: --mesh SPEC [--dp AXES]
 * [--tensor AXIS] [--kv-heads K]: 6 query heads, K kv heads, default 2), with fp32 compute against
 * --act-bytes 4 and bf16 compute against
 * --act-bytes 2, the two agree on every rank within the carver's alignment (at most 64 bytes a
 * buffer; a layer has fewer than 24 buffers, the slot fewer than 16) and a vocabulary shard's
 * column (V/|Y| need not be whole). bf16 compute keeps less than fp32: the products' inputs in
 * bf16 alone. --experts E [--expert AXIS]: every block's MLP a mixture of E experts (top-2, F_e
 * 48, a shared one; meshplan's MoE blocks are every block's), a MoE layer's buffers fewer than
 * 40. --cp AXIS: every sequence split over AXIS (T 24, whole zigzag chunks on 2 and 3 ranks) by
 * each algorithm in turn, allgather, ring and ulysses, against meshplan --cp AXIS --cp-alg, then
 * (without --experts) ring and ulysses on a mixture of 16 experts. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calc/calc.h"
#include "check.h"
#include "mesh/mesh.h"
#include "train/parallel/plan.h"
#include "train/step/trainer.h"

/* meshplan's JSON for config c on the mesh spec, at act_bytes (and gradients fp32 on the wire,
 * as meshtrain's --comm-dtype fp32 moves them): `meshtrain plan` with the trainer's flags;
 * malloc'd, NULL on a failure. */
static char *meshplan_json(const config *c, const char *spec, const char *dp, const char *tp,
                           int act_bytes) {
    char a[16][32];
    const char *flags[][2] = {{"--mesh", spec},     {"--dp", dp},
                              {"--tensor", tp},     {"--remat", "meshtrain"},
                              {"--format", "json"}, {"--zero", "0"},
                              {"--chip", "v5p"},    {"--expert", c->expert_axis},
                              {"--cp", c->cp_axis}, {"--cp-alg", c->cp_axis[0] ? c->cp_alg : ""},
                              {"--grad-bytes", "4"}};
    char *argv[64] = {"meshplan"};
    int argc = 1;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!flags[i][1][0]) continue;
        argv[argc++] = (char *)flags[i][0], argv[argc++] = (char *)flags[i][1];
    }
    const model_shape *s = &c->shape;
    const char *names[] = {"--layers",         "--d-model",    "--heads",   "--kv-heads",
                           "--head-dim",       "--d-ff",       "--vocab",   "--seq-len",
                           "--batch",          "--act-bytes",  "--experts", "--moe-top-k",
                           "--shared-experts", "--expert-d-ff"};
    const long long vals[] = {s->L,     s->D,     s->N,          s->K,           s->H,
                              s->F,     s->V,     s->T,          c->micro_batch, act_bytes,
                              s->moe.E, s->moe.k, s->moe.shared, s->moe.F};
    for (int i = 0; i < (s->moe.E ? 14 : 10); i++) {
        snprintf(a[i], sizeof a[i], "%lld", vals[i]);
        argv[argc++] = (char *)names[i], argv[argc++] = a[i];
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    const int rc = calc_run(argc, argv, out, stderr);
    fclose(out);
    if (rc == 0) return buf;
    free(buf);
    return NULL;
}

/* The number of "key" after the first `anchor` in the JSON (−1: none). */
static double json_num_after(const char *json, const char *anchor, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *a = json ? strstr(json, anchor) : NULL, *p = a ? strstr(a, k) : NULL;
    return p ? atof(p + strlen(k)) : -1;
}

/* The bytes this rank sends over the context axis a layer of pass `pass` (the plan's rows: a
 * ppermute sends its count, the others C − 1 blocks of it). */
static double plan_cp_sent(const plan *p, plan_pass pass) {
    double v = 0;
    for (int i = 0; i < p->ncall; i++) {
        const plan_call *c = &p->call[i];
        if (c->role != PLAN_ROLE_CP || c->pass != pass || c->kind == PLAN_CP_MOE_STATS) continue;
        const double n = c->op == MESH_OP_PPERMUTE ? 1 : (double)(p->cp.n - 1);
        v += n * (double)c->count * c->times * mesh_wire_bytes(c->wire);
    }
    return v;
}

/* Under --cp: what meshtrain's plan sends a layer against meshplan's row of the algorithm (the
 * backward's dK, dV and ulysses' dQ, dK, dV fp32 on the wire; K, V, and ulysses' Q, K, V, O and
 * dO, in bf16 with bf16 compute). */
static int check_cp_sent(const config *c, const plan *p, const char *json) {
    char row[48];
    snprintf(row, sizeof row, "{\"alg\": \"%s\", \"ok\"", c->cp_alg);
    int fail = 0;
    for (int b = 0; b < 2; b++) {
        const double got = plan_cp_sent(p, b ? PLAN_BWD : PLAN_FWD);
        const double want = json_num_after(json, row, b ? "sent_bwd" : "sent_fwd");
        fail |= check_expect(fabs(got - want) <= 1e-9 * want,
                             "  %s %s sends %.0f B a layer, meshplan's %s %.0f B", c->cp_alg,
                             b ? "backward" : "forward", got, b ? "sent_bwd" : "sent_fwd", want);
    }
    return fail;
}

/* The memory line's activations of c on m against meshplan's, fp32 then bf16 compute; 1 on a
 * difference past slack on any rank (or bf16 keeping no less than fp32). */
static int check(config *c, mesh *m, const char *spec, const char *dp, const char *tp,
                 double slack) {
    char err[512];
    int fail = 0;
    double got[2];
    for (int bf = 0; bf < 2; bf++) {
        c->compute = bf ? COMPUTE_BF16 : COMPUTE_FP32;
        trainer *t = trainer_create(c, m, err, sizeof err);
        if (!t) mesh_exit_error("%s", err);
        plan_mem_bytes mem;
        plan_memory(trainer_plan(t), &mem);
        got[bf] = (double)mem.bytes[PLAN_MEM_ACTIVATIONS];
        char *json = meshplan_json(c, spec, dp, tp, bf ? 2 : 4);
        const double want = json_num_after(json, "\"memory\"", "activations");
        if (c->cp_axis[0] && mesh_rank(m) == 0) fail |= check_cp_sent(c, trainer_plan(t), json);
        free(json);
        trainer_destroy(t);
        fail |= check_expect(want > 0 && fabs(got[bf] - want) <= slack,
                             "%s compute on %s%s%s: the memory line's activations %.0f B, meshplan "
                             "--remat meshtrain --act-bytes %d: %.0f B (difference %.0f, "
                             "alignment bound %.0f)",
                             bf ? "bf16" : "fp32", spec, c->cp_axis[0] ? " --cp-alg " : "",
                             c->cp_axis[0] ? c->cp_alg : "", got[bf], bf ? 2 : 4, want,
                             got[bf] - want, slack);
    }
    return fail |
           check_expect(got[1] < got[0], "bf16/fp32 activations %.3f (below 1)", got[1] / got[0]);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    char err[512], spec[32] = "", dp[8] = "", tp[8] = "", ex[8] = "", cp[4] = "";
    int64_t K = 2, E = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mesh")) snprintf(spec, sizeof spec, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--dp")) snprintf(dp, sizeof dp, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--tensor")) snprintf(tp, sizeof tp, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--kv-heads")) K = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--experts")) E = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--expert")) snprintf(ex, sizeof ex, "%s", argv[i + 1]);
        if (!strcmp(argv[i], "--cp")) snprintf(cp, sizeof cp, "%s", argv[i + 1]);
    }
    mesh *m = mesh_create(spec, NULL, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    check_quiet(mesh_rank(m) != 0);
    config c;
    config_defaults(&c);
    c.shape = (model_shape){.L = 3, .D = 48, .N = 6, .K = K, .H = 10, .F = 96, .V = 258, .T = 16};
    c.batch = 12, c.micro_batch = 12, c.steps = 1;
    c.quick_start = 1; /* numbers only */
    snprintf(c.data_axes, sizeof c.data_axes, "%s", dp);
    snprintf(c.tensor_axis, sizeof c.tensor_axis, "%s", tp);
    snprintf(c.expert_axis, sizeof c.expert_axis, "%s", ex);
    snprintf(c.cp_axis, sizeof c.cp_axis, "%s", cp);
    if (E > 0) c.shape.moe = (moe_shape){.E = E, .k = 2, .shared = 1, .every = 1, .F = 48};
    if (cp[0]) c.shape.T = 24;
    /* the carver's alignment, and a vocabulary shard one column off V/|Y| */
    const double slack = 64.0 * ((E ? 40 : 24) * c.shape.L + 16) + 4.0 * c.micro_batch * c.shape.T;
    static const char *const algs[] = {"allgather", "ring", "ulysses"};
    int fail = 0;
    for (int a = 0; a < (cp[0] ? 3 : 1); a++) {
        if (cp[0]) snprintf(c.cp_alg, sizeof c.cp_alg, "%s", algs[a]);
        fail |= check(&c, m, spec, dp, tp, slack);
    }
    if (cp[0] && !E) { /* and a mixture of 16 experts under the axis (its counters per piece,
                        * their statistics made whole: 13.8 kB on 3 ranks' zigzag, past the
                        * alignment bound): ring's zigzag, ulysses' one run */
        c.shape.moe = (moe_shape){.E = 16, .k = 2, .shared = 1, .every = 1, .F = 48};
        const double moe_slack = slack + 64.0 * 16 * c.shape.L;
        for (int a = 1; a < 3; a++) {
            snprintf(c.cp_alg, sizeof c.cp_alg, "%s", algs[a]);
            fail |= check(&c, m, spec, dp, tp, moe_slack);
        }
    }
    /* rank 0 prints; a check failed on another rank fails here too */
    check_expect(mesh_agree(mesh_world_comm(m), fail ? -1 : 0) == 0, "every rank's checks pass");
    mesh_destroy(m);
    const int rc = check_finish("test_act_bytes");
    mesh_mpi_finalize();
    return rc;
}
