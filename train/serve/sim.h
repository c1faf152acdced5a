/* sim: the serving engine on a virtual clock. A workload (one JSON object a line: "t" the arrival
 * in seconds, "prompt", "max_tokens") goes through the real batcher with the server's options;
 * each step takes the book's time for what it does (serve_plan_cost through gen_predict against
 * the measured bandwidth and FLOP rate: T = KV/BW + max(FLOPs/C, weight bytes/BW)), and nothing
 * else takes time (no HTTP, no scheduling, no communication). Every request runs to max_tokens,
 * as the benchmark's do. The result is what the book predicts a client would see, one JSON
 * object a line in the load generator's format: "id", "t_send", "t_first", "t_end", "n_out",
 * "itl" (the gaps between tokens), "status" (200, or 503 past --max-queue). Depends on batcher,
 * cost, gen's roofline; jansson. */
#ifndef MT_TRAIN_SERVE_SIM_H
#define MT_TRAIN_SERVE_SIM_H
#include <stddef.h>
#include <stdint.h>

#include "train/config/config.h"
#include "train/infer/gen_cli.h"
#include "train/serve/batcher.h"

typedef struct {
    const char *workload, *out;
    int64_t nY;            /* tensor ranks per replica */
    int64_t max_queue;     /* waiting requests before 503 */
    gen_machine mc;        /* the machine the steps are priced against (sums over the ranks) */
    int64_t kv_elem_bytes; /* a KV cache element: 4 (fp32) or 2 (bf16) */
    int64_t w_elem_bytes;  /* a weight matrix element read: 4, or 2 (bf16 compute's copy) */
    int64_t kv_groups;     /* the AllToAll layout's ranks sharing a kv head (1: none) */
} sim_opts;

/* --simulate runs no server, samples no token and sends nothing over the links: the flags of
 * those given in argv are refused with it, as is --threads when --sim-machine fixes the machine
 * (machine_given). (--seed is let through: bench/serve_bench.sh gives the server and its
 * simulation the same model flags.) 0, or −1 with the first such flag's message in err. */
int sim_check_flags(int argc, char **argv, int machine_given, char *err, size_t errlen);

/* Not collective (rank 0). Runs the workload; writes the requests' times to so->out and a
 * summary line to stderr. 0, or −1 with the reason in err (an unreadable or malformed workload,
 * a request that does not fit). */
int serve_simulate(const model_shape *s, const batch_opts *o, const sim_opts *so, char *err,
                   size_t errlen);
#endif
