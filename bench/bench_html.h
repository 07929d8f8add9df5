/* bench_html.h — rkv-bench's report as one self-contained HTML page.
 *
 * Input: one or more reports in rkv-bench's --json shape, already parsed
 * (a run's own report goes through the same path, so --html and --compare
 * draw the same page). Output: one HTML file with inline CSS and inline SVG
 * charts drawn here, no script and nothing fetched from anywhere:
 *
 *   - latency by percentile: x = 1/(1-p) on a log scale (0 %, 90 %, 99 %,
 *     99.9 % ... evenly spaced, as HdrHistogram's plots), y = latency on a
 *     log scale; one line per operation kind per run (color = run, dash =
 *     kind), computed from each report's exact "distribution" with
 *     HdrHistogram's percentile iterator (hdr_text.h);
 *   - throughput over time (all kinds, per run) and p99 over time (per kind
 *     and run), from "timeseries";
 *   - a summary table (ops/s, p50/p99/p99.9/max, errors, open-loop target
 *     and achieved rate), the runs' parameters and their transport counters
 *     (READs/GET, round trips/GET, doorbells/request, inline share ...);
 *   - each report's "note" (compare.sh uses it to say what was interpolated
 *     for memcached and Redis) printed above the charts.
 * Missing fields show as "-"; a report without a distribution or a series
 * simply has no line in that chart.
 */
#ifndef RKV_BENCH_HTML_H
#define RKV_BENCH_HTML_H

#include <stddef.h>
#include <stdio.h>

#include "json_parse.h"

#define BENCH_HTML_MAX_RUNS 16u

/* Writes the page for reports[0..n) named labels[0..n). 0, or -1 on a
 * write error. */
int bench_html_write(FILE *out, const struct json_value *const *reports, const char *const *labels,
                     size_t n);

/* Reads, parses and draws report files (--compare); labels are the reports'
 * "label" fields, else the file names without ".json". 0, or -1 with the
 * reason printed to err. */
int bench_html_compare(const char *const *paths, size_t n, const char *html_path, FILE *err);

#endif
