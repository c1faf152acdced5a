/* meshtrain: parse → mesh → trainer → loop. Subcommands `prepare` (text → token file), `plan`
 * (the book's calculator, no training) and `ckpt` (checkpoint info / diff) come first on the
 * command line. Every rank parses the same argv, so bad input is caught before any collective and
 * reported once, by rank 0. */
#include <string.h>

#include "calc/calc.h"
#include "kernels/gemm.h"
#include "mesh/mesh.h"
#include "train/cli/bench.h"
#include "train/ckpt/ckpt.h"
#include "train/config/config.h"
#include "train/infer/gen_cli.h"
#include "train/serve/serve_cli.h"
#include "train/cli/inspect.h"
#include "train/cli/outputs.h"
#include "train/cli/run.h"
#include "train/step/trainer.h"

/* A kernel's bug report, the mesh's way: rank, coordinates, then the whole job ends. */
static void kernel_bug(const char *msg) {
    mesh_abort("kernels/gemm.c", 0, "%s", msg);
}

int main(int argc, char **argv) {
    mesh_mpi_init(&argc, &argv);
    kern_set_bug_handler(kernel_bug);
    if (argc > 1 && strcmp(argv[1], "prepare") == 0) {
        run_prepare(argc - 1, argv + 1);
        mesh_mpi_finalize();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "ckpt") == 0) { /* checkpoint info / diff */
        const int rc = ckpt_cli_main(argc - 1, argv + 1);
        mesh_mpi_finalize();
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "generate") == 0) { /* inference with a KV cache */
        const int rc = gen_main(argc - 1, argv + 1);
        mesh_mpi_finalize();
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "serve") == 0) { /* the serving engine, HTTP on rank 0 */
        const int rc = serve_main(argc - 1, argv + 1);
        mesh_mpi_finalize();
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "plan") == 0) { /* arithmetic: every rank, rank 0 prints */
        const int r0 = mesh_world_rank() == 0;
        const int rc = calc_run(argc - 1, argv + 1, r0 ? stdout : NULL, r0 ? stderr : NULL);
        mesh_mpi_finalize();
        return rc;
    }

    char err[512];
    config c;
    config_defaults(&c);
    const int parsed = config_parse(&c, argc, argv, err, sizeof err);
    if (parsed < 0) mesh_exit_error("%s", err);
    if (parsed == 1) {
        if (mesh_world_rank() == 0) config_print_help(stdout);
        mesh_mpi_finalize();
        return 0;
    }
    c.quick_start = config_env_quick_start();
    config_demo_mesh(&c, mesh_world_size());
    run_resolve_data(&c, argv[0]);
    kern_set_threads(c.threads);

    mesh *m = mesh_create_placed(c.mesh, c.mesh_open, c.cross_hosts, err, sizeof err);
    if (!m) mesh_exit_error("%s", err);
    outputs_check(&c, m); /* no output may name an input; each can be written, before step 1 */
    trace *tr = inspect_start(&c, m); /* --trace, --debug-collectives, --timeout, SIGUSR1 */
    tokens *data = c.bench ? NULL : run_open_data(&c, m);
    if (!c.bench && ckpt_run_setup(&c, m, err, sizeof err) < 0) mesh_exit_error("%s", err);
    trainer *t = trainer_create(&c, m, err, sizeof err);
    if (!t) mesh_exit_error("%s", err);
    trainer_set_trace(t, tr);
    const run_peak peak = run_measure_peak(m, t);

    if (c.bench)
        bench_run(&c, m, t, &peak);
    else
        run_train(&c, m, t, data, &peak);
    inspect_finish(&c, m, tr);

    trainer_destroy(t);
    trace_destroy(tr);
    tokens_close(data);
    mesh_destroy(m);
    mesh_mpi_finalize();
    return 0;
}
