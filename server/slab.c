/* slab.c — size classes, slab pages, the grace-period limbo and the pool of
 * pages moving between classes (slab.h).
 *
 * Bookkeeping lives outside the region, so a client reading a freed item
 * sees exactly the bytes it had (plus the OBSOLETE state word): nothing the
 * allocator does can make a stale read look like a different valid item.
 *
 * Per class, freed items wait in one FIFO queue of 8-byte entries
 * (item unit << 24 | free time in ms mod 2^24). Entries are pushed in time
 * order under the class mutex, so the queue is sorted by age: the items whose
 * grace period is over form its head ("ready"), the rest its tail ("limbo").
 * Allocation pops the head only when its age is > grace_ms: ages are whole
 * milliseconds of a truncated clock, so an age of grace_ms can be up to 1 ms
 * short of it, an age of grace_ms + 1 never is. The 24-bit time
 * wraps every 4.6 hours; an age read modulo 2^24 is exact for anything
 * younger than that, and grace_ms is far shorter, so wrap-around can only
 * delay a reuse, never hasten one. The queue can hold every item the class
 * owns, so a push never fails; it grows to that when a page is assigned.
 * Its ring, though, uses only as many entries as the queue has needed so
 * far (queue_ring, doubled when full, up to queue_cap): the entries are 8
 * bytes an item, and a ring turning through all of them would keep them
 * all resident when a class's free items are usually a small share of it.
 *
 * Fragmentation — where heap bytes go that no item uses:
 *   - internal: an item is rounded up to its class: at most 3 bytes below
 *     RKV_SLAB_FINE4_BELOW (4-byte steps), 7 below the fine limit (8-byte
 *     steps), above it at most the step between two
 *     classes, about sqrt(f) or less (at most 16.5% of the item at f = 1.25,
 *     4.5% on average from 256 bytes to a 32nd of a 1 MiB page, and never
 *     more than memcached's chunk for it; rkv_slab_classes), and up to a
 *     page's divisor above a 32nd of the page.
 *   - page tails: page_size % class_size bytes at the end of each page
 *     (rkv_slab_stats().tail): under 4 bytes an item above a 32nd of the
 *     page (the divisor classes), and a page of items over half a page
 *     holds one.
 *   - calcification: a page given to a class stays there until it is moved.
 *     When the mix of item sizes shifts, memory stays in classes that no
 *     longer need it while a new class finds no unassigned page. With
 *     eviction on, the table rebalances (memcached's slab_reassign /
 *     automove): a class that needs memory and has nothing of its own to
 *     evict, or (LRU) whose evictions are much younger than another class's,
 *     gets a page of another class — the table evicts every live item on it
 *     through its normal delete path and calls rkv_slab_page_take(). The page
 *     then sits in the pool for grace_ms (its items may still be being read,
 *     design.md invariant 3), reserved for the class that asked, before
 *     class_grow() hands it out; a reserved page nobody claims is open to every class
 *     after one more grace_ms. A page whose items are still in use (being
 *     built by a writer) is never taken, so no allocated item ever loses its
 *     memory. See page_move.c for how pages are chosen.
 *   - too many classes for the pages: in a heap of not many more pages
 *     than the classes its items use (133 classes, 63 pages at 64 MiB),
 *     the pages went to the first classes that asked, many of them for a
 *     handful of items, and then a class with none moved a page (evicting
 *     all its items, and waiting out its grace period) for nearly every
 *     item: a store of mixed sizes slowed to a crawl and held a twentieth
 *     of memcached's items. So the last pages are kept for classes that
 *     fill them: once under 1/SCARCE_SHARE of the pages are left never
 *     assigned, an item of a class that owns no page goes to the smallest
 *     larger class within 9/8 of its size that owns pages and has an item
 *     ready (rkv_slab_host_class, rkv_slab_alloc_ready), and takes a page
 *     only when there is none; once no page is free, to such a class
 *     within RKV_SLAB_HOST_SPAN times its size whether or not it has one
 *     ready, and is evicted among its items: some rounding instead of a
 *     page of evictions. Beyond that span, a class with nothing to evict
 *     takes a page only from a class that owns two or more, else goes to
 *     the smallest larger class that owns pages at any size
 *     (rkv_slab_larger_owner, from evict.c). The class gets a page of its
 *     own by rebalancing (page_move.c), as any class does. memcached gives
 *     every class its first page even past its memory limit, and refuses a
 *     SET of a class it cannot give one ("out of memory storing object")
 *     until its automover moves a page.
 *   - draining: pages in the pool inside their grace period
 *     (rkv_slab_stats().draining); at most a page per move under way.
 *   - limbo: write rate x grace_ms x item size is always unusable.
 * rkv_slab_stats() accounts for every heap byte in these terms.
 *
 * Magazines. Every writer allocates and frees, so with one mutex per class
 * all writers of a size class would meet on that mutex and on the lines it
 * guards (queue, counters, page records) twice per write. A class of at
 * least MAG_MIN_PER_PAGE items per page (small items, the many-writes case)
 * has one magazine per thread slot: a `ready` stack of items taken from the
 * class for that slot to hand out, and a `freed` list of items the slot freed
 * that have not reached the class yet. The slot's own thread takes the
 * magazine's spinlock (a line no other thread touches, so no transfer; other
 * threads take it only to drain) on every call and the class mutex once per
 * batch: a refill first gives back its freed list, then takes up to the
 * class's batch by the usual reuse order (a new page only for the first);
 * a freed list that fills (twice the batch) is given back alone.
 * The batch is an eighth of a page's items, 8 to 32 (mag_batch): a class
 * of small items is where writes come fastest, so the one lock hold per
 * batch serves 32 writes there, and no magazine strands more than an
 * eighth of a page. Handing out an item asks for the next one's lines
 * (to write, up to MAG_PREFETCH_LINES), which the next write fills.
 * Rules that keep reuse exactly as safe as without magazines:
 *   - an item in a magazine is "used" for its class and page (c->used,
 *     the page's use count), so no page with an item in any magazine can be taken;
 *   - a ready item's grace period was over when the class gave it out
 *     (queue head checked per item) or it was never used (fresh);
 *   - a freed item enters the limbo when its list is given back, stamped
 *     with that moment: its grace period starts later than the free, never
 *     earlier (the table frees after its index locks for the same reason);
 *   - stats subtract magazine items from `used` and count them as ready or
 *     limbo (the owner changes its counts with single stores, each a
 *     consistent step, and refills hold the class lock stats read under);
 *   - whatever needs the class's exact state empties every magazine of the
 *     class first (rkv_slab_drain: a page move, rkv_slab_page_info, the
 *     limbo wait, an allocation that found nothing): ready items go back to
 *     the head of the free queue, stamped as already past the grace period
 *     (the queue stays "ready prefix, then limbo"), freed ones to its tail.
 * Lock order: magazine -> class -> pages. Items freed into a magazine of a
 * slot whose thread then stops stay there until the next drain; the table's
 * once-a-second tick drains (rkv_slab_drain) so that they come back.
 *
 * Per-item private words (item_meta, LRU access stamps) are read and written
 * without a lock by client hints, which may race a page move. So a page's
 * word block is never freed while the allocator lives: a page has at most two
 * — one sized for its first class and, once it has moved to a class with more
 * items per page than that, one for the smallest class (per_page[0]) — and
 * a reader always bounds its index by the block it loaded. A race stamps the wrong item, which
 * is harmless for an approximate LRU.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slab.h"
#include "util.h"

#define PAGE_FREE          0xffu /* a page's class: none (never assigned, or in the pool) */
#define PAGE_FOR_ANY       0xffu /* a pool page's for_cls: whichever class needs one */
#define PAGE_FOR_INDEX     0xfeu /* a pool page's for_cls: the index's (rkv_slab_lend), no class's */
#define NO_PAGE            UINT64_MAX
#define LIMBO_TIME_BITS    24
#define LIMBO_TIME_MASK    ((1ull << LIMBO_TIME_BITS) - 1)
#define LIMBO_UNIT_MAX     (UINT64_MAX >> LIMBO_TIME_BITS)
#define MAG_BATCH_MIN      8u  /* items a refill takes from its class: per_page / 8, */
#define MAG_BATCH_MAX      32u /*   within these bounds (mag_batch) */
#define MAG_FREED          (2 * MAG_BATCH_MAX) /* a magazine's freed list: given back at twice the batch */
#define MAG_MIN_PER_PAGE   64u /* classes with fewer items per page have no magazines */
#define MAG_PREFETCH_LINES 4u  /* lines of the next item a magazine asks for as it hands one out */
#define HOST_NEAR_NUM      9u  /* while pages are scarce but not gone: 9/8 of its size */
#define HOST_NEAR_DEN      8u
#define SCARCE_SHARE       4u /* pages are scarce below 1/SCARCE_SHARE never assigned */

RKV_STATIC_ASSERT(RKV_SLAB_MAX_GRACE_MS < (1u << (LIMBO_TIME_BITS - 1)),
                  "grace fits the limbo clock");
RKV_STATIC_ASSERT(RKV_MAX_CLASSES <= PAGE_FOR_INDEX, "class ids fit a page's byte");

/* The private words of one page's items: item i's is word[i], i < cap. */
struct meta_block {
    uint32_t cap;
    uint32_t word[];
};

/* One slab page of the heap. */
struct slab_page {
    uint8_t cls;       /* its class, or PAGE_FREE; stored last (release) */
    uint8_t for_cls;   /* in the pool: the class it was taken for, or PAGE_FOR_ANY (page lock) */
    uint32_t handed;   /* items [0, handed) were handed out since it joined its class (release) */
    uint64_t slot;     /* its entry in its class's pages[] (class lock) */
    uint64_t freed_ns; /* in the pool: last_free_ns when it left its class (page lock) */
    uint64_t taken_ns; /* in the pool: slab_now() when it left its class (page lock) */
    struct meta_block *meta;  /* item_meta: the block its class uses (release), else NULL */
    struct meta_block *first; /* item_meta: block sized for its first class; freed at destroy */
    struct meta_block *full; /* item_meta: block for the smallest class, made on demand; freed at destroy */
};

/* What the class lock's holds change for every item of a page they hand out
 * or take back, kept apart from the page's record (struct slab_page), which
 * every write reads without a lock (locate(): for each free and each LRU
 * stamp): so one writer's refills and give-backs, which touch the pages of
 * a whole batch, do not take the record lines the other writers read. */
struct page_use {
    uint32_t used;         /* items handed out and not freed (class lock) */
    uint64_t last_free_ns; /* slab_now() when an item of it was last freed (class lock) */
};

/* One size class, guarded by its lock (its size is in rkv_slab.size, a
 * line no writer changes). */
struct slab_class {
    pthread_mutex_t lock; /* alone on its line: a waiter spinning on it does not
                             pull the holder's fields away */
    uint64_t *queue
        __attribute__((aligned(RKV_CACHELINE))); /* freed items, oldest first (see top comment) */
    size_t queue_cap;                            /* entries queue can hold */
    size_t queue_ring;                           /* entries the ring turns through (<= queue_cap) */
    size_t queue_head;                           /* index of the oldest entry */
    size_t queue_len;                            /* entries in the queue */
    uint64_t *pages;    /* page numbers assigned to this class, in no particular order */
    size_t npages;      /* entries in pages */
    size_t pages_cap;   /* room in pages */
    uint64_t bump_page; /* newest page, whose items past `handed` are fresh; NO_PAGE */
    uint64_t used;      /* items handed out and not freed (magazines' included) */
    /* Published at every unlock, read without the lock (rkv_slab_class_spare),
     * on a line of their own: */
    uint64_t spare __attribute__((aligned(RKV_CACHELINE))); /* queue entries + fresh items */
    uint64_t owned;                                         /* items of the class's pages */
} __attribute__((aligned(RKV_CACHELINE)));

/* One thread slot's cache of one class (see the top comment). The counts
 * change under lock, with atomic stores: stats read them without it. */
struct slab_mag {
    uint32_t lock;                 /* a spinlock (mag_lock): its owner holds it for a few stores
                                      * (or one class-lock hold), others only to drain; 0 is
                                      * unlocked, so zeroed magazines need no setting up */
    uint32_t nready;               /* ready[0, nready): handed out next, from the end */
    uint32_t nfreed;               /* freed[0, nfreed): freed, not yet in the class's queue */
    uint64_t ready[MAG_BATCH_MAX]; /* region offsets */
    uint64_t freed[MAG_FREED]; /* free-queue entries: item unit << 24 | limbo time of the free */
} __attribute__((aligned(RKV_CACHELINE)));

/* Lock timing of one thread slot, on a line of its own. */
struct slot_lock_stats {
    struct rkv_lock_stats st;
} __attribute__((aligned(RKV_CACHELINE)));

struct rkv_slab {
    uint8_t *region;            /* region start */
    uint64_t heap_offset;       /* first page's offset */
    uint64_t heap_size;         /* bytes of heap */
    uint32_t page_size;         /* bytes per page */
    unsigned unit_shift;        /* log2(page_size / RKV_ITEM_ALIGN) when a power of two, else 0 */
    uint32_t grace_ms;          /* reuse delay */
    bool item_meta;             /* allocate per-item words */
    uint64_t (*clock_ns)(void); /* the configured clock, or NULL for rkv_now_ns() */
    uint64_t start_ns;          /* limbo clock origin */
    uint64_t page_count;        /* pages in the heap */
    struct slab_page *pages;    /* page_count entries */
    struct page_use *use;       /* page_count entries: pages[i]'s counts */
    unsigned class_count;       /* classes in use */
    bool lock_timing;           /* count lock holds in lock_stats */
    uint32_t size[RKV_MAX_CLASSES];          /* bytes per item of each class */
    uint32_t per_page[RKV_MAX_CLASSES];      /* items per page of each class */
    uint32_t mag_batch[RKV_MAX_CLASSES];     /* items a magazine refill takes; 0: no magazines */
    struct slab_mag *mags[RKV_THREAD_SLOTS]; /* per slot: class_count magazines, made on first
                                                * use (atomic pointer) */
    struct slot_lock_stats *lock_stats;      /* RKV_THREAD_SLOTS of them, with lock_timing */

    /* Written while serving; each group on lines of its own. */
    pthread_mutex_t page_lock __attribute__((aligned(RKV_CACHELINE)));
    /* guards next_page, page_limit, pool, pool_len, reassigns */
    uint64_t next_page;  /* pages [0, next_page) were assigned at least once */
    uint64_t page_limit; /* pages [page_limit, page_count) are lent to the index (atomic
                            * stores: rkv_slab_pages_any reads it) */
    uint64_t *pool;      /* page_count entries: pages taken from a class, in no order */
    uint64_t pool_len;   /* entries in pool (atomic stores: rkv_slab_pages_any reads it) */
    uint64_t reassigns;  /* pages taken from a class (rkv_slab_page_take) */
    struct slab_class classes[RKV_MAX_CLASSES];
};

/* The coarse sequence: from 64 bytes by the growth factor, each rounded up
 * to 64 bytes, the last the page size (at most RKV_SLAB_COARSE_CLASSES). */
static rkv_status coarse_classes(uint32_t page_size, double growth_factor,
                                 uint32_t class_size[RKV_SLAB_COARSE_CLASSES], unsigned *count,
                                 char *err, size_t err_len)
{
    uint64_t size = RKV_SLAB_COARSE_STEP;
    unsigned n = 0;
    for (;;) {
        if (n == RKV_SLAB_COARSE_CLASSES) {
            snprintf(err, err_len,
                     "slab growth factor %g needs more than %u size classes to "
                     "reach the %u-byte page size; raise the growth factor or lower the page size",
                     growth_factor, RKV_SLAB_COARSE_CLASSES, page_size);
            return RKV_INVALID;
        }
        if (size >= page_size) {
            class_size[n++] = page_size;
            break;
        }
        class_size[n++] = (uint32_t)size;
        uint64_t next = RKV_ALIGN_UP((uint64_t)((double)size * growth_factor), RKV_SLAB_COARSE_STEP);
        size = next > size ? next : size + RKV_SLAB_COARSE_STEP;
    }
    *count = n;
    return RKV_OK;
}

/* floor(sqrt(x)) */
static uint64_t isqrt(uint64_t x)
{
    uint64_t r = 0;
    for (uint64_t bit = 1ull << 62; bit != 0; bit >>= 2) {
        if (x >= r + bit) {
            x -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
    }
    return r;
}

/* Append the page's divisor classes (RKV_SLAB_DIVISORS) above the n classes
 * in class_size; returns the new count. A page of page_size / k bytes holds
 * k items, so a class between two divisors would hold no more per page than
 * the divisor above it: none is kept. */
static unsigned divisor_classes(uint32_t page_size, uint32_t class_size[RKV_MAX_CLASSES], unsigned n)
{
    for (unsigned k = RKV_SLAB_DIVISORS; k >= 1; k--) {
        uint32_t size = page_size / k / RKV_ITEM_ALIGN * RKV_ITEM_ALIGN;
        if (size >= RKV_MIN_ITEM_SIZE && (n == 0 || size > class_size[n - 1]))
            class_size[n++] = size;
    }
    return n;
}

/* memcached 1.6's chunk sizes (slabs_init with its defaults: -n 48, 8-byte
 * chunk alignment, CAS on): from MEMCACHED_FIRST_CHUNK by the growth factor,
 * each rounded up to 8 bytes. Its item takes MEMCACHED_ITEM_OVERHEAD bytes
 * beyond key and value (ITEM_ntotal: the 48-byte header, the 8-byte CAS, the
 * key's NUL, the value's CRLF; 4 more with client flags, as rkv's). */
#define MEMCACHED_FIRST_CHUNK   96u
#define MEMCACHED_ITEM_OVERHEAD 59u
#define MEMCACHED_CHUNK_ALIGN   8u

/* The smallest class an rkv item fits whenever memcached's item for the
 * same key and value fits its chunk of `chunk` bytes: rkv's prefix and a TTL
 * (memcached keeps its TTL in the header; rkv adds 4 bytes for one), rounded
 * up to RKV_ITEM_ALIGN. */
static uint64_t memcached_twin(uint64_t chunk)
{
    return RKV_ALIGN_UP(chunk - MEMCACHED_ITEM_OVERHEAD + RKV_ITEM_PREFIX_SIZE + 4u, RKV_ITEM_ALIGN);
}

/* The chunk after `chunk` in memcached's series: times the factor, rounded
 * up to its alignment, and at least one alignment step more (so a factor
 * barely above 1 still ends). */
static uint64_t memcached_next_chunk(uint64_t chunk, double growth_factor)
{
    uint64_t next = RKV_ALIGN_UP((uint64_t)((double)chunk * growth_factor), MEMCACHED_CHUNK_ALIGN);
    return RKV_MAX(next, chunk + MEMCACHED_CHUNK_ALIGN);
}

/* The twins memcached_classes may add from fine_limit to below `below`. */
static unsigned memcached_twins(double growth_factor, uint32_t fine_limit, uint32_t below)
{
    unsigned n = 0;
    for (uint64_t chunk = MEMCACHED_FIRST_CHUNK;; chunk = memcached_next_chunk(chunk, growth_factor)) {
        uint64_t size = memcached_twin(chunk);
        if (size >= below)
            return n;
        n += size >= fine_limit;
    }
}

/* Insert into the n sorted classes below `below` the twin (memcached_twin)
 * of every chunk of memcached's series for the growth factor from
 * fine_limit up, where no class has that size yet (*count: n, then the new
 * count).
 * So from fine_limit to the divisors no item's class is larger than its
 * memcached twin's chunk: a page holds at least as many of any item as
 * memcached's page does, at the sizes where memcached's chunks fit its items
 * best too. RKV_INVALID (message in err) when they leave no room for the
 * divisors. */
static rkv_status memcached_classes(double growth_factor, uint32_t fine_limit, uint32_t below,
                                    uint32_t class_size[RKV_MAX_CLASSES], unsigned *count,
                                    char *err, size_t err_len)
{
    unsigned n = *count;
    for (uint64_t chunk = MEMCACHED_FIRST_CHUNK;; chunk = memcached_next_chunk(chunk, growth_factor)) {
        uint64_t size = memcached_twin(chunk);
        if (size >= below) {
            *count = n;
            return RKV_OK;
        }
        unsigned at = 0;
        while (at < n && class_size[at] < size)
            at++;
        if (size < fine_limit || (at < n && class_size[at] == size))
            continue;
        if (n == RKV_MAX_CLASSES - RKV_SLAB_DIVISORS) {
            snprintf(err, err_len,
                     "slab growth factor %g needs more than %u size classes; raise the growth factor",
                     growth_factor, RKV_MAX_CLASSES);
            return RKV_INVALID;
        }
        memmove(&class_size[at + 1], &class_size[at], (n - at) * sizeof(class_size[0]));
        class_size[at] = (uint32_t)size;
        n++;
    }
}

rkv_status rkv_slab_classes(uint32_t page_size, double growth_factor, uint32_t fine_limit,
                            uint32_t class_size[RKV_MAX_CLASSES], uint32_t *class_count, char *err,
                            size_t err_len)
{
    if (page_size < RKV_SLAB_COARSE_STEP || page_size % RKV_SLAB_COARSE_STEP != 0) {
        snprintf(err, err_len,
                 "slab page size %u is not a positive multiple of %u bytes; "
                 "use a power of two such as 1048576",
                 page_size, RKV_SLAB_COARSE_STEP);
        return RKV_INVALID;
    }
    if (!(growth_factor > 1.0 && growth_factor <= 8.0)) {
        snprintf(err, err_len,
                 "slab growth factor %g is out of range; use a value in (1, 8], "
                 "typically 1.25",
                 growth_factor);
        return RKV_INVALID;
    }
    uint32_t coarse[RKV_SLAB_COARSE_CLASSES];
    unsigned nc, n = 0;
    rkv_status st = coarse_classes(page_size, growth_factor, coarse, &nc, err, err_len);
    if (st != RKV_OK)
        return st;
    if (fine_limit == 0) {
        memcpy(class_size, coarse, nc * sizeof(coarse[0]));
        *class_count = nc;
        return RKV_OK;
    }
    /* Fine: every RKV_ITEM_ALIGN step from the smallest item up to
     * RKV_SLAB_FINE4_BELOW, every second one from there up to fine_limit.
     * Then every coarse class (so no item takes more than it would with the
     * coarse classes alone), each preceded by the geometric mean of it and
     * the class before, rounded up to 8 bytes (so the steps above
     * fine_limit grow by about the square root of the factor), below
     * page_size / RKV_SLAB_DIVISORS; with them the twins of memcached's
     * chunks (memcached_classes); then the divisors. The fine classes may
     * take what those leave of RKV_MAX_CLASSES: at most two for each coarse
     * class below the divisors, one for each twin, and RKV_SLAB_DIVISORS. */
    uint32_t prev = 0, divisors_from = page_size / RKV_SLAB_DIVISORS;
    unsigned fine_max = RKV_MAX_CLASSES - RKV_SLAB_DIVISORS -
                        memcached_twins(growth_factor, fine_limit, divisors_from);
    for (unsigned i = 0; i < nc && coarse[i] < divisors_from; i++)
        fine_max -= 2;
    for (uint32_t s = RKV_MIN_ITEM_SIZE; s < fine_limit && s < page_size;
         s += s < RKV_SLAB_FINE4_BELOW ? RKV_ITEM_ALIGN : 2 * RKV_ITEM_ALIGN) {
        if (n == fine_max) {
            snprintf(err, err_len, "fine size classes up to %u bytes are more than %u", fine_limit,
                     fine_max);
            return RKV_INVALID;
        }
        class_size[n++] = prev = s;
    }
    for (unsigned i = 0; i < nc && coarse[i] < divisors_from; i++) {
        if (coarse[i] <= prev)
            continue;
        uint64_t mid = RKV_ALIGN_UP(isqrt((uint64_t)prev * coarse[i]), 2 * RKV_ITEM_ALIGN);
        if (prev != 0 && mid > prev && mid < coarse[i])
            class_size[n++] = (uint32_t)mid;
        class_size[n++] = prev = coarse[i];
    }
    if ((st = memcached_classes(growth_factor, fine_limit, divisors_from, class_size, &n, err,
                                err_len)) != RKV_OK)
        return st;
    n = divisor_classes(page_size, class_size, n);
    *class_count = n;
    return RKV_OK;
}

uint64_t rkv_slab_mag_bytes(uint32_t page_size, double growth_factor, uint32_t fine_limit)
{
    uint32_t sizes[RKV_MAX_CLASSES], n;
    char err[8];
    if (rkv_slab_classes(page_size, growth_factor, fine_limit, sizes, &n, err, sizeof err) != RKV_OK)
        return 0;
    return RKV_ALIGN_UP((uint64_t)n * sizeof(struct slab_mag), RKV_CACHELINE); /* mags_of_slot() */
}

/* Now, in nanoseconds, on the clock grace periods are timed on. */
static uint64_t slab_now(const struct rkv_slab *s)
{
    return s->clock_ns != NULL ? s->clock_ns() : rkv_now_ns();
}

/* Milliseconds on the limbo clock at time now_ns, mod 2^24. */
static uint64_t limbo_time(const struct rkv_slab *s, uint64_t now_ns)
{
    return ((now_ns - s->start_ns) / 1000000u) & LIMBO_TIME_MASK;
}

static uint64_t limbo_now(const struct rkv_slab *s)
{
    return limbo_time(s, slab_now(s));
}

/* Has a limbo entry of this age (ms, truncated) waited out the grace period? */
static bool grace_over(const struct rkv_slab *s, uint64_t age)
{
    return age > s->grace_ms;
}

static uint64_t entry_age(uint64_t entry, uint64_t now)
{
    return (now - (entry & LIMBO_TIME_MASK)) & LIMBO_TIME_MASK;
}

static uint64_t queue_at(const struct slab_class *c, size_t i)
{
    return c->queue[(c->queue_head + i) % c->queue_ring];
}

/* Entries at the queue's head whose grace period is over (ages fall from
 * head to tail, so binary search). Class lock held. */
static size_t queue_ready(const struct rkv_slab *s, const struct slab_class *c, uint64_t now)
{
    size_t lo = 0, hi = c->queue_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (grace_over(s, entry_age(queue_at(c, mid), now)))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ------------------------------------------------------------ locks */

unsigned rkv_thread_slot(void)
{
    static unsigned next;
    static __thread unsigned mine = UINT32_MAX;
    if (RKV_UNLIKELY(mine == UINT32_MAX))
        mine = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % RKV_THREAD_SLOTS;
    return mine;
}

static void stat_add(uint64_t *counter, uint64_t delta)
{
    __atomic_fetch_add(counter, delta, __ATOMIC_RELAXED); /* slots may be shared */
}

uint64_t rkv_lock_timed(pthread_mutex_t *m, struct rkv_lock_stats *st)
{
    if (st == NULL) {
        pthread_mutex_lock(m);
        return 0;
    }
    uint64_t asked = rkv_now_ns(), since = asked;
    if (pthread_mutex_trylock(m) != 0) {
        pthread_mutex_lock(m);
        since = rkv_now_ns();
        stat_add(&st->contended, 1);
        stat_add(&st->wait_ns, since - asked);
    }
    return since;
}

void rkv_unlock_timed(pthread_mutex_t *m, struct rkv_lock_stats *st, uint64_t since)
{
    if (st != NULL) {
        uint64_t held = rkv_now_ns() - since,
                 max = __atomic_load_n(&st->hold_max_ns, __ATOMIC_RELAXED);
        stat_add(&st->holds, 1);
        stat_add(&st->hold_ns, held);
        while (held > max && !__atomic_compare_exchange_n(&st->hold_max_ns, &max, held, true,
                                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
    pthread_mutex_unlock(m);
}

void rkv_lock_stats_sum(const struct rkv_lock_stats *per_slot, size_t stride,
                        struct rkv_lock_stats *out)
{
    for (unsigned i = 0; i < RKV_THREAD_SLOTS; i++) {
        const struct rkv_lock_stats *st =
            (const struct rkv_lock_stats *)(const void *)((const uint8_t *)per_slot + i * stride);
        out->holds += __atomic_load_n(&st->holds, __ATOMIC_RELAXED);
        out->contended += __atomic_load_n(&st->contended, __ATOMIC_RELAXED);
        out->wait_ns += __atomic_load_n(&st->wait_ns, __ATOMIC_RELAXED);
        out->hold_ns += __atomic_load_n(&st->hold_ns, __ATOMIC_RELAXED);
        out->hold_max_ns = RKV_MAX(out->hold_max_ns,
                                   __atomic_load_n(&st->hold_max_ns, __ATOMIC_RELAXED));
    }
}

/* This thread's lock counters, or NULL without lock_timing. */
static struct rkv_lock_stats *my_lock_stats(const struct rkv_slab *s)
{
    return s->lock_timing ? &s->lock_stats[rkv_thread_slot()].st : NULL;
}

/* A class's or the page table's mutex, timed with lock_timing. */
static uint64_t slab_lock(const struct rkv_slab *s, pthread_mutex_t *m)
{
    return rkv_lock_timed(m, my_lock_stats(s));
}

static void slab_unlock(const struct rkv_slab *s, pthread_mutex_t *m, uint64_t since)
{
    rkv_unlock_timed(m, my_lock_stats(s), since);
}

void rkv_slab_lock_stats(const struct rkv_slab *s, struct rkv_lock_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (s->lock_stats != NULL)
        rkv_lock_stats_sum(&s->lock_stats[0].st, sizeof(s->lock_stats[0]), out);
}

/* ------------------------------------------------------------ classes */

static uint64_t class_fresh(const struct rkv_slab *s, const struct slab_class *c, unsigned cls);

/* Class cls's mutex, timed with lock_timing. */
static uint64_t class_lock(struct rkv_slab *s, unsigned cls)
{
    return slab_lock(s, &s->classes[cls].lock);
}

/* ... and its unlock, which publishes what the class holds for
 * rkv_slab_class_spare(). */
static void class_unlock(struct rkv_slab *s, unsigned cls, uint64_t since)
{
    struct slab_class *c = &s->classes[cls];
    __atomic_store_n(&c->spare, c->queue_len + class_fresh(s, c, cls), __ATOMIC_RELAXED);
    __atomic_store_n(&c->owned, c->npages * s->per_page[cls], __ATOMIC_RELAXED);
    slab_unlock(s, &c->lock, since);
}

/* Where page `page` is: the pages lie top down (slab.h), page 0 the
 * heap's last. */
static uint64_t page_start(const struct rkv_slab *s, uint64_t page)
{
    return s->heap_offset + (s->page_count - 1 - page) * s->page_size;
}

/* Never-used items of the class's newest page. Class lock held. */
static uint64_t class_fresh(const struct rkv_slab *s, const struct slab_class *c, unsigned cls)
{
    return c->bump_page != NO_PAGE ? s->per_page[cls] - s->pages[c->bump_page].handed : 0;
}

uint64_t rkv_slab_class_spare(struct rkv_slab *s, unsigned cls, uint64_t *owned)
{
    if (cls >= s->class_count) {
        *owned = 0;
        return 0;
    }
    *owned = __atomic_load_n(&s->classes[cls].owned, __ATOMIC_RELAXED);
    return __atomic_load_n(&s->classes[cls].spare, __ATOMIC_RELAXED);
}

/* The page of heap unit `unit` (an RKV_ITEM_ALIGN step into the heap): a
 * shift for a power-of-two page size (rkv-server's always are), since the
 * class lock's holds look up a page per item. */
static uint64_t page_of_unit(const struct rkv_slab *s, uint64_t unit)
{
    uint64_t from_bottom = s->unit_shift != 0 ? unit >> s->unit_shift
                                              : unit * RKV_ITEM_ALIGN / s->page_size;
    return s->page_count - 1 - from_bottom; /* the pages lie top down */
}

/* Nanoseconds until pool page p may go to class cls: grace_ms after the
 * last of its items was freed for the class it was taken for (or any class);
 * for the others, grace_ms after that or after it was taken, if later. Page
 * lock held. */
static uint64_t pool_wait(const struct rkv_slab *s, const struct slab_page *p, unsigned cls,
                          uint64_t now)
{
    uint64_t grace = (uint64_t)s->grace_ms * 1000000u;
    uint64_t ready = p->freed_ns + grace;
    if (p->for_cls == PAGE_FOR_INDEX)
        return UINT64_MAX; /* the index's, once its grace is over */
    if (p->for_cls != PAGE_FOR_ANY && p->for_cls != cls)
        ready = RKV_MAX(ready, p->taken_ns) + grace; /* the class it was taken for has first claim */
    return ready > now ? ready - now : 0;
}

/* A page for class cls, out of the pool or never assigned: the pool page
 * that left its class first among those cls may take now, else the next
 * never-assigned one; NO_PAGE when there is neither. */
static uint64_t page_acquire(struct rkv_slab *s, unsigned cls)
{
    uint64_t now = slab_now(s), page = NO_PAGE, at = 0;
    uint64_t since = slab_lock(s, &s->page_lock);
    for (uint64_t i = 0; i < s->pool_len; i++) {
        const struct slab_page *p = &s->pages[s->pool[i]];
        if (pool_wait(s, p, cls, now) == 0 &&
            (page == NO_PAGE || p->freed_ns < s->pages[page].freed_ns)) {
            page = s->pool[i];
            at = i;
        }
    }
    if (page != NO_PAGE) {
        s->pool[at] = s->pool[s->pool_len - 1];
        __atomic_store_n(&s->pool_len, s->pool_len - 1, __ATOMIC_RELAXED);
    } else if (s->next_page < s->page_limit) /* (read without the lock: rkv_slab_pages_any) */
        __atomic_store_n(&s->next_page, (page = s->next_page) + 1, __ATOMIC_RELAXED);
    slab_unlock(s, &s->page_lock, since);
    return page;
}

/* Give back a page page_acquire() returned and no class took: it goes to the
 * pool, open to any class once its grace period (if any is left) is over. */
static void page_release(struct rkv_slab *s, uint64_t page)
{
    uint64_t since = slab_lock(s, &s->page_lock);
    s->pages[page].for_cls = PAGE_FOR_ANY;
    s->pool[s->pool_len] = page;
    __atomic_store_n(&s->pool_len, s->pool_len + 1, __ATOMIC_RELAXED);
    slab_unlock(s, &s->page_lock, since);
}

static struct meta_block *meta_block_new(uint32_t cap)
{
    struct meta_block *b = calloc(1, sizeof(*b) + (size_t)cap * sizeof(b->word[0]));
    if (b != NULL)
        b->cap = cap;
    return b;
}

/* Point page p's private words at a block with room for per_page items:
 * the one made for its first class if that is large enough, else one for the
 * smallest class (made once). Blocks are never freed while the slab lives,
 * since lock-free readers may still hold one (see the top comment). */
static bool page_meta_attach(struct rkv_slab *s, struct slab_page *p, uint32_t per_page)
{
    struct meta_block *b = p->first;
    if (b == NULL) {
        if ((b = p->first = meta_block_new(per_page)) == NULL)
            return false;
    } else if (b->cap < per_page) {
        if (p->full == NULL && (p->full = meta_block_new(s->per_page[0])) == NULL)
            return false;
        b = p->full;
    }
    __atomic_store_n(&p->meta, b, __ATOMIC_RELEASE);
    return true;
}

/* Give class cls a page (from the pool or never assigned) and hand out its
 * first item. The class's own bookkeeping grows first, so a failure leaves
 * no page behind. Class lock held. Returns the item offset, or 0. */
static uint64_t class_grow(struct rkv_slab *s, unsigned cls)
{
    struct slab_class *c = &s->classes[cls];
    size_t need = (c->npages + 1) * (size_t)s->per_page[cls];

    /* The queue can hold every item the class owns, and no more: the ring
     * is written end to end as it turns, so room beyond that would be
     * resident memory for nothing (8 bytes an item); growing copies only
     * the free entries. */
    if (need > c->queue_cap) {
        size_t cap = need;
        uint64_t *queue = malloc(cap * sizeof(*queue));
        if (queue == NULL)
            return 0;
        for (size_t i = 0; i < c->queue_len; i++)
            queue[i] = queue_at(c, i);
        free(c->queue);
        c->queue = queue;
        c->queue_cap = cap;
        c->queue_head = 0;
    }
    if (c->npages == c->pages_cap) {
        size_t cap = c->pages_cap ? 2 * c->pages_cap : 8;
        uint64_t *pages = realloc(c->pages, cap * sizeof(*pages));
        if (pages == NULL)
            return 0;
        c->pages = pages;
        c->pages_cap = cap;
    }

    uint64_t page = page_acquire(s, cls);
    if (page == NO_PAGE)
        return 0;
    struct slab_page *p = &s->pages[page];
    if (s->item_meta && !page_meta_attach(s, p, s->per_page[cls])) {
        page_release(s, page);
        return 0;
    }
    s->use[page].used = 1;
    p->slot = c->npages;
    __atomic_store_n(&p->handed, 1u, __ATOMIC_RELEASE);
    __atomic_store_n(&p->cls, (uint8_t)cls, __ATOMIC_RELEASE);
    c->pages[c->npages++] = page;
    c->bump_page = page;
    return page_start(s, page);
}

/* The page and item index of `off` in class cls, or false. No lock. */
static bool locate(const struct rkv_slab *s, uint64_t off, unsigned cls, struct slab_page **page,
                   uint32_t *index)
{
    if (cls >= s->class_count || off < s->heap_offset || off - s->heap_offset >= s->heap_size ||
        off % RKV_ITEM_ALIGN != 0)
        return false;
    uint64_t rel = off - s->heap_offset;
    struct slab_page *p = &s->pages[s->page_count - 1 - rel / s->page_size]; /* top down */
    uint32_t in_page = (uint32_t)(rel % s->page_size);
    uint32_t size = s->size[cls];
    if (__atomic_load_n(&p->cls, __ATOMIC_ACQUIRE) != cls || in_page % size != 0 ||
        in_page / size >= __atomic_load_n(&p->handed, __ATOMIC_ACQUIRE))
        return false;
    *page = p;
    *index = in_page / size;
    return true;
}

/* One item of class cls by the reuse order (slab.h), or 0: the oldest limbo
 * item if its grace period is over at now_ms (limbo clock), else a fresh one
 * of the newest page, else (with `grow`) a new page. Class lock held. */
static uint64_t class_take(struct rkv_slab *s, unsigned cls, uint64_t now_ms, bool grow)
{
    struct slab_class *c = &s->classes[cls];
    uint64_t off = 0;
    if (c->queue_len > 0 && grace_over(s, entry_age(queue_at(c, 0), now_ms))) {
        uint64_t unit = queue_at(c, 0) >> LIMBO_TIME_BITS;
        c->queue_head = (c->queue_head + 1) % c->queue_ring;
        c->queue_len--;
        off = s->heap_offset + unit * RKV_ITEM_ALIGN;
        s->use[page_of_unit(s, unit)].used++;
    } else if (c->bump_page != NO_PAGE && s->pages[c->bump_page].handed < s->per_page[cls]) {
        struct slab_page *p = &s->pages[c->bump_page];
        off = page_start(s, c->bump_page) + (uint64_t)p->handed * s->size[cls];
        __atomic_store_n(&p->handed, p->handed + 1, __ATOMIC_RELEASE);
        s->use[c->bump_page].used++;
    } else if (grow) {
        off = class_grow(s, cls);
    }
    if (off != 0)
        c->used++;
    return off;
}

/* Let class c's full ring use more of its queue's room: twice the entries
 * (at least 64), up to queue_cap; false when it uses all of it. No
 * allocation: the entries from the head to the ring's end move to the
 * widened ring's end. Class lock held. */
static bool queue_widen(struct slab_class *c)
{
    size_t ring = c->queue_ring, wide = RKV_MIN(c->queue_cap, RKV_MAX(2 * ring, (size_t)64));
    if (wide <= ring)
        return false;
    if (c->queue_len == 0) {
        c->queue_head = 0;
    } else { /* full: head .. ring - 1, then 0 .. head - 1 */
        size_t first = ring - c->queue_head;
        memmove(c->queue + wide - first, c->queue + c->queue_head, first * sizeof(*c->queue));
        c->queue_head = wide - first;
    }
    c->queue_ring = wide;
    return true;
}

/* An item in use, unit `unit` of page `page`, goes back to its class's free
 * queue: at the tail with limbo time `at` (when it was freed; an entry older
 * than the tail's is stamped with the tail's time instead, so the queue stays
 * sorted: a later stamp only delays reuse) or, with `ready` (its grace period
 * is over, or it was never used), at the head, stamped as past the grace
 * period. now_ns is the time now. The caller has checked that the unit is an
 * item of class cls on that page. Class lock held. */
static void class_queue_put(struct rkv_slab *s, unsigned cls, uint64_t page, uint64_t unit,
                            uint64_t at, bool ready, uint64_t now_ns)
{
    struct slab_class *c = &s->classes[cls];
    struct page_use *p = &s->use[page];
    if (p->used == 0 || c->used == 0 || (c->queue_len == c->queue_ring && !queue_widen(c)))
        return; /* not in use: a caller bug, and harmless to drop */
    uint64_t now = limbo_time(s, now_ns);
    if (ready) {
        c->queue_head = (c->queue_head + c->queue_ring - 1) % c->queue_ring;
        c->queue[c->queue_head] = unit << LIMBO_TIME_BITS |
                                  ((now - s->grace_ms - 1) & LIMBO_TIME_MASK);
    } else {
        if (c->queue_len > 0) {
            uint64_t tail = queue_at(c, c->queue_len - 1) & LIMBO_TIME_MASK;
            if (entry_age(tail, now) < entry_age(at, now))
                at = tail;
        }
        c->queue[(c->queue_head + c->queue_len) % c->queue_ring] = unit << LIMBO_TIME_BITS | at;
        p->last_free_ns = now_ns;
    }
    c->queue_len++;
    c->used--;
    p->used--;
}

/* class_queue_put for an item given by its offset, checked first: ignored
 * unless it is an item of class cls in use. Class lock held. */
static void class_put(struct rkv_slab *s, unsigned cls, uint64_t off, uint64_t at, bool ready,
                      uint64_t now_ns)
{
    struct slab_page *p;
    uint32_t index;

    /* Checked under the class lock: a page joins or leaves the class only
     * under it, so the item cannot change class meanwhile. */
    if (locate(s, off, cls, &p, &index))
        class_queue_put(s, cls, (uint64_t)(p - s->pages), (off - s->heap_offset) / RKV_ITEM_ALIGN,
                        at, ready, now_ns);
}

/* ------------------------------------------------------------ magazines */

static void mag_lock(struct slab_mag *m)
{
    while (__atomic_exchange_n(&m->lock, 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(&m->lock, __ATOMIC_RELAXED) != 0)
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#else
            ;
#endif
}

static void mag_unlock(struct slab_mag *m)
{
    __atomic_store_n(&m->lock, 0, __ATOMIC_RELEASE);
}

/* The bytes of a slot's magazines, one per class. */
static size_t mags_bytes(const struct rkv_slab *s)
{
    return s->class_count * sizeof(struct slab_mag);
}

/* Slot `slot`'s magazines, made on its first use, zeroed in a mapping of
 * their own: the classes the slot never writes (most of 100-odd) cost no
 * memory. NULL when out of memory (the slot then goes to the classes
 * directly). */
static struct slab_mag *mags_of_slot(struct rkv_slab *s, unsigned slot)
{
    struct slab_mag *m = __atomic_load_n(&s->mags[slot], __ATOMIC_ACQUIRE);
    if (RKV_LIKELY(m != NULL))
        return m;
    struct slab_mag *made = rkv_zeroed_map(mags_bytes(s));
    if (made == NULL)
        return NULL;
    if (__atomic_compare_exchange_n(&s->mags[slot], &m, made, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return made;
    rkv_zeroed_unmap(made, mags_bytes(s)); /* another thread of the slot was first */
    return m;
}

/* This thread's magazine of class cls, or NULL when the class has none. */
static struct slab_mag *my_mag(struct rkv_slab *s, unsigned cls)
{
    if (s->mag_batch[cls] == 0)
        return NULL;
    struct slab_mag *m = mags_of_slot(s, rkv_thread_slot());
    return m != NULL ? &m[cls] : NULL;
}

static void mag_set(uint32_t *count, uint32_t n)
{
    __atomic_store_n(count, n, __ATOMIC_RELAXED);
}

/* Give magazine m's freed items to the class's queue, in the order freed.
 * rkv_slab_free checked each (locate) as it entered the list, and its page
 * cannot have changed class since: the item counts as used until now. So
 * the hold only finds its page (a shift). Magazine and class locks held. */
static void mag_give_freed(struct rkv_slab *s, unsigned cls, struct slab_mag *m, uint64_t now_ns)
{
    for (uint32_t i = 0; i < m->nfreed; i++) {
        uint64_t entry = m->freed[i], unit = entry >> LIMBO_TIME_BITS;
        class_queue_put(s, cls, page_of_unit(s, unit), unit, entry & LIMBO_TIME_MASK, false, now_ns);
    }
    mag_set(&m->nfreed, 0);
}

/* Refill an empty ready stack: give back the freed items, then take up to
 * the class's batch (with `grow`, a new page for the first). The page records the
 * freed items go back to are fetched before the class lock, so their misses
 * are not part of its hold. Magazine lock held. */
static void mag_refill(struct rkv_slab *s, unsigned cls, struct slab_mag *m, bool grow)
{
    uint64_t took[MAG_BATCH_MAX];
    uint32_t n = 0, batch = s->mag_batch[cls];
    struct slab_class *c = &s->classes[cls];
    /* the class's own lines too (lock, queue fields, published counts): the
     * last hold was as likely as not another writer's */
    rkv_prefetch_write(&c->lock);
    rkv_prefetch_write(&c->queue);
    rkv_prefetch_write(&c->spare);
    for (uint32_t i = 0; i < m->nfreed; i++)
        rkv_prefetch_write(&s->use[page_of_unit(s, m->freed[i] >> LIMBO_TIME_BITS)]);
    uint64_t since = class_lock(s, cls), now_ns = slab_now(s), now = limbo_time(s, now_ns);
    mag_give_freed(s, cls, m, now_ns);
    while (n < batch && (took[n] = class_take(s, cls, now, grow && n == 0)) != 0)
        n++;
    class_unlock(s, cls, since);
    for (uint32_t i = 0; i < n; i++) /* handed out in the order taken */
        m->ready[n - 1 - i] = took[i];
    mag_set(&m->nready, n);
}

/* Give magazine m's items back to the class: ready ones still ready, freed
 * ones into the limbo now. Magazine lock held. */
static void mag_drain(struct rkv_slab *s, unsigned cls, struct slab_mag *m)
{
    if (__atomic_load_n(&m->nready, __ATOMIC_RELAXED) == 0 &&
        __atomic_load_n(&m->nfreed, __ATOMIC_RELAXED) == 0)
        return;
    uint64_t since = class_lock(s, cls), now_ns = slab_now(s);
    mag_give_freed(s, cls, m, now_ns);
    for (uint32_t i = 0; i < m->nready; i++) /* the next to hand out ends at the very head */
        class_put(s, cls, m->ready[i], 0, true, now_ns);
    mag_set(&m->nready, 0);
    class_unlock(s, cls, since);
}

void rkv_slab_flush(struct rkv_slab *s, unsigned cls)
{
    struct slab_mag *m = cls < s->class_count ? my_mag(s, cls) : NULL;
    if (m == NULL)
        return;
    mag_lock(m);
    if (m->nfreed > 0) {
        uint64_t since = class_lock(s, cls);
        mag_give_freed(s, cls, m, slab_now(s));
        class_unlock(s, cls, since);
    }
    mag_unlock(m);
}

void rkv_slab_drain(struct rkv_slab *s, unsigned cls)
{
    if (cls >= s->class_count || s->mag_batch[cls] == 0)
        return;
    for (unsigned slot = 0; slot < RKV_THREAD_SLOTS; slot++) {
        struct slab_mag *m = __atomic_load_n(&s->mags[slot], __ATOMIC_ACQUIRE);
        if (m == NULL)
            continue;
        mag_lock(&m[cls]);
        mag_drain(s, cls, &m[cls]);
        mag_unlock(&m[cls]);
    }
}

/* Items of class cls in magazines: ready stacks, and of the freed lists
 * those past their grace period at limbo time `now` and those still inside
 * it. Class lock held: no list is given back meanwhile, so the entries below
 * a freed count (stored after its entry) stay put. */
static void mags_count(struct rkv_slab *s, unsigned cls, uint64_t now, uint64_t *ready,
                       uint64_t *freed_ready, uint64_t *freed_limbo)
{
    *ready = *freed_ready = *freed_limbo = 0;
    for (unsigned slot = 0; slot < RKV_THREAD_SLOTS; slot++) {
        struct slab_mag *m = __atomic_load_n(&s->mags[slot], __ATOMIC_ACQUIRE);
        if (m == NULL)
            continue;
        *ready += __atomic_load_n(&m[cls].nready, __ATOMIC_RELAXED);
        uint32_t n = __atomic_load_n(&m[cls].nfreed, __ATOMIC_ACQUIRE);
        for (uint32_t i = 0; i < n; i++) {
            if (grace_over(s, entry_age(__atomic_load_n(&m[cls].freed[i], __ATOMIC_RELAXED), now)))
                ++*freed_ready;
            else
                ++*freed_limbo;
        }
    }
}

void rkv_slab_mag_count(struct rkv_slab *s, unsigned cls, uint64_t *ready, uint64_t *freed)
{
    *ready = *freed = 0;
    if (cls >= s->class_count)
        return;
    for (unsigned slot = 0; slot < RKV_THREAD_SLOTS; slot++) {
        struct slab_mag *m = __atomic_load_n(&s->mags[slot], __ATOMIC_ACQUIRE);
        if (m != NULL) {
            *ready += __atomic_load_n(&m[cls].nready, __ATOMIC_RELAXED);
            *freed += __atomic_load_n(&m[cls].nfreed, __ATOMIC_RELAXED);
        }
    }
}

/* ------------------------------------------------------------ alloc / free */

/* An item straight from the class (no magazine). */
static uint64_t class_alloc(struct rkv_slab *s, unsigned cls, bool grow)
{
    uint64_t since = class_lock(s, cls);
    uint64_t off = class_take(s, cls, limbo_now(s), grow);
    class_unlock(s, cls, since);
    return off;
}

/* Ask for the lines of the item at `off`, up to MAG_PREFETCH_LINES, to
 * write: the next allocation fills them all, and a freed item's lines are
 * as likely as not in another writer's cache (it marked the item obsolete). */
static void mag_prefetch(const struct rkv_slab *s, unsigned cls, uint64_t off)
{
    uint32_t bytes = RKV_MIN(s->size[cls], MAG_PREFETCH_LINES * RKV_CACHELINE);
    for (uint32_t at = 0; at < bytes; at += RKV_CACHELINE)
        rkv_prefetch_write(s->region + off + at);
}

/* An item of class cls (rkv_slab_alloc); with `grow`, from a new page when
 * the class has none to hand out. */
static uint64_t slab_alloc(struct rkv_slab *s, unsigned cls, bool grow)
{
    if (cls >= s->class_count)
        return 0;
    struct slab_mag *m = my_mag(s, cls);
    if (m == NULL)
        return class_alloc(s, cls, grow);

    uint64_t off = 0;
    mag_lock(m);
    if (m->nready == 0)
        mag_refill(s, cls, m, grow);
    if (m->nready > 0) {
        off = m->ready[m->nready - 1];
        mag_set(&m->nready, m->nready - 1);
        if (m->nready > 0) /* the next one's lines, for the write it will get */
            mag_prefetch(s, cls, m->ready[m->nready - 1]);
    }
    mag_unlock(m);
    if (off != 0)
        return off;
    /* The class had nothing for us: maybe other magazines hold its items. */
    rkv_slab_drain(s, cls);
    return class_alloc(s, cls, grow);
}

uint64_t rkv_slab_alloc(struct rkv_slab *s, unsigned cls)
{
    return slab_alloc(s, cls, true);
}

void rkv_slab_free(struct rkv_slab *s, unsigned cls, uint64_t off)
{
    if (cls >= s->class_count)
        return;
    struct slab_mag *m = my_mag(s, cls);
    if (m == NULL) {
        uint64_t since = class_lock(s, cls), now_ns = slab_now(s);
        class_put(s, cls, off, limbo_time(s, now_ns), false, now_ns);
        class_unlock(s, cls, since);
        return;
    }
    struct slab_page *p;
    uint32_t index;
    if (!locate(s, off, cls, &p, &index))
        return; /* not an item of this class: ignored (class_put checks the rest) */
    mag_lock(m);
    if (m->nfreed == 2 * s->mag_batch[cls]) {
        uint64_t since = class_lock(s, cls);
        mag_give_freed(s, cls, m, slab_now(s));
        class_unlock(s, cls, since);
    }
    /* stamped now, under the magazine lock: a list's entries are in time order */
    __atomic_store_n(&m->freed[m->nfreed],
                     (off - s->heap_offset) / RKV_ITEM_ALIGN << LIMBO_TIME_BITS | limbo_now(s),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&m->nfreed, m->nfreed + 1, __ATOMIC_RELEASE); /* entry first: stats read it */
    mag_unlock(m);
}

bool rkv_slab_valid(const struct rkv_slab *s, uint64_t off, unsigned cls)
{
    struct slab_page *p;
    uint32_t i;
    return locate(s, off, cls, &p, &i);
}

uint32_t *rkv_slab_meta(struct rkv_slab *s, uint64_t off, unsigned cls)
{
    struct slab_page *p;
    uint32_t i;
    if (!s->item_meta || !locate(s, off, cls, &p, &i))
        return NULL;
    /* The page may have moved since locate() looked: the block loaded here
     * is one of its blocks, alive for good, and i is checked against it. */
    struct meta_block *b = __atomic_load_n(&p->meta, __ATOMIC_ACQUIRE);
    return b != NULL && i < b->cap ? &b->word[i] : NULL;
}

unsigned rkv_slab_sample(struct rkv_slab *s, unsigned cls, const uint64_t *rnd, unsigned n,
                         uint64_t *out)
{
    if (cls >= s->class_count)
        return 0;
    struct slab_class *c = &s->classes[cls];
    unsigned got = 0;

    uint64_t since = class_lock(s, cls);
    for (; got < n && c->npages > 0; got++) {
        uint64_t page = c->pages[(rnd[got] & 0xffffffffu) % c->npages];
        uint32_t handed = s->pages[page].handed;
        out[got] = page_start(s, page) + ((rnd[got] >> 32) % handed) * s->size[cls];
    }
    class_unlock(s, cls, since);
    return got;
}

int rkv_slab_limbo_wait_ms(struct rkv_slab *s, unsigned cls)
{
    if (cls >= s->class_count)
        return -1;
    struct slab_class *c = &s->classes[cls];
    int wait = -1;

    rkv_slab_drain(s, cls);
    uint64_t since = class_lock(s, cls);
    if (c->queue_len > 0) {
        uint64_t age = entry_age(queue_at(c, 0), limbo_now(s));
        wait = grace_over(s, age) ? 0 : (int)(s->grace_ms + 1 - age);
    }
    class_unlock(s, cls, since);
    return wait;
}

/* ------------------------------------------------------------ page moves */

uint64_t rkv_slab_page_count(const struct rkv_slab *s)
{
    return s->page_count;
}

int rkv_slab_page_class(const struct rkv_slab *s, uint64_t page)
{
    if (page >= s->page_count)
        return -1;
    unsigned cls = __atomic_load_n(&s->pages[page].cls, __ATOMIC_ACQUIRE);
    return cls < s->class_count ? (int)cls : -1;
}

bool rkv_slab_page_info(struct rkv_slab *s, uint64_t page, struct rkv_slab_page_info *out)
{
    int cls = rkv_slab_page_class(s, page);
    if (cls < 0)
        return false;
    const struct slab_page *p = &s->pages[page];
    rkv_slab_drain(s, (unsigned)cls); /* so that `used` counts no magazine's items */
    uint64_t since = class_lock(s, cls);
    /* it may have moved since the look above */
    bool ok = __atomic_load_n(&p->cls, __ATOMIC_RELAXED) == (unsigned)cls;
    if (ok)
        *out = (struct rkv_slab_page_info){
            .page = page,
            .start = page_start(s, page),
            .cls = (unsigned)cls,
            .size = s->size[cls],
            .handed = p->handed,
            .used = s->use[page].used,
        };
    class_unlock(s, cls, since);
    return ok;
}

/* Remove page's items from class c's free queue, keeping the others in
 * order (so still sorted by age). Class lock held. */
static void queue_drop_page(const struct rkv_slab *s, struct slab_class *c, uint64_t page)
{
    size_t kept = 0;
    for (size_t i = 0; i < c->queue_len; i++) {
        uint64_t entry = queue_at(c, i);
        if (page_of_unit(s, entry >> LIMBO_TIME_BITS) != page)
            c->queue[(c->queue_head + kept++) % c->queue_ring] = entry;
    }
    c->queue_len = kept;
}

bool rkv_slab_page_take(struct rkv_slab *s, uint64_t page, unsigned cls, int for_cls)
{
    if (page >= s->page_count || cls >= s->class_count || for_cls < RKV_SLAB_FOR_INDEX ||
        for_cls >= (int)s->class_count)
        return false;
    struct slab_class *c = &s->classes[cls];
    struct slab_page *p = &s->pages[page];
    bool taken = false;

    rkv_slab_drain(s, cls); /* items in magazines count as used */
    uint64_t since = class_lock(s, cls);
    if (__atomic_load_n(&p->cls, __ATOMIC_RELAXED) == cls && s->use[page].used == 0) {
        queue_drop_page(s, c, page);
        uint64_t last = c->pages[--c->npages];
        c->pages[p->slot] = last;
        s->pages[last].slot = p->slot;
        if (c->bump_page == page)
            c->bump_page = NO_PAGE;
        /* From here rkv_slab_valid() refuses its items. Its memory is handed
         * out again no earlier than grace_ms after the last of them was freed
         * (used == 0: every item handed out since it joined the class was
         * freed, and items of an earlier class drained before it joined). */
        __atomic_store_n(&p->cls, (uint8_t)PAGE_FREE, __ATOMIC_RELEASE);
        uint64_t page_since = slab_lock(s, &s->page_lock);
        p->for_cls = for_cls == RKV_SLAB_FOR_INDEX ? PAGE_FOR_INDEX
                     : for_cls < 0                 ? PAGE_FOR_ANY
                                                   : (uint8_t)for_cls;
        p->freed_ns = s->use[page].last_free_ns;
        p->taken_ns = slab_now(s);
        s->pool[s->pool_len] = page;
        __atomic_store_n(&s->pool_len, s->pool_len + 1, __ATOMIC_RELAXED);
        s->reassigns++;
        slab_unlock(s, &s->page_lock, page_since);
        taken = true;
    }
    class_unlock(s, cls, since);
    return taken;
}

int rkv_slab_page_wait_ms(struct rkv_slab *s, unsigned cls)
{
    if (cls >= s->class_count)
        return -1;
    uint64_t now = slab_now(s), best = UINT64_MAX;
    uint64_t since = slab_lock(s, &s->page_lock);
    for (uint64_t i = 0; i < s->pool_len; i++) {
        const struct slab_page *p = &s->pages[s->pool[i]];
        if (p->for_cls == PAGE_FOR_ANY || p->for_cls == cls)
            best = RKV_MIN(best, pool_wait(s, p, cls, now));
    }
    slab_unlock(s, &s->page_lock, since);
    if (best == UINT64_MAX)
        return -1;
    return (int)RKV_MIN((best + 999999u) / 1000000u, (uint64_t)INT32_MAX); /* rounded up */
}

/* Pages a class may take now (never assigned, or in the pool past their
 * grace period), and pool pages still inside it. */
static void pages_free(struct rkv_slab *s, uint64_t *unassigned, uint64_t *draining)
{
    uint64_t now = slab_now(s), ready = 0;
    uint64_t since = slab_lock(s, &s->page_lock);
    for (uint64_t i = 0; i < s->pool_len; i++)
        ready += s->pages[s->pool[i]].for_cls != PAGE_FOR_INDEX &&
                 s->pages[s->pool[i]].freed_ns + (uint64_t)s->grace_ms * 1000000u <= now;
    *unassigned = s->page_limit - RKV_MIN(s->next_page, s->page_limit) + ready;
    if (draining)
        *draining = s->pool_len - ready;
    slab_unlock(s, &s->page_lock, since);
}

void rkv_slab_class_stats(struct rkv_slab *s, unsigned cls, struct rkv_slab_class_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (cls >= s->class_count)
        return;
    struct slab_class *c = &s->classes[cls];
    uint64_t mag_ready = 0, freed_ready = 0, freed_limbo = 0;
    uint64_t since = class_lock(s, cls), now = limbo_now(s);
    /* Under the class lock no refill or give-back moves items between the
     * class and a magazine; the owners' own steps (hand out a ready item,
     * free one) each keep the sums right. */
    if (s->mag_batch[cls] != 0)
        mags_count(s, cls, now, &mag_ready, &freed_ready, &freed_limbo);
    out->size = s->size[cls];
    out->per_page = s->per_page[cls];
    out->pages = c->npages;
    out->used = c->used - mag_ready - freed_ready - freed_limbo;
    uint64_t queue_ready_now = queue_ready(s, c, now);
    out->ready = queue_ready_now + mag_ready + freed_ready;
    out->limbo = c->queue_len - queue_ready_now + freed_limbo;
    out->fresh = class_fresh(s, c, cls);
    class_unlock(s, cls, since);
}

void rkv_slab_stats(struct rkv_slab *s, struct rkv_slab_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->heap = s->heap_size;
    out->pages = s->page_count;
    for (unsigned i = 0; i < s->class_count; i++) {
        struct rkv_slab_class_stats cs;
        rkv_slab_class_stats(s, i, &cs);
        out->used += cs.used * cs.size;
        out->limbo += cs.limbo * cs.size;
        out->ready += cs.ready * cs.size;
        out->fresh += cs.fresh * cs.size;
        out->tail += cs.pages * (s->page_size - (uint64_t)cs.per_page * cs.size);
    }
    pages_free(s, &out->pages_unassigned, &out->pages_draining);
    out->unassigned = out->pages_unassigned * s->page_size;
    out->draining = out->pages_draining * s->page_size;
    uint64_t since = slab_lock(s, &s->page_lock);
    out->reassigns = s->reassigns;
    slab_unlock(s, &s->page_lock, since);
}

bool rkv_slab_pages_any(struct rkv_slab *s)
{
    /* next_page only grows: pages past it were never assigned, so while
     * there are any the answer needs no lock (every writer asks); once all
     * were, only the pool can hold one, and an empty pool needs no lock
     * either (a page moving there right now is inside its grace period) */
    if (__atomic_load_n(&s->next_page, __ATOMIC_RELAXED) <
        __atomic_load_n(&s->page_limit, __ATOMIC_RELAXED))
        return true;
    return __atomic_load_n(&s->pool_len, __ATOMIC_RELAXED) > 0 && rkv_slab_pages_unassigned(s) > 0;
}

uint64_t rkv_slab_pages_unassigned(struct rkv_slab *s)
{
    uint64_t n;
    pages_free(s, &n, NULL);
    return n;
}

/* Fewer than 1/SCARCE_SHARE of the heap's pages left never assigned. No
 * lock (next_page only grows). */
static bool pages_scarce(const struct rkv_slab *s)
{
    uint64_t next = __atomic_load_n(&s->next_page, __ATOMIC_RELAXED);
    uint64_t limit = __atomic_load_n(&s->page_limit, __ATOMIC_RELAXED);
    return next >= limit || (limit - next) * SCARCE_SHARE < limit;
}

/* The smallest class above cls whose size is at most `reach` and that
 * owns pages; cls when none does. No lock (published counts). */
static unsigned owner_above(const struct rkv_slab *s, unsigned cls, uint64_t reach)
{
    for (unsigned c = cls + 1; c < s->class_count && s->size[c] <= reach; c++)
        if (__atomic_load_n(&s->classes[c].owned, __ATOMIC_RELAXED) != 0)
            return c;
    return cls;
}

unsigned rkv_slab_host_class(struct rkv_slab *s, unsigned cls)
{
    if (cls >= s->class_count || __atomic_load_n(&s->classes[cls].owned, __ATOMIC_RELAXED) != 0)
        return cls;
    bool full = !rkv_slab_pages_any(s);
    if (!full && !pages_scarce(s))
        return cls;
    /* reach: twice the size on a full heap, else 9/8 (little rounding) */
    uint64_t reach = full ? (uint64_t)s->size[cls] * RKV_SLAB_HOST_SPAN
                          : (uint64_t)s->size[cls] * HOST_NEAR_NUM / HOST_NEAR_DEN;
    return owner_above(s, cls, reach);
}

unsigned rkv_slab_larger_owner(struct rkv_slab *s, unsigned cls)
{
    return cls < s->class_count ? owner_above(s, cls, UINT64_MAX) : cls;
}

uint64_t rkv_slab_alloc_ready(struct rkv_slab *s, unsigned cls)
{
    return slab_alloc(s, cls, false);
}

unsigned rkv_slab_class_count(const struct rkv_slab *s)
{
    return s->class_count;
}

uint32_t rkv_slab_class_size(const struct rkv_slab *s, unsigned cls)
{
    return cls < s->class_count ? s->size[cls] : 0;
}

int rkv_slab_class_for(const struct rkv_slab *s, size_t bytes)
{
    unsigned lo = 0, hi = s->class_count;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (s->size[mid] < bytes)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->class_count ? (int)lo : -1;
}

rkv_status rkv_slab_create(const struct rkv_slab_config *cfg, struct rkv_slab **out, char *err,
                           size_t err_len)
{
    uint32_t sizes[RKV_MAX_CLASSES];
    uint32_t count;
    struct rkv_slab *s = NULL;
    rkv_status st = rkv_slab_classes(cfg->page_size, cfg->growth_factor, cfg->fine_limit, sizes,
                                     &count, err, err_len);
    if (st != RKV_OK)
        return st;
    if (cfg->heap_size < cfg->page_size || cfg->heap_size % cfg->page_size != 0 ||
        cfg->heap_offset == 0 || cfg->heap_offset % RKV_ITEM_ALIGN != 0 ||
        (cfg->heap_offset + cfg->heap_size) / RKV_ITEM_ALIGN > LIMBO_UNIT_MAX) {
        snprintf(err, err_len,
                 "slab heap of %llu bytes at offset %llu is not a whole number of "
                 "%u-byte pages at a %u-byte aligned, non-zero offset below 2^%u units",
                 (unsigned long long)cfg->heap_size, (unsigned long long)cfg->heap_offset,
                 cfg->page_size, RKV_ITEM_ALIGN, 64 - LIMBO_TIME_BITS);
        return RKV_INVALID;
    }
    if (cfg->grace_ms > RKV_SLAB_MAX_GRACE_MS) {
        snprintf(err, err_len,
                 "grace period %u ms is longer than the %u ms the allocator supports; "
                 "lower it (reads finish in microseconds; 100 ms is plenty)",
                 cfg->grace_ms, RKV_SLAB_MAX_GRACE_MS);
        return RKV_INVALID;
    }
    /* aligned: the class array is cache-line aligned against false sharing */
    if ((s = aligned_alloc(RKV_CACHELINE, sizeof(*s))) == NULL)
        goto nomem;
    memset(s, 0, sizeof(*s));
    s->region = cfg->region;
    s->heap_offset = cfg->heap_offset;
    s->heap_size = cfg->heap_size;
    s->page_size = cfg->page_size;
    s->grace_ms = cfg->grace_ms;
    s->item_meta = cfg->item_meta;
    s->clock_ns = cfg->clock_ns;
    s->lock_timing = cfg->lock_timing;
    s->start_ns = slab_now(s);
    s->page_count = cfg->heap_size / cfg->page_size;
    s->page_limit = s->page_count;
    uint32_t units = cfg->page_size / RKV_ITEM_ALIGN;
    if ((units & (units - 1)) == 0)
        s->unit_shift = (unsigned)__builtin_ctz(units);
    pthread_mutex_init(&s->page_lock, NULL);
    if ((s->pages = calloc(s->page_count, sizeof(*s->pages))) == NULL ||
        (s->use = calloc(s->page_count, sizeof(*s->use))) == NULL ||
        (s->pool = calloc(s->page_count, sizeof(*s->pool))) == NULL)
        goto nomem;
    if (s->lock_timing) {
        size_t bytes = RKV_THREAD_SLOTS * sizeof(*s->lock_stats);
        if ((s->lock_stats = aligned_alloc(RKV_CACHELINE, bytes)) == NULL)
            goto nomem;
        memset(s->lock_stats, 0, bytes);
    }
    for (uint64_t i = 0; i < s->page_count; i++)
        s->pages[i].cls = PAGE_FREE;
    s->class_count = count;
    /* Class locks are held for a few dozen instructions and taken by every
     * writer: adaptive, a waiter spins briefly before it sleeps in the
     * kernel (a sleep and a wake-up cost more than the whole hold). */
    pthread_mutexattr_t adaptive;
    pthread_mutexattr_init(&adaptive);
    pthread_mutexattr_settype(&adaptive, PTHREAD_MUTEX_ADAPTIVE_NP);
    for (unsigned i = 0; i < count; i++) {
        struct slab_class *c = &s->classes[i];
        pthread_mutex_init(&c->lock, &adaptive);
        s->size[i] = sizes[i];
        s->per_page[i] = cfg->page_size / sizes[i];
        s->mag_batch[i] = s->per_page[i] < MAG_MIN_PER_PAGE
                              ? 0
                              : RKV_MIN(MAG_BATCH_MAX, RKV_MAX(MAG_BATCH_MIN, s->per_page[i] / 8));
        c->bump_page = NO_PAGE;
    }
    pthread_mutexattr_destroy(&adaptive);
    *out = s;
    return RKV_OK;

nomem:
    snprintf(err, err_len,
             "out of memory for the slab allocator's page table (%llu pages); "
             "use larger slab pages or free memory",
             (unsigned long long)(cfg->heap_size / cfg->page_size));
    rkv_slab_destroy(s);
    return RKV_NO_MEMORY;
}

void rkv_slab_destroy(struct rkv_slab *s)
{
    if (s == NULL)
        return;
    for (unsigned i = 0; i < s->class_count; i++) {
        pthread_mutex_destroy(&s->classes[i].lock);
        free(s->classes[i].queue);
        free(s->classes[i].pages);
    }
    for (unsigned slot = 0; slot < RKV_THREAD_SLOTS; slot++) {
        if (s->mags[slot] == NULL)
            continue;
        rkv_zeroed_unmap(s->mags[slot], mags_bytes(s));
    }
    if (s->pages != NULL)
        for (uint64_t i = 0; i < s->next_page; i++) {
            free(s->pages[i].first);
            free(s->pages[i].full);
        }
    free(s->lock_stats);
    pthread_mutex_destroy(&s->page_lock);
    free(s->pool);
    free(s->pages);
    free(s->use);
    free(s);
}

/* ------------------------------------------------------------ a kept heap */

/* A restart that keeps the region (table.c rkv_table_attach) rebuilds the
 * bookkeeping from the index: the pages that hold live items go back to
 * their classes with every other item of theirs free and reusable at once
 * (no reader can be inside this region's freed items: clients of the server
 * before reconnect, see a new generation and drop every location they held),
 * and the pages below the highest one adopted that hold nothing wait in the
 * pool, open to any class. */
rkv_status rkv_slab_adopt(struct rkv_slab *s, uint64_t page, unsigned cls, const uint64_t *live,
                          char *err, size_t err_len)
{
    if (page >= s->page_limit || cls >= s->class_count || s->pages[page].cls != PAGE_FREE ||
        page < s->next_page) {
        snprintf(err, err_len,
                 "slab page %llu cannot be adopted for class %u (out of range, "
                 "adopted already, or the allocator is in use)",
                 (unsigned long long)page, cls);
        return RKV_INVALID;
    }
    struct slab_class *c = &s->classes[cls];
    uint32_t per_page = s->per_page[cls];
    size_t need = (c->npages + 1) * (size_t)per_page;
    uint64_t since = class_lock(s, cls);
    if (need > c->queue_cap) { /* exactly, as class_grow */
        size_t cap = need;
        uint64_t *queue = malloc(cap * sizeof(*queue));
        if (queue == NULL)
            goto nomem;
        for (size_t i = 0; i < c->queue_len; i++)
            queue[i] = queue_at(c, i);
        free(c->queue);
        c->queue = queue;
        c->queue_cap = cap;
        c->queue_head = 0;
    }
    if (c->npages == c->pages_cap) {
        size_t cap = c->pages_cap ? 2 * c->pages_cap : 8;
        uint64_t *pages = realloc(c->pages, cap * sizeof(*pages));
        if (pages == NULL)
            goto nomem;
        c->pages = pages;
        c->pages_cap = cap;
    }
    struct slab_page *p = &s->pages[page];
    if (s->item_meta && !page_meta_attach(s, p, per_page))
        goto nomem;
    s->use[page].used = per_page;
    c->used += per_page;
    p->slot = c->npages;
    __atomic_store_n(&p->handed, per_page, __ATOMIC_RELEASE);
    __atomic_store_n(&p->cls, (uint8_t)cls, __ATOMIC_RELEASE);
    c->pages[c->npages++] = page;
    c->bump_page = page;
    uint64_t now = slab_now(s), first = (page_start(s, page) - s->heap_offset) / RKV_ITEM_ALIGN;
    for (uint32_t i = 0; i < per_page; i++)
        if ((live[i / 64] & (1ull << (i % 64))) == 0)
            class_queue_put(s, cls, page, first + (uint64_t)i * (s->size[cls] / RKV_ITEM_ALIGN), 0,
                            true, now);
    class_unlock(s, cls, since);
    return RKV_OK;

nomem:
    class_unlock(s, cls, since);
    snprintf(err, err_len, "out of memory for the bookkeeping of slab page %llu",
             (unsigned long long)page);
    return RKV_NO_MEMORY;
}

void rkv_slab_adopt_done(struct rkv_slab *s)
{
    uint64_t now = slab_now(s), grace = (uint64_t)s->grace_ms * 1000000u;
    uint64_t since = slab_lock(s, &s->page_lock), top = s->next_page;
    for (uint64_t i = s->next_page; i < s->page_limit; i++)
        if (s->pages[i].cls != PAGE_FREE)
            top = i + 1;
    for (uint64_t i = s->next_page; i < top; i++) {
        if (s->pages[i].cls != PAGE_FREE)
            continue;
        s->pages[i].for_cls = PAGE_FOR_ANY;
        s->pages[i].freed_ns = s->pages[i].taken_ns = now > grace ? now - grace : 0;
        s->pool[s->pool_len++] = i;
    }
    __atomic_store_n(&s->next_page, top, __ATOMIC_RELAXED);
    slab_unlock(s, &s->page_lock, since);
}

/* ------------------------------------------------------------ pages lent to the index */

/* Remove pool entry i. Page lock held. */
static void pool_remove(struct rkv_slab *s, uint64_t i)
{
    s->pool[i] = s->pool[s->pool_len - 1];
    __atomic_store_n(&s->pool_len, s->pool_len - 1, __ATOMIC_RELAXED);
}

bool rkv_slab_lend(struct rkv_slab *s)
{
    bool lent = false;
    uint64_t since = slab_lock(s, &s->page_lock);
    if (s->page_limit > 0) {
        uint64_t page = s->page_limit - 1, now = slab_now(s);
        const struct slab_page *p = &s->pages[page];
        if (page >= s->next_page) {
            lent = true; /* never assigned */
        } else if (__atomic_load_n(&p->cls, __ATOMIC_RELAXED) == PAGE_FREE) {
            for (uint64_t i = 0; i < s->pool_len && !lent; i++)
                if (s->pool[i] == page &&
                    (p->for_cls == PAGE_FOR_ANY || p->for_cls == PAGE_FOR_INDEX) &&
                    p->freed_ns + (uint64_t)s->grace_ms * 1000000u <= now) {
                    pool_remove(s, i); /* drained: no reader can be in its items */
                    lent = true;
                }
        }
        if (lent)
            __atomic_store_n(&s->page_limit, page, __ATOMIC_RELAXED);
    }
    slab_unlock(s, &s->page_lock, since);
    return lent;
}

uint64_t rkv_slab_lend_next(const struct rkv_slab *s)
{
    uint64_t limit = __atomic_load_n(&s->page_limit, __ATOMIC_RELAXED);
    return limit > 0 ? limit - 1 : NO_PAGE;
}

uint64_t rkv_slab_lent(const struct rkv_slab *s)
{
    return s->page_count - __atomic_load_n(&s->page_limit, __ATOMIC_RELAXED);
}

rkv_status rkv_slab_lend_kept(struct rkv_slab *s, uint64_t pages)
{
    if (pages > s->page_count || s->next_page != 0 || s->pool_len != 0)
        return RKV_INVALID;
    s->page_limit = s->page_count - pages;
    return RKV_OK;
}

uint64_t rkv_slab_page_at(const struct rkv_slab *s, uint64_t off)
{
    if (off < s->heap_offset || off - s->heap_offset >= s->heap_size)
        return NO_PAGE;
    return s->page_count - 1 - (off - s->heap_offset) / s->page_size;
}

uint32_t rkv_slab_per_page(const struct rkv_slab *s, unsigned cls)
{
    return cls < s->class_count ? s->per_page[cls] : 0;
}
