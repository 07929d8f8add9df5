/* bench_client.h — what rkv-bench drives a server through: librkv (rkv's own
 * protocol: one-sided GETs, RPC writes) or, with --protocol memcache, the
 * memcached text protocol over TCP (bench_memcache.h). The calls have
 * rkv.h's signatures and statuses, so one generator and one report serve
 * both.
 */
#ifndef RKV_BENCH_CLIENT_H
#define RKV_BENCH_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "bench_args.h"
#include "rkv.h"

struct bench_client;

/* One thread's client for cfg (its servers, protocol, connections per
 * thread, timeout, auth, location cache). On failure *out is NULL and err
 * says which server and why.
 * Returns: what rkv_connect() or bench_mc_connect() returns. */
rkv_status bench_client_connect(const struct bench_config *cfg, struct bench_client **out,
                                char *err, size_t err_len);

rkv_status bench_get(struct bench_client *c, const void *key, size_t key_len, void *buf,
                     size_t buf_len, size_t *value_len, struct rkv_item_info *info);
rkv_status bench_mget(struct bench_client *c, struct rkv_get_op *ops, size_t n);
rkv_status bench_put(struct bench_client *c, const void *key, size_t key_len, const void *value,
                     size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version);
rkv_status bench_mput(struct bench_client *c, struct rkv_put_op *ops, size_t n);
rkv_status bench_delete(struct bench_client *c, const void *key, size_t key_len);
rkv_status bench_incr(struct bench_client *c, const void *key, size_t key_len, int64_t delta,
                      uint64_t *result);
/* The longest value a write may carry: rkv_max_value_size(), or for
 * --protocol memcache `otherwise` (the protocol does not tell). */
size_t bench_max_value(const struct bench_client *c, size_t otherwise);
void bench_get_counters(const struct bench_client *c, struct rkv_counters *out);
void bench_reset_counters(struct bench_client *c);
const char *bench_last_error(const struct bench_client *c);
/* The librkv handle under c (rkv-bench's pipelined window drives it
 * directly), or NULL for --protocol memcache. */
rkv_client *bench_client_rkv(struct bench_client *c);
void bench_client_close(struct bench_client *c);

#endif
