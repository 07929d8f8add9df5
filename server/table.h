/* table.h — the server's hash table inside the shared region.
 *
 * The table lays out the region (common/layout.h), keeps the index (two
 * candidate buckets per key, cuckoo displacement), and owns the item heap
 * through the slab allocator (server/slab.h). It is the only code that
 * writes the region. Writes follow the out-of-place protocol that lets
 * clients read without locks:
 *
 *   1. allocate a new item, write header + key + value + checksum;
 *   2. publish its slot with one atomic 8-byte store (bucket version odd/even
 *      around the change);
 *   3. mark the old item RKV_ITEM_OBSOLETE;
 *   4. free the old item into the allocator's grace-period limbo;
 *   5. only then may the caller reply to the client.
 *
 * Concurrency: any number of threads may call the table. Building the new
 * item (allocation, copying the value, checksum) happens outside any index
 * lock; publishing, displacement and obsoleting hold only the locks of the
 * buckets they change (two per write, a few more along a displacement path),
 * so writes to different buckets run in parallel; evicting ahead holds each
 * victim's bucket lock, page moves the whole index (table.c's top comment
 * has the details).
 */
#ifndef RKV_TABLE_H
#define RKV_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "rkv.h"
#include "slab.h"

struct rkv_table;

enum rkv_evict_policy { RKV_EVICT_NONE, RKV_EVICT_LRU, RKV_EVICT_RANDOM, RKV_EVICT_S3FIFO };

/* Does the policy keep a per-item access word, fed by clients' access hints
 * and the door's reads (server/evict.c)? lru and s3fifo do. */
static inline bool rkv_evict_uses_access(enum rkv_evict_policy p)
{
    return p == RKV_EVICT_LRU || p == RKV_EVICT_S3FIFO;
}

/* Entries of s3fifo's ghost (server/evict_ghost.c: 2 bytes each, in server
 * memory) for a region of `size` bytes: one per RKV_GHOST_ITEM_BYTES, a
 * power of two, at least RKV_GHOST_MIN; none for the other policies. */
#define RKV_GHOST_ITEM_BYTES 256u
#define RKV_GHOST_MIN        1024u
static inline uint64_t rkv_evict_ghost_entries(enum rkv_evict_policy p, uint64_t size)
{
    uint64_t n = RKV_GHOST_MIN;
    if (p != RKV_EVICT_S3FIFO)
        return 0;
    while (n < size / RKV_GHOST_ITEM_BYTES)
        n *= 2;
    return n;
}

#define RKV_TABLE_GROWTH 1.25 /* size class growth factor unless configured */
#define RKV_TABLE_FINE_LIMIT \
    256u /* size classes step by 4 or 8 bytes below this (rkv_slab_classes) */

/* Bytes a slab page has beyond the configured slab_page_size (the largest
 * item): two item headers and two of the longest keys, so that a page holds
 * two items of half the configured page's value each (a 1 MiB page: two
 * 512 KiB values, memcached's largest chunk) instead of one; rounded up to
 * the 64 bytes a page is a multiple of (rkv_slab_classes). The page the
 * table's header publishes (slab_page_size) includes them; the largest item
 * does not grow. */
static inline uint32_t rkv_table_page_pair_room(uint32_t max_key_len)
{
    return (2 * (RKV_ITEM_HEADER_MAX + max_key_len) + RKV_SLAB_COARSE_STEP - 1) /
           RKV_SLAB_COARSE_STEP * RKV_SLAB_COARSE_STEP;
}

struct rkv_table_config {
    uint32_t slab_page_size; /* bytes per slab page = largest item (default 1 MiB) */
    uint32_t max_key_len;    /* <= RKV_MAX_KEY_LEN (default 250) */
    uint32_t max_value_len;  /* for the longest key (a shorter key leaves its room to the
                                * value); default: slab_page_size - header - max_key_len */
    /* fraction of the region for buckets, fixed: the index never grows into
     * the heap (0: it starts small and grows as items need buckets, up to a
     * quarter of the region; table.c plan_layout) */
    double index_share;
    /* without index_share: size the index at start to one slot per this
     * many heap bytes, the usual item size (header, key, value) expected;
     * it may grow from there (0: start small) */
    uint32_t item_size_hint;
    /* buckets the index starts with, at most what the layout leaves before
     * the heap (0: a 16th of that, or all of it with an item size hint or
     * an index share; table.c index_base_for): tests */
    uint64_t index_start;
    double growth_factor; /* size class growth (default RKV_TABLE_GROWTH, 1.25) */
    uint32_t grace_ms;    /* freed memory is reused only after this long (default 100) */
    uint32_t default_ttl; /* seconds applied when a PUT gives 0; 0 = never expire */
    enum rkv_evict_policy evict;
    uint64_t (*now_ns)(void); /* the time source of the clock and of the allocator's grace
                                 periods; NULL = rkv_now_ns (tests drive their own) */
    uint64_t rng_seed;        /* seeds eviction's random samples; 0 = from getrandom() (tests fix
                                 theirs, so that what is evicted is the same every run) */
    bool lock_timing;         /* time every lock hold and wait: a write's bucket locks, the whole
                                 * index, the allocator's locks (rkv_table_stats.lock_*); costs
                                 * clock reads per hold: perf/table-bench and tests only */
    /* The region's bytes from room_untaken to the heap were left untaken
     * (region.h guard->untaken; 0: none were): the index takes them with
     * take() before its buckets reach them, and stops growing there when
     * take() fails (an errno: no memory for them). */
    uint64_t room_untaken;
    int (*take)(void *ctx, uint64_t off, uint64_t len);
    void *take_ctx;
};

/* Where a value comes from: inline bytes, or a pull callback (rendezvous)
 * that writes exactly `len` bytes to dst. */
struct rkv_value_src {
    const void *data; /* or NULL with pull */
    rkv_status (*pull)(void *ctx, void *dst, uint32_t len);
    void *ctx;
    uint32_t len;
};

struct rkv_table_stats {
    uint64_t items, bytes_used, bytes_free, heap_bytes;
    uint64_t buckets, slots, evictions, expirations, displacements;
    uint64_t puts, deletes, incrs, insert_failures;
    /* Fragmentation and hints (see server/slab.c for what each kind means). */
    /* exact header+key+value bytes of live items; bytes_used - item_bytes is class rounding */
    uint64_t item_bytes;
    uint64_t limbo_bytes; /* freed items and moved slab pages, waiting out grace_ms before reuse */
    uint64_t tail_bytes;  /* page ends too short for another item of the page's class */
    uint64_t pages_unassigned;     /* slab pages no size class holds that one may take now */
    uint64_t hints, hints_ignored; /* client hints applied / rejected as invalid */
    uint64_t slab_reassigns; /* slab pages moved from one size class to another (eviction on) */
    uint64_t flushed;        /* items removed by flushes (rkv_table_flush) */
    /* PUTs on a full heap that slept for freed memory to pass its grace
     * period (each sleep counted; its worker served nothing meanwhile), and
     * the milliseconds they slept */
    uint64_t alloc_waits, alloc_wait_ms;
    /* Lock holds and waits, counted only with rkv_table_config.lock_timing. */
    struct rkv_lock_stats lock_stripes; /* a write's bucket stripes (two, or a displacement path's) */
    struct rkv_lock_stats lock_index;   /* the whole index, exclusive (eviction, page moves, ...) */
    struct rkv_lock_stats lock_slab;    /* the allocator's class and page locks */
};

/* Lay out a table in `base` (size bytes, zeroed or not) and initialise the
 * header with a random generation and hash seed. */
rkv_status rkv_table_create(void *base, size_t size, const struct rkv_table_config *cfg,
                            struct rkv_table **out, char *err, size_t err_len);
void rkv_table_destroy(struct rkv_table *t);

/* Split up to n more buckets of the index now (index_grow.c; it grows by
 * itself as keys come): how many it split, fewer at its capacity. Takes the
 * index exclusive: for tests and tools that need a given geometry. */
uint64_t rkv_table_grow_index(struct rkv_table *t, uint64_t n);

/* ---- a kept region (a restart that keeps the cache: server/state_file.h) */

/* The header rkv_table_create() would write for `size` bytes and cfg,
 * without magic, generation, hash seed or clock: what a kept region's
 * header must match. */
rkv_status rkv_table_plan(size_t size, const struct rkv_table_config *cfg,
                          struct rkv_region_header *geom, char *err, size_t err_len);

/* What a table that is about to be kept goes on from: its clock now and a
 * version at least that of every item it holds. Call with no write in
 * flight (the workers stopped). */
void rkv_table_stop_state(struct rkv_table *t, uint32_t *clock, uint64_t *max_version);

/* Where the table of a kept region goes on from. */
struct rkv_table_restore {
    uint32_t clock;       /* the server clock now: the clock at the stop plus the seconds
                             * the server was down, so TTLs count the downtime */
    uint64_t max_version; /* rkv_table_stop_state's: new versions (CAS tokens) go above */
};

/* Why rkv_table_attach dropped an item. */
enum rkv_table_drop {
    RKV_DROP_SLOT,     /* the slot word names no item of its class in the heap */
    RKV_DROP_LENGTHS,  /* key or value length out of range, or not the item's size class */
    RKV_DROP_STATE,    /* the item is not live (obsolete, or was being built) */
    RKV_DROP_CHECKSUM, /* the checksum does not match */
    RKV_DROP_KEY,      /* the key does not hash to this bucket and fingerprint */
    RKV_DROP_VERSION,  /* version 0 or above the largest the stopped server handed out */
    RKV_DROP_OVERLAP,  /* another kept item holds its memory, or its page holds another class */
    RKV_DROP_EXPIRED,  /* expired at the restored clock */
    RKV_DROP_COUNT
};
const char *rkv_table_drop_name(enum rkv_table_drop why);

struct rkv_table_attach_report {
    uint64_t kept, kept_bytes;        /* items kept, their header+key+value bytes */
    uint64_t pages;                   /* slab pages that hold them */
    uint64_t dropped[RKV_DROP_COUNT]; /* slots cleared, by reason */
};

/* Take over a region laid out by rkv_table_create() of the same size and
 * configuration (a server's, read back from its state file) instead of
 * laying one out. The header must be what rkv_table_plan() gives (else
 * RKV_INVALID). Every item the index reaches is verified — its slot word in
 * range and aligned to its class in a page of that class, its lengths and
 * class, live state, checksum, key hashing to the bucket and fingerprint it
 * sits in, version, expiry at r->clock, no second slot or class on its
 * memory — and a slot whose item fails is cleared (counted by reason in
 * rep). The allocator is rebuilt from what is kept: those pages to their
 * classes, their other items free; the rest of the heap unassigned. The
 * header gets a new random generation (clients drop every cached location)
 * and the clock r->clock; versions continue above r->max_version. Call
 * before anything serves the region. */
rkv_status rkv_table_attach(void *base, size_t size, const struct rkv_table_config *cfg,
                            const struct rkv_table_restore *r, struct rkv_table **out,
                            struct rkv_table_attach_report *rep, char *err, size_t err_len);

const struct rkv_region_header *rkv_table_header(const struct rkv_table *t);

/* Store key → value. mode/cas as in rkv_put_mode; ttl 0 = default, RKV_TTL_NEVER = never.
 * *version receives the new item's version. */
rkv_status rkv_table_put(struct rkv_table *t, const void *key, uint32_t key_len,
                         const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                         uint32_t ttl, uint32_t user_flags, uint64_t *version);
/* rkv_table_put with the new item's live state word (layout.h: the meta
 * flags and last access the memcached door keeps; rkv_table_put gives none
 * and the access time now). Bits other than those are ignored. */
rkv_status rkv_table_put_state(struct rkv_table *t, const void *key, uint32_t key_len,
                               const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                               uint32_t ttl, uint32_t user_flags, uint64_t state, uint64_t *version);
/* rkv_table_put_state for a rewrite that carries the item's meta state
 * over (a touch, an in-place incr, md I, ms I's stale store): the bits of
 * `keep` come from the live item the write replaces, read as it is
 * replaced, under the stripes every change of them holds (so a win token
 * that rkv_table_set_state or rkv_table_claim handed out meanwhile is never
 * lost: the build, and an allocation waiting for a page move, happen
 * before); `state` gives the rest (its bits under keep count only when
 * no live item is replaced). */
rkv_status rkv_table_put_keep(struct rkv_table *t, const void *key, uint32_t key_len,
                              const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                              uint32_t ttl, uint32_t user_flags, uint64_t keep, uint64_t state,
                              uint64_t *version);
rkv_status rkv_table_delete(struct rkv_table *t, const void *key, uint32_t key_len);
/* Delete only while the live item is the one of `version` (a CAS on the
 * version, as RKV_CAS is for a put): RKV_CAS_MISMATCH when another write
 * replaced it (nothing changes), RKV_NOT_FOUND when no live item is there. */
rkv_status rkv_table_delete_version(struct rkv_table *t, const void *key, uint32_t key_len,
                                    uint64_t version);
/* Change the meta state (layout.h) of key's live item of `version` in
 * place, under its stripes: the bits of `clear` cleared, then those of
 * `set` set (meta flags and access time only); *before (when not NULL)
 * gets the state word as it was, so a flag set is a test-and-set (the mg
 * win token goes to one client). Not a new version: the CAS stays, as in
 * memcached. RKV_NOT_FOUND without a live item, RKV_CAS_MISMATCH when the
 * live item is another version. */
rkv_status rkv_table_set_state(struct rkv_table *t, const void *key, uint32_t key_len,
                               uint64_t version, uint64_t clear, uint64_t set, uint64_t *before);
/* librkv's stale-while-revalidate (rkv_get_recache): win the recache of
 * key's live item of `version` when it is stale or expires less than
 * recache_ttl seconds from now (0: stale only) and no client holds the win
 * token yet. The token is the door's (WON, set by mg's W), taken by one
 * test-and-set under the item's stripes, so one client of either door
 * wins. *marks gets RKV_MARK_STALE, and RKV_MARK_WON (this call took it)
 * or RKV_MARK_TAKEN (another client holds it). RKV_NOT_FOUND without a
 * live item, RKV_CAS_MISMATCH when the live item is another version. */
rkv_status rkv_table_claim(struct rkv_table *t, const void *key, uint32_t key_len, uint64_t version,
                           uint32_t recache_ttl, uint32_t *marks);
rkv_status rkv_table_incr(struct rkv_table *t, const void *key, uint32_t key_len, int64_t delta,
                          uint64_t *result);

/* memcached's flush_all. delay_s 0: remove every item stored so far, now,
 * and return how many went; an item a concurrent write publishes meanwhile
 * may stay (it was stored after the flush began). delay_s > 0: schedule
 * that for delay_s seconds from now (the time source's), replacing a flush
 * already scheduled, and return 0; the first tick at or after that time
 * removes every item stored before it. A flush now cancels a scheduled one.
 * The removal is a delete's: one-sided readers holding an item's location
 * see it OBSOLETE and miss. */
uint64_t rkv_table_flush(struct rkv_table *t, uint32_t delay_s);

/* Server-side lookup for tests and tools (incr has its own, under the
 * lock): copies nothing, returns the live item or NULL. */
const struct rkv_item *rkv_table_find(struct rkv_table *t, const void *key, uint32_t key_len);
/* The same; *expired (when not NULL) says whether a NULL answer found the
 * key's item expired, not yet reclaimed (the door's get_expired). */
const struct rkv_item *rkv_table_find_live(struct rkv_table *t, const void *key, uint32_t key_len,
                                           bool *expired);

/* A read the server serves itself (the memcached door): rkv_table_find_live,
 * and the item found counts as just used, as a client's access hint makes
 * it (rkv_table_hints), so reads through either door feed one eviction
 * policy. */
const struct rkv_item *rkv_table_read(struct rkv_table *t, const void *key, uint32_t key_len,
                                      bool *expired);

/* Recency hints from a client: n slot words (8 bytes each, any alignment)
 * it found items through. Each is validated; a valid one stamps its item
 * as just used, an invalid one is only counted (hints_ignored). */
void rkv_table_hints(struct rkv_table *t, const void *hints, size_t n);

/* LRU: the access clock's advance (in stores) since the item a slot word
 * names was last stamped; 0 for a word naming no item, or without LRU.
 * For tests and tools. */
uint32_t rkv_table_access_age(struct rkv_table *t, uint64_t slot);

/* Once a second: publishes the clock in the region header (for shm
 * readers), reclaims expired items, releases grace-period memory and (LRU)
 * moves at most one slab page toward the class that needs it most. */
void rkv_table_tick(struct rkv_table *t);
/* The server clock now, computed from the time (common/clock.h); every
 * expiry decision the server makes uses it. */
uint32_t rkv_table_clock(const struct rkv_table *t);

void rkv_table_get_stats(struct rkv_table *t, struct rkv_table_stats *out);

/* One size class (0-based) as memcached's `stats slabs` and `stats items`
 * show it: where its memory is, and the items evicted from it (to make
 * room, or with a page moved to another class). Zeros past the last class. */
struct rkv_table_class_stats {
    struct rkv_slab_class_stats slab;
    uint64_t evicted;     /* items of this class evicted */
    uint64_t evicted_ttl; /* ... of them, items that had an expiry time */
};
void rkv_table_class_stats(struct rkv_table *t, unsigned cls, struct rkv_table_class_stats *out);

/* Debugging and tests: fn is called after every slot store, under that
 * bucket's lock, while its version is still odd — so a trace shows the
 * order in which readers can see slot changes. Writers to other buckets may
 * call it at the same time. fn must not call the table. NULL removes it.
 * Set it while no other thread uses the table. */
typedef void (*rkv_table_store_fn)(void *ctx, uint64_t bucket, unsigned slot, uint64_t word);
void rkv_table_set_store_observer(struct rkv_table *t, rkv_table_store_fn fn, void *ctx);

#endif
