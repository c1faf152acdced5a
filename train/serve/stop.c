#define _POSIX_C_SOURCE 200809L /* sigaction, SA_SIGINFO */
/* stop: the serving loop's signals (see stop.h). */
#include "train/serve/stop.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mesh/mesh.h"

static volatile sig_atomic_t stop_signal, stop_parent;

static void on_stop(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    stop_parent = info && info->si_pid == getppid();
    stop_signal = sig;
}

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
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
