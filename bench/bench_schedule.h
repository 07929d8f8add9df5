/* bench_schedule.h — when an open-loop rkv-bench thread should send each
 * operation.
 *
 * With --rate, every thread follows a schedule of intended send times and
 * measures each operation's latency from its intended time, not from when
 * it actually went out: a reply that comes late delays the next sends, and
 * that delay (the queueing a real client population would see) is charged to
 * the operations that waited. This is the coordinated-omission correction of
 * wrk2 and HdrHistogram, done by construction rather than by back-filling.
 *
 * A schedule is a pure function of (arrival kind, rate, start, seed): the
 * tests compute it without a clock, and two runs with one seed send at the
 * same offsets.
 *
 *   constant: t_k = start + round(k * period)              (period = 1e9 / rate ns)
 *   poisson:  t_k = start + sum of k exponential gaps with mean `period`
 *             (a Poisson process of the given rate)
 */
#ifndef RKV_BENCH_SCHEDULE_H
#define RKV_BENCH_SCHEDULE_H

#include <stdint.h>

#include "workload.h"

enum bench_arrival {
    BENCH_ARRIVAL_CONSTANT, /* evenly spaced sends */
    BENCH_ARRIVAL_POISSON,  /* exponential gaps: bursts and lulls of a random population */
};

struct bench_schedule {
    enum bench_arrival arrival;
    double period_ns;  /* mean gap between sends, 1e9 / rate */
    uint64_t start_ns; /* intended time of operation 0 */
    uint64_t index;    /* operations taken so far */
    double offset_ns;  /* poisson: offset of the next operation from start */
    uint64_t next_ns;  /* intended time of the next operation */
    struct wl_rng rng; /* poisson gaps */
};

/* A schedule of `rate` operations per second (> 0) whose first operation is
 * intended at start_ns + phase_ns (phase_ns < period staggers threads). */
void bench_schedule_init(struct bench_schedule *s, enum bench_arrival arrival, double rate,
                         uint64_t start_ns, uint64_t phase_ns, uint64_t seed);

/* Intended time of the next operation, without taking it. */
static inline uint64_t bench_schedule_peek(const struct bench_schedule *s)
{
    return s->next_ns;
}

/* Takes the next operation: returns its intended time and advances. */
uint64_t bench_schedule_take(struct bench_schedule *s);

/* Operations intended strictly before `until_ns` that have not been taken:
 * exact for a constant schedule, the expected number for a poisson one. */
uint64_t bench_schedule_due_before(const struct bench_schedule *s, uint64_t until_ns);

const char *bench_arrival_name(enum bench_arrival a);

#endif
