/* location_cache.c — the process's shared, lock-free location cache
 * (location_cache.h).
 *
 * Entry protocol. tag == 0: empty; tag == CLAIMED: a writer owns the entry;
 * any other value (always odd) names one (region, key). A writer CASes the
 * tag from what it saw to CLAIMED, stores the slot, then release-stores the
 * new tag (or 0 to forget). A reader acquire-loads the tag, loads the slot,
 * and re-loads the tag after an acquire fence; only a tag that matched both
 * times gives a slot. Two writers never own one entry at once, so an entry
 * is torn only through tag reuse (the same key re-stored, where both slots
 * are the key's) or a tag collision — both harmless, see the header.
 *
 * The registry of caches (one per size in use) takes a mutex, at
 * acquire/release time only; the GET path never does.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "location_cache.h"

#define CLAIMED 2ull   /* even: never a tag */

struct entry {
    uint64_t tag;
    uint64_t slot;
};

struct set {
    _Alignas(64) struct entry way[RKV_LOC_CACHE_WAYS];
};
_Static_assert(sizeof(struct set) == 64, "a set is one cache line");

struct rkv_loc_cache {
    struct set *sets;            /* mmap'ed: pages are zero until touched */
    uint64_t set_mask;           /* sets - 1 */
    unsigned entries;
    unsigned refs;               /* under registry_lock */
    struct rkv_loc_cache *next;  /* registry list */
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

/* Where (region, key) lives: its set and its tag (odd, so never 0 or CLAIMED). */
static struct set *locate(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash,
                          uint64_t *tag)
{
    uint64_t h = mix64(key_hash ^ mix64(region));
    *tag = mix64(h ^ 0x9e3779b97f4a7c15ull) | 1;
    return &lc->sets[h & lc->set_mask];
}

static unsigned round_entries(unsigned entries)
{
    unsigned n = RKV_LOC_CACHE_WAYS;
    while (n < entries && n < RKV_LOC_CACHE_MAX)
        n <<= 1;
    return n;
}

struct rkv_loc_cache *rkv_loc_cache_acquire(unsigned entries)
{
    unsigned n = round_entries(entries);
    struct rkv_loc_cache *lc;

    pthread_mutex_lock(&registry_lock);
    for (lc = registry; lc != NULL && lc->entries != n; lc = lc->next)
        ;
    if (lc == NULL && (lc = calloc(1, sizeof *lc)) != NULL) {
        size_t bytes = (size_t)n * sizeof(struct entry);
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            free(lc);
            lc = NULL;
        } else {
            lc->sets = p;
            lc->set_mask = n / RKV_LOC_CACHE_WAYS - 1;
            lc->entries = n;
            lc->next = registry;
            registry = lc;
        }
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
        munmap(lc->sets, (size_t)lc->entries * sizeof(struct entry));
        free(lc);
    }
    pthread_mutex_unlock(&registry_lock);
}

unsigned rkv_loc_cache_entries(const struct rkv_loc_cache *lc)
{
    return lc->entries;
}

uint64_t rkv_loc_cache_find(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash)
{
    uint64_t tag;
    struct set *s = locate(lc, region, key_hash, &tag);
    for (unsigned w = 0; w < RKV_LOC_CACHE_WAYS; w++) {
        struct entry *e = &s->way[w];
        if (__atomic_load_n(&e->tag, __ATOMIC_ACQUIRE) != tag)
            continue;
        uint64_t slot = __atomic_load_n(&e->slot, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        return __atomic_load_n(&e->tag, __ATOMIC_RELAXED) == tag ? slot : 0;
    }
    return 0;
}

/* Own entry e (whose tag was `seen`); false when another writer got it first. */
static bool claim(struct entry *e, uint64_t seen)
{
    return seen != CLAIMED &&
           __atomic_compare_exchange_n(&e->tag, &seen, CLAIMED, false, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static void fill(struct entry *e, uint64_t tag, uint64_t slot)
{
    __atomic_store_n(&e->slot, slot, __ATOMIC_RELAXED);
    __atomic_store_n(&e->tag, slot ? tag : 0, __ATOMIC_RELEASE);
}

void rkv_loc_cache_store(struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash,
                         uint64_t slot)
{
    uint64_t tag, seen[RKV_LOC_CACHE_WAYS];
    struct set *s = locate(lc, region, key_hash, &tag);
    int empty = -1;

    for (unsigned w = 0; w < RKV_LOC_CACHE_WAYS; w++) {
        seen[w] = __atomic_load_n(&s->way[w].tag, __ATOMIC_RELAXED);
        if (seen[w] == tag) {             /* ours already: update or forget */
            if (claim(&s->way[w], tag))
                fill(&s->way[w], tag, slot);
            return;
        }
        if (seen[w] == 0 && empty < 0)
            empty = (int)w;
    }
    if (slot == 0)
        return;                           /* nothing to forget */
    if (empty < 0) {
        uint64_t x = victim_rng ? victim_rng : (key_hash | 1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        victim_rng = x;
        empty = (int)(x % RKV_LOC_CACHE_WAYS);
    }
    if (claim(&s->way[empty], seen[empty]))
        fill(&s->way[empty], tag, slot);
}
