/* hash.h — where a key lives: its two candidate buckets and its fingerprint.
 *
 * Both sides compute this the same way from the key bytes and the region's
 * hash seed, so a client finds a key without asking the server. One XXH3-128
 * gives two independent 64-bit halves: the low half's top bits pick the first
 * bucket among the index's base buckets, the high half's top bits the second,
 * its low 16 bits the fingerprint stored in slots; the split bits a grown
 * index adds (index_geom.h) come from the high half's bits 16.. for the first
 * bucket and the low half's low bits for the second. The two candidates may
 * be one bucket (the key then has 7 slots, not 14): one key in the bucket
 * count.
 */
#ifndef RKV_HASH_H
#define RKV_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "index_geom.h"

struct rkv_key_hash {
    uint64_t bucket[2]; /* candidate bucket indexes (may be equal) */
    uint16_t fp;        /* slot fingerprint, never 0 */
    uint64_t h64;       /* full 64-bit hash, for sharding and caches */
    uint64_t geom;      /* the geometry word the buckets are for (rkv_index_geom_word) */
};

void rkv_hash_key(const void *key, size_t key_len, uint64_t seed, const struct rkv_index_geom *g,
                  struct rkv_key_hash *out);

#endif
