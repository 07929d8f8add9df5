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
 * Threads only count; the main thread asserts after joining them. Then
 * deterministic lock checks: writes to other buckets proceed while one is
 * inside its publish, and evicting ahead on a full heap never takes the
 * whole index. Last, the counters kept per writer slot add up exactly when
 * more threads than slots count at once.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "clock.h"
#include "hash.h"
#include "log.h"
#include "lookup.h"
#include "region.h"
#include "table.h"
#include "transport.h"
#include "util.h"

#define STABLE            300 /* never deleted; updated */
#define CHURN             160 /* deleted and re-inserted */
#define KEYS              (STABLE + CHURN)
#define READERS           3
#define BATCH             8
#define RUN_NS            4000000000ull /* the writer runs this long, and on until enough was done */
#define SAFETY_NS         40000000000ull /* ... but not longer than this (meson: 60 s) */
#define MIN_DISPLACEMENTS 1000
#define MIN_LOOKUPS       10000
#define MAX_VALUE         400
#define MAX_RETRIES       100000u

struct shared {
    struct rkv_region region;
    struct rkv_table *t;
    const struct rkv_region_header *h;
    uint64_t acked[KEYS];   /* last sequence number the writer's put returned for (atomic) */
    uint64_t counter_acked; /* last incr result (atomic) */
    int stop;               /* set when the writer is done (atomic) */
    uint64_t lookups;       /* by all readers (atomic) */
    uint64_t cache_hits;    /* by all readers: lookups served by a cached slot (atomic) */
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
            .geom = sh->h,
            .read = read_region,
            .read_ctx = sh,
            .scratch = r->scratch,
            .scratch_len = scratch_len,
            .ops = ops,
            .ops_cap = RKV_ARRAY_SIZE(ops),
            .max_retries = MAX_RETRIES,
        };
        for (unsigned i = 0; i < BATCH; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            which[i] = i < BATCH - 2 ? (unsigned)(x % STABLE) : STABLE + (unsigned)(x % CHURN);
            key_name(names[i], sizeof names[i], which[i]);
            before[i] = __atomic_load_n(&sh->acked[which[i]], __ATOMIC_ACQUIRE);
            l[i] = (struct rkv_lookup){ .key = names[i],
                                        .key_len = (uint32_t)strlen(names[i]),
                                        .cached_slot = r->cached[which[i]],
                                        .buf = values[i],
                                        .buf_len = MAX_VALUE };
        }
        before[BATCH] = __atomic_load_n(&sh->counter_acked, __ATOMIC_ACQUIRE);
        l[BATCH] = (struct rkv_lookup){
            .key = counter_key, .key_len = 3, .buf = values[BATCH], .buf_len = MAX_VALUE
        };
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
                        fprintf(stderr, "reader %u: %s seq %llu after %llu was acknowledged\n", r->id,
                                names[i], (unsigned long long)seq, (unsigned long long)before[i]);
                }
                break;
            case RKV_NOT_FOUND:
                if (which[i] < STABLE && r->false_miss++ == 0)
                    fprintf(stderr, "reader %u: %s reported missing\n", r->id, names[i]);
                break;
            case RKV_RETRY_EXHAUSTED: r->exhausted++; break;
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
                    w->insert_full += st == RKV_OUT_OF_MEMORY; /* index full: allowed */
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
     * the time, and some find no room at all. 64 KiB pages: values of 1 to
     * 400 bytes fill some 30 size classes, each needing pages of its own. */
    struct rkv_table_config c = { .index_share = 64.0 * 64 / (16 << 20),
                                  .grace_ms = 2,
                                  .slab_page_size = 64 << 10 };
    assert_int_equal(rkv_region_create(16 << 20, &sh.region, err, sizeof err), RKV_OK);
    if (rkv_table_create(sh.region.base, sh.region.size, &c, &sh.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    sh.h = rkv_table_header(sh.t);
    assert_int_equal(sh.h->index_capacity, 64);

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
                  "counter %llu\n",
                  (unsigned long long)w.ops, (unsigned long long)s.displacements,
                  (unsigned long long)w.insert_full, (unsigned long long)w.counter);
    print_message("readers: %llu lookups, %llu hits (%llu via cached slot), %llu retries, "
                  "%llu exhausted\n",
                  (unsigned long long)lookups, (unsigned long long)hits,
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
            assert_true(value_ok(rkv_item_value(it), rkv_item_value_len(it), key, &seq));
            assert_int_equal(seq, w.seq[k]);
        }
    }
    rkv_table_destroy(sh.t);
    rkv_region_destroy(&sh.region);
}

/* ------------------------------------------------------------ many writers
 *
 * WRITERS threads change the table at once, as the server's workers do:
 * each owns its own keys (SET, CAS with the version its last write returned,
 * DELETE and ADD), all of them INCR the same counters and SET / ADD /
 * DELETE / CAS a few shared keys. The index is small enough that inserts
 * keep displacing items, also on paths whose stripes another writer holds;
 * READERS threads check every value through the lookup path meanwhile. Every
 * thread runs a fixed number of operations (readers: at least MW_BATCHES
 * batches, and on until the writers are done), so nothing depends on how
 * the scheduler shares the CPUs. Without eviction the table must end exactly
 * as the writers left it (each owned key's last acknowledged value, each
 * counter the number of acknowledged INCRs); with eviction and page moves
 * (a heap full from the start, values that need a class without pages),
 * a key may be gone but never holds anything but its last acknowledged
 * value. */

#define WRITERS     3
#define MW_OWNED    100 /* per writer, never deleted (without eviction) */
#define MW_CHURN    50  /* per writer, deleted and added again */
#define MW_PER      (MW_OWNED + MW_CHURN)
#define MW_SHARED   6     /* keys every writer writes */
#define MW_COUNTERS 3     /* keys every writer increments */
#define MW_OPS      20000 /* per writer */
#define MW_BATCHES  400   /* per reader, at least */
#define BIG_VALUE   1000  /* a size class no other value uses: with eviction, a page move */

struct mw_shared {
    struct rkv_region region;
    struct rkv_table *t;
    const struct rkv_region_header *h;
    bool evict;
    uint64_t acked[WRITERS][MW_PER];  /* last acknowledged seq per owned key (atomic) */
    uint64_t incr_acked[MW_COUNTERS]; /* acknowledged INCRs, all writers (atomic) */
    uint64_t incr_begun[MW_COUNTERS]; /* INCRs begun, all writers (atomic) */
    int writers_done;                 /* (atomic) */
    int readers_started;              /* readers that finished a batch (atomic) */
};

static void mw_key(char *buf, size_t len, unsigned w, unsigned k)
{
    snprintf(buf, len, "%c%u.%03u", k < MW_OWNED ? 'o' : 'c', w, k);
}

static void mw_shared_key(char *buf, size_t len, unsigned k)
{
    snprintf(buf, len, "x%02u", k);
}

static void mw_counter_key(char *buf, size_t len, unsigned k)
{
    snprintf(buf, len, "n%u", k);
}

struct mw_reader {
    struct mw_shared *sh;
    unsigned id;
    uint64_t batches, lookups, wrong_value, stale_value, false_miss, bad_counter;
};

/* Which key a reader's lookup i of a batch asks for; fills name, *before
 * (what the value's seq or count must be at least) and *kind. */
enum mw_kind { MW_OWNED_KEY, MW_CHURN_KEY, MW_SHARED_KEY, MW_COUNTER_KEY };

static enum mw_kind mw_pick(struct mw_shared *sh, uint64_t x, char *name, size_t len, uint64_t *before)
{
    unsigned w = (unsigned)(x % WRITERS), k = (unsigned)((x >> 8) % MW_PER);
    switch ((x >> 24) % 8) {
    case 0:
        mw_shared_key(name, len, (unsigned)((x >> 32) % MW_SHARED));
        *before = 0;
        return MW_SHARED_KEY;
    case 1: {
        unsigned c = (unsigned)((x >> 32) % MW_COUNTERS);
        mw_counter_key(name, len, c);
        *before = __atomic_load_n(&sh->incr_acked[c], __ATOMIC_ACQUIRE);
        return MW_COUNTER_KEY;
    }
    default:
        mw_key(name, len, w, k);
        *before = __atomic_load_n(&sh->acked[w][k], __ATOMIC_ACQUIRE);
        return k < MW_OWNED ? MW_OWNED_KEY : MW_CHURN_KEY;
    }
}

static void mw_check(struct mw_reader *r, enum mw_kind kind, const char *name,
                     const struct rkv_lookup *l, const uint8_t *v, uint64_t before)
{
    uint64_t seq = 0, n = 0;
    char text[32];
    if (l->status == RKV_RETRY_EXHAUSTED)
        return;
    if (l->status == RKV_NOT_FOUND) {
        /* owned keys are never deleted; without eviction never lost */
        if (kind == MW_OWNED_KEY && !r->sh->evict && r->false_miss++ == 0)
            fprintf(stderr, "reader %u: %s reported missing\n", r->id, name);
        return;
    }
    if (l->status != RKV_OK) {
        if (r->wrong_value++ == 0)
            fprintf(stderr, "reader %u: %s status %d\n", r->id, name, l->status);
        return;
    }
    if (kind == MW_COUNTER_KEY) {
        unsigned c = (unsigned)(name[1] - '0');
        uint64_t begun = __atomic_load_n(&r->sh->incr_begun[c], __ATOMIC_ACQUIRE);
        bool number = l->value_len > 0 && l->value_len < sizeof text;
        if (number) {
            memcpy(text, v, l->value_len);
            text[l->value_len] = '\0';
            number = rkv_parse_u64(text, 0, UINT64_MAX, &n);
        }
        /* with eviction a counter may start again from 0 */
        if (!number || n > begun || (!r->sh->evict && n < before))
            if (r->bad_counter++ == 0)
                fprintf(stderr, "reader %u: %s = %llu, %llu acknowledged, %llu begun\n", r->id, name,
                        (unsigned long long)n, (unsigned long long)before, (unsigned long long)begun);
        return;
    }
    if (!value_ok(v, l->value_len, name, &seq)) {
        if (r->wrong_value++ == 0)
            fprintf(stderr, "reader %u: wrong value for %s (%zu bytes)\n", r->id, name, l->value_len);
    } else if (kind != MW_SHARED_KEY && seq < before) {
        if (r->stale_value++ == 0)
            fprintf(stderr, "reader %u: %s seq %llu after %llu was acknowledged\n", r->id, name,
                    (unsigned long long)seq, (unsigned long long)before);
    }
}

static void *mw_reader_main(void *p)
{
    struct mw_reader *r = p;
    struct mw_shared *sh = r->sh;
    size_t scratch_len = rkv_lookup_scratch_need(sh->h, BATCH);
    uint8_t *scratch = malloc(scratch_len);
    struct rkv_read_op ops[64];
    struct rkv_lookup l[BATCH];
    enum mw_kind kind[BATCH];
    uint64_t before[BATCH];
    char names[BATCH][16];
    static __thread uint8_t values[BATCH][BIG_VALUE + 64];
    uint64_t x = 0x9e3779b97f4a7c15ull * (r->id + 7);

    if (scratch == NULL)
        return NULL;
    while (r->batches < MW_BATCHES || !__atomic_load_n(&sh->writers_done, __ATOMIC_ACQUIRE)) {
        struct rkv_lookup_ctx ctx = {
            .geom = sh->h,
            .read = read_region,
            .read_ctx = sh,
            .scratch = scratch,
            .scratch_len = scratch_len,
            .ops = ops,
            .ops_cap = RKV_ARRAY_SIZE(ops),
            .max_retries = MAX_RETRIES,
        };
        for (unsigned i = 0; i < BATCH; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            kind[i] = mw_pick(sh, x, names[i], sizeof names[i], &before[i]);
            l[i] = (struct rkv_lookup){ .key = names[i],
                                        .key_len = (uint32_t)strlen(names[i]),
                                        .buf = values[i],
                                        .buf_len = sizeof values[i] };
        }
        if (rkv_lookup_batch(&ctx, l, BATCH) != RKV_OK) {
            r->wrong_value++;
            break;
        }
        for (unsigned i = 0; i < BATCH; i++)
            mw_check(r, kind[i], names[i], &l[i], values[i], before[i]);
        r->lookups += BATCH;
        if (r->batches++ == 0)
            __atomic_add_fetch(&sh->readers_started, 1, __ATOMIC_RELEASE);
    }
    free(scratch);
    return NULL;
}

struct mw_writer {
    struct mw_shared *sh;
    unsigned id;
    uint64_t seq[MW_PER], version[MW_PER];
    bool present[MW_PER];
    uint64_t errors, incrs[MW_COUNTERS], shared_ok;
};

static rkv_status mw_put(struct mw_writer *w, const char *key, uint64_t seq, rkv_put_mode mode,
                         uint64_t cas, uint64_t *version)
{
    uint8_t val[MAX_VALUE];
    struct rkv_value_src src = { .data = val, .len = make_value(val, key, seq) };
    return rkv_table_put(w->sh->t, key, (uint32_t)strlen(key), &src, mode, cas, 0, 0, version);
}

/* One owned key's write: SET, or CAS with the last version (which only
 * eviction may have taken away), or for churn keys DELETE / ADD. */
static void mw_owned_op(struct mw_writer *w, unsigned k, uint64_t x)
{
    struct mw_shared *sh = w->sh;
    char key[16];
    rkv_status st;
    mw_key(key, sizeof key, w->id, k);
    if (k >= MW_OWNED && w->present[k] && (x & 1)) {
        st = rkv_table_delete(sh->t, key, (uint32_t)strlen(key));
        w->errors += st != RKV_OK && !(sh->evict && st == RKV_NOT_FOUND);
        w->present[k] = false;
        return;
    }
    uint64_t seq = w->seq[k] + 1, version;
    rkv_put_mode mode = !w->present[k] ? RKV_ADD : (x & 2) ? RKV_CAS : RKV_SET;
    st = mw_put(w, key, seq, mode, w->version[k], &version);
    if (st == RKV_OK) {
        w->seq[k] = seq;
        w->version[k] = version;
        w->present[k] = true;
        __atomic_store_n(&sh->acked[w->id][k], seq, __ATOMIC_RELEASE);
        return;
    }
    /* the index may be full (no room even after displacement); with
     * eviction the key may have gone (CAS then finds nothing, ADD a key
     * evicted... never one that exists: nobody else writes it) */
    bool allowed = st == RKV_OUT_OF_MEMORY || (sh->evict && mode == RKV_CAS && st == RKV_NOT_STORED);
    w->errors += !allowed;
    if (sh->evict && st == RKV_NOT_STORED)
        w->present[k] = false;
}

static void mw_shared_op(struct mw_writer *w, uint64_t x)
{
    struct mw_shared *sh = w->sh;
    char key[16];
    rkv_status st;
    mw_shared_key(key, sizeof key, (unsigned)((x >> 8) % MW_SHARED));
    switch ((x >> 16) % 4) {
    case 0: st = mw_put(w, key, x >> 40, RKV_SET, 0, NULL); break;
    case 1: st = mw_put(w, key, x >> 40, RKV_ADD, 0, NULL); break;
    case 2: st = rkv_table_delete(sh->t, key, (uint32_t)strlen(key)); break;
    default: {
        const struct rkv_item *it = rkv_table_find(sh->t, key, (uint32_t)strlen(key));
        uint64_t cas = it ? rkv_item_version(it) : 1;
        st = mw_put(w, key, x >> 40, RKV_CAS, cas, NULL);
        break;
    }
    }
    w->shared_ok += st == RKV_OK;
    w->errors += st != RKV_OK && st != RKV_EXISTS && st != RKV_NOT_FOUND && st != RKV_NOT_STORED &&
                 st != RKV_CAS_MISMATCH && st != RKV_OUT_OF_MEMORY;
}

static void *mw_writer_main(void *p)
{
    struct mw_writer *w = p;
    struct mw_shared *sh = w->sh;
    uint64_t x = 0x2545f4914f6cdd1dull * (w->id + 3);
    char key[16];

    while (__atomic_load_n(&sh->readers_started, __ATOMIC_ACQUIRE) < READERS)
        sched_yield(); /* readers race the writers from the first write on */
    for (unsigned op = 0; op < MW_OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned what = (unsigned)(x % 100);
        if (what < 70) {
            mw_owned_op(w, (unsigned)((x >> 32) % MW_PER), x >> 20);
        } else if (what < 85) {
            unsigned c = (unsigned)((x >> 32) % MW_COUNTERS);
            uint64_t v;
            mw_counter_key(key, sizeof key, c);
            __atomic_add_fetch(&sh->incr_begun[c], 1, __ATOMIC_RELEASE);
            rkv_status st = rkv_table_incr(sh->t, key, (uint32_t)strlen(key), 1, &v);
            if (st == RKV_OK) {
                w->incrs[c]++;
                __atomic_add_fetch(&sh->incr_acked[c], 1, __ATOMIC_RELEASE);
            } else if (sh->evict && st == RKV_NOT_FOUND) {
                struct rkv_value_src zero = { .data = "0", .len = 1 };
                rkv_table_put(sh->t, key, (uint32_t)strlen(key), &zero, RKV_ADD, 0, 0, 0, NULL);
            } else {
                w->errors++;
            }
        } else if (what < 99 || !sh->evict) {
            mw_shared_op(w, x);
        } else {
            /* a value of a class that holds no page yet: a page move */
            uint8_t big[BIG_VALUE];
            memset(big, 'B', sizeof big);
            snprintf(key, sizeof key, "big%u", w->id);
            struct rkv_value_src src = { .data = big, .len = sizeof big };
            rkv_status st = rkv_table_put(sh->t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0,
                                          NULL);
            w->errors += st != RKV_OK && st != RKV_OUT_OF_MEMORY;
        }
        if (op % 256 == 255)
            rkv_table_tick(sh->t);
    }
    return NULL;
}

static void many_writers(bool evict)
{
    static struct mw_shared sh;
    static struct mw_writer w[WRITERS];
    static struct mw_reader rd[READERS];
    char err[512] = "";

    memset(&sh, 0, sizeof sh);
    sh.evict = evict;
    /* Without eviction: 64 buckets (448 slots) for up to 465 keys, as the
     * single-writer test. With it: a 160 KiB region of 4 KiB pages behind
     * the same 64 buckets, so both the heap and the index overfill (the
     * keys' items spread over 4-byte classes: 128 KiB filled the heap long
     * before the index). 64 KiB
     * pages without eviction: some 30 size classes, each with pages of its own. */
    struct rkv_table_config c = { .index_share = 64.0 * 64 / (16 << 20),
                                  .grace_ms = 2,
                                  .slab_page_size = 64 << 10,
                                  .lock_timing = true };
    uint64_t size = 16 << 20;
    if (evict) {
        size = 160 * 1024;
        c = (struct rkv_table_config){ .slab_page_size = 4096,
                                       .grace_ms = 1,
                                       .evict = RKV_EVICT_LRU,
                                       .index_share = 64.0 * 64 / (double)size,
                                       .lock_timing = true };
    }
    assert_int_equal(rkv_region_create(size, &sh.region, err, sizeof err), RKV_OK);
    if (rkv_table_create(sh.region.base, sh.region.size, &c, &sh.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    sh.h = rkv_table_header(sh.t);

    for (unsigned i = 0; i < WRITERS; i++) {
        w[i] = (struct mw_writer){ .sh = &sh, .id = i };
        for (unsigned k = 0; k < MW_OWNED; k++)
            mw_owned_op(&w[i], k, 0);
    }
    for (unsigned k = 0; k < MW_COUNTERS; k++) {
        char key[16];
        struct rkv_value_src zero = { .data = "0", .len = 1 };
        mw_counter_key(key, sizeof key, k);
        assert_int_equal(rkv_table_put(sh.t, key, (uint32_t)strlen(key), &zero, RKV_SET, 0, 0, 0,
                                       NULL),
                         RKV_OK);
    }
    /* with eviction, the heap is full before the writers start */
    struct rkv_table_stats s;
    for (unsigned f = 0; evict && (rkv_table_get_stats(sh.t, &s), s.evictions == 0); f++) {
        char key[16];
        uint8_t val[MAX_VALUE];
        assert_true(f < 10000);
        snprintf(key, sizeof key, "f%u", f);
        struct rkv_value_src src = { .data = val, .len = make_value(val, key, 1) };
        assert_int_equal(rkv_table_put(sh.t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0, NULL),
                         RKV_OK);
    }

    pthread_t wt[WRITERS], rt[READERS];
    for (unsigned i = 0; i < READERS; i++) {
        rd[i] = (struct mw_reader){ .sh = &sh, .id = i };
        assert_int_equal(pthread_create(&rt[i], NULL, mw_reader_main, &rd[i]), 0);
    }
    for (unsigned i = 0; i < WRITERS; i++)
        assert_int_equal(pthread_create(&wt[i], NULL, mw_writer_main, &w[i]), 0);
    for (unsigned i = 0; i < WRITERS; i++)
        pthread_join(wt[i], NULL);
    __atomic_store_n(&sh.writers_done, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < READERS; i++)
        pthread_join(rt[i], NULL);

    rkv_table_get_stats(sh.t, &s);
    uint64_t lookups = 0;
    for (unsigned i = 0; i < READERS; i++)
        lookups += rd[i].lookups;
    print_message("%u writers%s: %llu displacements, %llu evictions, %llu page moves, "
                  "%llu whole-index holds, %llu stripe holds; %u readers: %llu lookups\n",
                  WRITERS, evict ? " (eviction)" : "", (unsigned long long)s.displacements,
                  (unsigned long long)s.evictions, (unsigned long long)s.slab_reassigns,
                  (unsigned long long)s.lock_index.holds, (unsigned long long)s.lock_stripes.holds,
                  READERS, (unsigned long long)lookups);
    for (unsigned i = 0; i < WRITERS; i++)
        assert_int_equal(w[i].errors, 0);
    for (unsigned i = 0; i < READERS; i++) {
        assert_int_equal(rd[i].wrong_value, 0);
        assert_int_equal(rd[i].stale_value, 0);
        assert_int_equal(rd[i].false_miss, 0);
        assert_int_equal(rd[i].bad_counter, 0);
    }
    assert_true(s.displacements > 0);
    if (evict) {
        assert_true(s.evictions > 0);
        assert_true(s.slab_reassigns > 0);
    }

    /* the end state: each owned key holds its last acknowledged value (or,
     * with eviction, nothing); each counter the acknowledged INCRs */
    for (unsigned i = 0; i < WRITERS; i++) {
        for (unsigned k = 0; k < MW_PER; k++) {
            char key[16];
            uint64_t seq;
            mw_key(key, sizeof key, i, k);
            const struct rkv_item *it = rkv_table_find(sh.t, key, (uint32_t)strlen(key));
            if (!evict)
                assert_int_equal(it != NULL, w[i].present[k]);
            else if (!w[i].present[k])
                assert_null(it);
            if (it != NULL) {
                assert_true(value_ok(rkv_item_value(it), rkv_item_value_len(it), key, &seq));
                assert_int_equal(seq, w[i].seq[k]);
            }
        }
    }
    for (unsigned k = 0; k < MW_COUNTERS && !evict; k++) {
        char key[16];
        uint64_t total = 0, n;
        for (unsigned i = 0; i < WRITERS; i++)
            total += w[i].incrs[k];
        mw_counter_key(key, sizeof key, k);
        const struct rkv_item *it = rkv_table_find(sh.t, key, (uint32_t)strlen(key));
        assert_non_null(it);
        char text[32];
        assert_true(rkv_item_value_len(it) > 0 && rkv_item_value_len(it) < sizeof text);
        memcpy(text, rkv_item_value(it), rkv_item_value_len(it));
        text[rkv_item_value_len(it)] = '\0';
        assert_true(rkv_parse_u64(text, 0, UINT64_MAX, &n));
        assert_int_equal(n, total);
    }
    rkv_table_destroy(sh.t);
    rkv_region_destroy(&sh.region);
}

static void test_writers_race_writers(void **state)
{
    (void)state;
    many_writers(false);
}

static void test_writers_race_writers_evicting(void **state)
{
    (void)state;
    many_writers(true);
}

/* ------------------------------------------------------------ bucket locks
 *
 * Deterministic: while one write is inside its publish (the store observer
 * runs there, the key's bucket locks held, a bucket version odd), a write
 * to a key whose buckets share no lock with it completes, and a write to a
 * key that shares a bucket does not. The first part fails with one index
 * lock for all writes (the observer gives up after SAFETY_WAIT_NS and the
 * assertion says so). */

/* A safety net only: 120 s, never reached when it works (10 s was reached once with writers
 * starved by real-time load). */
#define SAFETY_WAIT_NS 120000000000ull

struct overlap {
    struct rkv_table *t;
    char key_b[16], key_c[16];
    int armed, go;                 /* (atomic) */
    int b_done, c_started, c_done; /* (atomic) */
    bool b_done_inside, c_done_inside;
};

static void overlap_observe(void *ctx, uint64_t bucket, unsigned slot, uint64_t word)
{
    struct overlap *o = ctx;
    (void)bucket, (void)slot, (void)word;
    if (!__atomic_exchange_n(&o->armed, 0, __ATOMIC_ACQ_REL))
        return;
    __atomic_store_n(&o->go, 1, __ATOMIC_RELEASE);
    uint64_t until = rkv_now_ns() + SAFETY_WAIT_NS;
    while (!__atomic_load_n(&o->b_done, __ATOMIC_ACQUIRE) && rkv_now_ns() < until)
        sched_yield();
    o->b_done_inside = __atomic_load_n(&o->b_done, __ATOMIC_ACQUIRE);
    while (!__atomic_load_n(&o->c_started, __ATOMIC_ACQUIRE) && rkv_now_ns() < until)
        sched_yield();
    for (unsigned i = 0; i < 1000; i++) /* give a broken lock a chance to show */
        sched_yield();
    o->c_done_inside = __atomic_load_n(&o->c_done, __ATOMIC_ACQUIRE);
}

static rkv_status put_str(struct rkv_table *t, const char *key, const char *val)
{
    struct rkv_value_src src = { .data = val, .len = (uint32_t)strlen(val) };
    return rkv_table_put(t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0, NULL);
}

static void *overlap_b(void *p)
{
    struct overlap *o = p;
    while (!__atomic_load_n(&o->go, __ATOMIC_ACQUIRE))
        sched_yield();
    rkv_status st = put_str(o->t, o->key_b, "b");
    __atomic_store_n(&o->b_done, st == RKV_OK ? 1 : -1, __ATOMIC_RELEASE);
    return NULL;
}

static void *overlap_c(void *p)
{
    struct overlap *o = p;
    while (!__atomic_load_n(&o->go, __ATOMIC_ACQUIRE))
        sched_yield();
    __atomic_store_n(&o->c_started, 1, __ATOMIC_RELEASE);
    rkv_status st = put_str(o->t, o->key_c, "c");
    __atomic_store_n(&o->c_done, st == RKV_OK ? 1 : -1, __ATOMIC_RELEASE);
    return NULL;
}

static bool shares_bucket(const struct rkv_key_hash *a, const struct rkv_key_hash *b)
{
    return a->bucket[0] == b->bucket[0] || a->bucket[0] == b->bucket[1] ||
           a->bucket[1] == b->bucket[0] || a->bucket[1] == b->bucket[1];
}

static void test_disjoint_writes_overlap(void **state)
{
    (void)state;
    static struct overlap o;
    struct rkv_region region;
    char err[512] = "";
    /* 256 buckets: fewer than the table's bucket locks, one lock each */
    struct rkv_table_config c = { .index_share = 256.0 * 64 / (16 << 20) };
    assert_int_equal(rkv_region_create(16 << 20, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &o.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    const struct rkv_region_header *h = rkv_table_header(o.t);
    assert_int_equal(h->index_capacity, 256);

    struct rkv_key_hash ha;
    const char *key_a = "a";
    rkv_header_hash_key(h, key_a, 1, &ha);
    /* c first: its first bucket is a's (one lock). Then b: no bucket shared
     * with a or with c. A b sharing c's other bucket would wait for c, which
     * waits for a, which waits for b inside its publish: a test deadlock that
     * the region's random hash seed made about 1 run in 100. */
    struct rkv_key_hash hc;
    bool have_b = false, have_c = false;
    for (unsigned i = 0; i < 100000 && !have_c; i++) {
        snprintf(o.key_c, sizeof o.key_c, "k%u", i);
        rkv_header_hash_key(h, o.key_c, strlen(o.key_c), &hc);
        have_c = hc.bucket[0] == ha.bucket[0];
    }
    for (unsigned i = 0; i < 100000 && have_c && !have_b; i++) {
        struct rkv_key_hash hk;
        snprintf(o.key_b, sizeof o.key_b, "k%u", i);
        rkv_header_hash_key(h, o.key_b, strlen(o.key_b), &hk);
        have_b = !shares_bucket(&ha, &hk) && !shares_bucket(&hc, &hk);
    }
    assert_true(have_b && have_c);

    pthread_t tb, tc;
    o.armed = 1;
    rkv_table_set_store_observer(o.t, overlap_observe, &o);
    assert_int_equal(pthread_create(&tb, NULL, overlap_b, &o), 0);
    assert_int_equal(pthread_create(&tc, NULL, overlap_c, &o), 0);
    assert_int_equal(put_str(o.t, key_a, "a"), RKV_OK);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    rkv_table_set_store_observer(o.t, NULL, NULL);

    if (!o.b_done_inside)
        fail_msg("a write to other buckets waited for the write inside its publish");
    assert_int_equal(o.b_done, 1);
    assert_false(o.c_done_inside); /* a write to the same bucket waited */
    assert_int_equal(o.c_done, 1);
    assert_non_null(rkv_table_find(o.t, key_a, 1));
    assert_non_null(rkv_table_find(o.t, o.key_b, (uint32_t)strlen(o.key_b)));
    assert_non_null(rkv_table_find(o.t, o.key_c, (uint32_t)strlen(o.key_c)));
    rkv_table_destroy(o.t);
    rkv_region_destroy(&region);
}

/* ------------------------------------------------------------ flush under displacement
 *
 * A flush while a writer keeps a small index nearly full, so that its
 * inserts move items between buckets (cuckoo) throughout: every item stored
 * before the flush began is gone once it returns, wherever displacement
 * moved it meanwhile (a sweep of the index in bucket order could miss an
 * item moved from a bucket not yet swept to one already swept). Which
 * interleaving happens varies; the assertion holds for all of them. */

#define FD_OLD  1400 /* keys stored before the flush: ~78 % of 256 x 7 slots */
#define FD_LIVE 150  /* the writer keeps this many of its own keys */

struct flush_displace {
    struct rkv_table *t;
    int stop;         /* atomic */
    uint64_t inserts; /* atomic */
};

static void *fd_writer(void *p)
{
    struct flush_displace *f = p;
    char key[32];
    for (unsigned i = 0; !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); i++) {
        snprintf(key, sizeof key, "new%u", i);
        put_str(f->t, key, "n");
        if (i >= FD_LIVE) {
            snprintf(key, sizeof key, "new%u", i - FD_LIVE);
            rkv_table_delete(f->t, key, (uint32_t)strlen(key));
        }
        __atomic_fetch_add(&f->inserts, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void test_flush_races_displacement(void **state)
{
    (void)state;
    static struct flush_displace f;
    struct rkv_region region;
    char err[512] = "", key[32];
    struct rkv_table_config c = { .index_share = 256.0 * 64 / (16 << 20) };
    assert_int_equal(rkv_region_create(16 << 20, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &f.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    assert_int_equal(rkv_table_header(f.t)->index_capacity, 256);
    for (unsigned k = 0; k < FD_OLD; k++) {
        snprintf(key, sizeof key, "old%u", k);
        assert_int_equal(put_str(f.t, key, "o"), RKV_OK);
    }
    struct rkv_table_stats s0;
    rkv_table_get_stats(f.t, &s0);

    pthread_t w;
    f.stop = 0;
    f.inserts = 0;
    assert_int_equal(pthread_create(&w, NULL, fd_writer, &f), 0);
    while (__atomic_load_n(&f.inserts, __ATOMIC_ACQUIRE) < 2 * FD_LIVE)
        sched_yield(); /* the writer is displacing by now */
    uint64_t removed = rkv_table_flush(f.t, 0);
    for (unsigned k = 0; k < FD_OLD; k++) {
        snprintf(key, sizeof key, "old%u", k);
        if (rkv_table_find(f.t, key, (uint32_t)strlen(key)) != NULL)
            fail_msg("%s was stored before the flush and is still there", key);
    }
    __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
    pthread_join(w, NULL);
    struct rkv_table_stats s;
    rkv_table_get_stats(f.t, &s);
    print_message("flush removed %llu items while the writer made %llu displacements\n",
                  (unsigned long long)removed,
                  (unsigned long long)(s.displacements - s0.displacements));
    assert_true(removed >= FD_OLD);
    rkv_table_destroy(f.t);
    rkv_region_destroy(&region);
}

/* The same with the index splitting instead: a thread splits one bucket at
 * a time (rkv_table_grow_index) while the flush walks the heap, so slots move
 * from bucket b to b + M under the walk. Rounds of refill and flush until the
 * splitter has made FS_SPLITS splits during flushes; after each flush no key
 * stored before it may be left. Fails with the flush looking items up
 * without their stripes. */
#define FS_KEYS   1200
#define FS_SPLITS 3000

struct flush_split {
    struct rkv_table *t;
    int flushing;    /* 1 while the main thread flushes; 2: stop (atomic) */
    uint64_t splits; /* made while a flush ran (atomic) */
};

static void *fs_splitter(void *p)
{
    struct flush_split *f = p;
    int st;
    while ((st = __atomic_load_n(&f->flushing, __ATOMIC_ACQUIRE)) != 2)
        if (st == 1 && rkv_table_grow_index(f->t, 1) == 1)
            __atomic_fetch_add(&f->splits, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void test_flush_races_splits(void **state)
{
    (void)state;
    static struct flush_split f;
    struct rkv_region region;
    char err[512] = "", key[32];
    struct rkv_table_config c = { .index_start = 4, .evict = RKV_EVICT_NONE };
    assert_int_equal(rkv_region_create(64 << 20, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &f.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    pthread_t w;
    f.flushing = 0;
    f.splits = 0;
    assert_int_equal(pthread_create(&w, NULL, fs_splitter, &f), 0);
    unsigned rounds = 0;
    while (__atomic_load_n(&f.splits, __ATOMIC_RELAXED) < FS_SPLITS && rounds < 10000) {
        for (unsigned k = 0; k < FS_KEYS; k++) {
            snprintf(key, sizeof key, "r%uk%u", rounds, k);
            assert_int_equal(put_str(f.t, key, "v"), RKV_OK);
        }
        __atomic_store_n(&f.flushing, 1, __ATOMIC_RELEASE);
        uint64_t removed = rkv_table_flush(f.t, 0);
        __atomic_store_n(&f.flushing, 0, __ATOMIC_RELEASE);
        for (unsigned k = 0; k < FS_KEYS; k++) {
            snprintf(key, sizeof key, "r%uk%u", rounds, k);
            if (rkv_table_find(f.t, key, (uint32_t)strlen(key)) != NULL)
                fail_msg("round %u: %s was stored before the flush and is still there (%llu "
                         "removed, %llu splits so far)",
                         rounds, key, (unsigned long long)removed,
                         (unsigned long long)__atomic_load_n(&f.splits, __ATOMIC_RELAXED));
        }
        rounds++;
    }
    __atomic_store_n(&f.flushing, 2, __ATOMIC_RELEASE);
    pthread_join(w, NULL);
    print_message("%u flushes with %llu splits during them\n", rounds, (unsigned long long)f.splits);
    rkv_table_destroy(f.t);
    rkv_region_destroy(&region);
}

/* ------------------------------------------------------------ eviction locks
 *
 * Deterministic: on a full heap, a PUT evicts ahead (keeping its class's
 * reserve) holding only its victims' bucket stripes, never the whole index,
 * which would stop every writer. The grace period runs on a clock the test
 * advances past it before every PUT, so evicted memory is always reusable
 * and no PUT runs its class dry (that path, and page moves, do hold the
 * whole index). Fails with evict-ahead under the exclusive index. */

static uint64_t evict_clock_ns = 1000000000ull;

static uint64_t evict_clock(void)
{
    return __atomic_load_n(&evict_clock_ns, __ATOMIC_RELAXED);
}

static void test_evict_ahead_without_whole_index(void **state)
{
    (void)state;
    struct rkv_region region;
    struct rkv_table *t;
    char err[512] = "";
    /* 1 MiB of 4 KiB pages, half of it index: far more slots than items fit,
     * so no insert displaces (or evicts) for want of a slot */
    struct rkv_table_config c = { .slab_page_size = 4096,
                                  .grace_ms = 1,
                                  .evict = RKV_EVICT_LRU,
                                  .index_share = 0.5,
                                  .now_ns = evict_clock,
                                  .lock_timing = true };
    assert_int_equal(rkv_region_create(1 << 20, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);

    struct rkv_table_stats before, after;
    unsigned k = 0;
    for (unsigned phase = 0; phase < 2; phase++) {
        if (phase == 1)
            rkv_table_get_stats(t, &before);
        /* phase 0: fill until eviction runs steadily; 1: the measured PUTs */
        for (unsigned i = 0; i < 20000; i++, k++) {
            char key[16];
            snprintf(key, sizeof key, "e%u", k);
            __atomic_add_fetch(&evict_clock_ns, 2000000ull, __ATOMIC_RELAXED); /* 2 ms */
            assert_int_equal(put_str(t, key, "value"), RKV_OK);
        }
    }
    rkv_table_get_stats(t, &after);
    print_message("evicting PUTs: %llu evictions, %llu whole-index holds, %llu stripe holds\n",
                  (unsigned long long)(after.evictions - before.evictions),
                  (unsigned long long)(after.lock_index.holds - before.lock_index.holds),
                  (unsigned long long)(after.lock_stripes.holds - before.lock_stripes.holds));
    assert_true(after.evictions - before.evictions >= 10000); /* they did evict */
    assert_int_equal(after.insert_failures, 0);
    assert_int_equal(after.lock_index.holds - before.lock_index.holds, 0);
    rkv_table_destroy(t);
    rkv_region_destroy(&region);
}

/* ------------------------------------------------------------ counters
 *
 * The counters no stripe keeps (expirations, insert failures, hints,
 * evictions) are kept per writer slot and summed when stats are read. More
 * threads than there are slots count at once, so some threads share a slot
 * and every slot holds a share; each thread counts what it caused, and the
 * sums must come out exact. Expiry runs on the test's clock, which stands
 * still but for one jump, so what expires and what fails is deterministic. */

#define CT_THREADS    (RKV_THREAD_SLOTS + 6)
#define CT_KEYS       16     /* keys with a TTL each thread stores, then finds expired */
#define CT_HINTS      24     /* valid hints, and as many invalid ones, each thread sends */
#define CT_FAILS      3      /* failed inserts each thread collects on the full heap */
#define CT_PUT_CAP    100000 /* safety net: a thread that never fails stops here */
#define CT_EVICT_KEYS 300    /* new keys each thread stores into the evicting table */

static uint64_t ct_clock_ns = 1000000000ull;

static uint64_t ct_clock(void)
{
    return __atomic_load_n(&ct_clock_ns, __ATOMIC_RELAXED);
}

struct ct_shared {
    struct rkv_table *t;
    pthread_barrier_t step; /* the threads and the main thread, around the clock's jump */
    uint64_t hint;          /* a slot word naming a live item nobody removes */
};

struct ct_thread {
    struct ct_shared *sh;
    pthread_t tid;
    unsigned id;
    uint64_t stored, expired, failed, errors;
};

/* Store key (a 32-byte value) with ttl; counts what came of it. */
static void ct_put(struct ct_thread *w, const char *key, uint32_t ttl)
{
    static const char value[32] = "0123456789abcdef0123456789abcdef";
    struct rkv_value_src src = { .data = value, .len = sizeof value };
    rkv_status st = rkv_table_put(w->sh->t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, ttl, 0,
                                  NULL);
    w->stored += st == RKV_OK;
    w->failed += st == RKV_OUT_OF_MEMORY;
    w->errors += st != RKV_OK && st != RKV_OUT_OF_MEMORY;
}

static void *ct_counting_main(void *p)
{
    struct ct_thread *w = p;
    struct rkv_table *t = w->sh->t;
    char key[32];

    for (unsigned k = 0; k < CT_KEYS; k++) {
        snprintf(key, sizeof key, "x%u.%u", w->id, k);
        ct_put(w, key, 1);
    }
    pthread_barrier_wait(&w->sh->step); /* the main thread moves the clock past the TTLs */
    pthread_barrier_wait(&w->sh->step);
    for (unsigned k = 0; k < CT_KEYS; k++) {
        snprintf(key, sizeof key, "x%u.%u", w->id, k);
        rkv_status st = rkv_table_delete(t, key, (uint32_t)strlen(key));
        w->expired += st == RKV_NOT_FOUND;
        w->errors += st != RKV_NOT_FOUND;
    }
    uint64_t junk = UINT64_MAX;
    for (unsigned i = 0; i < CT_HINTS; i++) {
        rkv_table_hints(t, &w->sh->hint, 1);
        rkv_table_hints(t, &junk, 1);
    }
    /* the clock stands still from here, so nothing freed is reusable: the
     * heap fills, and each thread collects its failures */
    for (unsigned k = 0; w->failed < CT_FAILS && k < CT_PUT_CAP; k++) {
        snprintf(key, sizeof key, "y%u.%u", w->id, k);
        ct_put(w, key, 0);
    }
    w->errors += w->failed < CT_FAILS;
    return NULL;
}

static void *ct_evicting_main(void *p)
{
    struct ct_thread *w = p;
    char key[32];
    pthread_barrier_wait(&w->sh->step);
    for (unsigned k = 0; k < CT_EVICT_KEYS; k++) {
        snprintf(key, sizeof key, "z%u.%u", w->id, k);
        ct_put(w, key, 0);
    }
    return NULL;
}

/* Start CT_THREADS threads running fn over sh; with `jump`, move the clock
 * 10 s on between their two waits at sh->step, else meet them at one. */
static void ct_run(struct ct_shared *sh, struct ct_thread *w, void *(*fn)(void *), bool jump)
{
    assert_int_equal(pthread_barrier_init(&sh->step, NULL, CT_THREADS + 1), 0);
    for (unsigned i = 0; i < CT_THREADS; i++) {
        w[i] = (struct ct_thread){ .sh = sh, .id = i };
        assert_int_equal(pthread_create(&w[i].tid, NULL, fn, &w[i]), 0);
    }
    pthread_barrier_wait(&sh->step);
    if (jump) {
        __atomic_add_fetch(&ct_clock_ns, 10 * RKV_NS_PER_S, __ATOMIC_RELAXED);
        pthread_barrier_wait(&sh->step);
    }
    for (unsigned i = 0; i < CT_THREADS; i++) {
        pthread_join(w[i].tid, NULL);
        assert_int_equal(w[i].errors, 0);
    }
    pthread_barrier_destroy(&sh->step);
}

static void test_counters_summed_from_writers(void **state)
{
    (void)state;
    static struct ct_thread w[CT_THREADS];
    struct ct_shared sh = { 0 };
    struct rkv_region region;
    char err[512] = "";
    /* 4 MiB of 4 KiB pages, a quarter of it index: room for every thread's
     * TTL keys and a few thousand more */
    struct rkv_table_config c = {
        .slab_page_size = 4096, .grace_ms = 1, .index_share = 0.25, .now_ns = ct_clock
    };
    assert_int_equal(rkv_region_create(4 << 20, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &sh.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    /* the hint: the slot word of a key nobody touches, as a client read it */
    assert_int_equal(put_str(sh.t, "hinted", "value"), RKV_OK);
    struct rkv_key_hash h;
    const struct rkv_region_header *hdr = rkv_table_header(sh.t);
    const struct rkv_bucket *buckets = (const void *)((const uint8_t *)region.base +
                                                      hdr->index_offset);
    const struct rkv_item *it = rkv_table_find(sh.t, "hinted", 6);
    assert_non_null(it);
    rkv_header_hash_key(hdr, "hinted", 6, &h);
    for (unsigned b = 0; b < 2 && sh.hint == 0; b++)
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++)
            if (buckets[h.bucket[b]].slot[s] != 0 &&
                rkv_slot_offset(buckets[h.bucket[b]].slot[s]) ==
                    (uint64_t)((const uint8_t *)it - (const uint8_t *)region.base))
                sh.hint = buckets[h.bucket[b]].slot[s];
    assert_true(sh.hint != 0);

    ct_run(&sh, w, ct_counting_main, true);
    uint64_t expired = 0, failed = 0;
    for (unsigned i = 0; i < CT_THREADS; i++) {
        expired += w[i].expired;
        failed += w[i].failed;
    }
    struct rkv_table_stats s;
    rkv_table_get_stats(sh.t, &s);
    assert_int_equal(expired, (uint64_t)CT_THREADS * CT_KEYS); /* every TTL key was stored */
    assert_int_equal(s.expirations, expired);
    assert_int_equal(s.insert_failures, failed);
    assert_int_equal(s.hints, (uint64_t)CT_THREADS * CT_HINTS);
    assert_int_equal(s.hints_ignored, (uint64_t)CT_THREADS * CT_HINTS);
    rkv_table_destroy(sh.t);
    rkv_region_destroy(&region);

    /* Evictions: an LRU table too small for what the threads store. Nothing
     * is deleted, replaced or expires, so every stored item is either still
     * there or was counted evicted, whichever writer evicted it. */
    c = (struct rkv_table_config){
        .slab_page_size = 4096, .grace_ms = 1, .index_share = 0.25, .evict = RKV_EVICT_LRU
    };
    assert_int_equal(rkv_region_create(1 << 20, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &sh.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    ct_run(&sh, w, ct_evicting_main, false);
    uint64_t stored = 0;
    for (unsigned i = 0; i < CT_THREADS; i++)
        stored += w[i].stored;
    rkv_table_get_stats(sh.t, &s);
    print_message("%u threads: %llu stored, %llu evicted, %llu left\n", CT_THREADS,
                  (unsigned long long)stored, (unsigned long long)s.evictions,
                  (unsigned long long)s.items);
    assert_true(s.evictions > 0);
    assert_int_equal(s.items + s.evictions, stored);
    rkv_table_destroy(sh.t);
    rkv_region_destroy(&region);
}

int main(void)
{
    rkv_log_set_level(RKV_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_race_writer),
        cmocka_unit_test(test_writers_race_writers),
        cmocka_unit_test(test_writers_race_writers_evicting),
        cmocka_unit_test(test_disjoint_writes_overlap),
        cmocka_unit_test(test_flush_races_displacement),
        cmocka_unit_test(test_flush_races_splits),
        cmocka_unit_test(test_evict_ahead_without_whole_index),
        cmocka_unit_test(test_counters_summed_from_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
