/* test_lookup.c — common/lookup.c against a real table and a scripted reader.
 *
 * The read callback here can change the region *between* the reads of one
 * round trip, exactly as a server write can land between two RDMA READs.
 * That makes the races of design.md invariant 4 (a concurrent cuckoo move must not
 * produce a false miss) deterministic instead of a matter of luck, and
 * covers the lookup's defences against hostile bytes: odd bucket versions,
 * slots that point outside the heap, and a scratch buffer too small for a
 * whole batch at once. Also rkv_header_valid() field by field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hash.h"
#include "lookup.h"
#include "region.h"
#include "table.h"
#include "transport.h"

struct scripted {
    uint8_t *base;
    size_t size;
    unsigned calls;
    /* a move to perform after op `move_after_op` of call `move_on_call` */
    unsigned move_on_call, move_after_op;
    uint64_t move_from, move_to; /* bucket indexes */
    uint64_t pin_odd_bucket;     /* keep this bucket's version odd (UINT64_MAX: off) */
    unsigned prefetches;         /* prefetch calls, the last one's range */
    uint64_t prefetch_off;
    uint32_t prefetch_len;
    uint64_t first_off; /* the first op of the first read call */
    uint32_t first_len;
    const struct rkv_region_header *h;
};

static struct rkv_bucket *bucket(struct scripted *s, uint64_t b)
{
    return (struct rkv_bucket *)(void *)(s->base + s->h->index_offset + b * sizeof(struct rkv_bucket));
}

/* What the server does to move a slot: target first, then clear the source,
 * each change bracketed by the bucket's version. */
static void move_slot(struct scripted *s, uint64_t from, uint64_t to, uint16_t fp)
{
    struct rkv_bucket *src = bucket(s, from), *dst = bucket(s, to);
    unsigned i, j;
    for (i = 0; i < RKV_SLOTS_PER_BUCKET && rkv_slot_fp(src->slot[i]) != fp; i++)
        ;
    for (j = 0; j < RKV_SLOTS_PER_BUCKET && dst->slot[j] != 0; j++)
        ;
    assert_true(i < RKV_SLOTS_PER_BUCKET && j < RKV_SLOTS_PER_BUCKET);
    dst->version++;
    dst->slot[j] = src->slot[i];
    dst->version++;
    src->version++;
    src->slot[i] = 0;
    src->version++;
}

static uint16_t move_fp;

static rkv_status scripted_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct scripted *s = ctx;
    if (++s->calls == 1 && n > 0) {
        s->first_off = ops[0].offset;
        s->first_len = ops[0].len;
    }
    for (unsigned i = 0; i < n; i++) {
        assert_true(ops[i].offset + ops[i].len <= s->size);
        memcpy(ops[i].dst, s->base + ops[i].offset, ops[i].len);
        if (s->pin_odd_bucket != UINT64_MAX &&
            ops[i].offset == s->h->index_offset + s->pin_odd_bucket * sizeof(struct rkv_bucket))
            ((struct rkv_bucket *)ops[i].dst)->version |= 1;
        if (s->calls == s->move_on_call && i == s->move_after_op)
            move_slot(s, s->move_from, s->move_to, move_fp);
    }
    return RKV_OK;
}

static void scripted_prefetch(void *ctx, uint64_t offset, uint32_t len)
{
    struct scripted *s = ctx;
    s->prefetches++;
    s->prefetch_off = offset;
    s->prefetch_len = len;
}

struct env {
    struct rkv_region region;
    struct rkv_table *t;
    struct scripted sc;
    uint8_t scratch[1 << 21];
    struct rkv_read_op ops[256];
    struct rkv_lookup_ctx ctx;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    char err[256];
    struct rkv_table_config cfg = { .evict = RKV_EVICT_NONE };
    if (e == NULL || rkv_region_create(16ull << 20, &e->region, err, sizeof err) != RKV_OK ||
        rkv_table_create(e->region.base, e->region.size, &cfg, &e->t, err, sizeof err) != RKV_OK)
        return -1;
    e->sc = (struct scripted){ .base = e->region.base,
                               .size = e->region.size,
                               .h = rkv_table_header(e->t),
                               .pin_odd_bucket = UINT64_MAX };
    e->ctx = (struct rkv_lookup_ctx){ .geom = e->sc.h,
                                      .read = scripted_read,
                                      .read_ctx = &e->sc,
                                      .scratch = e->scratch,
                                      .scratch_len = sizeof e->scratch,
                                      .ops = e->ops,
                                      .ops_cap = 256,
                                      .max_retries = 8 };
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    rkv_table_destroy(e->t);
    rkv_region_destroy(&e->region);
    free(e);
    return 0;
}

static void put(struct env *e, const char *k, const char *v)
{
    struct rkv_value_src src = { .data = v, .len = (uint32_t)strlen(v) };
    assert_int_equal(rkv_table_put(e->t, k, (uint32_t)strlen(k), &src, RKV_SET, 0, 0, 0, NULL),
                     RKV_OK);
}

/* Where is the key's slot right now: 0 or 1 (its candidate), or -1. */
static int home(struct env *e, const struct rkv_key_hash *kh)
{
    for (int b = 0; b < 2; b++)
        for (unsigned i = 0; i < RKV_SLOTS_PER_BUCKET; i++)
            if (rkv_slot_fp(bucket(&e->sc, kh->bucket[b])->slot[i]) == kh->fp)
                return b;
    return -1;
}

/* A key moves from the bucket read second into the bucket read first, in
 * the gap between the two READs: both copies miss it. Only the version
 * re-check turns that into a retry instead of a false NOT_FOUND. */
static void test_move_between_bucket_reads_is_not_a_miss(void **state)
{
    struct env *e = *state;
    const char *key = NULL;
    char kbuf[32];
    struct rkv_key_hash kh;
    /* find a key that lives in its second candidate bucket */
    for (unsigned i = 0; key == NULL; i++) {
        snprintf(kbuf, sizeof kbuf, "mover%u", i);
        rkv_header_hash_key(e->sc.h, kbuf, strlen(kbuf), &kh);
        put(e, kbuf, "payload");
        if (home(e, &kh) == 1)
            key = kbuf;
        else
            /* make room in bucket 0 so the next tries can land in bucket 1 */
            for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++)
                ;
        if (i > 100000)
            fail_msg("no key landed in its second bucket");
        if (key == NULL) {
            /* force it: move it ourselves into bucket 1 when there is room */
            move_fp = kh.fp;
            struct rkv_bucket *b1 = bucket(&e->sc, kh.bucket[1]);
            bool room = false;
            for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++)
                room |= b1->slot[s] == 0;
            if (room && home(e, &kh) == 0) {
                move_slot(&e->sc, kh.bucket[0], kh.bucket[1], kh.fp);
                key = kbuf;
            }
        }
    }
    move_fp = kh.fp;
    e->sc.calls = 0;
    e->sc.move_on_call = 1;  /* the bucket round */
    e->sc.move_after_op = 0; /* after bucket 0 was copied, before bucket 1 */
    e->sc.move_from = kh.bucket[1];
    e->sc.move_to = kh.bucket[0];

    char out[32];
    struct rkv_lookup l = {
        .key = key, .key_len = (uint32_t)strlen(key), .buf = out, .buf_len = sizeof out
    };
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_int_equal(l.value_len, 7);
    assert_memory_equal(out, "payload", 7);
    assert_true(e->ctx.retries >= 1); /* the re-check noticed the move */
    assert_int_equal(home(e, &kh), 0);
}

/* The same race when bytes cost (shm): the first bucket is read alone, the
 * key moves into it before the second bucket is read; the per-bucket
 * version re-check still turns the double miss into a retry. */
static void test_move_between_bucket_reads_bytes_cost(void **state)
{
    struct env *e = *state;
    e->ctx.cost = RKV_COST_PER_READ;
    test_move_between_bucket_reads_is_not_a_miss(state);
}

static uint64_t slot_of(struct env *e, const char *key)
{
    char out[64];
    struct rkv_lookup l = {
        .key = key, .key_len = (uint32_t)strlen(key), .buf = out, .buf_len = sizeof out
    };
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    return l.slot;
}

static struct rkv_item *item_of(struct env *e, uint64_t slot)
{
    return (struct rkv_item *)(void *)(e->sc.base + rkv_slot_offset(slot));
}

/* A forward is a hint: the item it leads to is verified like any other. An
 * old item of our key whose forward (hostile, or stale after the memory was
 * reused) leads to another key's item, or to a torn item, must not give that
 * item's value: the lookup falls back to the buckets and returns ours. */
static void test_forward_is_verified(void **state)
{
    struct env *e = *state;
    put(e, "fk", "old");
    uint64_t s_old = slot_of(e, "fk");
    put(e, "fk", "new");
    uint64_t s_new = slot_of(e, "fk");
    put(e, "other", "WRONG");
    uint64_t s_other = slot_of(e, "other");
    struct rkv_item *old = item_of(e, s_old);
    assert_int_equal(rkv_item_state(old), rkv_item_state_forward(s_new));

    char out[16];
    struct rkv_lookup l = {
        .key = "fk", .key_len = 2, .buf = out, .buf_len = sizeof out, .cached_slot = s_old
    };
    /* the real forward: two READs, no bucket */
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_memory_equal(out, "new", 3);
    assert_int_equal(e->sc.calls, 2);
    assert_int_equal(e->ctx.forwards, 1);

    /* a forward to another key's item */
    rkv_item_set_state(old, rkv_item_state_forward(s_other));
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_int_equal(l.value_len, 3);
    assert_memory_equal(out, "new", 3);
    assert_int_equal(l.slot, s_new);

    /* a forward to a torn item of our key (a flipped value byte) */
    rkv_item_set_state(old, rkv_item_state_forward(s_new));
    put(e, "fk", "newer"); /* s_new is now obsolete itself: forward to newer */
    uint64_t s_newer = slot_of(e, "fk");
    item_of(e, s_newer)->tail[2] ^= 0x20; /* "Newer": checksum no longer matches */
    memset(out, 0, sizeof out);
    l.cached_slot = s_old;
    e->ctx.max_retries = 2;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_RETRY_EXHAUSTED); /* never the torn value */
    item_of(e, s_newer)->tail[2] ^= 0x20;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_memory_equal(out, "newer", 5);

    /* a forward out of the heap is never read (scripted_read asserts bounds) */
    rkv_item_set_state(item_of(e, s_new),
                       rkv_item_state_forward(rkv_slot_make(1, 0, e->sc.h->region_size)));
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_memory_equal(out, "newer", 5);
}

/* A cached location's fingerprint bits may be a cache's tag: a hit through
 * it is one READ (the key is not hashed) and reports the location with those
 * bits; bits of 0 take the key's own fingerprint; a stale tagged location
 * (another key's item) falls back to the buckets, which need the key's hash,
 * and finds the key with its real slot word. */
static void test_cached_slot_fingerprint_bits(void **state)
{
    struct env *e = *state;
    put(e, "ck", "mine");
    put(e, "ok", "theirs");
    uint64_t s_ck = slot_of(e, "ck"), s_ok = slot_of(e, "ok");
    uint64_t bare = s_ck & ~(uint64_t)0xffff;
    char out[16];
    struct rkv_lookup l = {
        .key = "ck", .key_len = 2, .buf = out, .buf_len = sizeof out, .cached_slot = bare | 0xabcd
    };
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_memory_equal(out, "mine", 4);
    assert_int_equal(e->sc.calls, 1);
    assert_int_equal(l.cache_used, 1);
    assert_int_equal(l.slot, bare | 0xabcd);

    l.cached_slot = bare; /* no fingerprint: the key's */
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_int_equal(e->sc.calls, 1);
    assert_int_equal(l.slot, s_ck);

    l.cached_slot = (s_ok & ~(uint64_t)0xffff) | 0xabcd; /* stale: another key's item */
    memset(out, 0, sizeof out);
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_memory_equal(out, "mine", 4);
    assert_int_equal(l.cache_used, 0);
    assert_int_equal(l.slot, s_ck);
}

/* A cached location that passes the range check is prefetched, and exactly
 * the range its READ then reads; a location that fails it (or none) is not:
 * a prefetch never reaches outside the heap. */
static void test_prefetch_is_the_read_that_follows(void **state)
{
    struct env *e = *state;
    const struct rkv_region_header *h = e->sc.h;
    put(e, "pk", "value");
    uint64_t s_pk = slot_of(e, "pk");
    e->ctx.prefetch = scripted_prefetch;
    char out[16];
    struct rkv_lookup l = {
        .key = "pk", .key_len = 2, .buf = out, .buf_len = sizeof out, .cached_slot = s_pk
    };
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_int_equal(e->sc.prefetches, 1);
    assert_int_equal(e->sc.calls, 1);
    assert_true(e->sc.prefetch_off == rkv_slot_offset(s_pk));
    assert_true(e->sc.prefetch_off == e->sc.first_off);
    assert_int_equal(e->sc.prefetch_len, e->sc.first_len);

    uint64_t hostile[] = { 0, rkv_slot_make(1, 0, h->region_size), rkv_slot_make(1, 0, 0),
                           rkv_slot_make(1, h->class_count, h->heap_offset) };
    for (unsigned i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        e->sc.prefetches = 0;
        l.cached_slot = hostile[i];
        assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
        assert_int_equal(l.status, RKV_OK); /* through the buckets */
        assert_int_equal(e->sc.prefetches, 0);
    }
}

/* Bytes cost: a key in its first bucket costs one bucket READ and one item
 * READ; a miss reads the second bucket too, then re-checks both. */
static void test_bytes_cost_reads_second_bucket_on_demand(void **state)
{
    struct env *e = *state;
    e->ctx.cost = RKV_COST_PER_READ;
    put(e, "one", "1");
    struct rkv_key_hash kh;
    rkv_header_hash_key(e->sc.h, "one", 3, &kh);
    assert_int_equal(home(e, &kh), 0); /* an empty table: the first bucket */
    char out[8];
    struct rkv_lookup l = { .key = "one", .key_len = 3, .buf = out, .buf_len = sizeof out };
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
    assert_int_equal(e->sc.calls, 2); /* bucket 0, item */
    l.key = "absent";
    l.key_len = 6;
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_NOT_FOUND);
    assert_int_equal(e->sc.calls, 3); /* bucket 0, bucket 1, re-check of both */
    e->ctx.cost = RKV_COST_ROUND_TRIPS;
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_NOT_FOUND);
    assert_int_equal(e->sc.calls, 2); /* both buckets, re-check */
}

/* A bucket that stays mid-change is never trusted: bounded retries, then
 * RKV_RETRY_EXHAUSTED (not a miss, not a hang). */
static void test_odd_version_retries_then_gives_up(void **state)
{
    struct env *e = *state;
    struct rkv_key_hash kh;
    put(e, "k", "v");
    rkv_header_hash_key(e->sc.h, "k", 1, &kh);
    e->sc.pin_odd_bucket = kh.bucket[0];
    char out[8];
    struct rkv_lookup l = { .key = "k", .key_len = 1, .buf = out, .buf_len = sizeof out };
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_RETRY_EXHAUSTED);
    assert_int_equal(e->ctx.retries, e->ctx.max_retries + 1);
    e->sc.pin_odd_bucket = UINT64_MAX;
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    assert_int_equal(l.status, RKV_OK);
}

/* Slot words that point outside the heap, or at a class that does not
 * exist, are never used as read addresses. */
static void test_hostile_slots_are_not_read(void **state)
{
    struct env *e = *state;
    const struct rkv_region_header *h = e->sc.h;
    struct rkv_key_hash kh;
    rkv_header_hash_key(h, "victim", 6, &kh);
    uint64_t bad[] = {
        rkv_slot_make(kh.fp, 0, h->region_size),              /* past the end */
        rkv_slot_make(kh.fp, 0, 0),                           /* the header */
        rkv_slot_make(kh.fp, h->class_count, h->heap_offset), /* no such class */
        rkv_slot_make(kh.fp, h->class_count - 1, h->heap_offset + h->heap_size - 64),
    };
    uint64_t off;
    uint32_t len;
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(rkv_slot_valid(h, bad[i], &off, &len));
    /* a (hostile) header whose heap is smaller than a size class: the
     * bounds check must not wrap around (found by fuzz_protocol) */
    struct rkv_region_header tiny = *h;
    tiny.heap_size = tiny.class_size[tiny.class_count - 1] - 64;
    assert_false(rkv_slot_valid(&tiny, rkv_slot_make(kh.fp, tiny.class_count - 1, tiny.heap_offset),
                                &off, &len));
    struct rkv_bucket *b = bucket(&e->sc, kh.bucket[0]);
    for (unsigned i = 0; i < 4; i++)
        b->slot[i] = bad[i];
    char out[8];
    struct rkv_lookup l = {
        .key = "victim", .key_len = 6, .buf = out, .buf_len = sizeof out, .cached_slot = bad[0]
    };
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK); /* scripted_read asserts bounds */
    assert_int_equal(l.status, RKV_NOT_FOUND);
    for (unsigned i = 0; i < 4; i++)
        b->slot[i] = 0;
}

/* A batch bigger than the scratch buffer runs in several rounds and still
 * answers every key correctly. */
static void test_batch_larger_than_scratch(void **state)
{
    struct env *e = *state;
    enum { N = 40 };
    char keys[N][16], vals[N][16], outs[N][16];
    struct rkv_lookup ls[N];
    for (unsigned i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "batch%u", i);
        snprintf(vals[i], sizeof vals[i], "value%u", i);
        if (i % 3)
            put(e, keys[i], vals[i]);
        ls[i] = (struct rkv_lookup){ .key = keys[i],
                                     .key_len = (uint32_t)strlen(keys[i]),
                                     .buf = outs[i],
                                     .buf_len = sizeof outs[i] };
    }
    e->ctx.scratch_len = 3 * 2 * sizeof(struct rkv_bucket); /* 3 bucket pairs a round */
    e->sc.calls = 0;
    assert_int_equal(rkv_lookup_batch(&e->ctx, ls, N), RKV_OK);
    assert_true(e->sc.calls > 4);
    for (unsigned i = 0; i < N; i++) {
        if (i % 3 == 0) {
            assert_int_equal(ls[i].status, RKV_NOT_FOUND);
            continue;
        }
        assert_int_equal(ls[i].status, RKV_OK);
        assert_int_equal(ls[i].value_len, strlen(vals[i]));
        assert_memory_equal(outs[i], vals[i], ls[i].value_len);
    }
    e->ctx.scratch_len = sizeof e->scratch;
}

/* The key check compares every byte at every key length: 1..7 and 33..40
 * go through memcmp, 8..32 through overlapping words (lookup.c key_equal).
 * Per length, the stored key verifies; one byte changed anywhere, or one
 * byte shorter, does not, through rkv_item_verify and through a lookup
 * whose cached location is the stored item. */
static void test_verify_compares_every_key_byte(void **state)
{
    struct env *e = *state;
    const struct rkv_region_header *h = e->sc.h;
    for (uint32_t n = 1; n <= 40; n++) {
        char key[41], other[41];
        for (uint32_t i = 0; i < n; i++)
            key[i] = (char)('a' + (i * 7 + n) % 26);
        key[n] = 0;
        put(e, key, "value");
        struct rkv_lookup l = { .key = key, .key_len = n };
        assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
        assert_int_equal(l.status, RKV_BUFFER_TOO_SMALL);
        uint64_t off;
        uint32_t len;
        assert_true(rkv_slot_valid(h, l.slot, &off, &len));
        const struct rkv_item *it = (const struct rkv_item *)(const void *)(e->sc.base + off);
        assert_int_equal(rkv_item_verify(it, len, key, n, h->hash_seed, 0), RKV_VERIFY_OK);
        assert_int_equal(rkv_item_verify(it, len, key, n - 1, h->hash_seed, 0), RKV_VERIFY_OTHER_KEY);
        for (uint32_t i = 0; i < n; i++) {
            memcpy(other, key, n + 1);
            other[i] ^= 0x20;
            assert_int_equal(rkv_item_verify(it, len, other, n, h->hash_seed, 0),
                             RKV_VERIFY_OTHER_KEY);
            struct rkv_lookup m = { .key = other, .key_len = n, .cached_slot = l.slot };
            assert_int_equal(rkv_lookup_batch(&e->ctx, &m, 1), RKV_OK);
            assert_int_equal(m.status, RKV_NOT_FOUND);
            assert_int_equal(m.cache_used, 0);
        }
    }
}

static void test_header_valid_field_by_field(void **state)
{
    struct env *e = *state;
    struct rkv_region_header good = *e->sc.h, h;
    assert_true(rkv_header_valid(&good, e->region.size));
    assert_false(rkv_header_valid(&good, e->region.size - 4096));
#define BREAK(field, value)                                 \
    do {                                                    \
        h = good;                                           \
        h.field = (value);                                  \
        assert_false(rkv_header_valid(&h, e->region.size)); \
    } while (0)
    BREAK(magic, 0);
    BREAK(format_version, RKV_FORMAT_VERSION + 1);
    /* a client names both formats when it meets another one */
    char why[160];
    assert_null(rkv_header_other_format(&good, why, sizeof why));
    h = good;
    h.format_version = 4;
    assert_non_null(rkv_header_other_format(&h, why, sizeof why));
    assert_string_equal(why, "the server's region is format 4 and this client reads format 7 only; "
                             "use a client and a server of the same rkv version");
    h.magic = 0; /* not an rkv region at all: the generic refusal */
    assert_null(rkv_header_other_format(&h, why, sizeof why));
    BREAK(index_capacity, good.region_size / 64);
    BREAK(index_capacity, 0);
    BREAK(index_capacity, 1);
    BREAK(index_base, 1);
    BREAK(index_base, good.index_capacity + 1);
    BREAK(index_geometry, ((uint64_t)RKV_INDEX_MAX_LEVEL + 1) << RKV_GEOM_LEVEL_SHIFT);
    BREAK(index_geometry, good.index_capacity); /* a split past the capacity */
    BREAK(index_offset, 8);
    BREAK(heap_offset, good.region_size);
    BREAK(heap_size, good.region_size * 2);
    BREAK(class_count, 0);
    BREAK(class_count, RKV_MAX_CLASSES + 1);
    BREAK(max_key_len, 0);
    BREAK(max_value_len, good.slab_page_size);
    BREAK(class_size[0], 63);
    BREAK(class_size[1], good.class_size[0]);
#undef BREAK
}

/* Any bucket count, not only powers of two: both buckets in range, every
 * bucket of the first choice and of the second reached. */
static void test_hash_any_bucket_count(void **state)
{
    (void)state;
    static const uint64_t counts[] = { 2, 3, 7, 1000, 114624, 1u << 10 };
    static unsigned hits[2][1000];
    char key[32];
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        uint64_t n = counts[c];
        memset(hits, 0, sizeof hits);
        for (unsigned i = 0; i < 40000; i++) {
            struct rkv_key_hash kh;
            snprintf(key, sizeof key, "key:%u", i);
            struct rkv_index_geom g = rkv_index_flat(n);
            rkv_hash_key(key, strlen(key), 0x1234 + c, &g, &kh);
            assert_true(kh.bucket[0] < n && kh.bucket[1] < n);
            assert_int_not_equal(kh.fp, 0);
            if (n <= 1000) {
                hits[0][kh.bucket[0]]++;
                hits[1][kh.bucket[1]]++;
            }
        }
        for (uint64_t b = 0; n <= 1000 && b < n; b++) /* about 40000 / n each */
            for (unsigned k = 0; k < 2; k++)
                assert_true(hits[k][b] > 40000 / n / 2 && hits[k][b] < 40000 / n * 2);
    }
}

/* An item laid out at either parity (layout.h) round-trips through the
 * accessors, and its bytes are where the format says: the checksum's low
 * half at 0 and high half at 4 (parity 0) or 12 (parity 4), the state word
 * on the 8-aligned 8 bytes between, the version at 16 (only 4-aligned at
 * parity 4: memcpy), the shape at 24. Verified, it passes; the same bytes
 * read at the other parity do not (a copy must keep its item's parity). */
static void test_item_layout_both_parities(void **state)
{
    (void)state;
    static _Alignas(8) uint8_t mem[80];
    const uint64_t seed = 0x5eed, version = 0x0102030405060708ull;
    for (unsigned parity = 0; parity <= 4; parity += 4) {
        memset(mem, 0xee, sizeof mem);
        struct rkv_item *it = (struct rkv_item *)(void *)(mem + parity);
        uint8_t *key = rkv_item_init(it, version, 3, 5, 0, 0);
        memcpy(key, "keyvalue", 8);
        uint64_t sum = rkv_item_checksum(it, seed);
        rkv_item_set_checksum(it, sum);
        rkv_item_set_state(it, rkv_item_state_live(RKV_ITEM_STALE, 77));

        assert_int_equal(rkv_item_parity(it), parity);
        assert_int_equal(rkv_item_checksum_stored(it), sum);
        assert_int_equal(rkv_item_state(it), rkv_item_state_live(RKV_ITEM_STALE, 77));
        assert_int_equal(rkv_item_version(it), version);
        assert_int_equal(rkv_item_key_len(it), 3);
        assert_int_equal(rkv_item_value_len(it), 5);
        assert_int_equal(rkv_item_bytes(it), 36);

        const uint8_t *b = mem + parity;
        uint32_t lo, hi;
        uint64_t st, ver;
        memcpy(&lo, b, 4);
        memcpy(&hi, b + (parity ? 12 : 4), 4);
        memcpy(&st, b + 8 - parity, 8);
        memcpy(&ver, b + 16, 8);
        assert_int_equal((uint64_t)hi << 32 | lo, sum);
        assert_int_equal(st, rkv_item_state_live(RKV_ITEM_STALE, 77));
        assert_int_equal(((uintptr_t)b + 8 - parity) % 8, 0);
        assert_int_equal(ver, version);
        assert_int_equal(it->shape, rkv_shape_make(3, 5, 0, 0));
        assert_int_equal(rkv_item_verify(it, 36, "key", 3, seed, 0), RKV_VERIFY_OK);

        /* the same bytes taken for the other parity: checksum halves mixed up */
        static _Alignas(8) uint8_t moved[80];
        memcpy(moved + (4 - parity), b, 36);
        assert_int_equal(rkv_item_verify((const struct rkv_item *)(const void *)(moved + 4 - parity),
                                         36, "key", 3, seed, 0),
                         RKV_VERIFY_TORN);
        assert_int_equal(rkv_item_copy_skew(1000 + parity), parity);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_item_layout_both_parities),
        cmocka_unit_test_setup_teardown(test_move_between_bucket_reads_is_not_a_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_move_between_bucket_reads_bytes_cost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forward_is_verified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cached_slot_fingerprint_bits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefetch_is_the_read_that_follows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_cost_reads_second_bucket_on_demand, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_odd_version_retries_then_gives_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_slots_are_not_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_larger_than_scratch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_compares_every_key_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_valid_field_by_field, setup, teardown),
        cmocka_unit_test(test_hash_any_bucket_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
