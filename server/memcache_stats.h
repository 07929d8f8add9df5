/* memcache_stats.h — the tcp door's `stats` command, memcached's groups.
 *
 * memcache_exec.c counts what the door serves into its worker's
 * rkv_mc_counters (rkv_stat_bump: one writer each) and hands a `stats`
 * line to rkv_mc_stats(), which answers every group memcached 1.6.18
 * answers, in its field names and order, with rkv's true values: general,
 * settings, items, slabs, sizes, conns, reset, detail, cachedump (what
 * each prints and omits: docs/design.md, "The tcp door's stats").
 */
#ifndef RKV_MEMCACHE_STATS_H
#define RKV_MEMCACHE_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* What "version" and "stats" answer: the memcached release whose protocol
 * the door speaks, then rkv's own. Clients parse a memcached version out of
 * it (libmemcached reads MAJOR.MINOR.MICRO and refuses a major version of 0,
 * which failed memcstat, memcping and every memcached_version() call). */
#define RKV_MC_VERSION_STRING "1.6.18-rkv-" RKV_VERSION_STRING

/* What memcached's `stats slabs` counts per class for the door: a hit or a
 * store, at the class of the item it read or wrote. */
enum rkv_mc_class_counter {
    RKV_MC_CLS_GET_HITS,
    RKV_MC_CLS_CMD_SET,
    RKV_MC_CLS_CAS_HITS,
    RKV_MC_CLS_CAS_BADVAL,
    RKV_MC_CLS_TOUCH_HITS,
    RKV_MC_CLS_COUNT
};

/* memcached's counters for `stats`, per worker (written by its worker
 * only). Every member is an _Atomic uint64_t: stats sums them as words. */
struct rkv_mc_counters {
    _Atomic uint64_t cmd_get, get_hits, get_misses, get_expired, cmd_set, cmd_flush, cmd_touch,
        touch_hits, touch_misses, delete_hits, delete_misses, incr_hits, incr_misses, decr_hits,
        decr_misses, cas_hits, cas_misses, cas_badval, protocol_errors,
        store_too_large,           /* a storage command's data over the largest value */
        store_no_memory,           /* a store the table had no memory for */
        bytes_read, bytes_written, /* every byte received and sent (tcp_server.c counts) */
        touch_stores;              /* touches that stored a new item (not in total_items) */
    _Atomic uint64_t cls[RKV_MAX_CLASSES][RKV_MC_CLS_COUNT];
};
extern struct rkv_mc_counters rkv_mc_counters[RKV_MAX_WORKERS];

/* Count a per-class event for an item of key_len + value_len bytes (at its
 * size class in the region header g; nothing when no class holds it). */
void rkv_mc_count_class(struct rkv_mc_counters *st, const struct rkv_region_header *g,
                        enum rkv_mc_class_counter what, uint32_t key_len, uint32_t value_len);

/* `stats detail on`: per key prefix (up to the first ':') counts of gets,
 * hits, sets and deletes. Off by default, and then a relaxed load each. */
enum rkv_mc_detail { RKV_MC_DETAIL_GET, RKV_MC_DETAIL_HIT, RKV_MC_DETAIL_SET, RKV_MC_DETAIL_DEL };
extern atomic_bool rkv_mc_detail_on;
void rkv_mc_detail_record(enum rkv_mc_detail what, const uint8_t *key, uint32_t key_len);
static inline void rkv_mc_detail(enum rkv_mc_detail what, const uint8_t *key, uint32_t key_len)
{
    if (atomic_load_explicit(&rkv_mc_detail_on, memory_order_relaxed))
        rkv_mc_detail_record(what, key, key_len);
}

/* Answer "stats <arg>" (arg: the rest of the line, may be empty) on wc,
 * a tcp door connection served by the calling worker: append the whole
 * reply to its output, or SERVER_ERROR when it does not fit. */
void rkv_mc_stats(struct rkv_server *srv, struct rkv_wconn *wc, const char *arg, size_t arg_len);

#endif
