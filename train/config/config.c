/* config: defaults, GNU-style flag parsing (`--flag value` and `--flag=value`), validation and
 * --help, all driven by one table of flags so the three can never disagree.
 *
 * Derived values. --head-dim defaults to d_model/heads, --kv-heads to heads, --d-ff to
 * 8/3·d_model rounded up to a multiple of 64 (LLaMA's rule: a SwiGLU MLP with three D×F
 * matrices then holds ≈ 8·D² parameters, like a 4·D GELU MLP with two), --micro-batch to
 * --batch. A derived value follows the flags it derives from wherever they appear on the command
 * line; giving it explicitly pins it. --demo is a preset applied before every other flag, so
 * explicit flags override it in any order. */
#include "train/config/config.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/config/config_check.h"
#include "train/config/config_flags.h"

#define F_(field) offsetof(config, field), sizeof(((config *)0)->field)
#define SH_(field) offsetof(config, shape.field), sizeof(int64_t)
#define MO_(field) offsetof(config, shape.moe.field), sizeof(((config *)0)->shape.moe.field)
const flag_def config_flag_table[] = {
    {"Model", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"layers", K_I64, SH_(L), 1, 4096, 0, "L", "transformer blocks"},
    {"d-model", K_I64, SH_(D), 1, 1 << 20, 0, "D", "residual width"},
    {"heads", K_I64, SH_(N), 1, 1 << 16, 0, "N", "query heads"},
    {"kv-heads", K_I64, SH_(K), 1, 1 << 16, 0, "K", "key/value heads, N % K == 0 (default N)"},
    {"head-dim", K_I64, SH_(H), 2, 1 << 16, 0, "H", "head dim, even (default D/N)"},
    {"d-ff", K_I64, SH_(F), 1, 1 << 22, 0, "F", "MLP width (default 8/3·D rounded up to 64)"},
    {"seq-len", K_I64, SH_(T), 2, 1 << 20, 0, "T", "tokens per sequence"},
    {"vocab", K_I64, SH_(V), 2, 1 << 24, 0, "V",
     "vocabulary; must match the data (256 for the byte tokenizer)"},
    {"Mixture of experts", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"experts", K_I64, MO_(E), 0, 4096, 0, "E",
     "routed experts per MoE layer, each a SwiGLU MLP (0 = a dense model)"},
    {"moe-top-k", K_I64, MO_(k), 0, 4096, 0, "k",
     "experts per token: the k largest router logits (ties to the lower index), weighted by the "
     "softmax over those k logits (renormalised, as Mixtral; --top-k is the sampler's)"},
    {"moe-every", K_I64, MO_(every), 0, 4096, 0, "n",
     "every n-th block's MLP is MoE: blocks n-1, 2n-1, ... (1 = every block)"},
    {"shared-experts", K_I64, MO_(shared), 0, 4096, 0, "S",
     "always-on experts per MoE layer, added with weight 1 beside the routed ones"},
    {"expert-d-ff", K_I64, MO_(F), 0, 1 << 22, 0, "F", "each expert's width (default --d-ff)"},
    {"capacity-factor", K_F64, MO_(capacity), 0, 1e6, 0, "c",
     "each expert takes at most ceil(c·k·T/E) tokens of one sequence (T = --seq-len), first come "
     "first served in position order; a dropped (token, expert) slot adds nothing and the token "
     "keeps its residual (default: dropless)"},
    {"aux-loss-coef", K_F64, MO_(aux_coef), 0, 1e6, 0, "X",
     "load-balancing loss X·E·Σ_e f_e·P_e of each sequence (f_e: share of its T·k slots the "
     "router sends to e, P_e: e's mean router probability), averaged over the sequences, summed "
     "over the MoE layers"},
    {"router-z-loss-coef", K_F64, MO_(z_coef), 0, 1e6, 0, "X",
     "router z-loss X·mean over tokens of logsumexp(router logits)², summed over the MoE layers "
     "(0 = off)"},
    {"Batch and schedule", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"batch", K_I64, F_(batch), 1, 1 << 24, 0, "B", "global sequences per step"},
    {"micro-batch", K_I64, F_(micro_batch), 1, 1 << 24, 0, "B",
     "global sequences per micro-batch, divides --batch (default --batch)"},
    {"steps", K_I64, F_(steps), 0, 1e12, 0, "N",
     "optimizer steps (--bench: timed steps, default 10)"},
    {"optimizer", K_OPTIM, F_(optimizer), 0, 0, 0, "adamw|sgd", "optimizer"},
    {"lr", K_F64, F_(lr), 0, 10, 0, "X", "peak learning rate"},
    {"warmup", K_I64, F_(warmup), 0, 1e12, 0, "N", "linear warm-up steps, then cosine decay"},
    {"min-lr", K_F64, F_(min_lr), 0, 10, 0, "X", "learning rate at the last step, <= --lr"},
    {"weight-decay", K_F64, F_(weight_decay), 0, 10, 0, "X",
     "decoupled weight decay (matrices only, not norm gains)"},
    {"clip", K_F64, F_(clip), 0, 1e30, 0, "X", "clip the global gradient norm to X (0 = off)"},
    {"beta1", K_F64, F_(beta1), 0, 1, EXCL_HI, "X", "AdamW β1"},
    {"beta2", K_F64, F_(beta2), 0, 1, EXCL_HI, "X", "AdamW β2"},
    {"eps", K_F64, F_(eps), 0, 1, EXCL_LO, "X", "AdamW ε"},
    {"seed", K_U64, F_(seed), 0, 0, 0, "S", "seeds initialisation, batches and sampling"},
    {"Data and evaluation", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"data", K_STR, F_(data), 0, 0, 0, "FILE",
     "HDF5 token file (meshtrain prepare) or a text file (byte tokenizer)"},
    {"data-order", K_ORDER, F_(order), 0, 0, 0, "random|sequential",
     "random: row b of step s at an offset drawn from RNG(seed, s, b); "
     "sequential: at ((s·B + b)·T) mod (n − T − 1)"},
    {"eval-every", K_I64, F_(eval_every), 0, 1e12, 0, "N",
     "validation loss every N steps and at the end (0 = never)"},
    {"eval-batches", K_I64, F_(eval_batches), 1, 1e6, 0, "N", "batches of --batch rows per eval"},
    {"Output", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"sample", K_I64, F_(sample), 0, 1e9, 0, "N", "generate N bytes at the end (0 = none)"},
    {"temperature", K_F64, F_(temperature), 0, 100, 0, "X", "sampling temperature (0 = greedy)"},
    {"top-k", K_I64, F_(top_k), 0, 1 << 24, 0, "K", "sample among the K likeliest (0 = all)"},
    {"prompt", K_STR, F_(prompt), 0, 0, 0, "STR", "text the sample continues (default a newline)"},
    {"metrics", K_STR, F_(metrics), 0, 0, 0, "FILE", "write one JSON line per step to FILE"},
    {"save-init", K_STR, F_(save_init), 0, 0, 0, "FILE",
     "write the initial state (a checkpoint, see --save-every)"},
    {"save-final", K_STR, F_(save_final), 0, 0, 0, "FILE",
     "write the final state (a checkpoint, see --save-every)"},
    {"threads", K_INT, F_(threads), 1, 1024, 0, "N", "BLAS threads per rank"},
    {"compute-dtype", K_DTYPE, F_(compute), 0, 0, 0, "fp32|bf16|auto",
     "what the matmuls multiply: bf16 inputs accumulated in fp32, as a TPU's matrix unit (master "
     "weights, optimizer, norms, softmax, RoPE and the loss stay fp32; checkpoints the same in "
     "either), or fp32; auto = bf16 where the CPU has a bf16 matrix unit (AMX, AVX512-BF16), "
     "else fp32. MESHTRAIN_BF16_PATH=amx|avx512bf16|avx512|avx2|portable forces the bf16 kernels' "
     "path (avx512: bf16 widened to fp32 on AVX-512's FMAs, auto's choice on Intel without AMX)"},
    {"kv-dtype", K_DTYPE, F_(kv_dtype), 0, 0, 0, "fp32|bf16|auto",
     "generate, serve: the KV cache's elements. bf16 halves its bytes (a decode step reads half "
     "the cache); attention then multiplies bf16 q·Kᵀ and P·V with fp32 accumulation, softmax "
     "fp32. auto = the compute dtype's"},
    {"bench", K_SWITCH, F_(bench), 0, 0, 0, NULL,
     "timing run on synthetic tokens (no data file): tokens/s, MFU, matmul-only bound"},
    {"no-matmul-bound", K_SWITCH, F_(no_matmul_bound), 0, 0, 0, NULL,
     "--bench: do not time the matmul-only bound (the whole step's sgemms on one rank)"},
    {"quiet", K_SWITCH, F_(quiet), 0, 0, 0, NULL,
     "no plan, per-step lines or summary table: the final line (and sample)"},
    {"demo", K_DEMO, 0, 0, 0, 0, 0, NULL,
     "the README's main job: small model on the built-in corpus, 2D mesh plan on 4 ranks, "
     "300 steps, 300 sampled bytes (explicit flags override it)"},
    {"help", K_HELP, 0, 0, 0, 0, 0, NULL, "this text"},
    {"Checkpoints (docs/checkpoints.md)", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"save-every", K_I64, F_(save_every), 0, 1e12, 0, "N",
     "write a checkpoint DIR/step_NNNNNN.h5 every N steps and after the last (0 = never): "
     "params, optimizer state, step, seed; any mesh and sharding can resume it"},
    {"keep", K_I64, F_(keep), 0, 1e9, 0, "K",
     "keep the newest K checkpoints, deleting older ones once a new one is complete (0 = all)"},
    {"ckpt-dir", K_STR, F_(ckpt_dir), 0, 0, 0, "DIR", "directory of --save-every's checkpoints"},
    {"resume", K_STR, F_(resume), 0, 0, 0, "PATH|latest",
     "continue from a checkpoint (bit-exact on the same mesh and sharding), or from the newest "
     "complete one in --ckpt-dir; --steps stays the total"},
    {"take-over", K_SWITCH, F_(take_over), 0, 0, 0, NULL,
     "a --ckpt-dir belongs to the run that saves there (a running one holds a lock): allow this "
     "run to resume another run's checkpoint, or to save into a directory another run owns"},
    {"Mesh and sharding", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"mesh", K_STR, F_(mesh), 0, 0, 0, "SPEC",
     "named axes and sizes, \"x=2,y=2\" or \"2x2\" (default: 1D over all ranks)"},
    {"open", K_STR, F_(mesh_open), 0, 0, 0, "AXES", "axes without wraparound, e.g. \"x\""},
    {"cross-hosts", K_STR, F_(cross_hosts), 0, 0, 0, "AXES",
     "axes that cross hosts (made slowest in MPI rank order; default: the first axis, so the "
     "last stays inside a host; docs/cluster.md)"},
    {"dp", K_STR, F_(data_axes), 0, 0, 0, "AXES",
     "axes the batch is sharded over, e.g. \"x\" or \"xz\" (default: every axis that "
     "--tensor and --pipeline leave free); alias --data-axes"},
    {"data-axes", K_STR, F_(data_axes), 0, 0, 0, "AXES", NULL},
    {"dcn", K_STR, F_(dcn_axis), 0, 0, 0, "AXIS",
     "a data axis across the data-center network (pods): gradients ReduceScatter over the "
     "other (ICI) data axes, the 1/|ICI| shard is reduced over AXIS, then AllGather over ICI; "
     "ZeRO shards over the ICI data axes only; --emulate gives AXIS the chip's DCN bandwidth"},
    {"zero", K_INT, F_(zero), 0, 3, 0, "S",
     "ZeRO stage over the --dp axes: 0 replicated, 1 optimizer, 2 +grads, 3 +weights (FSDP)"},
    {"tensor", K_STR, F_(tensor_axis), 0, 0, 0, "AXIS",
     "Megatron tensor-parallel axis, e.g. \"y\""},
    {"expert", K_STR, F_(expert_axis), 0, 0, 0, "AXIS",
     "shard the routed experts over this data axis (expert parallelism: tokens go to their "
     "experts' ranks and back by AllToAll)"},
    {"cp", K_STR, F_(cp_axis), 0, 0, 0, "AXIS",
     "context parallelism: every sequence's T tokens sharded over this axis (zigzag or "
     "contiguous split, RoPE at global positions); the axis also shares the gradients' "
     "reduction and ZeRO's shards with --dp, as a data axis does, but loads no batch of its own"},
    {"cp-alg", K_STR, F_(cp_alg), 0, 0, 0, "allgather|ring|ulysses",
     "--cp's attention: gather K and V over the axis (allgather), pass K and V blocks round "
     "it (ring; balanced by the zigzag split when 2|axis| divides T), or AllToAll from sequence to "
     "head shards (ulysses, heads divisible by |axis|)"},
    {"overlap", K_SWITCH, F_(overlap), 0, 0, 0, NULL,
     "start gradient reductions, FSDP gathers and the expert axis's AllToAlls (behind the shared "
     "experts and the router's backward) asynchronously"},
    {"progress", K_PROG, F_(progress), 0, 0, 0, "thread|inline|auto",
     "who runs the asynchronous collectives (--overlap, the collective matmul): a progress "
     "thread, or the rank's own thread between its kernels (inline: no thread competes for the "
     "rank's core); auto = inline when ranks on the host x (1 + --threads) exceed its cores "
     "and each rank had 0.9 of a core at start-up (else the cores are oversubscribed), else "
     "thread, and thread under --emulate (docs/fidelity.md, Inline progress)"},
    {"alg", K_ALG, F_(alg), 0, 0, 0, "ALG",
     "collective algorithm: ring|bidir|seq|multi|mpi|direct"},
    {"comm-dtype", K_WIRE, F_(comm_dtype), 0, 0, 0, "fp32|bf16",
     "what the collectives carry: bf16 as on a TPU halves every collective's bytes (reductions "
     "still add in fp32; results within the tolerance of docs/fidelity.md)"},
    {"bucket", K_BUCKET, F_(bucket), 0, 0, 0, "BYTES|auto",
     "data-axis gradient reductions (and ZeRO-3's weight gathers) grouped into buckets of BYTES "
     "(K/M/G suffixes; at least one element on the wire); auto = the smallest the cost model "
     "finds bandwidth-bound (hop latency <= 10% of the transfer) on the --emulate chip's links, "
     "else (real links, --alg mpi) on v5p's, not the links' start-up timing, so the same in "
     "every run; rounded up to a power of two; at most the gradients' size; 0 = one reduction "
     "per tensor"},
    {"collective-matmul", K_ONOFF, F_(cmatmul), 0, 0, 0, "on|off|auto",
     "tensor parallelism's forward ReduceScatter and AllGather and backward AllGather as "
     "collective matmuls: "
     "chunks travel round the --tensor ring (ppermute) while the matmul of the chunk in hand "
     "runs; auto = where the cost model predicts less exposed communication than the plain "
     "collectives (docs/fidelity.md)"},
    {"emulate", K_STR, F_(emulate), 0, 0, 0, "CHIP",
     "emulate a TPU's compute/link ratio, e.g. v5p"},
    {"emulate-rate", K_RATE, F_(emulate_rate), 0, 0, 0, "peak|model",
     "the CPU rate that stands for the chip's peak FLOP/s under --emulate: the core's 1024³ sgemm "
     "(peak), or the rate this model's linear layers reach at start-up (model: the emulated chip "
     "runs the model's matmuls at its peak, as the book assumes)"},
    {"pipeline", K_STR, F_(pipe_axis), 0, 0, 0, "AXIS",
     "pipeline axis: the layers split into |Z| stages of L/|Z| (L_Z)"},
    {"microbatches", K_I64, F_(microbatches), 0, 1 << 20, 0, "M",
     "pipeline micro-batches per step, divides --batch (0 = |Z|, the default)"},
    {"schedule", K_SCHED, F_(schedule), 0, 0, 0, "gpipe|1f1b|interleaved|zb-h1|zb-v",
     "pipeline schedule: all forwards then all backwards, one-forward-one-backward, Megatron's "
     "interleaved 1F1B over --virtual-stages chunks per rank, zero bubble H1 (the backward "
     "split into input and weight gradients, the latter deferred into the bubble), or zero "
     "bubble V (two chunks per rank in a V: rank r holds stages r and 2|Z|-1-r)"},
    {"virtual-stages", K_I64, F_(virtual_stages), 0, 64, 0, "v",
     "--schedule interleaved: chunks of L/(|Z|·v) layers per rank, dealt round-robin (0 = 2)"},
    {"A look inside the run (docs/inspect.md)", K_GROUP, 0, 0, 0, 0, 0, NULL, NULL},
    {"trace", K_STR, F_(trace), 0, 0, 0, "FILE",
     "write a timeline (Chrome trace-event JSON: Perfetto, chrome://tracing): a track per rank, "
     "spans for layers, micro-batches, collectives and p2p"},
    {"debug-collectives", K_SWITCH, F_(debug_collectives), 0, 0, 0, NULL,
     "check that the ranks of an axis set make the same collective (op, count, algorithm) and "
     "name the ranks that differ"},
    {"timeout", K_F64, F_(timeout), 0, 1e6, 0, "S",
     "watchdog: if a collective, p2p wait or step lasts S seconds, every rank prints where it is "
     "and the job ends (0 = off; SIGUSR1 prints where each rank is at any time)"},
};
#undef F_
#undef SH_
#undef MO_
enum { NFLAGS = sizeof config_flag_table / sizeof config_flag_table[0] };
const int config_flag_count = NFLAGS;
static const flag_def *const flags = config_flag_table;

const char *compute_dtype_name(compute_dtype d) {
    return d == COMPUTE_BF16 ? "bf16" : d == COMPUTE_AUTO ? "auto" : "fp32";
}

int compute_dtype_bytes(compute_dtype d) {
    return d == COMPUTE_BF16 ? 2 : 4;
}

static int64_t default_ff(int64_t D) {
    int64_t f = (8 * D + 2) / 3; /* ceil(8·D/3) */
    return (f + 63) / 64 * 64;
}

void config_defaults(config *c) {
    memset(c, 0, sizeof *c);
    c->shape = (model_shape){.L = 4, .D = 128, .N = 4, .K = 4, .H = 32, .V = 256, .T = 128};
    c->shape.F = default_ff(c->shape.D);
    c->shape.moe = (moe_shape){.k = 2, .every = 1, .aux_coef = 0.01}; /* used with --experts */
    c->batch = 16;
    c->micro_batch = 16;
    c->steps = 200;
    c->optimizer = OPT_ADAMW;
    c->lr = 1e-3;
    c->min_lr = 1e-4;
    c->warmup = 20;
    c->weight_decay = 0.1;
    c->clip = 1.0;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = 1e-8;
    c->seed = 1337;
    snprintf(c->data, sizeof c->data, "data/tinyshakespeare.txt");
    c->order = TOKENS_ORDER_RANDOM;
    c->eval_every = 100;
    c->eval_batches = 4;
    c->temperature = 0.8;
    c->top_k = 40;
    c->threads = 1;
    c->kv_dtype = COMPUTE_AUTO;
    snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "checkpoints");
    c->alg = MESH_ALG_DEFAULT;
    snprintf(c->cp_alg, sizeof c->cp_alg, "allgather");
    c->comm_dtype = MESH_WIRE_F32;
    c->emulate_rate = CONFIG_RATE_PEAK;
    c->progress = CONFIG_PROGRESS_AUTO;
    c->bucket = -1; /* auto */
}

/* The README's main job; applied before all other flags. The mesh part (2D plan on 4 ranks) is
 * applied by config_demo_mesh once the number of ranks is known. */
static void apply_demo(config *c) {
    c->demo = 1;
    c->shape.L = 4;
    c->shape.D = 128;
    c->shape.N = 4;
    c->shape.K = 2;
    c->shape.T = 128;
    c->batch = 16;
    c->steps = 300;
    c->lr = 2e-3;
    c->min_lr = 2e-4;
    c->warmup = 30;
    c->eval_every = 100;
    c->eval_batches = 4;
    c->sample = 300;
}

void config_demo_mesh(config *c, int nranks) {
    if (!c->demo || nranks != 4 || c->mesh[0] || c->data_axes[0] || c->tensor_axis[0]) return;
    snprintf(c->mesh, sizeof c->mesh, "x=2,y=2");
    snprintf(c->data_axes, sizeof c->data_axes, "x");
    snprintf(c->tensor_axis, sizeof c->tensor_axis, "y");
    if (c->zero == 0) c->zero = 3;
}

/* ---- parsing ---- */

static const flag_def *find_flag(const char *name, size_t len) {
    for (int i = 0; i < NFLAGS; i++)
        if (flags[i].kind != K_GROUP && strlen(flags[i].name) == len &&
            strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

/* Edit distance, for "did you mean". Names are short; anything longer is cut at 63. */
static int edit_distance(const char *a, size_t la, const char *b) {
    size_t lb = strlen(b);
    if (la > 63) la = 63;
    if (lb > 63) lb = 63;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *nearest_flag(const char *name, size_t len) {
    const char *best = NULL;
    int bestd = 3; /* suggest only close misspellings */
    for (int i = 0; i < NFLAGS; i++) {
        if (flags[i].kind == K_GROUP) continue;
        int d = edit_distance(name, len, flags[i].name);
        if (d < bestd) bestd = d, best = flags[i].name;
    }
    return best;
}

/* The parsers return −1 on bad input, with errno = ERANGE when the input is a number beyond
 * what the type holds (the message then gives the flag's range). */

/* After a strto* call on s that set end: 0 if it read all of s in range, else −1 (errno cleared
 * unless the whole of s was a number out of range). */
static int read_all(const char *s, const char *end) {
    if (end == s || *end) {
        errno = 0;
        return -1;
    }
    return errno ? -1 : 0;
}

static int parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (read_all(s, end)) return -1;
    *out = (int64_t)v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (read_all(s, end)) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_f64(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (read_all(s, end) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* The index of val among the n names, or -1. */
static int name_index(const char *val, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(val, names[i]) == 0) return i;
    return -1;
}

/* A numeric flag (K_I64, K_INT, K_U64, K_F64) into its field at base. */
static int set_number(char *base, const flag_def *f, const char *val, char *err, size_t errlen) {
    switch (f->kind) {
    case K_I64:
    case K_INT: {
        int64_t i;
        if (parse_i64(val, &i) && errno != ERANGE)
            return errmsg_fail(err, errlen, "--%s: expected a whole number, got '%s'", f->name,
                               val);
        if (errno == ERANGE || (double)i < f->lo || (double)i > f->hi)
            return errmsg_fail(err, errlen, "--%s %s: must be between %.0f and %.0f", f->name, val,
                               f->lo, f->hi);
        if (f->kind == K_INT) {
            int v = (int)i;
            memcpy(base, &v, sizeof v);
        } else {
            memcpy(base, &i, sizeof i);
        }
        return 0;
    }
    case K_U64: {
        uint64_t u;
        if (parse_u64(val, &u) && errno == ERANGE)
            return errmsg_fail(err, errlen, "--%s %s: must be between 0 and %llu", f->name, val,
                               (unsigned long long)UINT64_MAX);
        if (parse_u64(val, &u))
            return errmsg_fail(err, errlen, "--%s: expected a non-negative whole number, got '%s'",
                               f->name, val);
        memcpy(base, &u, sizeof u);
        return 0;
    }
    default: {
        double d;
        if (parse_f64(val, &d) && errno != ERANGE)
            return errmsg_fail(err, errlen, "--%s: expected a number, got '%s'", f->name, val);
        if (errno == ERANGE)
            return errmsg_fail(err, errlen, "--%s %s: must be between %g and %g", f->name, val,
                               f->lo, f->hi);
        memcpy(base, &d, sizeof d);
        return 0;
    }
    }
}

/* --bucket: auto (-1) or bytes with an optional K, M or G suffix. */
static int set_bucket(config *c, const char *val, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    const double v = strcmp(val, "auto") == 0 ? -1 : strtod(val, &end);
    const double unit = !end || !*end       ? 1
                        : !strcmp(end, "K") ? 1e3
                        : !strcmp(end, "M") ? 1e6
                        : !strcmp(end, "G") ? 1e9
                                            : 0;
    if (errno || (end && end == val) || unit == 0 || !(v >= 0 || v == -1) || v * unit > 1e12)
        return errmsg_fail(err, errlen,
                           "--bucket %s: expected auto or bytes (K, M, G suffixes allowed) "
                           "from 0 to 1e12",
                           val);
    c->bucket = v < 0 ? -1 : (int64_t)(v * unit);
    return 0;
}

static const char *const progress_names[] = {"auto", "thread", "inline"};
static const char *const rate_names[] = {"peak", "model"};

const char *config_progress_name(config_progress p) {
    return p >= 0 && p <= CONFIG_PROGRESS_INLINE ? progress_names[p] : "?";
}
const char *config_rate_name(config_rate r) {
    return r >= 0 && r <= CONFIG_RATE_MODEL ? rate_names[r] : "?";
}

/* The collectives' flags (K_ALG, K_WIRE, K_PROG, K_RATE). */
static int set_collective(config *c, const flag_def *f, const char *val, char *err, size_t errlen) {
    int i;
    switch (f->kind) {
    case K_ALG: /* "" as not given; "default" is not a choice */
        if (!val[0]) return c->alg = MESH_ALG_DEFAULT, 0;
        if ((i = mesh_alg_parse(val)) <= MESH_ALG_DEFAULT)
            return errmsg_fail(err, errlen,
                               "--alg %s: expected ring, bidir, seq, multi, mpi or direct", val);
        return c->alg = (mesh_alg)i, 0;
    case K_WIRE:
        if ((i = mesh_wire_parse(val)) < 0)
            return errmsg_fail(err, errlen, "--comm-dtype %s: expected fp32 or bf16", val);
        return c->comm_dtype = (mesh_wire)i, 0;
    case K_PROG:
        if ((i = name_index(val, progress_names, 3)) < 0)
            return errmsg_fail(err, errlen, "--progress %s: expected thread, inline or auto", val);
        return c->progress = (config_progress)i, 0;
    default:
        if ((i = name_index(val, rate_names, 2)) < 0)
            return errmsg_fail(err, errlen, "--emulate-rate %s: expected peak or model", val);
        return c->emulate_rate = (config_rate)i, 0;
    }
}

/* A flag whose value is one of a few names (K_OPTIM, K_SCHED, K_ONOFF, K_ORDER). */
static int set_choice(config *c, const flag_def *f, const char *val, char *err, size_t errlen) {
    int i;
    switch (f->kind) {
    case K_OPTIM:
        if ((i = name_index(val, (const char *const[]){"adamw", "sgd"}, 2)) < 0)
            return errmsg_fail(err, errlen, "--optimizer %s: expected adamw or sgd", val);
        c->optimizer = i == 0 ? OPT_ADAMW : OPT_SGD;
        return 0;
    case K_SCHED:
        if ((i = name_index(val, config_schedule_names, 5)) < 0)
            return errmsg_fail(err, errlen,
                               "--schedule %s: expected gpipe, 1f1b, interleaved, zb-h1 or zb-v",
                               val);
        c->schedule = (pipe_schedule)i;
        return 0;
    case K_DTYPE:
        if ((i = name_index(val, (const char *const[]){"fp32", "bf16", "auto"}, 3)) < 0)
            return errmsg_fail(err, errlen, "--%s %s: expected fp32, bf16 or auto", f->name, val);
        memcpy((char *)c + f->off, &(compute_dtype){(compute_dtype)i}, sizeof(compute_dtype));
        return 0;
    case K_ONOFF: {
        if ((i = name_index(val, (const char *const[]){"on", "off", "auto"}, 3)) < 0)
            return errmsg_fail(err, errlen, "--%s %s: expected on, off or auto", f->name, val);
        const int v = i == 0 ? 1 : i == 1 ? 0 : -1;
        memcpy((char *)c + f->off, &v, sizeof v);
        return 0;
    }
    default: {
        const int order = tokens_order_parse(val);
        if (order < 0)
            return errmsg_fail(err, errlen, "--data-order %s: expected random or sequential", val);
        c->order = (tokens_order)order;
        return 0;
    }
    }
}

static int set_flag(config *c, const flag_def *f, const char *val, char *err, size_t errlen) {
    char *base = (char *)c + f->off;
    switch (f->kind) {
    case K_I64:
    case K_INT:
    case K_U64:
    case K_F64:
        return set_number(base, f, val, err, errlen);
    case K_STR:
        if (strlen(val) >= f->size) {
            char buf[96];
            const char *want = config_str_expect(f->name, buf, sizeof buf);
            if (want) return errmsg_fail(err, errlen, "--%s %s: expected %s", f->name, val, want);
            return errmsg_fail(err, errlen, "--%s: value longer than %zu characters", f->name,
                               f->size - 1);
        }
        memcpy(base, val, strlen(val) + 1);
        return 0;
    case K_BUCKET:
        return set_bucket(c, val, err, errlen);
    case K_OPTIM:
    case K_SCHED:
    case K_ONOFF:
    case K_ORDER:
    case K_DTYPE:
        return set_choice(c, f, val, err, errlen);
    case K_ALG:
    case K_WIRE:
    case K_PROG:
    case K_RATE:
        return set_collective(c, f, val, err, errlen);
    default:
        return errmsg_fail(err, errlen, "--%s takes no value", f->name);
    }
}

static bool takes_value(const flag_def *f) {
    return f->kind != K_SWITCH && f->kind != K_DEMO && f->kind != K_HELP;
}

/* --help (returns 1) and --demo (applied) act before everything else, wherever they are. A value
 * that happens to read "--help" (e.g. --prompt --help) is still a value: skip values while
 * scanning. */
static int early_flags(config *c, int argc, char **argv) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (strncmp(a, "--", 2) != 0) continue;
            const char *eq = strchr(a + 2, '=');
            const flag_def *f = find_flag(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
            if (!f) continue;
            if (takes_value(f) && !eq) i++;
            if (pass == 0 && f->kind == K_HELP) return 1;
            if (pass == 1 && f->kind == K_DEMO) apply_demo(c);
        }
    }
    return 0;
}

/* The mixture-of-experts flags: all of them need --experts (a dense model's moe is all 0);
 * --expert-d-ff defaults to --d-ff; a capacity factor given must be positive. */
static int derive_moe(model_shape *s, const bool *given, char *err, size_t errlen) {
    static const char *const moe_flags[] = {
        "moe-top-k",       "moe-every",     "shared-experts",     "expert-d-ff",
        "capacity-factor", "aux-loss-coef", "router-z-loss-coef", "expert"};
    moe_shape *mo = &s->moe;
    for (size_t i = 0; i < sizeof moe_flags / sizeof *moe_flags; i++) {
        const bool g = given[find_flag(moe_flags[i], strlen(moe_flags[i])) - flags];
        if (g && mo->E == 0)
            return errmsg_fail(err, errlen,
                               "--%s configures the mixture-of-experts layers: give --experts E "
                               "too",
                               moe_flags[i]);
    }
    if (mo->E == 0) {
        *mo = (moe_shape){0};
        return 0;
    }
    if (!given[find_flag("expert-d-ff", 11) - flags]) mo->F = s->F;
    if (given[find_flag("capacity-factor", 15) - flags] && !(mo->capacity > 0))
        return errmsg_fail(err, errlen,
                           "--capacity-factor %g: must be > 0 (each expert takes at most "
                           "ceil(c·k·T/E) tokens of a sequence); leave the flag out for dropless "
                           "routing",
                           mo->capacity);
    return 0;
}

/* The defaults that follow from other flags, where a flag was not given. */
static int derive_defaults(config *c, const bool *given, char *err, size_t errlen) {
#define GIVEN(n) given[find_flag(n, strlen(n)) - flags]
    model_shape *s = &c->shape;
    if (!GIVEN("kv-heads") && !(c->demo && s->N % s->K == 0)) s->K = s->N;
    if (!GIVEN("head-dim")) {
        if (s->D % s->N != 0)
            return errmsg_fail(err, errlen,
                               "--d-model %lld is not divisible by --heads %lld: give --head-dim "
                               "explicitly or choose heads dividing d-model",
                               (long long)s->D, (long long)s->N);
        s->H = s->D / s->N;
    }
    if (!GIVEN("d-ff")) s->F = default_ff(s->D);
    if (derive_moe(s, given, err, errlen) < 0) return -1;
    if (!GIVEN("micro-batch")) c->micro_batch = c->batch;
    if (c->bench && !GIVEN("steps")) c->steps = 10;
#undef GIVEN
    return 0;
}

int config_parse(config *c, int argc, char **argv, char *err, size_t errlen) {
    return config_parse_for(c, CONFIG_MODE_TRAIN, argc, argv, err, errlen);
}

int config_parse_for(config *c, config_mode mode, int argc, char **argv, char *err, size_t errlen) {
    if (early_flags(c, argc, argv)) return 1;

    bool given[NFLAGS] = {false};
    const char *given_val[NFLAGS] = {NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return errmsg_fail(err, errlen,
                               "unexpected argument '%s' (flags start with --; subcommands "
                               "'prepare', 'plan' and 'ckpt' come first; see --help)",
                               a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const flag_def *f = find_flag(name, len);
        if (!f) {
            const char *near = nearest_flag(name, len);
            if (near)
                return errmsg_fail(err, errlen,
                                   "unknown flag --%.*s (did you mean --%s? see --help)", (int)len,
                                   name, near);
            return errmsg_fail(err, errlen, "unknown flag --%.*s (see --help)", (int)len, name);
        }
        if (!takes_value(f)) {
            if (eq) return errmsg_fail(err, errlen, "--%s takes no value, got '%s'", f->name, a);
            if (f->kind == K_SWITCH && given[f - flags])
                return errmsg_fail(err, errlen, "--%s is given twice: give each flag once",
                                   f->name);
            if (f->kind == K_SWITCH) *(int *)((char *)c + f->off) = 1;
            given[f - flags] = true;
            continue;
        }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc)
                return errmsg_fail(err, errlen, "--%s needs a value: --%s %s", f->name, f->name,
                                   f->meta);
            val = argv[++i];
            /* "--data --steps 5" is a forgotten value, not a file named "--steps". */
            if (strncmp(val, "--", 2) == 0 && find_flag(val + 2, strcspn(val + 2, "=")))
                return errmsg_fail(err, errlen, "--%s needs a value (%s), got the flag %s", f->name,
                                   f->meta, val);
        }
        for (int k = 0; k < NFLAGS; k++) /* aliases share a field: --dp x --data-axes y too */
            if (given[k] && flags[k].off == f->off && flags[k].kind == f->kind)
                return errmsg_fail(err, errlen,
                                   "--%s is given twice (--%s %s, then --%s %s): give each flag "
                                   "once",
                                   f->name, flags[k].name, given_val[k], f->name, val);
        if (f->kind == K_STR && !*val && f->off != offsetof(config, prompt))
            return errmsg_fail(err, errlen,
                               "--%s: the value is empty (give a %s, or leave the flag out for "
                               "the default)",
                               f->name, f->meta);
        if (set_flag(c, f, val, err, errlen)) return -1;
        given[f - flags] = true;
        given_val[f - flags] = val;
    }

    if (derive_defaults(c, given, err, errlen)) return -1;
    if (config_validate(c, err, errlen)) return -1;
    const char *names[NFLAGS];
    int n = 0;
    for (int k = 0; k < NFLAGS; k++)
        if (given[k]) names[n++] = flags[k].name;
    if (mode == CONFIG_MODE_TRAIN && c->bench) mode = CONFIG_MODE_BENCH;
    return config_check_used(c, mode, names, n, err, errlen);
}

/* ---- validation ---- */

int64_t config_flag_int(const void *c, const flag_def *f) {
    const char *base = (const char *)c + f->off;
    if (f->kind == K_INT) {
        int x;
        memcpy(&x, base, sizeof x);
        return x;
    }
    int64_t x;
    memcpy(&x, base, sizeof x);
    return x;
}

double config_flag_number(const void *c, const flag_def *f) {
    double v;
    if (f->kind != K_F64) return (double)config_flag_int(c, f);
    memcpy(&v, (const char *)c + f->off, sizeof v);
    return v;
}

/* Ranges from the table, so a config built in code is held to the same limits. */
static int check_ranges(const config *c, char *err, size_t errlen) {
    for (int i = 0; i < NFLAGS; i++) {
        const flag_def *f = &flags[i];
        if (!f->help || (f->kind != K_I64 && f->kind != K_INT && f->kind != K_F64)) continue;
        const double v = config_flag_number(c, f);
        if (f->kind == K_F64 && v != 0 && fabs(v) < FLT_MIN)
            return errmsg_fail(err, errlen,
                               "--%s %g: below float32's smallest normal number %.2g (the "
                               "kernels compute in float32, where it would round to 0)",
                               f->name, v, (double)FLT_MIN);
        bool lo_bad = (f->excl & EXCL_LO) ? !(v > f->lo) : !(v >= f->lo);
        bool hi_bad = (f->excl & EXCL_HI) ? !(v < f->hi) : !(v <= f->hi);
        if (lo_bad || hi_bad)
            return errmsg_fail(err, errlen, "--%s %g: must be %s %g and %s %g", f->name, v,
                               (f->excl & EXCL_LO) ? ">" : ">=", f->lo,
                               (f->excl & EXCL_HI) ? "<" : "<=", f->hi);
    }
    return 0;
}

int config_validate(const config *c, char *err, size_t errlen) {
    if (check_ranges(c, err, errlen) || config_check_limits(c, err, errlen) ||
        config_check_model(c, err, errlen) || config_check_sharding(c, err, errlen) ||
        config_check_cp(c, err, errlen) ||
        config_check_collectives(c, err, errlen))
        return -1;
    return 0;
}
