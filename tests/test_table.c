/* test_table.c — the server's table (server/table.c) on a real region
 * (server/region.c), read back the way clients read it: through
 * common/lookup.c's rkv_lookup_batch with a read callback that memcpy's from
 * the region, as the shm transport does.
 *
 * Covers: region (read-only fd, seals), layout and header, writes of every
 * key and value size, the put modes, incr, TTL, filling the index to its
 * load-factor limit, eviction (random, LRU with client hints, index-full),
 * slab page moves between size classes (a class with no page evicts another
 * class's page instead of failing; none without eviction; LRU automove),
 * hint validation, and the two read races a client must survive: a torn copy
 * of an item and a stale cached location whose memory was reused.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "hash.h"
#include "log.h"
#include "lookup.h"
#include "region.h"
#include "table.h"
#include "transport.h"
#include "util.h"

#define MiB (1ull << 20)

/* Reads memcpy from the region. With torn_left > 0, a read of the item at
 * torn_off returns torn_img instead (a copy that raced a write). */
struct reader {
    const uint8_t *base;
    size_t size;
    uint64_t torn_off;
    const uint8_t *torn_img;
    uint32_t torn_len;
    unsigned torn_left;
    unsigned torn_served;
};

static rkv_status read_region(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct reader *r = ctx;
    for (unsigned i = 0; i < n; i++) {
        assert_true(ops[i].offset + ops[i].len <= r->size);
        memcpy(ops[i].dst, r->base + ops[i].offset, ops[i].len);
        if (r->torn_left > 0 && ops[i].offset == r->torn_off) {
            memcpy(ops[i].dst, r->torn_img, RKV_MIN(ops[i].len, r->torn_len));
            r->torn_left--;
            r->torn_served++;
        }
    }
    return RKV_OK;
}

struct env {
    struct rkv_region region;
    struct rkv_table *t;
    const struct rkv_region_header *h;
    struct reader rd;
    uint8_t *scratch;
    size_t scratch_len;
    struct rkv_read_op ops[64];
    uint64_t retries;  /* verification retries of the last get() */
    uint64_t forwards; /* forwards the last get() followed */
};

/* Eviction samples at random: every table here draws the same samples each
 * run, so a test's evictions are the same on every run. */
#define TEST_RNG_SEED 0x5eedULL

/* A table in a fresh region of `size` bytes, configured as c (NULL: the
 * defaults) but for its sampling seed. */
static void env_make(struct env *e, uint64_t size, const struct rkv_table_config *c)
{
    char err[512] = "";
    struct rkv_table_config cfg = c != NULL ? *c : (struct rkv_table_config){ 0 };
    if (cfg.rng_seed == 0)
        cfg.rng_seed = TEST_RNG_SEED;
    memset(e, 0, sizeof(*e));
    assert_int_equal(rkv_region_create(size, &e->region, err, sizeof err), RKV_OK);
    rkv_status st = rkv_table_create(e->region.base, e->region.size, &cfg, &e->t, err, sizeof err);
    if (st != RKV_OK)
        fail_msg("rkv_table_create: %s", err);
    e->h = rkv_table_header(e->t);
    assert_true(rkv_header_valid(e->h, e->region.size));
    e->rd = (struct reader){ .base = e->region.base, .size = e->region.size };
    e->scratch_len = rkv_lookup_scratch_need(e->h, 8);
    e->scratch = malloc(e->scratch_len);
    assert_non_null(e->scratch);
}

static void env_free(struct env *e)
{
    free(e->scratch);
    rkv_table_destroy(e->t);
    rkv_region_destroy(&e->region);
}

/* A client GET of one key through rkv_lookup_batch. */
static rkv_status get(struct env *e, const void *key, uint32_t key_len, uint64_t cached, void *buf,
                      size_t buf_len, struct rkv_lookup *out)
{
    struct rkv_lookup_ctx ctx = {
        .geom = e->h,
        .read = read_region,
        .read_ctx = &e->rd,
        .scratch = e->scratch,
        .scratch_len = e->scratch_len,
        .ops = e->ops,
        .ops_cap = RKV_ARRAY_SIZE(e->ops),
        .max_retries = 8,
        .now = rkv_table_clock(e->t),
    };
    struct rkv_lookup l = {
        .key = key, .key_len = key_len, .cached_slot = cached, .buf = buf, .buf_len = buf_len
    };
    assert_int_equal(rkv_lookup_batch(&ctx, &l, 1), RKV_OK);
    e->retries = ctx.retries;
    e->forwards = ctx.forwards;
    if (out)
        *out = l;
    return l.status;
}

static rkv_status put_mode(struct env *e, const void *key, uint32_t key_len, const void *val,
                           uint32_t val_len, rkv_put_mode mode, uint64_t cas, uint32_t ttl,
                           uint64_t *version)
{
    struct rkv_value_src src = { .data = val, .len = val_len };
    return rkv_table_put(e->t, key, key_len, &src, mode, cas, ttl, 0, version);
}

static rkv_status put(struct env *e, const char *key, const char *val)
{
    return put_mode(e, key, (uint32_t)strlen(key), val, (uint32_t)strlen(val), RKV_SET, 0, 0, NULL);
}

/* The value a GET returns for a string key, or NULL when it is not found. */
static const char *get_str(struct env *e, const char *key)
{
    static char buf[4096];
    struct rkv_lookup l;
    rkv_status st = get(e, key, (uint32_t)strlen(key), 0, buf, sizeof buf - 1, &l);
    if (st == RKV_NOT_FOUND)
        return NULL;
    assert_int_equal(st, RKV_OK);
    buf[l.value_len] = '\0';
    return buf;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static struct rkv_table_stats stats(struct env *e)
{
    struct rkv_table_stats s;
    rkv_table_get_stats(e->t, &s);
    return s;
}

/* ------------------------------------------------------------ region */

static void test_region(void **state)
{
    (void)state;
    struct rkv_region r, zero = { 0 };
    char err[512];

    assert_int_equal(rkv_region_create(0, &r, err, sizeof err), RKV_INVALID);
    rkv_region_destroy(&zero); /* a zeroed region is safe to destroy */

    assert_int_equal(rkv_region_create(3 * MiB + 5, &r, err, sizeof err), RKV_OK);
    assert_true(r.size >= 3 * MiB + 5 && r.size % 4096 == 0);
    assert_true(r.fd >= 0);
    uint8_t *base = r.base;
    assert_int_equal(base[0] | base[r.size - 1], 0);

    int ro = rkv_region_readonly_fd(&r);
    assert_true(ro >= 0);
    /* the read-only descriptor cannot be mapped writable ... */
    errno = 0;
    assert_ptr_equal(mmap(NULL, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0), MAP_FAILED);
    assert_int_equal(errno, EACCES);
    /* ... but shows the server's writes */
    uint8_t *view = mmap(NULL, r.size, PROT_READ, MAP_SHARED, ro, 0);
    assert_ptr_not_equal(view, MAP_FAILED);
    base[12345] = 0x5a;
    assert_int_equal(view[12345], 0x5a);
    assert_int_not_equal(mprotect(view, 4096, PROT_READ | PROT_WRITE), 0);
    /* the size is sealed: nobody can shrink it under a mapping; and only the
     * server's mapping may write it: mode 0 (no reopen through /proc but by
     * root), no new writable mapping or write(2) even for root */
    int seals = fcntl(r.fd, F_GET_SEALS);
    assert_true(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) &&
                (seals & F_SEAL_FUTURE_WRITE) && (seals & F_SEAL_SEAL));
    struct stat sb;
    assert_int_equal(fstat(r.fd, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0);
    base[0] = 0x77; /* the server's own mapping still writes */
    assert_int_equal(view[0], 0x77);
    assert_int_not_equal(ftruncate(r.fd, 4096), 0);
    munmap(view, r.size);
    close(ro);

    rkv_region_destroy(&r);
    assert_null(r.base);
    rkv_region_destroy(&r); /* twice is safe */
    struct rkv_region none = { .fd = -1, .ro_fd = -1 };
    assert_int_equal(rkv_region_readonly_fd(&none), -1);
}

/* ------------------------------------------------------------ layout */

static void test_layout_and_header(void **state)
{
    (void)state;
    struct env a, b;
    env_make(&a, 16 * MiB, NULL);
    env_make(&b, 16 * MiB, NULL);
    const struct rkv_region_header *h = a.h;

    assert_int_equal(h->magic, RKV_REGION_MAGIC);
    assert_int_equal(h->format_version, RKV_FORMAT_VERSION);
    assert_int_equal(h->region_size, a.region.size);
    assert_true(h->index_base >= 2);
    /* the index starts with a 16th of the room before the heap */
    uint64_t room = (h->heap_offset - h->index_offset) / 64;
    assert_true(room >= 16);
    assert_int_equal(h->index_base, room / 16);
    assert_int_equal(h->heap_offset % 4096, 0);
    assert_int_equal(h->heap_size % h->slab_page_size, 0);
    assert_int_equal(h->slab_page_size, 1 * MiB);
    assert_int_equal(h->max_key_len, RKV_MAX_KEY_LEN);
    assert_int_equal(h->max_value_len, 1 * MiB - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN);
    assert_int_equal(h->class_size[0], RKV_MIN_ITEM_SIZE);
    assert_int_equal(h->class_size[1], RKV_MIN_ITEM_SIZE + RKV_ITEM_ALIGN);
    assert_int_equal(h->class_size[h->class_count - 1], h->slab_page_size);
    assert_int_equal(rkv_table_clock(a.t), 1);
    /* default sizing: the heap runs to the region's end (but for less than
     * HEAP_ALIGN), the index starts with the rest, less than a slab page,
     * and may grow into the heap up to a quarter of the region */
    assert_true(h->heap_offset + h->heap_size > a.region.size - 4096);
    assert_true(h->index_base * 64 < h->slab_page_size);
    assert_true(h->index_capacity * 64 <= a.region.size / 4);
    assert_true(h->index_capacity * 64 > a.region.size / 4 - 64);
    assert_int_equal(h->index_geometry, 0); /* level 0, nothing split */
    /* every start is a new generation with a new seed */
    assert_true(a.h->generation != b.h->generation);
    assert_true(a.h->hash_seed != b.h->hash_seed);
    env_free(&a);
    env_free(&b);

    /* an item size hint sizes the index: 100 KB items need few slots, and
     * the heap takes every page but the one the index and header share */
    struct rkv_table_config big = { .item_size_hint = 100000 };
    env_make(&a, 16 * MiB, &big);
    assert_true(a.h->index_capacity * RKV_SLOTS_PER_BUCKET * 100000 >= a.h->heap_size);
    assert_int_equal(a.h->heap_size, 15 * MiB);
    env_free(&a);

    /* an explicit index share is a ceiling */
    struct rkv_table_config c = { .index_share = 0.25 };
    env_make(&a, 16 * MiB, &c);
    uint64_t index_bytes = a.h->index_capacity * 64;
    assert_true(index_bytes <= a.region.size / 4 && index_bytes > a.region.size / 8);
    env_free(&a);
}

/* A region whose index room past the start's buckets is left untaken, as
 * the server leaves it (main.c region_untaken), and a table that takes it
 * with rkv_region_take as the index grows (or, take_fails, cannot). */
struct untaken_ctx {
    struct rkv_table_config tc;
    struct rkv_region *region;
    uint64_t from;   /* what region_untaken left */
    unsigned takes;  /* take() calls */
    bool take_fails; /* take() answers ENOMEM */
};

static void untaken_range(void *ctx, uint64_t size, uint64_t *off, uint64_t *len)
{
    struct untaken_ctx *u = ctx;
    struct rkv_region_header g;
    char err[256];
    assert_int_equal(rkv_table_plan(size, &u->tc, &g, err, sizeof err), RKV_OK);
    *off = u->from = g.index_offset + g.index_base * 64;
    *len = g.heap_offset - *off;
}

static int untaken_take(void *ctx, uint64_t off, uint64_t len)
{
    struct untaken_ctx *u = ctx;
    u->takes++;
    return u->take_fails ? ENOMEM : rkv_region_take(u->region, off, len);
}

static void env_make_untaken(struct env *e, uint64_t size, struct untaken_ctx *u)
{
    char err[512] = "";
    memset(e, 0, sizeof(*e));
    u->region = &e->region;
    const struct rkv_region_guard guard = { .ctx = u,
                                            .clear_on_first_touch = true,
                                            .untaken = untaken_range };
    assert_int_equal(rkv_region_create_guarded(size, &guard, &e->region, err, sizeof err), RKV_OK);
    assert_false(e->region.hugepages);
    struct rkv_table_config c = u->tc;
    c.room_untaken = u->from;
    c.take = untaken_take;
    c.take_ctx = u;
    if (rkv_table_create(e->region.base, e->region.size, &c, &e->t, err, sizeof err) != RKV_OK)
        fail_msg("rkv_table_create: %s", err);
    e->h = rkv_table_header(e->t);
    e->rd = (struct reader){ .base = e->region.base, .size = e->region.size };
    e->scratch_len = rkv_lookup_scratch_need(e->h, 8);
    assert_non_null(e->scratch = malloc(e->scratch_len));
}

/* Pages of [from, to) of e's region that hold memory (mincore: a page of a
 * memfd is in core once taken or touched). */
static uint64_t pages_held(struct env *e, uint64_t from, uint64_t to)
{
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    from = RKV_ALIGN_UP(from, page);
    if (to <= from)
        return 0;
    uint64_t n = (to - from) / page, held = 0;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore((uint8_t *)e->region.base + from, n * page, vec), 0);
    for (uint64_t i = 0; i < n; i++)
        held += vec[i] & 1;
    free(vec);
    return held;
}

/* The index room past the buckets in use holds no memory until the index
 * grows into it, and growing takes it: a server of few (large) items does
 * not pay for a room it never uses, and one of many small items gets all
 * its buckets. Fails when the index starts with the whole room (a few
 * hundred keys land on most of its pages) or grows without taking. */
static void test_index_room_taken_as_it_grows(void **state)
{
    (void)state;
    struct env e;
    struct untaken_ctx u = { .tc = { .evict = RKV_EVICT_LRU } };
    env_make_untaken(&e, 16 * MiB, &u);
    char key[32], val[40];
    memset(val, 'v', sizeof val - 1);
    val[sizeof val - 1] = '\0';
    for (unsigned i = 0; i < 400; i++) {
        snprintf(key, sizeof key, "room-%u", i);
        assert_int_equal(put(&e, key, val), RKV_OK);
    }
    struct rkv_index_geom g = rkv_index_geom_from(e.h->index_base, e.h->index_geometry);
    uint64_t in_use = e.h->index_offset + rkv_index_count(&g) * 64;
    assert_true((e.h->heap_offset - in_use) / 4096 >= 64); /* most of the room is unused */
    assert_int_equal(pages_held(&e, in_use, e.h->heap_offset), 0);
    assert_int_equal(u.takes, 0);

    unsigned n = 0; /* small items until the index has grown past its room */
    for (; e.h->index_offset + rkv_index_count(&g) * 64 < e.h->heap_offset; n++) {
        snprintf(key, sizeof key, "room-%u", 400 + n);
        assert_int_equal(put(&e, key, val), RKV_OK);
        g = rkv_index_geom_from(e.h->index_base, e.h->index_geometry);
        assert_true(n < 200000);
    }
    assert_true(u.takes > 0);
    assert_int_equal(pages_held(&e, e.h->index_offset, e.h->heap_offset),
                     (e.h->heap_offset - RKV_ALIGN_UP(e.h->index_offset, 4096)) / 4096);
    assert_int_equal(stats(&e).evictions, 0); /* the heap had room: every key is there */
    for (unsigned i = 0; i < 400 + n; i += 97) {
        snprintf(key, sizeof key, "room-%u", i);
        assert_string_equal(get_str(&e, key), val);
    }
    env_free(&e);
}

/* With no memory for its room the index stays as it is, and PUTs go on:
 * keys whose buckets are full evict a neighbour (or, without eviction, are
 * refused), the room stays untaken and no key is lost or half-stored. */
static void test_index_room_refused(void **state)
{
    (void)state;
    for (int evict = 0; evict < 2; evict++) {
        struct env e;
        struct untaken_ctx u = { .tc = { .evict = evict ? RKV_EVICT_LRU : RKV_EVICT_NONE },
                                 .take_fails = true };
        env_make_untaken(&e, 16 * MiB, &u);
        uint64_t start = e.h->index_base;
        char key[32], val[40];
        memset(val, 'v', sizeof val - 1);
        val[sizeof val - 1] = '\0';
        unsigned stored = 0, refused = 0;
        for (unsigned i = 0; i < (unsigned)(start * RKV_SLOTS_PER_BUCKET * 2); i++) {
            snprintf(key, sizeof key, "full-%u", i);
            rkv_status st = put(&e, key, val);
            assert_true(st == RKV_OK || (!evict && st == RKV_OUT_OF_MEMORY));
            stored += st == RKV_OK;
            refused += st != RKV_OK;
        }
        struct rkv_index_geom g = rkv_index_geom_from(e.h->index_base, e.h->index_geometry);
        assert_int_equal(rkv_index_count(&g), start); /* never grew */
        assert_true(u.takes >= 1);
        assert_int_equal(pages_held(&e, e.h->index_offset + start * 64, e.h->heap_offset), 0);
        assert_true(evict ? refused == 0 : refused > 0);
        struct rkv_table_stats st = stats(&e);
        assert_true(st.items <= start * RKV_SLOTS_PER_BUCKET);
        assert_int_equal(st.items + st.evictions, stored);
        env_free(&e);
    }
}

static void test_config_refused(void **state)
{
    (void)state;
    static uint8_t mem[4 * MiB] __attribute__((aligned(4096)));
    struct rkv_table *t;
    char err[512];
    struct rkv_table_config c = { .max_value_len = 2 * MiB };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    assert_non_null(strstr(err, "slab page size"));
    c = (struct rkv_table_config){ .slab_page_size = 1000 };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    c = (struct rkv_table_config){ .index_share = 0.95 };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    c = (struct rkv_table_config){ .item_size_hint = RKV_MIN_ITEM_SIZE - 1 };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    assert_non_null(strstr(err, "item size hint"));
    c = (struct rkv_table_config){ .evict = (enum rkv_evict_policy)7 };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    c = (struct rkv_table_config){ .max_key_len = 300 };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    c = (struct rkv_table_config){ .growth_factor = 1.001 };
    assert_int_equal(rkv_table_create(mem, sizeof mem, &c, &t, err, sizeof err), RKV_INVALID);
    assert_int_equal(rkv_table_create(mem, 64 * 1024, NULL, &t, err, sizeof err), RKV_INVALID);
    assert_non_null(strstr(err, "too small"));
}

/* ------------------------------------------------------------ writes */

static void test_insert_update_delete(void **state)
{
    (void)state;
    struct env e;
    uint64_t v1, v2;
    env_make(&e, 8 * MiB, NULL);

    assert_int_equal(put_mode(&e, "alpha", 5, "one", 3, RKV_SET, 0, 0, &v1), RKV_OK);
    assert_string_equal(get_str(&e, "alpha"), "one");
    const struct rkv_item *old = rkv_table_find(e.t, "alpha", 5);
    assert_non_null(old);
    assert_int_equal(rkv_item_version(old), v1);
    assert_int_equal(rkv_item_state(old) & ~RKV_ITEM_ACCESS_MASK, 0); /* live: no mark, no meta flag */

    assert_int_equal(put_mode(&e, "alpha", 5, "two", 3, RKV_SET, 0, 0, &v2), RKV_OK);
    assert_true(v2 > v1);
    assert_int_equal(rkv_item_state(old) & RKV_ITEM_OBSOLETE, RKV_ITEM_OBSOLETE); /* out of place */
    assert_string_equal(get_str(&e, "alpha"), "two");
    struct rkv_lookup l;
    char buf[8];
    assert_int_equal(get(&e, "alpha", 5, 0, buf, sizeof buf, &l), RKV_OK);
    assert_int_equal(l.version, v2);

    assert_int_equal(rkv_table_delete(e.t, "alpha", 5), RKV_OK);
    assert_null(get_str(&e, "alpha"));
    assert_null(rkv_table_find(e.t, "alpha", 5));
    assert_int_equal(rkv_table_delete(e.t, "alpha", 5), RKV_NOT_FOUND);

    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.puts, 2);
    assert_int_equal(s.deletes, 1);
    assert_int_equal(s.items, 0);
    assert_int_equal(s.item_bytes, 0);
    env_free(&e);
}

static void test_key_and_value_sizes(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 16 * MiB, NULL);
    uint8_t key[RKV_MAX_KEY_LEN + 1];
    const uint32_t key_lens[] = { 1, 2, 17, 64, 249, 250 };

    /* keys from 1 byte to the maximum, binary (NULs included) */
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(key_lens); i++) {
        for (uint32_t b = 0; b < key_lens[i]; b++)
            key[b] = (uint8_t)(b % 3 == 0 ? 0 : b + i);
        uint32_t val = 1000 + i;
        assert_int_equal(put_mode(&e, key, key_lens[i], &val, sizeof val, RKV_SET, 0, 0, NULL),
                         RKV_OK);
    }
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(key_lens); i++) {
        for (uint32_t b = 0; b < key_lens[i]; b++)
            key[b] = (uint8_t)(b % 3 == 0 ? 0 : b + i);
        uint32_t val = 0;
        assert_int_equal(get(&e, key, key_lens[i], 0, &val, sizeof val, NULL), RKV_OK);
        assert_int_equal(val, 1000 + i);
    }
    /* keys that differ only after a NUL are different keys */
    assert_int_equal(put_mode(&e, "a\0b", 3, "1", 1, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(put_mode(&e, "a\0c", 3, "2", 1, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(put_mode(&e, "a", 1, "3", 1, RKV_SET, 0, 0, NULL), RKV_OK);
    char c;
    assert_int_equal(get(&e, "a\0b", 3, 0, &c, 1, NULL), RKV_OK);
    assert_int_equal(c, '1');
    assert_int_equal(get(&e, "a\0c", 3, 0, &c, 1, NULL), RKV_OK);
    assert_int_equal(c, '2');
    assert_int_equal(get(&e, "a", 1, 0, &c, 1, NULL), RKV_OK);
    assert_int_equal(c, '3');

    /* refused keys */
    memset(key, 'k', sizeof key);
    assert_int_equal(put_mode(&e, key, RKV_MAX_KEY_LEN + 1, "v", 1, RKV_SET, 0, 0, NULL),
                     RKV_TOO_LARGE);
    assert_int_equal(put_mode(&e, key, 0, "v", 1, RKV_SET, 0, 0, NULL), RKV_INVALID);
    assert_int_equal(put_mode(&e, NULL, 3, "v", 1, RKV_SET, 0, 0, NULL), RKV_INVALID);
    assert_int_equal(rkv_table_delete(e.t, key, 0), RKV_INVALID);
    assert_int_equal(rkv_table_delete(e.t, key, RKV_MAX_KEY_LEN + 1), RKV_TOO_LARGE);
    assert_int_equal(get(&e, key, RKV_MAX_KEY_LEN + 1, 0, NULL, 0, NULL), RKV_TOO_LARGE);

    /* values from 0 bytes to the maximum, with the longest key */
    uint32_t max = e.h->max_value_len;
    uint8_t *big = malloc(max + 1), *back = malloc(max + 1);
    for (uint32_t i = 0; i <= max; i++)
        big[i] = (uint8_t)(i * 7 + 3);
    struct rkv_lookup l;
    assert_int_equal(put_mode(&e, "empty", 5, NULL, 0, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(get(&e, "empty", 5, 0, NULL, 0, &l), RKV_OK);
    assert_int_equal(l.value_len, 0);
    assert_int_equal(put_mode(&e, key, RKV_MAX_KEY_LEN, big, max, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(get(&e, key, RKV_MAX_KEY_LEN, 0, back, max, &l), RKV_OK);
    assert_int_equal(l.value_len, max);
    assert_memory_equal(back, big, max);
    assert_int_equal(get(&e, key, RKV_MAX_KEY_LEN, 0, back, 10, &l), RKV_BUFFER_TOO_SMALL);
    assert_int_equal(l.value_len, max);
    assert_int_equal(put_mode(&e, key, RKV_MAX_KEY_LEN, big, max + 1, RKV_SET, 0, 0, NULL),
                     RKV_TOO_LARGE);

    /* a shorter key leaves its room to the value (the tcp door stores
     * memcached's largest values so): an item no larger than the longest
     * key's with the longest value; read with a buffer of max_value_len it
     * is RKV_BUFFER_TOO_SMALL with its length */
    uint32_t room = max + e.h->max_key_len - 3;
    uint8_t *bigger = malloc(room + 1), *back2 = malloc(room);
    for (uint32_t i = 0; i <= room; i++)
        bigger[i] = (uint8_t)(i * 5 + 1);
    assert_int_equal(put_mode(&e, "big", 3, bigger, room + 1, RKV_SET, 0, 0, NULL), RKV_TOO_LARGE);
    assert_int_equal(put_mode(&e, "big", 3, bigger, room, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(get(&e, "big", 3, 0, back, max, &l), RKV_BUFFER_TOO_SMALL);
    assert_int_equal(l.value_len, room);
    assert_int_equal(get(&e, "big", 3, 0, back2, room, &l), RKV_OK);
    assert_memory_equal(back2, bigger, room);
    free(bigger);
    free(back2);

    /* malformed value sources and modes */
    struct rkv_value_src none = { .len = 5 };
    assert_int_equal(rkv_table_put(e.t, "k", 1, &none, RKV_SET, 0, 0, 0, NULL), RKV_INVALID);
    assert_int_equal(rkv_table_put(e.t, "k", 1, NULL, RKV_SET, 0, 0, 0, NULL), RKV_INVALID);
    assert_int_equal(put_mode(&e, "k", 1, "v", 1, (rkv_put_mode)9, 0, 0, NULL), RKV_INVALID);
    free(big);
    free(back);
    env_free(&e);
}

struct pull_src {
    uint8_t fill;
    rkv_status result;
};

static rkv_status pull_fill(void *ctx, void *dst, uint32_t len)
{
    struct pull_src *p = ctx;
    memset(dst, p->fill, len);
    return p->result;
}

static void test_pulled_value(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    struct pull_src ps = { .fill = 'p', .result = RKV_OK };
    struct rkv_value_src src = { .pull = pull_fill, .ctx = &ps, .len = 5000 };
    assert_int_equal(rkv_table_put(e.t, "pulled", 6, &src, RKV_SET, 0, 0, 0, NULL), RKV_OK);
    uint8_t buf[5000];
    assert_int_equal(get(&e, "pulled", 6, 0, buf, sizeof buf, NULL), RKV_OK);
    for (unsigned i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 'p');

    /* a failed pull stores nothing and leaks nothing */
    struct rkv_table_stats before = stats(&e);
    ps = (struct pull_src){ .fill = 'q', .result = RKV_CONNECTION };
    assert_int_equal(rkv_table_put(e.t, "pulled", 6, &src, RKV_SET, 0, 0, 0, NULL), RKV_CONNECTION);
    struct rkv_table_stats after = stats(&e);
    assert_int_equal(after.items, before.items);
    assert_int_equal(after.bytes_used, before.bytes_used);
    assert_int_equal(get(&e, "pulled", 6, 0, buf, sizeof buf, NULL), RKV_OK);
    assert_int_equal(buf[0], 'p');
    env_free(&e);
}

static void test_put_modes(void **state)
{
    (void)state;
    struct env e;
    uint64_t v1, v2, v3;
    env_make(&e, 8 * MiB, NULL);

    assert_int_equal(put_mode(&e, "k", 1, "a", 1, RKV_REPLACE, 0, 0, NULL), RKV_NOT_STORED);
    assert_int_equal(put_mode(&e, "k", 1, "a", 1, RKV_CAS, 1, 0, NULL), RKV_NOT_STORED);
    assert_null(get_str(&e, "k"));
    assert_int_equal(put_mode(&e, "k", 1, "a", 1, RKV_ADD, 0, 0, &v1), RKV_OK);
    assert_int_equal(put_mode(&e, "k", 1, "b", 1, RKV_ADD, 0, 0, NULL), RKV_EXISTS);
    assert_string_equal(get_str(&e, "k"), "a");
    assert_int_equal(put_mode(&e, "k", 1, "c", 1, RKV_REPLACE, 0, 0, &v2), RKV_OK);
    assert_string_equal(get_str(&e, "k"), "c");
    assert_int_equal(put_mode(&e, "k", 1, "d", 1, RKV_CAS, v1, 0, NULL), RKV_CAS_MISMATCH);
    assert_string_equal(get_str(&e, "k"), "c");
    assert_int_equal(put_mode(&e, "k", 1, "e", 1, RKV_CAS, v2, 0, &v3), RKV_OK);
    assert_true(v3 > v2 && v2 > v1);
    assert_string_equal(get_str(&e, "k"), "e");
    assert_int_equal(put_mode(&e, "k", 1, "f", 1, RKV_CAS, v2, 0, NULL), RKV_CAS_MISMATCH);
    /* a failed conditional write leaves the heap as it was */
    assert_int_equal(stats(&e).items, 1);
    env_free(&e);
}

static void test_incr(void **state)
{
    (void)state;
    struct env e;
    uint64_t r, v;
    env_make(&e, 8 * MiB, NULL);

    assert_int_equal(rkv_table_incr(e.t, "n", 1, 1, &r), RKV_NOT_FOUND);
    struct rkv_value_src src = { .data = "10", .len = 2 };
    assert_int_equal(rkv_table_put(e.t, "n", 1, &src, RKV_SET, 0, 500, 77, &v), RKV_OK);
    uint32_t expire_at = rkv_item_expire_at(rkv_table_find(e.t, "n", 1));
    assert_int_equal(rkv_table_incr(e.t, "n", 1, 5, &r), RKV_OK);
    assert_int_equal(r, 15);
    assert_string_equal(get_str(&e, "n"), "15");
    const struct rkv_item *it = rkv_table_find(e.t, "n", 1);
    assert_true(rkv_item_version(it) > v);         /* a new item */
    assert_int_equal(rkv_item_user_flags(it), 77); /* flags and expiry carried over */
    assert_int_equal(rkv_item_expire_at(it), expire_at);
    assert_int_equal(rkv_table_incr(e.t, "n", 1, -20, &r), RKV_OK); /* saturates at 0 */
    assert_int_equal(r, 0);
    assert_string_equal(get_str(&e, "n"), "0");
    assert_int_equal(rkv_table_incr(e.t, "n", 1, INT64_MIN, &r), RKV_OK);
    assert_int_equal(r, 0);
    assert_int_equal(rkv_table_incr(e.t, "n", 1, INT64_MAX, &r), RKV_OK);
    assert_int_equal(r, (uint64_t)INT64_MAX);

    assert_int_equal(put(&e, "max", "18446744073709551615"), RKV_OK);
    assert_int_equal(rkv_table_incr(e.t, "max", 3, 1, &r), RKV_OK); /* wraps, as memcached */
    assert_int_equal(r, 0);
    assert_int_equal(put(&e, "lead", "007"), RKV_OK);
    assert_int_equal(rkv_table_incr(e.t, "lead", 4, 1, &r), RKV_OK);
    assert_string_equal(get_str(&e, "lead"), "8");

    /* read as memcached's incr reads a counter: a decr through the tcp door
     * leaves "9 " where "10" was, and the native incr must count on from it */
    static const char *const padded[] = { "9 ", "9  \t", " 9", "+9", "9\r\n", "0009" };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(padded); i++) {
        assert_int_equal(put(&e, "p", padded[i]), RKV_OK);
        assert_int_equal(rkv_table_incr(e.t, "p", 1, 1, &r), RKV_OK);
        assert_int_equal(r, 10);
        assert_string_equal(get_str(&e, "p"), "10");
    }
    static const char *const not_numbers[] = {
        "", " ", "abc", "12a", "-5", "5x ", "18446744073709551616", "123456789012345678901"
    };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(not_numbers); i++) {
        assert_int_equal(put(&e, "x", not_numbers[i]), RKV_OK);
        assert_int_equal(rkv_table_incr(e.t, "x", 1, 1, &r), RKV_NOT_NUMBER);
    }
    assert_int_equal(put_mode(&e, "z", 1, "1\0", 2, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(rkv_table_incr(e.t, "z", 1, 1, &r), RKV_OK); /* a NUL ends it, as for memcached */
    assert_int_equal(r, 2);
    assert_int_equal(rkv_table_incr(e.t, "", 0, 1, &r), RKV_INVALID);
    assert_int_equal(stats(&e).incrs, 13);
    env_free(&e);
}

/* ------------------------------------------------------------ TTL */

/* A clock the test drives: the table's time source (rkv_table_config.now_ns). */
static uint64_t fake_ns = 1000 * 1000000000ull;

static uint64_t fake_now(void)
{
    return fake_ns;
}

static void test_ttl(void **state)
{
    (void)state;
    struct env e, d;
    struct rkv_table_config fc = { .now_ns = fake_now };
    env_make(&e, 8 * MiB, &fc);
    struct rkv_table_config c = { .default_ttl = 30 };
    env_make(&d, 8 * MiB, &c);

    uint32_t now = rkv_table_clock(e.t);
    assert_int_equal(put_mode(&e, "short", 5, "s", 1, RKV_SET, 0, 1, NULL), RKV_OK);
    assert_int_equal(put_mode(&e, "never", 5, "n", 1, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(put_mode(&e, "long", 4, "l", 1, RKV_SET, 0, 100, NULL), RKV_OK);
    assert_int_equal(put_mode(&e, "huge", 4, "h", 1, RKV_SET, 0, RKV_TTL_NEVER - 1, NULL), RKV_OK);
    assert_int_equal(rkv_item_expire_at(rkv_table_find(e.t, "short", 5)), now + 1);
    assert_int_equal(rkv_item_expire_at(rkv_table_find(e.t, "never", 5)), 0);
    assert_int_equal(rkv_item_expire_at(rkv_table_find(e.t, "huge", 4)), UINT32_MAX);
    assert_int_equal(put_mode(&d, "dflt", 4, "d", 1, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(rkv_item_expire_at(rkv_table_find(d.t, "dflt", 4)), rkv_table_clock(d.t) + 30);
    /* RKV_TTL_NEVER overrides the default TTL */
    assert_int_equal(put_mode(&d, "forever", 7, "f", 1, RKV_SET, 0, RKV_TTL_NEVER, NULL), RKV_OK);
    assert_int_equal(rkv_item_expire_at(rkv_table_find(d.t, "forever", 7)), 0);

    /* the test clock has not moved: a tick keeps it; one second later it is gone */
    rkv_table_tick(e.t);
    assert_string_equal(get_str(&e, "short"), "s");
    fake_ns += 1000000000ull;
    rkv_table_tick(e.t);
    assert_int_equal(rkv_table_clock(e.t), now + 1);
    assert_null(get_str(&e, "short"));
    assert_null(rkv_table_find(e.t, "short", 5));
    assert_string_equal(get_str(&e, "never"), "n");
    assert_string_equal(get_str(&e, "long"), "l");
    /* the tick sweeps the index incrementally; within a few ticks it is gone */
    for (unsigned i = 0; i < 64 && stats(&e).expirations == 0; i++)
        rkv_table_tick(e.t);
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.expirations, 1);
    assert_int_equal(s.items, 3);
    /* the expired key is absent for ADD, and gone for DELETE */
    assert_int_equal(rkv_table_delete(e.t, "short", 5), RKV_NOT_FOUND);
    assert_int_equal(put_mode(&e, "short", 5, "t", 1, RKV_ADD, 0, 0, NULL), RKV_OK);
    env_free(&e);
    env_free(&d);
}

/* Delete under a CAS on the version: only the item that was read goes; a
 * write that replaced it in between stays, untouched. */
static void test_delete_version(void **state)
{
    (void)state;
    struct env e;
    uint64_t v1, v2;
    struct rkv_table_config fc = { .now_ns = fake_now };
    env_make(&e, 8 * MiB, &fc);

    assert_int_equal(rkv_table_delete_version(e.t, "k", 1, 1), RKV_NOT_FOUND);
    assert_int_equal(put_mode(&e, "k", 1, "a", 1, RKV_SET, 0, 0, &v1), RKV_OK);
    const struct rkv_item *first = rkv_table_find(e.t, "k", 1);
    assert_int_equal(put_mode(&e, "k", 1, "b", 1, RKV_SET, 0, 0, &v2), RKV_OK);
    /* the version read is gone: the newer item stays, and the heap as it was */
    assert_int_equal(rkv_table_delete_version(e.t, "k", 1, v1), RKV_CAS_MISMATCH);
    assert_string_equal(get_str(&e, "k"), "b");
    assert_int_equal(stats(&e).items, 1);
    assert_int_equal(stats(&e).deletes, 0);
    /* the live version goes, for the server and a one-sided reader alike */
    const struct rkv_item *second = rkv_table_find(e.t, "k", 1);
    assert_int_equal(rkv_table_delete_version(e.t, "k", 1, v2), RKV_OK);
    assert_int_equal(rkv_item_state(second) & RKV_ITEM_OBSOLETE, RKV_ITEM_OBSOLETE);
    assert_int_equal(rkv_item_state(first) & RKV_ITEM_OBSOLETE, RKV_ITEM_OBSOLETE);
    assert_null(get_str(&e, "k"));
    assert_null(rkv_table_find(e.t, "k", 1));
    assert_int_equal(stats(&e).items, 0);
    assert_int_equal(stats(&e).deletes, 1);
    assert_int_equal(rkv_table_delete_version(e.t, "k", 1, v2), RKV_NOT_FOUND);
    /* an expired item is dead whatever the version: not found, and unlinked */
    assert_int_equal(put_mode(&e, "x", 1, "c", 1, RKV_SET, 0, 1, &v1), RKV_OK);
    fake_ns += 1000000000ull;
    assert_int_equal(rkv_table_delete_version(e.t, "x", 1, v1), RKV_NOT_FOUND);
    assert_int_equal(stats(&e).items, 0);
    /* a bad key is refused as for a delete */
    assert_int_equal(rkv_table_delete_version(e.t, "x", 0, v1), RKV_INVALID);
    env_free(&e);
}

/* Server and client agree on expiry at the boundary (common/clock.h): an
 * item with expire_at E is live while clock < E and gone from clock == E, to
 * the server (find, DELETE) and to a client lookup alike; and the clock is
 * right from the first second (it once stayed at 1 for two seconds). */
static void test_expiry_boundary(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config fc = { .now_ns = fake_now };
    uint64_t start = fake_ns;
    env_make(&e, 8 * MiB, &fc);

    fake_ns = start + 500000000ull; /* 0.5 s: clock 1 */
    assert_int_equal(rkv_table_clock(e.t), 1);
    assert_int_equal(put_mode(&e, "k", 1, "v", 1, RKV_SET, 0, 1, NULL), RKV_OK);
    assert_int_equal(rkv_item_expire_at(rkv_table_find(e.t, "k", 1)), 2);

    fake_ns = start + 1000000000ull - 1; /* the last instant of clock 1 */
    assert_int_equal(rkv_table_clock(e.t), 1);
    assert_non_null(rkv_table_find(e.t, "k", 1));
    assert_string_equal(get_str(&e, "k"), "v");

    fake_ns = start + 1000000000ull;           /* clock 2 = expire_at: gone */
    assert_int_equal(rkv_table_clock(e.t), 2); /* without a tick in between */
    assert_null(get_str(&e, "k"));
    assert_null(rkv_table_find(e.t, "k", 1));
    assert_int_equal(rkv_table_delete(e.t, "k", 1), RKV_NOT_FOUND);
    /* the header (what shm readers use) shows it after the tick */
    assert_int_equal(e.h->clock, 1);
    rkv_table_tick(e.t);
    assert_int_equal(e.h->clock, 2);

    /* one comparison for both sides */
    assert_false(rkv_expired(0, UINT32_MAX));
    assert_false(rkv_expired(5, 4));
    assert_true(rkv_expired(5, 5));
    assert_true(rkv_expired(5, 6));
    env_free(&e);
    fake_ns = start;
}

/* A client's extrapolated clock is never ahead of the server's: for clocks
 * the server computed at any instant T and a client that got it at any
 * later instant, the estimate at any later time is at most the server's
 * clock then (so a GET that calls an item expired is never contradicted by
 * a DELETE after it). Swept over instants around second boundaries. */
static void test_clock_extrapolation_never_ahead(void **state)
{
    (void)state;
    static const uint64_t frac[] = { 0, 1, 499999999, 500000000, 999999999 };
    const uint64_t s = 1000000000ull, start = 7 * s + 123;
    unsigned checked = 0;
    assert_int_equal(rkv_clock_at(start, start), 1);
    assert_int_equal(rkv_clock_at(start, start - 1), 1); /* before start: 1, not garbage */
    assert_int_equal(rkv_clock_at(start, start + s - 1), 1);
    assert_int_equal(rkv_clock_at(start, start + s), 2);
    assert_int_equal(rkv_clock_at(0, UINT64_MAX), UINT32_MAX); /* saturates */
    assert_int_equal(rkv_clock_extrapolate(UINT32_MAX - 1, 0, 10 * s), UINT32_MAX);
    for (uint64_t ts = 0; ts < 3; ts++)
        for (unsigned a = 0; a < RKV_ARRAY_SIZE(frac); a++) {
            uint64_t T = start + ts * s + frac[a]; /* the server computes */
            uint32_t seen = rkv_clock_at(start, T);
            for (unsigned b = 0; b < RKV_ARRAY_SIZE(frac); b++) {
                uint64_t got = T + frac[b]; /* the client receives */
                for (uint64_t later = 0; later < 4; later++)
                    for (unsigned c = 0; c < RKV_ARRAY_SIZE(frac); c++) {
                        uint64_t t = got + later * s + frac[c];
                        uint32_t est = rkv_clock_extrapolate(seen, got, t);
                        assert_true(est <= rkv_clock_at(start, t));
                        assert_true(est + 1 >= rkv_clock_at(start, t) - 1); /* lags < 2 */
                        checked++;
                    }
            }
        }
    assert_int_equal(checked, 3 * 5 * 5 * 4 * 5);
}

/* ------------------------------------------------------------ load factor */

static void test_fill_index_to_limit(void **state)
{
    (void)state;
    /* 1024 buckets (7168 slots) in front of a heap with room for ~1M small
     * items: the index is the limit. */
    struct rkv_table_config c = { .index_share = 1024.0 * 64 / (64 * MiB) };
    struct env e;
    env_make(&e, 64 * MiB, &c);
    assert_int_equal(e.h->index_capacity, 1024);
    const uint64_t slots = 1024 * RKV_SLOTS_PER_BUCKET;
    char key[32], val[16];
    unsigned n = 0;
    rkv_status st;
    for (;; n++) {
        snprintf(key, sizeof key, "lf-%08u", n);
        snprintf(val, sizeof val, "%08u", n);
        if ((st = put(&e, key, val)) != RKV_OK)
            break;
    }
    assert_int_equal(st, RKV_OUT_OF_MEMORY);
    double load = (double)n / (double)slots;
    print_message("index full at %u of %llu slots: load factor %.3f\n", n,
                  (unsigned long long)slots, load);
    assert_true(load >= 0.90);
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.items, n);
    assert_int_equal(s.insert_failures, 1);
    assert_true(s.displacements > 0);

    /* nothing stored was lost, displaced or not */
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "lf-%08u", i);
        snprintf(val, sizeof val, "%08u", i);
        const char *got = get_str(&e, key);
        assert_non_null(got);
        assert_string_equal(got, val);
    }
    /* the failing insert keeps failing cleanly; updates still work */
    assert_int_equal(put(&e, key, "updated"), RKV_OK);
    snprintf(key, sizeof key, "lf-%08u", n);
    assert_int_equal(put(&e, key, "x"), RKV_OUT_OF_MEMORY);
    assert_null(get_str(&e, key));
    s = stats(&e);
    assert_int_equal(s.items, n);
    assert_int_equal(s.insert_failures, 2);
    /* the failed items went back (items of 47 bytes, in the 48-byte class) */
    assert_int_equal(s.bytes_used,
                     (uint64_t)n * RKV_ALIGN_UP(rkv_item_size(11, 8, 0, 0), RKV_ITEM_ALIGN));
    env_free(&e);
}

/* ------------------------------------------------------------ eviction */

/* A table whose heap (27 pages of 4 KiB) fills long before its index. */
/* A clock that moves one second per reading: every grace period has passed
 * by the time the allocator asks, so what is evicted and reused does not
 * depend on how fast the machine runs the test. */
static uint64_t leap_ns = 1000 * 1000000000ull;
static uint64_t leaping_now(void)
{
    return leap_ns += 1000000000ull;
}

static void small_heap(struct env *e, enum rkv_evict_policy p)
{
    struct rkv_table_config c = {
        .slab_page_size = 4096, .grace_ms = 10, .evict = p, .now_ns = leaping_now, .item_size_hint = 80
    }; /* the index sized at start */
    env_make(e, 128 * 1024, &c);
}

static void key_of(char *key, size_t len, unsigned i)
{
    snprintf(key, len, "evict-%08u", i);
}

/* 112-byte values: items of 154 bytes, all in one class. */
static rkv_status put_n(struct env *e, unsigned i)
{
    char key[32], val[112];
    key_of(key, sizeof key, i);
    memset(val, 'a' + (int)(i % 26), sizeof val);
    return put_mode(e, key, (uint32_t)strlen(key), val, sizeof val, RKV_SET, 0, 0, NULL);
}

/* Found with the right value (true), or absent (false); never anything else. */
static bool has_n(struct env *e, unsigned i)
{
    char key[32], val[112];
    struct rkv_lookup l;
    key_of(key, sizeof key, i);
    rkv_status st = get(e, key, (uint32_t)strlen(key), 0, val, sizeof val, &l);
    if (st == RKV_NOT_FOUND)
        return false;
    assert_int_equal(st, RKV_OK);
    assert_int_equal(l.value_len, 112);
    for (unsigned b = 0; b < 100; b++)
        assert_int_equal(val[b], 'a' + (int)(i % 26));
    return true;
}

/* The index as a trace of slot stores shows it. */
struct store_trace {
    const struct rkv_bucket *buckets; /* the real index, to check versions */
    uint64_t nslots;
    uint64_t *mirror; /* every slot word, as the trace built it */
    uint64_t stores, even_during_store, lost;
};

static void trace_store(void *ctx, uint64_t bucket, unsigned slot, uint64_t word)
{
    struct store_trace *tr = ctx;
    uint64_t i = bucket * RKV_SLOTS_PER_BUCKET + slot, old = tr->mirror[i];
    tr->stores++;
    if ((tr->buckets[bucket].version & 1) == 0)
        tr->even_during_store++; /* a reader could not tell the bucket was changing */
    tr->mirror[i] = word;
    if (old != 0 && old != word) {
        bool elsewhere = false;
        for (uint64_t j = 0; j < tr->nslots && !elsewhere; j++)
            elsewhere = tr->mirror[j] == old;
        tr->lost += !elsewhere; /* an item was, for a moment, in no bucket */
    }
}

/* Inserting new keys only, no item may ever leave the index: a cuckoo move
 * writes the destination slot before it clears the source (design.md invariant 4), and
 * every slot store happens while its bucket's version is odd. */
static void test_displacement_order(void **state)
{
    (void)state;
    struct rkv_table_config c = { .index_share = 64.0 * 64 / (4 * MiB) };
    struct env e;
    env_make(&e, 4 * MiB, &c);
    struct store_trace tr = {
        .buckets = (const struct rkv_bucket *)(const void *)((const uint8_t *)e.region.base +
                                                             e.h->index_offset),
        .nslots = e.h->index_capacity * RKV_SLOTS_PER_BUCKET,
    };
    tr.mirror = calloc(tr.nslots, sizeof(uint64_t));
    rkv_table_set_store_observer(e.t, trace_store, &tr);
    unsigned n = 0;
    while (put_n(&e, n) == RKV_OK)
        n++;
    rkv_table_set_store_observer(e.t, NULL, NULL);
    struct rkv_table_stats s = stats(&e);
    print_message("order: %u inserts, %llu stores, %llu displacements\n", n,
                  (unsigned long long)tr.stores, (unsigned long long)s.displacements);
    assert_true(s.displacements > 20);
    assert_int_equal(tr.stores, n + 2 * s.displacements);
    assert_int_equal(tr.even_during_store, 0);
    assert_int_equal(tr.lost, 0);
    /* the trace saw every change: it ends equal to the index */
    for (uint64_t i = 0; i < tr.nslots; i++)
        assert_int_equal(tr.mirror[i],
                         tr.buckets[i / RKV_SLOTS_PER_BUCKET].slot[i % RKV_SLOTS_PER_BUCKET]);
    for (unsigned i = 0; i < n; i++)
        assert_true(has_n(&e, i));
    free(tr.mirror);
    env_free(&e);
}

static void test_heap_full_without_eviction(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_NONE);
    unsigned n = 0;
    rkv_status st;
    while ((st = put_n(&e, n)) == RKV_OK)
        n++;
    assert_int_equal(st, RKV_OUT_OF_MEMORY);
    struct rkv_table_stats s = stats(&e);
    assert_true(n > 400);
    /* the heap, not the index, was the limit: the index grew only as far as
     * its items needed and had room left */
    assert_true(s.slots > n && s.slots <= e.h->index_capacity * RKV_SLOTS_PER_BUCKET);
    assert_int_equal(s.items, n);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.pages_unassigned, 0);
    for (unsigned i = 0; i < n; i++)
        assert_true(has_n(&e, i));
    env_free(&e);
}

/* After n stores of keys 0..n-1 with eviction on: something was evicted,
 * every key is either present with its own value or counted as evicted. */
static struct rkv_table_stats evicted_consistently(struct env *e, unsigned n)
{
    struct rkv_table_stats s = stats(e);
    unsigned present = 0;
    assert_true(s.evictions > 0);
    assert_int_equal(s.items + s.evictions, n);
    for (unsigned i = 0; i < n; i++)
        present += has_n(e, i);
    assert_int_equal(present, s.items);
    return s;
}

static void test_evict_random(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_RANDOM);
    for (unsigned i = 0; i < 3000; i++) {
        assert_int_equal(put_n(&e, i), RKV_OK);
        assert_true(has_n(&e, i)); /* the item just stored is never the victim */
    }
    struct rkv_table_stats s = evicted_consistently(&e, 3000);
    print_message("random: %llu items, %llu evictions\n", (unsigned long long)s.items,
                  (unsigned long long)s.evictions);
    env_free(&e);
}

/* A server's page (rkv_table_page_pair_room) holds two items of 512 KiB
 * values with the longest keys, while the largest item stays 1 MiB. */
static void test_page_holds_two_half_page_values(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config c = {
        .slab_page_size = (1u << 20) + rkv_table_page_pair_room(RKV_MAX_KEY_LEN),
        .max_value_len = (1u << 20) - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN,
    };
    env_make(&e, 8 * MiB, &c);
    static char val[1u << 20];
    char key[RKV_MAX_KEY_LEN];
    memset(val, 'v', sizeof val);
    memset(key, 'a', sizeof key);
    assert_int_equal(put_mode(&e, key, sizeof key, val, 512 * 1024, RKV_SET, 0, 0, NULL), RKV_OK);
    key[0] = 'b';
    assert_int_equal(put_mode(&e, key, sizeof key, val, 512 * 1024, RKV_SET, 0, 0, NULL), RKV_OK);
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.items, 2);
    unsigned cls = 0;
    while (e.h->class_size[cls] < rkv_item_size(RKV_MAX_KEY_LEN, 512 * 1024, 0, 0))
        cls++;
    struct rkv_table_class_stats cs;
    rkv_table_class_stats(e.t, cls, &cs);
    assert_int_equal(cs.slab.per_page, 2);
    assert_int_equal(cs.slab.pages, 1);
    /* the largest item is 1 MiB, as without the room: a 1-byte key's value up to it */
    uint32_t most = (1u << 20) - RKV_ITEM_HEADER_MAX - 1;
    assert_int_equal(put_mode(&e, "k", 1, val, most, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_not_equal(put_mode(&e, "l", 1, val, most + 1, RKV_SET, 0, 0, NULL), RKV_OK);
    env_free(&e);
}

/* A server's pages (rkv_table_page_pair_room) move between classes as 1 MiB
 * ones did: a heap filled with small items stores 512 KiB values, two a
 * page, then small items again, then large ones: every PUT stored, the
 * newest readable. */
static void test_mix_shifts_small_large_small(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config c = {
        .slab_page_size = (1u << 20) + rkv_table_page_pair_room(RKV_MAX_KEY_LEN),
        .max_value_len = (1u << 20) - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN,
        .grace_ms = 1,
        .evict = RKV_EVICT_LRU,
    };
    env_make(&e, 8 * MiB, &c);
    static char big[512 * 1024], back[512 * 1024];
    char key[32], small[100];
    memset(big, 'b', sizeof big);
    memset(small, 's', sizeof small);
    for (unsigned round = 0; round < 2; round++) {
        unsigned n = 0;
        uint64_t ev = stats(&e).evictions;
        while (stats(&e).evictions == ev || n < 40000) { /* the heap is all small items */
            snprintf(key, sizeof key, "s%u.%u", round, n++);
            assert_int_equal(put_mode(&e, key, (uint32_t)strlen(key), small, sizeof small, RKV_SET,
                                      0, 0, NULL),
                             RKV_OK);
        }
        for (unsigned i = 0; i < 24; i++) { /* three heaps' worth of large items */
            snprintf(key, sizeof key, "b%u.%u", round, i);
            big[0] = (char)('a' + i % 26);
            assert_int_equal(put_mode(&e, key, (uint32_t)strlen(key), big, sizeof big, RKV_SET, 0,
                                      0, NULL),
                             RKV_OK);
            struct rkv_lookup l;
            assert_int_equal(get(&e, key, (uint32_t)strlen(key), 0, back, sizeof back, &l), RKV_OK);
            assert_int_equal(l.value_len, sizeof big);
            assert_memory_equal(back, big, sizeof big);
        }
    }
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.insert_failures, 0);
    assert_true(s.slab_reassigns >= 2);
    env_free(&e);
}

/* The evict-ahead reserve of a class of large items shrinks to what
 * RESERVE_MIN_BYTES holds (one 200 KB item), not eight of them: once writes
 * slow down, a full heap of 200 KB items keeps one free, not eight (with 95
 * items owned, the reserve's cap is 11). */
static void test_evict_reserve_of_large_items(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config c = { .evict = RKV_EVICT_LRU,
                                  .item_size_hint = 200 * 1000,
                                  .now_ns = fake_now };
    env_make(&e, 20 * MiB, &c);
    static char val[200 * 1000];
    memset(val, 'v', sizeof val);
    char key[32];
    unsigned cls = 0;
    while (e.h->class_size[cls] < rkv_item_size(16, sizeof val, 0, 0))
        cls++;
    for (unsigned i = 0; i < 300; i++) { /* fill past the heap, so that the class evicts */
        snprintf(key, sizeof key, "k%015u", i);
        assert_int_equal(put_mode(&e, key, 16, val, sizeof val, RKV_SET, 0, 0, NULL), RKV_OK);
        fake_ns += 200 * 1000000ull; /* past the grace period: freed items are reusable */
    }
    assert_true(stats(&e).evictions > 0);
    for (unsigned i = 0; i < 8; i++) { /* no writes: the reserve halves each tick */
        fake_ns += 1000000000ull;
        rkv_table_tick(e.t);
    }
    for (unsigned i = 0; i < 20; i++) { /* writes use up what the fill left free */
        snprintf(key, sizeof key, "n%015u", i);
        assert_int_equal(put_mode(&e, key, 16, val, sizeof val, RKV_SET, 0, 0, NULL), RKV_OK);
        fake_ns += 200 * 1000000ull;
    }
    struct rkv_table_class_stats cs;
    rkv_table_class_stats(e.t, cls, &cs);
    assert_true(cs.slab.pages * cs.slab.per_page >= 88); /* a cap of 11 */
    assert_true(cs.slab.ready + cs.slab.limbo + cs.slab.fresh <= 1);
    env_free(&e);
}

/* A PUT that finds its class dry, with what it evicted still inside the
 * grace period and no other class to take from, sleeps: each sleep is
 * counted in alloc_waits and its milliseconds in alloc_wait_ms. The clock
 * stands still, so the limbo never comes back and the PUT gives up after
 * three sleeps of grace_ms + 1 ms each. */
static void test_alloc_waits_counted(void **state)
{
    (void)state;
    struct rkv_table_config c = { .slab_page_size = 4096,
                                  .grace_ms = 10,
                                  .evict = RKV_EVICT_LRU,
                                  .now_ns = fake_now,
                                  .item_size_hint = 80 };
    struct env e;
    env_make(&e, 128 * 1024, &c);
    unsigned n = 0;
    rkv_status st;
    while ((st = put_n(&e, n)) == RKV_OK)
        assert_true(++n < 10000);
    assert_int_equal(st, RKV_OUT_OF_MEMORY);
    struct rkv_table_stats s = stats(&e);
    assert_true(s.evictions > 0);
    assert_int_equal(s.alloc_waits, 3);
    assert_int_equal(s.alloc_wait_ms, 3 * (10 + 1 + 1));
    fake_ns += 20 * 1000000ull; /* the limbo comes back: no wait */
    assert_int_equal(put_n(&e, n), RKV_OK);
    assert_int_equal(stats(&e).alloc_waits, 3);
    env_free(&e);
}

static void test_evict_lru_follows_hints(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_LRU);
    unsigned n = 0;
    while (stats(&e).evictions == 0)
        assert_int_equal(put_n(&e, n++), RKV_OK);

    /* The oldest quarter is what LRU would evict next; clients read those
     * keys, and their hints make them the most recently used. */
    unsigned hot[1024], nhot = 0;
    for (unsigned i = 0; i < n / 4; i++) {
        char key[32];
        struct rkv_lookup l;
        key_of(key, sizeof key, i);
        if (get(&e, key, (uint32_t)strlen(key), 0, NULL, 0, &l) == RKV_NOT_FOUND)
            continue; /* (found: BUFFER_TOO_SMALL, with the slot) */
        rkv_table_hints(e.t, &l.slot, 1);
        hot[nhot++] = i;
    }
    assert_true(nhot > n / 8);
    uint64_t ev0 = stats(&e).evictions;
    for (unsigned i = 0; i < n / 4; i++)
        assert_int_equal(put_n(&e, n + i), RKV_OK);
    struct rkv_table_stats s = stats(&e);
    print_message("lru: %u keys before eviction, %u hot, %llu evictions after\n", n, nhot,
                  (unsigned long long)(s.evictions - ev0));
    assert_true(s.evictions - ev0 >= n / 8);
    assert_int_equal(s.hints, nhot);
    for (unsigned i = 0; i < nhot; i++)
        assert_true(has_n(&e, hot[i]));
    /* and the ones evicted were the cold, old ones */
    unsigned cold_left = 0;
    for (unsigned i = n / 4; i < n / 2; i++)
        cold_left += has_n(&e, i);
    print_message("lru: %u of the %u next-oldest cold keys left\n", cold_left, n / 2 - n / 4);
    assert_true(cold_left < n / 8);
    env_free(&e);
}

/* Read key i through its slot word, as a client's hint does; false when
 * it is gone. */
static bool hint_n(struct env *e, unsigned i)
{
    char key[32];
    struct rkv_lookup l;
    key_of(key, sizeof key, i);
    if (get(e, key, (uint32_t)strlen(key), 0, NULL, 0, &l) == RKV_NOT_FOUND)
        return false; /* (found: BUFFER_TOO_SMALL, with the slot) */
    rkv_table_hints(e->t, &l.slot, 1);
    return true;
}

/* A full heap of n keys; the oldest quarter is read once (hinted), then a
 * one-pass scan of 1.5 n keys never read again (within s3fifo's use decay:
 * 1024 stores for a heap this small). Returns how many of the hot keys are
 * left; *hot: how many there were. */
static unsigned hot_after_scan(enum rkv_evict_policy p, unsigned *hot, unsigned *heap)
{
    struct env e;
    small_heap(&e, p);
    unsigned n = 0;
    while (stats(&e).evictions == 0)
        assert_int_equal(put_n(&e, n++), RKV_OK);
    unsigned hot_keys[1024], nhot = 0, kept = 0;
    for (unsigned i = 0; i < n / 4; i++)
        if (hint_n(&e, i))
            hot_keys[nhot++] = i;
    assert_true(n + n / 2 < 1024);
    for (unsigned i = 0; i < n + n / 2; i++)
        assert_int_equal(put_n(&e, n + i), RKV_OK);
    for (unsigned i = 0; i < nhot; i++)
        kept += has_n(&e, hot_keys[i]);
    evicted_consistently(&e, 2 * n + n / 2);
    env_free(&e);
    *hot = nhot;
    *heap = n;
    return kept;
}

/* s3fifo: an item read since it was stored outlives every item never read
 * (a one-hit item goes first), so a one-pass scan 1.5 times the heap's
 * size leaves the hot keys alone, where LRU loses them all (they were read
 * before the scan began). Sampling picks the victim from 16 items, so a hot
 * key goes only when every sampled item is hot (a quarter of the heap:
 * about 4^-16). */
static void test_s3fifo_scan_keeps_read_keys(void **state)
{
    (void)state;
    unsigned nhot, n, kept = hot_after_scan(RKV_EVICT_S3FIFO, &nhot, &n);
    print_message("s3fifo: %u keys fill the heap, %u of %u read keys kept through a scan of %u\n",
                  n, kept, nhot, n + n / 2);
    assert_true(nhot > n / 8);
    assert_int_equal(kept, nhot);
    kept = hot_after_scan(RKV_EVICT_LRU, &nhot, &n);
    print_message("lru: %u of %u read keys kept\n", kept, nhot);
    assert_true(kept < nhot / 8);
}

/* s3fifo: among items never read, the oldest goes first (a FIFO of new
 * items: the newest stores are still there), and the item just stored is
 * never the victim. */
static void test_s3fifo_unread_oldest_first(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_S3FIFO);
    unsigned n = 0;
    while (stats(&e).evictions == 0) {
        assert_int_equal(put_n(&e, n), RKV_OK);
        assert_true(has_n(&e, n++));
    }
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(put_n(&e, n + i), RKV_OK);
        assert_true(has_n(&e, n + i));
    }
    unsigned old_left = 0, new_left = 0;
    for (unsigned i = 0; i < n / 2; i++)
        old_left += has_n(&e, i); /* the oldest half of the first fill */
    for (unsigned i = 2 * n - n / 2; i < 2 * n; i++)
        new_left += has_n(&e, i); /* the newest half of the second */
    print_message("s3fifo: of %u oldest %u left, of %u newest %u left\n", n / 2, old_left, n / 2,
                  new_left);
    assert_true(old_left < n / 16);
    assert_true(new_left > n / 2 - n / 16);
    evicted_consistently(&e, 2 * n);
    env_free(&e);
}

/* s3fifo: a key evicted unread that comes back soon (a cache-aside fill
 * after its miss) is one the ghost remembers (evict_ghost.c): it starts
 * with one use, so a one-pass scan that follows leaves it, where a second
 * probation would make it the oldest never-read item and evict it first.
 * The ghost is direct-mapped (1024 entries here) and other keys evicted
 * unread overwrite some entries: most come back with their use, not all. */
static void test_s3fifo_ghost_readmits(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_S3FIFO);
    unsigned n = 0;
    while (stats(&e).evictions == 0)
        assert_int_equal(put_n(&e, n++), RKV_OK);
    for (unsigned i = 0; i < n / 4; i++) /* evicts about the oldest quarter, unread */
        assert_int_equal(put_n(&e, n + i), RKV_OK);
    unsigned back[1024], nback = 0, kept = 0;
    for (unsigned i = 0; i < n / 4; i++)
        if (!has_n(&e, i)) {
            assert_int_equal(put_n(&e, i), RKV_OK); /* missed: filled again */
            back[nback++] = i;
        }
    assert_true(n + n / 2 < 1024);
    for (unsigned i = 0; i < n + n / 2; i++) /* a scan of keys never read */
        assert_int_equal(put_n(&e, 2 * n + i), RKV_OK);
    for (unsigned i = 0; i < nback; i++)
        kept += has_n(&e, back[i]);
    print_message("s3fifo ghost: %u keys fill the heap; of %u evicted and filled again, %u kept "
                  "through a scan of %u\n",
                  n, nback, kept, n + n / 2);
    assert_true(nback > n / 8);
    assert_true(kept > nback / 2);
    env_free(&e);
}

/* s3fifo: a new value for a key that was read keeps the old item's uses
 * (an update is no reason to put an item back on probation), so read keys
 * updated before a one-pass scan stay as read keys do (hot_after_scan). */
static void test_s3fifo_update_keeps_uses(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_S3FIFO);
    unsigned n = 0;
    while (stats(&e).evictions == 0)
        assert_int_equal(put_n(&e, n++), RKV_OK);
    unsigned hot[1024], nhot = 0, kept = 0;
    for (unsigned i = 0; i < n / 4; i++)
        if (hint_n(&e, i))
            hot[nhot++] = i;
    for (unsigned i = 0; i < nhot; i++)
        assert_int_equal(put_n(&e, hot[i]), RKV_OK); /* a new value (the same bytes) */
    assert_true(n + n / 2 < 1024);
    for (unsigned i = 0; i < n + n / 2; i++)
        assert_int_equal(put_n(&e, n + i), RKV_OK);
    for (unsigned i = 0; i < nhot; i++)
        kept += has_n(&e, hot[i]);
    print_message("s3fifo: %u of %u read and updated keys kept through a scan of %u\n", kept, nhot,
                  n + n / 2);
    assert_true(nhot > n / 8);
    assert_int_equal(kept, nhot);
    env_free(&e);
}

/* s3fifo: a use decays. Keys read once, then left unread for more than
 * the decay period (four turnovers of the items, at least 1024 stores:
 * rkv_evict_tick; 2,700 here) while never-read
 * keys stream through, lose their use and go like any old item; keys read
 * again within every period keep theirs and stay. The store clock is the
 * test's: what decays depends on stores, not on time. */
static void test_s3fifo_use_decays(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_S3FIFO);
    unsigned n = 0;
    while (stats(&e).evictions == 0)
        assert_int_equal(put_n(&e, n++), RKV_OK);
    rkv_table_tick(e.t); /* the decay follows the items: 4 x n stores */
    assert_true(n < 1024);
    /* even keys of the oldest half: read once; odd ones: read every 256 stores */
    unsigned once[1024], kept[1024], nonce = 0, nkept = 0;
    for (unsigned i = 0; i < n / 2; i++) {
        if (!hint_n(&e, i))
            continue;
        if (i % 2 == 0)
            once[nonce++] = i;
        else
            kept[nkept++] = i;
    }
    unsigned next = n;
    for (unsigned round = 0; round < 8 * n / 256 + 1; round++) { /* twice the period */
        for (unsigned i = 0; i < 256; i++)
            assert_int_equal(put_n(&e, next++), RKV_OK);
        for (unsigned i = 0; i < nkept; i++)
            assert_true(hint_n(&e, kept[i])); /* read again: still there */
    }
    unsigned once_left = 0;
    for (unsigned i = 0; i < nonce; i++)
        once_left += has_n(&e, once[i]);
    print_message("s3fifo decay: %u of %u keys read once left after %u stores; %u re-read kept\n",
                  once_left, nonce, next - n, nkept);
    assert_true(nonce > n / 16 && nkept > n / 16);
    assert_true(once_left < nonce / 4);
    env_free(&e);
}

/* A value of `len` bytes under key "<prefix>-<i>"; RKV_OK or the status. */
static rkv_status put_big(struct env *e, const char *prefix, unsigned i, uint32_t len)
{
    static char val[16384];
    char key[32];
    snprintf(key, sizeof key, "%s-%u", prefix, i);
    memset(val, 'a' + (int)(i % 26), len);
    return put_mode(e, key, (uint32_t)strlen(key), val, len, RKV_SET, 0, 0, NULL);
}

static bool found_big(struct env *e, const char *prefix, unsigned i, uint32_t len)
{
    static char buf[16384 + 64];
    char key[32];
    struct rkv_lookup l;
    snprintf(key, sizeof key, "%s-%u", prefix, i);
    if (get(e, key, (uint32_t)strlen(key), 0, buf, sizeof buf, &l) != RKV_OK || l.value_len != len)
        return false;
    for (uint32_t b = 0; b < len; b++)
        if (buf[b] != 'a' + (int)(i % 26))
            return false;
    return true;
}

/* More size classes in use than the heap has pages: once every page is a
 * class's, an item of a class with no page is stored in a larger class
 * (within twice its size) instead of a page being moved for it (all its
 * items evicted), and it survives a restart. Fails without
 * rkv_slab_host_class. */
static void test_small_class_hosted_by_larger(void **state)
{
    (void)state;
    struct rkv_table_config c = { .evict = RKV_EVICT_LRU };
    struct env e;
    env_make(&e, 4 * MiB, &c);
    uint64_t pages = e.h->heap_size / e.h->slab_page_size;
    assert_int_equal(pages, 3);
    /* one page each for 2,000-, 3,500- and 9,000-byte values */
    assert_int_equal(put_big(&e, "x", 0, 2000), RKV_OK);
    assert_int_equal(put_big(&e, "y", 0, 3500), RKV_OK);
    assert_int_equal(put_big(&e, "z", 0, 9000), RKV_OK);
    unsigned x = 1;
    for (; x < 100; x++)
        assert_int_equal(put_big(&e, "x", x, 2000), RKV_OK);
    /* a class with no page: 1,500-byte values, in the 2,000-byte class */
    for (unsigned w = 0; w < 20; w++)
        assert_int_equal(put_big(&e, "w", w, 1500), RKV_OK);
    struct rkv_table_stats st = stats(&e);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.slab_reassigns, 0);
    assert_int_equal(st.items, 3 + 99 + 20);
    for (unsigned i = 0; i < x; i++)
        assert_true(found_big(&e, "x", i, 2000));
    for (unsigned w = 0; w < 20; w++)
        assert_true(found_big(&e, "w", w, 1500));
    assert_true(found_big(&e, "y", 0, 3500) && found_big(&e, "z", 0, 9000));

    /* a restart keeps the items a larger class holds */
    struct rkv_table *kept = NULL;
    struct rkv_table_attach_report rep;
    struct rkv_table_restore r;
    char err[256];
    rkv_table_stop_state(e.t, &r.clock, &r.max_version);
    rkv_table_destroy(e.t);
    assert_int_equal(rkv_table_attach(e.region.base, e.region.size, &c, &r, &kept, &rep, err,
                                      sizeof err),
                     RKV_OK);
    e.t = kept;
    e.h = rkv_table_header(e.t);
    assert_int_equal(stats(&e).items, 3 + 99 + 20);
    for (unsigned w = 0; w < 20; w++)
        assert_true(found_big(&e, "w", w, 1500));
    env_free(&e);
}

/* While some pages are free but under a quarter of them, a class with no
 * page stores its items in a larger class within 9/8 of its size that has
 * room, rather than taking a page of its own for them: a small heap holding
 * values of many sizes keeps its last pages for the classes that fill
 * them. A class with no such neighbour still takes a page. Fails without
 * the scarce-pages rule in rkv_slab_host_class. */
static void test_class_hosted_while_pages_scarce(void **state)
{
    (void)state;
    struct rkv_table_config c = { .evict = RKV_EVICT_LRU };
    struct env e;
    env_make(&e, 8 * MiB, &c);
    uint64_t pages = e.h->heap_size / e.h->slab_page_size;
    assert_true(pages >= 5);
    assert_int_equal(put_big(&e, "y", 0, 2000), RKV_OK);
    /* 9,000-byte values take pages until under a quarter are left */
    unsigned z = 0;
    for (; stats(&e).pages_unassigned * 4 >= pages; z++) {
        assert_true(z < 1000);
        assert_int_equal(put_big(&e, "z", z, 9000), RKV_OK);
    }
    uint64_t left = stats(&e).pages_unassigned;
    assert_true(left >= 1);
    /* 1,860-byte values: a smaller class, within 9/8 of the 2,000-byte one */
    for (unsigned w = 0; w < 20; w++)
        assert_int_equal(put_big(&e, "w", w, 1860), RKV_OK);
    assert_int_equal(stats(&e).pages_unassigned, left);
    /* 1,000-byte values: no class within 9/8 owns a page */
    assert_int_equal(put_big(&e, "v", 0, 1000), RKV_OK);
    assert_int_equal(stats(&e).pages_unassigned, left - 1);
    for (unsigned w = 0; w < 20; w++)
        assert_true(found_big(&e, "w", w, 1860));
    assert_true(found_big(&e, "y", 0, 2000) && found_big(&e, "v", 0, 1000));
    assert_int_equal(stats(&e).items, 22 + z);
    env_free(&e);
}

/* Every page some class's only one, and a class that owns none with no
 * class within twice its size to host it: its items go to a larger class
 * that owns pages (rounding), and no class loses its only page. Before,
 * each such class emptied another class's only page (every item on it
 * evicted) and waited out its grace period, the class that lost it did the
 * same in turn, and a 16 MiB server of 100 B-4 KB values held a few dozen
 * items. */
static void test_pageless_class_hosted_not_moving_pages(void **state)
{
    (void)state;
    struct rkv_table_config c = { .evict = RKV_EVICT_LRU };
    struct env e;
    env_make(&e, 5 * MiB, &c);
    /* values three times apart, a page each until none is left */
    unsigned n = 0;
    uint32_t len = 40;
    for (; stats(&e).pages_unassigned > 0; n++, len *= 3) {
        assert_true(len <= 16384);
        assert_int_equal(put_big(&e, "y", n, len), RKV_OK);
    }
    assert_true(n >= 4);
    uint64_t moves = stats(&e).slab_reassigns;
    /* 500-byte values: the nearest classes that own pages are the
     * 360-byte values' and the 1,080-byte values' */
    for (unsigned w = 0; w < 20; w++)
        assert_int_equal(put_big(&e, "w", w, 500), RKV_OK);
    assert_int_equal(stats(&e).slab_reassigns, moves);
    len = 40;
    for (unsigned i = 0; i < n; i++, len *= 3)
        assert_true(found_big(&e, "y", i, len));
    for (unsigned w = 0; w < 20; w++)
        assert_true(found_big(&e, "w", w, 500));
    assert_int_equal(stats(&e).evictions, 0);
    env_free(&e);
}

/* A PUT whose class ran dry on a full heap, with everything it evicted
 * inside its grace period (the test's clock stands still), takes a ready
 * item of a larger class within twice its size instead of waiting: before,
 * it waited grace_ms three times and failed with RKV_OUT_OF_MEMORY. */
static void test_dry_class_borrows_larger_ready(void **state)
{
    (void)state;
    struct rkv_table_config c = { .evict = RKV_EVICT_LRU, .now_ns = fake_now };
    struct env e;
    env_make(&e, 4 * MiB, &c);
    assert_int_equal(put_big(&e, "y", 0, 2000), RKV_OK); /* a page, nearly all of it fresh */
    unsigned y = 0;
    struct rkv_table_class_stats cs;
    for (;; y++) {
        assert_true(y < e.h->class_count);
        rkv_table_class_stats(e.t, y, &cs);
        if (cs.slab.pages > 0)
            break;
    }
    /* 1,200-byte values fill the rest and run dry: items of y's class */
    unsigned x = 0;
    do {
        assert_true(x < 10000);
        assert_int_equal(put_big(&e, "x", x++, 1200), RKV_OK);
        rkv_table_class_stats(e.t, y, &cs);
    } while (cs.slab.used == 1);
    assert_true(stats(&e).evictions > 0 && stats(&e).pages_unassigned == 0);
    for (unsigned i = 0; i < 10; i++, x++)
        assert_int_equal(put_big(&e, "x", x, 1200), RKV_OK);
    for (unsigned i = x - 11; i < x; i++)
        assert_true(found_big(&e, "x", i, 1200));
    assert_true(found_big(&e, "y", 0, 2000));
    env_free(&e);
}

static void test_evict_when_index_full(void **state)
{
    (void)state;
    struct rkv_table_config c = { .index_share = 64.0 * 64 / (4 * MiB), .evict = RKV_EVICT_RANDOM };
    struct env e;
    env_make(&e, 4 * MiB, &c);
    assert_int_equal(e.h->index_capacity, 64);
    for (unsigned i = 0; i < 2000; i++)
        assert_int_equal(put_n(&e, i), RKV_OK);
    struct rkv_table_stats s = evicted_consistently(&e, 2000);
    assert_true(s.items <= s.slots);
    env_free(&e);
}

/* A batch of hints, as a request carries them (more than one internal batch,
 * valid words mixed with words that name no item): exactly the items the
 * valid words name are stamped, every word is counted once, and a repeat
 * (a stamp the word already holds) changes nothing. */
static void test_hints_batch_stamps_valid_only(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_LRU);
    enum { ITEMS = 40, STORES = 64 };
    uint64_t slot[ITEMS];
    for (unsigned i = 0; i < ITEMS; i++) {
        char key[32], val[112];
        struct rkv_lookup l;
        assert_int_equal(put_n(&e, i), RKV_OK);
        key_of(key, sizeof key, i);
        assert_int_equal(get(&e, key, (uint32_t)strlen(key), 0, val, sizeof val, &l), RKV_OK);
        slot[i] = l.slot;
    }
    for (unsigned i = 0; i < STORES; i++) /* the clock moves on: every item ages */
        assert_int_equal(put_n(&e, ITEMS), RKV_OK);
    uint32_t age[ITEMS];
    for (unsigned i = 0; i < ITEMS; i++) {
        age[i] = rkv_table_access_age(e.t, slot[i]);
        assert_true(age[i] >= STORES - 16); /* (the clock steps by ACCESS_STEP) */
    }

    /* even items hinted (twice each); odd items only by words that must not
     * stamp them: fingerprint 0, wrong class, inside the item, the empty word */
    uint64_t words[4 * ITEMS];
    unsigned n = 0, valid = 0;
    for (unsigned i = 0; i < ITEMS; i++) {
        uint64_t w = slot[i];
        unsigned cls = rkv_slot_class(w);
        uint64_t off = rkv_slot_offset(w);
        if (i % 2 == 0) {
            words[n++] = w;
            words[n++] = w;
            valid += 2;
        } else {
            words[n++] = w & ~0xffffull;
            words[n++] = rkv_slot_make(rkv_slot_fp(w), cls + 1, off);
            words[n++] = rkv_slot_make(rkv_slot_fp(w), cls, off + 64);
            words[n++] = 0;
        }
    }
    assert_true(n > 64); /* more than one HINT_BATCH */
    for (unsigned round = 1; round <= 2; round++) {
        rkv_table_hints(e.t, words, n);
        struct rkv_table_stats s = stats(&e);
        assert_int_equal(s.hints, round * valid);
        assert_int_equal(s.hints_ignored, round * (n - valid));
        for (unsigned i = 0; i < ITEMS; i++) {
            if (i % 2 == 0)
                assert_int_equal(rkv_table_access_age(e.t, slot[i]), 0);
            else
                assert_int_equal(rkv_table_access_age(e.t, slot[i]), age[i]);
        }
    }
    env_free(&e);
}

static void test_hints_validated(void **state)
{
    (void)state;
    struct env e;
    small_heap(&e, RKV_EVICT_LRU);
    assert_int_equal(put_n(&e, 1), RKV_OK);
    char key[32], val[112];
    struct rkv_lookup l;
    key_of(key, sizeof key, 1);
    assert_int_equal(get(&e, key, (uint32_t)strlen(key), 0, val, sizeof val, &l), RKV_OK);
    uint64_t good = l.slot;
    unsigned cls = rkv_slot_class(good);
    uint64_t off = rkv_slot_offset(good);
    uint16_t fp = rkv_slot_fp(good);
    uint32_t sz = e.h->class_size[cls];

    rkv_table_hints(e.t, &good, 1);
    const uint64_t garbage[] = {
        0,                               /* empty slot */
        good & ~0xffffull,               /* fingerprint 0 */
        rkv_slot_make(fp, cls + 1, off), /* wrong class for the page */
        rkv_slot_make(fp, 200, off),     /* no such class */
        rkv_slot_make(fp, e.h->class_count, off),
        rkv_slot_make(fp, cls, 0),                                 /* the header */
        rkv_slot_make(fp, cls, e.h->index_offset + 64),            /* the index */
        rkv_slot_make(fp, cls, off + 64),                          /* inside the item */
        rkv_slot_make(fp, cls, off + sz),                          /* never allocated */
        rkv_slot_make(fp, cls, e.h->heap_offset + e.h->heap_size), /* past the heap */
        rkv_slot_make(fp, cls, e.h->heap_offset + e.h->heap_size - 64),
        rkv_slot_make(fp, cls, (1ull << 40) - 64), /* far past the region */
        UINT64_MAX,
    };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(garbage); i++)
        rkv_table_hints(e.t, &garbage[i], 1);
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.hints, 1);
    assert_int_equal(s.hints_ignored, RKV_ARRAY_SIZE(garbage));

    /* random words, in batches at an odd address as a request carries them:
     * counted, never a crash (ASan builds check the bounds) */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    static uint8_t batch[1000 * sizeof(uint64_t) + 1];
    for (unsigned i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t w = i % 2 ? x : (x & 0xffffff) | ((off / 64) << 24);
        memcpy(batch + 1 + (i % 1000) * sizeof w, &w, sizeof w);
        if (i % 1000 == 999)
            rkv_table_hints(e.t, batch + 1, 1000);
    }
    s = stats(&e);
    assert_int_equal(s.hints + s.hints_ignored, 1 + RKV_ARRAY_SIZE(garbage) + 200000);
    assert_true(has_n(&e, 1));
    env_free(&e);
}

/* ------------------------------------------------------------ page moves */

/* Key i of family `fam` ('A', 'B') with a len-byte value whose bytes depend
 * on key and length, so a read of anything else is caught. */
static void sized_key(char *key, size_t len, char fam, unsigned i)
{
    snprintf(key, len, "%c-%08u", fam, i);
}

static rkv_status put_sized(struct env *e, char fam, unsigned i, uint32_t len)
{
    char key[32], val[2048];
    assert_true(len <= sizeof val);
    sized_key(key, sizeof key, fam, i);
    for (uint32_t b = 0; b < len; b++)
        val[b] = (char)('a' + (i + b) % 26);
    return put_mode(e, key, (uint32_t)strlen(key), val, len, RKV_SET, 0, 0, NULL);
}

/* Read back through rkv_lookup_batch (with an optional cached slot): present
 * with exactly its value (true, *slot set), or absent (false). */
static bool has_sized(struct env *e, char fam, unsigned i, uint32_t len, uint64_t cached,
                      uint64_t *slot)
{
    char key[32], val[2048];
    struct rkv_lookup l;
    sized_key(key, sizeof key, fam, i);
    rkv_status st = get(e, key, (uint32_t)strlen(key), cached, val, sizeof val, &l);
    if (st == RKV_NOT_FOUND)
        return false;
    assert_int_equal(st, RKV_OK);
    assert_int_equal(l.value_len, len);
    for (uint32_t b = 0; b < len; b++)
        assert_int_equal(val[b], (char)('a' + (i + b) % 26));
    if (slot)
        *slot = l.slot;
    return true;
}

#define A_LEN         100  /* 150-byte items: class 192 */
#define B_LEN         1000 /* 1050-byte items: a class A's fill never gives a page */
#define MOVE_GRACE_MS 60

/* Where one A item was, and when its PUT began. */
struct a_item {
    uint64_t slot;
    uint64_t put_ns;
};

/* The heap full of A items, B with no page: B's PUTs succeed by moving a
 * page of A (its live items evicted through the index), no sooner than
 * grace_ms after the last A item on that page could have been freed; every
 * key reads back right or is counted as evicted; a client's stale cached
 * location of an A item on the moved page never yields a value. */
static void page_move_for_new_class(enum rkv_evict_policy policy)
{
    struct rkv_table_config c = { .slab_page_size = 4096, .grace_ms = MOVE_GRACE_MS, .evict = policy };
    struct env e;
    env_make(&e, 128 * 1024, &c);
    const uint64_t page = e.h->slab_page_size, heap = e.h->heap_offset;
    struct a_item *a = calloc(4096, sizeof(*a));
    unsigned na = 0;
    assert_non_null(a);

    while (stats(&e).evictions == 0) {
        assert_true(na < 4096);
        a[na].put_ns = rkv_now_ns();
        assert_int_equal(put_sized(&e, 'A', na, A_LEN), RKV_OK);
        assert_true(has_sized(&e, 'A', na, A_LEN, 0, &a[na].slot));
        na++;
    }
    struct rkv_table_stats s0 = stats(&e);
    assert_int_equal(s0.pages_unassigned, 0);
    assert_int_equal(s0.slab_reassigns, 0);
    bool *live = calloc(na, sizeof(*live));
    assert_non_null(live);
    for (unsigned i = 0; i < na; i++)
        live[i] = has_sized(&e, 'A', i, A_LEN, 0, NULL);

    uint64_t t0 = rkv_now_ns();
    assert_int_equal(put_sized(&e, 'B', 0, B_LEN), RKV_OK);
    uint64_t done = rkv_now_ns();
    uint64_t b_slot;
    assert_true(has_sized(&e, 'B', 0, B_LEN, 0, &b_slot));
    uint64_t moved = (rkv_slot_offset(b_slot) - heap) / page;

    /* The B item's page held only A items before: the last of them began
     * its PUT at `latest`, so it was freed no earlier, and the page may be
     * reused only grace_ms after that. */
    uint64_t latest = 0;
    unsigned on_page = 0, live_on_page = 0;
    for (unsigned i = 0; i < na; i++)
        if ((rkv_slot_offset(a[i].slot) - heap) / page == moved) {
            latest = RKV_MAX(latest, a[i].put_ns);
            on_page++;
            live_on_page += live[i];
        }
    assert_true(on_page > 0);
    print_message("page move (%s): first B PUT took %.1f ms; its page held %u A items (%u live), "
                  "the last written %.1f ms before the PUT returned\n",
                  policy == RKV_EVICT_LRU ? "lru" : "random", (double)(done - t0) / 1e6, on_page,
                  live_on_page, (double)(done - latest) / 1e6);
    assert_true(done - latest >= (uint64_t)MOVE_GRACE_MS * 1000000u);
    assert_true(stats(&e).evictions >= s0.evictions + live_on_page);

    /* The A items on the moved page are gone from the index, and their stale
     * cached locations never yield their value again (nor B's). */
    for (unsigned i = 0; i < na; i++)
        if ((rkv_slot_offset(a[i].slot) - heap) / page == moved) {
            assert_false(has_sized(&e, 'A', i, A_LEN, 0, NULL));
            assert_false(has_sized(&e, 'A', i, A_LEN, a[i].slot, NULL));
        }

    /* more B: all stored, by B's own evictions or further moves */
    const unsigned nb = 60;
    for (unsigned i = 1; i < nb; i++)
        assert_int_equal(put_sized(&e, 'B', i, B_LEN), RKV_OK);
    assert_true(has_sized(&e, 'B', nb - 1, B_LEN, 0, NULL));

    struct rkv_table_stats s = stats(&e);
    print_message("page move (%s): %u A + %u B stored, %llu items, %llu evictions, %llu page moves\n",
                  policy == RKV_EVICT_LRU ? "lru" : "random", na, nb, (unsigned long long)s.items,
                  (unsigned long long)s.evictions, (unsigned long long)s.slab_reassigns);
    assert_true(s.slab_reassigns >= 1);
    assert_int_equal(s.insert_failures, 0);
    assert_int_equal(s.items + s.evictions, na + nb);
    unsigned present = 0;
    for (unsigned i = 0; i < na; i++)
        present += has_sized(&e, 'A', i, A_LEN, 0, NULL);
    for (unsigned i = 0; i < nb; i++)
        present += has_sized(&e, 'B', i, B_LEN, 0, NULL);
    assert_int_equal(present, s.items);
    free(live);
    free(a);
    env_free(&e);
}

static void test_page_move_lru(void **state)
{
    (void)state;
    page_move_for_new_class(RKV_EVICT_LRU);
}

static void test_page_move_random(void **state)
{
    (void)state;
    page_move_for_new_class(RKV_EVICT_RANDOM);
}

/* Without eviction a class with no page stays refused, and nothing stored
 * is lost or moved. */
static void test_no_page_move_without_eviction(void **state)
{
    (void)state;
    struct rkv_table_config c = { .slab_page_size = 4096, .grace_ms = 10, .evict = RKV_EVICT_NONE };
    struct env e;
    env_make(&e, 128 * 1024, &c);
    unsigned na = 0;
    rkv_status st;
    while ((st = put_sized(&e, 'A', na, A_LEN)) == RKV_OK)
        na++;
    assert_int_equal(st, RKV_OUT_OF_MEMORY);
    for (unsigned i = 0; i < 5; i++)
        assert_int_equal(put_sized(&e, 'B', i, B_LEN), RKV_OUT_OF_MEMORY);
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.slab_reassigns, 0);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.items, na);
    for (unsigned i = 0; i < na; i++)
        assert_true(has_sized(&e, 'A', i, A_LEN, 0, NULL));
    assert_false(has_sized(&e, 'B', 0, B_LEN, 0, NULL));
    env_free(&e);
}

/* LRU automove: B gets one page (it has none), then evicts its own young
 * items while A's untouched items grow old. B's PUTs are paced so that its
 * limbo is always ready in time (never starved, so PUTs move no pages);
 * ticks move A's pages to B, one per tick, so B ends up holding far more
 * than one page of items, and A keeps pages. */
static void test_automove_lru(void **state)
{
    (void)state;
    struct rkv_table_config c = { .slab_page_size = 4096, .grace_ms = 1, .evict = RKV_EVICT_LRU };
    struct env e;
    env_make(&e, 128 * 1024, &c);
    unsigned na = 0;
    while (stats(&e).evictions == 0)
        assert_int_equal(put_sized(&e, 'A', na++, A_LEN), RKV_OK);

    const unsigned nb = 60, rounds = 10, per_page = 4096 / 1216; /* B's class: 1216 bytes */
    for (unsigned i = 0; i < nb; i++) {
        assert_int_equal(put_sized(&e, 'B', i, B_LEN), RKV_OK);
        sleep_ms(2);
    }
    uint64_t put_moves = stats(&e).slab_reassigns, tick_moves = 0;
    unsigned b_before = 0;
    for (unsigned i = 0; i < nb; i++)
        b_before += has_sized(&e, 'B', i, B_LEN, 0, NULL);

    for (unsigned round = 0; round < rounds; round++) {
        uint64_t m0 = stats(&e).slab_reassigns;
        rkv_table_tick(e.t);
        tick_moves += stats(&e).slab_reassigns - m0;
        for (unsigned i = 0; i < nb; i++) {
            assert_int_equal(put_sized(&e, 'B', i, B_LEN), RKV_OK);
            sleep_ms(2);
        }
    }
    struct rkv_table_stats s = stats(&e);
    unsigned b_after = 0, a_after = 0;
    for (unsigned i = 0; i < nb; i++)
        b_after += has_sized(&e, 'B', i, B_LEN, 0, NULL);
    for (unsigned i = 0; i < na; i++)
        a_after += has_sized(&e, 'A', i, A_LEN, 0, NULL);
    print_message("automove: B held %u of %u keys after %llu page moves by PUTs; after %u ticks "
                  "(%llu moves by ticks, %llu in all) %u; A kept %u of %u\n",
                  b_before, nb, (unsigned long long)put_moves, rounds, (unsigned long long)tick_moves,
                  (unsigned long long)s.slab_reassigns, b_after, a_after, na);
    assert_true(put_moves >= 1);
    assert_true(tick_moves >= rounds / 2 && tick_moves <= rounds); /* one page per tick at most */
    assert_true(b_after >= b_before + 4 * per_page);
    assert_true(a_after > 0);
    assert_int_equal(s.items, a_after + b_after);
    env_free(&e);
}

/* ------------------------------------------------------------ read races */

static void test_torn_read_never_returned(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    uint8_t val[3000], buf[3000];
    struct rkv_lookup l;

    memset(val, 'A', sizeof val);
    assert_int_equal(put_mode(&e, "torn", 4, val, sizeof val, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(get(&e, "torn", 4, 0, buf, sizeof buf, &l), RKV_OK);
    uint32_t len = e.h->class_size[rkv_slot_class(l.slot)];
    uint8_t *old_img = malloc(len), *torn = malloc(len);
    memcpy(old_img, (uint8_t *)e.region.base + rkv_slot_offset(l.slot), len);

    memset(val, 'B', sizeof val);
    assert_int_equal(put_mode(&e, "torn", 4, val, sizeof val, RKV_SET, 0, 0, NULL), RKV_OK);
    assert_int_equal(get(&e, "torn", 4, 0, buf, sizeof buf, &l), RKV_OK);
    uint64_t off = rkv_slot_offset(l.slot);
    /* what a read racing the write sees: the new header and first half,
     * the old bytes after */
    memcpy(torn, (uint8_t *)e.region.base + off, len / 2);
    memcpy(torn + len / 2, old_img + len / 2, len - len / 2);

    e.rd = (struct reader){ .base = e.region.base,
                            .size = e.region.size,
                            .torn_off = off,
                            .torn_img = torn,
                            .torn_len = len,
                            .torn_left = 1000 };
    assert_int_equal(get(&e, "torn", 4, 0, buf, sizeof buf, &l), RKV_RETRY_EXHAUSTED);
    assert_true(e.retries >= 8);

    /* once the write is complete the lookup returns the new value */
    e.rd.torn_left = 3;
    e.rd.torn_served = 0;
    memset(buf, 0, sizeof buf);
    assert_int_equal(get(&e, "torn", 4, 0, buf, sizeof buf, &l), RKV_OK);
    assert_int_equal(e.rd.torn_served, 3);
    assert_int_equal(e.retries, 3);
    for (unsigned i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 'B');

    /* a single flipped byte is as torn as half an item */
    memcpy(torn, (uint8_t *)e.region.base + off, len);
    torn[RKV_ITEM_PREFIX_SIZE + 4 + 1000] ^= 1;
    e.rd.torn_left = 1000;
    assert_int_equal(get(&e, "torn", 4, 0, buf, sizeof buf, &l), RKV_RETRY_EXHAUSTED);
    free(old_img);
    free(torn);
    env_free(&e);
}

/* The item header is 28 bytes, plus 4 for each of expire_at, user_flags
 * and a value length of 2 MiB or more that the item has: every mix reads
 * back through the lookup with its TTL, flags and CAS token, in the
 * smallest class that holds exactly that many bytes. */
static void test_item_header_shapes(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config c = { .slab_page_size = 4 * MiB };
    env_make(&e, 96 * MiB, &c); /* a 4 MiB page for each 2 MiB item */
    static const uint32_t lens[] = { 0, 13, RKV_SHAPE_SHORT_VALUES - 1, RKV_SHAPE_SHORT_VALUES + 5 };
    uint8_t *val = malloc(RKV_SHAPE_SHORT_VALUES + 5), *buf = malloc(RKV_SHAPE_SHORT_VALUES + 5);
    assert_non_null(val);
    assert_non_null(buf);
    for (unsigned n = 0; n < RKV_ARRAY_SIZE(lens); n++)
        for (unsigned mix = 0; mix < 4; mix++) {
            char key[16];
            uint32_t ttl = mix & 1 ? 1000 : 0, flags = mix & 2 ? 0xfedcba98u : 0;
            uint64_t version = 0;
            struct rkv_lookup l;
            int klen = snprintf(key, sizeof key, "shape%u.%u", n, mix);
            memset(val, 'a' + (int)(n * 4 + mix), lens[n]);
            struct rkv_value_src src = { .data = val, .len = lens[n] };
            assert_int_equal(rkv_table_put(e.t, key, (uint32_t)klen, &src, RKV_SET, 0, ttl, flags,
                                           &version),
                             RKV_OK);
            const struct rkv_item *it = rkv_table_find(e.t, key, (uint32_t)klen);
            assert_non_null(it);
            uint32_t header = RKV_ITEM_PREFIX_SIZE + (ttl ? 4 : 0) + (flags ? 4 : 0) +
                              (lens[n] >= RKV_SHAPE_SHORT_VALUES ? 4 : 0);
            assert_int_equal(rkv_shape_header_size(it->shape), header);
            assert_int_equal(rkv_item_bytes(it), header + (uint32_t)klen + lens[n]);
            assert_int_equal(rkv_item_size((uint32_t)klen, lens[n], rkv_item_expire_at(it), flags),
                             rkv_item_bytes(it));

            memset(buf, 0, lens[n]);
            assert_int_equal(get(&e, key, (uint32_t)klen, 0, buf, lens[n], &l), RKV_OK);
            assert_int_equal(l.value_len, lens[n]);
            assert_memory_equal(buf, val, lens[n]);
            assert_int_equal(l.version, version);
            assert_int_equal(l.user_flags, flags);
            assert_true(ttl ? l.expire_at > rkv_table_clock(e.t) : l.expire_at == 0);
            unsigned cls = rkv_slot_class(l.slot);
            assert_true(e.h->class_size[cls] >= rkv_item_bytes(it));
            assert_true(cls == 0 || e.h->class_size[cls - 1] < rkv_item_bytes(it));
        }
    free(val);
    free(buf);
    env_free(&e);
}

/* A torn (or hostile) shape word that names more header than the copy
 * holds is torn: the verifier reads no optional field beyond the copy
 * (under ASan, a read past the 32-byte allocation would fail the test). */
static void test_item_shape_beyond_slot(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    assert_int_equal(put(&e, "k", "v"), RKV_OK); /* 30 bytes: the 32-byte class */
    const struct rkv_item *it = rkv_table_find(e.t, "k", 1);
    assert_non_null(it);
    struct rkv_item *copy = malloc(32);
    assert_non_null(copy);
    memcpy(copy, it, 32);
    assert_int_equal(rkv_item_verify(copy, 32, "k", 1, e.h->hash_seed, 0), RKV_VERIFY_OK);
    static const uint32_t shapes[] = {
        1 | RKV_SHAPE_LONG | RKV_SHAPE_EXPIRE | RKV_SHAPE_FLAGS,
        1 | RKV_SHAPE_EXPIRE | RKV_SHAPE_FLAGS | 1u << RKV_SHAPE_VALUE_SHIFT,
        1 | RKV_SHAPE_LONG,
        1 | 4u << RKV_SHAPE_VALUE_SHIFT,
    };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(shapes); i++) {
        memcpy(copy, it, 32);
        copy->shape = shapes[i];
        assert_int_equal(rkv_item_verify(copy, 32, "k", 1, e.h->hash_seed, 0), RKV_VERIFY_TORN);
    }
    free(copy);
    env_free(&e);
}

/* Items sit on 4-byte boundaries: 52-byte items (class 5) laid side by
 * side start at every offset mod 64 that is a multiple of 4, so at every
 * position against a cache line and at both parities (layout.h: the state
 * word at 8 or 4, the checksum's high half at 4 or 12). Each reads back
 * through the lookup, cold and through its location, and a torn copy of
 * each is never returned: a flipped byte of the key, the value, the shape,
 * the version or either half of the checksum; the second half of another
 * item's image; an OBSOLETE state word where this parity keeps it. */
static void test_items_at_every_alignment(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    enum { N = 16, SIZE = 52, KEY = 5, VAL = SIZE - RKV_ITEM_PREFIX_SIZE - KEY, HOWS = 9 };
    char key[N][8];
    uint8_t val[VAL], buf[VAL], torn[64];
    uint64_t slot[N];
    unsigned seen = 0; /* offsets mod 64 met, one bit per 4 bytes */
    struct rkv_lookup l;

    assert_int_equal(e.h->class_size[5], SIZE);
    for (unsigned i = 0; i < N; i++) {
        snprintf(key[i], sizeof key[i], "a%04u", i);
        memset(val, 'a' + (int)i, sizeof val);
        assert_int_equal(put_mode(&e, key[i], KEY, val, VAL, RKV_SET, 0, 0, NULL), RKV_OK);
    }
    for (unsigned i = 0; i < N; i++) {
        memset(buf, 0, sizeof buf);
        assert_int_equal(get(&e, key[i], KEY, 0, buf, sizeof buf, &l), RKV_OK);
        assert_int_equal(l.value_len, VAL);
        for (unsigned j = 0; j < VAL; j++)
            assert_int_equal(buf[j], 'a' + (int)i);
        assert_int_equal(rkv_slot_class(l.slot), 5);
        uint64_t off = rkv_slot_offset(l.slot);
        assert_int_equal(off % RKV_ITEM_ALIGN, 0);
        seen |= 1u << (off % 64 / 4);
        slot[i] = l.slot;
        assert_int_equal(get(&e, key[i], KEY, slot[i], buf, sizeof buf, &l), RKV_OK);
        assert_int_equal(l.cache_used, 1);
    }
    assert_int_equal(seen, 0xffff);

    for (unsigned i = 0; i < N; i++) {
        uint64_t off = rkv_slot_offset(slot[i]);
        unsigned parity = (unsigned)(off % 8);
        const uint8_t *img = (const uint8_t *)e.region.base + off;
        for (unsigned how = 0; how < HOWS; how++) {
            memcpy(torn, img, SIZE);
            switch (how) {
            case 0: torn[RKV_ITEM_PREFIX_SIZE] ^= 1; break; /* first key byte */
            case 1: torn[SIZE - 1] ^= 0x80; break;          /* last value byte */
            case 2:                                         /* another item's second half */
                memcpy(torn + SIZE / 2,
                       (const uint8_t *)e.region.base + rkv_slot_offset(slot[(i + 1) % N]) + SIZE / 2,
                       SIZE / 2);
                break;
            case 3: torn[25] ^= 0x08; break;  /* shape: value_len 19 -> 18, still fits */
            case 4: torn[24] ^= 0x01; break;  /* shape: key_len 5 -> 4 */
            case 5: torn[16 + 3] ^= 1; break; /* a version byte */
            case 6: torn[1] ^= 0x10; break;   /* the checksum's low half */
            case 7: /* the checksum's high half: at 4 (parity 0) or 12 (parity 4) */
                torn[parity ? 12 + 2 : 4 + 2] ^= 0x40;
                break;
            default: torn[8 - parity] |= RKV_ITEM_OBSOLETE; break; /* the state word */
            }
            e.rd = (struct reader){ .base = e.region.base,
                                    .size = e.region.size,
                                    .torn_off = off,
                                    .torn_img = torn,
                                    .torn_len = SIZE,
                                    .torn_left = 1000 };
            assert_int_equal(get(&e, key[i], KEY, slot[i], buf, sizeof buf, &l), RKV_RETRY_EXHAUSTED);
            assert_true(e.retries >= 8);
        }
        e.rd.torn_left = 0;
        assert_int_equal(get(&e, key[i], KEY, slot[i], buf, sizeof buf, &l), RKV_OK);
    }
    env_free(&e);
}

/* The state word of an item at either parity: the server's stores to it
 * (meta flags, the OBSOLETE mark of a delete) land on the 8-aligned word
 * layout.h places, change neither the checksum nor the version, and a
 * client reading the item sees them. */
static void test_state_store_both_parities(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    char val[19], buf[32];
    const char *keys[2] = { "par.0", "par.1" };
    unsigned parities = 0;
    struct rkv_lookup l;

    memset(val, 'p', sizeof val);
    for (unsigned i = 0; i < 2; i++) { /* two 52-byte items side by side: one of each parity */
        uint64_t v;
        assert_int_equal(put_mode(&e, keys[i], 5, val, sizeof val, RKV_SET, 0, 0, &v), RKV_OK);
        const struct rkv_item *it = rkv_table_find(e.t, keys[i], 5);
        unsigned parity = rkv_item_parity(it);
        parities |= 1u << parity;
        assert_int_equal((uintptr_t)rkv_item_state_at(it) % 8, 0);
        assert_ptr_equal((const volatile uint8_t *)rkv_item_state_at(it),
                         (const uint8_t *)it + 8 - parity);
        uint64_t sum = rkv_item_checksum_stored(it);
        assert_int_equal(rkv_item_checksum(it, e.h->hash_seed), sum);

        assert_int_equal(rkv_table_set_state(e.t, keys[i], 5, v, 0, RKV_ITEM_WON, NULL), RKV_OK);
        assert_int_equal(rkv_item_state(it) & RKV_ITEM_META_FLAGS, RKV_ITEM_WON);
        assert_int_equal(rkv_item_checksum_stored(it), sum);
        assert_int_equal(rkv_item_version(it), v);
        assert_int_equal(get(&e, keys[i], 5, 0, buf, sizeof buf, &l), RKV_OK);
        assert_int_equal(l.state & RKV_ITEM_META_FLAGS, RKV_ITEM_WON);
        assert_int_equal(l.version, v);

        uint64_t slot = l.slot;
        assert_int_equal(rkv_table_delete(e.t, keys[i], 5), RKV_OK);
        assert_int_equal(rkv_item_state(it) & RKV_ITEM_OBSOLETE, RKV_ITEM_OBSOLETE);
        assert_int_equal(rkv_item_checksum_stored(it), sum); /* whole, but obsolete */
        assert_int_equal(get(&e, keys[i], 5, slot, buf, sizeof buf, &l), RKV_NOT_FOUND);
    }
    assert_int_equal(parities, 1u << 0 | 1u << 4);
    env_free(&e);
}

static void test_stale_cached_slot(void **state)
{
    (void)state;
    struct rkv_table_config c = { .grace_ms = 20 };
    struct env e;
    env_make(&e, 8 * MiB, &c);
    char buf[16];
    struct rkv_lookup l;

    assert_int_equal(put(&e, "stale", "v1"), RKV_OK);
    assert_int_equal(get(&e, "stale", 5, 0, buf, sizeof buf, &l), RKV_OK);
    uint64_t s1 = l.slot;
    assert_int_equal(put(&e, "stale", "v2"), RKV_OK);
    assert_int_equal(get(&e, "stale", 5, 0, buf, sizeof buf, &l), RKV_OK);
    uint64_t s2 = l.slot;
    assert_true(s1 != s2);

    /* the cached location is current: one read */
    assert_int_equal(get(&e, "stale", 5, s2, buf, sizeof buf, &l), RKV_OK);
    assert_int_equal(l.cache_used, 1);
    /* superseded: the old item forwards to the new one */
    assert_int_equal(get(&e, "stale", 5, s1, buf, sizeof buf, &l), RKV_OK);
    assert_int_equal(l.cache_used, 1);
    assert_int_equal(e.forwards, 1);
    assert_memory_equal(buf, "v2", 2);
    assert_int_equal(l.slot, s2);

    /* after the grace period the memory is reused for another key */
    sleep_ms(40);
    char key[32];
    bool reused = false;
    for (unsigned i = 0; i < 1000 && !reused; i++) {
        snprintf(key, sizeof key, "o%04u", i); /* as long as "stale": the same class */
        assert_int_equal(put(&e, key, "xx"), RKV_OK);
        const struct rkv_item *it = rkv_table_find(e.t, key, (uint32_t)strlen(key));
        reused = (uint64_t)((const uint8_t *)it - (const uint8_t *)e.region.base) ==
                 rkv_slot_offset(s1);
    }
    assert_true(reused);
    assert_int_equal(get(&e, "stale", 5, s1, buf, sizeof buf, &l), RKV_OK);
    assert_int_equal(l.cache_used, 0);
    assert_memory_equal(buf, "v2", 2);
    /* the other key is still served through that same location */
    assert_int_equal(get(&e, key, (uint32_t)strlen(key), s1, buf, sizeof buf, &l), RKV_OK);
    assert_int_equal(l.cache_used, 1);
    assert_memory_equal(buf, "xx", 2);

    /* deleted: neither stale location brings a value back */
    assert_int_equal(rkv_table_delete(e.t, "stale", 5), RKV_OK);
    assert_int_equal(get(&e, "stale", 5, s1, buf, sizeof buf, &l), RKV_NOT_FOUND);
    assert_int_equal(get(&e, "stale", 5, s2, buf, sizeof buf, &l), RKV_NOT_FOUND);
    env_free(&e);
}

static uint64_t state_at(struct env *e, uint64_t slot)
{
    const struct rkv_item *it = (const struct rkv_item *)(const void *)((const uint8_t *)e->region.base +
                                                                        rkv_slot_offset(slot));
    return rkv_item_state(it);
}

static uint64_t slot_of(struct env *e, const char *key)
{
    char buf[64];
    struct rkv_lookup l;
    assert_int_equal(get(e, key, (uint32_t)strlen(key), 0, buf, sizeof buf, &l), RKV_OK);
    return l.slot;
}

/* A new key goes to its first candidate bucket while that has an empty
 * slot, whatever the second holds, so a lookup that reads the first bucket
 * alone (RKV_COST_PER_READ) mostly needs no second read. Seven keys that
 * share a first bucket (and have distinct second buckets, which stay empty)
 * fill it; the eighth goes to its second bucket. */
static void test_first_bucket_first(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    const struct rkv_bucket *buckets = (const void *)((const uint8_t *)e.region.base +
                                                      e.h->index_offset);
    char keys[RKV_SLOTS_PER_BUCKET + 1][24];
    uint64_t target = UINT64_MAX, second[RKV_SLOTS_PER_BUCKET + 1];
    unsigned found = 0;

    for (unsigned n = 0; found < RKV_ARRAY_SIZE(keys) && n < 50000000; n++) {
        struct rkv_key_hash h;
        char k[24];
        snprintf(k, sizeof k, "ff%u", n);
        rkv_header_hash_key(e.h, k, strlen(k), &h);
        if (target == UINT64_MAX)
            target = h.bucket[0];
        if (h.bucket[0] != target)
            continue;
        bool fresh = true;
        for (unsigned i = 0; i < found; i++)
            fresh = fresh && second[i] != h.bucket[1] && h.bucket[1] != target;
        if (!fresh)
            continue;
        second[found] = h.bucket[1];
        memcpy(keys[found++], k, sizeof k);
    }
    assert_int_equal(found, RKV_ARRAY_SIZE(keys));
    for (unsigned i = 0; i < found; i++) {
        assert_int_equal(put(&e, keys[i], "v"), RKV_OK);
        uint64_t slot = slot_of(&e, keys[i]);
        bool in_first = false;
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++)
            in_first = in_first || buckets[target].slot[s] == slot;
        if (in_first != (i < RKV_SLOTS_PER_BUCKET))
            fail_msg("key %u of %u: in its first bucket = %d", i + 1, found, in_first);
    }
    env_free(&e);
}

/* The memcached door's meta state in a live item's state word: a put
 * stamps the access time and gives the flags asked for; set_state changes
 * them in place on the item of one version (a test-and-set: *before), the
 * version and checksum unchanged; a replaced item's state is its forward. */
static void test_meta_state(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config fc = { .now_ns = fake_now };
    env_make(&e, 8 * MiB, &fc);
    uint32_t now = rkv_table_clock(e.t);
    uint64_t v, before;
    struct rkv_value_src src = { .data = "val", .len = 3 };

    assert_int_equal(put(&e, "plain", "p"), RKV_OK);
    const struct rkv_item *it = rkv_table_find(e.t, "plain", 5);
    assert_int_equal(rkv_item_state(it), rkv_item_state_live(0, now));

    assert_int_equal(rkv_table_put_state(e.t, "m", 1, &src, RKV_SET, 0, 0, 0,
                                         rkv_item_state_live(RKV_ITEM_STALE, 7) | RKV_ITEM_OBSOLETE,
                                         &v),
                     RKV_OK);
    it = rkv_table_find(e.t, "m", 1);
    assert_int_equal(rkv_item_state(it), rkv_item_state_live(RKV_ITEM_STALE, 7)); /* never OBSOLETE */
    uint64_t sum = rkv_item_checksum_stored(it);

    assert_int_equal(rkv_table_set_state(e.t, "m", 1, v, 0, RKV_ITEM_WON, &before), RKV_OK);
    assert_int_equal(before, rkv_item_state_live(RKV_ITEM_STALE, 7));
    assert_int_equal(rkv_table_set_state(e.t, "m", 1, v, 0, RKV_ITEM_WON, &before), RKV_OK);
    assert_true(before & RKV_ITEM_WON); /* the second client sees it taken */
    assert_int_equal(rkv_table_set_state(e.t, "m", 1, v,
                                         RKV_ITEM_STALE | RKV_ITEM_ACCESS_MASK | RKV_ITEM_OBSOLETE,
                                         rkv_item_state_live(RKV_ITEM_FETCHED, 9), NULL),
                     RKV_OK);
    it = rkv_table_find(e.t, "m", 1);
    assert_int_equal(rkv_item_state(it), rkv_item_state_live(RKV_ITEM_WON | RKV_ITEM_FETCHED, 9));
    assert_int_equal(rkv_item_version(it), v);
    assert_int_equal(rkv_item_checksum_stored(it), sum);
    assert_int_equal(rkv_item_checksum(it, rkv_table_header(e.t)->hash_seed), sum);

    assert_int_equal(rkv_table_set_state(e.t, "m", 1, v + 1, 0, RKV_ITEM_WON, NULL),
                     RKV_CAS_MISMATCH);
    assert_int_equal(rkv_table_set_state(e.t, "none", 4, v, 0, RKV_ITEM_WON, NULL), RKV_NOT_FOUND);
    uint64_t slot = slot_of(&e, "m");
    assert_int_equal(put(&e, "m", "new"), RKV_OK); /* replaced: its state is the forward */
    assert_int_equal(state_at(&e, slot), rkv_item_state_forward(slot_of(&e, "m")));
    assert_int_equal(rkv_table_set_state(e.t, "m", 1, v, 0, RKV_ITEM_WON, NULL), RKV_CAS_MISMATCH);
    env_free(&e);
}

/* A win token handed out in the middle of a rewrite: the value's pull
 * stands in for the build, the window (with an allocation that waits for
 * a page move, grace_ms long) between the writer's read of the item and the
 * publication of its replacement, in which an mg or a librkv claim may set
 * WON on the item being replaced. */
struct win_midway {
    struct rkv_table *t;
    uint64_t version; /* the item being replaced */
    unsigned pulls;
};

static rkv_status pull_win_midway(void *ctx, void *dst, uint32_t len)
{
    struct win_midway *w = ctx;
    uint64_t before;
    w->pulls++;
    assert_int_equal(rkv_table_set_state(w->t, "hot", 3, w->version, 0, RKV_ITEM_WON, &before),
                     RKV_OK);
    assert_false(before & RKV_ITEM_WON);
    memset(dst, 'v', len);
    return RKV_OK;
}

/* A rewrite that carries the meta state over (a touch, an in-place incr,
 * md I, ms I's stale store) takes it from the item it replaces as that item
 * is replaced, under the stripes the marks are set under: a token handed
 * out while the new item was built is kept (a touch), or taken back only
 * where the rewrite says so (md I), never dropped by a copy read before. */
static void test_kept_state_races_mark(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config fc = { .now_ns = fake_now };
    env_make(&e, 8 * MiB, &fc);
    uint64_t v, v2;
    struct rkv_value_src val = { .data = "val", .len = 3 };
    struct win_midway w = { .t = e.t };
    struct rkv_value_src mid = { .pull = pull_win_midway, .ctx = &w, .len = 3 };
    const uint64_t stale = rkv_item_state_live(RKV_ITEM_STALE | RKV_ITEM_FETCHED, 5);

    /* a touch: everything kept, the token set midway included */
    assert_int_equal(rkv_table_put_state(e.t, "hot", 3, &val, RKV_SET, 0, 0, 0, stale, &v), RKV_OK);
    w.version = v;
    assert_int_equal(rkv_table_put_keep(e.t, "hot", 3, &mid, RKV_CAS, v, 0, 0, RKV_ITEM_LIVE_MASK,
                                        stale, &v2),
                     RKV_OK);
    assert_int_equal(w.pulls, 1);
    assert_int_equal(rkv_item_state(rkv_table_find(e.t, "hot", 3)), stale | RKV_ITEM_WON);
    uint64_t before;
    assert_int_equal(rkv_table_set_state(e.t, "hot", 3, v2, 0, RKV_ITEM_WON, &before), RKV_OK);
    assert_true(before & RKV_ITEM_WON); /* a second client is told it is taken */

    /* md I: fetched and access kept, stale set, the token taken back */
    assert_int_equal(rkv_table_put_state(e.t, "hot", 3, &val, RKV_SET, 0, 0, 0, stale, &v), RKV_OK);
    w.version = v;
    assert_int_equal(rkv_table_put_keep(e.t, "hot", 3, &mid, RKV_CAS, v, 0, 0,
                                        RKV_ITEM_FETCHED | RKV_ITEM_ACCESS_MASK,
                                        rkv_item_state_live(RKV_ITEM_STALE, 9), &v2),
                     RKV_OK);
    assert_int_equal(rkv_item_state(rkv_table_find(e.t, "hot", 3)), stale);

    /* ms I's stale store: the token as it is when replaced, the rest anew */
    assert_int_equal(rkv_table_put_state(e.t, "hot", 3, &val, RKV_SET, 0, 0, 0, stale, &v), RKV_OK);
    w.version = v;
    assert_int_equal(rkv_table_put_keep(e.t, "hot", 3, &mid, RKV_CAS, v, 0, 0, RKV_ITEM_WON,
                                        rkv_item_state_live(RKV_ITEM_STALE, 9), &v2),
                     RKV_OK);
    assert_int_equal(rkv_item_state(rkv_table_find(e.t, "hot", 3)),
                     rkv_item_state_live(RKV_ITEM_STALE | RKV_ITEM_WON, 9));

    /* nothing replaced: the state as given */
    assert_int_equal(rkv_table_put_keep(e.t, "cold", 4, &val, RKV_SET, 0, 0, 0, RKV_ITEM_LIVE_MASK,
                                        stale, NULL),
                     RKV_OK);
    assert_int_equal(rkv_item_state(rkv_table_find(e.t, "cold", 4)), stale);
    env_free(&e);
}

/* Every update (SET over a key, CAS, INCR) leaves in the old item's state
 * word OBSOLETE together with a forward to the replacement, in one store
 * (so no reader sees the mark before the forward); a delete leaves none. A
 * cached location follows at most RKV_LOOKUP_MAX_FORWARDS hops, then the
 * buckets answer. */
static void test_update_forwards(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 8 * MiB, NULL);
    char buf[64];
    struct rkv_lookup l;
    uint64_t v, s[5];

    assert_int_equal(put(&e, "fw", "v0"), RKV_OK);
    s[0] = slot_of(&e, "fw");
    assert_int_equal(state_at(&e, s[0]) & ~RKV_ITEM_ACCESS_MASK, 0); /* live: no mark, forward */
    assert_int_equal(put(&e, "fw", "v1"), RKV_OK);                   /* SET over it */
    s[1] = slot_of(&e, "fw");
    assert_int_equal(state_at(&e, s[0]), rkv_item_state_forward(s[1]));
    assert_true(state_at(&e, s[0]) & RKV_ITEM_OBSOLETE);
    assert_int_equal(rkv_item_forward(state_at(&e, s[0]), rkv_slot_fp(s[1])), s[1]);
    get(&e, "fw", 2, s[1], buf, sizeof buf, &l);
    assert_int_equal(put_mode(&e, "fw", 2, "v2", 2, RKV_CAS, l.version, 0, &v), RKV_OK);
    s[2] = slot_of(&e, "fw");
    assert_int_equal(rkv_item_forward(state_at(&e, s[1]), rkv_slot_fp(s[2])), s[2]);

    /* two hops from the oldest location, verified at each */
    assert_int_equal(get(&e, "fw", 2, s[0], buf, sizeof buf, &l), RKV_OK);
    assert_memory_equal(buf, "v2", 2);
    assert_int_equal(l.cache_used, 1);
    assert_int_equal(e.forwards, 2);
    assert_int_equal(l.slot, s[2]);
    /* a third hop is one too many: the buckets answer */
    assert_int_equal(put(&e, "fw", "v3"), RKV_OK);
    s[3] = slot_of(&e, "fw");
    assert_int_equal(get(&e, "fw", 2, s[0], buf, sizeof buf, &l), RKV_OK);
    assert_memory_equal(buf, "v3", 2);
    assert_int_equal(l.cache_used, 0);
    assert_int_equal(e.forwards, 2);
    assert_int_equal(l.slot, s[3]);

    /* INCR replaces the item too */
    assert_int_equal(put(&e, "n", "41"), RKV_OK);
    s[4] = slot_of(&e, "n");
    assert_int_equal(rkv_table_incr(e.t, "n", 1, 1, &v), RKV_OK);
    assert_int_equal(get(&e, "n", 1, s[4], buf, sizeof buf, &l), RKV_OK);
    assert_memory_equal(buf, "42", 2);
    assert_int_equal(e.forwards, 1);
    assert_int_equal(rkv_item_forward(state_at(&e, s[4]), rkv_slot_fp(l.slot)), l.slot);

    /* deleted: OBSOLETE without a forward; every old location misses */
    assert_int_equal(rkv_table_delete(e.t, "fw", 2), RKV_OK);
    assert_int_equal(state_at(&e, s[3]), RKV_ITEM_OBSOLETE);
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(get(&e, "fw", 2, s[i], buf, sizeof buf, &l), RKV_NOT_FOUND);
    env_free(&e);
}

/* ------------------------------------------------------------ failed updates */

#define PRESSURE_GRACE_MS 5 /* a class's page of versions fills well inside it */

/* A heap of 4 KiB pages full of 1000-byte F items (it has begun to evict),
 * so that a write whose class runs dry must evict or move a page, and a
 * class that only one key's versions use fills within the grace period. */
static void pressure_heap(struct env *e, enum rkv_evict_policy policy)
{
    struct rkv_table_config c = { .slab_page_size = 4096,
                                  .grace_ms = PRESSURE_GRACE_MS,
                                  .evict = policy };
    env_make(e, 256 * 1024, &c);
    for (unsigned i = 0; stats(e).evictions == 0; i++)
        assert_int_equal(put_sized(e, 'F', i, B_LEN), RKV_OK);
}

/* memcached's append, on the table: read the live item, store it with `add`
 * appended as a CAS on its version. */
static rkv_status append(struct env *e, const char *key, const char *add, size_t add_len)
{
    char val[4096];
    const struct rkv_item *it = rkv_table_find(e->t, key, (uint32_t)strlen(key));
    if (it == NULL)
        return RKV_NOT_FOUND;
    assert_true(rkv_item_value_len(it) + add_len <= sizeof val);
    memcpy(val, rkv_item_value(it), rkv_item_value_len(it));
    memcpy(val + rkv_item_value_len(it), add, add_len);
    return put_mode(e, key, (uint32_t)strlen(key), val, (uint32_t)(rkv_item_value_len(it) + add_len),
                    RKV_CAS, rkv_item_version(it), 0, NULL);
}

/* An append chain on a full heap, as a memcached client's: every append is
 * stored and the key is never lost. Each version of the growing item goes
 * to a class that no other key uses, whose page its own superseded versions
 * fill: the only live item there to evict is the key's own, and evicting it
 * for its own new version failed the CAS and lost the key. A class change
 * that takes a page from another class must not take the key's page. */
static void append_chain_keeps_key(enum rkv_evict_policy policy)
{
    struct env e;
    pressure_heap(&e, policy);
    char want[4096];
    size_t len = 1;
    want[0] = '<';
    assert_int_equal(put_mode(&e, "chain", 5, want, 1, RKV_SET, 0, 0, NULL), RKV_OK);
    unsigned appends = 0;
    while (len + 13 <= e.h->max_value_len - 8) {
        char add[13];
        for (unsigned b = 0; b < sizeof add; b++)
            add[b] = (char)('a' + (appends + b) % 26);
        rkv_status st = append(&e, "chain", add, sizeof add);
        if (st != RKV_OK)
            fail_msg("append #%u (value %zu bytes) answered %s", appends + 1, len, rkv_strerror(st));
        memcpy(want + len, add, sizeof add);
        len += sizeof add;
        appends++;
        const char *got = get_str(&e, "chain");
        assert_non_null(got);
        assert_int_equal(strlen(got), len);
        assert_memory_equal(got, want, len);
    }
    print_message("%s: %u appends, value %zu bytes, %llu evictions, %llu page moves\n",
                  policy == RKV_EVICT_LRU ? "lru" : "random", appends, len,
                  (unsigned long long)stats(&e).evictions,
                  (unsigned long long)stats(&e).slab_reassigns);
    assert_true(appends > 250);
    env_free(&e);
}

static void test_append_chain_lru(void **state)
{
    (void)state;
    append_chain_keeps_key(RKV_EVICT_LRU);
}

static void test_append_chain_random(void **state)
{
    (void)state;
    append_chain_keeps_key(RKV_EVICT_RANDOM);
}

/* incr on a full heap: a counter is the only live item of its class, whose
 * page its superseded versions fill; no incr evicts the counter itself. */
static void test_incr_under_pressure(void **state)
{
    (void)state;
    struct env e;
    pressure_heap(&e, RKV_EVICT_LRU);
    uint64_t v = 0;
    assert_int_equal(put(&e, "ctr", "1000000"), RKV_OK);
    for (unsigned i = 1; i <= 1000; i++) {
        rkv_status st = rkv_table_incr(e.t, "ctr", 3, 1, &v);
        if (st != RKV_OK)
            fail_msg("incr #%u answered %s", i, rkv_strerror(st));
        assert_int_equal(v, 1000000 + i);
    }
    assert_string_equal(get_str(&e, "ctr"), "1001000");
    env_free(&e);
}

/* A SET refused for size or memory leaves no item: the value it was to
 * replace is gone for every reader, as memcached's set drops it. The
 * conditional modes (ADD, REPLACE, CAS) refused the same way keep the old
 * item, as memcached's do. */
static void test_failed_set_drops_old_value(void **state)
{
    (void)state;
    struct env e;
    env_make(&e, 4 * MiB, NULL);
    uint32_t max = e.h->max_value_len + e.h->max_key_len - 1; /* for a 1-byte key */
    char *big = calloc(1, (size_t)max + 1);
    uint64_t ver;
    assert_non_null(big);

    assert_int_equal(put(&e, "k", "MOO"), RKV_OK);
    assert_int_equal(put_mode(&e, "k", 1, big, max + 1, RKV_SET, 0, 0, NULL), RKV_TOO_LARGE);
    assert_null(get_str(&e, "k"));
    assert_null(rkv_table_find(e.t, "k", 1));

    assert_int_equal(put_mode(&e, "r", 1, "old", 3, RKV_SET, 0, 0, &ver), RKV_OK);
    assert_int_equal(put_mode(&e, "r", 1, big, max + 1, RKV_REPLACE, 0, 0, NULL), RKV_TOO_LARGE);
    assert_int_equal(put_mode(&e, "r", 1, big, max + 1, RKV_CAS, ver, 0, NULL), RKV_TOO_LARGE);
    assert_int_equal(put_mode(&e, "r", 1, big, max + 1, RKV_ADD, 0, 0, NULL), RKV_TOO_LARGE);
    assert_string_equal(get_str(&e, "r"), "old");
    free(big);
    env_free(&e);

    /* out of memory: no eviction, the heap full of A items, no page for B */
    struct rkv_table_config c = { .slab_page_size = 4096, .grace_ms = 10, .evict = RKV_EVICT_NONE };
    env_make(&e, 128 * 1024, &c);
    unsigned na = 0;
    while (put_sized(&e, 'A', na, A_LEN) == RKV_OK)
        na++;
    char key[32], val[B_LEN];
    memset(val, 'b', sizeof val);
    sized_key(key, sizeof key, 'A', 0);
    uint32_t klen = (uint32_t)strlen(key);
    ver = rkv_item_version(rkv_table_find(e.t, key, klen));
    assert_int_equal(put_mode(&e, key, klen, val, B_LEN, RKV_REPLACE, 0, 0, NULL), RKV_OUT_OF_MEMORY);
    assert_int_equal(put_mode(&e, key, klen, val, B_LEN, RKV_CAS, ver, 0, NULL), RKV_OUT_OF_MEMORY);
    assert_true(has_sized(&e, 'A', 0, A_LEN, 0, NULL));
    assert_int_equal(put_mode(&e, key, klen, val, B_LEN, RKV_SET, 0, 0, NULL), RKV_OUT_OF_MEMORY);
    assert_false(has_sized(&e, 'A', 0, A_LEN, 0, NULL));
    assert_null(rkv_table_find(e.t, key, klen));
    assert_true(has_sized(&e, 'A', 1, A_LEN, 0, NULL)); /* nothing else went */
    env_free(&e);
}

/* ------------------------------------------------------------ flush */

/* flush now: every item goes, whatever its size class, for a reader that
 * looks it up and for one that holds its location (the removal marks it
 * OBSOLETE: design.md invariant 8); incr and the put modes see no item; an
 * item stored after the flush stays. */
static void test_flush_now(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config c = { .evict = RKV_EVICT_LRU, .slab_page_size = 64 * 1024 };
    env_make(&e, 8 * MiB, &c);
    enum { N = 600 };
    uint64_t slot[N];
    char key[32], val[3000];
    memset(val, 'v', sizeof val);
    for (unsigned i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key%u", i);
        assert_int_equal(put_mode(&e, key, (uint32_t)strlen(key), val, 1 + (i * 37) % 2900, RKV_SET,
                                  0, 0, NULL),
                         RKV_OK);
    }
    assert_int_equal(put(&e, "ctr", "7"), RKV_OK);
    for (unsigned i = 0; i < N; i++) {
        struct rkv_lookup l;
        snprintf(key, sizeof key, "key%u", i);
        assert_int_equal(get(&e, key, (uint32_t)strlen(key), 0, val, sizeof val, &l), RKV_OK);
        slot[i] = l.slot;
    }
    assert_int_equal(rkv_table_flush(e.t, 0), N + 1);
    for (unsigned i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key%u", i);
        assert_int_equal(get(&e, key, (uint32_t)strlen(key), 0, val, sizeof val, NULL),
                         RKV_NOT_FOUND);
        assert_int_equal(get(&e, key, (uint32_t)strlen(key), slot[i], val, sizeof val, NULL),
                         RKV_NOT_FOUND);
    }
    uint64_t v;
    assert_int_equal(rkv_table_incr(e.t, "ctr", 3, 1, &v), RKV_NOT_FOUND);
    assert_int_equal(put_mode(&e, "key1", 4, "r", 1, RKV_REPLACE, 0, 0, NULL), RKV_NOT_STORED);
    struct rkv_table_stats s = stats(&e);
    assert_int_equal(s.items, 0);
    assert_int_equal(s.item_bytes, 0);
    assert_int_equal(s.flushed, N + 1);
    assert_int_equal(put(&e, "after", "kept"), RKV_OK);
    assert_int_equal(rkv_table_flush(e.t, 0), 1);
    assert_int_equal(put(&e, "after", "kept"), RKV_OK);
    assert_string_equal(get_str(&e, "after"), "kept");
    env_free(&e);
}

/* flush_all with a delay: nothing goes before its time; the tick at its
 * time removes what was stored before; what is stored after stays. A flush
 * scheduled later replaces an earlier one; a flush now cancels it. */
static void test_flush_scheduled(void **state)
{
    (void)state;
    struct env e;
    struct rkv_table_config fc = { .now_ns = fake_now };
    env_make(&e, 8 * MiB, &fc);
    assert_int_equal(put(&e, "a", "1"), RKV_OK);
    assert_int_equal(rkv_table_flush(e.t, 5), 0);
    assert_int_equal(put(&e, "b", "2"), RKV_OK);
    fake_ns += 4 * 1000000000ull;
    rkv_table_tick(e.t);
    assert_string_equal(get_str(&e, "a"), "1");
    assert_string_equal(get_str(&e, "b"), "2");
    fake_ns += 1000000000ull; /* the flush's time */
    rkv_table_tick(e.t);
    assert_null(get_str(&e, "a"));
    assert_null(get_str(&e, "b"));
    assert_int_equal(put(&e, "c", "3"), RKV_OK);
    fake_ns += 3 * 1000000000ull;
    rkv_table_tick(e.t); /* done once: c stays */
    assert_string_equal(get_str(&e, "c"), "3");

    assert_int_equal(rkv_table_flush(e.t, 100), 0);
    assert_int_equal(rkv_table_flush(e.t, 2), 0); /* replaces the one at 100 */
    fake_ns += 2 * 1000000000ull;
    rkv_table_tick(e.t);
    assert_null(get_str(&e, "c"));

    assert_int_equal(put(&e, "d", "4"), RKV_OK);
    assert_int_equal(rkv_table_flush(e.t, 2), 0);
    assert_int_equal(rkv_table_flush(e.t, 0), 1); /* now, and the scheduled one is off */
    assert_int_equal(put(&e, "e", "5"), RKV_OK);
    fake_ns += 5 * 1000000000ull;
    rkv_table_tick(e.t);
    assert_string_equal(get_str(&e, "e"), "5");
    env_free(&e);
}

int main(void)
{
    rkv_log_set_level(RKV_LOG_ERROR); /* no hugepage warning per test region */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region),
        cmocka_unit_test(test_layout_and_header),
        cmocka_unit_test(test_index_room_taken_as_it_grows),
        cmocka_unit_test(test_index_room_refused),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_insert_update_delete),
        cmocka_unit_test(test_key_and_value_sizes),
        cmocka_unit_test(test_pulled_value),
        cmocka_unit_test(test_put_modes),
        cmocka_unit_test(test_delete_version),
        cmocka_unit_test(test_incr),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_expiry_boundary),
        cmocka_unit_test(test_clock_extrapolation_never_ahead),
        cmocka_unit_test(test_fill_index_to_limit),
        cmocka_unit_test(test_displacement_order),
        cmocka_unit_test(test_heap_full_without_eviction),
        cmocka_unit_test(test_evict_random),
        cmocka_unit_test(test_page_holds_two_half_page_values),
        cmocka_unit_test(test_mix_shifts_small_large_small),
        cmocka_unit_test(test_evict_reserve_of_large_items),
        cmocka_unit_test(test_alloc_waits_counted),
        cmocka_unit_test(test_evict_lru_follows_hints),
        cmocka_unit_test(test_s3fifo_scan_keeps_read_keys),
        cmocka_unit_test(test_s3fifo_unread_oldest_first),
        cmocka_unit_test(test_s3fifo_use_decays),
        cmocka_unit_test(test_s3fifo_ghost_readmits),
        cmocka_unit_test(test_s3fifo_update_keeps_uses),
        cmocka_unit_test(test_evict_when_index_full),
        cmocka_unit_test(test_small_class_hosted_by_larger),
        cmocka_unit_test(test_class_hosted_while_pages_scarce),
        cmocka_unit_test(test_dry_class_borrows_larger_ready),
        cmocka_unit_test(test_pageless_class_hosted_not_moving_pages),
        cmocka_unit_test(test_page_move_lru),
        cmocka_unit_test(test_page_move_random),
        cmocka_unit_test(test_no_page_move_without_eviction),
        cmocka_unit_test(test_automove_lru),
        cmocka_unit_test(test_hints_validated),
        cmocka_unit_test(test_hints_batch_stamps_valid_only),
        cmocka_unit_test(test_torn_read_never_returned),
        cmocka_unit_test(test_item_header_shapes),
        cmocka_unit_test(test_item_shape_beyond_slot),
        cmocka_unit_test(test_items_at_every_alignment),
        cmocka_unit_test(test_state_store_both_parities),
        cmocka_unit_test(test_stale_cached_slot),
        cmocka_unit_test(test_update_forwards),
        cmocka_unit_test(test_meta_state),
        cmocka_unit_test(test_kept_state_races_mark),
        cmocka_unit_test(test_first_bucket_first),
        cmocka_unit_test(test_append_chain_lru),
        cmocka_unit_test(test_append_chain_random),
        cmocka_unit_test(test_incr_under_pressure),
        cmocka_unit_test(test_failed_set_drops_old_value),
        cmocka_unit_test(test_flush_now),
        cmocka_unit_test(test_flush_scheduled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
