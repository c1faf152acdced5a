/* The flag table of meshtrain's command line, shared by the parser (config.c) and --help
 * (config_help.c). Internal to train/config. */
#ifndef MT_TRAIN_CONFIG_FLAGS_H
#define MT_TRAIN_CONFIG_FLAGS_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    K_GROUP,  /* a heading in --help, not a flag */
    K_I64,    /* int64_t field */
    K_INT,    /* int field */
    K_U64,    /* uint64_t field (seed) */
    K_F64,    /* double field */
    K_STR,    /* char[size] field */
    K_SWITCH, /* int field set to 1, takes no value */
    K_OPTIM,  /* optim_kind */
    K_ORDER,  /* tokens_order */
    K_SCHED,  /* pipeline schedule */
    K_BUCKET, /* int64_t bytes with K/M/G suffixes, or "auto" (−1) */
    K_ONOFF,  /* int field: on (1), off (0) or auto (−1) */
    K_DTYPE,  /* compute_dtype */
    K_ALG,    /* mesh_alg: ring|bidir|seq|multi|mpi|direct (not given: MESH_ALG_DEFAULT) */
    K_WIRE,   /* mesh_wire */
    K_PROG,   /* config_progress */
    K_RATE,   /* config_rate */
    K_DEMO,   /* preset, takes no value */
    K_HELP,
} flag_kind;

enum { EXCL_LO = 1, EXCL_HI = 2 }; /* open ends of a numeric range */

typedef struct {
    const char *name; /* without the leading "--"; for K_GROUP, the heading */
    flag_kind kind;
    size_t off, size; /* field offset in config; buffer size for K_STR */
    double lo, hi;    /* allowed range of a number, inclusive unless `excl` says otherwise */
    int excl;
    const char *meta; /* value name shown in --help */
    const char *help; /* NULL: an alias, not listed */
} flag_def;

/* The value of flag f's field in c: a whole number (K_I64, K_INT), or any number (K_I64, K_INT,
 * K_F64). */
int64_t config_flag_int(const void *c, const flag_def *f);
double config_flag_number(const void *c, const flag_def *f);

/* The table, in --help's order (K_GROUP entries are headings), and its length. */
extern const flag_def config_flag_table[];
extern const int config_flag_count;
/* --schedule's values, by the config's schedule enum. */
extern const char *const config_schedule_names[];
#endif
