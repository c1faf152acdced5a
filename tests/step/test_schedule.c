/* The learning-rate schedule (trainer_lr) against its contract in trainer.h: linear warm-up to
 * --lr over --warmup steps, then cosine decay to --min-lr at the last step. Checked as
 * properties, so either "reaches lr at step warmup−1 or warmup" convention passes; and the rate
 * --emulate-rate stands for the chip's peak (trainer_emulation_rate). Not MPI. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "train/step/trainer.h"

/* |a − b| ≤ k·eps·(|a| + |b| + 1) with eps = 2^-52, k = 16. */
static int close_to(double a, double b) {
    return fabs(a - b) <= 16 * 0x1p-52 * (fabs(a) + fabs(b) + 1);
}

static void schedule(int64_t steps, int64_t warmup, double lr, double min_lr) {
    config c;
    config_defaults(&c);
    c.steps = steps, c.warmup = warmup, c.lr = lr, c.min_lr = min_lr;
    double peak = 0, prev = 0;
    int64_t peak_at = -1;
    int rising = 1, falling = 1, in_range = 1;
    for (int64_t s = 0; s < steps; s++) {
        const double v = trainer_lr(&c, s);
        in_range &= v >= 0 && v <= lr * (1 + 1e-15) && (s < warmup || v >= min_lr * (1 - 1e-15));
        if (s < warmup && s > 0) rising &= v > prev;
        if (s > warmup) falling &= v <= prev * (1 + 1e-15);
        if (v > peak) peak = v, peak_at = s;
        prev = v;
    }
    const int64_t mid = warmup + (steps - warmup) / 2;
    const double half = 0.5 * (lr + min_lr),
                 step_change = 3.14159265358979 * (lr - min_lr) / (steps - warmup);
    printf("     steps %lld warmup %lld lr %g min %g: lr(0) %.3e peak %.3e at %lld, lr(mid) %.4e, "
           "lr(last) %.4e\n",
           (long long)steps, (long long)warmup, lr, min_lr, trainer_lr(&c, 0), peak,
           (long long)peak_at, trainer_lr(&c, mid), trainer_lr(&c, steps - 1));
    check_expect(in_range, "  every lr in [0, lr], and >= min_lr after warm-up");
    check_expect(rising, "  strictly rising during warm-up");
    check_expect(falling, "  non-increasing after warm-up");
    check_expect(close_to(peak, lr) && (peak_at == warmup - 1 || peak_at == warmup || warmup == 0),
                 "  peak = lr, reached at the end of warm-up");
    check_expect(warmup == 0 ? close_to(trainer_lr(&c, 0), lr)
                             : trainer_lr(&c, 0) <= lr / warmup * 1.0001,
                 "  lr(0) is lr/warmup at most (lr when warmup = 0)");
    check_expect(close_to(trainer_lr(&c, steps - 1), min_lr), "  lr(last step) = min_lr");
    check_expect(fabs(trainer_lr(&c, mid) - half) <= step_change, "  cosine: halfway at mid-decay");
}

int main(void) {
    schedule(100, 10, 1e-3, 1e-4);
    schedule(300, 30, 2e-3, 2e-4);
    schedule(50, 0, 3e-4, 0.0);
    schedule(7, 2, 1.0, 0.5);
    config c;
    config_defaults(&c);
    c.steps = 20, c.warmup = 0, c.lr = c.min_lr = 5e-4;
    int flat = 1;
    for (int64_t s = 0; s < 20; s++) flat &= close_to(trainer_lr(&c, s), 5e-4);
    check_expect(flat, "min_lr = lr: constant");
    /* --emulate-rate: the default stands the core's sgemm rate for the chip's peak; "model" the
     * linear layers' rate (3e9 FLOPs in 0.1 s: 3e10 FLOP/s) */
    check_expect(c.emulate_rate == CONFIG_RATE_PEAK, "--emulate-rate defaults to peak");
    check_expect(trainer_emulation_rate(CONFIG_RATE_PEAK, 5e10, 3e9, 0.1) == 5e10 &&
                     close_to(trainer_emulation_rate(CONFIG_RATE_MODEL, 5e10, 3e9, 0.1), 3e10) &&
                     trainer_emulation_rate(CONFIG_RATE_MODEL, 5e10, 3e9, 0) == 5e10 &&
                     trainer_emulation_rate(CONFIG_RATE_MODEL, 5e10, 0, 0.1) == 5e10,
                 "emulation rate: peak, the linear layers' rate, peak when it is unknown");
    return check_finish("test_schedule");
}
