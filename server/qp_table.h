/* qp_table.h — a worker's map from QP number to connection (rdma server).
 *
 * On a shared receive queue a worker's connections share one receive CQ
 * (rdma_server.c): each completion names its QP by wc.qp_num, and the
 * worker finds the connection it belongs to here. Open addressing with
 * linear probing and backward-shift deletion (no tombstones), sized once
 * at init to at least twice the connections it may ever hold, so that an
 * insert never finds it full in use and a look-up is a probe or two; no
 * allocation after init. Not thread-safe: the caller locks (rdma_server.c:
 * the listener adds a connection it sets up, the worker looks up and
 * removes). The value is opaque here, so the table is tested without a
 * device (tests/test_qp_table.c).
 */
#ifndef RKV_QP_TABLE_H
#define RKV_QP_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "rkv.h"

/* Entries past the connections a server holds (max_conns): those that gave
 * their place back and are still being torn down, one per thread that
 * closes connections at a time (rdma_server.c conn_destroy). */
#define RKV_QP_TABLE_SLACK 64u

struct rkv_qp_slot {
    uint32_t qp_num;
    void *conn; /* NULL: the slot is free */
};

struct rkv_qp_table {
    struct rkv_qp_slot *slots;
    uint32_t mask; /* slots - 1 (a power of two) */
    uint32_t count;
};

/* Room for `most` entries (a power of two of slots, at least 2 x most).
 * RKV_OK or RKV_NO_MEMORY. */
rkv_status rkv_qp_table_init(struct rkv_qp_table *t, uint32_t most);
void rkv_qp_table_destroy(struct rkv_qp_table *t);

/* Map qp_num to conn (not NULL). false: qp_num is already in it, or the
 * table is full (more than `most` were added). */
bool rkv_qp_table_add(struct rkv_qp_table *t, uint32_t qp_num, void *conn);
/* The connection qp_num maps to, or NULL. */
void *rkv_qp_table_find(const struct rkv_qp_table *t, uint32_t qp_num);
/* Forget qp_num; false if it was not there. */
bool rkv_qp_table_remove(struct rkv_qp_table *t, uint32_t qp_num);

/* Bytes rkv_qp_table_init(most) allocates (the memory budget). */
uint64_t rkv_qp_table_bytes(uint32_t most);

#endif
