/* metrics: per-step console line and JSON line (see metrics.h). */
#include "train/observe/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>

const char *metrics_si(char *buf, size_t len, double v) {
    if (v >= 1e9)
        snprintf(buf, len, "%.3gG", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, len, "%.3gM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, len, "%.3gk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
    return buf;
}

/* " | aux A z Z | dropped P% | experts c0/c1/..." (min and max past 16 experts). */
static void format_moe(char *buf, size_t len, const metrics_row *r) {
    int n = snprintf(buf, len, " | aux %.3f z %.3g | dropped %.1f%% | experts", r->moe_aux,
                     r->moe_z, 100.0 * r->moe_dropped);
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t e = 0; e < r->moe_E && n >= 0 && (size_t)n < len; e++) {
        int64_t c = 0;
        for (int64_t l = 0; l < r->moe_layers; l++) c += r->moe_kept[l * r->moe_E + e];
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
        if (r->moe_E <= 16)
            n += snprintf(buf + n, len - (size_t)n, "%s%lld", e ? "/" : " ", (long long)c);
    }
    if (r->moe_E > 16 && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " min %lld max %lld of %lld", (long long)lo,
                 (long long)hi, (long long)r->moe_E);
}

void metrics_format(char *buf, size_t len, const metrics_row *r, int width) {
    char tok[32];
    const double sec = r->seconds > 0 ? r->seconds : 1e-9;
    const double fps = r->flops / sec;
    int n = snprintf(buf, len,
                     "step %*lld | loss %.4f | lr %.1e | gnorm %.2f | %.0f ms | %s tok/s | %.1f "
                     "GFLOP/s | MFU %.0f%%",
                     width, (long long)r->step, r->loss, r->lr, r->grad_norm, 1e3 * r->seconds,
                     metrics_si(tok, sizeof tok, r->tokens / sec), fps / 1e9,
                     r->peak_flops > 0 ? 100.0 * fps / r->peak_flops : 0.0);
    if (r->comm_frac >= 0 && n >= 0 && (size_t)n < len) {
        n += snprintf(buf + n, len - (size_t)n,
                      " | comm %.0f%% (AG %.0f RS %.0f AR %.0f p2p %.0f) | idle %.0f%%",
                      100.0 * r->comm_frac, 100.0 * r->comm_ag, 100.0 * r->comm_rs,
                      100.0 * r->comm_ar, 100.0 * r->comm_p2p, fmax(0.0, 100.0 * r->idle_frac));
        if (r->pred_seconds > 0 && n >= 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, " | pred %.0f ms (%.2fx, %s)",
                          1e3 * r->pred_seconds, sec / r->pred_seconds,
                          r->dominant ? r->dominant : "-");
        if (r->book_seconds > 0 && n >= 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, " | book %.0f ms", 1e3 * r->book_seconds);
        if (r->pred_seconds > 0 && r->pred_dedicated > 0 && r->pred_dedicated != r->pred_seconds &&
            n >= 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, " | dedicated %.0f ms (%.2fx)",
                          1e3 * r->pred_dedicated, sec / r->pred_dedicated);
    }
    if (r->bubble_ideal > 0 && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n,
                      " | bubble %.2f (sim %.2f, ideal %.2f) | stage act %.1f MB", r->bubble,
                      r->bubble_sim, r->bubble_ideal, r->stage_act_bytes / 1e6);
    if (r->moe_layers > 0 && n >= 0 && (size_t)n < len) format_moe(buf + n, len - (size_t)n, r);
}

/* Appends printf's text to buf[len] at *n, counting past the end as snprintf does. */
static void put(char *buf, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(*n < len ? buf + *n : NULL, *n < len ? len - *n : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *n += (size_t)k;
}

/* Appends ,"key":v (JSON has no NaN or infinity: a diverged loss is null). */
static void json_num(char *buf, size_t len, size_t *n, const char *key, double v,
                     const char *fmt) {
    put(buf, len, n, ",\"%s\":", key);
    if (isfinite(v)) {
        char num[64];
        snprintf(num, sizeof num, fmt, v);
        put(buf, len, n, "%s", num);
    } else {
        put(buf, len, n, "null");
    }
}

size_t metrics_json(char *buf, size_t len, const metrics_row *r) {
    const double sec = r->seconds > 0 ? r->seconds : 1e-9;
    const double fps = r->flops / sec;
    size_t n = 0;
    put(buf, len, &n, "{\"step\":%lld", (long long)r->step);
    json_num(buf, len, &n, "loss", r->loss, "%.9g");
    json_num(buf, len, &n, "lr", r->lr, "%.6g");
    json_num(buf, len, &n, "gnorm", r->grad_norm, "%.6g");
    json_num(buf, len, &n, "ms", 1e3 * r->seconds, "%.3f");
    json_num(buf, len, &n, "tok_s", r->tokens / sec, "%.1f");
    json_num(buf, len, &n, "gflops", fps / 1e9, "%.4g");
    json_num(buf, len, &n, "mfu", r->peak_flops > 0 ? fps / r->peak_flops : 0.0, "%.4f");
    if (r->comm_frac >= 0) {
        json_num(buf, len, &n, "comm", r->comm_frac, "%.4f");
        json_num(buf, len, &n, "idle", r->idle_frac, "%.4f");
        if (r->pred_seconds > 0) json_num(buf, len, &n, "pred_ms", 1e3 * r->pred_seconds, "%.3f");
        if (r->book_seconds > 0) json_num(buf, len, &n, "book_ms", 1e3 * r->book_seconds, "%.3f");
        if (r->dominant) put(buf, len, &n, ",\"dominant\":\"%s\"", r->dominant);
        if (r->pred_seconds > 0 && r->pred_dedicated > 0)
            json_num(buf, len, &n, "pred_dedicated_ms", 1e3 * r->pred_dedicated, "%.3f");
        json_num(buf, len, &n, "comm_ag", r->comm_ag, "%.4f");
        json_num(buf, len, &n, "comm_rs", r->comm_rs, "%.4f");
        json_num(buf, len, &n, "comm_ar", r->comm_ar, "%.4f");
        json_num(buf, len, &n, "comm_p2p", r->comm_p2p, "%.4f");
    }
    if (r->bubble_ideal > 0) {
        json_num(buf, len, &n, "bubble", r->bubble, "%.4f");
        json_num(buf, len, &n, "bubble_ideal", r->bubble_ideal, "%.4f");
        json_num(buf, len, &n, "bubble_sim", r->bubble_sim, "%.4f");
        json_num(buf, len, &n, "stage_act_mb", r->stage_act_bytes / 1e6, "%.3f");
    }
    if (!isnan(r->val_loss)) json_num(buf, len, &n, "val_loss", r->val_loss, "%.9g");
    if (r->moe_layers > 0) {
        json_num(buf, len, &n, "moe_aux", r->moe_aux, "%.6g");
        json_num(buf, len, &n, "moe_z", r->moe_z, "%.6g");
        json_num(buf, len, &n, "moe_dropped", r->moe_dropped, "%.6g");
        put(buf, len, &n, ",\"expert_tokens\":[");
        for (int64_t l = 0; l < r->moe_layers; l++)
            for (int64_t e = 0; e < r->moe_E; e++)
                put(buf, len, &n, "%s%lld%s", e ? "," : l ? ",[" : "[",
                    (long long)r->moe_kept[l * r->moe_E + e], e + 1 == r->moe_E ? "]" : "");
        put(buf, len, &n, "]");
    }
    put(buf, len, &n, "}\n");
    return n;
}
