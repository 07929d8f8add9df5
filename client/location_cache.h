/* location_cache.h — the process's key → item location cache.
 *
 * A GET that knows where its item is reads it with one READ instead of
 * reading the buckets first. This cache remembers, per (region, key), the
 * slot word the key was last found through. It is shared by every handle of
 * the process that asks for the same size, so threads warm each other, and
 * it is lock-free: a GET does two or three atomic loads of one cache line.
 *
 * Layout: a power of two of 4-way sets, one 64-byte cache line each; an
 * entry is a tag word and a slot word (16 bytes). The tag is a 64-bit hash
 * of the key hash and the region's identity (its generation, random per
 * server start), so entries of two servers, or of a server and its restarted
 * successor, never answer for each other; no clearing is needed when a
 * server restarts, its old entries just stop matching and age out.
 *
 * Nothing found here is trusted. A writer claims an entry by a CAS on its
 * tag, then writes the slot, then the tag, and a reader accepts a slot only
 * when the tag it read before and after the slot is its own; the remaining
 * races (or a 64-bit tag collision) can at worst give a wrong slot word,
 * which the lookup range-checks and whose item it verifies against the key:
 * a wrong entry costs one READ, never a wrong value.
 *
 * Replacement: an empty way, else a pseudo-random one of the set. With the
 * default size (RKV_LOC_CACHE_DEFAULT entries = 64 MiB of address space,
 * touched only as entries are used), a client that reads a few million
 * distinct keys keeps nearly all of them.
 */
#ifndef RKV_LOCATION_CACHE_H
#define RKV_LOCATION_CACHE_H

#include <stdint.h>

#define RKV_LOC_CACHE_WAYS    4u
#define RKV_LOC_CACHE_DEFAULT (1u << 22)  /* entries: 64 MiB */
#define RKV_LOC_CACHE_MAX     (1u << 24)  /* entries: 256 MiB */

struct rkv_loc_cache;

/* The process's cache of at least `entries` entries (rounded up to a power
 * of two, at least one set, at most RKV_LOC_CACHE_MAX), created on first use
 * and shared by every caller asking for the same rounded size; NULL when out
 * of memory. Each acquire needs one release. Thread-safe. */
struct rkv_loc_cache *rkv_loc_cache_acquire(unsigned entries);
void rkv_loc_cache_release(struct rkv_loc_cache *lc);

/* Entries in the cache (after rounding). */
unsigned rkv_loc_cache_entries(const struct rkv_loc_cache *lc);

/* The slot word remembered for key_hash in region `region`, or 0. */
uint64_t rkv_loc_cache_find(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash);

/* Remember `slot` for key_hash in region; slot 0 forgets it. */
void rkv_loc_cache_store(struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash,
                         uint64_t slot);

#endif
