/* names: see names.h. */
#include "mesh/names.h"

#include <string.h>

const char *names_of(const char *const *names, int n, int i) {
    return i >= 0 && i < n ? names[i] : "?";
}

int names_find(const char *const *names, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}
