/* hdr_text.c — see hdr_text.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hdr_text.h"

void hdr_iter_init(struct hdr_iter *it, const struct histogram *h, unsigned ticks)
{
    memset(it, 0, sizeof *it);
    it->h = h;
    it->ticks = ticks ? ticks : HDR_TEXT_TICKS;
    it->fresh = true;
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        it->total += h->buckets[i];
}

/* HdrHistogram's PercentileIterator.incrementIterationLevel. */
static void next_level(struct hdr_iter *it)
{
    if (it->level >= 100.0)
        return;
    double halvings = floor(log(100.0 / (100.0 - it->level)) / log(2.0));
    double ticks = (double)it->ticks * pow(2.0, halvings + 1);
    it->level += 100.0 / ticks;
}

bool hdr_iter_next(struct hdr_iter *it)
{
    if (it->count_to_index >= it->total) {
        /* One more step to 100 %, at the last value. */
        if (it->reached_last || it->total == 0)
            return false;
        it->level = 100.0;
        it->reached_last = true;
    }
    const uint64_t *b = it->h->buckets;
    while (it->index < HIST_BUCKETS) {
        if (it->fresh) {
            it->count_to_index += b[it->index];
            it->fresh = false;
        }
        if (b[it->index] != 0 && 100.0 * (double)it->count_to_index / (double)it->total >= it->level) {
            uint64_t lo;
            hist_bucket_range(it->index, &lo, &it->value);
            it->percentile = it->level;
            it->count_to_value = it->count_to_index;
            next_level(it);
            return true;
        }
        it->index++;
        it->fresh = true;
    }
    return false;
}

/* HdrHistogram's getStdDeviation: bucket midpoints ("median equivalent
 * values") around the mean. */
static double stddev_of(const struct histogram *h, double mean)
{
    if (h->count == 0)
        return 0;
    double total = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        if (h->buckets[i] == 0)
            continue;
        uint64_t lo, hi;
        hist_bucket_range(i, &lo, &hi);
        double d = (double)(lo + ((hi - lo + 1) >> 1)) - mean;
        total += d * d * (double)h->buckets[i];
    }
    return sqrt(total / (double)h->count);
}

int hdr_text_write(FILE *out, const struct histogram *h, double scale, unsigned ticks)
{
    const int digits = HIST_HDR_SIGNIFICANT_DIGITS;
    struct hdr_iter it;
    fprintf(out, "%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    hdr_iter_init(&it, h, ticks);
    while (hdr_iter_next(&it)) {
        double v = (double)it.value / scale, p = it.percentile / 100.0;
        if (it.percentile != 100.0)
            fprintf(out, "%12.*f %2.12f %10llu %14.2f\n", digits, v, p,
                    (unsigned long long)it.count_to_value, 1.0 / (1.0 - p));
        else
            fprintf(out, "%12.*f %2.12f %10llu\n", digits, v, p,
                    (unsigned long long)it.count_to_value);
    }
    double mean = hist_mean(h);
    uint64_t max_hi = 0, lo;
    if (h->count > 0)
        hist_bucket_range(hist_bucket_of(h->max), &lo, &max_hi);
    fprintf(out, "#[Mean    = %12.*f, StdDeviation   = %12.*f]\n", digits, mean / scale, digits,
            stddev_of(h, mean) / scale);
    fprintf(out, "#[Max     = %12.*f, Total count    = %12llu]\n", digits, (double)max_hi / scale,
            (unsigned long long)h->count);
    fprintf(out, "#[Buckets = %12u, SubBuckets     = %12u]\n", HIST_HDR_BUCKETS,
            HIST_HDR_SUB_BUCKETS);
    return ferror(out) ? -1 : 0;
}

/* ---- reading ---- */

static bool parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0)
        return false;
    *out = v;
    return true;
}

static bool parse_count(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno != 0)
        return false;
    *out = v;
    return true;
}

/* Splits line (modified) at blanks into at most max fields; returns how many. */
static int split(char *line, char **f, int max)
{
    int n = 0;
    for (char *tok = strtok(line, " \t\r\n"); tok != NULL; tok = strtok(NULL, " \t\r\n")) {
        if (n == max)
            return max + 1;
        f[n++] = tok;
    }
    return n;
}

static bool parse_row(char *line, struct hdr_text_row *r)
{
    char *f[5];
    int n = split(line, f, 4);
    if (n != 3 && n != 4)
        return false;
    if (!parse_num(f[0], &r->value) || !parse_num(f[1], &r->percentile) ||
        !parse_count(f[2], &r->total_count) || r->percentile < 0 || r->percentile > 1)
        return false;
    r->inverse = INFINITY;
    return n == 3 || parse_num(f[3], &r->inverse);
}

/* "#[Mean    = %f, StdDeviation   = %f]" and the two others. */
static bool parse_footer(const char *line, struct hdr_text *t)
{
    unsigned long long total;
    if (sscanf(line, "#[Mean = %lf, StdDeviation = %lf]", &t->mean, &t->stddev) == 2)
        return true;
    if (sscanf(line, "#[Max = %lf, Total count = %llu]", &t->max, &total) == 2) {
        t->total = total;
        return true;
    }
    return sscanf(line, "#[Buckets = %u, SubBuckets = %u]", &t->buckets, &t->sub_buckets) == 2;
}

int hdr_text_read(FILE *in, struct hdr_text *t, char *err, size_t err_len)
{
    char line[512];
    unsigned lineno = 0, footers = 0;
    size_t cap = 0;
    bool header = false;
    memset(t, 0, sizeof *t);
    while (fgets(line, sizeof line, in) != NULL) {
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(in)) {
            snprintf(err, err_len, "line %u: longer than %zu bytes", lineno, sizeof line - 1);
            goto fail;
        }
        char *p = line + strspn(line, " \t");
        if (*p == '\n' || *p == '\r' || *p == '\0')
            continue;
        if (!header) {
            char *f[5];
            if (split(p, f, 4) != 4 || strcmp(f[0], "Value") || strcmp(f[1], "Percentile") ||
                strcmp(f[2], "TotalCount") || strcmp(f[3], "1/(1-Percentile)")) {
                snprintf(err, err_len,
                         "line %u: not the header \"Value Percentile TotalCount "
                         "1/(1-Percentile)\"",
                         lineno);
                goto fail;
            }
            header = true;
            continue;
        }
        if (*p == '#') {
            if (!parse_footer(p, t)) {
                snprintf(err, err_len, "line %u: not a #[Mean/Max/Buckets ...] footer", lineno);
                goto fail;
            }
            footers++;
            continue;
        }
        if (footers > 0) {
            snprintf(err, err_len, "line %u: a row after the footer", lineno);
            goto fail;
        }
        if (t->count == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            struct hdr_text_row *rows = realloc(t->rows, ncap * sizeof *rows);
            if (rows == NULL) {
                snprintf(err, err_len, "out of memory");
                goto fail;
            }
            t->rows = rows;
            cap = ncap;
        }
        if (!parse_row(p, &t->rows[t->count])) {
            snprintf(err, err_len, "line %u: not a \"value percentile count [1/(1-p)]\" row", lineno);
            goto fail;
        }
        t->count++;
    }
    if (!header || footers != 3) {
        snprintf(err, err_len, "%s",
                 !header ? "no header line" : "the three #[...] footer lines are missing");
        goto fail;
    }
    return 0;
fail:
    hdr_text_free(t);
    return -1;
}

void hdr_text_free(struct hdr_text *t)
{
    free(t->rows);
    t->rows = NULL;
    t->count = 0;
}
