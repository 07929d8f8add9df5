/* layout.h — the byte layout of the table region that server and clients share.
 *
 * The server owns one contiguous region and registers it once for remote READ.
 * Clients read it one-sidedly (RDMA READ, or memcpy from a read-only shm
 * mapping), so every structure here is a wire format: fixed-width, little
 * endian (rkv runs on little-endian hosts only: the byte-order
 * RKV_STATIC_ASSERT below refuses to build elsewhere), and
 * never re-laid out without bumping RKV_FORMAT_VERSION.
 *
 *   +----------------------+ 0
 *   | rkv_region_header    |  one 4 KiB page: magic, geometry, clock
 *   +----------------------+ index_offset
 *   | bucket[count]        |  64-byte buckets: version word + 7 slots; the index
 *   |   (room to grow)     |  grows by splits up to index_capacity (index_geom.h)
 *   +----------------------+ heap_offset
 *   | item heap            |  slab pages, each carved into one size class
 *   +----------------------+ region_size
 *
 * A slot is one 8-byte word: fingerprint | size class | item offset. It is
 * the only thing a writer publishes with a single atomic store; everything a
 * reader gets through it is verified (checksum, key, obsolete flag), so a
 * reader racing a writer either sees a complete item or retries.
 */
#ifndef RKV_LAYOUT_H
#define RKV_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "index_geom.h"

#define RKV_STATIC_ASSERT(c, m) _Static_assert(c, m)

/* Structures here are read and written in host byte order on both sides. */
RKV_STATIC_ASSERT(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                  "the region and message formats are little endian: build rkv on a little-endian host");

#define RKV_REGION_MAGIC 0x314e4745524b5652ull /* "RKVREGN1" */
/* RKV_FORMAT_VERSION 2: superseded items forward to their replacement;
 * 3: items on 8-byte boundaries, finer size classes; 4: any bucket count
 * (a key's buckets from the high bits of its hash), classes that divide the
 * slab page above RKV_SLAB_DIVISOR_FROM of it; 5: a 28-byte item header,
 * expire_at and user_flags stored only when not 0 (struct rkv_item); 6: an
 * index that grows by linear hashing (index_geom.h: index_base,
 * index_capacity, index_geometry; bucket versions carry their level); 7:
 * items on 4-byte boundaries, the state word and checksum placed by the
 * item's start modulo 8 (struct rkv_item), slot offsets in 4-byte units */
#define RKV_FORMAT_VERSION 7u
#define RKV_HEADER_SIZE    4096u
#define RKV_CACHELINE      64u

#define RKV_SLOTS_PER_BUCKET 7u   /* 7 slots + 1 version word = 64 bytes */
#define RKV_MAX_CLASSES      192u /* size classes; class id fits 8 bits */
#define RKV_ITEM_ALIGN       4u   /* items start on 4-byte boundaries (rkv_item_state_at) */
#define RKV_MAX_KEY_LEN      250u /* memcached's limit; keys are binary-safe */

/* The first page of the region. Written once at start (geometry) except for
 * `clock`, which the server refreshes every second so clients can judge TTL
 * expiry without asking the server, and `index_geometry`, which changes as
 * the index grows (after the buckets it names are in place). */
struct rkv_region_header {
    uint64_t magic;                   /* RKV_REGION_MAGIC */
    uint32_t format_version;          /* RKV_FORMAT_VERSION */
    uint32_t header_size;             /* RKV_HEADER_SIZE */
    uint64_t generation;              /* random per server start; a restart changes it */
    uint64_t region_size;             /* bytes in the whole region */
    uint64_t index_offset;            /* first bucket, from the region start */
    uint64_t index_base;              /* buckets before any split: at least 2, any number */
    uint64_t index_capacity;          /* buckets the index may grow to (room up to heap_offset) */
    volatile uint64_t index_geometry; /* level and split (index_geom.h), one word */
    uint64_t heap_offset;             /* first slab page */
    uint64_t heap_size;               /* bytes of heap (a multiple of slab_page_size) */
    uint32_t slab_page_size;          /* bytes per slab page; the largest item */
    uint32_t class_count;             /* entries used in class_size[] */
    uint32_t max_key_len;             /* longest key the server accepts */
    uint32_t max_value_len;  /* longest value for the longest key (a shorter key's may be longer by
                                * the difference: an item is never larger than RKV_ITEM_HEADER_MAX +
                                * max_key_len + max_value_len) */
    uint64_t hash_seed;      /* XXH3 seed for key hashing */
    volatile uint64_t clock; /* server clock (common/clock.h), published once a second */
    uint32_t class_size[RKV_MAX_CLASSES]; /* bytes of an item slot in class i */
    /* The server's liveness word for same-host (shm) readers: a process-shared
     * robust mutex that the server's main thread holds while it serves. Its
     * first 32-bit word is the futex: the owner's TID while held; the kernel
     * sets FUTEX_OWNER_DIED in it if the server dies, even by SIGKILL; a clean
     * shutdown unlocks it (0). One load tells an shm reader whether what it
     * just copied came from a live server. RDMA readers learn the same from
     * their queue pair breaking and ignore it. */
    _Alignas(64) uint8_t liveness[64];
};

#define RKV_FUTEX_TID_MASK   0x3fffffffu
#define RKV_FUTEX_OWNER_DIED 0x40000000u

/* True while the server that owns this (mapped) region is alive. */
static inline bool rkv_region_server_alive(const struct rkv_region_header *h)
{
    uint32_t w = __atomic_load_n((const uint32_t *)(const void *)h->liveness, __ATOMIC_ACQUIRE);
    return (w & RKV_FUTEX_TID_MASK) != 0 && (w & RKV_FUTEX_OWNER_DIED) == 0;
}
RKV_STATIC_ASSERT(sizeof(struct rkv_region_header) <= RKV_HEADER_SIZE, "header fits its page");

/* A bucket: one cache line. `version` is a seqlock word: odd while the server
 * is changing the bucket's slots, bumped by 2 per completed change; its top
 * bits carry the bucket's level (index_geom.h). A reader that finds no match
 * re-reads both buckets and trusts the miss only if both versions are even,
 * unchanged and at the level its geometry expects (design.md invariant 4). */
struct rkv_bucket {
    volatile uint64_t version;
    volatile uint64_t slot[RKV_SLOTS_PER_BUCKET];
};
RKV_STATIC_ASSERT(sizeof(struct rkv_bucket) == RKV_CACHELINE, "bucket is one cache line");

/* Slot word: bits 0-15 fingerprint (never 0), 16-23 size class,
 * 24-63 item offset from the region start in RKV_ITEM_ALIGN (4-byte) units,
 * so regions up to 4 TiB (the table refuses larger). 0 = empty. */
#define RKV_SLOT_FP_BITS     16
#define RKV_SLOT_CLASS_SHIFT 16
#define RKV_SLOT_OFF_SHIFT   24

static inline uint64_t rkv_slot_make(uint16_t fp, unsigned cls, uint64_t offset)
{
    return (uint64_t)fp | ((uint64_t)(cls & 0xff) << RKV_SLOT_CLASS_SHIFT) |
           ((offset / RKV_ITEM_ALIGN) << RKV_SLOT_OFF_SHIFT);
}
static inline uint16_t rkv_slot_fp(uint64_t s)
{
    return (uint16_t)(s & 0xffff);
}
static inline unsigned rkv_slot_class(uint64_t s)
{
    return (unsigned)((s >> RKV_SLOT_CLASS_SHIFT) & 0xff);
}
static inline uint64_t rkv_slot_offset(uint64_t s)
{
    return (s >> RKV_SLOT_OFF_SHIFT) * RKV_ITEM_ALIGN;
}

/* An item in the heap: a 28-byte header, the optional fields its shape
 * word names, the key, the value. Items start on 4-byte boundaries
 * (RKV_ITEM_ALIGN); only `state`, which the server stores in place with
 * one atomic 8-byte store, needs 8, so where it and the checksum sit depends
 * on the item's start modulo 8, its parity (design.md, "Item"):
 *
 *   start = 0 mod 8:  0 checksum    8 state  16 version  24 shape  28 tail
 *   start = 4 mod 8:  0 checksum lo 4 state  12 checksum hi
 *                                            16 version  24 shape  28 tail
 *
 * The checksum covers bytes [16, rkv_item_bytes): version, shape, the
 * optional fields, key and value (every byte a reader acts on); it excludes
 * itself and `state`, which the server changes in place (marking an item
 * obsolete) without rewriting the item. `version` is only 4-aligned at
 * parity 4: it is read and written with memcpy. A copy of an item must sit
 * at the item's own address (its region offset) modulo 8, so that the same
 * accessors read it: rkv_item_copy_skew.
 *
 * tail: [value_len] [expire_at] [user_flags] key value.
 * shape: bits 0-7 key_len; RKV_SHAPE_EXPIRE: a 4-byte expire_at follows
 * (absent: 0, never expires); RKV_SHAPE_FLAGS: a 4-byte user_flags follows
 * (absent: 0); RKV_SHAPE_LONG: a 4-byte value_len follows and bits 11-31
 * are 0, else bits 11-31 are value_len (below 2 MiB). The optional fields
 * come in that order: [value_len] [expire_at] [user_flags], 4 bytes each.
 *
 * Only the accessors below know the parity: code outside layout.h never
 * computes where the checksum, state or version of an item is. */
struct rkv_item {
    uint32_t head[4];      /* checksum and state, placed by parity: rkv_item_state_at */
    uint8_t version_le[8]; /* rkv_item_version: unique per server, larger for a later write */
    uint32_t shape;        /* key_len, which optional fields follow, a short value_len */
    uint8_t tail[];        /* the optional fields, then key bytes, then value bytes */
};
#define RKV_ITEM_PREFIX_SIZE 28u /* checksum, state, version, shape */
#define RKV_ITEM_HEADER_MAX  40u /* the prefix and all three optional fields */
#define RKV_ITEM_SUMMED_FROM 16u /* the checksum covers the item from this byte */
RKV_STATIC_ASSERT(offsetof(struct rkv_item, tail) == RKV_ITEM_PREFIX_SIZE, "item prefix is 28 bytes");
RKV_STATIC_ASSERT(offsetof(struct rkv_item, version_le) == RKV_ITEM_SUMMED_FROM,
                  "the checksummed bytes start at the version");
RKV_STATIC_ASSERT(_Alignof(struct rkv_item) == RKV_ITEM_ALIGN, "items are 4-aligned");

/* The item's parity: 0 or 4, its address modulo 8. */
static inline unsigned rkv_item_parity(const struct rkv_item *it)
{
    return (unsigned)((uintptr_t)it & 4);
}

/* Bytes to add to an 8-aligned address for a copy of the item at region
 * offset `offset` to keep its parity. */
static inline size_t rkv_item_copy_skew(uint64_t offset)
{
    return (size_t)(offset & 4);
}

/* The state word: at 8 (parity 0) or 4 (parity 4), 8-aligned either way:
 * the first 8-byte boundary past the item's first 4 bytes. */
static inline volatile uint64_t *rkv_item_state_at(const struct rkv_item *it)
{
    return (volatile uint64_t *)(((uintptr_t)it + 8) & ~(uintptr_t)7);
}

/* The state word, as one relaxed 8-byte load. */
static inline uint64_t rkv_item_state(const struct rkv_item *it)
{
    return __atomic_load_n(rkv_item_state_at(it), __ATOMIC_RELAXED);
}

/* Store the state word (one atomic 8-byte store, release). */
static inline void rkv_item_set_state(struct rkv_item *it, uint64_t state)
{
    __atomic_store_n(rkv_item_state_at(it), state, __ATOMIC_RELEASE);
}

/* The stored checksum: its low half at 0, its high half at 4 (parity 0) or
 * 12 (parity 4), on either side of the state word. */
static inline const uint32_t *rkv_item_checksum_hi_at(const struct rkv_item *it)
{
    return (const uint32_t *)(const void *)((const uint8_t *)it + 4 + 2 * rkv_item_parity(it));
}

static inline uint64_t rkv_item_checksum_stored(const struct rkv_item *it)
{
    return it->head[0] | (uint64_t)*rkv_item_checksum_hi_at(it) << 32;
}

static inline void rkv_item_set_checksum(struct rkv_item *it, uint64_t sum)
{
    it->head[0] = (uint32_t)sum;
    *(uint32_t *)(uintptr_t)rkv_item_checksum_hi_at(it) = (uint32_t)(sum >> 32);
}

/* The item's version (its CAS token). */
static inline uint64_t rkv_item_version(const struct rkv_item *it)
{
    uint64_t v;
    memcpy(&v, it->version_le, sizeof v);
    return v;
}

#define RKV_SHAPE_KEY_MASK     0xffu
#define RKV_SHAPE_EXPIRE       0x100u
#define RKV_SHAPE_FLAGS        0x200u
#define RKV_SHAPE_LONG         0x400u
#define RKV_SHAPE_VALUE_SHIFT  11
#define RKV_SHAPE_SHORT_VALUES (1u << (32 - RKV_SHAPE_VALUE_SHIFT)) /* short value_len < this */

/* Header bytes (prefix and optional fields) of an item of this shape. */
static inline uint32_t rkv_shape_header_size(uint32_t shape)
{
    return RKV_ITEM_PREFIX_SIZE +
           4u * (((shape & RKV_SHAPE_LONG) != 0) + ((shape & RKV_SHAPE_EXPIRE) != 0) +
                 ((shape & RKV_SHAPE_FLAGS) != 0));
}

/* The shape word of an item with these fields. */
static inline uint32_t rkv_shape_make(uint32_t key_len, uint32_t value_len, uint32_t expire_at,
                                      uint32_t user_flags)
{
    uint32_t shape = (key_len & RKV_SHAPE_KEY_MASK) | (expire_at ? RKV_SHAPE_EXPIRE : 0) |
                     (user_flags ? RKV_SHAPE_FLAGS : 0);
    if (value_len < RKV_SHAPE_SHORT_VALUES)
        return shape | value_len << RKV_SHAPE_VALUE_SHIFT;
    return shape | RKV_SHAPE_LONG;
}

static inline uint32_t rkv_item_tail32(const struct rkv_item *it, unsigned i)
{
    uint32_t v;
    memcpy(&v, it->tail + 4 * i, sizeof v);
    return v;
}

/* The item's fields. A reader of a copy that may be torn checks first that
 * rkv_shape_header_size(shape) fits what it copied (rkv_item_verify). */
static inline uint32_t rkv_item_key_len(const struct rkv_item *it)
{
    return it->shape & RKV_SHAPE_KEY_MASK;
}
static inline uint32_t rkv_item_value_len(const struct rkv_item *it)
{
    uint32_t shape = it->shape;
    return shape & RKV_SHAPE_LONG ? rkv_item_tail32(it, 0) : shape >> RKV_SHAPE_VALUE_SHIFT;
}
static inline uint32_t rkv_item_expire_at(const struct rkv_item *it)
{
    uint32_t shape = it->shape;
    return shape & RKV_SHAPE_EXPIRE ? rkv_item_tail32(it, (shape & RKV_SHAPE_LONG) != 0) : 0;
}
static inline uint32_t rkv_item_user_flags(const struct rkv_item *it)
{
    uint32_t shape = it->shape;
    return shape & RKV_SHAPE_FLAGS ? rkv_item_tail32(it, ((shape & RKV_SHAPE_LONG) != 0) +
                                                             ((shape & RKV_SHAPE_EXPIRE) != 0))
                                   : 0;
}
static inline const uint8_t *rkv_item_key(const struct rkv_item *it)
{
    return (const uint8_t *)it + rkv_shape_header_size(it->shape);
}
static inline const uint8_t *rkv_item_value(const struct rkv_item *it)
{
    return rkv_item_key(it) + rkv_item_key_len(it);
}

/* An item's fields, decoded from its shape once (a reader's hot path). */
struct rkv_item_fields {
    uint32_t header; /* rkv_shape_header_size */
    uint32_t key_len;
    uint32_t value_len;
    uint32_t expire_at;  /* 0 when absent */
    uint32_t user_flags; /* 0 when absent */
};

/* Decode an item's shape and optional fields; the caller has checked that
 * rkv_shape_header_size(shape) bytes of it are there. */
static inline void rkv_item_decode(const struct rkv_item *it, uint32_t shape,
                                   struct rkv_item_fields *f)
{
    unsigned at = 0;
    f->header = rkv_shape_header_size(shape);
    f->key_len = shape & RKV_SHAPE_KEY_MASK;
    f->value_len = shape >> RKV_SHAPE_VALUE_SHIFT;
    if (shape & RKV_SHAPE_LONG)
        f->value_len = rkv_item_tail32(it, at++);
    f->expire_at = shape & RKV_SHAPE_EXPIRE ? rkv_item_tail32(it, at++) : 0;
    f->user_flags = shape & RKV_SHAPE_FLAGS ? rkv_item_tail32(it, at) : 0;
}

/* Bytes of an item with these fields (header, key, value). */
static inline size_t rkv_item_size(uint32_t key_len, uint32_t value_len, uint32_t expire_at,
                                   uint32_t user_flags)
{
    return rkv_shape_header_size(rkv_shape_make(key_len, value_len, expire_at, user_flags)) +
           (size_t)key_len + value_len;
}

/* Bytes of an item in place. */
static inline size_t rkv_item_bytes(const struct rkv_item *it)
{
    return rkv_shape_header_size(it->shape) + (size_t)rkv_item_key_len(it) + rkv_item_value_len(it);
}

/* Write an item's version, shape and optional fields; returns where its key
 * goes (the value follows the key). */
static inline uint8_t *rkv_item_init(struct rkv_item *it, uint64_t version, uint32_t key_len,
                                     uint32_t value_len, uint32_t expire_at, uint32_t user_flags)
{
    uint32_t shape = rkv_shape_make(key_len, value_len, expire_at, user_flags);
    uint8_t *p = it->tail;
    memcpy(it->version_le, &version, sizeof version);
    it->shape = shape;
    if (shape & RKV_SHAPE_LONG)
        p = (uint8_t *)memcpy(p, &value_len, 4) + 4;
    if (expire_at)
        p = (uint8_t *)memcpy(p, &expire_at, 4) + 4;
    if (user_flags)
        p = (uint8_t *)memcpy(p, &user_flags, 4) + 4;
    return p;
}

/* The state word. OBSOLETE: superseded, deleted or still being built: never
 * return it. FORWARD (only with OBSOLETE): the item was superseded by an
 * update (SET over the key, CAS, INCR) and bits 16-63 hold the size class and
 * offset of its replacement, i.e. the replacement's slot word without the
 * fingerprint (the reader ORs in its key's own). The server writes the forward
 * and the OBSOLETE mark in one 8-byte store, so a reader never sees an
 * obsolete item whose forward is still to come. A forward is a hint like a
 * cached location: a reader range-checks it (rkv_slot_valid) and verifies the
 * item it leads to against the key; it never trusts it. Deleted, evicted and
 * expired items have no forward. */
#define RKV_ITEM_OBSOLETE     1ull
#define RKV_ITEM_FORWARD      2ull
#define RKV_ITEM_FORWARD_MASK (~(uint64_t)0xffff)

/* A live item's state word (neither OBSOLETE nor FORWARD) carries the
 * memcached door's meta state, which readers never need to verify an item
 * (the state word is outside the checksum; one-sided readers test only
 * OBSOLETE): STALE, invalidated (ms I, md I): a hit on a value a client has
 * been asked to recache; WON, a client was handed the win token (mg W) to
 * recache it; FETCHED, read since it was stored (mg h); bits 32-63 the
 * server clock of its last access (mg l: set when stored, and by a read
 * when more than RKV_ITEM_ACCESS_INTERVAL seconds old, as memcached's
 * ITEM_UPDATE_INTERVAL). Only the table writes it, under the item's
 * bucket stripe, and retiring the item overwrites it. */
#define RKV_ITEM_STALE           4ull
#define RKV_ITEM_WON             8ull
#define RKV_ITEM_FETCHED         16ull
#define RKV_ITEM_META_FLAGS      (RKV_ITEM_STALE | RKV_ITEM_WON | RKV_ITEM_FETCHED)
#define RKV_ITEM_ACCESS_SHIFT    32
#define RKV_ITEM_ACCESS_INTERVAL 60u
#define RKV_ITEM_ACCESS_MASK     ((uint64_t)UINT32_MAX << RKV_ITEM_ACCESS_SHIFT)
#define RKV_ITEM_LIVE_MASK       (RKV_ITEM_META_FLAGS | RKV_ITEM_ACCESS_MASK)

/* The state word of a live item with meta flags `flags` last accessed at
 * server clock `access`. */
static inline uint64_t rkv_item_state_live(uint64_t flags, uint32_t access)
{
    return (flags & RKV_ITEM_META_FLAGS) | (uint64_t)access << RKV_ITEM_ACCESS_SHIFT;
}

static inline uint32_t rkv_item_state_access(uint64_t state)
{
    return (uint32_t)(state >> RKV_ITEM_ACCESS_SHIFT);
}

/* The state word of an item superseded by the one at slot word `next`. */
static inline uint64_t rkv_item_state_forward(uint64_t next)
{
    return (next & RKV_ITEM_FORWARD_MASK) | RKV_ITEM_FORWARD | RKV_ITEM_OBSOLETE;
}

/* The slot word a state word forwards to for a key of fingerprint fp, or 0. */
static inline uint64_t rkv_item_forward(uint64_t state, uint16_t fp)
{
    const uint64_t both = RKV_ITEM_FORWARD | RKV_ITEM_OBSOLETE;
    if ((state & both) != both || (state & RKV_ITEM_FORWARD_MASK) == 0)
        return 0;
    return (state & RKV_ITEM_FORWARD_MASK) | fp;
}

/* The checksum of an item whose header fields and data are already in place. */
uint64_t rkv_item_checksum(const struct rkv_item *it, uint64_t seed);

/* The same of an item of `bytes` bytes (rkv_item_bytes), for a reader that
 * has decoded its shape already. */
uint64_t rkv_item_checksum_of(const struct rkv_item *it, size_t bytes, uint64_t seed);

/* The smallest item (a 1-byte key, no value, no optional field), rounded up
 * to RKV_ITEM_ALIGN: the smallest size class. */
#define RKV_MIN_ITEM_SIZE \
    ((RKV_ITEM_PREFIX_SIZE + 1 + RKV_ITEM_ALIGN - 1) / RKV_ITEM_ALIGN * RKV_ITEM_ALIGN)

/* Geometry checks a client runs on a header it read from the network: false
 * when any field is out of range, so a hostile or corrupt header cannot make
 * a client read outside the region. */
bool rkv_header_valid(const struct rkv_region_header *h, uint64_t region_len);

/* The index geometry a (validated) header publishes now: one load of its
 * geometry word; false when that word is out of range. */
bool rkv_header_geom(const struct rkv_region_header *h, struct rkv_index_geom *g);

/* When h is an rkv region header of another format than this build's: a
 * message saying which (in buf, len bytes), for a client to refuse it
 * with; else NULL. */
const char *rkv_header_other_format(const struct rkv_region_header *h, char *buf, size_t len);

#endif
