/* clock.h — the server clock and TTL expiry, the one definition both sides use.
 *
 * The server clock counts whole seconds since the server started, plus one
 * (so 0 can mean "no clock" / "never"):
 *
 *     clock(t) = floor((t - start) / 1 s) + 1        (CLOCK_MONOTONIC)
 *
 * The server computes it from the time on every decision (rkv_clock_at) and
 * publishes it in the region header once a second and in every reply. An
 * item with expire_at E != 0 is live while clock < E and expired from the
 * moment clock >= E (rkv_expired), on the server and in every client.
 *
 * Clients must never run ahead of the server, or a GET could call an item
 * expired that a DELETE right after still finds. They never do:
 *   - shm clients read the header's clock word (what the server published,
 *     never more than the server's own clock);
 *   - rdma clients extrapolate from the last clock they were told with
 *     rkv_clock_extrapolate, which on one time base is never more than
 *     clock(now): seen <= floor((T - start)/1s) + 1 for the time T the server
 *     computed it, and floor(a) + floor(b) <= floor(a + b).
 * Across hosts only the two clocks' rate difference can put an rdma client
 * ahead; it re-reads the header clock every RKV_CLOCK_REFRESH_NS to bound it.
 * A client may lag by less than a second plus the reply's transit time (it
 * may see an item that long after the server expired it).
 */
#ifndef RKV_CLOCK_H
#define RKV_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#define RKV_NS_PER_S         1000000000ull
#define RKV_CLOCK_REFRESH_NS (10ull * RKV_NS_PER_S) /* rdma clients re-read the clock this often */

/* The server clock at time now_ns for a server started at start_ns. */
static inline uint32_t rkv_clock_at(uint64_t start_ns, uint64_t now_ns)
{
    uint64_t secs = now_ns > start_ns ? (now_ns - start_ns) / RKV_NS_PER_S : 0;
    return secs >= UINT32_MAX ? UINT32_MAX : (uint32_t)secs + 1;
}

/* A client's estimate at now_ns from a clock `seen` received at seen_ns. */
static inline uint32_t rkv_clock_extrapolate(uint32_t seen, uint64_t seen_ns, uint64_t now_ns)
{
    uint64_t secs = now_ns > seen_ns ? (now_ns - seen_ns) / RKV_NS_PER_S : 0;
    return secs >= (uint64_t)UINT32_MAX - seen ? UINT32_MAX : seen + (uint32_t)secs;
}

/* Whether an item that expires at expire_at (0 = never) is expired at
 * server clock `now`. */
static inline bool rkv_expired(uint32_t expire_at, uint32_t now)
{
    return expire_at != 0 && now >= expire_at;
}

#endif
