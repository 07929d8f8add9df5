/* index_geom.h — which buckets a key's hash names: the index's addressing.
 *
 * The index grows one bucket at a time by linear hashing over the cuckoo
 * buckets. It starts with `base` buckets (any number, at least 2). At level
 * L it has M = base * 2^L buckets plus the `split` buckets [M, M + split)
 * made so far by splitting buckets [0, split) of the level: splitting bucket
 * b moves to b + M the keys whose next address bit is 1, so a key never
 * goes anywhere but its bucket at the level below or that bucket + M. When
 * split reaches M the level is complete: L + 1, split 0.
 *
 * A key's candidate bucket (each of its two, independently) is
 *     b = fastrange(top, base) + base * (ext mod 2^L),
 *     and b + M when b < split and bit L of ext is 1,
 * from two independent parts of its hash (`top`'s high bits pick among the
 * base buckets, `ext`'s low bits the copy): a multiply and a few shifts, no
 * division.
 *
 * Geometry changes while clients read. The server publishes (level, split)
 * as one header word (rkv_index_geom_word) after the buckets it names are
 * in place, and every bucket's version word carries in its top bits the
 * level the bucket is at (level + 1 for a bucket split at this level or
 * made by one). A reader whose cached geometry expects a lower level than
 * the bucket's knows a split moved keys since: it re-reads the header and
 * tries again, and it trusts a miss only in buckets at the level it
 * expected (design.md invariant 4).
 */
#ifndef RKV_INDEX_GEOM_H
#define RKV_INDEX_GEOM_H

#include <stdbool.h>
#include <stdint.h>

/* Bucket version word: bits 0-55 the seqlock count (odd while changing),
 * bits 56-63 the bucket's level. */
#define RKV_VERSION_LEVEL_SHIFT 56
#define RKV_VERSION_COUNT_MASK  ((1ull << RKV_VERSION_LEVEL_SHIFT) - 1)
#define RKV_INDEX_MAX_LEVEL     40u /* base * 2^level buckets: far beyond any region */

/* Header word of the geometry: level in bits 56-63, split in bits 0-55. */
#define RKV_GEOM_LEVEL_SHIFT 56
#define RKV_GEOM_SPLIT_MASK  ((1ull << RKV_GEOM_LEVEL_SHIFT) - 1)

struct rkv_index_geom {
    uint64_t base;  /* buckets before any split, at least 2 */
    uint32_t level; /* completed doublings */
    uint64_t split; /* buckets of this level split so far, < base << level */
};

/* M: the buckets of the level, split or not. */
static inline uint64_t rkv_index_span(const struct rkv_index_geom *g)
{
    return g->base << g->level;
}

/* Buckets in use: [0, count). */
static inline uint64_t rkv_index_count(const struct rkv_index_geom *g)
{
    return rkv_index_span(g) + g->split;
}

/* The geometry of an index of `base` buckets that never split. */
static inline struct rkv_index_geom rkv_index_flat(uint64_t base)
{
    return (struct rkv_index_geom){ .base = base, .level = 0, .split = 0 };
}

/* The header word of (level, split), and back. */
static inline uint64_t rkv_index_geom_word(const struct rkv_index_geom *g)
{
    return (uint64_t)g->level << RKV_GEOM_LEVEL_SHIFT | g->split;
}
static inline struct rkv_index_geom rkv_index_geom_from(uint64_t base, uint64_t word)
{
    return (struct rkv_index_geom){ .base = base,
                                    .level = (uint32_t)(word >> RKV_GEOM_LEVEL_SHIFT),
                                    .split = word & RKV_GEOM_SPLIT_MASK };
}

/* Is g a geometry whose buckets fit `capacity` (and whose numbers cannot
 * overflow)? For a geometry read from the network. */
static inline bool rkv_index_geom_valid(const struct rkv_index_geom *g, uint64_t capacity)
{
    if (g->base < 2 || g->level > RKV_INDEX_MAX_LEVEL || g->base > capacity ||
        (capacity >> g->level) < g->base)
        return false;
    return g->split < rkv_index_span(g) && rkv_index_count(g) <= capacity;
}

/* One candidate bucket from its two hash parts (see the top comment). */
static inline uint64_t rkv_index_bucket(const struct rkv_index_geom *g, uint64_t top, uint64_t ext)
{
    uint64_t b = (uint64_t)(((unsigned __int128)top * g->base) >> 64);
    uint64_t m = rkv_index_span(g);
    b += g->base * (ext & ((1ull << g->level) - 1));
    if (b < g->split && (ext >> g->level & 1))
        b += m;
    return b;
}

/* The level bucket b of [0, count) is at. */
static inline unsigned rkv_index_bucket_level(const struct rkv_index_geom *g, uint64_t b)
{
    return g->level + (b < g->split || b >= rkv_index_span(g));
}

/* The level a bucket version word carries. */
static inline unsigned rkv_version_level(uint64_t version)
{
    return (unsigned)(version >> RKV_VERSION_LEVEL_SHIFT);
}

#endif
