/* evict_ghost.c — s3fifo's ghost: the keys it evicted unread (table_private.h).
 *
 * S3-FIFO remembers the keys its small queue evicted unread, so that one
 * coming back soon after (the set after a cache-aside miss) enters the main
 * queue: it was in demand twice within about a cache's worth of stores,
 * and a second probation would evict it again before its next read. rkv's
 * s3fifo has no queues (evict.c), so the ghost is a direct-mapped table of
 * 16-bit key tags in server memory, outside the region: an item evicted
 * with no use left writes its key's tag at its hash's entry (overwriting
 * whatever key was there: an entry lives about as many such evictions as
 * the table has entries, one per item the heap holds when full of
 * 256-byte items, rounded up to a power of two: rkv_evict_ghost_entries,
 * 256 KiB for 32 MiB, counted in memory_budget.c's bookkeeping); a
 * new key whose tag is there takes it and starts with one use. A tag
 * collision only starts a new key with one use. Entries are relaxed atomic
 * loads and stores: a race loses or keeps one ghost, nothing else.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "hash.h"
#include "slab.h"
#include "table.h"
#include "table_private.h"
#include "util.h"

/* The tag of hash h64 in an entry: bits the entry's index does not use, never 0 (empty). */
static uint16_t ghost_tag(uint64_t h64)
{
    uint16_t tag = (uint16_t)(h64 >> 48);
    return tag != 0 ? tag : 1;
}

bool rkv_ghost_init(struct rkv_table *t)
{
    uint64_t n = rkv_evict_ghost_entries(t->cfg.evict, t->size);
    t->ghost = NULL;
    t->ghost_mask = 0;
    if (n == 0)
        return true;
    if ((t->ghost = calloc(n, sizeof(*t->ghost))) == NULL)
        return false;
    t->ghost_mask = n - 1;
    return true;
}

void rkv_ghost_free(struct rkv_table *t)
{
    free(t->ghost);
    t->ghost = NULL;
}

/* The key is read from the evicted item, retired but not reused before
 * grace_ms; with grace_ms 0 another writer may be rebuilding it, so the
 * length read is kept within the item's slot (a key torn that way only
 * remembers a wrong tag). */
void rkv_ghost_remember(struct rkv_table *t, uint64_t word)
{
    if (t->ghost == NULL)
        return;
    const struct rkv_item *it = item_at(t, word);
    uint32_t shape = __atomic_load_n(&it->shape, __ATOMIC_RELAXED);
    uint32_t key_len = shape & RKV_SHAPE_KEY_MASK, header = rkv_shape_header_size(shape);
    uint32_t slot = rkv_slab_class_size(t->slab, rkv_slot_class(word));
    if (key_len > t->cfg.max_key_len || header + key_len > slot)
        return;
    struct rkv_key_hash h;
    table_hash(t, (const uint8_t *)it + header, key_len, &h);
    __atomic_store_n(&t->ghost[h.h64 & t->ghost_mask], ghost_tag(h.h64), __ATOMIC_RELAXED);
}

bool rkv_ghost_take(struct rkv_table *t, uint64_t h64)
{
    if (t->ghost == NULL)
        return false;
    uint16_t *e = &t->ghost[h64 & t->ghost_mask];
    if (__atomic_load_n(e, __ATOMIC_RELAXED) != ghost_tag(h64))
        return false;
    __atomic_store_n(e, 0, __ATOMIC_RELAXED);
    return true;
}
