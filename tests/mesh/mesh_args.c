/* mesh_args: see mesh_args.h. */
#include "mesh_args.h"

#include <string.h>

const char *test_flag(int argc, char **argv, const char *name, const char *dflt) {
    const char *v = dflt;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) v = argv[++i];
    return v;
}

mesh *test_mesh(int argc, char **argv) {
    char err[256];
    mesh *m = mesh_create(test_flag(argc, argv, "--mesh", NULL),
                          test_flag(argc, argv, "--open", NULL), err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    return m;
}
