/* test_hdr_text.c — HdrHistogram's percentile-distribution text: the exact
 * header, row and footer layout, the percentile iterator's levels, and the
 * text read back (counts, percentiles, footer) against values whose true
 * percentiles are computed independently from the sorted data. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hdr_text.h"
#include "histogram.h"

#define N 10000u

static struct histogram *new_hist(void)
{
    struct histogram *h = malloc(sizeof *h);
    assert_non_null(h);
    hist_init(h);
    return h;
}

/* Values 10 us .. ~10 ms in ns, recorded in a scrambled order. */
static uint64_t value_of(unsigned i)
{
    return 10000 + 997ull * i;
}

static char *write_text(const struct histogram *h, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    assert_non_null(f);
    assert_int_equal(hdr_text_write(f, h, 1000.0, HDR_TEXT_TICKS), 0);
    fclose(f);
    return buf;
}

static void read_text(const char *text, struct hdr_text *t)
{
    char err[256];
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    int rc = hdr_text_read(f, t, err, sizeof err);
    fclose(f);
    if (rc != 0)
        fail_msg("hdr_text_read: %s", err);
}

/* The layout of HdrHistogram's outputPercentileDistribution, byte for byte:
 * 10050 ns lies in bucket [10048, 10111] and 20000 ns in [19968, 20095];
 * rows show the buckets' highest equivalent values, the mean is exact
 * (15025 ns), the deviation uses the bucket midpoints 10080 and 20032.
 * Decimals round as C printf does (20.095 -> 20.09), like HdrHistogram_c. */
static void exact_layout(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    hist_record(h, 10050);
    hist_record(h, 20000);
    size_t len;
    char *text = write_text(h, &len);
    double sd = sqrt(
        ((10080 - 15025.0) * (10080 - 15025.0) + (20032 - 15025.0) * (20032 - 15025.0)) / 2);
    char footer[256];
    snprintf(footer, sizeof footer, "#[Mean    =        15.03, StdDeviation   = %12.2f]\n",
             sd / 1000);
    char want[2048];
    snprintf(want, sizeof want,
             "       Value     Percentile TotalCount 1/(1-Percentile)\n"
             "\n"
             "       10.11 0.000000000000          1           1.00\n"
             "       10.11 0.100000000000          1           1.11\n"
             "       10.11 0.200000000000          1           1.25\n"
             "       10.11 0.300000000000          1           1.43\n"
             "       10.11 0.400000000000          1           1.67\n"
             "       10.11 0.500000000000          1           2.00\n"
             "       20.09 0.550000000000          2           2.22\n"
             "       20.09 1.000000000000          2\n"
             "%s"
             "#[Max     =        20.09, Total count    =            2]\n"
             "#[Buckets =           30, SubBuckets     =          256]\n",
             footer);
    assert_string_equal(text, want);
    free(text);
    free(h);
}

/* The iterator's levels: 0, 10, ... 50, then 5 per halving of the rest. */
static void iterator_levels(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    for (unsigned i = 0; i < N; i++)
        hist_record(h, value_of((i * 7919u) % N));
    static const double want[] = { 0,    10, 20,   30, 40,   50,    55, 60,    65,   70,    75,
                                   77.5, 80, 82.5, 85, 87.5, 88.75, 90, 91.25, 92.5, 93.75, 94.375 };
    struct hdr_iter it;
    hdr_iter_init(&it, h, HDR_TEXT_TICKS);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_true(hdr_iter_next(&it));
        assert_true(it.percentile == want[i]);
    }
    free(h);
}

/* Written, read back: every row's value is the true value at its percentile
 * (from the sorted data) to the histogram's precision, counts are the true
 * counts, and the footer agrees. */
static void read_back_matches_the_data(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    for (unsigned i = 0; i < N; i++)
        hist_record(h, value_of((i * 7919u) % N)); /* 7919 is prime: a permutation */
    size_t len;
    char *text = write_text(h, &len);
    struct hdr_text t;
    read_text(text, &t);
    assert_true(t.count > 40);
    assert_int_equal(t.total, N);
    assert_int_equal(t.buckets, 30);
    assert_int_equal(t.sub_buckets, 256);
    assert_true(fabs(t.mean - hist_mean(h) / 1000.0) <= 0.005);
    uint64_t lo, hi;
    hist_bucket_range(hist_bucket_of(value_of(N - 1)), &lo, &hi);
    assert_true(fabs(t.max - hi / 1000.0) <= 0.005);

    for (size_t r = 0; r < t.count; r++) {
        const struct hdr_text_row *row = &t.rows[r];
        /* The true value at this level: the ceil(p x N)-th smallest. */
        uint64_t rank = (uint64_t)ceil(row->percentile * N - 1e-9);
        if (rank == 0)
            rank = 1;
        uint64_t v = value_of((unsigned)(rank - 1));
        hist_bucket_range(hist_bucket_of(v), &lo, &hi);
        if (fabs(row->value - hi / 1000.0) > 0.0051)
            fail_msg("row %zu (p %.12f): value %.2f, expected the top of [%llu, %llu] ns", r,
                     row->percentile, row->value, (unsigned long long)lo, (unsigned long long)hi);
        /* TotalCount: values <= the bucket's top, counted from the data. */
        uint64_t below = 0;
        for (unsigned i = 0; i < N; i++)
            below += value_of(i) <= hi;
        assert_int_equal(row->total_count, below);
        assert_true(row->total_count >= rank);
        if (r + 1 < t.count) {
            assert_true(fabs(row->inverse - 1.0 / (1.0 - row->percentile)) < 0.006);
            assert_true(t.rows[r + 1].percentile >= row->percentile);
        }
    }
    const struct hdr_text_row *last = &t.rows[t.count - 1];
    assert_true(last->percentile == 1.0);
    assert_true(isinf(last->inverse));
    assert_int_equal(last->total_count, N);
    hdr_text_free(&t);
    free(text);
    free(h);
}

static void empty_histogram(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    size_t len;
    char *text = write_text(h, &len);
    struct hdr_text t;
    read_text(text, &t);
    assert_int_equal(t.count, 0);
    assert_int_equal(t.total, 0);
    hdr_text_free(&t);
    free(text);
    free(h);
}

static void reader_rejects_bad_text(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } bad[] = {
        { "Value Percentile Count\n", "not the header" },
        { "", "no header line" },
        { "Value Percentile TotalCount 1/(1-Percentile)\n\n 1.0 0.5\n", "line 3: not a" },
        { "Value Percentile TotalCount 1/(1-Percentile)\n 1.0 1.5 3\n", "line 2: not a" },
        { "Value Percentile TotalCount 1/(1-Percentile)\n 1.0 0.5 x 2.0\n", "line 2: not a" },
        { "Value Percentile TotalCount 1/(1-Percentile)\n 1.0 1.0 3\n", "footer lines are missing" },
        { "Value Percentile TotalCount 1/(1-Percentile)\n#[Mean = 1, StdDeviation = 0]\n"
          "#[Max = 1, Total count = 1]\n#[Buckets = 30, SubBuckets = 256]\n 1.0 1.0 3\n",
          "line 5: a row after the footer" },
        { "Value Percentile TotalCount 1/(1-Percentile)\n#[Nonsense]\n", "line 2: not a #[" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        struct hdr_text t;
        FILE *f = fmemopen((void *)bad[i].text, strlen(bad[i].text) + (bad[i].text[0] == 0), "r");
        assert_non_null(f);
        assert_int_equal(hdr_text_read(f, &t, err, sizeof err), -1);
        fclose(f);
        if (strstr(err, bad[i].msg) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i, err, bad[i].msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_layout),
        cmocka_unit_test(iterator_levels),
        cmocka_unit_test(read_back_matches_the_data),
        cmocka_unit_test(empty_histogram),
        cmocka_unit_test(reader_rejects_bad_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
