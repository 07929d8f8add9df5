/* hash.c — key → (bucket pair, fingerprint), and the item checksum. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"
#include "layout.h"

void rkv_hash_key(const void *key, size_t key_len, uint64_t seed, const struct rkv_index_geom *g,
                  struct rkv_key_hash *out)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(key, key_len, seed);

    out->h64 = h.low64;
    out->bucket[0] = rkv_index_bucket(g, h.low64, h.high64 >> 16);
    out->bucket[1] = rkv_index_bucket(g, h.high64, h.low64); /* top bits; fp the low */
    out->geom = rkv_index_geom_word(g);
    out->fp = (uint16_t)(h.high64 & 0xffff);
    if (out->fp == 0)
        out->fp = 1;
}

uint64_t rkv_item_checksum_of(const struct rkv_item *it, size_t bytes, uint64_t seed)
{
    return XXH3_64bits_withSeed((const uint8_t *)it + RKV_ITEM_SUMMED_FROM,
                                bytes - RKV_ITEM_SUMMED_FROM, seed);
}

uint64_t rkv_item_checksum(const struct rkv_item *it, uint64_t seed)
{
    return rkv_item_checksum_of(it, rkv_item_bytes(it), seed);
}
