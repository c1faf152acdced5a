/* metrics: what a run reports per step, as the one greppable console line and as one JSON object
 * per line in the --metrics file. Conventions: times in seconds unless the key says ms; tok_s is
 * tokens (B·T) per second of the whole job; gflops is model FLOPs (shape_flops_per_token ×
 * tokens) per second of the whole job, GFLOP = 1e9; mfu is that over the peak (the sum over
 * ranks of the sgemm FLOP/s each measured at start-up), a fraction. Not collective. */
#ifndef MT_TRAIN_METRICS_H
#define MT_TRAIN_METRICS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int64_t step; /* steps completed (1-based) */
    double loss, lr, grad_norm;
    double seconds;    /* wall time of the step, data loading included */
    double tokens;     /* tokens in the step's global batch */
    double flops;      /* model FLOPs of the step */
    double peak_flops; /* Σ over ranks of the sgemm FLOP/s measured at start-up */
    double comm_frac;  /* exposed communication / step time; < 0 leaves out comm, idle, book */
    double idle_frac;  /* idle (waiting for other ranks) / step time */
    double comm_ag, comm_rs, comm_ar, comm_p2p; /* exposed comm per collective type / step time
                                                   (p2p: pipeline sends/receives, ppermute) */
    double bubble, bubble_ideal; /* pipelining: measured and ideal bubble fraction (0: none) */
    double bubble_sim;           /* pipelining: simulated with measured costs (0: none) */
    double stage_act_bytes;      /* pipelining: peak activation bytes held by this stage */
    double pred_seconds;         /* the step's prediction (report.c); <= 0: none */
    double pred_dedicated;       /* the same on a CPU per rank (share.h); written beside it */
    double book_seconds;         /* the book's idealised step; <= 0: none */
    const char *dominant;        /* the prediction's largest term (NULL: none) */
    double val_loss;             /* NAN when no evaluation ran at this step */
    /* mixture of experts (moe_layers 0: none): the (token, expert) slots each expert of each MoE
     * block computed in the step, the share of the step's slots dropped past a capacity, and the
     * balance and z-losses (unscaled by their coefficients; means over the MoE blocks) */
    int64_t moe_layers, moe_E;
    const int64_t *moe_kept; /* [moe_layers, moe_E] */
    double moe_dropped, moe_aux, moe_z;
} metrics_row;

/* "step 120 | loss 1.9321 | lr 3.0e-04 | gnorm 0.84 | 412 ms | 9.9k tok/s | 51.2 GFLOP/s |
 * MFU 61%", + " | comm 6% (AG 3 RS 2 AR 1 p2p 0) | idle 2% | pred 380 ms (1.08x, compute) |
 * book 350 ms" when comm_frac >= 0 (the ratio is measured / predicted, then the predicted
 * dominant term; book: the book's idealised step), + " | dedicated 190 ms (2.16x)" when the
 * prediction on a CPU per rank differs from pred (a shared host), + " | bubble 0.31 (sim 0.30,
 * ideal 0.33) | stage act 12.5 MB" when pipelining (sim: the schedule with measured costs) (rank 0's stage: peak activations held), + " | aux 1.02 z 3.1 |
 * dropped 0.0% | experts 410/398/377/401" with experts (each expert's slots summed over the MoE
 * blocks; min and max of them past 16 experts). `width` pads the step number. */
void metrics_format(char *buf, size_t len, const metrics_row *r, int width);
/* One JSON object and a newline into buf[len], as snprintf (it returns the length it needs;
 * METRICS_JSON_MAX holds a row without experts): {"step":120,"loss":...,"val_loss":...}: step,
 * loss, lr, gnorm, ms, tok_s, gflops, mfu; comm, idle, pred_ms (the step's prediction),
 * pred_dedicated_ms (the same on a CPU per rank: equal unless the host's CPUs are shared),
 * book_ms and dominant with several ranks; val_loss when evaluated; moe_aux, moe_z, moe_dropped
 * and expert_tokens ([block][expert] slots) with experts. The caller writes it whole
 * (data/linefile.h). */
enum { METRICS_JSON_MAX = 1024 };
size_t metrics_json(char *buf, size_t len, const metrics_row *r);
/* 9900 → "9.9k", 1234567 → "1.23M", 412 → "412" (3 significant digits). */
const char *metrics_si(char *buf, size_t len, double v);
#endif
