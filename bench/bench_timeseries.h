/* bench_timeseries.h — rkv-bench's per-second view of a run.
 *
 * Once a second the supervisor snapshots every thread's histograms and
 * takes the difference from the previous snapshot: a tick, holding the exact
 * latency distribution and error count of each operation kind in that
 * second. Ticks of several client processes (--processes) merge exactly,
 * like the histograms they hold. A series keeps one small row per tick —
 * ops/s, p50, p99, errors per kind and for all kinds together — for the
 * --timeseries CSV, the JSON report and the HTML charts.
 */
#ifndef RKV_BENCH_TIMESERIES_H
#define RKV_BENCH_TIMESERIES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_report.h"
#include "histogram.h"

/* What one interval recorded (large: allocate it). */
struct bench_tick {
    double end_s;                         /* end of the interval, seconds since measuring began */
    double length_s;                      /* its length */
    uint64_t errors[BENCH_OP_COUNT];      /* operations that failed in it */
    uint64_t get_hits, get_misses;        /* GETs that found / missed their key in it */
    struct histogram lat[BENCH_OP_COUNT]; /* latencies completed in it */
};

void bench_tick_init(struct bench_tick *t);
/* dst += src: histograms and errors summed, the later end and longer length kept. */
void bench_tick_merge(struct bench_tick *dst, const struct bench_tick *src);

/* One kind (or all, at BENCH_OP_COUNT) in one row. */
struct bench_row_op {
    uint64_t ops;    /* completed */
    uint64_t errors; /* failed */
    uint64_t p50_ns; /* 0 when ops == 0 */
    uint64_t p99_ns;
};

struct bench_row {
    double end_s, length_s;
    uint64_t get_hits, get_misses;              /* the GETs' hit rate in the interval */
    struct bench_row_op op[BENCH_OP_COUNT + 1]; /* [BENCH_OP_COUNT] = all kinds */
};

struct bench_series {
    struct bench_row *rows; /* owned */
    size_t count, cap;
};

/* Appends a row for tick t (scratch: a histogram's worth of memory for the
 * all-kinds percentiles). 0, or -1 when out of memory. */
int bench_series_add(struct bench_series *s, const struct bench_tick *t, struct histogram *scratch);
void bench_series_free(struct bench_series *s);

/* Operations per second of a row's entry. */
double bench_row_rate(const struct bench_row *r, unsigned op);

/* The CSV: a header, then one line per row:
 * time_s,interval_s, then for get, put, delete, rmw and total:
 * <kind>_ops_per_s,<kind>_p50_us,<kind>_p99_us,<kind>_errors
 * (percentiles empty where the kind had no operations), then
 * get_hit_rate (hits / GETs, 0..1; empty without GETs). 0, or -1 on a
 * write error. */
int bench_series_write_csv(FILE *out, const struct bench_series *s);

/* Stable names of the kinds as reports use them: "get" .. "rmw", "total". */
const char *bench_op_name(unsigned op);

#endif
