/* ckpt_dir: who owns a --ckpt-dir. See ckpt_dir_claim in ckpt.h and docs/checkpoints.md.
 *
 * A run is a sequence of processes that continue each other: its id is drawn by the first one and
 * carried by every checkpoint (attribute run_id), so a resumed process is the same run. The
 * directory's owner is written in DIR/.meshtrain-owner ("run ID", "pid P", "host H"); while a job
 * runs, its rank 0 holds that file's lock (data/lockfile.h, as every output file's): the kernel
 * releases it when the process ends in any way (kill -9 included), so no lock is ever stale.
 *
 * Also the directory's checkpoints: their names (step_NNNNNN.h5), the newest one, and pruning to
 * the newest --keep. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define pipe posix_pipe /* unistd.h's pipe() would clash with train/parallel's type */
#include <unistd.h>
#undef pipe

#include "data/lockfile.h"
#include "mesh/coll.h"
#include "mesh/errmsg.h"
#include "train/ckpt/ckpt.h"

#define OWNER_FILE ".meshtrain-owner"

static int g_owner_fd = -1; /* rank 0: the open, locked owner file (kept until exit) */

/* Collective over: world. A fresh run id, drawn by rank 0 and summed into every rank in 16-bit
 * pieces (exact in float). */
static void new_run_id(mesh *m, char *id, size_t len) {
    uint64_t x = 0;
    if (mesh_rank(m) == 0) {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&x, sizeof x, 1, f) != 1)
            x = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
        if (f) fclose(f);
    }
    float mine[4], all[4];
    for (int k = 0; k < 4; k++) mine[k] = (float)((x >> (16 * k)) & 0xffff);
    mesh_axes world = {mesh_ndims(m), {0, 1, 2}};
    mesh_all_reduce(m, world, all, mine, 4, MESH_ALG_MPI);
    x = 0;
    for (int k = 0; k < 4; k++) x |= (uint64_t)all[k] << (16 * k);
    snprintf(id, len, "%016llx", (unsigned long long)x);
}

/* The owner record's run id into id ("" when there is none), and who holds it into who. */
static void parse_owner(const char *rec, char *id, size_t len, char *who, size_t wlen) {
    char rid[32] = "";
    id[0] = '\0';
    if (sscanf(rec, "run %31s", rid) == 1) snprintf(id, len, "%s", rid);
    char holder[200];
    lockfile_holder(rec, holder, sizeof holder);
    snprintf(who, wlen, "run %s, %s", rid[0] ? rid : "?", holder);
}

/* Rank 0's part of the claim: 0, or −1 with the message. */
static int claim(const config *c, const ckpt_meta *k, char *err, size_t errlen) {
    char path[sizeof c->ckpt_dir + 32], owner[32], who[256], newest[sizeof c->ckpt_dir + 32],
        rec[512];
    snprintf(path, sizeof path, "%s/%s", c->ckpt_dir, OWNER_FILE);
    const int fd = lockfile_take(path, rec, sizeof rec);
    parse_owner(rec, owner, sizeof owner, who, sizeof who);
    if (fd == LOCKFILE_BUSY)
        return errmsg_fail(err, errlen,
                           "--ckpt-dir %s is in use by a running job (%s): two runs in one "
                           "directory would prune and resume each other's checkpoints; give "
                           "each its own --ckpt-dir",
                           c->ckpt_dir, who);
    if (fd < 0)
        return errmsg_fail(err, errlen, "--ckpt-dir %s: cannot lock %s (%s)", c->ckpt_dir, path,
                           strerror(errno));
    char e2[256];
    int64_t step;
    const int has_ckpts =
        ckpt_latest(c->ckpt_dir, newest, sizeof newest, &step, e2, sizeof e2) == 0;
    if (!c->take_over && owner[0] && has_ckpts && strcmp(owner, c->run_id) != 0) {
        close(fd);
        if (k)
            return errmsg_fail(err, errlen,
                               "--ckpt-dir %s holds the checkpoints of run %s (newest %s), but "
                               "--resume %s is of run %s: saving here would mix two runs; give "
                               "another --ckpt-dir, or --take-over",
                               c->ckpt_dir, owner, newest, c->resume,
                               k->run_id[0] ? k->run_id : "(none)");
        return errmsg_fail(err, errlen,
                           "--ckpt-dir %s holds the checkpoints of run %s (newest %s): continue "
                           "it with --resume latest, give another --ckpt-dir, or --take-over to "
                           "save this new run there anyway",
                           c->ckpt_dir, owner, newest);
    }
    char run[48];
    snprintf(run, sizeof run, "run %s\n", c->run_id);
    if (lockfile_set_record(fd, run) != 0) {
        const int e = errno;
        close(fd);
        return errmsg_fail(err, errlen, "--ckpt-dir %s: cannot write %s (%s)", c->ckpt_dir, path,
                           strerror(e));
    }
    if (g_owner_fd >= 0) close(g_owner_fd);
    g_owner_fd = fd; /* held until the process ends */
    return 0;
}

/* --resume latest: the newest checkpoint must be the directory owner's (rank 0; 0 or −1). */
static int check_latest(const config *c, const ckpt_meta *k, char *err, size_t errlen) {
    char path[sizeof c->ckpt_dir + 32], owner[32], who[256];
    snprintf(path, sizeof path, "%s/%s", c->ckpt_dir, OWNER_FILE);
    char rec[512] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* no owner recorded: a directory of copied checkpoints */
    rec[fread(rec, 1, sizeof rec - 1, f)] = '\0';
    fclose(f);
    parse_owner(rec, owner, sizeof owner, who, sizeof who);
    if (c->take_over || !owner[0] || !k->run_id[0] || strcmp(owner, k->run_id) == 0) return 0;
    return errmsg_fail(err, errlen,
                       "--resume latest: the newest checkpoint in %s, %s, is of run %s, but the "
                       "directory belongs to run %s: --resume that file by name with --take-over "
                       "to continue it anyway",
                       c->ckpt_dir, c->resume, k->run_id, owner);
}

int ckpt_dir_claim(config *c, mesh *m, const ckpt_meta *k, int latest, char *err, size_t errlen) {
    if (k && k->run_id[0])
        snprintf(c->run_id, sizeof c->run_id, "%s", k->run_id);
    else
        new_run_id(m, c->run_id, sizeof c->run_id);
    int st = 0;
    if (mesh_rank(m) == 0 && k && latest) st = check_latest(c, k, err, errlen);
    if (mesh_rank(m) == 0 && st == 0 && c->save_every > 0) st = claim(c, k, err, errlen);
    return mesh_agree_msg(mesh_world_comm(m), st, err, errlen) < 0 ? -1 : 0;
}

/* ---- the directory's checkpoints ---- */

void ckpt_step_path(char *buf, size_t len, const char *dir, int64_t step) {
    snprintf(buf, len, "%s/step_%06lld.h5", dir, (long long)step);
}

/* The step of "step_<digits>.h5" (tail = "") or "step_<digits>.h5.tmp.<x>" (tail = ".tmp."),
 * or −1. */
static int64_t name_step(const char *name, const char *tail) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *p = name + 5;
    int64_t s = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 15; p++, digits++) s = 10 * s + (*p - '0');
    if (digits == 0 || strncmp(p, ".h5", 3) != 0) return -1;
    p += 3;
    if (!*tail) return *p ? -1 : s;
    return strncmp(p, tail, strlen(tail)) == 0 ? s : -1;
}

int ckpt_latest(const char *dir, char *path, size_t len, int64_t *step, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d)
        return errmsg_fail(err, errlen, "--resume latest: cannot read --ckpt-dir %s (%s)", dir,
                           strerror(errno));
    int64_t best = -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const int64_t s = name_step(e->d_name, "");
        if (s > best) best = s;
    }
    closedir(d);
    if (best < 0)
        return errmsg_fail(err, errlen,
                           "--resume latest: no checkpoint step_NNNNNN.h5 in %s (drop "
                           "--resume to start from scratch)",
                           dir);
    ckpt_step_path(path, len, dir, best);
    *step = best;
    return 0;
}

/* Deletes p; on failure counts it and keeps the first message. */
static void remove_file(const char *p, int *failed, char *err, size_t errlen) {
    if (remove(p) == 0 || errno == ENOENT) return;
    if (!*failed) errmsg_fail(err, errlen, "%s (%s)", p, strerror(errno));
    ++*failed;
}

static int cmp_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

int ckpt_prune(const char *dir, int64_t keep, int64_t step, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        errmsg_fail(err, errlen, "cannot read %s (%s)", dir, strerror(errno));
        return 1;
    }
    int64_t *old = NULL;
    size_t nold = 0, cap = 0;
    int failed = 0;
    char p[2048];
    if (err && errlen) err[0] = '\0';
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const int64_t tmp = name_step(e->d_name, ".tmp.");
        if (tmp >= 0 && tmp < step) { /* an interrupted save of an earlier step */
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            remove_file(p, &failed, err, errlen);
        }
        const int64_t s = name_step(e->d_name, "");
        if (s < 0 || s >= step || keep <= 0) continue;
        if (nold == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(old, cap * sizeof *old);
            if (!grown) break;
            old = grown;
        }
        old[nold++] = s;
    }
    closedir(d);
    if (nold > 1) qsort(old, nold, sizeof *old, cmp_desc);
    for (size_t i = keep > 0 ? (size_t)(keep - 1) : nold; i < nold; i++) {
        ckpt_step_path(p, sizeof p, dir, old[i]);
        remove_file(p, &failed, err, errlen);
    }
    free(old);
    return failed;
}
