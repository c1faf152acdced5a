/* kvshard: the KV cache sharded over the sequence on one mesh axis (generate --kv-shard AXIS),
 * for long contexts whose cache does not fit one rank.
 *
 * Layout: round-robin. Of the P ranks of the axis, rank p holds the cache positions t with
 * t mod P = p, position t in its local row t div P, so S positions take ceil(S/P) rows on every
 * rank and, at any length, the ranks hold within one position of each other (a contiguous
 * split would leave the later ranks idle, their memory unused, until the sequence reaches
 * them). The new token's K and V are stored by the rank that owns its position.
 *
 * Every rank of the axis runs the same rows (the forward is repeated along it, as along the
 * tensor axis): Q is already on every rank. Decode, per layer: each rank attends its own rows
 * with kern_attn_part_cached, giving the partial (m, l, O) of every local sequence and head; one
 * AllGather over the axis brings every rank's partials to every rank, which merges them in rank
 * order 0, 1, .., P−1 (kern_attn_part_merge), so the output is the same on every rank and does
 * not depend on which partial arrived first. Prefill attends the prompt's own keys and stores
 * the positions this rank owns.
 *
 * The axis is apart from --dp and --tensor (it composes with both: with --tensor each rank's
 * partials are those of its heads); the AllToAll layout (|Y| > K without --kv-replicate) is
 * refused. The cache may be bf16 (--kv-dtype bf16), but for the sharded prefill below (fp32).
 * Depends on mesh, kernels, config. */
#ifndef MT_TRAIN_INFER_KVSHARD_H
#define MT_TRAIN_INFER_KVSHARD_H
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/config/config.h"

typedef struct {
    mesh_axes ax; /* the axis (n = 0: not sharded) */
    int64_t P, p; /* its size, this rank's index on it */
    int64_t R, Nl, Kl, H, S;
    float *part, *all, *scr; /* this rank's partials, every rank's, the kernel's scratch */
    int32_t *kpos;           /* global positions of this rank's rows */
    /* the sharded prefill (kvshard_prefill_init): this rank's K, V of a chunk [2, rows, Kl·H],
     * every rank's, one sequence's K, V in position order [2, S, Kl·H], the partial's m, l, the
     * kernel's scratch; the query positions, and 0 .. S−1 */
    float *pf_send, *pf_all, *pf_kv, *pf_ml, *pf_scr;
    int32_t *pf_qpos, *pf_iota;
} kvshard;

/* Not collective. Checks --kv-shard `axis` (0: none) against the mesh and the other flags of c,
 * and adds the axis to the data axes of *plan_c (the sharding plan replicates the weights over
 * it, as over a data axis; the sequences are not split over it). 0, or −1 with err. */
int kvshard_config(const config *c, const mesh *m, char axis, config *plan_c, char *err,
                   size_t errlen);
/* The data axes of c other than `axis`: the replicas, which hold different sequences. */
mesh_axes kvshard_replica_axes(const config *c, const mesh *m, char axis);
/* Not collective. Sets up ks for `axis` (0: none, P = 1): R rows of Nl query and Kl kv heads of
 * H, S positions in all. 0, or −1 when out of memory. */
int kvshard_init(kvshard *ks, const mesh *m, char axis, int64_t R, int64_t Nl, int64_t Kl,
                 int64_t H, int64_t S);
void kvshard_free(kvshard *ks);
/* Rows of this rank's cache for S positions: ceil(S/P). */
int64_t kvshard_rows(const kvshard *ks, int64_t S);
/* This rank's local row of position t, or −1 when another rank owns it. */
int64_t kvshard_row(const kvshard *ks, int64_t t);
/* Rows of this rank that hold positions < n. */
int64_t kvshard_held(const kvshard *ks, int64_t n);
/* Collective over: the axis. Decode attention of R query rows q[R, Nl·H], row r at position
 * pos[r] (its own key already stored), against this rank's rows kc(r), vc(r) [rows, ldk] of the
 * sequence: out[R, Nl·H], the same on every rank of the axis. kc, vc: the first cache row of
 * sequence r, rows `seq_stride` elements apart per sequence; the elements fp32, or with bf16 the
 * cache's bf16 (kern_attn_part_cached_bf16: q and the probabilities rounded, fp32 sums; the
 * partials and their merge fp32). */
void kvshard_attend(kvshard *ks, mesh *m, float *out, const float *q, const void *kc,
                    const void *vc, int64_t seq_stride, const int32_t *pos, int64_t ldk, int bf16);

/* ---- the prefill with the prompts over the axis (generate --cp AXIS) ----
 * Each rank of the axis runs the forward of the prompt positions it will cache (t mod P = p), so
 * the keys and values it computes are its cache rows as they are: nothing moves after the
 * prefill, and decode goes on as above. A chunk's sequence takes ceil(len/P) rows on the rank
 * that holds the most of it (kvshard_prefill_rows: the chunk's size, the same on every rank); the
 * ranks hold within one row of each other, so the work is balanced as zigzag balances training's
 * (each rank has every P-th query, early and late). Per layer, one AllGather over the axis brings
 * every rank's keys and values of the chunk, put in position order; each rank's queries attend
 * them (kern_attn_part_cached, the keys they see; a bf16 cache: in bf16, below). */
/* Not collective. The prefill's buffers for chunks of up to max_rows rows (as counted by
 * kvshard_prefill_rows). 0, or −1 when out of memory. */
int kvshard_prefill_init(kvshard *ks, int64_t max_rows);
/* Rows a sequence of len tokens takes in a prefill chunk: ceil(len/P). */
int64_t kvshard_prefill_rows(const kvshard *ks, int64_t len);
/* Not collective. This rank's tokens of a prompt tok[len]: held(len) rows, the tokens and
 * global positions at p, p + P, .. into rtok, rpos. Their count. */
int64_t kvshard_take(const kvshard *ks, const int32_t *tok, int64_t len, int32_t *rtok,
                     int32_t *rpos);
/* Collective over: the axis. Prefill attention of a chunk of n sequences of len[n] tokens, this
 * rank's rows of each (kvshard_take) packed one sequence after the other: q[rows, Nl·H],
 * k, v[rows, Kl·H] → out[rows, Nl·H]. Returns the keys the rows saw, Σ (position + 1). bf16 (a
 * bf16 cache): k and v rounded to bf16 (the cache's rows), gathered in bf16 (half the bytes) and
 * attended by kern_attn_part_cached_bf16 over every key a row sees, which gives the rows of the
 * unsharded bf16 prefill (kern_attn_cached_bf16) bit for bit. */
double kvshard_prefill(kvshard *ks, mesh *m, float *out, const float *q, const float *k,
                       const float *v, const int64_t *len, int64_t n, int bf16);

/* Collective over: m's world. The group mesh of the AllToAll layout (gen.h), for a tensor axis t
 * of |Y| = K·Z ranks: t becomes t = K (kv heads) and a new minor axis of size Z (the ranks
 * sharing a kv head), over m's ranks (a sub-mesh's too: mesh_split) in m's rank order, so that
 * ranks and coordinates stay those of m; that axis into *gax. NULL with err. */
mesh *kv_group_mesh(mesh *m, char t, int64_t K, int64_t Z, mesh_axes *gax, char *err,
                    size_t errlen);
#endif
