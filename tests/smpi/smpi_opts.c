/* smpi_opts: see smpi_opts.h. */
#include "smpi_opts.h"

#include <string.h>

#include "mesh/mesh_mpi.h"

smpi_opts smpi_opts_parse(int argc, char **argv, const char *prog, int with_alg) {
    const char *spec = NULL, *open = NULL, *chipname = "v5p";
    smpi_opts o = {.alg_name = "ring"};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 == argc || !strncmp(argv[i + 1], "--", 2))
            mesh_exit_error("%s: option '%s' needs a value", prog, argv[i]);
        if (!strcmp(argv[i], "--mesh"))
            spec = argv[i + 1];
        else if (!strcmp(argv[i], "--open"))
            open = argv[i + 1];
        else if (!strcmp(argv[i], "--chip"))
            chipname = argv[i + 1];
        else if (with_alg && !strcmp(argv[i], "--alg"))
            o.alg_name = argv[i + 1];
        else
            mesh_exit_error("%s: unknown option '%s'", prog, argv[i]);
    }
    o.chip = cost_chip_find(chipname);
    if (!o.chip) mesh_exit_error("%s: unknown chip '%s'", prog, chipname);
    const int alg = mesh_alg_parse(o.alg_name);
    if (alg < 0) mesh_exit_error("%s: unknown algorithm '%s'", prog, o.alg_name);
    o.alg = (mesh_alg)alg;
    char err[256];
    o.m = mesh_create(spec, open, err, sizeof err);
    if (!o.m) mesh_exit_error("%s", err);
    return o;
}
