/* tokens: token files and batch windows. Owns the on-disk token format (HDF5, below), turning a
 * text file into one (`tokens_prepare`), opening one over a communicator with validation, and
 * cutting the (input, target) windows of a global batch, each rank reading only its rows by
 * hyperslab. Depends on MPI, parallel HDF5 and the byte tokenizer; knows no model math.
 *
 * File format "meshtrain-tokens", version 1 (HDF5):
 *   /train, /val   1-D uint8 datasets (any integer type of at most 4 bytes is accepted on read):
 *                  the tokens of the text, split so that /val is the LAST floor(n · val_fraction)
 *                  tokens of the text and /train everything before; each carries an int64
 *                  attribute n_tokens equal to its length.
 *   attributes on /: format = "meshtrain-tokens", version = 1, tokenizer = "byte",
 *                  vocab_size = 256, source = base name of the text file, val_fraction (double).
 * A plain text file (UTF-8, no NUL bytes) is accepted wherever a token file is: `tokens_open`
 * tokenizes it in memory with the same split.
 *
 * Batches are a pure function of (seed, split, step, row) and the split's length n, never of the
 * mesh: row b ∈ [0, B) of step s is the window tokens[o, o + T + 1) of the split, with
 *   sequential: o = ((s·B + b)·T) mod (n − T − 1)            (exact integer arithmetic)
 *   random:     o = min(floor(u · (n − T − 1)), n − T − 2),  u = (h >> 11) · 2^-53,
 *               h = mix(mix(mix(mix(seed) ^ split) ^ s) ^ b),  split = 0 train, 1 val,
 *               mix = hash_mix64 (data/hash.h, splitmix64's output function).
 *               The min only matters for n > 2^52.
 * So a window needs n ≥ T + 2. The window's first T tokens are the inputs and its last T the
 * targets. Evaluation uses split TOKENS_VAL with its own step counter: eval batch i of every
 * evaluation is step i (the same held-out rows each time, so val losses compare); the split is
 * part of the key, so eval batches never repeat the training stream. */
#ifndef MT_DATA_TOKENS_H
#define MT_DATA_TOKENS_H
#include <stddef.h>
#include <stdint.h>

#include "data/tokens_order.h"
#include "mesh/mesh.h"

#define TOKENS_FORMAT "meshtrain-tokens"
#define TOKENS_VERSION 1
#define TOKENS_VAL_FRACTION 0.1

typedef struct tokens tokens;
typedef enum { TOKENS_TRAIN = 0, TOKENS_VAL = 1 } tokens_split;

/* "train" / "val". */
const char *tokens_split_name(tokens_split split);
/* Tokens in the validation split of a text of n tokens: floor(n · val_fraction). */
int64_t tokens_val_count(int64_t n, double val_fraction);

/* Not collective (call it from one process). Tokenizes the text file text_path and writes a token
 * file to out_path, atomically: out_path.tmp.<pid> first, then fsync and rename, so a failure
 * leaves any previous out_path untouched. val_fraction must lie in (0, 1) and both splits must
 * hold at least 3 tokens. The text must be UTF-8 without NUL bytes (what tokens_open accepts as
 * text); an HDF5 file, binary data and an out_path naming the text itself are refused. Returns 0, or -1 with a message naming the file and the problem. */
int tokens_prepare(const char *text_path, const char *out_path, double val_fraction, char *err,
                   size_t errlen);

/* Collective over: comm. Opens a token file (MPI-IO) or, when path is plain text, reads and
 * tokenizes it in memory with the split given by val_fraction (ignored for token files). Checks
 * format, version, tokenizer, vocabulary, both datasets and that each split holds at least 3
 * tokens. Returns 0 with *out set, or a negative status with *out = NULL and a message naming the
 * file and the problem — the same status and message on every rank. Nothing is printed. */
int tokens_open(tokens **out, const char *path, double val_fraction, const mesh_comm *comm,
                char *err, size_t errlen);
/* Collective over: the comm given to tokens_open. Accepts NULL. */
void tokens_close(tokens *tf);

/* Not collective. Tokens in a split. */
int64_t tokens_count(const tokens *tf, tokens_split split);
/* Not collective. The largest T whose windows fit in both splits (min over splits of n − 2). */
int64_t tokens_max_T(const tokens *tf);
/* Not collective. The text's file name as recorded at prepare time (or the text path itself). */
const char *tokens_source(const tokens *tf);
/* Not collective. 1 when the input was plain text tokenized in memory, 0 for a token file. */
int tokens_is_text(const tokens *tf);

/* Not collective, pure. The hash h of the header and the window start o of row b of step s of a
 * global batch of B rows over a split of n tokens (n ≥ T + 2, 0 ≤ b < B, s ≥ 0). */
uint64_t tokens_hash(uint64_t seed, uint64_t split, uint64_t step, uint64_t row);
int64_t tokens_offset(tokens_order order, uint64_t seed, tokens_split split, int64_t step,
                      int64_t B, int64_t b, int64_t n, int64_t T);

/* Not collective (independent reads). Rows [row0, row0 + nrows) of step `step` of a global batch
 * of B rows: out[r, 0..T] = window of global row row0 + r, r < nrows; out is [nrows, T+1] int32,
 * overwritten. Reads only those windows (one hyperslab per row). Returns 0, or -1 with a message
 * for bad arguments (row range outside [0, B), T < 1, step < 0), a split too short for T (n < T+2),
 * a read error, or a token outside [0, 256). Nothing is reduced over ranks: a caller that needs
 * every rank to agree reduces the status itself (mesh_agree). */
int tokens_batch(tokens *tf, tokens_split split, tokens_order order, uint64_t seed, int64_t step,
                 int64_t B, int64_t row0, int64_t nrows, int64_t T, int32_t *out, char *err,
                 size_t errlen);
#endif
