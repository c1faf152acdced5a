/* errmsg: see errmsg.h. */
#include "mesh/errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int errmsg_vfail(char *err, size_t errlen, const char *fmt, va_list ap) {
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    return -1;
}

int errmsg_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errmsg_vfail(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
