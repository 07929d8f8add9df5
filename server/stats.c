/* stats.c — the server's counters as "name value" lines.
 *
 * One text format serves `rkv-cli stats` (memcached style) and, prefixed,
 * the Prometheus endpoint. Counters are summed over workers at read time
 * with relaxed loads; the request path only ever bumps its own worker's.
 */
#include <stdarg.h>
#include <stdio.h>

#include "protocol.h"
#include "server.h"
#include "util.h"

struct text {
    char *buf;
    size_t cap, len;
};

static void line(struct text *t, const char *name, uint64_t v)
{
    if (t->len >= t->cap)
        return;
    int n = snprintf(t->buf + t->len, t->cap - t->len, "%s %llu\n", name, (unsigned long long)v);
    t->len = n < 0 ? t->len : RKV_MIN(t->cap, t->len + (size_t)n);
}

static uint64_t load(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static const char *const op_names[RKV_OP_MAX] = {
    [RKV_OP_HELLO] = "cmd_hello", [RKV_OP_PUT] = "cmd_put",     [RKV_OP_DELETE] = "cmd_delete",
    [RKV_OP_INCR] = "cmd_incr",   [RKV_OP_PING] = "cmd_ping",   [RKV_OP_STATS] = "cmd_stats",
    [RKV_OP_HINTS] = "cmd_hints", [RKV_OP_FLUSH] = "cmd_flush", [RKV_OP_CLAIM] = "cmd_claim",
};

size_t rkv_server_stats_text(struct rkv_server *srv, char *buf, size_t cap)
{
    struct text t = { .buf = buf, .cap = cap };
    struct rkv_table_stats ts;
    uint64_t ops[RKV_OP_MAX] = { 0 }, errs[RKV_STATUS_COUNT] = { 0 };
    uint64_t conns = 0, replies = 0, doorbells = 0, holds = 0, expired = 0, sleeps = 0;
    uint64_t marked = 0, hints = 0, bad = 0, parked = 0;
    char name[64];

    if (cap)
        buf[0] = '\0';
    rkv_table_get_stats(srv->table, &ts);
    for (unsigned i = 0; i < srv->nworkers; i++) {
        struct rkv_worker_stats *ws = &srv->workers[i].stats;
        for (unsigned o = 0; o < RKV_OP_MAX; o++)
            ops[o] += load(&ws->requests[o]);
        for (unsigned e = 0; e < RKV_STATUS_COUNT; e++)
            errs[e] += load(&ws->errors[e]);
        conns += load(&ws->conns);
        parked += load(&ws->parked);
        marked += load(&ws->marked_requests);
        replies += load(&ws->replies);
        doorbells += load(&ws->reply_doorbells);
        holds += load(&ws->reply_holds);
        expired += load(&ws->reply_hold_expired);
        sleeps += load(&ws->sleeps);
        hints += load(&ws->hints);
        bad += load(&ws->closed_bad);
    }
    line(&t, "uptime", (rkv_now_ns() - srv->start_ns) / 1000000000ull);
    line(&t, "clock", rkv_table_clock(srv->table));
    /* the clock the tick last published in the region header: what shm
     * clients judge expiry by (common/clock.h); at most `clock` */
    line(&t, "clock_published",
         __atomic_load_n(&rkv_table_header(srv->table)->clock, __ATOMIC_ACQUIRE));
    line(&t, "items", ts.items);
    line(&t, "bytes", ts.bytes_used);
    line(&t, "bytes_free", ts.bytes_free);
    line(&t, "bytes_limbo", ts.limbo_bytes);
    line(&t, "limit_maxbytes", ts.heap_bytes);
    line(&t, "region_bytes", srv->region.size);
    line(&t, "hugepages", srv->region.hugepages);
    line(&t, "buckets", ts.buckets);
    line(&t, "max_key_len", rkv_table_header(srv->table)->max_key_len);
    line(&t, "max_value_len", rkv_table_header(srv->table)->max_value_len);
    line(&t, "evictions", ts.evictions);
    line(&t, "expirations", ts.expirations);
    line(&t, "displacements", ts.displacements);
    line(&t, "insert_failures", ts.insert_failures);
    line(&t, "slab_reassigns", ts.slab_reassigns);
    line(&t, "flushed", ts.flushed);
    line(&t, "alloc_waits", ts.alloc_waits);
    line(&t, "alloc_wait_ms", ts.alloc_wait_ms);
    line(&t, "connections", conns);
    line(&t, "connections_parked", parked);
    line(&t, "total_connections", load(&srv->conns_total));
    line(&t, "rejected_connections", load(&srv->conns_rejected));
    line(&t, "unauthenticated_dropped", load(&srv->unauth_dropped));
    line(&t, "workers", srv->nworkers);
    for (unsigned o = RKV_OP_HELLO; o < RKV_OP_MAX; o++)
        line(&t, op_names[o], ops[o]);
    for (unsigned e = 1; e < RKV_STATUS_COUNT; e++) {
        snprintf(name, sizeof name, "err_%s", rkv_status_name((rkv_status)e));
        line(&t, name, errs[e]);
    }
    line(&t, "marked_requests", marked);
    line(&t, "replies", replies);
    line(&t, "reply_doorbells", doorbells);
    line(&t, "reply_holds", holds);
    line(&t, "reply_hold_expired", expired);
    line(&t, "worker_sleeps", sleeps);
    line(&t, "hints_received", hints);
    line(&t, "hints_ignored", ts.hints_ignored);
    line(&t, "closed_for_errors", bad);
    for (unsigned i = 0; i < srv->nworkers; i++) {
        uint64_t sum = 0;
        for (unsigned o = 0; o < RKV_OP_MAX; o++)
            sum += load(&srv->workers[i].stats.requests[o]);
        snprintf(name, sizeof name, "worker_%u_requests", i);
        line(&t, name, sum);
        snprintf(name, sizeof name, "worker_%u_sleeps", i);
        line(&t, name, load(&srv->workers[i].stats.sleeps));
    }
    return t.len;
}
