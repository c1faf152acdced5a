/* config_env: the test hooks a command reads from the environment (see config.h). */
#include <stdlib.h>
#include <string.h>

#include "train/config/config.h"

int config_env_quick_start(void) {
    const char *v = getenv("MESHTRAIN_QUICK_START");
    return v && strcmp(v, "1") == 0;
}
