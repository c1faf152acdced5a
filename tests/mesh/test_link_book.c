/* test_link_book: the link emulator's booking on a call's virtual clock (links_book_virtual),
 * message by message against hand arithmetic. Deterministic: no message is sent and no clock is
 * read. The links part alone (mesh/links.h, private to mesh/: collectives call it): no mesh, no
 * MPI. Links of 1000 B/s and 0.5 s per hop on two axes, so a kB is a second on the wire and the
 * sums below are exact.
 *  - Out of virtual order: a message ready at 50 s is booked first, then ones ready at 0 and
 *    10 s take the gaps before it (the old first-come booking put them after it: 80.5 and
 *    111 s instead of 20.5 and 51 s); the link's three intervals merge into one.
 *  - The pattern of a multi-axis call (three chains each crossing the link at a different phase,
 *    readies 0, 10.5, 21 s): the same deliveries in all six booking orders.
 *  - A message that does not fit the gap its virtual order would leave goes after the message
 *    booked before it (bookings are never moved).
 *  - Directions and axes are independent; link_clock_reset frees every link; an axis without
 *    emulation returns 0, and so does links_book, the real-time booking.
 *  - A gap filled exactly by sums that round (0.1 s + 0.2 s against 0.3 s) is still a fit.
 *  - A full interval list: a message merging into a neighbour still takes its gap; one that would
 *    need a new interval goes after the last (the first-come booking). */
#include <stdio.h>

#include "mesh/links.h"

static int failures;
static mesh_links links;
static link_clock clk;

/* The delivery of `kb` kB ready at `ready` over `hops` hops of axis/dir, against `want`. */
static void book(int axis, int dir, double kb, double ready, int hops, double want,
                 const char *what) {
    const double got =
        links_book_virtual(&links, &clk, axis, dir, (int64_t)(kb * 1000 + 0.5), hops, ready);
    const int ok = got >= want - 1e-9 && got <= want + 1e-9;
    printf("%-62s %10.4f (want %g)%s\n", what, got, want, ok ? "" : "  FAIL");
    if (!ok) failures++;
}

static void check_n(int axis, int dir, int want, const char *what) {
    const int n = clk.vlink[axis][dir].n;
    printf("%-62s %10d (want %d)%s\n", what, n, want, n == want ? "" : "  FAIL");
    if (n != want) failures++;
}

/* A script of bookings on one link clock, each step a booking checked against its delivery, a
 * check of a link's interval count, or a reset of every link. */
typedef enum { BOOK, COUNT, RESET } step_kind;
typedef struct {
    step_kind kind;
    int axis, dir;
    double kb, ready; /* BOOK */
    int hops;         /* BOOK */
    double want;      /* BOOK: the delivery; COUNT: the intervals */
    const char *what;
} step;

/* Plays a script from idle links. */
static void play(const step *st, int n) {
    link_clock_reset(&clk);
    for (int i = 0; i < n; i++) {
        const step *p = &st[i];
        if (p->kind == RESET) link_clock_reset(&clk);
        if (p->kind == BOOK) book(p->axis, p->dir, p->kb, p->ready, p->hops, p->want, p->what);
        if (p->kind == COUNT) check_n(p->axis, p->dir, (int)p->want, p->what);
    }
}

/* Out of virtual order, a message too big for the gap its order would leave, and sums that
 * round, each from idle links (RESET). */
static void scripts(void) {
    static const step st[] = {
        /* A is booked first; B and C, ready before it, take the gaps before it */
        {BOOK, 0, 0, 10, 50, 1, 60.5, "A: 10 kB ready 50 s, booked first: [50, 60) + 0.5"},
        {BOOK, 0, 0, 20, 0, 1, 20.5, "B: 20 kB ready 0, booked after A: [0, 20) + 0.5"},
        {BOOK, 0, 0, 30, 10, 2, 51, "C: 30 kB ready 10 s: the gap [20, 50) + 2 hops"},
        {COUNT, 0, 0, 0, 0, 0, 1, "intervals after A, B, C (merged: [0, 60))"},
        {BOOK, 0, 0, 5, 0, 1, 65.5, "D: 5 kB ready 0: no gap left, [60, 65) + 0.5"},
        {BOOK, 0, 1, 10, 0, 1, 10.5, "the other direction is idle: [0, 10) + 0.5"},
        {BOOK, 1, 0, 10, 0, 3, 11.5, "the other axis is idle: [0, 10) + 3 hops"},
        {RESET, 0, 0, 0, 0, 0, 0, NULL},
        {BOOK, 0, 0, 10, 0, 1, 10.5, "after link_clock_reset the link is idle: [0, 10) + 0.5"},
        /* too big for the gap: B goes after the message booked before it */
        {RESET, 0, 0, 0, 0, 0, 0, NULL},
        {BOOK, 0, 0, 10, 50, 1, 60.5, "A: 10 kB ready 50 s: [50, 60) + 0.5"},
        {BOOK, 0, 0, 30, 10, 1, 40.5, "C: 30 kB ready 10 s: [10, 40) + 0.5"},
        {BOOK, 0, 0, 20, 0, 1, 80.5, "B: 20 kB ready 0 fits no gap: [60, 80) + 0.5"},
        /* 0.1 + 0.2 is 0.30000000000000004 in double: the gap [0.1, 0.3) still takes 0.2 s */
        {RESET, 0, 0, 0, 0, 0, 0, NULL},
        {BOOK, 0, 0, 0.1, 0, 0, 0.1, "0.1 kB ready 0: [0, 0.1)"},
        {BOOK, 0, 0, 0.1, 0.3, 0, 0.4, "0.1 kB ready 0.3 s: [0.3, 0.4)"},
        {BOOK, 0, 0, 0.2, 0, 0, 0.3, "0.2 kB ready 0: the gap [0.1, 0.3)"},
        {COUNT, 0, 0, 0, 0, 0, 1, "intervals (merged: [0, 0.4))"},
    };
    play(st, sizeof st / sizeof st[0]);
}

/* Three chains each send 10 kB on the link at their phase k = 0, 1, 2, ready k·(10 + 0.5) s (the
 * previous phase's delivery): every order of booking gives each its own slot. */
static void all_orders(void) {
    static const int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                   {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int p = 0; p < 6; p++) {
        link_clock_reset(&clk);
        for (int i = 0; i < 3; i++) {
            const int k = perm[p][i];
            char what[96];
            snprintf(what, sizeof what, "order %d%d%d: phase %d's 10 kB, ready %g s", perm[p][0],
                     perm[p][1], perm[p][2], k, 10.5 * k);
            book(0, 0, 10, 10.5 * k, 1, 10.5 * (k + 1), what);
        }
    }
}

/* S = LINK_VSLOTS intervals [2k, 2k + 1) fill the list. */
static void full_list(void) {
    const int S = LINK_VSLOTS;
    link_clock_reset(&clk);
    for (int k = 0; k < S; k++) links_book_virtual(&links, &clk, 0, 0, 1000, 0, 2.0 * k);
    check_n(0, 0, S, "intervals [2k, 2k + 1), k < S: the list is full");
    book(0, 0, 0.5, 3, 1, 4, "full, 0.5 kB ready 3 s: abuts [2, 3), takes [3, 3.5)");
    check_n(0, 0, S, "still full");
    book(0, 0, 0.25, 5.5, 1, 2.0 * S - 1 + 0.25 + 0.5,
         "full, 0.25 kB ready 5.5 s: a new interval, after the last");
    book(0, 0, 1, 0.25, 1, 2.5, "1 kB ready 0.25 s: fills [1, 2), merges two");
    check_n(0, 0, S - 1, "one slot freed");
    book(0, 0, 0.25, 5.5, 1, 6.25, "0.25 kB ready 5.5 s: a new interval in the gap");
    check_n(0, 0, S, "full again");
}

int main(void) {
    links_init(&links);
    for (int k = 0; k < 2; k++) links_set(&links, k, 1000, 0.5);
    scripts();
    all_orders();
    full_list();
    links_set(&links, 1, 0, 0);
    book(1, 0, 10, 0, 1, 0, "an axis without emulation: 0");
    const double real = links_book(&links, 1, 0, 10000, 1);
    printf("%-62s %10g (want 0)%s\n", "the same in real time (links_book): 0", real,
           real == 0 ? "" : "  FAIL");
    failures += real != 0;
    links_destroy(&links);
    printf("test_link_book: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
