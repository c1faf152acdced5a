/* cpupeak: the host CPU's nominal FP32 peak. See cpupeak.h for the formula. */
#include "train/observe/cpupeak.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is `flag` a whole word of the flags line? */
static int has_flag(const char *flags, const char *flag) {
    const size_t n = strlen(flag);
    for (const char *p = strstr(flags, flag); p; p = strstr(p + 1, flag))
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
    return 0;
}

int cpupeak_flops_per_cycle(const char *vendor, int family, int model, const char *flags, char *isa,
                            int len) {
    const int amd = strcmp(vendor, "AuthenticAMD") == 0;
    if (has_flag(flags, "avx512f")) {
        if (amd && family == 0x19) {
            snprintf(isa, (size_t)len, "AVX-512 on Zen 4: 2 FMA units x 8 lanes x 2");
            return 32;
        }
        snprintf(isa, (size_t)len, "AVX-512: 2 FMA units x 16 lanes x 2");
        return 64;
    }
    if (has_flag(flags, "avx2") && has_flag(flags, "fma")) {
        if (amd && family == 0x17 && model < 0x30) {
            snprintf(isa, (size_t)len, "AVX2+FMA on Zen 1: 2 FMA units x 4 lanes x 2");
            return 16;
        }
        snprintf(isa, (size_t)len, "AVX2+FMA: 2 FMA units x 8 lanes x 2");
        return 32;
    }
    if (has_flag(flags, "avx")) {
        snprintf(isa, (size_t)len, "AVX: 8-lane add + 8-lane multiply");
        return 16;
    }
    if (has_flag(flags, "sse2")) {
        snprintf(isa, (size_t)len, "SSE2: 4-lane add + 4-lane multiply");
        return 8;
    }
    snprintf(isa, (size_t)len, "no x86 vector ISA known to this table");
    return 0;
}

double cpupeak_measured(const cpupeak_trial *t, int n, double threads_per_cpu, double seen) {
    const double own = threads_per_cpu > 1 ? 1.0 / threads_per_cpu : 1.0; /* of a CPU */
    double best = seen > 0 ? seen : 0.0;
    for (int i = 0; i < n; i++) {
        double f = t[i].flops;
        if (t[i].share >= CPUPEAK_MIN_SHARE && t[i].share < 1 && f / t[i].share * own > f)
            f = f / t[i].share * own;
        if (f > best) best = f;
    }
    return best;
}

/* The value after "key\t: " of a /proc/cpuinfo line, or NULL. */
static const char *field(const char *line, const char *key) {
    const size_t n = strlen(key);
    if (strncmp(line, key, n) != 0 || (line[n] != ' ' && line[n] != '\t' && line[n] != ':'))
        return NULL;
    const char *c = strchr(line + n, ':');
    return c ? c + 1 + (c[1] == ' ') : NULL;
}

void cpupeak_detect(cpupeak *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) {
        snprintf(out->why, sizeof out->why, "no /proc/cpuinfo");
        return;
    }
    /* flags lines are long (~1.5 kB); 8 kB is ample */
    char line[8192], vendor[32] = "", flags[8192] = "";
    int family = -1, model = -1, phys = 0, core = 0, nproc = 0, ncore = 0;
    double mhz = 0;
    enum { MAXC = 4096 };
    int seen[MAXC][2]; /* (physical id, core id) pairs met so far */
    while (fgets(line, sizeof line, f)) {
        const char *v;
        if ((v = field(line, "processor")))
            nproc++;
        else if ((v = field(line, "vendor_id")) && !vendor[0])
            sscanf(v, "%31s", vendor);
        else if ((v = field(line, "cpu family")) && family < 0)
            family = atoi(v);
        else if ((v = field(line, "model name"))) {
            if (!out->model[0]) snprintf(out->model, sizeof out->model, "%s", v);
            out->model[strcspn(out->model, "\n")] = 0;
        } else if ((v = field(line, "model")) && model < 0)
            model = atoi(v);
        else if ((v = field(line, "cpu MHz")) && mhz == 0)
            mhz = atof(v);
        else if ((v = field(line, "flags")) && !flags[0])
            snprintf(flags, sizeof flags, "%s", v);
        else if ((v = field(line, "physical id")))
            phys = atoi(v);
        else if ((v = field(line, "core id"))) { /* follows physical id within a processor */
            core = atoi(v);
            int dup = 0;
            for (int k = 0; k < ncore && !dup; k++) dup = seen[k][0] == phys && seen[k][1] == core;
            if (!dup && ncore < MAXC) seen[ncore][0] = phys, seen[ncore][1] = core, ncore++;
        }
    }
    fclose(f);
    out->cores = ncore > 0 ? ncore : nproc;
    if (!vendor[0] || !flags[0]) {
        snprintf(out->why, sizeof out->why, "not an x86 /proc/cpuinfo (no vendor_id or flags)");
        return;
    }
    out->flops_per_cycle =
        cpupeak_flops_per_cycle(vendor, family, model, flags, out->isa, (int)sizeof out->isa);
    FILE *b = fopen("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency", "r");
    long khz = 0;
    if (b) {
        if (fscanf(b, "%ld", &khz) != 1) khz = 0;
        fclose(b);
    }
    if (khz > 0)
        out->ghz = (double)khz / 1e6, out->ghz_from = "base_frequency";
    else if (mhz > 0)
        out->ghz = mhz / 1e3, out->ghz_from = "cpu MHz";
    if (out->flops_per_cycle == 0)
        snprintf(out->why, sizeof out->why, "%s", out->isa);
    else if (out->ghz <= 0)
        snprintf(out->why, sizeof out->why, "no clock frequency found");
    else if (out->cores <= 0)
        snprintf(out->why, sizeof out->why, "no processors listed");
    out->known = out->flops_per_cycle > 0 && out->ghz > 0 && out->cores > 0;
    out->core_flops = out->known ? out->ghz * 1e9 * out->flops_per_cycle : 0;
}
