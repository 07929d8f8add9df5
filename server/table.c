/* table.c — the server's hash table in the shared region (table.h).
 *
 * Only this file writes the region, and it writes so that a client reading
 * at any moment either sees a consistent item or can tell it did not:
 *
 *   - every slot change is one aligned 8-byte release store, wrapped in the
 *     bucket's seqlock version (odd while changing, +2 per change);
 *   - items are written out of place and published by a slot store; an item
 *     is marked OBSOLETE after its replacement is published (an update's
 *     OBSOLETE mark carries a forward to the replacement, in the same state
 *     word store) and freed only into the allocator's grace-period limbo;
 *   - an item under construction carries OBSOLETE too and becomes live (state
 *     0) just before its slot is published, so a client holding a stale
 *     cached location that lands on memory being reused for the same key
 *     cannot return a value whose write may still fail;
 *   - cuckoo displacement writes an item's new slot before it clears the old
 *     one, so a reader that checks both bucket versions never misses a key
 *     that was present throughout (design.md invariant 4).
 *
 * Locking: bucket b is guarded by stripe b mod the stripe count (one per
 * bucket up to STRIPES_MAX), and the index as a whole by a mode that is held
 * shared or exclusive.
 *   - A write holds the index shared (a count in this thread's own writer
 *     slot: no cache line shared with other writers) and the stripes of the
 *     buckets it changes, taken in ascending order: a key's two buckets for
 *     SET/ADD/REPLACE/CAS, DELETE, INCR's read, the server-side find; one
 *     bucket for the expiry sweep. So writes to different buckets run in
 *     parallel, and any one bucket changes under one stripe at a time (its
 *     seqlock version has one writer).
 *   - A new key whose buckets are both full searches a displacement path
 *     without locks (racy reads, bounds-checked), then takes the stripes of
 *     the key's buckets and of every bucket on the path, in order, and
 *     re-validates: target slot still empty, each hop's slot still the word
 *     seen, each item's other bucket still the next hop. A path changed
 *     meanwhile is searched again (PATH_TRIES), then under the whole index.
 *   - Evicting ahead (a full heap: every PUT may) samples victims without
 *     locks and removes each under its own bucket's stripe, after checking
 *     that the slot still holds it; one writer per class at a time.
 *   - Whatever may touch many buckets at once holds the index exclusive:
 *     page moves, automove, a PUT whose class ran dry (evicting for itself,
 *     growing the reserve, maybe moving a page), a displacement that found
 *     no valid path, an evicted neighbour for a key with no room. An
 *     exclusive taker sets a flag, then waits until every writer slot is
 *     empty; a shared taker that sees the flag steps back and waits on the
 *     exclusive mutex. They are rare: page moves once per page, running dry
 *     only when evicting ahead fell behind.
 * Building an item (allocation, copying or pulling the value, checksum)
 * happens before any of this; freeing the item a write replaced or deleted
 * into the limbo happens after. Lock order: index mode -> stripes
 * (ascending) -> slab magazine -> slab class -> slab pages. Client hints take
 * no lock. Counters a stripe holder changes (items, bytes, puts, deletes,
 * incrs, displacements) live in that stripe's cache lines and are summed for
 * stats; what a writer changes outside the stripes (its shared-mode count,
 * its last version, its LRU store count, its sampling rng, its evictions,
 * expiries, failed inserts and hints) lives in its writer slot's lines,
 * also summed for stats, and allocation in its slab magazines (slab.c). With
 * cfg.lock_timing each kind of hold is timed per thread slot.
 *
 * The policy for a full heap has files of its own: which items go (evict.c)
 * and which slab pages move to another size class (page_move.c). They reach
 * the index through table_private.h, under the locks described above.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "hash.h"
#include "slab.h"
#include "table.h"
#include "table_private.h"
#include "util.h"

#define DEFAULT_PAGE_SIZE      (1u << 20)
#define DEFAULT_GRACE_MS       100u
#define DEFAULT_ITEM_SIZE_HINT 80u /* default index sizing: one slot per 80 heap bytes */
#define MIN_PAGE_SIZE          1024u
#define MAX_PAGE_SIZE          (1u << 30)
#define MAX_INDEX_SHARE        0.9
#define MAX_REGION_BYTES \
    ((1ull << (64 - RKV_SLOT_OFF_SHIFT)) * RKV_ITEM_ALIGN) /* 40-bit slot offsets */
#define HEAP_ALIGN         4096u
#define WRITER_SLOTS_BYTES (RKV_THREAD_SLOTS * sizeof(struct writer_slot))
#define INDEX_MAX_SHARE    0.25 /* the index grows into the heap up to this share of the region */
/* By default the index starts with this fraction of the room before the
 * heap and splits into the rest first, taking it only then (cfg.take):
 * large items never need the rest. */
#define INDEX_START_SHARE 16u

#define BFS_MAX_DEPTH   5    /* longest displacement chain, in moves */
#define BFS_MAX_NODES   512  /* buckets a displacement search may visit */
#define INCR_TRIES      64   /* optimistic incr attempts under contention */
#define EXPIRE_CHUNK    256  /* buckets scanned per index-lock hold in tick */
#define EXPIRE_MIN_SCAN 4096 /* buckets scanned per tick at least */
#define DECIMAL_MAX_LEN 20   /* digits of UINT64_MAX */
#define STRIPES_MAX     1024 /* bucket locks: bucket b is guarded by stripe b mod the stripe count */
#define HINT_BATCH      64   /* client hints validated and prefetched together */
#define ACCESS_STEP \
    RKV_ACCESS_STEP     /* a thread slot advances the access clock once per this many stores */
#define PATH_TRIES   4  /* displacement paths found without locks and invalidated, then exclusive */
#define PATH_SKIP    63 /* new keys that evict at once after a search found the index full */
#define PATH_BUCKETS (BFS_MAX_DEPTH + 1 + 2) /* buckets a displacement locks: path, target, key's */
#define GROW_CHECK   64 /* new keys of a writer slot between looks at the index's load */
#define GROW_TRIES   4  /* growth steps a new key with no room takes before it evicts */

/* One bucket the displacement search reached. */
struct bfs_node {
    uint64_t bucket; /* bucket index */
    int32_t parent;  /* node whose bucket's slot `slot` would move here; -1 at a candidate bucket */
    uint8_t slot;    /* that slot of the parent's bucket */
    uint8_t depth;   /* moves needed to free a slot here */
};

/* A displacement chain: hop[0]'s item (in one of the key's buckets) moves to
 * hop[1].bucket, ..., the last hop's item to the empty (dest, dest_slot).
 * Carried out from the end, it frees hop[0]'s slot. */
struct cuckoo_path {
    unsigned hops;
    struct {
        uint64_t bucket;
        unsigned slot;
        uint64_t word;
    } hop[BFS_MAX_DEPTH];
    uint64_t dest;
    unsigned dest_slot;
};

/* One thread slot's lock timing (cfg.lock_timing), on lines of its own. */
struct slot_lock_stats {
    struct rkv_lock_stats stripes; /* a write's bucket stripes, taken together */
    struct rkv_lock_stats index;   /* the whole index, exclusive */
} __attribute__((aligned(RKV_CACHELINE)));

/* What a stripe counts: changes to its buckets, and the writes that held it
 * to publish. Written under the stripe (or exclusive) with plain relaxed
 * stores, so the counting costs no shared cache line; summed by stats. */
enum stripe_counter {
    SC_ITEMS,
    SC_ITEM_BYTES,
    SC_PUTS,
    SC_INCRS,
    SC_DELETES,
    SC_DISPLACEMENTS,
    SC_COUNT
};

/* One bucket lock with its counters, on lines no other stripe uses. */
struct stripe {
    pthread_mutex_t m;
    uint64_t n[SC_COUNT];
} __attribute__((aligned(RKV_CACHELINE)));

/* ------------------------------------------------------------ locking */

/* This thread's lock timing, or NULL without cfg.lock_timing. */
static struct slot_lock_stats *my_lock_stats(const struct rkv_table *t)
{
    return t->lock_stats != NULL ? &t->lock_stats[rkv_thread_slot()] : NULL;
}

/* A set of stripes, ascending and without repeats: the order every thread
 * takes them in, so two writers never wait for each other in a cycle. */
struct stripe_set {
    unsigned n;
    uint64_t s[PATH_BUCKETS];
};

static void stripe_add(const struct rkv_table *t, struct stripe_set *set, uint64_t bucket)
{
    uint64_t s = bucket & t->stripe_mask;
    unsigned i = 0;
    while (i < set->n && set->s[i] < s)
        i++;
    if (i < set->n && set->s[i] == s)
        return;
    memmove(&set->s[i + 1], &set->s[i], (set->n - i) * sizeof(set->s[0]));
    set->s[i] = s;
    set->n++;
}

/* Hold the index shared: count in our slot, then look for an exclusive
 * holder (the exclusive side sets its flag, then looks at the slots: both
 * seq_cst, so one of the two sees the other). If one is there, step back
 * and wait for it on its mutex. */
static struct writer_slot *index_lock_shared(struct rkv_table *t)
{
    struct writer_slot *m = writer_slot(t);
    for (;;) {
        __atomic_fetch_add(&m->holders, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&t->exclusive, __ATOMIC_SEQ_CST))
            return m;
        __atomic_fetch_sub(&m->holders, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&t->exclusive_lock);
        pthread_mutex_unlock(&t->exclusive_lock);
    }
}

static void index_unlock_shared(struct writer_slot *m)
{
    __atomic_fetch_sub(&m->holders, 1, __ATOMIC_RELEASE);
}

/* Hold the index shared and the stripes of `set`. */
struct stripe_hold {
    struct writer_slot *slot;
    uint64_t since; /* lock_timing: when the hold began */
};

static struct stripe_hold stripes_lock(struct rkv_table *t, const struct stripe_set *set)
{
    struct stripe_hold h = { .slot = index_lock_shared(t) };
    struct slot_lock_stats *ls = my_lock_stats(t);
    if (RKV_LIKELY(ls == NULL)) {
        for (unsigned i = 0; i < set->n; i++)
            pthread_mutex_lock(&t->stripes[set->s[i]].m);
        return h;
    }
    /* Timed as one lock: the wait for all of them, the hold of all of them. */
    uint64_t asked = rkv_now_ns();
    bool waited = false;
    for (unsigned i = 0; i < set->n; i++) {
        pthread_mutex_t *m = &t->stripes[set->s[i]].m;
        if (pthread_mutex_trylock(m) != 0) {
            pthread_mutex_lock(m);
            waited = true;
        }
    }
    h.since = waited ? rkv_now_ns() : asked;
    if (waited) {
        __atomic_fetch_add(&ls->stripes.contended, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ls->stripes.wait_ns, h.since - asked, __ATOMIC_RELAXED);
    }
    return h;
}

static void stripes_unlock(struct rkv_table *t, const struct stripe_set *set, struct stripe_hold h)
{
    struct slot_lock_stats *ls = my_lock_stats(t);
    for (unsigned i = set->n; i-- > 1;)
        pthread_mutex_unlock(&t->stripes[set->s[i]].m);
    /* the first stripe's unlock is the timed one (rkv_unlock_timed counts the hold) */
    rkv_unlock_timed(&t->stripes[set->s[0]].m, ls ? &ls->stripes : NULL, h.since);
    index_unlock_shared(h.slot);
}

/* Add to a counter of bucket b's stripe (held, or the index exclusive). */
static void stripe_count(struct rkv_table *t, const struct rkv_bucket *b, enum stripe_counter c,
                         int64_t delta)
{
    uint64_t *n = &t->stripes[(uint64_t)(b - t->buckets) & t->stripe_mask].n[c];
    __atomic_store_n(n, __atomic_load_n(n, __ATOMIC_RELAXED) + (uint64_t)delta, __ATOMIC_RELAXED);
}

static uint64_t stripe_sum(const struct rkv_table *t, enum stripe_counter c)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i <= t->stripe_mask; i++)
        sum += __atomic_load_n(&t->stripes[i].n[c], __ATOMIC_RELAXED);
    return sum;
}

/* The stripes of a key's two candidate buckets. */
static void key_stripes(const struct rkv_table *t, const struct rkv_key_hash *h,
                        struct stripe_set *set)
{
    set->n = 0;
    stripe_add(t, set, h->bucket[0]);
    stripe_add(t, set, h->bucket[1]);
}

/* Hold the index shared and the stripes of the key's buckets, h hashed
 * already: a split between the hashing and the locking (the geometry
 * changed) makes it hash again and lock the new buckets' stripes. */
static struct stripe_hold key_lock(struct rkv_table *t, const void *key, uint32_t key_len,
                                   struct rkv_key_hash *h, struct stripe_set *set)
{
    for (;;) {
        key_stripes(t, h, set);
        struct stripe_hold hold = stripes_lock(t, set);
        if (RKV_LIKELY(table_hash_current(t, h)))
            return hold;
        stripes_unlock(t, set, hold);
        table_hash(t, key, key_len, h);
    }
}

/* The whole index, excluding every stripe holder: one exclusive taker at a
 * time; new shared takers step back from the flag, those holding finish
 * (holds are short, so waiting for them yields rather than sleeps). */
uint64_t rkv_table_index_lock_all(struct rkv_table *t)
{
    struct slot_lock_stats *ls = my_lock_stats(t);
    uint64_t asked = ls ? rkv_now_ns() : 0;
    bool waited = pthread_mutex_trylock(&t->exclusive_lock) != 0;
    if (waited)
        pthread_mutex_lock(&t->exclusive_lock);
    __atomic_store_n(&t->exclusive, 1, __ATOMIC_SEQ_CST);
    for (unsigned i = 0; i < RKV_THREAD_SLOTS; i++)
        while (__atomic_load_n(&t->writer_slots[i].holders, __ATOMIC_SEQ_CST) != 0) {
            waited = true;
            sched_yield();
        }
    if (ls == NULL)
        return 0;
    uint64_t since = rkv_now_ns();
    if (waited) { /* for the mutex, or for shared holders to leave */
        __atomic_fetch_add(&ls->index.contended, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ls->index.wait_ns, since - asked, __ATOMIC_RELAXED);
    }
    return since;
}

void rkv_table_index_unlock_all(struct rkv_table *t, uint64_t since)
{
    struct slot_lock_stats *ls = my_lock_stats(t);
    __atomic_store_n(&t->exclusive, 0, __ATOMIC_RELEASE);
    rkv_unlock_timed(&t->exclusive_lock, ls ? &ls->index : NULL, since);
}

static bool expired(const struct rkv_item *it, uint32_t now)
{
    return rkv_expired(rkv_item_expire_at(it), now);
}

/* Has the item expired now? Reads the clock only for an item with a TTL
 * (rkv_table_clock costs a clock read; most items never expire). */
static bool expired_now(const struct rkv_table *t, const struct rkv_item *it)
{
    return (it->shape & RKV_SHAPE_EXPIRE) && expired(it, rkv_table_clock(t));
}

uint32_t rkv_table_clock(const struct rkv_table *t)
{
    uint32_t c = rkv_clock_at(t->start_ns, t->now_ns());
    return c > UINT32_MAX - t->clock_base ? UINT32_MAX : c + t->clock_base;
}

const struct rkv_region_header *rkv_table_header(const struct rkv_table *t)
{
    return t->hdr;
}

/* ------------------------------------------------------------ slot writes */

/* Make the bucket's version odd before any of its slots changes: a reader
 * that sees a changed slot then sees the odd (or a later) version. */
static void version_begin(struct rkv_bucket *b)
{
#ifdef __SANITIZE_THREAD__
    __atomic_fetch_add(&b->version, 1, __ATOMIC_SEQ_CST); /* TSan does not model fences */
#else
    __atomic_store_n(&b->version, b->version + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

/* Change one slot: version odd, one 8-byte release store, version even. */
static void slot_store(struct rkv_table *t, struct rkv_bucket *b, unsigned slot, uint64_t word)
{
    version_begin(b);
    __atomic_store_n(&b->slot[slot], word, __ATOMIC_RELEASE);
    if (RKV_UNLIKELY(t->observer != NULL))
        t->observer(t->observer_ctx, (uint64_t)(b - t->buckets), slot, word);
    __atomic_store_n(&b->version, b->version + 1, __ATOMIC_RELEASE);
}

void rkv_table_slot_set(struct rkv_table *t, struct rkv_bucket *b, unsigned slot, uint64_t word)
{
    slot_store(t, b, slot, word);
}

void rkv_table_bucket_level(struct rkv_table *t, struct rkv_bucket *b, unsigned level)
{
    (void)t;
    version_begin(b);
    uint64_t count = (b->version & RKV_VERSION_COUNT_MASK) + 1;
    __atomic_store_n(&b->version, (uint64_t)level << RKV_VERSION_LEVEL_SHIFT | count,
                     __ATOMIC_RELEASE);
}

void rkv_table_set_store_observer(struct rkv_table *t, rkv_table_store_fn fn, void *ctx)
{
    uint64_t since = rkv_table_index_lock_all(t);
    t->observer = fn;
    t->observer_ctx = ctx;
    rkv_table_index_unlock_all(t, since);
}

/* First empty slot of b, or -1. */
static int empty_slot(const struct rkv_bucket *b)
{
    for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++)
        if (slot_load(b, s) == 0)
            return (int)s;
    return -1;
}

/* LRU: one more stored item. Each thread slot advances the shared access
 * clock by ACCESS_STEP once per ACCESS_STEP of its stores, so that the clock's
 * line is written rarely (items stored close together share a stamp: LRU is
 * approximate anyway). The count is a plain load and store: a slot shared by
 * two threads may lose a count, which only delays a step. */
static void access_tick(struct rkv_table *t)
{
    struct writer_slot *w = writer_slot(t);
    uint32_t n = __atomic_load_n(&w->stores, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&w->stores, n == ACCESS_STEP ? 0 : n, __ATOMIC_RELAXED);
    if (n == ACCESS_STEP)
        __atomic_fetch_add(&t->access_clock, ACCESS_STEP, __ATOMIC_RELAXED);
}

/* A new item version: nanoseconds since the table was created, times
 * RKV_THREAD_SLOTS, plus this thread's slot; strictly increasing per slot
 * (the last one + RKV_THREAD_SLOTS when the clock did not move). So versions
 * are unique, and a write that begins after another ended gets a larger one
 * (CLOCK_MONOTONIC is one clock for all CPUs), without a line shared by
 * writers. 2^64 / 64 ns is 9 years. A kept region's table adds
 * version_floor, above every version it holds, so CAS tokens stay unique
 * and increasing across a restart. */
static uint64_t version_new(struct rkv_table *t)
{
    unsigned slot = rkv_thread_slot();
    struct writer_slot *w = &t->writer_slots[slot];
    uint64_t v = t->version_floor + (rkv_now_ns() - t->version_base) * RKV_THREAD_SLOTS + slot;
    uint64_t last = __atomic_load_n(&w->last_version, __ATOMIC_RELAXED);
    do {
        if (v <= last)
            v = last + RKV_THREAD_SLOTS;
    } while (!__atomic_compare_exchange_n(&w->last_version, &last, v, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return v;
}

/* A new item, built before any index lock: not live (OBSOLETE) until published. */
struct built {
    unsigned cls;
    uint64_t word; /* slot word to publish */
    uint64_t version;
    uint64_t state;   /* its live state word (layout.h: meta flags, last access) */
    uint32_t *access; /* LRU: its access word (rkv_slab_meta), asked for to write while the
                         * item was built, stamped as it is published; else NULL */
};

/* Make a built item live and publish it at (b, slot), stamped as just used
 * (LRU) with `uses` uses (s3fifo: rkv_access_stored). The stripe of b held. */
static void publish(struct rkv_table *t, struct rkv_bucket *b, unsigned slot,
                    const struct built *nb, unsigned uses)
{
    struct rkv_item *it = item_at(t, nb->word);
    if (rkv_evict_uses_access(t->cfg.evict)) /* the clock is theirs only */
        access_tick(t);
    if (nb->access != NULL)
        __atomic_store_n(nb->access,
                         rkv_access_stored(t, __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED),
                                           uses),
                         __ATOMIC_RELAXED);
    rkv_item_set_state(it, nb->state);
    slot_store(t, b, slot, nb->word);
    stripe_count(t, b, SC_ITEMS, 1);
    stripe_count(t, b, SC_ITEM_BYTES, (int64_t)rkv_item_bytes(it));
}

/* An item that is no longer in bucket b: mark it obsolete with the state
 * word `state` (plain OBSOLETE, or a forward to its replacement). The
 * stripe of b held. Its memory goes to the allocator's limbo next
 * (item_free), under the lock or, for writes, right after it: the grace
 * period then starts a little later, never earlier, and a page move meets
 * the item as one in use and leaves its page alone until then. */
static void retire_mark(struct rkv_table *t, const struct rkv_bucket *b, uint64_t word, uint64_t state)
{
    struct rkv_item *it = item_at(t, word);
    stripe_count(t, b, SC_ITEMS, -1);
    stripe_count(t, b, SC_ITEM_BYTES, -(int64_t)rkv_item_bytes(it));
    rkv_item_set_state(it, state);
}

static void item_free(struct rkv_table *t, uint64_t word)
{
    rkv_slab_free(t->slab, rkv_slot_class(word), rkv_slot_offset(word));
}

/* Deleted, evicted or expired, and freed: no forward. */
static void retire(struct rkv_table *t, const struct rkv_bucket *b, uint64_t word)
{
    retire_mark(t, b, word, RKV_ITEM_OBSOLETE);
    item_free(t, word);
}

/* Remove the item at p from the index and retire it (eviction, expiry). */
void rkv_table_index_remove(struct rkv_table *t, const struct place *p)
{
    slot_store(t, p->bucket, p->slot, 0);
    retire(t, p->bucket, p->word);
}

/* Remove the item at p, found without locks, under its bucket's stripe if
 * the slot still holds it (a write, a delete or a displacement may have
 * moved it since). The removal changes that bucket only, so its stripe is
 * all it takes. */
bool rkv_table_index_remove_if(struct rkv_table *t, const struct place *p)
{
    bool still;
    struct stripe_set set = { .n = 1, .s = { (uint64_t)(p->bucket - t->buckets) & t->stripe_mask } };
    struct stripe_hold hold = stripes_lock(t, &set);
    if ((still = slot_load(p->bucket, p->slot) == p->word))
        rkv_table_index_remove(t, p);
    stripes_unlock(t, &set, hold);
    return still;
}

/* ------------------------------------------------------------ finding */

bool rkv_table_index_find(struct rkv_table *t, const struct rkv_key_hash *h, const void *key,
                          uint32_t key_len, struct place *p)
{
    for (unsigned i = 0; i < 2; i++) {
        struct rkv_bucket *b = &t->buckets[h->bucket[i]];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t w = b->slot[s];
            if (w == 0 || rkv_slot_fp(w) != h->fp)
                continue;
            struct rkv_item *it = item_at(t, w);
            if (rkv_item_key_len(it) == key_len && memcmp(rkv_item_key(it), key, key_len) == 0) {
                *p = (struct place){ .bucket = b, .slot = s, .word = w, .it = it };
                return true;
            }
        }
    }
    return false;
}

/* The longest value a key of key_len (<= max_key_len) bytes may have: an
 * item no larger than one with the longest key and the longest value
 * (max_value_len is the bound for every key; a shorter key leaves its room
 * to the value, as memcached's item size limit does). */
static uint64_t value_room(const struct rkv_table *t, uint32_t key_len)
{
    return (uint64_t)t->cfg.max_value_len + t->cfg.max_key_len - key_len;
}

/* The key of what may be an item of class cls at `off`, by its header:
 * false when the header cannot be an item's of that class. The memory may be
 * free or under construction, so the answer is a guess until an index slot
 * pointing at exactly this offset confirms it (slot_at). */
static bool key_at(const struct rkv_table *t, uint64_t off, unsigned cls, const uint8_t **key,
                   uint32_t *key_len)
{
    const struct rkv_item *it = (const struct rkv_item *)(const void *)(t->base + off);
    uint32_t shape = __atomic_load_n(&it->shape, __ATOMIC_RELAXED);
    uint32_t len = shape & RKV_SHAPE_KEY_MASK, header = rkv_shape_header_size(shape);
    uint32_t value_len = shape & RKV_SHAPE_LONG
                             ? __atomic_load_n((const uint32_t *)(const void *)it->tail,
                                               __ATOMIC_RELAXED)
                             : shape >> RKV_SHAPE_VALUE_SHIFT;
    if (len == 0 || len > t->cfg.max_key_len || value_len > value_room(t, len) ||
        (uint64_t)header + len + value_len > rkv_slab_class_size(t->slab, cls))
        return false;
    *key = (const uint8_t *)it + header;
    *key_len = len;
    return true;
}

/* The slot of the key hashed into h that points at `off` of class cls. */
static bool slot_at(struct rkv_table *t, const struct rkv_key_hash *h, uint64_t off, unsigned cls,
                    struct place *p)
{
    for (unsigned i = 0; i < 2; i++) {
        struct rkv_bucket *b = &t->buckets[h->bucket[i]];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t w = __atomic_load_n(&b->slot[s], __ATOMIC_RELAXED);
            if (w != 0 && rkv_slot_offset(w) == off && rkv_slot_class(w) == cls) {
                *p = (struct place){ .bucket = b, .slot = s, .word = w, .it = item_at(t, w) };
                return true;
            }
        }
    }
    return false;
}

/* Which of n offsets of class cls hold items in the index (live[i]), and
 * where (p[i]), as rkv_table_live_at says for one; each step's memory
 * fetched for all of them before the step reads any: the items' headers,
 * then (their keys hashed) both buckets of each key. One at a time,
 * eviction's samples cost three dependent cache misses apiece. */
void rkv_table_live_batch(struct rkv_table *t, unsigned cls, const uint64_t *offs, unsigned n,
                          struct place *p, bool *live)
{
    struct rkv_key_hash h[RKV_LIVE_BATCH_MAX];
    n = RKV_MIN(n, RKV_LIVE_BATCH_MAX);
    for (unsigned i = 0; i < n; i++)
        __builtin_prefetch(t->base + offs[i]);
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *key;
        uint32_t key_len;
        live[i] = key_at(t, offs[i], cls, &key, &key_len);
        if (!live[i])
            continue;
        table_hash(t, key, key_len, &h[i]);
        __builtin_prefetch(&t->buckets[h[i].bucket[0]]);
        __builtin_prefetch(&t->buckets[h[i].bucket[1]]);
    }
    for (unsigned i = 0; i < n; i++)
        live[i] = live[i] && slot_at(t, &h[i], offs[i], cls, &p[i]);
}

/* Is the item at `off` of class cls in the index? Its memory may be free or
 * under construction by another thread, so its header is only a guess until
 * an index slot pointing at exactly this offset confirms it. With the index
 * held exclusive the answer is exact; without it, a guess for eviction,
 * which confirms it under the bucket's stripe (rkv_table_index_remove_if). */
bool rkv_table_live_at(struct rkv_table *t, uint64_t off, unsigned cls, struct place *p)
{
    bool live;
    rkv_table_live_batch(t, cls, &off, 1, p, &live);
    return live;
}

/* ------------------------------------------------------------ cuckoo */

/* The other candidate bucket of the item in `word`, which sits in `here`;
 * `here` itself when the word cannot be an item's (a search without locks
 * may read a slot just freed and reused: only bounds are trusted here, and
 * the path is validated under its locks). */
static uint64_t other_bucket(const struct rkv_table *t, uint64_t word, uint64_t here)
{
    uint64_t off = rkv_slot_offset(word);
    if (word == 0 || off < RKV_HEADER_SIZE || off + RKV_ITEM_HEADER_MAX + t->cfg.max_key_len > t->size)
        return here;
    const struct rkv_item *it = item_at(t, word);
    uint32_t shape = __atomic_load_n(&it->shape, __ATOMIC_RELAXED);
    uint32_t key_len = shape & RKV_SHAPE_KEY_MASK;
    if (key_len == 0 || key_len > t->cfg.max_key_len)
        return here;
    struct rkv_key_hash h;
    table_hash(t, (const uint8_t *)it + rkv_shape_header_size(shape), key_len, &h);
    if (h.bucket[0] == here)
        return h.bucket[1];
    return h.bucket[1] == here ? h.bucket[0] : here;
}

static bool on_path(const struct bfs_node *q, int32_t at, uint64_t bucket)
{
    for (; at >= 0; at = q[at].parent)
        if (q[at].bucket == bucket)
            return true;
    return false;
}

/* The chain that ends with node `at`'s slot `s` moving to (dest, dest_slot). */
static void path_from(const struct rkv_table *t, const struct bfs_node *q, int32_t at, unsigned s,
                      uint64_t dest, unsigned dest_slot, struct cuckoo_path *path)
{
    unsigned n = 0;
    for (int32_t i = at; i >= 0; i = q[i].parent)
        n++;
    path->hops = n;
    path->dest = dest;
    path->dest_slot = dest_slot;
    for (;;) {
        n--;
        path->hop[n].bucket = q[at].bucket;
        path->hop[n].slot = s;
        path->hop[n].word = slot_load(&t->buckets[q[at].bucket], s);
        if (q[at].parent < 0)
            break;
        s = q[at].slot;
        at = q[at].parent;
    }
}

/* Both candidate buckets are full: breadth-first search for the shortest
 * chain of moves that frees a slot in one of them. Reads the index without
 * locks (the result is a guess that cuckoo_path_valid() checks under the
 * path's stripes) or with the index held exclusive (then it is exact). */
static bool cuckoo_find_path(const struct rkv_table *t, const struct rkv_key_hash *h,
                             struct cuckoo_path *path)
{
    struct bfs_node q[BFS_MAX_NODES];
    int32_t n = 0;
    for (unsigned i = 0; i < 2; i++)
        q[n++] = (struct bfs_node){ .bucket = h->bucket[i], .parent = -1 };

    for (int32_t at = 0; at < n; at++) {
        const struct rkv_bucket *b = &t->buckets[q[at].bucket];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t alt = other_bucket(t, slot_load(b, s), q[at].bucket);
            if (alt == q[at].bucket || on_path(q, at, alt))
                continue;
            int free_slot = empty_slot(&t->buckets[alt]);
            if (free_slot >= 0) {
                path_from(t, q, at, s, alt, (unsigned)free_slot, path);
                return true;
            }
            if (q[at].depth + 2 <= BFS_MAX_DEPTH && n < BFS_MAX_NODES)
                q[n++] = (struct bfs_node){ .bucket = alt,
                                            .parent = at,
                                            .slot = (uint8_t)s,
                                            .depth = (uint8_t)(q[at].depth + 1) };
        }
    }
    return false;
}

/* Does the index still hold the path as found: the target slot empty, every
 * hop's slot the word seen, and each item's other bucket the next hop's?
 * The path's stripes held. */
static bool cuckoo_path_valid(const struct rkv_table *t, const struct cuckoo_path *path)
{
    if (slot_load(&t->buckets[path->dest], path->dest_slot) != 0)
        return false;
    for (unsigned i = 0; i < path->hops; i++) {
        uint64_t b = path->hop[i].bucket,
                 next = i + 1 < path->hops ? path->hop[i + 1].bucket : path->dest;
        uint64_t w = slot_load(&t->buckets[b], path->hop[i].slot);
        if (w == 0 || w != path->hop[i].word || other_bucket(t, w, b) != next)
            return false;
    }
    return true;
}

/* Move the item at (from, fs) to the empty (to, ts): destination first, so
 * the item is in the index at every instant; both versions change. */
static void slot_move(struct rkv_table *t, struct rkv_bucket *from, unsigned fs,
                      struct rkv_bucket *to, unsigned ts)
{
    slot_store(t, to, ts, from->slot[fs]);
    slot_store(t, from, fs, 0);
    stripe_count(t, to, SC_DISPLACEMENTS, 1);
}

/* Carry out a valid path from its end; the slot it frees in one of the
 * key's buckets goes to *p. The path's stripes held (or exclusive). */
static void cuckoo_apply(struct rkv_table *t, const struct cuckoo_path *path, struct place *p)
{
    struct rkv_bucket *to = &t->buckets[path->dest];
    unsigned to_slot = path->dest_slot;
    for (unsigned i = path->hops; i-- > 0;) {
        struct rkv_bucket *from = &t->buckets[path->hop[i].bucket];
        slot_move(t, from, path->hop[i].slot, to, to_slot);
        to = from;
        to_slot = path->hop[i].slot;
    }
    p->bucket = to;
    p->slot = to_slot;
}

/* The stripes a displacement along `path` for key h takes. */
static void path_stripes(const struct rkv_table *t, const struct rkv_key_hash *h,
                         const struct cuckoo_path *path, struct stripe_set *set)
{
    key_stripes(t, h, set);
    for (unsigned i = 0; i < path->hops; i++)
        stripe_add(t, set, path->hop[i].bucket);
    stripe_add(t, set, path->dest);
}

/* An empty slot in the key's first bucket, else in its second. Filling the
 * first bucket first keeps most keys there (92 % at half load against 69 %
 * for "the emptier bucket", same final load factor: table-loadfactor), so a
 * lookup that reads the first bucket alone seldom needs the second. */
static bool candidate_slot(struct rkv_table *t, const struct rkv_key_hash *h, struct place *p)
{
    for (unsigned i = 0; i < 2; i++) {
        int s = empty_slot(&t->buckets[h->bucket[i]]);
        if (s >= 0) {
            p->bucket = &t->buckets[h->bucket[i]];
            p->slot = (unsigned)s;
            return true;
        }
    }
    return false;
}

/* How a store may find room for a new key. */
struct room {
    const struct cuckoo_path *path; /* a displacement found without locks, its stripes held */
    bool exclusive;                 /* the index held exclusive: search, displace, evict */
    bool may_evict;                 /* ... evict a neighbour too (the index cannot grow) */
};

/* Whether a new key whose buckets are full skips the displacement search
 * (a full index, with eviction: a search visits up to BFS_MAX_NODES buckets
 * and hashes every key in them, and at a full index finds nothing, so each
 * new key would pay two before evicting a neighbour anyway). Counts one
 * skip down; a search runs again after PATH_SKIP skips. */
static bool path_skipped(struct rkv_table *t)
{
    uint32_t n = __atomic_load_n(&t->path_skip, __ATOMIC_RELAXED);
    if (n == 0)
        return false;
    __atomic_store_n(&t->path_skip, n - 1, __ATOMIC_RELAXED);
    return true;
}

/* An empty slot for a new key: the emptier candidate bucket, else a
 * displacement (the given path if it still holds; with the whole index, one
 * searched now), else (exclusive, with eviction) an evicted neighbour. */
static bool index_make_room(struct rkv_table *t, const struct rkv_key_hash *h,
                            const struct room *room, struct place *p)
{
    struct cuckoo_path path;
    if (candidate_slot(t, h, p))
        return true;
    if (room->path != NULL && cuckoo_path_valid(t, room->path)) {
        cuckoo_apply(t, room->path, p);
        return true;
    }
    if (!room->exclusive)
        return false;
    bool evict = t->cfg.evict != RKV_EVICT_NONE && room->may_evict;
    if (evict && path_skipped(t))
        return rkv_evict_for_slot(t, h, p);
    if (cuckoo_find_path(t, h, &path)) {
        cuckoo_apply(t, &path, p);
        return true;
    }
    if (evict) /* the index is full and cannot grow: the next searches would fail as well */
        __atomic_store_n(&t->path_skip, PATH_SKIP, __ATOMIC_RELAXED);
    return evict && rkv_evict_for_slot(t, h, p);
}

/* ------------------------------------------------------------ writes */

static rkv_status check_key(const struct rkv_table *t, const void *key, uint32_t key_len)
{
    if (key == NULL || key_len == 0)
        return RKV_INVALID;
    return key_len > t->cfg.max_key_len ? RKV_TOO_LARGE : RKV_OK;
}

/* Memory for an item of class *cls: a larger class's room when cls owns
 * no page and pages are scarce (rkv_slab_host_class: *cls becomes it);
 * else the class's own, a free page included; else, on a full heap, what
 * evicting in the class or its host frees, or a larger class's ready item
 * meanwhile (rkv_evict_alloc, which may wait). Called without any index
 * lock. */
static rkv_status item_alloc(struct rkv_table *t, unsigned *cls, const struct rkv_key_hash *h,
                             const void *key, uint32_t key_len, uint64_t *off)
{
    unsigned host = rkv_slab_host_class(t->slab, *cls);
    if (host != *cls && (*off = rkv_slab_alloc_ready(t->slab, host)) != 0) {
        *cls = host;
        return RKV_OK;
    }
    if ((*off = rkv_slab_alloc(t->slab, *cls)) != 0)
        return RKV_OK;
    *cls = rkv_slab_host_class(t->slab, *cls);
    return rkv_evict_alloc(t, cls, h, key, key_len, off);
}

static rkv_status item_build(struct rkv_table *t, const struct rkv_key_hash *h, const void *key,
                             uint32_t key_len, const struct rkv_value_src *val, uint32_t expire_at,
                             uint32_t user_flags, uint64_t state, struct built *out)
{
    int fit = rkv_slab_class_for(t->slab, rkv_item_size(key_len, val->len, expire_at, user_flags));
    uint64_t off;
    if (fit < 0)
        return RKV_TOO_LARGE;
    unsigned cls = (unsigned)fit;
    rkv_status st = item_alloc(t, &cls, h, key, key_len, &off);
    if (st != RKV_OK)
        return st;

    struct rkv_item *it = (struct rkv_item *)(void *)(t->base + off);
    /* Its access word's line may be another writer's (neighbours' stamps):
     * asked for now, it is here when the stripe hold stamps it. */
    out->access = rkv_evict_uses_access(t->cfg.evict) ? rkv_slab_meta(t->slab, off, (unsigned)cls)
                                                      : NULL;
    if (out->access != NULL)
        rkv_prefetch_write(out->access);
    uint64_t version = version_new(t); /* before the item's first store, whose miss it would wait for */
    rkv_item_set_state(it, RKV_ITEM_OBSOLETE);
    uint8_t *data = rkv_item_init(it, version, key_len, val->len, expire_at, user_flags);
    memcpy(data, key, key_len);
    if (val->len > 0) {
        if (val->data != NULL)
            memcpy(data + key_len, val->data, val->len);
        else if ((st = val->pull(val->ctx, data + key_len, val->len)) != RKV_OK)
            goto fail;
    }
    rkv_item_set_checksum(it, rkv_item_checksum(it, t->seed));
    out->cls = (unsigned)cls;
    out->word = rkv_slot_make(h->fp, (unsigned)cls, off);
    out->version = rkv_item_version(it);
    out->state = state & RKV_ITEM_LIVE_MASK;
    return RKV_OK;

fail:
    rkv_slab_free(t->slab, (unsigned)cls, off);
    return st;
}

/* May a write in `mode` go ahead, given what the index holds? */
static rkv_status mode_check(rkv_put_mode mode, bool live, uint64_t version, uint64_t cas)
{
    switch (mode) {
    case RKV_SET: return RKV_OK;
    case RKV_ADD: return live ? RKV_EXISTS : RKV_OK;
    case RKV_REPLACE: return live ? RKV_OK : RKV_NOT_STORED;
    case RKV_CAS:
        if (!live)
            return RKV_NOT_STORED;
        return version == cas ? RKV_OK : RKV_CAS_MISMATCH;
    }
    return RKV_INVALID;
}

/* One store's index part: what to publish, for which key, on what condition. */
struct store {
    struct rkv_key_hash *h;
    const void *key;
    uint32_t key_len;
    struct built nb; /* the new item */
    rkv_put_mode mode;
    uint64_t cas;
    enum stripe_counter op; /* SC_PUTS or SC_INCRS, counted when it is stored */
    uint64_t keep;          /* meta state bits the new item takes over from the live item it
                               replaces, read as it is replaced (rkv_table_put_keep) */
    uint64_t replaced;      /* out: the item it replaced, to free once unlocked; 0 if none */
};

/* The index part of a store, under the key's stripes (and a path's, with
 * room->path) or the whole index: check the mode against what the index
 * holds, publish the new item, obsolete and free the old one. *again when
 * the key is new and no slot could be had with what is held: nothing
 * changed. */
static rkv_status store_locked(struct rkv_table *t, struct store *w, const struct room *room,
                               bool *again)
{
    struct place old, p;
    bool found = rkv_table_index_find(t, w->h, w->key, w->key_len, &old);
    bool live = found && !expired_now(t, old.it);
    rkv_status st = mode_check(w->mode, live, live ? rkv_item_version(old.it) : 0, w->cas);
    *again = false;
    if (st != RKV_OK)
        return st;
    if (found) {
        /* The meta state it keeps is read here, under the stripes that every
         * change of it (rkv_table_set_state) holds: a win token handed out
         * while the new item was being built (its allocation may have waited
         * for a page move) goes over with it. */
        struct built nb = w->nb;
        uint64_t keep = live ? w->keep & RKV_ITEM_LIVE_MASK : 0;
        nb.state = (nb.state & ~keep) | (rkv_item_state(old.it) & keep);
        /* a new value of a live key keeps its uses: an update is no reason to
         * put a read item back on probation */
        publish(t, old.bucket, old.slot, &nb, live ? rkv_evict_item_uses(t, old.word) : 0);
        /* Superseded: the forward and the OBSOLETE mark go out in one store,
         * so a client holding the old location follows it with one READ.
         * Expired: readers must miss, not follow. */
        retire_mark(t, old.bucket, old.word,
                    live ? rkv_item_state_forward(w->nb.word) : RKV_ITEM_OBSOLETE);
        if (!live)
            count(&writer_slot(t)->n.expirations, 1);
        w->replaced = old.word;
        stripe_count(t, old.bucket, w->op, 1);
        return RKV_OK;
    }
    if (index_make_room(t, w->h, room, &p)) {
        publish(t, p.bucket, p.slot, &w->nb, rkv_ghost_take(t, w->h->h64) ? 1 : 0);
        stripe_count(t, p.bucket, w->op, 1);
        return RKV_OK;
    }
    *again = !room->exclusive || !room->may_evict;
    return RKV_OUT_OF_MEMORY;
}

/* store_locked() with the least locking that finds room: the key's two
 * stripes; for a new key whose buckets are full, a displacement path found
 * without locks and carried out under its stripes (PATH_TRIES times when
 * other writers invalidate it); then the whole index. */
static rkv_status store_index(struct rkv_table *t, struct store *w)
{
    struct stripe_set set;
    struct cuckoo_path path;
    struct room room = { 0 };
    bool again;

    struct stripe_hold hold = key_lock(t, w->key, w->key_len, w->h, &set);
    rkv_status st = store_locked(t, w, &room, &again);
    stripes_unlock(t, &set, hold);

    bool search = __atomic_load_n(&t->path_skip, __ATOMIC_RELAXED) == 0;
    for (unsigned tries = 0;
         again && search && tries < PATH_TRIES && cuckoo_find_path(t, w->h, &path); tries++) {
        room.path = &path;
        path_stripes(t, w->h, &path, &set);
        hold = stripes_lock(t, &set);
        if (table_hash_current(t, w->h))
            st = store_locked(t, w, &room, &again);
        stripes_unlock(t, &set, hold);
        if (!table_hash_current(t, w->h)) /* split meanwhile: the key's buckets may be others */
            table_hash(t, w->key, w->key_len, w->h);
    }
    if (again) {
        /* Both buckets full and no path found without it: with the whole
         * index, more buckets first (GROW_TRIES steps at most: the key's
         * own buckets split only when the split pointer reaches them, so
         * one unlucky key must not double the index); then a search and
         * (with eviction) an evicted neighbour. */
        room = (struct room){ .exclusive = true };
        uint64_t since = rkv_table_index_lock_all(t);
        for (unsigned grown = 0; again; grown++) {
            room.may_evict = grown == GROW_TRIES || rkv_index_grow(t, rkv_index_grow_step(t)) == 0;
            if (!table_hash_current(t, w->h))
                table_hash(t, w->key, w->key_len, w->h);
            st = store_locked(t, w, &room, &again);
        }
        rkv_table_index_unlock_all(t, since);
    }
    if (w->replaced != 0)
        item_free(t, w->replaced);
    return st;
}

/* After a new key: once every GROW_CHECK of this writer slot's new keys,
 * grow the index if it is loaded past RKV_INDEX_GROW_LOAD (summing the
 * stripes' item counts is too dear for every insert). Holding no lock. */
static void grow_check(struct rkv_table *t)
{
    struct writer_slot *ws = writer_slot(t);
    if (RKV_LIKELY(++ws->inserts % GROW_CHECK != 0) ||
        !rkv_index_wants_growth(t, stripe_sum(t, SC_ITEMS)))
        return;
    uint64_t since = rkv_table_index_lock_all(t);
    if (rkv_index_wants_growth(t, stripe_sum(t, SC_ITEMS)))
        rkv_index_grow(t, rkv_index_grow_step(t));
    rkv_table_index_unlock_all(t, since);
}

/* Ask for the key's two bucket lines and their stripes' lock lines (to
 * write) before the item is built, so that their misses overlap the building
 * instead of lengthening the stripe hold that needs them: with several
 * writers, a stripe's line is as likely as not in another core's cache. */
static void prefetch_buckets(const struct rkv_table *t, const struct rkv_key_hash *h)
{
    for (unsigned i = 0; i < 2; i++) {
        rkv_prefetch_write(&t->buckets[h->bucket[i]]);
        rkv_prefetch_write(&t->stripes[h->bucket[i] & t->stripe_mask]);
    }
}

/* ... and, once they are in, the first line of each item whose fingerprint
 * matches (read racily: a hint; rkv_table_index_find decides under the stripes). */
static void prefetch_matches(const struct rkv_table *t, const struct rkv_key_hash *h)
{
    for (unsigned i = 0; i < 2; i++) {
        const struct rkv_bucket *b = &t->buckets[h->bucket[i]];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t w = slot_load(b, s);
            if (w != 0 && rkv_slot_fp(w) == h->fp)
                rkv_prefetch_write(item_at(t, w));
        }
    }
}

/* Store key -> value with an absolute expiry: build the item, store it in
 * the index, then evict ahead if the heap is full. */
static rkv_status table_store(struct rkv_table *t, const void *key, uint32_t key_len,
                              const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                              uint32_t expire_at, uint32_t user_flags, uint64_t state,
                              uint64_t keep, enum stripe_counter op, uint64_t *version)
{
    struct rkv_key_hash h;
    struct store w = {
        .h = &h, .key = key, .key_len = key_len, .mode = mode, .cas = cas, .op = op, .keep = keep
    };

    table_hash(t, key, key_len, &h);
    prefetch_buckets(t, &h);
    rkv_status st = item_build(t, &h, key, key_len, val, expire_at, user_flags, state, &w.nb);
    if (st != RKV_OK)
        goto fail;
    prefetch_matches(t, &h);
    if ((st = store_index(t, &w)) != RKV_OK) {
        rkv_slab_free(t->slab, w.nb.cls, rkv_slot_offset(w.nb.word)); /* never published */
        goto fail;
    }
    if (w.replaced == 0)
        grow_check(t);
    rkv_evict_ahead(t, w.nb.cls, w.nb.word);
    if (version)
        *version = w.nb.version;
    return RKV_OK;

fail:
    if (st == RKV_OUT_OF_MEMORY)
        count(&writer_slot(t)->n.insert_failures, 1);
    return st;
}

static uint32_t expiry_for(const struct rkv_table *t, uint32_t ttl)
{
    if (ttl == 0)
        ttl = t->cfg.default_ttl;
    if (ttl == 0)
        return 0;
    uint64_t at = (uint64_t)rkv_table_clock(t) + ttl;
    return at > UINT32_MAX ? UINT32_MAX : (uint32_t)at;
}

/* Unlink key's item under its stripes; with `if_version`, only the live
 * item of version `cas` (an expired one goes either way: it is dead). */
static rkv_status table_unlink(struct rkv_table *t, const void *key, uint32_t key_len,
                               bool if_version, uint64_t cas)
{
    struct rkv_key_hash h;
    struct place p;
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    table_hash(t, key, key_len, &h);

    struct stripe_set set;
    struct stripe_hold hold = key_lock(t, key, key_len, &h, &set);
    bool found = rkv_table_index_find(t, &h, key, key_len, &p);
    st = RKV_NOT_FOUND;
    if (found) {
        if (expired_now(t, p.it)) {
            count(&writer_slot(t)->n.expirations, 1);
        } else if (if_version && rkv_item_version(p.it) != cas) {
            found = false; /* another write's item: it stays */
            st = RKV_CAS_MISMATCH;
        } else {
            st = RKV_OK;
            stripe_count(t, p.bucket, SC_DELETES, 1);
        }
    }
    if (found) {
        slot_store(t, p.bucket, p.slot, 0);
        retire_mark(t, p.bucket, p.word, RKV_ITEM_OBSOLETE);
    }
    stripes_unlock(t, &set, hold);
    if (found)
        item_free(t, p.word); /* see retire_mark */
    return st;
}

rkv_status rkv_table_put(struct rkv_table *t, const void *key, uint32_t key_len,
                         const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                         uint32_t ttl, uint32_t user_flags, uint64_t *version)
{
    return rkv_table_put_state(t, key, key_len, val, mode, cas, ttl, user_flags,
                               rkv_item_state_live(0, rkv_table_clock(t)), version);
}

rkv_status rkv_table_put_state(struct rkv_table *t, const void *key, uint32_t key_len,
                               const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                               uint32_t ttl, uint32_t user_flags, uint64_t state, uint64_t *version)
{
    return rkv_table_put_keep(t, key, key_len, val, mode, cas, ttl, user_flags, 0, state, version);
}

rkv_status rkv_table_put_keep(struct rkv_table *t, const void *key, uint32_t key_len,
                              const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                              uint32_t ttl, uint32_t user_flags, uint64_t keep, uint64_t state,
                              uint64_t *version)
{
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    if (val == NULL || (val->len > 0 && val->data == NULL && val->pull == NULL) ||
        (unsigned)mode > RKV_CAS)
        return RKV_INVALID;
    uint32_t expire_at = ttl == RKV_TTL_NEVER ? 0 : expiry_for(t, ttl);
    st = val->len > value_room(t, key_len) ? RKV_TOO_LARGE
                                           : table_store(t, key, key_len, val, mode, cas, expire_at,
                                                         user_flags, state, keep, SC_PUTS, version);
    /* A SET refused for size or memory drops the value it was to replace,
     * as memcached's set does: the writer meant that value gone, and no
     * reader may go on getting it (design.md invariant 7). The conditional
     * modes leave the old item: their writer still relies on it. */
    if (mode == RKV_SET && (st == RKV_TOO_LARGE || st == RKV_OUT_OF_MEMORY))
        table_unlink(t, key, key_len, false, 0);
    return st;
}

rkv_status rkv_table_delete(struct rkv_table *t, const void *key, uint32_t key_len)
{
    return table_unlink(t, key, key_len, false, 0);
}

rkv_status rkv_table_delete_version(struct rkv_table *t, const void *key, uint32_t key_len,
                                    uint64_t version)
{
    return table_unlink(t, key, key_len, true, version);
}

/* A change of a live item's state word: the word it gets, from the word it
 * has (only RKV_ITEM_LIVE_MASK bits change). */
typedef uint64_t state_change_fn(const struct rkv_table *t, const struct rkv_item *it, uint64_t old,
                                 const void *arg);

/* Under the key's stripes, apply `change` to the live item of `version`;
 * *before and *after (may be NULL) get its state word around the change.
 * Live and in the index, only this stripe's holders write the word. */
static rkv_status state_update(struct rkv_table *t, const void *key, uint32_t key_len,
                               uint64_t version, state_change_fn *change, const void *arg,
                               uint64_t *before, uint64_t *after)
{
    struct rkv_key_hash h;
    struct place p;
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    table_hash(t, key, key_len, &h);

    struct stripe_set set;
    struct stripe_hold hold = key_lock(t, key, key_len, &h, &set);
    st = RKV_NOT_FOUND;
    if (rkv_table_index_find(t, &h, key, key_len, &p) && !expired_now(t, p.it)) {
        st = RKV_CAS_MISMATCH;
        if (rkv_item_version(p.it) == version) {
            uint64_t old = rkv_item_state(p.it);
            uint64_t next = (old & ~RKV_ITEM_LIVE_MASK) |
                            (change(t, p.it, old, arg) & RKV_ITEM_LIVE_MASK);
            if (next != old)
                rkv_item_set_state(p.it, next);
            if (before)
                *before = old;
            if (after)
                *after = next;
            st = RKV_OK;
        }
    }
    stripes_unlock(t, &set, hold);
    return st;
}

/* rkv_table_set_state's change: arg is { clear, set }. */
static uint64_t state_clear_set(const struct rkv_table *t, const struct rkv_item *it, uint64_t old,
                                const void *arg)
{
    (void)t;
    (void)it;
    const uint64_t *cs = arg;
    return (old & ~cs[0]) | cs[1];
}

rkv_status rkv_table_set_state(struct rkv_table *t, const void *key, uint32_t key_len,
                               uint64_t version, uint64_t clear, uint64_t set, uint64_t *before)
{
    const uint64_t cs[2] = { clear & RKV_ITEM_LIVE_MASK, set & RKV_ITEM_LIVE_MASK };
    return state_update(t, key, key_len, version, state_clear_set, cs, before, NULL);
}

/* Is the live item `it` due for a recache: stale, or expiring less than
 * recache_ttl seconds from now (0: never for its TTL; mg R's rule)? */
static bool recache_due(const struct rkv_table *t, const struct rkv_item *it, uint64_t state,
                        uint32_t recache_ttl)
{
    uint32_t now = rkv_table_clock(t), expire_at = rkv_item_expire_at(it);
    return (state & RKV_ITEM_STALE) != 0 ||
           (recache_ttl != 0 && expire_at != 0 && expire_at - now < recache_ttl);
}

/* rkv_table_claim's change, the test-and-set of WON the door's mg makes
 * (rkv_table_set_state): won if not yet taken and due; arg is recache_ttl. */
static uint64_t state_claim(const struct rkv_table *t, const struct rkv_item *it, uint64_t old,
                            const void *arg)
{
    const uint32_t *recache_ttl = arg;
    if ((old & RKV_ITEM_WON) || !recache_due(t, it, old, *recache_ttl))
        return old;
    return old | RKV_ITEM_WON;
}

rkv_status rkv_table_claim(struct rkv_table *t, const void *key, uint32_t key_len, uint64_t version,
                           uint32_t recache_ttl, uint32_t *marks)
{
    uint64_t old = 0, next = 0;
    rkv_status st = state_update(t, key, key_len, version, state_claim, &recache_ttl, &old, &next);
    *marks = 0;
    if (st != RKV_OK)
        return st;
    *marks = (old & RKV_ITEM_STALE) ? RKV_MARK_STALE : 0;
    if (old & RKV_ITEM_WON)
        *marks |= RKV_MARK_TAKEN;
    else if (next & RKV_ITEM_WON)
        *marks |= RKV_MARK_WON;
    return RKV_OK;
}

rkv_status rkv_table_incr(struct rkv_table *t, const void *key, uint32_t key_len, int64_t delta,
                          uint64_t *result)
{
    struct rkv_key_hash h;
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    table_hash(t, key, key_len, &h);

    /* Read under the key's stripes, build the new item without them, and
     * publish only if the item is still the one we read (a CAS on its
     * version). */
    struct stripe_set set;
    for (unsigned tries = 0; tries < INCR_TRIES; tries++) {
        struct place p;
        uint64_t cur = 0, version = 0;
        uint32_t expire_at = 0, flags = 0;

        struct stripe_hold hold = key_lock(t, key, key_len, &h, &set);
        st = RKV_NOT_FOUND;
        if (rkv_table_index_find(t, &h, key, key_len, &p) && !expired_now(t, p.it)) {
            st = rkv_parse_counter(rkv_item_value(p.it), rkv_item_value_len(p.it), &cur)
                     ? RKV_OK
                     : RKV_NOT_NUMBER;
            version = rkv_item_version(p.it);
            expire_at = rkv_item_expire_at(p.it);
            flags = rkv_item_user_flags(p.it);
        }
        stripes_unlock(t, &set, hold);
        if (st != RKV_OK)
            return st;

        uint64_t next;
        if (delta >= 0)
            next = cur + (uint64_t)delta; /* wraps at 2^64, as memcached does */
        else {
            uint64_t down = (uint64_t)(-(delta + 1)) + 1;
            next = cur > down ? cur - down : 0;
        }
        char text[DECIMAL_MAX_LEN + 1];
        int len = snprintf(text, sizeof(text), "%llu", (unsigned long long)next);
        struct rkv_value_src src = { .data = text, .len = (uint32_t)len };
        st = table_store(t, key, key_len, &src, RKV_CAS, version, expire_at, flags,
                         rkv_item_state_live(0, rkv_table_clock(t)), 0, SC_INCRS, NULL);
        if (st == RKV_CAS_MISMATCH)
            continue; /* another write got in between: again */
        if (st == RKV_NOT_STORED)
            return RKV_NOT_FOUND; /* deleted or expired meanwhile */
        if (st == RKV_OK && result)
            *result = next;
        return st;
    }
    return RKV_SERVER_BUSY;
}

/* Access word *m read at clock `now` (rkv_access_read); written only when
 * it changes, so a hot item read again stays a clean line. */
static void access_read(const struct rkv_table *t, uint32_t *m, uint32_t now)
{
    uint32_t old = __atomic_load_n(m, __ATOMIC_RELAXED), w = rkv_access_read(t, old, now);
    if (w != old)
        __atomic_store_n(m, w, __ATOMIC_RELAXED);
}

/* Stamp the item of slot word `word` as just read (its access word, with
 * lru and s3fifo; nothing without). */
static void access_stamp(struct rkv_table *t, uint64_t word)
{
    uint32_t *m = rkv_slab_meta(t->slab, rkv_slot_offset(word), rkv_slot_class(word));
    if (m != NULL)
        access_read(t, m, __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED));
}

/* The live item of key under its stripes, or NULL (*expired, when not NULL:
 * whether an expired item was all there was); `used`: stamped as an access
 * while it is sure to be the key's. */
static const struct rkv_item *table_find(struct rkv_table *t, const void *key, uint32_t key_len,
                                         bool used, bool *expired)
{
    struct rkv_key_hash h;
    struct place p;
    const struct rkv_item *it = NULL;
    if (expired != NULL)
        *expired = false;
    if (check_key(t, key, key_len) != RKV_OK)
        return NULL;
    table_hash(t, key, key_len, &h);
    struct stripe_set set;
    struct stripe_hold hold = key_lock(t, key, key_len, &h, &set);
    if (rkv_table_index_find(t, &h, key, key_len, &p)) {
        if (!expired_now(t, p.it)) {
            it = p.it;
            if (used)
                access_stamp(t, p.word);
        } else if (expired != NULL) {
            *expired = true;
        }
    }
    stripes_unlock(t, &set, hold);
    return it;
}

const struct rkv_item *rkv_table_find(struct rkv_table *t, const void *key, uint32_t key_len)
{
    return table_find(t, key, key_len, false, NULL);
}

const struct rkv_item *rkv_table_find_live(struct rkv_table *t, const void *key, uint32_t key_len,
                                           bool *expired)
{
    return table_find(t, key, key_len, false, expired);
}

const struct rkv_item *rkv_table_read(struct rkv_table *t, const void *key, uint32_t key_len,
                                      bool *expired)
{
    return table_find(t, key, key_len, true, expired);
}

/* The access word of the item a hint names, or NULL; *valid says whether the
 * hint named an item at all. The word came from the network: the allocator
 * checks that it names an item of a page of that class before anything is
 * stamped (rkv_slab_meta() validates as rkv_slab_valid() does; without
 * LRU's words, or while a moved page's words change, only the latter says). */
static uint32_t *hint_word(struct rkv_table *t, uint64_t slot, bool *valid)
{
    unsigned cls = rkv_slot_class(slot);
    uint64_t off = rkv_slot_offset(slot);
    uint32_t *m = NULL;
    *valid = false;
    if (slot == 0 || rkv_slot_fp(slot) == 0)
        return NULL;
    m = rkv_slab_meta(t->slab, off, cls);
    *valid = m != NULL || rkv_slab_valid(t->slab, off, cls);
    return m;
}

/* Validate up to HINT_BATCH hints and prefetch their items' access words,
 * then stamp them: the words are random lines, so their misses overlap
 * instead of following one another. A word that already holds the clock is
 * only read (a hot item hinted again stays a clean line, as memcached bumps
 * an item once per interval). Returns how many hints were valid. */
static unsigned hint_batch(struct rkv_table *t, const uint8_t *hints, unsigned n)
{
    uint32_t *words[HINT_BATCH];
    unsigned valid = 0, k = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t slot;
        bool ok;
        memcpy(&slot, hints + (size_t)i * sizeof slot, sizeof slot);
        uint32_t *m = hint_word(t, slot, &ok);
        valid += ok;
        if (m != NULL) {
            __builtin_prefetch(m, 1, 3);
            words[k++] = m;
        }
    }
    uint32_t now = __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < k; i++)
        access_read(t, words[i], now);
    return valid;
}

void rkv_table_hints(struct rkv_table *t, const void *hints, size_t n)
{
    const uint8_t *p = hints;
    uint64_t valid = 0;
    for (size_t done = 0; done < n; done += HINT_BATCH)
        valid += hint_batch(t, p + done * sizeof(uint64_t), (unsigned)RKV_MIN(n - done, HINT_BATCH));
    /* the shared counters' line is written once per request, not per hint */
    if (valid > 0)
        count(&writer_slot(t)->n.hints, (int64_t)valid);
    if (n > valid)
        count(&writer_slot(t)->n.hints_ignored, (int64_t)(n - valid));
}

uint32_t rkv_table_access_age(struct rkv_table *t, uint64_t slot)
{
    return rkv_evict_item_age(t, slot);
}

/* ------------------------------------------------------------ clock */

/* Remove expired items from the expired bucket itself: a removal changes
 * only that bucket, so its stripe is all it takes. */
static void expire_bucket(struct rkv_table *t, uint64_t bucket, uint32_t now)
{
    struct stripe_set set = { .n = 1, .s = { bucket & t->stripe_mask } };
    struct rkv_bucket *b = &t->buckets[bucket];
    struct stripe_hold hold = stripes_lock(t, &set);
    for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
        uint64_t w = b->slot[s];
        if (w != 0 && expired(item_at(t, w), now)) {
            struct place p = { .bucket = b, .slot = s, .word = w };
            rkv_table_index_remove(t, &p);
            count(&writer_slot(t)->n.expirations, 1);
        }
    }
    stripes_unlock(t, &set, hold);
}

/* Remove expired items from the next stretch of buckets, one bucket per
 * stripe hold, so that the whole index is swept every ~16 ticks. The
 * stretch is claimed with one atomic add: ticks may run on several threads. */
static void expire_scan(struct rkv_table *t, uint32_t now)
{
    struct rkv_index_geom g = table_geom(t); /* buckets only grow: a stale count is in range */
    uint64_t count = rkv_index_count(&g);
    uint64_t budget = RKV_MIN(count, RKV_MAX(EXPIRE_MIN_SCAN, count / 16));
    uint64_t first = __atomic_fetch_add(&t->expire_cursor, budget, __ATOMIC_RELAXED);
    for (uint64_t i = 0; i < budget; i++)
        expire_bucket(t, (first + i) % count, now);
}

/* ------------------------------------------------------------ flush */

/* The version of the moment `ns` (rkv_now_ns's time): every item built
 * before it has a smaller one, every item built after a larger one (a
 * writer slot's versions run ahead of the time only within one ns). */
static uint64_t version_at(const struct rkv_table *t, uint64_t ns)
{
    return t->version_floor +
           (ns > t->version_base ? (ns - t->version_base) * RKV_THREAD_SLOTS + RKV_THREAD_SLOTS - 1
                                 : 0);
}

/* A version at least that of every item stored so far: the time's, or a
 * writer slot's last one where it ran ahead. */
static uint64_t version_now(const struct rkv_table *t)
{
    uint64_t v = version_at(t, rkv_now_ns());
    for (unsigned i = 0; i < RKV_THREAD_SLOTS; i++)
        v = RKV_MAX(v, __atomic_load_n(&t->writer_slots[i].last_version, __ATOMIC_RELAXED));
    return v;
}

/* Remove the item at `off` of class cls if the index holds it and its
 * version is at most `upto`. It is looked for under its key's stripes (the
 * index shared): without them, a displacement or a split could move its
 * slot between the buckets while they are searched, and the flush would
 * miss a live item. The key is copied first: the memory may be freed and
 * reused meanwhile, and a key read twice could hash and compare apart (then
 * no slot points here for that key, and nothing is removed). True when
 * removed. */
static bool flush_item(struct rkv_table *t, uint64_t off, unsigned cls, uint64_t upto)
{
    const uint8_t *at;
    uint8_t key[RKV_MAX_KEY_LEN];
    uint32_t key_len;
    if (!key_at(t, off, cls, &at, &key_len))
        return false;
    memcpy(key, at, key_len);
    struct rkv_key_hash h;
    struct stripe_set set;
    struct place p;
    table_hash(t, key, key_len, &h);
    struct stripe_hold hold = key_lock(t, key, key_len, &h, &set);
    bool gone = slot_at(t, &h, off, cls, &p) && rkv_item_version(p.it) <= upto;
    if (gone)
        rkv_table_index_remove(t, &p);
    stripes_unlock(t, &set, hold);
    return gone;
}

/* Remove every item of version at most `upto`, walking the heap page by
 * page rather than the index: the index moves items between buckets
 * (displacement) while the walk goes on, and one could move from a bucket
 * not yet swept to one already swept; in memory items never move, so the
 * walk meets each exactly once. A removal is a delete's (OBSOLETE, then the
 * limbo), so a one-sided reader that holds the item's location fails its
 * verification and finds the index empty (design.md invariant 8). Writers
 * go on meanwhile: an item built after the flush began has a larger version
 * and stays. Returns the items removed. */
static uint64_t flush_sweep(struct rkv_table *t, uint64_t upto)
{
    uint64_t removed = 0, pages = rkv_slab_page_count(t->slab);
    for (uint64_t pg = 0; pg < pages; pg++) {
        struct rkv_slab_page_info pi;
        if (!rkv_slab_page_info(t->slab, pg, &pi))
            continue;
        for (uint32_t i = 0; i < pi.handed; i++)
            removed += flush_item(t, pi.start + (uint64_t)i * pi.size, pi.cls, upto);
    }
    count(&writer_slot(t)->n.flushed, (int64_t)removed);
    return removed;
}

uint64_t rkv_table_flush(struct rkv_table *t, uint32_t delay_s)
{
    if (delay_s > 0) {
        uint64_t at = t->now_ns() + (uint64_t)delay_s * RKV_NS_PER_S;
        __atomic_store_n(&t->flush_at_ns, at, __ATOMIC_RELAXED);
        return 0;
    }
    __atomic_store_n(&t->flush_at_ns, 0, __ATOMIC_RELAXED); /* a flush now replaces it */
    return flush_sweep(t, version_now(t));
}

/* A scheduled flush whose time has come: the items built before that time
 * go, however late the tick that runs it (the time is taken back by the
 * tick's lateness into rkv_now_ns's time, which versions count in). */
static void flush_due(struct rkv_table *t)
{
    uint64_t at = __atomic_load_n(&t->flush_at_ns, __ATOMIC_RELAXED), now = t->now_ns();
    if (at == 0 || now < at ||
        !__atomic_compare_exchange_n(&t->flush_at_ns, &at, 0, false, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return;
    uint64_t real = rkv_now_ns(), late = now - at;
    flush_sweep(t, version_at(t, real > late ? real - late : 0));
}

void rkv_table_tick(struct rkv_table *t)
{
    uint32_t now = rkv_table_clock(t);
    if (now > __atomic_load_n(&t->hdr->clock, __ATOMIC_RELAXED))
        __atomic_store_n(&t->hdr->clock, now, __ATOMIC_RELEASE);
    flush_due(t);
    expire_scan(t, now);
    for (unsigned cls = 0; cls < rkv_slab_class_count(t->slab); cls++)
        rkv_slab_drain(t->slab, cls); /* items freed by threads that stopped writing come back */
    rkv_evict_tick(t, stripe_sum(t, SC_ITEMS));
    rkv_page_automove(t);
}

/* The table's counters: every writer slot's share, added up. */
static void counters_sum(const struct rkv_table *t, struct table_counters *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < RKV_THREAD_SLOTS; i++) {
        const struct table_counters *n = &t->writer_slots[i].n;
        out->evictions += __atomic_load_n(&n->evictions, __ATOMIC_RELAXED);
        out->expirations += __atomic_load_n(&n->expirations, __ATOMIC_RELAXED);
        out->insert_failures += __atomic_load_n(&n->insert_failures, __ATOMIC_RELAXED);
        out->hints += __atomic_load_n(&n->hints, __ATOMIC_RELAXED);
        out->hints_ignored += __atomic_load_n(&n->hints_ignored, __ATOMIC_RELAXED);
        out->flushed += __atomic_load_n(&n->flushed, __ATOMIC_RELAXED);
        out->alloc_waits += __atomic_load_n(&n->alloc_waits, __ATOMIC_RELAXED);
        out->alloc_wait_ms += __atomic_load_n(&n->alloc_wait_ms, __ATOMIC_RELAXED);
    }
}

void rkv_table_get_stats(struct rkv_table *t, struct rkv_table_stats *out)
{
    struct rkv_slab_stats ss;
    rkv_slab_stats(t->slab, &ss);
    memset(out, 0, sizeof(*out));
    out->items = stripe_sum(t, SC_ITEMS);
    out->bytes_used = ss.used;                             /* class bytes of items handed out */
    out->bytes_free = ss.ready + ss.fresh + ss.unassigned; /* what allocation can use now */
    out->heap_bytes = ss.heap;
    struct rkv_index_geom g = table_geom(t);
    out->buckets = rkv_index_count(&g);
    out->slots = out->buckets * RKV_SLOTS_PER_BUCKET;
    struct table_counters n;
    counters_sum(t, &n);
    out->evictions = n.evictions;
    out->expirations = n.expirations;
    out->displacements = stripe_sum(t, SC_DISPLACEMENTS);
    out->puts = stripe_sum(t, SC_PUTS);
    out->deletes = stripe_sum(t, SC_DELETES);
    out->incrs = stripe_sum(t, SC_INCRS);
    out->insert_failures = n.insert_failures;
    out->item_bytes = stripe_sum(t, SC_ITEM_BYTES);
    out->limbo_bytes = ss.limbo + ss.draining; /* items and moved pages inside grace_ms */
    out->tail_bytes = ss.tail;
    out->pages_unassigned = ss.pages_unassigned;
    out->hints = n.hints;
    out->hints_ignored = n.hints_ignored;
    out->flushed = n.flushed;
    out->alloc_waits = n.alloc_waits;
    out->alloc_wait_ms = n.alloc_wait_ms;
    out->slab_reassigns = ss.reassigns;
    if (t->lock_stats != NULL) {
        rkv_lock_stats_sum(&t->lock_stats[0].stripes, sizeof(t->lock_stats[0]), &out->lock_stripes);
        rkv_lock_stats_sum(&t->lock_stats[0].index, sizeof(t->lock_stats[0]), &out->lock_index);
    }
    rkv_slab_lock_stats(t->slab, &out->lock_slab);
}

void rkv_table_class_stats(struct rkv_table *t, unsigned cls, struct rkv_table_class_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (cls >= rkv_slab_class_count(t->slab))
        return;
    rkv_slab_class_stats(t->slab, cls, &out->slab);
    for (unsigned i = 0; i < RKV_THREAD_SLOTS; i++) {
        out->evicted += __atomic_load_n(&t->writer_slots[i].class_evicted[cls], __ATOMIC_RELAXED);
        out->evicted_ttl += __atomic_load_n(&t->writer_slots[i].class_evicted_ttl[cls],
                                            __ATOMIC_RELAXED);
    }
}

/* ------------------------------------------------------------ creation */

/* Fill in defaults and check the ranges; the message says what to change. */
static rkv_status resolve_config(const struct rkv_table_config *in, struct rkv_table_config *c,
                                 char *err, size_t err_len)
{
    *c = in ? *in : (struct rkv_table_config){ 0 };
    if (c->slab_page_size == 0)
        c->slab_page_size = DEFAULT_PAGE_SIZE;
    if (c->max_key_len == 0)
        c->max_key_len = RKV_MAX_KEY_LEN;
    if (c->growth_factor == 0)
        c->growth_factor = RKV_TABLE_GROWTH;
    if (c->grace_ms == 0)
        c->grace_ms = DEFAULT_GRACE_MS;
    if (c->item_size_hint == 0)
        c->item_size_hint = DEFAULT_ITEM_SIZE_HINT;

    if (c->slab_page_size < MIN_PAGE_SIZE || c->slab_page_size > MAX_PAGE_SIZE ||
        c->slab_page_size % RKV_ITEM_ALIGN != 0) {
        snprintf(err, err_len,
                 "slab page size %u is out of range; use a multiple of %u between "
                 "%u and %u (default %u)",
                 c->slab_page_size, RKV_ITEM_ALIGN, MIN_PAGE_SIZE, MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE);
        return RKV_INVALID;
    }
    if (c->max_key_len > RKV_MAX_KEY_LEN) {
        snprintf(err, err_len, "max key length %u is above the format's limit of %u bytes",
                 c->max_key_len, RKV_MAX_KEY_LEN);
        return RKV_INVALID;
    }
    uint32_t room = c->slab_page_size - RKV_ITEM_HEADER_MAX - c->max_key_len;
    if (c->max_value_len == 0)
        c->max_value_len = room;
    if (c->max_value_len > room) {
        snprintf(err, err_len,
                 "max value length %u does not fit one %u-byte slab page with a "
                 "%u-byte key and the item header of up to %u bytes; raise the slab page size to at "
                 "least %llu or lower the max value length to %u",
                 c->max_value_len, c->slab_page_size, c->max_key_len, RKV_ITEM_HEADER_MAX,
                 (unsigned long long)RKV_ALIGN_UP((uint64_t)c->max_value_len + RKV_ITEM_HEADER_MAX +
                                                      c->max_key_len,
                                                  RKV_ITEM_ALIGN),
                 room);
        return RKV_INVALID;
    }
    if (!(c->index_share >= 0 && c->index_share <= MAX_INDEX_SHARE)) {
        snprintf(err, err_len,
                 "index share %g is out of range; use 0 (automatic) or a fraction "
                 "up to %g",
                 c->index_share, MAX_INDEX_SHARE);
        return RKV_INVALID;
    }
    if (c->item_size_hint < RKV_MIN_ITEM_SIZE) {
        snprintf(err, err_len,
                 "item size hint %u is below the smallest item, %u bytes (the header and a "
                 "1-byte key)",
                 c->item_size_hint, RKV_MIN_ITEM_SIZE);
        return RKV_INVALID;
    }
    if (c->grace_ms > RKV_SLAB_MAX_GRACE_MS) {
        snprintf(err, err_len,
                 "grace period %u ms is above the %u ms limit; reads take "
                 "microseconds, so 100 ms is plenty",
                 c->grace_ms, RKV_SLAB_MAX_GRACE_MS);
        return RKV_INVALID;
    }
    if ((unsigned)c->evict > RKV_EVICT_S3FIFO) {
        snprintf(err, err_len, "unknown eviction policy %u; use none, lru, random or s3fifo",
                 (unsigned)c->evict);
        return RKV_INVALID;
    }
    return RKV_OK;
}

/* The buckets an index starts with: index_start when given (at most the
 * `area` plan_layout left it before the heap); all of that area when an
 * item size hint or an index share sized it; else a 1/INDEX_START_SHARE of
 * it (two buckets at least), which grows there first. */
static uint64_t index_base_for(const struct rkv_table_config *in, uint64_t area)
{
    if (in != NULL && in->index_start != 0)
        return RKV_MIN(area, RKV_MAX(in->index_start, 2));
    if (in != NULL && (in->item_size_hint != 0 || in->index_share != 0))
        return area;
    return RKV_MAX(area / INDEX_START_SHARE, RKV_MIN(area, 2));
}

static uint64_t pow2_floor(uint64_t x)
{
    return x ? 1ull << (63 - __builtin_clzll(x)) : 0;
}

/* Where a heap of `pages` pages starts when it ends at the region's end (or
 * up to HEAP_ALIGN - 1 bytes before). */
static uint64_t heap_start(uint64_t size, uint64_t pages, uint32_t page_size)
{
    return (size - RKV_MIN(size, pages * page_size)) / HEAP_ALIGN * HEAP_ALIGN;
}

/* Where the region's bytes go (plan_layout). */
struct layout {
    uint64_t area;        /* buckets that fit between the header and the heap */
    uint64_t capacity;    /* buckets the index may grow to, into the heap's lowest pages */
    uint64_t heap_offset; /* first slab page */
    uint64_t heap_size;   /* whole slab pages up to the region's end */
};

/* Split the region: header page, index, heap. The heap is whole slab pages
 * and ends at the region's end (or up to HEAP_ALIGN - 1 bytes before); the
 * index gets what is left before it. By default that is less than one slab
 * page: the index starts small and grows into the heap's lowest pages as
 * items need buckets (index_grow.c), up to INDEX_MAX_SHARE of the region.
 * An item size hint (`in`: the configuration as given) sizes it at start to
 * about one slot per item_size_hint heap bytes, and it may grow from there;
 * an explicit index_share is a ceiling on the index, which then never grows
 * into the heap, and the heap gets every page that fits beside it. */
static rkv_status plan_layout(size_t size, const struct rkv_table_config *c,
                              const struct rkv_table_config *in, struct layout *out, char *err,
                              size_t err_len)
{
    const uint64_t bucket = sizeof(struct rkv_bucket);
    const double per_slot = (double)bucket / RKV_SLOTS_PER_BUCKET; /* index bytes per slot */
    char sz[32];
    uint64_t b, off, pages;

    if ((uint64_t)size > MAX_REGION_BYTES) {
        snprintf(err, err_len,
                 "region of %s is above the %llu TiB that slot words can address; "
                 "shard over several servers",
                 rkv_format_size(size, sz, sizeof(sz)), (unsigned long long)(MAX_REGION_BYTES >> 40));
        return RKV_INVALID;
    }
    if (size < RKV_HEADER_SIZE + 2 * bucket)
        goto too_small;
    if (c->index_share > 0) {
        b = RKV_MAX((uint64_t)(c->index_share * (double)size + 0.5) / bucket, 2);
        while (b > 2 &&
               RKV_ALIGN_UP(RKV_HEADER_SIZE + b * bucket, HEAP_ALIGN) + c->slab_page_size > size)
            b /= 2; /* the index left no room for the heap */
        off = RKV_ALIGN_UP(RKV_HEADER_SIZE + b * bucket, HEAP_ALIGN);
        if (off + c->slab_page_size > size)
            goto too_small;
        pages = (size - off) / c->slab_page_size;
        *out = (struct layout){ b, b, off, pages * c->slab_page_size };
        return RKV_OK;
    }
    uint64_t room = size - RKV_HEADER_SIZE, index = 0;
    if (in != NULL && in->item_size_hint != 0)
        index = (uint64_t)((double)room * per_slot / (per_slot + c->item_size_hint));
    pages = (room - RKV_MIN(index, room)) / c->slab_page_size;
    while (pages > 0 && heap_start(size, pages, c->slab_page_size) < RKV_HEADER_SIZE + 2 * bucket)
        pages--; /* the index has two buckets at least */
    if (pages == 0)
        goto too_small;
    off = heap_start(size, pages, c->slab_page_size);
    b = (off - RKV_HEADER_SIZE) / bucket;
    uint64_t most = RKV_MIN((uint64_t)((double)size * INDEX_MAX_SHARE) / bucket,
                            (off + pages * c->slab_page_size - RKV_HEADER_SIZE) / bucket);
    *out = (struct layout){ b, RKV_MAX(b, most), off, pages * c->slab_page_size };
    return RKV_OK;

too_small:
    snprintf(err, err_len,
             "region of %s is too small for the header, an index and one %u-byte "
             "slab page; give it at least %u bytes or use smaller slab pages",
             rkv_format_size(size, sz, sizeof(sz)), c->slab_page_size,
             2 * HEAP_ALIGN + c->slab_page_size);
    return RKV_INVALID;
}

/* The stripes (one per bucket up to STRIPES_MAX), the mode slots and the
 * exclusive mutex. A waiting exclusive taker turns new shared takers away,
 * so eviction and page moves are not starved by a steady stream of writes. */
static rkv_status locks_init(struct rkv_table *t, char *err, size_t err_len)
{
    uint64_t n = pow2_floor(RKV_MIN(t->index_capacity, STRIPES_MAX)); /* stripe_mask */
    size_t timing = RKV_THREAD_SLOTS * sizeof(t->lock_stats[0]);
    t->stripes = aligned_alloc(RKV_CACHELINE, n * sizeof(t->stripes[0]));
    /* zeroed, in a mapping of its own: only the slots of threads that write
     * are ever touched (each holds per-class counters: 3 KiB) */
    t->writer_slots = rkv_zeroed_map(WRITER_SLOTS_BYTES);
    if (t->cfg.lock_timing && (t->lock_stats = aligned_alloc(RKV_CACHELINE, timing)) != NULL)
        memset(t->lock_stats, 0, timing);
    if (t->stripes == NULL || t->writer_slots == NULL ||
        (t->cfg.lock_timing && t->lock_stats == NULL)) {
        free(t->stripes);
        rkv_zeroed_unmap(t->writer_slots, WRITER_SLOTS_BYTES);
        free(t->lock_stats);
        snprintf(err, err_len, "out of memory for the table's %llu bucket locks",
                 (unsigned long long)n);
        return RKV_NO_MEMORY;
    }
    memset(t->stripes, 0, n * sizeof(t->stripes[0]));
    t->stripe_mask = n - 1;
    pthread_mutexattr_t adaptive; /* holds are short: spin a little before sleeping */
    pthread_mutexattr_init(&adaptive);
    pthread_mutexattr_settype(&adaptive, PTHREAD_MUTEX_ADAPTIVE_NP);
    for (uint64_t i = 0; i < n; i++)
        pthread_mutex_init(&t->stripes[i].m, &adaptive);
    pthread_mutexattr_destroy(&adaptive);
    pthread_mutex_init(&t->exclusive_lock, NULL);
    return RKV_OK;
}

/* The header's geometry for t's plan: every field but magic, generation,
 * clock and liveness. */
static void header_geometry(const struct rkv_table *t, uint64_t heap_offset, uint64_t heap_size,
                            struct rkv_region_header *h)
{
    memset(h, 0, sizeof(*h));
    h->format_version = RKV_FORMAT_VERSION;
    h->header_size = RKV_HEADER_SIZE;
    h->region_size = t->size;
    h->index_offset = RKV_HEADER_SIZE;
    h->index_base = t->index_base;
    h->index_capacity = t->index_capacity;
    h->index_geometry = t->index_word;
    h->heap_offset = heap_offset;
    h->heap_size = heap_size;
    h->slab_page_size = t->cfg.slab_page_size;
    h->class_count = rkv_slab_class_count(t->slab);
    h->max_key_len = t->cfg.max_key_len;
    h->max_value_len = t->cfg.max_value_len;
    h->hash_seed = t->seed;
    for (unsigned i = 0; i < h->class_count; i++)
        h->class_size[i] = rkv_slab_class_size(t->slab, i);
}

/* The table's bookkeeping for `size` bytes at `base` laid out as `cfg`
 * plans them, hashing keys with `seed`, and (geom) the header of that
 * layout; the region itself is not touched. */
static rkv_status table_open(void *base, size_t size, const struct rkv_table_config *cfg,
                             uint64_t seed, uint64_t rng_seed, struct rkv_table **out,
                             struct rkv_region_header *geom, char *err, size_t err_len)
{
    struct rkv_table_config c;
    struct rkv_table *t = NULL;
    struct layout lay;
    rkv_status st;

    if (base == NULL || out == NULL || (uintptr_t)base % RKV_CACHELINE != 0) {
        snprintf(err, err_len,
                 "the table needs a region that starts on a %u-byte boundary "
                 "(rkv_region_create gives one)",
                 RKV_CACHELINE);
        return RKV_INVALID;
    }
    if ((st = resolve_config(cfg, &c, err, err_len)) != RKV_OK ||
        (st = plan_layout(size, &c, cfg, &lay, err, err_len)) != RKV_OK)
        return st;
    if ((t = aligned_alloc(RKV_CACHELINE, RKV_ALIGN_UP(sizeof(*t), RKV_CACHELINE))) == NULL) {
        snprintf(err, err_len, "out of memory for the table's bookkeeping");
        return RKV_NO_MEMORY;
    }
    memset(t, 0, sizeof(*t));
    t->base = base;
    t->size = size;
    t->hdr = base;
    t->buckets = (struct rkv_bucket *)(void *)(t->base + RKV_HEADER_SIZE);
    t->index_capacity = lay.capacity;
    t->index_base = index_base_for(cfg, lay.area);
    t->room_taken = c.room_untaken != 0 && c.take != NULL ? c.room_untaken : UINT64_MAX;
    t->index_word = 0;
    t->seed = seed;
    t->rng_seed = c.rng_seed != 0 ? c.rng_seed : rng_seed;
    t->cfg = c;
    t->now_ns = c.now_ns != NULL ? c.now_ns : rkv_now_ns;
    t->start_ns = t->now_ns();
    t->version_base = rkv_now_ns() - 1;
    rkv_evict_init(t);
    if (!rkv_ghost_init(t)) {
        snprintf(err, err_len, "out of memory for the eviction ghost");
        free(t);
        return RKV_NO_MEMORY;
    }

    struct rkv_slab_config sc = {
        .region = t->base,
        .heap_offset = lay.heap_offset,
        .heap_size = lay.heap_size,
        .page_size = c.slab_page_size,
        .growth_factor = c.growth_factor,
        .fine_limit = RKV_TABLE_FINE_LIMIT,
        .grace_ms = c.grace_ms,
        .item_meta = rkv_evict_uses_access(c.evict),
        .clock_ns = c.now_ns, /* one time source: a test's clock drives grace periods too */
        .lock_timing = c.lock_timing,
    };
    if ((st = rkv_slab_create(&sc, &t->slab, err, err_len)) != RKV_OK) {
        rkv_ghost_free(t);
        free(t);
        return st;
    }
    if ((st = locks_init(t, err, err_len)) != RKV_OK) {
        rkv_slab_destroy(t->slab);
        rkv_ghost_free(t);
        free(t);
        return st;
    }
    header_geometry(t, lay.heap_offset, lay.heap_size, geom);
    *out = t;
    return RKV_OK;
}

rkv_status rkv_table_create(void *base, size_t size, const struct rkv_table_config *cfg,
                            struct rkv_table **out, char *err, size_t err_len)
{
    struct rkv_table *t = NULL;
    struct rkv_region_header geom;
    uint64_t seeds[3];
    rkv_status st;

    if (getrandom(seeds, sizeof(seeds), 0) != (ssize_t)sizeof(seeds)) {
        snprintf(err, err_len,
                 "getrandom() failed to seed the table; is the kernel's entropy "
                 "source available?");
        return RKV_INTERNAL;
    }
    if ((st = table_open(base, size, cfg, seeds[0], seeds[2], &t, &geom, err, err_len)) != RKV_OK)
        return st;
    struct rkv_region_header *h = t->hdr;
    memset(h, 0, RKV_HEADER_SIZE);
    memset(t->buckets, 0, t->index_base * sizeof(struct rkv_bucket)); /* splits write the rest */
    memcpy(h, &geom, sizeof(geom));
    h->generation = seeds[1];
    h->clock = 1;
    __atomic_store_n(&h->magic, RKV_REGION_MAGIC, __ATOMIC_RELEASE); /* last: the header is complete */
    *out = t;
    return RKV_OK;
}

void rkv_table_destroy(struct rkv_table *t)
{
    if (t == NULL)
        return;
    rkv_slab_destroy(t->slab);
    rkv_ghost_free(t);
    for (uint64_t i = 0; i <= t->stripe_mask; i++)
        pthread_mutex_destroy(&t->stripes[i].m);
    free(t->stripes);
    rkv_zeroed_unmap(t->writer_slots, WRITER_SLOTS_BYTES);
    free(t->lock_stats);
    pthread_mutex_destroy(&t->exclusive_lock);
    free(t);
}

/* ------------------------------------------------------------ a kept region */

void rkv_table_stop_state(struct rkv_table *t, uint32_t *clock, uint64_t *max_version)
{
    *clock = rkv_table_clock(t);
    *max_version = version_now(t);
}

rkv_status rkv_table_plan(size_t size, const struct rkv_table_config *cfg,
                          struct rkv_region_header *geom, char *err, size_t err_len)
{
    struct rkv_table_config c;
    struct layout lay;
    uint32_t count;
    rkv_status st;
    if ((st = resolve_config(cfg, &c, err, err_len)) != RKV_OK ||
        (st = plan_layout(size, &c, cfg, &lay, err, err_len)) != RKV_OK)
        return st;
    memset(geom, 0, sizeof(*geom));
    if ((st = rkv_slab_classes(c.slab_page_size, c.growth_factor, RKV_TABLE_FINE_LIMIT,
                               geom->class_size, &count, err, err_len)) != RKV_OK)
        return st;
    geom->format_version = RKV_FORMAT_VERSION;
    geom->header_size = RKV_HEADER_SIZE;
    geom->region_size = size;
    geom->index_offset = RKV_HEADER_SIZE;
    geom->index_base = index_base_for(cfg, lay.area);
    geom->index_capacity = lay.capacity;
    geom->heap_offset = lay.heap_offset;
    geom->heap_size = lay.heap_size;
    geom->slab_page_size = c.slab_page_size;
    geom->class_count = count;
    geom->max_key_len = c.max_key_len;
    geom->max_value_len = c.max_value_len;
    return RKV_OK;
}

const char *rkv_table_drop_name(enum rkv_table_drop why)
{
    static const char *const names[RKV_DROP_COUNT] = {
        [RKV_DROP_SLOT] = "slot out of place",
        [RKV_DROP_LENGTHS] = "bad lengths",
        [RKV_DROP_STATE] = "not live",
        [RKV_DROP_CHECKSUM] = "checksum",
        [RKV_DROP_KEY] = "key not in this bucket",
        [RKV_DROP_VERSION] = "version",
        [RKV_DROP_OVERLAP] = "overlaps another",
        [RKV_DROP_EXPIRED] = "expired",
    };
    return (unsigned)why < RKV_DROP_COUNT ? names[why] : "?";
}

/* The pages items were found on while attaching: each page's class (+1; 0
 * none yet) and a bitmap of its items in use. */
struct kept_pages {
    uint64_t count;
    uint8_t *cls;
    uint64_t **live;
};

/* Where slot word w points: its class and offset, and that item's page
 * and index there; false (RKV_DROP_SLOT) when that is no item start of its
 * class inside the heap. */
struct slot_place {
    unsigned cls;
    uint64_t page, index;
};

static bool slot_place_of(const struct rkv_table *t, uint64_t w, struct slot_place *sp)
{
    const struct rkv_region_header *h = t->hdr;
    unsigned cls = rkv_slot_class(w);
    uint64_t off = rkv_slot_offset(w);
    if (rkv_slot_fp(w) == 0 || cls >= h->class_count || off < h->heap_offset ||
        off - h->heap_offset >= h->heap_size)
        return false;
    uint32_t size = h->class_size[cls], per_page = rkv_slab_per_page(t->slab, cls);
    uint64_t rel = off - h->heap_offset, in_page = rel % h->slab_page_size;
    *sp = (struct slot_place){ cls, rkv_slab_page_at(t->slab, off), in_page / size };
    /* an item in a page lent to the index is one no longer */
    return in_page % size == 0 && sp->index < per_page &&
           sp->page < rkv_slab_page_count(t->slab) - rkv_slab_lent(t->slab);
}

/* The checks of slot word w, in bucket b, that need nothing but the slot
 * and its item: RKV_DROP_COUNT when they pass, else why not. Every read
 * stays inside the heap: the slot's class and offset are checked before
 * the item is touched, and its lengths before its key is. Run from several
 * threads at once (attach_verify): it writes nothing. */
static enum rkv_table_drop item_verdict(const struct rkv_table *t, uint64_t b, uint64_t w,
                                        uint32_t clock, uint64_t max_version)
{
    const struct rkv_region_header *h = t->hdr;
    struct slot_place sp;
    if (!slot_place_of(t, w, &sp))
        return RKV_DROP_SLOT;
    const struct rkv_item *it = item_at(t, w);
    /* the shape and a long value_len sit in the first 32 bytes, the smallest class */
    uint32_t key_len = rkv_item_key_len(it);
    size_t bytes = rkv_item_bytes(it);
    int fit = rkv_slab_class_for(t->slab, bytes); /* its class, or a larger host's (slab.h) */
    if (key_len == 0 || key_len > h->max_key_len ||
        rkv_item_value_len(it) > value_room(t, key_len) || fit < 0 || (unsigned)fit > sp.cls)
        return RKV_DROP_LENGTHS;
    if (rkv_item_state(it) & (RKV_ITEM_OBSOLETE | RKV_ITEM_FORWARD))
        return RKV_DROP_STATE; /* a live item's other bits are its meta state: kept */
    if (rkv_item_checksum(it, t->seed) != rkv_item_checksum_stored(it))
        return RKV_DROP_CHECKSUM;
    struct rkv_key_hash kh;
    table_hash(t, rkv_item_key(it), key_len, &kh);
    if (kh.fp != rkv_slot_fp(w) || (kh.bucket[0] != b && kh.bucket[1] != b))
        return RKV_DROP_KEY;
    if (rkv_item_version(it) == 0 || rkv_item_version(it) > max_version)
        return RKV_DROP_VERSION;
    if (expired(it, clock))
        return RKV_DROP_EXPIRED;
    return RKV_DROP_COUNT;
}

/* Whether slot word w, whose item_verdict() was `verdict`, may be served:
 * RKV_DROP_COUNT when it may, else why not, in the order the checks are
 * documented (a page already claimed by another class before the item's
 * own checks). On a keep the item is marked in kp (its page claimed for
 * its class). One thread: kp is shared. */
static enum rkv_table_drop kept_item(struct rkv_table *t, uint64_t w, enum rkv_table_drop verdict,
                                     struct kept_pages *kp, char *err, size_t err_len, rkv_status *st)
{
    struct slot_place sp;
    if (verdict == RKV_DROP_SLOT || !slot_place_of(t, w, &sp))
        return RKV_DROP_SLOT;
    if (kp->cls[sp.page] != 0 && kp->cls[sp.page] != sp.cls + 1)
        return RKV_DROP_OVERLAP; /* a page holds one class: the item would straddle another's */
    if (verdict != RKV_DROP_COUNT)
        return verdict;
    if (kp->live[sp.page] == NULL) {
        uint32_t per_page = rkv_slab_per_page(t->slab, sp.cls);
        if ((kp->live[sp.page] = calloc((per_page + 63) / 64, sizeof(uint64_t))) == NULL) {
            snprintf(err, err_len, "out of memory for the kept region's page bitmaps");
            *st = RKV_NO_MEMORY;
            return RKV_DROP_COUNT;
        }
        kp->cls[sp.page] = (uint8_t)(sp.cls + 1);
    }
    uint64_t bit = 1ull << (sp.index % 64), *word = &kp->live[sp.page][sp.index / 64];
    if (*word & bit)
        return RKV_DROP_OVERLAP; /* a second slot naming the same item */
    *word |= bit;
    return RKV_DROP_COUNT;
}

/* The item checks (checksums, key hashes: most of a restart's verify time)
 * run from one thread per CPU over a window of buckets at a time; the
 * claims on pages, which depend on the order, then run in one thread. */
#define VERIFY_WINDOW      (1ull << 18) /* buckets per window: 8.75 MiB of verdicts, sizes */
#define VERIFY_STRIDE      4096ull      /* buckets a thread claims at once */
#define VERIFY_THREADS_MAX 64

struct verify_window {
    const struct rkv_table *t;
    uint32_t clock;
    uint64_t max_version;
    uint64_t first, end;   /* buckets [first, end) */
    _Atomic uint64_t next; /* the next stride's first bucket */
    uint8_t *verdict;      /* per slot of the window, an enum rkv_table_drop */
    uint32_t *bytes;       /* per slot kept, its item's bytes (the serial pass reads no item) */
};

static void *verify_thread(void *arg)
{
    struct verify_window *vw = arg;
    for (;;) {
        uint64_t from = atomic_fetch_add(&vw->next, VERIFY_STRIDE);
        if (from >= vw->end)
            return NULL;
        for (uint64_t b = from; b < RKV_MIN(from + VERIFY_STRIDE, vw->end); b++)
            for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
                uint64_t w = vw->t->buckets[b].slot[s],
                         at = (b - vw->first) * RKV_SLOTS_PER_BUCKET + s;
                enum rkv_table_drop v = w ? item_verdict(vw->t, b, w, vw->clock, vw->max_version)
                                          : RKV_DROP_COUNT;
                vw->verdict[at] = (uint8_t)v;
                if (w != 0 && v == RKV_DROP_COUNT)
                    vw->bytes[at] = (uint32_t)rkv_item_bytes(item_at(vw->t, w));
            }
    }
}

/* item_verdict() for every slot of the window, from `threads` threads. */
static void attach_verify(struct verify_window *vw, unsigned threads)
{
    pthread_t tid[VERIFY_THREADS_MAX];
    unsigned started = 0;
    atomic_store(&vw->next, vw->first);
    while (started + 1 < threads && pthread_create(&tid[started], NULL, verify_thread, vw) == 0)
        started++;
    verify_thread(vw);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
}

static unsigned verify_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    return (unsigned)RKV_MIN(RKV_MAX(CPU_COUNT(&set), 1), VERIFY_THREADS_MAX);
}

/* Walk the index: keep what verifies, clear every other slot. */
static rkv_status attach_scan(struct rkv_table *t, const struct rkv_table_restore *r,
                              struct kept_pages *kp, struct rkv_table_attach_report *rep, char *err,
                              size_t err_len)
{
    rkv_status st = RKV_OK;
    struct verify_window vw = { .t = t, .clock = r->clock, .max_version = r->max_version };
    unsigned threads = verify_threads();
    struct rkv_index_geom g = table_geom(t);
    uint64_t count = rkv_index_count(&g);
    uint64_t window_slots = RKV_MIN(count, VERIFY_WINDOW) * RKV_SLOTS_PER_BUCKET;
    vw.verdict = malloc(window_slots);
    vw.bytes = malloc(window_slots * sizeof(*vw.bytes));
    if (vw.verdict == NULL || vw.bytes == NULL) {
        free(vw.verdict);
        free(vw.bytes);
        snprintf(err, err_len, "out of memory for the kept region's verification");
        return RKV_NO_MEMORY;
    }
    for (vw.first = 0; vw.first < count && st == RKV_OK; vw.first = vw.end) {
        vw.end = RKV_MIN(vw.first + VERIFY_WINDOW, count);
        attach_verify(&vw, threads);
        for (uint64_t b = vw.first; b < vw.end && st == RKV_OK; b++) {
            struct rkv_bucket *bk = &t->buckets[b];
            bk->version = (uint64_t)rkv_index_bucket_level(&g, b) << RKV_VERSION_LEVEL_SHIFT;
            for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
                uint64_t w = bk->slot[s];
                if (w == 0)
                    continue;
                uint64_t at = (b - vw.first) * RKV_SLOTS_PER_BUCKET + s;
                enum rkv_table_drop verdict = (enum rkv_table_drop)vw.verdict[at];
                enum rkv_table_drop why = kept_item(t, w, verdict, kp, err, err_len, &st);
                if (st != RKV_OK)
                    break;
                if (why != RKV_DROP_COUNT) {
                    bk->slot[s] = 0;
                    rep->dropped[why]++;
                    continue;
                }
                rep->kept++;
                rep->kept_bytes += vw.bytes[at];
                stripe_count(t, bk, SC_ITEMS, 1);
                stripe_count(t, bk, SC_ITEM_BYTES, (int64_t)vw.bytes[at]);
            }
        }
    }
    free(vw.verdict);
    free(vw.bytes);
    return st;
}

/* The heap pages a kept index had grown into are lent again before any
 * item is adopted (items there were overwritten by buckets). */
static rkv_status attach_lent(struct rkv_table *t, char *err, size_t err_len)
{
    const struct rkv_region_header *h = t->hdr;
    struct rkv_index_geom g = table_geom(t);
    uint64_t end = h->index_offset + rkv_index_count(&g) * sizeof(struct rkv_bucket), pages = 0;
    if (end > h->heap_offset)
        pages = (end - h->heap_offset + h->slab_page_size - 1) / h->slab_page_size;
    if (rkv_slab_lend_kept(t->slab, pages) != RKV_OK) {
        snprintf(err, err_len, "the kept index reaches %llu heap pages of %llu",
                 (unsigned long long)pages, (unsigned long long)rkv_slab_page_count(t->slab));
        return RKV_INVALID;
    }
    return RKV_OK;
}

rkv_status rkv_table_attach(void *base, size_t size, const struct rkv_table_config *cfg,
                            const struct rkv_table_restore *r, struct rkv_table **out,
                            struct rkv_table_attach_report *rep, char *err, size_t err_len)
{
    struct rkv_table *t = NULL;
    struct rkv_region_header geom;
    struct kept_pages kp = { 0 };
    uint64_t seeds[2];
    rkv_status st;

    memset(rep, 0, sizeof(*rep));
    const struct rkv_region_header *h = base;
    if (base == NULL || size < RKV_HEADER_SIZE || h->magic != RKV_REGION_MAGIC ||
        !rkv_header_valid(h, size)) {
        snprintf(err, err_len, "the kept region's header is not a valid rkv format %u header",
                 RKV_FORMAT_VERSION);
        return RKV_INVALID;
    }
    if (getrandom(seeds, sizeof(seeds), 0) != (ssize_t)sizeof(seeds)) {
        snprintf(err, err_len, "getrandom() failed; is the kernel's entropy source available?");
        return RKV_INTERNAL;
    }
    if ((st = table_open(base, size, cfg, h->hash_seed, seeds[1], &t, &geom, err, err_len)) != RKV_OK)
        return st;
    /* the layout this configuration makes must be the one kept, field by field */
    geom.magic = h->magic;
    geom.generation = h->generation;
    geom.clock = h->clock;
    geom.index_geometry = h->index_geometry; /* grown as far as it had (rkv_header_valid) */
    t->index_word = h->index_geometry;
    if ((st = attach_lent(t, err, err_len)) != RKV_OK)
        goto fail;
    if (memcmp(&geom, h, offsetof(struct rkv_region_header, liveness)) != 0) {
        snprintf(err, err_len,
                 "the kept region was laid out differently (index, heap or size "
                 "classes) from what this configuration lays out");
        st = RKV_INVALID;
        goto fail;
    }
    t->clock_base = r->clock > 1 ? r->clock - 1 : 0; /* rkv_table_clock() is r->clock now */
    t->version_floor = RKV_ALIGN_UP(r->max_version + 1, RKV_THREAD_SLOTS);

    kp.count = rkv_slab_page_count(t->slab);
    kp.cls = calloc(kp.count, 1);
    kp.live = calloc(kp.count, sizeof(*kp.live));
    if (kp.cls == NULL || kp.live == NULL) {
        snprintf(err, err_len, "out of memory for the kept region's page table");
        st = RKV_NO_MEMORY;
        goto fail;
    }
    if ((st = attach_scan(t, r, &kp, rep, err, err_len)) != RKV_OK)
        goto fail;
    for (uint64_t pg = 0; pg < kp.count; pg++)
        if (kp.cls[pg] != 0) {
            if ((st = rkv_slab_adopt(t->slab, pg, kp.cls[pg] - 1u, kp.live[pg], err, err_len)) !=
                RKV_OK)
                goto fail;
            rep->pages++;
        }
    rkv_slab_adopt_done(t->slab);

    /* A new generation: clients drop every location of the server before.
     * The liveness word is the new server's to take. */
    struct rkv_region_header *wh = t->hdr;
    memset(wh->liveness, 0, sizeof(wh->liveness));
    wh->clock = rkv_table_clock(t);
    __atomic_store_n(&wh->generation, seeds[0] != h->generation ? seeds[0] : seeds[0] + 1,
                     __ATOMIC_RELEASE);
    for (uint64_t pg = 0; pg < kp.count; pg++)
        free(kp.live[pg]);
    free(kp.live);
    free(kp.cls);
    *out = t;
    return RKV_OK;

fail:
    if (kp.live != NULL)
        for (uint64_t pg = 0; pg < kp.count; pg++)
            free(kp.live[pg]);
    free(kp.live);
    free(kp.cls);
    rkv_table_destroy(t);
    return st;
}
