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
 *   tcp   server/tcp_server.c only: a byte stream, the door memcached
 *         clients come in by. It carries no rkv messages and offers no
 *         one-sided reads, so it has no rkv_msg_transport_ops (below).
 *
 * A server transport carries messages (rdma, shm: they fill
 * rkv_msg_transport_ops too) or bytes (tcp). What the messages or bytes
 * mean is the business of the server's wire protocol (server/wire.h), which
 * each listener's URI scheme chooses; no transport knows which it carries.
 *
 * Callers find a transport by its URI scheme (rkv_client_transport_by_scheme,
 * rkv_server_transport_by_scheme: the tables in client/transports.c and
 * server/transports.c), and know nothing else about it: what differs between
 * transports is an op or a parameter here. A new transport adds its files and
 * one entry in each table.
 *
 * Message contract (message transports, both directions): a message is at
 * most `max_msg` bytes and is delivered whole, with its byte count, or not
 * at all. The client keeps at most `credits` requests outstanding; the
 * server answers each request with exactly one reply, in order, and the
 * reply returns the credit.
 *
 * Counting contract: every call that makes the hardware (or the peer) start
 * work — one ibv_post_send, one ring publish — adds 1 to `doorbells`.
 *
 * Listener and connection types: the ops take the generic struct
 * rkv_listener and rkv_sconn (server) and rkv_ctrans (client), and code
 * outside a transport knows only those. Each transport has its own struct
 * of each, named for it (struct rdma_sconn, struct tcp_listener, struct
 * shm_ctrans, ...: one definition each), which embeds the generic one as
 * its first member; the transport hands out a pointer to that member and
 * its ops get their own struct back with a container_of (RKV_CONTAINER_OF,
 * util.h) in a helper next to its definition (rdma_sconn_of()). The
 * generic structs hold nothing the transports share yet, so each has just
 * a placeholder byte (ISO C has no empty struct). Why not one opaque tag
 * that each transport defines: that is several different types under one
 * name to a grep, a debugger and a link-time type check.
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
    uint64_t offset; /* from the region start; offset+len <= region_size */
    uint32_t len;
    void *dst; /* inside the transport's local_buf() */
};

/* Tunables a client passes to its transport. Start from
 * rkv_ctrans_params_init() and change what differs; zero (or NULL) in any
 * field, or a NULL params pointer, also means its default. Every transport
 * resolves them with rkv_ctrans_params_resolve(), so each default is the
 * same for all of them. */
struct rkv_ctrans_params {
    size_t local_buf_size;    /* bytes of read-landing memory (>= 2 buckets + largest item),
                                 at most RKV_CTRANS_MAX_LOCAL_BUF */
    unsigned timeout_ms;      /* connect / wait timeout */
    unsigned signal_interval; /* rdma: signal one send in N, at most RKV_RDMA_MAX_SIGNAL */
    const char *device;       /* rdma: device name, NULL = rdma_cm's choice */
    unsigned ack_timeout;     /* rdma: RC ACK timeout exponent (rdma_util.h) */
    unsigned retry_count;     /* rdma: RC retransmissions (rdma_util.h) */
    uint32_t lane_key;        /* rdma, tests only: nonzero connects as a READ lane with this
                                 key (the server's, from a HELLO): a lane that then sends
                                 must be closed. librkv opens its lanes itself. */
};

#define RKV_CTRANS_MAX_LOCAL_BUF (1ull << 30) /* local_buf_size: a mapping, not a cache */

/* Every field at its default (common/transport.c): librkv's rkv_options
 * defaults (RKV_DEFAULT_* in rkv.h) where rkv_options sets the field. */
void rkv_ctrans_params_init(struct rkv_ctrans_params *p);

/* What a connection runs with: *p (NULL: the defaults) with each zero
 * replaced by its default and signal_interval capped at RKV_RDMA_MAX_SIGNAL.
 * Returns RKV_OK, or RKV_INVALID with `err` saying which field is out of
 * range and what is accepted (local_buf_size over RKV_CTRANS_MAX_LOCAL_BUF;
 * ack_timeout or retry_count outside rdma_util.h's RC ranges). Every
 * transport's connect() calls it first. */
rkv_status rkv_ctrans_params_resolve(const struct rkv_ctrans_params *p,
                                     struct rkv_ctrans_params *out, char *err, size_t err_len);

/* Counters a transport bumps; owned by the caller, shared over its shards. */
struct rkv_trans_counters {
    uint64_t reads, read_round_trips, doorbells, sends, inline_sends;
    /* rdma READ lanes opened, and of those in a thread domain of their own;
     * bumped atomically by whichever thread opens one, never reset */
    uint64_t lanes, lanes_td;
};

/* Thread contexts (read_shared's `reader`) a transport serves at most; a
 * thread past them reads under the handle's lock. */
#define RKV_SHARED_READERS_MAX 4096u

/* One connection, one thread: the generic part of a client transport's own
 * connection struct (shm_ctrans, rdma_ctrans; see the top of this file). */
struct rkv_ctrans {
    unsigned char unused;
};

/* What a connection's reads cost: how a GET (common/lookup.c) batches them. */
enum rkv_read_cost {
    RKV_COST_ROUND_TRIPS = 0, /* round trips cost, a second READ in the same doorbell nearly
                                 nothing (an RDMA NIC): both buckets in one doorbell */
    RKV_COST_PER_READ,        /* each read costs about as much as a round trip (shm, where a
                                 read is a memcpy; a software RDMA device that serves READs one
                                 by one): the second bucket only when the first holds no match */
};

/* A client transport. Every op is required (never NULL) unless it says
 * "optional"; call optional ops only through their rkv_ctrans_*() wrapper
 * below, which holds the NULL check. All ops but connect take a connection
 * connect() returned and are called by the one thread that owns it, but
 * read_shared, prefetch and clock, which any thread may call at once. */
struct rkv_client_transport {
    const char *scheme; /* "rdma" or "shm": the URI's "scheme://" */

    /* Required. Called once per connection attempt (rkv_connect, and each
     * reconnect) with `addr`, the URI after "scheme://"; p may be NULL.
     * Nothing is sent yet. Returns RKV_OK and *out, or RKV_INVALID (bad
     * address), RKV_CONNECTION, RKV_TIMEOUT, RKV_NO_MEMORY with `err` set.
     * Messages in `err` (here and in set_region) say what went wrong and what
     * to do, but not which server: the client prefixes its URI, once. */
    rkv_status (*connect)(const char *addr, const struct rkv_ctrans_params *p,
                          struct rkv_trans_counters *counters, struct rkv_ctrans **out, char *err,
                          size_t err_len);

    /* Required. Called once after HELLO with its reply: where the region is,
     * how many credits and how large messages are. Returns RKV_OK, or
     * RKV_PROTOCOL / RKV_CONNECTION with `err` set (the client then closes). */
    rkv_status (*set_region)(struct rkv_ctrans *t, const struct rkv_hello *h, char *err,
                             size_t err_len);

    /* Required. Called once after set_region(): what this connection's
     * reads cost. A transport may measure it with a few reads of the region,
     * which it does not count in its counters. */
    enum rkv_read_cost (*read_cost)(struct rkv_ctrans *t);

    /* Required. The registered memory reads land in, and its size in *len. */
    void *(*local_buf)(struct rkv_ctrans *t, size_t *len);

    /* Required. Post all `n` reads as one chained list (one doorbell) and
     * wait until all have completed. Counts n reads and one round trip.
     * Returns RKV_OK, RKV_INVALID (an op outside the region or local_buf),
     * RKV_CONNECTION or RKV_TIMEOUT (the connection is then unusable). */
    rkv_status (*read)(struct rkv_ctrans *t, const struct rkv_read_op *ops, unsigned n);

    /* Optional (NULL where reads go only through the connection's own
     * queue). read() for any thread at once, beside the owner's calls: lands
     * in the caller's `local` (local_len bytes) instead of local_buf(),
     * counts nothing in the connection's counters (a dead server's
     * RKV_CONNECTION is for the caller to act on, under its own lock).
     * `reader` (< RKV_SHARED_READERS_MAX) names the calling thread's context:
     * one thread's at a time. shm copies from its mapping; rdma posts on a
     * READ lane (rdma_client.c) and answers RKV_SERVER_BUSY, having read
     * nothing, where it has no lane to offer (the server offers none, or
     * opening one failed): the caller then reads through read(). */
    rkv_status (*read_shared)(struct rkv_ctrans *t, unsigned reader, const struct rkv_read_op *ops,
                              unsigned n, const void *local, size_t local_len);

    /* Optional (NULL where a read's source is not this host's memory: rdma).
     * Start loading bytes [offset, offset+len) of the region into the CPU's
     * caches for a read that follows (a GET's cached location: its item's
     * miss then overlaps the lookup's planning). Only a hint: any offset is
     * accepted, nothing is read or counted. */
    void (*prefetch)(struct rkv_ctrans *t, uint64_t offset, uint32_t len);

    /* Required. Buffer for message i (0 <= i < credits) of the next send
     * batch; at least max_msg bytes. Valid until send(). */
    void *(*send_buf)(struct rkv_ctrans *t, unsigned i);

    /* Required. Send messages 0..n-1 of send_buf() with lengths lens[] as one
     * batch; the caller holds n free credits. Returns RKV_OK, or
     * RKV_CONNECTION / RKV_TIMEOUT (the connection is then unusable). */
    rkv_status (*send)(struct rkv_ctrans *t, const uint32_t *lens, unsigned n);

    /* Required. Wait up to timeout_ms for the next reply; RKV_OK with *msg
     * and *len, valid until recv_done(), or RKV_TIMEOUT / RKV_CONNECTION. */
    rkv_status (*recv)(struct rkv_ctrans *t, const void **msg, size_t *len, unsigned timeout_ms);
    /* Required. The message recv() returned is consumed; its credit is free. */
    void (*recv_done)(struct rkv_ctrans *t);

    /* Optional (NULL where the transport does not map the region: rdma). The
     * server clock as the region header shows it now (common/clock.h), read
     * without a round trip (shm: a load from the mapping). */
    uint32_t (*clock)(struct rkv_ctrans *t);

    /* Required. The staging buffer a large value is copied into for the
     * server to pull; *cap is its size and *desc the descriptor to send (len
     * set by caller). */
    void *(*staging)(struct rkv_ctrans *t, size_t *cap, struct rkv_remote_buf *desc);

    /* Required. Close the connection and free everything it holds. */
    void (*close)(struct rkv_ctrans *t);

    /* Optional. After an op failed: what the transport saw, in words ("RDMA
     * READ of the server's region failed: IBV_WC_RETRY_EXC_ERR (...)"), for
     * the handle's rkv_last_error; NULL or "" when it knows no more than the
     * status. Valid until close(). */
    const char *(*why)(struct rkv_ctrans *t);
};

/* Whether ops maps the region, so that rkv_ctrans_clock() needs no read. */
static inline bool rkv_ctrans_maps_clock(const struct rkv_client_transport *ops)
{
    return ops->clock != NULL;
}

/* The optional clock op: true with the server clock in *now where the
 * transport maps the region; false where the caller must keep its own. */
static inline bool rkv_ctrans_clock(const struct rkv_client_transport *ops, struct rkv_ctrans *t,
                                    uint32_t *now)
{
    if (ops->clock == NULL)
        return false;
    *now = ops->clock(t);
    return true;
}

extern const struct rkv_client_transport rkv_shm_client_transport;
extern const struct rkv_client_transport rkv_rdma_client_transport;

/* The client transport for a URI's scheme ("shm", "rdma"), or NULL
 * (client/transports.c). */
const struct rkv_client_transport *rkv_client_transport_by_scheme(const char *scheme);

/* ------------------------------------------------------------ server side */

/* The table region the transports expose read-only. */
struct rkv_region {
    void *base;
    size_t size;
    int fd;         /* memfd (mode 0, sealed against writes but base's mapping); -1 if none */
    int ro_fd;      /* O_RDONLY descriptor of it, duplicated for shm clients; -1 if none */
    bool hugepages; /* backed by hugepages */
};

/* Tunables for a listener. Start from rkv_strans_params_init() and change
 * what differs; a zero count (credits, max_msg, max_conns, max_inline,
 * signal_interval) also means its default, but gid_index 0 is GID 0. The
 * defaults are these constants and rdma_util.h's: bare numbers, because
 * rkv-server's settings table (server/config.c) spells them into its rows,
 * so its defaults are the listeners'. */
#define RKV_STRANS_DEFAULT_CREDITS   64
#define RKV_STRANS_DEFAULT_MAX_MSG   4096
#define RKV_STRANS_DEFAULT_MAX_CONNS 4096 /* design.md, "Connection memory" */
struct rkv_strans_params {
    unsigned credits;           /* receive buffers per connection */
    uint32_t max_msg;           /* bytes per message */
    unsigned max_conns;         /* connections at once */
    _Atomic uint64_t *rejected; /* bumped for each peer refused "busy" (limits, fds); may be NULL */
    bool make_dir;              /* path addresses (shm): create a missing parent directory
                                   (one level, 0755) before binding (default false) */
    uint64_t (*now_ns)(void);   /* shm only: the clock handshake deadlines are timed on;
                                   NULL (default): rkv_now_ns. Tests drive their own. */
    /* rdma only */
    const char *device;       /* NULL (default): the device rdma_cm binds the address to */
    unsigned cq_size;         /* 0 (default): what the queue it serves needs */
    unsigned max_inline;      /* requested max_inline_data */
    unsigned signal_interval; /* signal one send in N */
    uint8_t tos;              /* IP ToS for RoCE (default 0) */
    int gid_index;            /* -1 (default): rdma_cm's choice */
    unsigned ack_timeout;     /* RC ACK timeout exponent: 4.096 us x 2^N per try */
    unsigned retry_count;     /* RC retransmissions before a transfer fails */
    unsigned workers;         /* the server's worker threads: one shared receive queue each */
    unsigned srq_depth;       /* receive buffers per shared receive queue at most */
    bool no_srq;              /* no shared receive queues: each connection posts its credits'
                                 own (default false; also when the device has none) */
    unsigned reply_pool;      /* reply buffers per worker at most, at least 2 x credits;
                                 0 (default): srq_depth */
};

/* Every field at its default (common/transport.c): the constants above and
 * rdma_util.h's, which rkv-server's settings table gives too. */
void rkv_strans_params_init(struct rkv_strans_params *p);

/* What a listener runs with: *p (NULL: the defaults) with each zero count
 * replaced by its default. Both listeners call it first. */
void rkv_strans_params_resolve(const struct rkv_strans_params *p, struct rkv_strans_params *out);

/* The generic part of a server transport's own listener (tcp_listener,
 * shm_listener, rdma_listener) and connection (tcp_sconn, shm_sconn,
 * rdma_sconn) structs; see the top of this file. */
struct rkv_listener {
    unsigned char unused;
};
struct rkv_sconn {
    unsigned char unused;
};

/* One received request, valid until the reply batch that answers it. */
struct rkv_msg {
    const void *data;
    uint32_t len;
};

/* What only a message transport (shm, rdma) has: replies built in buffers
 * it lends, a region its clients read one-sidedly, values they stage for
 * the server to pull. They serve the rkv wire protocol (server/wire_rkv.c,
 * request.c). A byte-stream transport (tcp) has none of them: its `msg` is
 * NULL, and only a wire protocol that speaks byte streams is paired with it
 * (server/wires.c). In a message transport every op here is required. */
struct rkv_msg_transport_ops {
    /* Required. Main thread, for each HELLO reply: the region's rkey and
     * address as clients must use them (rdma); zeros where clients map the
     * region (shm). */
    void (*region_desc)(struct rkv_listener *l, uint32_t *rkey, uint64_t *addr);
    /* Optional (NULL where clients read no lanes: shm). Main thread, for
     * each HELLO reply: the key a READ lane's connect must carry (rdma;
     * RKV_FEATURE_LANES), never 0. */
    uint32_t (*lane_key)(struct rkv_listener *l);
    /* Required. Where reply i of the current batch goes (the answer to its
     * i-th request): max_msg bytes, which the peer may be able to read
     * (shm) — write it, never read it back. */
    void *(*reply_buf)(struct rkv_sconn *c, unsigned i);
    /* Required. Rendezvous: copy the client's staged value into dst (which may
     * be in the region). Returns RKV_OK, or RKV_PROTOCOL if the descriptor is
     * out of bounds, RKV_CONNECTION if the copy failed. */
    rkv_status (*pull)(struct rkv_sconn *c, const struct rkv_remote_buf *rb, void *dst);
};

/* A server transport. Every op is required (never NULL) unless it says
 * "optional"; call optional ops only through their rkv_sconn_*() wrapper
 * below. Listener ops are called by the main thread; connection ops only by
 * the worker that owns the connection. */
struct rkv_server_transport {
    const char *scheme; /* "rdma", "shm" or "tcp": the listen URI's "scheme://" */
    /* Its connections have work only when event_fd says so (a socket): the
     * worker watches event_fd in its own epoll set for events(), serves a
     * connection only when that epoll reports it, never in its polling
     * sweep, and after each serve changes the registration if events()
     * changed. false: polled (shm, rdma). */
    bool event_driven;
    /* Required in a message transport (shm, rdma); NULL in a byte stream
     * (tcp). Its ops are above. */
    const struct rkv_msg_transport_ops *msg;

    /* Required. Called once per listen URI at start-up with `addr`, the URI
     * after "scheme://"; p may be NULL (the defaults). Registers/exports
     * `region` for remote read. Returns RKV_OK and *out, or RKV_INVALID (bad
     * address or parameters), RKV_CONNECTION (cannot bind), RKV_NO_MEMORY,
     * RKV_INTERNAL, with `err` saying what to do. */
    rkv_status (*listen)(const char *addr, const struct rkv_region *region,
                         const struct rkv_strans_params *p, struct rkv_listener **out, char *err,
                         size_t err_len);
    /* Required. The fd that poll() reports readable when accept() has work. */
    int (*listener_fd)(struct rkv_listener *l);
    /* Required. Called when listener_fd is readable and once a second;
     * non-blocking. RKV_OK with a new connection in *out, ready to poll(), or
     * *out = NULL when none is pending; errors on one peer (refused, counted
     * in p->rejected) do not fail the listener. */
    rkv_status (*accept)(struct rkv_listener *l, struct rkv_sconn **out);
    /* Required. Called at shutdown, after every connection is closed. */
    void (*close_listener)(struct rkv_listener *l);

    /* The calls below are made only by the worker that owns the connection. */

    /* Required. A message transport: received requests, up to max (0:
     * none). The worker may poll again before it replies (requests that
     * arrived meanwhile join the batch); every request polled and not yet
     * answered is one entry of the current batch, in arrival order, and
     * stays valid until reply(). A transport never returns more unanswered
     * requests than it has reply slots for.
     * A byte stream: 1 with msgs[0] = all input received and not yet
     * consumed, valid until reply(), or 0 when there is none or it takes no
     * more for now (server/tcp_server.h). */
    unsigned (*poll)(struct rkv_sconn *c, struct rkv_msg *msgs, unsigned max);
    /* Required. A message transport: post replies 0..n-1 of the current
     * batch (n = every request polled so far; reply i in reply_buf(i)) as
     * one batch — one doorbell: one chained ibv_post_send signalled per
     * signal_interval, one ring publish — and give the request buffers back
     * to the peer in one call (one chained ibv_post_recv).
     * A byte stream: n is 1 and lens[0] the input bytes now consumed; the
     * answers, already appended through the transport's own stream calls
     * (server/tcp_server.h), are written.
     * Returns RKV_OK, or an error after which the connection must be
     * closed. */
    rkv_status (*reply)(struct rkv_sconn *c, const uint32_t *lens, unsigned n);
    /* Required. False once the peer is gone or broke the protocol; then close(). */
    bool (*alive)(struct rkv_sconn *c);
    /* Optional (sleeping workers: poll_mode adaptive or event; both or
     * neither, but for event_driven transports: event_fd and events).
     * event_fd: an fd that becomes readable when requests may be
     * waiting, or -1; arm: ask for that wake-up, called before the worker
     * sleeps. A request that arrived before arm() may raise no wake-up: the
     * worker polls every connection once more after arming and sleeps only
     * when that finds nothing. Without them the connection is served by
     * polling only (the worker wakes at least every 100 ms). */
    int (*event_fd)(struct rkv_sconn *c);
    void (*arm)(struct rkv_sconn *c);
    /* Optional (rdma on shared receive queues; both or neither): a wake-up
     * that all the connections one worker owns of one listener share, beside
     * their event_fd. wake_fd: that fd, the same for each of them, with in
     * *ctx what wake() takes; or -1. The worker watches it in its epoll set
     * (once, while it owns a connection that names it) and calls wake(ctx)
     * when it is readable: the transport takes what arrived for all of them
     * and makes the event_fd of each armed one that has requests readable. */
    int (*wake_fd)(struct rkv_sconn *c, void **ctx);
    void (*wake)(void *ctx);
    /* Required when event_driven (which has event_fd and no arm): the epoll
     * events (EPOLLIN, EPOLLOUT, EPOLLRDHUP) event_fd must be watched for
     * now; 0 when it waits for nothing but hang-up. */
    uint32_t (*events)(struct rkv_sconn *c);
    /* Required. A short description for logs: "shm pid 1234", "rdma 192.0.2.1:5001". */
    const char *(*peer)(struct rkv_sconn *c);
    /* Optional (main thread, right after accept). The worker (0 ..
     * rkv_strans_params.workers - 1) that must own the connection, because
     * it shares that worker's resources (rdma: its shared receive queue), or
     * -1 for any. */
    int (*worker_of)(struct rkv_sconn *c);
    /* Required. Close the connection and free everything it holds. */
    void (*close)(struct rkv_sconn *c);
};

/* The optional worker_of op: the worker that must own c, or -1 for any. */
static inline int rkv_sconn_worker_of(const struct rkv_server_transport *ops, struct rkv_sconn *c)
{
    return ops->worker_of != NULL ? ops->worker_of(c) : -1;
}

/* The optional event_fd op: the connection's wake-up fd, or -1 (poll only). */
static inline int rkv_sconn_event_fd(const struct rkv_server_transport *ops, struct rkv_sconn *c)
{
    return ops->event_fd != NULL ? ops->event_fd(c) : -1;
}

/* The optional wake_fd op: the wake-up fd c shares with its worker's other
 * connections (and *ctx for wake()), or -1. */
static inline int rkv_sconn_wake_fd(const struct rkv_server_transport *ops, struct rkv_sconn *c,
                                    void **ctx)
{
    *ctx = NULL;
    return ops->wake_fd != NULL ? ops->wake_fd(c, ctx) : -1;
}

/* The optional arm op: ask for a wake-up on event_fd before sleeping. */
static inline void rkv_sconn_arm(const struct rkv_server_transport *ops, struct rkv_sconn *c)
{
    if (ops->arm != NULL)
        ops->arm(c);
}

extern const struct rkv_server_transport rkv_shm_server_transport;
extern const struct rkv_server_transport rkv_rdma_server_transport;
extern const struct rkv_server_transport rkv_tcp_server_transport; /* server/tcp_server.h */

/* The server transport for a listen URI's scheme ("shm", "rdma", "tcp"), or NULL
 * (server/transports.c). */
const struct rkv_server_transport *rkv_server_transport_by_scheme(const char *scheme);

#endif
