/* meshplan's flags against its modes: every flag of the table (calc_flag_name, not a copy) either
 * changes what a mode prints or is refused there with a message naming it; none is silently
 * ignored. For each flag and mode (a training step, --search, --infer):
 *  - where the table says the flag is not read: calc_run must refuse it (status 2, the flag named);
 *  - where it is read: the flag with a test value (below) must change the output or be refused
 *    (status 2: meshplan --infer reads --zero to refuse it, saying why); and when the entry has a
 *    context (a flag that matters only with another, like --dcn-bw with --pods), it must change
 *    the output once the context is given.
 * A flag of the table with no test value fails the test: a new flag cannot be forgotten.
 * Also the numeric class: every numeric flag refuses 1e30 and an out-of-range value, naming its
 * range; and an --infer request that no slice of the chip holds is refused, saying so. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calc/calc.h"

enum { T = CALC_MODE_TRAIN, S = CALC_MODE_SEARCH, I = CALC_MODE_INFER, ALL = T | S | I };

static const char *const base[8][12] = {
    [T] = {"--chip", "v5p", "--topology", "4x4x4", "--model", "llama3-70b", "--tokens", "1M"},
    [S] = {"--search", "--chip", "v5p", "--chips", "64", "--model", "llama3-70b", "--tokens", "1M",
           "--top", "4"},
    [I] = {"--infer", "--chip", "v5e", "--topology", "4x4", "--model", "llama3-70b", "--context",
           "8192", "--batch", "16"},
};

/* A test value: in the modes `modes`, FLAG VALUE (VALUE NULL for a switch), replacing the base's
 * `drop` flag (an alias of FLAG) in the run with FLAG; `context`: flags that make FLAG matter,
 * given to both runs compared: "--pods 2" adds (or replaces) a flag of the base, "!--chips"
 * removes one, "+--draft-cost 0.1" adds a flag to the run with FLAG only (the two go together:
 * each alone is refused) (NULL: none). */
typedef struct {
    const char *flag;
    int modes;
    const char *value, *drop, *context;
} test_value;

static const test_value values[] = {
    {"--chip", T | S, "v4p", NULL, NULL},
    {"--chip", I, "v6e", NULL, NULL},
    {"--flops", ALL, "1e15", NULL, NULL},
    {"--link-bw", ALL, "1e10", NULL, NULL},
    {"--latency", ALL, "1e-4", NULL, NULL},
    {"--hbm", ALL, "32e9", NULL, NULL},
    {"--hbm-bw", ALL, "1e12", NULL, NULL},
    {"--topology", T, "8x4x4", NULL, NULL},
    {"--topology", S, "8x4x4", NULL, "!--chips --topology 4x4x4"},
    {"--topology", I, "2x8", NULL, NULL},
    {"--mesh", T, "x=8,y=4,z=4", "--topology", NULL},
    {"--mesh", S, "x=8,y=4,z=4", NULL, "!--chips --topology 4x4x4"},
    {"--mesh", I, "x=2,y=8", "--topology", NULL},
    {"--open", T, "x", NULL, NULL},
    {"--open", S, "x", NULL, "!--chips --topology 4x4x4"},
    {"--open", I, "x", NULL, "--chip v5p --topology 4x4x4"},
    {"--model", T | S, "llama2-13b", NULL, NULL},
    {"--model", I, "llama2-13b", NULL, "--tensor x"},
    {"--layers", ALL, "40", NULL, NULL},
    {"--d-model", ALL, "4096", NULL, NULL},
    {"--heads", ALL, "32", NULL, NULL},
    {"--kv-heads", ALL, "4", NULL, NULL},
    {"--head-dim", ALL, "64", NULL, NULL},
    {"--d-ff", ALL, "14336", NULL, NULL},
    {"--vocab", ALL, "32000", NULL, NULL},
    {"--seq-len", ALL, "2048", NULL, NULL},
    {"--experts", ALL, "8", NULL, NULL},
    {"--moe-top-k", ALL, "1", NULL, "--experts 8"},
    {"--top-k", ALL, "1", NULL, "--experts 8"},
    {"--shared-experts", ALL, "1", NULL, "--experts 8"},
    {"--expert-d-ff", ALL, "4096", NULL, "--experts 8"},
    {"--expert", T | I, "x", NULL, "--experts 8"},
    {"--expert", S, "x", NULL, "!--chips --topology 4x4x4 --experts 8"},
    {"--schedule", ALL, "1f1b", NULL, "--pipeline z"},
    {"--virtual-stages", ALL, "4", NULL, "--pipeline z --schedule interleaved --microbatches 4"},
    {"--cp", ALL, "x", NULL, NULL},
    {"--cp-alg", ALL, "ulysses", NULL, "--cp x"},
    {"--pods", ALL, "2", NULL, NULL},
    {"--dcn-bw", ALL, "1e9", NULL, "--pods 2"},
    {"--batch", T | S, "256", "--tokens", NULL},
    {"--batch", I, "32", NULL, NULL},
    {"--tokens", ALL, "2M", NULL, NULL},
    {"--dp", ALL, "x", NULL, NULL},
    {"--data-axes", ALL, "x", NULL, NULL},
    {"--data", ALL, "x", NULL, NULL},
    {"--zero", ALL, "3", NULL, NULL},
    {"--tensor", T | S, "z", NULL, NULL},
    {"--tensor", I, "x", NULL, NULL},
    {"--pipeline", T | S, "z", NULL, NULL},
    {"--pipeline", I, "y", NULL, NULL},
    {"--microbatches", ALL, "4", NULL, "--pipeline z"},
    {"--remat", ALL, "block", NULL, NULL},
    {"--alg", ALL, "ring", NULL, NULL},
    {"--param-bytes", ALL, "1", NULL, NULL},
    {"--grad-bytes", ALL, "4", NULL, NULL},
    {"--opt-bytes", ALL, "4", NULL, NULL},
    {"--act-bytes", ALL, "4", NULL, NULL},
    {"--context", ALL, "4096", NULL, NULL},
    {"--prefill", ALL, "1024", NULL, NULL},
    {"--kv-bytes", ALL, "1", NULL, NULL},
    {"--flops-dtype", ALL, "int8", NULL, NULL},
    {"--prefill-mfu", ALL, "0.5", NULL, NULL},
    {"--spec-alpha", ALL, "0.8", NULL, "+--draft-cost 0.1"},
    {"--draft-cost", ALL, "0.1", NULL, "+--spec-alpha 0.8"},
    {"--generate", ALL, "256", NULL, NULL},
    {"--whole-axes", ALL, NULL, NULL, NULL},
    {"--chips", ALL, "128", NULL, NULL},
    {"--top", ALL, "3", NULL, NULL},
    {"--format", ALL, "json", NULL, NULL},
};

typedef struct {
    int rc;
    char *out, *err;
} result;

/* calc_run on argv (argv[0] = "meshplan"), output and errors captured. */
static result run(int argc, char **argv) {
    result r = {0, NULL, NULL};
    size_t no, ne;
    FILE *out = open_memstream(&r.out, &no), *err = open_memstream(&r.err, &ne);
    r.rc = calc_run(argc, argv, out, err);
    fclose(out);
    fclose(err);
    return r;
}

static void result_free(result *r) {
    free(r->out);
    free(r->err);
}

/* Whether word a (a flag of the base) is named in the context's words, as "!a" or "a". */
static int in_context(const char *ctx, const char *a) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", ctx ? ctx : "");
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " "))
        if (!strcmp(t[0] == '!' || t[0] == '+' ? t + 1 : t, a)) return 1;
    return 0;
}

/* argv = "meshplan", the mode's base, less what the context removes or sets and less `drop`
 * (when flag is given), then the context's other words, then flag [value]. */
static int build(char **argv, int mode, const test_value *v, const char *flag, int with_ctx,
                 char *ctx_buf) {
    int n = 0;
    const char *ctx = with_ctx && v ? v->context : NULL;
    argv[n++] = "meshplan";
    for (int i = 0; i < 12 && base[mode][i]; i++) {
        const char *a = base[mode][i];
        const int takes =
            a[0] == '-' && i + 1 < 12 && base[mode][i + 1] && base[mode][i + 1][0] != '-';
        if ((flag && v && v->drop && !strcmp(a, v->drop)) || (flag && !strcmp(a, flag)) ||
            in_context(ctx, a)) {
            i += takes;
            continue;
        }
        argv[n++] = (char *)a;
    }
    if (ctx) { /* its words, but the flag under test (or its alias) and its value */
        snprintf(ctx_buf, 128, "%s", ctx);
        int skip = 0, partner = 0;
        for (char *t = strtok(ctx_buf, " "); t; t = strtok(NULL, " ")) {
            const int value = t[0] != '-' && t[0] != '!' && t[0] != '+';
            if (skip && value) {
                skip = 0;
                continue;
            }
            if (!value) partner = t[0] == '+';
            skip = flag && (!strcmp(t, flag) || (v->drop && !strcmp(t, v->drop)));
            if (t[0] != '!' && !skip && (!partner || flag)) argv[n++] = t + (t[0] == '+');
        }
    }
    if (flag) {
        argv[n++] = (char *)flag;
        if (v && v->value) argv[n++] = (char *)v->value;
    }
    argv[n] = NULL;
    return n;
}

static const test_value *value_for(const char *flag, int mode) {
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        if (!strcmp(values[i].flag, flag) && (values[i].modes & mode)) return &values[i];
    return NULL;
}

static int fails;

/* Whether r refused the flag: status 2 and a message naming it. */
static int refused(const result *r, const char *flag) {
    return r->rc == 2 && r->err && strstr(r->err, flag);
}

/* The output of the mode's base (with the entry's context when with_ctx) and with the flag. */
static int compare(const char *flag, int mode, const test_value *v, int with_ctx, result *b,
                   result *r) {
    char *argv[40], ctx[128];
    int argc = build(argv, mode, v, NULL, with_ctx, ctx);
    *b = run(argc, argv);
    argc = build(argv, mode, v, flag, with_ctx, ctx);
    *r = run(argc, argv);
    return b->rc == 0 && r->rc == 0 && strcmp(b->out, r->out) != 0;
}

static void walk_one(const char *flag, int mode, int reads) {
    static const char *const mname[] = {"", "training", "--search", "", "--infer"};
    const test_value *v = value_for(flag, mode);
    if (!v) {
        printf("FAIL %s in %s: no test value (add one to tests/calc/test_flags.c)\n", flag,
               mname[mode]);
        fails++;
        return;
    }
    result b, r;
    const int changed = compare(flag, mode, v, 0, &b, &r);
    if (b.rc != 0) {
        printf("FAIL %s: the base of %s fails: %s", flag, mname[mode], b.err);
        fails++;
    } else if (!reads) { /* the table says: refused here */
        if (refused(&r, flag)) {
            printf("ok   %-14s %-9s refused: %s", flag, mname[mode], r.err);
        } else {
            printf("FAIL %s in %s: the table says it is not read, yet status %d\n", flag,
                   mname[mode], r.rc);
            fails++;
        }
    } else if (!changed && r.rc != 2) {
        printf("FAIL %s %s in %s: status %d and the output unchanged: silently ignored\n", flag,
               v->value ? v->value : "", mname[mode], r.rc);
        fails++;
    } else if (v->context) { /* read in this mode: with its context it must matter */
        result bc, rc;
        if (compare(flag, mode, v, 1, &bc, &rc)) {
            printf("ok   %-14s %-9s %s; with %s it changes the output\n", flag, mname[mode],
                   changed ? "changes the output" : "refused alone", v->context);
        } else {
            printf("FAIL %s in %s with %s: status %d / %d, output %s\n", flag, mname[mode],
                   v->context, bc.rc, rc.rc, rc.rc == 0 ? "unchanged" : rc.err);
            fails++;
        }
        result_free(&bc);
        result_free(&rc);
    } else if (changed) {
        printf("ok   %-14s %-9s changes the output\n", flag, mname[mode]);
    } else {
        printf("ok   %-14s %-9s refused: %s", flag, mname[mode], r.err);
    }
    result_free(&b);
    result_free(&r);
}

/* Every numeric flag refuses 1e30 (beyond any chip table or integer), naming its range. */
static void numbers(void) {
    for (int i = 0; i < calc_flag_count(); i++) {
        int modes, is_mode;
        const char *flag = calc_flag_name(i, &modes, &is_mode);
        const test_value *v = value_for(flag, modes & -modes);
        char *end;
        if (is_mode || !v || !v->value || (strtod(v->value, &end), *end && strcmp(end, "M")))
            continue; /* numbers only */
        const int mode = modes & -modes;
        char *argv[40], ctx[128];
        test_value big = *v;
        big.value = "1e30";
        const int argc = build(argv, mode, &big, flag, 0, ctx);
        result r = run(argc, argv);
        if (refused(&r, flag) && strstr(r.err, "expected a") && strstr(r.err, " to ")) {
            printf("ok   %-14s 1e30 refused: %s", flag, r.err);
        } else {
            printf("FAIL %s 1e30: status %d, %s\n", flag, r.rc, r.rc ? r.err : "accepted");
            fails++;
        }
        result_free(&r);
    }
}

/* --infer with a request no slice of the chip holds: refused, saying so (it once printed a
 * smallest slice smaller than its own minimum). */
static void no_slice(void) {
    char *argv[] = {"meshplan",  "--infer",         "--chip",     "v5e",     "--topology",
                    "4x4",       "--model",         "llama3-70b", "--batch", "1",
                    "--context", "999999999999999", "--format",   "json",    NULL};
    result r = run(14, argv);
    if (r.rc == 2 && strstr(r.err, "no slice of v5e holds this request") && !*r.out) {
        printf("ok   an impossible request: %s", r.err);
    } else {
        printf("FAIL --context 999999999999999: status %d, %s\n", r.rc, r.rc ? r.err : r.out);
        fails++;
    }
    result_free(&r);
}

int main(void) {
    const int modes[] = {T, S, I};
    int n = 0;
    for (int i = 0; i < calc_flag_count(); i++) {
        int reads, is_mode;
        const char *flag = calc_flag_name(i, &reads, &is_mode);
        if (is_mode) continue; /* --search, --infer: the modes themselves */
        for (int k = 0; k < 3; k++, n++) walk_one(flag, modes[k], (reads & modes[k]) != 0);
    }
    numbers();
    no_slice();
    printf("test_flags: %d flag x mode cases, %d failure(s)\n", n, fails);
    return fails != 0;
}
