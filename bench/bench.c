/* bench.c — rkv-bench, the load generator for rkv.
 *
 * Drives one or more rkv servers through the public client API (rkv.h) the
 * way an application would: N threads, each with its own handle, each
 * keeping `--window` operations in flight. Closed loop with a window above 1:
 * a steady window through the pipelined API (rkv_submit, rkv_wait): each
 * completion frees its slot for the next op at once, and each op is timed
 * from its submit to its completion; the report gives the mean in-flight
 * depth reached. `--lockstep` (and the open loop) issue batches of the
 * window instead (rkv_mget for the GETs of a batch, rkv_mput for its PUTs;
 * plain rkv_get/rkv_put when the window is 1), each waiting for its slowest.
 * Keys follow a uniform, scrambled-zipfian or read-latest distribution; the
 * mix and presets follow YCSB where they fit a cache. With --protocol
 * memcache the same calls speak the memcached text protocol over TCP to
 * rkv's tcp:// door or a memcached (bench_client.h), so both are measured
 * by one generator and one report.
 *
 * Latency, closed loop (default): every operation is timed from the start
 * to the end of the call that carried it (pipelined: its submit to its
 * completion), so with --lockstep each op of a batch is recorded with that
 * batch's completion time (a histogram counts operations, not batches).
 * A read-modify-write (YCSB F) is timed as a whole, get to final put.
 *
 * Open loop (--rate): each thread follows a schedule of intended send times
 * (bench_schedule.h). When an operation is due the thread sends it, together
 * with every other operation already due (up to --window, one batch); each
 * is timed from ITS intended time to the end of the call, so a reply that
 * arrives late charges its delay to every operation that queued behind it.
 * When the run ends, the operations intended before the end are still sent
 * and timed (for at most DRAIN_MAX_NS, or until a second Ctrl-C), so a
 * backlog at the end shows in the latency instead of vanishing; any left
 * unsent are reported as missed.
 *
 * Phases: connect → preload (every key written once, unless --no-preload)
 * → warmup (the workload, not recorded) → measure (recorded; ends after
 * --duration, after --requests, or on SIGINT) → report. Counters from
 * rkv_get_counters are reset when a thread starts measuring, so the
 * per-operation transport figures cover exactly the measured operations.
 *
 * The hot loop allocates nothing: every buffer is sized at start.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_client.h"
#include "bench_clock.h"
#include "bench_html.h"
#include "bench_procs.h"
#include "bench_report.h"
#include "bench_timeseries.h"
#include "hdr_text.h"
#include "histogram.h"
#include "json_parse.h"
#include "rkv.h"
#include "shm_ring.h" /* rkv_shm_cpu_relax */
#include "trace.h"
#include "util.h"
#include "workload.h"

#define KEY_STRIDE        256u /* bytes per key slot in a batch buffer (keys <= 250) */
#define PRELOAD_BATCH     32u  /* keys per rkv_mput while preloading */
#define PRELOAD_BYTES     (4u << 20)
#define RMW_ATTEMPTS      16u /* CAS races tolerated before an RMW counts as failed */
#define BAD_VALUE_REPORTS 5u  /* --verify failures described per thread */
#define TICK_NS           (10 * 1000 * 1000ull)
#define DRAIN_MAX_NS      (5 * 1000 * 1000 * 1000ull)
#define SPIN_NS           (50 * 1000ull) /* open loop: spin (not sleep) this close to a send */
#define NAP_MAX_NS        (10 * 1000 * 1000ull)

enum phase { PHASE_PRELOAD, PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };

/* Operation kinds a batch slot can draw, in the order of the cut points. */
enum draw { DRAW_GET, DRAW_PUT, DRAW_INSERT, DRAW_RMW, DRAW_DELETE, DRAW_COUNT };

/* Read-only after start, except the atomics. */
struct shared {
    const struct bench_config *cfg;
    double cut[DRAW_COUNT]; /* cumulative shares; the last used kind's is 2 */
    struct wl_zipf zipf;    /* zipf / latest ranks over cfg->keys */
    struct wl_perm perm;    /* scrambles zipf ranks over the key space */
    int phase;              /* enum phase, atomic */
    uint64_t next_insert;   /* next new key index (workload D), atomic */
    unsigned finished;      /* threads done measuring, atomic */
    unsigned thread_base;   /* global id of this process's thread 0 (--processes) */
    unsigned all_threads;   /* threads over all processes */
    uint64_t start_ns;      /* when the gate opened: open-loop schedules start here */
    uint64_t stop_ns;       /* when the run ended; written before PHASE_STOP */
    uint64_t trace_next;    /* --trace: the next line to replay, atomic */
    uint64_t trace_end;     /* --trace: lines to replay (the trace, or --requests) */
    pthread_mutex_t lock;   /* guards the two fields below */
    pthread_cond_t cond;    /* signalled when either changes */
    unsigned preloaded;     /* workers done preloading */
    bool go;                /* main set the phase: workers may run */
};

/* One RMW or DELETE waiting in a batch (they go one by one). */
struct single_op {
    enum draw kind;
    uint64_t idx; /* key index; --trace: the line */
    const char *key;
    unsigned key_len;
    uint64_t intended; /* open loop: intended send time; else 0 */
};

struct worker {
    unsigned id; /* global: 0..threads x processes - 1 */
    pthread_t thread;
    struct shared *sh;
    struct bench_client *client; /* this thread's own handle (librkv or memcache) */
    bool borrowed;               /* --shared-handle: client is thread 0's (its counters too) */
    rkv_client *kv;              /* its librkv handle (the pipelined window), or NULL */
    struct wl_rng rng;
    uint64_t quota;       /* ops to measure; UINT64_MAX = until stopped */
    uint64_t version_seq; /* per-thread part of value versions */
    unsigned batch_cap;   /* slots in the buffers below */
    size_t get_buf_len;   /* bytes per GET buffer */
    char *keys;           /* batch_cap * KEY_STRIDE */
    char *get_bufs;       /* batch_cap * get_buf_len */
    char *put_bufs;       /* batch_cap * value max (--verify values) */
    const char *pattern;  /* value bytes without --verify (shared) */
    struct rkv_get_op *gops;
    uint64_t *gidx;   /* key index of each gops entry */
    uint64_t *gstart; /* open loop: intended time of each gops entry */
    struct rkv_put_op *pops;
    uint64_t *pstart;              /* open loop: intended time of each pops entry */
    struct rkv_put_op *fops;       /* --fill-on-miss: the SETs after a batch's GET misses */
    struct rkv_put_options *popts; /* --trace: each pops entry's mode and TTL */
    uint8_t *gtop, *ptop;          /* --trace: each gops / pops entry's trace operation */
    size_t value_limit;            /* --trace: longer values are skipped (the server's limit) */
    uint64_t *intended;            /* open loop: intended time of each batch slot */
    struct bench_schedule sched;   /* open loop: this thread's send times */
    struct single_op *singles;
    unsigned *free_slots;        /* pipelined window: the slots not in flight */
    struct rkv_completion *done; /* pipelined window: completions taken at once */
    struct bench_results *res;   /* recorded while measuring (verify failures always) */
    uint64_t ops_done;           /* measured ops so far, single-writer atomic */
    uint64_t errors_seen;        /* failed ops so far, single-writer atomic */
    uint64_t end_ns;             /* when this thread stopped */
    unsigned bad_reports;        /* --verify failures described so far */
    rkv_status preload_status;   /* first preload failure, RKV_OK if none */
    char preload_msg[384];       /* its description */
};

/* Ctrl-C count: the first ends the run (an open-loop run still sends what
 * was due), the second also ends that drain. */
static volatile sig_atomic_t stop_requested;

/* What closed-loop ops are timed with (bench_clock.h): chosen and calibrated
 * in main, before any worker thread or client process exists. */
static struct bench_clock op_clock;

static void on_signal(int sig)
{
    (void)sig;
    if (stop_requested < 2)
        stop_requested++;
}

static inline void bump(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline uint64_t next_version(struct worker *w)
{
    return ((uint64_t)(w->id + 1) << 44) | ++w->version_seq;
}

static uint64_t pick_key(struct worker *w)
{
    const struct shared *sh = w->sh;
    uint64_t count = __atomic_load_n(&sh->next_insert, __ATOMIC_RELAXED);
    switch (sh->cfg->dist) {
    case BENCH_DIST_ZIPF: return wl_perm_apply(&sh->perm, wl_zipf_next(&sh->zipf, &w->rng));
    case BENCH_DIST_LATEST:
        /* count - 1 is the newest key; rank r < keys <= count. */
        return count - 1 - wl_zipf_next(&sh->zipf, &w->rng);
    case BENCH_DIST_UNIFORM: break;
    }
    return wl_rng_below(&w->rng, count);
}

static unsigned format_key(const struct bench_config *cfg, char *buf, uint64_t idx)
{
    unsigned len = wl_key_len(idx, cfg->key_size.min, cfg->key_size.max);
    return wl_format_key(buf, idx, len);
}

/* Points op at a value for (idx, a new version): a filled buffer with
 * --verify, else the shared pattern. */
static void make_value(struct worker *w, unsigned slot, uint64_t idx, const void **value,
                       size_t *value_len)
{
    const struct bench_config *cfg = w->sh->cfg;
    uint64_t version = next_version(w);
    uint32_t len = wl_value_len(idx, version, cfg->value_size.min, cfg->value_size.max);
    if (cfg->verify) {
        char *buf = w->put_bufs + (size_t)slot * cfg->value_size.max;
        wl_value_fill(buf, len, idx, version);
        *value = buf;
    } else {
        *value = w->pattern;
    }
    *value_len = len;
}

static void count_error(struct worker *w, enum bench_op op, rkv_status st, uint64_t n, bool measuring)
{
    if (measuring) {
        w->res->errors[st] += n;
        bump(&w->res->op_errors[op], n); /* the ticker reads these while we run */
    }
    bump(&w->errors_seen, n);
}

/* A reading for an operation's start or end: op_clock's ticks in a closed
 * loop; CLOCK_MONOTONIC ns in an open one, where latency runs from the
 * intended send times on that clock. */
static inline uint64_t op_time(const struct worker *w)
{
    return w->sh->cfg->rate > 0 ? rkv_now_ns() : bench_clock_read(&op_clock);
}

/* Latency of an operation that ended at `end` (op_time): from its intended
 * time in an open-loop run, else from the start of its call. */
static inline uint64_t latency_of(uint64_t end, uint64_t started, const uint64_t *intended, unsigned i)
{
    if (intended != NULL)
        return end > intended[i] ? end - intended[i] : 0;
    return bench_clock_ns(&op_clock, started, end);
}

/* --verify: check a value read for key idx; failures always count. */
static void check_value(struct worker *w, uint64_t idx, const char *key, unsigned key_len,
                        const void *value, size_t len)
{
    const struct bench_config *cfg = w->sh->cfg;
    struct wl_claim claim;
    enum wl_check c = wl_value_check(value, len, idx, cfg->value_size.min, cfg->value_size.max,
                                     &claim);
    if (c == WL_VALUE_OK)
        return;
    w->res->verify_failures++;
    bump(&w->errors_seen, 1);
    if (w->bad_reports++ >= BAD_VALUE_REPORTS)
        return;
    fprintf(stderr, "rkv-bench: --verify: thread %u: key %.*s (index %llu): %zu-byte value %s",
            w->id, (int)key_len, key, (unsigned long long)idx, len, wl_check_name(c));
    if (c != WL_VALUE_SHORT)
        fprintf(stderr, " (it claims key index %llu, version %#llx)", (unsigned long long)claim.idx,
                (unsigned long long)claim.version);
    fputc('\n', stderr);
}

/* Latency of a call that ran from t0 to end (op_time), from its own start
 * (a fill, whose GET carried any open-loop delay already). */
static inline uint64_t own_latency(const struct worker *w, uint64_t t0, uint64_t end)
{
    if (w->sh->cfg->rate > 0)
        return end > t0 ? end - t0 : 0;
    return bench_clock_ns(&op_clock, t0, end);
}

/* What a trace line's operation came to. */
enum trace_outcome { TRACE_OK, TRACE_MISSED, TRACE_FAILED };

static void trace_count(struct worker *w, unsigned op, enum trace_outcome o, bool measuring)
{
    if (!measuring)
        return;
    w->res->trace_ops[op]++;
    if (o == TRACE_OK)
        w->res->trace_ok[op]++;
    else if (o == TRACE_MISSED)
        w->res->trace_missed[op]++;
}

/* --fill-on-miss: the SET that follows GET i (op g) of a batch: its key,
 * and a value of the configured size (the trace line's with --trace). */
static void fill_value(struct worker *w, unsigned i, const struct rkv_get_op *g, struct rkv_put_op *p)
{
    const struct bench_config *cfg = w->sh->cfg;
    unsigned slot = (unsigned)(((const char *)g->key - w->keys) / KEY_STRIDE);
    p->key = g->key;
    p->key_len = g->key_len;
    p->opts = NULL;
    if (cfg->trace != NULL) {
        p->value = w->pattern;
        p->value_len = cfg->trace->recs[w->gidx[i]].value_size;
    } else {
        make_value(w, slot, w->gidx[i], &p->value, &p->value_len);
    }
}

/* --fill-on-miss: the SETs of a batch's misses, as one batch, each timed
 * from the start of its own call. */
static void run_fills(struct worker *w, unsigned n, bool measuring)
{
    struct rkv_put_op *ops = w->fops;
    uint64_t t0 = op_time(w);
    rkv_status st = RKV_OK;
    if (n == 1)
        ops[0].status = bench_put(w->client, ops[0].key, ops[0].key_len, ops[0].value,
                                  ops[0].value_len, NULL, &ops[0].version);
    else
        st = bench_mput(w->client, ops, n);
    uint64_t end = op_time(w);
    if (st != RKV_OK) {
        count_error(w, BENCH_OP_PUT, st, n, measuring);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].status == RKV_TOO_LARGE && w->sh->cfg->trace != NULL) {
            if (measuring)
                w->res->trace_refused++;
        } else if (ops[i].status != RKV_OK) {
            count_error(w, BENCH_OP_PUT, ops[i].status, 1, measuring);
        } else if (measuring) {
            hist_record(&w->res->lat[BENCH_OP_PUT], own_latency(w, t0, end));
            w->res->fills++;
        }
    }
}

static void run_gets(struct worker *w, unsigned n, bool measuring)
{
    struct rkv_get_op *ops = w->gops;
    uint64_t t0 = op_time(w);
    rkv_status st;
    if (n == 1) {
        st = bench_get(w->client, ops[0].key, ops[0].key_len, ops[0].buf, ops[0].buf_len,
                       &ops[0].value_len, NULL);
        ops[0].status = st;
        st = RKV_OK;
    } else {
        st = bench_mget(w->client, ops, n);
    }
    uint64_t end = op_time(w);
    if (st != RKV_OK) {
        count_error(w, BENCH_OP_GET, st, n, measuring);
        for (unsigned i = 0; w->sh->cfg->trace != NULL && i < n; i++)
            trace_count(w, w->gtop[i], TRACE_FAILED, measuring);
        return;
    }
    const struct bench_config *cfg = w->sh->cfg;
    const uint64_t *intended = cfg->rate > 0 ? w->gstart : NULL;
    uint64_t hits = 0, misses = 0;
    unsigned nf = 0;
    for (unsigned i = 0; i < n; i++) {
        rkv_status s = ops[i].status;
        if (s == RKV_BUFFER_TOO_SMALL && cfg->trace != NULL)
            s = RKV_OK; /* a value stored by someone else, longer than the trace's */
        if (s == RKV_OK) {
            hits++;
            if (cfg->verify)
                check_value(w, w->gidx[i], ops[i].key, (unsigned)ops[i].key_len, ops[i].buf,
                            ops[i].value_len);
        } else if (s == RKV_NOT_FOUND) {
            misses++;
            if (cfg->fill_on_miss)
                fill_value(w, i, &ops[i], &w->fops[nf++]);
        } else {
            count_error(w, BENCH_OP_GET, s, 1, measuring);
            if (cfg->trace != NULL)
                trace_count(w, w->gtop[i], TRACE_FAILED, measuring);
            continue;
        }
        if (cfg->trace != NULL)
            trace_count(w, w->gtop[i], s == RKV_OK ? TRACE_OK : TRACE_MISSED, measuring);
        if (measuring)
            hist_record(&w->res->lat[BENCH_OP_GET], latency_of(end, t0, intended, i));
    }
    if (measuring) {
        bump(&w->res->get_hits, hits); /* the ticker reads these while we run */
        bump(&w->res->get_misses, misses);
    }
    if (nf > 0)
        run_fills(w, nf, measuring);
}

static void run_puts(struct worker *w, unsigned n, bool measuring)
{
    struct rkv_put_op *ops = w->pops;
    uint64_t t0 = op_time(w);
    rkv_status st;
    if (n == 1) {
        ops[0].status = bench_put(w->client, ops[0].key, ops[0].key_len, ops[0].value,
                                  ops[0].value_len, ops[0].opts, &ops[0].version);
        st = RKV_OK;
    } else {
        st = bench_mput(w->client, ops, n);
    }
    uint64_t end = op_time(w);
    bool trace = w->sh->cfg->trace != NULL;
    if (st != RKV_OK) {
        count_error(w, BENCH_OP_PUT, st, n, measuring);
        for (unsigned i = 0; trace && i < n; i++)
            trace_count(w, w->ptop[i], TRACE_FAILED, measuring);
        return;
    }
    const uint64_t *intended = w->sh->cfg->rate > 0 ? w->pstart : NULL;
    for (unsigned i = 0; i < n; i++) {
        rkv_status s = ops[i].status;
        if (trace) {
            /* a condition not met is the cache's answer, not a failure */
            bool missed = s == RKV_EXISTS || s == RKV_NOT_STORED || s == RKV_CAS_MISMATCH;
            if (s == RKV_TOO_LARGE) {
                if (measuring)
                    w->res->trace_refused++;
                continue;
            }
            trace_count(w, w->ptop[i],
                        s == RKV_OK ? TRACE_OK
                        : missed    ? TRACE_MISSED
                                    : TRACE_FAILED,
                        measuring);
            if (missed)
                s = RKV_OK;
        }
        if (s != RKV_OK)
            count_error(w, BENCH_OP_PUT, s, 1, measuring);
        else if (measuring)
            hist_record(&w->res->lat[BENCH_OP_PUT], latency_of(end, t0, intended, i));
    }
}

static void run_delete(struct worker *w, const struct single_op *op, bool measuring)
{
    uint64_t t0 = op_time(w);
    rkv_status st = bench_delete(w->client, op->key, op->key_len);
    uint64_t end = op_time(w);
    if (st != RKV_OK && st != RKV_NOT_FOUND) {
        count_error(w, BENCH_OP_DELETE, st, 1, measuring);
        return;
    }
    if (measuring) {
        hist_record(&w->res->lat[BENCH_OP_DELETE],
                    latency_of(end, t0, w->sh->cfg->rate > 0 ? &op->intended : NULL, 0));
        if (st == RKV_NOT_FOUND)
            w->res->delete_misses++;
    }
}

/* YCSB F's read-modify-write: read, then write a new version only if the
 * item is still the one read (CAS), or add it if it was absent. A race with
 * another writer redoes the whole step. */
static void run_rmw(struct worker *w, const struct single_op *op, unsigned slot, bool measuring)
{
    char *buf = w->get_bufs + (size_t)slot * w->get_buf_len;
    uint64_t conflicts = 0;
    rkv_status st = RKV_CAS_MISMATCH;
    uint64_t t0 = op_time(w);
    for (unsigned attempt = 0; attempt < RMW_ATTEMPTS; attempt++) {
        struct rkv_item_info info;
        size_t len;
        st = bench_get(w->client, op->key, op->key_len, buf, w->get_buf_len, &len, &info);
        struct rkv_put_options po = { .mode = RKV_ADD };
        if (st == RKV_OK) {
            if (w->sh->cfg->verify)
                check_value(w, op->idx, op->key, op->key_len, buf, len);
            po.mode = RKV_CAS;
            po.cas = info.version;
        } else if (st != RKV_NOT_FOUND) {
            break;
        }
        const void *value;
        size_t value_len;
        make_value(w, slot, op->idx, &value, &value_len);
        st = bench_put(w->client, op->key, op->key_len, value, value_len, &po, NULL);
        if (st != RKV_CAS_MISMATCH && st != RKV_NOT_STORED && st != RKV_EXISTS)
            break;
        conflicts++;
    }
    uint64_t end = op_time(w);
    if (measuring)
        w->res->rmw_conflicts += conflicts;
    if (st != RKV_OK) {
        count_error(w, BENCH_OP_RMW, st, 1, measuring);
        return;
    }
    if (measuring)
        hist_record(&w->res->lat[BENCH_OP_RMW],
                    latency_of(end, t0, w->sh->cfg->rate > 0 ? &op->intended : NULL, 0));
}

static void add_get(struct worker *w, unsigned *ng, unsigned slot, uint64_t idx)
{
    const struct bench_config *cfg = w->sh->cfg;
    char *key = w->keys + (size_t)slot * KEY_STRIDE;
    struct rkv_get_op *op = &w->gops[*ng];
    op->key = key;
    op->key_len = format_key(cfg, key, idx);
    op->buf = w->get_bufs + (size_t)slot * w->get_buf_len;
    op->buf_len = w->get_buf_len;
    w->gstart[*ng] = w->intended[slot];
    w->gidx[(*ng)++] = idx;
}

static void add_put(struct worker *w, unsigned *np, unsigned slot, uint64_t idx)
{
    const struct bench_config *cfg = w->sh->cfg;
    char *key = w->keys + (size_t)slot * KEY_STRIDE;
    w->pstart[*np] = w->intended[slot];
    struct rkv_put_op *op = &w->pops[(*np)++];
    op->key = key;
    op->key_len = format_key(cfg, key, idx);
    op->opts = NULL;
    make_value(w, slot, idx, &op->value, &op->value_len);
}

static void run_batch(struct worker *w, unsigned n, bool measuring)
{
    const struct shared *sh = w->sh;
    unsigned ng = 0, np = 0, ns = 0;
    for (unsigned slot = 0; slot < n; slot++) {
        double u = wl_rng_double(&w->rng);
        enum draw d = DRAW_GET;
        while (u >= sh->cut[d])
            d++;
        switch (d) {
        case DRAW_GET: add_get(w, &ng, slot, pick_key(w)); break;
        case DRAW_PUT: add_put(w, &np, slot, pick_key(w)); break;
        case DRAW_INSERT:
            add_put(w, &np, slot, __atomic_fetch_add(&w->sh->next_insert, 1, __ATOMIC_RELAXED));
            break;
        case DRAW_RMW:
        case DRAW_DELETE:
        case DRAW_COUNT: { /* (never drawn: the last used kind's cut is 2) */
            struct single_op *op = &w->singles[ns++];
            char *key = w->keys + (size_t)slot * KEY_STRIDE;
            op->kind = d == DRAW_RMW ? DRAW_RMW : DRAW_DELETE;
            op->intended = w->intended[slot];
            op->idx = pick_key(w);
            op->key = key;
            op->key_len = format_key(sh->cfg, key, op->idx);
            break;
        }
        }
    }
    if (ng > 0)
        run_gets(w, ng, measuring);
    if (np > 0)
        run_puts(w, np, measuring);
    for (unsigned i = 0; i < ns; i++) {
        if (w->singles[i].kind == DRAW_RMW)
            run_rmw(w, &w->singles[i], i, measuring);
        else
            run_delete(w, &w->singles[i], measuring);
    }
    if (measuring)
        bump(&w->ops_done, n);
}

/* ---- --trace ---- */

/* A trace line that is not a plain GET or write: DELETE, CAS (a gets, then
 * a cas with its unique; timed as a whole, as an RMW), INCR and DECR (as
 * RMWs: the server reads, adds and writes). */
static void run_trace_single(struct worker *w, const struct single_op *op, unsigned slot,
                             bool measuring)
{
    const struct trace_rec *r = &w->sh->cfg->trace->recs[op->idx];
    enum bench_op bop = r->op == TRACE_DELETE ? BENCH_OP_DELETE : BENCH_OP_RMW;
    uint64_t t0 = op_time(w);
    rkv_status st;
    if (r->op == TRACE_DELETE) {
        st = bench_delete(w->client, op->key, op->key_len);
    } else if (r->op == TRACE_INCR || r->op == TRACE_DECR) {
        uint64_t result;
        st = bench_incr(w->client, op->key, op->key_len, r->op == TRACE_INCR ? 1 : -1, &result);
    } else {
        struct rkv_item_info info;
        size_t len;
        st = bench_get(w->client, op->key, op->key_len, w->get_bufs + (size_t)slot * w->get_buf_len,
                       w->get_buf_len, &len, &info);
        if (st == RKV_OK || st == RKV_BUFFER_TOO_SMALL) {
            struct rkv_put_options po = { .mode = RKV_CAS, .ttl = r->ttl, .cas = info.version };
            st = bench_put(w->client, op->key, op->key_len, w->pattern, r->value_size, &po, NULL);
        }
    }
    uint64_t end = op_time(w);
    bool missed = st == RKV_NOT_FOUND || st == RKV_NOT_STORED || st == RKV_CAS_MISMATCH ||
                  st == RKV_NOT_NUMBER;
    if (st == RKV_TOO_LARGE) {
        if (measuring)
            w->res->trace_refused++;
        return;
    }
    trace_count(w, r->op,
                st == RKV_OK ? TRACE_OK
                : missed     ? TRACE_MISSED
                             : TRACE_FAILED,
                measuring);
    if (st != RKV_OK && !missed) {
        count_error(w, bop, st, 1, measuring);
        return;
    }
    if (measuring) {
        hist_record(&w->res->lat[bop], bench_clock_ns(&op_clock, t0, end));
        if (bop == BENCH_OP_DELETE && st == RKV_NOT_FOUND)
            w->res->delete_misses++;
    }
}

/* --trace: the next `n` lines (fewer at its end) as one batch: the GETs
 * together, then the writes together, then the rest one by one, as
 * run_batch does. Lines over the limits are skipped and counted. Returns
 * the lines taken: 0 once the trace is done. */
static unsigned run_trace_batch(struct worker *w, unsigned n, bool measuring)
{
    struct shared *sh = w->sh;
    const struct trace *t = sh->cfg->trace;
    uint64_t first = __atomic_fetch_add(&sh->trace_next, n, __ATOMIC_RELAXED);
    if (first >= sh->trace_end)
        return 0;
    if (n > sh->trace_end - first)
        n = (unsigned)(sh->trace_end - first);
    unsigned ng = 0, np = 0, ns = 0;
    for (unsigned slot = 0; slot < n; slot++) {
        const struct trace_rec *r = &t->recs[first + slot];
        if (trace_too_large(r, (uint32_t)w->value_limit)) {
            if (measuring)
                w->res->trace_skipped++;
            continue;
        }
        char *key = w->keys + (size_t)slot * KEY_STRIDE;
        unsigned key_len = trace_key(t, r, key);
        switch ((enum trace_op)r->op) {
        case TRACE_GET:
        case TRACE_GETS: {
            struct rkv_get_op *op = &w->gops[ng];
            op->key = key;
            op->key_len = key_len;
            op->buf = w->get_bufs + (size_t)slot * w->get_buf_len;
            op->buf_len = w->get_buf_len;
            w->gstart[ng] = 0;
            w->gidx[ng] = first + slot;
            w->gtop[ng++] = r->op;
            break;
        }
        case TRACE_SET:
        case TRACE_ADD:
        case TRACE_REPLACE:
        case TRACE_APPEND: /* rkv has no append: a replace of the line's size */
        case TRACE_PREPEND: {
            struct rkv_put_options *po = &w->popts[np];
            *po = (struct rkv_put_options){
                .mode = r->op == TRACE_SET   ? RKV_SET
                        : r->op == TRACE_ADD ? RKV_ADD
                                             : RKV_REPLACE,
                .ttl = r->ttl,
            };
            struct rkv_put_op *op = &w->pops[np];
            *op = (struct rkv_put_op){ .key = key,
                                       .key_len = key_len,
                                       .value = w->pattern,
                                       .value_len = r->value_size,
                                       .opts = po };
            w->pstart[np] = 0;
            w->ptop[np++] = r->op;
            break;
        }
        case TRACE_CAS:
        case TRACE_DELETE:
        case TRACE_INCR:
        case TRACE_DECR:
        case TRACE_OP_COUNT:
        default: {
            struct single_op *op = &w->singles[ns++];
            *op = (struct single_op){
                .kind = DRAW_DELETE, .idx = first + slot, .key = key, .key_len = key_len
            };
            break;
        }
        }
    }
    if (ng > 0)
        run_gets(w, ng, measuring);
    if (np > 0)
        run_puts(w, np, measuring);
    for (unsigned i = 0; i < ns; i++)
        run_trace_single(w, &w->singles[i], (unsigned)((w->singles[i].key - w->keys) / KEY_STRIDE),
                         measuring);
    if (measuring)
        bump(&w->ops_done, n);
    return n;
}

/* ---- the pipelined window ---- */

/* What a window slot's op was, packed into its token: the slot, its key's
 * length and its kind. */
static uint64_t window_token(unsigned slot, unsigned key_len, enum bench_op op)
{
    return slot | (uint64_t)key_len << 32 | (uint64_t)op << 48;
}
#define WINDOW_FILL (1ull << 56) /* token: a --fill-on-miss SET */

/* --fill-on-miss: the SET after slot's GET missed, submitted at once into
 * the same slot and timed from `now`. Whether it is in flight. */
static bool window_fill(struct worker *w, unsigned slot, unsigned key_len, uint64_t now,
                        bool measuring)
{
    struct rkv_op op = { .kind = RKV_KIND_PUT,
                         .key = w->keys + (size_t)slot * KEY_STRIDE,
                         .key_len = key_len,
                         .token = window_token(slot, key_len, BENCH_OP_PUT) | WINDOW_FILL };
    make_value(w, slot, w->gidx[slot], &op.value, &op.value_len);
    w->intended[slot] = now;
    rkv_status st = rkv_submit(w->kv, &op);
    if (st != RKV_OK) {
        count_error(w, BENCH_OP_PUT, st, 1, measuring);
        return false;
    }
    return true;
}

/* Draw the next op into window slot `slot` and submit it, timed from
 * `now` (one clock read per refill: the ops of one refill leave together);
 * a read-modify-write, whose PUT depends on its GET, runs synchronously
 * (rkv_get/rkv_put wrap the same core and move the window along). Returns
 * whether the slot is now in flight. */
static bool window_submit(struct worker *w, unsigned slot, uint64_t now, bool measuring)
{
    const struct shared *sh = w->sh;
    char *key = w->keys + (size_t)slot * KEY_STRIDE;
    double u = wl_rng_double(&w->rng);
    enum draw d = DRAW_GET;
    while (u >= sh->cut[d])
        d++;
    uint64_t idx = d == DRAW_INSERT ? __atomic_fetch_add(&w->sh->next_insert, 1, __ATOMIC_RELAXED)
                                    : pick_key(w);
    unsigned key_len = format_key(sh->cfg, key, idx);
    if (d == DRAW_RMW) {
        struct single_op op = { .kind = DRAW_RMW, .idx = idx, .key = key, .key_len = key_len };
        run_rmw(w, &op, slot, measuring);
        if (measuring)
            bump(&w->ops_done, 1);
        return false;
    }
    enum bench_op bop = d == DRAW_GET      ? BENCH_OP_GET
                        : d == DRAW_DELETE ? BENCH_OP_DELETE
                                           : BENCH_OP_PUT;
    struct rkv_op op = { .token = window_token(slot, key_len, bop), .key = key, .key_len = key_len };
    if (bop == BENCH_OP_GET) {
        op.kind = RKV_KIND_GET;
        op.buf = w->get_bufs + (size_t)slot * w->get_buf_len;
        op.buf_len = w->get_buf_len;
    } else if (bop == BENCH_OP_PUT) {
        op.kind = RKV_KIND_PUT;
        make_value(w, slot, idx, &op.value, &op.value_len);
    } else {
        op.kind = RKV_KIND_DELETE;
    }
    w->gidx[slot] = idx;
    w->intended[slot] = now;
    rkv_status st = rkv_submit(w->kv, &op);
    if (st != RKV_OK) { /* refused (not for the ops drawn here): counted, slot free */
        count_error(w, bop, st, 1, measuring);
        return false;
    }
    return true;
}

/* One completion of the window: recorded (when measuring) like the
 * synchronous call's result. Returns its slot, free again, or UINT_MAX
 * when a fill took it (--fill-on-miss). */
static unsigned window_complete(struct worker *w, const struct rkv_completion *r, uint64_t end,
                                bool measuring)
{
    unsigned slot = (unsigned)(r->token & 0xffffffffu);
    unsigned key_len = (unsigned)(r->token >> 32 & 0xffffu);
    enum bench_op op = (enum bench_op)(r->token >> 48 & 0xffu);
    bool ok = r->status == RKV_OK;
    if (op == BENCH_OP_GET && ok && w->sh->cfg->verify)
        check_value(w, w->gidx[slot], w->keys + (size_t)slot * KEY_STRIDE, key_len,
                    w->get_bufs + (size_t)slot * w->get_buf_len, r->value_len);
    if (!ok && r->status != RKV_NOT_FOUND) {
        count_error(w, op, r->status, 1, measuring);
    } else if (!ok && op == BENCH_OP_PUT) {
        count_error(w, op, r->status, 1, measuring);
    } else if (measuring) {
        bump(&w->res->get_hits, op == BENCH_OP_GET && ok);
        bump(&w->res->get_misses, op == BENCH_OP_GET && !ok);
        w->res->delete_misses += op == BENCH_OP_DELETE && !ok;
        w->res->fills += (r->token & WINDOW_FILL) && ok;
        hist_record(&w->res->lat[op], bench_clock_ns(&op_clock, w->intended[slot], end));
    }
    if (measuring)
        bump(&w->ops_done, 1);
    if (op == BENCH_OP_GET && r->status == RKV_NOT_FOUND && w->sh->cfg->fill_on_miss &&
        window_fill(w, slot, key_len, end, measuring))
        return UINT_MAX;
    return slot;
}

/* Take the completions there are (waiting up to a second for one), free
 * their slots. */
static void window_take(struct worker *w, unsigned *nfree, bool measuring)
{
    unsigned n = 0;
    rkv_status st = rkv_wait(w->kv, w->done, w->sh->cfg->window, &n, 1000);
    uint64_t end = bench_clock_read(&op_clock);
    for (unsigned i = 0; st == RKV_OK && i < n; i++) {
        unsigned slot = window_complete(w, &w->done[i], end, measuring);
        if (slot != UINT_MAX)
            w->free_slots[(*nfree)++] = slot;
    }
}

/* The closed loop with a pipelined window: keep every slot in flight, each
 * completion's slot refilled at once. Counters are reset (and measuring
 * starts) with the window drained, so they cover exactly the measured ops;
 * ops in flight at the end complete and count. */
static void run_window(struct worker *w)
{
    const struct bench_config *cfg = w->sh->cfg;
    unsigned nfree = 0;
    bool measuring = false;
    uint64_t done = 0;

    for (unsigned i = cfg->window; i > 0; i--)
        w->free_slots[nfree++] = i - 1;
    for (;;) {
        int phase = __atomic_load_n(&w->sh->phase, __ATOMIC_ACQUIRE);
        if (phase == PHASE_STOP)
            break;
        if (phase == PHASE_MEASURE && !measuring) {
            while (rkv_outstanding(w->kv) > 0)
                window_take(w, &nfree, false);
            if (!w->borrowed)
                bench_reset_counters(w->client);
            measuring = true;
        }
        uint64_t now = nfree > 0 ? bench_clock_read(&op_clock) : 0;
        while (nfree > 0 && (!measuring || done < w->quota)) {
            unsigned slot = w->free_slots[--nfree];
            if (!window_submit(w, slot, now, measuring))
                w->free_slots[nfree++] = slot;
            done += measuring;
        }
        unsigned out = rkv_outstanding(w->kv);
        if (out == 0 && measuring && done >= w->quota)
            break;
        if (out > 0)
            window_take(w, &nfree, measuring);
    }
    while (rkv_outstanding(w->kv) > 0)
        window_take(w, &nfree, measuring);
    w->end_ns = rkv_now_ns();
    if (measuring && !w->borrowed)
        bench_get_counters(w->client, &w->res->counters);
}

static void preload(struct worker *w)
{
    const struct bench_config *cfg = w->sh->cfg;
    unsigned all = w->sh->all_threads;
    uint64_t lo = cfg->keys * w->id / all;
    uint64_t hi = cfg->keys * (w->id + 1) / all;
    unsigned batch = w->batch_cap;
    for (uint64_t idx = lo; idx < hi && !stop_requested;) {
        unsigned np = 0;
        while (np < batch && idx < hi)
            add_put(w, &np, np, idx++);
        rkv_status st = bench_mput(w->client, w->pops, np);
        for (unsigned i = 0; st == RKV_OK && i < np; i++)
            st = w->pops[i].status;
        if (st != RKV_OK) {
            const char *detail = bench_last_error(w->client);
            char key[KEY_STRIDE + 1];
            unsigned key_len = format_key(cfg, key, idx - 1);
            w->preload_status = st;
            snprintf(w->preload_msg, sizeof w->preload_msg,
                     "a batch ending with key %.*s: %s%s%s%s", (int)key_len, key, rkv_strerror(st),
                     detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
            return;
        }
    }
}

/* Open loop: waits until `t` (sleeping while far, spinning when close), or
 * until the run stops and t lies past its end. */
static void wait_until(struct shared *sh, uint64_t t)
{
    for (;;) {
        uint64_t now = rkv_now_ns();
        if (now >= t)
            return;
        if (__atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE) == PHASE_STOP &&
            t >= __atomic_load_n(&sh->stop_ns, __ATOMIC_RELAXED))
            return;
        uint64_t left = t - now;
        if (left > SPIN_NS) {
            uint64_t nap = RKV_MIN(left - SPIN_NS, NAP_MAX_NS);
            struct timespec ts = { 0, (long)nap };
            nanosleep(&ts, NULL);
        } else {
            rkv_shm_cpu_relax();
        }
    }
}

/* Open loop: takes the operations due now (at least one, at most max) into
 * w->intended and returns how many; 0 when the run is over for this thread. */
static unsigned take_due(struct worker *w, unsigned max, bool measuring)
{
    struct shared *sh = w->sh;
    int phase = __atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE);
    uint64_t next = bench_schedule_peek(&w->sched);
    if (phase == PHASE_STOP) {
        /* Drain: what was intended before the end is still sent, unless that
         * takes too long or a second Ctrl-C comes. */
        uint64_t stop = __atomic_load_n(&sh->stop_ns, __ATOMIC_RELAXED);
        if (!measuring || next >= stop)
            return 0;
        if (stop_requested >= 2 || rkv_now_ns() - stop > DRAIN_MAX_NS) {
            w->res->missed += bench_schedule_due_before(&w->sched, stop);
            return 0;
        }
    } else {
        wait_until(sh, next);
        phase = __atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE);
        if (phase == PHASE_STOP && next >= __atomic_load_n(&sh->stop_ns, __ATOMIC_RELAXED))
            return 0;
    }
    uint64_t now = rkv_now_ns();
    unsigned n = 0;
    do
        w->intended[n++] = bench_schedule_take(&w->sched);
    while (n < max && bench_schedule_peek(&w->sched) <= now);
    if (measuring) {
        uint64_t lag = now > w->intended[0] ? now - w->intended[0] : 0;
        if (lag > w->res->max_send_lag_ns)
            w->res->max_send_lag_ns = lag;
        w->res->sent += n;
    }
    return n;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    const struct bench_config *cfg = sh->cfg;
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, NULL); /* main handles the signals */

    if (cfg->preload)
        preload(w);
    pthread_mutex_lock(&sh->lock);
    sh->preloaded++;
    pthread_cond_broadcast(&sh->cond);
    while (!sh->go)
        pthread_cond_wait(&sh->cond, &sh->lock);
    pthread_mutex_unlock(&sh->lock);

    bool measuring = false, open_loop = cfg->rate > 0;
    uint64_t done = 0;
    if (bench_window_mode(cfg) == BENCH_WINDOW_PIPELINED) {
        run_window(w);
        __atomic_fetch_add(&sh->finished, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    if (open_loop) {
        /* Threads share the rate; their schedules are staggered over one gap. */
        double rate = cfg->rate / sh->all_threads;
        unsigned gid = w->id;
        uint64_t phase_ns = (uint64_t)(1e9 / rate * gid / sh->all_threads);
        bench_schedule_init(&w->sched, cfg->arrival, rate, sh->start_ns, phase_ns,
                            cfg->seed * 0x9e3779b97f4a7c15ull + gid);
    }
    for (;;) {
        int phase = __atomic_load_n(&sh->phase, __ATOMIC_ACQUIRE);
        if (phase == PHASE_STOP && !(open_loop && measuring))
            break;
        if (phase == PHASE_MEASURE && !measuring) {
            if (!w->borrowed)
                bench_reset_counters(w->client);
            measuring = true;
        }
        if (cfg->trace != NULL) {
            if (run_trace_batch(w, cfg->window, measuring) == 0)
                break;
            continue;
        }
        unsigned n = cfg->window;
        if (measuring) {
            if (done >= w->quota)
                break;
            if (w->quota - done < n)
                n = (unsigned)(w->quota - done);
        }
        if (open_loop && (n = take_due(w, n, measuring)) == 0)
            break;
        run_batch(w, n, measuring);
        if (measuring)
            done += n;
    }
    w->end_ns = rkv_now_ns();
    if (measuring && !w->borrowed)
        bench_get_counters(w->client, &w->res->counters);
    __atomic_fetch_add(&sh->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- setup ---- */

static void set_cuts(struct shared *sh)
{
    struct bench_mix mix;
    bench_mix_of(sh->cfg, &mix);
    double share[DRAW_COUNT] = { mix.get, mix.put, mix.insert, mix.rmw, mix.del };
    double sum = 0;
    int last = 0;
    for (int i = 0; i < DRAW_COUNT; i++) {
        sum += share[i];
        sh->cut[i] = share[i] > 0 ? sum : -1.0; /* -1: never drawn */
        if (share[i] > 0)
            last = i;
    }
    /* Rounding must never leave u past every cut: the last kind takes the rest. */
    sh->cut[last] = 2.0;
    /* A kind never drawn gets its predecessor's cut: u always passes it. */
    for (int i = 0; i < DRAW_COUNT; i++)
        if (sh->cut[i] < 0)
            sh->cut[i] = i == 0 ? 0.0 : sh->cut[i - 1];
}

static const char *connect_hint(rkv_status st)
{
    switch (st) {
    case RKV_CONNECTION: return "is rkv-server running and listening on that URI?";
    case RKV_AUTH: return "pass the server's secret with --auth";
    case RKV_VERSION_MISMATCH: return "run client and server of the same rkv version";
    case RKV_TIMEOUT: return "the server did not answer; is it overloaded or stopped?";
    default: return "check the URI and the server's log";
    }
}

static int connect_all(const struct bench_config *cfg, struct worker *ws)
{
    for (unsigned i = 0; i < cfg->threads; i++) {
        char err[768];
        if (cfg->shared_handle && i > 0) { /* one handle, thread 0's */
            ws[i].client = ws[0].client;
            ws[i].kv = ws[0].kv;
            ws[i].value_limit = ws[0].value_limit;
            ws[i].borrowed = true;
            continue;
        }
        rkv_status st = bench_client_connect(cfg, &ws[i].client, err, sizeof err);
        if (st == RKV_OK) {
            ws[i].kv = bench_client_rkv(ws[i].client);
            ws[i].value_limit = RKV_MIN(bench_max_value(ws[i].client, TRACE_VALUE_MAX),
                                        (size_t)TRACE_VALUE_MAX);
        }
        if (st != RKV_OK) {
            if (err[0])
                fprintf(stderr, "rkv-bench: %s\n", err);
            else
                fprintf(stderr, "rkv-bench: cannot connect to %s: %s; %s\n", cfg->servers,
                        rkv_strerror(st), connect_hint(st));
            return -1;
        }
    }
    return 0;
}

static int alloc_worker(struct worker *w, const struct bench_config *cfg, const char *pattern)
{
    uint32_t vmax = cfg->value_size.max;
    /* Preload batches hold PRELOAD_BATCH keys, fewer for large values. */
    unsigned preload_batch = PRELOAD_BATCH;
    if ((uint64_t)preload_batch * vmax > PRELOAD_BYTES)
        preload_batch = RKV_MAX(1u, PRELOAD_BYTES / vmax);
    w->batch_cap = RKV_MAX(cfg->window, cfg->preload ? preload_batch : 1u);
    w->get_buf_len = RKV_MAX((size_t)vmax, 64);
    w->pattern = pattern;
    w->res = malloc(sizeof *w->res);
    w->keys = malloc((size_t)w->batch_cap * KEY_STRIDE);
    w->get_bufs = malloc((size_t)w->batch_cap * w->get_buf_len);
    w->put_bufs = cfg->verify ? malloc((size_t)w->batch_cap * vmax) : NULL;
    w->gops = calloc(w->batch_cap, sizeof *w->gops);
    w->gidx = calloc(w->batch_cap, sizeof *w->gidx);
    w->pops = calloc(w->batch_cap, sizeof *w->pops);
    w->gstart = calloc(w->batch_cap, sizeof *w->gstart);
    w->pstart = calloc(w->batch_cap, sizeof *w->pstart);
    w->intended = calloc(w->batch_cap, sizeof *w->intended);
    w->singles = calloc(w->batch_cap, sizeof *w->singles);
    w->free_slots = calloc(w->batch_cap, sizeof *w->free_slots);
    w->done = calloc(cfg->window, sizeof *w->done);
    w->fops = calloc(w->batch_cap, sizeof *w->fops);
    w->popts = calloc(w->batch_cap, sizeof *w->popts);
    w->gtop = calloc(w->batch_cap, 1);
    w->ptop = calloc(w->batch_cap, 1);
    if (!w->res || !w->keys || !w->get_bufs || (cfg->verify && !w->put_bufs) || !w->gops ||
        !w->gidx || !w->pops || !w->singles || !w->gstart || !w->pstart || !w->intended ||
        !w->free_slots || !w->done || !w->fops || !w->popts || !w->gtop || !w->ptop)
        return -1;
    bench_results_init(w->res);
    return 0;
}

static void free_worker(struct worker *w)
{
    if (!w->borrowed)
        bench_client_close(w->client);
    free(w->res);
    free(w->keys);
    free(w->get_bufs);
    free(w->put_bufs);
    free(w->gops);
    free(w->gidx);
    free(w->pops);
    free(w->singles);
    free(w->free_slots);
    free(w->done);
    free(w->gstart);
    free(w->pstart);
    free(w->intended);
    free(w->fops);
    free(w->popts);
    free(w->gtop);
    free(w->ptop);
}

/* Lets the workers past their start gate (after main set the phase). */
static void open_gate(struct shared *sh)
{
    pthread_mutex_lock(&sh->lock);
    sh->go = true;
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->lock);
}

/* Waits until `count` workers finished preloading. */
static void wait_preloaded(struct shared *sh, unsigned count)
{
    pthread_mutex_lock(&sh->lock);
    while (sh->preloaded < count)
        pthread_cond_wait(&sh->cond, &sh->lock);
    pthread_mutex_unlock(&sh->lock);
}

/* ---- ticks and progress ---- */

/* A child process's pipes to the parent (--processes). */
struct child_link {
    int to_parent;   /* messages (bench_procs.h) */
    int from_parent; /* the go byte */
    unsigned index;  /* 0..processes-1 */
};

/* Per-second snapshots of this process's threads. */
struct ticker {
    struct histogram cum[BENCH_OP_COUNT];  /* the snapshot now */
    struct histogram prev[BENCH_OP_COUNT]; /* the previous one */
    uint64_t prev_errors[BENCH_OP_COUNT];
    uint64_t prev_hits, prev_misses;
    struct bench_tick tick; /* the difference */
    double last_s;          /* end of the previous interval */
};

/* Where ticks end up: the series and the progress lines. */
struct sink {
    const struct bench_config *cfg;
    struct bench_series series;
    struct histogram scratch;
    uint64_t ops, errors; /* so far, for the progress line */
    bool tty;             /* stderr is a terminal: rewrite one line */
    bool out_of_memory;
};

static void ticker_init(struct ticker *t)
{
    memset(t, 0, sizeof *t);
    for (unsigned op = 0; op < BENCH_OP_COUNT; op++)
        hist_init(&t->prev[op]);
}

/* Fills t->tick with what the threads recorded since the previous call. */
static void ticker_take(struct ticker *t, struct worker *ws, unsigned threads, double now_s)
{
    bench_tick_init(&t->tick);
    t->tick.end_s = now_s;
    t->tick.length_s = now_s - t->last_s;
    t->last_s = now_s;
    for (unsigned op = 0; op < BENCH_OP_COUNT; op++) {
        uint64_t errors = 0;
        hist_init(&t->cum[op]);
        for (unsigned i = 0; i < threads; i++) {
            hist_merge(&t->cum[op], &ws[i].res->lat[op]);
            errors += __atomic_load_n(&ws[i].res->op_errors[op], __ATOMIC_RELAXED);
        }
        hist_diff(&t->tick.lat[op], &t->cum[op], &t->prev[op]);
        t->tick.errors[op] = errors - t->prev_errors[op];
        t->prev_errors[op] = errors;
        t->prev[op] = t->cum[op];
    }
    uint64_t hits = 0, misses = 0;
    for (unsigned i = 0; i < threads; i++) {
        hits += __atomic_load_n(&ws[i].res->get_hits, __ATOMIC_RELAXED);
        misses += __atomic_load_n(&ws[i].res->get_misses, __ATOMIC_RELAXED);
    }
    t->tick.get_hits = hits - t->prev_hits;
    t->tick.get_misses = misses - t->prev_misses;
    t->prev_hits = hits;
    t->prev_misses = misses;
}

static void sink_add(struct sink *s, const struct bench_tick *tick, bool final)
{
    if (bench_series_add(&s->series, tick, &s->scratch) != 0) {
        s->out_of_memory = true;
        return;
    }
    const struct bench_row *r = &s->series.rows[s->series.count - 1];
    const struct bench_row_op *all = &r->op[BENCH_OP_COUNT];
    s->ops += all->ops;
    s->errors += all->errors;
    if (s->cfg->quiet || final)
        return;
    char hit[32] = "";
    double hr = bench_hit_rate(r->get_hits, r->get_misses);
    if ((s->cfg->fill_on_miss || s->cfg->trace != NULL) && hr >= 0)
        snprintf(hit, sizeof hit, "  hit %.1f%%", hr * 100);
    fprintf(stderr, "%s[%6.1fs] %11.0f ops/s  p50 %.2f us  p99 %.2f us%s  %llu ops, %llu errors%s",
            s->tty ? "\r" : "", r->end_s, bench_row_rate(r, BENCH_OP_COUNT),
            (double)all->p50_ns / 1000, (double)all->p99_ns / 1000, hit, (unsigned long long)s->ops,
            (unsigned long long)s->errors, s->tty ? "\033[K" : "\n");
    fflush(stderr);
}

/* A tick of this process: to the parent, or into the local sink. */
static int deliver(const struct child_link *link, struct sink *s, const struct bench_tick *t,
                   bool final)
{
    if (link != NULL)
        return bench_msg_send(link->to_parent, BENCH_MSG_TICK, t, sizeof *t);
    sink_add(s, t, final);
    return 0;
}

static void warmup_line(const struct sink *s, struct worker *ws, unsigned threads, double elapsed)
{
    uint64_t errors = 0;
    for (unsigned i = 0; i < threads; i++)
        errors += __atomic_load_n(&ws[i].errors_seen, __ATOMIC_RELAXED);
    fprintf(stderr, "%s[warmup %5.1fs] errors %llu%s", s->tty ? "\r" : "", elapsed,
            (unsigned long long)errors, s->tty ? "\033[K" : "\n");
    fflush(stderr);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_requested)
        ;
}

/* Runs warmup and measurement, a tick each measured second; returns the
 * measure start (0 if never). */
static uint64_t supervise(struct shared *sh, struct worker *ws, struct ticker *tk,
                          const struct child_link *link, struct sink *s)
{
    const struct bench_config *cfg = sh->cfg;
    uint64_t phase_start = rkv_now_ns(), measure_start = 0;
    sh->start_ns = phase_start;
    int phase = cfg->warmup_s > 0 ? PHASE_WARMUP : PHASE_MEASURE;
    if (phase == PHASE_MEASURE)
        measure_start = phase_start;
    __atomic_store_n(&sh->phase, phase, __ATOMIC_RELEASE);
    uint64_t next_line = phase_start + 1000000000ull;
    open_gate(sh);

    for (;;) {
        sleep_ns(TICK_NS);
        uint64_t now = rkv_now_ns();
        if (stop_requested)
            break;
        if (phase == PHASE_WARMUP && now - phase_start >= (uint64_t)(cfg->warmup_s * 1e9)) {
            phase = PHASE_MEASURE;
            measure_start = now;
            __atomic_store_n(&sh->phase, phase, __ATOMIC_RELEASE);
            next_line = now + 1000000000ull;
        }
        if (phase == PHASE_MEASURE) {
            if (cfg->duration_s > 0 && now - measure_start >= (uint64_t)(cfg->duration_s * 1e9))
                break;
            if (__atomic_load_n(&sh->finished, __ATOMIC_ACQUIRE) == cfg->threads)
                break;
        }
        if (now >= next_line) {
            if (phase == PHASE_MEASURE) {
                ticker_take(tk, ws, cfg->threads, (double)(now - measure_start) / 1e9);
                if (deliver(link, s, &tk->tick, false) != 0)
                    break; /* the parent is gone */
            } else if (!cfg->quiet && link == NULL) {
                warmup_line(s, ws, cfg->threads, (double)(now - phase_start) / 1e9);
            }
            next_line += 1000000000ull;
        }
    }
    __atomic_store_n(&sh->stop_ns, rkv_now_ns(), __ATOMIC_RELAXED);
    __atomic_store_n(&sh->phase, PHASE_STOP, __ATOMIC_RELEASE);
    if (link == NULL && !cfg->quiet && s->tty)
        fputc('\n', stderr);
    return measure_start;
}

/* ---- one process's run ---- */

/* Threads of this process: ids base .. base + threads - 1 of all_threads. */
struct run_shape {
    unsigned base, all_threads;
};

/* A child's go: waits for the parent's byte (1 go; 0 or a closed pipe: stop). */
static bool wait_go(const struct child_link *link)
{
    char go = 0;
    ssize_t r;
    do
        r = read(link->from_parent, &go, 1);
    while (r < 0 && errno == EINTR);
    return r == 1 && go == 1;
}

static void tell_ready(const struct child_link *link, bool ok)
{
    struct bench_ready ready = { .ok = ok };
    if (link != NULL)
        bench_msg_send(link->to_parent, BENCH_MSG_READY, &ready, sizeof ready);
}

/* Connects, preloads, runs and merges this process's threads into *total
 * and (single process) s->series. Returns 0 when it measured, 1 when it
 * failed or stopped early (message printed). */
static int run_local(const struct bench_config *cfg, struct run_shape shape,
                     const struct child_link *link, struct bench_results *total, struct sink *s)
{
    int rc = 1;
    unsigned started = 0;
    bool ready_told = false;
    struct shared sh = { .cfg = cfg,
                         .phase = PHASE_PRELOAD,
                         .next_insert = cfg->keys,
                         .thread_base = shape.base,
                         .all_threads = shape.all_threads,
                         .lock = PTHREAD_MUTEX_INITIALIZER,
                         .cond = PTHREAD_COND_INITIALIZER };
    struct worker *ws = calloc(cfg->threads, sizeof *ws);
    char *pattern = malloc(RKV_MAX(cfg->value_size.max, 1u));
    struct ticker *tk = malloc(sizeof *tk);
    if (ws == NULL || pattern == NULL || tk == NULL) {
        fprintf(stderr, "rkv-bench: out of memory\n");
        goto out;
    }
    ticker_init(tk);
    for (uint32_t i = 0; i < cfg->value_size.max; i++) /* a trace's: digits, for incr */
        pattern[i] = cfg->trace != NULL ? (char)('0' + i % 10) : (char)('a' + i % 26);
    if (cfg->trace != NULL)
        sh.trace_end = cfg->requests ? RKV_MIN(cfg->requests, (uint64_t)cfg->trace->count)
                                     : cfg->trace->count;
    set_cuts(&sh);
    if (cfg->dist != BENCH_DIST_UNIFORM) {
        if (!cfg->quiet && cfg->keys > 10000000 && shape.base == 0)
            fprintf(stderr, "rkv-bench: computing zipf constants for %llu keys...\n",
                    (unsigned long long)cfg->keys);
        wl_zipf_init(&sh.zipf, cfg->keys, cfg->theta);
    }
    wl_perm_init(&sh.perm, cfg->keys, cfg->seed);

    uint64_t per_thread = cfg->requests / shape.all_threads,
             extra = cfg->requests % shape.all_threads;
    for (unsigned i = 0; i < cfg->threads; i++) {
        ws[i].id = shape.base + i;
        ws[i].sh = &sh;
        ws[i].quota = cfg->requests ? per_thread + (ws[i].id < extra) : UINT64_MAX;
        wl_rng_seed(&ws[i].rng, cfg->seed * 0x100000001b3ull + ws[i].id);
        if (alloc_worker(&ws[i], cfg, pattern) != 0) {
            fprintf(stderr,
                    "rkv-bench: out of memory for thread %u's buffers; lower --window or "
                    "--value-size\n",
                    ws[i].id);
            goto out;
        }
    }
    if (connect_all(cfg, ws) != 0)
        goto out;

    uint64_t t0 = rkv_now_ns();
    if (!cfg->quiet && cfg->preload && shape.base == 0)
        fprintf(stderr, "rkv-bench: preloading %llu keys with %u thread%s...\n",
                (unsigned long long)cfg->keys, shape.all_threads, shape.all_threads == 1 ? "" : "s");
    for (; started < cfg->threads; started++) {
        int err = pthread_create(&ws[started].thread, NULL, worker_main, &ws[started]);
        if (err != 0) {
            fprintf(stderr, "rkv-bench: cannot start thread %u: %s; lower --threads\n",
                    ws[started].id, strerror(err));
            break;
        }
    }
    wait_preloaded(&sh, started);

    bool preload_failed = false;
    for (unsigned i = 0; i < cfg->threads; i++) {
        if (ws[i].preload_status != RKV_OK && !preload_failed) {
            fprintf(stderr, "rkv-bench: preload failed: %s; %s\n", ws[i].preload_msg,
                    ws[i].preload_status == RKV_OUT_OF_MEMORY
                        ? "give the server more --memory, or lower --keys or --value-size"
                        : connect_hint(ws[i].preload_status));
            preload_failed = true;
        }
    }
    bool ok = started == cfg->threads && !preload_failed && !stop_requested;
    tell_ready(link, ok);
    ready_told = true;
    if (ok && link != NULL)
        ok = wait_go(link);
    if (!ok) {
        __atomic_store_n(&sh.phase, PHASE_STOP, __ATOMIC_RELEASE);
        open_gate(&sh);
        goto out;
    }
    if (!cfg->quiet && cfg->preload && shape.base == 0)
        fprintf(stderr, "rkv-bench: preloaded in %.2f s\n", (double)(rkv_now_ns() - t0) / 1e9);

    uint64_t measure_start = supervise(&sh, ws, tk, link, s);
    for (; started > 0; started--)
        pthread_join(ws[started - 1].thread, NULL);

    uint64_t end = measure_start;
    for (unsigned i = 0; i < cfg->threads; i++) {
        bench_results_merge(total, ws[i].res);
        if (ws[i].end_ns > end)
            end = ws[i].end_ns;
    }
    total->duration_s = measure_start ? (double)(end - measure_start) / 1e9 : 0;
    if (measure_start != 0) {
        /* The rest since the last tick (the drain included). */
        ticker_take(tk, ws, cfg->threads, total->duration_s);
        if (tk->tick.length_s > 0.001 || tk->tick.lat[0].count || tk->tick.lat[1].count)
            deliver(link, s, &tk->tick, true);
        rc = 0;
    }

out:
    if (!ready_told)
        tell_ready(link, false);
    /* Threads still running (the failure paths) stop at PHASE_STOP. */
    for (; started > 0; started--)
        pthread_join(ws[started - 1].thread, NULL);
    for (unsigned i = 0; ws != NULL && i < cfg->threads; i++)
        free_worker(&ws[i]);
    free(ws);
    free(pattern);
    free(tk);
    return rc;
}

/* ---- several processes ---- */

static pid_t children[BENCH_MAX_PROCESSES];
static unsigned child_count;

/* The parent passes SIGINT/SIGTERM on, once, to its children (which run in
 * their own process group, so a terminal's Ctrl-C reaches them only so). */
static void forward_signal(int sig)
{
    for (unsigned i = 0; i < child_count; i++)
        if (children[i] > 0)
            kill(children[i], sig);
}

static void child_main(const struct bench_config *cfg, unsigned index, int to_parent, int from_parent)
{
    struct child_link link = { to_parent, from_parent, index };
    struct run_shape shape = { index * cfg->threads, cfg->threads * cfg->processes };
    struct bench_final *fin = malloc(sizeof *fin);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1)
        _exit(1); /* the parent died before the prctl */
    if (fin == NULL) {
        tell_ready(&link, false);
        _exit(1);
    }
    bench_results_init(&fin->res);
    fin->measured = run_local(cfg, shape, &link, &fin->res, NULL) == 0;
    int rc = bench_msg_send(to_parent, BENCH_MSG_FINAL, fin, sizeof *fin) == 0 ? 0 : 1;
    _exit(rc); /* not exit(): the parent's stdio buffers are not this process's to flush */
}

static const char *exit_description(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status %#x", status);
    return buf;
}

/* Reads one message of process i; on a broken stream says what happened. */
static int recv_from(unsigned i, int fd, uint32_t *kind, void *buf, size_t cap, unsigned n)
{
    int r = bench_msg_recv(fd, kind, buf, cap);
    if (r == 0)
        return 0;
    int status = 0;
    char why[96] = "still running";
    if (waitpid(children[i], &status, 0) == children[i]) {
        exit_description(status, why, sizeof why);
        children[i] = 0;
    }
    fprintf(stderr,
            "rkv-bench: client process %u of %u %s (%s); its results are lost, the run FAILED\n",
            i + 1, n, r == 1 ? "ended before reporting" : "sent a malformed report", why);
    return -1;
}

/* Forks the client processes, starts them together, merges their ticks into
 * s and their results into *total. 0 when all measured, 1 otherwise. */
static int run_processes(const struct bench_config *cfg, struct bench_results *total, struct sink *s)
{
    unsigned n = cfg->processes;
    int up[BENCH_MAX_PROCESSES], down[BENCH_MAX_PROCESSES];
    size_t cap = RKV_MAX(sizeof(struct bench_tick), sizeof(struct bench_final));
    void *buf = malloc(cap);
    struct bench_tick *merged = malloc(sizeof *merged);
    bool finished[BENCH_MAX_PROCESSES] = { false };
    int rc = 1;
    if (buf == NULL || merged == NULL) {
        fprintf(stderr, "rkv-bench: out of memory\n");
        goto out;
    }
    struct sigaction sa = { .sa_handler = forward_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A child that already exited must not kill us when told to stop: a
     * write to its pipe fails with EPIPE instead (and a child's to ours). */
    signal(SIGPIPE, SIG_IGN);
    fflush(NULL);
    for (; child_count < n; child_count++) {
        int u[2], d[2];
        if (pipe(u) != 0 || pipe(d) != 0) {
            fprintf(stderr, "rkv-bench: cannot create a pipe for client process %u: %s\n",
                    child_count + 1, strerror(errno));
            goto stop;
        }
        fcntl(u[0], F_SETPIPE_SZ, 1 << 20); /* room for a few ticks; best effort */
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "rkv-bench: cannot fork client process %u: %s; lower --processes\n",
                    child_count + 1, strerror(errno));
            close(u[0]);
            close(u[1]);
            close(d[0]);
            close(d[1]);
            goto stop;
        }
        if (pid == 0) {
            for (unsigned i = 0; i < child_count; i++) {
                close(up[i]);
                close(down[i]);
            }
            close(u[0]);
            close(d[1]);
            child_main(cfg, child_count, u[1], d[0]);
        }
        close(u[1]);
        close(d[0]);
        up[child_count] = u[0];
        down[child_count] = d[1];
        children[child_count] = pid;
    }

    /* All connected and preloaded, then go together. */
    bool all_ready = true;
    for (unsigned i = 0; i < n; i++) {
        uint32_t kind;
        if (recv_from(i, up[i], &kind, buf, cap, n) != 0 || kind != BENCH_MSG_READY ||
            !((struct bench_ready *)buf)->ok)
            all_ready = false;
    }
    char go = all_ready ? 1 : 0;
    for (unsigned i = 0; i < n; i++)
        if (write(down[i], &go, 1) != 1)
            all_ready = false;
    if (!all_ready)
        goto stop;

    /* One tick from each process per round, merged. */
    unsigned left = n;
    bool broken = false;
    while (left > 0 && !broken) {
        bool any = false, last = false;
        bench_tick_init(merged);
        for (unsigned i = 0; i < n; i++) {
            uint32_t kind;
            if (finished[i])
                continue;
            if (recv_from(i, up[i], &kind, buf, cap, n) != 0) {
                broken = true;
                break;
            }
            if (kind == BENCH_MSG_TICK) {
                bench_tick_merge(merged, buf);
                any = true;
            } else if (kind == BENCH_MSG_FINAL) {
                const struct bench_final *fin = buf;
                bench_results_merge(total, &fin->res);
                if (!fin->measured)
                    broken = true;
                finished[i] = true;
                left--;
                last = true;
            } else {
                broken = true;
            }
        }
        if (any)
            sink_add(s, merged, last || left == 0);
    }
    rc = broken ? 1 : 0;

stop:
    for (unsigned i = 0; i < child_count; i++) {
        close(up[i]);
        close(down[i]);
    }
    for (unsigned i = 0; i < child_count; i++) {
        int status;
        if (children[i] > 0 && waitpid(children[i], &status, 0) == children[i] && rc == 0 &&
            !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            char why[96];
            fprintf(stderr, "rkv-bench: client process %u of %u: %s\n", i + 1, n,
                    exit_description(status, why, sizeof why));
            rc = 1;
        }
        children[i] = 0;
    }
out:
    free(buf);
    free(merged);
    return rc;
}

/* ---- main ---- */

static FILE *open_output(const char *flag, const char *path)
{
    if (path == NULL)
        return NULL;
    if (strcmp(path, "-") == 0)
        return stdout;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fprintf(stderr, "rkv-bench: %s: cannot write '%s': %s; give a writable path or '-'\n", flag,
                path, strerror(errno));
    return f;
}

static int close_output(const char *flag, const char *path, FILE *f, int written)
{
    if (f == NULL)
        return 0;
    if (f != stdout) {
        if (fclose(f) != 0)
            written = -1;
    } else if (fflush(f) != 0) {
        written = -1;
    }
    if (written != 0)
        fprintf(stderr, "rkv-bench: %s: writing '%s' failed: %s\n", flag, path, strerror(errno));
    return written != 0;
}

/* PREFIX-<kind>.hgrm for each kind that ran, and PREFIX-total.hgrm. */
static int write_hist_files(const struct bench_config *cfg, const struct bench_results *r,
                            struct histogram *all)
{
    int failed = 0;
    hist_init(all);
    for (unsigned op = 0; op <= BENCH_OP_COUNT; op++) {
        const struct histogram *h = op < BENCH_OP_COUNT ? &r->lat[op] : all;
        if (op < BENCH_OP_COUNT)
            hist_merge(all, h);
        if (h->count == 0)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s-%s.hgrm", cfg->hist_prefix, bench_op_name(op));
        FILE *f = fopen(path, "w");
        if (f == NULL) {
            fprintf(stderr, "rkv-bench: --hist-file: cannot write '%s': %s\n", path, strerror(errno));
            failed = 1;
            continue;
        }
        failed |= close_output("--hist-file", path, f, hdr_text_write(f, h, 1000.0, HDR_TEXT_TICKS));
    }
    return failed;
}

/* --html for this run: its JSON report, read back, drawn (the same path as
 * --compare, so the two pages agree). */
static int write_html(FILE *out, const struct bench_config *cfg, const struct bench_results *r,
                      const struct bench_series *series)
{
    char *text = NULL, err[256];
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return -1;
    int rc = bench_report_json_series(mem, cfg, r, series);
    if (fclose(mem) != 0)
        rc = -1;
    struct json_value *report = rc == 0 ? json_parse(text, len, err, sizeof err) : NULL;
    free(text);
    if (report == NULL)
        return -1;
    const char *label = cfg->rate > 0 ? "open loop" : "closed loop";
    rc = bench_html_write(out, (const struct json_value *const *)&report, &label, 1);
    json_value_free(report);
    return rc;
}

int main(int argc, char **argv)
{
    struct bench_config cfg;
    switch (bench_parse_args(argc, argv, &cfg, stdout, stderr)) {
    case BENCH_ARGS_RUN: break;
    case BENCH_ARGS_EXIT_OK: return 0;
    case BENCH_ARGS_USAGE: return 2;
    }

    struct trace trace = { 0 };
    if (cfg.trace_path != NULL) {
        /* The whole trace is read and validated before anything is sent. */
        char err[1024];
        if (trace_load_file(&trace, cfg.trace_path, err, sizeof err) != 0) {
            fprintf(stderr, "rkv-bench: --trace: %s\n", err);
            bench_config_free(&cfg);
            return 2;
        }
        cfg.trace = &trace;
        cfg.value_size = (struct bench_range){ 0, RKV_MAX(trace.value_max, 1u) };
        uint64_t per_thread = (uint64_t)cfg.window *
                              ((uint64_t)cfg.value_size.max * 2 + BENCH_MAX_KEY_SIZE);
        if (per_thread > BENCH_MAX_THREAD_BUFFER) {
            fprintf(stderr,
                    "rkv-bench: --trace: values up to %u bytes with --window %u need %llu "
                    "MiB of buffers per thread; lower --window\n",
                    cfg.value_size.max, cfg.window, (unsigned long long)(per_thread >> 20));
            trace_free(&trace);
            bench_config_free(&cfg);
            return 2;
        }
        if (!cfg.quiet)
            fprintf(stderr,
                    "rkv-bench: trace %s: %zu lines, %llu of them with a key or value too "
                    "large to replay\n",
                    cfg.trace_path, trace.count, (unsigned long long)trace.too_large);
    }

    if (cfg.compare_count > 0) {
        int crc = bench_html_compare(cfg.compare, cfg.compare_count, cfg.html_path, stderr) == 0 ? 0
                                                                                                 : 1;
        bench_config_free(&cfg);
        return crc;
    }
    char clock_err[256], clock_name[32];
    if (bench_clock_init(&op_clock, cfg.clock, NULL, clock_err, sizeof clock_err) != 0) {
        fprintf(stderr, "rkv-bench: %s\n", clock_err);
        trace_free(&trace);
        bench_config_free(&cfg);
        return 2;
    }
    cfg.clock_name = cfg.rate > 0 ? "monotonic (open loop)"
                                  : bench_clock_describe(&op_clock, clock_name, sizeof clock_name);
    int rc = 1;
    struct bench_results *total = malloc(sizeof *total);
    struct sink *sink = malloc(sizeof *sink);
    FILE *json = NULL, *csv = NULL, *html = NULL;
    if (total == NULL || sink == NULL) {
        fprintf(stderr, "rkv-bench: out of memory\n");
        goto out;
    }
    memset(sink, 0, sizeof *sink);
    sink->cfg = &cfg;
    sink->tty = isatty(2);
    bench_results_init(total);
    if ((cfg.json_path != NULL && (json = open_output("--json", cfg.json_path)) == NULL) ||
        (cfg.timeseries_path != NULL &&
         (csv = open_output("--timeseries", cfg.timeseries_path)) == NULL) ||
        (cfg.html_path != NULL && (html = open_output("--html", cfg.html_path)) == NULL)) {
        rc = 2;
        goto out;
    }

    int ran;
    if (cfg.processes > 1) {
        ran = run_processes(&cfg, total, sink);
    } else {
        struct sigaction sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        ran = run_local(&cfg, (struct run_shape){ 0, cfg.threads }, NULL, total, sink);
    }
    if (ran != 0 && bench_results_ops(total) == 0)
        goto out; /* nothing measured: the failure was reported */
    if (sink->out_of_memory)
        fprintf(stderr, "rkv-bench: out of memory for the per-second series; it is incomplete\n");

    bool json_stdout = json == stdout || csv == stdout || html == stdout;
    bench_report_text_series(json_stdout ? stderr : stdout, &cfg, total, &sink->series);
    fflush(stdout); /* the report before any verdict on stderr */
    rc = ran;
    if (json != NULL)
        rc |= close_output("--json", cfg.json_path, json,
                           bench_report_json_series(json, &cfg, total, &sink->series));
    json = NULL;
    if (csv != NULL)
        rc |= close_output("--timeseries", cfg.timeseries_path, csv,
                           bench_series_write_csv(csv, &sink->series));
    csv = NULL;
    if (html != NULL)
        rc |= close_output("--html", cfg.html_path, html,
                           write_html(html, &cfg, total, &sink->series));
    html = NULL;
    if (cfg.hist_prefix != NULL)
        rc |= write_hist_files(&cfg, total, &sink->scratch);
    if (total->verify_failures > 0) {
        fprintf(stderr,
                "rkv-bench: --verify: %llu values read back were not the ones written "
                "for their key; the run FAILED\n",
                (unsigned long long)total->verify_failures);
        rc = 1;
    } else if (bench_results_errors(total) > 0) {
        fprintf(stderr, "rkv-bench: %llu operations failed (see Errors above)\n",
                (unsigned long long)bench_results_errors(total));
        rc = 1;
    } else if (total->duration_s == 0) {
        fprintf(stderr, "rkv-bench: stopped before measuring anything\n");
        rc = 1;
    }

out:
    if (json != NULL && json != stdout)
        fclose(json);
    if (csv != NULL && csv != stdout)
        fclose(csv);
    if (html != NULL && html != stdout)
        fclose(html);
    if (sink != NULL)
        bench_series_free(&sink->series);
    free(sink);
    free(total);
    trace_free(&trace);
    bench_config_free(&cfg);
    return rc;
}
