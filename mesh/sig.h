/* sig: installing a signal handler, the one sigaction call of the where-line's SIGUSR1 (where.c)
 * and of the server's SIGTERM and SIGINT (train/serve/stop.c). Not collective; no MPI. The
 * includer defines _POSIX_C_SOURCE 200809L (siginfo_t) before its first include. */
#ifndef MT_MESH_SIG_H
#define MT_MESH_SIG_H
#include <signal.h>

/* Not collective. Installs `on` (SA_SIGINFO, plus `flags`, e.g. SA_RESTART) for signal sig, with
 * an empty mask. Returns sigaction's status. */
int mesh_sig_catch(int sig, void (*on)(int, siginfo_t *, void *), int flags);
#endif
