/* tokens_order: see tokens_order.h. Its own file (no HDF5), so that builds without data/'s token
 * files (the SMPI tree's dry run, cmake/smpi.cmake) link the flags that name it. */
#include "data/tokens_order.h"

#include <string.h>

const char *tokens_order_name(tokens_order order) {
    return order == TOKENS_ORDER_SEQUENTIAL ? "sequential" : "random";
}

int tokens_order_parse(const char *name) {
    return !strcmp(name, "random")       ? TOKENS_ORDER_RANDOM
           : !strcmp(name, "sequential") ? TOKENS_ORDER_SEQUENTIAL
                                         : -1;
}
