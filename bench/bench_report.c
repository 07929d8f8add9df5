/* bench_report.c — see bench_report.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_timeseries.h"
#include "json.h"
#include "util.h"

static const char *const op_names[BENCH_OP_COUNT] = { "get", "put", "delete", "rmw" };
static const char *const op_labels[BENCH_OP_COUNT] = { "GET", "PUT", "DELETE", "RMW" };

void bench_results_init(struct bench_results *r)
{
    memset(r, 0, sizeof *r);
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        hist_init(&r->lat[i]);
}

static void counters_add(struct rkv_counters *d, const struct rkv_counters *s)
{
    d->gets += s->gets;
    d->get_hits += s->get_hits;
    d->get_misses += s->get_misses;
    d->puts += s->puts;
    d->deletes += s->deletes;
    d->other_rpcs += s->other_rpcs;
    d->reads += s->reads;
    d->read_round_trips += s->read_round_trips;
    d->doorbells += s->doorbells;
    d->sends += s->sends;
    d->inline_sends += s->inline_sends;
    d->verify_retries += s->verify_retries;
    d->cache_hits += s->cache_hits;
    d->reconnects += s->reconnects;
    d->forwards += s->forwards;
    d->cache_stale += s->cache_stale;
    d->read_lanes += s->read_lanes;
    d->read_lanes_td += s->read_lanes_td;
}

void bench_results_merge(struct bench_results *dst, const struct bench_results *src)
{
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        hist_merge(&dst->lat[i], &src->lat[i]);
    dst->get_hits += src->get_hits;
    dst->get_misses += src->get_misses;
    dst->delete_misses += src->delete_misses;
    dst->rmw_conflicts += src->rmw_conflicts;
    for (unsigned i = 0; i < RKV_STATUS_COUNT; i++)
        dst->errors[i] += src->errors[i];
    dst->verify_failures += src->verify_failures;
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        dst->op_errors[i] += src->op_errors[i];
    dst->sent += src->sent;
    dst->missed += src->missed;
    if (src->max_send_lag_ns > dst->max_send_lag_ns)
        dst->max_send_lag_ns = src->max_send_lag_ns;
    counters_add(&dst->counters, &src->counters);
    dst->fills += src->fills;
    for (unsigned i = 0; i < TRACE_OP_COUNT; i++) {
        dst->trace_ops[i] += src->trace_ops[i];
        dst->trace_ok[i] += src->trace_ok[i];
        dst->trace_missed[i] += src->trace_missed[i];
    }
    dst->trace_skipped += src->trace_skipped;
    dst->trace_refused += src->trace_refused;
    if (src->duration_s > dst->duration_s)
        dst->duration_s = src->duration_s;
}

uint64_t bench_results_ops(const struct bench_results *r)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        n += r->lat[i].count;
    return n;
}

uint64_t bench_results_errors(const struct bench_results *r)
{
    uint64_t n = r->verify_failures;
    for (unsigned i = 0; i < RKV_STATUS_COUNT; i++)
        n += r->errors[i];
    return n;
}

double bench_hit_rate(uint64_t hits, uint64_t misses)
{
    return hits + misses ? (double)hits / (double)(hits + misses) : -1.0;
}

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

double bench_mean_depth(const struct bench_config *cfg, const struct bench_results *r)
{
    double in_flight_ns = 0;
    if (cfg->rate > 0 || r->duration_s <= 0)
        return 0;
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        in_flight_ns += (double)r->lat[i].sum;
    return in_flight_ns / (r->duration_s * 1e9 * cfg->threads * cfg->processes);
}

enum bench_window_mode bench_window_mode(const struct bench_config *cfg)
{
    if (cfg->window == 1)
        return BENCH_WINDOW_SINGLE;
    /* the memcached text protocol pipelines each batch over its connections */
    /* a trace is replayed in batches of successive lines */
    return cfg->lockstep || cfg->rate > 0 || cfg->protocol == BENCH_PROTO_MEMCACHE ||
                   cfg->trace_path != NULL
               ? BENCH_WINDOW_LOCKSTEP
               : BENCH_WINDOW_PIPELINED;
}

const char *bench_window_mode_name(enum bench_window_mode m)
{
    static const char *const names[] = { "single", "pipelined", "lockstep" };
    return names[m];
}

void bench_ratios_of(const struct rkv_counters *c, struct bench_ratios *out)
{
    uint64_t requests = c->gets + c->puts + c->deletes + c->other_rpcs;
    out->reads_per_get = ratio(c->reads, c->gets);
    out->round_trips_per_get = ratio(c->read_round_trips, c->gets);
    out->doorbells_per_request = ratio(c->doorbells, requests);
    out->inline_share = ratio(c->inline_sends, c->sends);
    out->cache_hits_per_get = ratio(c->cache_hits, c->gets);
    out->forwards_per_get = ratio(c->forwards, c->gets);
}

const char *bench_status_id(rkv_status s)
{
    return rkv_status_name(s);
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

bool bench_rate_reached(const struct bench_config *cfg, const struct bench_results *r,
                        double *achieved)
{
    *achieved = r->duration_s > 0 ? (double)r->sent / r->duration_s : 0.0;
    return r->missed == 0 && *achieved >= cfg->rate * (1.0 - BENCH_RATE_TOLERANCE);
}

static void text_open_loop(FILE *out, const struct bench_config *cfg, const struct bench_results *r)
{
    double achieved;
    bool reached = bench_rate_reached(cfg, r, &achieved);
    fprintf(out,
            "Open loop: target %.0f ops/s (%s arrivals), achieved %.1f ops/s (%.1f%%); "
            "latency counted from each operation's intended send time\n",
            cfg->rate, bench_arrival_name(cfg->arrival), achieved,
            cfg->rate > 0 ? achieved / cfg->rate * 100 : 0);
    fprintf(out,
            "           sends were up to %.3f ms late; %llu operations due before the end "
            "were never sent\n",
            (double)r->max_send_lag_ns / 1e6, (unsigned long long)r->missed);
    if (!reached)
        fprintf(out,
                "TARGET RATE NOT REACHED: %.1f%% short of %.0f ops/s. The server or this client "
                "could not keep up; the latencies above include the queueing that caused. Lower "
                "--rate, or add --threads / --processes.\n",
                (1.0 - achieved / cfg->rate) * 100, cfg->rate);
}

/* ---- text ---- */

static void text_row(FILE *out, const char *label, const struct histogram *h, double secs,
                     const char *hits, const char *misses)
{
    fprintf(out, "%-7s %12.1f %12llu %10s %10s", label, secs > 0 ? (double)h->count / secs : 0.0,
            (unsigned long long)h->count, hits, misses);
    if (h->count == 0) {
        fprintf(out, " %9s %9s %9s %9s %9s %9s\n", "-", "-", "-", "-", "-", "-");
        return;
    }
    fprintf(out, " %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", us(h->min), us(hist_percentile(h, 50)),
            us(hist_percentile(h, 90)), us(hist_percentile(h, 99)), us(hist_percentile(h, 99.9)),
            us(h->max));
}

/* The cache workload's lines: the hit rate, overall and by interval, and
 * what the trace replayed. */
static void text_cache(FILE *out, const struct bench_config *cfg, const struct bench_results *r,
                       const struct bench_series *series)
{
    double hr = bench_hit_rate(r->get_hits, r->get_misses);
    if (hr < 0)
        fprintf(out, "Cache: hit rate - (no GETs)");
    else
        fprintf(out, "Cache: hit rate %.2f%% (%llu hits / %llu GETs)", hr * 100,
                (unsigned long long)r->get_hits, (unsigned long long)(r->get_hits + r->get_misses));
    if (cfg->fill_on_miss)
        fprintf(out, "; %llu misses filled with a SET", (unsigned long long)r->fills);
    fputc('\n', out);
    size_t shown = 0, n = 0;
    double lo = 2, hi = -1;
    for (size_t i = 0; series != NULL && i < series->count; i++) {
        double h = bench_hit_rate(series->rows[i].get_hits, series->rows[i].get_misses);
        if (h < 0)
            continue;
        n++;
        lo = h < lo ? h : lo;
        hi = h > hi ? h : hi;
    }
    if (n > 0) {
        fprintf(out, "       by interval (%zu): min %.1f%%, max %.1f%%;", n, lo * 100, hi * 100);
        for (size_t i = 0; i < series->count && shown < 12; i++) {
            double h = bench_hit_rate(series->rows[i].get_hits, series->rows[i].get_misses);
            if (h < 0)
                continue;
            fprintf(out, " %.1fs %.1f%%", series->rows[i].end_s, h * 100);
            shown++;
        }
        fputs(n > shown ? " ...\n" : "\n", out);
    }
    if (cfg->trace_path == NULL)
        return;
    uint64_t replayed = 0;
    for (unsigned i = 0; i < TRACE_OP_COUNT; i++)
        replayed += r->trace_ops[i];
    fprintf(out, "Trace: %s: %llu lines replayed; skipped: %llu (key or value too large)",
            cfg->trace_path, (unsigned long long)replayed, (unsigned long long)r->trace_skipped);
    if (r->trace_refused)
        fprintf(out, "; %llu writes refused by the server as too large",
                (unsigned long long)r->trace_refused);
    fputc('\n', out);
    for (unsigned i = 0; i < TRACE_OP_COUNT; i++)
        if (r->trace_ops[i] > 0)
            fprintf(out, "       %-8s %10llu  ok %llu, missed %llu\n", trace_op_name(i),
                    (unsigned long long)r->trace_ops[i], (unsigned long long)r->trace_ok[i],
                    (unsigned long long)r->trace_missed[i]);
}

void bench_report_text(FILE *out, const struct bench_config *cfg, const struct bench_results *r)
{
    bench_report_text_series(out, cfg, r, NULL);
}

void bench_report_text_series(FILE *out, const struct bench_config *cfg,
                              const struct bench_results *r, const struct bench_series *series)
{
    char dist[32];
    struct bench_mix mix;
    struct bench_ratios q;
    bench_mix_of(cfg, &mix);
    bench_ratios_of(&r->counters, &q);

    fprintf(out, "\nrkv-bench %s: ", RKV_VERSION_STRING);
    if (cfg->processes > 1)
        fprintf(out, "%u processes x ", cfg->processes);
    fprintf(out, "%u thread%s x window %u%s, %s loop", cfg->threads, cfg->threads == 1 ? "" : "s",
            cfg->window,
            bench_window_mode(cfg) == BENCH_WINDOW_PIPELINED  ? " (pipelined)"
            : bench_window_mode(cfg) == BENCH_WINDOW_LOCKSTEP ? " (lockstep batches)"
                                                              : "",
            cfg->rate > 0 ? "open" : "closed");
    if (cfg->rate > 0)
        fprintf(out, " at %.0f ops/s %s", cfg->rate, bench_arrival_name(cfg->arrival));
    fprintf(out, ", %u server%s: %s\n", cfg->server_count, cfg->server_count == 1 ? "" : "s",
            cfg->servers);
    if (cfg->trace_path != NULL) {
        fprintf(out, "trace %s, keys and values as the trace gives them%s", cfg->trace_path,
                cfg->fill_on_miss ? ", misses filled" : "");
        goto mixed;
    }
    fprintf(out, "keys %llu x %u", (unsigned long long)cfg->keys, cfg->key_size.min);
    if (cfg->key_size.max != cfg->key_size.min)
        fprintf(out, "-%u", cfg->key_size.max);
    fprintf(out, " B, values %u", cfg->value_size.min);
    if (cfg->value_size.max != cfg->value_size.min)
        fprintf(out, "-%u", cfg->value_size.max);
    fprintf(out, " B, %s", bench_dist_string(cfg, dist, sizeof dist));
    if (cfg->workload)
        fprintf(out, ", YCSB workload %c", cfg->workload);
    fprintf(out, "; mix get %.0f%%", mix.get * 100);
    if (mix.put > 0)
        fprintf(out, " put %.0f%%", mix.put * 100);
    if (mix.insert > 0)
        fprintf(out, " insert %.0f%%", mix.insert * 100);
    if (mix.rmw > 0)
        fprintf(out, " rmw %.0f%%", mix.rmw * 100);
    if (mix.del > 0)
        fprintf(out, " delete %.0f%%", mix.del * 100);
    if (cfg->fill_on_miss)
        fprintf(out, ", misses filled");
mixed:
    fprintf(out, "; %.3f s measured%s", r->duration_s, cfg->verify ? ", values verified" : "");
    if (cfg->clock_name != NULL)
        fprintf(out, ", timed by %s", cfg->clock_name);
    fputs("\n\n", out);

    fprintf(out, "%-7s %12s %12s %10s %10s %9s %9s %9s %9s %9s %9s\n", "Type", "Ops/sec", "Ops",
            "Hits", "Misses", "Min(us)", "p50(us)", "p90(us)", "p99(us)", "p99.9(us)", "Max(us)");
    struct histogram *total = malloc(sizeof *total);
    if (total != NULL)
        hist_init(total);
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++) {
        const struct histogram *h = &r->lat[i];
        if (total != NULL)
            hist_merge(total, h);
        if (h->count == 0 && i != BENCH_OP_GET)
            continue;
        char hits[24] = "-", misses[24] = "-";
        if (i == BENCH_OP_GET) {
            snprintf(hits, sizeof hits, "%llu", (unsigned long long)r->get_hits);
            snprintf(misses, sizeof misses, "%llu", (unsigned long long)r->get_misses);
        } else if (i == BENCH_OP_DELETE) {
            snprintf(misses, sizeof misses, "%llu", (unsigned long long)r->delete_misses);
        }
        text_row(out, op_labels[i], h, r->duration_s, hits, misses);
    }
    if (total != NULL) {
        text_row(out, "TOTAL", total, r->duration_s, "-", "-");
        free(total);
    }

    uint64_t errors = bench_results_errors(r);
    if (errors == 0) {
        fprintf(out, "\nErrors: none");
    } else {
        fprintf(out, "\nErrors: %llu (", (unsigned long long)errors);
        const char *sep = "";
        for (unsigned s = 0; s < RKV_STATUS_COUNT; s++) {
            if (r->errors[s] == 0)
                continue;
            fprintf(out, "%s%s %llu", sep, bench_status_id((rkv_status)s),
                    (unsigned long long)r->errors[s]);
            sep = ", ";
        }
        if (r->verify_failures)
            fprintf(out, "%sverification failed %llu", sep, (unsigned long long)r->verify_failures);
        fprintf(out, ")");
    }
    if (r->rmw_conflicts)
        fprintf(out, "; RMW CAS conflicts retried: %llu", (unsigned long long)r->rmw_conflicts);
    fprintf(out, "\n");
    if (cfg->rate <= 0)
        fprintf(out, "Window: mean in-flight depth %.2f of %u per thread\n",
                bench_mean_depth(cfg, r), cfg->window);

    if (cfg->rate > 0)
        text_open_loop(out, cfg, r);
    if (cfg->fill_on_miss || cfg->trace_path != NULL)
        text_cache(out, cfg, r, series);
    const struct rkv_counters *c = &r->counters;
    if (cfg->protocol == BENCH_PROTO_MEMCACHE) {
        fprintf(out,
                "Transport: memcached text protocol over %u TCP connection%s, %.3f send() "
                "calls/request\n",
                cfg->connections, cfg->connections == 1 ? "" : "s", q.doorbells_per_request);
        return;
    }
    fprintf(out,
            "Transport: %.2f READs/GET, %.2f round trips/GET, %.3f doorbells/request, "
            "%.1f%% sends inline\n",
            q.reads_per_get, q.round_trips_per_get, q.doorbells_per_request, q.inline_share * 100);
    fprintf(out,
            "           %llu verification retries, %llu location-cache hits (%.1f%% of GETs), "
            "%llu reconnects\n",
            (unsigned long long)c->verify_retries, (unsigned long long)c->cache_hits,
            q.cache_hits_per_get * 100, (unsigned long long)c->reconnects);
    fprintf(out, "           %llu forwards followed (%.3f/GET), %llu stale cached locations\n",
            (unsigned long long)c->forwards, q.forwards_per_get, (unsigned long long)c->cache_stale);
}

/* ---- JSON ---- */

/* ops, rate and latency fields of one histogram, in an open object. */
static void json_latency(struct json_writer *w, const struct histogram *h, double secs)
{
    json_u64(w, "ops", h->count);
    json_double(w, "ops_per_sec", secs > 0 ? (double)h->count / secs : 0.0);
    if (h->count == 0) {
        /* No latency without operations: null, never a made-up 0. */
        static const char *const none[] = { "mean_us", "min_us",  "p50_us", "p90_us",
                                            "p99_us",  "p999_us", "max_us" };
        for (size_t i = 0; i < RKV_ARRAY_SIZE(none); i++)
            json_double(w, none[i], (double)NAN);
    } else {
        json_double(w, "mean_us", hist_mean(h) / 1000.0);
        json_double(w, "min_us", us(h->min));
        json_double(w, "p50_us", us(hist_percentile(h, 50)));
        json_double(w, "p90_us", us(hist_percentile(h, 90)));
        json_double(w, "p99_us", us(hist_percentile(h, 99)));
        json_double(w, "p999_us", us(hist_percentile(h, 99.9)));
        json_double(w, "max_us", us(h->max));
    }
}

/* The histogram itself, exactly: [highest value of the bucket in ns, count]
 * for every non-empty bucket (histogram.h's layout, HdrHistogram's). */
static void json_distribution(struct json_writer *w, const struct histogram *h)
{
    json_array_begin(w, "distribution");
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        if (h->buckets[i] == 0)
            continue;
        uint64_t lo, hi;
        hist_bucket_range(i, &lo, &hi);
        json_array_begin(w, NULL);
        json_u64(w, NULL, hi);
        json_u64(w, NULL, h->buckets[i]);
        json_array_end(w);
    }
    json_array_end(w);
}

/* The hit rate, or NaN (null in JSON) without GETs. */
static double hit_rate_or_nan(uint64_t hits, uint64_t misses)
{
    double hr = bench_hit_rate(hits, misses);
    return hr < 0 ? (double)NAN : hr;
}

/* "cache": the hit rate, the fills and (--trace) what was replayed. */
static void json_cache(struct json_writer *w, const struct bench_config *cfg,
                       const struct bench_results *r)
{
    json_object_begin(w, "cache");
    json_bool(w, "fill_on_miss", cfg->fill_on_miss);
    json_double(w, "hit_rate", hit_rate_or_nan(r->get_hits, r->get_misses));
    json_u64(w, "fills", r->fills);
    if (cfg->trace_path == NULL) {
        json_string(w, "trace", NULL);
    } else {
        uint64_t replayed = 0;
        for (unsigned i = 0; i < TRACE_OP_COUNT; i++)
            replayed += r->trace_ops[i];
        json_object_begin(w, "trace");
        json_string(w, "file", cfg->trace_path);
        json_u64(w, "replayed", replayed);
        json_u64(w, "skipped", r->trace_skipped);
        json_u64(w, "refused_too_large", r->trace_refused);
        json_object_begin(w, "ops");
        for (unsigned i = 0; i < TRACE_OP_COUNT; i++) {
            if (r->trace_ops[i] == 0)
                continue;
            json_object_begin(w, trace_op_name(i));
            json_u64(w, "count", r->trace_ops[i]);
            json_u64(w, "ok", r->trace_ok[i]);
            json_u64(w, "missed", r->trace_missed[i]);
            json_object_end(w);
        }
        json_object_end(w);
        json_object_end(w);
    }
    json_object_end(w);
}

static void json_series(struct json_writer *w, const struct bench_series *s)
{
    json_array_begin(w, "timeseries");
    for (size_t i = 0; s != NULL && i < s->count; i++) {
        const struct bench_row *row = &s->rows[i];
        json_object_begin(w, NULL);
        json_double(w, "t_s", row->end_s);
        json_double(w, "interval_s", row->length_s);
        json_double(w, "hit_rate", hit_rate_or_nan(row->get_hits, row->get_misses));
        for (unsigned op = 0; op <= BENCH_OP_COUNT; op++) {
            const struct bench_row_op *o = &row->op[op];
            if (op < BENCH_OP_COUNT && o->ops == 0 && o->errors == 0)
                continue;
            json_object_begin(w, bench_op_name(op));
            json_double(w, "ops_per_sec", bench_row_rate(row, op));
            json_double(w, "p50_us", o->ops ? us(o->p50_ns) : (double)NAN);
            json_double(w, "p99_us", o->ops ? us(o->p99_ns) : (double)NAN);
            json_u64(w, "errors", o->errors);
            json_object_end(w);
        }
        json_object_end(w);
    }
    json_array_end(w);
}

static void json_op(struct json_writer *w, const struct bench_results *r, enum bench_op op)
{
    json_object_begin(w, op_names[op]);
    json_latency(w, &r->lat[op], r->duration_s);
    json_distribution(w, &r->lat[op]);
    json_u64(w, "errors", r->op_errors[op]);
    if (op == BENCH_OP_GET) {
        json_u64(w, "hits", r->get_hits);
        json_u64(w, "misses", r->get_misses);
        json_double(w, "hit_rate", hit_rate_or_nan(r->get_hits, r->get_misses));
    } else if (op == BENCH_OP_DELETE) {
        json_u64(w, "misses", r->delete_misses);
    } else if (op == BENCH_OP_RMW) {
        json_u64(w, "conflicts", r->rmw_conflicts);
    }
    json_object_end(w);
}

static void json_counters(struct json_writer *w, const struct rkv_counters *c)
{
    json_object_begin(w, "counters");
    json_u64(w, "gets", c->gets);
    json_u64(w, "get_hits", c->get_hits);
    json_u64(w, "get_misses", c->get_misses);
    json_u64(w, "puts", c->puts);
    json_u64(w, "deletes", c->deletes);
    json_u64(w, "other_rpcs", c->other_rpcs);
    json_u64(w, "reads", c->reads);
    json_u64(w, "read_round_trips", c->read_round_trips);
    json_u64(w, "doorbells", c->doorbells);
    json_u64(w, "sends", c->sends);
    json_u64(w, "inline_sends", c->inline_sends);
    json_u64(w, "verify_retries", c->verify_retries);
    json_u64(w, "cache_hits", c->cache_hits);
    json_u64(w, "reconnects", c->reconnects);
    json_u64(w, "forwards", c->forwards);
    json_u64(w, "cache_stale", c->cache_stale);
    json_u64(w, "read_lanes", c->read_lanes);
    json_u64(w, "read_lanes_td", c->read_lanes_td);
    json_object_end(w);
}

int bench_report_json(FILE *out, const struct bench_config *cfg, const struct bench_results *r)
{
    return bench_report_json_series(out, cfg, r, NULL);
}

int bench_report_json_series(FILE *out, const struct bench_config *cfg,
                             const struct bench_results *r, const struct bench_series *series)
{
    struct json_writer w;
    struct bench_mix mix;
    struct bench_ratios q;
    char dist[32];
    char workload[2] = { cfg->workload, '\0' };
    uint64_t ops = bench_results_ops(r);

    bench_mix_of(cfg, &mix);
    bench_ratios_of(&r->counters, &q);
    json_init(&w, out);
    json_object_begin(&w, NULL);
    json_string(&w, "tool", "rkv-bench");
    json_string(&w, "version", RKV_VERSION_STRING);

    json_array_begin(&w, "servers");
    for (const char *p = cfg->servers; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        json_string_n(&w, NULL, p, n);
        p = comma ? comma + 1 : NULL;
    }
    json_array_end(&w);
    json_string(&w, "protocol", cfg->protocol == BENCH_PROTO_MEMCACHE ? "memcache" : "rkv");
    if (cfg->protocol == BENCH_PROTO_MEMCACHE)
        json_u64(&w, "connections", cfg->connections);
    json_u64(&w, "processes", cfg->processes);
    json_u64(&w, "threads", cfg->threads);
    json_u64(&w, "window", cfg->window);
    json_string(&w, "window_mode", bench_window_mode_name(bench_window_mode(cfg)));
    json_string(&w, "clock", cfg->clock_name);
    if (cfg->rate <= 0)
        json_double(&w, "mean_in_flight", bench_mean_depth(cfg, r));
    else
        json_string(&w, "mean_in_flight", NULL);
    json_double(&w, "duration_s", r->duration_s);
    json_u64(&w, "ops", ops);
    json_double(&w, "ops_per_sec", r->duration_s > 0 ? (double)ops / r->duration_s : 0.0);
    json_u64(&w, "errors", bench_results_errors(r));
    json_object_begin(&w, "errors_by_status");
    for (unsigned s = 0; s < RKV_STATUS_COUNT; s++)
        if (r->errors[s] != 0)
            json_u64(&w, bench_status_id((rkv_status)s), r->errors[s]);
    json_object_end(&w);
    json_u64(&w, "verify_failures", r->verify_failures);

    json_u64(&w, "keys", cfg->keys);
    json_u64(&w, "key_size", cfg->key_size.min);
    json_u64(&w, "key_size_max", cfg->key_size.max);
    json_u64(&w, "value_size", cfg->value_size.min);
    json_u64(&w, "value_size_max", cfg->value_size.max);
    json_string(&w, "dist", bench_dist_string(cfg, dist, sizeof dist));
    json_string(&w, "workload", cfg->workload ? workload : NULL);
    json_object_begin(&w, "mix");
    json_double(&w, "get", mix.get);
    json_double(&w, "put", mix.put);
    json_double(&w, "insert", mix.insert);
    json_double(&w, "rmw", mix.rmw);
    json_double(&w, "delete", mix.del);
    json_object_end(&w);
    json_bool(&w, "preload", cfg->preload);
    json_bool(&w, "verify", cfg->verify);
    json_u64(&w, "seed", cfg->seed);
    json_string(&w, "loop", cfg->rate > 0 ? "open" : "closed");
    if (cfg->rate > 0) {
        double achieved;
        bool reached = bench_rate_reached(cfg, r, &achieved);
        json_object_begin(&w, "open_loop");
        json_double(&w, "target_ops_per_sec", cfg->rate);
        json_string(&w, "arrival", bench_arrival_name(cfg->arrival));
        json_double(&w, "achieved_ops_per_sec", achieved);
        json_bool(&w, "rate_reached", reached);
        json_u64(&w, "sent", r->sent);
        json_u64(&w, "missed", r->missed);
        json_double(&w, "max_send_lag_us", us(r->max_send_lag_ns));
        json_object_end(&w);
    } else {
        json_string(&w, "open_loop", NULL);
    }

    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        json_op(&w, r, (enum bench_op)i);
    struct histogram *all = malloc(sizeof *all);
    if (all == NULL)
        return -1;
    hist_init(all);
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        hist_merge(all, &r->lat[i]);
    json_object_begin(&w, "total");
    json_latency(&w, all, r->duration_s);
    json_object_end(&w);
    free(all);

    json_double(&w, "reads_per_get", q.reads_per_get);
    json_double(&w, "round_trips_per_get", q.round_trips_per_get);
    json_double(&w, "doorbells_per_request", q.doorbells_per_request);
    json_double(&w, "inline_share", q.inline_share);
    json_u64(&w, "verify_retries", r->counters.verify_retries);
    json_u64(&w, "cache_hits", r->counters.cache_hits);
    json_double(&w, "cache_hits_per_get", q.cache_hits_per_get);
    json_u64(&w, "forwards", r->counters.forwards);
    json_double(&w, "forwards_per_get", q.forwards_per_get);
    json_u64(&w, "reconnects", r->counters.reconnects);
    json_counters(&w, &r->counters);
    json_cache(&w, cfg, r);
    json_series(&w, series);
    json_object_end(&w);
    return json_finish(&w);
}
