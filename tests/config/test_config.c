/* config: good command lines give the expected fields (derived values included); every bad one
 * is refused with a message that names the flag and says what would be right. Not MPI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/config/config.h"

/* Splits `line` at spaces into argv (argv[0] = "meshtrain") and parses it. */
static int parse(config *c, const char *line, char *err, size_t errlen) {
    static char buf[1024];
    char *argv[64];
    int argc = 0;
    argv[argc++] = "meshtrain";
    snprintf(buf, sizeof buf, "%s", line);
    for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    config_defaults(c);
    err[0] = '\0';
    return config_parse(c, argc, argv, err, errlen);
}

/* A bad line: parse returns −1 and the message contains every one of the fragments. */
static void bad(const char *line, const char *frag1, const char *frag2) {
    config c;
    char err[512];
    int rc = parse(&c, line, err, sizeof err);
    int ok = rc == -1 && strstr(err, frag1) && (!frag2 || strstr(err, frag2));
    check_expect(ok, "bad  %-44s -> %d \"%s\"", line, rc, err);
}

static void good(const char *line, config *c) {
    char err[512];
    int rc = parse(c, line, err, sizeof err);
    check_expect(rc == 0, "good %-44s -> %d %s", line, rc, err);
}

int main(void) {
    config c;
    char err[512];

    /* Defaults are valid and derived consistently. */
    config_defaults(&c);
    check_expect(config_validate(&c, err, sizeof err) == 0, "defaults validate (%s)", err);
    good("", &c);
    check_expect(c.shape.H == c.shape.D / c.shape.N && c.shape.K == c.shape.N && c.shape.V == 256,
                 "default H = D/N, K = N, V = 256");
    check_expect(c.shape.F == 384,
                 "default d-ff of D=128 is ceil(8/3·128 / 64)·64 = 384 (got %lld)",
                 (long long)c.shape.F);

    /* Both GNU forms, and derived values follow the flags they derive from. */
    good("--layers 6 --d-model=256 --heads 8 --kv-heads=2 --seq-len 64", &c);
    check_expect(c.shape.L == 6 && c.shape.D == 256 && c.shape.N == 8 && c.shape.K == 2 &&
                     c.shape.H == 32 && c.shape.F == 704 && c.shape.T == 64,
                 "shape L6 D256 N8 K2 -> H=32 F=704 (got H=%lld F=%lld)", (long long)c.shape.H,
                 (long long)c.shape.F);
    good("--heads 8", &c);
    check_expect(c.shape.K == 8, "--kv-heads follows --heads when not given (K=%lld)",
                 (long long)c.shape.K);
    good("--d-model 96 --heads 3 --head-dim 64 --d-ff 100", &c);
    check_expect(c.shape.H == 64 && c.shape.F == 100,
                 "explicit head dim (N·H != D allowed) and d-ff");
    good("--batch 32 --micro-batch 8 --steps 5 --lr 3e-4 --min-lr 0 --warmup 0", &c);
    check_expect(c.batch == 32 && c.micro_batch == 8 && c.steps == 5 && c.lr == 3e-4 &&
                     c.warmup == 0,
                 "batch/micro-batch/steps/lr");
    good("--batch 24", &c);
    check_expect(c.micro_batch == 24, "--micro-batch defaults to --batch");
    good("--optimizer sgd --data-order sequential --seed 42 --clip 0", &c);
    check_expect(c.optimizer == OPT_SGD && c.order == TOKENS_ORDER_SEQUENTIAL && c.seed == 42 &&
                     c.clip == 0.0,
                 "optimizer, data order, seed, clip");
    good("--data=x.h5 --metrics m.jsonl --save-init a.h5 --save-final b.h5 --sample 8 "
         "--prompt ROMEO:",
         &c);
    check_expect(!strcmp(c.data, "x.h5") && !strcmp(c.metrics, "m.jsonl") &&
                     !strcmp(c.save_init, "a.h5") && !strcmp(c.save_final, "b.h5") &&
                     !strcmp(c.prompt, "ROMEO:"),
                 "file names and prompt");
    good("--sample 100 --temperature 0 --top-k 5 --threads 2 --quiet --overlap", &c);
    check_expect(c.sample == 100 && c.temperature == 0.0 && c.top_k == 5 && c.threads == 2 &&
                     c.quiet && c.overlap,
                 "sampling, threads, switches");
    good("--mesh x=2,y=2 --open y --dp x --zero 3 --tensor y --alg bidir --emulate v5p", &c);
    check_expect(!strcmp(c.mesh, "x=2,y=2") && !strcmp(c.mesh_open, "y") &&
                     !strcmp(c.data_axes, "x") && c.zero == 3 && !strcmp(c.tensor_axis, "y") &&
                     c.alg == MESH_ALG_BIDIR && !strcmp(c.emulate, "v5p"),
                 "sharding flags");
    good("--mesh x=2,z=2 --dp x --pipeline z --microbatches 4 --schedule 1f1b", &c);
    check_expect(!strcmp(c.pipe_axis, "z") && c.microbatches == 4 && c.schedule == PIPE_1F1B,
                 "pipeline flags");
    good("--comm-dtype bf16 --bucket 4M --alg ring", &c);
    check_expect(c.comm_dtype == MESH_WIRE_BF16 && c.bucket == 4000000,
                 "--comm-dtype bf16 --bucket 4M");
    good("--bucket auto", &c);
    check_expect(c.bucket == -1 && c.comm_dtype == MESH_WIRE_F32, "--bucket auto; fp32 default");
    /* the collectives' flags, each parsed once into its type */
    check_expect(c.alg == MESH_ALG_DEFAULT && c.progress == CONFIG_PROGRESS_AUTO &&
                     c.emulate_rate == CONFIG_RATE_PEAK,
                 "--alg, --progress, --emulate-rate defaults");
    good("--overlap --progress inline --alg mpi", &c);
    check_expect(c.progress == CONFIG_PROGRESS_INLINE && c.alg == MESH_ALG_MPI,
                 "--progress inline --alg mpi");
    good("--overlap --progress thread --alg direct --emulate v5p --emulate-rate model", &c);
    check_expect(c.progress == CONFIG_PROGRESS_THREAD && c.alg == MESH_ALG_DIRECT &&
                     c.emulate_rate == CONFIG_RATE_MODEL,
                 "--progress thread --alg direct --emulate-rate model");
    good("--layers 2", &c);
    check_expect(c.bucket == -1, "--bucket auto by default");
    good("--bucket 0", &c);
    check_expect(c.bucket == 0, "--bucket 0: off");
    good("--bucket 2 --comm-dtype bf16", &c);
    check_expect(c.bucket == 2, "--bucket 2 with bf16: one element");
    check_expect(c.cmatmul == 0, "--collective-matmul off by default");
    good("--tensor y --collective-matmul auto", &c);
    check_expect(c.cmatmul == -1, "--collective-matmul auto");
    good("--tensor y --collective-matmul=on", &c);
    check_expect(c.cmatmul == 1, "--collective-matmul=on");
    good("--data-axes xz", &c);
    check_expect(!strcmp(c.data_axes, "xz"), "--data-axes is an alias of --dp");
    good("--bench", &c);
    check_expect(c.bench && c.steps == 10, "--bench needs no data and times 10 steps by default");
    good("--bench --steps 3", &c);
    check_expect(c.steps == 3, "--bench --steps 3");

    /* --demo is a preset: explicit flags win wherever they are. */
    good("--steps 7 --demo", &c);
    check_expect(c.demo && c.steps == 7 && c.sample == 300 && c.shape.K == 2,
                 "--demo then explicit --steps (steps=%lld)", (long long)c.steps);
    config_demo_mesh(&c, 4);
    check_expect(!strcmp(c.mesh, "x=2,y=2") && !strcmp(c.data_axes, "x") && c.zero == 3 &&
                     !strcmp(c.tensor_axis, "y"),
                 "--demo on 4 ranks: ZeRO-3 over x, tensor over y");
    good("--demo", &c);
    config_demo_mesh(&c, 2);
    check_expect(c.mesh[0] == '\0', "--demo on 2 ranks keeps the default 1D mesh");
    good("--demo --mesh 4", &c);
    config_demo_mesh(&c, 4);
    check_expect(!strcmp(c.mesh, "4") && c.tensor_axis[0] == '\0',
                 "--demo respects an explicit --mesh");

    check_expect(parse(&c, "--steps 3 --help --bogus", err, sizeof err) == 1,
                 "--help wins (returns 1)");
    check_expect(parse(&c, "--prompt --help", err, sizeof err) == -1,
                 "a flag-looking value is a missing value, not --help");

    /* Bad input: unknown, missing, malformed, out of range, and shapes that do not fit. */
    bad("--layrs 3", "unknown flag --layrs", "--layers");
    bad("--frobnicate", "unknown flag --frobnicate", "--help");
    bad("stray", "unexpected argument 'stray'", NULL);
    bad("--layers", "--layers needs a value", NULL);
    bad("--data --steps 4", "--data needs a value", "--steps");
    bad("--layers abc", "--layers", "whole number");
    bad("--layers 4x", "--layers", "whole number");
    bad("--layers 0", "--layers 0", "between 1 and");
    bad("--lr abc", "--lr", "expected a number");
    bad("--lr -1", "--lr", ">= 0");
    bad("--lr inf", "--lr", "expected a number");
    bad("--beta2 1", "--beta2", "< 1");
    bad("--eps 0", "--eps", "> 0");
    bad("--seed -3", "--seed", "non-negative");
    bad("--threads 0", "--threads 0", "between 1");
    bad("--zero 4", "--zero 4", "between 0 and 3");
    bad("--optimizer adam", "--optimizer adam", "adamw or sgd");
    bad("--data-order shuffled", "--data-order shuffled", "random or sequential");
    bad("--quiet=yes", "--quiet takes no value", NULL);
    bad("--d-model 192 --heads 6 --kv-heads 4", "--heads 6 is not divisible by --kv-heads 4",
        "1, 2, 3, 6");
    bad("--d-model 100 --heads 3", "--d-model 100 is not divisible by --heads 3", "--head-dim");
    bad("--head-dim 33", "head dim 33", "even");
    bad("--d-model 132 --heads 4", "head dim 33", "even");
    bad("--batch 10 --micro-batch 4", "--batch 10 is not a multiple of --micro-batch 4", NULL);
    bad("--seq-len 1", "--seq-len 1", "between 2");
    bad("--lr 1e-3 --min-lr 1e-2", "--min-lr", "above --lr");
    bad("--data=", "--data: the value is empty", "leave the flag out");
    /* regressions: each was once silently accepted */
    bad("--steps 3 --steps 4", "--steps is given twice (--steps 3, then --steps 4)", NULL);
    bad("--dp x --data-axes=y", "--data-axes is given twice (--dp x, then --data-axes y)", NULL);
    bad("--overlap --overlap", "--overlap is given twice", NULL);
    bad("--mesh=", "--mesh: the value is empty", NULL);
    bad("--trace=", "--trace: the value is empty", NULL);
    bad("--eps 1e-300", "--eps 1e-300: below float32's smallest normal number", NULL);
    bad("--lr 1e-45", "--lr 1e-45: below float32's smallest normal number", NULL);
    bad("--dp xx", "--dp xx", "twice");
    bad("--dp w", "--dp w", "x, y, z");
    bad("--tensor xy", "--tensor xy", "one axis");
    bad("--tensor x --dp xy", "--tensor x is also in --dp xy", NULL);
    bad("--open x,q", "--open x,q", "x, y, z");
    bad("--pipeline x --dp x", "--pipeline x is also used by --dp or --tensor", NULL);
    bad("--pipeline xy", "--pipeline xy", "one axis");
    bad("--pipeline z --batch 6 --microbatches 4", "--batch 6 is not divisible by --microbatches 4",
        NULL);
    bad("--schedule zigzag", "--schedule zigzag", "gpipe, 1f1b, interleaved, zb-h1 or zb-v");
    bad("--alg fast", "--alg fast", "ring, bidir, seq, multi, mpi or direct");
    bad("--comm-dtype fp16", "--comm-dtype fp16", "fp32 or bf16");
    bad("--bucket lots", "--bucket lots", "auto or bytes");
    bad("--tensor y --collective-matmul yes", "--collective-matmul yes", "on, off or auto");
    bad("--collective-matmul on", "--collective-matmul on needs a tensor axis", "--tensor AXIS");
    bad("--bucket -5", "--bucket -5", "auto or bytes");
    bad("--bucket 3Q", "--bucket 3Q", "auto or bytes");
    bad("--bucket 3", "--bucket 3: smaller than one element on the wire", "minimum is 4 bytes");
    bad("--bucket 1 --comm-dtype bf16", "--bucket 1: smaller", "minimum is 2 bytes");
    bad("--comm-dtype bf16 --alg mpi", "--comm-dtype bf16 needs --alg ring", "mpi moves fp32");
    bad("--emulate-rate model", "--emulate-rate model needs --emulate CHIP", NULL);
    bad("--mesh=x=2,y=2,z=2,w=2,v=2,u=2,t=2,s=2,r=2,q=2,p=2,o=2,n=2,m=2,l=2,k=2,j=2", "--mesh",
        "longer than");

    /* The class of numbers beyond what the type or the flag holds: the message gives the range,
     * never "expected a number"; and products of flags that no array can hold. */
    bad("--steps 99999999999999999999", "--steps 99999999999999999999: must be between 0 and",
        NULL);
    bad("--layers 99999999999999999999", "--layers 99999999999999999999: must be between 1", NULL);
    bad("--seed 99999999999999999999999", "--seed", "must be between 0 and 18446744073709551615");
    bad("--lr 1e999", "--lr 1e999: must be between 0 and 10", NULL);
    bad("--timeout 1e400", "--timeout 1e400: must be between", NULL);
    bad("--batch 16777216 --micro-batch 16777216 --seq-len 1048576 --vocab 16777216",
        "the logits, --micro-batch x --seq-len x --vocab", "more than one array can hold");
    bad("--layers 4096 --d-model 1048576 --d-ff 4194304 --heads 1 --head-dim 2",
        "the MLP weights, --layers x --d-model x --d-ff", "2^53");
    /* a value longer than any valid one gets the valid values, as any other wrong value */
    bad("--progress sometimes", "--progress sometimes: expected thread, inline or auto", NULL);
    bad("--emulate verylongchipname", "--emulate verylongchipname: expected v3, v4p", "v6e");
    bad("--emulate v9", "--emulate v9: unknown chip", "v5p");
    bad("--comm-dtype bfloat16x", "--comm-dtype bfloat16x: expected fp32 or bf16", NULL);
    bad("--emulate-rate sometimes", "--emulate-rate sometimes: expected peak or model", NULL);
    bad("--tensor xyzxyz", "--tensor xyzxyz: expected one axis", NULL);
    /* no flag silently ignored: each refused where it does nothing, naming why */
    bad("--optimizer sgd --beta1 0.5", "--beta1 is given but unused", "AdamW");
    bad("--keep 2", "--keep is given but unused", "--save-every");
    bad("--steps 5 --warmup 4 --min-lr 1e-5", "--min-lr is given but unused", "--warmup");
    bad("--ckpt-dir d", "--ckpt-dir is given but unused", "--save-every");
    bad("--take-over", "--take-over is given but unused", "--resume");
    bad("--eval-every 0 --eval-batches 2", "--eval-batches is given but unused", NULL);
    bad("--temperature 0.5", "--temperature is given but unused", "--sample");
    bad("--top-k 3", "--top-k is given but unused", "--sample");
    bad("--microbatches 2", "--microbatches is given but unused", "--pipeline");
    bad("--schedule 1f1b", "--schedule is given but unused", "--pipeline");
    bad("--progress thread", "--progress is given but unused", "--overlap");
    bad("--collective-matmul off", "--collective-matmul is given but unused", "--tensor");
    bad("--emulate-rate peak", "--emulate-rate is given but unused", "--emulate");
    bad("--no-matmul-bound", "--no-matmul-bound does nothing in training", NULL);
    bad("--bench --data x.h5", "--data does nothing in meshtrain --bench", NULL);
    bad("--bench --sample 5", "--sample does nothing in meshtrain --bench", NULL);
    good("--bench --no-matmul-bound", &c);
    good("--sample 5 --temperature 0.5 --top-k 3 --prompt x", &c);
    good("--save-every 5 --keep 2 --ckpt-dir d --take-over", &c);

    /* A config built in code is held to the same limits. */
    config_defaults(&c);
    c.shape.N = 5;
    check_expect(config_validate(&c, err, sizeof err) == -1 && strstr(err, "--kv-heads"),
                 "validate: N=5, K=4 refused (%s)", err);

    /* --help lists every flag it documents, with the FLOP formula. */
    FILE *mem = tmpfile();
    static char text[1 << 16];
    if (mem) {
        config_print_help(mem);
        rewind(mem);
        text[fread(text, 1, sizeof text - 1, mem)] = '\0';
        fclose(mem);
        const char *must[] = {"--layers",       "--d-model",    "--heads",
                              "--kv-heads",     "--head-dim",   "--d-ff",
                              "--seq-len",      "--vocab",      "--batch",
                              "--micro-batch",  "--steps",      "--lr",
                              "--warmup",       "--min-lr",     "--weight-decay",
                              "--clip",         "--optimizer",  "--beta1",
                              "--beta2",        "--eps",        "--seed",
                              "--data ",        "--data-order", "--eval-every",
                              "--eval-batches", "--sample",     "--temperature",
                              "--top-k",        "--prompt",     "--metrics",
                              "--save-init",    "--save-final", "--threads",
                              "--bench",        "--quiet",      "--demo",
                              "--help",         "--mesh",       "--open",
                              "--dp",           "--zero",       "--tensor",
                              "--overlap",      "--alg",        "--emulate",
                              "6·L·T·N·H",      "MFU"};
        for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
            check_expect(strstr(text, must[i]) != NULL, "--help mentions %s", must[i]);
    } else {
        check_expect(0, "tmpfile() for the --help text");
    }

    return check_finish("test_config");
}
