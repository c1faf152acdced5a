/* config's checks of the model's shape, the sharding and the collectives (config_check.c),
 * run by config_validate after the flag table's ranges; internal to train/config. Each returns 0,
 * or -1 with one message naming the flag in err. */
#ifndef MESHTRAIN_CONFIG_CHECK_H
#define MESHTRAIN_CONFIG_CHECK_H
#include <stddef.h>

#include "train/config/config.h"

int config_check_model(const config *c, char *err, size_t errlen);
int config_check_sharding(const config *c, char *err, size_t errlen);
int config_check_collectives(const config *c, char *err, size_t errlen);
#endif
