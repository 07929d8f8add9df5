/* bench_clock.c — rkv-bench's operation clock: the TSC where the kernel
 * trusts it, calibrated against CLOCK_MONOTONIC (bench_clock.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

#define CLOCKSOURCE_FILE "/sys/devices/system/clocksource/clocksource0/current_clocksource"
#define CALIBRATE_NS     20000000ull /* the interval the rate is measured over */
#define BRACKET_TRIES    64          /* readings per end; the tightest is kept */

/* The kernel's clocksource named in `path`, newline dropped; "" if unreadable. */
static void read_clocksource(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (f == NULL)
        return;
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

uint64_t bench_clock_rate(uint64_t ticks, uint64_t ns)
{
    return ticks == 0 ? 0 : (uint64_t)(((unsigned __int128)ns << 32) / ticks);
}

#if defined(__x86_64__)
/* One (CLOCK_MONOTONIC ns, TSC) pair: the TSC read between two clock
 * readings, the tightest of BRACKET_TRIES, the ns their midpoint. A
 * preemption only widens a bracket, which is then not kept. */
static void paired_reading(uint64_t *ns, uint64_t *tsc)
{
    uint64_t best = UINT64_MAX;
    *ns = *tsc = 0;
    for (unsigned i = 0; i < BRACKET_TRIES; i++) {
        uint64_t a = rkv_now_ns(), t = __rdtsc(), b = rkv_now_ns();
        if (b - a < best) {
            best = b - a;
            *ns = a + (b - a) / 2;
            *tsc = t;
        }
    }
}

static void calibrate(struct bench_clock *c)
{
    uint64_t ns0, tsc0, ns1, tsc1;
    paired_reading(&ns0, &tsc0);
    struct timespec nap = { 0, (long)CALIBRATE_NS };
    while (nanosleep(&nap, &nap) != 0)
        ;
    paired_reading(&ns1, &tsc1);
    c->ns_per_tick = bench_clock_rate(tsc1 - tsc0, ns1 - ns0);
    c->mhz = ns1 > ns0 ? (double)(tsc1 - tsc0) * 1e3 / (double)(ns1 - ns0) : 0;
}
#endif

int bench_clock_init(struct bench_clock *c, enum bench_clock_mode mode, const char *clocksource,
                     char *err, size_t err_len)
{
    char source[64];
    *c = (struct bench_clock){ .tsc = false, .ns_per_tick = 1ull << 32 };
    if (mode == BENCH_CLOCK_MONOTONIC)
        return 0;
    read_clocksource(clocksource ? clocksource : CLOCKSOURCE_FILE, source, sizeof source);
#if defined(__x86_64__)
    if (strcmp(source, "tsc") == 0) {
        c->tsc = true;
        calibrate(c);
        if (c->ns_per_tick != 0)
            return 0;
        *c = (struct bench_clock){ .tsc = false, .ns_per_tick = 1ull << 32 };
        snprintf(source, sizeof source, "tsc, but it did not advance while calibrating");
    }
#endif
    if (mode == BENCH_CLOCK_AUTO)
        return 0;
    snprintf(err, err_len,
             "--clock tsc: the kernel's clocksource is %s, not the TSC, so the TSC "
             "is not known to be invariant here; use --clock auto or monotonic",
             source[0] ? source : "unknown (no " CLOCKSOURCE_FILE ")");
    return -1;
}

const char *bench_clock_describe(const struct bench_clock *c, char *buf, size_t len)
{
    if (c->tsc)
        snprintf(buf, len, "tsc %.1f MHz", c->mhz);
    else
        snprintf(buf, len, "monotonic");
    return buf;
}
