/* hash.h — where a key lives: its two candidate buckets and its fingerprint.
 *
 * Both sides compute this the same way from the key bytes and the region's
 * hash seed, so a client finds a key without asking the server. One XXH3-128
 * gives two independent 64-bit halves: the low half picks the first bucket,
 * the high half's top bits the second bucket and its low 16 bits the
 * fingerprint stored in slots. A bucket is the hash's top bits scaled to the
 * bucket count (hash x count / 2^64), so the count need not be a power of two.
 */
#ifndef RKV_HASH_H
#define RKV_HASH_H

#include <stddef.h>
#include <stdint.h>

struct rkv_key_hash {
    uint64_t bucket[2]; /* candidate bucket indexes, distinct when count > 1 */
    uint16_t fp;        /* slot fingerprint, never 0 */
    uint64_t h64;       /* full 64-bit hash, for sharding and caches */
};

void rkv_hash_key(const void *key, size_t key_len, uint64_t seed, uint64_t bucket_count,
                  struct rkv_key_hash *out);

#endif
