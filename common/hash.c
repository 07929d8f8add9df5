/* hash.c — key → (bucket pair, fingerprint), and the item checksum. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"
#include "layout.h"

void rkv_hash_key(const void *key, size_t key_len, uint64_t seed, uint64_t bucket_count,
                  struct rkv_key_hash *out)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(key, key_len, seed);
    uint64_t mask = bucket_count - 1;

    out->h64 = h.low64;
    out->bucket[0] = h.low64 & mask;
    out->bucket[1] = (h.high64 >> 16) & mask;
    if (out->bucket[1] == out->bucket[0] && bucket_count > 1)
        out->bucket[1] = out->bucket[0] ^ 1;
    out->fp = (uint16_t)(h.high64 & 0xffff);
    if (out->fp == 0)
        out->fp = 1;
}

uint64_t rkv_item_checksum(const struct rkv_item *it, uint64_t seed)
{
    const uint8_t *from = (const uint8_t *)it + 16;
    size_t len = RKV_ITEM_HEADER_SIZE - 16 + (size_t)it->key_len + it->value_len;
    return XXH3_64bits_withSeed(from, len, seed);
}
