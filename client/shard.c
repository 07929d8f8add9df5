/* shard.c — jump consistent hashing (Lamping & Veach, 2014); see shard.h. */
#include <xxhash.h>

#include "shard.h"

uint64_t rkv_shard_hash(const void *key, size_t key_len)
{
    return XXH3_64bits(key, key_len);
}

unsigned rkv_jump_hash(uint64_t key_hash, unsigned n)
{
    int64_t b = -1, j = 0;
    while (j < (int64_t)n) {
        b = j;
        key_hash = key_hash * 2862933555777941757ull + 1;
        j = (int64_t)((double)(b + 1) * ((double)(1ll << 31) / (double)((key_hash >> 33) + 1)));
    }
    return (unsigned)b;
}
