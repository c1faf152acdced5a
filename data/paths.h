/* paths: what a path names and whether a file can be written there, judged before any rank opens
 * anything (output paths are checked against inputs and each other up front). Not collective, no
 * MPI, no HDF5; the POSIX file system only. */
#ifndef MT_DATA_PATHS_H
#define MT_DATA_PATHS_H
#include <stddef.h>

/* 1 when paths a and b name the same file: the same device and inode when both exist (hard
 * links, "./x" and "x"), the same spelling otherwise; else 0. An output path checked against
 * every input path this way can never overwrite one. */
int paths_same_file(const char *a, const char *b);
/* Whether a file can be written at path later (in place, or as a temp file renamed over it),
 * found without creating, truncating or removing anything: path is not a directory, its
 * directory exists and is writable, and an existing file is writable. Returns 0, or −1 with the
 * reason in why[len] ("is a directory", "directory out: No such file or directory"). */
int paths_can_write(const char *path, char *why, size_t len);
/* Whether path names a file that can be read: it exists, is not a directory, and is readable.
 * Returns 0, or −1 with the reason in why[len] ("is a directory", "No such file or directory"),
 * so that a flag given a directory says so rather than what reading it happened to find. */
int paths_can_read(const char *path, char *why, size_t len);
#endif
