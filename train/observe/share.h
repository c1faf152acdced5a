/* share: the step's prediction on a shared host, where more threads run than the host has CPUs
 * (a laptop, a CI runner, an oversubscribed node: the demo's 4 ranks on 2 CPUs). Pure: no MPI,
 * no I/O. Not collective.
 *
 * A host's ranks share its CPUs: with R ranks of t BLAS threads each on C CPUs (the CPUs their
 * affinity allows, mesh_host_cpus), each thread gets C/(R·t) of a CPU, so the host's CPUs serve
 * its ranks' work in turn. Collectives keep the ranks in step, so a rank's step waits for the
 * others' work, and the step runs at the pace of the most shared host:
 *     k = max over hosts of R·t/C   (threads per CPU; k ≤ 1: no sharing, nothing changes)
 *  - compute: the kernels were timed on a CPU of their own when they ran on the thread's CPU
 *    clock (t = 1, train/step/ktime.h): on the shared host every compute stretch of the step's
 *    replay takes k times as long. With t > 1 they were timed on the wall clock while every rank
 *    of the host timed its own at once, so at the host's share already: the factor is 1.
 *  - a collective: a ring step needs the next rank scheduled. When MPI's waits yield the CPU
 *    (Open MPI does when ranks outnumber its slots), a waiting rank gives its turn away at once,
 *    and the step waits for the other ranks of its CPU to do their part: the host is a processor
 *    shared by its ranks, and a step of CPU work takes k times its time on a CPU of its own
 *    (measured on 2 vCPUs, docs/fidelity.md: a compute stretch and a ring step, 2 ranks per CPU
 *    against one, 1.99–2.11×). When MPI's waits spin, each waiting rank holds its CPU until the
 *    scheduler's time slice ends, and a ring step waits a slice for each rank ahead of its peer
 *    (2 ms turns measured there). On real links both are in the link constants already: the
 *    start-up ping-pong (calibrate.c) runs on every rank at once, on the CPUs the ranks share, so
 *    its hop latency and bandwidth are those of a hop that waits for the ranks' turns. On
 *    emulated links a collective's time is the links' (the waiting rank naps; the emulated
 *    transfer passes whether or not it runs) and its CPU work (copying a chunk) is small beside
 *    it. So the collectives are priced as they are, and the shared step is the replay of the
 *    step's events (predict.h) with the compute × the factor: the non-blocking collectives that
 *    the longer compute hides are hidden.
 * Not modelled: other jobs on the host (their load is not the placement's), the progress
 * thread's CPU (it naps), a pipeline's stages that compute unlike (the most shared host's
 * ranks are taken to compute alike; a pipelined step's wait for its neighbours is calc's
 * simulation of the schedule with the stage costs × the factor, train/step/pipe_pred.h). */
#ifndef MT_TRAIN_SHARE_H
#define MT_TRAIN_SHARE_H
#include <stddef.h>

/* One host as placed: its ranks and the CPUs they may run on. */
typedef struct {
    int ranks, cpus;
} share_host;

typedef struct {
    double per_cpu;  /* k: threads per CPU on the most shared host, R·t/C */
    double compute;  /* the factor on the step's predicted compute: k (t = 1), 1 (t > 1) or 1
                        (k ≤ 1) */
    int shared;      /* k > 1: the prediction differs from the one on a CPU per rank */
    int ranks, cpus; /* the most shared host's R and C */
    int threads;     /* t: BLAS threads per rank */
    int yields;      /* MPI's waits yield the CPU (1), spin (0), not known (−1) */
} share_model;

/* The model of hosts h[0..n) (n ≥ 1; an entry per host or per rank, as the maximum is the same)
 * for `threads` BLAS threads per rank; `yields` as mesh_mpi_yields. */
share_model share_model_of(const share_host *h, int n, int threads, int yields);
/* The model in a line for the start-up plan ("4 ranks x 1 BLAS thread on 2 CPUs: 2 threads per
 * CPU ..."), into buf. */
const char *share_describe(const share_model *m, char *buf, size_t len);
#endif
