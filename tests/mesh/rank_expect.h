/* rank_expect: the check of the mesh tests in which every rank checks its own view: EXPECT(cond,
 * fmt, ...) prints "FAIL rank R line L: <message>" on stderr and counts the failure in
 * `failures` (this test's; the test reduces it over the ranks for its verdict). Header-only: one
 * test program, one translation unit. Depends on mesh/mesh.h (mesh_world_rank). */
#ifndef MT_TESTS_MESH_RANK_EXPECT_H
#define MT_TESTS_MESH_RANK_EXPECT_H
#include <stdio.h>

#include "mesh/mesh.h"

static int failures;
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL rank %d line %d: ", mesh_world_rank(), __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)
#endif
