/* slab.h — the item heap allocator inside the table region.
 *
 * The heap (layout.h) is cut into equal slab pages. A page is given to one
 * size class the first time that class needs memory and then holds items of
 * that class only, until the table moves it to another class (page
 * rebalancing: rkv_slab_page_take, see slab.c). Classes step by 4 bytes
 * from the smallest item to RKV_SLAB_FINE4_BELOW, by 8 to a fine limit, then
 * grow by about the square root of the configured factor up to the page
 * size, so the largest item fills a page (rkv_slab_classes).
 *
 * Memory a client may still be reading is never handed out early: a freed
 * item goes into a per-class limbo and becomes reusable only grace_ms later,
 * and a page taken from its class drains for grace_ms before any class gets
 * it (design.md invariant 3). The allocator never writes to the heap — not
 * even to freed items, whose OBSOLETE state word the table set — and keeps
 * all its bookkeeping (free/limbo queues, page table, per-item words) in
 * server-private memory allocated when a page is assigned, never per call.
 *
 * Offsets are from the region start, as slot words carry them; 0 never names
 * an item (the region header is there), so it means "none".
 *
 * Thread-safe: one mutex per class, one for page assignment and the pool of
 * draining pages (taken inside a class mutex). rkv_slab_valid(),
 * rkv_slab_meta() and rkv_slab_page_class() take no lock; a per-item word
 * they return stays valid memory for the allocator's lifetime, even when its
 * page moves to another class meanwhile.
 *
 * Per-thread magazines: for classes of many items per page, each thread
 * (slot, rkv_thread_slot) keeps a small cache per class — items taken from
 * the class for it to hand out, and items it freed that are not yet in the
 * limbo — and meets the class mutex once per batch, not once per call (see
 * slab.c). Nothing about reuse changes: a magazine hands out only items whose
 * grace period was over when it took them, and a freed item's grace period
 * starts when its batch reaches the limbo, never earlier. Stats count
 * magazine items where they belong (ready, limbo); whatever needs a class's
 * exact state (a page move, a wait for the limbo, an allocation that found
 * nothing) empties every magazine of the class first.
 */
#ifndef RKV_SLAB_H
#define RKV_SLAB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "rkv.h"

#define RKV_SLAB_MAX_GRACE_MS 60000u /* longest grace period the limbo clock can time */
#define RKV_THREAD_SLOTS      64u    /* per-thread state is kept in this many slots */

/* This thread's slot, 0..RKV_THREAD_SLOTS-1: threads are numbered as they
 * first ask, and threads past RKV_THREAD_SLOTS share slots (whatever is kept
 * per slot stays correct when shared, only slower). */
unsigned rkv_thread_slot(void);

/* How one kind of lock was held, with timing on (rkv_slab_config.lock_timing,
 * rkv_table_config.lock_timing): counted per thread slot, summed on read. */
struct rkv_lock_stats {
    uint64_t holds;       /* acquisitions */
    uint64_t contended;   /* of them, those that found the lock taken and waited */
    uint64_t wait_ns;     /* total time spent waiting to acquire */
    uint64_t hold_ns;     /* total time held */
    uint64_t hold_max_ns; /* longest single hold */
};

/* Lock / unlock m, counting into st (NULL: no timing, a plain lock). lock
 * returns when the hold began, for unlock. */
uint64_t rkv_lock_timed(pthread_mutex_t *m, struct rkv_lock_stats *st);
void rkv_unlock_timed(pthread_mutex_t *m, struct rkv_lock_stats *st, uint64_t since);
/* out += what `per_slot` (RKV_THREAD_SLOTS entries) counted. */
void rkv_lock_stats_sum(const struct rkv_lock_stats *per_slot, size_t stride,
                        struct rkv_lock_stats *out);

struct rkv_slab;

struct rkv_slab_config {
    uint8_t *region;      /* region start; every offset is relative to it */
    uint64_t heap_offset; /* first slab page, a multiple of RKV_ITEM_ALIGN */
    uint64_t heap_size;   /* bytes of heap, a multiple of page_size */
    uint32_t page_size;   /* bytes per slab page, a multiple of RKV_ITEM_ALIGN */
    double growth_factor; /* class size growth, > 1.0 */
    uint32_t fine_limit;  /* classes step by 4 or 8 bytes below this size; 0: coarse
                             * classes only (rkv_slab_classes) */
    uint32_t grace_ms; /* a freed item is reused only this long after, <= RKV_SLAB_MAX_GRACE_MS */
    bool item_meta;    /* keep one private uint32 per item (rkv_slab_meta) */
    uint64_t (*clock_ns)(void); /* monotonic nanoseconds the grace periods are timed on;
                                   * NULL: rkv_now_ns() (tests pass a clock they advance) */
    bool lock_timing;           /* time every class and page lock hold (rkv_slab_lock_stats);
                                   * costs clock reads per hold: benchmarks and tests only */
};

/* The coarse classes: from RKV_SLAB_COARSE_STEP bytes by the growth factor,
 * each rounded up to RKV_SLAB_COARSE_STEP, the last the page size; at most
 * RKV_SLAB_COARSE_CLASSES of them. */
#define RKV_SLAB_COARSE_STEP    64u
#define RKV_SLAB_COARSE_CLASSES 64u
/* Above page_size / RKV_SLAB_DIVISORS the classes are the page's divisors:
 * page_size / n rounded down to RKV_ITEM_ALIGN, n = RKV_SLAB_DIVISORS .. 1,
 * so a page of large items holds as many as fit, with no tail beyond
 * alignment. */
#define RKV_SLAB_DIVISORS 32u

/* The fine classes step by RKV_ITEM_ALIGN (4 bytes) below this size and by
 * twice that above, up to fine_limit: a 4-byte step saves the most where
 * items are smallest, and each class takes a page of its own the first
 * time it is used while pages are plentiful, so fine steps cost a small
 * heap pages (design.md, "Size classes"; rkv_slab_host_class has what a
 * class gets once they are scarce). */
#define RKV_SLAB_FINE4_BELOW 128u

/* The class table for a page size, growth factor and fine limit: sizes in
 * bytes, strictly increasing multiples of RKV_ITEM_ALIGN, the last equal to
 * page_size. fine_limit 0: the coarse classes alone. Otherwise every
 * RKV_ITEM_ALIGN step from RKV_MIN_ITEM_SIZE below RKV_SLAB_FINE4_BELOW and
 * every second one from there below fine_limit, then the
 * coarse classes from fine_limit up, each with one class between it and the
 * one before (their geometric mean, rounded up), and the twin of each of
 * memcached 1.6's default chunks (the smallest class an item fits whenever
 * memcached's item for the same key and value fits the chunk), up to
 * page_size / RKV_SLAB_DIVISORS; above, the page's divisors
 * (RKV_SLAB_DIVISORS). No item takes more than it would with the coarse
 * classes alone (below the divisors, they are a superset; above, an item's
 * divisor class has at least as many items per page as its coarse class),
 * nor more than memcached's chunk for it.
 * RKV_INVALID (message in err) when the coarse classes would be more than
 * RKV_SLAB_COARSE_CLASSES, the fine ones too many, or the arguments are out
 * of range. */
rkv_status rkv_slab_classes(uint32_t page_size, double growth_factor, uint32_t fine_limit,
                            uint32_t class_size[RKV_MAX_CLASSES], uint32_t *class_count, char *err,
                            size_t err_len);

/* Bytes one writing thread slot's magazines take outside the region for the
 * classes of page_size and growth_factor (a slot makes one per class at its
 * first allocation or free, and keeps them while the allocator lives); 0
 * when the arguments are out of range. memory_budget.c counts them per
 * writer thread. */
uint64_t rkv_slab_mag_bytes(uint32_t page_size, double growth_factor, uint32_t fine_limit);

rkv_status rkv_slab_create(const struct rkv_slab_config *cfg, struct rkv_slab **out, char *err,
                           size_t err_len);
void rkv_slab_destroy(struct rkv_slab *s);

/* A class's items may be stored in a larger class at most this many times
 * their size (a class with no page, rkv_slab_host_class; a PUT that would
 * wait, evict.c). */
#define RKV_SLAB_HOST_SPAN 2u

/* Where to store an item of class cls: cls, unless cls owns no page while
 * pages are scarce (under a quarter of them never assigned), then the
 * smallest larger class that owns pages, if any, within 9/8 of cls's size
 * while some page is free (the caller tries it with rkv_slab_alloc_ready
 * before cls takes a page of its own) and twice it once none is (see "too
 * many classes" at slab.c's top). Reads published counts without a lock: a
 * stale answer costs a failed try or a page move, never an item. */
unsigned rkv_slab_host_class(struct rkv_slab *s, unsigned cls);

/* The smallest class larger than cls that owns pages, at any size; cls
 * when none does. For a class with nothing to evict whose items no class
 * within RKV_SLAB_HOST_SPAN can host, on a heap whose pages each hold some
 * class's only page (evict.c): rounding costs less than emptying a page of
 * another class per item. No lock, as rkv_slab_host_class. */
unsigned rkv_slab_larger_owner(struct rkv_slab *s, unsigned cls);

/* rkv_slab_alloc without taking a page: an item class cls can hand out
 * now, or 0. */
uint64_t rkv_slab_alloc_ready(struct rkv_slab *s, unsigned cls);

unsigned rkv_slab_class_count(const struct rkv_slab *s);
uint32_t rkv_slab_class_size(const struct rkv_slab *s, unsigned cls);
/* The smallest class whose items hold `bytes`, or -1 when none does. */
int rkv_slab_class_for(const struct rkv_slab *s, size_t bytes);

/* An item of class cls, as a region offset; 0 when the class has nothing
 * reusable now and no unassigned page is left (or cls is out of range).
 * Reuse order: this thread's magazine, if the class has them; else (and to
 * refill one) the oldest limbo item whose grace has passed, then never-used
 * items of the class's newest page, then a new page; before it answers 0,
 * the items every other magazine of the class holds. */
uint64_t rkv_slab_alloc(struct rkv_slab *s, unsigned cls);

/* Put an item into limbo. Its bytes stay untouched; it is handed out again
 * no earlier than grace_ms from now (with magazines: from when this thread's
 * batch of freed items reaches the class, which is later). Ignored unless
 * `off` is an item of class cls that is handed out (a double free or a stray
 * offset changes nothing). */
void rkv_slab_free(struct rkv_slab *s, unsigned cls, uint64_t off);

/* True when `off` starts an item of class cls in a page of that class that
 * the allocator has handed out at least once. Safe on any input: this is
 * how untrusted slot words (client hints) are checked before use. */
bool rkv_slab_valid(const struct rkv_slab *s, uint64_t off, unsigned cls);

/* The private per-item word for a valid item (rkv_slab_valid), else NULL;
 * NULL always when the slab was created without item_meta. It persists
 * across reuse of the item's memory; the caller decides what it means. */
uint32_t *rkv_slab_meta(struct rkv_slab *s, uint64_t off, unsigned cls);

/* n uniformly chosen items of class cls that were handed out at least once
 * (live, in limbo or free: the caller checks), out[i] from the random bits
 * rnd[i], under one hold of the class lock; how many (0 when the class has
 * no pages, else n). */
unsigned rkv_slab_sample(struct rkv_slab *s, unsigned cls, const uint64_t *rnd, unsigned n,
                         uint64_t *out);

/* Milliseconds until the oldest limbo item of cls becomes reusable (at most
 * grace_ms + 1: the limbo clock counts whole milliseconds): 0 when one is
 * reusable now, -1 when the class's limbo is empty. Empties the class's
 * magazines first, so items freed into them count (their grace starts now). */
int rkv_slab_limbo_wait_ms(struct rkv_slab *s, unsigned cls);

/* Give this thread's freed items of class cls to the class now (so that
 * rkv_slab_class_spare counts them), keeping their grace periods. */
void rkv_slab_flush(struct rkv_slab *s, unsigned cls);

/* Give every magazine's items of class cls back to the class (ready ones
 * stay ready, freed ones enter the limbo now). Takes each magazine's lock
 * and the class lock: never called with either held. */
void rkv_slab_drain(struct rkv_slab *s, unsigned cls);

/* Items of class cls held in magazines now: ready to hand out, and freed on
 * their way to the limbo (tests and stats; racy but consistent per slot). */
void rkv_slab_mag_count(struct rkv_slab *s, unsigned cls, uint64_t *ready, uint64_t *freed);

/* The class and page locks' holds so far (lock_timing; zeros without). */
void rkv_slab_lock_stats(const struct rkv_slab *s, struct rkv_lock_stats *out);

/* ---- page rebalancing: moving a page from one class to another ----
 *
 * The caller (the table) picks a page of another class, removes every live
 * item on it from its index (so each is freed into the class's limbo), then
 * takes the page: it leaves its class and waits in the pool for grace_ms,
 * reserved for the class it was taken for, before rkv_slab_alloc() gives it
 * to a class. */

#define RKV_SLAB_FOR_ANY   (-1) /* rkv_slab_page_take: the page is for whichever class needs one */
#define RKV_SLAB_FOR_INDEX (-2) /* ... for the index (rkv_slab_lend), no class's */

/* Slab pages in the heap. */
uint64_t rkv_slab_page_count(const struct rkv_slab *s);

/* The class page `page` holds items of, or -1 when it holds none (never
 * assigned, draining in the pool, out of range). No lock: a hint, which
 * rkv_slab_page_info() confirms. */
int rkv_slab_page_class(const struct rkv_slab *s, uint64_t page);

/* One page of a class, as rkv_slab_page_info() saw it under its class lock
 * (after emptying the class's magazines, so `used` is items really in use). */
struct rkv_slab_page_info {
    uint64_t page;   /* page number */
    uint64_t start;  /* region offset of its first item */
    unsigned cls;    /* its class */
    uint32_t size;   /* bytes per item */
    uint32_t handed; /* items [0, handed) were handed out since it joined the class */
    uint32_t used;   /* items handed out and not freed: live, or being built by a writer */
};
/* False when the page holds no class's items (see rkv_slab_page_class). */
bool rkv_slab_page_info(struct rkv_slab *s, uint64_t page, struct rkv_slab_page_info *out);

/* Take page `page` away from class cls into the draining pool, reserved for
 * class for_cls (or RKV_SLAB_FOR_ANY), if none of its items is in use (every
 * item freed or never handed out; the class's magazines are emptied first);
 * false and nothing changed otherwise. Its
 * free items leave the class's limbo; its memory is handed out again no
 * earlier than grace_ms from now. */
bool rkv_slab_page_take(struct rkv_slab *s, uint64_t page, unsigned cls, int for_cls);

/* Milliseconds until a pool page that class cls may take (one reserved for
 * it or for any class) is ready: 0 when one is ready now, -1 when the pool
 * holds none for it. */
int rkv_slab_page_wait_ms(struct rkv_slab *s, unsigned cls);

/* Items of class cls not in use that the class itself holds — free-queue
 * entries (limbo and ready) and fresh items, not what magazines hold — and
 * (*owned) the items of its pages, as of the last release of its lock: no
 * lock taken, a hint for deciding whether to evict ahead. */
uint64_t rkv_slab_class_spare(struct rkv_slab *s, unsigned cls, uint64_t *owned);

/* Where one class's memory is. */
struct rkv_slab_class_stats {
    uint32_t size;     /* bytes per item */
    uint32_t per_page; /* items per page */
    uint64_t pages;    /* pages assigned to the class */
    uint64_t used;     /* items handed out and not freed */
    uint64_t limbo;    /* freed, still inside the grace period */
    uint64_t ready;    /* freed, grace period over: reusable now */
    uint64_t fresh;    /* never handed out, in the class's newest page */
};
void rkv_slab_class_stats(struct rkv_slab *s, unsigned cls, struct rkv_slab_class_stats *out);

/* The whole heap, in bytes.
 * used + limbo + ready + fresh + unassigned + draining + tail = heap. */
struct rkv_slab_stats {
    uint64_t heap;             /* heap_size */
    uint64_t pages;            /* pages in the heap */
    uint64_t pages_unassigned; /* pages no class holds that a class may take now */
    uint64_t pages_draining;   /* pages taken from a class, still inside the grace period */
    uint64_t used;             /* class bytes of items handed out */
    uint64_t limbo;            /* class bytes waiting out the grace period */
    uint64_t ready;            /* class bytes reusable now */
    uint64_t fresh;            /* never-used items in assigned pages */
    uint64_t unassigned;       /* bytes of pages_unassigned */
    uint64_t draining;         /* bytes of pages_draining */
    uint64_t tail;             /* page ends too short for one more item of the page's class */
    uint64_t reassigns;        /* pages taken from one class for another (rkv_slab_page_take) */
};
void rkv_slab_stats(struct rkv_slab *s, struct rkv_slab_stats *out);

/* ---- a kept heap (a restart that keeps the region: rkv_table_attach) ----
 *
 * Before the allocator hands out anything, give page `page` to class cls
 * with the items whose bits are set in `live` (rkv_slab_per_page(cls) bits,
 * item i at bit i % 64 of live[i / 64]) in use; every other item of the page
 * is free and reusable at once. Pages may come in any order, each once.
 * Then rkv_slab_adopt_done(): pages below the highest adopted that hold
 * nothing go to the pool, open to any class. RKV_INVALID for a page out of
 * range or adopted already, RKV_NO_MEMORY; message in err. */
rkv_status rkv_slab_adopt(struct rkv_slab *s, uint64_t page, unsigned cls, const uint64_t *live,
                          char *err, size_t err_len);
void rkv_slab_adopt_done(struct rkv_slab *s);
/* Items of class cls per slab page; 0 for a class out of range. */
uint32_t rkv_slab_per_page(const struct rkv_slab *s, unsigned cls);

/* Slab pages no class holds that a class may take now: never assigned, or
 * drained past the grace period. */
uint64_t rkv_slab_pages_unassigned(struct rkv_slab *s);
/* rkv_slab_pages_unassigned() > 0, without the page lock while pages that
 * were never assigned remain. */
bool rkv_slab_pages_any(struct rkv_slab *s);

/* ---- pages lent to the index
 *
 * The index grows into the heap from its low end (server/index_grow.c).
 * So that it finds free pages there as long as the heap has any, the pages
 * lie top down: page n starts at heap_offset + (page_count - 1 - n) *
 * page_size, and classes take pages in number order, the heap's highest
 * addresses first. The index takes the highest-numbered page not lent yet
 * (the lowest address), one at a time, and no class gets it again. */

/* Lend page rkv_slab_lend_next() to the index if it is free: never
 * assigned, or in the pool past its grace period and not reserved for a
 * class (a page of a class goes there by rkv_slab_page_take(...,
 * RKV_SLAB_FOR_INDEX) once the table has evicted its items); false
 * otherwise, nothing changed. */
bool rkv_slab_lend(struct rkv_slab *s);

/* The page the next rkv_slab_lend() takes, UINT64_MAX when none is left. */
uint64_t rkv_slab_lend_next(const struct rkv_slab *s);

/* Pages lent so far. */
uint64_t rkv_slab_lent(const struct rkv_slab *s);

/* A kept region (rkv_table_attach): its lowest `pages` pages were lent
 * already. Before any page is adopted or handed out. */
rkv_status rkv_slab_lend_kept(struct rkv_slab *s, uint64_t pages);

/* The page holding region offset off, UINT64_MAX outside the heap. */
uint64_t rkv_slab_page_at(const struct rkv_slab *s, uint64_t off);

#endif
