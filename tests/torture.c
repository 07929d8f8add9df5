/* torture.c — one-sided consistency under load, checked value by value.
 *
 * A real rkv-server with three workers (connections are spread over them,
 * so the writers' writes are applied in parallel), W writer processes and R
 * reader processes. Each hot key is owned by one writer, which updates it
 * with increasing versions, deletes and re-inserts it as fast as it can; a
 * filler population keeps the index nearly full so re-inserts displace
 * other items (cuckoo moves) and small
 * values of varying sizes force freed memory to be reused. Half the readers
 * use the location cache, half always go through the index. A caching reader
 * alternates between two handles that share the process's cache, so each
 * GET may start from a location the other handle cached before any number
 * of updates (followed by forwards), deletes, cuckoo moves, memory reuse
 * and, with eviction, page moves; the forwards followed and stale cached
 * locations met are printed.
 *
 * Every value is "key|version|len|checksum|padding", with its own XXH3
 * checksum. Shared memory records, per key, the last version a writer
 * *started* and the last one *acknowledged* (and whether it was a delete).
 * A reader snapshots both before its GET and again after, and reports:
 *   - garbage:   a value whose own checksum or key is wrong (torn / foreign);
 *   - stale:     a version older than one acknowledged before the GET began;
 *   - future:    a version no writer had started by the time the GET ended;
 *   - false miss: NOT_FOUND while the key was present and untouched for the
 *                 whole GET (checked only when eviction is off).
 *   - regress:   a version older than one this same reader already saw for
 *                 the key (a value, or a miss explained by an acknowledged
 *                 delete): a monotonic-reads violation. Each reader keeps
 *                 that history in its own memory.
 * Readers come in two types: rkv_get (one key per call) and rkv_mget (a
 * batch of hot keys per call, the first key asked twice). The two lookups of
 * one key in one batch run in lockstep and may observe different versions
 * in either order (each is a valid read of some version current during the
 * call), so each result on its own gets the stale/future checks against the
 * call's start and end, and the monotonic-reads check applies across calls:
 * both copies are checked against the history from before the call, and the
 * history takes the newer of them after it.
 * It prints operations checked (per reader type, and how many were checked
 * against a remembered version) and anomalies found; it fails on any
 * anomaly, on a reader type that checked nothing, and on one that found
 * enough values to have met a key twice yet checked nothing against its
 * history (so neither check can pass vacuously).
 *
 * Usage: torture PATH/TO/rkv-server [SECONDS_PER_PHASE]
 * Phase 1: no eviction (false misses checked). Phase 2: eviction (lru) with
 * the key space larger than memory.
 * RKV_TORTURE_PHASES=restart: phase 1's server with --state-file, stopped
 * cleanly once 20,000 GETs are checked and started again on the file while
 * writers and readers go on (they reconnect; calls that meet no server are
 * counted, not failed): false misses stay checked across the restart (every
 * item must come back), and at least 99 % of the items must. crash: the same,
 * but SIGKILLed mid-write, so the next start is empty and misses are no
 * longer false; stale, future, garbage and regress still are (nothing old
 * comes back). restarts: both. fdstore: the crash again, with this process
 * as systemd's file-descriptor store (server_proc.h fake_fdstore) and no
 * state file: the next server is handed the killed one's region, so misses
 * are still false (every acknowledged write must come back) and at least
 * 99 % of the items must. Each step waits for GET counts and for every
 * writer and reader to be answered again, never for time; these ignore
 * SECONDS_PER_PHASE and RKV_TORTURE_GETS.
 * Environment (perf/soak.sh uses these): RKV_TORTURE_PHASES=evict runs phase
 * 2 only (noevict: phase 1 only); RKV_TORTURE_GETS=N also ends a phase once
 * N GETs are checked; RKV_TORTURE_MEMORY sets both servers' --memory.
 * RKV_TORTURE_URI=rdma://HOST:PORT runs the one phase RKV_TORTURE_PHASES names
 * against a server started elsewhere with that phase's flags (the verbs
 * suite's two-guest step: the server in one guest, torture in the other,
 * a lossy link between); it is neither started nor stopped here.
 * RKV_TORTURE_READY=PATH: create PATH once every writer and reader has
 * connected (so a test can make the link bad only then). A phase's seconds
 * count from that moment, not from the start: connecting over rdma_cm on a
 * loaded TCG host can take longer than a whole phase.
 * RKV_TORTURE_CONNECT_DELAY_MS=N: writers and readers wait N ms before they
 * connect (tests/torture_ready.sh: connections slower than a phase).
 * The last line is "torture: N GETs checked, M anomalies, passed|FAILED".
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "rkv.h"
#include "server_proc.h"
#include "util.h"

#define HOT_KEYS  64
#define WRITERS   2
#define READERS   4
#define DELETED   (1ull << 63)
#define MGET_KEYS 6 /* keys per rkv_mget batch; the first is asked twice */

enum reader_type { READ_GET, READ_MGET, READER_TYPES };
#define READERS_PER_TYPE (READERS / READER_TYPES)
static const char *const reader_type_name[READER_TYPES] = { "get", "mget" };

struct key_state {
    _Atomic uint64_t started; /* last version a writer began writing (| DELETED) */
    _Atomic uint64_t acked;   /* last version acknowledged (| DELETED) */
};

struct shared {
    struct key_state k[HOT_KEYS];
    _Atomic uint64_t checked, garbage, stale, future, false_miss, regress, errors, refused;
    _Atomic uint64_t type_checked[READER_TYPES]; /* GETs checked, per reader type */
    _Atomic uint64_t type_found[READER_TYPES];   /* of those, well-formed hot values */
    _Atomic uint64_t type_history[READER_TYPES]; /* of those, checked against a remembered version */
    _Atomic uint64_t forwards, cache_stale;      /* what caching readers met (rkv_counters) */
    _Atomic int stop;
    _Atomic unsigned connected; /* writers and readers past connect */
    _Atomic unsigned gave_up;   /* writers and readers whose connect failed */
    unsigned fillers;           /* cold keys preloaded; every 50th deleted */
    uint64_t gets_target;       /* RKV_TORTURE_GETS: stop once this many are checked (0: none) */
    /* restart and crash phases: the server goes away once, mid-load */
    bool restarts;                /* connection errors are the restart's: counted, not failed */
    _Atomic int lossy;            /* the cache may have lost items (a crash): no false misses */
    _Atomic int epoch;            /* 1 once the second server is up */
    _Atomic uint64_t unavailable; /* calls that met no server (the restart's gap) */
    _Atomic uint64_t after[WRITERS + READERS]; /* each one's calls answered in epoch 1 */
};

/* What one reader has seen of each hot key: the monotonic-reads history. */
struct history {
    uint64_t seen[HOT_KEYS]; /* highest version this reader got as a value */
    uint64_t gone[HOT_KEYS]; /* highest acknowledged delete that explained a miss */
};

/* One lookup of hot key i: the key's state before the call and after it. */
struct hot_read {
    unsigned i;
    uint64_t acked0, started0, started1;
};

/* How long a process may take to connect: 5 s, or 30 s to a server
 * elsewhere (RKV_TORTURE_URI: another qemu guest, a slow emulated link). */
static unsigned connect_ms = 5000;
static unsigned connect_delay_ms; /* RKV_TORTURE_CONNECT_DELAY_MS */

/* Count an error; the first few say what and why (rkv_last_error). */
static void count_error(struct shared *sh, rkv_client *c, rkv_status st, const char *what)
{
    /* a connection the stopping server closed before answering reads as
     * RKV_SERVER_BUSY: the restart's too */
    if (sh->restarts && (st == RKV_CONNECTION || st == RKV_TIMEOUT || st == RKV_SERVER_BUSY)) {
        atomic_fetch_add(&sh->unavailable, 1);
        usleep(1000); /* not a spin against a server that is not there */
        return;
    }
    if (atomic_fetch_add(&sh->errors, 1) < 5)
        fprintf(stderr, "torture: %s: %s: %s\n", what, rkv_status_name(st),
                c ? rkv_last_error(c) : "");
}

/* Wait until every writer and reader has connected or given up (bounded:
 * their own connects give up after connect_ms; the bound is a safety net),
 * then, when all connected, create RKV_TORTURE_READY's file. */
static void wait_connected(struct shared *sh)
{
    uint64_t bound_ms = 2ull * connect_ms + 10000 + connect_delay_ms;
    uint64_t deadline = rkv_now_ns() + bound_ms * 1000000ull;
    while (atomic_load(&sh->connected) + atomic_load(&sh->gave_up) < WRITERS + READERS &&
           rkv_now_ns() < deadline)
        usleep(1000);
    const char *path = getenv("RKV_TORTURE_READY");
    if (path == NULL || atomic_load(&sh->connected) < WRITERS + READERS)
        return;
    FILE *f = fopen(path, "w");
    if (f != NULL)
        fclose(f);
}

/* RKV_TORTURE_CONNECT_DELAY_MS: a writer's or reader's wait before it connects. */
static void connect_delay(void)
{
    if (connect_delay_ms != 0)
        usleep((useconds_t)connect_delay_ms * 1000);
}

static bool phase_over(struct shared *sh)
{
    return atomic_load(&sh->stop) ||
           (sh->gets_target != 0 && atomic_load(&sh->checked) >= sh->gets_target);
}

static void hot_key(char *buf, size_t len, unsigned i)
{
    snprintf(buf, len, "hot:%u", i);
}

static size_t make_value(char *buf, size_t cap, const char *key, uint64_t version, size_t pad)
{
    int n = snprintf(buf, cap, "%s|%llu|%zu|", key, (unsigned long long)version, pad);
    size_t len = (size_t)n + 16 + pad;
    char hex[17];
    if (n < 0 || len > cap)
        return 0;
    for (size_t i = 0; i < pad; i++)
        buf[(size_t)n + 16 + i] = (char)('A' + (version * 31 + i) % 26);
    uint64_t sum = XXH3_64bits(buf, (size_t)n) ^ XXH3_64bits(buf + n + 16, pad);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sum);
    memcpy(buf + n, hex, 16);
    return len;
}

/* Returns the version encoded in a well-formed value for `key`, or 0. */
static uint64_t check_value(const char *v, size_t len, const char *key)
{
    char tmp[4096];
    unsigned long long ver;
    size_t pad;
    char k[64];
    if (len >= sizeof tmp)
        return 0;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    if (sscanf(tmp, "%63[^|]|%llu|%zu|", k, &ver, &pad) != 3 || strcmp(k, key) != 0)
        return 0;
    char expect[4096];
    size_t elen = make_value(expect, sizeof expect, key, ver, pad);
    return elen == len && memcmp(expect, v, len) == 0 ? ver : 0;
}

static void writer(struct shared *sh, const char *uri, unsigned id)
{
    connect_delay();
    rkv_client *c = connect_retry(uri, NULL, connect_ms);
    char key[32], val[2048];
    unsigned seed = id * 7919u + 1;
    if (c == NULL) {
        count_error(sh, NULL, RKV_CONNECTION, "writer connect");
        atomic_fetch_add(&sh->gave_up, 1);
        return;
    }
    atomic_fetch_add(&sh->connected, 1);
    while (!phase_over(sh)) {
        unsigned i = (unsigned)rand_r(&seed) % HOT_KEYS;
        if (i % WRITERS != id)
            continue;
        hot_key(key, sizeof key, i);
        struct key_state *ks = &sh->k[i];
        uint64_t v = (atomic_load(&ks->started) & ~DELETED) + 1;
        bool del = rand_r(&seed) % 8 == 0;
        atomic_store(&ks->started, v | (del ? DELETED : 0));
        rkv_status st;
        if (del) {
            st = rkv_delete(c, key, strlen(key));
            st = st == RKV_NOT_FOUND ? RKV_OK : st;
        } else {
            size_t len = make_value(val, sizeof val, key, v, (size_t)rand_r(&seed) % 1500);
            st = rkv_put(c, key, strlen(key), val, len, NULL, NULL);
        }
        if (st == RKV_OK) {
            atomic_store(&ks->acked, v | (del ? DELETED : 0));
            if (atomic_load(&sh->epoch) == 1)
                atomic_fetch_add(&sh->after[id], 1);
        } else if (st == RKV_OUT_OF_MEMORY)
            atomic_fetch_add(&sh->refused, 1); /* full table, eviction off: refused, nothing lost */
        else
            count_error(sh, c, st, del ? "delete" : "put");
        /* on failure `started` stays ahead of `acked`: readers treat the key as
         * being written from then on, which is the truth for a lost reply */
    }
    rkv_close(c);
}

/* Checks one hot-key result against the writers' record around the call
 * and against what this reader saw before the call (h, not yet updated).
 * Returns the version of a well-formed value, else 0. */
static uint64_t check_hot(struct shared *sh, rkv_client *c, const struct history *h,
                          enum reader_type t, const struct hot_read *r, rkv_status st,
                          const char *buf, size_t n, bool evicting)
{
    char key[32];
    uint64_t acked_ver = r->acked0 & ~DELETED, before = h->seen[r->i], ver = 0;
    hot_key(key, sizeof key, r->i);
    if (st != RKV_OK && st != RKV_NOT_FOUND && st != RKV_RETRY_EXHAUSTED) {
        count_error(sh, c, st, "get");
        return 0;
    }
    atomic_fetch_add(&sh->checked, 1);
    atomic_fetch_add(&sh->type_checked[t], 1);
    evicting |= atomic_load(&sh->lossy) != 0;
    if (st == RKV_OK) {
        ver = check_value(buf, n, key);
        if (ver != 0)
            atomic_fetch_add(&sh->type_found[t], 1);
        if (ver != 0 && (before != 0 || h->gone[r->i] != 0))
            atomic_fetch_add(&sh->type_history[t], 1);
        if (ver == 0)
            atomic_fetch_add(&sh->garbage, 1);
        else if (ver < acked_ver && !(r->acked0 & DELETED))
            atomic_fetch_add(&sh->stale, 1);
        else if ((r->acked0 & DELETED) && ver <= acked_ver)
            atomic_fetch_add(&sh->stale, 1); /* deleted before we began, yet old data */
        else if (ver > (r->started1 & ~DELETED))
            atomic_fetch_add(&sh->future, 1);
        else if (ver < before || ver < h->gone[r->i])
            atomic_fetch_add(&sh->regress, 1); /* older than what we already saw */
    } else if (st == RKV_NOT_FOUND) {
        bool quiet = r->started0 == r->acked0 && r->started1 == r->started0;
        if (!evicting && quiet && r->acked0 != 0 && !(r->acked0 & DELETED))
            atomic_fetch_add(&sh->false_miss, 1);
    }
    return ver;
}

/* After the checks: the history takes what this call showed (ver: the
 * value's version from check_hot). */
static void remember(struct history *h, const struct hot_read *r, rkv_status st, uint64_t ver)
{
    if (st == RKV_OK) {
        if (ver > h->seen[r->i])
            h->seen[r->i] = ver;
    } else if (st == RKV_NOT_FOUND && (r->acked0 & DELETED)) {
        uint64_t d = r->acked0 & ~DELETED; /* the miss is that delete's */
        if (d > h->gone[r->i])
            h->gone[r->i] = d;
    }
}

static void snapshot_before(struct shared *sh, struct hot_read *r, unsigned i)
{
    r->i = i;
    r->acked0 = atomic_load(&sh->k[i].acked);
    r->started0 = atomic_load(&sh->k[i].started);
}

/* A cold key that hot inserts may be displacing right now. */
static void read_cold(struct shared *sh, rkv_client *c, unsigned *seed)
{
    char key[32], buf[4096];
    unsigned f = (unsigned)rand_r(seed) % sh->fillers;
    size_t n;
    snprintf(key, sizeof key, "cold:%u", f);
    rkv_status st = rkv_get(c, key, strlen(key), buf, sizeof buf, &n, NULL);
    if (st != RKV_OK && st != RKV_NOT_FOUND && st != RKV_RETRY_EXHAUSTED) {
        count_error(sh, c, st, "get (cold)");
        return;
    }
    atomic_fetch_add(&sh->checked, 1);
    atomic_fetch_add(&sh->type_checked[READ_GET], 1);
    if (st == RKV_OK && (n != 1 || buf[0] != 'c'))
        atomic_fetch_add(&sh->garbage, 1);
    else if (st == RKV_NOT_FOUND && f % 50 != 0 && !atomic_load(&sh->lossy))
        atomic_fetch_add(&sh->false_miss, 1);
}

static void read_hot(struct shared *sh, struct history *h, rkv_client *c, unsigned *seed,
                     bool evicting)
{
    char buf[4096];
    char key[32];
    struct hot_read r;
    size_t n;
    snapshot_before(sh, &r, (unsigned)rand_r(seed) % HOT_KEYS);
    hot_key(key, sizeof key, r.i);
    rkv_status st = rkv_get(c, key, strlen(key), buf, sizeof buf, &n, NULL);
    r.started1 = atomic_load(&sh->k[r.i].started);
    remember(h, &r, st, check_hot(sh, c, h, READ_GET, &r, st, buf, n, evicting));
}

/* One rkv_mget of MGET_KEYS hot keys, ops[0]'s key asked again last. */
static void read_hot_batch(struct shared *sh, struct history *h, rkv_client *c, unsigned *seed,
                           bool evicting)
{
    char bufs[MGET_KEYS][4096];
    char keys[MGET_KEYS][32];
    struct rkv_get_op ops[MGET_KEYS];
    struct hot_read r[MGET_KEYS];
    uint64_t ver[MGET_KEYS];
    for (unsigned j = 0; j < MGET_KEYS; j++) {
        unsigned i = j == MGET_KEYS - 1 ? r[0].i : (unsigned)rand_r(seed) % HOT_KEYS;
        snapshot_before(sh, &r[j], i);
        hot_key(keys[j], sizeof keys[j], i);
        ops[j] = (struct rkv_get_op){
            .key = keys[j], .key_len = strlen(keys[j]), .buf = bufs[j], .buf_len = sizeof bufs[j]
        };
    }
    rkv_status st = rkv_mget(c, ops, MGET_KEYS);
    if (st != RKV_OK) {
        count_error(sh, c, st, "mget");
        return;
    }
    for (unsigned j = 0; j < MGET_KEYS; j++)
        r[j].started1 = atomic_load(&sh->k[r[j].i].started);
    /* every result against the history from before the call ... */
    for (unsigned j = 0; j < MGET_KEYS; j++)
        ver[j] = check_hot(sh, c, h, READ_MGET, &r[j], ops[j].status, bufs[j], ops[j].value_len,
                           evicting);
    /* ... which only then takes the newest of them */
    for (unsigned j = 0; j < MGET_KEYS; j++)
        remember(h, &r[j], ops[j].status, ver[j]);
}

/* Reader id: even ids look keys up through the index, odd ones through the
 * location cache; ids 0-1 call rkv_get, 2-3 rkv_mget. */
static void reader(struct shared *sh, const char *uri, unsigned id, bool evicting)
{
    struct rkv_options o = { .location_cache = id % 2 ? (unsigned)-1 : 0 };
    connect_delay();
    rkv_client *cs[2] = { connect_retry(uri, &o, connect_ms), connect_retry(uri, &o, connect_ms) };
    enum reader_type t = id / 2 % READER_TYPES == 0 ? READ_GET : READ_MGET;
    struct history *h = calloc(1, sizeof *h);
    unsigned seed = id * 104729u + 3;
    if (cs[0] == NULL || cs[1] == NULL || h == NULL) {
        count_error(sh, NULL, RKV_CONNECTION, "reader connect");
        atomic_fetch_add(&sh->gave_up, 1);
        goto out;
    }
    atomic_fetch_add(&sh->connected, 1);
    for (unsigned op = 0; !phase_over(sh); op++) {
        rkv_client *c = cs[op % 2];
        uint64_t unavailable = atomic_load(&sh->unavailable);
        int epoch = atomic_load(&sh->epoch);
        if (t == READ_MGET)
            read_hot_batch(sh, h, c, &seed, evicting);
        else if (sh->fillers && rand_r(&seed) % 4 == 0)
            read_cold(sh, c, &seed);
        else
            read_hot(sh, h, c, &seed, evicting);
        if (epoch == 1 && atomic_load(&sh->unavailable) == unavailable)
            atomic_fetch_add(&sh->after[WRITERS + id], 1); /* answered (or undercounted) */
    }
    for (unsigned i = 0; i < 2; i++) {
        struct rkv_counters k;
        rkv_get_counters(cs[i], &k);
        atomic_fetch_add(&sh->forwards, k.forwards);
        atomic_fetch_add(&sh->cache_stale, k.cache_stale);
    }
out:
    free(h);
    rkv_close(cs[0]);
    rkv_close(cs[1]);
}

/* Fill the index to ~85% of its slots with cold keys (or until the server
 * refuses), then free every 50th, so hot re-inserts run in a nearly full
 * index and must displace other items (cuckoo moves). */
static unsigned preload_fillers(const char *uri)
{
    rkv_client *c = connect_retry(uri, NULL, connect_ms);
    char key[32], stats[4096];
    size_t len;
    unsigned n = 0;
    if (c == NULL || rkv_stats(c, 0, stats, sizeof stats, &len) != RKV_OK) {
        rkv_close(c);
        return 0;
    }
    const char *b = strstr(stats, "\nbuckets ");
    unsigned long long buckets = b ? strtoull(b + 9, NULL, 10) : 0;
    unsigned target = (unsigned)(buckets * 7 * 85 / 100);
    /* batches of 64: one doorbell each, so the preload is quick even where
     * a round trip is slow (the Soft-RoCE VM) */
    char keys[64][32];
    struct rkv_put_op ops[64];
    bool full = false;
    while (n < target && !full) {
        unsigned k = 0;
        for (; k < 64 && n + k < target; k++) {
            snprintf(keys[k], sizeof keys[k], "cold:%u", n + k);
            ops[k] = (struct rkv_put_op){
                .key = keys[k], .key_len = strlen(keys[k]), .value = "c", .value_len = 1
            };
        }
        if (rkv_mput(c, ops, k) != RKV_OK)
            break;
        for (unsigned i = 0; i < k && !full; i++) {
            full = ops[i].status != RKV_OK; /* fillers are cold:0 .. cold:n-1, all stored */
            n += !full;
        }
    }
    for (unsigned i = 0; i < n; i += 50) {
        snprintf(key, sizeof key, "cold:%u", i);
        rkv_delete(c, key, strlen(key));
    }
    rkv_close(c);
    return n;
}

/* The kinds of phase: the server throughout (eviction off or on), or one
 * server stopped mid-load and a second started on its --state-file (a
 * clean stop: every item kept; SIGKILL: the next start is empty). */
enum phase_kind { PHASE_NOEVICT, PHASE_EVICT, PHASE_RESTART, PHASE_CRASH, PHASE_FDSTORE };
static const char *const phase_name[] = { "no-evict", "evict", "restart", "crash", "fd-store crash" };

#define RESTART_GETS      20000 /* GETs checked before the restart, and again after it */
#define RESTART_AFTER_OPS 100   /* calls each writer and reader has answered after it */
#define RESTART_BOUND_S   120   /* a safety net: a phase that gets nowhere fails */

/* The server's `items` stat; 0 when it cannot be read. */
static uint64_t server_items(const char *uri)
{
    char stats[4096] = "";
    size_t len;
    rkv_client *c = connect_retry(uri, NULL, connect_ms);
    if (c == NULL || rkv_stats(c, 0, stats, sizeof stats, &len) != RKV_OK) {
        rkv_close(c);
        return 0;
    }
    rkv_close(c);
    const char *p = strstr(stats, "\nitems ");
    return p ? strtoull(p + 7, NULL, 10) : 0;
}

/* Wait until `gets` GETs are checked, and in epoch 1 every writer and
 * reader has RESTART_AFTER_OPS calls answered, or the safety bound passes
 * (false). Polls the counters: the phase advances on what the processes
 * did, never on how long it took. */
static bool wait_progress(struct shared *sh, uint64_t gets, uint64_t deadline)
{
    for (;;) {
        bool all = atomic_load(&sh->checked) >= gets;
        for (unsigned p = 0; all && atomic_load(&sh->epoch) == 1 && p < WRITERS + READERS; p++)
            all = atomic_load(&sh->after[p]) >= RESTART_AFTER_OPS;
        if (all)
            return true;
        if (rkv_now_ns() > deadline)
            return false;
        usleep(1000);
    }
}

/* Restart and crash phases, once every process is connected: RESTART_GETS
 * GETs, then the server stopped cleanly (SIGTERM: it writes its state file)
 * or SIGKILLed mid-write (a crash: the cache may lose everything, so
 * misses are not false from then on), a second server started on the same
 * address and state file, and RESTART_GETS more GETs with every process
 * answered again. Prints the items kept; 0, or 1 when a step failed or
 * (clean stop) fewer than 99 % of the items came back. */
static int restart_midway(struct shared *sh, struct server_proc *sp, const char *bin, const char *uri,
                          const char *const *args, enum phase_kind kind, struct fake_fdstore *store)
{
    bool crash = kind != PHASE_RESTART, lossy = kind == PHASE_CRASH;
    uint64_t deadline = rkv_now_ns() + RESTART_BOUND_S * 1000000000ull;
    if (!wait_progress(sh, atomic_load(&sh->checked) + RESTART_GETS, deadline)) {
        fprintf(stderr, "torture: too few GETs before the restart\n");
        return 1;
    }
    uint64_t before = 0;
    int rc = 0;
    if (crash) {
        if (lossy)
            atomic_store(&sh->lossy, 1);
        else /* writers go on: the kill may land mid-write */
            before = server_items(sp->uri);
        server_kill(sp);
    } else {
        before = server_items(sp->uri);
        rc = server_stop(sp);
    }
    int fds[2] = { store ? store->region : -1, store ? store->state : -1 };
    if (rc != 0 || (store && (fds[0] < 0 || fds[1] < 0)) ||
        (store ? server_start_fds(sp, bin, uri, args, fds, 2, "rkv-region:rkv-state")
               : server_start(sp, bin, uri, args)) != 0 ||
        (store && fake_fdstore_until(store, "READY=1", 60000) != 0)) {
        fprintf(stderr, "torture: the restart failed (first server's exit %d)\n", rc);
        return 1;
    }
    uint64_t after = server_items(sp->uri);
    atomic_store(&sh->epoch, 1);
    uint64_t gets = atomic_load(&sh->checked) + RESTART_GETS;
    if (!wait_progress(sh, gets, deadline)) {
        fprintf(stderr, "torture: a writer or reader made no progress after the restart\n");
        return 1;
    }
    if (lossy) {
        printf("  crash: SIGKILL mid-write, the next start empty (%llu items), %llu calls met no "
               "server\n",
               (unsigned long long)after, (unsigned long long)atomic_load(&sh->unavailable));
        return 0;
    }
    printf("  %s: %llu items before the %s, %llu after the start (%.2f %%), %llu "
           "calls met no server\n",
           crash ? "fd-store crash" : "restart", (unsigned long long)before,
           crash ? "SIGKILL mid-write" : "clean stop", (unsigned long long)after,
           before ? 100.0 * (double)after / (double)before : 0.0,
           (unsigned long long)atomic_load(&sh->unavailable));
    return before == 0 || after * 100 < before * 99;
}

/* Runs one phase; adds its GETs checked and anomalies to *checked and
 * *anomalies. Returns nonzero when the phase failed. */
static int run_phase(const char *bin, const char *uri, unsigned seconds, enum phase_kind kind,
                     uint64_t gets_target, uint64_t *checked, uint64_t *anomalies_out)
{
    bool evicting = kind == PHASE_EVICT, restarts = kind >= PHASE_RESTART;
    bool state_file = kind == PHASE_RESTART || kind == PHASE_CRASH;
    /* RKV_TORTURE_MEMORY shrinks both servers where round trips are slow; a
     * power of two keeps the index (not the heap) the limit of the preload */
    const char *mem = getenv("RKV_TORTURE_MEMORY");
    /* three workers: writers' connections land on different workers, so
     * the server applies their writes in parallel (bucket locks) */
    char state_dir[] = "/tmp/rkv-torture-XXXXXX", state[64] = "";
    if (state_file && mkdtemp(state_dir) == NULL)
        return 1;
    if (state_file)
        snprintf(state, sizeof state, "%s/state", state_dir);
    /* the fd-store phase: this process is the service manager */
    struct fake_fdstore store = { .sock = -1, .region = -1, .state = -1 };
    char store_name[64];
    snprintf(store_name, sizeof store_name, "@rkv-torture-fdstore-%d", (int)getpid());
    if (kind == PHASE_FDSTORE && fake_fdstore_open(&store, store_name) != 0)
        return 1;
    const char *extra_noevict[] = { "--memory",
                                    mem ? mem : "32M",
                                    "--evict",
                                    "none",
                                    "--event-mode",
                                    "--grace-ms",
                                    "20",
                                    "--workers",
                                    "3",
                                    state_file ? "--state-file" : NULL,
                                    state,
                                    NULL };
    const char *extra_evict[] = { "--memory", mem ? mem : "12M", "--evict",
                                  "lru",      "--event-mode",    "--grace-ms",
                                  "20",       "--workers",       "3",
                                  NULL };
    struct server_proc sp = { .pid = 0 };
    const char *remote = getenv("RKV_TORTURE_URI");
    if (remote != NULL)
        snprintf(sp.uri, sizeof sp.uri, "%s", remote);
    else if (server_start(&sp, bin, uri, evicting ? extra_evict : extra_noevict) != 0 ||
             (kind == PHASE_FDSTORE && fake_fdstore_until(&store, "READY=1", 60000) != 0)) {
        fprintf(stderr, "torture: cannot start rkv-server\n");
        return 1;
    }
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof *sh);
    sh->restarts = restarts;
    unsigned fillers = evicting ? 0 : preload_fillers(sp.uri);
    sh->fillers = fillers;
    sh->gets_target = gets_target;

    pid_t pids[WRITERS + READERS];
    for (unsigned p = 0; p < WRITERS + READERS; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            if (p < WRITERS)
                writer(sh, sp.uri, p);
            else
                reader(sh, sp.uri, p - WRITERS, evicting);
            _exit(0);
        }
    }
    /* overcommit memory: a big cold population competes with the hot set
     * (its connection, too, is made before the link may turn bad) */
    rkv_client *cold = evicting ? connect_retry(sp.uri, NULL, connect_ms) : NULL;
    int restart_failed = 0;
    wait_connected(sh);
    if (evicting) {
        rkv_client *c = cold;
        char key[32], val[1024];
        memset(val, 'x', sizeof val);
        uint64_t end = rkv_now_ns() + (uint64_t)seconds * 1000000000ull;
        for (unsigned i = 0; c && rkv_now_ns() < end && !phase_over(sh); i++) {
            snprintf(key, sizeof key, "cold:%u", i);
            rkv_put(c, key, strlen(key), val, 200 + i % 800, NULL, NULL);
        }
        rkv_close(c);
    } else if (restarts) {
        restart_failed = restart_midway(sh, &sp, bin, uri, extra_noevict, kind,
                                        kind == PHASE_FDSTORE ? &store : NULL);
    } else {
        uint64_t end = rkv_now_ns() + (uint64_t)seconds * 1000000000ull;
        while (rkv_now_ns() < end && !phase_over(sh))
            usleep(20000);
    }
    atomic_store(&sh->stop, 1);
    for (unsigned p = 0; p < WRITERS + READERS; p++)
        waitpid(pids[p], NULL, 0);

    char stats[4096] = "";
    rkv_client *c = connect_retry(sp.uri, NULL, 2000);
    size_t sl;
    if (c) {
        rkv_stats(c, 0, stats, sizeof stats, &sl);
        rkv_close(c);
    }
    const char *disp = strstr(stats, "displacements "), *ev = strstr(stats, "evictions ");
    const char *moves = strstr(stats, "slab_reassigns ");
    int rc = remote != NULL ? 0 : server_stop(&sp);
    if (state_file) { /* the last stop wrote it */
        unlink(state);
        rmdir(state_dir);
    }
    if (kind == PHASE_FDSTORE)
        fake_fdstore_close(&store);
    uint64_t anomalies = sh->garbage + sh->stale + sh->future + sh->false_miss + sh->regress;
    printf("torture phase %s: %llu GETs checked, %llu anomalies (garbage %llu, stale %llu, "
           "future %llu, false miss %llu, regress %llu), %llu client errors, "
           "%llu writes refused for memory, "
           "%u fillers, %llu forwards followed, %llu stale cached locations, %s%s server exit %d\n",
           phase_name[kind], (unsigned long long)sh->checked, (unsigned long long)anomalies,
           (unsigned long long)sh->garbage, (unsigned long long)sh->stale,
           (unsigned long long)sh->future, (unsigned long long)sh->false_miss,
           (unsigned long long)sh->regress, (unsigned long long)sh->errors,
           (unsigned long long)sh->refused, fillers, (unsigned long long)sh->forwards,
           (unsigned long long)sh->cache_stale, disp ? strtok((char *)disp, "\n") : "", "", rc);
    if (ev)
        printf("  %s\n", strtok((char *)ev, "\n"));
    if (moves)
        printf("  %s (slab pages moved between classes)\n", strtok((char *)moves, "\n"));
    int fail = anomalies != 0 || sh->errors != 0 || rc != 0 || restart_failed;
    for (unsigned t = 0; t < READER_TYPES; t++) {
        printf("  %s readers: %llu GETs checked, %llu values found, %llu against a remembered "
               "version\n",
               reader_type_name[t], (unsigned long long)sh->type_checked[t],
               (unsigned long long)sh->type_found[t], (unsigned long long)sh->type_history[t]);
        /* the checks ran: every type checked something, and a type whose
         * readers found more than twice as many hot values as they have keys
         * (so, by pigeonhole, one reader found some key in two calls; twice
         * covers a key asked twice in one rkv_mget) must have checked against
         * its history. A phase whose hot writes were all refused for memory
         * (a small region on a slow link) finds none, and is judged by its
         * anomalies alone. */
        fail |= sh->type_checked[t] == 0 ||
                (sh->type_found[t] > 2 * READERS_PER_TYPE * HOT_KEYS && sh->type_history[t] == 0);
    }
    *checked += sh->checked;
    *anomalies_out += anomalies;
    munmap(sh, sizeof *sh);
    return fail;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s PATH/TO/rkv-server [SECONDS_PER_PHASE]\n"
                "  env RKV_TORTURE_PHASES=both|noevict|evict, RKV_TORTURE_GETS=N\n",
                argv[0]);
        return 2;
    }
    const char *phases = getenv("RKV_TORTURE_PHASES"), *gets = getenv("RKV_TORTURE_GETS");
    phases = phases ? phases : "both";
    bool restarts = strcmp(phases, "restart") == 0 || strcmp(phases, "crash") == 0 ||
                    strcmp(phases, "restarts") == 0 || strcmp(phases, "fdstore") == 0;
    char *end = NULL;
    unsigned long long gets_target = gets ? strtoull(gets, &end, 10) : 0;
    unsigned seconds = argc > 2 ? (unsigned)atoi(argv[2]) : 5;
    if ((gets && (*gets == '\0' || *end != '\0')) || seconds == 0 ||
        (strcmp(phases, "both") && strcmp(phases, "noevict") && strcmp(phases, "evict") && !restarts) ||
        (getenv("RKV_TORTURE_URI") != NULL && (strcmp(phases, "both") == 0 || restarts))) {
        fprintf(stderr,
                "torture: SECONDS_PER_PHASE must be a positive integer, "
                "RKV_TORTURE_GETS a decimal count and RKV_TORTURE_PHASES one of "
                "both, noevict, evict, restart, crash, restarts, fdstore (with RKV_TORTURE_URI: "
                "noevict or evict, the phase whose flags the server there runs with)\n");
        return 2;
    }
    char uri[256];
    uint64_t checked = 0, anomalies = 0;
    if (getenv("RKV_TORTURE_URI") != NULL)
        connect_ms = 30000;
    const char *delay = getenv("RKV_TORTURE_CONNECT_DELAY_MS");
    connect_delay_ms = delay ? (unsigned)strtoul(delay, NULL, 10) : 0;
    int fail = 0;
    if (strcmp(phases, "fdstore") == 0) {
        test_uri(uri, sizeof uri, 84);
        fail |= run_phase(argv[1], uri, seconds, PHASE_FDSTORE, 0, &checked, &anomalies);
    } else if (restarts) {
        if (strcmp(phases, "crash") != 0) {
            test_uri(uri, sizeof uri, 82);
            fail |= run_phase(argv[1], uri, seconds, PHASE_RESTART, 0, &checked, &anomalies);
        }
        if (strcmp(phases, "restart") != 0) {
            test_uri(uri, sizeof uri, 83);
            fail |= run_phase(argv[1], uri, seconds, PHASE_CRASH, 0, &checked, &anomalies);
        }
    }
    if (!restarts && strcmp(phases, "evict") != 0) {
        test_uri(uri, sizeof uri, 80);
        fail |= run_phase(argv[1], uri, seconds, PHASE_NOEVICT, gets_target, &checked, &anomalies);
    }
    if (!restarts && strcmp(phases, "noevict") != 0) {
        test_uri(uri, sizeof uri, 81);
        fail |= run_phase(argv[1], uri, seconds, PHASE_EVICT, gets_target, &checked, &anomalies);
    }
    printf("torture: %llu GETs checked, %llu anomalies, %s\n", (unsigned long long)checked,
           (unsigned long long)anomalies, fail ? "FAILED" : "passed");
    return fail;
}
