/* memcache_stats.c — memcached's `stats` groups for the tcp door.
 *
 * Dashboards and exporters written for memcached read these replies as
 * they read memcached 1.6.18's: the same groups, field names, order and
 * value formats (proto_text.c process_stat, memcached.c server_stats and
 * process_stat_settings, slabs.c, items.c of that release). A field rkv
 * has a true value for is printed with it; a count rkv cannot know is
 * printed as 0 only where memcached prints 0 in a state rkv is always in
 * (each such place says which); anything else is left out, never made up.
 * After memcached's general fields come rkv's own counters, prefixed rkv_.
 *
 * Counters come from three places, summed at read time with relaxed loads:
 * the door's per-worker rkv_mc_counters (memcache_exec.c), the table's and
 * allocator's (table.h), and the server's connection counters (server.h).
 * `stats reset` zeroes what memcached's zeroes by taking a baseline that
 * later replies subtract: nothing another thread writes is written here,
 * and rkv's own counters (rkv_ lines, rkv-cli stats, the Prometheus
 * endpoint) keep counting from the start.
 *
 * Size classes are 1-based here, as in memcached: rkv's class i is id i+1.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "memcache_stats.h"
#include "table.h"
#include "tcp_server.h"
#include "util.h"

struct rkv_mc_counters rkv_mc_counters[RKV_MAX_WORKERS];
atomic_bool rkv_mc_detail_on;

#define NWORDS      (sizeof(struct rkv_mc_counters) / sizeof(_Atomic uint64_t))
#define WORD(field) (offsetof(struct rkv_mc_counters, field) / sizeof(_Atomic uint64_t))
#define CLS_WORD(c, what)                                               \
    (offsetof(struct rkv_mc_counters, cls) / sizeof(_Atomic uint64_t) + \
     (size_t)(c)*RKV_MC_CLS_COUNT + (what))
_Static_assert(sizeof(struct rkv_mc_counters) % sizeof(_Atomic uint64_t) == 0,
               "rkv_mc_counters holds uint64 counters only");

#define STAT_LINE_MAX  320
#define DETAIL_MAX     4096 /* key prefixes `stats detail` keeps counts for */
#define DETAIL_BUCKETS 256

/* ------------------------------------------------------------ counting */

void rkv_mc_count_class(struct rkv_mc_counters *st, const struct rkv_region_header *g,
                        enum rkv_mc_class_counter what, uint32_t key_len, uint32_t value_len)
{
    size_t size = rkv_item_size(key_len, value_len, 0, 0); /* as if no TTL and no flags */
    unsigned lo = 0, hi = RKV_MIN(g->class_count, RKV_MAX_CLASSES);
    while (lo < hi) { /* the first class whose items hold `size` */
        unsigned mid = (lo + hi) / 2;
        if (g->class_size[mid] < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < RKV_MIN(g->class_count, RKV_MAX_CLASSES))
        rkv_stat_bump(&st->cls[lo][what], 1);
}

/* ------------------------------------------------------------ reset */

/* What `stats reset` zeroes, as it stood then: later replies print the
 * counts since. memcached's reset clears its threads' counters (every
 * door counter here), total_items, total_connections,
 * rejected_connections, slabs_moved, and the per-class item counts
 * (evictions, reclaimed). Current values (curr_items, bytes,
 * curr_connections) are not counts and stay. */
struct baseline {
    uint64_t door[NWORDS];
    uint64_t puts, conns_total, conns_rejected, evictions, expirations, reassigns;
    uint64_t evicted[RKV_MAX_CLASSES], evicted_ttl[RKV_MAX_CLASSES];
};
static pthread_mutex_t base_lock = PTHREAD_MUTEX_INITIALIZER;
static struct baseline base;

static uint64_t since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

static void door_sum(unsigned nworkers, uint64_t out[NWORDS])
{
    memset(out, 0, NWORDS * sizeof out[0]);
    for (unsigned i = 0; i < nworkers; i++) {
        _Atomic uint64_t *w = (_Atomic uint64_t *)(void *)&rkv_mc_counters[i];
        for (size_t k = 0; k < NWORDS; k++)
            out[k] += atomic_load_explicit(&w[k], memory_order_relaxed);
    }
}

/* Everything a reply reads, less the baseline. */
struct snapshot {
    uint64_t door[NWORDS];
    struct rkv_table_stats ts;
    uint64_t conns_total, conns_rejected;
};

static void snapshot(struct rkv_server *srv, struct snapshot *s)
{
    door_sum(srv->nworkers, s->door);
    rkv_table_get_stats(srv->table, &s->ts);
    s->conns_total = atomic_load_explicit(&srv->conns_total, memory_order_relaxed);
    s->conns_rejected = atomic_load_explicit(&srv->conns_rejected, memory_order_relaxed);
    pthread_mutex_lock(&base_lock);
    for (size_t k = 0; k < NWORDS; k++)
        s->door[k] = since(s->door[k], base.door[k]);
    s->ts.puts = since(s->ts.puts, base.puts);
    s->ts.evictions = since(s->ts.evictions, base.evictions);
    s->ts.expirations = since(s->ts.expirations, base.expirations);
    s->ts.slab_reassigns = since(s->ts.slab_reassigns, base.reassigns);
    s->conns_total = since(s->conns_total, base.conns_total);
    s->conns_rejected = since(s->conns_rejected, base.conns_rejected);
    pthread_mutex_unlock(&base_lock);
}

static void detail_clear(void);

static void stats_reset(struct rkv_server *srv)
{
    struct baseline b;
    struct rkv_table_stats ts;
    door_sum(srv->nworkers, b.door);
    rkv_table_get_stats(srv->table, &ts);
    b.puts = ts.puts;
    b.evictions = ts.evictions;
    b.expirations = ts.expirations;
    b.reassigns = ts.slab_reassigns;
    b.conns_total = atomic_load_explicit(&srv->conns_total, memory_order_relaxed);
    b.conns_rejected = atomic_load_explicit(&srv->conns_rejected, memory_order_relaxed);
    for (unsigned c = 0; c < RKV_MAX_CLASSES; c++) {
        struct rkv_table_class_stats cs;
        rkv_table_class_stats(srv->table, c, &cs);
        b.evicted[c] = cs.evicted;
        b.evicted_ttl[c] = cs.evicted_ttl;
    }
    pthread_mutex_lock(&base_lock);
    base = b;
    pthread_mutex_unlock(&base_lock);
    detail_clear();
}

static void class_stats(struct rkv_server *srv, unsigned cls, struct rkv_table_class_stats *cs)
{
    rkv_table_class_stats(srv->table, cls, cs);
    pthread_mutex_lock(&base_lock);
    cs->evicted = since(cs->evicted, base.evicted[cls]);
    cs->evicted_ttl = since(cs->evicted_ttl, base.evicted_ttl[cls]);
    pthread_mutex_unlock(&base_lock);
}

/* ------------------------------------------------------------ detail */

/* memcached's stats_prefix.c, by behaviour: a key's prefix is what comes
 * before its first ':' (keys without one are not counted); the dump is one
 * PREFIX line per prefix, then END. rkv keeps at most DETAIL_MAX prefixes
 * (a client making up prefixes cannot grow it further): a key of a new
 * prefix past that is not counted. */
struct prefix {
    struct prefix *next;
    uint64_t get, hit, set, del;
    uint32_t len;
    char name[];
};
static pthread_mutex_t detail_lock = PTHREAD_MUTEX_INITIALIZER;
static struct prefix *detail_table[DETAIL_BUCKETS];
static unsigned detail_count;

void rkv_mc_detail_record(enum rkv_mc_detail what, const uint8_t *key, uint32_t key_len)
{
    const uint8_t *colon = memchr(key, ':', key_len);
    if (colon == NULL)
        return;
    uint32_t len = (uint32_t)(colon - key), h = 2166136261u;
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 16777619u;
    pthread_mutex_lock(&detail_lock);
    struct prefix **pp = &detail_table[h % DETAIL_BUCKETS], *p = *pp;
    while (p != NULL && !(p->len == len && memcmp(p->name, key, len) == 0))
        p = p->next;
    if (p == NULL && detail_count < DETAIL_MAX && (p = calloc(1, sizeof *p + len + 1)) != NULL) {
        p->len = len;
        memcpy(p->name, key, len);
        p->next = *pp;
        *pp = p;
        detail_count++;
    }
    if (p != NULL) {
        switch (what) {
        case RKV_MC_DETAIL_GET: p->get++; break;
        case RKV_MC_DETAIL_HIT:
            p->get++;
            p->hit++;
            break;
        case RKV_MC_DETAIL_SET: p->set++; break;
        case RKV_MC_DETAIL_DEL: p->del++; break;
        }
    }
    pthread_mutex_unlock(&detail_lock);
}

static void detail_clear(void)
{
    pthread_mutex_lock(&detail_lock);
    for (unsigned b = 0; b < DETAIL_BUCKETS; b++) {
        for (struct prefix *p = detail_table[b], *next; p != NULL; p = next) {
            next = p->next;
            free(p);
        }
        detail_table[b] = NULL;
    }
    detail_count = 0;
    pthread_mutex_unlock(&detail_lock);
}

/* ------------------------------------------------------------ output */

struct out {
    struct rkv_sconn *c;
    size_t mark; /* where the reply began */
    bool full;   /* it did not fit the connection's output buffer */
};

static void put(struct out *o, const char *s, size_t n)
{
    char *dst = o->full ? NULL : rkv_tcp_out_reserve(o->c, n);
    if (dst == NULL) {
        o->full = true;
        return;
    }
    memcpy(dst, s, n);
    rkv_tcp_out_commit(o->c, n);
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void putf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct out *o, const char *fmt, ...)
{
    char line[STAT_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(o, line, RKV_MIN((size_t)n, sizeof line - 1));
}

static void stat_u(struct out *o, const char *name, uint64_t v)
{
    putf(o, "STAT %s %llu\r\n", name, (unsigned long long)v);
}

static void stat_s(struct out *o, const char *name, const char *v)
{
    putf(o, "STAT %s %s\r\n", name, v);
}

/* ------------------------------------------------------------ general */

static uint64_t curr_connections(struct rkv_server *srv)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < srv->nworkers; i++)
        n += atomic_load_explicit(&srv->workers[i].stats.conns, memory_order_relaxed);
    return n;
}

static unsigned log2u(uint64_t v)
{
    unsigned n = 0;
    while (v > 1) {
        v >>= 1;
        n++;
    }
    return n;
}

static void stats_general(struct rkv_server *srv, struct out *o)
{
    /* memcached's per-thread counters, in server_stats()'s order */
    static const struct {
        const char *name;
        size_t word;
    } door_a[] = {
#define C(x) { #x, WORD(x) }
        C(cmd_get), C(cmd_set), C(cmd_flush), C(cmd_touch),
    }, door_b[] = {
        C(get_hits), C(get_misses), C(get_expired),
    }, door_c[] = {
        C(delete_misses), C(delete_hits), C(incr_misses), C(incr_hits), C(decr_misses),
        C(decr_hits), C(cas_misses), C(cas_hits), C(cas_badval), C(touch_hits), C(touch_misses),
        C(store_too_large), C(store_no_memory),
#undef C
    };
    struct snapshot s;
    struct rusage ru;
    snapshot(srv, &s);
    getrusage(RUSAGE_SELF, &ru);

    stat_u(o, "pid", (uint64_t)getpid());
    stat_u(o, "uptime", (rkv_now_ns() - srv->start_ns) / 1000000000ull);
    stat_u(o, "time", (uint64_t)time(NULL));
    stat_s(o, "version", RKV_MC_VERSION_STRING);
    /* libevent: rkv has none */
    stat_u(o, "pointer_size", sizeof(void *) * 8);
    putf(o, "STAT rusage_user %ld.%06ld\r\n", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    putf(o, "STAT rusage_system %ld.%06ld\r\n", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    /* Connections: every client connection of every door (librkv's shm
     * and rdma ones too), never a listening socket; max_conns bounds them
     * all, and a connection over it is refused at once (memcached's
     * maxconns_fast) and counted in rejected_connections. */
    stat_u(o, "max_connections", srv->cfg.max_conns);
    stat_u(o, "curr_connections", curr_connections(srv));
    stat_u(o, "total_connections", s.conns_total);
    stat_u(o, "rejected_connections", s.conns_rejected);
    /* connection_structures, response_obj_*, read_buf_*, reserved_fds:
     * memcached's own memory pools, which rkv does not have */
    for (size_t i = 0; i < RKV_ARRAY_SIZE(door_a); i++)
        stat_u(o, door_a[i].name, s.door[door_a[i].word]);
    /* memcached 1.6.18 counts only `me` (debug) commands in cmd_meta;
     * the door answers `me` with ERROR, so it has served none */
    stat_u(o, "cmd_meta", 0);
    for (size_t i = 0; i < RKV_ARRAY_SIZE(door_b); i++)
        stat_u(o, door_b[i].name, s.door[door_b[i].word]);
    /* rkv_table_flush removes flushed items at once (a delayed flush at its
     * tick), so no read ever finds one: memcached counts such reads here */
    stat_u(o, "get_flushed", 0);
    for (size_t i = 0; i < RKV_ARRAY_SIZE(door_c); i++)
        stat_u(o, door_c[i].name, s.door[door_c[i].word]);
    /* the door has no SASL or ascii auth: memcached without it counts 0 */
    stat_u(o, "auth_cmds", 0);
    stat_u(o, "auth_errors", 0);
    /* idle_kicks: memcached prints it only with an idle_timeout; rkv has none */
    stat_u(o, "bytes_read", s.door[WORD(bytes_read)]);
    stat_u(o, "bytes_written", s.door[WORD(bytes_written)]);
    stat_u(o, "limit_maxbytes", s.ts.heap_bytes);
    /* rkv never stops accepting: a connection over max_conns is accepted
     * and refused with an error (rejected_connections), so the listeners
     * are never disabled */
    stat_u(o, "accepting_conns", 1);
    stat_u(o, "listen_disabled_num", 0);
    stat_u(o, "time_in_listen_disabled_us", 0);
    stat_u(o, "threads", srv->nworkers);
    /* a pass answers all of a connection's input: no -R limit to yield at */
    stat_u(o, "conn_yields", 0);
    /* the index: about 2^hash_power_level buckets of one cache line now;
     * it grows a few buckets at a time under the index lock, never in a
     * background expansion */
    stat_u(o, "hash_power_level", log2u(s.ts.buckets));
    stat_u(o, "hash_bytes", s.ts.buckets * sizeof(struct rkv_bucket));
    stat_u(o, "hash_is_expanding", 0);
    if (srv->cfg.evict != RKV_EVICT_NONE) { /* memcached: with slab_reassign */
        /* a page moved to another class has its live items evicted, none
         * rescued, and rkv has no chunked items */
        stat_u(o, "slab_reassign_rescues", 0);
        stat_u(o, "slab_reassign_chunk_rescues", 0);
        stat_u(o, "slabs_moved", s.ts.slab_reassigns);
    }
    /* lru_crawler_*, lru_maintainer_juggles, malloc_fails, log_*: memcached
     * machinery rkv does not have */
    stat_u(o, "bytes", s.ts.bytes_used);
    stat_u(o, "curr_items", s.ts.items);
    /* total_items: every item stored by either door, as memcached counts
     * the items it links; but a touch, which memcached does in place, is a
     * store of a new item in rkv */
    stat_u(o, "total_items", since(s.ts.puts, s.door[WORD(touch_stores)]));
    /* expired_unfetched, evicted_unfetched: whether an item was ever read
     * is unknown to the server (librkv reads one-sidedly) */
    stat_u(o, "evictions", s.ts.evictions);
    /* expired items whose memory went back to their class for reuse (by a
     * write or a delete that met them, or the tick's sweep) */
    stat_u(o, "reclaimed", s.ts.expirations);

    /* then everything rkv counts, with an rkv_ prefix, never reset */
    char text[8192];
    size_t n = rkv_server_stats_text(srv, text, sizeof text);
    for (char *p = text, *e; p < text + n && (e = memchr(p, '\n', (size_t)(text + n - p))); p = e + 1)
        putf(o, "STAT rkv_%.*s\r\n", (int)(e - p), p);
}

/* ------------------------------------------------------------ settings */

/* The host of "tcp://HOST:PORT" (brackets kept off an IPv6 one). */
static void uri_host(const char *uri, char *host, size_t cap)
{
    const char *h = strstr(uri, "://");
    h = h != NULL ? h + 3 : uri;
    const char *end = strrchr(h, ':');
    if (end == NULL)
        end = h + strlen(h);
    if (*h == '[' && end > h && end[-1] == ']') {
        h++;
        end--;
    }
    snprintf(host, cap, "%.*s", (int)(end - h), h);
}

/* Where a socket is bound or connected, as memcached prints it:
 * tcp:1.2.3.4:5 or tcp6:[::1]:5. */
static void sock_text(int fd, bool peer, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "";
    int r = peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
                 : getsockname(fd, (struct sockaddr *)&ss, &len);
    if (r == 0 && ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(buf, cap, "tcp:%s:%u", host, ntohs(a->sin_port));
    } else if (r == 0 && ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(buf, cap, "tcp6:[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        snprintf(buf, cap, "<AF %d>", r == 0 ? ss.ss_family : -1);
    }
}

static unsigned sock_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)(const void *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)(const void *)&ss)->sin6_port);
    return 0;
}

static const char *evict_name(int evict)
{
    return evict == RKV_EVICT_LRU      ? "lru"
           : evict == RKV_EVICT_RANDOM ? "random"
           : evict == RKV_EVICT_S3FIFO ? "s3fifo"
                                       : "none";
}

static void stats_settings(struct rkv_server *srv, struct rkv_wconn *wc, struct out *o)
{
    const struct rkv_server_config *cfg = &srv->cfg;
    const struct rkv_region_header *g = rkv_table_header(srv->table);
    struct rkv_table_stats ts;
    char host[256];
    rkv_table_get_stats(srv->table, &ts);
    uri_host(wc->ep->uri, host, sizeof host);
    bool moves = cfg->evict != RKV_EVICT_NONE;

    stat_u(o, "maxbytes", g->heap_size);
    stat_u(o, "maxconns", cfg->max_conns);
    stat_u(o, "tcpport", sock_port(wc->ops->event_fd(wc->conn))); /* this connection's door */
    stat_u(o, "udpport", 0); /* no UDP: memcached's default, 0 */
    stat_s(o, "inter", host[0] ? host : "NULL");
    /* verbosity: the door's `verbosity` is answered and ignored; oldest:
     * rkv keeps no flush time (a flush removes the items) */
    stat_s(o, "evictions", cfg->evict == RKV_EVICT_NONE ? "off" : "on");
    stat_s(o, "domain_socket", "NULL"); /* no unix socket door */
    /* umask: of a unix socket, which rkv has not */
    stat_s(o, "shutdown_command", "no");
    /* the server lays out its table with the default factor */
    putf(o, "STAT growth_factor %.2f\r\n", RKV_TABLE_GROWTH);
    /* the smallest chunk's room for key and value (memcached: key, value
     * and flags; rkv keeps the flags in the item header, when not 0) */
    stat_u(o, "chunk_size", g->class_count ? g->class_size[0] - RKV_ITEM_PREFIX_SIZE : 0);
    stat_u(o, "num_threads", srv->nworkers);
    stat_s(o, "stat_key_prefix", ":");
    stat_s(o, "detail_enabled", atomic_load(&rkv_mc_detail_on) ? "yes" : "no");
    /* reqs_per_event: no such limit (conn_yields) */
    stat_s(o, "cas_enabled", "yes");
    stat_u(o, "tcp_backlog", RKV_TCP_BACKLOG);
    stat_s(o, "binding_protocol", "ascii");
    stat_s(o, "auth_enabled_sasl", "no");
    stat_s(o, "auth_enabled_ascii", "no");
    /* the largest item: a slab page less the room for a second header and key */
    stat_u(o, "item_size_max", g->slab_page_size - rkv_table_page_pair_room(g->max_key_len));
    stat_s(o, "maxconns_fast", "yes");
    stat_u(o, "hashpower_init", log2u(ts.buckets));
    /* with eviction on, pages move between classes: on demand, and (LRU)
     * once a tick toward the class whose items are youngest */
    stat_s(o, "slab_reassign", moves ? "yes" : "no");
    stat_u(o, "slab_automove", rkv_evict_uses_access(cfg->evict) ? 1 : 0);
    stat_u(o, "slab_chunk_max", g->class_count ? g->class_size[g->class_count - 1] : 0);
    stat_s(o, "lru_crawler", "no");   /* rkv's tick sweeps expired items instead */
    stat_u(o, "tail_repair_time", 0); /* no refcounts to repair: memcached's "off" */
    stat_s(o, "flush_enabled", "yes");
    stat_s(o, "dump_enabled", "no"); /* stats cachedump is not served */
    stat_s(o, "hash_algorithm", "xxh3");
    stat_s(o, "lru_maintainer_thread", "no");
    stat_s(o, "lru_segmented", "no");
    stat_s(o, "temp_lru", "no");
    stat_u(o, "idle_timeout", 0);   /* idle door connections are never closed */
    stat_s(o, "track_sizes", "no"); /* stats sizes is never enabled */
    stat_s(o, "inline_ascii_response", "no");
    stat_s(o, "ssl_enabled", "no");
    /* rkv's own settings */
    stat_u(o, "rkv_max_key_len", g->max_key_len);
    stat_u(o, "rkv_max_value_len", g->max_value_len);
    stat_u(o, "rkv_slab_page_size", g->slab_page_size);
    stat_u(o, "rkv_grace_ms", cfg->grace_ms);
    stat_u(o, "rkv_default_ttl", cfg->default_ttl);
    stat_s(o, "rkv_evict", evict_name(cfg->evict));
    stat_u(o, "rkv_max_unauth_conns", cfg->max_unauth_conns);
}

/* ------------------------------------------------------------ classes */

static void stats_items(struct rkv_server *srv, struct out *o)
{
    const struct rkv_region_header *g = rkv_table_header(srv->table);
    for (unsigned c = 0; c < RKV_MIN(g->class_count, RKV_MAX_CLASSES); c++) {
        struct rkv_table_class_stats cs;
        class_stats(srv, c, &cs);
        if (cs.slab.used == 0) /* memcached lists the classes that hold items */
            continue;
        /* number: items allocated and not freed, i.e. the class's live
         * items (expired ones until reclaimed, as in memcached) */
        putf(o, "STAT items:%u:number %llu\r\n", c + 1, (unsigned long long)cs.slab.used);
        /* age, mem_requested, outofmemory, tailrepairs, reclaimed,
         * *_unfetched, crawler_*, lrutail_reflocked, LRU segments: see
         * docs/design.md (rkv keeps no LRU tail per class to age) */
        putf(o, "STAT items:%u:evicted %llu\r\n", c + 1, (unsigned long long)cs.evicted);
        putf(o, "STAT items:%u:evicted_nonzero %llu\r\n", c + 1, (unsigned long long)cs.evicted_ttl);
    }
}

static void stats_slabs(struct rkv_server *srv, struct out *o)
{
    static const struct {
        const char *name;
        enum rkv_mc_class_counter what;
    } door[] = {
        { "get_hits", RKV_MC_CLS_GET_HITS },     { "cmd_set", RKV_MC_CLS_CMD_SET },
        { "cas_hits", RKV_MC_CLS_CAS_HITS },     { "cas_badval", RKV_MC_CLS_CAS_BADVAL },
        { "touch_hits", RKV_MC_CLS_TOUCH_HITS },
    };
    const struct rkv_region_header *g = rkv_table_header(srv->table);
    struct snapshot s;
    unsigned active = 0;
    uint64_t malloced = 0;
    snapshot(srv, &s);
    for (unsigned c = 0; c < RKV_MIN(g->class_count, RKV_MAX_CLASSES); c++) {
        struct rkv_table_class_stats cs;
        class_stats(srv, c, &cs);
        if (cs.slab.pages == 0) /* memcached lists the classes that hold pages */
            continue;
        uint64_t total = cs.slab.pages * cs.slab.per_page;
        unsigned id = c + 1;
        putf(o, "STAT %u:chunk_size %u\r\n", id, cs.slab.size);
        putf(o, "STAT %u:chunks_per_page %u\r\n", id, cs.slab.per_page);
        putf(o, "STAT %u:total_pages %llu\r\n", id, (unsigned long long)cs.slab.pages);
        putf(o, "STAT %u:total_chunks %llu\r\n", id, (unsigned long long)total);
        putf(o, "STAT %u:used_chunks %llu\r\n", id, (unsigned long long)cs.slab.used);
        /* freed (in the grace period or past it) and never used */
        putf(o, "STAT %u:free_chunks %llu\r\n", id,
             (unsigned long long)(cs.slab.limbo + cs.slab.ready + cs.slab.fresh));
        /* never used, at the end of the class's newest page */
        putf(o, "STAT %u:free_chunks_end %llu\r\n", id, (unsigned long long)cs.slab.fresh);
        /* the door's commands at this class (delete_hits, incr_hits and
         * decr_hits are left out: those table calls report no item size) */
        for (size_t i = 0; i < RKV_ARRAY_SIZE(door); i++)
            putf(o, "STAT %u:%s %llu\r\n", id, door[i].name,
                 (unsigned long long)s.door[CLS_WORD(c, door[i].what)]);
        active++;
        malloced += cs.slab.pages * g->slab_page_size;
    }
    stat_u(o, "active_slabs", active);
    stat_u(o, "total_malloced", malloced); /* bytes of the pages classes hold */
}

/* ------------------------------------------------------------ conns */

/* memcached lists every connection; a worker owns its connections' state
 * alone, so the door lists what the asking worker may read: the door's
 * listening sockets and the asking connection. */
static void stats_conns(struct rkv_server *srv, struct rkv_wconn *wc, struct out *o)
{
    char addr[128], local[128];
    for (unsigned i = 0; i < srv->nlisteners; i++) {
        struct rkv_listen_ep *ep = &srv->listeners[i];
        if (ep->wire != &rkv_wire_memcache || ep->l == NULL)
            continue;
        int fd = ep->ops->listener_fd(ep->l);
        sock_text(fd, false, addr, sizeof addr);
        putf(o, "STAT %d:addr %s\r\n", fd, addr);
        putf(o, "STAT %d:state conn_listening\r\n", fd);
    }
    int fd = wc->ops->event_fd(wc->conn);
    sock_text(fd, true, addr, sizeof addr);
    sock_text(fd, false, local, sizeof local);
    putf(o, "STAT %d:addr %s\r\n", fd, addr);
    putf(o, "STAT %d:listen_addr %s\r\n", fd, local);
    putf(o, "STAT %d:state conn_parse_cmd\r\n", fd); /* it is running this command */
    putf(o, "STAT %d:secs_since_last_cmd 0\r\n", fd);
}

/* ------------------------------------------------------------ dispatch */

static void stats_detail(const char *how, struct out *o)
{
    if (strcmp(how, "on") == 0 || strcmp(how, "off") == 0) {
        atomic_store(&rkv_mc_detail_on, how[1] == 'n');
        puts_(o, "OK\r\n");
    } else if (strcmp(how, "dump") == 0) {
        pthread_mutex_lock(&detail_lock);
        for (unsigned b = 0; b < DETAIL_BUCKETS; b++)
            for (const struct prefix *p = detail_table[b]; p != NULL; p = p->next)
                putf(o, "PREFIX %.*s get %llu hit %llu set %llu del %llu\r\n", (int)p->len, p->name,
                     (unsigned long long)p->get, (unsigned long long)p->hit,
                     (unsigned long long)p->set, (unsigned long long)p->del);
        pthread_mutex_unlock(&detail_lock);
        puts_(o, "END\r\n");
    } else {
        puts_(o, "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    }
}

#define MAX_TOKENS 8

void rkv_mc_stats(struct rkv_server *srv, struct rkv_wconn *wc, const char *arg, size_t arg_len)
{
    struct out o = { .c = wc->conn, .mark = rkv_tcp_out_mark(wc->conn) };
    char line[256];
    char *tok[MAX_TOKENS];
    unsigned n = 0;
    snprintf(line, sizeof line, "%.*s", (int)RKV_MIN(arg_len, sizeof line - 1), arg);
    for (char *save = NULL, *t = strtok_r(line, " ", &save); t != NULL && n < MAX_TOKENS;
         t = strtok_r(NULL, " ", &save))
        tok[n++] = t;

    /* memcached's process_stat and get_stats, group by group */
    if (n == 0) {
        stats_general(srv, &o);
    } else if (strcmp(tok[0], "reset") == 0) {
        stats_reset(srv);
        puts_(&o, "RESET\r\n");
        return;
    } else if (strcmp(tok[0], "detail") == 0) {
        stats_detail(n >= 2 ? tok[1] : "", &o);
        return;
    } else if (strcmp(tok[0], "settings") == 0) {
        stats_settings(srv, wc, &o);
    } else if (strcmp(tok[0], "cachedump") == 0) {
        /* memcached's reply with dumping disabled (dump_enabled no) */
        puts_(&o, "CLIENT_ERROR stats cachedump not allowed\r\n");
        return;
    } else if (strcmp(tok[0], "conns") == 0) {
        stats_conns(srv, wc, &o);
    } else if (strcmp(tok[0], "extstore") == 0) {
        /* Debian's memcached is built with extstore and, with none
         * configured, answers an empty group: so does rkv, which has none */
    } else if (strcmp(tok[0], "items") == 0) {
        stats_items(srv, &o);
    } else if (strcmp(tok[0], "slabs") == 0) {
        stats_slabs(srv, &o);
    } else if (strcmp(tok[0], "sizes") == 0 || strcmp(tok[0], "sizes_disable") == 0) {
        stat_s(&o, "sizes_status", "disabled");
    } else if (strcmp(tok[0], "sizes_enable") == 0) {
        /* memcached's error form; rkv keeps no size histogram. (memcached
         * ends neither sizes_enable nor sizes_disable with END, which
         * leaves a client reading to END waiting: rkv does) */
        stat_s(&o, "sizes_status", "error");
        stat_s(&o, "sizes_error", "not_supported");
    } else {
        puts_(&o, "ERROR\r\n");
        return;
    }
    puts_(&o, "END\r\n");
    if (o.full) {
        rkv_tcp_out_rewind(wc->conn, o.mark);
        o.full = false;
        puts_(&o, "SERVER_ERROR out of memory writing stats\r\n");
    }
}
