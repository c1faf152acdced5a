/* lockfile: one live process per resource, a checkpoint directory or an output file. The lock is
 * flock(LOCK_EX) on a small file whose record names the holder ("pid P", "host H", and what the
 * caller adds, e.g. a run id). flock belongs to the open file, so the kernel releases it when the
 * holder ends in any way (kill -9 included): a lock file left by a killed run is stale by
 * construction, and the next run takes it. Not collective, no MPI; the POSIX file system only. */
#ifndef MT_DATA_LOCKFILE_H
#define MT_DATA_LOCKFILE_H
#include <stddef.h>

enum { LOCKFILE_BUSY = -2 }; /* a live process holds the lock */

/* Opens (creating) path and takes flock(LOCK_EX | LOCK_NB) on it; the record the file held (the
 * last holder's, "" when none) goes to prev[plen]. Returns the descriptor, whose lock lasts until
 * it is closed or the process ends; LOCKFILE_BUSY when a live process holds it (prev then names
 * that process); −1 with errno on any other failure. A lock file removed by its holder after we
 * opened it is opened again, so two processes never both hold one path. */
int lockfile_take(const char *path, char *prev, size_t plen);
/* Replaces the record of a lock this process holds by `extra` (may be "") followed by "pid P\n"
 * and "host H\n". Returns 0, or −1 with errno. */
int lockfile_set_record(int fd, const char *extra);
/* "pid P on host H" from a record, for messages. */
void lockfile_holder(const char *record, char *who, size_t len);

/* The output file at path belongs to this process until it exits: takes the lock
 * DIR/.NAME.meshtrain-lock beside it (removed at a normal exit; a killed run's is stale and taken
 * over). A path that exists and is not a regular file (/dev/null, a pipe) is not locked. Returns
 * 0, or −1 with the reason in err, naming `flag` and path: another live run writes the file, or
 * the lock cannot be made. Taking a path this process already holds is a no-op. */
int lockfile_output(const char *path, const char *flag, char *err, size_t errlen);

/* A file a command's flag names ("" or NULL path: the flag was not given). */
typedef struct {
    const char *flag, *path;
} lockfile_named;
/* The files of a command with one output, checked before any work: every input in[0..n) that
 * was given is a readable file (paths_can_read); the output out, if given, is none of them, can
 * be created (paths_can_write) and belongs to this run alone (lockfile_output). `holds` says what
 * the output would hold, for the message ("the table": "--csv t.csv is also --ckpt: the table
 * would overwrite an input"). Returns 0, or −1 with the first failure in err. */
int lockfile_check_io(const lockfile_named *in, int n, lockfile_named out, const char *holds,
                      char *err, size_t errlen);
#endif
