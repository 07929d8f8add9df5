/* histogram.h — log-linear latency histogram for rkv-bench.
 *
 * HdrHistogram's layout with a fixed precision: values (nanoseconds) below
 * 256 are counted exactly; above that, every power of two is split into 128
 * equal sub-buckets, so any recorded value is known to within 1/128 (0.78 %).
 * The range reaches 2^37 ns (about 137 s); larger values are counted in the
 * top bucket and still show up exactly as the maximum.
 *
 * This is exactly HdrHistogram's Histogram(1, 2^37 - 1, 2): two significant
 * digits give 256 sub-buckets (the upper 128 of each power of two after the
 * first), 30 buckets cover the range, and bucket index i here is HdrHistogram's
 * counts-array index i for every value. So its percentile-distribution text
 * (hdr_text.h) is the one HdrHistogram would print for the same values, and
 * its tools (the plotter, HistogramLogAnalyzer) read it.
 *
 * One histogram is written by one thread. The counters are updated with
 * relaxed atomic stores so that another thread (the progress reporter) may
 * read a histogram while it is being written, seeing a slightly stale but
 * never torn view. Recording is allocation-free and branch-light: it sits on
 * the benchmark's hot path.
 */
#ifndef RKV_BENCH_HISTOGRAM_H
#define RKV_BENCH_HISTOGRAM_H

#include <stdint.h>

#define HIST_SUB_BITS  7u /* 128 sub-buckets per power of two */
#define HIST_SUB_COUNT (1u << HIST_SUB_BITS)
#define HIST_MAX_BITS  37u /* values up to 2^37 - 1 ns */
#define HIST_MAX_VALUE ((UINT64_C(1) << HIST_MAX_BITS) - 1)
/* Exact region 0..2*SUB_COUNT-1, then SUB_COUNT buckets per further power of two. */
#define HIST_BUCKETS ((HIST_MAX_BITS - HIST_SUB_BITS) * HIST_SUB_COUNT + HIST_SUB_COUNT)
/* The same layout in HdrHistogram's terms. */
#define HIST_HDR_SIGNIFICANT_DIGITS 2u
#define HIST_HDR_SUB_BUCKETS        (2u * HIST_SUB_COUNT)           /* 256 */
#define HIST_HDR_BUCKETS            (HIST_MAX_BITS - HIST_SUB_BITS) /* 30 */

struct histogram {
    uint64_t count;                 /* values recorded */
    uint64_t sum;                   /* their sum, for the mean (saturating) */
    uint64_t min;                   /* smallest value recorded, UINT64_MAX when empty */
    uint64_t max;                   /* largest value recorded, 0 when empty */
    uint64_t buckets[HIST_BUCKETS]; /* counts per bucket, see hist_bucket_of() */
};

void hist_init(struct histogram *h);

/* Bucket index of a value, and the range of values [lo, hi] that bucket holds. */
unsigned hist_bucket_of(uint64_t value);
void hist_bucket_range(unsigned bucket, uint64_t *lo, uint64_t *hi);

/* Count `value` once (writer thread only). */
void hist_record(struct histogram *h, uint64_t value);
/* Count `value` n times (writer thread only). */
void hist_record_n(struct histogram *h, uint64_t value, uint64_t n);

/* dst += src. src may be written concurrently by its own thread: the merge
 * then sees each counter as it was at some recent instant, and takes the
 * count from the buckets it saw so that percentiles stay self-consistent. */
void hist_merge(struct histogram *dst, const struct histogram *src);

/* out = now - before, where `before` is an earlier snapshot of the same
 * (growing) histogram: the values recorded in between. min and max become
 * the edges of the lowest and highest non-empty buckets of the difference;
 * the sum is the difference of the sums. */
void hist_diff(struct histogram *out, const struct histogram *now, const struct histogram *before);

/* The value at percentile p (0..100): the smallest recorded value v such that
 * at least p % of all values are <= v, reported as the highest value of v's
 * bucket clamped to [min, max] (exact below 256 ns and at p = 100).
 * 0 when the histogram is empty. */
uint64_t hist_percentile(const struct histogram *h, double p);

/* Mean of recorded values, 0 when empty. */
double hist_mean(const struct histogram *h);

#endif
