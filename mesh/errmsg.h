/* errmsg: the one way the project reports an environment failure (a bad flag, a missing or
 * corrupt file, out of memory) to its caller: a message formatted into the caller's err[errlen]
 * and a negative status, passed up for the caller to decide (see house-style "Errors"; misuse and
 * bugs use mesh's CHECK instead). Ranks agree on a failure through mesh_agree_msg (mesh/mesh.h),
 * which carries the lowest failing rank's message, naming that rank, to every rank. Used by every
 * folder but kernels/ (whose few failures write the same kind of message with snprintf): it sits
 * at the bottom, in its own library (mt_errmsg), so that the MPI-free cost model and calculator
 * use it too. No MPI; depends on nothing. */
#ifndef MT_MESH_ERRMSG_H
#define MT_MESH_ERRMSG_H
#include <stdarg.h>
#include <stddef.h>

/* Not collective. vsnprintf into err[errlen] when err != NULL and errlen > 0; returns -1, so that
 * `return errmsg_fail(err, errlen, "...", ...);` reports and fails in one statement. */
int errmsg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* errmsg_fail with a va_list, for callers that wrap it. */
int errmsg_vfail(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
#endif
