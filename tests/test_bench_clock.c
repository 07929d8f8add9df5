/* test_bench_clock.c — rkv-bench's operation clock (bench/bench_clock.h):
 * the choice by the kernel's clocksource (from a file the test writes), the
 * --clock tsc refusal and its message, the 32.32 conversion's arithmetic
 * over short and long durations, and, where the kernel's clocksource is
 * the TSC, that a calibrated duration agrees with CLOCK_MONOTONIC's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "bench_clock.h"

/* A clocksource file naming `name` (NULL: a path that does not exist). */
static char *clocksource_file(const char *name)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/rkv-test-clocksource-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    if (name == NULL) {
        unlink(path);
        return path;
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", name);
    fclose(f);
    return path;
}

static void monotonic_where_the_kernel_does_not_use_the_tsc(void **state)
{
    (void)state;
    struct bench_clock c;
    char err[256] = "", name[32];
    char *path = clocksource_file("hpet");

    assert_int_equal(bench_clock_init(&c, BENCH_CLOCK_AUTO, path, err, sizeof err), 0);
    assert_false(c.tsc);
    assert_string_equal(bench_clock_describe(&c, name, sizeof name), "monotonic");
    assert_int_equal(bench_clock_ns(&c, 1000, 4500), 3500); /* ticks are ns */
    assert_int_equal(bench_clock_ns(&c, 4500, 1000), 0);    /* never negative */

    /* asked for explicitly: refused, saying what the kernel uses and what to do */
    assert_int_equal(bench_clock_init(&c, BENCH_CLOCK_TSC, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "clocksource is hpet"));
    assert_non_null(strstr(err, "--clock auto or monotonic"));
    assert_false(c.tsc);
    unlink(path);

    path = clocksource_file(NULL);
    assert_int_equal(bench_clock_init(&c, BENCH_CLOCK_AUTO, path, err, sizeof err), 0);
    assert_false(c.tsc);
    assert_int_equal(bench_clock_init(&c, BENCH_CLOCK_TSC, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown"));

    /* monotonic never reads the file: even "tsc" there is not used */
    path = clocksource_file("tsc");
    assert_int_equal(bench_clock_init(&c, BENCH_CLOCK_MONOTONIC, path, err, sizeof err), 0);
    assert_false(c.tsc);
    unlink(path);
}

static void conversion_arithmetic(void **state)
{
    (void)state;
    struct bench_clock c = { .tsc = true };

    c.ns_per_tick = bench_clock_rate(2300, 1000);       /* 2.3 GHz */
    assert_int_equal(bench_clock_ns(&c, 0, 2300), 999); /* 32.32 truncates: within 1 ns */
    uint64_t hour = bench_clock_ns(&c, 5, 5 + 2300ull * 1000000000ull * 3600 / 1000);
    assert_true(hour > 3600ull * 1000000000ull - 1000 && hour <= 3600ull * 1000000000ull);
    /* a rate below 1 ns per tick and one above it over 2^40 ticks (the
     * product needs more than 64 bits) */
    c.ns_per_tick = bench_clock_rate(1000000, 333333);
    assert_int_equal(bench_clock_ns(&c, 0xfffffff0ull, 0xfffffff0ull + 3000000), 999998);
    c.ns_per_tick = bench_clock_rate(1000, 2000);
    assert_int_equal(bench_clock_ns(&c, 0, UINT64_C(1) << 40), UINT64_C(1) << 41);
    assert_int_equal(bench_clock_ns(&c, 10, 9), 0);
    assert_int_equal(bench_clock_rate(0, 5), 0); /* no ticks: no rate */
}

/* One (ns, tsc) pair as the calibration takes it: the tightest bracket. */
static void pair(const struct bench_clock *c, uint64_t *ns, uint64_t *ticks, uint64_t *width)
{
    *width = UINT64_MAX;
    for (unsigned i = 0; i < 256; i++) {
        uint64_t a = rkv_now_ns(), t = bench_clock_read(c), b = rkv_now_ns();
        if (b - a < *width) {
            *width = b - a;
            *ns = a + (b - a) / 2;
            *ticks = t;
        }
    }
}

static void tsc_agrees_with_clock_monotonic(void **state)
{
    (void)state;
    struct bench_clock c;
    char err[256] = "", name[32];

    assert_int_equal(bench_clock_init(&c, BENCH_CLOCK_AUTO, NULL, err, sizeof err), 0);
    if (!c.tsc)
        skip(); /* the kernel's clocksource here is not the TSC */
    assert_non_null(strstr(bench_clock_describe(&c, name, sizeof name), "tsc "));
    assert_true(c.mhz > 1.0);

    /* both clocks time one ~30 ms interval; a preemption between two
     * readings only widens a bracket, which bounds the difference */
    uint64_t ns0, t0, w0, ns1, t1, w1;
    pair(&c, &ns0, &t0, &w0);
    struct timespec nap = { 0, 30000000 };
    while (nanosleep(&nap, &nap) != 0)
        ;
    pair(&c, &ns1, &t1, &w1);
    double mono = (double)(ns1 - ns0), tsc = (double)bench_clock_ns(&c, t0, t1);
    double slack = mono * 0.002 + (double)(w0 + w1);
    if (tsc < mono - slack || tsc > mono + slack)
        fail_msg("TSC says %.0f ns, CLOCK_MONOTONIC %.0f ns (brackets %llu, %llu ns)", tsc, mono,
                 (unsigned long long)w0, (unsigned long long)w1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(monotonic_where_the_kernel_does_not_use_the_tsc),
        cmocka_unit_test(conversion_arithmetic),
        cmocka_unit_test(tsc_agrees_with_clock_monotonic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
