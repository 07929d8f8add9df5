/* test_shared_handle.c — one rkv handle (RKV_OPT_SHARED) used by many
 * threads at once, against two real servers.
 *
 * Threads run GET, PUT, DELETE and INCR through one handle, on keys of
 * their own (whose every reply is known: the value a thread last wrote,
 * or absent after its DELETE) and on keys they all share (counters whose
 * totals are exact at the end; values any thread may have written, each
 * of which must come back whole). A failing thread records what it saw and
 * stops; the main thread checks. Also: error messages stay with the thread
 * whose call failed; a server killed under GETting threads fails their
 * calls with a connection error, never a crash or a wrong value; a server
 * stopped while threads GET its keys lock-free, until a PUT times out and
 * retires the view they read through (under ThreadSanitizer a retire that
 * does not wait for its readers is reported there); unknown flag bits are
 * refused.
 *
 * Nothing waits on time: threads start together at a barrier and run a
 * fixed number of operations; the kill comes after a barrier too. The
 * servers never evict (--evict none): a lost item is a bug, not memory.
 *
 * Usage: test_shared_handle PATH/TO/rkv-server
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rkv.h"
#include "server_proc.h"

#define NSERVERS  2
#define NTHREADS  8
#define OWN_KEYS  32  /* per thread */
#define ROUNDS    40  /* over its keys */
#define COUNTERS  4   /* shared INCR keys */
#define SHARED_KV 8   /* shared PUT/GET keys */
#define MAX_VALUE 600 /* longest value written (some go by several lines) */

static const char *server_bin;
static unsigned uri_seq;

struct fixture {
    struct server_proc sp[NSERVERS];
    rkv_client *c;
};

static int start_with(void **state, const struct rkv_options *o)
{
    static const char *const extra[] = { "--memory", "64M", "--evict", "none", NULL };
    struct fixture *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    *state = f;
    unsigned base = 700 + uri_seq;
    uri_seq += NSERVERS;
    return server_shards_start(f->sp, NSERVERS, server_bin, base, extra, o, &f->c);
}

static int setup(void **state)
{
    const struct rkv_options o = { .flags = RKV_OPT_SHARED };
    return start_with(state, &o);
}

static int setup_short_timeout(void **state)
{
    const struct rkv_options o = { .flags = RKV_OPT_SHARED, .timeout_ms = 300, .reconnect_ms = 50 };
    return start_with(state, &o);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f == NULL)
        return 0;
    int rc = server_shards_stop(f->sp, NSERVERS, f->c);
    free(f);
    return rc;
}

/* One worker thread: its index, the handle, and the first thing that went
 * wrong ("" while all is well). */
struct worker {
    pthread_t tid;
    unsigned id;
    rkv_client *c;
    pthread_barrier_t *start;
    char failed[512];
    unsigned conn_errors; /* kill test: calls that said the server is gone */
};

static void fail_at(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_at(struct worker *w, const char *fmt, ...)
{
    va_list ap;
    if (w->failed[0])
        return;
    va_start(ap, fmt);
    vsnprintf(w->failed, sizeof w->failed, fmt, ap);
    va_end(ap);
}

/* The value thread t writes to its key k in round r: a header naming all
 * three, then bytes derived from them, of a length that varies with k. */
static size_t own_value(unsigned t, unsigned k, unsigned r, char *buf)
{
    size_t len = 24 + (k * 37 + r) % (MAX_VALUE - 24);
    int h = snprintf(buf, 24, "t%u:k%u:r%u:", t, k, r);
    for (size_t i = (size_t)h; i < len; i++)
        buf[i] = (char)('a' + (t * 7 + k * 3 + r + i) % 26);
    return len;
}

/* A shared key's value: "s<thread>:<seq>:" then its own length in digits
 * repeated; whole if it parses and checks. */
static size_t shared_value(unsigned t, unsigned seq, char *buf)
{
    size_t len = 40 + (t * 13 + seq) % 200;
    int h = snprintf(buf, 40, "s%u:%u:%zu:", t, seq, len);
    memset(buf + h, 'x', len - (size_t)h);
    return len;
}

static bool shared_value_whole(const char *v, size_t n)
{
    unsigned t, seq;
    size_t len;
    char expect[MAX_VALUE];
    if (n >= MAX_VALUE || sscanf(v, "s%u:%u:%zu:", &t, &seq, &len) != 3 || len != n)
        return false;
    return shared_value(t, seq, expect) == n && memcmp(expect, v, n) == 0;
}

static void *mixed_worker(void *arg)
{
    struct worker *w = arg;
    rkv_client *c = w->c;
    char key[64], val[MAX_VALUE], got[MAX_VALUE];
    unsigned last_round[OWN_KEYS]; /* ROUNDS: deleted */
    size_t n;
    pthread_barrier_wait(w->start);
    for (unsigned k = 0; k < OWN_KEYS; k++)
        last_round[k] = ROUNDS;
    for (unsigned r = 0; r < ROUNDS && !w->failed[0]; r++) {
        for (unsigned k = 0; k < OWN_KEYS && !w->failed[0]; k++) {
            int kl = snprintf(key, sizeof key, "own:%u:%u", w->id, k);
            rkv_status st;
            /* what the key holds now, as this thread alone wrote it */
            st = rkv_get(c, key, (size_t)kl, got, sizeof got, &n, NULL);
            if (last_round[k] == ROUNDS) {
                if (st != RKV_NOT_FOUND)
                    fail_at(w, "get %s after delete: %s", key, rkv_status_name(st));
            } else {
                size_t vl = own_value(w->id, k, last_round[k], val);
                if (st != RKV_OK || n != vl || memcmp(got, val, vl) != 0)
                    fail_at(w, "get %s: %s, %zu bytes, want round %u's %zu", key,
                            rkv_status_name(st), n, last_round[k], vl);
            }
            /* every third (k + r): delete it; else write this round's value */
            if ((k + r) % 3 == 0) {
                st = rkv_delete(c, key, (size_t)kl);
                if (st != (last_round[k] == ROUNDS ? RKV_NOT_FOUND : RKV_OK))
                    fail_at(w, "delete %s: %s", key, rkv_status_name(st));
                last_round[k] = ROUNDS;
            } else {
                size_t vl = own_value(w->id, k, r, val);
                uint64_t ver = 0;
                st = rkv_put(c, key, (size_t)kl, val, vl, NULL, &ver);
                if (st != RKV_OK || ver == 0)
                    fail_at(w, "put %s: %s", key, rkv_status_name(st));
                last_round[k] = r;
            }
            /* the shared keys: a counter and a value of anyone's */
            kl = snprintf(key, sizeof key, "ctr:%u", (r + k) % COUNTERS);
            uint64_t now;
            st = rkv_incr(c, key, (size_t)kl, 1, &now);
            if (st != RKV_OK || now == 0)
                fail_at(w, "incr %s (round %u, key %u): %s: %s", key, r, k, rkv_status_name(st),
                        rkv_last_error(c));
            kl = snprintf(key, sizeof key, "kv:%u", (w->id + k) % SHARED_KV);
            if (k % 2 == 0) {
                size_t vl = shared_value(w->id, r * OWN_KEYS + k, val);
                st = rkv_put(c, key, (size_t)kl, val, vl, NULL, NULL);
                if (st != RKV_OK)
                    fail_at(w, "put %s: %s", key, rkv_status_name(st));
            } else {
                st = rkv_get(c, key, (size_t)kl, got, sizeof got, &n, NULL);
                if (st != RKV_NOT_FOUND && (st != RKV_OK || !shared_value_whole(got, n)))
                    fail_at(w, "get %s: %s or a torn value (%zu bytes)", key, rkv_status_name(st), n);
            }
        }
    }
    return NULL;
}

static void run_workers(rkv_client *c, void *(*fn)(void *), struct worker *w, unsigned n)
{
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, n), 0);
    for (unsigned i = 0; i < n; i++) {
        w[i] = (struct worker){ .id = i, .c = c, .start = &start };
        assert_int_equal(pthread_create(&w[i].tid, NULL, fn, &w[i]), 0);
    }
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(pthread_join(w[i].tid, NULL), 0);
    pthread_barrier_destroy(&start);
}

/* Mixed GET/PUT/DELETE/INCR on own and shared keys: every reply as
 * expected, and each counter's total exact. */
static void test_mixed_threads(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    struct worker w[NTHREADS];
    char key[32], buf[32];
    size_t n;

    for (unsigned i = 0; i < COUNTERS; i++) {
        int kl = snprintf(key, sizeof key, "ctr:%u", i);
        assert_int_equal(rkv_put(c, key, (size_t)kl, "0", 1, NULL, NULL), RKV_OK);
    }
    rkv_reset_counters(c);
    run_workers(c, mixed_worker, w, NTHREADS);
    for (unsigned i = 0; i < NTHREADS; i++)
        if (w[i].failed[0])
            fail_msg("thread %u: %s", i, w[i].failed);
    uint64_t total = 0;
    for (unsigned i = 0; i < COUNTERS; i++) {
        int kl = snprintf(key, sizeof key, "ctr:%u", i);
        assert_int_equal(rkv_get(c, key, (size_t)kl, buf, sizeof buf - 1, &n, NULL), RKV_OK);
        buf[n] = '\0';
        total += strtoull(buf, NULL, 10);
    }
    assert_int_equal(total, (uint64_t)NTHREADS * ROUNDS * OWN_KEYS);
    /* every thread's GETs are counted, lock-free or not */
    struct rkv_counters k;
    rkv_get_counters(c, &k);
    assert_true(k.gets >= (uint64_t)NTHREADS * ROUNDS * OWN_KEYS * 3 / 2);
    assert_int_equal(k.gets, k.get_hits + k.get_misses);
    assert_int_equal(rkv_ping(c), RKV_OK);
}

/* A failed call's message is its thread's: another thread's last_error is
 * untouched by it. */
static void *refused_worker(void *arg)
{
    struct worker *w = arg;
    char buf[8];
    size_t n;
    pthread_barrier_wait(w->start);
    if (w->id == 0) {
        if (rkv_get(w->c, "k", 0, buf, sizeof buf, &n, NULL) != RKV_INVALID)
            fail_at(w, "an empty key was not refused");
        if (strstr(rkv_last_error(w->c), "empty") == NULL)
            fail_at(w, "message \"%s\" does not say the key is empty", rkv_last_error(w->c));
    }
    pthread_barrier_wait(w->start);
    if (w->id == 1 && rkv_last_error(w->c)[0] != '\0')
        fail_at(w, "thread 1 sees thread 0's message \"%s\"", rkv_last_error(w->c));
    return NULL;
}

static void test_errors_are_per_thread(void **state)
{
    struct fixture *f = *state;
    struct worker w[2];
    run_workers(f->c, refused_worker, w, 2);
    for (unsigned i = 0; i < 2; i++)
        if (w[i].failed[0])
            fail_msg("thread %u: %s", i, w[i].failed);
}

/* Server 0 is killed while threads GET and PUT: every call answers OK with
 * the right value, or a connection error; none crashes or hangs (the view
 * the lock-free GETs read through is retired before its mapping goes). */
static pthread_barrier_t kill_go;

static void *kill_worker(void *arg)
{
    struct worker *w = arg;
    char key[32], got[64];
    size_t n;
    pthread_barrier_wait(w->start);
    for (unsigned i = 0; i < 4000 && !w->failed[0]; i++) {
        if (i == 100)
            pthread_barrier_wait(&kill_go); /* the main thread kills, once all are here */
        int kl = snprintf(key, sizeof key, "pre:%u", i % 64);
        rkv_status st = i % 10 == 0 ? rkv_put(w->c, key, (size_t)kl, key, (size_t)kl, NULL, NULL)
                                    : rkv_get(w->c, key, (size_t)kl, got, sizeof got, &n, NULL);
        /* a reconnect that reaches the dying server's socket is hung up on:
         * RKV_SERVER_BUSY, as for any handle */
        if (st == RKV_CONNECTION || st == RKV_TIMEOUT || st == RKV_SERVER_BUSY)
            w->conn_errors++;
        else if (st == RKV_OK && i % 10 != 0 && (n != (size_t)kl || memcmp(got, key, n) != 0))
            fail_at(w, "get %s: wrong value", key);
        else if (st != RKV_OK)
            fail_at(w, "%s: %s", key, rkv_status_name(st));
    }
    return NULL;
}

static void test_server_killed_under_threads(void **state)
{
    struct fixture *f = *state;
    struct worker w[4];
    for (unsigned i = 0; i < 64; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "pre:%u", i);
        assert_int_equal(rkv_put(f->c, key, (size_t)kl, key, (size_t)kl, NULL, NULL), RKV_OK);
    }
    assert_int_equal(pthread_barrier_init(&kill_go, NULL, 5), 0);
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 4), 0);
    for (unsigned i = 0; i < 4; i++) {
        w[i] = (struct worker){ .id = i, .c = f->c, .start = &start };
        assert_int_equal(pthread_create(&w[i].tid, NULL, kill_worker, &w[i]), 0);
    }
    pthread_barrier_wait(&kill_go);
    server_kill(&f->sp[0]);
    unsigned conn_errors = 0;
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(w[i].tid, NULL), 0);
        if (w[i].failed[0])
            fail_msg("thread %u: %s", i, w[i].failed);
        conn_errors += w[i].conn_errors;
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&kill_go);
    assert_true(conn_errors > 0); /* half the keys live on the dead server */
}

/* Server 0 stops (SIGSTOP) while threads GET its keys: its region is still
 * mapped and alive, so their lock-free GETs go on succeeding until a PUT
 * times out and takes the shard down, retiring the view they read through
 * and unmapping the region. No GET may read through the retired view (it
 * would fault, or return a value from freed memory): each answers the
 * key's value or a connection error. The readers stop only after the PUT
 * has returned and they have made more GETs, so the retire always falls
 * among their GETs, whatever the scheduling. */
static int writer_done;
static const char *stop_keys[16];
static size_t stop_klen[16];

static void *stop_reader(void *arg)
{
    struct worker *w = arg;
    char got[64];
    size_t n;
    unsigned after = 0;
    pthread_barrier_wait(w->start);
    for (unsigned i = 0; after < 2000 && !w->failed[0]; i++) {
        after += __atomic_load_n(&writer_done, __ATOMIC_ACQUIRE);
        const char *key = stop_keys[i % 16];
        size_t kl = stop_klen[i % 16];
        rkv_status st = rkv_get(w->c, key, kl, got, sizeof got, &n, NULL);
        if (st == RKV_CONNECTION || st == RKV_TIMEOUT || st == RKV_SERVER_BUSY)
            w->conn_errors++;
        else if (st != RKV_OK || n != kl || memcmp(got, key, n) != 0)
            fail_at(w, "get %s: %s", key, rkv_status_name(st));
    }
    return NULL;
}

static void test_view_retired_under_readers(void **state)
{
    struct fixture *f = *state;
    struct worker w[3];
    char keys[16][32];
    pthread_barrier_t start;
    for (unsigned i = 0, k = 0; k < 16; i++) {
        int kl = snprintf(keys[k], sizeof keys[k], "stop:%u", i);
        if (rkv_shard_of(f->c, keys[k], (size_t)kl) != 0)
            continue;
        stop_keys[k] = keys[k];
        stop_klen[k] = (size_t)kl;
        assert_int_equal(rkv_put(f->c, keys[k], (size_t)kl, keys[k], (size_t)kl, NULL, NULL), RKV_OK);
        k++;
    }
    writer_done = 0;
    assert_int_equal(pthread_barrier_init(&start, NULL, 4), 0);
    for (unsigned i = 0; i < 3; i++) {
        w[i] = (struct worker){ .id = i, .c = f->c, .start = &start };
        assert_int_equal(pthread_create(&w[i].tid, NULL, stop_reader, &w[i]), 0);
    }
    assert_int_equal(server_pause(&f->sp[0]), 0);
    pthread_barrier_wait(&start);
    rkv_status st = rkv_put(f->c, stop_keys[0], stop_klen[0], "x", 1, NULL, NULL);
    __atomic_store_n(&writer_done, 1, __ATOMIC_RELEASE);
    unsigned conn_errors = 0;
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(pthread_join(w[i].tid, NULL), 0);
        conn_errors += w[i].conn_errors;
    }
    assert_int_equal(server_resume(&f->sp[0]), 0);
    pthread_barrier_destroy(&start);
    assert_int_equal(st, RKV_TIMEOUT);
    for (unsigned i = 0; i < 3; i++)
        if (w[i].failed[0])
            fail_msg("thread %u: %s", i, w[i].failed);
    assert_true(conn_errors > 0); /* the shard was down for their last GETs */
}

static void test_unknown_flags_refused(void **state)
{
    struct fixture *f = *state;
    const struct rkv_options o = { .flags = 0x80 };
    rkv_client *c = NULL;
    assert_int_equal(rkv_connect(f->sp[0].uri, &o, &c), RKV_INVALID);
    assert_null(c);
    assert_non_null(strstr(rkv_last_error(NULL), "flags"));
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mixed_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_are_per_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_killed_under_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_retired_under_readers, setup_short_timeout,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_flags_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
