/* lookup.c — the client's GET, against an abstract one-round-trip reader.
 *
 * See lookup.h for the algorithm. Every key of a batch is a small state
 * machine; each loop iteration gathers the reads all pending keys need into
 * one round trip, then advances every key on what came back. Nothing read is
 * trusted: slot words (from buckets, the cache, or an item's forward) are
 * range-checked before they become read addresses, items are checked for
 * bounds, checksum, key, obsolete flag and expiry. A forward is only taken
 * from an item that passed the checksum and key checks, and the item it leads
 * to is verified like any other.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "hash.h"
#include "lookup.h"
#include "transport.h"
#include "util.h"

enum lookup_phase { PHASE_CACHE, PHASE_BUCKETS, PHASE_ITEMS, PHASE_RECHECK, PHASE_DONE };

#define BUCKET_PAIR_BYTES (2 * sizeof(struct rkv_bucket))

bool rkv_header_valid(const struct rkv_region_header *h, uint64_t region_len)
{
    if (h->magic != RKV_REGION_MAGIC || h->format_version != RKV_FORMAT_VERSION ||
        h->header_size != RKV_HEADER_SIZE || h->region_size != region_len)
        return false;
    if (h->index_capacity < 2 || h->index_capacity > region_len / sizeof(struct rkv_bucket))
        return false;
    if (h->index_offset < RKV_HEADER_SIZE || h->index_offset % RKV_CACHELINE != 0 ||
        h->index_offset + h->index_capacity * sizeof(struct rkv_bucket) > region_len)
        return false; /* the index may grow into the heap */
    struct rkv_index_geom g;
    if (!rkv_header_geom(h, &g))
        return false;
    if (h->heap_offset % RKV_ITEM_ALIGN != 0 || h->heap_size > region_len ||
        h->heap_offset > region_len - h->heap_size)
        return false;
    if (h->class_count == 0 || h->class_count > RKV_MAX_CLASSES ||
        h->slab_page_size < RKV_ITEM_ALIGN || h->max_key_len == 0 ||
        h->max_key_len > RKV_MAX_KEY_LEN ||
        (uint64_t)h->max_value_len + h->max_key_len + RKV_ITEM_HEADER_MAX > h->slab_page_size)
        return false;
    for (unsigned i = 0; i < h->class_count; i++) {
        uint32_t sz = h->class_size[i];
        if (sz < RKV_MIN_ITEM_SIZE || sz % RKV_ITEM_ALIGN != 0 || sz > h->slab_page_size ||
            sz > h->heap_size || (i > 0 && sz <= h->class_size[i - 1]))
            return false;
    }
    return true;
}

bool rkv_header_geom(const struct rkv_region_header *h, struct rkv_index_geom *g)
{
    *g = rkv_index_geom_from(h->index_base, __atomic_load_n(&h->index_geometry, __ATOMIC_ACQUIRE));
    return rkv_index_geom_valid(g, h->index_capacity);
}

void rkv_header_hash_key(const struct rkv_region_header *h, const void *key, size_t key_len,
                         struct rkv_key_hash *out)
{
    struct rkv_index_geom g;
    rkv_header_geom(h, &g);
    rkv_hash_key(key, key_len, h->hash_seed, &g, out);
}

const char *rkv_header_other_format(const struct rkv_region_header *h, char *buf, size_t len)
{
    if (h->magic != RKV_REGION_MAGIC || h->format_version == RKV_FORMAT_VERSION)
        return NULL;
    snprintf(buf, len,
             "the server's region is format %u and this client reads format %u only; use a "
             "client and a server of the same rkv version",
             h->format_version, RKV_FORMAT_VERSION);
    return buf;
}

bool rkv_slot_valid(const struct rkv_region_header *geom, uint64_t slot, uint64_t *offset,
                    uint32_t *len)
{
    unsigned cls = rkv_slot_class(slot);
    uint64_t off = rkv_slot_offset(slot);
    if (slot == 0 || cls >= geom->class_count || off < geom->heap_offset)
        return false;
    uint32_t sz = geom->class_size[cls];
    if (sz > geom->heap_size || off - geom->heap_offset > geom->heap_size - sz)
        return false;
    *offset = off;
    *len = sz;
    return true;
}

static inline uint64_t load64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Whether a[0..n) and b[0..n) are equal: memcmp, but a key of 8..32 bytes
 * (the common sizes) is compared as two or four overlapping words, without a
 * call. */
static inline bool key_equal(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    if (n < 8 || n > 32)
        return memcmp(a, b, n) == 0;
    uint64_t d = (load64(x) ^ load64(y)) | (load64(x + n - 8) ^ load64(y + n - 8));
    if (n > 16)
        d |= (load64(x + 8) ^ load64(y + 8)) | (load64(x + n - 16) ^ load64(y + n - 16));
    return d == 0;
}

/* rkv_item_verify, inlined into the lookup's two callers; the item's
 * fields in *f (decoded once: the shape, then its optional fields only
 * once the header it names is known to fit the copy). */
static inline __attribute__((always_inline)) enum rkv_verify item_verify(const struct rkv_item *it,
                                                                         size_t len, const void *key,
                                                                         uint32_t key_len,
                                                                         uint64_t seed, uint32_t now,
                                                                         struct rkv_item_fields *f)
{
    if (len < RKV_ITEM_PREFIX_SIZE)
        return RKV_VERIFY_TORN;
    uint32_t shape = it->shape;
    if (rkv_shape_header_size(shape) > len)
        return RKV_VERIFY_TORN;
    rkv_item_decode(it, shape, f);
    if ((uint64_t)f->key_len + f->value_len > len - f->header)
        return RKV_VERIFY_TORN;
    if (rkv_item_checksum_of(it, f->header + (size_t)f->key_len + f->value_len, seed) !=
        rkv_item_checksum_stored(it))
        return RKV_VERIFY_TORN;
    if (f->key_len != key_len || !key_equal((const uint8_t *)it + f->header, key, key_len))
        return RKV_VERIFY_OTHER_KEY;
    if (rkv_item_state(it) & RKV_ITEM_OBSOLETE)
        return RKV_VERIFY_OBSOLETE;
    if (now != 0 && rkv_expired(f->expire_at, now))
        return RKV_VERIFY_EXPIRED;
    return RKV_VERIFY_OK;
}

enum rkv_verify rkv_item_verify(const struct rkv_item *it, size_t len, const void *key,
                                uint32_t key_len, uint64_t seed, uint32_t now)
{
    struct rkv_item_fields f;
    return item_verify(it, len, key, key_len, seed, now, &f);
}

/* An item's copy lands 8-aligned plus its parity (round_add): at most this
 * many bytes past where the round's last read ended. */
#define ITEM_LANDING_PAD 12u

size_t rkv_lookup_scratch_need(const struct rkv_region_header *geom, unsigned n)
{
    return (size_t)n * BUCKET_PAIR_BYTES + geom->class_size[geom->class_count - 1] + ITEM_LANDING_PAD;
}

unsigned rkv_lookup_batch_fit(const struct rkv_lookup_ctx *ctx)
{
    size_t item = rkv_lookup_scratch_need(ctx->geom, 0);
    size_t fit = ctx->scratch_len > item ? (ctx->scratch_len - item) / BUCKET_PAIR_BYTES : 0;
    return fit > UINT_MAX ? UINT_MAX : (unsigned)fit;
}

/* ------------------------------------------------------------ per round */

struct round {
    struct rkv_lookup_ctx *ctx;
    unsigned nops;
    size_t used; /* bytes of scratch handed out this round */
};

/* Where a read of region offset `offset` lands after `p`: 8-aligned, plus
 * the parity an item there has (rkv_item_copy_skew), so a copy of an item
 * is laid out as the item is. */
static inline const uint8_t *landing(const uint8_t *p, uint64_t offset)
{
    return (const uint8_t *)RKV_ALIGN_UP((uintptr_t)p, 8) + rkv_item_copy_skew(offset);
}

/* Reserve scratch and an op for reading [offset, offset+len); NULL when the
 * round is full (the key then waits for the next round). */
static inline __attribute__((always_inline)) void *round_add(struct round *r, uint64_t offset,
                                                             uint32_t len)
{
    struct rkv_lookup_ctx *ctx = r->ctx;
    size_t at = (size_t)(landing(ctx->scratch + r->used, offset) - ctx->scratch);
    if (r->nops == ctx->ops_cap || at + len > ctx->scratch_len)
        return NULL;
    struct rkv_read_op *op = &ctx->ops[r->nops++];
    op->offset = offset;
    op->len = len;
    op->dst = ctx->scratch + at;
    r->used = at + len;
    return op->dst;
}

static uint64_t bucket_offset(const struct rkv_region_header *g, uint64_t b)
{
    return g->index_offset + b * sizeof(struct rkv_bucket);
}

/* The index geometry the lookup addresses with: the header copy's, or a
 * later one learned since (a valid header's geometry word only grows). */
static struct rkv_index_geom lookup_geom(const struct rkv_lookup_ctx *ctx)
{
    const struct rkv_region_header *g = ctx->geom;
    return rkv_index_geom_from(g->index_base, RKV_MAX(ctx->index_word, g->index_geometry));
}

/* The key's hash: its fingerprint, candidate buckets and the level each
 * should be at. Only the index needs them: a GET served through its cached
 * location (or a forward from it) never hashes the key. fp != 0 tells that
 * it is done. */
static void hash_key(const struct rkv_lookup_ctx *ctx, struct rkv_lookup *l)
{
    struct rkv_key_hash kh;
    struct rkv_index_geom ig = lookup_geom(ctx);
    rkv_hash_key(l->key, l->key_len, ctx->geom->hash_seed, &ig, &kh);
    l->fp = kh.fp;
    for (unsigned i = 0; i < 2; i++) {
        l->bucket[i] = kh.bucket[i];
        l->bucket_level[i] = (uint8_t)rkv_index_bucket_level(&ig, kh.bucket[i]);
    }
}

/* Go to the index: read the key's buckets next. */
static void to_buckets(const struct rkv_lookup_ctx *ctx, struct rkv_lookup *l)
{
    if (l->fp == 0)
        hash_key(ctx, l);
    l->phase = PHASE_BUCKETS;
}

/* Plan this key's reads for the round; nread = 0 if they did not fit (the
 * key then waits for the next round). */
static void plan_key(struct round *r, struct rkv_lookup *l)
{
    const struct rkv_region_header *g = r->ctx->geom;
    unsigned ops_before = r->nops;
    size_t used_before = r->used;

    l->nread = 0;
    switch (l->phase) {
    case PHASE_CACHE: /* at_slot was checked before it became at_slot */
        l->land = round_add(r, rkv_slot_offset(l->at_slot), l->at_len);
        l->nread = 1;
        break;
    case PHASE_BUCKETS:
    case PHASE_RECHECK: {
        if (l->fp == 0) /* the geometry changed: hash again */
            hash_key(r->ctx, l);
        unsigned first = l->phase == PHASE_RECHECK ? 0 : l->bucket_next;
        unsigned n = l->phase == PHASE_BUCKETS && r->ctx->cost == RKV_COST_PER_READ ? 1 : 2 - first;
        l->land = round_add(r, bucket_offset(g, l->bucket[first]), sizeof(struct rkv_bucket));
        if (l->land && n == 2 &&
            !round_add(r, bucket_offset(g, l->bucket[1]), sizeof(struct rkv_bucket)))
            l->land = NULL;
        l->nread = n;
        break;
    }
    case PHASE_ITEMS:
        /* as many candidates as fit; at least one always fits an empty round */
        l->land = NULL;
        for (unsigned i = l->next_cand; i < l->ncand; i++) {
            /* checked when collected */
            uint8_t *p = round_add(r, rkv_slot_offset(l->cand[i]), l->cand_len[i]);
            if (p == NULL)
                break;
            if (l->land == NULL)
                l->land = p;
            l->nread++;
        }
        break;
    default: return;
    }
    if (l->land == NULL) {
        r->nops = ops_before;
        r->used = used_before;
        l->nread = 0;
    }
}

static void finish(struct rkv_lookup *l, rkv_status st)
{
    l->status = st;
    l->phase = PHASE_DONE;
}

/* A read failed verification in a way a re-read can fix. */
static void retry(struct rkv_lookup_ctx *ctx, struct rkv_lookup *l)
{
    ctx->retries++;
    l->bucket_next = 0;
    if (++l->tries > ctx->max_retries)
        finish(l, RKV_RETRY_EXHAUSTED);
    else
        l->phase = PHASE_BUCKETS;
}

/* Whether buckets b[0..n) (the key's from index `first`) are at the level
 * the key's geometry expects. If not, the index grew since: the round ends
 * with a re-read of the geometry, and the key hashes again and retries. */
static bool levels_expected(struct rkv_lookup_ctx *ctx, struct rkv_lookup *l,
                            const struct rkv_bucket *b, unsigned first, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (rkv_version_level(b[i].version) != l->bucket_level[first + i]) {
            ctx->stale = true;
            retry(ctx, l);
            l->fp = 0;
            return false;
        }
    return true;
}

/* After the candidates of the buckets read so far: the next bucket, or (both
 * read, no match) the re-check that confirms a miss. */
static void next_bucket_or_recheck(struct rkv_lookup *l)
{
    l->phase = l->bucket_next < 2 ? PHASE_BUCKETS : PHASE_RECHECK;
}

static inline __attribute__((always_inline)) void deliver(struct rkv_lookup *l,
                                                          const struct rkv_item *it,
                                                          const struct rkv_item_fields *f,
                                                          uint64_t slot)
{
    l->value_len = f->value_len;
    l->version = rkv_item_version(it);
    l->user_flags = f->user_flags;
    l->expire_at = f->expire_at;
    l->state = rkv_item_state(it);
    l->slot = slot;
    if (f->value_len > l->buf_len) {
        finish(l, RKV_BUFFER_TOO_SMALL);
        return;
    }
    if (f->value_len)
        memcpy(l->buf, (const uint8_t *)it + f->header + f->key_len, f->value_len);
    finish(l, RKV_OK);
}

static void collect_candidates(const struct rkv_region_header *g, struct rkv_lookup *l,
                               const struct rkv_bucket *b, unsigned nbuckets, uint16_t fp)
{
    l->ncand = 0;
    l->next_cand = 0;
    for (unsigned i = 0; i < nbuckets; i++) {
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t slot = b[i].slot[s], off;
            uint32_t len;
            if (slot == 0 || rkv_slot_fp(slot) != fp || !rkv_slot_valid(g, slot, &off, &len))
                continue;
            bool dup = false;
            for (unsigned k = 0; k < l->ncand; k++)
                dup |= l->cand[k] == slot;
            if (!dup) {
                l->cand_len[l->ncand] = len;
                l->cand[l->ncand++] = slot;
            }
        }
    }
}

static void advance_key(struct rkv_lookup_ctx *ctx, struct rkv_lookup *l)
{
    const struct rkv_region_header *g = ctx->geom;
    const struct rkv_bucket *b = (const struct rkv_bucket *)(const void *)l->land;
    uint64_t off = 0;
    uint32_t len = 0;

    switch (l->phase) {
    case PHASE_CACHE: {
        const struct rkv_item *it = (const struct rkv_item *)(const void *)l->land;
        struct rkv_item_fields f;
        enum rkv_verify v = item_verify(it, l->at_len, l->key, l->key_len, g->hash_seed, ctx->now,
                                        &f);
        /* a forward keeps at_slot's fingerprint bits (never 0) */
        uint64_t next = v == RKV_VERIFY_OBSOLETE
                            ? rkv_item_forward(rkv_item_state(it), rkv_slot_fp(l->at_slot))
                            : 0;
        if (v == RKV_VERIFY_OK) {
            l->cache_used = 1;
            deliver(l, it, &f, l->at_slot);
        } else if (next != 0 && l->hops < RKV_LOOKUP_MAX_FORWARDS &&
                   rkv_slot_valid(g, next, &off, &len)) {
            l->hops++; /* our key, superseded: read its replacement next */
            ctx->forwards++;
            l->at_slot = next;
            l->at_len = len;
        } else {
            to_buckets(ctx, l); /* stale location: fall back to the index */
        }
        break;
    }
    case PHASE_BUCKETS: {
        unsigned first = l->bucket_next;
        if (!levels_expected(ctx, l, b, first, l->nread))
            return;
        for (unsigned i = 0; i < l->nread; i++)
            if (b[i].version & 1) {
                retry(ctx, l); /* the server is changing a bucket right now */
                return;
            }
        for (unsigned i = 0; i < l->nread; i++)
            l->bucket_version[first + i] = b[i].version;
        l->bucket_next = (uint8_t)(first + l->nread);
        collect_candidates(g, l, b, l->nread, l->fp);
        if (l->ncand)
            l->phase = PHASE_ITEMS;
        else
            next_bucket_or_recheck(l);
        break;
    }
    case PHASE_ITEMS: {
        const uint8_t *p = l->land, *end = NULL; /* where the reads landed (round_add) */
        bool torn = false;
        for (unsigned i = 0; i < l->nread; i++) {
            uint64_t slot = l->cand[l->next_cand + i];
            len = l->cand_len[l->next_cand + i];
            if (i > 0)
                p = landing(end, rkv_slot_offset(slot));
            const struct rkv_item *it = (const struct rkv_item *)(const void *)p;
            struct rkv_item_fields f;
            switch (item_verify(it, len, l->key, l->key_len, g->hash_seed, ctx->now, &f)) {
            case RKV_VERIFY_OK: deliver(l, it, &f, slot); return;
            case RKV_VERIFY_EXPIRED: finish(l, RKV_NOT_FOUND); return;
            case RKV_VERIFY_OTHER_KEY: break;
            case RKV_VERIFY_OBSOLETE:
            case RKV_VERIFY_TORN: torn = true; break;
            }
            end = p + len;
        }
        l->next_cand = (uint8_t)(l->next_cand + l->nread);
        if (torn)
            retry(ctx, l);
        else if (l->next_cand == l->ncand)
            next_bucket_or_recheck(l); /* only other keys: the next bucket, or confirm the miss */
        break;
    }
    case PHASE_RECHECK:
        if (!levels_expected(ctx, l, b, 0, 2))
            break;
        if (b[0].version == l->bucket_version[0] && b[1].version == l->bucket_version[1])
            finish(l, RKV_NOT_FOUND);
        else
            retry(ctx, l); /* something moved between our reads: look again */
        break;
    default: break;
    }
}

void rkv_lookup_start(const struct rkv_lookup_ctx *ctx, struct rkv_lookup *l)
{
    const struct rkv_region_header *g = ctx->geom;
    uint64_t off = 0;
    uint32_t len = 0;
    l->status = RKV_INTERNAL;
    l->value_len = 0;
    l->version = 0;
    l->user_flags = 0;
    l->expire_at = 0;
    l->state = 0;
    l->slot = 0;
    l->cache_used = 0;
    l->tries = 0;
    l->bucket_next = 0;
    l->hops = 0;
    l->at_slot = 0;
    l->fp = 0; /* not hashed yet (hash_key) */
    if (l->key_len == 0 || l->key_len > g->max_key_len)
        finish(l, l->key_len ? RKV_TOO_LARGE : RKV_INVALID);
    else if (l->buf == NULL && l->buf_len != 0)
        finish(l, RKV_INVALID); /* deliver() would copy to NULL */
    else if (l->cached_slot && rkv_slot_valid(g, l->cached_slot, &off, &len)) {
        /* a cache may keep its own tag (never 0) in the fingerprint bits:
         * they stay, as the fingerprint of what this location gives (a
         * hint's, a forward's); only a location without any takes the key's */
        if (rkv_slot_fp(l->cached_slot) == 0)
            hash_key(ctx, l);
        l->at_slot = l->cached_slot | l->fp;
        l->at_len = len;
        l->phase = PHASE_CACHE;
        if (ctx->prefetch) /* the item's miss overlaps the planning of its round */
            ctx->prefetch(ctx->read_ctx, off, len);
    } else
        to_buckets(ctx, l);
}

/* The index grew since the geometry the round addressed with: read the
 * header's geometry word again (into the scratch, which the round no longer
 * needs) and keep it if it is valid and newer. */
static rkv_status geom_refresh(struct rkv_lookup_ctx *ctx)
{
    const struct rkv_region_header *g = ctx->geom;
    struct rkv_read_op op = { .offset = offsetof(struct rkv_region_header, index_geometry),
                              .len = sizeof(uint64_t),
                              .dst = ctx->scratch };
    rkv_status st = ctx->read(ctx->read_ctx, &op, 1);
    if (st != RKV_OK)
        return st;
    uint64_t word = load64(ctx->scratch);
    struct rkv_index_geom ig = rkv_index_geom_from(g->index_base, word);
    if (rkv_index_geom_valid(&ig, g->index_capacity) && word > ctx->index_word)
        ctx->index_word = word;
    ctx->geom_reads++;
    return RKV_OK;
}

rkv_status rkv_lookup_round(struct rkv_lookup_ctx *ctx, struct rkv_lookup *const *ls, unsigned n)
{
    struct round r = { .ctx = ctx };
    for (unsigned i = 0; i < n; i++)
        if (ls[i]->phase != PHASE_DONE)
            plan_key(&r, ls[i]);
    if (r.nops == 0)
        return RKV_INTERNAL; /* scratch too small for even one key */
    rkv_status st = ctx->read(ctx->read_ctx, ctx->ops, r.nops);
    if (st != RKV_OK)
        return st;
    ctx->stale = false;
    for (unsigned i = 0; i < n; i++) {
        struct rkv_lookup *l = ls[i];
        if (l->phase != PHASE_DONE && l->nread)
            advance_key(ctx, l);
    }
    return ctx->stale ? geom_refresh(ctx) : RKV_OK;
}

rkv_status rkv_lookup_batch(struct rkv_lookup_ctx *ctx, struct rkv_lookup *ls, unsigned n)
{
    struct rkv_lookup *chunk[RKV_LOOKUP_BATCH_CHUNK];

    for (unsigned at = 0; at < n; at += RKV_LOOKUP_BATCH_CHUNK) {
        unsigned k = RKV_MIN(n - at, RKV_LOOKUP_BATCH_CHUNK), pending = 0;
        for (unsigned i = 0; i < k; i++) {
            chunk[i] = &ls[at + i];
            rkv_lookup_start(ctx, chunk[i]);
            pending += !rkv_lookup_done(chunk[i]);
        }
        while (pending) {
            rkv_status st = rkv_lookup_round(ctx, chunk, k);
            if (st != RKV_OK)
                return st;
            pending = 0;
            for (unsigned i = 0; i < k; i++)
                pending += !rkv_lookup_done(chunk[i]);
        }
    }
    return RKV_OK;
}
