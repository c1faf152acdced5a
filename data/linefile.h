/* linefile: a line-oriented output file (JSON lines, CSV) that ends on a whole line whatever
 * happens to the file system. Each call appends whole lines with write(2); if the file system
 * takes only part of them (a full disk: ENOSPC, a quota, EIO), the file is cut back to where it
 * ended before the call, and the call reports the error. A reader (or a resumed run that appends)
 * never meets half a record. Not collective, no MPI; the POSIX file system only.
 *
 * Test hook: with MESHTRAIN_FAULT_ENOSPC=N in the environment, a write that would take any
 * linefile past N bytes stores only the bytes up to N and then fails with ENOSPC, as a file
 * system that fills up mid-write does. */
#ifndef MT_DATA_LINEFILE_H
#define MT_DATA_LINEFILE_H
#include <stddef.h>

typedef struct linefile linefile;

/* Opens path for writing, truncated, or with `append` at its end (created if absent). NULL with
 * the reason in err (strerror). */
linefile *linefile_open(const char *path, int append, char *err, size_t errlen);
/* Appends text[0..n), which ends with '\n'. Returns 0, or −errno (the file still ends where it
 * did before the call). */
int linefile_write(linefile *f, const char *text, size_t n);
/* linefile_write of printf's text (formatted in full first). */
int linefile_printf(linefile *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Closes f (accepts NULL). Returns 0, or −errno when closing failed. */
int linefile_close(linefile *f);
#endif
