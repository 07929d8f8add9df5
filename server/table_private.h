/* table_private.h — the table's insides, shared by the files that make it up.
 *
 * Not installed, and included only by server/table.c (the index and the
 * write protocol, with the locking) and the policy that decides what goes
 * when the heap is full (server/evict.c: which items; server/page_move.c:
 * which slab pages move to another size class). Here are the table's
 * bookkeeping, the small structs and static inline helpers those files
 * share, and the few functions that cross between them, each with the locks
 * its caller must hold. Everything else stays static in its file.
 */
#ifndef RKV_TABLE_PRIVATE_H
#define RKV_TABLE_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hash.h"
#include "layout.h"
#include "slab.h"
#include "table.h"
#include "util.h"

struct stripe;          /* a bucket lock with its counters (table.c) */
struct slot_lock_stats; /* a thread slot's lock timing (table.c) */

/* Counters of events no stripe counts, kept per writer slot (relaxed atomic
 * adds: slots may be shared) and summed by stats (counters_sum). */
struct table_counters {
    uint64_t evictions, expirations, insert_failures, hints, hints_ignored, flushed;
    uint64_t alloc_waits, alloc_wait_ms; /* PUTs that slept for the limbo or a page; ms slept */
};

/* What a writer thread keeps per table, in its thread slot (rkv_thread_slot),
 * on lines of its own: taking the index shared, a new version, a store's
 * LRU tick and counting an eviction, expiry, failure or hint write no line
 * another thread uses (threads past RKV_THREAD_SLOTS share slots: all of it
 * stays correct, only slower). */
struct writer_slot {
    uint64_t holders;        /* shared holds of the index (atomic) */
    uint64_t last_version;   /* the last item version handed out (atomic) */
    uint32_t stores;         /* LRU: stores since the slot last advanced the access clock */
    uint32_t inserts;        /* new keys stored (table.c grow_check) */
    uint64_t rng;            /* xorshift state for eviction sampling; 0 until first used */
    struct table_counters n; /* this slot's share of the table's counters */
    uint64_t class_evicted[RKV_MAX_CLASSES];     /* evictions by the victim's class (atomic adds) */
    uint64_t class_evicted_ttl[RKV_MAX_CLASSES]; /* ... of victims that had an expiry time */
} __attribute__((aligned(RKV_CACHELINE)));

struct rkv_table {
    uint8_t *base;                 /* region start */
    size_t size;                   /* region bytes */
    struct rkv_region_header *hdr; /* at base */
    struct rkv_bucket *buckets;    /* the index */
    uint64_t index_base;           /* buckets before any split (hdr->index_base) */
    uint64_t index_capacity;       /* buckets the index may grow to (hdr->index_capacity) */
    uint64_t room_taken;           /* the index's room is taken below this offset (cfg.take;
                                      * index_grow.c room_for): UINT64_MAX when all of it is */
    bool room_refused;             /* take() failed: the index grows no further */
    uint64_t index_word;           /* the geometry (index_geom.h) as hdr->index_geometry has it:
                                      * changed only with the index exclusive (atomic) */
    uint64_t seed;                 /* hdr->hash_seed */
    struct rkv_slab *slab;         /* the heap */
    struct rkv_table_config cfg;   /* with defaults filled in */
    uint64_t start_ns;             /* creation time, for the clock (common/clock.h) */
    uint64_t (*now_ns)(void);      /* the time source: rkv_now_ns, or a test's */
    uint64_t version_base;         /* rkv_now_ns() at creation, less one: versions count from it */
    uint64_t version_floor;        /* added to every version: above the largest a kept region
                                      * holds (rkv_table_attach), a multiple of RKV_THREAD_SLOTS;
                                      * 0 for a new table */
    uint32_t clock_base;           /* added to the clock: a kept region's clock goes on from
                                      * where it stopped (rkv_table_attach); 0 for a new table */
    rkv_table_store_fn observer;   /* see rkv_table_set_store_observer(); NULL */
    void *observer_ctx;

    /* Locking (see table.c's top comment): a change to bucket b holds stripe
     * b & stripe_mask, and the index shared (counted in a mode slot);
     * whatever may touch any bucket (eviction, page moves, displacement that
     * found no path otherwise) holds the index exclusive instead, which
     * excludes every stripe holder. */
    struct writer_slot *writer_slots;   /* RKV_THREAD_SLOTS of them */
    struct slot_lock_stats *lock_stats; /* RKV_THREAD_SLOTS of them, with cfg.lock_timing */
    int exclusive; /* 1 while an exclusive holder wants or has the index (atomic) */
    pthread_mutex_t exclusive_lock; /* held by the exclusive holder; shared takers that meet
                                       * `exclusive` wait on it */
    struct stripe *stripes;         /* stripe_mask + 1 of them */
    uint64_t stripe_mask;
    uint64_t expire_cursor;                    /* next bucket the expiry scan claims (atomic) */
    uint64_t reserve[RKV_MAX_CLASSES];         /* evict-ahead target per class, in items (written
                                                  * exclusive, read with relaxed loads) */
    uint64_t rng_seed;                         /* seeds each writer slot's sampling rng */
    uint64_t class_evictions[RKV_MAX_CLASSES]; /* evictions for the class's own PUTs (evict_class;
                                                  * atomic) */
    uint64_t automove_seen[RKV_MAX_CLASSES];   /* class_evictions at the last automove look
                                                  * (the index held exclusive) */
    int evicting[RKV_MAX_CLASSES];      /* 1 while a writer evicts ahead for the class (atomic) */
    uint64_t dry_runs[RKV_MAX_CLASSES]; /* PUTs that found their class dry (rkv_evict_alloc;
                                           * atomic) */
    uint64_t reserve_seen[RKV_MAX_CLASSES][2]; /* dry_runs and class_evictions at the last tick
                                                  * (rkv_evict_tick: the tick's thread only) */
    uint64_t reserve_tick_ns;                  /* now_ns at the last tick (rkv_evict_tick) */
    uint64_t flush_at_ns; /* a scheduled flush's time (now_ns's); 0 = none (atomic) */
    uint32_t path_skip;   /* displacement searches new keys skip, evicting a neighbour at
                             * once: set when one under the whole index found no path (a full
                             * index; table.c index_make_room; atomic) */

    /* Written by writers outside any lock: on a line of its own, so that
     * no write invalidates the read-mostly fields above for the others. */
    uint32_t access_clock __attribute__((aligned(RKV_CACHELINE)));
    /* access time: +RKV_ACCESS_STEP per RKV_ACCESS_STEP stored
                                      * items of a thread slot, with lru and s3fifo only (atomic) */
    uint32_t use_decay;  /* s3fifo: stores per use an idle item's count loses (a few
                            * turnovers of the items the table holds: rkv_evict_tick; relaxed) */
    uint16_t *ghost;     /* s3fifo: tags of keys evicted unread (evict_ghost.c); else NULL */
    uint64_t ghost_mask; /* its entries less one */
};

/* ---- The access word (rkv_slab_meta: one private uint32 per item, with
 * lru and s3fifo; evict.c's top comment has why).
 *   lru:    the access clock when the item was stored or last read.
 *   s3fifo: bits 31..30 the item's use count, 0..S3_USES_MAX: reads in
 *           distinct clock steps since it was stored, less one per
 *           use_decay stores it sat unread; bits 29..0 the access clock /
 *           RKV_ACCESS_STEP when it was stored or last read. */
#define RKV_ACCESS_STEP 16u /* a thread slot advances the access clock once per this many stores */
#define S3_USES_SHIFT   30
#define S3_USES_MAX     3u
#define S3_TIME_MASK    ((1u << S3_USES_SHIFT) - 1)

/* s3fifo: the time field of clock value `clock`. */
static inline uint32_t s3_time(uint32_t clock)
{
    return (clock / RKV_ACCESS_STEP) & S3_TIME_MASK;
}

/* s3fifo: stores since access word w was stamped, at clock `clock` (modulo
 * 2^32 stores, as lru's ages). */
static inline uint32_t s3_age(uint32_t w, uint32_t clock)
{
    return ((s3_time(clock) - (w & S3_TIME_MASK)) & S3_TIME_MASK) * RKV_ACCESS_STEP;
}

/* s3fifo: access word w's use count at clock `clock`, decayed by one per
 * use_decay stores since it was stamped. */
static inline unsigned s3_uses(const struct rkv_table *t, uint32_t w, uint32_t clock)
{
    unsigned uses = w >> S3_USES_SHIFT;
    uint32_t decay = __atomic_load_n(&t->use_decay, __ATOMIC_RELAXED);
    uint32_t lost = s3_age(w, clock) / (decay ? decay : 1);
    return lost >= uses ? 0 : uses - (unsigned)lost;
}

/* The access word of an item stored at clock `clock` with `uses` uses
 * (s3fifo: 0 on probation, evict.c; the replaced item's, for a new value
 * of a live key; 1 for a key the ghost remembers, evict_ghost.c): lru, the
 * clock; s3fifo, the uses and the time. */
static inline uint32_t rkv_access_stored(const struct rkv_table *t, uint32_t clock, unsigned uses)
{
    if (t->cfg.evict != RKV_EVICT_S3FIFO)
        return clock;
    return (RKV_MIN(uses, S3_USES_MAX) << S3_USES_SHIFT) | s3_time(clock);
}

/* Access word w of an item read (a hint, a door read) at clock `clock`:
 * lru, the clock; s3fifo, its decayed use count plus one (at most once per
 * clock step, saturating) and the time. The caller writes it only when it
 * differs from w, so an item read again within a step stays a clean line. */
static inline uint32_t rkv_access_read(const struct rkv_table *t, uint32_t w, uint32_t clock)
{
    if (t->cfg.evict != RKV_EVICT_S3FIFO)
        return clock;
    uint32_t now = s3_time(clock);
    unsigned uses = s3_uses(t, w, clock);
    if ((w & S3_TIME_MASK) == now && uses > 0)
        return w;
    return (RKV_MIN(uses + 1, S3_USES_MAX) << S3_USES_SHIFT) | now;
}

/* The index geometry now: exact under a stripe or the index exclusive
 * (splits hold it exclusive), a guess without. */
static inline struct rkv_index_geom table_geom(const struct rkv_table *t)
{
    return rkv_index_geom_from(t->index_base, __atomic_load_n(&t->index_word, __ATOMIC_ACQUIRE));
}

/* A key's buckets at the geometry now (see table_geom). */
static inline void table_hash(const struct rkv_table *t, const void *key, uint32_t key_len,
                              struct rkv_key_hash *h)
{
    struct rkv_index_geom g = table_geom(t);
    rkv_hash_key(key, key_len, t->seed, &g, h);
}

/* Whether h's buckets are still the key's (a split since may have moved
 * them): exact under the key's stripes or the index exclusive. */
static inline bool table_hash_current(const struct rkv_table *t, const struct rkv_key_hash *h)
{
    return h->geom == __atomic_load_n(&t->index_word, __ATOMIC_RELAXED);
}

/* Where a slot is, and what it holds. */
struct place {
    struct rkv_bucket *bucket;
    unsigned slot;
    uint64_t word;
    struct rkv_item *it;
};

/* Add to a counter of a writer slot (relaxed: slots may be shared). */
static inline void count(uint64_t *counter, int64_t delta)
{
    __atomic_fetch_add(counter, (uint64_t)delta, __ATOMIC_RELAXED);
}

/* This thread's writer slot. */
static inline struct writer_slot *writer_slot(struct rkv_table *t)
{
    return &t->writer_slots[rkv_thread_slot()];
}

/* The item a slot word points at. */
static inline struct rkv_item *item_at(const struct rkv_table *t, uint64_t word)
{
    return (struct rkv_item *)(void *)(t->base + rkv_slot_offset(word));
}

/* An eviction of the item of slot word `word`: the table's count, and its
 * class's (the door's stats items). */
static inline void count_eviction(struct rkv_table *t, uint64_t word)
{
    struct writer_slot *w = writer_slot(t);
    unsigned cls = rkv_slot_class(word);
    count(&w->n.evictions, 1);
    if (cls < RKV_MAX_CLASSES) {
        count(&w->class_evicted[cls], 1);
        if (item_at(t, word)->shape & RKV_SHAPE_EXPIRE)
            count(&w->class_evicted_ttl[cls], 1);
    }
}

/* Slot s of bucket b: exact under its stripe (or the index exclusive), a
 * guess without. */
static inline uint64_t slot_load(const struct rkv_bucket *b, unsigned s)
{
    return __atomic_load_n(&b->slot[s], __ATOMIC_RELAXED);
}

/* ---- table.c: the index, for the policy. What each lock guards is in
 * table.c's top comment; the order they are taken in is index mode ->
 * stripes (ascending) -> slab magazine -> slab class -> slab pages, so the
 * policy calls the allocator with the index held, never the other way. */

/* Hold the whole index exclusive (no stripe holder inside, new ones wait);
 * returns what rkv_table_index_unlock_all() needs for lock timing. Holding
 * no index lock. */
uint64_t rkv_table_index_lock_all(struct rkv_table *t);
void rkv_table_index_unlock_all(struct rkv_table *t, uint64_t since);

/* Find the key's item in its two buckets (h: its hash). The key's stripes
 * held, or the index exclusive. */
bool rkv_table_index_find(struct rkv_table *t, const struct rkv_key_hash *h, const void *key,
                          uint32_t key_len, struct place *p);

/* Is the item at heap offset `off` of class cls in the index, and where?
 * Exact with the index held exclusive; with no index lock, a guess that
 * rkv_table_index_remove_if() confirms. */
bool rkv_table_live_at(struct rkv_table *t, uint64_t off, unsigned cls, struct place *p);

/* rkv_table_live_at for up to RKV_LIVE_BATCH_MAX offsets of class cls at
 * once, their cache misses overlapped: live[i] and, if so, p[i]. */
#define RKV_LIVE_BATCH_MAX 8
void rkv_table_live_batch(struct rkv_table *t, unsigned cls, const uint64_t *offs, unsigned n,
                          struct place *p, bool *live);

/* Clear p's slot and retire its item (OBSOLETE, freed into the limbo): an
 * eviction or expiry. The stripe of p's bucket held, or the index exclusive. */
void rkv_table_index_remove(struct rkv_table *t, const struct place *p);

/* rkv_table_index_remove() under p's bucket's stripe, if the slot still
 * holds p->word; false if not. Holding no index lock. */
bool rkv_table_index_remove_if(struct rkv_table *t, const struct place *p);

/* Set slot `slot` of bucket b to `word` as every slot change goes (its
 * version odd around one release store; the store observer told). The
 * bucket's stripe held, or the index exclusive. */
void rkv_table_slot_set(struct rkv_table *t, struct rkv_bucket *b, unsigned slot, uint64_t word);

/* Move bucket b to `level` (its version odd, then even at the new level).
 * The index held exclusive (a split). */
void rkv_table_bucket_level(struct rkv_table *t, struct rkv_bucket *b, unsigned level);

/* ---- index_grow.c: the index grows by splitting buckets (index_geom.h). */

/* Whether the index should grow now: it is below its capacity and holds
 * more than RKV_INDEX_GROW_LOAD of its slots' items (`items`). */
bool rkv_index_wants_growth(const struct rkv_table *t, uint64_t items);

/* Split up to n buckets (fewer at capacity); how many were split. The
 * index held exclusive. */
uint64_t rkv_index_grow(struct rkv_table *t, uint64_t n);

/* Buckets one growth step splits: a share of the index, so growth costs a
 * constant per insert, bounded so that one exclusive hold stays short. */
uint64_t rkv_index_grow_step(const struct rkv_table *t);

/* ---- evict.c: which items go, for table.c and page_move.c. */

/* Each class's evict-ahead reserve at its starting size (at creation). */
void rkv_evict_init(struct rkv_table *t);

/* Random bits for sampling victims and pages, from this thread's writer slot. */
uint64_t rkv_evict_rng(struct rkv_table *t);

/* How many stores ago the item of slot word `word` was stored or last
 * read (lru, s3fifo); 0 without access words. */
uint32_t rkv_evict_item_age(struct rkv_table *t, uint64_t word);

/* s3fifo: the decayed use count of the item of slot word `word`
 * (S3_USES_MAX without access words, which makes every item alike). */
unsigned rkv_evict_item_uses(struct rkv_table *t, uint64_t word);

/* Once a tick: the table holds `items` items (s3fifo's use decay follows
 * them); a class that ran dry since the last tick keeps its evict-ahead
 * reserve, any other lets it shrink toward what its evictions need. The
 * tick's thread only (rkv_evict_init before it). */
void rkv_evict_tick(struct rkv_table *t, uint64_t items);

/* ---- evict_ghost.c: s3fifo's keys evicted unread, for evict.c and table.c. */

/* The ghost table, with s3fifo (none otherwise); false when out of memory. */
bool rkv_ghost_init(struct rkv_table *t);
void rkv_ghost_free(struct rkv_table *t);

/* The item of slot word `word` goes unread: remember its key. */
void rkv_ghost_remember(struct rkv_table *t, uint64_t word);

/* Was the key of hash h64 evicted unread lately? Forgets it if so. */
bool rkv_ghost_take(struct rkv_table *t, uint64_t h64);

/* A live item of class cls to evict, never `keep`. Exact with the index
 * held exclusive; with no index lock, a candidate that
 * rkv_table_index_remove_if() confirms. */
bool rkv_evict_pick_victim(struct rkv_table *t, unsigned cls, uint64_t keep, struct place *victim);

/* How many items of class cls to evict ahead now; 0 without eviction or
 * before the heap is full. Takes no lock: a hint, asked again once the
 * class is claimed. */
unsigned rkv_evict_ahead_want(struct rkv_table *t, unsigned cls);

/* Evict ahead for class cls, sparing `keep`, as the writer that set
 * t->evicting[cls]; clears it. Holding no index lock. */
void rkv_evict_ahead_claimed(struct rkv_table *t, unsigned cls, uint64_t keep);

/* After a PUT stored `keep` of class cls: evict ahead when the class's
 * items on their way back fall short of its reserve, one writer per class
 * at a time (others go on: the reserve is ahead of need). Holding no index
 * lock. Inline because every PUT asks, and most go no further than the
 * look. */
static inline void rkv_evict_ahead(struct rkv_table *t, unsigned cls, uint64_t keep)
{
    if (rkv_evict_ahead_want(t, cls) == 0 ||
        __atomic_exchange_n(&t->evicting[cls], 1, __ATOMIC_ACQUIRE))
        return;
    rkv_evict_ahead_claimed(t, cls, keep);
}

/* Memory for an item of class *cls for the key (h, key) once the class had
 * none: evicts (never the key's own item), may move a page, takes a larger
 * class's ready item (*cls becomes it) or waits for the limbo or the page;
 * RKV_OUT_OF_MEMORY when nothing comes. Holding no index lock (it takes the
 * index exclusive itself). */
rkv_status rkv_evict_alloc(struct rkv_table *t, unsigned *cls, const struct rkv_key_hash *h,
                           const void *key, uint32_t key_len, uint64_t *off);

/* Free a slot in one of the key's full buckets by evicting one of their
 * items (no displacement path). The index held exclusive. */
bool rkv_evict_for_slot(struct rkv_table *t, const struct rkv_key_hash *h, struct place *out);

/* ---- page_move.c: slab pages between size classes, for evict.c and the
 * tick. */

/* Which pages of other classes a page move may take. */
enum rkv_page_donor {
    RKV_DONOR_SPARE,  /* a page of a class that owns two or more */
    RKV_DONOR_COLDER, /* a page clearly worth less than what cls evicts (a starved class) */
    RKV_DONOR_ANY,    /* any, a class's only page included */
};

/* Move a page of another class (from_cls when >= 0) that `donor` allows
 * to class cls, never the page holding `keep` (0: none). True when one
 * went to the allocator's pool. The index held exclusive. */
bool rkv_page_reassign(struct rkv_table *t, unsigned cls, int from_cls, enum rkv_page_donor donor,
                       uint64_t keep);

/* Automove (LRU, heap full): at most one page toward the class evicting
 * the youngest items. Once a tick; takes the index exclusive itself. */
void rkv_page_automove(struct rkv_table *t);

/* Evict every live item on slab page `page` and hand the page to the
 * allocator's pool for the index (index_grow.c lends it once it drained);
 * false when it holds no class's items or one being built. The index held
 * exclusive. */
bool rkv_page_evacuate(struct rkv_table *t, uint64_t page);

#endif
