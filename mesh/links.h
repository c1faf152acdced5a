/* links: the emulated links' own state and their booking (link_book.c); the model is link.h's.
 * Each axis may have a bandwidth and a per-hop latency (mesh_links, one per mesh, shared by the
 * threads that send: guarded by its mutex). A message is booked twice:
 *  - in real time (links_book): first come, first served on each directed link, which gives the
 *    mesh_now() time at which its receiver may consider it delivered;
 *  - on a call's virtual clock (link_clock, one per context: the thread running the call owns
 *    it): the call starts at 0 on idle links and each message takes the first gap of its link's
 *    bookings at or after its data is ready, whatever the order in which the machine books the
 *    call's messages. The virtual times do not depend on the machine's load: what tests check.
 * Private to mesh/. Depends on nothing but pthreads and the clock (mesh_now): no MPI, no mesh, so
 * it is tested alone (tests/mesh/test_link_book.c). */
#ifndef MT_MESH_LINKS_H
#define MT_MESH_LINKS_H
#include <pthread.h>
#include <stdint.h>

#include "mesh/mesh.h" /* MESH_MAX_AXES, mesh_now */

typedef struct mesh_links mesh_links;
struct mesh_links {
    pthread_mutex_t mu;            /* guards busy[] (and bw, lat while they change) */
    double bw[MESH_MAX_AXES];      /* bytes/s per direction; 0 = not emulated */
    double lat[MESH_MAX_AXES];     /* seconds per hop */
    double busy[MESH_MAX_AXES][2]; /* real time at which each directed link frees up */
};

/* One directed link's bookings on a virtual clock: n disjoint busy intervals [lo[i], hi[i]),
 * sorted, abutting ones merged. */
#define LINK_VSLOTS 32
typedef struct {
    int n;
    double lo[LINK_VSLOTS], hi[LINK_VSLOTS];
} link_vlink;

/* A call's virtual clock: the time at which its latest data is ready (vclock) and every directed
 * link's bookings (vlink[axis][dir]). */
typedef struct {
    double vclock;
    link_vlink vlink[MESH_MAX_AXES][2];
} link_clock;

/* Every axis not emulated. Not collective. */
void links_init(mesh_links *l);
void links_destroy(mesh_links *l);
/* Axis `axis` (0 <= axis < MESH_MAX_AXES) at bw bytes/s per direction (0: not emulated) and
 * `latency` seconds per hop; its links idle. */
void links_set(mesh_links *l, int axis, double bw, double latency);
/* Whether the axis is emulated (axis < 0: a phase on no link: no). */
int links_emulated(const mesh_links *l, int axis);

/* Real time: `bytes` over `hops` links of axis in direction dir (0 = +, 1 = −), sent now. Returns
 * the mesh_now() time its receiver may consider the data delivered, or 0 when the axis is not
 * emulated. */
double links_book(mesh_links *l, int axis, int dir, int64_t bytes, int hops);
/* The same message on the virtual clock c: its data ready at virtual time `ready`, it takes the
 * first gap of the link's bookings at or after `ready` that holds its bytes; returns its virtual
 * delivery (0 when the axis is not emulated). */
double links_book_virtual(const mesh_links *l, link_clock *c, int axis, int dir, int64_t bytes,
                          int hops, double ready);
/* The clock of a new call: time 0, every link idle. */
void link_clock_reset(link_clock *c);
/* Sleeps until mesh_now() >= t (no busy spin). */
void link_sleep_until(double t);
#endif
