/* cpupeak: the nominal FP32 peak of the host CPU, for an MFU against the hardware as well as
 * against the measured sgemm rate. Reads /proc/cpuinfo and /sys/devices/system/cpu (Linux, x86);
 * no MPI.
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

/* Not collective. Fills out from this host's files. */
void cpupeak_detect(cpupeak *out);
/* FP32 FLOPs per cycle per core of an x86 core given its vendor ("GenuineIntel",
 * "AuthenticAMD"), family and model numbers and /proc/cpuinfo flags line; 0 when none of the
 * ISAs above is present. Describes the choice in isa[len]. */
int cpupeak_flops_per_cycle(const char *vendor, int family, int model, const char *flags, char *isa,
                            int len);
#endif
