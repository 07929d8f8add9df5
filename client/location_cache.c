/* location_cache.c — the process's shared, lock-free, growing location cache
 * (location_cache.h).
 *
 * An entry is one word, (slot & ~0xffff) | tag, read and written atomically:
 * a find compares the tags of the set's 8 ways, a store CASes the one way it
 * chose from the value it saw (losing the race just leaves the other
 * writer's entry). A cache is a chain of tables: `cur`, and through
 * cur->prev the one it replaced, probed on a miss. Growth (grow()) takes the
 * cache's mutex with a trylock; the registry of caches (one per budget in
 * use) takes its own mutex at acquire/release time only. The find path
 * never locks.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "location_cache.h"
#include "util.h"

#define TAG_MASK 0xffffull

struct set {
    _Alignas(64) uint64_t way[RKV_LOC_CACHE_WAYS];
};
_Static_assert(sizeof(struct set) == 64, "a set is one cache line");

struct table {
    struct set *sets;  /* mmap'ed: pages are zero until touched */
    uint64_t set_mask; /* sets - 1 */
    unsigned entries;
    struct table *prev;     /* atomic: the table this one replaced, or NULL */
    struct table *all_next; /* every table of the cache, for the final munmap */
};

struct rkv_loc_cache {
    struct table *cur;          /* atomic: the table finds and stores use */
    unsigned budget;            /* entries the table may grow to */
    unsigned refs;              /* under registry_lock */
    pthread_mutex_t grow_lock;  /* one grower at a time; guards `all` */
    struct table *all;          /* every table made, newest first */
    struct rkv_loc_cache *next; /* registry list */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rkv_loc_cache *registry;
static __thread uint64_t victim_rng;

/* splitmix64's finaliser: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* (region, key)'s hash: its set in any table is the low bits, its tag the
 * top 16 (never 0, so an empty way never matches). One bijective mix of the
 * two: for one region every key keeps its own hash, and a key's hash in
 * another region is unrelated to it. */
static uint64_t key_mix(uint64_t region, uint64_t key_hash)
{
    return mix64(key_hash ^ region);
}

static uint64_t tag_of(uint64_t h)
{
    uint64_t tag = h >> 48;
    return tag + (tag == 0);
}

static struct set *set_of(const struct table *t, uint64_t h)
{
    return &t->sets[h & t->set_mask];
}

static const struct table *current(const struct rkv_loc_cache *lc)
{
    return __atomic_load_n(&lc->cur, __ATOMIC_ACQUIRE);
}

/* The entry of `s` tagged `tag`, or 0. Reads all 8 ways without an early
 * exit (one cache line; no mispredicted loop exit): per way a load, a
 * compare and a conditional move. Two writers racing for one key can leave
 * it in two ways; the first is the one put() updates, so it is the one
 * found (the ways are walked from the last, the first match moved in last). */
static uint64_t entry_of(const struct set *s, uint64_t tag)
{
    uint64_t found = 0;
#pragma GCC unroll 8 /* RKV_LOC_CACHE_WAYS: one straight run of loads and compares */
    for (unsigned w = RKV_LOC_CACHE_WAYS; w-- > 0;) {
        uint64_t e = __atomic_load_n(&s->way[w], __ATOMIC_RELAXED);
        found = (e & TAG_MASK) == tag ? e : found;
    }
    return found;
}

static unsigned round_entries(unsigned entries)
{
    unsigned n = RKV_LOC_CACHE_WAYS;
    while (n < entries && n < RKV_LOC_CACHE_MAX)
        n <<= 1;
    return n;
}

/* A table's first size: 1/64 of the budget, at least one set, at most
 * RKV_LOC_CACHE_START. */
static unsigned start_entries(unsigned budget)
{
    unsigned n = budget / 64;
    return n < RKV_LOC_CACHE_WAYS    ? RKV_LOC_CACHE_WAYS
           : n > RKV_LOC_CACHE_START ? RKV_LOC_CACHE_START
                                     : n;
}

static size_t table_bytes(const struct table *t)
{
    return (size_t)t->entries * sizeof(uint64_t);
}

static struct table *table_new(unsigned n)
{
    struct table *t = calloc(1, sizeof *t);
    size_t bytes = (size_t)n * sizeof(uint64_t);
    void *p = t ? mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(t);
        return NULL;
    }
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fine if THP is off */
    t->sets = p;
    t->set_mask = n / RKV_LOC_CACHE_WAYS - 1;
    t->entries = n;
    return t;
}

static void cache_free(struct rkv_loc_cache *lc)
{
    for (struct table *t = lc->all, *next; t != NULL; t = next) {
        next = t->all_next;
        munmap(t->sets, table_bytes(t));
        free(t);
    }
    pthread_mutex_destroy(&lc->grow_lock);
    free(lc);
}

static struct rkv_loc_cache *cache_new(unsigned budget)
{
    struct rkv_loc_cache *lc = calloc(1, sizeof *lc);
    struct table *t = lc ? table_new(start_entries(budget)) : NULL;
    if (t == NULL) {
        free(lc);
        return NULL;
    }
    pthread_mutex_init(&lc->grow_lock, NULL);
    lc->cur = lc->all = t;
    lc->budget = budget;
    return lc;
}

struct rkv_loc_cache *rkv_loc_cache_acquire(unsigned entries)
{
    unsigned n = round_entries(entries);
    struct rkv_loc_cache *lc;

    pthread_mutex_lock(&registry_lock);
    for (lc = registry; lc != NULL && lc->budget != n; lc = lc->next)
        ;
    if (lc == NULL && (lc = cache_new(n)) != NULL) {
        lc->next = registry;
        registry = lc;
    }
    if (lc != NULL)
        lc->refs++;
    pthread_mutex_unlock(&registry_lock);
    return lc;
}

void rkv_loc_cache_release(struct rkv_loc_cache *lc)
{
    if (lc == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    if (--lc->refs == 0) {
        struct rkv_loc_cache **pp = &registry;
        while (*pp != lc)
            pp = &(*pp)->next;
        *pp = lc->next;
        cache_free(lc);
    }
    pthread_mutex_unlock(&registry_lock);
}

unsigned rkv_loc_cache_entries(const struct rkv_loc_cache *lc)
{
    return current(lc)->entries;
}

unsigned rkv_loc_cache_budget(const struct rkv_loc_cache *lc)
{
    return lc->budget;
}

/* Replace `seen` (if it is still current and below the budget) with a table
 * twice its size; the table before `seen` is emptied. Skips when another
 * caller is growing the cache right now. */
static void grow(struct rkv_loc_cache *lc, const struct table *seen)
{
    if (pthread_mutex_trylock(&lc->grow_lock) != 0)
        return;
    /* only growers write cur: stable under the lock */
    struct table *cur = __atomic_load_n(&lc->cur, __ATOMIC_RELAXED);
    struct table *t = cur == seen && cur->entries < lc->budget ? table_new(cur->entries * 2) : NULL;
    if (t != NULL) {
        struct table *old = cur->prev;
        t->prev = cur;
        t->all_next = lc->all;
        lc->all = t;
        __atomic_store_n(&lc->cur, t, __ATOMIC_RELEASE);
        if (old != NULL) {
            /* readers still holding cur may read old: zeros are empty ways */
            __atomic_store_n(&cur->prev, NULL, __ATOMIC_RELEASE);
            (void)madvise(old->sets, table_bytes(old), MADV_DONTNEED);
        }
    }
    pthread_mutex_unlock(&lc->grow_lock);
}

/* Count one eviction, and judge the meter once it has seen enough. */
static void note_eviction(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m,
                          const struct table *t)
{
    if (m == NULL || t->entries >= lc->budget)
        return;          /* not metered, or grown as far as it may */
    if (m->table != t) { /* counts about an older table are void */
        if (m->table != NULL)
            *m = (struct rkv_loc_cache_meter){ 0 };
        m->table = t;
    }
    if (++m->evictions < RKV_LOC_CACHE_GROW_SAMPLE)
        return;
    if (m->evictions * RKV_LOC_CACHE_GROW_RATE >= m->finds)
        grow(lc, t);
    *m = (struct rkv_loc_cache_meter){ .table = current(lc) };
}

static unsigned random_way(uint64_t seed)
{
    uint64_t x = victim_rng ? victim_rng : (seed | 1);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    victim_rng = x;
    return (unsigned)(x % RKV_LOC_CACHE_WAYS);
}

/* Store entry (0: forget) for the key of hash h and tag in table t.
 * Returns whether it replaced another key's live entry. */
static bool put(const struct table *t, uint64_t h, uint64_t tag, uint64_t entry)
{
    struct set *s = set_of(t, h);
    uint64_t seen[RKV_LOC_CACHE_WAYS];
    int pick = -1;

    for (unsigned w = 0; w < RKV_LOC_CACHE_WAYS; w++) {
        seen[w] = __atomic_load_n(&s->way[w], __ATOMIC_RELAXED);
        if ((seen[w] & TAG_MASK) == tag) {
            pick = (int)w; /* ours already: update or forget */
            break;
        }
        if (seen[w] == 0 && pick < 0)
            pick = (int)w;
    }
    if (pick < 0 || (seen[pick] == 0 && entry == 0)) {
        if (entry == 0)
            return false; /* nothing to forget */
        pick = (int)random_way(h);
    }
    bool evicts = seen[pick] != 0 && (seen[pick] & TAG_MASK) != tag;
    return __atomic_compare_exchange_n(&s->way[pick], &seen[pick], entry, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED) &&
           evicts;
}

void rkv_loc_cache_prefetch(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash)
{
    __builtin_prefetch(set_of(current(lc), key_mix(region, key_hash)));
}

/* A find's miss in the current table t: the table t replaced may still
 * know the key (out of line: the hit path then saves no registers). */
static __attribute__((noinline)) uint64_t find_in_prev(struct rkv_loc_cache *lc,
                                                       struct rkv_loc_cache_meter *m,
                                                       const struct table *t, uint64_t h,
                                                       uint64_t tag)
{
    uint64_t e;
    const struct table *p = __atomic_load_n(&t->prev, __ATOMIC_ACQUIRE);
    if (p == NULL || (e = entry_of(set_of(p, h), tag)) == 0)
        return 0;
    if (put(t, h, tag, e))
        note_eviction(lc, m, t); /* promoted into the current table */
    return e;
}

uint64_t rkv_loc_cache_find(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m,
                            uint64_t region, uint64_t key_hash)
{
    const struct table *t = current(lc);
    uint64_t h = key_mix(region, key_hash), tag = tag_of(h);
    uint64_t e = entry_of(set_of(t, h), tag);
    if (m != NULL)
        m->finds++;
    if (RKV_LIKELY(e != 0))
        return e;
    return find_in_prev(lc, m, t, h, tag);
}

void rkv_loc_cache_store(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m, uint64_t region,
                         uint64_t key_hash, uint64_t slot)
{
    const struct table *t = current(lc);
    uint64_t h = key_mix(region, key_hash), tag = tag_of(h);
    if (put(t, h, tag, slot ? (slot & ~TAG_MASK) | tag : 0)) {
        note_eviction(lc, m, t);
        return;
    }
    /* a forget also forgets what a find would promote from the previous table */
    const struct table *p = slot ? NULL : __atomic_load_n(&t->prev, __ATOMIC_ACQUIRE);
    if (p != NULL)
        (void)put(p, h, tag, 0);
}
