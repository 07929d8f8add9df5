/* slab.c — size classes, slab pages and the grace-period limbo (slab.h).
 *
 * Bookkeeping lives outside the region, so a client reading a freed item
 * sees exactly the bytes it had (plus the OBSOLETE state word): nothing the
 * allocator does can make a stale read look like a different valid item.
 *
 * Per class, freed items wait in one FIFO queue of 8-byte entries
 * (item unit << 24 | free time in ms mod 2^24). Entries are pushed in time
 * order under the class mutex, so the queue is sorted by age: the items whose
 * grace period is over form its head ("ready"), the rest its tail ("limbo").
 * Allocation pops the head only when its age is >= grace_ms. The 24-bit time
 * wraps every 4.6 hours; an age read modulo 2^24 is exact for anything
 * younger than that, and grace_ms is far shorter, so wrap-around can only
 * delay a reuse, never hasten one. The queue can hold every item the class
 * owns, so a push never fails; it grows (geometrically) when a page is
 * assigned.
 *
 * Fragmentation — where heap bytes go that no item uses:
 *   - internal: an item is rounded up to its class. With factor f the waste
 *     is below (f-1)/f of the slot (20% at 1.25, about 10% on average) plus
 *     the 64-byte alignment, which dominates for items under ~256 bytes.
 *   - page tails: page_size % class_size bytes at the end of each page
 *     (rkv_slab_stats().tail).
 *   - calcification: a page, once given to a class, stays there. When the
 *     mix of item sizes shifts, memory stays in classes that no longer need
 *     it while a new class finds no unassigned page; eviction then works only
 *     within the classes that have pages. The per-class stats show it.
 *     Moving pages between classes (memcached's slab_reassign) is not done.
 *   - limbo: write rate x grace_ms x item size is always unusable.
 * rkv_slab_stats() accounts for every heap byte in these terms.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slab.h"
#include "util.h"

#define PAGE_UNASSIGNED 0xffu
#define NO_PAGE UINT64_MAX
#define LIMBO_TIME_BITS 24
#define LIMBO_TIME_MASK ((1ull << LIMBO_TIME_BITS) - 1)
#define LIMBO_UNIT_MAX (UINT64_MAX >> LIMBO_TIME_BITS)

RKV_STATIC_ASSERT(RKV_SLAB_MAX_GRACE_MS < (1u << (LIMBO_TIME_BITS - 1)), "grace fits the limbo clock");
RKV_STATIC_ASSERT(RKV_MAX_CLASSES <= PAGE_UNASSIGNED, "class ids fit a page's byte");

/* One slab page of the heap. */
struct slab_page {
    uint8_t cls;      /* its class, or PAGE_UNASSIGNED; stored last (release) */
    uint32_t handed;  /* items [0, handed) were handed out at least once (release) */
    uint32_t *meta;   /* item_meta: one word per item, else NULL */
};

/* One size class. Everything but size/per_page is guarded by lock. */
struct slab_class {
    pthread_mutex_t lock;
    uint32_t size;        /* bytes per item */
    uint32_t per_page;    /* items per page */
    uint64_t *queue;      /* freed items, oldest first (see top comment) */
    size_t queue_cap;     /* entries queue can hold */
    size_t queue_head;    /* index of the oldest entry */
    size_t queue_len;     /* entries in the queue */
    uint64_t *pages;      /* page numbers assigned to this class, oldest first */
    size_t npages;        /* entries in pages */
    size_t pages_cap;     /* room in pages */
    uint64_t bump_page;   /* newest page, whose items past `handed` are fresh; NO_PAGE */
    uint64_t used;        /* items handed out and not freed */
} __attribute__((aligned(RKV_CACHELINE)));

struct rkv_slab {
    uint8_t *region;         /* region start */
    uint64_t heap_offset;    /* first page's offset */
    uint64_t heap_size;      /* bytes of heap */
    uint32_t page_size;      /* bytes per page */
    uint32_t grace_ms;       /* reuse delay */
    bool item_meta;          /* allocate per-item words */
    uint64_t start_ns;       /* limbo clock origin */
    uint64_t page_count;     /* pages in the heap */
    pthread_mutex_t page_lock; /* guards next_page */
    uint64_t next_page;      /* pages [0, next_page) are assigned */
    struct slab_page *pages; /* page_count entries */
    unsigned class_count;    /* classes in use */
    struct slab_class classes[RKV_MAX_CLASSES];
};

rkv_status rkv_slab_classes(uint32_t page_size, double growth_factor,
                            uint32_t class_size[RKV_MAX_CLASSES], uint32_t *class_count,
                            char *err, size_t err_len)
{
    if (page_size < RKV_ITEM_ALIGN || page_size % RKV_ITEM_ALIGN != 0) {
        snprintf(err, err_len, "slab page size %u is not a positive multiple of %u bytes; "
                 "use a power of two such as 1048576", page_size, RKV_ITEM_ALIGN);
        return RKV_INVALID;
    }
    if (!(growth_factor > 1.0 && growth_factor <= 8.0)) {
        snprintf(err, err_len, "slab growth factor %g is out of range; use a value in (1, 8], "
                 "typically 1.25", growth_factor);
        return RKV_INVALID;
    }
    uint64_t size = RKV_ITEM_ALIGN;
    unsigned n = 0;
    for (;;) {
        if (n == RKV_MAX_CLASSES) {
            snprintf(err, err_len, "slab growth factor %g needs more than %u size classes to "
                     "reach the %u-byte page size; raise the growth factor or lower the page size",
                     growth_factor, RKV_MAX_CLASSES, page_size);
            return RKV_INVALID;
        }
        if (size >= page_size) {
            class_size[n++] = page_size;
            break;
        }
        class_size[n++] = (uint32_t)size;
        uint64_t next = RKV_ALIGN_UP((uint64_t)((double)size * growth_factor), RKV_ITEM_ALIGN);
        size = next > size ? next : size + RKV_ITEM_ALIGN;
    }
    *class_count = n;
    return RKV_OK;
}

/* Milliseconds on the limbo clock, mod 2^24. */
static uint64_t limbo_now(const struct rkv_slab *s)
{
    return ((rkv_now_ns() - s->start_ns) / 1000000u) & LIMBO_TIME_MASK;
}

static uint64_t entry_age(uint64_t entry, uint64_t now)
{
    return (now - (entry & LIMBO_TIME_MASK)) & LIMBO_TIME_MASK;
}

static uint64_t queue_at(const struct slab_class *c, size_t i)
{
    return c->queue[(c->queue_head + i) % c->queue_cap];
}

/* Entries at the queue's head whose grace period is over (ages fall from
 * head to tail, so binary search). Class lock held. */
static size_t queue_ready(const struct rkv_slab *s, const struct slab_class *c, uint64_t now)
{
    size_t lo = 0, hi = c->queue_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (entry_age(queue_at(c, mid), now) >= s->grace_ms)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t page_start(const struct rkv_slab *s, uint64_t page)
{
    return s->heap_offset + page * s->page_size;
}

/* Give class c a new page and hand out its first item. Private memory is
 * allocated before the page is taken, so a failure leaves nothing behind.
 * Class lock held. Returns the item offset, or 0. */
static uint64_t class_grow(struct rkv_slab *s, unsigned cls)
{
    struct slab_class *c = &s->classes[cls];
    uint32_t *meta = NULL;
    uint64_t *queue = NULL;
    size_t queue_cap = c->queue_cap;
    size_t need = (c->npages + 1) * (size_t)c->per_page;

    if (s->item_meta && (meta = calloc(c->per_page, sizeof(*meta))) == NULL)
        goto fail;
    if (need > queue_cap) {
        queue_cap = RKV_MAX(need, 2 * queue_cap);
        if ((queue = malloc(queue_cap * sizeof(*queue))) == NULL)
            goto fail;
    }
    if (c->npages == c->pages_cap) {
        size_t cap = c->pages_cap ? 2 * c->pages_cap : 8;
        uint64_t *pages = realloc(c->pages, cap * sizeof(*pages));
        if (pages == NULL)
            goto fail;
        c->pages = pages;
        c->pages_cap = cap;
    }

    pthread_mutex_lock(&s->page_lock);
    uint64_t page = s->next_page < s->page_count ? s->next_page++ : NO_PAGE;
    pthread_mutex_unlock(&s->page_lock);
    if (page == NO_PAGE)
        goto fail;

    if (queue != NULL) {
        for (size_t i = 0; i < c->queue_len; i++)
            queue[i] = queue_at(c, i);
        free(c->queue);
        c->queue = queue;
        c->queue_cap = queue_cap;
        c->queue_head = 0;
    }
    struct slab_page *p = &s->pages[page];
    p->meta = meta;
    __atomic_store_n(&p->handed, 1u, __ATOMIC_RELEASE);
    __atomic_store_n(&p->cls, (uint8_t)cls, __ATOMIC_RELEASE);
    c->pages[c->npages++] = page;
    c->bump_page = page;
    return page_start(s, page);

fail:
    free(meta);
    free(queue);
    return 0;
}

uint64_t rkv_slab_alloc(struct rkv_slab *s, unsigned cls)
{
    if (cls >= s->class_count)
        return 0;
    struct slab_class *c = &s->classes[cls];
    uint64_t off = 0;

    pthread_mutex_lock(&c->lock);
    if (c->queue_len > 0 && entry_age(queue_at(c, 0), limbo_now(s)) >= s->grace_ms) {
        uint64_t unit = queue_at(c, 0) >> LIMBO_TIME_BITS;
        c->queue_head = (c->queue_head + 1) % c->queue_cap;
        c->queue_len--;
        off = s->heap_offset + unit * RKV_ITEM_ALIGN;
    } else if (c->bump_page != NO_PAGE && s->pages[c->bump_page].handed < c->per_page) {
        struct slab_page *p = &s->pages[c->bump_page];
        off = page_start(s, c->bump_page) + (uint64_t)p->handed * c->size;
        __atomic_store_n(&p->handed, p->handed + 1, __ATOMIC_RELEASE);
    } else {
        off = class_grow(s, cls);
    }
    if (off != 0)
        c->used++;
    pthread_mutex_unlock(&c->lock);
    return off;
}

void rkv_slab_free(struct rkv_slab *s, unsigned cls, uint64_t off)
{
    if (!rkv_slab_valid(s, off, cls))
        return;  /* not an item of this class: a caller bug, and harmless to drop */
    struct slab_class *c = &s->classes[cls];
    uint64_t unit = (off - s->heap_offset) / RKV_ITEM_ALIGN;

    pthread_mutex_lock(&c->lock);
    if (c->queue_len < c->queue_cap && c->used > 0) {
        size_t tail = (c->queue_head + c->queue_len) % c->queue_cap;
        c->queue[tail] = unit << LIMBO_TIME_BITS | limbo_now(s);
        c->queue_len++;
        c->used--;
    }
    pthread_mutex_unlock(&c->lock);
}

/* The page and item index of `off` in class cls, or false. No lock. */
static bool locate(const struct rkv_slab *s, uint64_t off, unsigned cls,
                   struct slab_page **page, uint32_t *index)
{
    if (cls >= s->class_count || off < s->heap_offset || off - s->heap_offset >= s->heap_size ||
        off % RKV_ITEM_ALIGN != 0)
        return false;
    uint64_t rel = off - s->heap_offset;
    struct slab_page *p = &s->pages[rel / s->page_size];
    uint32_t in_page = (uint32_t)(rel % s->page_size);
    uint32_t size = s->classes[cls].size;
    if (__atomic_load_n(&p->cls, __ATOMIC_ACQUIRE) != cls || in_page % size != 0 ||
        in_page / size >= __atomic_load_n(&p->handed, __ATOMIC_ACQUIRE))
        return false;
    *page = p;
    *index = in_page / size;
    return true;
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
    return &p->meta[i];
}

uint64_t rkv_slab_sample(struct rkv_slab *s, unsigned cls, uint64_t rnd)
{
    if (cls >= s->class_count)
        return 0;
    struct slab_class *c = &s->classes[cls];
    uint64_t off = 0;

    pthread_mutex_lock(&c->lock);
    if (c->npages > 0) {
        uint64_t page = c->pages[(rnd & 0xffffffffu) % c->npages];
        uint32_t handed = s->pages[page].handed;
        off = page_start(s, page) + ((rnd >> 32) % handed) * c->size;
    }
    pthread_mutex_unlock(&c->lock);
    return off;
}

int rkv_slab_limbo_wait_ms(struct rkv_slab *s, unsigned cls)
{
    if (cls >= s->class_count)
        return -1;
    struct slab_class *c = &s->classes[cls];
    int wait = -1;

    pthread_mutex_lock(&c->lock);
    if (c->queue_len > 0) {
        uint64_t age = entry_age(queue_at(c, 0), limbo_now(s));
        wait = age >= s->grace_ms ? 0 : (int)(s->grace_ms - age);
    }
    pthread_mutex_unlock(&c->lock);
    return wait;
}

static uint64_t pages_unassigned(struct rkv_slab *s)
{
    pthread_mutex_lock(&s->page_lock);
    uint64_t n = s->page_count - s->next_page;
    pthread_mutex_unlock(&s->page_lock);
    return n;
}

void rkv_slab_class_stats(struct rkv_slab *s, unsigned cls, struct rkv_slab_class_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (cls >= s->class_count)
        return;
    struct slab_class *c = &s->classes[cls];
    pthread_mutex_lock(&c->lock);
    out->size = c->size;
    out->per_page = c->per_page;
    out->pages = c->npages;
    out->used = c->used;
    out->ready = queue_ready(s, c, limbo_now(s));
    out->limbo = c->queue_len - out->ready;
    if (c->bump_page != NO_PAGE)
        out->fresh = c->per_page - s->pages[c->bump_page].handed;
    pthread_mutex_unlock(&c->lock);
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
    out->pages_unassigned = pages_unassigned(s);
    out->unassigned = out->pages_unassigned * s->page_size;
}

uint64_t rkv_slab_pages_unassigned(struct rkv_slab *s)
{
    return pages_unassigned(s);
}

unsigned rkv_slab_class_count(const struct rkv_slab *s)
{
    return s->class_count;
}

uint32_t rkv_slab_class_size(const struct rkv_slab *s, unsigned cls)
{
    return cls < s->class_count ? s->classes[cls].size : 0;
}

int rkv_slab_class_for(const struct rkv_slab *s, size_t bytes)
{
    unsigned lo = 0, hi = s->class_count;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (s->classes[mid].size < bytes)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->class_count ? (int)lo : -1;
}

rkv_status rkv_slab_create(const struct rkv_slab_config *cfg, struct rkv_slab **out,
                           char *err, size_t err_len)
{
    uint32_t sizes[RKV_MAX_CLASSES];
    uint32_t count;
    struct rkv_slab *s = NULL;
    rkv_status st = rkv_slab_classes(cfg->page_size, cfg->growth_factor, sizes, &count, err, err_len);
    if (st != RKV_OK)
        return st;
    if (cfg->heap_size < cfg->page_size || cfg->heap_size % cfg->page_size != 0 ||
        cfg->heap_offset == 0 || cfg->heap_offset % RKV_ITEM_ALIGN != 0 ||
        (cfg->heap_offset + cfg->heap_size) / RKV_ITEM_ALIGN > LIMBO_UNIT_MAX) {
        snprintf(err, err_len, "slab heap of %llu bytes at offset %llu is not a whole number of "
                 "%u-byte pages at a %u-byte aligned, non-zero offset below 2^%u units",
                 (unsigned long long)cfg->heap_size, (unsigned long long)cfg->heap_offset,
                 cfg->page_size, RKV_ITEM_ALIGN, 64 - LIMBO_TIME_BITS);
        return RKV_INVALID;
    }
    if (cfg->grace_ms > RKV_SLAB_MAX_GRACE_MS) {
        snprintf(err, err_len, "grace period %u ms is longer than the %u ms the allocator supports; "
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
    s->start_ns = rkv_now_ns();
    s->page_count = cfg->heap_size / cfg->page_size;
    pthread_mutex_init(&s->page_lock, NULL);
    if ((s->pages = calloc(s->page_count, sizeof(*s->pages))) == NULL)
        goto nomem;
    for (uint64_t i = 0; i < s->page_count; i++)
        s->pages[i].cls = PAGE_UNASSIGNED;
    s->class_count = count;
    for (unsigned i = 0; i < count; i++) {
        struct slab_class *c = &s->classes[i];
        pthread_mutex_init(&c->lock, NULL);
        c->size = sizes[i];
        c->per_page = cfg->page_size / sizes[i];
        c->bump_page = NO_PAGE;
    }
    *out = s;
    return RKV_OK;

nomem:
    snprintf(err, err_len, "out of memory for the slab allocator's page table (%llu pages); "
             "use larger slab pages or free memory", (unsigned long long)(cfg->heap_size / cfg->page_size));
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
    if (s->pages != NULL)
        for (uint64_t i = 0; i < s->next_page; i++)
            free(s->pages[i].meta);
    pthread_mutex_destroy(&s->page_lock);
    free(s->pages);
    free(s);
}
