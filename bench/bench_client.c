/* bench_client.c — librkv or the memcached text protocol behind rkv-bench's
 * calls; see bench_client.h. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_client.h"
#include "bench_memcache.h"
#include "bench_report.h"

struct bench_client {
    rkv_client *kv;      /* --protocol rkv */
    struct bench_mc *mc; /* --protocol memcache */
};

rkv_status bench_client_connect(const struct bench_config *cfg, struct bench_client **out,
                                char *err, size_t err_len)
{
    struct bench_client *c = calloc(1, sizeof *c);
    rkv_status st;
    *out = NULL;
    if (c == NULL) {
        snprintf(err, err_len, "out of memory");
        return RKV_NO_MEMORY;
    }
    if (cfg->protocol == BENCH_PROTO_MEMCACHE) {
        unsigned conns = cfg->connections / (cfg->threads * cfg->processes);
        st = bench_mc_connect(cfg->servers, conns, (cfg->window + conns - 1) / conns,
                              cfg->value_size.max, cfg->timeout_ms, &c->mc, err, err_len);
    } else {
        struct rkv_options opts = {
            .auth_secret = cfg->auth,
            .timeout_ms = cfg->timeout_ms,
            .location_cache = cfg->location_cache,
            .bucket_reads = cfg->bucket_reads,
            .flags = cfg->shared_handle ? RKV_OPT_SHARED : 0,
        };
        st = rkv_connect(cfg->servers, &opts, &c->kv);
        if (st != RKV_OK)
            snprintf(err, err_len, "%s", rkv_last_error(NULL));
        else if (bench_window_mode(cfg) == BENCH_WINDOW_PIPELINED &&
                 (st = rkv_set_window(c->kv, cfg->window)) != RKV_OK) {
            snprintf(err, err_len, "--window %u: %s", cfg->window, rkv_last_error(c->kv));
            rkv_close(c->kv);
        }
    }
    if (st != RKV_OK) {
        free(c);
        return st;
    }
    *out = c;
    return RKV_OK;
}

rkv_status bench_get(struct bench_client *c, const void *key, size_t key_len, void *buf,
                     size_t buf_len, size_t *value_len, struct rkv_item_info *info)
{
    return c->mc ? bench_mc_get(c->mc, key, key_len, buf, buf_len, value_len, info)
                 : rkv_get(c->kv, key, key_len, buf, buf_len, value_len, info);
}

rkv_status bench_mget(struct bench_client *c, struct rkv_get_op *ops, size_t n)
{
    return c->mc ? bench_mc_mget(c->mc, ops, n) : rkv_mget(c->kv, ops, n);
}

rkv_status bench_put(struct bench_client *c, const void *key, size_t key_len, const void *value,
                     size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version)
{
    return c->mc ? bench_mc_put(c->mc, key, key_len, value, value_len, opts, new_version)
                 : rkv_put(c->kv, key, key_len, value, value_len, opts, new_version);
}

rkv_status bench_mput(struct bench_client *c, struct rkv_put_op *ops, size_t n)
{
    return c->mc ? bench_mc_mput(c->mc, ops, n) : rkv_mput(c->kv, ops, n);
}

rkv_status bench_delete(struct bench_client *c, const void *key, size_t key_len)
{
    return c->mc ? bench_mc_delete(c->mc, key, key_len) : rkv_delete(c->kv, key, key_len);
}

rkv_status bench_incr(struct bench_client *c, const void *key, size_t key_len, int64_t delta,
                      uint64_t *result)
{
    return c->mc ? bench_mc_incr(c->mc, key, key_len, delta, result)
                 : rkv_incr(c->kv, key, key_len, delta, result);
}

size_t bench_max_value(const struct bench_client *c, size_t otherwise)
{
    return c->mc ? otherwise : rkv_max_value_size(c->kv);
}

void bench_get_counters(const struct bench_client *c, struct rkv_counters *out)
{
    if (c->mc)
        bench_mc_get_counters(c->mc, out);
    else
        rkv_get_counters(c->kv, out);
}

void bench_reset_counters(struct bench_client *c)
{
    if (c->mc)
        bench_mc_reset_counters(c->mc);
    else
        rkv_reset_counters(c->kv);
}

const char *bench_last_error(const struct bench_client *c)
{
    return c->mc ? bench_mc_last_error(c->mc) : rkv_last_error(c->kv);
}

void bench_client_close(struct bench_client *c)
{
    if (c == NULL)
        return;
    bench_mc_close(c->mc);
    rkv_close(c->kv);
    free(c);
}

rkv_client *bench_client_rkv(struct bench_client *c)
{
    return c->mc ? NULL : c->kv;
}
