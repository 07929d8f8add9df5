/* hash.c — key → (bucket pair, fingerprint), and the item checksum. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"
#include "layout.h"

/* A 64-bit hash onto [0, bucket_count): the high bits of hash x count, so
 * any count works, not only powers of two (a multiply, no division). */
static uint64_t bucket_of(uint64_t x, uint64_t bucket_count)
{
    return (uint64_t)(((unsigned __int128)x * bucket_count) >> 64);
}

void rkv_hash_key(const void *key, size_t key_len, uint64_t seed, uint64_t bucket_count,
                  struct rkv_key_hash *out)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(key, key_len, seed);

    out->h64 = h.low64;
    out->bucket[0] = bucket_of(h.low64, bucket_count);
    out->bucket[1] = bucket_of(h.high64, bucket_count); /* its top bits; fp the low */
    if (out->bucket[1] == out->bucket[0] && bucket_count > 1)
        out->bucket[1] = (out->bucket[0] + 1) % bucket_count;
    out->fp = (uint16_t)(h.high64 & 0xffff);
    if (out->fp == 0)
        out->fp = 1;
}

uint64_t rkv_item_checksum_of(const struct rkv_item *it, size_t bytes, uint64_t seed)
{
    return XXH3_64bits_withSeed((const uint8_t *)it + 16, bytes - 16, seed);
}

uint64_t rkv_item_checksum(const struct rkv_item *it, uint64_t seed)
{
    return rkv_item_checksum_of(it, rkv_item_bytes(it), seed);
}
