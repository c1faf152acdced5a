/* dtest: see dtest.h. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include "dtest.h"

#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dtest_failures = 0;
int dtest_rank = 0, dtest_nranks = 1;
static double t0;

void dtest_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "FAIL rank %d %s:%d: %s: ", dtest_rank, file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    dtest_failures++;
}

const mesh_comm *dtest_world(void) {
    static mesh_comm world;
    world.mpi = MPI_COMM_WORLD;
    return &world;
}

void dtest_init(int *argc, char ***argv, char *dir, size_t len) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &dtest_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dtest_nranks);
    t0 = MPI_Wtime();
    char buf[256] = "";
    if (dtest_rank == 0) {
        const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(buf, sizeof buf, "%s/mtdata.XXXXXX", base);
        if (!mkdtemp(buf)) {
            perror("mkdtemp");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(dir, len, "%s", buf);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int dtest_finish(const char *name, const char *dir) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (dtest_rank == 0 && dir && dir[0]) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    int total;
    MPI_Allreduce(&dtest_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (dtest_rank == 0)
        printf("%s %s on %d ranks: %d failures, %.2f s\n", total ? "FAIL" : "PASS", name,
               dtest_nranks, total, MPI_Wtime() - t0);
    MPI_Finalize();
    return total ? 1 : 0;
}

int dtest_write_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(bytes, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

unsigned char *dtest_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(size > 0 ? (size_t)size : 1);
    if (b && fread(b, 1, (size_t)size, f) == (size_t)size) *n = (size_t)size;
    fclose(f);
    return b;
}

int dtest_same_everywhere(const char *msg) {
    char mine[512] = "", root[512] = "";
    snprintf(mine, sizeof mine, "%s", msg);
    memcpy(root, mine, sizeof root);
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    int same = strcmp(root, mine) == 0, all;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

int dtest_count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

void dtest_make_text(unsigned char *out, size_t n, uint64_t seed) {
    static const char *const words[] = {"the ",          "king ", "shall ",   "not ",
                                        "speak ",        "of ",   "ROMEO:\n", "caf\xc3\xa9 ",
                                        "na\xc3\xafve ", ",\n",   "a "};
    uint64_t x = seed * 2654435761u + 1;
    size_t i = 0;
    while (i < n) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(x >> 33) % (sizeof words / sizeof *words)];
        size_t len = strlen(w);
        if (i + len > n) w = "xxxxxxxxxxxxxxxx", len = n - i; /* ASCII tail, never a split char */
        memcpy(out + i, w, len);
        i += len;
    }
}
