/* read_cost.c — deciding from timed doorbells whether a device serves a
 * doorbell's READs in parallel or one by one (read_cost.h).
 */
#include <string.h>

#include "read_cost.h"

/* The median of v[0..n-1] (n > 0; sorts v: insertion, n is a probe's few). */
static uint64_t median_ns(uint64_t *v, unsigned n)
{
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : v[n / 2 - 1] + (v[n / 2] - v[n / 2 - 1]) / 2;
}

bool rkv_reads_serial(uint64_t *one_ns, uint64_t *two_ns, unsigned n)
{
    if (n == 0)
        return false;
    return (double)median_ns(two_ns, n) >= RKV_SERIAL_READS * (double)median_ns(one_ns, n);
}

void rkv_cost_watch_start(struct rkv_cost_watch *w)
{
    memset(w, 0, sizeof *w);
    w->on = true;
}

bool rkv_cost_watch_add(struct rkv_cost_watch *w, unsigned n, uint64_t ns)
{
    if (!w->on || n == 0 || n > 2 || w->have[n - 1] == RKV_COST_WATCH_SAMPLES)
        return false;
    w->ns[n - 1][w->have[n - 1]++] = ns;
    if (w->have[0] < RKV_COST_WATCH_SAMPLES || w->have[1] < RKV_COST_WATCH_SAMPLES)
        return false;
    w->have[0] = w->have[1] = 0;
    if (!rkv_reads_serial(w->ns[0], w->ns[1], RKV_COST_WATCH_SAMPLES))
        return false;
    w->on = false;
    return true;
}
