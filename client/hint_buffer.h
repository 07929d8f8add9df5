/* hint_buffer.h — the access hints a shard holds for its next request.
 *
 * A GET hit appends the slot word it read through (client.c note_hint); the
 * next RPC carries the newest in its spare room (rkv_hint_buffer_take), a
 * full buffer goes out on its own. A word the buffer holds already is not
 * added twice: both stamps would fall within one flush, which LRU cannot
 * tell apart.
 *
 * Whether a word is held is asked on every GET hit, so it must not cost a
 * scan of the buffer: a 1024-bit filter (two cache lines) has bit
 * filter_bit(w) set for every word w held. A clear bit proves w is not held
 * (the common case: a few instructions); a set bit is confirmed by the scan
 * (a bit shared with another word only costs that scan, never a lost hint).
 * The filter is exact again after every take (rebuilt from what is left),
 * so at most RKV_HINT_BUFFER_CAP - 1 of its bits are set when a word is
 * asked about: at most 5.8% of new words find their bit set (and scan),
 * 3% on average over a filling buffer.
 */
#ifndef RKV_HINT_BUFFER_H
#define RKV_HINT_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

#define RKV_HINT_BUFFER_CAP   60 /* a HINTS request of this many fills the smallest message */
#define RKV_HINT_FILTER_WORDS 16 /* 1024 bits */

struct rkv_hint_buffer {
    uint64_t filter[RKV_HINT_FILTER_WORDS]; /* bit filter_bit(w) of each held word w */
    rkv_hint hints[RKV_HINT_BUFFER_CAP];    /* hints[0..n), oldest first */
    unsigned n;
};

/* The filter bit of a slot word: its top 10 bits after one multiply (slot
 * words differ in their offset and fingerprint bits, which this spreads). */
static inline unsigned rkv_hint_filter_bit(rkv_hint w)
{
    return (unsigned)((w * 0x9e3779b97f4a7c15ull) >> 54);
}

/* Whether hints[0..n) holds w (the scan the filter saves). */
bool rkv_hint_buffer_scan(const struct rkv_hint_buffer *b, rkv_hint w);

static inline void rkv_hint_buffer_clear(struct rkv_hint_buffer *b)
{
    for (unsigned i = 0; i < RKV_HINT_FILTER_WORDS; i++)
        b->filter[i] = 0;
    b->n = 0;
}

static inline bool rkv_hint_buffer_full(const struct rkv_hint_buffer *b)
{
    return b->n == RKV_HINT_BUFFER_CAP;
}

/* Append w unless the buffer is full or holds it already; whether it was added. */
static inline bool rkv_hint_buffer_add(struct rkv_hint_buffer *b, rkv_hint w)
{
    unsigned bit = rkv_hint_filter_bit(w);
    uint64_t mask = 1ull << (bit % 64);
    uint64_t *word = &b->filter[bit / 64];
    if (rkv_hint_buffer_full(b) || ((*word & mask) && rkv_hint_buffer_scan(b, w)))
        return false;
    *word |= mask;
    b->hints[b->n++] = w;
    return true;
}

/* Take the newest min(n, max) hints for a request: *out points at them (valid
 * until the next add); they leave the buffer. Returns how many. */
size_t rkv_hint_buffer_take(struct rkv_hint_buffer *b, size_t max, const rkv_hint **out);

#endif
