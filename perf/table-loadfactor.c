/* table-loadfactor.c — how full the table gets, and what each item costs.
 *
 * For a few value sizes (or the ones given as arguments) it fills a fresh
 * table with random 16-byte keys until the first insert fails, twice:
 *
 *   index-limited: a small index in front of a heap that cannot fill first;
 *       reports the load factor (items / slots) the cuckoo index reaches and
 *       the per-item overhead: index bytes per item, the item header (28 bytes for these items)
 *       and the rounding up to the item's size class;
 *   default sizing: the layout rkv-server uses; reports which part filled
 *       first and the all-in overhead (region bytes per item - key - value).
 *
 * The index-limited runs also report the share of keys that live in their
 * first candidate bucket at 50 %, 90 % and the final load: a lookup that
 * reads the first bucket alone (transport cost model RKV_COST_PER_READ)
 * needs the second one only for the others.
 *
 * A measuring tool for developers; not installed.
 *
 *   table-loadfactor [VALUE_BYTES ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hash.h"
#include "layout.h"
#include "log.h"
#include "region.h"
#include "table.h"
#include "util.h"

#define KEY_LEN        16u
#define INDEX_BUCKETS  8192u         /* index-limited runs: 57344 slots */
#define DEFAULT_REGION (64ull << 20) /* default-sizing runs */

#define SHARE_POINTS 3 /* first-bucket share at 50 %, 90 %, final */

struct fill_result {
    uint64_t items;
    double first_bucket[SHARE_POINTS]; /* share of keys in their first candidate bucket */
    rkv_status first_failure;
    struct rkv_table_stats st;
    const struct rkv_region_header *h;
};

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void next_key(uint64_t *x, uint8_t key[KEY_LEN])
{
    for (unsigned i = 0; i < KEY_LEN; i += 8) {
        uint64_t w = next_rand(x);
        memcpy(key + i, &w, 8);
    }
}

/* Share of the first `items` keys of `seed` whose slot is in their first
 * candidate bucket. */
static double first_bucket_share(struct rkv_table *t, uint64_t seed, uint64_t items)
{
    const struct rkv_region_header *g = rkv_table_header(t);
    const struct rkv_bucket *buckets = (const void *)((const uint8_t *)g + g->index_offset);
    uint8_t key[KEY_LEN];
    uint64_t x = seed | 1, first = 0;

    for (uint64_t n = 0; n < items; n++) {
        struct rkv_key_hash h;
        next_key(&x, key);
        struct rkv_index_geom ig;
        rkv_header_geom(g, &ig);
        rkv_hash_key(key, KEY_LEN, g->hash_seed, &ig, &h);
        const struct rkv_item *it = rkv_table_find(t, key, KEY_LEN);
        uint64_t off = (uint64_t)((const uint8_t *)it - (const uint8_t *)g);
        for (unsigned s = 0; it != NULL && s < RKV_SLOTS_PER_BUCKET; s++)
            if (rkv_slot_offset(buckets[h.bucket[0]].slot[s]) == off)
                first++;
    }
    return items ? (double)first / (double)items : 0;
}

/* Fill `t` with random keys and value_len-byte values until a put fails. */
static void fill(struct rkv_table *t, uint32_t value_len, uint64_t seed, struct fill_result *r)
{
    static uint8_t value[4096];
    uint8_t key[KEY_LEN];
    uint64_t x = seed | 1;
    struct rkv_value_src src = { .data = value, .len = value_len };
    uint64_t slots = rkv_table_header(t)->index_capacity * RKV_SLOTS_PER_BUCKET; /* grown */
    unsigned point = 0;

    memset(value, 'v', value_len);
    memset(r, 0, sizeof(*r));
    for (;;) {
        if (point < SHARE_POINTS - 1 && r->items == slots * (point ? 9 : 5) / 10)
            r->first_bucket[point++] = first_bucket_share(t, seed, r->items);
        next_key(&x, key);
        rkv_status st = rkv_table_put(t, key, KEY_LEN, &src, RKV_SET, 0, 0, 0, NULL);
        if (st != RKV_OK) {
            r->first_failure = st;
            break;
        }
        r->items++;
    }
    r->first_bucket[SHARE_POINTS - 1] = first_bucket_share(t, seed, r->items);
    rkv_table_get_stats(t, &r->st);
    r->h = rkv_table_header(t);
}

/* Create a region and table, fill it, print one line; 0 or -1. */
static int run(uint64_t region_size, const struct rkv_table_config *cfg, uint32_t value_len,
               uint64_t seed, bool index_limited)
{
    struct rkv_region region;
    struct rkv_table *t = NULL;
    struct fill_result r;
    char err[512];
    int rc = -1;

    if (rkv_region_create(region_size, &region, err, sizeof err) != RKV_OK) {
        fprintf(stderr, "table-loadfactor: %s\n", err);
        return -1;
    }
    if (rkv_table_create(region.base, region.size, cfg, &t, err, sizeof err) != RKV_OK) {
        fprintf(stderr, "table-loadfactor: %s\n", err);
        goto out;
    }
    fill(t, value_len, seed, &r);
    if (r.items == 0 || r.first_failure != RKV_OUT_OF_MEMORY) {
        fprintf(stderr,
                "table-loadfactor: value %u: first failure after %llu items was status %d, "
                "not RKV_OUT_OF_MEMORY\n",
                value_len, (unsigned long long)r.items, r.first_failure);
        goto out;
    }
    double items = (double)r.items;
    double index_bytes = (double)r.h->index_capacity * sizeof(struct rkv_bucket);
    double header = RKV_ITEM_PREFIX_SIZE; /* no TTL, no flags */
    double rounding = (double)(r.st.bytes_used - r.st.item_bytes) / items;
    const char *limit = r.st.pages_unassigned > 0 ? "index" : "heap";

    if (index_limited) {
        printf("%8u  %-5s  %9llu  %9llu  %6.2f%%  %8.1f  %7.1f  %6.0f  %8.1f  %4.0f%% %4.0f%% %4.0f%%\n",
               value_len, limit, (unsigned long long)r.items, (unsigned long long)r.st.slots,
               100.0 * items / (double)r.st.slots, index_bytes / items + header + rounding,
               index_bytes / items, header, rounding, 100 * r.first_bucket[0],
               100 * r.first_bucket[1], 100 * r.first_bucket[2]);
    } else {
        double payload = KEY_LEN + (double)value_len;
        printf("%8u  %-5s  %9llu  %9llu  %6.2f%%  %8.1f  %8.1f  %7.1f\n", value_len, limit,
               (unsigned long long)r.items, (unsigned long long)r.st.slots,
               100.0 * items / (double)r.st.slots, (double)region.size / items - payload,
               (double)(r.st.bytes_free + r.st.limbo_bytes + r.st.tail_bytes) / items, rounding);
    }
    rc = 0;
out:
    rkv_table_destroy(t);
    rkv_region_destroy(&region);
    return rc;
}

int main(int argc, char **argv)
{
    static const uint32_t defaults[] = { 8, 32, 100, 500, 1000 };
    uint32_t sizes[32];
    unsigned n = 0;
    uint64_t seed;

    rkv_log_set_level(RKV_LOG_ERROR);
    if (argc > (int)RKV_ARRAY_SIZE(sizes)) {
        fprintf(stderr, "usage: table-loadfactor [VALUE_BYTES ...] (at most %zu sizes)\n",
                RKV_ARRAY_SIZE(sizes));
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (!rkv_parse_u64(argv[i], 0, 4096, &v)) {
            fprintf(stderr,
                    "table-loadfactor: value size \"%s\" is not a number of bytes in 0..4096\n",
                    argv[i]);
            return 2;
        }
        sizes[n++] = (uint32_t)v;
    }
    if (n == 0)
        for (; n < RKV_ARRAY_SIZE(defaults); n++)
            sizes[n] = defaults[n];
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = rkv_now_ns();

    /* Index-limited: 8192 buckets, and a heap with room for twice what the
     * index can hold even if every item were in the largest class used. */
    printf("index-limited (%u buckets, %u-byte keys): load factor and per-item overhead\n",
           INDEX_BUCKETS, KEY_LEN);
    printf("%8s  %-5s  %9s  %9s  %7s  %8s  %7s  %6s  %8s  %s\n", "value", "limit", "items", "slots",
           "load", "overhead", "index", "header", "rounding", "1st bucket @50%,90%,final");
    for (unsigned i = 0; i < n; i++) {
        uint64_t per_item = RKV_ALIGN_UP(RKV_ITEM_HEADER_MAX + KEY_LEN + sizes[i], 64) * 5 / 4;
        uint64_t heap = 2 * per_item * INDEX_BUCKETS * RKV_SLOTS_PER_BUCKET + (4ull << 20);
        uint64_t size = RKV_ALIGN_UP(heap + INDEX_BUCKETS * 64ull + 8192, 2ull << 20);
        /* (+32 bytes: the table rounds the share's bucket count down) */
        struct rkv_table_config c = { .index_share = (INDEX_BUCKETS * 64.0 + 32) / (double)size };
        if (run(size, &c, sizes[i], seed + i, true) != 0)
            return 1;
    }

    printf("\ndefault sizing (%llu MiB region, %u-byte keys): all-in bytes per item beyond key+value\n",
           (unsigned long long)(DEFAULT_REGION >> 20), KEY_LEN);
    printf("%8s  %-5s  %9s  %9s  %7s  %8s  %8s  %7s\n", "value", "limit", "items", "slots", "load",
           "all-in", "unused", "rounding");
    for (unsigned i = 0; i < n; i++)
        if (run(DEFAULT_REGION, NULL, sizes[i], seed + 100 + i, false) != 0)
            return 1;
    return 0;
}
