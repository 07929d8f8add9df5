/* bench_schedule.c — see bench_schedule.h. */
#include <math.h>

#include "bench_schedule.h"

static uint64_t constant_at(const struct bench_schedule *s, uint64_t k)
{
    return s->start_ns + (uint64_t)llround((double)k * s->period_ns);
}

void bench_schedule_init(struct bench_schedule *s, enum bench_arrival arrival, double rate,
                         uint64_t start_ns, uint64_t phase_ns, uint64_t seed)
{
    s->arrival = arrival;
    s->period_ns = 1e9 / rate;
    s->start_ns = start_ns + phase_ns;
    s->index = 0;
    s->offset_ns = 0;
    wl_rng_seed(&s->rng, seed);
    s->next_ns = s->start_ns;
}

uint64_t bench_schedule_take(struct bench_schedule *s)
{
    uint64_t t = s->next_ns;
    s->index++;
    if (s->arrival == BENCH_ARRIVAL_CONSTANT) {
        s->next_ns = constant_at(s, s->index);
    } else {
        /* 1 - u is in (0, 1]: the log is finite, the gap >= 0. */
        s->offset_ns += -log(1.0 - wl_rng_double(&s->rng)) * s->period_ns;
        s->next_ns = s->start_ns + (uint64_t)s->offset_ns;
    }
    return t;
}

uint64_t bench_schedule_due_before(const struct bench_schedule *s, uint64_t until_ns)
{
    if (s->next_ns >= until_ns)
        return 0;
    double behind = (double)(until_ns - s->next_ns);
    if (s->arrival == BENCH_ARRIVAL_CONSTANT) {
        /* k with constant_at(k) < until for k >= index: count by arithmetic,
         * then correct the rounding at the edge. */
        uint64_t n = (uint64_t)(behind / s->period_ns) + 1;
        while (n > 1 && constant_at(s, s->index + n - 1) >= until_ns)
            n--;
        while (constant_at(s, s->index + n) < until_ns)
            n++;
        return n;
    }
    return 1 + (uint64_t)(behind / s->period_ns);
}

const char *bench_arrival_name(enum bench_arrival a)
{
    return a == BENCH_ARRIVAL_POISSON ? "poisson" : "constant";
}
