/* hint_buffer.c — the shard's access hints, without duplicates (hint_buffer.h). */
#include "hint_buffer.h"

bool rkv_hint_buffer_scan(const struct rkv_hint_buffer *b, rkv_hint w)
{
    bool seen = false;
    for (unsigned i = 0; i < b->n; i++)
        seen |= b->hints[i] == w;
    return seen;
}

size_t rkv_hint_buffer_take(struct rkv_hint_buffer *b, size_t max, const rkv_hint **out)
{
    size_t n = b->n < max ? b->n : max;
    unsigned left = b->n - (unsigned)n;
    *out = b->hints + left;
    /* the filter again of exactly what is left */
    for (unsigned i = 0; i < RKV_HINT_FILTER_WORDS; i++)
        b->filter[i] = 0;
    for (unsigned i = 0; i < left; i++) {
        unsigned bit = rkv_hint_filter_bit(b->hints[i]);
        b->filter[bit / 64] |= 1ull << (bit % 64);
    }
    b->n = left;
    return n;
}
