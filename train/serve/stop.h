/* stop: how `meshtrain serve` learns it should stop. SIGTERM and SIGINT set a flag the serving
 * loop polls (and SIGPIPE is ignored: a client that goes away is the HTTP server's business).
 * Under Open MPI, `kill -TERM <mpirun>` reaches the ranks only after odls_base_sigkill_timeout
 * seconds (1 unless set; mpirun first sends SIGCONT) and SIGKILL follows as long after, so a
 * signal from this process's parent (the launcher) shortens the drain to 0.4 of that time and the
 * wait for the last answers to go out to 0.3 of it, so that every client gets its answer before
 * the processes are killed. A signal sent to rank 0 itself leaves the whole --drain. Not
 * collective; no MPI. */
#ifndef MT_TRAIN_SERVE_STOP_H
#define MT_TRAIN_SERVE_STOP_H

/* Installs the handlers (this process). */
void stop_install(void);
/* The signal received (SIGTERM or SIGINT), or 0. */
int stop_requested(void);
/* Whether it came from the parent process (the launcher). */
int stop_from_launcher(void);
/* The seconds the running requests may take after the signal (drain, or at most 0.4 of Open MPI's
 * sigkill timeout when the launcher sent it), and *linger, the most the answers may then take to
 * go out (2 s, or 0.3 of the timeout). */
double stop_drain_seconds(double drain, double *linger);
/* This process's id (for the report). */
long stop_pid(void);
#endif
