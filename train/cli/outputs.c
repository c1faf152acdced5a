/* outputs: see outputs.h. */
#include "train/cli/outputs.h"

#include <stdio.h>
#include <string.h>

#include "data/lockfile.h"
#include "data/paths.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"

typedef struct {
    const char *flag, *path, *what;
} named_path;

/* Rank 0's verdict: 0, or −1 with the message in err. */
static int check(const config *c, char *err, size_t errlen) {
    char latest[sizeof c->resume] = "", e[512];
    const char *resume = c->resume;
    int64_t step;
    if (strcmp(resume, "latest") == 0) /* unresolvable: ckpt_run_setup says why, later */
        resume =
            ckpt_latest(c->ckpt_dir, latest, sizeof latest, &step, e, sizeof e) == 0 ? latest : "";
    const named_path in[] = {{"--data", c->bench ? "" : c->data, "the training data"},
                             {"--resume", resume, "the checkpoint it resumes"}};
    const named_path out[] = {{"--metrics", c->metrics, NULL},
                              {"--save-init", c->save_init, NULL},
                              {"--save-final", c->save_final, NULL},
                              {"--trace", c->trace, NULL}};
    const int nin = sizeof in / sizeof in[0], nout = sizeof out / sizeof out[0];
    for (int i = 0; i < nin; i++) /* each input exists, and is a file (not a directory) */
        if (in[i].path[0] && paths_can_read(in[i].path, e, sizeof e) < 0)
            return errmsg_fail(err, errlen, "%s %s: %s", in[i].flag, in[i].path, e);
    for (int o = 0; o < nout; o++) {
        if (!out[o].path[0]) continue;
        for (int i = 0; i < nin; i++)
            if (in[i].path[0] && paths_same_file(out[o].path, in[i].path))
                return errmsg_fail(err, errlen,
                                   "%s %s is also %s %s, %s: the run would overwrite its own input "
                                   "(give another file)",
                                   out[o].flag, out[o].path, in[i].flag, in[i].path, in[i].what);
        for (int p = 0; p < o; p++)
            if (out[p].path[0] && paths_same_file(out[o].path, out[p].path))
                return errmsg_fail(err, errlen,
                                   "%s and %s both name %s: two outputs would overwrite each other",
                                   out[p].flag, out[o].flag, out[o].path);
        if (paths_can_write(out[o].path, e, sizeof e) < 0)
            return errmsg_fail(err, errlen, "%s %s: cannot create it (%s)", out[o].flag,
                               out[o].path, e);
    }
    for (int o = 0; o < nout; o++) /* one live run per output file */
        if (out[o].path[0] && lockfile_output(out[o].path, out[o].flag, err, errlen) < 0)
            return -1;
    return 0;
}

void outputs_check(const config *c, mesh *m) {
    char err[2048] = "";
    const int st = mesh_world_rank() == 0 ? check(c, err, sizeof err) : 0;
    if (mesh_agree(mesh_world_comm(m), st) < 0) mesh_exit_error("%s", err);
}
