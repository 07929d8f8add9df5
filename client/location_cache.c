/* location_cache.c — the process's shared, lock-free location cache
 * (location_cache.h).
 *
 * An entry is one word, (slot & ~0xffff) | tag, read and written atomically:
 * a find compares the tags of the set's 8 ways, a store CASes the one way it
 * chose from the value it saw (losing the race just leaves the other
 * writer's entry). The registry of caches (one per size in use) takes a
 * mutex, at acquire/release time only; the GET path never does.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "location_cache.h"

#define TAG_MASK 0xffffull

struct set {
    _Alignas(64) uint64_t way[RKV_LOC_CACHE_WAYS];
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

/* Where (region, key) lives: its set (low bits of the hash) and its tag
 * (the top 16 bits, independent of the set index). */
static struct set *locate(const struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash,
                          uint64_t *tag)
{
    uint64_t h = mix64(key_hash ^ mix64(region));
    *tag = h >> 48;
    return &lc->sets[h & lc->set_mask];
}

static unsigned round_entries(unsigned entries)
{
    unsigned n = RKV_LOC_CACHE_WAYS;
    while (n < entries && n < RKV_LOC_CACHE_MAX)
        n <<= 1;
    return n;
}

static struct rkv_loc_cache *cache_new(unsigned n)
{
    struct rkv_loc_cache *lc = calloc(1, sizeof *lc);
    size_t bytes = (size_t)n * sizeof(uint64_t);
    void *p = lc ? mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(lc);
        return NULL;
    }
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fine if THP is off */
    lc->sets = p;
    lc->set_mask = n / RKV_LOC_CACHE_WAYS - 1;
    lc->entries = n;
    return lc;
}

struct rkv_loc_cache *rkv_loc_cache_acquire(unsigned entries)
{
    unsigned n = round_entries(entries);
    struct rkv_loc_cache *lc;

    pthread_mutex_lock(&registry_lock);
    for (lc = registry; lc != NULL && lc->entries != n; lc = lc->next)
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
        munmap(lc->sets, (size_t)lc->entries * sizeof(uint64_t));
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
    const struct set *s = locate(lc, region, key_hash, &tag);
    for (unsigned w = 0; w < RKV_LOC_CACHE_WAYS; w++) {
        uint64_t e = __atomic_load_n(&s->way[w], __ATOMIC_RELAXED);
        if (e != 0 && (e & TAG_MASK) == tag)
            return e;
    }
    return 0;
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

void rkv_loc_cache_store(struct rkv_loc_cache *lc, uint64_t region, uint64_t key_hash,
                         uint64_t slot)
{
    uint64_t tag, seen[RKV_LOC_CACHE_WAYS];
    struct set *s = locate(lc, region, key_hash, &tag);
    uint64_t entry = slot ? (slot & ~TAG_MASK) | tag : 0;
    int pick = -1;

    for (unsigned w = 0; w < RKV_LOC_CACHE_WAYS; w++) {
        seen[w] = __atomic_load_n(&s->way[w], __ATOMIC_RELAXED);
        if (seen[w] != 0 && (seen[w] & TAG_MASK) == tag) {
            pick = (int)w;               /* ours already: update or forget */
            break;
        }
        if (seen[w] == 0 && pick < 0)
            pick = (int)w;
    }
    if (pick < 0 || (seen[pick] == 0 && entry == 0)) {
        if (entry == 0)
            return;                      /* nothing to forget */
        pick = (int)random_way(key_hash);
    }
    __atomic_compare_exchange_n(&s->way[pick], &seen[pick], entry, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}
