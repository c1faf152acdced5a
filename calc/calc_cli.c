/* calc_cli: the `meshplan` / `meshtrain plan` command line. Parses and validates every flag up
 * front, then prints one plan or a search. See calc.h. */
#include "calc/calc.h"
#include "calc/calc_cp.h"
#include "calc/calc_infer.h"
#include "calc/calc_serve.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

static const char *help_text =
    "usage: meshplan --chip CHIP --topology 16x16x16 --model llama3-70b --batch 1024 [sharding]\n"
    "Predicts a training step with the book's cost model (How To Scale Your Model); no MPI run.\n"
    "Chip and links:\n"
    "  --chip NAME        v3, v4p, v5e, v5p (default), v6e, or cpu (needs --flops, --link-bw)\n"
    "  --flops X          peak FLOP/s per chip (cpu profile, or overrides the chip's)\n"
    "  --link-bw X        link bandwidth per direction, bytes/s (measured or emulated)\n"
    "  --latency X        per-hop latency T_min, seconds (default 1e-6)\n"
    "  --hbm X            memory per chip, bytes     --hbm-bw X   memory bandwidth, bytes/s\n"
    "Topology:\n"
    "  --topology AxBxC   axes named x, y, z; wraparound by the chip's rules\n"
    "  --mesh x=A,y=B     the trainer's spelling of the same      --open AXES  force axes open\n"
    "Model (presets, then flags override):\n"
    "  --model NAME       llama3-70b (L=80 D=8192 F=28672 N=64 K=8 H=128 V=128256 T=4096),\n"
    "                     llama2-13b (L=40 D=5120 F=13824 N=K=40 H=128 V=32000 T=4096),\n"
    "                     mixtral-8x7b (L=32 D=4096 F=14336 N=32 K=8 H=128 V=32000 T=4096,\n"
    "                     8 experts, top-2: 46.7e9 params, 12.9e9 per token)\n"
    "  --layers --d-model --heads --kv-heads --head-dim --d-ff --vocab --seq-len\n"
    "Mixture of experts (every block's MLP; the book's W_in[E_Z, D_X, F_Y]):\n"
    "  --experts E        routed experts per block (0: dense)\n"
    "  --moe-top-k k      experts per token (alias --top-k; default 2)\n"
    "  --shared-experts S always-on experts      --expert-d-ff F  each expert's width (default F)\n"
    "  --expert AXIS      shard the experts over one data axis (E_Z): two AllToAlls of the\n"
    "                     tokens per block each way; with --infer, one of the model axes\n"
    "Pods (the book's multi-pod training):\n"
    "  --pods N           N copies of the topology joined by the data-center network, data\n"
    "                     parallel across them; the batch is global (B/N per pod). Gradients\n"
    "                     reduce hierarchically: in-pod ReduceScatter, the shard AllReduced\n"
    "                     over DCN, in-pod AllGather. Prints the book's DCN threshold C/W_dcn\n"
    "  --dcn-bw X         DCN bytes/s per chip (default: 2.5e10 per host / chips per host)\n"
    "Batch: --batch SEQUENCES or --tokens TOKENS (k, M, G suffixes are 1e3, 1e6, 1e9)\n"
    "Sharding (the trainer's flags):\n"
    "  --dp AXES          batch sharded over these axes (alias --data-axes, --data);\n"
    "                     default: every axis not in --tensor or --pipeline\n"
    "  --zero S           0 replicated DP, 1 optimizer, 2 +grads, 3 +weights (FSDP)\n"
    "  --tensor AXES      Megatron tensor-parallel axes, whole (z, yz) or split: z:4 gives\n"
    "                     tensor a contiguous block of 4 chips of z and leaves the strided\n"
    "                     rest z/4 (16/4 = 4 chips, 4 apart) to the data axes; several, as\n"
    "                     y:2,z:4 or xz:4. The block must divide the axis. A block is an open\n"
    "                     line; the strided rest shares each link with the other blocks' rests\n"
    "                     (W/k per link, k*T_min per step)\n"
    "  --pipeline AXIS    pipeline stages (a whole axis)\n"
    "  --microbatches M   pipeline microbatches (default 1)\n"
    "  --schedule S       gpipe (default) | 1f1b | interleaved | zb-h1 | zb-v: the pipeline's\n"
    "                     schedule, simulated to price the step; prints its step x rank grid\n"
    "  --virtual-stages V chunks per pipeline rank (interleaved: >= 2, default 2; zb-v: 2)\n"
    "  --remat POLICY     none | block | ffw3 | ckptN (N [B,D] tensors saved per layer) |\n"
    "                     meshtrain (what meshtrain's trainer saves, tensor by tensor: the\n"
    "                     products' inputs at --act-bytes, 2 as its bf16 compute, 4 as fp32)\n"
    "  --alg ALG          auto | ring | bidir | seq | multi | direct (collective algorithm;\n"
    "                     direct ignores the link sharing of split axes)\n"
    "  --param-bytes --grad-bytes --opt-bytes --act-bytes   bytes per element (2, 2, 8, 2)\n"
    "Context parallelism (the sequence sharded over an axis; zigzag, or contiguous when 2C\n"
    "does not divide T):\n"
    "  --cp AXIS          shard every sequence's tokens over AXIS (one of x, y, z): training\n"
    "                     adds the attention's collectives (all three algorithms priced side\n"
    "                     by side), the ring's overlap threshold in T and the buffers; with\n"
    "                     --infer, decode with the KV cache sharded over the sequence and\n"
    "                     prefill with the prompt over AXIS\n"
    "  --cp-alg ALG       allgather | ring (default) | ulysses\n"
    "Inference (the book's inference chapters):\n"
    "  --infer            predict serving instead of a training step: KV cache, memory per\n"
    "                     chip, smallest slice, prefill (TTFT), decode step and its regime,\n"
    "                     tokens/s, B_crit, the TP bounds. The model is sharded over --tensor\n"
    "                     (default: every axis); other axes hold replicas\n"
    "  --batch B          sequences decoded together (default 1)\n"
    "  --context S        tokens in each sequence's KV cache (required)\n"
    "  --prefill T        prompt tokens of one request (default: the context)\n"
    "  --param-bytes X    bytes per weight (2 bf16, 1 int8, 0.5 int4)\n"
    "  --kv-bytes X       bytes per KV-cache element (default 2)\n"
    "  --flops-dtype D    bf16 (default) or int8: the peak FLOP/s the matmuls run at\n"
    "  --prefill-mfu X    fraction of peak a prefill reaches (default 1: the roofline)\n"
    "  --spec-alpha A     speculative sampling: tokens a target step, speed-up and the best\n"
    "                     k for drafts kept with probability A (needs --draft-cost)\n"
    "  --draft-cost C     a drafter step in target decode steps (e.g. 0.1)\n"
    "  --generate G       disaggregated serving: tokens a request generates; the KV bytes\n"
    "                     shipped per request, the prefill chips a decode slice needs, and\n"
    "                     disaggregated against interleaved tokens/s per chip\n"
    "Search:\n"
    "  --search           rank shardings by predicted step time: each axis to data, to tensor,\n"
    "                     or split (tensor on a block of every divisor k), times ZeRO 0..3\n"
    "  --whole-axes       search whole axes only (no splits)\n"
    "  --chips N          search topologies of N chips that fit the chip's pod\n"
    "  --top K            rows to print (default 15)\n"
    "Output:\n"
    "  --format FMT       table (default) | csv (a header row, then one row per collective or\n"
    "                     per search candidate) | json (one object, or an array of candidates);\n"
    "                     seconds, bytes, tokens; 15 significant digits\n";

typedef struct {
    calc_spec s;
    calc_infer_opt io; /* --infer */
    calc_serve_opt so; /* --spec-alpha, --draft-cost, --generate */
    char chip[16], topology[64], open[8], data[8], tensor[32], pipe[8], expert[8];
    double flops, link_bw, latency, hbm, hbm_bw, batch;
    int search, chips, top, have_data, whole_axes, infer, grid;
    calc_format format;
    calc_cp_opt cp; /* --cp, --cp-alg (cp_alg: given) */
    int cp_alg;
} cli;

static int bad(char *err, size_t len, const char *flag, const char *val, const char *want) {
    return errmsg_fail(err, len, "%s %s: %s", flag, val, want);
}

static int axes_ok(const char *v) {
    for (const char *p = v; *p; p++)
        if (*p < 'x' || *p > 'z' || strchr(p + 1, *p)) return 0;
    return strlen(v) <= 3;
}

/* --tensor: axis letters, each optionally ":k" (a block of k), commas allowed between them.
 * Fills the mask and the blocks (0 = whole axis). Returns 0, or −1 for bad syntax or an axis
 * given twice. */
static int tensor_parse(const char *v, int *mask, int *block) {
    *mask = 0;
    memset(block, 0, sizeof(int) * COST_MAX_AXES);
    for (const char *p = v; *p;) {
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p < 'x' || *p > 'z' || (*mask & (1 << (*p - 'x')))) return -1;
        const int a = *p++ - 'x';
        *mask |= 1 << a;
        if (*p == ':') {
            char *end;
            const long k = strtol(p + 1, &end, 10);
            if (end == p + 1 || k < 1 || k > 1 << 16) return -1;
            block[a] = (int)k;
            p = end;
        }
    }
    return *mask ? 0 : -1;
}

static int str_flag(const char *flag, const char *v, char *dst, size_t n, char *err, size_t len) {
    if (strlen(v) >= n) return bad(err, len, flag, v, "value too long");
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* ---- the flags that name things: each parses its value into c (0, or −1 with err) ---- */

/* The end of a setter whose parse gave k (−1: none of the names): 0, or −1 with `expected`. */
static int named(int k, const char *f, const char *v, const char *expected, char *err,
                 size_t len) {
    return k < 0 ? bad(err, len, f, v, expected) : 0;
}

static int set_chip(cli *c, const char *f, const char *v, char *err, size_t len) {
    return str_flag(f, v, c->chip, sizeof c->chip, err, len);
}
static int set_topology(cli *c, const char *f, const char *v, char *err, size_t len) {
    return str_flag(f, v, c->topology, sizeof c->topology, err, len);
}
static int set_model(cli *c, const char *f, const char *v, char *err, size_t len) {
    return calc_model_preset(&c->s.shape, v) < 0 || calc_moe_preset(&c->s.moe, v) < 0
               ? bad(err, len, f, v, "expected llama3-70b, llama2-13b or mixtral-8x7b")
               : 0;
}
static int set_expert(cli *c, const char *f, const char *v, char *err, size_t len) {
    if (!axes_ok(v) || strlen(v) != 1) return bad(err, len, f, v, "give one axis, x, y or z");
    return str_flag(f, v, c->expert, sizeof c->expert, err, len);
}
static int set_schedule(cli *c, const char *f, const char *v, char *err, size_t len) {
    const int k = sched_kind_parse(v);
    if (k >= 0) c->s.schedule = (sched_kind)k, c->grid = 1;
    return named(k, f, v, "expected gpipe, 1f1b, interleaved, zb-h1 or zb-v", err, len);
}
static int set_cp(cli *c, const char *f, const char *v, char *err, size_t len) {
    if (strlen(v) != 1 || v[0] < 'x' || v[0] > 'z')
        return bad(err, len, f, v, "expected one axis: x, y or z");
    c->cp.axis = v[0] - 'x';
    return 0;
}
static int set_cp_alg(cli *c, const char *f, const char *v, char *err, size_t len) {
    const int a = calc_cp_alg_parse(v);
    if (a >= 0) c->cp.alg = (calc_cp_alg)a, c->cp_alg = 1;
    return named(a, f, v, "expected allgather, ring or ulysses", err, len);
}
static int set_data(cli *c, const char *f, const char *v, char *err, size_t len) {
    if (!axes_ok(v))
        return bad(err, len, f, v,
                   strcmp(f, "--data") == 0
                       ? "the plan shards the batch over axes x, y, z (a data file is for "
                         "training)"
                       : "axes are x, y, z");
    c->have_data = 1;
    return str_flag(f, v, c->data, sizeof c->data, err, len);
}
static int set_tensor(cli *c, const char *f, const char *v, char *err, size_t len) {
    int mask, block[COST_MAX_AXES];
    if (tensor_parse(v, &mask, block) < 0)
        return bad(err, len, f, v,
                   "expected axes x, y, z, each at most once, whole (yz) or with a block "
                   "(z:4, y:2,z:4)");
    return str_flag(f, v, c->tensor, sizeof c->tensor, err, len);
}
static int set_format(cli *c, const char *f, const char *v, char *err, size_t len) {
    static const char *names[] = {"table", "csv", "json"};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, names[i]) == 0) {
            c->format = (calc_format)i;
            return 0;
        }
    return bad(err, len, f, v, "expected table, csv or json");
}
static int set_axes(cli *c, const char *f, const char *v, char *err, size_t len) {
    if (!axes_ok(v)) return bad(err, len, f, v, "axes are x, y, z, each at most once");
    char *dst = f[2] == 'p' ? c->pipe : c->open;
    return str_flag(f, v, dst, sizeof c->pipe, err, len);
}
static int set_remat(cli *c, const char *f, const char *v, char *err, size_t len) {
    if (strcmp(v, "none") == 0)
        c->s.remat = CALC_REMAT_NONE;
    else if (strcmp(v, "block") == 0)
        c->s.remat = CALC_REMAT_BLOCK;
    else if (strcmp(v, "ffw3") == 0)
        c->s.remat = CALC_REMAT_FFW3;
    else if (strncmp(v, "ckpt", 4) == 0 && atoi(v + 4) > 0 && atoi(v + 4) < 100) {
        c->s.remat = CALC_REMAT_CKPT;
        c->s.ckpt_n = atoi(v + 4);
    } else if (strcmp(v, "meshtrain") == 0)
        c->s.remat = CALC_REMAT_MESHTRAIN;
    else
        return bad(err, len, f, v, "expected none, block, ffw3, ckptN (e.g. ckpt4) or meshtrain");
    return 0;
}
static int set_flops_dtype(cli *c, const char *f, const char *v, char *err, size_t len) {
    if (strcmp(v, "bf16") != 0 && strcmp(v, "int8") != 0)
        return bad(err, len, f, v, "expected bf16 or int8");
    c->io.flops_dtype = v[0] == 'i' ? CALC_FLOPS_INT8 : CALC_FLOPS_BF16;
    return 0;
}
static int set_alg(cli *c, const char *f, const char *v, char *err, size_t len) {
    const int a = calc_alg_parse(v);
    if (a >= 0) c->s.alg = (mesh_alg)a;
    return named(a, f, v, "expected auto, ring, bidir, seq, multi or direct", err, len);
}

/* ---- the flag table ---- */

typedef enum {
    CF_MODE,   /* a switch that chooses what the command computes (--infer, --search) */
    CF_SWITCH, /* int set to 1 */
    CF_WHOLE,  /* a whole number in [lo, hi], into an int ('i'), int64_t ('l') or double ('d') */
    CF_REAL,   /* a number in [lo, hi] (k, M, G suffixes), into a double */
    CF_NAMED,  /* parsed by its setter */
} calc_flag_kind;

/* The most a whole number may be: every integer up to 2^53 is exact in a double. */
#define CALC_WHOLE_MAX 9007199254740992.0

typedef struct {
    const char *name;
    calc_flag_kind kind;
    char type;  /* CF_WHOLE: 'i', 'l' or 'd' */
    size_t off; /* the field in cli */
    double lo, hi;
    int modes; /* CALC_MODE_* bits: where the flag is read (elsewhere: refused); --dp, --zero and
                  --pipeline are read by --infer to refuse them saying why (calc_infer.c) */
    int (*set)(cli *c, const char *flag, const char *v, char *err, size_t len); /* CF_NAMED */
} calc_flag;

enum { T_ = CALC_MODE_TRAIN, S_ = CALC_MODE_SEARCH, I_ = CALC_MODE_INFER, ALL_ = T_ | S_ | I_ };
#define C_(field) offsetof(cli, field)
#define SH_(f) offsetof(cli, s.shape.f)
static const calc_flag flags[] = {
    {"--infer", CF_MODE, 0, C_(infer), 0, 0, I_, NULL},
    {"--search", CF_MODE, 0, C_(search), 0, 0, S_, NULL},
    /* chip and links */
    {"--chip", CF_NAMED, 0, 0, 0, 0, ALL_, set_chip},
    {"--flops", CF_REAL, 'd', C_(flops), 1, 1e18, ALL_, NULL},
    {"--link-bw", CF_REAL, 'd', C_(link_bw), 1, 1e15, ALL_, NULL},
    {"--latency", CF_REAL, 'd', C_(latency), 0, 1, ALL_, NULL},
    {"--hbm", CF_REAL, 'd', C_(hbm), 1, 1e15, T_ | I_, NULL},
    {"--hbm-bw", CF_REAL, 'd', C_(hbm_bw), 1, 1e15, T_ | I_, NULL},
    /* topology */
    {"--topology", CF_NAMED, 0, 0, 0, 0, ALL_, set_topology},
    {"--mesh", CF_NAMED, 0, 0, 0, 0, ALL_, set_topology},
    {"--open", CF_NAMED, 0, 0, 0, 0, ALL_, set_axes},
    /* model */
    {"--model", CF_NAMED, 0, 0, 0, 0, ALL_, set_model},
    {"--layers", CF_WHOLE, 'l', SH_(L), 1, 1 << 16, ALL_, NULL},
    {"--d-model", CF_WHOLE, 'l', SH_(D), 1, 1 << 20, ALL_, NULL},
    {"--heads", CF_WHOLE, 'l', SH_(N), 1, 1 << 16, ALL_, NULL},
    {"--kv-heads", CF_WHOLE, 'l', SH_(K), 1, 1 << 16, ALL_, NULL},
    {"--head-dim", CF_WHOLE, 'l', SH_(H), 1, 1 << 16, ALL_, NULL},
    {"--d-ff", CF_WHOLE, 'l', SH_(F), 1, 1 << 22, ALL_, NULL},
    {"--vocab", CF_WHOLE, 'l', SH_(V), 1, 1 << 24, ALL_, NULL},
    {"--seq-len", CF_WHOLE, 'l', SH_(T), 1, 1 << 24, T_ | S_, NULL},
    /* experts (mixture of experts) */
    {"--experts", CF_WHOLE, 'l', C_(s.moe.E), 1, 1 << 20, ALL_, NULL},
    {"--moe-top-k", CF_WHOLE, 'l', C_(s.moe.k), 1, 1 << 20, ALL_, NULL},
    {"--top-k", CF_WHOLE, 'l', C_(s.moe.k), 1, 1 << 20, ALL_, NULL},
    {"--shared-experts", CF_WHOLE, 'l', C_(s.moe.S), 0, 1 << 20, ALL_, NULL},
    {"--expert-d-ff", CF_WHOLE, 'l', C_(s.moe.F), 1, 1 << 20, ALL_, NULL},
    {"--expert", CF_NAMED, 0, 0, 0, 0, ALL_, set_expert},
    /* pods */
    {"--pods", CF_WHOLE, 'i', C_(s.pods), 1, 1 << 16, T_ | S_, NULL},
    {"--dcn-bw", CF_REAL, 'd', C_(s.dcn_bw), 1, 1e15, T_ | S_, NULL},
    /* batch */
    {"--batch", CF_WHOLE, 'd', C_(batch), 1, CALC_WHOLE_MAX, ALL_, NULL},
    {"--tokens", CF_WHOLE, 'd', C_(s.tokens), 1, CALC_WHOLE_MAX, T_ | S_, NULL},
    /* sharding */
    {"--dp", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_data},
    {"--data-axes", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_data},
    {"--data", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_data},
    {"--zero", CF_WHOLE, 'i', C_(s.zero), 0, 3, T_ | I_, NULL},
    {"--tensor", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_tensor},
    {"--pipeline", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_axes},
    {"--microbatches", CF_WHOLE, 'i', C_(s.microbatches), 1, 1 << 20, T_, NULL},
    {"--schedule", CF_NAMED, 0, 0, 0, 0, T_, set_schedule},
    {"--virtual-stages", CF_WHOLE, 'i', C_(s.virtual_stages), 1, 64, T_, NULL},
    {"--cp", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_cp},
    {"--cp-alg", CF_NAMED, 0, 0, 0, 0, T_ | I_, set_cp_alg},
    {"--remat", CF_NAMED, 0, 0, 0, 0, T_ | S_, set_remat},
    {"--alg", CF_NAMED, 0, 0, 0, 0, ALL_, set_alg},
    {"--param-bytes", CF_REAL, 'd', C_(s.param_bytes), 0, 64, ALL_, NULL},
    {"--grad-bytes", CF_REAL, 'd', C_(s.grad_bytes), 0, 64, T_ | S_, NULL},
    {"--opt-bytes", CF_REAL, 'd', C_(s.opt_bytes), 0, 64, T_ | S_, NULL},
    {"--act-bytes", CF_REAL, 'd', C_(s.act_bytes), 0, 64, T_ | S_, NULL},
    /* inference */
    {"--context", CF_WHOLE, 'd', C_(io.context), 1, CALC_WHOLE_MAX, I_, NULL},
    {"--prefill", CF_WHOLE, 'd', C_(io.prefill), 1, CALC_WHOLE_MAX, I_, NULL},
    {"--kv-bytes", CF_REAL, 'd', C_(io.kv_bytes), 0, 64, I_, NULL},
    {"--flops-dtype", CF_NAMED, 0, 0, 0, 0, I_, set_flops_dtype},
    {"--prefill-mfu", CF_REAL, 'd', C_(io.prefill_mfu), 0, 1, I_, NULL},
    {"--spec-alpha", CF_REAL, 'd', C_(so.alpha), 0, 1, I_, NULL},
    {"--draft-cost", CF_REAL, 'd', C_(so.draft_cost), 1e-6, 1e6, I_, NULL},
    {"--generate", CF_WHOLE, 'd', C_(so.generated), 1, CALC_WHOLE_MAX, I_, NULL},
    /* search */
    {"--whole-axes", CF_SWITCH, 0, C_(whole_axes), 0, 0, S_, NULL},
    {"--chips", CF_WHOLE, 'i', C_(chips), 1, 1 << 20, S_, NULL},
    {"--top", CF_WHOLE, 'i', C_(top), 1, 10000, S_, NULL},
    /* output */
    {"--format", CF_NAMED, 0, 0, 0, 0, ALL_, set_format},
};
#undef C_
#undef SH_
enum { NFLAGS = sizeof flags / sizeof flags[0] };

int calc_flag_count(void) {
    return NFLAGS;
}

const char *calc_flag_name(int i, int *modes, int *is_mode) {
    if (i < 0 || i >= NFLAGS) return NULL;
    if (modes) *modes = flags[i].modes;
    if (is_mode) *is_mode = flags[i].kind == CF_MODE;
    return flags[i].name;
}

/* A number with an optional k, M or G suffix (1e3, 1e6, 1e9) in [lo, hi], and whole when asked.
 * Returns 0, or −1 with err saying the range. */
static int parse_num(const calc_flag *f, const char *v, double *out, char *err, size_t len) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end != v && *end) {
        const double mult = *end == 'k' || *end == 'K' ? 1e3
                            : *end == 'M'              ? 1e6
                            : *end == 'G'              ? 1e9
                                                       : 0;
        if (mult > 0 && end[1] == '\0') {
            x *= mult;
            end++;
        }
    }
    const int whole = f->kind == CF_WHOLE;
    if (end == v || *end || !isfinite(x) || !(x >= f->lo && x <= f->hi) ||
        (whole && x != floor(x)))
        return errmsg_fail(err, len, whole ? "%s %s: expected a %s from %.0f to %.0f"
                                           : "%s %s: expected a %s from %g to %g",
                           f->name, v, whole ? "whole number" : "number", f->lo, f->hi);
    *out = x;
    return 0;
}

/* One flag f with its value v (NULL for switches) into c. 0, or −1 with err. */
static int set_flag(cli *c, const calc_flag *f, const char *v, char *err, size_t len) {
    char *field = (char *)c + f->off;
    if (f->kind == CF_MODE || f->kind == CF_SWITCH) {
        *(int *)field = 1;
        return 0;
    }
    if (!v) return bad(err, len, f->name, "", "needs a value");
    if (f->kind == CF_NAMED) return f->set(c, f->name, v, err, len);
    double x = 0;
    if (parse_num(f, v, &x, err, len) < 0) return -1;
    if (f->type == 'i')
        *(int *)field = (int)x;
    else if (f->type == 'l')
        *(int64_t *)field = (int64_t)x;
    else
        *(double *)field = x;
    return 0;
}

static const calc_flag *find_flag(const char *name) {
    for (int i = 0; i < NFLAGS; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

/* "16x16x16", "x=16,y=16,z=16" or "16". */
static int parse_topology(const char *t, int *sizes, int *n, char *err, size_t len) {
    *n = 0;
    for (const char *p = t; *p;) {
        if (*n == COST_MAX_AXES) return bad(err, len, "--topology", t, "at most 3 axes");
        if (p[0] >= 'x' && p[0] <= 'z' && p[1] == '=') {
            if (p[0] != 'x' + *n)
                return bad(err, len, "--mesh", t, "name the axes x, y, z in order");
            p += 2;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 16)
            return bad(err, len, "--topology", t, "expected sizes like 16x16x16 or x=16,y=16");
        sizes[(*n)++] = (int)v;
        p = end;
        if (*p == 'x' || *p == ',')
            p++;
        else if (*p)
            return bad(err, len, "--topology", t, "expected sizes like 16x16x16");
    }
    return *n ? 0 : bad(err, len, "--topology", t, "is empty");
}

static int mask_of(const char *axes) {
    int m = 0;
    for (const char *p = axes; *p; p++) m |= 1 << (*p - 'x');
    return m;
}

/* The chip (a table chip or the cpu profile) with the flags' overrides, and its links. */
static int finish_chip(cli *c, char *err, size_t len) {
    calc_spec *s = &c->s;
    if (strcmp(c->chip, "cpu") == 0) {
        if (c->flops <= 0 || c->link_bw <= 0)
            return bad(err, len, "--chip", "cpu", "needs --flops and --link-bw (the host profile)");
        s->chip = (cost_chip){"cpu",           c->flops, c->flops, 16e9,      2e10,      c->link_bw,
                              2 * c->link_bw,  1e-6,     3,        {0, 0, 0}, {1, 1, 1}, 1,
                              COST_WRAP_ALWAYS};
    } else {
        const cost_chip *chip = cost_chip_find(c->chip);
        if (!chip)
            return bad(err, len, "--chip", c->chip, "expected v3, v4p, v5e, v5p, v6e or cpu");
        s->chip = *chip;
    }
    if (c->flops > 0) s->chip.flops_bf16 = c->flops;
    if (c->link_bw > 0) s->chip.ici_oneway = c->link_bw, s->chip.ici_bidi = 2 * c->link_bw;
    if (c->latency >= 0) s->chip.hop_latency = c->latency;
    if (c->hbm > 0) s->chip.hbm_bytes = c->hbm;
    if (c->hbm_bw > 0) s->chip.hbm_bw = c->hbm_bw;
    s->link = cost_chip_link(&s->chip);
    return 0;
}

/* The batch: training counts tokens (--tokens, or --batch sequences of T); inference counts
 * sequences. */
static int finish_batch(cli *c, char *err, size_t len) {
    calc_spec *s = &c->s;
    if (c->infer) {
        if (s->tokens > 0)
            return bad(err, len, "--tokens", "with --infer", "give --batch (sequences) instead");
        if (c->batch > 0) c->io.batch = c->batch;
        if (c->io.prefill == 0) c->io.prefill = c->io.context;
        c->io.param_bytes = s->param_bytes;
        return 0;
    }
    if (c->batch > 0) {
        if (s->tokens > 0) return bad(err, len, "--batch", "and --tokens", "give one of them");
        if (s->shape.T < 1) return bad(err, len, "--batch", "", "needs --seq-len or a --model");
        s->tokens = c->batch * (double)s->shape.T;
    }
    return 0;
}

/* --tensor's blocks against the topology's sizes: each divides its axis. Sets the blocks and
 * returns the mask of split axes, or −1 with err. */
static int finish_blocks(cli *c, const int *sizes, int n, const int *block, char *err, size_t len) {
    int split = 0;
    for (int i = 0; i < n; i++) {
        const int k = block[i], size = sizes[i];
        if (k == 0 || k == size) continue;
        if (k < 2 || size % k) {
            char divs[96] = "";
            size_t m = 0;
            for (int d = 2; d <= size && m < sizeof divs; d++)
                if (size % d == 0) m += (size_t)snprintf(divs + m, sizeof divs - m, " %d", d);
            return errmsg_fail(
                err, len,
                "--tensor %s: a block of %d chip%s %s axis %c of size %d; use a block that "
                "divides it:%s",
                c->tensor, k, k == 1 ? "" : "s",
                k < 2 ? "is no tensor sharding of" : "does not divide", 'x' + i, size,
                divs[0] ? divs : " (none: the axis has 1 chip)");
        }
        c->s.tensor_block[i] = k;
        split |= 1 << i;
    }
    return split;
}

/* Applies the chip, links, batch, topology and sharding flags to c->s. */
static int finish(cli *c, char *err, size_t len) {
    calc_spec *s = &c->s;
    if (finish_chip(c, err, len) < 0 || finish_batch(c, err, len) < 0) return -1;
    if (s->shape.H == 0 && s->shape.N > 0) s->shape.H = s->shape.D / s->shape.N;
    if (s->shape.K == 0) s->shape.K = s->shape.N;
    /* the book's typical k, also for --search --chips, which makes its topologies itself */
    if (s->moe.E > 0 && s->moe.k == 0) s->moe.k = 2;
    if (!c->topology[0]) {
        if (c->search && c->chips > 0) return 0;
        return bad(err, len, "--topology", "", "missing (e.g. --topology 16x16x16)");
    }
    int sizes[COST_MAX_AXES], n;
    if (parse_topology(c->topology, sizes, &n, err, len) < 0 ||
        calc_spec_set_topology(s, sizes, n, err, len) < 0)
        return -1;
    const int all = (1 << n) - 1;
    for (const char *p = c->open; *p; p++) {
        const int a = *p - 'x';
        if (a < n && !s->wraps[a])
            return errmsg_fail(err, len,
                               "--open %s: axis %c of %s has no wraparound on %s anyway (the "
                               "chip's rule), so it changes nothing; drop it",
                               c->open, *p, c->topology, s->chip.name);
        s->wraps[a] = 0;
    }
    int block[COST_MAX_AXES] = {0, 0, 0};
    if (c->tensor[0]) tensor_parse(c->tensor, &s->tensor_mask, block);
    s->pipe_mask = mask_of(c->pipe);
    s->moe.expert_mask = mask_of(c->expert);
    if ((s->tensor_mask | s->pipe_mask | mask_of(c->data) | mask_of(c->open) |
         s->moe.expert_mask) &
        ~all)
        return bad(err, len, "--dp/--tensor/--pipeline/--open/--expert", "",
                   "names an axis the "
                   "topology lacks");
    const int split = finish_blocks(c, sizes, n, block, err, len);
    if (split < 0) return -1;
    const int cp = c->cp.axis >= 0 ? 1 << c->cp.axis : 0;
    if (cp & ~all) return bad(err, len, "--cp", "", "names an axis the topology lacks");
    if (cp & mask_of(c->data))
        return errmsg_fail(err, len,
                           "--cp %c: axis %c is also in --dp; an axis takes one role (the CP axis "
                           "counts among the data axes for the weights by itself)",
                           'x' + c->cp.axis, 'x' + c->cp.axis);
    if (cp & (s->tensor_mask | s->pipe_mask))
        return errmsg_fail(err, len, "--cp %c: axis %c is also the %s axis; an axis takes one role",
                           'x' + c->cp.axis, 'x' + c->cp.axis,
                           cp & s->tensor_mask ? "--tensor" : "--pipeline");
    if (c->infer) { /* model parallel over every axis (but the CP axis) unless --tensor says */
        if (!c->tensor[0]) s->tensor_mask = all & ~cp;
        s->data_mask = c->have_data ? mask_of(c->data) : 0;
        return 0;
    }
    s->cp_n = cp ? s->sizes[c->cp.axis] : 0, s->cp_alg = c->cp.alg;
    /* A split axis's strided rest shards the batch unless --dp leaves it out. */
    s->data_mask =
        c->have_data ? mask_of(c->data) | cp : all & ~((s->tensor_mask & ~split) | s->pipe_mask);
    return 0;
}

static const char *const mode_what[] = {"", "a training step's prediction", "--search",
                                        "", "--infer"};

/* Every flag given must change what this mode computes; else it is refused, naming the mode. */
static int check_modes(const cli *c, const int *given, char *err, size_t len) {
    if (c->infer && c->search)
        return errmsg_fail(err, len,
                           "--search and --infer are two modes (rank shardings of a training "
                           "step, or predict serving): give one");
    const int mode = c->infer ? CALC_MODE_INFER : c->search ? CALC_MODE_SEARCH : CALC_MODE_TRAIN;
    for (int i = 0; i < NFLAGS; i++)
        if (given[i] && !(flags[i].modes & mode))
            return errmsg_fail(err, len, "%s does nothing in %s: drop it%s", flags[i].name,
                               mode_what[mode],
                               flags[i].modes == CALC_MODE_INFER    ? " or add --infer"
                               : flags[i].modes == CALC_MODE_SEARCH ? " or add --search"
                                                                    : "");
#define GIVEN(name) given[find_flag(name) - flags]
    if (c->search && c->chips > 0)
        for (int k = 0; k < 4; k++) { /* the flags that name its axes */
            const char *f = (const char *[]){"--topology", "--mesh", "--open", "--expert"}[k];
            if (GIVEN(f))
                return errmsg_fail(err, len,
                                   "%s with --chips: the search makes the topologies of --chips "
                                   "N itself; give one of the two",
                                   f);
        }
    if (GIVEN("--schedule") && !c->pipe[0])
        return errmsg_fail(err, len,
                           "--schedule is unused: it schedules the stages of --pipeline AXIS");
    if (GIVEN("--dcn-bw") && c->s.pods <= 1)
        return errmsg_fail(err, len,
                           "--dcn-bw is unused: the data-center network joins --pods N > 1 "
                           "pods; give --pods or drop it");
#undef GIVEN
    return 0;
}

/* Parses argv into c; returns 0, 1 for --help, or −1 with err. */
static int parse_args(cli *c, int argc, char **argv, char *err, size_t len) {
    int given[NFLAGS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        char name[32];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        if (strncmp(a, "--", 2) != 0 || (size_t)(eq ? eq - a : (long)strlen(a)) >= sizeof name)
            return errmsg_fail(err, len, "unexpected argument '%s' (see --help)", a);
        snprintf(name, sizeof name, "%.*s", (int)(eq ? eq - a : (long)strlen(a)), a);
        const calc_flag *f = find_flag(name);
        if (!f) return bad(err, len, name, "", "unknown flag (see --help)");
        if (given[f - flags]++)
            return errmsg_fail(err, len, "%s is given twice: give each flag once", name);
        const int takes = f->kind != CF_MODE && f->kind != CF_SWITCH;
        if (!takes && eq) return errmsg_fail(err, len, "%s takes no value, got '%s'", name, a);
        const char *v = !takes ? NULL : eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (set_flag(c, f, v, err, len) < 0) return -1;
    }
    if (check_modes(c, given, err, len) < 0) return -1;
    return finish(c, err, len);
}

/* The search: its table, CSV or JSON on out, or why it found nothing. Returns 0 or −1 (err). */
static int run_search(cli *c, FILE *out, char *err, size_t len) {
    if (c->s.tokens < 1) {
        return errmsg_fail(err, len, "--search needs a batch (--batch or --tokens)");
    }
    const calc_search_opt o = {c->chips, c->top, c->whole_axes, c->format};
    const int n = calc_search(out, &c->s, &o);
    if (n < 0) {
        return errmsg_fail(err, len, "search: out of memory");
    }
    return n > 0 ? 0 : calc_search_explain(&c->s, &o, err, len);
}

/* --cp: the flags it cannot go with; 0 or −1 (err). */
static int cp_check(const cli *c, char *err, size_t len) {
    if (c->cp.axis < 0) return c->cp_alg ? errmsg_fail(err, len, "--cp-alg needs --cp AXIS") : 0;
    if (c->search) return bad(err, len, "--cp", "with --search", "not supported");
    if (c->infer && c->format != CALC_FORMAT_TABLE)
        return bad(err, len, "--cp", "with --infer and --format csv/json",
                   "the sequence-sharded serving is a table only; use --format table");
    if (c->format == CALC_FORMAT_CSV)
        return bad(err, len, "--cp", "with --format csv",
                   "the context-parallel section is a table or JSON; use --format table or json");
    return 0;
}

/* --infer --cp: calc_infer's table on Y·C chips, then the sequence-sharded serving. */
static int run_infer_cp(cli *c, FILE *out, char *err, size_t len) {
    calc_cp_infer_result r;
    if (calc_cp_infer(&c->s, &c->io, &c->cp, &r, err, len) < 0) return -1;
    if (!out) return 0;
    calc_spec yc = c->s;
    yc.tensor_mask |= 1 << c->cp.axis;
    calc_infer_print(out, &yc, &c->io, &r.base);
    calc_cp_infer_print(out, &c->s, &c->io, &c->cp, &r);
    return 0;
}

/* --spec-alpha, --draft-cost and --generate against each other and the output. */
static int serve_check(const cli *c, char *err, size_t len) {
    const calc_serve_opt *o = &c->so;
    if ((o->alpha >= 0) != (o->draft_cost > 0))
        return errmsg_fail(err, len,
                           "--spec-alpha and --draft-cost go together: the speed-up "
                           "needs both the acceptance and the drafter's cost");
    if ((o->alpha >= 0 || o->generated > 0) && (c->format != CALC_FORMAT_TABLE || c->cp.axis >= 0))
        return errmsg_fail(err, len, "%s: printed in the table format without --cp only",
                           o->alpha >= 0 ? "--spec-alpha" : "--generate");
    return 0;
}

/* --infer: the serving prediction on out. Returns 0 or −1 (err). */
static int run_infer(cli *c, FILE *out, char *err, size_t len) {
    if (serve_check(c, err, len) < 0) return -1;
    if (c->cp.axis >= 0) return run_infer_cp(c, out, err, len);
    calc_infer_result r;
    if (calc_infer(&c->s, &c->io, &r, err, len) < 0) return -1;
    if (!out) return 0;
    if (c->format == CALC_FORMAT_CSV)
        calc_infer_print_csv(out, &c->s, &c->io, &r);
    else if (c->format == CALC_FORMAT_JSON)
        calc_infer_print_json(out, &c->s, &c->io, &r);
    else
        calc_infer_print(out, &c->s, &c->io, &r);
    calc_serve_result sr;
    calc_serve(&c->s, &c->io, &r, &c->so, &sr);
    calc_serve_print(out, &c->io, &r, &c->so, &sr);
    return 0;
}

int calc_run(int argc, char **argv, FILE *out, FILE *errout) {
    cli c;
    memset(&c, 0, sizeof c);
    calc_spec_defaults(&c.s);
    calc_infer_defaults(&c.io);
    calc_serve_defaults(&c.so);
    snprintf(c.chip, sizeof c.chip, "v5p");
    c.latency = -1;
    c.cp = (calc_cp_opt){-1, CALC_CP_RING};
    c.top = 15;
    char err[512] = "";
    int rc = parse_args(&c, argc, argv, err, sizeof err);
    if (rc == 1 && out) fputs(help_text, out);
    if (rc == 0) rc = cp_check(&c, err, sizeof err);
    if (rc == 0 && c.infer) {
        rc = run_infer(&c, out, err, sizeof err);
    } else if (rc == 0 && c.search) {
        rc = run_search(&c, out, err, sizeof err);
    } else if (rc == 0) {
        calc_result r;
        calc_cp_result cr;
        rc = calc_compute(&c.s, &r, err, sizeof err);
        if (rc == 0 && c.cp.axis >= 0) rc = calc_cp(&c.s, &r, &c.cp, &cr, err, sizeof err);
        if (rc == 0 && out) {
            if (c.format == CALC_FORMAT_CSV)
                calc_print_csv(out, &c.s, &r);
            else if (c.format == CALC_FORMAT_JSON && c.cp.axis >= 0)
                calc_print_json_cp(out, &c.s, &r, &c.cp, &cr);
            else if (c.format == CALC_FORMAT_JSON)
                calc_print_json(out, &c.s, &r);
            else
                calc_print(out, &c.s, &r);
            if (c.grid && c.format == CALC_FORMAT_TABLE) calc_print_pipe_grid(out, &c.s, &r);
            if (c.cp.axis >= 0 && c.format == CALC_FORMAT_TABLE)
                calc_cp_print(out, &c.s, &r, &c.cp, &cr);
        }
    }
    if (rc < 0 && errout) fprintf(errout, "meshplan: error: %s\n", err);
    return rc < 0 ? 2 : 0;
}

int calc_main(int argc, char **argv) {
    return calc_run(argc, argv, stdout, stderr);
}
