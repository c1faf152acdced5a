/* trainer: one optimizer step = this rank's actions (exec.c: the micro-batches' forwards and
 * backwards, gradients accumulated), gradient reduction over the data axes (par), global-norm
 * clipping, AdamW or SGD on the slices this rank owns, and the parameter AllGather that ZeRO-1/2
 * need after the update. */
#include "train/step/trainer.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/optim.h"
#include "mesh/errmsg.h"
#include "train/config/alloc.h"
#include "mesh/link.h"
#include "train/model/hooks.h"
#include "train/observe/trace.h"
#include "train/parallel/pipeline.h"
#include "train/step/exec.h"
#include "train/step/ktime.h"
#include "train/step/pipe_pred.h"
#include "train/step/precision.h"

struct trainer {
    config c; /* the run's (after config_for_mesh: the plan's) */
    mesh *mesh;
    plan pl;  /* the sharding plan: everything below that allocates or communicates reads it */
    par *par; /* the sharded run (NULL without communication) */
    model *mod;
    int64_t B_loc;   /* sequences this rank processes per step (all micro-batches) */
    int64_t Bl;      /* sequences per micro-batch on this rank */
    int64_t n_micro; /* micro-batches per step */
    int64_t row0;
    plan_ptrs opt; /* the optimizer's buffers of the plan (AdamW's moments) */
    float *opt_m, *opt_v;
    int64_t n_state;
    precision prec; /* --compute-dtype resolved: the matmuls' dtype, the bf16 path and context */
    double sgemm;   /* this rank's fp32 sgemm FLOP/s, measured at creation */
    double flops;   /* the rate its matmuls run at: sgemm's in fp32, the bf16 path's in bf16 */
    double core_share; /* this rank's thread CPU / wall time while it timed sgemm at start-up */
    cpupeak_trial sgemm_trials[CPUPEAK_TRIALS]; /* the trials sgemm is the best of */
    int n_sgemm_trials;
    report *rep;
    trace *tr; /* the run's timeline (trainer_set_trace; NULL: none), also the model's */
    mesh_emulation emu;
    int emulated;
    int dcn;            /* --dcn: the axis across the data-center network, −1 if none */
    double dcn_chip_bw; /* --emulate with --dcn: the chip's DCN B/s per chip (both directions) */
    exec *ex;           /* the step executor: this rank's list of actions */
    mesh_wire wire;     /* --comm-dtype (the plan's calls carry it) */
    ktime_step ktime;   /* the predicted compute of a step */
    pipe_pred_result pipe_sim[3]; /* pipelined: the table simulated (pipe_pred_measure's) */
    const cost_chip *bucket_chip; /* --bucket auto: whose T_min and W sized the buckets */
    int bucket_emulated;          /* ... the emulated chip's (else the book's, on real links) */
    int cmatmul_split;            /* --collective-matmul auto: the ranks' own verdicts differed */
};

/* --bucket auto: the hop latency of a bucket's reduction at most this share of its transfer */
#define TRAINER_BUCKET_OVERHEAD 0.1
/* --bucket auto on real links: the chip whose T_min and W size the buckets (the book's) */
#define TRAINER_BUCKET_CHIP "v5p"

/* bf16 compute: the weight elements a step rounds to bf16. Once per update, the parameters'
 * copy; under ZeRO-3 (weights.c), each bf16 gather's own shards of a layer's matrices, and the
 * gathered unembedding at each use (a micro-batch's forward and backward). A layer is gathered
 * unless its slot (l mod 2) still holds it: the first forward after the update gathers all L,
 * then each backward and each later forward finds the last two it used resident. */
static int64_t weight_packs(const plan *pl) {
    if (!plan_z3_bf16(pl)) return pl->param_elems;
    const int64_t L = pl->l1 - pl->l0, mb = pl->n_micro, regather = L > 2 ? L - 2 : 0;
    const int64_t gathers = L + (2 * mb - 1) * regather;
    const int64_t mats = pl->layer_elems - plan_geo_block(&pl->g[P_ATTN_NORM]) -
                         plan_geo_block(&pl->g[P_MLP_NORM]);
    const int last = pl->pipe.index == pl->pipe.n - 1;
    return gathers * (mats / pl->data.n) + (last ? 2 * mb * pl->s.D * pl->loc.Vl : 0);
}

/* Times this rank's kernels on its shapes (ktime.h), every rank at once. */
static int measure_compute(trainer *t) {
    const plan *pl = &t->pl;
    const model_extents *lc = &pl->loc;
    const model_shape *s = &t->c.shape;
    const ktime_shape ks = {.L = pl->l1 - pl->l0,
                            .D = s->D,
                            .H = s->H,
                            .T = s->T,
                            .Nl = lc->Nl,
                            .Kl = lc->Kl,
                            .Fl = lc->Fl,
                            .Vl = lc->Vl,
                            .seqs = pl->micro_seqs,
                            .micro = pl->n_micro,
                            .params = pl->state_elems,
                            .last = plan_holds_head(pl),
                            .threads = t->c.threads,
                            .bf16 = t->prec.ctx,
                            .wpack = weight_packs(pl),
                            .Lm = pl->moe_n,
                            .E = s->moe.E,
                            .k = s->moe.k,
                            .El = lc->El,
                            .Fel = lc->Fel,
                            .S = s->moe.shared};
    mesh_agree(mesh_world_comm(t->mesh), 0);
#ifdef MESHTRAIN_SMPI /* the dry run's kernels take simulated time (bench/simpod_kernels.c): */
    const int rc = ktime_measure(&ks, 0.0, &t->ktime); /* one call each is exact */
#else
    const int rc = ktime_measure(&ks, t->c.quick_start ? 0.0 : 2e-3, &t->ktime);
#endif
    /* --cp: timed on the whole sequences, of which this rank computes 1/|C| */
    if (rc == 0 && pl->cp.n > 1) ktime_scale_tokens(&t->ktime, 1.0 / (double)pl->cp.n);
    return rc;
}

double trainer_lr(const config *c, int64_t step) {
    if (c->warmup > 0 && step < c->warmup) return c->lr * (double)(step + 1) / (double)c->warmup;
    const int64_t decay = c->steps - c->warmup;
    if (decay <= 1) return c->lr;
    const double t = (double)(step - c->warmup) / (double)(decay - 1);
    const double cosv = 0.5 * (1.0 + cos(3.14159265358979323846 * (t > 1.0 ? 1.0 : t)));
    return c->min_lr + (c->lr - c->min_lr) * cosv;
}

/* Leaves trainer creation: destroys t (NULL allowed) and returns NULL with the message in err. */
static trainer *fail(trainer *t, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static trainer *fail(trainer *t, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errmsg_vfail(err, errlen, fmt, ap);
    va_end(ap);
    trainer_destroy(t);
    return NULL;
}

/* The link emulation of --emulate with `rate` (this rank's FLOP/s) standing for the chip's peak,
 * and the --dcn axis's emulated links; collective over: world. 0, or -1 with the message in err. */
static int emulate_at(trainer *t, double rate, char *err, size_t errlen) {
    const config *c = &t->c;
    mesh *m = t->mesh;
    mesh_emulation em;
    if (mesh_emulate(m, c->emulate, rate, &em, err, errlen) != 0) return -1;
    if (!em.one_host)
        mesh_log("warning: --emulate on several hosts: emulated delays rely on one shared clock "
                 "and will be off by the hosts' clock offsets\n");
    t->emu = em;
    t->emulated = 1;
    if (t->dcn >= 0) {
        /* the DCN axis: the chip's share of its host's DCN bandwidth, half each way, over a
         * switched network (a ring wraps); hop latency as the ICI's */
        t->dcn_chip_bw = cost_chip_dcn_bw(cost_chip_find(c->emulate));
        mesh_link_set(m, t->dcn, t->dcn_chip_bw / 2 / t->emu.time_scale, t->emu.latency);
        mesh_set_axis_wrap(m, t->dcn, 1);
    }
    return 0;
}

/* This rank's sgemm FLOP/s, the link emulation (--emulate) and the DCN axis (--dcn); 0, or -1
 * with the message in err. */
static int setup_links(trainer *t, char *err, size_t errlen) {
    const config *c = &t->c;
    mesh *m = t->mesh;
    /* this rank's sgemm FLOP/s, all ranks at once (ranks sharing cores measure their share),
     * best of CPUPEAK_TRIALS (a busy moment only lowers it; each trial's share of the CPU kept
     * for the MFU's peak, cpupeak_measured); under --emulate a rank stands for a chip
     * with a core of its own: the emulated links are scaled to that core's rate, which other
     * processes on the core do not lower (kern_measure_core_flops) */
    mesh_agree(mesh_world_comm(m), 0);
    const int64_t n = c->quick_start ? 256 : 1024;
    const double seconds = c->quick_start ? 0.01 : 0.1;
    const double w0 = mesh_now(), c0 = mesh_thread_cpu();
    for (int trial = 0; trial < (c->quick_start ? 1 : CPUPEAK_TRIALS); trial++) {
        const double tw = mesh_now(), tc = mesh_thread_cpu();
        const double f =
            c->emulate[0] ? kern_measure_core_flops(n, seconds) : kern_measure_flops(n, seconds);
        t->sgemm_trials[t->n_sgemm_trials++] =
            (cpupeak_trial){f, precision_share_since(tw, tc, !c->emulate[0] && c->threads <= 1)};
        if (f > t->sgemm) t->sgemm = f;
    }
    t->flops = t->prec.dtype == COMPUTE_BF16 ? t->prec.rate : t->sgemm;
    const double wall = mesh_now() - w0;
    t->core_share = wall > 0 ? (mesh_thread_cpu() - c0) / wall : 1.0;
    t->dcn = c->dcn_axis[0] ? mesh_axis_index(m, c->dcn_axis[0]) : -1;
    return c->emulate[0] ? emulate_at(t, t->flops, err, errlen) : 0;
}

double trainer_emulation_rate(config_rate mode, double peak, double matmul_flops,
                              double matmul_seconds) {
    if (mode == CONFIG_RATE_MODEL && matmul_flops > 0 && matmul_seconds > 0)
        return matmul_flops / matmul_seconds;
    return peak;
}

/* This rank's FLOPs in one step, by the book's count (shape_flops_per_token: the linear layers'
 * 6·P and causal attention per token), the global batch's shared over the ranks. */
static double step_flops_rank(const trainer *t) {
    const double ntok = (double)(t->c.batch * t->c.shape.T);
    return shape_flops_per_token(&t->c.shape) * ntok / (double)mesh_nranks(t->mesh);
}

/* --emulate-rate model: the links scaled again, now to the rate this model's linear layers reach
 * on this rank (measure_compute's kernels), so that the emulated chip runs the model's matmuls
 * at its peak; 0, or -1 with err. */
static int emulate_model_rate(trainer *t, char *err, size_t errlen) {
    if (!t->emulated || t->c.emulate_rate != CONFIG_RATE_MODEL) return 0;
    return emulate_at(
        t,
        trainer_emulation_rate(CONFIG_RATE_MODEL, t->flops, t->ktime.matmul_flops, t->ktime.matmul),
        err, errlen);
}

/* --bucket auto's links: a chip's T_min and W from the table, never the start-up link timing,
 * which varies from run to run (the size, and so the order of the additions, must not). Under
 * --emulate the emulated chip's (its links' bw × latency is the chip's W·T_min: the time scale
 * cancels); on real links, and under --alg mpi (MPI's built-in collectives do not use the
 * emulated links), the book's TRAINER_BUCKET_CHIP. */
static void bucket_chip(trainer *t) {
    const int mpi = t->c.alg == MESH_ALG_MPI;
    t->bucket_emulated = t->emulated && !mpi;
    t->bucket_chip = cost_chip_find(t->bucket_emulated ? t->c.emulate : TRAINER_BUCKET_CHIP);
}

/* The gradient bucket size (--bucket) into the plan's input: the size asked, or auto's (the plan
 * caps it at the gradients this rank reduces, plan.bucket_capped). */
static void setup_bucket(trainer *t, plan_in *in) {
    const config *c = &t->c;
    int64_t elems = c->bucket > 0 ? c->bucket / mesh_wire_bytes(t->wire) : 0;
    if (c->bucket < 0 && t->pl.data.axes.n) {
        bucket_chip(t);
        const cost_link link = cost_chip_link(t->bucket_chip);
        elems = plan_bucket_auto(&t->pl, &link, mesh_wire_bytes(t->wire), TRAINER_BUCKET_OVERHEAD);
    }
    /* the same on every rank already: agreed all the same. The plan caps it at the gradients
     * this rank reduces, of one size on the ranks it reduces with (one stage, one tensor shard) */
    in->bucket = mesh_agree_max(mesh_world_comm(t->mesh), elems);
}

/* The gradient bucket size (--bucket) and the collective matmul's verdict (--collective-matmul),
 * each one value all ranks agree on, into the plan's input; then the plan built with them. */
static int setup_choices(trainer *t, plan_in *in, char *err, size_t errlen) {
    const config *c = &t->c;
    mesh *m = t->mesh;
    if (c->bucket != 0) setup_bucket(t, in);
    if (c->cmatmul != 0) {
        /* auto: a block's matmul at the rate the emulated links are scaled to, the ranks' mean
         * (mesh_emulate), the same on every rank: a hop's and a block's predicted times then
         * both scale as 1/rate, and the verdict is the chip's and the shapes' alone, whatever
         * start-up timing measured; on real links this rank's sgemm rate against its link
         * calibration */
        const double rate = t->emulated ? t->emu.measured_flops : t->flops;
        const int on = c->cmatmul > 0 || par_cmatmul_wins(&t->pl, t->rep, rate);
        /* one verdict (the minimum: on only where every rank finds it wins); on real links the
         * ranks' measured rates and calibrations may split it, which the run then says */
        const int agreed = mesh_agree(mesh_world_comm(m), on);
        t->cmatmul_split = mesh_agree_max(mesh_world_comm(m), on) != agreed;
        in->cmatmul = agreed;
    }
    return plan_build(&t->pl, in, err, errlen);
}

/* The sharded run, the model and the optimizer's state of the plan; 0, or −1 with err. */
static int setup_storage(trainer *t, char *err, size_t errlen) {
    const config *c = &t->c;
    mesh *m = t->mesh;
    if (par_create(&t->pl, m, &t->par, err, errlen) < 0) return -1;
    const model_compute cmp = {plan_model_compute(&t->pl), t->prec.ctx, 0};
    /* the plan's model shape: with --cp, this rank's pieces of the sequences (plan_cp.c) */
    t->mod = model_create_compute(&t->pl.ms, t->pl.model_seqs, c->seed, par_model_hooks(t->par),
                                  &cmp);
    int ok = t->mod != NULL && plan_alloc(&t->pl, PLAN_OWNER_OPTIMIZER, &t->opt) == 0;
    t->opt_m = t->opt.p[BUF_OPT_M][0], t->opt_v = t->opt.p[BUF_OPT_V][0];
    if (mesh_agree(mesh_world_comm(m), ok ? 0 : -1) < 0)
        return errmsg_fail(err, errlen,
                           "out of memory allocating the model (try a smaller --micro-batch)");
    t->ex = exec_create(t->mod, t->par, &t->pl, m);
    if (mesh_agree(mesh_world_comm(m), t->ex ? 0 : -1) < 0)
        return errmsg_fail(err, errlen, "out of memory allocating the step's (pipeline) buffers");
    return 0;
}

/* A collective's predicted seconds on the run's links (pipe_pred_tensor_layer's prices). */
static double price_call(void *rep, const mesh_coll_call *call) {
    int lat;
    return report_predict(rep, call, &lat);
}

/* A pipelined run's wait for its neighbours in the step's prediction: calc's simulation of its
 * table with the costs measured at start-up (pipe_pred.h), the tensor axis's collectives in each
 * stage's F and B; a message of rows·D floats over the pipeline axis costs the hop latency plus
 * its bytes at the link's one-way rate. */
static int setup_pipe_pred(trainer *t, char *err, size_t errlen) {
    const plan *pl = &t->pl;
    if (pl->pipe.n == 1 || !t->rep) return 0;
    const cost_link *l = report_link(t->rep, pl->pipe.axes.ax[0]);
    const double bytes = (double)(pl->rows * pl->s.D) * sizeof(float);
    const double p2p = l->hop_latency + (l->w_oneway > 0 ? bytes / l->w_oneway : 0);
    const share_model *sh = report_share(t->rep);
    const pipe_stage_cost tp = pipe_pred_tensor_layer(pl, price_call, t->rep);
    if (pipe_pred_measure(pl, t->mesh, &t->ktime, &tp, p2p, sh->shared ? sh->compute : 1.0,
                          t->pipe_sim, err, errlen) < 0)
        return -1;
    report_set_pipe(t->rep, t->pipe_sim[0].idle, t->pipe_sim[1].idle);
    exec_set_p2p(t->ex, p2p);
    return 0;
}

/* The run's plan: its input (the flags against the mesh, or one rank for the serial reference)
 * and a first plan without the choices, which the choices are made on (setup_choices). */
static int setup_plan(trainer *t, const config *c0, int serial, plan_in *in, char *err,
                      size_t errlen) {
    if (serial)
        plan_in_single(in, c0);
    else if (par_plan_in(c0, t->mesh, in, err, errlen) != 0)
        return -1;
    t->c = in->c;
    if (plan_build(&t->pl, in, err, errlen) < 0) return -1;
    const plan *pl = &t->pl;
    t->B_loc = t->c.batch / pl->batch.n;
    t->Bl = pl->micro_seqs;
    t->n_micro = pl->n_micro;
    t->row0 = pl->batch.index * t->B_loc;
    t->n_state = pl->state_elems;
    return 0;
}

static trainer *create(const config *c0, mesh *m, int serial, char *err, size_t errlen) {
    trainer *t = calloc(1, sizeof *t);
    if (!t) return fail(NULL, err, errlen, "out of memory");
    t->mesh = m;
    plan_in in;
    /* first: the plan lists the buffers of the resolved dtype (bf16 activations, weights) */
    if (precision_setup(&t->prec, c0, m, 1, c0->emulate[0] != 0, err, errlen) < 0) {
        trainer_destroy(t); /* the message is in err */
        return NULL;
    }
    config cd = *c0;
    cd.compute = t->prec.dtype;
    if (setup_plan(t, &cd, serial, &in, err, errlen) < 0 || setup_links(t, err, errlen) < 0) {
        trainer_destroy(t); /* the message is in err */
        return NULL;
    }
    /* the emulated chip's wraparound (mesh_emulate) may have opened the pipeline axis: the
     * plan built again in setup_choices sees it (interleaved over it refused, not run) */
    for (int k = 0; k < in.pipe.axes.n; k++)
        in.pipe.wraps[k] = mesh_axis_wraps(m, in.pipe.axes.ax[k]);
    const config *c = &t->c;
    /* after setup_links: auto needs to know whether the links are emulated, and how much of a
     * core this rank had while all ranks timed sgemm at once (measured on the caller's thread:
     * with more BLAS threads it says nothing; docs/fidelity.md, "Inline progress") */
    mesh_set_progress(
        m, c->progress == CONFIG_PROGRESS_THREAD ? MESH_PROGRESS_THREAD
           : c->progress == CONFIG_PROGRESS_INLINE
               ? MESH_PROGRESS_INLINE
               : mesh_progress_auto(m, c->threads, c->threads <= 1 ? t->core_share : 1.0));
    /* a rank with a core of its own waits for a late peer without napping (mesh/nap.h) */
    mesh_set_spin(mesh_spin_auto(m, c->threads, c->threads <= 1 ? t->core_share : 1.0));
    t->wire = c->comm_dtype;
    if (mesh_agree(mesh_world_comm(m), measure_compute(t)) < 0) {
        return fail(t, err, errlen,
                    "out of memory timing the kernels (try a smaller --micro-batch)");
    }
    if (emulate_model_rate(t, err, errlen) < 0) {
        trainer_destroy(t); /* the message is in err */
        return NULL;
    }
    /* the serial reference has no report: the report's step gathers over the world, and the
     * reference's steps involve no other rank */
    t->rep = serial ? NULL : report_create(m, t->flops);
    if (t->rep) {
        report_set_threads(t->rep, c->threads);
        report_set_compute(t->rep, t->ktime.total);
        report_set_compute_parts(t->rep, t->ktime.part);
        report_set_pass_rates(t->rep, t->ktime.pass);
        if (c->shape.moe.E > 0) /* every rank, its stage's experts or none */
            report_set_experts(t->rep, t->ktime.experts, t->ktime.expert_rows,
                               t->pl.expert.axes);
        if (t->dcn >= 0) report_set_dcn(t->rep, t->dcn);
        report_set_skew(t->rep, c->bench);
    }
    if ((!serial && setup_choices(t, &in, err, errlen) < 0) || setup_storage(t, err, errlen) < 0 ||
        setup_pipe_pred(t, err, errlen) < 0) {
        trainer_destroy(t);
        return NULL;
    }
    return t;
}

trainer *trainer_create(const config *c, mesh *m, char *err, size_t errlen) {
    return create(c, m, 0, err, errlen);
}

trainer *trainer_create_serial(const config *c, mesh *m, char *err, size_t errlen) {
    return create(c, m, 1, err, errlen);
}

void trainer_set_trace(trainer *t, trace *tr) {
    t->tr = tr;
    model_set_trace(t->mod, tr);
    report_watch(t->rep, tr);
}

void trainer_destroy(trainer *t) {
    if (!t) return;
    report_destroy(t->rep);
    exec_destroy(t->ex);
    par_destroy(t->par); /* first: it completes the gathers still writing into the model */
    model_destroy(t->mod);
    precision_free(&t->prec);
    plan_free(&t->pl, PLAN_OWNER_OPTIMIZER, &t->opt);
    free(t);
}

model *trainer_model(trainer *t) {
    par_params_sync(t->par); /* its parameters whole (ZeRO-1/2 --overlap gathers them late) */
    CHECK(par_params(t->par) == PAR_PARAMS_WHOLE, "the model's parameters read while not whole");
    return t->mod;
}
par *trainer_par(trainer *t) {
    return t->par;
}
const plan *trainer_plan(const trainer *t) {
    return &t->pl;
}
const sched_action *trainer_last_actions(const trainer *t, int64_t *n) {
    return exec_last_step(t->ex, n);
}
report *trainer_report(trainer *t) {
    return t->rep;
}
double trainer_core_share(const trainer *t) {
    return t->core_share;
}
double trainer_flops(const trainer *t) {
    return t->flops;
}
double trainer_sgemm_flops(const trainer *t) {
    return t->sgemm;
}
int trainer_peak_trials(const trainer *t, const cpupeak_trial **trials) {
    const int bf16 = t->prec.dtype == COMPUTE_BF16;
    *trials = bf16 ? t->prec.trials : t->sgemm_trials;
    return bf16 ? t->prec.ntrials : t->n_sgemm_trials;
}
const precision *trainer_precision(const trainer *t) {
    return &t->prec;
}
const mesh_emulation *trainer_emulation(const trainer *t) {
    return t->emulated ? &t->emu : NULL;
}
void trainer_opt_state(trainer *t, float **m, float **v, int64_t *n) {
    *m = t->opt_m;
    *v = t->opt_v;
    *n = t->n_state;
}

void trainer_rows(const trainer *t, int64_t *row0, int64_t *nrows) {
    /* micro-batch j of the step takes global rows [j·mb + shard·Bl, ...): so that a data shard's
     * rows are the same whatever the micro-batching, rows are assigned shard-major. */
    *row0 = t->row0;
    *nrows = t->B_loc;
}

static void optimizer_update(trainer *t, int64_t step, float clip_scale) {
    const config *c = &t->c;
    kern_adamw_cfg ac = {(float)trainer_lr(c, step),
                         (float)c->beta1,
                         (float)c->beta2,
                         (float)c->eps,
                         0.0f,
                         step + 1};
    for (int id = 0; id < model_param_ids(&c->shape); id++) {
        par_owned o = par_owned_slice(t->par, t->mod, (param_id)id);
        if (o.n == 0) continue; /* (the same on every rank of the data axes) */
        param_info pi = model_param_info(&c->shape, (param_id)id);
        if (clip_scale != 1.0f) kern_scale(o.g, o.n, clip_scale);
        const float wd = pi.decay ? (float)c->weight_decay : 0.0f;
        if (c->optimizer == OPT_ADAMW) {
            ac.weight_decay = wd;
            kern_adamw(o.p, t->opt_m + o.state_off, t->opt_v + o.state_off, o.g, o.n, &ac);
        } else {
            kern_sgd(o.p, o.g, o.n, ac.lr, wd);
        }
        par_owned_done(t->par, t->mod, (param_id)id);
    }
    par_after_update(t->par, t->mod);
    model_params_changed(t->mod); /* bf16: the weights' copy is made again */
}

void trainer_step(trainer *t, int64_t step, const int32_t *tokens, step_stats *st) {
    par_in_step(t->par, 1);
    const double t0 = mesh_now();
    if (t->rep) report_step_begin(t->rep);
    trace_begin(t->tr, TRACE_STEP, step);
    model_zero_grads(t->mod);
    par_step_begin(t->par);
    st->loss = exec_step(t->ex, tokens, &st->pipe);
    if (t->pl.pipe.n > 1)
        st->pipe.bubble_sim = t->pipe_sim[2].bubble, st->pipe.makespan_sim = t->pipe_sim[2].makespan;
    trace_begin(t->tr, TRACE_GRADS, step);
    par_finish_grads(t->par, t->mod);
    const double gnorm = sqrt(par_grad_sumsq(t->par, t->mod));
    trace_end(t->tr, TRACE_GRADS);
    /* the loss and the norm are identical on every rank, so every rank leaves together, before
     * the update could spread NaNs into the parameters (or a checkpoint) */
    if (!isfinite(st->loss) || !isfinite(gnorm))
        mesh_exit_error("step %lld: the %s is %s (training diverged); lower --lr, or set --clip",
                        (long long)step + 1, isfinite(st->loss) ? "gradient norm" : "loss",
                        isnan(isfinite(st->loss) ? gnorm : st->loss) ? "NaN" : "infinite");
    float clip_scale = 1.0f;
    if (t->c.clip > 0.0 && gnorm > t->c.clip) clip_scale = (float)(t->c.clip / gnorm);
    trace_begin(t->tr, TRACE_OPT, step);
    optimizer_update(t, step, clip_scale);
    trace_end(t->tr, TRACE_OPT);
    st->grad_norm = gnorm;
    st->lr = trainer_lr(&t->c, step);
    st->seconds = mesh_now() - t0;
    if (t->rep)
        report_step_end(t->rep, step_flops_rank(t), &st->split);
    else
        memset(&st->split, 0, sizeof st->split);
    trace_end(t->tr, TRACE_STEP);
    par_in_step(t->par, 0);
}

double trainer_eval(trainer *t, const int32_t *tokens) {
    par_in_step(t->par, 1);
    trace_begin(t->tr, TRACE_EVAL, 0);
    const double loss = exec_eval(t->ex, tokens);
    trace_end(t->tr, TRACE_EVAL);
    par_in_step(t->par, 0);
    return loss;
}

/* The startup line of the gradient buckets: their size, and where it comes from. */
static void print_bucket(const trainer *t, FILE *out) {
    const int64_t b = t->pl.bucket_cap;
    fprintf(out, "%s buckets over the data axes: %lld elements = %.3f MB in %s (--bucket ",
            t->c.zero == 3 ? "gradient and weight-gather" : "gradient", (long long)b,
            1e-6 * (double)b * mesh_wire_bytes(t->wire), mesh_wire_name(t->wire));
    if (t->c.bucket > 0)
        fprintf(out, "%lld", (long long)t->c.bucket);
    else if (t->bucket_chip)
        fprintf(out,
                "auto: the smallest power of two with hop latency at most %.0f%% of the transfer "
                "on %s's links "
                "(T_min %.3g s, W %.3g B/s per direction)%s",
                100 * TRAINER_BUCKET_OVERHEAD, t->bucket_chip->name, t->bucket_chip->hop_latency,
                t->bucket_chip->ici_oneway,
                t->bucket_emulated ? ", as emulated (bw × latency is the chip's)"
                : t->emulated      ? ", the book's chip: --alg mpi's built-in collectives do not "
                                     "use the emulated links"
                                   : ", the book's chip: the same in every run, unlike the real "
                                     "links' start-up timing");
    if (t->pl.bucket_capped) fprintf(out, "; capped at the gradients this rank reduces");
    fprintf(out, ")\n");
}

void trainer_print_layout(trainer *t, FILE *out) {
    const int64_t P = t->pl.pipe.n;
    if (P > 1 && mesh_world_rank() == 0) {
        const int axis = t->pl.pipe.axes.ax[0];
        const int64_t S = P * t->pl.chunks, Ls = t->c.shape.L / S;
        fprintf(out,
                "pipeline over %c: %lld stages of %lld layers (stage s holds layers "
                "[s·%lld, (s+1)·%lld); stage 0 the embedding, stage %lld the head",
                mesh_axis_name(t->mesh, axis), (long long)S, (long long)Ls, (long long)Ls,
                (long long)Ls, (long long)(S - 1));
        if (t->pl.chunks > 1)
            fprintf(out, "; rank r holds stages r, r+%lld, ..., %d chunks", (long long)P,
                    t->pl.chunks);
        fprintf(out, "); %lld micro-batches of %lld sequences per data shard\n",
                (long long)t->n_micro, (long long)t->Bl);
        if (t->c.schedule == PIPE_GPIPE || t->c.schedule == PIPE_1F1B) {
            pipe_timeline(t->c.schedule, P, t->n_micro, out);
        } else { /* calc's table as the step × rank grid of its unit-cost simulation */
            sched_table tab;
            char err[256];
            const sched_spec sp = plan_sched_spec(&t->pl);
            fprintf(out, "pipeline schedule %s (calc's table; rank r's stage s, micro-batch j as "
                         "sFj, sBj, sIj, sWj):\n",
                    sched_kind_name(sp.kind));
            if (sched_init(&tab, &sp, err, sizeof err) == 0) sched_print_grid(out, &tab, err, sizeof err);
            sched_free(&tab);
        }
    }
    if (t->emulated && mesh_world_rank() == 0)
        fprintf(out,
                "emulating %s: this rank's %s %.3g FLOP/s vs the chip's %.3g → time scale "
                "%.3g; links %.3g B/s per direction (chip %.3g), hop latency %.3g s "
                "(chip %.3g): C/W_ici = %.0f on both\n",
                t->c.emulate,
                t->c.emulate_rate == CONFIG_RATE_MODEL ? "linear layers (--emulate-rate model)"
                                                       : "sgemm",
                t->emu.measured_flops, t->emu.chip_flops, t->emu.time_scale, t->emu.bw,
                t->emu.chip_w_oneway, t->emu.latency, t->emu.chip_latency,
                t->emu.chip_flops / t->emu.chip_w_oneway);
    if (t->dcn >= 0 && mesh_world_rank() == 0) {
        const char d = mesh_axis_name(t->mesh, t->dcn);
        fprintf(out,
                "DCN over %c: gradients ReduceScatter over the ICI data axes, the 1/|ICI| shard "
                "AllReduce over %c (once per step), AllGather over ICI",
                d, d);
        if (t->emulated)
            fprintf(out,
                    "; %s's DCN %.3g B/s per chip (%.3g per host) → %c's links %.3g B/s per "
                    "direction: C/W_dcn = %.0f",
                    t->c.emulate, t->dcn_chip_bw, COST_DCN_PER_HOST, d,
                    t->dcn_chip_bw / 2 / t->emu.time_scale, t->emu.chip_flops / t->dcn_chip_bw);
        fprintf(out, "\n");
    }
    if (t->pl.bucket_cap > 0 && mesh_world_rank() == 0) print_bucket(t, out);
    if (t->c.cmatmul != 0 && t->c.tensor_axis[0] && mesh_world_rank() == 0)
        fprintf(out, "collective matmul over %s: %s (--collective-matmul %s)\n", t->c.tensor_axis,
                t->pl.cmatmul ? "on" : "off",
                t->c.cmatmul > 0 ? "on"
                : t->cmatmul_split
                    ? "auto: the cost model's choice; the ranks' own verdicts differed, and it is "
                      "on only where every rank's is"
                    : "auto: the cost model's choice, the same on every rank");
    if (mesh_world_rank() == 0) precision_print(&t->prec, out);
    if (mesh_world_rank() == 0 && t->rep) plan_print_layout(&t->pl, t->rep, out);
}

/* The expert axis's AllToAlls under --overlap: how many were left in flight beside the MoE
 * blocks' compute (par_ep_overlap) and how much of their transfer that hid. */
static void print_ep_overlap(const trainer *t, FILE *out) {
    int64_t started, waited;
    double hidden;
    par_ep_overlap(t->par, &started, &waited, &hidden);
    const int64_t n =
        par_calls(t->par, PLAN_EP_ALL_TO_ALL) + par_calls(t->par, PLAN_EP_ALL_TO_ALL_BF16);
    if (n == 0 || !t->pl.overlap || mesh_world_rank() != 0) return;
    fprintf(out,
            "  expert AllToAlls (--overlap): %lld of %lld left in flight (%s), %lld waited, "
            "%.2f ms of their transfer hidden (rank 0)\n",
            (long long)started, (long long)n,
            t->pl.s.moe.shared > 0 ? "behind the shared experts both ways and the router's backward"
                                   : "the backward's return, behind the router's backward",
            (long long)waited, 1e3 * hidden);
}

/* The ring's dK, dV hops under --overlap: how many were left in flight behind the next block's
 * rows' half (par_cp_dkv_behind) and how much of their transfer that hid. */
static void print_cp_overlap(const trainer *t, FILE *out) {
    double hidden;
    int64_t hops;
    const int64_t behind = par_cp_dkv_behind(t->par, &hops, &hidden);
    if (t->pl.cp.n == 1 || t->pl.cp_alg != CONFIG_CP_RING || !t->pl.overlap ||
        mesh_world_rank() != 0)
        return;
    fprintf(out,
            "  ring dK, dV hops (--overlap): %lld of %lld left in flight behind the next block's "
            "dQ half, %.2f ms of their transfer hidden (rank 0)\n",
            (long long)behind, (long long)hops, 1e3 * hidden);
}

void trainer_print_summary(trainer *t, FILE *out) {
    report_case k;
    char name[128];
    plan_report_case(&t->pl, &k, name, sizeof name);
    if (t->rep) report_print_summary(t->rep, &k, out);
    if (t->rep) print_ep_overlap(t, out);
    if (t->rep) print_cp_overlap(t, out);
}
