#define _POSIX_C_SOURCE 200809L /* strtok_r */
/* targs: see targs.h. */
#include "targs.h"

#include <stdio.h>
#include <string.h>

#include "mesh/mesh.h"

config targs_init(int *argc, char ***argv, const char *own, model_shape s) {
    mesh_mpi_init(argc, argv);
    char words[512], *args[64] = {(*argv)[0]}, *save = NULL;
    int n = 1;
    snprintf(words, sizeof words, "%s", own);
    for (char *w = strtok_r(words, " ", &save); w && n < 64; w = strtok_r(NULL, " ", &save))
        args[n++] = w;
    for (int i = 1; i < *argc && n < 64; i++) args[n++] = (*argv)[i];
    config c;
    config_defaults(&c);
    char err[512];
    if (config_parse(&c, n, args, err, sizeof err) != 0) mesh_exit_error("%s", err);
    c.shape = s;
    c.steps = 1, c.quick_start = 1;
    return c;
}
