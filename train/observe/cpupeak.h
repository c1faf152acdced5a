/* cpupeak: the nominal FP32 peak of the host CPU, for an MFU against the hardware as well as
 * against the measured sgemm rate, and that measured rate combined from its start-up trials
 * (cpupeak_measured: what the trials' noise cannot push below a rate the run reached). Reads
 * /proc/cpuinfo and /sys/devices/system/cpu (Linux, x86); no MPI.
 *
 * Formula (documented in --help and docs/inspect.md):
 *   peak per core = GHz × FP32 FLOPs per cycle, FLOPs per cycle by the widest vector ISA:
 *     AVX-512F      64 = 2 FMA units × 16 lanes × 2 (Intel server cores with two 512-bit FMA
 *                   units, AMD Zen 5); 32 on AMD family 19h (Zen 4: 512-bit work on 256-bit
 *                   units). Some Intel parts (Xeon Bronze/Silver, client cores) have one 512-bit
 *                   unit: there the true peak is half.
 *     AVX2 + FMA    32 = 2 FMA units × 8 lanes × 2 (every Intel core since Haswell, AMD since
 *                   Zen 2); 16 on AMD family 17h before model 30h (Zen 1/Zen+: 128-bit units).
 *     AVX, no FMA   16 = 8-lane add + 8-lane multiply per cycle
 *     SSE2           8 = 4-lane add + 4-lane multiply per cycle
 *   GHz: the base frequency (/sys/.../cpufreq/base_frequency) if the kernel gives it, else the
 *   "cpu MHz" of /proc/cpuinfo (the nominal clock on most VMs; the current clock otherwise).
 *   cores: physical cores (distinct physical id / core id pairs; hardware threads share units).
 * Unknown (known = 0, with the reason in `why`) on other architectures or without those files. */
#ifndef MT_TRAIN_CPUPEAK_H
#define MT_TRAIN_CPUPEAK_H

typedef struct {
    int known;
    int cores; /* physical cores of the host */
    double ghz;
    const char *ghz_from; /* "base_frequency" or "cpu MHz" */
    int flops_per_cycle;  /* FP32, per core */
    char isa[96];         /* "AVX-512: 2 FMA units x 16 lanes x 2" */
    char model[96];       /* "model name" of /proc/cpuinfo */
    char why[128];        /* known = 0: why not */
    double core_flops;    /* ghz·1e9·flops_per_cycle */
} cpupeak;

/* The measured peak (the MFU's): one start-up timing of a rank's matmul rate, FLOP/s by the wall
 * clock, and the share of that wall time the timing thread ran (its CPU time / the wall time; 0
 * when not known: several BLAS threads, or a rate timed on the thread's CPU clock already). */
typedef struct {
    double flops, share;
} cpupeak_trial;
/* The trials a rank makes at start-up (one with a quick start). */
#define CPUPEAK_TRIALS 5
/* Below this share a trial barely ran: its rate is not scaled up by it. */
#define CPUPEAK_MIN_SHARE 0.2
/* Not collective; no timing. One rank's measured peak from its n trials: the best of the trials'
 * rates and, where another process kept the thread off its CPU for part of a trial (share < 1),
 * the rate it reached while it ran, flops / share, times the rank's own share of a CPU
 * (1 / threads_per_cpu, at most 1: ranks that share a CPU get that part of it whatever else
 * runs); at least `seen`, a rate the run itself reached on those products (0: none), since no
 * peak lies below a rate reached. So an MFU against it of a step the run timed is at most 1.
 * 0 when n = 0 and seen = 0. */
double cpupeak_measured(const cpupeak_trial *t, int n, double threads_per_cpu, double seen);

/* Not collective. Fills out from this host's files. */
void cpupeak_detect(cpupeak *out);
/* FP32 FLOPs per cycle per core of an x86 core given its vendor ("GenuineIntel",
 * "AuthenticAMD"), family and model numbers and /proc/cpuinfo flags line; 0 when none of the
 * ISAs above is present. Describes the choice in isa[len]. */
int cpupeak_flops_per_cycle(const char *vendor, int family, int model, const char *flags, char *isa,
                            int len);
#endif
