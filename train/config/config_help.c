/* meshtrain's --help: every flag of the table (config_flags.h) with its value, default and help,
 * under its group's heading. */
#include "train/config/config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "mesh/coll.h"
#include "train/config/config_flags.h"

/* ---- --help ---- */

static void default_str(const config *d, const flag_def *f, char *buf, size_t len) {
    const char *base = (const char *)d + f->off;
    buf[0] = '\0';
    switch (f->kind) {
    case K_I64:
    case K_INT:
        snprintf(buf, len, "%lld", (long long)config_flag_int(d, f));
        break;
    case K_U64: {
        uint64_t x;
        memcpy(&x, base, sizeof x);
        snprintf(buf, len, "%llu", (unsigned long long)x);
        break;
    }
    case K_F64:
        snprintf(buf, len, "%g", config_flag_number(d, f));
        break;
    case K_STR:
        if (*base) snprintf(buf, len, "%s", base);
        break;
    case K_OPTIM:
        snprintf(buf, len, "%s", d->optimizer == OPT_SGD ? "sgd" : "adamw");
        break;
    case K_ORDER:
        snprintf(buf, len, "%s", tokens_order_name(d->order));
        break;
    case K_SCHED:
        snprintf(buf, len, "%s", config_schedule_names[d->schedule]);
        break;
    case K_BUCKET:
        if (d->bucket < 0)
            snprintf(buf, len, "auto");
        else
            snprintf(buf, len, "%lld", (long long)d->bucket);
        break;
    case K_ONOFF: {
        int x;
        memcpy(&x, base, sizeof x);
        snprintf(buf, len, "%s", x < 0 ? "auto" : x ? "on" : "off");
        break;
    }
    case K_DTYPE: {
        compute_dtype x;
        memcpy(&x, base, sizeof x);
        snprintf(buf, len, "%s", compute_dtype_name(x));
        break;
    }
    case K_WIRE:
        snprintf(buf, len, "%s", mesh_wire_name(d->comm_dtype));
        break;
    case K_PROG:
        snprintf(buf, len, "%s", config_progress_name(d->progress));
        break;
    case K_RATE:
        snprintf(buf, len, "%s", config_rate_name(d->emulate_rate));
        break;
    default: /* K_ALG: no default shown (the mesh's, by the axes) */
        break;
    }
}

/* Prints text in the help column (27..100), breaking at spaces; `indent_first` when the flag name
 * took the first line. */
static void print_wrapped(FILE *out, const char *text, bool indent_first) {
    enum { COL = 27, WIDTH = 100 - 27 };
    const char *p = text;
    bool first = true;
    while (*p) {
        size_t n = strlen(p);
        if (n > WIDTH) {
            n = WIDTH;
            while (n > 0 && p[n] != ' ') n--;
            if (n == 0) n = strcspn(p, " ");
        }
        if (!first || indent_first) fprintf(out, "%*s", COL, "");
        fprintf(out, "%.*s\n", (int)n, p);
        p += n;
        while (*p == ' ') p++;
        first = false;
    }
}

void config_print_help(FILE *out) {
    config d;
    config_defaults(&d);
    fprintf(out, "meshtrain: train a LLaMA-style transformer on a mesh of MPI ranks.\n\n"
                 "usage: mpirun -np R meshtrain [flags]\n"
                 "       meshtrain prepare TEXT OUT.h5   (text file -> HDF5 token file)\n"
                 "       meshtrain plan [flags]          (print a sharding plan, no training)\n"
                 "       meshtrain ckpt info FILE | ckpt diff A B [--tol K]   (checkpoints)\n\n"
                 "Flags take a value as --flag VALUE or --flag=VALUE. [default in brackets]\n");
    for (int i = 0; i < config_flag_count; i++) {
        const flag_def *f = &config_flag_table[i];
        if (f->kind == K_GROUP) {
            fprintf(out, "\n%s:\n", f->name);
            continue;
        }
        if (!f->help) continue;
        char lhs[64], def[1100];
        snprintf(lhs, sizeof lhs, "--%s%s%s", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
        default_str(&d, f, def, sizeof def);
        bool derived = f->off == offsetof(config, shape.K) || f->off == offsetof(config, shape.H) ||
                       f->off == offsetof(config, shape.F) ||
                       f->off == offsetof(config, shape.moe.F) ||
                       f->off == offsetof(config, shape.moe.capacity) ||
                       f->off == offsetof(config, micro_batch);
        char text[1400];
        snprintf(text, sizeof text, "%s%s%s%s", f->help, def[0] && !derived ? " [" : "",
                 derived ? "" : def, def[0] && !derived ? "]" : "");
        if (strlen(lhs) > 24)
            fprintf(out, "  %s\n", lhs);
        else
            fprintf(out, "  %-24s ", lhs);
        print_wrapped(out, text, strlen(lhs) > 24);
    }
    fprintf(
        out,
        "\nEach step prints: step | loss | lr | gnorm | ms | tok/s | GFLOP/s | MFU, and with\n"
        "several ranks | comm (exposed) | idle | book (predicted step time, measured/predicted).\n"
        "  FLOPs per token = 6·P + 6·L·T·N·H, P = L·(D·(N+2K)·H + N·H·D + 3·D·F) + D·V\n"
        "  (the matmul parameters, forward + backward; embedding lookups are free; 6·L·T·N·H\n"
        "  is causal attention: QK^T and PV, T/2 keys per query on average, backward = 2x).\n"
        "  GFLOP/s = FLOPs per token x tokens per step / step time (all ranks together).\n"
        "  MFU = GFLOP/s / peak, peak = sum over the R ranks of the sgemm GFLOP/s each measures\n"
        "  at start-up, all at once (R x one core's rate with one rank per core): the best of 5\n"
        "  trials, a trial's rate while it ran where another process took part of its CPU; a\n"
        "  step that runs faster raises the peak to its own rate, so MFU stays <= 100%%.\n"
        "  The final line also gives MFU against the CPU's nominal FP32 peak when it is known:\n"
        "  cores x GHz x FLOPs/cycle (AVX-512 64, AVX2+FMA 32, AVX 16, SSE2 8; see\n"
        "  docs/inspect.md), cores = min(physical cores, ranks x --threads) per host.\n"
        "  With non-blocking collectives (--overlap) a step also prints | overlap: the share of\n"
        "  the collectives' transfer time hidden behind compute, 1 - exposed/transfer.\n"
        "Exit status: 0 ok, 2 bad input (one message from rank 0), 3 a bug or a collective\n"
        "mismatch (--debug-collectives), 4 the watchdog ended the job (--timeout).\n");
}

int config_help_asked(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}
