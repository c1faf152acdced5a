/* precision: the run's compute dtype at start-up (see precision.h). */
#include "train/step/precision.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/sgemm_lib.h"
#include "mesh/errmsg.h"

/* What the path does, for the start-up line: on a matrix unit, or not. */
static const char *path_note(kern_bf16_path p) {
    switch (p) {
    case KERN_BF16_AMX:
        return "AMX tiles (oneDNN)";
    case KERN_BF16_AVX512BF16:
        return "AVX512-BF16 vdpbf16ps (oneDNN)";
    case KERN_BF16_AVX512:
        return "AVX-512 FMAs on bf16 widened to fp32 (the fp32 sgemm's library), twice "
               "vdpbf16ps's rate on Intel without AMX";
    case KERN_BF16_AVX2:
        return "no bf16 matrix unit here: the avx2 kernels widen bf16 to fp32 in registers, at "
               "about fp32 sgemm's rate";
    default:
        return "no bf16 matrix unit here, nor AVX2: the portable kernels in plain C (slow)";
    }
}

static int matrix_unit(kern_bf16_path p) {
    return p == KERN_BF16_AMX || p == KERN_BF16_AVX512BF16;
}

int precision_setup(precision *p, const config *c, mesh *m, int measure, int core, char *err,
                    size_t errlen) {
    memset(p, 0, sizeof *p);
    p->asked = c->compute;
    kern_cpu_model(p->cpu, sizeof p->cpu);
    const mesh_comm *world = mesh_world_comm(m);
    kern_bf16_path path = KERN_BF16_PORTABLE;
    char msg[MESH_MSG_MAX] = "";
    /* the variable is read whatever the dtype: a bad value is an error in fp32 too */
    int rc = kern_bf16_path_from_env(&path, msg, sizeof msg);
    if (mesh_agree_msg(world, rc, msg, sizeof msg) < 0)
        return errmsg_fail(err, errlen, "%s", msg); /* it names the variable */
    p->path = (kern_bf16_path)mesh_agree_max(world, (int64_t)path);
    kern_sgemm_lib lib;
    rc = kern_sgemm_lib_check(&lib, msg, sizeof msg);
    if (mesh_agree_msg(world, rc, msg, sizeof msg) < 0) return errmsg_fail(err, errlen, "%s", msg);
    kern_sgemm_lib_describe(p->sgemm, sizeof p->sgemm);
    const int faster = kern_bf16_path_outruns_fp32(p->path);
    p->dtype = c->compute != COMPUTE_AUTO ? c->compute : faster ? COMPUTE_BF16 : COMPUTE_FP32;
    if (c->compute == COMPUTE_AUTO)
        snprintf(p->why, sizeof p->why, "auto: %s",
                 faster ? "the bf16 path is a matrix unit, faster than fp32"
                 : !matrix_unit(p->path) && !kern_cpu_has(KERN_CPU_AVX512BF16)
                     ? "this CPU has no bf16 matrix unit (AMX, AVX512-BF16), where bf16 "
                       "multiplies no faster than fp32 and rounds"
                     : "Intel's AVX512-BF16 without AMX multiplies at half fp32's FLOP rate "
                       "(vdpbf16ps: one every ~2 cycles), bf16 widened to fp32 at fp32's at best");
    if (p->dtype != COMPUTE_BF16) return 0;
    p->ctx = kern_bf16_ctx_create(p->path, c->threads, msg, sizeof msg);
    if (mesh_agree_msg(world, p->ctx ? 0 : -1, msg, sizeof msg) < 0) {
        precision_free(p);
        return errmsg_fail(err, errlen, "the bf16 kernels: %s", msg);
    }
    if (!measure) return 0;
    const int64_t n = c->quick_start ? 256 : 1024;
    const double seconds = c->quick_start ? 0.01 : 0.1;
    mesh_agree(world, 0); /* every rank at once, as the sgemm rate is timed */
    for (int trial = 0; trial < (c->quick_start ? 1 : CPUPEAK_TRIALS); trial++) {
        const double w0 = mesh_now(), c0 = mesh_thread_cpu();
        const double f = core ? kern_bf16_measure_core_flops(p->ctx, n, seconds)
                              : kern_bf16_measure_flops(p->ctx, n, seconds);
        p->trials[p->ntrials++] =
            (cpupeak_trial){f, precision_share_since(w0, c0, !core && c->threads <= 1)};
        if (f > p->rate) p->rate = f;
    }
    return 0;
}

double precision_share_since(double w0, double c0, int known) {
    const double wall = mesh_now() - w0;
    return known && wall > 0 ? (mesh_thread_cpu() - c0) / wall : 0.0;
}

void precision_free(precision *p) {
    if (!p) return;
    kern_bf16_ctx_destroy(p->ctx);
    p->ctx = NULL;
}

void precision_print(const precision *p, FILE *out) {
    fprintf(out, "compute: %s (--compute-dtype %s%s%s)", compute_dtype_name(p->dtype),
            compute_dtype_name(p->asked), p->why[0] ? "; " : "", p->why);
    if (p->dtype == COMPUTE_BF16) {
        fprintf(out, "; bf16 inputs, fp32 accumulation, fp32 master weights; bf16 path %s on %s",
                kern_bf16_path_name(p->path), p->cpu);
        if (p->rate > 0) fprintf(out, ": %.1f GFLOP/s measured on rank 0", p->rate / 1e9);
        fprintf(out, " (%s)", path_note(p->path));
    }
    if (p->sgemm[0]) fprintf(out, "; fp32 products: %s", p->sgemm);
    fprintf(out, "\n");
}
