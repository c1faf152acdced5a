/* kvblocks: the bookkeeping of one replica's paged KV cache, kept by the rank that schedules (the
 * blocks' contents live on every rank of the replica, engine.h). A pool of nb blocks of bs
 * positions each; a sequence holds a block table, and each block it holds counts one reference.
 *
 * Prefix caching: a full block can be published under the chained hash of its tokens,
 * h = hash(h of the previous block of the sequence, or 0 for the first; the block's bs tokens),
 * so equal hashes mean equal prefixes up to and including the block. A new sequence looks its
 * prompt up block by block and shares every block that matches (exactly: the tokens and the
 * parent hash are compared, so a hash collision never shares a wrong block). A published block
 * that nobody holds stays in the cache, evictable, on an LRU list; allocation takes a never-used
 * or released unpublished block first, then evicts the least recently released published one.
 *
 * Every block is in exactly one state: free (ref 0, unpublished), used (ref > 0, published or
 * not) or evictable (ref 0, published). kvb_check verifies that, the counts, the LRU list, the
 * hash table and every published block's hash. Pure bookkeeping: no MPI, no model. */
#ifndef MT_TRAIN_SERVE_KVBLOCKS_H
#define MT_TRAIN_SERVE_KVBLOCKS_H
#include <stddef.h>
#include <stdint.h>

typedef struct kvb_pool kvb_pool;

/* Counts of the pool's blocks by state, and the prefix cache's counters. */
typedef struct {
    int64_t total, free, used, evictable;
    int64_t published;     /* blocks in the hash table (used or evictable) */
    int64_t lookups, hits; /* blocks looked up by kvb_match, and found */
    int64_t evictions;     /* published blocks reclaimed by kvb_alloc */
} kvb_counts;

/* Not collective. nb ≥ 1 blocks of bs ≥ 1 positions; prefix = 0 turns publishing and lookups off
 * (every block is freed on release). NULL when out of memory. */
kvb_pool *kvb_create(int32_t nb, int32_t bs, int prefix);
void kvb_destroy(kvb_pool *p); /* accepts NULL */
int32_t kvb_block_size(const kvb_pool *p);
/* Blocks an allocation can get now: free + evictable. */
int64_t kvb_available(const kvb_pool *p);
kvb_counts kvb_get_counts(const kvb_pool *p);

/* A block with one reference: a free one, else the least recently released published one
 * (evicted from the cache). −1 when every block is used. */
int32_t kvb_alloc(kvb_pool *p);
/* Drops one reference of block b (a bug when it has none). At zero a published block becomes
 * evictable (most recently released), an unpublished one free. */
void kvb_release(kvb_pool *p, int32_t b);

/* The chained hash of a block's bs tokens after a block whose hash is parent (0: the first). */
uint64_t kvb_hash(uint64_t parent, const int32_t *tok, int32_t bs);
/* The longest run of full blocks of tok[0..n) found in the cache, at most max_blocks: each gets a
 * reference; blocks[i] and hashes[i] are block i of the run and its chained hash. Returns the
 * number of blocks (0 with prefix caching off). Counts lookups and hits. */
int32_t kvb_match(kvb_pool *p, const int32_t *tok, int64_t n, int32_t max_blocks, int32_t *blocks,
                  uint64_t *hashes);
/* How many blocks kvb_match would find now, without taking them or counting the lookups. */
int32_t kvb_peek(const kvb_pool *p, const int32_t *tok, int64_t n, int32_t max_blocks);
/* Block b (held, now full of the bs tokens tok, after a block of hash parent) enters the cache
 * unless a block of the same prefix is there already. Returns its chained hash either way. */
uint64_t kvb_publish(kvb_pool *p, int32_t b, uint64_t parent, const int32_t *tok);

/* Checks every invariant (header); 0, or −1 with the first broken one in err. */
int kvb_check(const kvb_pool *p, char *err, size_t errlen);
/* References of block b (tests). */
int32_t kvb_refs(const kvb_pool *p, int32_t b);
#endif
