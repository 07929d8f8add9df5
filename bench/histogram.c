/* histogram.c — see histogram.h. */
#include <stdbool.h>
#include <string.h>

#include "histogram.h"
#include "util.h"

/* Single-writer counters: a relaxed load and store compile to plain moves,
 * yet make concurrent reads by the progress thread well-defined. */
static inline void counter_add(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline uint64_t counter_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void hist_init(struct histogram *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

unsigned hist_bucket_of(uint64_t value)
{
    if (value > HIST_MAX_VALUE)
        value = HIST_MAX_VALUE;
    if (value < 2 * HIST_SUB_COUNT)
        return (unsigned)value;
    unsigned top_bit = 63u - (unsigned)__builtin_clzll(value);
    unsigned shift = top_bit - HIST_SUB_BITS;
    return shift * HIST_SUB_COUNT + (unsigned)(value >> shift);
}

void hist_bucket_range(unsigned bucket, uint64_t *lo, uint64_t *hi)
{
    if (bucket < 2 * HIST_SUB_COUNT) {
        *lo = *hi = bucket;
        return;
    }
    unsigned shift = bucket / HIST_SUB_COUNT - 1;
    uint64_t sub = bucket - shift * HIST_SUB_COUNT;
    *lo = sub << shift;
    *hi = ((sub + 1) << shift) - 1;
}

void hist_record_n(struct histogram *h, uint64_t value, uint64_t n)
{
    if (n == 0)
        return;
    counter_add(&h->buckets[hist_bucket_of(value)], n);
    uint64_t add, sum = counter_get(&h->sum);
    /* saturating, and without the division an add / n check costs per op */
    bool overflow = __builtin_mul_overflow(value, n, &add) || __builtin_add_overflow(sum, add, &sum);
    __atomic_store_n(&h->sum, overflow ? UINT64_MAX : sum, __ATOMIC_RELAXED);
    if (value < counter_get(&h->min))
        __atomic_store_n(&h->min, value, __ATOMIC_RELAXED);
    if (value > counter_get(&h->max))
        __atomic_store_n(&h->max, value, __ATOMIC_RELAXED);
    counter_add(&h->count, n);
}

void hist_record(struct histogram *h, uint64_t value)
{
    hist_record_n(h, value, 1);
}

void hist_merge(struct histogram *dst, const struct histogram *src)
{
    uint64_t seen = 0;
    unsigned first = HIST_BUCKETS, last = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        uint64_t c = counter_get(&src->buckets[i]);
        if (c == 0)
            continue;
        dst->buckets[i] += c;
        seen += c;
        if (first == HIST_BUCKETS)
            first = i;
        last = i;
    }
    if (seen == 0)
        return;
    dst->count += seen;
    uint64_t sum = counter_get(&src->sum);
    dst->sum = (dst->sum + sum < dst->sum) ? UINT64_MAX : dst->sum + sum;
    /* min and max are stored after the bucket: a racing writer's may lag the
     * buckets seen. Keep them only where they agree with the buckets. */
    uint64_t mn = counter_get(&src->min), mx = counter_get(&src->max);
    uint64_t first_lo, first_hi, last_lo, last_hi;
    hist_bucket_range(first, &first_lo, &first_hi);
    hist_bucket_range(last, &last_lo, &last_hi);
    if (last == HIST_BUCKETS - 1)
        last_hi = UINT64_MAX; /* the top bucket also holds saturated values */
    if (first == HIST_BUCKETS - 1)
        first_hi = UINT64_MAX;
    if (mn < first_lo || mn > first_hi)
        mn = first_lo;
    if (mx < last_lo || mx > last_hi)
        mx = last_hi;
    if (mn < dst->min)
        dst->min = mn;
    if (mx > dst->max)
        dst->max = mx;
}

void hist_diff(struct histogram *out, const struct histogram *now, const struct histogram *before)
{
    hist_init(out);
    unsigned first = HIST_BUCKETS, last = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        uint64_t a = now->buckets[i], b = before->buckets[i];
        uint64_t c = a > b ? a - b : 0;
        if (c == 0)
            continue;
        out->buckets[i] = c;
        out->count += c;
        if (first == HIST_BUCKETS)
            first = i;
        last = i;
    }
    if (out->count == 0)
        return;
    uint64_t lo, hi;
    hist_bucket_range(first, &lo, &hi);
    out->min = RKV_MAX(lo, now->min);
    hist_bucket_range(last, &lo, &hi);
    out->max = RKV_MIN(hi, now->max);
    out->sum = now->sum >= before->sum ? now->sum - before->sum : 0;
}

uint64_t hist_percentile(const struct histogram *h, double p)
{
    if (h->count == 0)
        return 0;
    if (p < 0)
        p = 0;
    if (p > 100)
        p = 100;
    /* Rank of the wanted value, 1-based: ceil(p% of count), at least 1. The
     * tiny downward nudge keeps 99.9 % of 1000 at rank 999 despite binary
     * floating point (99.9 / 100 * 1000 is 999.0000000000001). */
    double want = p * (double)h->count / 100.0;
    want -= want * 1e-12;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t lo, hi;
            hist_bucket_range(i, &lo, &hi);
            if (hi > h->max)
                hi = h->max;
            if (hi < h->min)
                hi = h->min;
            return hi;
        }
    }
    return h->max;
}

double hist_mean(const struct histogram *h)
{
    return h->count ? (double)h->sum / (double)h->count : 0.0;
}
