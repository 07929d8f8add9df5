/* test_bench_schedule.c — open-loop send times, computed without a clock:
 * a constant schedule is exact (every intended time is start + round(k x
 * period)), a poisson one is deterministic given its seed and has the
 * exponential gaps' mean and spread within statistical bounds, and
 * bench_schedule_due_before counts the backlog a late thread has. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bench_schedule.h"

#define START UINT64_C(1000000000000)

static void constant_spacing_is_exact(void **state)
{
    (void)state;
    struct bench_schedule s;
    bench_schedule_init(&s, BENCH_ARRIVAL_CONSTANT, 1000, START, 0, 1);
    for (uint64_t k = 0; k < 100000; k++)
        assert_int_equal(bench_schedule_take(&s), START + k * 1000000);

    /* 3 ops/s: the period is not whole; each time is the rounded exact one,
     * so the error never accumulates. */
    bench_schedule_init(&s, BENCH_ARRIVAL_CONSTANT, 3, START, 0, 1);
    uint64_t prev = 0;
    for (uint64_t k = 0; k < 300000; k++) {
        uint64_t t = bench_schedule_take(&s);
        assert_int_equal(t, START + (uint64_t)llround((double)k * 1e9 / 3));
        if (k > 0)
            assert_true(t - prev == 333333333 || t - prev == 333333334);
        prev = t;
    }
    /* After 300000 ops: exactly 100000 s later. */
    assert_int_equal(bench_schedule_peek(&s), START + UINT64_C(100000) * 1000000000);
}

static void phase_offsets_the_start(void **state)
{
    (void)state;
    struct bench_schedule s;
    bench_schedule_init(&s, BENCH_ARRIVAL_CONSTANT, 100, START, 2500000, 1);
    assert_int_equal(bench_schedule_peek(&s), START + 2500000);
    assert_int_equal(bench_schedule_take(&s), START + 2500000);
    assert_int_equal(bench_schedule_take(&s), START + 2500000 + 10000000);
}

/* The backlog: exact for constant (brute force on a copy agrees). */
static void due_before_counts_the_backlog(void **state)
{
    (void)state;
    struct bench_schedule s;
    bench_schedule_init(&s, BENCH_ARRIVAL_CONSTANT, 7, START, 0, 1);
    for (int i = 0; i < 5; i++)
        bench_schedule_take(&s);
    assert_int_equal(bench_schedule_due_before(&s, bench_schedule_peek(&s)), 0);
    assert_int_equal(bench_schedule_due_before(&s, bench_schedule_peek(&s) + 1), 1);
    for (uint64_t until = START; until < START + UINT64_C(3000000000); until += 12345677) {
        struct bench_schedule copy = s;
        uint64_t n = 0;
        while (bench_schedule_peek(&copy) < until) {
            bench_schedule_take(&copy);
            n++;
        }
        assert_int_equal(bench_schedule_due_before(&s, until), n);
    }
    /* Poisson: the expected count, 1 + behind / period. */
    bench_schedule_init(&s, BENCH_ARRIVAL_POISSON, 1000, START, 0, 9);
    assert_int_equal(bench_schedule_due_before(&s, START), 0);
    assert_int_equal(bench_schedule_due_before(&s, START + 10000000), 11);
}

/* Fixed seed: the mean gap within 1 % of the period (the standard error of
 * the mean of 200000 exponential gaps is 0.22 %), the standard deviation
 * within 2 % of the mean (an exponential's equal its mean), and about e^-1 of
 * the gaps longer than the mean. Deterministic: the seed fixes every value. */
static void poisson_has_exponential_gaps(void **state)
{
    (void)state;
    const unsigned n = 200000;
    const double period = 1e9 / 50000.0; /* 20 us */
    struct bench_schedule s;
    bench_schedule_init(&s, BENCH_ARRIVAL_POISSON, 50000, START, 0, 42);
    double sum = 0, sum2 = 0;
    unsigned longer = 0;
    uint64_t prev = bench_schedule_take(&s);
    assert_int_equal(prev, START);
    for (unsigned i = 0; i < n; i++) {
        uint64_t t = bench_schedule_take(&s);
        assert_true(t >= prev);
        double gap = (double)(t - prev);
        sum += gap;
        sum2 += gap * gap;
        longer += gap > period;
        prev = t;
    }
    double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
    assert_true(fabs(mean - period) < 0.01 * period);
    assert_true(fabs(sd - mean) < 0.02 * mean);
    assert_true(fabs((double)longer / n - exp(-1.0)) < 0.01);
    /* The total drifts from k x period only by the random walk, never by
     * accumulated rounding: the offset is kept in nanoseconds as a double. */
    assert_true(fabs((double)(prev - START) - n * period) < 0.01 * n * period);
}

static void poisson_is_deterministic_per_seed(void **state)
{
    (void)state;
    struct bench_schedule a, b, c;
    bench_schedule_init(&a, BENCH_ARRIVAL_POISSON, 1234, START, 0, 7);
    bench_schedule_init(&b, BENCH_ARRIVAL_POISSON, 1234, START, 0, 7);
    bench_schedule_init(&c, BENCH_ARRIVAL_POISSON, 1234, START, 0, 8);
    unsigned differ = 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t ta = bench_schedule_take(&a);
        assert_int_equal(ta, bench_schedule_take(&b));
        differ += ta != bench_schedule_take(&c);
    }
    assert_true(differ > 9990); /* all but the first (both start at START) */
    assert_string_equal(bench_arrival_name(BENCH_ARRIVAL_POISSON), "poisson");
    assert_string_equal(bench_arrival_name(BENCH_ARRIVAL_CONSTANT), "constant");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(constant_spacing_is_exact),
        cmocka_unit_test(phase_offsets_the_start),
        cmocka_unit_test(due_before_counts_the_backlog),
        cmocka_unit_test(poisson_has_exponential_gaps),
        cmocka_unit_test(poisson_is_deterministic_per_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
