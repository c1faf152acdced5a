/* dtest: small helpers for the data/ tests: a per-run temp directory shared by all ranks,
 * failures that are counted (not fatal) and printed with rank, file and line, and a collective
 * verdict at the end. */
#ifndef MT_TESTS_DATA_DTEST_H
#define MT_TESTS_DATA_DTEST_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "mesh/mesh_mpi.h"

extern int dtest_failures;
extern int dtest_rank, dtest_nranks;

#define DT_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) dtest_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                           \
    } while (0)

void dtest_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Every rank (MPI_COMM_WORLD), as the communicator data/'s functions take. */
const mesh_comm *dtest_world(void);
/* MPI_Init, ranks, a fresh temp directory (same path on every rank) into dir[len]. */
void dtest_init(int *argc, char ***argv, char *dir, size_t len);
/* Removes the temp directory, reduces failures over all ranks, prints one verdict line from rank
 * 0 with the elapsed time, finalizes MPI. Returns the process exit status. */
int dtest_finish(const char *name, const char *dir);
/* Not collective. Writes n bytes to path (overwriting). Returns 0 or -1. */
int dtest_write_file(const char *path, const void *bytes, size_t n);
/* Not collective. Reads a whole file into a malloc'd buffer; NULL when missing. */
unsigned char *dtest_read_file(const char *path, size_t *n);
/* Collective over world. 1 when msg is byte-identical on every rank. */
int dtest_same_everywhere(const char *msg);
/* Not collective. Number of entries in dir whose name starts with prefix. */
int dtest_count_prefix(const char *dir, const char *prefix);
/* Deterministic "text": ASCII words, newlines and some 2-byte UTF-8 letters, n bytes. */
void dtest_make_text(unsigned char *out, size_t n, uint64_t seed);
#endif
