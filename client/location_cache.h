/* location_cache.h — the process's key → item location cache.
 *
 * A GET that knows where its item is reads it with one READ instead of
 * reading the buckets first. This cache remembers, per (region, key), the
 * slot word the key was last found through. It is shared by every handle of
 * the process that asks for the same size, so threads warm each other, and
 * it is lock-free: a GET reads one cache line.
 *
 * Layout: a power of two of 8-way sets, one 64-byte cache line each. An
 * entry is one 8-byte word: the slot word's size class and offset (bits
 * 16-63) with a 16-bit tag in place of the fingerprint (bits 0-15); 0 is
 * empty. Set index and tag come from one 64-bit hash of the key hash and the
 * region's identity (its generation, random per server start), so entries of
 * two servers, or of a server and its restarted successor, do not answer for
 * each other (but for a 2^-16 tag collision, which costs one READ) and no
 * clearing is needed when a server restarts: its old entries stop matching
 * and age out.
 *
 * Nothing found here is trusted: an entry is one atomic word, so it is never
 * torn, and what a tag collision or a stale entry gives is a slot word that
 * the lookup range-checks and whose item it verifies against the key. A
 * wrong entry costs one READ, never a wrong value. A GET's find is one
 * cache line of relaxed loads; a store (only when a location changed) is one
 * CAS, so concurrent writers never lose an entry they did not choose to
 * replace.
 *
 * Replacement: the key's own entry, else an empty way, else a pseudo-random
 * one of the 8. The mapping asks for transparent huge pages (fewer TLB misses
 * on a cache larger than the TLB reaches). With the default size
 * (RKV_LOC_CACHE_DEFAULT entries = 32 MiB of address space, touched as
 * entries are used) a client reading a few million distinct keys keeps
 * nearly all of them.
 */
#ifndef RKV_LOCATION_CACHE_H
#define RKV_LOCATION_CACHE_H

#include <stdint.h>

#define RKV_LOC_CACHE_WAYS    8u
#define RKV_LOC_CACHE_DEFAULT (1u << 22)  /* entries: 32 MiB */
#define RKV_LOC_CACHE_MAX     (1u << 25)  /* entries: 256 MiB */

struct rkv_loc_cache;

/* The process's cache of at least `entries` entries (rounded up to a power
 * of two, at least one set, at most RKV_LOC_CACHE_MAX), created on first use
 * and shared by every caller asking for the same rounded size; NULL when out
 * of memory. Each acquire needs one release. Thread-safe. */
struct rkv_loc_cache *rkv_loc_cache_acquire(unsigned entries);
void rkv_loc_cache_release(struct rkv_loc_cache *lc);

/* Entries in the cache (after rounding). */
unsigned rkv_loc_cache_entries(const struct rkv_loc_cache *lc);

/* The slot word remembered for key_hash in region `region`, or 0. Its
 * fingerprint bits are the cache's tag, not the key's fingerprint: the
 * lookup puts the key's own in (rkv_lookup.cached_slot). */
uint64_t rkv_loc_cache_find(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash);

/* Remember `slot` for key_hash in region; slot 0 forgets it. */
void rkv_loc_cache_store(struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash,
                         uint64_t slot);

#endif
