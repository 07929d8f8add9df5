/* bench_memcache.h — a memcached text-protocol client for rkv-bench.
 *
 * One thread's set of TCP connections to one server (rkv's tcp:// door or a
 * memcached). A batch of operations is dealt round-robin over the
 * connections and pipelined: each connection gets its share of the requests
 * in one send(), then its replies are read in order. At most `depth`
 * requests are in flight per connection; a larger batch goes in rounds. The
 * calls mirror rkv.h's (statuses, get_op/put_op arrays), so rkv-bench runs
 * the same generator and report over either protocol. Buffers are sized at
 * connect; the calls allocate nothing.
 *
 * Replies map to rkv statuses: VALUE/END → RKV_OK / RKV_NOT_FOUND, STORED →
 * RKV_OK, NOT_STORED → RKV_EXISTS (add) or RKV_NOT_STORED (replace), EXISTS
 * → RKV_CAS_MISMATCH, NOT_FOUND → RKV_NOT_FOUND (delete) or RKV_NOT_STORED
 * (cas), DELETED → RKV_OK, "SERVER_ERROR object too large" → RKV_TOO_LARGE,
 * "SERVER_ERROR out of memory" → RKV_OUT_OF_MEMORY, another SERVER_ERROR →
 * RKV_SERVER_BUSY, CLIENT_ERROR → RKV_INVALID (incr/decr of a non-number:
 * RKV_NOT_NUMBER), a number (incr/decr) → RKV_OK, anything else → RKV_PROTOCOL
 * (and the connections are dropped). An I/O error or timeout drops every
 * connection (RKV_CONNECTION / RKV_TIMEOUT); the next call reconnects.
 */
#ifndef RKV_BENCH_MEMCACHE_H
#define RKV_BENCH_MEMCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

struct bench_mc;

/* Connect `conns` connections to uri ("tcp://HOST:PORT"), each with up to
 * `depth` requests in flight, for values up to value_max bytes.
 * timeout_ms: per-operation (0 = 5000). On failure *out is NULL and err
 * says why.
 * Returns: RKV_OK, RKV_INVALID (bad URI), RKV_CONNECTION, RKV_NO_MEMORY. */
rkv_status bench_mc_connect(const char *uri, unsigned conns, unsigned depth, uint32_t value_max,
                            unsigned timeout_ms, struct bench_mc **out, char *err, size_t err_len);

/* As rkv_get (gets: info->version is the CAS unique, user_flags the
 * client flags; ttl_left is 0: the protocol does not tell). */
rkv_status bench_mc_get(struct bench_mc *m, const void *key, size_t key_len, void *buf,
                        size_t buf_len, size_t *value_len, struct rkv_item_info *info);
rkv_status bench_mc_mget(struct bench_mc *m, struct rkv_get_op *ops, size_t n);
/* As rkv_put, by set/add/replace/cas; *new_version is 0 (memcached's
 * storage replies carry no CAS unique); a value over value_max is
 * RKV_TOO_LARGE, unsent. */
rkv_status bench_mc_put(struct bench_mc *m, const void *key, size_t key_len, const void *value,
                        size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version);
rkv_status bench_mc_mput(struct bench_mc *m, struct rkv_put_op *ops, size_t n);
rkv_status bench_mc_delete(struct bench_mc *m, const void *key, size_t key_len);
/* As rkv_incr, by incr (delta >= 0) or decr (-delta): the number replied
 * goes to *result (may be NULL); NOT_FOUND → RKV_NOT_FOUND, a CLIENT_ERROR
 * about a non-numeric value → RKV_NOT_NUMBER. */
rkv_status bench_mc_incr(struct bench_mc *m, const void *key, size_t key_len, int64_t delta,
                         uint64_t *result);

/* gets, get_hits, get_misses, puts, deletes, sends (requests) and doorbells
 * (send() calls); the rest stay 0 (no one-sided reads over TCP). */
void bench_mc_get_counters(const struct bench_mc *m, struct rkv_counters *out);
void bench_mc_reset_counters(struct bench_mc *m);
const char *bench_mc_last_error(const struct bench_mc *m);
void bench_mc_close(struct bench_mc *m);

#endif
