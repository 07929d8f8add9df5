/* read_cost.h — the evidence behind a connection's cost model.
 *
 * A GET reads a key's two buckets in one doorbell where a second READ in a
 * doorbell is nearly free (RKV_COST_ROUND_TRIPS: a NIC serves them in
 * parallel), or the first alone where each READ costs about a round trip
 * (RKV_COST_PER_READ: Soft-RoCE serves them one by one). The rdma transport
 * times a few doorbells of 1 and of 2 READs when it connects
 * (rdma_client.c read_cost). That is a moment's view: on a VM, or a host
 * whose load changes, the probe can catch a spell in which Soft-RoCE's two
 * READs overlap (about 5 % of connections in the project's guest: 2 READs
 * at 1.1x one against the usual 1.5x), and such a connection then reads
 * both buckets of every cold GET, 3 READs where 2 do. So while a connection
 * reads both buckets together, the client keeps timing one in
 * RKV_COST_WATCH_EVERY of its small doorbells of each kind, and once
 * RKV_COST_WATCH_SAMPLES of each say the READs serialize, it reads the
 * first bucket alone from then on (client.c lookup_read). The change is one
 * way: a connection that reads the first bucket alone rarely sends two
 * READs in a doorbell to learn from, and wrongly reading one bucket at a
 * time costs a NIC a round trip only for keys in their second bucket.
 *
 * Both the probe and the watch decide with rkv_reads_serial: medians, not
 * minima, so that a few READs that escaped a slow path (a Soft-RoCE READ
 * whose tasklet ran without a context switch takes half the usual time) or
 * that a preemption stretched do not decide.
 */
#ifndef RKV_READ_COST_H
#define RKV_READ_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

#define RKV_SERIAL_READS       1.25 /* 2 READs in one doorbell at >= this x 1: one by one */
#define RKV_COST_WATCH_EVERY   16u  /* time one in this many small doorbells of each kind */
#define RKV_COST_WATCH_SAMPLES 9u   /* of each kind before the watch decides */
#define RKV_COST_WATCH_MAX_LEN 128u /* bytes per READ of a timed doorbell: a bucket, a small item */

/* Given the durations of n doorbells of one READ and n of two, does the
 * device serve a doorbell's READs one by one (the 2-READ median is at least
 * RKV_SERIAL_READS x the 1-READ median)? false for n = 0. Sorts both arrays
 * in place. */
bool rkv_reads_serial(uint64_t *one_ns, uint64_t *two_ns, unsigned n);

/* A connection's watch of its own doorbells (zeroed: not watching). */
struct rkv_cost_watch {
    bool on;         /* watching (rkv_cost_watch_start) */
    uint8_t skip[2]; /* small doorbells of 1, 2 READs until the next timed one */
    uint8_t have[2]; /* samples of each kind so far */
    uint64_t ns[2][RKV_COST_WATCH_SAMPLES]; /* their durations */
};

/* Start watching (a connection that reads both buckets together by its
 * transport's verdict, not the caller's choice); samples start afresh. */
void rkv_cost_watch_start(struct rkv_cost_watch *w);

/* Whether to time this doorbell of ops[0..n-1]: n of 1 or 2 READs of at
 * most RKV_COST_WATCH_MAX_LEN bytes each, the RKV_COST_WATCH_EVERY-th of
 * its kind, while the watch is on and lacks samples of that kind. */
static inline bool rkv_cost_watch_pick(struct rkv_cost_watch *w, const struct rkv_read_op *ops,
                                       unsigned n)
{
    if (!w->on || n == 0 || n > 2 || ops[0].len > RKV_COST_WATCH_MAX_LEN ||
        ops[n - 1].len > RKV_COST_WATCH_MAX_LEN || w->have[n - 1] == RKV_COST_WATCH_SAMPLES)
        return false;
    if (w->skip[n - 1] != 0) {
        w->skip[n - 1]--;
        return false;
    }
    w->skip[n - 1] = RKV_COST_WATCH_EVERY - 1;
    return true;
}

/* Record a timed doorbell of n (1 or 2) READs that took ns. Once both kinds
 * have their samples the watch decides: true (and the watch stops) when the
 * READs serialize; false, and it gathers a fresh set, when they do not. */
bool rkv_cost_watch_add(struct rkv_cost_watch *w, unsigned n, uint64_t ns);

#endif
