/* read_lane.h — the pure arithmetic of rdma READ lanes (client/rdma_client.c):
 * how many lanes a connection opens, which lane a thread's reads take, and
 * how a READ's work-request id names the reader and the read it belongs to.
 *
 * A lane is an RC QP that carries only one-sided READs, shared by the
 * threads whose context index picks it; each thread waits for completions
 * that carry its own reader index and sequence (design.md, "Over rdma").
 */
#ifndef RKV_READ_LANE_H
#define RKV_READ_LANE_H

#include <stdint.h>

#define RKV_LANES_MAX 64u /* lanes per connection at most, whatever the CPU count */

/* Lanes a connection may open: one per online CPU (more could only wait
 * for each other's CPU), at most `cap` (the RKV_RDMA_LANES environment
 * setting; UINT32_MAX when unset; 0 turns lanes off) and RKV_LANES_MAX. A
 * connection opens them as threads arrive: min(threads, this). */
static inline uint32_t rkv_lanes_max(long online_cpus, uint32_t cap)
{
    uint32_t n = online_cpus < 1
                     ? 1u
                     : (uint32_t)(online_cpus > RKV_LANES_MAX ? RKV_LANES_MAX : online_cpus);
    return n < cap ? n : cap;
}

/* The lane reader (a thread's context index) posts on: readers 0..max-1
 * get lanes of their own, the next ones share them round robin. */
static inline uint32_t rkv_lane_pick(uint32_t reader, uint32_t lanes_max)
{
    return reader % lanes_max;
}

/* A READ's wr_id: the reader in the high half, its read's sequence in the
 * low half, so a completion finds the thread waiting for it and a late one
 * of an abandoned read is told from the current read's. */
static inline uint64_t rkv_lane_wr_id(uint32_t reader, uint32_t seq)
{
    return (uint64_t)reader << 32 | seq;
}

static inline uint32_t rkv_lane_wr_reader(uint64_t wr_id)
{
    return (uint32_t)(wr_id >> 32);
}

static inline uint32_t rkv_lane_wr_seq(uint64_t wr_id)
{
    return (uint32_t)wr_id;
}

#endif
