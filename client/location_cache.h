/* location_cache.h — the process's key → item location cache.
 *
 * A GET that knows where its item is reads it with one READ instead of
 * reading the buckets first. This cache remembers, per (region, key), the
 * slot word the key was last found through. It is shared by every handle of
 * the process that asks for the same budget, so threads warm each other, and
 * it is lock-free: a GET's find reads one cache line.
 *
 * Layout: a table of a power of two of 8-way sets, one 64-byte cache line
 * each. An entry is one 8-byte word: the slot word's size class and offset
 * (bits 16-63) with a 16-bit tag in place of the fingerprint (bits 0-15),
 * never 0 when used; 0 is empty. Set index and tag come from one 64-bit hash
 * of the key hash and the region's identity (its generation, random per
 * server start), so entries of two servers, or of a server and its
 * restarted successor, do not answer for each other (but for a 2^-16 tag
 * collision, which costs one READ) and no clearing is needed when a server
 * restarts: its old entries stop matching and age out.
 *
 * Size: the table grows with the working set, not with the budget. It starts
 * at 1/64 of the budget (at least one set, at most RKV_LOC_CACHE_START
 * entries = 512 KiB, which the default budget gives) and doubles, up to the
 * budget, when live entries are being evicted: each caller keeps a meter
 * (its finds, and the live entries its stores replaced); a caller whose
 * stores evicted at least 1 in RKV_LOC_CACHE_GROW_RATE of its finds, over
 * RKV_LOC_CACHE_GROW_SAMPLE evictions, grows the table. A table that fits
 * the working set stays in the CPU's caches: a 100k-key working set settles
 * at 256 Ki entries (2 MiB, ~0.2% of GETs evicting), 1M keys at 2 Mi
 * entries (16 MiB, ~0.7%); the default budget (RKV_DEFAULT_LOCATION_CACHE,
 * rkv.h) is then only a ceiling.
 * The growth is one mmap by the caller that decided it, under the cache's
 * own mutex (a trylock: a concurrent grower just skips), then one atomic
 * pointer store; readers load that pointer once per find.
 *
 * An entry does not hold the hash bits a bigger table would index it by, so
 * entries are not moved at growth. The new table keeps a pointer to the one
 * it replaced; a find that misses in the new table looks there too, and a
 * hit is promoted (stored) into the new table. At the next growth the table
 * two steps back is emptied (madvise MADV_DONTNEED: its memory goes back,
 * a reader still holding it reads zeros, i.e. empty ways) and unmapped only
 * when the cache is destroyed. Overhead: the current table plus the
 * previous (half its size) in memory, and at most twice the final table's
 * size in address space.
 *
 * Nothing found here is trusted: an entry is one atomic word, so it is never
 * torn, and what a tag collision or a stale entry gives is a slot word that
 * the lookup range-checks and whose item it verifies against the key. A
 * wrong, lost or resurrected entry (a store racing a growth lands in the old
 * table; a promotion may copy an entry forgotten a moment before) costs one
 * READ, never a wrong value. A find is one cache line of relaxed loads; a
 * store (only when a location changed) is one CAS, so concurrent writers
 * never lose an entry they did not choose to replace.
 *
 * Replacement: the key's own entry, else an empty way, else a pseudo-random
 * one of the 8. The mapping asks for transparent huge pages (fewer TLB misses
 * once the table is larger than the TLB reaches).
 */
#ifndef RKV_LOCATION_CACHE_H
#define RKV_LOCATION_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#define RKV_LOC_CACHE_WAYS        8u
#define RKV_LOC_CACHE_START       (1u << 16) /* most entries a table starts with: 512 KiB */
#define RKV_LOC_CACHE_MAX         (1u << 25) /* entries: 256 MiB */
#define RKV_LOC_CACHE_GROW_RATE   64u        /* grow at >= 1 eviction per 64 finds */
#define RKV_LOC_CACHE_GROW_SAMPLE 64u        /* judged over this many evictions */

struct rkv_loc_cache;

/* One caller's view of how well the cache holds its working set. Owned by
 * the caller (a handle: one thread at a time), zero-initialised; finds and
 * stores update it and decide growth from it. */
struct rkv_loc_cache_meter {
    uint64_t finds;     /* finds since the meter last judged */
    uint64_t evictions; /* live entries this caller's stores replaced since then */
    const void *table;  /* the table those counts are about */
};

/* The process's cache with a budget of at least `entries` entries (rounded
 * up to a power of two, at least one set, at most RKV_LOC_CACHE_MAX),
 * created on first use and shared by every caller asking for the same
 * rounded budget; NULL when out of memory. Each acquire needs one release.
 * Thread-safe. */
struct rkv_loc_cache *rkv_loc_cache_acquire(unsigned entries);
void rkv_loc_cache_release(struct rkv_loc_cache *lc);

/* Entries of the current table (it grows up to the budget), and the budget. */
unsigned rkv_loc_cache_entries(const struct rkv_loc_cache *lc);
unsigned rkv_loc_cache_budget(const struct rkv_loc_cache *lc);

/* Start loading key_hash's set into the CPU cache (a GET's submit, before
 * the pass that finds it). */
void rkv_loc_cache_prefetch(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash);

/* The slot word remembered for key_hash in region `region`, or 0. Its
 * fingerprint bits are the cache's tag, not the key's fingerprint: the
 * lookup puts the key's own in (rkv_lookup.cached_slot). `m` (may be NULL:
 * no growth from this caller) counts the find. */
uint64_t rkv_loc_cache_find(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m,
                            uint64_t region, uint64_t key_hash);

/* Whether `slot`, the slot word a lookup used or found, differs from the
 * entry `found` returned for the same key (fingerprint bits aside): only
 * then is a store needed, so a hit leaves the shared cache line clean. */
static inline bool rkv_loc_cache_changed(uint64_t found, uint64_t slot)
{
    return ((found ^ slot) & ~(uint64_t)0xffff) != 0 || (found == 0) != (slot == 0);
}

/* Remember `slot` for key_hash in region; slot 0 forgets it. A store that
 * replaces another key's live entry counts in `m` (may be NULL), and may
 * grow the table. */
void rkv_loc_cache_store(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m, uint64_t region,
                         uint64_t key_hash, uint64_t slot);

#endif
