/* rdma_util.h — what the rdma client and server transports share.
 *
 * client/rdma_client.c and server/rdma_server.c are two ends of the same RC
 * connection and need the same pieces: turning verbs/rdma_cm failures into
 * messages that say what is wrong and what to do, the environment checks
 * (device present, /dev/infiniband permissions, port ACTIVE, GID index,
 * RLIMIT_MEMLOCK), registered buffers, RC queue-pair creation, and the
 * send-queue bookkeeping behind selective signaling and doorbell batching.
 *
 * The message and accounting helpers are plain C with no device behind them,
 * so tests/test_rdma_util.c checks them on any machine.
 */
#ifndef RKV_RDMA_UTIL_H
#define RKV_RDMA_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rkv.h"

/* Defaults and limits both ends agree on. The defaults are bare numbers:
 * rkv-server's settings table (server/config.c) spells them into its rows. */
#define RKV_RDMA_DEFAULT_INLINE 256 /* requested max_inline_data (clients) */
/* rkv-server's: a reply's header (32 bytes) and a little more go inline, and
 * a send queue entry stays small (Soft-RoCE: 256 bytes, not 512; an mlx5
 * WQE: 2 basic blocks, not 8), which is most of an idle connection's memory
 * (design.md, "Connection memory"). Longer replies go from the reply pool. */
#define RKV_RDMA_SERVER_INLINE     48
#define RKV_RDMA_DEFAULT_SIGNAL    16 /* signal one send in N */
#define RKV_RDMA_MAX_SIGNAL        64u
#define RKV_RDMA_STAGING_SIZE      ((1u << 20) + (64u << 10)) /* largest rendezvous value */
#define RKV_RDMA_DEFAULT_SRQ_DEPTH 1024  /* receive buffers per worker's shared queue, at most */
#define RKV_RDMA_BOOT_MSG          4096u /* HELLO buffers before max_msg is known */
#define RKV_RDMA_CM_TIMEOUT_MS     2000u /* address / route resolution */
/* RC retransmission (both ends; rkv_options rdma_ack_timeout / rdma_retry_count,
 * rkv-server [rdma] ack_timeout / retry_count): each try waits 4.096 us << ack_timeout
 * for the peer's ACK, and after retry_count retransmissions the transfer fails with
 * IBV_WC_RETRY_EXC_ERR. The defaults are librkv's (rkv.h), and rkv-server's too: a
 * vanished peer fails a transfer within rkv_rdma_detect_ns() of them. The retry
 * count's is below the field's 7: Soft-RoCE (rdma_rxe) takes a retry count of 7 to
 * mean "retry forever", as IB does for the RNR retry count, and would never notice
 * a dead peer. */
#define RKV_RDMA_ACK_TIMEOUT     RKV_DEFAULT_RDMA_ACK_TIMEOUT
#define RKV_RDMA_ACK_TIMEOUT_MIN 1u  /* 0 would mean "wait forever" */
#define RKV_RDMA_ACK_TIMEOUT_MAX 31u /* the field's 5 bits: 2.4 hours per try */
#define RKV_RDMA_RETRY_COUNT     RKV_DEFAULT_RDMA_RETRY_COUNT
#define RKV_RDMA_RETRY_COUNT_MIN 1u /* 0 fails at the first lost packet */
#define RKV_RDMA_RETRY_COUNT_MAX 7u /* the field's 3 bits */
/* RC notices a dead peer only when it sends: the server probes a connection
 * that brought no request for this long (an RDMA READ of the buffer the
 * client named at connect), so a client that vanished while idle loses its
 * slot within this + rkv_rdma_detect_ns(). */
#define RKV_RDMA_KEEPALIVE_MS 1000u
#define RKV_RDMA_PROBE_LEN    8u

/* Private data of the client's rdma_connect(): RKV_RDMA_PROBE_LEN bytes of
 * its own (REMOTE_READ) memory the server's keepalive probe reads. Not a
 * zero-length READ: Soft-RoCE before Linux 6.4 breaks the responder's QP
 * when a retransmitted zero-length READ arrives (it re-checks rkey 0). */
#define RKV_RDMA_CONNECT_MAGIC 0x524b4350u /* "RKCP" */
struct rkv_rdma_connect_info {
    uint32_t magic; /* RKV_RDMA_CONNECT_MAGIC */
    uint32_t rkey;
    uint64_t addr;
    /* A READ lane's (client/rdma_client.c) connect also carries these: a
     * server that offered RKV_FEATURE_LANES reads them, older servers read
     * the 16 bytes above only. */
    uint32_t flags;    /* RKV_RDMA_CONNECT_LANE, or 0 */
    uint32_t lane_key; /* the server's, from the owning connection's HELLO reply */
};
/* The connection is a READ lane: one-sided READs of the region only. The
 * server gives it a QP and nothing else (no credits, no receive or reply
 * buffers, no worker) and closes it if it ever sends a message. */
#define RKV_RDMA_CONNECT_LANE 1u
/* A READ lane request is at least this long (magic through lane_key). */
#define RKV_RDMA_CONNECT_LANE_LEN 24u

/* Private data of an rdma_reject(): why the server refused a connection. */
#define RKV_RDMA_REJECT_MAGIC 0x524a4b52u /* "RKJR" */
enum rkv_rdma_reject_reason {
    RKV_REJECT_TOO_MANY = 1, /* the server is at max_conns */
    RKV_REJECT_WRONG_DEVICE, /* arrived on a device the region is not registered on */
    RKV_REJECT_RESOURCES,    /* could not create the QP / buffers */
    RKV_REJECT_LANE_KEY,     /* a READ lane's key is not the listener's */
};
struct rkv_rdma_reject {
    uint32_t magic;  /* RKV_RDMA_REJECT_MAGIC */
    uint32_t reason; /* enum rkv_rdma_reject_reason */
};

/* ------------------------------------------------------------ messages */

/* "IBV_WC_REM_ACCESS_ERR" for a status; "IBV_WC_<unknown>" past the enum. */
const char *rkv_rdma_wc_status_name(enum ibv_wc_status s);
/* What the status usually means and what to do about it. */
const char *rkv_rdma_wc_status_hint(enum ibv_wc_status s);
/* "<what> failed: IBV_WC_RETRY_EXC_ERR (...hint...)" into err. */
void rkv_rdma_wc_error(enum ibv_wc_status s, const char *what, char *err, size_t err_len);

/* After a flushed completion: the asynchronous event of `ctx` that says
 * why the QP failed, if the device reported one. Non-blocking (the context's
 * async fd must be, as rkv_rdma_open_device() leaves it). Writes the reason
 * and returns true, or returns false. */
bool rkv_rdma_async_reason(struct ibv_context *ctx, char *buf, size_t len);
/* The text for one asynchronous event type. */
const char *rkv_rdma_async_event_text(enum ibv_event_type ev);

/* "ACTIVE", "DOWN", ... for ibv_port_state. */
const char *rkv_rdma_port_state_name(enum ibv_port_state s);

/* A failed rdma_cm step: `ev` is the event that arrived instead of the one
 * wanted (status and private data as the event carried them), `peer` the
 * address for the message. */
void rkv_rdma_cm_error(enum rdma_cm_event_type ev, int status, const void *private_data,
                       uint8_t private_len, const char *peer, char *err, size_t err_len);

/* An errno from opening or using the verbs stack, explained: EACCES/EPERM
 * (permissions on /dev/infiniband), ENODEV/ENOENT (no device), ENOMEM on
 * registration (memlock) ... `what` names the call that failed. */
void rkv_rdma_errno_error(int errnum, const char *what, char *err, size_t err_len);

/* ------------------------------------------------------------ checks */

/* Whether pinning `need` bytes fits under a RLIMIT_MEMLOCK of `limit` bytes
 * (RLIM_INFINITY: always). With CAP_IPC_LOCK the limit does not apply. On
 * false, err says how far off it is and how to raise it. */
bool rkv_rdma_memlock_ok(uint64_t limit, uint64_t need, bool cap_ipc_lock, const char *what,
                         char *err, size_t err_len);
/* Whether a /proc/PID/status text shows CAP_IPC_LOCK in CapEff. */
bool rkv_rdma_status_has_ipc_lock(const char *proc_status);
/* rkv_rdma_memlock_ok() for this process (getrlimit + /proc/self/status). */
rkv_status rkv_rdma_check_memlock(uint64_t need, const char *what, char *err, size_t err_len);

/* Fail unless port `port` of `ctx` is ACTIVE; port 0 means "any port". */
rkv_status rkv_rdma_check_port(struct ibv_context *ctx, uint8_t port, char *err, size_t err_len);
/* Fail unless GID `gid_index` exists and is set on the port. */
rkv_status rkv_rdma_check_gid(struct ibv_context *ctx, uint8_t port, int gid_index, char *err,
                              size_t err_len);

/* rdma_cm's own context for device `name` (so PDs and QPs made on it match
 * cm ids), or, with name NULL, the only device there is. */
rkv_status rkv_rdma_find_device(const char *name, struct ibv_context **out, char *err,
                                size_t err_len);
const char *rkv_rdma_device_name(const struct ibv_context *ctx);

/* A non-blocking rdma_cm event channel and an RC (RDMA_PS_TCP) id on it
 * whose context is `context`. On failure neither exists and err says why
 * (no device, /dev/infiniband permissions, rdma_ucm not loaded ...). */
rkv_status rkv_rdma_open_id(void *context, struct rdma_event_channel **channel,
                            struct rdma_cm_id **id, char *err, size_t err_len);

/* Set the local ACK timeout exponent of the QP `id` connects (0: the
 * default RKV_RDMA_ACK_TIMEOUT) so a peer that vanished without a disconnect
 * fails a transfer in seconds, not the fabric default's minutes. Call before
 * rdma_connect/rdma_accept. */
void rkv_rdma_set_ack_timeout(struct rdma_cm_id *id, unsigned ack_timeout);

/* The longest an RC transfer to a dead peer takes to fail: every try waits
 * 4.096 us x 2^ack_timeout, and there are retry_count + 1 of them. In ns. */
uint64_t rkv_rdma_detect_ns(unsigned ack_timeout, unsigned retry_count);

/* Whether ack_timeout (RKV_RDMA_ACK_TIMEOUT_MIN..MAX) and retry_count
 * (RKV_RDMA_RETRY_COUNT_MIN..MAX) are usable; on false, err says which is
 * out of range and what the range is, naming the setting as timeout_name
 * or retry_name ("rdma_ack_timeout", "[rdma] retry_count"). */
bool rkv_rdma_rc_check(unsigned ack_timeout, unsigned retry_count, const char *timeout_name,
                       const char *retry_name, char *err, size_t err_len);

/* rdma_accept() for a QP made with rdma_create_qp, with THIS end's RC retry
 * count: rdma_cm would give the passive QP the count from the client's
 * connect request. Moves the QP to RTR and RTS here (with cp's READ depths)
 * and lets rdma_accept() only answer. Returns 0 or an errno. */
int rkv_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *cp, unsigned retry_count);

/* Whether /sys/class/infiniband lists any device. */
bool rkv_rdma_sysfs_has_devices(void);

/* "HOST:PORT" (IPv6 as "[addr]:port"; HOST may be a name) to a socket
 * address. `passive` resolves for bind (a wildcard host is allowed). */
rkv_status rkv_rdma_parse_addr(const char *addr, bool passive, struct sockaddr_storage *out,
                               char *err, size_t err_len);
/* Whether the address is 0.0.0.0 / ::. */
bool rkv_rdma_addr_is_wildcard(const struct sockaddr *sa);
/* "192.0.2.1:7471" / "[::1]:7471". */
void rkv_rdma_format_addr(const struct sockaddr *sa, char *buf, size_t len);

/* ------------------------------------------------------------ resources */

/* One registered, page-aligned allocation: a mapping of its own, zeroed. */
struct rkv_rdma_buf {
    uint8_t *mem;      /* page-aligned, zeroed */
    size_t size;       /* bytes */
    struct ibv_mr *mr; /* its registration */
};
rkv_status rkv_rdma_buf_alloc(struct ibv_pd *pd, size_t size, int access, const char *what,
                              struct rkv_rdma_buf *b, char *err, size_t err_len);
void rkv_rdma_buf_free(struct rkv_rdma_buf *b);

/* ibv_reg_mr() with IBV_ACCESS_RELAXED_ORDERING added, retried without it
 * when the device refuses it (EINVAL / EOPNOTSUPP). *relaxed says which. */
struct ibv_mr *rkv_rdma_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, bool *relaxed,
                               const char *what, char *err, size_t err_len);

/* A ring of equal-sized slots in one registered buffer; slot i of the next
 * batch is (head + i) % count. */
struct rkv_rdma_ring {
    struct rkv_rdma_buf buf;
    uint32_t stride; /* bytes per slot */
    uint32_t count;  /* slots */
    uint32_t head;   /* first slot of the next batch */
};
static inline uint8_t *rkv_rdma_ring_slot(const struct rkv_rdma_ring *r, unsigned i)
{
    return r->buf.mem + (size_t)((r->head + i) % r->count) * r->stride;
}

/* The device limits a connection is sized against. */
struct rkv_rdma_caps {
    uint32_t max_qp_wr;       /* work requests per queue */
    uint32_t max_cqe;         /* completions per CQ */
    uint8_t max_rd_atom;      /* READs this side can serve at once (responder) */
    uint8_t max_init_rd_atom; /* READs this side can have in flight (initiator) */
    uint32_t max_srq;         /* shared receive queues; 0: the device has none */
    uint32_t max_srq_wr;      /* receives one shared receive queue holds */
};
rkv_status rkv_rdma_query_caps(struct ibv_context *ctx, struct rkv_rdma_caps *caps, char *err,
                               size_t err_len);

/* Create an RC QP on `pd` with its own send and receive CQs: through
 * rdma_create_qp() as the QP of `id` (rdma_cm then moves it through its
 * states), or, with id NULL, a plain ibv_create_qp() the caller connects
 * itself. With `srq` the QP takes its receives from that shared receive
 * queue (recv_wr is then ignored). `*max_inline` is the requested inline
 * size on entry and what the QP granted on return (halved until the device
 * accepts it). */
rkv_status rkv_rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *send_cq,
                              struct ibv_cq *recv_cq, struct ibv_srq *srq, uint32_t send_wr,
                              uint32_t recv_wr, uint32_t *max_inline, struct ibv_qp **qp, char *err,
                              size_t err_len);

/* Asynchronous events of shared receive queues: an SRQ rkv creates has as
 * its srq_context NULL or an atomic_bool that IBV_EVENT_SRQ_LIMIT_REACHED
 * sets (whoever reads the device's async events: the owner looks at the flag
 * and re-posts). rkv_rdma_async_reason() notes them too. Takes every event
 * pending on `ctx` (non-blocking) and acknowledges it; returns how many. */
unsigned rkv_rdma_drain_async(struct ibv_context *ctx);
/* Set the flag of an SRQ_LIMIT_REACHED event's SRQ; other events: nothing.
 * Call between ibv_get_async_event() and its ack. */
void rkv_rdma_note_async(const struct ibv_async_event *ev);

/* Move a QP the caller created (not rdma_create_qp) to `state` with the
 * attributes rdma_cm computed for `id` (rdma_init_qp_attr); where those
 * carry QP access flags, `access` replaces them (rdma_cm always grants remote
 * write). Returns 0 or an errno. */
int rkv_rdma_modify_qp(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state, int access);

/* Open a verbs context of our own on the device named `name`. librdmacm
 * keeps one context per device for the whole process, and a forked child
 * inherits the parent's, which the kernel refuses to serve for the child
 * (EACCES on post): a context opened by this process works in either. */
rkv_status rkv_rdma_open_device(const char *name, struct ibv_context **out, char *err,
                                size_t err_len);

/* ------------------------------------------------------------ send queue */

/* Bookkeeping for one send queue under selective signaling. Only signaled
 * work requests produce completions; each carries in its wr_id how many
 * slots it frees (itself and the unsignaled ones before it: RC completes in
 * order). Rules that keep waits finite:
 *   - one WR in `interval` is signaled;
 *   - the last WR of a batch is signaled when more than `keep` would stay
 *     outstanding, so a wait for room always has a completion coming;
 *   - callers wait for room before posting and, for send batches whose
 *     buffers are reused round-robin, until at most `keep` are outstanding. */
struct rkv_rdma_sq {
    uint32_t depth;       /* slots in the send queue */
    uint32_t keep;        /* most WRs left outstanding after a batch */
    uint32_t interval;    /* signal one WR in this many (>= 1) */
    uint32_t outstanding; /* posted, completion not yet seen */
    uint32_t unsignaled;  /* posted since the last signaled WR */
    uint32_t seq;         /* signaled WRs posted so far */
    uint64_t taken;       /* WRs taken so far: WR number `taken` is the one just taken, and
                             taken - outstanding of them have completed (RC completes in order) */
};

void rkv_rdma_sq_init(struct rkv_rdma_sq *sq, uint32_t depth, uint32_t keep, uint32_t interval);

/* Account one WR about to be posted; returns its wr_id and whether to set
 * IBV_SEND_SIGNALED. `last`: the last WR of its batch; `force`: signal it
 * regardless (a READ the caller waits for). */
static inline uint64_t rkv_rdma_sq_take(struct rkv_rdma_sq *sq, bool last, bool force, bool *signaled)
{
    sq->taken++;
    sq->outstanding++;
    sq->unsignaled++;
    if (force || sq->unsignaled >= sq->interval || (last && sq->outstanding > sq->keep)) {
        uint64_t wr_id = ((uint64_t)++sq->seq << 32) | sq->unsignaled;
        sq->unsignaled = 0;
        *signaled = true;
        return wr_id;
    }
    *signaled = false;
    return (uint64_t)sq->seq << 32;
}

/* A successful completion of a signaled WR came back. */
static inline void rkv_rdma_sq_done(struct rkv_rdma_sq *sq, uint64_t wr_id)
{
    uint32_t freed = (uint32_t)wr_id;
    sq->outstanding = freed > sq->outstanding ? 0 : sq->outstanding - freed;
}

/* Called while a wait finds nothing (about every 256 empty polls): true
 * stops the wait, e.g. because the peer is known to be gone. */
typedef bool (*rkv_rdma_idle_fn)(void *ctx);

/* Poll `cq` (the send CQ) until at most `limit` WRs are outstanding or
 * `timeout_ns` passes. The clock is first read only after 256 empty polls,
 * so a wait that ends sooner (a READ on a NIC) reads no clock at all.
 * Returns 0, -ETIMEDOUT, -EIO with *bad set to the failed status, -ECANCELED
 * when idle(ctx) (may be NULL) said stop, or -EDEADLK if no completion can
 * come. */
int rkv_rdma_sq_wait(struct rkv_rdma_sq *sq, struct ibv_cq *cq, uint32_t limit, uint64_t timeout_ns,
                     rkv_rdma_idle_fn idle, void *ctx, enum ibv_wc_status *bad);
/* One non-blocking poll of the send CQ: account what completed. Returns 0
 * or -EIO with *bad set. */
int rkv_rdma_sq_poll(struct rkv_rdma_sq *sq, struct ibv_cq *cq, enum ibv_wc_status *bad);

/* Post lens[0..n-1] bytes from slots 0..n-1 of `ring` as one chained SEND
 * list (one ibv_post_send): inline when len <= max_inline, signaled per the
 * sq rules, the ring head advanced by n. `wrs`/`sges` are scratch arrays of
 * n entries. The caller waited for room. Returns 0 or an errno; *inlined
 * counts the inline sends. */
int rkv_rdma_post_sends(struct ibv_qp *qp, struct rkv_rdma_sq *sq, struct rkv_rdma_ring *ring,
                        const uint32_t *lens, unsigned n, uint32_t max_inline,
                        struct ibv_send_wr *wrs, struct ibv_sge *sges, unsigned *inlined);

/* Post receive buffers idx[0..n-1] (slot i at buf->mem + i*stride, wr_id = i)
 * as one chained list. Returns 0 or an errno. */
int rkv_rdma_post_recvs(struct ibv_qp *qp, const struct rkv_rdma_buf *buf, uint32_t stride,
                        const uint32_t *idx, unsigned n, struct ibv_recv_wr *wrs,
                        struct ibv_sge *sges);

#endif
