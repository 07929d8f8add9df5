/* test_table_attach.c — a kept region taken over by a new table
 * (server/table.c rkv_table_attach, server/slab.c rkv_slab_adopt).
 *
 * A table is filled, its region copied byte for byte into a second region
 * (what the state file carries), and attached there. Checked: every item
 * comes back with its value, flags, version and expiry, through the table
 * and through a client's lookup; the clock goes on from the one given and
 * new versions go above the largest kept; the generation changes; the
 * allocator hands out only memory no kept item holds; and damage — a flipped
 * value byte, a slot word pointing elsewhere, a second slot on one item, an
 * obsolete item, a key in the wrong bucket — costs only the items it hits,
 * each dropped (its slot cleared) and counted by reason, never served.
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
#include "util.h"

#define REGION (16ull << 20)
#define NKEYS  3000

/* The index starts with all the room before the heap (index_start is
 * capped there), so a key's buckets have free slots to plant damage in. */
static const struct rkv_table_config cfg = { .slab_page_size = 64u << 10,
                                             .evict = RKV_EVICT_NONE,
                                             .index_start = 1u << 20 };

struct kept {
    struct rkv_region a, b; /* the stopped server's region, the new one */
    struct rkv_table *old, *t;
    uint32_t clock;
    uint64_t max_version;
    uint64_t version[NKEYS];
};

static void key_of(unsigned i, char *k, size_t len)
{
    snprintf(k, len, "key-%u", i);
}

/* Value i: 0 to ~3 KiB, so items spread over many classes and pages. */
static uint32_t value_of(unsigned i, uint8_t *v)
{
    uint32_t n = (i * 37) % 3000;
    for (uint32_t j = 0; j < n; j++)
        v[j] = (uint8_t)(i + j);
    return n;
}

/* Fill a table in region a (items with and without TTLs), stop it, copy the
 * region to b. */
static void fill_and_copy(struct kept *k)
{
    char err[512] = "", key[32];
    uint8_t v[4096];
    memset(k, 0, sizeof *k);
    assert_int_equal(rkv_region_create(REGION, &k->a, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_region_create(REGION, &k->b, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_table_create(k->a.base, k->a.size, &cfg, &k->old, err, sizeof err), RKV_OK);
    for (unsigned i = 0; i < NKEYS; i++) {
        key_of(i, key, sizeof key);
        struct rkv_value_src src = { .data = v, .len = value_of(i, v) };
        uint32_t ttl = i % 3 == 0 ? 1000 : i % 3 == 1 ? 50 : 0;
        assert_int_equal(rkv_table_put(k->old, key, (uint32_t)strlen(key), &src, RKV_SET, 0, ttl,
                                       i * 7, &k->version[i]),
                         RKV_OK);
    }
    for (unsigned i = 0; i < NKEYS; i += 10) { /* superseded and deleted items stay behind */
        key_of(i, key, sizeof key);
        struct rkv_value_src src = { .data = v, .len = value_of(i, v) };
        uint32_t ttl = i % 3 == 0 ? 1000 : i % 3 == 1 ? 50 : 0;
        assert_int_equal(rkv_table_put(k->old, key, (uint32_t)strlen(key), &src, RKV_SET, 0, ttl,
                                       i * 7, &k->version[i]),
                         RKV_OK);
    }
    key_of(NKEYS + 1, key, sizeof key);
    struct rkv_value_src one = { .data = "x", .len = 1 };
    assert_int_equal(rkv_table_put(k->old, key, (uint32_t)strlen(key), &one, RKV_SET, 0, 0, 0, NULL),
                     RKV_OK);
    assert_int_equal(rkv_table_delete(k->old, key, (uint32_t)strlen(key)), RKV_OK);
    /* a grown index, split half way into a level: the kept items are
     * checked against that geometry */
    struct rkv_index_geom g;
    assert_true(rkv_header_geom(rkv_table_header(k->old), &g));
    uint64_t more = rkv_index_count(&g) / 2 + 3;
    assert_int_equal(rkv_table_grow_index(k->old, more), more);
    assert_true(rkv_header_geom(rkv_table_header(k->old), &g));
    assert_int_not_equal(g.split, 0);
    rkv_table_stop_state(k->old, &k->clock, &k->max_version);
    for (unsigned i = 0; i < NKEYS; i++)
        assert_true(k->version[i] <= k->max_version);
    memcpy(k->b.base, k->a.base, k->a.size);
}

static void kept_free(struct kept *k)
{
    rkv_table_destroy(k->t);
    rkv_table_destroy(k->old);
    rkv_region_destroy(&k->a);
    rkv_region_destroy(&k->b);
}

static rkv_status attach(struct kept *k, uint32_t clock, struct rkv_table_attach_report *rep)
{
    char err[512] = "";
    struct rkv_table_restore r = { .clock = clock, .max_version = k->max_version };
    rkv_status st = rkv_table_attach(k->b.base, k->b.size, &cfg, &r, &k->t, rep, err, sizeof err);
    if (st != RKV_OK)
        print_message("attach: %s\n", err);
    return st;
}

/* Reads memcpy from the region, as the shm transport does. */
static rkv_status read_region(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    const struct rkv_region *r = ctx;
    for (unsigned i = 0; i < n; i++) {
        assert_true(ops[i].offset + ops[i].len <= r->size);
        memcpy(ops[i].dst, (const uint8_t *)r->base + ops[i].offset, ops[i].len);
    }
    return RKV_OK;
}

/* A client's GET in the new region: its status, the value into buf. */
static rkv_status client_get(struct kept *k, const char *key, void *buf, size_t len,
                             struct rkv_lookup *out)
{
    const struct rkv_region_header *h = rkv_table_header(k->t);
    size_t scratch_len = rkv_lookup_scratch_need(h, 1);
    uint8_t *scratch = malloc(scratch_len);
    struct rkv_read_op ops[16];
    assert_non_null(scratch);
    struct rkv_lookup_ctx ctx = {
        .geom = h,
        .read = read_region,
        .read_ctx = &k->b,
        .scratch = scratch,
        .scratch_len = scratch_len,
        .ops = ops,
        .ops_cap = 16,
        .max_retries = 8,
        .now = rkv_table_clock(k->t),
    };
    *out = (struct rkv_lookup){
        .key = key, .key_len = (uint32_t)strlen(key), .buf = buf, .buf_len = len
    };
    assert_int_equal(rkv_lookup_batch(&ctx, out, 1), RKV_OK);
    free(scratch);
    return out->status;
}

/* Every key as stored, through the table and a client; those with a TTL of
 * 50 expired when clock_added >= 50. */
static void check_all(struct kept *k, unsigned skip_from, unsigned skip_to)
{
    char key[32];
    uint8_t v[4096], buf[4096];
    for (unsigned i = 0; i < NKEYS; i++) {
        if (i >= skip_from && i < skip_to)
            continue;
        key_of(i, key, sizeof key);
        uint32_t n = value_of(i, v);
        const struct rkv_item *it = rkv_table_find(k->t, key, (uint32_t)strlen(key));
        assert_non_null(it);
        assert_int_equal(rkv_item_value_len(it), n);
        assert_memory_equal(rkv_item_value(it), v, n);
        assert_int_equal(rkv_item_user_flags(it), i * 7);
        assert_int_equal(rkv_item_version(it), k->version[i]);
        struct rkv_lookup l;
        assert_int_equal(client_get(k, key, buf, sizeof buf, &l), RKV_OK);
        assert_int_equal(l.value_len, n);
        assert_memory_equal(buf, v, n);
        assert_int_equal(l.version, k->version[i]);
    }
}

static uint64_t dropped(const struct rkv_table_attach_report *rep)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < RKV_DROP_COUNT; i++)
        n += rep->dropped[i];
    return n;
}

static void test_attach_keeps_everything(void **state)
{
    (void)state;
    struct kept k;
    struct rkv_table_attach_report rep;
    fill_and_copy(&k);
    uint64_t gen = rkv_table_header(k.old)->generation;
    assert_int_equal(attach(&k, k.clock + 10, &rep), RKV_OK);
    assert_int_equal(rep.kept, NKEYS);
    assert_int_equal(dropped(&rep), 0);
    check_all(&k, 0, 0);

    const struct rkv_region_header *h = rkv_table_header(k.t);
    assert_int_not_equal(h->generation, gen);
    assert_int_equal(h->clock, k.clock + 10);
    assert_true(rkv_table_clock(k.t) >= k.clock + 10);
    struct rkv_table_stats ts;
    rkv_table_get_stats(k.t, &ts);
    assert_int_equal(ts.items, NKEYS);

    /* An item with a TTL: its expiry is the stored one, counted on the
     * clock that went on. */
    const struct rkv_item *it = rkv_table_find(k.t, "key-0", 5);
    assert_non_null(it);
    assert_true(rkv_item_expire_at(it) > k.clock && rkv_item_expire_at(it) <= k.clock + 1000);

    /* New writes: versions above every kept one, memory no kept item
     * holds (every kept item reads back the same after the heap is filled
     * up with new ones). */
    uint8_t v[4096];
    char key[32];
    unsigned stored = 0;
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "new-%u", i);
        struct rkv_value_src src = { .data = v, .len = value_of(i, v) };
        uint64_t ver = 0;
        rkv_status st = rkv_table_put(k.t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0, &ver);
        if (st == RKV_OUT_OF_MEMORY)
            continue;
        assert_int_equal(st, RKV_OK);
        assert_true(ver > k.max_version);
        stored++;
    }
    assert_true(stored > 1000);
    check_all(&k, 0, 0);
    /* a kept item replaced: the new version is larger */
    struct rkv_value_src one = { .data = "y", .len = 1 };
    uint64_t ver;
    assert_int_equal(rkv_table_put(k.t, "key-1", 5, &one, RKV_CAS, k.version[1], 0, 0, &ver), RKV_OK);
    assert_true(ver > k.version[1]);
    kept_free(&k);
}

static void test_attach_counts_downtime(void **state)
{
    (void)state;
    struct kept k;
    struct rkv_table_attach_report rep;
    fill_and_copy(&k);
    /* 100 s down: the items with a 50 s TTL are gone, the others stay */
    assert_int_equal(attach(&k, k.clock + 100, &rep), RKV_OK);
    assert_int_equal(rep.dropped[RKV_DROP_EXPIRED], NKEYS / 3);
    assert_int_equal(rep.kept, NKEYS - NKEYS / 3);
    assert_int_equal(dropped(&rep), NKEYS / 3);
    for (unsigned i = 1; i < NKEYS; i += 3) {
        char key[32];
        key_of(i, key, sizeof key);
        assert_null(rkv_table_find(k.t, key, (uint32_t)strlen(key)));
    }
    assert_non_null(rkv_table_find(k.t, "key-0", 5));
    assert_non_null(rkv_table_find(k.t, "key-2", 5));
    /* a flush now removes every kept item: their versions are below now's */
    assert_int_equal(rkv_table_flush(k.t, 0), rep.kept);
    assert_null(rkv_table_find(k.t, "key-0", 5));
    kept_free(&k);
}

/* The place of key i's item and its slot in the new region. */
static uint64_t *slot_of(struct kept *k, unsigned i, struct rkv_item **it)
{
    char key[32];
    key_of(i, key, sizeof key);
    const struct rkv_region_header *h = k->b.base;
    struct rkv_key_hash kh;
    rkv_header_hash_key(h, key, strlen(key), &kh);
    struct rkv_bucket *buckets = (struct rkv_bucket *)(void *)((uint8_t *)k->b.base + h->index_offset);
    for (unsigned c = 0; c < 2; c++)
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++) {
            uint64_t w = buckets[kh.bucket[c]].slot[s];
            if (w == 0 || rkv_slot_fp(w) != kh.fp)
                continue;
            struct rkv_item *x = (struct rkv_item *)(void *)((uint8_t *)k->b.base +
                                                             rkv_slot_offset(w));
            if (rkv_item_key_len(x) == strlen(key) &&
                memcmp(rkv_item_key(x), key, rkv_item_key_len(x)) == 0) {
                *it = x;
                return (uint64_t *)&buckets[kh.bucket[c]].slot[s];
            }
        }
    fail_msg("key %u not in the index", i);
    return NULL;
}

/* An empty slot in a bucket neither of key i's. */
static uint64_t *foreign_slot(struct kept *k, unsigned i)
{
    char key[32];
    key_of(i, key, sizeof key);
    const struct rkv_region_header *h = k->b.base;
    struct rkv_key_hash kh;
    rkv_header_hash_key(h, key, strlen(key), &kh);
    struct rkv_bucket *buckets = (struct rkv_bucket *)(void *)((uint8_t *)k->b.base + h->index_offset);
    struct rkv_index_geom g;
    assert_true(rkv_header_geom(h, &g));
    for (uint64_t b = 0; b < rkv_index_count(&g); b++)
        if (b != kh.bucket[0] && b != kh.bucket[1] && buckets[b].slot[6] == 0)
            return (uint64_t *)&buckets[b].slot[6];
    fail_msg("no empty slot");
    return NULL;
}

static void test_attach_drops_damage(void **state)
{
    (void)state;
    struct kept k;
    struct rkv_table_attach_report rep;
    struct rkv_item *it;
    fill_and_copy(&k);

    /* 3: a value byte flipped */
    uint64_t *s3 = slot_of(&k, 3, &it);
    assert_true(rkv_item_value_len(it) > 0);
    ((uint8_t *)rkv_item_value(it))[rkv_item_value_len(it) / 2] ^= 0x40;
    /* 5: obsolete (as an item superseded or being built) */
    slot_of(&k, 5, &it);
    rkv_item_set_state(it, RKV_ITEM_OBSOLETE);
    /* 8's slot copied into a bucket where key 8 does not hash */
    uint64_t *s8 = slot_of(&k, 8, &it);
    *foreign_slot(&k, 8) = *s8;
    /* 11's slot copied into 11's other bucket: two slots, one item */
    uint64_t *s11 = slot_of(&k, 11, &it), *twin = NULL;
    {
        char key[32];
        key_of(11, key, sizeof key);
        const struct rkv_region_header *h = k.b.base;
        struct rkv_key_hash kh;
        rkv_header_hash_key(h, key, strlen(key), &kh);
        struct rkv_bucket *bk = (struct rkv_bucket *)(void *)((uint8_t *)k.b.base + h->index_offset);
        for (unsigned c = 0; c < 2 && twin == NULL; c++)
            for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET && twin == NULL; s++)
                if (bk[kh.bucket[c]].slot[s] == 0)
                    twin = (uint64_t *)&bk[kh.bucket[c]].slot[s];
        assert_non_null(twin);
        *twin = *s11;
    }
    /* 14: its slot's offset moved by 8 bytes (into the middle of the item) */
    uint64_t *s14 = slot_of(&k, 14, &it);
    *s14 = rkv_slot_make(rkv_slot_fp(*s14), rkv_slot_class(*s14), rkv_slot_offset(*s14) + 8);
    /* 17: its slot's class changed (another class's size on that page) */
    uint64_t *s17 = slot_of(&k, 17, &it);
    *s17 = rkv_slot_make(rkv_slot_fp(*s17), rkv_slot_class(*s17) + 1, rkv_slot_offset(*s17));
    /* 20: an offset past the heap */
    uint64_t *s20 = slot_of(&k, 20, &it);
    *s20 = rkv_slot_make(rkv_slot_fp(*s20), rkv_slot_class(*s20), k.b.size + 4096);

    assert_int_equal(attach(&k, k.clock, &rep), RKV_OK);
    assert_int_equal(rep.dropped[RKV_DROP_CHECKSUM], 1);
    assert_int_equal(rep.dropped[RKV_DROP_STATE], 1);
    assert_int_equal(rep.dropped[RKV_DROP_KEY], 1);
    assert_true(rep.dropped[RKV_DROP_OVERLAP] >= 1); /* the twin; 17's other class maybe */
    assert_int_equal(rep.dropped[RKV_DROP_SLOT] + rep.dropped[RKV_DROP_LENGTHS] +
                         rep.dropped[RKV_DROP_OVERLAP] + rep.dropped[RKV_DROP_CHECKSUM],
                     1 + 3 + 1);
    assert_int_equal(rep.kept, NKEYS - 5); /* 3, 5, 14, 17, 20; 8 and 11 keep their own slots */
    assert_int_equal(dropped(&rep), 7);
    for (unsigned i = 3; i <= 20; i++) {
        char key[32];
        uint8_t buf[4096];
        struct rkv_lookup l;
        key_of(i, key, sizeof key);
        bool gone = i == 3 || i == 5 || i == 14 || i == 17 || i == 20;
        if (gone) {
            assert_null(rkv_table_find(k.t, key, (uint32_t)strlen(key)));
            assert_int_equal(client_get(&k, key, buf, sizeof buf, &l), RKV_NOT_FOUND);
        } else {
            assert_non_null(rkv_table_find(k.t, key, (uint32_t)strlen(key)));
        }
    }
    assert_int_equal(*s3, 0); /* its slot cleared */
    check_all(&k, 3, 21);
    kept_free(&k);
}

static void test_attach_refuses_another_layout(void **state)
{
    (void)state;
    struct kept k;
    char err[512] = "";
    struct rkv_table_attach_report rep;
    struct rkv_table_restore r = { .clock = 1 };
    fill_and_copy(&k);
    struct rkv_table_config other = cfg;
    other.slab_page_size = 128u << 10;
    assert_int_equal(rkv_table_attach(k.b.base, k.b.size, &other, &r, &k.t, &rep, err, sizeof err),
                     RKV_INVALID);
    assert_non_null(strstr(err, "laid out differently"));
    assert_null(k.t);
    /* a header that is not one */
    ((struct rkv_region_header *)k.b.base)->magic ^= 1;
    assert_int_equal(rkv_table_attach(k.b.base, k.b.size, &cfg, &r, &k.t, &rep, err, sizeof err),
                     RKV_INVALID);
    assert_non_null(strstr(err, "not a valid"));
    kept_free(&k);
}

/* A server's pages (rkv_table_page_pair_room): two 512 KiB values a page
 * are kept, each read back whole; the same region with pages of exactly
 * 1 MiB is another layout. */
static void test_attach_keeps_two_half_page_values_a_page(void **state)
{
    (void)state;
    const struct rkv_table_config pair = {
        .slab_page_size = (1u << 20) + rkv_table_page_pair_room(RKV_MAX_KEY_LEN),
        .max_value_len = (1u << 20) - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN,
        .evict = RKV_EVICT_NONE,
    };
    char err[512] = "", key[32];
    static uint8_t v[512 * 1024];
    struct rkv_region a, b;
    struct rkv_table *old, *t = NULL;
    struct rkv_table_attach_report rep;
    uint32_t clock;
    uint64_t max_version;
    assert_int_equal(rkv_region_create(8ull << 20, &a, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_region_create(8ull << 20, &b, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_table_create(a.base, a.size, &pair, &old, err, sizeof err), RKV_OK);
    unsigned n = 0;
    for (;; n++) {
        snprintf(key, sizeof key, "big-%u", n);
        memset(v, 'a' + n % 26, sizeof v);
        struct rkv_value_src src = { .data = v, .len = sizeof v };
        rkv_status st = rkv_table_put(old, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0, NULL);
        if (st == RKV_OUT_OF_MEMORY)
            break;
        assert_int_equal(st, RKV_OK);
    }
    struct rkv_table_stats ts;
    rkv_table_get_stats(old, &ts);
    assert_int_equal(n, 2 * (ts.heap_bytes / pair.slab_page_size)); /* two a page */
    rkv_table_stop_state(old, &clock, &max_version);
    memcpy(b.base, a.base, a.size);

    struct rkv_table_restore r = { .clock = clock, .max_version = max_version };
    struct rkv_table_config plain = pair;
    plain.slab_page_size = 1u << 20;
    assert_int_equal(rkv_table_attach(b.base, b.size, &plain, &r, &t, &rep, err, sizeof err),
                     RKV_INVALID);
    assert_int_equal(rkv_table_attach(b.base, b.size, &pair, &r, &t, &rep, err, sizeof err), RKV_OK);
    assert_int_equal(rep.kept, n);
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "big-%u", i);
        const struct rkv_item *it = rkv_table_find(t, key, (uint32_t)strlen(key));
        assert_non_null(it);
        assert_int_equal(rkv_item_value_len(it), sizeof v);
        memset(v, 'a' + i % 26, sizeof v);
        assert_memory_equal(rkv_item_value(it), v, sizeof v);
    }
    rkv_table_destroy(t);
    rkv_table_destroy(old);
    rkv_region_destroy(&a);
    rkv_region_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attach_keeps_everything),
        cmocka_unit_test(test_attach_counts_downtime),
        cmocka_unit_test(test_attach_drops_damage),
        cmocka_unit_test(test_attach_refuses_another_layout),
        cmocka_unit_test(test_attach_keeps_two_half_page_values_a_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
