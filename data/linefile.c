/* linefile: see linefile.h. */
#define _POSIX_C_SOURCE 200809L /* ftruncate */
#include "data/linefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "mesh/errmsg.h"

struct linefile {
    int fd;
    off_t end; /* the file's length after the last whole write */
};

linefile *linefile_open(const char *path, int append, char *err, size_t errlen) {
    const int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) {
        errmsg_fail(err, errlen, "%s", strerror(errno));
        return NULL;
    }
    linefile *f = malloc(sizeof *f);
    const off_t end = lseek(fd, 0, SEEK_END);
    if (!f || end < 0) {
        errmsg_fail(err, errlen, "%s", f ? strerror(errno) : "out of memory");
        free(f);
        close(fd);
        return NULL;
    }
    f->fd = fd;
    f->end = end;
    return f;
}

/* The test hook's byte limit, or −1. */
static long long fault_limit(void) {
    const char *v = getenv("MESHTRAIN_FAULT_ENOSPC");
    return v && *v ? atoll(v) : -1;
}

/* write(2) of n bytes at the end, with the test hook's limit. */
static ssize_t write_some(linefile *f, const char *p, size_t n, off_t at) {
    const long long lim = fault_limit();
    if (lim >= 0 && (long long)at + (long long)n > lim) {
        if ((long long)at >= lim) {
            errno = ENOSPC;
            return -1;
        }
        n = (size_t)(lim - (long long)at);
    }
    return write(f->fd, p, n);
}

int linefile_write(linefile *f, const char *text, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write_some(f, text + done, n - done, f->end + (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int e = w < 0 ? errno : ENOSPC;
            if (ftruncate(f->fd, f->end) == 0) lseek(f->fd, f->end, SEEK_SET);
            return -e;
        }
        done += (size_t)w;
    }
    f->end += (off_t)n;
    return 0;
}

int linefile_printf(linefile *f, const char *fmt, ...) {
    char small[1024];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -EINVAL;
    if ((size_t)n < sizeof small) return linefile_write(f, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -ENOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    const int rc = linefile_write(f, big, (size_t)n);
    free(big);
    return rc;
}

int linefile_close(linefile *f) {
    if (!f) return 0;
    const int rc = close(f->fd) == 0 ? 0 : -errno;
    free(f);
    return rc;
}
