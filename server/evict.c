/* evict.c — which items go when the heap is full (table_private.h).
 *
 * Eviction (the server never sees GETs): clients send the slot words they
 * read items through as hints; a hint stamps the item's private access word
 * (kept by the slab allocator, indexed by item) with the table's access
 * clock, which advances by ACCESS_STEP once per ACCESS_STEP items a thread
 * slot stores (table.c; ages are taken modulo 2^32 stores, so an item
 * untouched for longer looks young again: LRU is approximate). LRU evicts
 * the least recently stamped of LRU_SAMPLES random items of the needed
 * class (Redis's approximated LRU); RANDOM evicts the first live item of
 * RANDOM_SAMPLES random picks.
 *
 * S3FIFO (a sampled, list-free take on S3-FIFO's small-queue filter) keeps
 * in the same word a 2-bit use count beside the store time
 * (table_private.h): 0 when stored, +1 when read in a clock step it was not
 * read in yet (hints and door reads, as LRU's stamps: no more writes per
 * GET), -1 per use_decay stores unread (USE_DECAY_TURNS turnovers of the
 * table, set each tick; Redis's LFU decays the same way, by time). A new
 * value of a live key keeps the old item's count; a new key that the
 * ghost remembers as evicted unread lately (evict_ghost.c: S3-FIFO's
 * ghost queue) starts at 1. Of LRU_SAMPLES
 * random items the victim is the one with the fewest uses, then the oldest:
 * an item never read since it was stored (a one-hit wonder, or a scan's
 * key) goes before any item that was read, oldest first, so new items pass
 * a probation that sizes itself (the share of never-read items the samples
 * keep finding: a few percent of the class) and a one-pass scan churns only
 * that share instead of flushing the items that are being read. A hot item
 * that stops being read loses a use per USE_DECAY_TURNS turnovers and goes
 * as an old one.
 *
 * Because freed memory is reusable only after grace_ms, a full heap evicts
 * ahead: each PUT keeps (reusable + limbo + fresh) items its class holds
 * (beyond what writers' magazines hold) at or above a per-class reserve,
 * which doubles (up to an eighth of the class) whenever a PUT still had to
 * wait for the limbo, and halves each tick no PUT of the class did (a burst
 * of writes leaves free memory for a few seconds, not a minute), down to
 * twice what the class evicts per grace period and at least its floor, 8
 * items or 256 KiB of them (reserve_floor): memory held free is memory no
 * item uses. A PUT waits at most grace_ms per try, never spins.
 *
 * A victim leaves through table.c's delete path (rkv_table_index_remove:
 * bucket version protocol, OBSOLETE, freed into the limbo), counted as an
 * eviction, under the locks table.c's top comment describes: evicting ahead
 * holds no index lock and takes each victim's bucket stripe
 * (rkv_table_index_remove_if); a PUT whose class ran dry, and evicting a
 * neighbour for a key with no room, hold the index exclusive. When evicting
 * in its own class is not enough, a PUT takes a page of another class
 * (page_move.c has when and which).
 *
 * What a PUT evicts for itself waits out its grace period before reuse.
 * Meanwhile a larger class within RKV_SLAB_HOST_SPAN times the item's size
 * that holds more free items than its own reserve lends one
 * (borrow_larger), and a PUT waits (sleeping its worker, and every
 * connection the worker serves) only when none does. A class with one
 * slab page, as many are in a small heap holding values of many sizes,
 * runs dry in any burst of writes to it: waiting there held a 64 MiB
 * server to a few hundred sets a second.
 */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "slab.h"
#include "table.h"
#include "table_private.h"
#include "util.h"

#define LRU_SAMPLES     16 /* lru and s3fifo */
#define RANDOM_SAMPLES  16
#define LOOKUP_BATCH    4    /* sampled offsets looked up in the index at once */
#define USE_DECAY_MIN   1024 /* s3fifo: stores per lost use at least */
#define USE_DECAY_TURNS 4    /* s3fifo: turnovers of the table per lost use */
#define RESERVE_MIN     8    /* initial evict-ahead reserve per class, in items */
#define RESERVE_MIN_BYTES \
    (256u << 10) /* the reserve's floor: RESERVE_MIN items, or fewer this many bytes' worth */
#define EVICT_AHEAD_MAX 32 /* evictions one PUT does ahead of need */
#define ALLOC_TRIES     3  /* waits for the limbo or a moved page before a PUT gives up */
_Static_assert(LOOKUP_BATCH <= RKV_LIVE_BATCH_MAX, "a lookup batch fits rkv_table_live_batch");

/* s3fifo's use decay for a table of `items` items: a use lost per
 * USE_DECAY_TURNS turnovers. One turnover decayed a read item to a never-read
 * one's rank before its next read came too often: a key read once per 300 k
 * operations is worth keeping over the ones the ghost and the probation
 * bring in (docs/results/2026-12-03-hit-rate-policy.md). */
static void use_decay_set(struct rkv_table *t, uint64_t items)
{
    uint64_t d = RKV_MAX(items, USE_DECAY_MIN / USE_DECAY_TURNS) * USE_DECAY_TURNS;
    __atomic_store_n(&t->use_decay, (uint32_t)RKV_MIN(d, UINT32_MAX / 2), __ATOMIC_RELAXED);
}

/* Each class's evict-ahead reserve starts at RESERVE_MIN items; s3fifo's
 * use decay as for a region full of 256-byte items, until the first tick
 * counts them. */
void rkv_evict_init(struct rkv_table *t)
{
    for (unsigned i = 0; i < RKV_MAX_CLASSES; i++)
        t->reserve[i] = RESERVE_MIN;
    t->reserve_tick_ns = t->now_ns();
    use_decay_set(t, t->size / 256);
}

/* Random bits for eviction and page sampling, from this thread's writer
 * slot (a slot shared by two threads may hand both the same bits: harmless). */
uint64_t rkv_evict_rng(struct rkv_table *t)
{
    struct writer_slot *w = writer_slot(t);
    uint64_t x = __atomic_load_n(&w->rng, __ATOMIC_RELAXED);
    if (RKV_UNLIKELY(x == 0))
        x = (t->rng_seed ^ (uint64_t)(w - t->writer_slots) * 0x9e3779b97f4a7c15ull) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    __atomic_store_n(&w->rng, x, __ATOMIC_RELAXED);
    return x;
}

/* The access word of the item of slot word `word` (*w) and the clock
 * (*now); false without access words. */
static bool access_word(struct rkv_table *t, uint64_t word, uint32_t *w, uint32_t *now)
{
    uint32_t *m = rkv_slab_meta(t->slab, rkv_slot_offset(word), rkv_slot_class(word));
    if (m == NULL)
        return false;
    *now = __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED);
    *w = __atomic_load_n(m, __ATOMIC_RELAXED);
    return true;
}

/* How many stores ago the item in slot word `word` was stored or last read
 * (its access word; modulo 2^32 stores, so an item untouched for longer
 * looks young again); 0 without access words. */
uint32_t rkv_evict_item_age(struct rkv_table *t, uint64_t word)
{
    uint32_t w, now;
    if (!access_word(t, word, &w, &now))
        return 0;
    return t->cfg.evict == RKV_EVICT_S3FIFO ? s3_age(w, now) : now - w;
}

/* s3fifo: the item's decayed use count; S3_USES_MAX without s3fifo's words. */
unsigned rkv_evict_item_uses(struct rkv_table *t, uint64_t word)
{
    uint32_t w, now;
    if (t->cfg.evict != RKV_EVICT_S3FIFO || !access_word(t, word, &w, &now))
        return S3_USES_MAX;
    return s3_uses(t, w, now);
}

/* How cold an item with access word w is at access clock `now`: the
 * larger, the sooner it goes. lru, its age; s3fifo, first the fewer uses
 * (an item never read since it was stored before any that was), then the
 * age. */
static uint64_t coldness_of(struct rkv_table *t, uint32_t w, uint32_t now)
{
    if (t->cfg.evict != RKV_EVICT_S3FIFO)
        return now - w;
    return (uint64_t)(S3_USES_MAX - s3_uses(t, w, now)) << 34 | s3_age(w, now);
}

/* How cold the item of slot word `word` is (coldness_of); 0 without access
 * words. */
static uint64_t coldness(struct rkv_table *t, uint64_t word)
{
    uint32_t w, now;
    return access_word(t, word, &w, &now) ? coldness_of(t, w, now) : 0;
}

/* The least evict-ahead reserve of class cls: RESERVE_MIN items, but no more
 * than RESERVE_MIN_BYTES of them, and at least one. Eight free items of a
 * class of 512 KiB items are 4 MiB no item uses, a sixteenth of a 64 MiB
 * heap; large items come at a few a second for the same bytes written, so
 * a PUT that finds the class dry is what the doubling below is for. */
static uint64_t reserve_floor(const struct rkv_table *t, unsigned cls)
{
    uint32_t size = rkv_slab_class_size(t->slab, cls);
    return size == 0 ? RESERVE_MIN : RKV_MAX(1, RKV_MIN(RESERVE_MIN, RESERVE_MIN_BYTES / size));
}

/* Halve class cls's evict-ahead reserve when no PUT of the
 * class ran dry since the last tick (`dry`: how many did), down to twice
 * what the class evicted per grace period since then (`evicted` items in
 * `ns`), at least its floor (reserve_floor). Without it the reserve only grows: one burst
 * of writes (or a stalled writer) would keep up to an eighth of the class
 * free for good, memory no item can use. A compare-exchange: a PUT that ran
 * dry meanwhile and doubled it wins. */
static void reserve_decay(struct rkv_table *t, unsigned cls, uint64_t dry, uint64_t evicted,
                          uint64_t ns)
{
    uint64_t r = __atomic_load_n(&t->reserve[cls], __ATOMIC_RELAXED);
    uint64_t floor = reserve_floor(t, cls);
    if (dry != 0 || r <= floor || ns == 0)
        return;
    uint64_t need = (uint64_t)(2.0 * (double)evicted * t->cfg.grace_ms * 1e6 / (double)ns);
    uint64_t next = RKV_MAX(RKV_MAX(r / 2, need), floor);
    if (next < r)
        __atomic_compare_exchange_n(&t->reserve[cls], &r, next, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
}

/* Once a tick: an idle s3fifo item loses a use per USE_DECAY_TURNS
 * turnovers of the table's `items` items (at least USE_DECAY_MIN stores);
 * each class's reserve may shrink (reserve_decay). */
void rkv_evict_tick(struct rkv_table *t, uint64_t items)
{
    use_decay_set(t, items);
    uint64_t now = t->now_ns(), ns = now - t->reserve_tick_ns;
    t->reserve_tick_ns = now;
    for (unsigned c = 0; c < RKV_MAX_CLASSES; c++) {
        uint64_t dry = __atomic_load_n(&t->dry_runs[c], __ATOMIC_RELAXED);
        uint64_t ev = __atomic_load_n(&t->class_evictions[c], __ATOMIC_RELAXED);
        reserve_decay(t, c, dry - t->reserve_seen[c][0], ev - t->reserve_seen[c][1], ns);
        t->reserve_seen[c][0] = dry;
        t->reserve_seen[c][1] = ev;
    }
}

/* The n sampled offsets of class cls in `order`, coldest first by their
 * access words (read before anything confirms the offsets hold items: a
 * freed item keeps its word, and the index decides later). */
static void rank_samples(struct rkv_table *t, unsigned cls, const uint64_t *offs, unsigned n,
                         unsigned *order)
{
    uint32_t *m[LRU_SAMPLES];
    uint64_t cold[LRU_SAMPLES];
    for (unsigned i = 0; i < n; i++)
        if ((m[i] = rkv_slab_meta(t->slab, offs[i], cls)) != NULL)
            __builtin_prefetch(m[i]);
    uint32_t now = __atomic_load_n(&t->access_clock, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < n; i++) {
        cold[i] = m[i] != NULL ? coldness_of(t, __atomic_load_n(m[i], __ATOMIC_RELAXED), now) : 0;
        unsigned j = i;
        for (; j > 0 && cold[order[j - 1]] < cold[i]; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

/* Choose a live item of class cls to evict, never the one in `keep` (the
 * item the current PUT just stored). Exact with the index held exclusive;
 * else a candidate that evict_one() confirms. random takes the first live
 * sample. lru and s3fifo take the coldest live one: they rank the samples
 * by their access words (rank_samples), then look them up in the index a
 * few at a time, coldest first (rkv_table_live_batch), and stop at the
 * first live one, which is the same item as looking all of them up and
 * comparing: most of the time the first few hold it, and a lookup (a
 * header, a key hashed, two buckets) is what eviction's time goes to. */
bool rkv_evict_pick_victim(struct rkv_table *t, unsigned cls, uint64_t keep, struct place *victim)
{
    bool lru = rkv_evict_uses_access(t->cfg.evict);
    unsigned samples = lru ? LRU_SAMPLES : RANDOM_SAMPLES;
    uint64_t rnd[RKV_MAX(LRU_SAMPLES, RANDOM_SAMPLES)], offs[RKV_MAX(LRU_SAMPLES, RANDOM_SAMPLES)];

    for (unsigned i = 0; i < samples; i++)
        rnd[i] = rkv_evict_rng(t);
    if (rkv_slab_sample(t->slab, cls, rnd, samples, offs) < samples)
        return false; /* the class has no pages */
    if (!lru) {
        for (unsigned i = 0; i < samples; i++)
            if (rkv_table_live_at(t, offs[i], cls, victim) && victim->word != keep)
                return true;
        return false;
    }
    unsigned order[LRU_SAMPLES];
    rank_samples(t, cls, offs, samples, order);
    for (unsigned first = 0; first < samples; first += LOOKUP_BATCH) {
        unsigned n = RKV_MIN(LOOKUP_BATCH, samples - first);
        uint64_t o[LOOKUP_BATCH];
        struct place p[LOOKUP_BATCH];
        bool live[LOOKUP_BATCH];
        for (unsigned i = 0; i < n; i++)
            o[i] = offs[order[first + i]];
        rkv_table_live_batch(t, cls, o, n, p, live);
        for (unsigned i = 0; i < n; i++)
            if (live[i] && p[i].word != keep) {
                *victim = p[i];
                return true;
            }
    }
    return false;
}

/* The item of slot word `word` was evicted, with no use left (`unread`) or
 * not: counted, and an unread one's key remembered (the item is retired,
 * its memory not reused before grace_ms: evict_ghost.c reads its key). */
static void evicted(struct rkv_table *t, uint64_t word, bool unread)
{
    count_eviction(t, word);
    if (unread)
        rkv_ghost_remember(t, word);
}

/* Remove victim p from the index: at once with the index held exclusive;
 * else under its bucket's stripe, if the slot still holds it (a write, a
 * delete or a displacement may have moved it since it was chosen:
 * rkv_table_index_remove_if). */
static bool evict_one(struct rkv_table *t, const struct place *p, bool exclusive)
{
    bool still = true, unread = rkv_evict_item_uses(t, p->word) == 0;
    if (exclusive)
        rkv_table_index_remove(t, p);
    else
        still = rkv_table_index_remove_if(t, p);
    if (still)
        evicted(t, p->word, unread);
    return still;
}

/* Evict up to `want` items of class cls, sparing `keep`; returns how many.
 * With the index held exclusive (`exclusive`), or holding no index lock:
 * then each victim goes under its own bucket's stripe. */
static unsigned evict_class(struct rkv_table *t, unsigned cls, unsigned want, uint64_t keep,
                            bool exclusive)
{
    unsigned done = 0;
    for (unsigned tries = 0; done < want && tries < 2 * want + 4; tries++) {
        struct place p;
        if (rkv_evict_pick_victim(t, cls, keep, &p) && evict_one(t, &p, exclusive))
            done++;
    }
    __atomic_fetch_add(&t->class_evictions[cls], done, __ATOMIC_RELAXED);
    return done;
}

/* The largest evict-ahead reserve for a class: an eighth of what it owns. */
static uint64_t reserve_cap(uint64_t owned)
{
    return RKV_MAX(1, owned / 8);
}

/* Class cls's evict-ahead reserve now (its current size, at most
 * reserve_cap of what it owns), and in *coming the items it holds on their
 * way back to allocation: limbo, ready, fresh (rkv_slab_class_spare). No
 * lock. */
static inline uint64_t reserve_target(struct rkv_table *t, unsigned cls, uint64_t *coming)
{
    uint64_t owned;
    *coming = rkv_slab_class_spare(t->slab, cls, &owned);
    return RKV_MIN(__atomic_load_n(&t->reserve[cls], __ATOMIC_RELAXED), reserve_cap(owned));
}

/* How many items of class cls to evict ahead, so that a PUT on a full heap
 * rarely has to wait for the grace period: what the items the class holds
 * on their way back to allocation (limbo, ready, fresh: rkv_slab_class_spare,
 * which does not count the few in writers' magazines, so the reserve comes on
 * top of those) lack of the class's reserve. Takes no lock at all, since
 * every PUT on a full heap asks; the answer is a hint, re-asked by the
 * writer that claimed the class before anything is evicted. (inline: an
 * external definition still, that rkv_evict_ahead_claimed's look inlines.) */
inline unsigned rkv_evict_ahead_want(struct rkv_table *t, unsigned cls)
{
    if (t->cfg.evict == RKV_EVICT_NONE || rkv_slab_pages_any(t->slab))
        return 0;
    uint64_t coming, target = reserve_target(t, cls, &coming);
    return coming < target ? (unsigned)RKV_MIN(target - coming, EVICT_AHEAD_MAX) : 0;
}

/* Evict ahead for class cls (rkv_evict_ahead_want), sparing `keep`, without
 * the whole index: each victim under its bucket's stripe. The caller claimed
 * the class (rkv_evict_ahead in table_private.h): one writer per class at a
 * time (others go on: the reserve is ahead of need), and its evicted items
 * go to the class at once, so the next look sees them. */
void rkv_evict_ahead_claimed(struct rkv_table *t, unsigned cls, uint64_t keep)
{
    unsigned want = rkv_evict_ahead_want(t, cls);
    if (want > 0) {
        evict_class(t, cls, want, keep, false);
        rkv_slab_flush(t->slab, cls);
    }
    __atomic_store_n(&t->evicting[cls], 0, __ATOMIC_RELEASE);
}

/* Free a slot in one of the key's buckets by evicting one of their items
 * (the index is full there and no displacement path exists). The index held exclusive. */
bool rkv_evict_for_slot(struct rkv_table *t, const struct rkv_key_hash *h, struct place *out)
{
    struct place best = { 0 };
    uint64_t best_cold = 0;
    unsigned pick = (unsigned)(rkv_evict_rng(t) % (2 * RKV_SLOTS_PER_BUCKET));

    for (unsigned i = 0; i < 2 * RKV_SLOTS_PER_BUCKET; i++) {
        struct rkv_bucket *b = &t->buckets[h->bucket[i / RKV_SLOTS_PER_BUCKET]];
        unsigned s = i % RKV_SLOTS_PER_BUCKET;
        uint64_t w = b->slot[s];
        if (w == 0)
            continue;
        uint64_t cold = rkv_evict_uses_access(t->cfg.evict) ? coldness(t, w) : (i == pick);
        if (best.word == 0 || cold > best_cold) {
            best = (struct place){ .bucket = b, .slot = s, .word = w, .it = item_at(t, w) };
            best_cold = cold;
        }
    }
    if (best.word == 0)
        return false;
    bool unread = rkv_evict_item_uses(t, best.word) == 0;
    rkv_table_index_remove(t, &best);
    evicted(t, best.word, unread);
    *out = best;
    return true;
}

/* The live item of the key being written, which evicting for its new
 * version must spare (design.md invariant 7): an append, an incr or a CAS
 * whose own item were the victim would find nothing to replace and lose the
 * key. 0 when the key has none. The index held exclusive. */
static uint64_t own_item(struct rkv_table *t, const struct rkv_key_hash *h, const void *key,
                         uint32_t key_len)
{
    struct place p;
    return rkv_table_index_find(t, h, key, key_len, &p) ? p.word : 0;
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

/* An item for class *cls lent by the smallest larger class (within
 * RKV_SLAB_HOST_SPAN times its size) that can hand one out now and holds
 * more than its own reserve, so lending leaves it none the drier; *cls
 * becomes that class. 0 when none can. */
static uint64_t borrow_larger(struct rkv_table *t, unsigned *cls)
{
    uint64_t reach = (uint64_t)rkv_slab_class_size(t->slab, *cls) * RKV_SLAB_HOST_SPAN;
    unsigned n = rkv_slab_class_count(t->slab);
    for (unsigned c = *cls + 1; c < n && rkv_slab_class_size(t->slab, c) <= reach; c++) {
        uint64_t off, coming;
        if (reserve_target(t, c, &coming) < coming && (off = rkv_slab_alloc_ready(t->slab, c)) != 0) {
            *cls = c;
            return off;
        }
    }
    return 0;
}

/* Class cls has nothing to evict and nothing on its way back (it owns no
 * page, most often): a page of a class that owns two or more moves to it;
 * else a larger class that owns pages hosts its items (returned: the caller
 * evicts there); else, with no larger class to host them, a page of any
 * class moves to it, that class's only page if need be. A pageless class
 * that emptied another class's only page for each of its items left that
 * class pageless in turn: with fewer pages than classes in use (16 MiB of
 * 1 MiB pages for values of 100 B to 4 KB) every PUT moved a page and
 * waited for it, and the heap held a few dozen items. The index held
 * exclusive. */
static unsigned page_for_empty_class(struct rkv_table *t, unsigned cls, uint64_t keep)
{
    if (rkv_page_reassign(t, cls, -1, RKV_DONOR_SPARE, keep))
        return cls;
    unsigned host = rkv_slab_larger_owner(t->slab, cls);
    if (host == cls)
        rkv_page_reassign(t, cls, -1, RKV_DONOR_ANY, keep);
    return host;
}

/* Class cls has at least its evict-ahead reserve on its way back through
 * the limbo: evicting more for a PUT now would only grow the limbo. */
static bool limbo_covers_reserve(struct rkv_table *t, unsigned cls)
{
    uint64_t coming;
    return reserve_target(t, cls, &coming) <= coming && rkv_slab_limbo_wait_ms(t->slab, cls) >= 0;
}

/* Memory for an item of class *cls when the class had none to hand out
 * (table.c's item_alloc asked first), evicting when the policy allows:
 * items of its class, else a page of another class, never the key's own
 * item. What it evicts waits out its grace period; meanwhile a larger
 * class's ready item (borrow_larger: *cls becomes that class)
 * serves rather than a wait, which would stall every connection of the
 * calling worker. Called without any index lock; may wait for the limbo
 * or a moved page (at most grace_ms per try), and asks the class again
 * after each. */
rkv_status rkv_evict_alloc(struct rkv_table *t, unsigned *clsp, const struct rkv_key_hash *h,
                           const void *key, uint32_t key_len, uint64_t *off)
{
    unsigned cls = *clsp;
    if (t->cfg.evict != RKV_EVICT_NONE && limbo_covers_reserve(t, cls) &&
        (*off = borrow_larger(t, clsp)) != 0)
        return RKV_OK;
    for (unsigned tries = 0;; tries++) {
        if (t->cfg.evict == RKV_EVICT_NONE || tries == ALLOC_TRIES)
            return RKV_OUT_OF_MEMORY;

        struct rkv_slab_class_stats cs;
        uint64_t since = rkv_table_index_lock_all(t);
        __atomic_fetch_add(&t->dry_runs[cls], 1, __ATOMIC_RELAXED);
        uint64_t keep = own_item(t, h, key, key_len);
        rkv_slab_class_stats(t->slab, cls, &cs);
        uint64_t cap = reserve_cap(cs.pages * cs.per_page);
        bool starved = cs.pages > 0 && t->reserve[cls] >= cap; /* ran dry at the largest reserve */
        if (t->reserve[cls] < cap) /* we ran dry: the reserve was too small */
            __atomic_store_n(&t->reserve[cls], RKV_MIN(2 * t->reserve[cls], cap), __ATOMIC_RELAXED);
        unsigned evicted =
            evict_class(t, cls, (unsigned)RKV_MIN(RKV_MIN(t->reserve[cls], cap), EVICT_AHEAD_MAX),
                        keep, true);
        /* No page coming for it, and nothing of its own to evict or on its
         * way back: a page from another class (page_for_empty_class), or
         * a larger class hosts it. Starved: a larger class's ready item if
         * one has any, else a page worth less. */
        *off = 0;
        unsigned host = cls;
        if (rkv_slab_page_wait_ms(t->slab, cls) < 0) {
            if (evicted == 0 && rkv_slab_limbo_wait_ms(t->slab, cls) < 0)
                host = page_for_empty_class(t, cls, keep);
            else if (starved && (*off = borrow_larger(t, clsp)) == 0)
                rkv_page_reassign(t, cls, -1, RKV_DONOR_COLDER, keep);
        }
        rkv_table_index_unlock_all(t, since);

        if (host != cls) { /* its room, else evict there as for one of its own */
            *clsp = cls = host;
            if ((*off = rkv_slab_alloc(t->slab, cls)) != 0)
                return RKV_OK;
            continue;
        }
        if (*off != 0 || (*off = rkv_slab_alloc(t->slab, cls)) != 0 ||
            (*off = borrow_larger(t, clsp)) != 0)
            return RKV_OK;
        int wait = wait_min(rkv_slab_limbo_wait_ms(t->slab, cls),
                            rkv_slab_page_wait_ms(t->slab, cls));
        if (wait < 0)
            return RKV_OUT_OF_MEMORY; /* nothing evictable anywhere, nothing on its way back */
        count(&writer_slot(t)->n.alloc_waits, 1);
        count(&writer_slot(t)->n.alloc_wait_ms, wait + 1);
        sleep_ms((unsigned)wait + 1);
        if ((*off = rkv_slab_alloc(t->slab, cls)) != 0)
            return RKV_OK;
    }
}
