/* names: an enum's table of names read both ways, the one lookup behind every `X_name` and
 * `X_parse` of meshtrain (algorithms, wire formats, schedules, context-parallel algorithms).
 * Not collective; no MPI, depends on nothing (in the leaf library mt_errmsg). */
#ifndef MT_MESH_NAMES_H
#define MT_MESH_NAMES_H

/* names[i], or "?" when i is outside [0, n). */
const char *names_of(const char *const *names, int n, int i);
/* The index i < n with names[i] equal to s, or −1 (also for s NULL). */
int names_find(const char *const *names, int n, const char *s);
#endif
