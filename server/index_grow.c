/* index_grow.c — the index grows while serving: linear hashing by splits.
 *
 * A table starts with index_base buckets (table.c index_base_for) and room
 * for index_capacity. When its load passes RKV_INDEX_GROW_LOAD (a writer
 * looks every few new keys: table.c grow_check), or a new key finds both
 * its buckets full, a writer takes the index exclusive and splits the next
 * buckets in order (common/index_geom.h has the addressing). Splitting
 * bucket b of level L, M = base * 2^L buckets:
 *
 *   1. bucket b + M (never addressed before this split is published) gets
 *      level L + 1 and, copied, every item of b whose key now addresses
 *      b + M (the key is read from the item and hashed at the new
 *      geometry: one of its two candidates was b, and it becomes b or
 *      b + M; which of the two placed it does not matter);
 *   2. b's version goes to level L + 1 (odd, then even);
 *   3. the copied slots are cleared in b;
 *   4. the geometry word is published, in the table and in the header.
 *
 * Items never move in memory, so locations clients cache stay valid. A
 * one-sided reader with the geometry of before sees b (or any bucket split
 * since) at a level above the one it expects, re-reads the header and tries
 * again (common/lookup.c); a reader with the new geometry never sees b + M
 * before step 1 is done (the header is published after it). With the index
 * exclusive no writer is inside; writers hashed a key before and check the
 * geometry again under their stripes (table.c key_lock).
 */
#include <string.h>

#include "log.h"
#include "table_private.h"

#define RKV_INDEX_GROW_LOAD 0.93        /* items per slot past which the index grows */
#define GROW_STEP_SHARE     32u         /* a growth step splits this share of the buckets */
#define GROW_STEP_MAX       4096u       /* ... and no more: one exclusive hold stays short */
#define ROOM_TAKE_STEP      (64u << 10) /* untaken room is taken this much at a time */

bool rkv_index_wants_growth(const struct rkv_table *t, uint64_t items)
{
    struct rkv_index_geom g = table_geom(t);
    uint64_t count = rkv_index_count(&g);
    return count < t->index_capacity &&
           (double)items > RKV_INDEX_GROW_LOAD * (double)(count * RKV_SLOTS_PER_BUCKET);
}

uint64_t rkv_index_grow_step(const struct rkv_table *t)
{
    struct rkv_index_geom g = table_geom(t);
    return RKV_MAX(1, RKV_MIN(rkv_index_count(&g) / GROW_STEP_SHARE, GROW_STEP_MAX));
}

/* The geometry after the next split of g. */
static struct rkv_index_geom geom_after_split(struct rkv_index_geom g)
{
    if (++g.split == rkv_index_span(&g)) {
        g.level++;
        g.split = 0;
    }
    return g;
}

/* Take the room before the heap up to `end` (and ahead by ROOM_TAKE_STEP)
 * when the region left it untaken (cfg.take): false when there is no memory
 * for it, and the index grows no further. */
static bool room_taken(struct rkv_table *t, uint64_t end)
{
    uint64_t heap = t->hdr->heap_offset;
    if (RKV_LIKELY(RKV_MIN(end, heap) <= t->room_taken))
        return true;
    if (t->room_refused)
        return false;
    uint64_t to = RKV_MIN(RKV_ALIGN_UP(end, ROOM_TAKE_STEP), heap);
    int e = t->cfg.take(t->cfg.take_ctx, t->room_taken, to - t->room_taken);
    if (e != 0) {
        struct rkv_index_geom g = table_geom(t);
        RKV_WARN("index: no memory to grow into the rest of its room (%s): it stays at %llu "
                 "buckets, and keys that find theirs full evict a neighbour",
                 strerror(e), (unsigned long long)rkv_index_count(&g));
        t->room_refused = true;
        return false;
    }
    t->room_taken = to;
    return true;
}

/* Whether bucket nb's memory is the index's: the buckets before the heap
 * are (once taken: room_taken), and past the heap's start the pages they
 * reach must be lent to it (the lowest heap pages, slab.h). The next page
 * is lent when it is free; a page of a class is emptied for it (its items
 * evicted, with eviction on) and lent once it has drained, on a later
 * growth: false until then. The index held exclusive. */
static bool room_for(struct rkv_table *t, uint64_t nb)
{
    const struct rkv_region_header *h = t->hdr;
    uint64_t end = h->index_offset + (nb + 1) * sizeof(struct rkv_bucket);
    if (!room_taken(t, end))
        return false;
    while (end > h->heap_offset + rkv_slab_lent(t->slab) * (uint64_t)h->slab_page_size) {
        if (rkv_slab_lend(t->slab))
            continue;
        uint64_t page = rkv_slab_lend_next(t->slab);
        if (t->cfg.evict != RKV_EVICT_NONE && page != UINT64_MAX &&
            rkv_slab_page_class(t->slab, page) >= 0)
            rkv_page_evacuate(t, page);
        return false;
    }
    return true;
}

/* Split the next bucket (steps 1-4 above). The index held exclusive and
 * below its capacity, with room for the new bucket (room_for). */
static void split_one(struct rkv_table *t)
{
    struct rkv_index_geom before = table_geom(t), after = geom_after_split(before);
    uint64_t b = before.split, nb = b + rkv_index_span(&before);
    struct rkv_bucket *from = &t->buckets[b], *to = &t->buckets[nb];
    unsigned level = before.level + 1, moved[RKV_SLOTS_PER_BUCKET], n = 0;

    memset((void *)to, 0, sizeof(*to));
    __atomic_store_n(&to->version, (uint64_t)level << RKV_VERSION_LEVEL_SHIFT, __ATOMIC_RELEASE);
    for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
        uint64_t w = from->slot[s];
        if (w == 0)
            continue;
        const struct rkv_item *it = item_at(t, w);
        struct rkv_key_hash h;
        rkv_hash_key(rkv_item_key(it), rkv_item_key_len(it), t->seed, &after, &h);
        if (h.bucket[0] == b || h.bucket[1] == b)
            continue; /* stays */
        rkv_table_slot_set(t, to, n, w);
        moved[n++] = s;
    }
    rkv_table_bucket_level(t, from, level);
    for (unsigned i = 0; i < n; i++)
        rkv_table_slot_set(t, from, moved[i], 0);
    uint64_t word = rkv_index_geom_word(&after);
    __atomic_store_n(&t->index_word, word, __ATOMIC_RELEASE);
    __atomic_store_n(&t->hdr->index_geometry, word, __ATOMIC_RELEASE);
}

uint64_t rkv_index_grow(struct rkv_table *t, uint64_t n)
{
    uint64_t done = 0;
    for (; done < n; done++) {
        struct rkv_index_geom g = table_geom(t);
        if (rkv_index_count(&g) >= t->index_capacity || !room_for(t, rkv_index_count(&g)))
            break;
        split_one(t);
    }
    return done;
}

uint64_t rkv_table_grow_index(struct rkv_table *t, uint64_t n)
{
    uint64_t since = rkv_table_index_lock_all(t);
    uint64_t done = rkv_index_grow(t, n);
    rkv_table_index_unlock_all(t, since);
    return done;
}
