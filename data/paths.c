/* paths: see paths.h. */
#define _POSIX_C_SOURCE 200809L
#include "data/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mesh/errmsg.h"

/* The directory part of path and its last component: "a/b.h5" → ("a", "b.h5"), "b" → (".", "b"). */
static void split_path(const char *path, char *dir, size_t dlen, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!slash)
        snprintf(dir, dlen, ".");
    else
        snprintf(dir, dlen, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

int paths_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || !*a || !*b) return 0;
    const int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea != eb) return 0;
    /* neither exists yet: the same name in the same directory ("x.h5", "./x.h5") */
    char da[1100], db[1100];
    const char *na, *nb;
    split_path(a, da, sizeof da, &na);
    split_path(b, db, sizeof db, &nb);
    if (strcmp(na, nb) != 0) return 0;
    if (stat(da, &sa) == 0 && stat(db, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(da, db) == 0;
}

int paths_can_write(const char *path, char *why, size_t len) {
    struct stat st;
    char dir[1100];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    const int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) return errmsg_fail(why, len, "is a directory");
    if (!*base) return errmsg_fail(why, len, "names a directory, not a file");
    int e = stat(dir, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (!e && access(dir, W_OK | X_OK) != 0) e = errno;
    if (e) return errmsg_fail(why, len, "directory %s: %s", dir, strerror(e));
    if (exists && access(path, W_OK) != 0)
        return errmsg_fail(why, len, "cannot write it (%s)", strerror(errno));
    return 0;
}

int paths_can_read(const char *path, char *why, size_t len) {
    struct stat st;
    if (stat(path, &st) != 0) return errmsg_fail(why, len, "cannot open (%s)", strerror(errno));
    if (S_ISDIR(st.st_mode)) return errmsg_fail(why, len, "is a directory, not a file");
    if (access(path, R_OK) != 0)
        return errmsg_fail(why, len, "cannot read it (%s)", strerror(errno));
    return 0;
}
