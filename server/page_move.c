/* page_move.c — slab pages that move between size classes (table_private.h).
 *
 * Page moves (slab.c, calcification). A page of another class is moved to
 * the class of a PUT that must wait for memory when
 *   - its class has nothing to evict and nothing on its way back (it owns
 *     no pages, or all its items are being built): a page of a class that
 *     owns two or more (RKV_DONOR_SPARE); when none does, a larger class
 *     that owns pages hosts its items instead (evict.c,
 *     page_for_empty_class), and only a class larger than every owner
 *     takes a class's only page (RKV_DONOR_ANY); or
 *   - its class is starved: the PUT has to wait although the class's
 *     evict-ahead reserve (evict.c) is at its cap, i.e. the class's memory
 *     turns over within about grace_ms. Then only a page that is clearly
 *     worth less moves: LRU and S3FIFO, one whose live items are on average
 *     MOVE_COLDER times older than the items the class itself evicts next;
 *     RANDOM, one of a class that holds at least two pages more. So two busy
 *     classes cannot take pages back and forth.
 * The page is, of PAGE_SAMPLES random pages, the one whose move loses least:
 * LRU, the least reuse expected of its live items, taking an item's reuse
 * rate as 1 / its access age (a page of cold items is cheap, a page with a
 * few recently used items costs about as many); S3FIFO the same, each item
 * weighted by (1 + its uses) / 4, so an item never read since it was stored
 * counts a quarter of a much-read one of the same age; RANDOM, the fewest live
 * items (no recency to weigh). Every live item on it is evicted through the
 * normal delete path (rkv_table_index_remove: bucket version protocol,
 * OBSOLETE, counted as evictions) and the allocator keeps the page for
 * grace_ms after the last of its items was freed before the class gets it;
 * the PUT waits for that as for the limbo. So with eviction on, a PUT fails
 * only when the heap holds nothing evictable. A move holds the whole index
 * while it checks every item of the page (a hash each: about 4 ms for a
 * 1 MiB page of 16384 live 64-byte items). With LRU or S3FIFO, once a tick, a class
 * that had to evict although another class's next victims are MOVE_COLDER
 * times older than its own also gets a page of that class (memcached's
 * automove, by age): memory follows the mix of item sizes. A page with an
 * item being built on it (allocated, not yet published) is never moved.
 *
 * A heap with fewer slab pages than size classes in use (e.g. 8 MiB of
 * 1 MiB pages for values of 16..4000 bytes) cannot hold every class at
 * once: the classes that own no page store their items in larger classes
 * (rkv_slab_host_class) rather than moving a page for each.
 *
 * Both kinds of move run with the index held exclusive: a PUT's from
 * rkv_evict_alloc (evict.c), which decides when, automove from the tick
 * (rkv_table_tick in table.c).
 */
#include <stdbool.h>
#include <stdint.h>

#include "slab.h"
#include "table.h"
#include "table_private.h"
#include "util.h"

#define PAGE_SAMPLES     8          /* pages a page move compares */
#define PAGE_PROBES      32         /* random looks for another class's page before a scan */
#define PAGE_AGE_SAMPLES 16         /* items that rate what moving a page loses */
#define LOSS_UNIT        (1u << 16) /* page_cost of one live item of access age 0 */
#define MOVE_TRIES       4          /* pages a move tries when one has an item being built */
#define MOVE_COLDER      4 /* a starved class / automove takes pages this many times colder */

/* What moving a page would lose, estimated from up to PAGE_AGE_SAMPLES of
 * its items spread over it. */
struct page_cost {
    uint64_t loss;     /* LRU: sum over its live items of LOSS_UNIT / (1 + access age): the
                          * reuse expected of them if reuse falls as 1 / idle time, so a page
                          * of cold items costs almost nothing and one recent item about one
                          * unit; RANDOM: LOSS_UNIT per live item */
    uint32_t live_age; /* mean access age of the sampled live items; UINT32_MAX when none */
};

static void page_cost(struct rkv_table *t, const struct rkv_slab_page_info *pi, struct page_cost *out)
{
    unsigned n = RKV_MIN(pi->handed, PAGE_AGE_SAMPLES), live = 0;
    uint64_t loss = 0, ages = 0;
    for (unsigned i = 0; i < n; i++) {
        struct place p;
        uint64_t item = (uint64_t)i * pi->handed / n;
        if (!rkv_table_live_at(t, pi->start + item * pi->size, pi->cls, &p))
            continue;
        uint32_t age = rkv_evict_item_age(t, p.word);
        /* s3fifo: an item never read since stored (on probation) counts a
         * quarter of one read S3_USES_MAX times */
        loss += LOSS_UNIT * (1 + rkv_evict_item_uses(t, p.word)) / (S3_USES_MAX + 1) /
                (1 + (uint64_t)age);
        ages += age;
        live++;
    }
    out->loss = n ? loss * pi->handed / n : 0;
    out->live_age = live ? (uint32_t)(ages / live) : UINT32_MAX;
}

/* Does page pi hold the item of slot word `word`? */
static bool page_holds(const struct rkv_slab_page_info *pi, uint64_t word)
{
    uint64_t off = rkv_slot_offset(word);
    return word != 0 && rkv_slot_class(word) == pi->cls && off >= pi->start &&
           off - pi->start < (uint64_t)pi->handed * pi->size;
}

/* Does class c own at least two pages (one to give and one to keep)? Its
 * published count, read without its lock: pages leave a class only by a
 * move, under the index held exclusive as here, so it is never more than
 * the class owns. */
static bool class_spares_page(struct rkv_table *t, unsigned c)
{
    uint64_t owned;
    (void)rkv_slab_class_spare(t->slab, c, &owned);
    return owned >= 2 * (uint64_t)rkv_slab_per_page(t->slab, c);
}

/* A page a move for class cls may take: another class's (from_cls's when
 * that is >= 0; with `spare`, a class's that owns two or more), and not the
 * one holding `keep` (the writing key's own item; 0 for none). */
static bool page_candidate(struct rkv_table *t, uint64_t page, unsigned cls, int from_cls,
                           bool spare, uint64_t keep, struct rkv_slab_page_info *pi)
{
    int pc = rkv_slab_page_class(t->slab, page);
    return pc >= 0 && (unsigned)pc != cls && (from_cls < 0 || pc == from_cls) &&
           (!spare || class_spares_page(t, (unsigned)pc)) &&
           rkv_slab_page_info(t->slab, page, pi) && !page_holds(pi, keep);
}

/* The page a move for class cls takes (from class from_cls when >= 0, else
 * any other; with `spare`, only a class's that owns two or more): of
 * PAGE_SAMPLES random candidates, the one whose move loses
 * least (page_cost), the colder on a tie. When PAGE_PROBES random looks find
 * none (the other classes hold few pages), a scan from a random page takes
 * the first. The index held exclusive. */
static bool pick_victim_page(struct rkv_table *t, unsigned cls, int from_cls, bool spare,
                             uint64_t keep, struct rkv_slab_page_info *out, struct page_cost *cost)
{
    uint64_t pages = rkv_slab_page_count(t->slab);
    unsigned found = 0;
    struct rkv_slab_page_info pi;
    struct page_cost pc;

    for (unsigned probe = 0; probe < PAGE_PROBES && found < PAGE_SAMPLES; probe++) {
        if (!page_candidate(t, rkv_evict_rng(t) % pages, cls, from_cls, spare, keep, &pi))
            continue;
        page_cost(t, &pi, &pc);
        if (found++ == 0 || pc.loss < cost->loss ||
            (pc.loss == cost->loss && pc.live_age > cost->live_age)) {
            *out = pi;
            *cost = pc;
        }
    }
    uint64_t start = rkv_evict_rng(t) % pages;
    for (uint64_t i = 0; i < pages && found == 0; i++)
        if (page_candidate(t, (start + i) % pages, cls, from_cls, spare, keep, out)) {
            page_cost(t, out, cost);
            found = 1;
        }
    return found > 0;
}

/* Evict every live item on page pi (through the index, as any eviction) and
 * hand the page to the allocator's pool for class for_cls (or
 * RKV_SLAB_FOR_INDEX). False when the
 * page holds an item being built (handed out, not in the index): then it
 * stays, and nothing is evicted unless that item appeared meanwhile.
 * The index held exclusive. */
static bool page_move(struct rkv_table *t, const struct rkv_slab_page_info *pi, int for_cls)
{
    struct place p;
    uint32_t live = 0;
    for (uint32_t i = 0; i < pi->handed; i++)
        live += rkv_table_live_at(t, pi->start + (uint64_t)i * pi->size, pi->cls, &p);
    if (live != pi->used)
        return false;
    for (uint32_t i = 0; i < pi->handed && live > 0; i++) {
        if (rkv_table_live_at(t, pi->start + (uint64_t)i * pi->size, pi->cls, &p)) {
            rkv_table_index_remove(t, &p);
            count_eviction(t, p.word);
            live--;
        }
    }
    return rkv_slab_page_take(t->slab, pi->page, pi->cls, for_cls);
}

bool rkv_page_evacuate(struct rkv_table *t, uint64_t page)
{
    struct rkv_slab_page_info pi;
    return rkv_slab_page_info(t->slab, page, &pi) && page_move(t, &pi, RKV_SLAB_FOR_INDEX);
}

/* The access age of the item LRU would evict next in class cls, estimated
 * from LRU_SAMPLES items (evict.c); false when none of them is live. The
 * index held exclusive. */
static bool tail_age(struct rkv_table *t, unsigned cls, uint32_t *age)
{
    struct place p;
    if (!rkv_evict_pick_victim(t, cls, 0, &p))
        return false;
    *age = rkv_evict_item_age(t, p.word);
    return true;
}

/* May a starved class cls take page pi (see the top comment)? The index held exclusive. */
static bool page_worth_less(struct rkv_table *t, unsigned cls, const struct rkv_slab_page_info *pi,
                            const struct page_cost *cost)
{
    if (rkv_evict_uses_access(t->cfg.evict)) {
        uint32_t own;
        return cost->live_age == UINT32_MAX || !tail_age(t, cls, &own) ||
               cost->live_age / MOVE_COLDER > own;
    }
    struct rkv_slab_class_stats mine, theirs;
    rkv_slab_class_stats(t->slab, cls, &mine);
    rkv_slab_class_stats(t->slab, pi->cls, &theirs);
    return theirs.pages >= mine.pages + 2;
}

/* Move a page of another class (from_cls when >= 0) that `donor` allows
 * to class cls (RKV_DONOR_COLDER: one page_worth_less() allows), never the
 * page holding `keep` (0: none). True when one went to the allocator's
 * pool. The index held exclusive. */
bool rkv_page_reassign(struct rkv_table *t, unsigned cls, int from_cls, enum rkv_page_donor donor,
                       uint64_t keep)
{
    for (unsigned tries = 0; tries < MOVE_TRIES; tries++) {
        struct rkv_slab_page_info pi;
        struct page_cost cost;
        if (!pick_victim_page(t, cls, from_cls, donor == RKV_DONOR_SPARE, keep, &pi, &cost) ||
            (donor == RKV_DONOR_COLDER && !page_worth_less(t, cls, &pi, &cost)))
            return false;
        if (page_move(t, &pi, (int)cls))
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
void rkv_page_automove(struct rkv_table *t)
{
    unsigned classes = rkv_slab_class_count(t->slab);
    int young = -1, old = -1;
    uint32_t young_age = UINT32_MAX, old_age = 0, age;

    if (!rkv_evict_uses_access(t->cfg.evict) || rkv_slab_pages_any(t->slab))
        return;
    uint64_t since = rkv_table_index_lock_all(t);
    for (unsigned c = 0; c < classes; c++) {
        struct rkv_slab_class_stats cs;
        uint64_t seen = __atomic_load_n(&t->class_evictions[c], __ATOMIC_RELAXED);
        bool evicted = seen != t->automove_seen[c];
        t->automove_seen[c] = seen;
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
        rkv_page_reassign(t, (unsigned)young, old, RKV_DONOR_SPARE, 0);
    rkv_table_index_unlock_all(t, since);
}
