/* Token files and batch windows against independent truth: the text's own bytes at offsets
 * recomputed here from the formulas in data/tokens.h (128-bit integers for the sequential order).
 * Checks, for a prepared HDF5 file and for the same text opened directly: split sizes and
 * attributes, windows of both orders and both splits over several steps, rows identical whether
 * one rank reads the whole batch or the ranks split it (including ranks with no rows), and the
 * errors for a T too long for a split and for a bad row range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/h5array.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "dtest.h"

/* ---- the formulas of tokens.h, transcribed independently ---- */

static uint64_t ref_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t ref_offset(tokens_order order, uint64_t seed, int split, int64_t s, int64_t B,
                          int64_t b, int64_t n, int64_t T) {
    int64_t m = n - T - 1;
    if (order == TOKENS_ORDER_SEQUENTIAL) {
        unsigned __int128 x = ((unsigned __int128)s * (uint64_t)B + (uint64_t)b) * (uint64_t)T;
        return (int64_t)(x % (uint64_t)m);
    }
    uint64_t h =
        ref_mix(ref_mix(ref_mix(ref_mix(seed) ^ (uint64_t)split) ^ (uint64_t)s) ^ (uint64_t)b);
    double u = (double)(h >> 11) / 9007199254740992.0;
    int64_t o = (int64_t)(u * (double)m);
    return o < m ? o : m - 1;
}

/* ---- checks ---- */

static const unsigned char *g_text;
static int64_t g_n, g_ntrain;

/* Reads the whole batch on every rank and this rank's share, compares both with the text and
 * the shares with the whole; returns the number of distinct offsets seen (for spread checks). */
static void check_batches(tokens *tf, const char *label, tokens_split split, tokens_order order,
                          uint64_t seed, int64_t step, int64_t B, int64_t T) {
    int64_t n = tokens_count(tf, split);
    const unsigned char *base = g_text + (split == TOKENS_VAL ? g_ntrain : 0);
    int64_t row0 = dtest_rank * B / dtest_nranks, row1 = (dtest_rank + 1) * B / dtest_nranks;
    int64_t nrows = row1 - row0, W = T + 1;
    int32_t *all = malloc((size_t)(B * W) * sizeof *all);
    int32_t *mine = malloc((size_t)((nrows ? nrows : 1) * W) * sizeof *mine);
    char err[512] = "";
    int rc = tokens_batch(tf, split, order, seed, step, B, 0, B, T, all, err, sizeof err);
    DT_CHECK(rc == 0, "%s: whole batch: %s", label, err);
    rc = tokens_batch(tf, split, order, seed, step, B, row0, nrows, T, mine, err, sizeof err);
    DT_CHECK(rc == 0, "%s: rows [%lld, %lld): %s", label, (long long)row0, (long long)row1, err);
    for (int64_t b = 0; b < B; b++) {
        int64_t o = ref_offset(order, seed, split, step, B, b, n, T);
        int64_t lib = tokens_offset(order, seed, split, step, B, b, n, T);
        DT_CHECK(o == lib && o >= 0 && o + W <= n,
                 "%s %s order %d step %lld row %lld: offset %lld, expected %lld (n %lld)", label,
                 tokens_split_name(split), order, (long long)step, (long long)b, (long long)lib,
                 (long long)o, (long long)n);
        for (int64_t i = 0; i < W; i++) {
            if (all[b * W + i] != base[o + i]) {
                DT_CHECK(
                    0, "%s %s order %d step %lld row %lld col %lld: token %d, text byte %d at %lld",
                    label, tokens_split_name(split), order, (long long)step, (long long)b,
                    (long long)i, all[b * W + i], base[o + i], (long long)o);
                break;
            }
        }
    }
    if (nrows)
        DT_CHECK(memcmp(mine, all + row0 * W, (size_t)(nrows * W) * sizeof *mine) == 0,
                 "%s: rows [%lld, %lld) read alone differ from the whole batch", label,
                 (long long)row0, (long long)row1);
    free(mine);
    free(all);
}

static void check_source(tokens *tf, const char *label) {
    DT_CHECK(tokens_count(tf, TOKENS_TRAIN) == g_ntrain &&
                 tokens_count(tf, TOKENS_VAL) == g_n - g_ntrain,
             "%s: splits %lld + %lld, expected %lld + %lld", label,
             (long long)tokens_count(tf, TOKENS_TRAIN), (long long)tokens_count(tf, TOKENS_VAL),
             (long long)g_ntrain, (long long)(g_n - g_ntrain));
    DT_CHECK(strcmp(tokens_source(tf), "corpus.txt") == 0, "%s: source '%s'", label,
             tokens_source(tf));
    const int64_t steps[] = {0, 1, 2, 7, 1000};
    const int64_t Bs[] = {7, 3, 1};
    for (int order = 0; order < 2; order++)
        for (int split = 0; split < 2; split++)
            for (size_t si = 0; si < sizeof steps / sizeof *steps; si++)
                for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++) {
                    check_batches(tf, label, split, order, 1234, steps[si], Bs[bi], 13);
                    check_batches(tf, label, split, order, 99, steps[si], Bs[bi], 1);
                }
    /* Longest T the val split allows: one possible offset (0). */
    int64_t T = tokens_count(tf, TOKENS_VAL) - 2;
    DT_CHECK(tokens_max_T(tf) == T, "%s: max T %lld, expected %lld", label,
             (long long)tokens_max_T(tf), (long long)T);
    check_batches(tf, label, TOKENS_VAL, TOKENS_ORDER_RANDOM, 5, 3, 5, T);
    check_batches(tf, label, TOKENS_VAL, TOKENS_ORDER_SEQUENTIAL, 5, 3, 5, T);
    /* Huge steps: exact modular arithmetic where s·B·T overflows 64 bits. */
    check_batches(tf, label, TOKENS_TRAIN, TOKENS_ORDER_SEQUENTIAL, 0, (int64_t)1 << 50, 7, 100);
    check_batches(tf, label, TOKENS_TRAIN, TOKENS_ORDER_RANDOM, ~0ull, (int64_t)1 << 50, 7, 100);

    /* Random offsets spread over the split; train and val streams differ. */
    int distinct = 0;
    int64_t prev = -1;
    for (int64_t b = 0; b < 64; b++) {
        int64_t o = tokens_offset(TOKENS_ORDER_RANDOM, 7, TOKENS_TRAIN, 0, 64, b, g_ntrain, 13);
        distinct += o != prev;
        prev = o;
    }
    DT_CHECK(distinct > 50, "%s: only %d distinct random offsets in 64 rows", label, distinct);

    int32_t out[64];
    char err[512] = "";
    int rc = tokens_batch(tf, TOKENS_VAL, TOKENS_ORDER_RANDOM, 1, 0, 4, 0, 1, T + 1, out, err,
                          sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "split 'val' has") && strstr(err, "too few"),
             "%s: T too long for val: rc %d, '%s'", label, rc, err);
    rc =
        tokens_batch(tf, TOKENS_TRAIN, TOKENS_ORDER_RANDOM, 1, 0, 4, 3, 2, 8, out, err, sizeof err);
    DT_CHECK(rc < 0 && strstr(err, "bad arguments"), "%s: rows past B: rc %d, '%s'", label, rc,
             err);
}

static void check_attributes(const char *h5) {
    h5array *f;
    char err[512] = "", s[64] = "";
    int64_t v = 0;
    DT_CHECK(h5array_open(&f, h5, dtest_world(), err, sizeof err) == 0, "%s", err);
    if (!f) return;
    DT_CHECK(h5array_attr_get_str(f, "/", "format", s, sizeof s, err, sizeof err) == 0 &&
                 strcmp(s, "meshtrain-tokens") == 0,
             "format '%s' %s", s, err);
    DT_CHECK(h5array_attr_get_str(f, "/", "tokenizer", s, sizeof s, err, sizeof err) == 0 &&
                 strcmp(s, "byte") == 0,
             "tokenizer '%s' %s", s, err);
    DT_CHECK(h5array_attr_get_str(f, "/", "source", s, sizeof s, err, sizeof err) == 0 &&
                 strcmp(s, "corpus.txt") == 0,
             "source '%s' %s", s, err);
    DT_CHECK(h5array_attr_get_i64(f, "/", "version", &v, err, sizeof err) == 0 && v == 1,
             "version %lld", (long long)v);
    DT_CHECK(h5array_attr_get_i64(f, "/", "vocab_size", &v, err, sizeof err) == 0 && v == 256,
             "vocab %lld", (long long)v);
    DT_CHECK(h5array_attr_get_i64(f, "/train", "n_tokens", &v, err, sizeof err) == 0 &&
                 v == g_ntrain,
             "n_train %lld", (long long)v);
    DT_CHECK(h5array_attr_get_i64(f, "/val", "n_tokens", &v, err, sizeof err) == 0 &&
                 v == g_n - g_ntrain,
             "n_val %lld", (long long)v);
    h5array_close(f);
}

int main(int argc, char **argv) {
    char dir[256], txt[300], h5[300], err[512] = "";
    dtest_init(&argc, &argv, dir, sizeof dir);
    g_n = 5003; /* prime: the val split is floor(500.3) = 500 tokens */
    unsigned char *text = malloc((size_t)g_n);
    dtest_make_text(text, (size_t)g_n, 42);
    g_text = text;
    g_ntrain = g_n - 500;
    DT_CHECK(tokens_val_count(g_n, 0.1) == 500, "val count %lld",
             (long long)tokens_val_count(g_n, 0.1));
    snprintf(txt, sizeof txt, "%s/corpus.txt", dir);
    snprintf(h5, sizeof h5, "%s/corpus.h5", dir);
    int rc = 0;
    if (dtest_rank == 0) {
        rc = dtest_write_file(txt, text, (size_t)g_n);
        if (rc == 0) rc = tokens_prepare(txt, h5, TOKENS_VAL_FRACTION, err, sizeof err);
        DT_CHECK(rc == 0, "prepare: %s", err);
        DT_CHECK(dtest_count_prefix(dir, "corpus.h5.tmp") == 0, "prepare left a temp file");
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc == 0) {
        check_attributes(h5);
        const char *paths[2] = {h5, txt};
        for (int k = 0; k < 2; k++) {
            tokens *tf = NULL;
            rc = tokens_open(&tf, paths[k], TOKENS_VAL_FRACTION, dtest_world(), err, sizeof err);
            DT_CHECK(rc == 0 && tf, "open %s: %s", paths[k], err);
            if (!tf) continue;
            DT_CHECK(tokens_is_text(tf) == k, "%s: is_text %d", paths[k], tokens_is_text(tf));
            check_source(tf, k ? "text" : "hdf5");
            tokens_close(tf);
        }
    }
    /* The tokenizer itself: every byte round-trips, out-of-range tokens are refused. */
    char bytes[256], back[256];
    int32_t tok[256];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i;
    tok_encode(tok, bytes, 256);
    DT_CHECK(tok_decode(back, tok, 256) == 0 && memcmp(bytes, back, 256) == 0 && tok[255] == 255,
             "byte round trip");
    tok[7] = 256;
    DT_CHECK(tok_decode(back, tok, 256) < 0, "decode accepted 256");
    tok[7] = -1;
    DT_CHECK(tok_decode(back, tok, 256) < 0, "decode accepted -1");
    free(text);
    return dtest_finish("test_tokens", dir);
}
