#define _POSIX_C_SOURCE 200809L /* sigaction, SA_SIGINFO */
/* stop: the serving loop's signals (see stop.h). */
#include "train/serve/stop.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mesh/mesh.h"
#include "mesh/sig.h"

static volatile sig_atomic_t stop_signal, stop_parent;

static void on_stop(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    stop_parent = info && info->si_pid == getppid();
    stop_signal = sig;
}

void stop_install(void) {
    mesh_sig_catch(SIGTERM, on_stop, 0);
    mesh_sig_catch(SIGINT, on_stop, 0);
    signal(SIGPIPE, SIG_IGN);
}

int stop_requested(void) {
    return stop_signal;
}

int stop_from_launcher(void) {
    return stop_parent;
}

double stop_drain_seconds(double drain, double *linger) {
    *linger = 2.0;
    const double kill = mesh_launcher_kill_grace();
    if (stop_parent && kill >= 0) {
        if (drain > 0.4 * kill) drain = 0.4 * kill;
        *linger = 0.3 * kill;
    }
    return drain;
}

long stop_pid(void) {
    return (long)getpid();
}
