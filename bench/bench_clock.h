/* bench_clock.h — the clock rkv-bench times each closed-loop operation with.
 *
 * clock_gettime(CLOCK_MONOTONIC) costs 25-30 ns through the vDSO on the
 * hosts the project measures on (it reads the TSC, then scales it under a
 * seqlock), and a synchronous GET over shm takes ~340 ns there: the two
 * readings around every operation were ~15 % of the loop's time, charged to
 * the server's ops/s. Where the kernel times with the TSC itself (its
 * clocksource is "tsc": it found the counter invariant and in step across
 * CPUs, or was told so), this clock reads the TSC directly (rdtsc, ~11 ns;
 * not serialising, as perftest's get_cycles() times READs) and converts a
 * duration with a rate measured against CLOCK_MONOTONIC once at start.
 * Elsewhere (another clocksource, another architecture, --clock monotonic)
 * a tick is a CLOCK_MONOTONIC nanosecond.
 *
 * Only durations are converted (a start and an end on the same thread's
 * clock, the closed loop's latency): a rate wrong by e (bounded by the
 * calibration's bracket, ~1e-5) makes a latency wrong by the same fraction,
 * where converting absolute readings would drift e x run length from
 * CLOCK_MONOTONIC. The open loop's latencies start at intended times on
 * CLOCK_MONOTONIC, so it times with rkv_now_ns().
 */
#ifndef RKV_BENCH_CLOCK_H
#define RKV_BENCH_CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h" /* rkv_now_ns */

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

enum bench_clock_mode {
    BENCH_CLOCK_AUTO,      /* tsc where the kernel uses it, else monotonic */
    BENCH_CLOCK_TSC,       /* the TSC, or an error where the kernel does not trust it */
    BENCH_CLOCK_MONOTONIC, /* clock_gettime(CLOCK_MONOTONIC) */
};

struct bench_clock {
    bool tsc;             /* ticks are TSC cycles; else CLOCK_MONOTONIC ns */
    uint64_t ns_per_tick; /* 32.32 fixed point: ns = ticks * ns_per_tick >> 32 */
    double mhz;           /* tsc: the rate measured, cycles per microsecond */
};

/* Choose and calibrate (tsc: ~20 ms of CLOCK_MONOTONIC). `clocksource` is
 * the file naming the kernel's clocksource (NULL: sysfs's). 0, or -1 with
 * why in err: --clock tsc where the kernel's clocksource is not the TSC. */
int bench_clock_init(struct bench_clock *c, enum bench_clock_mode mode, const char *clocksource,
                     char *err, size_t err_len);

/* "tsc 2300.0 MHz" or "monotonic": what the report says timed it. */
const char *bench_clock_describe(const struct bench_clock *c, char *buf, size_t len);

/* The 32.32 ns-per-tick of `ticks` over `ns` (the calibration's arithmetic). */
uint64_t bench_clock_rate(uint64_t ticks, uint64_t ns);

static inline uint64_t bench_clock_read(const struct bench_clock *c)
{
#if defined(__x86_64__)
    if (c->tsc)
        return __rdtsc();
#endif
    return rkv_now_ns();
}

/* Nanoseconds from `start` to `end`, two readings on one thread (0 if end
 * is before start). */
static inline uint64_t bench_clock_ns(const struct bench_clock *c, uint64_t start, uint64_t end)
{
    uint64_t ticks = end > start ? end - start : 0;
    return c->tsc ? (uint64_t)(((unsigned __int128)ticks * c->ns_per_tick) >> 32) : ticks;
}

#endif
