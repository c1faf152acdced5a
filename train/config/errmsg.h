/* errmsg: the one way train/ reports an environment failure (a bad flag, a missing or corrupt
 * file) to its caller: a message formatted into the caller's err[errlen] and a negative status,
 * passed up for the caller to decide (see house-style "Errors"; misuse and bugs use mesh's CHECK
 * instead). data/ has its own (h5util_errf), private to data/. No MPI; depends on nothing. */
#ifndef MT_TRAIN_ERRMSG_H
#define MT_TRAIN_ERRMSG_H
#include <stddef.h>

/* Not collective. vsnprintf into err[errlen] when err != NULL and errlen > 0; returns -1, so that
 * `return errmsg_fail(err, errlen, "...", ...);` reports and fails in one statement. */
int errmsg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#endif
