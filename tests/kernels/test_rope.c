/* Rotary embedding: table-driven kernel vs the table-free twin (forward and inverse, heads inside
 * a wider row with untouched padding); inverse is the exact transpose (⟨R x, y⟩ = ⟨x, R⁻ y⟩ in
 * double, which is what makes it the backward) and undoes the forward; backward vs finite
 * differences of a double forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu.h"
#include "kernels/rope.h"
#include "ktest.h"

/* Double forward on x[B·T, ld] (heads nh·H at the start of each row). */
static void rope_d(double *x, int64_t B, int64_t T, int64_t nh, int64_t H, int64_t ld) {
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < H / 2; i++) {
                double a = (double)(r % T) * pow(10000.0, -2.0 * (double)i / (double)H);
                double *x1 = x + r * ld + h * H + i, *x2 = x1 + H / 2, u = *x1, v = *x2;
                *x1 = u * cos(a) - v * sin(a);
                *x2 = v * cos(a) + u * sin(a);
            }
}

static void run(int64_t B, int64_t T, int64_t nh, int64_t H, int64_t pad) {
    int64_t ld = nh * H + pad, n = B * T * ld;
    float *x = kt_floats(n), *xk = kt_floats(n);
    float *xr = kt_floats(n), *w = kt_floats(n);
    float *ct = kt_floats(T * H / 2), *st = kt_floats(T * H / 2);
    double *xd = kt_doubles(n), *yd = kt_doubles(n);
    double *fd = kt_doubles(n);
    char what[128], shape[64];
    snprintf(shape, sizeof shape, "B=%lld T=%lld nh=%lld H=%lld ld=%lld", (long long)B,
             (long long)T, (long long)nh, (long long)H, (long long)ld);
    kt_fill(x, n, 1, -1, 1);
    kt_fill(w, n, 2, -1, 1);
    kern_rope_table(ct, st, T, H);
    for (int inv = 0; inv < 2; inv++) {
        for (int64_t i = 0; i < n; i++) xk[i] = xr[i] = x[i];
        kern_rope_apply(xk, ct, st, B, T, nh, H, ld, inv);
        kern_rope_apply_ref(xr, B, T, nh, H, ld, inv);
        snprintf(what, sizeof what, "rope %s vs ref %s", inv ? "inverse" : "forward", shape);
        kt_close(what, xk, xr, n, 4); /* one rotation: two products and a sum, k = 4 */
        int pad_ok = 1;
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t c = nh * H; c < ld; c++) pad_ok &= xk[r * ld + c] == x[r * ld + c];
        check_expect(pad_ok, "rope %s: columns beyond nh·H untouched", shape);
    }
    /* inverse undoes forward */
    for (int64_t i = 0; i < n; i++) xk[i] = x[i];
    kern_rope_apply(xk, ct, st, B, T, nh, H, ld, 0);
    kern_rope_apply(xk, ct, st, B, T, nh, H, ld, 1);
    snprintf(what, sizeof what, "rope inverse(forward(x)) = x %s", shape);
    kt_close(what, xk, x, n, 8);
    /* transpose: <R x, w> = <x, R⁻ w> with kernels in float, sums in double */
    for (int64_t i = 0; i < n; i++) xk[i] = x[i], xr[i] = w[i];
    kern_rope_apply(xk, ct, st, B, T, nh, H, ld, 0);
    kern_rope_apply(xr, ct, st, B, T, nh, H, ld, 1);
    double l = 0, rgt = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        l += (double)xk[i] * w[i];
        rgt += (double)x[i] * xr[i];
        mag += fabs((double)x[i] * w[i]);
    }
    check_expect(fabs(l - rgt) <= 8 * 1.2e-7 * (mag + 1), "rope ⟨Rx,w⟩=%.9g ⟨x,R⁻w⟩=%.9g %s", l,
                 rgt, shape);
    /* backward = inverse applied to dy, vs FD of L = Σ w ⊙ rope_d(x) */
    for (int64_t i = 0; i < n; i++) xd[i] = x[i];
    const double h = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double s = xd[i], lp = 0, lm = 0;
        for (int64_t j = 0; j < n; j++) yd[j] = xd[j];
        yd[i] = s + h;
        rope_d(yd, B, T, nh, H, ld);
        for (int64_t j = 0; j < n; j++) lp += yd[j] * w[j];
        for (int64_t j = 0; j < n; j++) yd[j] = xd[j];
        yd[i] = s - h;
        rope_d(yd, B, T, nh, H, ld);
        for (int64_t j = 0; j < n; j++) lm += yd[j] * w[j];
        fd[i] = (lp - lm) / (2 * h);
    }
    snprintf(what, sizeof what, "rope bwd (inverse on dy) vs FD(double) %s", shape);
    kt_close_d(what, xr, fd, n, 8);
    free(x), free(xk), free(xr), free(w), free(ct), free(st), free(xd), free(yd), free(fd);
}

/* The plain copy and the one the CPU picks, on the same inputs: the same bits, both directions,
 * by table row (r mod T) and by position list. */
static void copies(int64_t B, int64_t T, int64_t nh, int64_t H, int64_t pad) {
    const int64_t ld = nh * H + pad, n = B * T * ld;
    float *x[2] = {kt_floats(n), kt_floats(n)}, *ct = kt_floats(2 * T * H / 2);
    float *st = kt_floats(2 * T * H / 2);
    int32_t *pos = malloc((size_t)T * sizeof *pos);
    check_expect(pos != NULL, "rope copies: out of memory");
    if (!pos) return;
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)((t * 7 + 3) % (2 * T));
    kern_rope_table(ct, st, 2 * T, H);
    for (int v = 0; v < 4; v++) {
        for (int c = 0; c < 2; c++) {
            kern_cpu_vec_plain(c == 0);
            kt_fill(x[c], n, 21 + (uint64_t)v, -2, 2);
            if (v < 2)
                kern_rope_apply(x[c], ct, st, B, T, nh, H, ld, v);
            else
                kern_rope_apply_pos(x[c], ct, st, pos, B, T, nh, H, ld, v - 2);
        }
        kern_cpu_vec_plain(0);
        char what[160];
        snprintf(what, sizeof what, "rope %s%s B=%lld T=%lld nh=%lld H=%lld: plain = %s copy",
                 v & 1 ? "inverse" : "forward", v < 2 ? "" : " by positions", (long long)B,
                 (long long)T, (long long)nh, (long long)H,
                 kern_cpu_vec_wide() ? "AVX-512" : "plain");
        kt_equal(what, x[1], x[0], n);
    }
    free(x[0]), free(x[1]), free(ct), free(st), free(pos);
}

int main(void) {
    run(2, 7, 3, 6, 5);
    run(1, 1, 1, 2, 0);
    run(3, 5, 2, 2, 3);
    run(1, 13, 1, 10, 1);
    run(1, 9, 2, 64, 0); /* wide angles: pos·θ^(−2i/H) over i < 32 */
    copies(2, 7, 3, 6, 5);
    copies(2, 33, 4, 64, 0);
    copies(3, 17, 2, 42, 3);
    return check_finish("test_kern_rope");
}
