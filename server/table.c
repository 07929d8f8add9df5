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
 * Locking: one index mutex for finding, publishing, displacing, evicting and
 * expiring and moving pages. Building an item (allocation, copying or
 * pulling the value, checksum) happens before it is taken. Lock order:
 * index -> slab class -> slab pages. Client hints take no lock.
 *
 * Eviction (the server never sees GETs): clients send the slot words they
 * read items through as hints; a hint stamps the item's private access word
 * (kept by the slab allocator, indexed by item) with the table's access clock,
 * which advances once per stored item (ages are taken modulo 2^32 stores, so
 * an item untouched for longer looks young again: LRU is approximate). LRU
 * evicts the least recently stamped of LRU_SAMPLES random items of the
 * needed class (Redis's approximated LRU); RANDOM evicts the first live item of RANDOM_SAMPLES random picks. Because
 * freed memory is reusable only after grace_ms, a full heap evicts ahead:
 * each PUT keeps (reusable + limbo + fresh) items of its class at or above a
 * per-class reserve, which doubles (up to an eighth of the class) whenever a
 * PUT still had to wait for the limbo. A PUT waits at most grace_ms per try,
 * never spins.
 *
 * Page moves (slab.c, calcification). A page of another class is moved to
 * the class of a PUT that must wait for memory when
 *   - its class has nothing to evict and nothing on its way back (it owns
 *     no pages, or all its items are being built): any page will do; or
 *   - its class is starved: the PUT has to wait although the class's
 *     evict-ahead reserve is at its cap, i.e. the class's memory turns over
 *     within about grace_ms. Then only a page that is clearly worth less
 *     moves: LRU, one whose live items are on average MOVE_COLDER times
 *     older than the items the class itself evicts next; RANDOM, one of a
 *     class that holds at least two pages more. So two busy classes cannot
 *     take pages back and forth.
 * The page is, of PAGE_SAMPLES random pages, the one whose move loses least:
 * LRU, the least reuse expected of its live items, taking an item's reuse
 * rate as 1 / its access age (a page of cold items is cheap, a page with a
 * few recently used items costs about as many); RANDOM, the fewest live
 * items (no recency to weigh). Every live item on it is evicted through the
 * normal delete path (index_remove: bucket version protocol, OBSOLETE,
 * counted as evictions) and the allocator keeps the page for grace_ms after
 * the last of its items was freed before the class gets it; the PUT waits
 * for that as for the limbo. So with eviction on, a PUT fails only when the
 * heap holds nothing evictable. A move holds the index lock while it checks
 * every item of the page (a hash each: about 4 ms for a 1 MiB page of 16384
 * live 64-byte items). With LRU, once a tick, a class that had to evict
 * although another class's next victims are MOVE_COLDER times older than
 * its own also gets a page of that class (memcached's automove, by age):
 * memory follows the mix of item sizes. A page with an item being built on
 * it (allocated, not yet published) is never moved.
 *
 * A heap with fewer slab pages than size classes in use (e.g. 8 MiB of
 * 1 MiB pages for values of 16..4000 bytes) cannot hold every class at once:
 * PUTs then move pages nearly every time and each waits grace_ms. Smaller
 * slab pages avoid that.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "clock.h"
#include "hash.h"
#include "slab.h"
#include "table.h"
#include "util.h"

#define DEFAULT_PAGE_SIZE     (1u << 20)
#define DEFAULT_GROWTH        1.25
#define DEFAULT_GRACE_MS      100u
#define DEFAULT_HEAP_PER_SLOT 96u      /* default index sizing: one slot per 96 heap bytes */
#define MIN_PAGE_SIZE         1024u
#define MAX_PAGE_SIZE         (1u << 30)
#define MAX_INDEX_SHARE       0.9
#define MAX_REGION_BYTES      (1ull << (64 - RKV_SLOT_OFF_SHIFT + 6)) /* 40-bit slot offsets in 64-byte units */
#define HEAP_ALIGN            4096u

#define BFS_MAX_DEPTH   5      /* longest displacement chain, in moves */
#define BFS_MAX_NODES   512    /* buckets a displacement search may visit */
#define LRU_SAMPLES     16
#define RANDOM_SAMPLES  16
#define RESERVE_MIN     8      /* initial evict-ahead reserve per class, in items */
#define EVICT_AHEAD_MAX 32     /* evictions one PUT does ahead of need */
#define ALLOC_TRIES     3      /* waits for the limbo or a moved page before a PUT gives up */
#define PAGE_SAMPLES    8      /* pages a page move compares */
#define PAGE_PROBES     32     /* random looks for another class's page before a scan */
#define PAGE_AGE_SAMPLES 16    /* items that rate what moving a page loses */
#define LOSS_UNIT       (1u << 16) /* page_cost of one live item of access age 0 */
#define MOVE_TRIES      4      /* pages a move tries when one has an item being built */
#define MOVE_COLDER     4      /* a starved class / automove takes pages this many times colder */
#define INCR_TRIES      64     /* optimistic incr attempts under contention */
#define EXPIRE_CHUNK    256    /* buckets scanned per index-lock hold in tick */
#define EXPIRE_MIN_SCAN 4096   /* buckets scanned per tick at least */
#define DECIMAL_MAX_LEN 20     /* digits of UINT64_MAX */

/* One bucket the displacement search reached. */
struct bfs_node {
    uint64_t bucket;   /* bucket index */
    int32_t parent;    /* node whose bucket's slot `slot` would move here; -1 at a candidate bucket */
    uint8_t slot;      /* that slot of the parent's bucket */
    uint8_t depth;     /* moves needed to free a slot here */
};

/* Counters, updated with relaxed atomics (some outside the lock). */
struct table_counters {
    uint64_t items, item_bytes, evictions, expirations, displacements;
    uint64_t puts, deletes, incrs, insert_failures, hints, hints_ignored;
};

struct rkv_table {
    uint8_t *base;                   /* region start */
    size_t size;                     /* region bytes */
    struct rkv_region_header *hdr;   /* at base */
    struct rkv_bucket *buckets;      /* the index */
    uint64_t bucket_count;           /* power of two */
    uint64_t seed;                   /* hdr->hash_seed */
    struct rkv_slab *slab;           /* the heap */
    struct rkv_table_config cfg;     /* with defaults filled in */
    uint64_t start_ns;               /* creation time, for the clock (common/clock.h) */
    uint64_t (*now_ns)(void);        /* the time source: rkv_now_ns, or a test's */
    uint64_t next_version;           /* next item version (atomic) */
    uint32_t access_clock;           /* LRU time: +1 per stored item (atomic) */
    struct table_counters n;
    rkv_table_store_fn observer;     /* see rkv_table_set_store_observer(); NULL */
    void *observer_ctx;

    pthread_mutex_t lock;            /* the index; guards everything below */
    uint64_t rng;                    /* xorshift state for eviction sampling */
    uint64_t expire_cursor;          /* next bucket the expiry scan looks at */
    uint64_t reserve[RKV_MAX_CLASSES]; /* evict-ahead target per class, in items */
    uint64_t class_evictions[RKV_MAX_CLASSES]; /* evictions for the class's own PUTs (evict_class) */
    uint64_t automove_seen[RKV_MAX_CLASSES];   /* class_evictions at the last automove look */
    struct bfs_node bfs[BFS_MAX_NODES]; /* displacement search queue */
};

/* Where a slot is, and what it holds. */
struct place {
    struct rkv_bucket *bucket;
    unsigned slot;
    uint64_t word;
    struct rkv_item *it;
};

static void count(uint64_t *counter, int64_t delta)
{
    __atomic_fetch_add(counter, (uint64_t)delta, __ATOMIC_RELAXED);
}

static uint64_t load(const uint64_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

static struct rkv_item *item_at(const struct rkv_table *t, uint64_t word)
{
    return (struct rkv_item *)(void *)(t->base + rkv_slot_offset(word));
}

static bool expired(const struct rkv_item *it, uint32_t now)
{
    return rkv_expired(it->expire_at, now);
}

static uint64_t rng_next(struct rkv_table *t)
{
    uint64_t x = t->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return t->rng = x;
}

uint32_t rkv_table_clock(const struct rkv_table *t)
{
    return rkv_clock_at(t->start_ns, t->now_ns());
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
    __atomic_fetch_add(&b->version, 1, __ATOMIC_SEQ_CST);  /* TSan does not model fences */
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

void rkv_table_set_store_observer(struct rkv_table *t, rkv_table_store_fn fn, void *ctx)
{
    pthread_mutex_lock(&t->lock);
    t->observer = fn;
    t->observer_ctx = ctx;
    pthread_mutex_unlock(&t->lock);
}

/* First empty slot of b, or -1; *empties gets how many there are. */
static int empty_slot(const struct rkv_bucket *b, unsigned *empties)
{
    int first = -1;
    unsigned n = 0;
    for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
        if (b->slot[s] == 0) {
            if (first < 0)
                first = (int)s;
            n++;
        }
    }
    if (empties)
        *empties = n;
    return first;
}

/* Stamp an item as just used (LRU). */
static void touch(struct rkv_table *t, uint64_t word)
{
    uint32_t *m = rkv_slab_meta(t->slab, rkv_slot_offset(word), rkv_slot_class(word));
    if (m != NULL)
        __atomic_store_n(m, __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

/* Make a built item live and publish it at (b, slot). Lock held. */
static void publish(struct rkv_table *t, struct rkv_bucket *b, unsigned slot, uint64_t word)
{
    struct rkv_item *it = item_at(t, word);
    __atomic_fetch_add(&t->access_clock, 1, __ATOMIC_RELAXED);
    touch(t, word);
    __atomic_store_n(&it->state, 0, __ATOMIC_RELEASE);
    slot_store(t, b, slot, word);
    count(&t->n.items, 1);
    count(&t->n.item_bytes, (int64_t)rkv_item_size(it->key_len, it->value_len));
}

/* An item that is no longer in the index: mark it obsolete (with the state
 * word `state`: plain OBSOLETE, or a forward to its replacement) and give its
 * memory to the allocator's limbo. Lock held. */
static void retire_as(struct rkv_table *t, uint64_t word, uint64_t state)
{
    struct rkv_item *it = item_at(t, word);
    count(&t->n.items, -1);
    count(&t->n.item_bytes, -(int64_t)rkv_item_size(it->key_len, it->value_len));
    __atomic_store_n(&it->state, state, __ATOMIC_RELEASE);
    rkv_slab_free(t->slab, rkv_slot_class(word), rkv_slot_offset(word));
}

/* Deleted, evicted or expired: no forward. */
static void retire(struct rkv_table *t, uint64_t word)
{
    retire_as(t, word, RKV_ITEM_OBSOLETE);
}

/* Superseded by the (already published) item at `next`: the forward and the
 * OBSOLETE mark go out in one store, so a client holding the old location
 * follows it with one READ instead of reading the buckets again. */
static void retire_superseded(struct rkv_table *t, uint64_t word, uint64_t next)
{
    retire_as(t, word, rkv_item_state_forward(next));
}

static void index_remove(struct rkv_table *t, const struct place *p)
{
    slot_store(t, p->bucket, p->slot, 0);
    retire(t, p->word);
}

/* ------------------------------------------------------------ finding */

static bool index_find(struct rkv_table *t, const struct rkv_key_hash *h, const void *key,
                       uint32_t key_len, struct place *p)
{
    for (unsigned i = 0; i < 2; i++) {
        struct rkv_bucket *b = &t->buckets[h->bucket[i]];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t w = b->slot[s];
            if (w == 0 || rkv_slot_fp(w) != h->fp)
                continue;
            struct rkv_item *it = item_at(t, w);
            if (it->key_len == key_len && memcmp(it->data, key, key_len) == 0) {
                *p = (struct place){ .bucket = b, .slot = s, .word = w, .it = it };
                return true;
            }
        }
    }
    return false;
}

/* Is the item at `off` of class cls in the index? Its memory may be free or
 * under construction by another thread, so its header is only a guess until
 * an index slot pointing at exactly this offset confirms it. Lock held. */
static bool live_at(struct rkv_table *t, uint64_t off, unsigned cls, struct place *p)
{
    const struct rkv_item *it = (const struct rkv_item *)(const void *)(t->base + off);
    uint32_t key_len = it->key_len, value_len = it->value_len;
    if (key_len == 0 || key_len > t->cfg.max_key_len || value_len > t->cfg.max_value_len ||
        rkv_item_size(key_len, value_len) > rkv_slab_class_size(t->slab, cls))
        return false;
    struct rkv_key_hash h;
    rkv_hash_key(it->data, key_len, t->seed, t->bucket_count, &h);
    for (unsigned i = 0; i < 2; i++) {
        struct rkv_bucket *b = &t->buckets[h.bucket[i]];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t w = b->slot[s];
            if (w != 0 && rkv_slot_offset(w) == off && rkv_slot_class(w) == cls) {
                *p = (struct place){ .bucket = b, .slot = s, .word = w, .it = item_at(t, w) };
                return true;
            }
        }
    }
    return false;
}

/* ------------------------------------------------------------ eviction */

static uint32_t item_age(struct rkv_table *t, uint64_t word)
{
    uint32_t *m = rkv_slab_meta(t->slab, rkv_slot_offset(word), rkv_slot_class(word));
    if (m == NULL)
        return 0;
    return __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED) - __atomic_load_n(m, __ATOMIC_RELAXED);
}

/* Choose a live item of class cls to evict, never the one in `keep` (the
 * item the current PUT just stored). Lock held. */
static bool pick_victim(struct rkv_table *t, unsigned cls, uint64_t keep, struct place *victim)
{
    bool lru = t->cfg.evict == RKV_EVICT_LRU;
    unsigned samples = lru ? LRU_SAMPLES : RANDOM_SAMPLES;
    bool found = false;
    uint32_t best_age = 0;

    for (unsigned i = 0; i < samples; i++) {
        uint64_t off = rkv_slab_sample(t->slab, cls, rng_next(t));
        struct place p;
        if (off == 0)
            return false;  /* the class has no pages */
        if (!live_at(t, off, cls, &p) || p.word == keep)
            continue;
        if (!lru) {
            *victim = p;
            return true;
        }
        uint32_t age = item_age(t, p.word);
        if (!found || age > best_age) {
            *victim = p;
            best_age = age;
            found = true;
        }
    }
    return found;
}

/* Evict up to `want` items of class cls, sparing `keep`; returns how many.
 * Lock held. */
static unsigned evict_class(struct rkv_table *t, unsigned cls, unsigned want, uint64_t keep)
{
    unsigned done = 0;
    for (unsigned tries = 0; done < want && tries < 2 * want + 4; tries++) {
        struct place p;
        if (!pick_victim(t, cls, keep, &p))
            continue;
        index_remove(t, &p);
        count(&t->n.evictions, 1);
        done++;
    }
    t->class_evictions[cls] += done;
    return done;
}

/* The largest evict-ahead reserve for a class: an eighth of what it owns. */
static uint64_t reserve_cap(const struct rkv_slab_class_stats *cs)
{
    return RKV_MAX(1, cs->pages * cs->per_page / 8);
}

/* Keep items of class cls on their way back to the free list, so that a
 * PUT on a full heap rarely has to wait for the grace period. Lock held. */
static void evict_ahead(struct rkv_table *t, unsigned cls, uint64_t keep)
{
    struct rkv_slab_class_stats cs;
    if (t->cfg.evict == RKV_EVICT_NONE || rkv_slab_pages_unassigned(t->slab) > 0)
        return;
    rkv_slab_class_stats(t->slab, cls, &cs);
    uint64_t target = RKV_MIN(t->reserve[cls], reserve_cap(&cs));
    uint64_t coming = cs.ready + cs.limbo + cs.fresh;
    if (coming < target)
        evict_class(t, cls, (unsigned)RKV_MIN(target - coming, EVICT_AHEAD_MAX), keep);
}

/* Free a slot in one of the key's buckets by evicting one of their items
 * (the index is full there and no displacement path exists). Lock held. */
static bool evict_for_slot(struct rkv_table *t, const struct rkv_key_hash *h, struct place *out)
{
    struct place best = { 0 };
    uint32_t best_age = 0;
    unsigned pick = (unsigned)(rng_next(t) % (2 * RKV_SLOTS_PER_BUCKET));

    for (unsigned i = 0; i < 2 * RKV_SLOTS_PER_BUCKET; i++) {
        struct rkv_bucket *b = &t->buckets[h->bucket[i / RKV_SLOTS_PER_BUCKET]];
        unsigned s = i % RKV_SLOTS_PER_BUCKET;
        uint64_t w = b->slot[s];
        if (w == 0)
            continue;
        uint32_t age = t->cfg.evict == RKV_EVICT_LRU ? item_age(t, w) : (i == pick);
        if (best.word == 0 || age > best_age) {
            best = (struct place){ .bucket = b, .slot = s, .word = w, .it = item_at(t, w) };
            best_age = age;
        }
    }
    if (best.word == 0)
        return false;
    index_remove(t, &best);
    count(&t->n.evictions, 1);
    *out = best;
    return true;
}

/* ------------------------------------------------------------ page moves */

/* What moving a page would lose, estimated from up to PAGE_AGE_SAMPLES of
 * its items spread over it. */
struct page_cost {
    uint64_t loss;      /* LRU: sum over its live items of LOSS_UNIT / (1 + access age): the
                         * reuse expected of them if reuse falls as 1 / idle time, so a page
                         * of cold items costs almost nothing and one recent item about one
                         * unit; RANDOM: LOSS_UNIT per live item */
    uint32_t live_age;  /* mean access age of the sampled live items; UINT32_MAX when none */
};

static void page_cost(struct rkv_table *t, const struct rkv_slab_page_info *pi, struct page_cost *out)
{
    unsigned n = RKV_MIN(pi->handed, PAGE_AGE_SAMPLES), live = 0;
    uint64_t loss = 0, ages = 0;
    for (unsigned i = 0; i < n; i++) {
        struct place p;
        uint64_t item = (uint64_t)i * pi->handed / n;
        if (!live_at(t, pi->start + item * pi->size, pi->cls, &p))
            continue;
        uint32_t age = t->cfg.evict == RKV_EVICT_LRU ? item_age(t, p.word) : 0;
        loss += LOSS_UNIT / (1 + (uint64_t)age);
        ages += age;
        live++;
    }
    out->loss = n ? loss * pi->handed / n : 0;
    out->live_age = live ? (uint32_t)(ages / live) : UINT32_MAX;
}

/* A page a move for class cls may take: another class's (from_cls's when
 * that is >= 0). */
static bool page_candidate(struct rkv_table *t, uint64_t page, unsigned cls, int from_cls,
                           struct rkv_slab_page_info *pi)
{
    int pc = rkv_slab_page_class(t->slab, page);
    return pc >= 0 && (unsigned)pc != cls && (from_cls < 0 || pc == from_cls) &&
           rkv_slab_page_info(t->slab, page, pi);
}

/* The page a move for class cls takes (from class from_cls when >= 0, else
 * any other): of PAGE_SAMPLES random candidates, the one whose move loses
 * least (page_cost), the colder on a tie. When PAGE_PROBES random looks find
 * none (the other classes hold few pages), a scan from a random page takes
 * the first. Lock held. */
static bool pick_victim_page(struct rkv_table *t, unsigned cls, int from_cls,
                             struct rkv_slab_page_info *out, struct page_cost *cost)
{
    uint64_t pages = rkv_slab_page_count(t->slab);
    unsigned found = 0;
    struct rkv_slab_page_info pi;
    struct page_cost pc;

    for (unsigned probe = 0; probe < PAGE_PROBES && found < PAGE_SAMPLES; probe++) {
        if (!page_candidate(t, rng_next(t) % pages, cls, from_cls, &pi))
            continue;
        page_cost(t, &pi, &pc);
        if (found++ == 0 || pc.loss < cost->loss ||
            (pc.loss == cost->loss && pc.live_age > cost->live_age)) {
            *out = pi;
            *cost = pc;
        }
    }
    uint64_t start = rng_next(t) % pages;
    for (uint64_t i = 0; i < pages && found == 0; i++)
        if (page_candidate(t, (start + i) % pages, cls, from_cls, out)) {
            page_cost(t, out, cost);
            found = 1;
        }
    return found > 0;
}

/* Evict every live item on page pi (through the index, as any eviction) and
 * hand the page to the allocator's pool for class for_cls. False when the
 * page holds an item being built (handed out, not in the index): then it
 * stays, and nothing is evicted unless that item appeared meanwhile. Lock
 * held. */
static bool page_move(struct rkv_table *t, const struct rkv_slab_page_info *pi, unsigned for_cls)
{
    struct place p;
    uint32_t live = 0;
    for (uint32_t i = 0; i < pi->handed; i++)
        live += live_at(t, pi->start + (uint64_t)i * pi->size, pi->cls, &p);
    if (live != pi->used)
        return false;
    for (uint32_t i = 0; i < pi->handed && live > 0; i++) {
        if (live_at(t, pi->start + (uint64_t)i * pi->size, pi->cls, &p)) {
            index_remove(t, &p);
            count(&t->n.evictions, 1);
            live--;
        }
    }
    return rkv_slab_page_take(t->slab, pi->page, pi->cls, (int)for_cls);
}

/* The access age of the item LRU would evict next in class cls, estimated
 * from LRU_SAMPLES items; false when none of them is live. Lock held. */
static bool tail_age(struct rkv_table *t, unsigned cls, uint32_t *age)
{
    struct place p;
    if (!pick_victim(t, cls, 0, &p))
        return false;
    *age = item_age(t, p.word);
    return true;
}

/* May a starved class cls take page pi (see the top comment)? Lock held. */
static bool page_worth_less(struct rkv_table *t, unsigned cls, const struct rkv_slab_page_info *pi,
                            const struct page_cost *cost)
{
    if (t->cfg.evict == RKV_EVICT_LRU) {
        uint32_t own;
        return cost->live_age == UINT32_MAX || !tail_age(t, cls, &own) ||
               cost->live_age / MOVE_COLDER > own;
    }
    struct rkv_slab_class_stats mine, theirs;
    rkv_slab_class_stats(t->slab, cls, &mine);
    rkv_slab_class_stats(t->slab, pi->cls, &theirs);
    return theirs.pages >= mine.pages + 2;
}

/* Move a page of another class (from_cls when >= 0) to class cls; with
 * `starved`, only one page_worth_less() allows. True when one went to the
 * allocator's pool. Lock held. */
static bool page_reassign(struct rkv_table *t, unsigned cls, int from_cls, bool starved)
{
    for (unsigned tries = 0; tries < MOVE_TRIES; tries++) {
        struct rkv_slab_page_info pi;
        struct page_cost cost;
        if (!pick_victim_page(t, cls, from_cls, &pi, &cost) ||
            (starved && !page_worth_less(t, cls, &pi, &cost)))
            return false;
        if (page_move(t, &pi, cls))
            return true;
    }
    return false;
}

/* Automove (LRU, once a tick, heap full): the class that evicted for its
 * own PUTs since the last look and whose eviction candidates are youngest
 * gets a page of the class with the oldest ones, when those are at least
 * MOVE_COLDER times older and that class has pages to spare (two or more).
 * One page per tick at most: memory moves toward where LRU would evict the
 * youngest items, without following every burst. */
static void automove(struct rkv_table *t)
{
    unsigned classes = rkv_slab_class_count(t->slab);
    int young = -1, old = -1;
    uint32_t young_age = UINT32_MAX, old_age = 0, age;

    if (t->cfg.evict != RKV_EVICT_LRU || rkv_slab_pages_unassigned(t->slab) > 0)
        return;
    pthread_mutex_lock(&t->lock);
    for (unsigned c = 0; c < classes; c++) {
        struct rkv_slab_class_stats cs;
        bool evicted = t->class_evictions[c] != t->automove_seen[c];
        t->automove_seen[c] = t->class_evictions[c];
        if (!tail_age(t, c, &age))
            continue;
        rkv_slab_class_stats(t->slab, c, &cs);
        if (evicted && age < young_age) {
            young = (int)c;
            young_age = age;
        }
        if (cs.pages >= 2 && age > old_age) {
            old = (int)c;
            old_age = age;
        }
    }
    if (young >= 0 && old >= 0 && young != old && old_age / MOVE_COLDER > young_age &&
        rkv_slab_page_wait_ms(t->slab, (unsigned)young) < 0)
        page_reassign(t, (unsigned)young, old, false);
    pthread_mutex_unlock(&t->lock);
}

/* ------------------------------------------------------------ cuckoo */

/* The other candidate bucket of the item in `word`, which sits in `here`. */
static uint64_t other_bucket(const struct rkv_table *t, uint64_t word, uint64_t here)
{
    const struct rkv_item *it = item_at(t, word);
    struct rkv_key_hash h;
    rkv_hash_key(it->data, it->key_len, t->seed, t->bucket_count, &h);
    return h.bucket[0] == here ? h.bucket[1] : h.bucket[0];
}

static bool on_path(const struct bfs_node *q, int32_t at, uint64_t bucket)
{
    for (; at >= 0; at = q[at].parent)
        if (q[at].bucket == bucket)
            return true;
    return false;
}

/* Move the item at (from, fs) to the empty (to, ts): destination first, so
 * the item is in the index at every instant; both versions change. */
static void slot_move(struct rkv_table *t, struct rkv_bucket *from, unsigned fs,
                      struct rkv_bucket *to, unsigned ts)
{
    slot_store(t, to, ts, from->slot[fs]);
    slot_store(t, from, fs, 0);
    count(&t->n.displacements, 1);
}

/* Carry out the chain that ends with node `at`'s slot `s` moving to the empty
 * slot (dest, dest_slot); the slot it frees in a candidate bucket goes to *p. */
static void cuckoo_apply(struct rkv_table *t, int32_t at, unsigned s, uint64_t dest,
                         unsigned dest_slot, struct place *p)
{
    struct rkv_bucket *to = &t->buckets[dest];
    unsigned to_slot = dest_slot;
    for (;;) {
        struct rkv_bucket *from = &t->buckets[t->bfs[at].bucket];
        slot_move(t, from, s, to, to_slot);
        to = from;
        to_slot = s;
        if (t->bfs[at].parent < 0)
            break;
        s = t->bfs[at].slot;
        at = t->bfs[at].parent;
    }
    p->bucket = to;
    p->slot = to_slot;
}

/* Both candidate buckets are full: breadth-first search for the shortest
 * chain of moves that frees a slot in one of them, and do it. Lock held. */
static bool cuckoo_make_room(struct rkv_table *t, const struct rkv_key_hash *h, struct place *p)
{
    struct bfs_node *q = t->bfs;
    int32_t n = 0;
    for (unsigned i = 0; i < 2; i++)
        q[n++] = (struct bfs_node){ .bucket = h->bucket[i], .parent = -1 };

    for (int32_t at = 0; at < n; at++) {
        const struct rkv_bucket *b = &t->buckets[q[at].bucket];
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t alt = other_bucket(t, b->slot[s], q[at].bucket);
            if (alt == q[at].bucket || on_path(q, at, alt))
                continue;
            int free_slot = empty_slot(&t->buckets[alt], NULL);
            if (free_slot >= 0) {
                cuckoo_apply(t, at, s, alt, (unsigned)free_slot, p);
                return true;
            }
            if (q[at].depth + 2 <= BFS_MAX_DEPTH && n < BFS_MAX_NODES)
                q[n++] = (struct bfs_node){ .bucket = alt, .parent = at, .slot = (uint8_t)s,
                                            .depth = (uint8_t)(q[at].depth + 1) };
        }
    }
    return false;
}

/* An empty slot for a new key: the emptier candidate bucket, else a
 * displacement chain, else (with eviction) an evicted neighbour. Lock held. */
static bool index_make_room(struct rkv_table *t, const struct rkv_key_hash *h, struct place *p)
{
    unsigned e0, e1;
    int s0 = empty_slot(&t->buckets[h->bucket[0]], &e0);
    int s1 = empty_slot(&t->buckets[h->bucket[1]], &e1);
    if (s0 >= 0 || s1 >= 0) {
        bool first = e0 >= e1;
        p->bucket = &t->buckets[h->bucket[first ? 0 : 1]];
        p->slot = (unsigned)(first ? s0 : s1);
        return true;
    }
    if (cuckoo_make_room(t, h, p))
        return true;
    return t->cfg.evict != RKV_EVICT_NONE && evict_for_slot(t, h, p);
}

/* ------------------------------------------------------------ writes */

static rkv_status check_key(const struct rkv_table *t, const void *key, uint32_t key_len)
{
    if (key == NULL || key_len == 0)
        return RKV_INVALID;
    return key_len > t->cfg.max_key_len ? RKV_TOO_LARGE : RKV_OK;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The shorter of two waits in ms, where -1 means "nothing to wait for". */
static int wait_min(int a, int b)
{
    return a < 0 ? b : b < 0 ? a : RKV_MIN(a, b);
}

/* Memory for an item of class cls, evicting when the policy allows: items
 * of its class, else a page of another class. Called without the lock; may
 * wait for the limbo or a moved page (at most grace_ms per try). */
static rkv_status item_alloc(struct rkv_table *t, unsigned cls, uint64_t *off)
{
    for (unsigned tries = 0;; tries++) {
        if ((*off = rkv_slab_alloc(t->slab, cls)) != 0)
            return RKV_OK;
        if (t->cfg.evict == RKV_EVICT_NONE || tries == ALLOC_TRIES)
            return RKV_OUT_OF_MEMORY;

        struct rkv_slab_class_stats cs;
        pthread_mutex_lock(&t->lock);
        rkv_slab_class_stats(t->slab, cls, &cs);
        uint64_t cap = reserve_cap(&cs);
        bool starved = cs.pages > 0 && t->reserve[cls] >= cap; /* ran dry at the largest reserve */
        if (t->reserve[cls] < cap)   /* we ran dry: the reserve was too small */
            t->reserve[cls] = RKV_MIN(2 * t->reserve[cls], cap);
        unsigned evicted = evict_class(t, cls, (unsigned)RKV_MIN(RKV_MIN(t->reserve[cls], cap),
                                                                 EVICT_AHEAD_MAX), 0);
        /* No page coming for it, and nothing of its own to evict or on its
         * way back, or starved: take a page from another class. */
        if (rkv_slab_page_wait_ms(t->slab, cls) < 0) {
            if (evicted == 0 && rkv_slab_limbo_wait_ms(t->slab, cls) < 0)
                page_reassign(t, cls, -1, false);
            else if (starved)
                page_reassign(t, cls, -1, true);
        }
        pthread_mutex_unlock(&t->lock);

        if ((*off = rkv_slab_alloc(t->slab, cls)) != 0)
            return RKV_OK;
        int wait = wait_min(rkv_slab_limbo_wait_ms(t->slab, cls), rkv_slab_page_wait_ms(t->slab, cls));
        if (wait < 0)
            return RKV_OUT_OF_MEMORY;  /* nothing evictable anywhere, nothing on its way back */
        sleep_ms((unsigned)wait + 1);
    }
}

/* A new item, built outside the lock: not live (OBSOLETE) until published. */
struct built {
    unsigned cls;
    uint64_t word;      /* slot word to publish */
    uint64_t version;
};

static rkv_status item_build(struct rkv_table *t, const struct rkv_key_hash *h, const void *key,
                             uint32_t key_len, const struct rkv_value_src *val,
                             uint32_t expire_at, uint32_t user_flags, struct built *out)
{
    int cls = rkv_slab_class_for(t->slab, rkv_item_size(key_len, val->len));
    uint64_t off;
    if (cls < 0)
        return RKV_TOO_LARGE;
    rkv_status st = item_alloc(t, (unsigned)cls, &off);
    if (st != RKV_OK)
        return st;

    struct rkv_item *it = (struct rkv_item *)(void *)(t->base + off);
    __atomic_store_n(&it->state, RKV_ITEM_OBSOLETE, __ATOMIC_RELEASE);
    it->version = __atomic_fetch_add(&t->next_version, 1, __ATOMIC_RELAXED);
    it->key_len = key_len;
    it->value_len = val->len;
    it->expire_at = expire_at;
    it->user_flags = user_flags;
    memcpy(it->data, key, key_len);
    if (val->len > 0) {
        if (val->data != NULL)
            memcpy(it->data + key_len, val->data, val->len);
        else if ((st = val->pull(val->ctx, it->data + key_len, val->len)) != RKV_OK)
            goto fail;
    }
    it->checksum = rkv_item_checksum(it, t->seed);
    out->cls = (unsigned)cls;
    out->word = rkv_slot_make(h->fp, (unsigned)cls, off);
    out->version = it->version;
    return RKV_OK;

fail:
    rkv_slab_free(t->slab, (unsigned)cls, off);
    return st;
}

/* May a write in `mode` go ahead, given what the index holds? */
static rkv_status mode_check(rkv_put_mode mode, bool live, uint64_t version, uint64_t cas)
{
    switch (mode) {
    case RKV_SET:
        return RKV_OK;
    case RKV_ADD:
        return live ? RKV_EXISTS : RKV_OK;
    case RKV_REPLACE:
        return live ? RKV_OK : RKV_NOT_STORED;
    case RKV_CAS:
        if (!live)
            return RKV_NOT_STORED;
        return version == cas ? RKV_OK : RKV_CAS_MISMATCH;
    }
    return RKV_INVALID;
}

/* Store key -> value with an absolute expiry: build, then under the lock
 * check the mode, publish, obsolete and free the old item. */
static rkv_status table_store(struct rkv_table *t, const void *key, uint32_t key_len,
                              const struct rkv_value_src *val, rkv_put_mode mode, uint64_t cas,
                              uint32_t expire_at, uint32_t user_flags, uint64_t *version)
{
    struct rkv_key_hash h;
    struct built nb;
    struct place old, p;

    rkv_hash_key(key, key_len, t->seed, t->bucket_count, &h);
    rkv_status st = item_build(t, &h, key, key_len, val, expire_at, user_flags, &nb);
    if (st != RKV_OK) {
        if (st == RKV_OUT_OF_MEMORY)
            count(&t->n.insert_failures, 1);
        return st;
    }

    pthread_mutex_lock(&t->lock);
    bool found = index_find(t, &h, key, key_len, &old);
    bool live = found && !expired(old.it, rkv_table_clock(t));
    st = mode_check(mode, live, live ? old.it->version : 0, cas);
    if (st == RKV_OK) {
        if (found) {
            publish(t, old.bucket, old.slot, nb.word);   /* same slot: one store replaces */
            if (live) {
                retire_superseded(t, old.word, nb.word);
            } else {
                retire(t, old.word);   /* expired: readers must miss, not follow */
                count(&t->n.expirations, 1);
            }
        } else if (index_make_room(t, &h, &p)) {
            publish(t, p.bucket, p.slot, nb.word);
        } else {
            st = RKV_OUT_OF_MEMORY;
        }
    }
    if (st == RKV_OK)
        evict_ahead(t, nb.cls, nb.word);
    pthread_mutex_unlock(&t->lock);

    if (st != RKV_OK) {
        rkv_slab_free(t->slab, nb.cls, rkv_slot_offset(nb.word));  /* never published */
        if (st == RKV_OUT_OF_MEMORY)
            count(&t->n.insert_failures, 1);
        return st;
    }
    if (version)
        *version = nb.version;
    return RKV_OK;
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

rkv_status rkv_table_put(struct rkv_table *t, const void *key, uint32_t key_len,
                         const struct rkv_value_src *val, rkv_put_mode mode,
                         uint64_t cas, uint32_t ttl, uint32_t user_flags,
                         uint64_t *version)
{
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    if (val == NULL || (val->len > 0 && val->data == NULL && val->pull == NULL) ||
        (unsigned)mode > RKV_CAS)
        return RKV_INVALID;
    if (val->len > t->cfg.max_value_len)
        return RKV_TOO_LARGE;
    uint32_t expire_at = ttl == RKV_TTL_NEVER ? 0 : expiry_for(t, ttl);
    st = table_store(t, key, key_len, val, mode, cas, expire_at, user_flags, version);
    if (st == RKV_OK)
        count(&t->n.puts, 1);
    return st;
}

rkv_status rkv_table_delete(struct rkv_table *t, const void *key, uint32_t key_len)
{
    struct rkv_key_hash h;
    struct place p;
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    rkv_hash_key(key, key_len, t->seed, t->bucket_count, &h);

    pthread_mutex_lock(&t->lock);
    st = RKV_NOT_FOUND;
    if (index_find(t, &h, key, key_len, &p)) {
        if (expired(p.it, rkv_table_clock(t)))
            count(&t->n.expirations, 1);
        else
            st = RKV_OK;
        index_remove(t, &p);
    }
    pthread_mutex_unlock(&t->lock);
    if (st == RKV_OK)
        count(&t->n.deletes, 1);
    return st;
}

/* A value that is 1..20 decimal digits and fits a u64. */
static bool value_number(const struct rkv_item *it, uint64_t *out)
{
    char digits[DECIMAL_MAX_LEN + 1];
    const uint8_t *v = it->data + it->key_len;
    if (it->value_len == 0 || it->value_len > DECIMAL_MAX_LEN || memchr(v, 0, it->value_len))
        return false;
    memcpy(digits, v, it->value_len);
    digits[it->value_len] = '\0';
    return rkv_parse_u64(digits, 0, UINT64_MAX, out);
}

rkv_status rkv_table_incr(struct rkv_table *t, const void *key, uint32_t key_len,
                          int64_t delta, uint64_t *result)
{
    struct rkv_key_hash h;
    rkv_status st = check_key(t, key, key_len);
    if (st != RKV_OK)
        return st;
    rkv_hash_key(key, key_len, t->seed, t->bucket_count, &h);

    /* Read under the lock, build the new item outside it, and publish only
     * if the item is still the one we read (a CAS on its version). */
    for (unsigned tries = 0; tries < INCR_TRIES; tries++) {
        struct place p;
        uint64_t cur = 0, version = 0;
        uint32_t expire_at = 0, flags = 0;

        pthread_mutex_lock(&t->lock);
        st = RKV_NOT_FOUND;
        if (index_find(t, &h, key, key_len, &p) && !expired(p.it, rkv_table_clock(t))) {
            st = value_number(p.it, &cur) ? RKV_OK : RKV_NOT_NUMBER;
            version = p.it->version;
            expire_at = p.it->expire_at;
            flags = p.it->user_flags;
        }
        pthread_mutex_unlock(&t->lock);
        if (st != RKV_OK)
            return st;

        uint64_t next;
        if (delta >= 0)
            next = cur + (uint64_t)delta;       /* wraps at 2^64, as memcached does */
        else {
            uint64_t down = (uint64_t)(-(delta + 1)) + 1;
            next = cur > down ? cur - down : 0;
        }
        char text[DECIMAL_MAX_LEN + 1];
        int len = snprintf(text, sizeof(text), "%llu", (unsigned long long)next);
        struct rkv_value_src src = { .data = text, .len = (uint32_t)len };
        st = table_store(t, key, key_len, &src, RKV_CAS, version, expire_at, flags, NULL);
        if (st == RKV_CAS_MISMATCH)
            continue;                            /* another write got in between: again */
        if (st == RKV_NOT_STORED)
            return RKV_NOT_FOUND;                /* deleted or expired meanwhile */
        if (st == RKV_OK) {
            count(&t->n.incrs, 1);
            if (result)
                *result = next;
        }
        return st;
    }
    return RKV_SERVER_BUSY;
}

const struct rkv_item *rkv_table_find(struct rkv_table *t, const void *key, uint32_t key_len)
{
    struct rkv_key_hash h;
    struct place p;
    const struct rkv_item *it = NULL;
    if (check_key(t, key, key_len) != RKV_OK)
        return NULL;
    rkv_hash_key(key, key_len, t->seed, t->bucket_count, &h);
    pthread_mutex_lock(&t->lock);
    if (index_find(t, &h, key, key_len, &p) && !expired(p.it, rkv_table_clock(t)))
        it = p.it;
    pthread_mutex_unlock(&t->lock);
    return it;
}

void rkv_table_hint(struct rkv_table *t, uint64_t slot)
{
    unsigned cls = rkv_slot_class(slot);
    uint64_t off = rkv_slot_offset(slot);
    /* The word came from the network: the allocator checks that it names an
     * item of a page of that class before anything is stamped. */
    if (slot == 0 || rkv_slot_fp(slot) == 0 || !rkv_slab_valid(t->slab, off, cls)) {
        count(&t->n.hints_ignored, 1);
        return;
    }
    touch(t, slot);
    count(&t->n.hints, 1);
}

/* ------------------------------------------------------------ clock */

/* Remove expired items from the next stretch of buckets, a chunk per lock
 * hold, so that the whole index is swept every ~16 ticks. */
static void expire_scan(struct rkv_table *t, uint32_t now)
{
    uint64_t budget = RKV_MIN(t->bucket_count, RKV_MAX(EXPIRE_MIN_SCAN, t->bucket_count / 16));
    while (budget > 0) {
        uint64_t chunk = RKV_MIN(budget, EXPIRE_CHUNK);
        pthread_mutex_lock(&t->lock);
        for (uint64_t i = 0; i < chunk; i++) {
            struct rkv_bucket *b = &t->buckets[t->expire_cursor];
            for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
                uint64_t w = b->slot[s];
                if (w != 0 && expired(item_at(t, w), now)) {
                    struct place p = { .bucket = b, .slot = s, .word = w };
                    index_remove(t, &p);
                    count(&t->n.expirations, 1);
                }
            }
            t->expire_cursor = (t->expire_cursor + 1) & (t->bucket_count - 1);
        }
        pthread_mutex_unlock(&t->lock);
        budget -= chunk;
    }
}

void rkv_table_tick(struct rkv_table *t)
{
    uint32_t now = rkv_table_clock(t);
    if (now > __atomic_load_n(&t->hdr->clock, __ATOMIC_RELAXED))
        __atomic_store_n(&t->hdr->clock, now, __ATOMIC_RELEASE);
    expire_scan(t, now);
    automove(t);
}

void rkv_table_get_stats(struct rkv_table *t, struct rkv_table_stats *out)
{
    struct rkv_slab_stats ss;
    rkv_slab_stats(t->slab, &ss);
    memset(out, 0, sizeof(*out));
    out->items = load(&t->n.items);
    out->bytes_used = ss.used;                         /* class bytes of items handed out */
    out->bytes_free = ss.ready + ss.fresh + ss.unassigned; /* what allocation can use now */
    out->heap_bytes = ss.heap;
    out->buckets = t->bucket_count;
    out->slots = t->bucket_count * RKV_SLOTS_PER_BUCKET;
    out->evictions = load(&t->n.evictions);
    out->expirations = load(&t->n.expirations);
    out->displacements = load(&t->n.displacements);
    out->puts = load(&t->n.puts);
    out->deletes = load(&t->n.deletes);
    out->incrs = load(&t->n.incrs);
    out->insert_failures = load(&t->n.insert_failures);
    out->item_bytes = load(&t->n.item_bytes);
    out->limbo_bytes = ss.limbo + ss.draining;          /* items and moved pages inside grace_ms */
    out->tail_bytes = ss.tail;
    out->pages_unassigned = ss.pages_unassigned;
    out->hints = load(&t->n.hints);
    out->hints_ignored = load(&t->n.hints_ignored);
    out->slab_reassigns = ss.reassigns;
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
        c->growth_factor = DEFAULT_GROWTH;
    if (c->grace_ms == 0)
        c->grace_ms = DEFAULT_GRACE_MS;

    if (c->slab_page_size < MIN_PAGE_SIZE || c->slab_page_size > MAX_PAGE_SIZE ||
        c->slab_page_size % RKV_ITEM_ALIGN != 0) {
        snprintf(err, err_len, "slab page size %u is out of range; use a multiple of %u between "
                 "%u and %u (default %u)", c->slab_page_size, RKV_ITEM_ALIGN, MIN_PAGE_SIZE,
                 MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE);
        return RKV_INVALID;
    }
    if (c->max_key_len > RKV_MAX_KEY_LEN) {
        snprintf(err, err_len, "max key length %u is above the format's limit of %u bytes",
                 c->max_key_len, RKV_MAX_KEY_LEN);
        return RKV_INVALID;
    }
    uint32_t room = c->slab_page_size - RKV_ITEM_HEADER_SIZE - c->max_key_len;
    if (c->max_value_len == 0)
        c->max_value_len = room;
    if (c->max_value_len > room) {
        snprintf(err, err_len, "max value length %u does not fit one %u-byte slab page with a "
                 "%u-byte key and the %u-byte item header; raise the slab page size to at least "
                 "%llu or lower the max value length to %u", c->max_value_len, c->slab_page_size,
                 c->max_key_len, RKV_ITEM_HEADER_SIZE,
                 (unsigned long long)RKV_ALIGN_UP((uint64_t)c->max_value_len + RKV_ITEM_HEADER_SIZE +
                                                  c->max_key_len, RKV_ITEM_ALIGN), room);
        return RKV_INVALID;
    }
    if (!(c->index_share >= 0 && c->index_share <= MAX_INDEX_SHARE)) {
        snprintf(err, err_len, "index share %g is out of range; use 0 (automatic) or a fraction "
                 "up to %g", c->index_share, MAX_INDEX_SHARE);
        return RKV_INVALID;
    }
    if (c->grace_ms > RKV_SLAB_MAX_GRACE_MS) {
        snprintf(err, err_len, "grace period %u ms is above the %u ms limit; reads take "
                 "microseconds, so 100 ms is plenty", c->grace_ms, RKV_SLAB_MAX_GRACE_MS);
        return RKV_INVALID;
    }
    if ((unsigned)c->evict > RKV_EVICT_RANDOM) {
        snprintf(err, err_len, "unknown eviction policy %u; use none, lru or random", (unsigned)c->evict);
        return RKV_INVALID;
    }
    return RKV_OK;
}

static uint64_t pow2_floor(uint64_t x)
{
    return x ? 1ull << (63 - __builtin_clzll(x)) : 0;
}

static uint64_t pow2_ceil(uint64_t x)
{
    return x <= 1 ? 1 : 1ull << (64 - __builtin_clzll(x - 1));
}

/* Split the region: header page, index, heap. The default index has about
 * one slot per DEFAULT_HEAP_PER_SLOT heap bytes, rounded up to a power of two
 * so that it is not what fills first; an explicit index_share is a ceiling. */
static rkv_status plan_layout(size_t size, const struct rkv_table_config *c, uint64_t *buckets,
                              uint64_t *heap_offset, uint64_t *heap_size, char *err, size_t err_len)
{
    const uint64_t per_bucket = sizeof(struct rkv_bucket) + RKV_SLOTS_PER_BUCKET * DEFAULT_HEAP_PER_SLOT;
    char sz[32];
    uint64_t b;

    if ((uint64_t)size > MAX_REGION_BYTES) {
        snprintf(err, err_len, "region of %s is above the %llu TiB that slot words can address; "
                 "shard over several servers", rkv_format_size(size, sz, sizeof(sz)),
                 (unsigned long long)(MAX_REGION_BYTES >> 40));
        return RKV_INVALID;
    }
    if (size < RKV_HEADER_SIZE + 2 * sizeof(struct rkv_bucket))
        goto too_small;
    if (c->index_share > 0)
        b = pow2_floor((uint64_t)(c->index_share * (double)size) / sizeof(struct rkv_bucket));
    else
        b = pow2_ceil((size - RKV_HEADER_SIZE) / per_bucket);
    b = RKV_MAX(b, 2);
    for (;;) {
        uint64_t off = RKV_ALIGN_UP(RKV_HEADER_SIZE + b * sizeof(struct rkv_bucket), HEAP_ALIGN);
        if (off + c->slab_page_size <= size) {
            *buckets = b;
            *heap_offset = off;
            *heap_size = (size - off) / c->slab_page_size * c->slab_page_size;
            return RKV_OK;
        }
        if (b == 2)
            goto too_small;
        b /= 2;  /* the index left no room for the heap */
    }

too_small:
    snprintf(err, err_len, "region of %s is too small for the header, an index and one %u-byte "
             "slab page; give it at least %u bytes or use smaller slab pages",
             rkv_format_size(size, sz, sizeof(sz)), c->slab_page_size,
             2 * HEAP_ALIGN + c->slab_page_size);
    return RKV_INVALID;
}

rkv_status rkv_table_create(void *base, size_t size, const struct rkv_table_config *cfg,
                            struct rkv_table **out, char *err, size_t err_len)
{
    struct rkv_table_config c;
    struct rkv_table *t = NULL;
    uint64_t buckets, heap_offset, heap_size, seeds[3];
    rkv_status st;

    if (base == NULL || out == NULL || (uintptr_t)base % RKV_CACHELINE != 0) {
        snprintf(err, err_len, "the table needs a region that starts on a %u-byte boundary "
                 "(rkv_region_create gives one)", RKV_CACHELINE);
        return RKV_INVALID;
    }
    if ((st = resolve_config(cfg, &c, err, err_len)) != RKV_OK ||
        (st = plan_layout(size, &c, &buckets, &heap_offset, &heap_size, err, err_len)) != RKV_OK)
        return st;
    if (getrandom(seeds, sizeof(seeds), 0) != (ssize_t)sizeof(seeds)) {
        snprintf(err, err_len, "getrandom() failed to seed the table; is the kernel's entropy "
                 "source available?");
        return RKV_INTERNAL;
    }
    if ((t = aligned_alloc(RKV_CACHELINE, RKV_ALIGN_UP(sizeof(*t), RKV_CACHELINE))) == NULL) {
        snprintf(err, err_len, "out of memory for the table's bookkeeping");
        return RKV_NO_MEMORY;
    }
    memset(t, 0, sizeof(*t));
    t->base = base;
    t->size = size;
    t->hdr = base;
    t->buckets = (struct rkv_bucket *)(void *)(t->base + RKV_HEADER_SIZE);
    t->bucket_count = buckets;
    t->seed = seeds[0];
    t->rng = seeds[2] | 1;
    t->cfg = c;
    t->now_ns = c.now_ns != NULL ? c.now_ns : rkv_now_ns;
    t->start_ns = t->now_ns();
    t->next_version = 1;
    for (unsigned i = 0; i < RKV_MAX_CLASSES; i++)
        t->reserve[i] = RESERVE_MIN;

    struct rkv_slab_config sc = {
        .region = t->base, .heap_offset = heap_offset, .heap_size = heap_size,
        .page_size = c.slab_page_size, .growth_factor = c.growth_factor,
        .grace_ms = c.grace_ms, .item_meta = c.evict == RKV_EVICT_LRU,
        .clock_ns = c.now_ns,   /* one time source: a test's clock drives grace periods too */
    };
    if ((st = rkv_slab_create(&sc, &t->slab, err, err_len)) != RKV_OK) {
        free(t);
        return st;
    }
    pthread_mutex_init(&t->lock, NULL);

    struct rkv_region_header *h = t->hdr;
    memset(h, 0, RKV_HEADER_SIZE);
    memset(t->buckets, 0, buckets * sizeof(struct rkv_bucket));
    h->format_version = RKV_FORMAT_VERSION;
    h->header_size = RKV_HEADER_SIZE;
    h->generation = seeds[1];
    h->region_size = size;
    h->index_offset = RKV_HEADER_SIZE;
    h->bucket_count = buckets;
    h->heap_offset = heap_offset;
    h->heap_size = heap_size;
    h->slab_page_size = c.slab_page_size;
    h->class_count = rkv_slab_class_count(t->slab);
    h->max_key_len = c.max_key_len;
    h->max_value_len = c.max_value_len;
    h->hash_seed = t->seed;
    h->clock = 1;
    for (unsigned i = 0; i < h->class_count; i++)
        h->class_size[i] = rkv_slab_class_size(t->slab, i);
    __atomic_store_n(&h->magic, RKV_REGION_MAGIC, __ATOMIC_RELEASE);  /* last: the header is complete */
    *out = t;
    return RKV_OK;
}

void rkv_table_destroy(struct rkv_table *t)
{
    if (t == NULL)
        return;
    rkv_slab_destroy(t->slab);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
