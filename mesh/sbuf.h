/* sbuf: text appended to a caller's buffer without stdio (snprintf is not async-signal-safe), for
 * the lines the observers print from a signal handler or a watchdog thread: strings, integers,
 * seconds with one decimal, and the mesh's names of axis sets, coordinates and calls. Every
 * function is async-signal-safe and keeps the buffer terminated (a full buffer drops the rest).
 * Private to mesh/. Depends on topo.h and coll.h (names only). */
#ifndef MT_MESH_SBUF_H
#define MT_MESH_SBUF_H
#include <stddef.h>

#include "mesh/topo.h"

typedef struct {
    char *p;
    size_t n, cap; /* cap includes the terminator */
} sbuf;

void put_s(sbuf *b, const char *s);
void put_c(sbuf *b, char c);
void put_i(sbuf *b, long long v);
/* Seconds from nanoseconds, one decimal: "12.3 s". */
void put_secs(sbuf *b, long long ns);
/* The axis names of set id `id` (mesh_set_id), "no axes" for the empty set. */
void put_set(sbuf *b, const mesh_topo *t, long long id);
/* "(x=1,y=0)": the coordinates of mesh rank `rank`. */
void put_coords(sbuf *b, const mesh_topo *t, int rank);
/* "AllGather #57 over y" */
void put_call(sbuf *b, const mesh_topo *t, long long op, long long setseq, long long set);
#endif
