/* sig: see sig.h. */
#define _POSIX_C_SOURCE 200809L /* sigaction, SA_SIGINFO */
#include "mesh/sig.h"

#include <string.h>

int mesh_sig_catch(int sig, void (*on)(int, siginfo_t *, void *), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on;
    sa.sa_flags = SA_SIGINFO | flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}
