/* simpod-platform: writes a SimGrid platform (and the matching host file) for a slice of the
 * chip table's TPUs, so that SMPI simulates meshtrain's mesh on the chip's interconnect. Runs on
 * the host (not under smpirun); bench/simpod calls it.
 *
 *   simpod-platform --chip v5p --topology 8x8x8 --platform OUT.xml --hostfile OUT.hosts
 *
 * The slice. One simulated host per chip, named chip-<rank>, listed in rank order in the host
 * file, so that smpirun puts rank r on chip r. Rank ↔ coordinates follow mesh/mesh.h: the axes of
 * --topology are the mesh's x, y, z in that order and the LAST varies fastest.
 *
 * The links (mesh/cost.c's table): every pair of neighbours on an axis is joined by one link per
 * direction (full duplex) of the chip's one-way ICI bandwidth and T_min of latency per hop; an
 * axis has its wraparound link when the chip's rule gives it one (cost_axis_wraps: v5p wraps
 * every axis of a slice of whole 4x4x4 cubes, v5e/v6e only an axis of 16, ...). A slice that
 * wraps on every axis is SimGrid's TORUS cluster (routes computed, fast for thousands of chips);
 * one with an open axis is an explicit graph of the same links, routed by shortest path
 * (Dijkstra). Each chip computes at the chip's bf16 peak (for simulated compute, SMPI_SAMPLE or
 * smpi_execute_flops).
 *
 * The network model. bench/simpod runs smpirun with --cfg=network/model:CM02 (a link moves bytes
 * at exactly its bandwidth after its latency: no TCP-like bandwidth or latency factors, which the
 * default SMPI model applies) and network/crosstraffic:0 (no simulated acknowledgements in the
 * reverse direction, which would share the other direction of a full-duplex link). A transfer of
 * b bytes over one link then takes T_min + b / W_ici_oneway, as tests/smpi checks.
 *
 * Pods (--pods N [--dcn-bw X]): N copies of a slice of at most two axes, joined by the
 * data-center network. The pods are the mesh's first axis (x, slowest; the slice's axes become y
 * and z), so that a collective over x runs across pods and one over yz inside each. The slices
 * are the graph above (one per pod, the chip's wraparound rules); every chip also has a DCN uplink
 * and downlink of X bytes/s each (default: the chip's cost_chip_dcn_bw, the host's 2.5e10 B/s
 * shared by its chips, as the calculator's --dcn-bw) and T_min/2 of latency, to one switch: a
 * message between pods takes T_min + b/X, and a chip sends to both ring neighbours over its one
 * uplink, so a bidirectional ring gets X/2 each way, the calculator's DCN link. Routes are
 * shortest paths counted in links (SimGrid's Dijkstra), so each DCN route carries padding links
 * (free: no latency, 1e18 B/s) that make it longer than any path inside a pod: traffic inside a
 * pod stays on ICI. The mesh's pod axis wraps (the switch closes the ring).
 *
 * On stdout: the mesh to run on this platform, as KEY=VALUE lines for the shell:
 *   ranks=512  mesh=x=8,y=8,z=8  open=   (open: the axes without wraparound, for --open) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/cost.h"

static void usage(void) {
    fprintf(stderr, "usage: simpod-platform --chip v3|v4p|v5e|v5p|v6e --topology AxB[xC] "
                    "[--pods N [--dcn-bw BYTES_PER_S]] --platform OUT.xml --hostfile OUT.hosts\n");
}

static int parse_topology(const char *s, int *sizes) {
    int n = 0;
    const char *p = s;
    while (*p && n < COST_MAX_AXES) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096) return -1;
        sizes[n++] = (int)v;
        if (*end == 0) return n;
        if (*end != 'x') return -1;
        p = end + 1;
    }
    return -1;
}

/* Rank of the chip at coordinates c (last axis fastest, as mesh/mesh.h). */
static int rank_of(const int *c, const int *sizes, int n) {
    int r = 0;
    for (int k = 0; k < n; k++) r = r * sizes[k] + c[k];
    return r;
}

static void coords_of(int r, int *c, const int *sizes, int n) {
    for (int k = n - 1; k >= 0; k--) c[k] = r % sizes[k], r /= sizes[k];
}

static void write_header(FILE *f) {
    fprintf(f, "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n");
}

/* Every axis wraps: SimGrid's TORUS cluster. Its topo_parameters list the FIRST-varying
 * dimension first, so the mesh's axes go in reverse; axes of 1 are left out. */
static void write_torus(FILE *f, const cost_chip *chip, const int *sizes, int n, int N) {
    char topo[64] = "";
    for (int k = n - 1; k >= 0; k--) {
        if (sizes[k] == 1) continue;
        char part[16];
        snprintf(part, sizeof part, "%s%d", topo[0] ? "," : "", sizes[k]);
        strncat(topo, part, sizeof topo - strlen(topo) - 1);
    }
    fprintf(f,
            "  <zone id=\"world\" routing=\"Full\">\n"
            "    <cluster id=\"slice\" topology=\"TORUS\" topo_parameters=\"%s\" prefix=\"chip-\" "
            "suffix=\"\" radical=\"0-%d\" speed=\"%.6gf\" bw=\"%.6gBps\" lat=\"%.6gs\" "
            "sharing_policy=\"SPLITDUPLEX\" loopback_bw=\"1e15Bps\" loopback_lat=\"0s\"/>\n"
            "  </zone>\n",
            topo, N - 1, chip->flops_bf16, chip->ici_oneway, chip->hop_latency);
}

/* Some axis is open (or pods): the links one by one, one per direction, routed by shortest path.
 * The chips of pod p are chip-(p·N + r); the caller opens and closes the zone. */
static void write_graph(FILE *f, const cost_chip *chip, const int *sizes, const int *wraps, int n,
                        int N, int pod, int pass) {
    if (pass < 0) { /* hosts first, then links, then routes (SimGrid's DTD) */
        for (int r = 0; r < N; r++)
            fprintf(f, "    <host id=\"chip-%d\" speed=\"%.6gf\"/>\n", pod * N + r,
                    chip->flops_bf16);
        return;
    }
    for (int r = 0; r < N; r++) {
        int c[COST_MAX_AXES];
        coords_of(r, c, sizes, n);
        for (int k = 0; k < n; k++)
            for (int dir = -1; dir <= 1; dir += 2) {
                int d[COST_MAX_AXES];
                memcpy(d, c, sizeof d);
                d[k] += dir;
                if (d[k] < 0 || d[k] >= sizes[k]) {
                    if (!wraps[k]) continue;
                    d[k] = (d[k] + sizes[k]) % sizes[k];
                }
                const int s = rank_of(d, sizes, n) + pod * N, a = r + pod * N;
                if (s == a || (sizes[k] == 2 && dir > 0 && wraps[k])) continue;
                if (pass == 0)
                    fprintf(f,
                            "    <link id=\"l%d-%d\" bandwidth=\"%.6gBps\" "
                            "latency=\"%.6gs\"/>\n",
                            a, s, chip->ici_oneway, chip->hop_latency);
                else
                    fprintf(f,
                            "    <route src=\"chip-%d\" dst=\"chip-%d\" symmetrical=\"NO\">"
                            "<link_ctn id=\"l%d-%d\"/></route>\n",
                            a, s, a, s);
            }
    }
}

/* The pods' DCN: every chip's uplink and downlink to one switch, each route padded past the
 * longest path inside a pod (see the header). pass −1: the switch, 0: links, 1: routes. */
static void write_dcn(FILE *f, const cost_chip *chip, const int *sizes, int n, int total,
                      double dcn_bw, int pass) {
    int pad = 1;
    for (int k = 0; k < n; k++) pad += sizes[k];
    if (pass < 0) {
        fprintf(f, "    <router id=\"dcn\"/>\n");
        return;
    }
    for (int i = 0; i < pad && pass == 0; i++)
        fprintf(f, "    <link id=\"pad%d\" bandwidth=\"1e18Bps\" latency=\"0s\"/>\n", i);
    for (int r = 0; r < total && pass == 0; r++)
        fprintf(f,
                "    <link id=\"up%d\" bandwidth=\"%.6gBps\" latency=\"%.6gs\"/>\n"
                "    <link id=\"dn%d\" bandwidth=\"%.6gBps\" latency=\"%.6gs\"/>\n",
                r, dcn_bw, chip->hop_latency / 2, r, dcn_bw, chip->hop_latency / 2);
    for (int r = 0; r < total && pass == 1; r++)
        for (int up = 1; up >= 0; up--) {
            char chip_id[24];
            snprintf(chip_id, sizeof chip_id, "chip-%d", r);
            fprintf(f,
                    "    <route src=\"%s\" dst=\"%s\" symmetrical=\"NO\"><link_ctn id=\"%s%d\"/>",
                    up ? chip_id : "dcn", up ? "dcn" : chip_id, up ? "up" : "dn", r);
            for (int i = 0; i < pad; i++) fprintf(f, "<link_ctn id=\"pad%d\"/>", i);
            fprintf(f, "</route>\n");
        }
}

/* The command line's values (NULL: not given; --pods defaults to "1"). */
typedef struct {
    const char *chip, *topology, *platform, *hostfile, *pods, *dcn_bw;
} args;

/* Reads the --flag value pairs; 0, or −1 after the usage (an unknown flag, one without its value, a
 * required one missing). */
static int parse_args(args *a, int argc, char **argv) {
    const struct {
        const char *flag;
        const char **dst;
    } flags[] = {{"--chip", &a->chip},         {"--topology", &a->topology},
                 {"--platform", &a->platform}, {"--hostfile", &a->hostfile},
                 {"--pods", &a->pods},         {"--dcn-bw", &a->dcn_bw}};
    const int nflags = (int)(sizeof flags / sizeof flags[0]);
    *a = (args){.pods = "1"};
    for (int i = 1; i + 1 < argc; i += 2) {
        int k = 0;
        while (k < nflags && strcmp(argv[i], flags[k].flag)) k++;
        if (k == nflags) {
            usage();
            fprintf(stderr, "simpod-platform: error: unknown option '%s'\n", argv[i]);
            return -1;
        }
        *flags[k].dst = argv[i + 1];
    }
    if (argc % 2 == 0 || !a->chip || !a->topology || !a->platform || !a->hostfile) {
        usage();
        return -1;
    }
    return 0;
}

/* The slices: the chip, the axes of one slice (N chips) with their wraparound, the pods and the
 * DCN's bandwidth. */
typedef struct {
    const cost_chip *chip;
    int sizes[COST_MAX_AXES], wraps[COST_MAX_AXES], n, N, all_wrap;
    long pods;
    double dcn_bw;
} slices;

/* *s from a's values; 0, or −1 after one error line. */
static int check_slices(slices *s, const args *a) {
    char err[256], *end;
    if (!(s->chip = cost_chip_find(a->chip))) {
        fprintf(stderr, "simpod-platform: error: unknown chip '%s' (v3, v4p, v5e, v5p, v6e)\n",
                a->chip);
        return -1;
    }
    if ((s->n = parse_topology(a->topology, s->sizes)) < 0) {
        fprintf(stderr, "simpod-platform: error: --topology '%s': expected sizes like 4x4x4\n",
                a->topology);
        return -1;
    }
    if (cost_topology_check(s->chip, s->sizes, s->n, err, sizeof err) < 0) {
        fprintf(stderr, "simpod-platform: error: --topology %s: %s\n", a->topology, err);
        return -1;
    }
    s->pods = strtol(a->pods, &end, 10);
    if (*end || end == a->pods || s->pods < 1 || s->pods > 4096) {
        fprintf(stderr, "simpod-platform: error: --pods '%s': expected a count of pods >= 1\n",
                a->pods);
        return -1;
    }
    if (s->pods > 1 && s->n > 2) {
        fprintf(stderr,
                "simpod-platform: error: --pods %ld with --topology %s: a mesh has at most three "
                "axes and the pods take one, so give a slice of at most two axes (e.g. 16x16)\n",
                s->pods, a->topology);
        return -1;
    }
    s->dcn_bw = a->dcn_bw ? strtod(a->dcn_bw, &end) : cost_chip_dcn_bw(s->chip);
    if (a->dcn_bw && (*end || end == a->dcn_bw || !(s->dcn_bw > 0))) {
        fprintf(stderr, "simpod-platform: error: --dcn-bw '%s': expected bytes/s > 0\n", a->dcn_bw);
        return -1;
    }
    s->N = 1, s->all_wrap = 1;
    for (int k = 0; k < s->n; k++) {
        s->N *= s->sizes[k];
        s->wraps[k] = cost_axis_wraps(s->chip, s->sizes, s->n, k);
        if (s->sizes[k] > 1 && !s->wraps[k]) s->all_wrap = 0;
    }
    return 0;
}

/* The platform file and the host file; 0, or −1 after one error line. */
static int write_files(const slices *s, const args *a) {
    FILE *f = fopen(a->platform, "w"), *h = fopen(a->hostfile, "w");
    if (!f || !h) {
        fprintf(stderr, "simpod-platform: error: cannot write %s\n",
                !f ? a->platform : a->hostfile);
        return -1;
    }
    write_header(f);
    if (s->all_wrap && s->N > 1 && s->pods == 1) {
        write_torus(f, s->chip, s->sizes, s->n, s->N);
    } else {
        fprintf(f, "  <zone id=\"world\" routing=\"DijkstraCache\">\n");
        for (int pass = -1; pass < 2; pass++) {
            for (int p = 0; p < s->pods; p++)
                write_graph(f, s->chip, s->sizes, s->wraps, s->n, s->N, p, pass);
            if (s->pods > 1)
                write_dcn(f, s->chip, s->sizes, s->n, (int)s->pods * s->N, s->dcn_bw, pass);
        }
        fprintf(f, "  </zone>\n");
    }
    fprintf(f, "</platform>\n");
    for (int r = 0; r < s->pods * s->N; r++) fprintf(h, "chip-%d\n", r);
    if (fclose(f) || fclose(h)) {
        fprintf(stderr, "simpod-platform: error: cannot write %s\n", a->platform);
        return -1;
    }
    return 0;
}

/* The mesh to run on the platform, as KEY=VALUE lines (see the header). */
static void print_mesh(const slices *s) {
    const char *names = s->pods > 1 ? "yz" : "xyz"; /* with pods, x is the pods' axis */
    printf("ranks=%ld\nmesh=", s->pods * s->N);
    if (s->pods > 1) printf("x=%ld,", s->pods);
    for (int k = 0; k < s->n; k++) printf("%s%c=%d", k ? "," : "", names[k], s->sizes[k]);
    printf("\nopen=");
    for (int k = 0; k < s->n; k++)
        if (s->sizes[k] > 2 && !s->wraps[k]) printf("%c", names[k]);
    printf("\n");
    if (s->pods > 1) printf("dcn_bw=%.6g\n", s->dcn_bw);
}

int main(int argc, char **argv) {
    args a;
    slices s;
    if (parse_args(&a, argc, argv) < 0 || check_slices(&s, &a) < 0 || write_files(&s, &a) < 0)
        return 2;
    print_mesh(&s);
    return 0;
}
