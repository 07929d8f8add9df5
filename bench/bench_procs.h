/* bench_procs.h — what rkv-bench's client processes (--processes) tell the
 * parent, over one pipe each.
 *
 * The parent forks N children after parsing the command line; each runs the
 * whole benchmark with its own threads and handles and its share of the
 * threads' global ids (so key ranges, seeds and value versions do not
 * collide). A child reports READY when it has connected and preloaded, waits
 * for the parent's go (one byte: 1 go, 0 abort) so that all processes
 * measure together, sends a TICK once a second, and a FINAL with its raw
 * results: histograms travel as buckets, never as percentiles, so the
 * parent's merge is exact.
 *
 * A message is a header (kind, payload length) and the payload, a struct
 * of this same executable (the children are forks). The reader checks the
 * kind and that the length is the one that kind has.
 */
#ifndef RKV_BENCH_PROCS_H
#define RKV_BENCH_PROCS_H

#include <stddef.h>
#include <stdint.h>

#include "bench_report.h"

enum bench_msg_kind {
    BENCH_MSG_READY = 1, /* struct bench_ready */
    BENCH_MSG_TICK,      /* struct bench_tick (bench_timeseries.h) */
    BENCH_MSG_FINAL,     /* struct bench_final */
};

struct bench_ready {
    int32_t ok;        /* 1: connected and preloaded; 0: failed, see message */
    char message[600]; /* what failed, as the child would have printed it */
};

struct bench_final {
    struct bench_results res; /* this process's measured results, raw */
    int32_t measured;         /* 0: stopped before measuring */
};

/* Payload length each kind must have. */
size_t bench_msg_size(uint32_t kind);

/* 0, or -1 (errno set) when the pipe broke. */
int bench_msg_send(int fd, uint32_t kind, const void *payload, size_t len);

/* Reads one message into buf (cap bytes): its kind into *kind. 0; 1 at a
 * clean end of stream (the child exited between messages); -1 on a read
 * error, a truncated message, an unknown kind or a wrong length. */
int bench_msg_recv(int fd, uint32_t *kind, void *buf, size_t cap);

#endif
