/* shard.h — which server owns a key: jump consistent hashing.
 *
 * Lamping & Veach's jump hash maps a 64-bit key hash to one of n buckets so
 * that growing n to n+1 moves only ~1/(n+1) of the keys, with no ring or
 * table to keep. The key hash is XXH3-64 with seed 0, independent of any
 * server's per-region seed, so every client agrees on the owner.
 */
#ifndef RKV_SHARD_H
#define RKV_SHARD_H

#include <stddef.h>
#include <stdint.h>

uint64_t rkv_shard_hash(const void *key, size_t key_len);
unsigned rkv_jump_hash(uint64_t key_hash, unsigned n);

#endif
