/* memcache_exec.c — serve memcached text protocol commands from the table.
 *
 * The memcached wire protocol (wire_memcache.c) calls rkv_memcache_serve()
 * for a pass over a tcp connection, as the rkv protocol (wire_rkv.c) calls
 * rkv_handle_request() for an rkv message. One pass takes the connection's
 * unconsumed input, parses commands from it (memcache_proto.c) and runs
 * each against the same table API request.c uses, appending answers to the
 * connection's output; the transport then writes the whole batch with one
 * send(), so pipelined commands are answered in order. An answer larger
 * than the output's bound streams: a retrieval stops before a key when the
 * output is backed up and the next pass, once the client has read, goes on
 * from that key (do_retrieval; the worker is never blocked on a client).
 *
 * One table, two doors: a key is the same bytes for both, client flags are
 * the item's user_flags, the CAS unique is its version, exptime follows
 * memcached (0 = none given: the server's default_ttl, itself "never" by
 * default; up to 30 days relative; beyond, a unix time; negative or past:
 * expired at once). Reads copy an item out of the region into the output
 * buffer and verify the copy (checksum, key, obsolete, expiry) the way a
 * one-sided reader does, retrying when a writer raced it. Read-modify-write
 * commands (append, prepend, touch, gat, incr, decr, ma) are a CAS loop on
 * the item version under the table's write path, so they are atomic
 * against every writer; a touched item gets a new version (rkv writes out
 * of place); a touch to a past exptime answers the item as it was and
 * deletes that version only.
 *
 * Answers are memcached 1.6.18's, byte for byte (tests/mc_diff.c compares
 * them with a real one), down to what follows from its way of keeping
 * items: an incr/decr result that fits the old value is written over it
 * and space-padded, unless an answer memcached has not written out yet
 * holds the item; t flags and exptimes follow the request's flag order.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "lookup.h"
#include "memcache_exec.h"
#include "memcache_proto.h"
#include "memcache_stats.h"
#include "tcp_server.h"
#include "util.h"

#define READ_TRIES 16 /* copies of an item that raced a writer before giving up */
#define RMW_TRIES \
    1024                 /* CAS-loop rounds of append/prepend/touch (each lost
                            * round is another writer's success) */
#define LINE_MAX_OUT 512 /* longest answer line but the data block */

/* Items whose mg answers memcached would not have sent yet: it writes its
 * answers out after a get/gets/gat/gats (at its END), at an mn, and when it
 * has run out of input, and until then an mg hit's answer holds its item,
 * which an incr/decr cannot update in place. Beyond HELD_MAX, every item
 * counts as held. */
#define HELD_MAX 64
struct held {
    uint64_t version[HELD_MAX];
    unsigned n;
    bool overflow;
};

struct mc {
    struct rkv_server *srv;
    struct rkv_table *t;
    struct rkv_sconn *c;
    struct rkv_wconn *wc;
    struct rkv_mc_counters *st; /* this worker's (memcache_stats.h) */
    const struct rkv_region_header *g;
    bool full;          /* an answer did not fit the output buffer */
    const char *resume; /* a retrieval stopped before this key (output full) */
    struct held held;
    size_t flushed; /* output up to here memcached would have sent already */
};

/* Where memcached writes its answers out: those before are sent, their
 * items released. */
static void flush_point(struct mc *m)
{
    m->flushed = rkv_tcp_out_mark(m->c);
    m->held.n = 0;
    m->held.overflow = false;
}

static void hold(struct mc *m, uint64_t version)
{
    if (m->held.n < HELD_MAX)
        m->held.version[m->held.n++] = version;
    else
        m->held.overflow = true;
}

static bool is_held(const struct mc *m, uint64_t version)
{
    for (unsigned i = 0; i < m->held.n; i++)
        if (m->held.version[i] == version)
            return true;
    return m->held.overflow;
}

/* A verified copy of an item, inside the (uncommitted) output buffer. */
struct found {
    const struct rkv_item *copy;
    const uint8_t *value;
    uint32_t value_len;
    uint32_t now; /* the server clock it was verified at */
};

/* ------------------------------------------------------------ output */

static void out(struct mc *m, const void *p, size_t n)
{
    char *dst = m->full ? NULL : rkv_tcp_out_reserve(m->c, n);
    if (dst == NULL) {
        m->full = true;
        return;
    }
    memcpy(dst, p, n);
    rkv_tcp_out_commit(m->c, n);
}

static void outs(struct mc *m, const char *s)
{
    out(m, s, strlen(s));
}

static void outf(struct mc *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(struct mc *m, const char *fmt, ...)
{
    char line[LINE_MAX_OUT + RKV_MC_MAX_KEY * 2];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        out(m, line, RKV_MIN((size_t)n, sizeof line - 1));
}

/* ------------------------------------------------------------ items */

static uint32_t clock_now(struct mc *m)
{
    return rkv_table_clock(m->t);
}

/* memcached exptime → rkv ttl; false when the item is expired on arrival. */
static bool ttl_of(int64_t exptime, uint32_t *ttl)
{
    *ttl = 0;
    if (exptime == 0)
        return true;
    if (exptime < 0)
        return false;
    if (exptime <= RKV_MC_REL_EXPTIME) {
        *ttl = (uint32_t)exptime;
        return true;
    }
    int64_t left = exptime - (int64_t)time(NULL);
    if (left <= 0)
        return false;
    *ttl = (uint32_t)left;
    return true;
}

/* The ttl that keeps an item's expiry as it is. */
static uint32_t ttl_keep(struct mc *m, uint32_t expire_at)
{
    uint32_t now = clock_now(m);
    if (expire_at == 0)
        return RKV_TTL_NEVER;
    return expire_at > now ? expire_at - now : 1;
}

/* A remaining TTL as meta's t flag shows it: -1 for none. An item a touch
 * expired shows what memcached shows for it: its expiry (1 on memcached's
 * clock) less that clock (the uptime plus 62 s), as an unsigned number. */
static void put_ttl(struct mc *m, bool expired, uint32_t expire_at)
{
    uint32_t now = clock_now(m);
    if (expired) {
        uint64_t uptime = (rkv_now_ns() - m->srv->start_ns) / 1000000000ull;
        outf(m, " t%u", (uint32_t)(1 - (int64_t)(uptime + 62)));
    } else if (expire_at == 0) {
        outs(m, " t-1");
    } else {
        outf(m, " t%u", expire_at > now ? expire_at - now : 0);
    }
}

/* The meta state of a new item (layout.h): no flags, accessed now. */
static uint64_t fresh_state(struct mc *m)
{
    return rkv_item_state_live(0, clock_now(m));
}

/* What a read does to an item's meta state once answered (memcached's
 * do_item_bump without a segmented LRU): FETCHED, and the access time when
 * it is more than RKV_ITEM_ACCESS_INTERVAL old. False: nothing changes. */
static bool bump_bits(uint32_t now, uint64_t state, uint64_t *clear, uint64_t *set)
{
    *clear = *set = 0;
    if (!(state & RKV_ITEM_FETCHED))
        *set |= RKV_ITEM_FETCHED;
    if ((uint64_t)rkv_item_state_access(state) + RKV_ITEM_ACCESS_INTERVAL < now) {
        *clear |= RKV_ITEM_ACCESS_MASK;
        *set |= rkv_item_state_live(0, now);
    }
    return *set != 0;
}

/* Bump the item of `version` a read found (f: its copy, state and clock):
 * one write per item for FETCHED, then one a minute at most. */
static void bump(struct mc *m, const uint8_t *key, uint32_t klen, uint64_t version,
                 const struct found *f)
{
    uint64_t clear, set;
    if (bump_bits(f->now, rkv_item_state(f->copy), &clear, &set))
        rkv_table_set_state(m->t, key, klen, version, clear, set, NULL);
}

/* Copy key's item into `pre` bytes past the output end and verify it.
 * 1: found, 0: miss, -1: the output buffer has no room, -2: kept racing. */
static int find_copy(struct mc *m, const uint8_t *key, uint32_t klen, size_t pre, struct found *f)
{
    for (unsigned i = 0; i < READ_TRIES; i++) {
        bool expired; /* a read counts as an access, for LRU */
        const struct rkv_item *it = rkv_table_read(m->t, key, klen, &expired);
        if (it == NULL) {
            if (expired) /* memcached's get_expired: any read that met one */
                rkv_stat_bump(&m->st->get_expired, 1);
            return 0;
        }
        size_t size = rkv_item_bytes(it);
        if (size > m->g->slab_page_size)
            continue; /* torn header: read again */
        /* the copy keeps the item's parity (layout.h): 8-aligned plus up to 4 */
        char *base = rkv_tcp_out_reserve(m->c, pre + size + 8 + 4 + 2);
        if (base == NULL)
            return -1;
        struct rkv_item *copy = (void *)(RKV_ALIGN_UP((uintptr_t)(base + pre), 8) +
                                         rkv_item_copy_skew((uintptr_t)it));
        memcpy(copy, it, size);
        uint32_t now = clock_now(m);
        enum rkv_verify v = rkv_item_verify(copy, size, key, klen, m->g->hash_seed, now);
        if (v == RKV_VERIFY_EXPIRED) {
            rkv_stat_bump(&m->st->get_expired, 1);
            return 0;
        }
        /* superseded since the find, but whole (checksum, key): it was the
         * live item when found under the lock, so it answers; a torn copy
         * (the memory reused after grace_ms) is read again */
        if (v != RKV_VERIFY_OK && v != RKV_VERIFY_OBSOLETE)
            continue;
        f->copy = copy;
        f->value = rkv_item_value(copy);
        f->value_len = rkv_item_value_len(copy);
        f->now = now;
        return 1;
    }
    return -2;
}

struct compose {
    const uint8_t *a, *b;
    uint32_t alen, blen;
};

static rkv_status compose_pull(void *ctx, void *dst, uint32_t len)
{
    struct compose *p = ctx;
    if (len != p->alen + p->blen)
        return RKV_INTERNAL;
    if (p->alen) /* a side may be empty, and then NULL (touch, an empty value) */
        memcpy(dst, p->a, p->alen);
    if (p->blen)
        memcpy((uint8_t *)dst + p->alen, p->b, p->blen);
    return RKV_OK;
}

/* Read-modify-write under a CAS on the version: the new value is the old one
 * with `add` appended (or prepended), or unchanged with a new ttl (touch),
 * or the item goes (expire: a touch to a past exptime, which memcached
 * answers with the item as it was; *version is then the old one). cas: an
 * append's condition (0: none). Leaves a verified copy of the old item in
 * *f (output buffer, uncommitted). */
enum rmw { RMW_APPEND, RMW_PREPEND, RMW_TOUCH, RMW_EXPIRE };
static rkv_status rmw(struct mc *m, enum rmw how, const uint8_t *key, uint32_t klen,
                      const uint8_t *add, uint32_t add_len, uint32_t ttl, uint64_t cas,
                      struct found *f, uint64_t *version)
{
    for (unsigned i = 0; i < RMW_TRIES; i++) {
        int r = find_copy(m, key, klen, LINE_MAX_OUT, f);
        if (r == 0)
            return RKV_NOT_FOUND;
        if (r == -1)
            return RKV_OUT_OF_MEMORY;
        if (r == -2)
            return RKV_RETRY_EXHAUSTED;
        if (cas != 0 && rkv_item_version(f->copy) != cas)
            return RKV_CAS_MISMATCH;
        struct compose cp = { .a = f->value, .alen = f->value_len };
        if (how == RMW_APPEND) {
            cp.b = add;
            cp.blen = add_len;
        } else if (how == RMW_PREPEND) {
            cp = (struct compose){ .a = add, .alen = add_len, .b = f->value, .blen = f->value_len };
        }
        /* the joined item as memcached sizes it: the old item's flags */
        if ((uint64_t)cp.alen + cp.blen >
            rkv_mc_max_value(m->g->max_value_len, klen, rkv_item_user_flags(f->copy)))
            return RKV_TOO_LARGE;
        struct rkv_value_src src = { .pull = compose_pull, .ctx = &cp, .len = cp.alen + cp.blen };
        rkv_status st;
        if (how == RMW_EXPIRE) {
            st = rkv_table_delete_version(m->t, key, klen, rkv_item_version(f->copy));
            *version = rkv_item_version(f->copy);
        } else {
            /* a touch keeps the item's meta state (memcached keeps the
             * item), as it is when replaced; an append or prepend makes a
             * new one */
            bool touch = how == RMW_TOUCH;
            st = rkv_table_put_keep(m->t, key, klen, &src, RKV_CAS, rkv_item_version(f->copy),
                                    touch ? ttl : ttl_keep(m, rkv_item_expire_at(f->copy)),
                                    rkv_item_user_flags(f->copy), touch ? RKV_ITEM_LIVE_MASK : 0,
                                    touch ? rkv_item_state(f->copy) : fresh_state(m), version);
        }
        if (st == RKV_OK && how == RMW_TOUCH)
            rkv_stat_bump(&m->st->touch_stores, 1);
        if (st != RKV_CAS_MISMATCH && st != RKV_NOT_STORED && st != RKV_NOT_FOUND)
            return st;
        /* another writer got in between (or it went): read again */
    }
    return RKV_SERVER_BUSY;
}

static const char *server_error(rkv_status st)
{
    switch (st) {
    case RKV_TOO_LARGE: return "SERVER_ERROR object too large for cache\r\n";
    case RKV_OUT_OF_MEMORY: return "SERVER_ERROR out of memory storing object\r\n";
    case RKV_RETRY_EXHAUSTED:
    case RKV_SERVER_BUSY:
        return "SERVER_ERROR the item kept changing under concurrent writes; retry\r\n";
    default: return "SERVER_ERROR internal error\r\n";
    }
}

/* ------------------------------------------------------------ retrieval */

/* " <v>" in decimal at p (room for 21 bytes); returns its length. */
static size_t put_dec(char *p, uint64_t v)
{
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    p[0] = ' ';
    for (size_t i = 0; i < n; i++)
        p[1 + i] = digits[n - 1 - i];
    return n + 1;
}

/* A read's counters as memcached 1.6.18 keeps them: a touching read (gat,
 * gats, an mg T hit) counts as a touch only, any other as a get. */
static void count_read(struct mc *m, bool touch, bool hit)
{
    if (touch) {
        rkv_stat_bump(&m->st->cmd_touch, 1);
        rkv_stat_bump(hit ? &m->st->touch_hits : &m->st->touch_misses, 1);
    } else {
        rkv_stat_bump(&m->st->cmd_get, 1);
        rkv_stat_bump(hit ? &m->st->get_hits : &m->st->get_misses, 1);
    }
}

/* One key of get/gets/gat/gats: answers VALUE ... or nothing. */
static void get_one(struct mc *m, const struct rkv_mc_req *r, const uint8_t *key, uint32_t klen)
{
    struct found f;
    uint64_t version = 0;
    int res;
    bool touch = r->cmd == RKV_MC_GAT || r->cmd == RKV_MC_GATS;

    if (touch) {
        uint32_t ttl;
        /* expired at once: answered as it was, gone for every later read */
        enum rmw how = ttl_of(r->exptime, &ttl) ? RMW_TOUCH : RMW_EXPIRE;
        rkv_status st = rmw(m, how, key, klen, NULL, 0, ttl, 0, &f, &version);
        res = st == RKV_OK ? 1 : st == RKV_NOT_FOUND ? 0 : st == RKV_OUT_OF_MEMORY ? -1 : -2;
    } else {
        res = find_copy(m, key, klen, LINE_MAX_OUT, &f);
        version = res == 1 ? rkv_item_version(f.copy) : 0;
    }
    count_read(m, touch, res == 1);
    rkv_mc_detail(res == 1 ? RKV_MC_DETAIL_HIT : RKV_MC_DETAIL_GET, key, klen);
    if (res == 0)
        return;
    if (res < 0) {
        m->full = m->full || res == -1;
        return;
    }
    bump(m, key, klen, version, &f);
    rkv_mc_count_class(m->st, m->g, touch ? RKV_MC_CLS_TOUCH_HITS : RKV_MC_CLS_GET_HITS, klen,
                       f.value_len);
    char *base = rkv_tcp_out_reserve(m->c, 0); /* = where find_copy's area starts */
    /* "VALUE <key> <flags> <bytes>[ <cas>]\r\n" without printf: every GET hit writes it */
    size_t n = sizeof "VALUE " - 1;
    memcpy(base, "VALUE ", n);
    memcpy(base + n, key, klen);
    n += klen;
    n += put_dec(base + n, rkv_item_user_flags(f.copy));
    n += put_dec(base + n, f.value_len);
    if (r->cmd == RKV_MC_GETS || r->cmd == RKV_MC_GATS)
        n += put_dec(base + n, version);
    memcpy(base + n, "\r\n", 2);
    n += 2;
    memmove(base + n, f.value, f.value_len);
    memcpy(base + n + f.value_len, "\r\n", 2);
    rkv_tcp_out_commit(m->c, (size_t)n + f.value_len + 2);
}

/* Whether a key in [pos, end) is over 250 bytes. */
static bool key_too_long_in(const char *pos, const char *end)
{
    const uint8_t *key;
    uint32_t klen;
    while (rkv_mc_next_key(&pos, end, &key, &klen))
        if (klen > RKV_MC_MAX_KEY)
            return true;
    return false;
}

/* The keys in order, as memcached serves them: a key over 250 bytes stops
 * the command, and every answer memcached has not sent yet (this one's,
 * those since its last write-out) is dropped for CLIENT_ERROR (the keys
 * before it were read, or touched, and counted). An answer of any size
 * streams: when the output backs up before a key, the command stops there
 * (m->resume) and goes on from that key once the client has read (each
 * value is copied whole, the output never holds more than its bound).
 * Unless a key over 250 bytes follows: then nothing of this command's
 * answer would be sent, so the keys are run without keeping their answers. */
static void do_retrieval(struct mc *m, const struct rkv_mc_req *r)
{
    const char *pos = r->keys, *end = r->keys + r->keys_len;
    const uint8_t *key;
    uint32_t klen;
    size_t mark = rkv_tcp_out_mark(m->c);
    bool too_long = false, discard = false;
    for (const char *at = pos; !m->full && rkv_mc_next_key(&pos, end, &key, &klen); at = pos) {
        if (klen > RKV_MC_MAX_KEY) {
            too_long = true;
            break;
        }
        if (!discard && rkv_tcp_out_backed_up(m->c)) {
            if (!key_too_long_in(at, end)) {
                m->resume = at;
                return;
            }
            discard = true;
        }
        get_one(m, r, key, klen);
        if (discard)
            rkv_tcp_out_rewind(m->c, mark);
    }
    if (m->full || too_long) {
        rkv_tcp_out_rewind(m->c, r->parted ? mark : RKV_MIN(mark, m->flushed));
        m->held.n = 0;
        m->held.overflow = false;
        m->full = false;
        outs(m, too_long ? "CLIENT_ERROR bad command line format\r\n"
                         : "SERVER_ERROR out of memory writing get response\r\n");
        if (r->parted) /* values of the line's earlier parts went out already */
            rkv_tcp_close_after_output(m->c, too_long ? "a key over 250 bytes in a long get line"
                                                      : "get response too large");
        return;
    }
    if (!r->more) {
        outs(m, "END\r\n");
        flush_point(m);
    }
}

/* ------------------------------------------------------------ storage */

static const char *store_answer(enum rkv_mc_cmd cmd, rkv_status st)
{
    switch (st) {
    case RKV_OK: return "STORED\r\n";
    case RKV_EXISTS: return "NOT_STORED\r\n";
    case RKV_NOT_STORED: return cmd == RKV_MC_CAS ? "NOT_FOUND\r\n" : "NOT_STORED\r\n";
    case RKV_NOT_FOUND: return cmd == RKV_MC_CAS ? "NOT_FOUND\r\n" : "NOT_STORED\r\n";
    case RKV_CAS_MISMATCH: return "EXISTS\r\n";
    default: return server_error(st);
    }
}

/* The store itself, shared by the classic commands and ms. how: the
 * command (set/add/replace/append/prepend/cas); cas: its condition (cas,
 * and ms C: 0 is a condition no item meets; append takes 0 as none). */
static rkv_status store(struct mc *m, enum rkv_mc_cmd how, const struct rkv_mc_req *r, uint64_t cas,
                        uint64_t *version)
{
    uint32_t ttl;
    bool live = ttl_of(r->exptime, &ttl);
    rkv_status st;
    if (how == RKV_MC_APPEND || how == RKV_MC_PREPEND) {
        struct found f;
        size_t mark = rkv_tcp_out_mark(m->c);
        st = rmw(m, how == RKV_MC_APPEND ? RMW_APPEND : RMW_PREPEND, r->key, r->key_len, r->data,
                 r->bytes, 0, cas, &f, version);
        rkv_tcp_out_rewind(m->c, mark); /* the old value's copy was scratch */
        /* memcached answers NOT_STORED when the joined value has no room
         * (too large, or out of memory), and keeps the old item */
        if (st == RKV_NOT_FOUND || st == RKV_TOO_LARGE || st == RKV_OUT_OF_MEMORY)
            return RKV_NOT_STORED;
        return st;
    }
    rkv_put_mode mode = how == RKV_MC_ADD       ? RKV_ADD
                        : how == RKV_MC_REPLACE ? RKV_REPLACE
                        : how == RKV_MC_CAS     ? RKV_CAS
                                                : RKV_SET;
    struct rkv_value_src src = { .data = r->data, .len = r->bytes };
    st = rkv_table_put(m->t, r->key, r->key_len, &src, mode, cas, ttl, r->flags, version);
    if (st == RKV_TOO_LARGE || st == RKV_OUT_OF_MEMORY)
        rkv_stat_bump(st == RKV_TOO_LARGE ? &m->st->store_too_large : &m->st->store_no_memory, 1);
    if (st == RKV_OK && !live)
        rkv_table_delete(m->t, r->key, r->key_len); /* stored already expired: gone at once */
    return st;
}

/* noreply silences every answer, errors too (memcached's out_string). */
static void do_storage(struct mc *m, const struct rkv_mc_req *r)
{
    uint64_t version;
    rkv_mc_detail(RKV_MC_DETAIL_SET, r->key, r->key_len);
    rkv_status st = store(m, r->cmd, r, r->cas, &version);
    rkv_stat_bump(&m->st->cmd_set, 1);
    rkv_mc_count_class(m->st, m->g, RKV_MC_CLS_CMD_SET, r->key_len, r->bytes);
    if (r->cmd == RKV_MC_CAS)
        rkv_stat_bump(st == RKV_OK             ? &m->st->cas_hits
                      : st == RKV_CAS_MISMATCH ? &m->st->cas_badval
                                               : &m->st->cas_misses,
                      1);
    if (r->cmd == RKV_MC_CAS && (st == RKV_OK || st == RKV_CAS_MISMATCH))
        rkv_mc_count_class(m->st, m->g, st == RKV_OK ? RKV_MC_CLS_CAS_HITS : RKV_MC_CLS_CAS_BADVAL,
                           r->key_len, r->bytes);
    if (!r->noreply)
        outs(m, store_answer(r->cmd, st));
}

/* ------------------------------------------------------------ the rest */

static void do_delete(struct mc *m, const struct rkv_mc_req *r)
{
    rkv_mc_detail(RKV_MC_DETAIL_DEL, r->key, r->key_len);
    rkv_status st = rkv_table_delete(m->t, r->key, r->key_len);
    rkv_stat_bump(st == RKV_OK ? &m->st->delete_hits : &m->st->delete_misses, 1);
    if (!r->noreply)
        outs(m, st == RKV_OK          ? "DELETED\r\n"
                : st == RKV_NOT_FOUND ? "NOT_FOUND\r\n"
                                      : server_error(st));
}

/* incr/decr as memcached's do_add_delta(): the value is read as strtoull
 * reads it (white space first and after, a sign; what is not a number, or
 * an item memcached would keep in chunks, is "non-numeric"), any 64-bit
 * delta wraps an incr and stops a decr at 0, and the result replaces the
 * value in place when it fits: its digits, then spaces up to the old
 * length (memcached never shortens the item there), unless an unsent read
 * answer holds the item (struct held); else it is a new value of just its
 * digits. One CAS-loop step on the item's version, so atomic
 * against every writer. cas: ma C (0: none). ttl/set_ttl: ma T, which
 * memcached applies only to an item updated in place. */
enum arith {
    ARITH_OK,
    ARITH_NOT_FOUND,
    ARITH_NON_NUMERIC,
    ARITH_CAS_MISMATCH,
    ARITH_EOM,
    ARITH_BUSY
};
struct arith_out {
    uint64_t value, version;
    uint32_t expire_at; /* the item's before */
    bool in_place;
};

#define MC_CHUNK_MAX   (512u << 10) /* memcached's slab_chunk_max: larger items are chunked */
#define MC_ITEM_HEADER (48u + 8u + 1u + 2u) /* its item header, CAS, the key's NUL, "\r\n" */

/* set_ttl: ma T's ttl for an item updated in place (expired: T to the past,
 * the item goes once updated). */
static enum arith door_arith(struct mc *m, const uint8_t *key, uint32_t klen, bool incr,
                             uint64_t delta, uint64_t cas, bool set_ttl, uint32_t ttl, bool expired,
                             struct arith_out *o)
{
    size_t mark = rkv_tcp_out_mark(m->c);
    enum arith res = ARITH_BUSY;
    for (unsigned i = 0; i < RMW_TRIES; i++) {
        struct found f;
        rkv_tcp_out_rewind(m->c, mark);
        int r = find_copy(m, key, klen, LINE_MAX_OUT, &f);
        if (r <= 0) {
            res = r == 0 ? ARITH_NOT_FOUND : r == -1 ? ARITH_EOM : ARITH_BUSY;
            break;
        }
        /* memcached's order: an empty or chunked value, the CAS, the number */
        uint64_t mc_total = MC_ITEM_HEADER + klen + (rkv_item_user_flags(f.copy) ? 4 : 0) +
                            (uint64_t)f.value_len;
        uint64_t v;
        if (f.value_len == 0 || mc_total > MC_CHUNK_MAX) {
            res = ARITH_NON_NUMERIC;
            break;
        }
        if (cas != 0 && rkv_item_version(f.copy) != cas) {
            res = ARITH_CAS_MISMATCH;
            break;
        }
        if (!rkv_parse_counter(f.value, f.value_len, &v)) {
            res = ARITH_NON_NUMERIC;
            break;
        }
        v = incr ? v + delta : delta > v ? 0 : v - delta;
        char text[24];
        uint32_t n = (uint32_t)snprintf(text, sizeof text, "%llu", (unsigned long long)v);
        struct compose cp = { .a = (const uint8_t *)text, .alen = n };
        o->in_place = n <= f.value_len && !is_held(m, rkv_item_version(f.copy));
        if (o->in_place) {
            /* the digits, then spaces to the old length, over the scratch copy */
            uint8_t *val = (uint8_t *)(uintptr_t)f.value;
            memcpy(val, text, n);
            memset(val + n, ' ', f.value_len - n);
            cp = (struct compose){ .a = val, .alen = f.value_len };
        }
        bool new_ttl = o->in_place && set_ttl;
        struct rkv_value_src src = { .pull = compose_pull, .ctx = &cp, .len = cp.alen + cp.blen };
        /* in place, memcached's item stays, meta state and all (as it is
         * when replaced) */
        rkv_status st = rkv_table_put_keep(m->t, key, klen, &src, RKV_CAS, rkv_item_version(f.copy),
                                           new_ttl ? ttl : ttl_keep(m, rkv_item_expire_at(f.copy)),
                                           rkv_item_user_flags(f.copy),
                                           o->in_place ? RKV_ITEM_LIVE_MASK : 0,
                                           o->in_place ? rkv_item_state(f.copy) : fresh_state(m),
                                           &o->version);
        if (st == RKV_CAS_MISMATCH || st == RKV_NOT_STORED || st == RKV_NOT_FOUND)
            continue; /* another writer got in between (or it went): again */
        if (st == RKV_OK) {
            o->value = v;
            o->expire_at = rkv_item_expire_at(f.copy);
            if (new_ttl && expired)
                rkv_table_delete_version(m->t, key, klen, o->version);
            if (o->in_place) /* memcached's in-place update is not a new item */
                rkv_stat_bump(&m->st->touch_stores, 1);
            res = ARITH_OK;
        } else {
            res = st == RKV_OUT_OF_MEMORY ? ARITH_EOM : ARITH_BUSY;
        }
        break;
    }
    rkv_tcp_out_rewind(m->c, mark); /* the copy was scratch */
    return res;
}

static void do_arith(struct mc *m, const struct rkv_mc_req *r)
{
    struct arith_out o;
    bool decr = r->cmd == RKV_MC_DECR;
    enum arith a = door_arith(m, r->key, r->key_len, !decr, r->delta, 0, false, 0, false, &o);
    rkv_stat_bump(a == ARITH_OK ? (decr ? &m->st->decr_hits : &m->st->incr_hits)
                                : (decr ? &m->st->decr_misses : &m->st->incr_misses),
                  1);
    if (r->noreply)
        return;
    switch (a) {
    case ARITH_OK: outf(m, "%llu\r\n", (unsigned long long)o.value); break;
    case ARITH_NOT_FOUND: outs(m, "NOT_FOUND\r\n"); break;
    case ARITH_NON_NUMERIC:
        outs(m, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
        break;
    case ARITH_EOM: outs(m, "SERVER_ERROR out of memory\r\n"); break;
    default: outs(m, server_error(RKV_SERVER_BUSY)); break;
    }
}

static void do_touch(struct mc *m, const struct rkv_mc_req *r)
{
    struct found f;
    uint64_t version;
    uint32_t ttl;
    size_t mark = rkv_tcp_out_mark(m->c);
    rkv_status st;
    rkv_stat_bump(&m->st->cmd_touch, 1);
    if (ttl_of(r->exptime, &ttl)) {
        st = rmw(m, RMW_TOUCH, r->key, r->key_len, NULL, 0, ttl, 0, &f, &version);
        if (st == RKV_OK) {
            rkv_mc_count_class(m->st, m->g, RKV_MC_CLS_TOUCH_HITS, r->key_len, f.value_len);
            bump(m, r->key, r->key_len, version, &f); /* a touch is a fetch */
        }
    } else {
        st = rkv_table_delete(m->t, r->key, r->key_len); /* a hit of unknown class */
    }
    rkv_tcp_out_rewind(m->c, mark);
    rkv_stat_bump(st == RKV_OK ? &m->st->touch_hits : &m->st->touch_misses, 1);
    if (r->noreply)
        return;
    outs(m, st == RKV_OK          ? "TOUCHED\r\n"
            : st == RKV_NOT_FOUND ? "NOT_FOUND\r\n"
                                  : server_error(st));
}

/* flush_all [delay]: every item stored before now (or before the delay
 * runs out) goes, for both doors (rkv_table_flush). The delay reads as an
 * exptime: a relative one, or a unix time; one at or before now flushes at
 * once (memcached ignores an absolute time before its start). */
static void do_flush_all(struct mc *m, const struct rkv_mc_req *r)
{
    uint32_t delay = 0;
    rkv_stat_bump(&m->st->cmd_flush, 1);
    if (r->exptime > 0 && !ttl_of(r->exptime, &delay))
        delay = 0;
    rkv_table_flush(m->t, delay);
    if (!r->noreply)
        outs(m, "OK\r\n");
}

static void do_stats(struct mc *m, const struct rkv_mc_req *r)
{
    rkv_mc_stats(m->srv, m->wc, r->arg, r->arg_len);
}

/* ------------------------------------------------------------ meta */

/* A meta key as the answer's k flag shows it: base64 and " b" when the
 * request gave it so (memcached shows a hit's key in the form the item was
 * stored with; rkv keeps no form per item). */
static void put_meta_key(struct mc *m, const struct rkv_mc_req *r)
{
    char b64[((RKV_MC_MAX_KEY + 2) / 3) * 4 + 1];
    if (r->mflags & RKV_MC_F('b')) {
        size_t n = rkv_mc_base64_encode(r->key, r->key_len, b64);
        outf(m, " k%.*s b", (int)n, b64);
    } else {
        outs(m, " k");
        out(m, r->key, r->key_len);
    }
}

/* The O and k flags, in request order: what every meta answer echoes
 * (an mg miss, an md, an ms, an ma without an item). */
static void put_echo(struct mc *m, const struct rkv_mc_req *r)
{
    for (unsigned i = 0; i < r->nret; i++) {
        if (r->ret[i] == 'O') {
            outs(m, " O");
            out(m, r->opaque, r->opaque_len);
        } else if (r->ret[i] == 'k') {
            put_meta_key(m, r);
        }
    }
}

/* Whether a flag takes effect: memcached applies T, N (and echoes flags)
 * in request order while it answers, and stops at an O over its limit. */
static bool applies(const struct rkv_mc_req *r, char flag)
{
    if (!r->opaque_too_long)
        return true;
    for (unsigned i = 0; i < r->nret; i++) {
        if (r->ret[i] == flag)
            return true;
        if (r->ret[i] == 'O')
            return false;
    }
    return false;
}

/* Whether memcached's R(token) wins the recache of an item expiring at
 * expire_at: it expires less than R seconds from now (R past 30 days: a
 * unix time it expires before); never for R <= 0 or no expiry. An item a
 * T to the past expired (gone) expires at memcached's time 1: before any
 * R but a unix time already past. */
static bool recache_due(struct mc *m, bool gone, uint32_t expire_at, int64_t recache)
{
    if (recache <= 0)
        return false;
    if (gone)
        return recache <= RKV_MC_REL_EXPTIME || recache > (int64_t)time(NULL);
    if (expire_at == 0)
        return false;
    int64_t left = (int64_t)expire_at - clock_now(m);
    if (recache <= RKV_MC_REL_EXPTIME)
        return left < recache;
    return (int64_t)time(NULL) + left < recache;
}

/* The exptime memcached gives an item mg N makes: its N, or T, whichever
 * comes last before an O over its limit (it starts as none). */
static int64_t vivify_exptime(const struct rkv_mc_req *r)
{
    int64_t exptime = 0;
    for (unsigned i = 0; i < r->nret && r->ret[i] != (r->opaque_too_long ? 'O' : 0); i++)
        if (r->ret[i] == 'N' || r->ret[i] == 'T')
            exptime = r->ret[i] == 'N' ? r->vivify_ttl : r->exptime;
    return exptime;
}

/* mg N on a miss: an empty item (flags 0) that this client wins the
 * recache of (WON), fetched by this read unless u. RKV_EXISTS: another
 * client made the key meanwhile. */
static rkv_status vivify(struct mc *m, const struct rkv_mc_req *r, uint64_t *version)
{
    uint32_t ttl;
    bool live = ttl_of(vivify_exptime(r), &ttl);
    uint64_t flags = 0;
    if (!r->opaque_too_long) /* memcached: an O over its limit ends the answer, unmarked */
        flags = RKV_ITEM_WON | ((r->mflags & RKV_MC_F('u')) ? 0 : RKV_ITEM_FETCHED);
    struct rkv_value_src src = { .data = NULL, .len = 0 };
    rkv_status st = rkv_table_put_state(m->t, r->key, r->key_len, &src, RKV_ADD, 0, ttl, 0,
                                        rkv_item_state_live(flags, clock_now(m)), version);
    if (st == RKV_OK && !live) /* made already expired: answered, gone for later reads */
        rkv_table_delete_version(m->t, r->key, r->key_len, *version);
    return st;
}

/* The item's expiry where flag `upto` stands in the request, after the T
 * before it (touched: the touch's ttl, or expired by it). */
static uint32_t expire_at_flag(struct mc *m, const struct rkv_mc_req *r, char upto, bool touch,
                               bool live, uint32_t ttl, uint32_t old_expire, bool *gone)
{
    *gone = false;
    for (unsigned i = 0; i < r->nret && r->ret[i] != upto; i++) {
        if (r->ret[i] == 'T' && touch) {
            *gone = !live;
            return ttl == 0 ? 0 : clock_now(m) + ttl;
        }
    }
    return old_expire;
}

/* mg: a read (T: a touch first; N: make a missing item) answered with its
 * flags in request order, then memcached's herd-protection marks: Z when
 * a client was handed the win token already, X when the item is stale, W
 * when this client wins the recache (it vivified the item, or R found it
 * near its expiry, or it is stale, and no token went out yet). The marks
 * are one test-and-set on the item's state (rkv_table_set_state), so one
 * client wins. h and l show the state before this read's bump. */
static void do_mg(struct mc *m, const struct rkv_mc_req *r)
{
    struct found f = { 0 };
    uint64_t version = 0;
    int res = 0;
    bool touch = (r->mflags & RKV_MC_F('T')) && applies(r, 'T'), live = true, created = false;
    bool locked = (r->mflags & (RKV_MC_F('N') | RKV_MC_F('T') | RKV_MC_F('R') | RKV_MC_F('h') |
                                RKV_MC_F('l'))) != 0;
    uint32_t ttl = 0, old_expire = 0;
    for (unsigned tries = 0; tries < READ_TRIES; tries++) {
        if (touch) {
            /* expired at once: answered as it was, gone for every later read */
            live = ttl_of(r->exptime, &ttl);
            rkv_status st = rmw(m, live ? RMW_TOUCH : RMW_EXPIRE, r->key, r->key_len, NULL, 0, ttl,
                                0, &f, &version);
            res = st == RKV_OK ? 1 : st == RKV_NOT_FOUND ? 0 : st == RKV_OUT_OF_MEMORY ? -1 : -2;
        } else {
            res = find_copy(m, r->key, r->key_len, LINE_MAX_OUT, &f);
            version = res == 1 ? rkv_item_version(f.copy) : 0;
        }
        if (res != 0 || !(r->mflags & RKV_MC_F('N')))
            break;
        rkv_status st = vivify(m, r, &version);
        if (st == RKV_EXISTS)
            continue; /* another client made it: read that one */
        if (st != RKV_OK)
            break; /* no memory for it: a miss, as memcached answers */
        created = true;
        res = 1;
        break;
    }
    uint64_t state = created ? 0 : res == 1 ? rkv_item_state(f.copy) : 0;
    uint32_t vlen = created ? 0 : res == 1 ? rkv_item_value_len(f.copy) : 0;
    uint32_t uflags = created ? 0 : res == 1 ? rkv_item_user_flags(f.copy) : 0;
    if (res == 1) {
        old_expire = created ? 0 : rkv_item_expire_at(f.copy);
        hold(m, version);
    }
    count_read(m, touch && res == 1, res == 1); /* memcached: an mg miss is a get miss, T or not */
    if (res == 1)
        rkv_mc_count_class(m->st, m->g, touch ? RKV_MC_CLS_TOUCH_HITS : RKV_MC_CLS_GET_HITS,
                           r->key_len, vlen);
    if (res == 0) {
        if (r->opaque_too_long)
            outs(m, "CLIENT_ERROR opaque token too long\r\n");
        else if (!r->noreply) {
            outs(m, "EN");
            put_echo(m, r);
            outs(m, "\r\n");
        }
        return;
    }
    if (res < 0) {
        outs(m, res == -1 ? "SERVER_ERROR out of memory writing get response\r\n"
                          : server_error(RKV_RETRY_EXHAUSTED));
        return;
    }
    /* the marks and the bump, as one change of the item's state */
    bool won = created && !r->opaque_too_long, want_win = false;
    if (!created && (!r->opaque_too_long || !locked)) {
        uint64_t clear = 0, set = 0, before;
        if (!r->opaque_too_long && !(state & RKV_ITEM_WON)) {
            bool gone;
            uint32_t at_r = expire_at_flag(m, r, 'R', touch, live, ttl, old_expire, &gone);
            want_win = (state & RKV_ITEM_STALE) ||
                       ((r->mflags & RKV_MC_F('R')) && recache_due(m, gone, at_r, r->recache_ttl));
        }
        if (!(r->mflags & RKV_MC_F('u')))
            bump_bits(f.now, state, &clear, &set);
        if (want_win)
            set |= RKV_ITEM_WON;
        if (touch && !live) {
            won = want_win; /* touched to the past: gone, nothing to mark */
        } else if (set != 0 && rkv_table_set_state(m->t, r->key, r->key_len, version, clear, set,
                                                   &before) == RKV_OK) {
            state = before; /* the marks go by the state the change met */
            won = want_win && !(before & RKV_ITEM_WON);
        }
    }
    size_t mark = rkv_tcp_out_mark(m->c);
    bool v = (r->mflags & RKV_MC_F('v')) != 0, gone = false;
    uint32_t now = clock_now(m), expire_at = old_expire;
    /* Answer line: written at the output end, which is at least
     * LINE_MAX_OUT bytes before the copy (find_copy's `pre`). The flags in
     * request order; t after T (or N making the item) shows the new TTL,
     * before it the old. */
    if (v)
        outf(m, "VA %u", vlen);
    else
        outs(m, "HD");
    for (unsigned i = 0; i < r->nret; i++) {
        switch (r->ret[i]) {
        case 'T':
            gone = !live;
            expire_at = ttl == 0 ? 0 : now + ttl;
            break;
        case 'N':
            if (created) {
                uint32_t vt = 0;
                gone = !ttl_of(r->vivify_ttl, &vt);
                expire_at = vt == 0 ? 0 : now + vt;
            }
            break;
        case 's': outf(m, " s%u", vlen); break;
        case 'f': outf(m, " f%u", uflags); break;
        case 'c': outf(m, " c%llu", (unsigned long long)version); break;
        case 'k': put_meta_key(m, r); break;
        case 't': put_ttl(m, gone, expire_at); break;
        case 'h': outs(m, state & RKV_ITEM_FETCHED ? " h1" : " h0"); break;
        case 'l': {
            uint32_t at = created ? now : rkv_item_state_access(state);
            outf(m, " l%u", now > at ? now - at : 0);
            break;
        }
        case 'O':
            if (r->opaque_too_long) { /* memcached: after the touch, in the answer */
                rkv_tcp_out_rewind(m->c, mark);
                outs(m, "CLIENT_ERROR opaque token too long\r\n");
                return;
            }
            outs(m, " O");
            out(m, r->opaque, r->opaque_len);
            break;
        }
    }
    if (state & RKV_ITEM_WON)
        outs(m, " Z");
    if (state & RKV_ITEM_STALE)
        outs(m, " X");
    if (won)
        outs(m, " W");
    outs(m, "\r\n");
    if (m->full || rkv_tcp_out_mark(m->c) - mark > LINE_MAX_OUT) {
        rkv_tcp_out_rewind(m->c, mark);
        m->full = false;
        outs(m, "SERVER_ERROR out of memory writing get response\r\n");
        return;
    }
    if (v && created) {
        outs(m, "\r\n"); /* its empty value */
    } else if (v) {
        char *dst = rkv_tcp_out_reserve(m->c, 0);
        memmove(dst, f.value, vlen);
        memcpy(dst + vlen, "\r\n", 2);
        rkv_tcp_out_commit(m->c, vlen + 2);
    }
}

/* ms I with a C older than the item's CAS: memcached's stale store
 * (CAS_STALE): the value goes in marked stale (X), keeping the item's TTL
 * and its win token. False when that is not the case (the usual cas
 * store answers); else *st is the outcome. */
static bool store_stale(struct mc *m, const struct rkv_mc_req *r, rkv_status *st, uint64_t *version)
{
    size_t mark = rkv_tcp_out_mark(m->c);
    bool done = false;
    for (unsigned i = 0; i < RMW_TRIES && !done; i++) {
        struct found f;
        rkv_tcp_out_rewind(m->c, mark);
        if (find_copy(m, r->key, r->key_len, 0, &f) != 1 || r->cas == 0 ||
            r->cas >= rkv_item_version(f.copy))
            break;
        uint64_t state = rkv_item_state_live(RKV_ITEM_STALE | (rkv_item_state(f.copy) & RKV_ITEM_WON),
                                             clock_now(m));
        struct rkv_value_src src = { .data = r->data, .len = r->bytes };
        /* the token as it is when replaced */
        *st = rkv_table_put_keep(m->t, r->key, r->key_len, &src, RKV_CAS, rkv_item_version(f.copy),
                                 ttl_keep(m, rkv_item_expire_at(f.copy)), r->flags, RKV_ITEM_WON,
                                 state, version);
        /* another writer got in between (or it went): look again */
        done = *st != RKV_CAS_MISMATCH && *st != RKV_NOT_STORED && *st != RKV_NOT_FOUND;
    }
    rkv_tcp_out_rewind(m->c, mark); /* the copy was scratch */
    return done;
}

/* md I: the item stays, marked stale (X) with a new CAS and its win token
 * taken back, so the next mg wins the recache (W); T gives it a new TTL.
 * memcached changes the item in place; rkv writes it anew (a CAS on its
 * version, so atomic against every writer). */
static rkv_status invalidate(struct mc *m, const struct rkv_mc_req *r)
{
    bool cas_given = (r->mflags & RKV_MC_F('C')) != 0, set_ttl = (r->mflags & RKV_MC_F('T')) != 0;
    uint32_t ttl = 0;
    bool live = !set_ttl || ttl_of(r->exptime, &ttl);
    size_t mark = rkv_tcp_out_mark(m->c);
    rkv_status st = RKV_SERVER_BUSY;
    for (unsigned i = 0; i < RMW_TRIES; i++) {
        struct found f;
        uint64_t version;
        rkv_tcp_out_rewind(m->c, mark);
        int res = find_copy(m, r->key, r->key_len, 0, &f);
        if (res <= 0) {
            st = res == 0 ? RKV_NOT_FOUND : res == -1 ? RKV_OUT_OF_MEMORY : RKV_RETRY_EXHAUSTED;
            break;
        }
        if (cas_given && rkv_item_version(f.copy) != r->cas) {
            st = RKV_CAS_MISMATCH;
            break;
        }
        struct rkv_value_src src = { .data = f.value, .len = f.value_len };
        uint64_t state = (rkv_item_state(f.copy) | RKV_ITEM_STALE) & ~(uint64_t)RKV_ITEM_WON;
        /* fetched and last access as they are when replaced */
        st = rkv_table_put_keep(m->t, r->key, r->key_len, &src, RKV_CAS, rkv_item_version(f.copy),
                                set_ttl ? ttl : ttl_keep(m, rkv_item_expire_at(f.copy)),
                                rkv_item_user_flags(f.copy),
                                RKV_ITEM_FETCHED | RKV_ITEM_ACCESS_MASK, state, &version);
        if (st == RKV_OK && !live) /* a T in the past: expired at once */
            rkv_table_delete_version(m->t, r->key, r->key_len, version);
        if (st != RKV_CAS_MISMATCH && st != RKV_NOT_STORED && st != RKV_NOT_FOUND)
            break;
    }
    rkv_tcp_out_rewind(m->c, mark); /* the copy was scratch */
    return st;
}

/* ms: the mode picks the store; C makes a set or a replace a cas, makes an
 * append or prepend conditional, and is ignored by an add (memcached). */
static void do_ms(struct mc *m, const struct rkv_mc_req *r)
{
    enum rkv_mc_cmd how;
    uint64_t version = 0;
    bool cas_given = (r->mflags & RKV_MC_F('C')) != 0;
    switch (r->mode) {
    case 'E': how = RKV_MC_ADD; break;
    case 'A': how = RKV_MC_APPEND; break;
    case 'P': how = RKV_MC_PREPEND; break;
    case 'R': how = cas_given ? RKV_MC_CAS : RKV_MC_REPLACE; break;
    default: how = cas_given ? RKV_MC_CAS : RKV_MC_SET; break;
    }
    rkv_status st;
    if (!((r->mflags & RKV_MC_F('I')) && how == RKV_MC_CAS && store_stale(m, r, &st, &version)))
        st = store(m, how, r, how == RKV_MC_ADD ? 0 : r->cas, &version);
    rkv_stat_bump(&m->st->cmd_set, 1);
    rkv_mc_count_class(m->st, m->g, RKV_MC_CLS_CMD_SET, r->key_len, r->bytes);
    /* memcached's ms takes the memory for its data before it looks at the
     * mode, and on failure unlinks the key in every mode (a set refused for
     * size never gets here: refused()) */
    if (st == RKV_OUT_OF_MEMORY && how != RKV_MC_APPEND && how != RKV_MC_PREPEND)
        rkv_table_delete(m->t, r->key, r->key_len);
    const char *code;
    switch (st) {
    case RKV_OK: code = "HD"; break;
    case RKV_EXISTS: code = "NS"; break;
    case RKV_NOT_STORED:
    case RKV_NOT_FOUND: code = how == RKV_MC_CAS ? "NF" : "NS"; break;
    case RKV_CAS_MISMATCH: code = "EX"; break;
    default: outs(m, server_error(st)); return;
    }
    if (st == RKV_OK && r->noreply)
        return;
    outs(m, code);
    for (unsigned i = 0; i < r->nret; i++) {
        if (r->ret[i] == 'c')
            outf(m, " c%llu", (unsigned long long)(st == RKV_OK ? version : 0));
        else if (r->ret[i] == 'O' || r->ret[i] == 'k') {
            struct rkv_mc_req one = *r;
            one.ret[0] = r->ret[i];
            one.nret = 1;
            put_echo(m, &one);
        }
    }
    outs(m, "\r\n");
}

/* md: delete; with C<cas>, only while the item is still that version
 * (one atomic step in the table: EX if another write replaced it); with
 * I, invalidate instead (memcached counts no delete hit for it). */
static void do_md(struct mc *m, const struct rkv_mc_req *r)
{
    bool cas_given = (r->mflags & RKV_MC_F('C')) != 0, stale = (r->mflags & RKV_MC_F('I')) != 0;
    rkv_status st = stale       ? invalidate(m, r)
                    : cas_given ? rkv_table_delete_version(m->t, r->key, r->key_len, r->cas)
                                : rkv_table_delete(m->t, r->key, r->key_len);
    if (st == RKV_NOT_FOUND || st == RKV_CAS_MISMATCH || (st == RKV_OK && !stale))
        rkv_stat_bump(st == RKV_OK ? &m->st->delete_hits : &m->st->delete_misses, 1);
    if (r->noreply && st == RKV_OK)
        return;
    switch (st) {
    case RKV_OK: outs(m, "HD"); break;
    case RKV_NOT_FOUND: outs(m, "NF"); break;
    case RKV_CAS_MISMATCH: outs(m, "EX"); break;
    default: outs(m, server_error(st)); return;
    }
    put_echo(m, r);
    outs(m, "\r\n");
}

/* ma: incr/decr (door_arith), C a condition (0: none), N creating a
 * missing item with J (its exptime N), T a new TTL for an item changed in
 * place (memcached sets it on the item it changed: a result longer than
 * the old value is a new item, which keeps the old TTL), flags answered in
 * request order with t showing the TTL as it is at that point. */
static void do_ma(struct mc *m, const struct rkv_mc_req *r)
{
    struct arith_out o = { 0 };
    bool decr = r->mode == 'D' || r->mode == '-';
    bool set_ttl = (r->mflags & RKV_MC_F('T')) && applies(r, 'T');
    uint32_t ttl = 0;
    bool expired = set_ttl && !ttl_of(r->exptime, &ttl);
    bool created = false;
    enum arith a = door_arith(m, r->key, r->key_len, !decr, r->delta, r->cas, set_ttl, ttl, expired,
                              &o);
    if (a == ARITH_NOT_FOUND && (r->mflags & RKV_MC_F('N'))) {
        /* the item memcached makes: J's value, flags 0, then N and T
         * applied in request order (the last one stays) */
        char num[24];
        struct rkv_mc_req init = *r;
        int64_t exptime = 0;
        for (unsigned i = 0; i < r->nret && r->ret[i] != (r->opaque_too_long ? 'O' : 0); i++)
            if (r->ret[i] == 'N' || r->ret[i] == 'T')
                exptime = r->ret[i] == 'N' ? r->vivify_ttl : r->exptime;
        init.data = (const uint8_t *)num;
        init.bytes = (uint32_t)snprintf(num, sizeof num, "%llu", (unsigned long long)r->initial);
        init.exptime = exptime;
        init.flags = 0;
        rkv_status st = store(m, RKV_MC_ADD, &init, 0, &o.version);
        if (st == RKV_EXISTS) /* created meanwhile by another client: apply to it */
            a = door_arith(m, r->key, r->key_len, !decr, r->delta, r->cas, set_ttl, ttl, expired, &o);
        else if (st == RKV_OK) {
            a = ARITH_OK;
            created = true;
            o.value = r->initial;
            o.expire_at = 0;
        } else {
            outs(m, "SERVER_ERROR Out of memory allocating new item\r\n");
            return;
        }
    }
    if (a == ARITH_OK || (a == ARITH_NOT_FOUND && !(r->mflags & RKV_MC_F('N'))))
        rkv_stat_bump(a == ARITH_OK ? (decr ? &m->st->decr_hits : &m->st->incr_hits)
                                    : (decr ? &m->st->decr_misses : &m->st->incr_misses),
                      1);
    switch (a) {
    case ARITH_OK: break;
    case ARITH_NOT_FOUND:
    case ARITH_CAS_MISMATCH:
        if (r->opaque_too_long) { /* memcached: when it echoes the flags */
            outs(m, "CLIENT_ERROR opaque token too long\r\n");
            return;
        }
        outs(m, a == ARITH_NOT_FOUND ? "NF" : "EX");
        put_echo(m, r);
        outs(m, "\r\n");
        return;
    case ARITH_NON_NUMERIC:
        outs(m, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
        return;
    case ARITH_EOM: outs(m, "SERVER_ERROR out of memory\r\n"); return;
    default: outs(m, server_error(RKV_SERVER_BUSY)); return;
    }
    size_t mark = rkv_tcp_out_mark(m->c);
    char num[24];
    int n = snprintf(num, sizeof num, "%llu", (unsigned long long)o.value);
    bool v = (r->mflags & RKV_MC_F('v')) != 0;
    uint32_t now = clock_now(m), expire_at = o.expire_at;
    bool gone = false;
    if (v)
        outf(m, "VA %d", n);
    else
        outs(m, "HD");
    for (unsigned i = 0; i < r->nret; i++) {
        switch (r->ret[i]) {
        case 'c': outf(m, " c%llu", (unsigned long long)o.version); break;
        case 't': put_ttl(m, gone, expire_at); break;
        case 'T':
            gone = expired;
            expire_at = ttl == 0 ? 0 : now + ttl;
            break;
        case 'N':
            if (created) {
                uint32_t vt = 0;
                gone = !ttl_of(r->vivify_ttl, &vt);
                expire_at = vt == 0 ? 0 : now + vt;
            }
            break;
        case 'k': put_meta_key(m, r); break;
        case 'O':
            if (r->opaque_too_long) { /* memcached: after the change, in the answer */
                rkv_tcp_out_rewind(m->c, mark);
                outs(m, "CLIENT_ERROR opaque token too long\r\n");
                return;
            }
            outs(m, " O");
            out(m, r->opaque, r->opaque_len);
            break;
        }
    }
    if (r->noreply && !created) { /* memcached answers an ma q that made its item */
        rkv_tcp_out_rewind(m->c, mark);
        return;
    }
    outs(m, "\r\n");
    if (v)
        outf(m, "%s\r\n", num);
}

/* ------------------------------------------------------------ dispatch */

static void execute(struct mc *m, const struct rkv_mc_req *r)
{
    switch (r->cmd) {
    case RKV_MC_GET:
    case RKV_MC_GETS:
    case RKV_MC_GAT:
    case RKV_MC_GATS: do_retrieval(m, r); break;
    case RKV_MC_SET:
    case RKV_MC_ADD:
    case RKV_MC_REPLACE:
    case RKV_MC_APPEND:
    case RKV_MC_PREPEND:
    case RKV_MC_CAS: do_storage(m, r); break;
    case RKV_MC_DELETE: do_delete(m, r); break;
    case RKV_MC_INCR:
    case RKV_MC_DECR: do_arith(m, r); break;
    case RKV_MC_TOUCH: do_touch(m, r); break;
    case RKV_MC_MG: do_mg(m, r); break;
    case RKV_MC_MS: do_ms(m, r); break;
    case RKV_MC_MD: do_md(m, r); break;
    case RKV_MC_MA: do_ma(m, r); break;
    case RKV_MC_MN: /* memcached writes its answers out at an mn */
        outs(m, "MN\r\n");
        flush_point(m);
        break;
    case RKV_MC_STATS: do_stats(m, r); break;
    case RKV_MC_VERSION: outs(m, "VERSION " RKV_MC_VERSION_STRING "\r\n"); break;
    case RKV_MC_VERBOSITY:
        if (!r->noreply)
            outs(m, "OK\r\n");
        break;
    case RKV_MC_FLUSH_ALL: do_flush_all(m, r); break;
    case RKV_MC_QUIT: rkv_tcp_close_after_output(m->c, "client sent quit"); break;
    case RKV_MC_SHUTDOWN:
        /* memcached without -A; a client never stops rkv */
        outs(m, "ERROR: shutdown not enabled\r\n");
        break;
    case RKV_MC_ME:
    case RKV_MC_CMD_COUNT: outs(m, "ERROR\r\n"); break;
    }
}

/* What a command the parser refused still does in memcached. A set or ms
 * whose data block is too large drops the key's item, as memcached does
 * when it cannot allocate a set's item: the client meant the old value
 * replaced, and no reader of either door may go on getting it
 * (design.md invariant 7); add, replace, cas and append keep theirs, as in
 * memcached. A flush_all with a bad delay is counted in cmd_flush. */
static void refused(struct mc *m, const struct rkv_mc_req *r, enum rkv_mc_result res)
{
    if (res == RKV_MC_SERVER_ERROR && (r->cmd == RKV_MC_SET || r->cmd == RKV_MC_MS))
        rkv_table_delete(m->t, r->key, r->key_len);
    if (res == RKV_MC_SERVER_ERROR) /* a data block over the largest value */
        rkv_stat_bump(&m->st->store_too_large, 1);
    if (res == RKV_MC_CLIENT_ERROR && r->cmd == RKV_MC_FLUSH_ALL)
        rkv_stat_bump(&m->st->cmd_flush, 1);
}

unsigned rkv_memcache_serve(struct rkv_server *srv, struct rkv_worker *w, struct rkv_wconn *wc)
{
    struct mc m = { .srv = srv,
                    .t = srv->table,
                    .c = wc->conn,
                    .wc = wc,
                    .st = &rkv_mc_counters[w->id],
                    .g = rkv_table_header(srv->table) };
    struct rkv_msg msg;
    struct rkv_mc_req req;
    uint32_t consumed = 0;
    uint64_t swallow = 0;
    unsigned done = 0;

    rkv_tcp_count_io(m.c, &m.st->bytes_read, &m.st->bytes_written);

    if (!wc->authed && !rkv_admission_authenticate(srv, wc)) {
        /* max_conns, shared with the other doors */
        RKV_WARN("%s: refusing %s: %u connections is the limit (raise [rpc] max_conns)",
                 wc->ep->uri, wc->ops->peer(wc->conn), srv->cfg.max_conns);
        outs(&m, "SERVER_ERROR too many open connections\r\n");
        wc->ops->reply(m.c, &consumed, 1);
        wc->closing = true; /* the worker closes it after this pass */
        return 0;
    }
    if (wc->ops->poll(m.c, &msg, 1) == 0)
        return 0;
    const char *in = msg.data;
    size_t len = msg.len, need = 0;
    flush_point(&m); /* what earlier passes answered went out */
    /* where memcached's read buffer would start: it reads 16 KiB at a
     * time, and writes its answers out whenever that runs dry inside a
     * command (or a data block it then reads past it) */
    size_t window = 0;
    while (consumed < len && !rkv_tcp_out_backed_up(m.c)) {
        size_t used, at = consumed;
        enum rkv_mc_result res = rkv_mc_parse_stream(in + consumed, len - consumed,
                                                     m.g->max_value_len, rkv_tcp_mc_stream(m.c),
                                                     &req, &used, &need);
        if (res == RKV_MC_NEED_MORE)
            break;
        need = 0;
        consumed += (uint32_t)used;
        done++;
        size_t line_end = at + used, cmd_end = at + used + req.swallow;
        bool bad_chunk = res == RKV_MC_CLIENT_ERROR && req.error != NULL &&
                         strcmp(req.error, "bad data chunk") == 0;
        if (req.data != NULL || bad_chunk)
            line_end = at + used - req.bytes - 2;
        if (line_end > window + RKV_MC_READ_BUFFER) {
            flush_point(&m);
            window = at;
        }
        switch (res) {
        case RKV_MC_OK: execute(&m, &req); break;
        case RKV_MC_ERROR:
            rkv_stat_bump(&m.st->protocol_errors, 1);
            outs(&m, "ERROR\r\n");
            break;
        case RKV_MC_CLIENT_ERROR:
        case RKV_MC_SERVER_ERROR:
            refused(&m, &req, res);
            rkv_stat_bump(&m.st->protocol_errors, 1);
            if (!req.noreply) /* a classic command's noreply silences its errors */
                outf(&m, "%s %s\r\n", res == RKV_MC_CLIENT_ERROR ? "CLIENT_ERROR" : "SERVER_ERROR",
                     req.error);
            if (req.swallow) { /* skip the refused data block, seen or not */
                uint64_t here = RKV_MIN(req.swallow, (uint64_t)(len - consumed));
                consumed += (uint32_t)here;
                swallow = req.swallow - here;
            }
            break;
        case RKV_MC_HANGUP:
            /* memcached drops every answer it has not sent yet */
            rkv_tcp_out_rewind(m.c, m.flushed);
            rkv_stat_bump(&m.st->protocol_errors, 1);
            break;
        case RKV_MC_NEED_MORE: break;
        }
        if (m.resume != NULL) { /* the output is full: the rest of the keys next time */
            consumed = (uint32_t)(m.resume - in);
            rkv_mc_stream_resume(rkv_tcp_mc_stream(m.c), &req);
            break;
        }
        if (m.full) { /* not even an error line fits: the client is not reading */
            rkv_tcp_close_after_output(m.c, "output buffer full");
            break;
        }
        if (req.close) {
            const char *why = res == RKV_MC_HANGUP
                                  ? "memcached hangs up on this input (an HTTP "
                                    "request, or a line with no end within 2048 bytes)"
                                  : req.error;
            RKV_INFO("%s: closing %s: %s", wc->ep->uri, wc->ops->peer(wc->conn), why);
            rkv_tcp_close_after_output(m.c, why);
            break;
        }
        if (cmd_end > window + RKV_MC_READ_BUFFER) {
            flush_point(&m);
            window = cmd_end;
        }
        if (swallow || req.cmd == RKV_MC_QUIT)
            break;
    }
    rkv_tcp_want_input(m.c, need);
    wc->ops->reply(m.c, &consumed, 1);
    if (swallow)
        rkv_tcp_skip_input(m.c, swallow);
    return done;
}
