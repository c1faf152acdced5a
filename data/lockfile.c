/* lockfile: see lockfile.h. */
#define _POSIX_C_SOURCE 200809L /* gethostname, getpid, pread */
#define _DEFAULT_SOURCE         /* flock */
#include "data/lockfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/paths.h"
#include "mesh/errmsg.h"

int lockfile_take(const char *path, char *prev, size_t plen) {
    for (;;) {
        const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return -1;
        if (prev && plen) {
            const ssize_t n = pread(fd, prev, plen - 1, 0);
            prev[n > 0 ? n : 0] = '\0';
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            close(fd);
            if (e == EWOULDBLOCK) return LOCKFILE_BUSY;
            errno = e;
            return -1;
        }
        /* the holder may have removed the file between our open and our flock: then we hold
         * the lock of a name nobody can find; open it again */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino)
            return fd;
        close(fd);
    }
}

int lockfile_set_record(int fd, const char *extra) {
    char host[128] = "?", rec[512];
    gethostname(host, sizeof host - 1);
    const int n =
        snprintf(rec, sizeof rec, "%spid %ld\nhost %s\n", extra ? extra : "", (long)getpid(), host);
    if (n < 0 || (size_t)n >= sizeof rec) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, (size_t)n, 0) != n) return -1;
    return 0;
}

void lockfile_holder(const char *record, char *who, size_t len) {
    const char *p = strstr(record, "pid "), *h = strstr(record, "host ");
    long pid = p ? strtol(p + 4, NULL, 10) : 0;
    char host[128] = "?";
    if (h) sscanf(h + 5, "%127s", host);
    if (pid > 0)
        snprintf(who, len, "pid %ld on host %s", pid, host);
    else
        snprintf(who, len, "a process that has not written its name yet");
}

/* ---- output files ---- */

enum { MAX_OUTPUTS = 32 };
static struct {
    int fd;
    char path[1100]; /* the lock file */
} held[MAX_OUTPUTS];
static int n_held, registered;

/* At a normal exit: remove each lock file, then release it (in that order, so that a process
 * waiting on the old file finds it gone and opens the new one: lockfile_take). */
static void release_outputs(void) {
    for (int i = 0; i < n_held; i++) {
        unlink(held[i].path);
        close(held[i].fd);
    }
    n_held = 0;
}

int lockfile_output(const char *path, const char *flag, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return 0; /* /dev/null, a pipe */
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!*base) return errmsg_fail(err, errlen, "%s %s: names a directory, not a file", flag, path);
    char lock[sizeof held[0].path];
    const int dl = slash ? (int)(slash - path + 1) : 0;
    if (snprintf(lock, sizeof lock, "%.*s.%s.meshtrain-lock", dl, path, base) >= (int)sizeof lock)
        return errmsg_fail(err, errlen, "%s %s: the path is too long", flag, path);
    struct stat ls;
    const int lock_exists = stat(lock, &ls) == 0;
    for (int i = 0; i < n_held && lock_exists; i++)
        if (fstat(held[i].fd, &st) == 0 && ls.st_dev == st.st_dev && ls.st_ino == st.st_ino)
            return 0; /* ours already */
    if (n_held == MAX_OUTPUTS)
        return errmsg_fail(err, errlen, "%s %s: more than %d output files", flag, path,
                           MAX_OUTPUTS);
    char prev[512], who[256];
    const int fd = lockfile_take(lock, prev, sizeof prev);
    if (fd == LOCKFILE_BUSY) {
        lockfile_holder(prev, who, sizeof who);
        return errmsg_fail(err, errlen,
                           "%s %s is being written by another running job (%s): two runs "
                           "writing one file would mix or overwrite each other's output; give "
                           "this run another file",
                           flag, path, who);
    }
    char rec[1200];
    snprintf(rec, sizeof rec, "file %s\n", base);
    if (fd < 0 || lockfile_set_record(fd, rec) < 0) {
        const int e = errno;
        if (fd >= 0) { /* ours, and useless: a full disk holds no record */
            unlink(lock);
            close(fd);
        }
        return errmsg_fail(err, errlen, "%s %s: cannot make its lock file %s (%s)", flag, path,
                           lock, strerror(e));
    }
    if (!registered) registered = atexit(release_outputs) == 0;
    held[n_held].fd = fd;
    snprintf(held[n_held].path, sizeof held[n_held].path, "%s", lock);
    n_held++;
    return 0;
}

int lockfile_check_io(const lockfile_named *in, int n, lockfile_named out, const char *holds,
                      char *err, size_t errlen) {
    char why[512];
    for (int k = 0; k < n; k++)
        if (in[k].path && in[k].path[0] && paths_can_read(in[k].path, why, sizeof why) < 0)
            return errmsg_fail(err, errlen, "%s %s: %s", in[k].flag, in[k].path, why);
    if (!out.path || !out.path[0]) return 0;
    for (int k = 0; k < n; k++)
        if (in[k].path && in[k].path[0] && paths_same_file(out.path, in[k].path))
            return errmsg_fail(err, errlen,
                               "%s %s is also %s: %s would overwrite an input (give another file)",
                               out.flag, out.path, in[k].flag, holds);
    if (paths_can_write(out.path, why, sizeof why) < 0)
        return errmsg_fail(err, errlen, "%s %s: cannot create it (%s)", out.flag, out.path, why);
    return lockfile_output(out.path, out.flag, err, errlen);
}
