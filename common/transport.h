/* transport.h — the one small interface every transport implements.
 *
 * rkv's client and server code are transport-agnostic: they read the region,
 * send requests and receive replies through these two operation tables. Each
 * transport lives in its own files behind them:
 *
 *   rdma  client/rdma_client.c, server/rdma_server.c, common/rdma_util.c
 *         (libibverbs + librdmacm, RC queue pairs)
 *   shm   client/shm_client.c, server/shm_server.c, common/shm_ring.c
 *         (memfd region mapped read-only, shared-memory rings)
 *
 * Message contract (both directions): a message is at most `max_msg` bytes and
 * is delivered whole, with its byte count, or not at all. The client keeps at
 * most `credits` requests outstanding; the server answers each request with
 * exactly one reply, in order, and the reply returns the credit.
 *
 * Counting contract: every call that makes the hardware (or the peer) start
 * work — one ibv_post_send, one ring publish — adds 1 to `doorbells`.
 */
#ifndef RKV_TRANSPORT_H
#define RKV_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol.h"
#include "rkv.h"

/* ------------------------------------------------------------ client side */

/* One range of the remote region to read into local memory. */
struct rkv_read_op {
    uint64_t offset;   /* from the region start; offset+len <= region_size */
    uint32_t len;
    void *dst;         /* inside the transport's local_buf() */
};

/* Tunables a client passes to its transport. Zero means the default. */
struct rkv_ctrans_params {
    size_t local_buf_size;     /* bytes of read-landing memory (>= 2 buckets + largest item) */
    unsigned timeout_ms;       /* connect / wait timeout */
    unsigned signal_interval;  /* rdma: signal one send in N */
    const char *device;        /* rdma: device name, NULL = rdma_cm's choice */
};

/* Counters a transport bumps; owned by the caller, shared over its shards. */
struct rkv_trans_counters {
    uint64_t reads, read_round_trips, doorbells, sends, inline_sends;
};

struct rkv_ctrans;  /* one connection, one thread */

/* What a transport's reads cost: how a GET (common/lookup.c) batches them. */
enum rkv_read_cost {
    RKV_COST_ROUND_TRIPS = 0, /* each round trip costs (rdma): both buckets in one doorbell */
    RKV_COST_BYTES,           /* round trips are free, bytes cost (shm: a read is a memcpy):
                                 the second bucket only when the first holds no match */
};

struct rkv_client_transport {
    const char *scheme;  /* "rdma" or "shm" */
    enum rkv_read_cost read_cost; /* what its reads cost */

    /* Connect to `addr` (the URI after "scheme://"). Nothing is sent yet.
     * Messages in `err` (here and in set_region) say what went wrong and what
     * to do, but not which server: the client prefixes its URI, once. */
    rkv_status (*connect)(const char *addr, const struct rkv_ctrans_params *p,
                          struct rkv_trans_counters *counters,
                          struct rkv_ctrans **out, char *err, size_t err_len);

    /* Tell the transport where the region is (from the HELLO reply) and how
     * many credits / how large messages are. Called once after HELLO. */
    rkv_status (*set_region)(struct rkv_ctrans *t, const struct rkv_hello *h,
                             char *err, size_t err_len);

    /* The registered memory reads land in. */
    void *(*local_buf)(struct rkv_ctrans *t, size_t *len);

    /* Post all `n` reads as one chained list (one doorbell) and wait until
     * all have completed. Counts n reads and one round trip. */
    rkv_status (*read)(struct rkv_ctrans *t, const struct rkv_read_op *ops, unsigned n);

    /* Buffer for message i (0 <= i < credits) of the next send batch; at least
     * max_msg bytes. Valid until send(). */
    void *(*send_buf)(struct rkv_ctrans *t, unsigned i);

    /* Send messages 0..n-1 of send_buf() with lengths lens[] as one batch. */
    rkv_status (*send)(struct rkv_ctrans *t, const uint32_t *lens, unsigned n);

    /* Wait up to timeout_ms for the next reply. The message stays valid until
     * recv_done(). */
    rkv_status (*recv)(struct rkv_ctrans *t, const void **msg, size_t *len, unsigned timeout_ms);
    void (*recv_done)(struct rkv_ctrans *t);

    /* The server clock as the region header shows it now (common/clock.h),
     * when the transport sees the region without a round trip (shm: a load
     * from the mapping); NULL where it does not (rdma). */
    uint32_t (*clock)(struct rkv_ctrans *t);

    /* The staging buffer a large value is copied into for the server to pull;
     * *cap is its size and *desc the descriptor to send (len set by caller). */
    void *(*staging)(struct rkv_ctrans *t, size_t *cap, struct rkv_remote_buf *desc);

    void (*close)(struct rkv_ctrans *t);
};

extern const struct rkv_client_transport rkv_shm_client_transport;
extern const struct rkv_client_transport rkv_rdma_client_transport;

/* ------------------------------------------------------------ server side */

/* The table region the transports expose read-only. */
struct rkv_region {
    void *base;
    size_t size;
    int fd;             /* memfd (mode 0, sealed against writes but base's mapping); -1 if none */
    int ro_fd;          /* O_RDONLY descriptor of it, duplicated for shm clients; -1 if none */
    bool hugepages;     /* backed by hugepages */
};

/* Tunables for a listener. Zero means the default. */
struct rkv_strans_params {
    unsigned credits;          /* receive buffers per connection (default 64) */
    uint32_t max_msg;          /* bytes per message (default 4096) */
    unsigned max_conns;        /* connections at once (default 1024) */
    _Atomic uint64_t *rejected;/* bumped for each peer refused "busy" (limits, fds); may be NULL */
    /* rdma only */
    const char *device;        /* NULL: the device rdma_cm binds the address to */
    unsigned cq_size;          /* default 2 * (send + recv depth) */
    unsigned max_inline;       /* requested max_inline_data (default 256) */
    unsigned signal_interval;  /* signal one send in N (default 16) */
    uint8_t  tos;              /* IP ToS for RoCE */
    int gid_index;             /* -1: rdma_cm's choice */
};

struct rkv_listener;
struct rkv_sconn;

/* One received request, valid until the reply batch that answers it. */
struct rkv_msg {
    const void *data;
    uint32_t len;
};

struct rkv_server_transport {
    const char *scheme;

    /* Start listening on `addr`; registers/exports `region` for remote read. */
    rkv_status (*listen)(const char *addr, const struct rkv_region *region,
                         const struct rkv_strans_params *p,
                         struct rkv_listener **out, char *err, size_t err_len);
    /* fd that poll() reports readable when accept() has work. */
    int (*listener_fd)(struct rkv_listener *l);
    /* Non-blocking: a new connection in *out, or *out = NULL. Connections are
     * returned ready to poll(); errors on one peer do not fail the listener. */
    rkv_status (*accept)(struct rkv_listener *l, struct rkv_sconn **out);
    /* rdma: the region's rkey and address as clients must use them. */
    void (*region_desc)(struct rkv_listener *l, uint32_t *rkey, uint64_t *addr);
    void (*close_listener)(struct rkv_listener *l);

    /* The calls below are made only by the worker that owns the connection. */

    /* Received requests, up to max. The worker answers each with one reply
     * (reply_buf + reply) before polling this connection again. */
    unsigned (*poll)(struct rkv_sconn *c, struct rkv_msg *msgs, unsigned max);
    void *(*reply_buf)(struct rkv_sconn *c, unsigned i);
    /* Post replies 0..n-1 as one batch (one doorbell) and give the polled
     * request buffers back to the peer. */
    rkv_status (*reply)(struct rkv_sconn *c, const uint32_t *lens, unsigned n);
    /* Rendezvous: copy the client's staged value into dst (which may be in
     * the region). Fails with RKV_PROTOCOL if the descriptor is out of bounds. */
    rkv_status (*pull)(struct rkv_sconn *c, const struct rkv_remote_buf *rb, void *dst);
    /* False once the peer is gone or broke the protocol; then close(). */
    bool (*alive)(struct rkv_sconn *c);
    /* An fd that becomes readable when requests may be waiting (event mode);
     * arm() asks for that wake-up before the worker sleeps. */
    int (*event_fd)(struct rkv_sconn *c);
    void (*arm)(struct rkv_sconn *c);
    /* A short description for logs: "shm pid 1234", "rdma 192.0.2.1:5001". */
    const char *(*peer)(struct rkv_sconn *c);
    void (*close)(struct rkv_sconn *c);
};

extern const struct rkv_server_transport rkv_shm_server_transport;
extern const struct rkv_server_transport rkv_rdma_server_transport;
extern const struct rkv_server_transport rkv_tcp_server_transport; /* server/tcp_server.h */

#endif
