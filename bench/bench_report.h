/* bench_report.h — rkv-bench's results and their text and JSON reports.
 *
 * The worker threads fill one bench_results each; main merges them and hands
 * the sum to the two printers. Kept apart from the threads and from librkv's
 * functions (only rkv.h's types are used) so the tests can check the reports
 * on made-up results. docs/bench.md documents every JSON field.
 */
#ifndef RKV_BENCH_REPORT_H
#define RKV_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_args.h"
#include "histogram.h"
#include "rkv.h"
#include "trace.h"

/* Operation kinds with their own latency histogram. An insert (workload D)
 * is a PUT; a read-modify-write (F) is timed as a whole, get to put. */
enum bench_op { BENCH_OP_GET, BENCH_OP_PUT, BENCH_OP_DELETE, BENCH_OP_RMW, BENCH_OP_COUNT };

struct bench_results {
    struct histogram lat[BENCH_OP_COUNT]; /* ns per completed op (incl. misses, not errors) */
    uint64_t get_hits, get_misses;        /* GETs (and mget ops) that found / missed their key */
    uint64_t delete_misses;               /* DELETEs of absent keys (not errors) */
    uint64_t rmw_conflicts;               /* RMW attempts redone after a CAS race */
    uint64_t errors[RKV_STATUS_COUNT];    /* failed ops by status (OK and misses never counted) */
    uint64_t op_errors[BENCH_OP_COUNT];   /* the same failures by operation kind */
    uint64_t verify_failures;             /* --verify: GETs that returned a foreign or bad value */
    struct rkv_counters counters;         /* rkv_get_counters summed over the threads */
    double duration_s;                    /* measured time */
    /* Open loop (--rate) only, all 0 in a closed-loop run: */
    uint64_t sent;            /* operations sent while measuring (completed or failed) */
    uint64_t missed;          /* intended before the end but never sent (drain cut short) */
    uint64_t max_send_lag_ns; /* most an operation went out after its intended time */
    /* The cache workload (--fill-on-miss, --trace): */
    uint64_t fills;                        /* SETs that followed a GET miss (also PUTs above) */
    uint64_t trace_ops[TRACE_OP_COUNT];    /* --trace: lines replayed, by operation */
    uint64_t trace_ok[TRACE_OP_COUNT];     /* ... that found their key or stored */
    uint64_t trace_missed[TRACE_OP_COUNT]; /* ... that did not (absent, exists, not stored,
                                              CAS mismatch, not a number): not errors */
    uint64_t trace_skipped;                /* lines not sent: key or value over the limits */
    uint64_t trace_refused;                /* writes the server refused as too large */
};

void bench_results_init(struct bench_results *r);
/* dst += src (histograms merged, counters summed). */
void bench_results_merge(struct bench_results *dst, const struct bench_results *src);

/* Total ops of all kinds that completed (latency recorded). */
uint64_t bench_results_ops(const struct bench_results *r);
/* Failed operations, verification failures included. */
uint64_t bench_results_errors(const struct bench_results *r);

/* Mean in-flight depth a thread reached, closed loop: by Little's law, the
 * latencies recorded (each op's time in flight) summed and divided by the
 * measured time of all threads. 0 for the open loop (its latencies include
 * the wait before sending) and without a measured time. */
double bench_mean_depth(const struct bench_config *cfg, const struct bench_results *r);

/* How a run keeps its window: one op at a time (window 1), a steady window
 * through rkv_submit (closed loop), or batches through rkv_mget/rkv_mput
 * (--lockstep, and the open loop). */
enum bench_window_mode { BENCH_WINDOW_SINGLE, BENCH_WINDOW_PIPELINED, BENCH_WINDOW_LOCKSTEP };
enum bench_window_mode bench_window_mode(const struct bench_config *cfg);
/* "single", "pipelined", "lockstep" (JSON window_mode). */
const char *bench_window_mode_name(enum bench_window_mode m);

/* Transport counters per operation, as reported. Denominators that are zero
 * give 0. */
struct bench_ratios {
    double reads_per_get;         /* one-sided READs / GETs */
    double round_trips_per_get;   /* READ round trips / GETs */
    double doorbells_per_request; /* doorbells / (GETs + PUTs + DELETEs + other RPCs) */
    double inline_share;          /* inline sends / sends */
    double cache_hits_per_get;    /* location-cache hits / GETs */
    double forwards_per_get;      /* forwards followed / GETs */
};
void bench_ratios_of(const struct rkv_counters *c, struct bench_ratios *out);

/* Stable lower-case identifier of a status for reports ("timeout"). */
const char *bench_status_id(rkv_status s);

/* Open loop: the rate achieved (operations sent per measured second) and
 * whether it reached the target (within BENCH_RATE_TOLERANCE, nothing missed). */
#define BENCH_RATE_TOLERANCE 0.01
bool bench_rate_reached(const struct bench_config *cfg, const struct bench_results *r,
                        double *achieved);

/* hits / (hits + misses) of the GETs; -1 when there were none. */
double bench_hit_rate(uint64_t hits, uint64_t misses);

void bench_report_text(FILE *out, const struct bench_config *cfg, const struct bench_results *r);
/* The same with the hit rate per interval of series (may be NULL). */
struct bench_series;
void bench_report_text_series(FILE *out, const struct bench_config *cfg,
                              const struct bench_results *r, const struct bench_series *series);
/* 0, or -1 when the JSON could not be written. */
int bench_report_json(FILE *out, const struct bench_config *cfg, const struct bench_results *r);
/* The same with the per-second series (bench_timeseries.h) as "timeseries"
 * (an empty array when series is NULL). */
int bench_report_json_series(FILE *out, const struct bench_config *cfg,
                             const struct bench_results *r, const struct bench_series *series);

#endif
