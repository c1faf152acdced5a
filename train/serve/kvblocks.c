/* kvblocks: the paged KV cache's block pool and prefix cache (see kvblocks.h).
 *
 * Free blocks sit on a stack, evictable ones on a doubly linked LRU list (head = least recently
 * released), published ones in a hash table of 2^k buckets chained through the blocks. */
#include "train/serve/kvblocks.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"
#include "mesh/mesh.h"

typedef struct {
    int32_t ref;
    int32_t prev, next; /* LRU list (evictable blocks) */
    int32_t hnext;      /* hash chain (published blocks) */
    int8_t published, on_free;
    uint64_t hash, parent;
} kvb_block;

struct kvb_pool {
    int32_t nb, bs;
    int prefix;
    kvb_block *b;
    int32_t *tok; /* [nb, bs]: a published block's tokens */
    int32_t *free_stack, nfree;
    int32_t lru_head, lru_tail, nevict;
    int32_t *bucket, nbucket_mask;
    int64_t published, lookups, hits, evictions;
};

kvb_pool *kvb_create(int32_t nb, int32_t bs, int prefix) {
    kvb_pool *p = calloc(1, sizeof *p);
    if (!p || nb < 1 || bs < 1) {
        free(p);
        return NULL;
    }
    int32_t nbk = 1;
    while (nbk < 2 * nb) nbk *= 2;
    p->nb = nb, p->bs = bs, p->prefix = prefix;
    p->b = calloc((size_t)nb, sizeof *p->b);
    p->tok = calloc((size_t)nb * (size_t)bs, sizeof *p->tok);
    p->free_stack = calloc((size_t)nb, sizeof *p->free_stack);
    p->bucket = malloc((size_t)nbk * sizeof *p->bucket);
    if (!p->b || !p->tok || !p->free_stack || !p->bucket) {
        kvb_destroy(p);
        return NULL;
    }
    for (int32_t i = 0; i < nbk; i++) p->bucket[i] = -1;
    p->nbucket_mask = nbk - 1;
    for (int32_t i = 0; i < nb; i++) { /* block 0 on top: allocation order 0, 1, 2, ... */
        p->free_stack[i] = nb - 1 - i;
        p->b[i] = (kvb_block){0, -1, -1, -1, 0, 1, 0, 0};
    }
    p->nfree = nb;
    p->lru_head = p->lru_tail = -1;
    return p;
}

void kvb_destroy(kvb_pool *p) {
    if (!p) return;
    free(p->b), free(p->tok), free(p->free_stack), free(p->bucket), free(p);
}

int32_t kvb_block_size(const kvb_pool *p) {
    return p->bs;
}

int64_t kvb_available(const kvb_pool *p) {
    return (int64_t)p->nfree + p->nevict;
}

kvb_counts kvb_get_counts(const kvb_pool *p) {
    return (kvb_counts){p->nb,     p->nfree,     p->nb - p->nfree - p->nevict,
                        p->nevict, p->published, p->lookups,
                        p->hits,   p->evictions};
}

int32_t kvb_refs(const kvb_pool *p, int32_t b) {
    return p->b[b].ref;
}

/* ---------------------------------------------------------------- LRU list and hash table */

static void lru_unlink(kvb_pool *p, int32_t i) {
    kvb_block *b = &p->b[i];
    if (b->prev >= 0)
        p->b[b->prev].next = b->next;
    else
        p->lru_head = b->next;
    if (b->next >= 0)
        p->b[b->next].prev = b->prev;
    else
        p->lru_tail = b->prev;
    b->prev = b->next = -1;
    p->nevict--;
}

static void lru_append(kvb_pool *p, int32_t i) {
    kvb_block *b = &p->b[i];
    b->prev = p->lru_tail, b->next = -1;
    if (p->lru_tail >= 0)
        p->b[p->lru_tail].next = i;
    else
        p->lru_head = i;
    p->lru_tail = i;
    p->nevict++;
}

static int32_t *bucket_of(kvb_pool *p, uint64_t h) {
    return &p->bucket[(int32_t)(h & (uint64_t)p->nbucket_mask)];
}

static void unpublish(kvb_pool *p, int32_t i) {
    for (int32_t *at = bucket_of(p, p->b[i].hash); *at >= 0; at = &p->b[*at].hnext)
        if (*at == i) {
            *at = p->b[i].hnext;
            break;
        }
    p->b[i].hnext = -1;
    p->b[i].published = 0;
    p->published--;
}

/* The published block with this prefix (hash, parent and tokens all equal), or −1. */
static int32_t find(const kvb_pool *p, uint64_t h, uint64_t parent, const int32_t *tok) {
    for (int32_t i = p->bucket[(int32_t)(h & (uint64_t)p->nbucket_mask)]; i >= 0; i = p->b[i].hnext)
        if (p->b[i].hash == h && p->b[i].parent == parent &&
            !memcmp(p->tok + (int64_t)i * p->bs, tok, (size_t)p->bs * sizeof *tok))
            return i;
    return -1;
}

/* ---------------------------------------------------------------- allocation */

int32_t kvb_alloc(kvb_pool *p) {
    int32_t i;
    if (p->nfree > 0) {
        i = p->free_stack[--p->nfree];
        p->b[i].on_free = 0;
    } else if (p->lru_head >= 0) {
        i = p->lru_head;
        lru_unlink(p, i);
        unpublish(p, i);
        p->evictions++;
    } else {
        return -1;
    }
    p->b[i].ref = 1;
    return i;
}

void kvb_release(kvb_pool *p, int32_t i) {
    kvb_block *b = &p->b[i];
    CHECK(i >= 0 && i < p->nb && b->ref > 0, "kvb_release: block %d has no reference", (int)i);
    if (--b->ref > 0) return;
    if (b->published) {
        lru_append(p, i);
    } else {
        b->on_free = 1;
        p->free_stack[p->nfree++] = i;
    }
}

/* ---------------------------------------------------------------- prefix cache */

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

uint64_t kvb_hash(uint64_t parent, const int32_t *tok, int32_t bs) {
    uint64_t h = mix64(parent ^ UINT64_C(0x6b76626c6f636b73)); /* "kvblocks" */
    for (int32_t i = 0; i < bs; i++) h = mix64(h ^ (uint64_t)(uint32_t)tok[i]) + (uint64_t)i;
    return h ? h : 1; /* 0 stands for "no parent" */
}

int32_t kvb_peek(const kvb_pool *p, const int32_t *tok, int64_t n, int32_t max_blocks) {
    int32_t k = 0;
    uint64_t parent = 0;
    while (p->prefix && k < max_blocks && (int64_t)(k + 1) * p->bs <= n) {
        const int32_t *t = tok + (int64_t)k * p->bs;
        const uint64_t h = kvb_hash(parent, t, p->bs);
        if (find(p, h, parent, t) < 0) break;
        parent = h;
        k++;
    }
    return k;
}

int32_t kvb_match(kvb_pool *p, const int32_t *tok, int64_t n, int32_t max_blocks, int32_t *blocks,
                  uint64_t *hashes) {
    if (!p->prefix) return 0;
    int32_t k = 0;
    uint64_t parent = 0;
    while (k < max_blocks && (int64_t)(k + 1) * p->bs <= n) {
        const int32_t *t = tok + (int64_t)k * p->bs;
        const uint64_t h = kvb_hash(parent, t, p->bs);
        p->lookups++;
        const int32_t i = find(p, h, parent, t);
        if (i < 0) break;
        p->hits++;
        if (p->b[i].ref++ == 0) lru_unlink(p, i);
        blocks[k] = i, hashes[k] = h;
        parent = h;
        k++;
    }
    return k;
}

uint64_t kvb_publish(kvb_pool *p, int32_t i, uint64_t parent, const int32_t *tok) {
    const uint64_t h = kvb_hash(parent, tok, p->bs);
    kvb_block *b = &p->b[i];
    CHECK(b->ref > 0, "kvb_publish: block %d is not held", (int)i);
    if (!p->prefix || b->published || find(p, h, parent, tok) >= 0) return h;
    memcpy(p->tok + (int64_t)i * p->bs, tok, (size_t)p->bs * sizeof *tok);
    b->hash = h, b->parent = parent, b->published = 1;
    int32_t *at = bucket_of(p, h);
    b->hnext = *at;
    *at = i;
    p->published++;
    return h;
}

/* ---------------------------------------------------------------- invariants */

/* The free stack and the LRU list hold the blocks they should, each once. */
static int check_lists(const kvb_pool *p, char *err, size_t errlen) {
    int32_t nfree = 0, nlru = 0;
    for (int32_t s = 0; s < p->nfree; s++) {
        const int32_t i = p->free_stack[s];
        if (i < 0 || i >= p->nb || !p->b[i].on_free || p->b[i].ref || p->b[i].published)
            return errmsg_fail(err, errlen, "free stack slot %d holds block %d, which is not free",
                               (int)s, (int)i);
    }
    for (int32_t i = p->lru_head, prev = -1; i >= 0; prev = i, i = p->b[i].next) {
        if (++nlru > p->nb || p->b[i].prev != prev)
            return errmsg_fail(err, errlen, "the LRU list is broken at block %d", (int)i);
        if (p->b[i].ref || !p->b[i].published)
            return errmsg_fail(err, errlen,
                               "block %d on the LRU list has %d references or is "
                               "unpublished",
                               (int)i, (int)p->b[i].ref);
    }
    for (int32_t i = 0; i < p->nb; i++) nfree += p->b[i].on_free;
    if (nfree != p->nfree || nlru != p->nevict)
        return errmsg_fail(err, errlen,
                           "counts: %d blocks marked free vs %d on the stack, %d on "
                           "the LRU list vs %d counted",
                           (int)nfree, (int)p->nfree, (int)nlru, (int)p->nevict);
    return 0;
}

int kvb_check(const kvb_pool *p, char *err, size_t errlen) {
    int64_t used = 0, evictable = 0, published = 0, in_table = 0;
    for (int32_t i = 0; i < p->nb; i++) {
        const kvb_block *b = &p->b[i];
        if (b->ref < 0) return errmsg_fail(err, errlen, "block %d: %d references", (int)i, b->ref);
        used += b->ref > 0;
        evictable += b->ref == 0 && b->published;
        if (b->ref == 0 && !b->published && !b->on_free)
            return errmsg_fail(err, errlen, "block %d is unreferenced, unpublished and not free",
                               (int)i);
        if (!b->published) continue;
        published++;
        if (kvb_hash(b->parent, p->tok + (int64_t)i * p->bs, p->bs) != b->hash)
            return errmsg_fail(err, errlen,
                               "block %d: its hash is not that of its parent and "
                               "tokens (a broken chain)",
                               (int)i);
    }
    for (int32_t k = 0; k <= p->nbucket_mask; k++)
        for (int32_t i = p->bucket[k], n = 0; i >= 0; i = p->b[i].hnext) {
            if (++n > p->nb || !p->b[i].published ||
                (int32_t)(p->b[i].hash & (uint64_t)p->nbucket_mask) != k)
                return errmsg_fail(err, errlen, "hash bucket %d is broken at block %d", (int)k,
                                   (int)i);
            in_table++;
        }
    if (used + evictable + p->nfree != p->nb || evictable != p->nevict ||
        published != p->published || in_table != published)
        return errmsg_fail(err, errlen,
                           "free %d + used %lld + evictable %lld != total %d, or "
                           "%lld published vs %lld counted vs %lld in the table",
                           (int)p->nfree, (long long)used, (long long)evictable, (int)p->nb,
                           (long long)published, (long long)p->published, (long long)in_table);
    return check_lists(p, err, errlen);
}
