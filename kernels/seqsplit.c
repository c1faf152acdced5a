/* seqsplit: the zigzag and contiguous splits of a sequence (see seqsplit.h). */
#include "kernels/seqsplit.h"

void kern_seq_zigzag(int32_t *pos, int64_t T, int64_t n, int64_t r) {
    const int64_t c = T / (2 * n), hi = 2 * n - 1 - r;
    for (int64_t i = 0; i < c; i++) {
        pos[i] = (int32_t)(r * c + i);
        pos[c + i] = (int32_t)(hi * c + i);
    }
}

void kern_seq_contig(int32_t *pos, int64_t T, int64_t n, int64_t r) {
    const int64_t Tl = T / n;
    for (int64_t i = 0; i < Tl; i++) pos[i] = (int32_t)(r * Tl + i);
}

void kern_seq_zigzag_owner(int64_t p, int64_t T, int64_t n, int64_t *rank, int64_t *row) {
    const int64_t c = T / (2 * n), chunk = p / c;
    *rank = chunk < n ? chunk : 2 * n - 1 - chunk;
    *row = (chunk < n ? 0 : c) + p % c;
}

int64_t kern_seq_causal_pairs(const int32_t *pos, int64_t Tl) {
    int64_t s = 0;
    for (int64_t i = 0; i < Tl; i++) s += (int64_t)pos[i] + 1;
    return s;
}
