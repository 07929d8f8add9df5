/* test_table_concurrency.c — reader threads racing a writer, the way clients
 * race the server: readers look keys up with common/lookup.c's
 * rkv_lookup_batch, copying straight out of the region while one writer
 * thread updates, deletes and re-inserts keys in an index small enough that
 * inserts keep displacing items between buckets (cuckoo moves), and with a
 * grace period short enough that freed memory is reused during the run.
 *
 * Every value encodes its key and a per-key sequence number and is filled
 * with bytes derived from both, so a reader can check each value it gets:
 *   - it was written for that key (no torn or misdirected value);
 *   - its sequence number is at least the one the writer had acknowledged
 *     before the lookup began (no stale value after an acknowledged write,
 *     also when served through a cached location);
 *   - keys that are never deleted are never reported missing, however they
 *     move (design.md invariants 1, 2 and 4).
 * Threads only count; the main thread asserts after joining them.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "log.h"
#include "lookup.h"
#include "region.h"
#include "table.h"
#include "transport.h"
#include "util.h"

#define STABLE       300     /* never deleted; updated */
#define CHURN        160     /* deleted and re-inserted */
#define KEYS         (STABLE + CHURN)
#define READERS      3
#define BATCH        8
#define RUN_NS       4000000000ull   /* the writer runs this long, and on until enough was done */
#define SAFETY_NS    40000000000ull  /* ... but not longer than this (meson: 60 s) */
#define MIN_DISPLACEMENTS 1000
#define MIN_LOOKUPS  10000
#define MAX_VALUE    400
#define MAX_RETRIES  100000u

struct shared {
    struct rkv_region region;
    struct rkv_table *t;
    const struct rkv_region_header *h;
    uint64_t acked[KEYS];    /* last sequence number the writer's put returned for (atomic) */
    uint64_t counter_acked;  /* last incr result (atomic) */
    int stop;                /* set when the writer is done (atomic) */
    uint64_t lookups;        /* by all readers (atomic) */
    uint64_t cache_hits;     /* by all readers: lookups served by a cached slot (atomic) */
};

static const char *const counter_key = "ctr";

static void key_name(char *buf, size_t len, unsigned k)
{
    snprintf(buf, len, "%c%04u", k < STABLE ? 's' : 'c', k);
}

static uint8_t key_sum(const char *key)
{
    uint8_t s = 0;
    for (; *key; key++)
        s = (uint8_t)(s * 31 + (uint8_t)*key);
    return s;
}

/* "key|seq|" then filler bytes derived from key and seq; 32..331 bytes. */
static uint32_t make_value(uint8_t *buf, const char *key, uint64_t seq)
{
    int n = snprintf((char *)buf, MAX_VALUE, "%s|%llu|", key, (unsigned long long)seq);
    uint32_t len = 32 + (uint32_t)((seq * 37 + key_sum(key)) % 300);
    for (uint32_t i = (uint32_t)n; i < len; i++)
        buf[i] = (uint8_t)(key_sum(key) + seq + i);
    return len;
}

/* Is v exactly a value make_value() wrote for `key`? Its seq goes to *seq. */
static bool value_ok(const uint8_t *v, size_t len, const char *key, uint64_t *seq)
{
    size_t kl = strlen(key), i = kl + 1;
    uint64_t s = 0;
    if (len < kl + 3 || len > MAX_VALUE || memcmp(v, key, kl) != 0 || v[kl] != '|')
        return false;
    for (; i < len && v[i] >= '0' && v[i] <= '9'; i++)
        s = s * 10 + (uint64_t)(v[i] - '0');
    if (i == len || v[i] != '|')
        return false;
    uint8_t expect[MAX_VALUE];
    if (make_value(expect, key, s) != len || memcmp(expect, v, len) != 0)
        return false;
    *seq = s;
    return true;
}

/* ------------------------------------------------------------ readers */

struct reader {
    struct shared *sh;
    unsigned id;
    uint64_t lookups, hits, cache_hits, retries, exhausted;
    uint64_t wrong_value, stale_value, false_miss, bad_counter;
    uint64_t cached[KEYS];
    uint8_t *scratch;
};

/* Copies each op out of the region. Every fourth round trip dawdles between
 * ops, as a READ that crosses the network does, which widens the window in
 * which a writer can move an item between the two buckets being read. */
static rkv_status read_region(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    const struct shared *sh = ctx;
    static __thread unsigned round;
    bool slow = (round++ & 3) == 0;
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].offset + ops[i].len > sh->region.size)
            return RKV_PROTOCOL;
        memcpy(ops[i].dst, (const uint8_t *)sh->region.base + ops[i].offset, ops[i].len);
        for (unsigned spin = 0; slow && spin < 200; spin++)
            __asm__ __volatile__("" ::: "memory");
    }
    return RKV_OK;
}

static void check_counter(struct reader *r, const struct rkv_lookup *l, const uint8_t *v,
                          uint64_t before)
{
    char text[32];
    uint64_t n = 0, after = __atomic_load_n(&r->sh->counter_acked, __ATOMIC_ACQUIRE);
    if (l->status != RKV_OK || l->value_len == 0 || l->value_len >= sizeof text) {
        r->bad_counter += l->status != RKV_RETRY_EXHAUSTED;
        return;
    }
    memcpy(text, v, l->value_len);
    text[l->value_len] = '\0';
    if (!rkv_parse_u64(text, 0, UINT64_MAX, &n) || n < before || n > after + 1)
        r->bad_counter++;
}

static void *reader_main(void *p)
{
    struct reader *r = p;
    struct shared *sh = r->sh;
    size_t scratch_len = rkv_lookup_scratch_need(sh->h, BATCH + 1);
    struct rkv_read_op ops[64];
    struct rkv_lookup l[BATCH + 1];
    unsigned which[BATCH];
    uint64_t before[BATCH + 1];
    char names[BATCH][16];
    static __thread uint8_t values[BATCH + 1][MAX_VALUE];
    uint64_t x = 0x9e3779b97f4a7c15ull * (r->id + 1);

    r->scratch = malloc(scratch_len);
    if (r->scratch == NULL)
        return NULL;
    while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
        struct rkv_lookup_ctx ctx = {
            .geom = sh->h, .read = read_region, .read_ctx = sh, .scratch = r->scratch,
            .scratch_len = scratch_len, .ops = ops, .ops_cap = RKV_ARRAY_SIZE(ops),
            .max_retries = MAX_RETRIES,
        };
        for (unsigned i = 0; i < BATCH; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            which[i] = i < BATCH - 2 ? (unsigned)(x % STABLE) : STABLE + (unsigned)(x % CHURN);
            key_name(names[i], sizeof names[i], which[i]);
            before[i] = __atomic_load_n(&sh->acked[which[i]], __ATOMIC_ACQUIRE);
            l[i] = (struct rkv_lookup){ .key = names[i], .key_len = (uint32_t)strlen(names[i]),
                                        .cached_slot = r->cached[which[i]],
                                        .buf = values[i], .buf_len = MAX_VALUE };
        }
        before[BATCH] = __atomic_load_n(&sh->counter_acked, __ATOMIC_ACQUIRE);
        l[BATCH] = (struct rkv_lookup){ .key = counter_key, .key_len = 3,
                                        .buf = values[BATCH], .buf_len = MAX_VALUE };
        if (rkv_lookup_batch(&ctx, l, BATCH + 1) != RKV_OK) {
            r->wrong_value++;
            break;
        }
        r->retries += ctx.retries;
        check_counter(r, &l[BATCH], values[BATCH], before[BATCH]);
        uint64_t cached = 0;
        for (unsigned i = 0; i < BATCH; i++)
            cached += l[i].status == RKV_OK && l[i].cache_used;
        __atomic_add_fetch(&sh->lookups, BATCH, __ATOMIC_RELAXED);
        __atomic_add_fetch(&sh->cache_hits, cached, __ATOMIC_RELAXED);
        for (unsigned i = 0; i < BATCH; i++) {
            uint64_t seq;
            r->lookups++;
            switch (l[i].status) {
            case RKV_OK:
                r->hits++;
                r->cache_hits += (uint64_t)l[i].cache_used;
                r->cached[which[i]] = l[i].slot;
                if (!value_ok(values[i], l[i].value_len, names[i], &seq)) {
                    if (r->wrong_value++ == 0)
                        fprintf(stderr, "reader %u: wrong value for %s (%zu bytes)\n", r->id,
                                names[i], l[i].value_len);
                } else if (seq < before[i]) {
                    if (r->stale_value++ == 0)
                        fprintf(stderr, "reader %u: %s seq %llu after %llu was acknowledged\n",
                                r->id, names[i], (unsigned long long)seq,
                                (unsigned long long)before[i]);
                }
                break;
            case RKV_NOT_FOUND:
                if (which[i] < STABLE && r->false_miss++ == 0)
                    fprintf(stderr, "reader %u: %s reported missing\n", r->id, names[i]);
                break;
            case RKV_RETRY_EXHAUSTED:
                r->exhausted++;
                break;
            default:
                if (r->wrong_value++ == 0)
                    fprintf(stderr, "reader %u: %s status %d\n", r->id, names[i], l[i].status);
                break;
            }
        }
    }
    free(r->scratch);
    return NULL;
}

/* ------------------------------------------------------------ writer */

struct writer {
    struct shared *sh;
    uint64_t seq[KEYS];
    bool present[KEYS];
    uint64_t ops, insert_full, errors, counter;
};

static rkv_status write_key(struct writer *w, unsigned k)
{
    char key[16];
    uint8_t val[MAX_VALUE];
    key_name(key, sizeof key, k);
    uint64_t seq = ++w->seq[k];
    struct rkv_value_src src = { .data = val, .len = make_value(val, key, seq) };
    rkv_status st = rkv_table_put(w->sh->t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0, NULL);
    if (st == RKV_OK) {
        w->present[k] = true;
        __atomic_store_n(&w->sh->acked[k], seq, __ATOMIC_RELEASE);
    }
    return st;
}

/* Done when the run has lasted RUN_NS and did what the test means to
 * exercise (how much that is in RUN_NS is up to the scheduler: a starved
 * reader does less), or SAFETY_NS passed (the assertions then say what fell
 * short). Writer thread: the only one that changes the table. */
static bool run_done(struct shared *sh, uint64_t start)
{
    uint64_t ran = rkv_now_ns() - start;
    if (ran >= SAFETY_NS)
        return true;
    if (ran < RUN_NS)
        return false;
    struct rkv_table_stats s;
    rkv_table_get_stats(sh->t, &s);
    return s.displacements > MIN_DISPLACEMENTS &&
           __atomic_load_n(&sh->lookups, __ATOMIC_RELAXED) > MIN_LOOKUPS &&
           __atomic_load_n(&sh->cache_hits, __ATOMIC_RELAXED) > 0;
}

static void *writer_main(void *p)
{
    struct writer *w = p;
    struct shared *sh = w->sh;
    uint64_t x = 0x2545f4914f6cdd1dull, start = rkv_now_ns();
    char key[16];

    while (!run_done(sh, start)) {
        for (unsigned burst = 0; burst < 64; burst++, w->ops++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            unsigned op = (unsigned)(x % 100);
            if (op < 35) {
                w->errors += write_key(w, (unsigned)((x >> 8) % STABLE)) != RKV_OK;
            } else if (op < 92) {
                unsigned k = STABLE + (unsigned)((x >> 8) % CHURN);
                if (w->present[k]) {
                    key_name(key, sizeof key, k);
                    w->errors += rkv_table_delete(sh->t, key, (uint32_t)strlen(key)) != RKV_OK;
                    w->present[k] = false;
                } else {
                    rkv_status st = write_key(w, k);
                    w->insert_full += st == RKV_OUT_OF_MEMORY;  /* index full: allowed */
                    w->errors += st != RKV_OK && st != RKV_OUT_OF_MEMORY;
                }
            } else {
                uint64_t v;
                if (rkv_table_incr(sh->t, counter_key, 3, 1, &v) == RKV_OK && v == w->counter + 1) {
                    w->counter = v;
                    __atomic_store_n(&sh->counter_acked, v, __ATOMIC_RELEASE);
                } else {
                    w->errors++;
                }
            }
        }
        rkv_table_tick(sh->t);
    }
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* ------------------------------------------------------------ the test */

static void test_readers_race_writer(void **state)
{
    (void)state;
    static struct shared sh;
    static struct writer w;
    static struct reader rd[READERS];
    char err[512] = "";

    /* 64 buckets (448 slots) for up to 461 keys: inserts displace items all
     * the time, and some find no room at all. */
    struct rkv_table_config c = { .index_share = 64.0 * 64 / (16 << 20), .grace_ms = 2 };
    assert_int_equal(rkv_region_create(16 << 20, &sh.region, err, sizeof err), RKV_OK);
    if (rkv_table_create(sh.region.base, sh.region.size, &c, &sh.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    sh.h = rkv_table_header(sh.t);
    assert_int_equal(sh.h->bucket_count, 64);

    w.sh = &sh;
    for (unsigned k = 0; k < STABLE; k++)
        assert_int_equal(write_key(&w, k), RKV_OK);
    struct rkv_value_src zero = { .data = "0", .len = 1 };
    assert_int_equal(rkv_table_put(sh.t, counter_key, 3, &zero, RKV_SET, 0, 0, 0, NULL), RKV_OK);

    pthread_t wt, rt[READERS];
    for (unsigned i = 0; i < READERS; i++) {
        rd[i] = (struct reader){ .sh = &sh, .id = i };
        assert_int_equal(pthread_create(&rt[i], NULL, reader_main, &rd[i]), 0);
    }
    assert_int_equal(pthread_create(&wt, NULL, writer_main, &w), 0);
    pthread_join(wt, NULL);
    for (unsigned i = 0; i < READERS; i++)
        pthread_join(rt[i], NULL);

    struct rkv_table_stats s;
    rkv_table_get_stats(sh.t, &s);
    uint64_t lookups = 0, hits = 0, cache_hits = 0, retries = 0, exhausted = 0;
    for (unsigned i = 0; i < READERS; i++) {
        lookups += rd[i].lookups;
        hits += rd[i].hits;
        cache_hits += rd[i].cache_hits;
        retries += rd[i].retries;
        exhausted += rd[i].exhausted;
    }
    print_message("writer: %llu ops, %llu displacements, %llu inserts found the index full, "
                  "counter %llu\n", (unsigned long long)w.ops, (unsigned long long)s.displacements,
                  (unsigned long long)w.insert_full, (unsigned long long)w.counter);
    print_message("readers: %llu lookups, %llu hits (%llu via cached slot), %llu retries, "
                  "%llu exhausted\n", (unsigned long long)lookups, (unsigned long long)hits,
                  (unsigned long long)cache_hits, (unsigned long long)retries,
                  (unsigned long long)exhausted);

    assert_int_equal(w.errors, 0);
    for (unsigned i = 0; i < READERS; i++) {
        assert_int_equal(rd[i].wrong_value, 0);
        assert_int_equal(rd[i].stale_value, 0);
        assert_int_equal(rd[i].false_miss, 0);
        assert_int_equal(rd[i].bad_counter, 0);
    }
    /* the run did what it is meant to exercise */
    assert_true(s.displacements > MIN_DISPLACEMENTS);
    assert_true(lookups > MIN_LOOKUPS);
    assert_true(cache_hits > 0);
    assert_true(exhausted * 1000 <= lookups);

    /* and the table ends exactly as the writer left it */
    for (unsigned k = 0; k < KEYS; k++) {
        char key[16];
        key_name(key, sizeof key, k);
        const struct rkv_item *it = rkv_table_find(sh.t, key, (uint32_t)strlen(key));
        assert_int_equal(it != NULL, w.present[k]);
        uint64_t seq;
        if (it != NULL) {
            assert_true(value_ok(it->data + it->key_len, it->value_len, key, &seq));
            assert_int_equal(seq, w.seq[k]);
        }
    }
    rkv_table_destroy(sh.t);
    rkv_region_destroy(&sh.region);
}

int main(void)
{
    rkv_log_set_level(RKV_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_race_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
