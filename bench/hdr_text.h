/* hdr_text.h — HdrHistogram's percentile-distribution text (".hgrm").
 *
 * What HdrHistogram's outputPercentileDistribution(out, ticks, scale) prints,
 * byte for byte, for a struct histogram (whose layout is HdrHistogram's,
 * histogram.h):
 *
 *        Value     Percentile TotalCount 1/(1-Percentile)
 *
 *        23.17 0.000000000000          1           1.00
 *        ...
 *    201818.11 1.000000000000       6013
 *   #[Mean    =      6880.98, StdDeviation   =     33216.21]
 *   #[Max     =    201818.11, Total count    =         6013]
 *   #[Buckets =           30, SubBuckets     =          256]
 *
 * Rows come from HdrHistogram's percentile iterator: the percentile level
 * starts at 0 and advances by 100 / (ticks x 2^(floor(log2(100 / (100 -
 * level))) + 1)), i.e. `ticks` rows per halving of the distance to 100 %;
 * a row is printed at the first bucket whose cumulative share reaches the
 * level, with the bucket's highest equivalent value, the level (as a
 * fraction), the count up to and including that bucket, and 1/(1-level);
 * the last row is level 1.0 at the largest value, without the last column.
 * Values are divided by `scale` (1000: nanoseconds become microseconds) and
 * printed with two decimals (the histogram's two significant digits; C printf
 * rounding, as HdrHistogram_c prints them), as is
 * the footer's Max (its bucket's highest equivalent value, as HdrHistogram
 * prints it). One deliberate difference: the Mean is the exact mean of the
 * recorded values (HdrHistogram averages bucket midpoints); StdDeviation
 * uses bucket midpoints as HdrHistogram does.
 *
 * The reader parses such text (ours or HdrHistogram's) back into rows, for
 * the tests and for anyone checking a file.
 */
#ifndef RKV_BENCH_HDR_TEXT_H
#define RKV_BENCH_HDR_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "histogram.h"

#define HDR_TEXT_TICKS 5u /* HdrHistogram's default percentile ticks per half distance */

/* HdrHistogram's percentile iterator over a histogram. */
struct hdr_iter {
    const struct histogram *h;
    unsigned ticks;          /* percentile ticks per half distance */
    unsigned index;          /* current bucket */
    bool fresh;              /* the current bucket's count is not yet added */
    bool reached_last;       /* the final 100 % step was taken */
    uint64_t total;          /* the histogram's count */
    uint64_t count_to_index; /* values in buckets 0..index */
    double level;            /* percentile level to iterate to next (0..100) */
    /* The step just taken: */
    uint64_t value;          /* highest equivalent value of its bucket */
    double percentile;       /* its percentile level, 0..100 */
    uint64_t count_to_value; /* values at or below `value` */
};

void hdr_iter_init(struct hdr_iter *it, const struct histogram *h, unsigned ticks);
/* Takes the next step; false when there is none. */
bool hdr_iter_next(struct hdr_iter *it);

/* Writes h as HdrHistogram's percentile distribution, values divided by
 * scale. 0, or -1 on a write error. */
int hdr_text_write(FILE *out, const struct histogram *h, double scale, unsigned ticks);

/* One row as read back. */
struct hdr_text_row {
    double value;         /* scaled value */
    double percentile;    /* fraction, 0..1 */
    uint64_t total_count; /* count at or below value */
    double inverse;       /* 1/(1-percentile); INFINITY on the last row */
};

struct hdr_text {
    struct hdr_text_row *rows; /* owned */
    size_t count;
    double mean, stddev, max; /* from the footer */
    uint64_t total;           /* footer's Total count */
    unsigned buckets, sub_buckets;
};

/* Parses the text; 0, or -1 with a message naming the line in err. */
int hdr_text_read(FILE *in, struct hdr_text *out, char *err, size_t err_len);
void hdr_text_free(struct hdr_text *t);

#endif
