/* shm_ring.h — the shared-memory rings and handshake of the shm transport.
 *
 * A shm connection is one memfd the server creates and both processes map
 * read-write. It holds a control block, two single-producer single-consumer
 * rings (requests client→server, replies server→client) and a staging area
 * the client copies large values into for the server to pull:
 *
 *   +--------------------------+ 0
 *   | rkv_shm_ctrl             |  ring positions and flags, one cache line each
 *   +--------------------------+ req_off (page aligned: the control block's page alone)
 *   | request ring             |  credits slots of slot_stride bytes
 *   +--------------------------+ rep_off
 *   | reply ring               |  credits slots of slot_stride bytes
 *   +--------------------------+ staging_off (page aligned)
 *   | staging                  |  staging_size bytes (rendezvous values)
 *   +--------------------------+ total
 *
 * A slot is [u32 len][u32 reserved][len message bytes]; the 8-byte header
 * keeps every message 8-byte aligned. Positions are free-running u64
 * counters; slot = position % credits. The producer fills slots, then
 * publishes the whole batch with ONE release store of its tail (the shm
 * "doorbell"); the consumer reads the tail with acquire and gives slots back
 * by storing its head.
 *
 * Trust: the server treats everything in this memory as hostile
 * (design.md invariant 5). Each side keeps its own position privately and
 * only ever *reads* the position the peer owns, validating it (0 <=
 * tail-head <= credits) and every length (<= max_msg) before use; a violation is reported
 * as -1 / NULL so the caller can drop the connection.
 *
 * Sleeping (Dekker style, so no wake-up is lost and none is sent while the
 * peer spins): a consumer about to block announces it (flag = 1, full fence),
 * re-checks its ring and only then blocks on the connection's unix socket. A
 * producer publishes, issues a full fence and, only if the flag is set,
 * clears it and sends one wake-up byte on the socket.
 *
 * Giving pages back (the same Dekker pattern): a connection idle for a while
 * costs the server only the control block's page because the server
 * removes everything after it from the memfd (MADV_REMOVE). The client may
 * write request slots and staging at any moment, so it says so first
 * (client_writing = 1, full fence, then waits while server_trimming is set)
 * and clears the flag after publishing; the server sets server_trimming,
 * fences, and removes pages only when client_writing is clear, the request
 * ring is empty and every reply has been consumed. Either side sees the
 * other's flag; a client that lies about it only corrupts its own requests.
 * A client with a reply it has not released yet skips the flag: the server
 * cannot pass its checks until that reply is released.
 */
#ifndef RKV_SHM_RING_H
#define RKV_SHM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "protocol.h"
#include "rkv.h"

#define RKV_SHM_MAGIC          0x314d48535652ull /* "RVSHM1" */
#define RKV_SHM_VERSION        2u
#define RKV_SHM_SLOT_HDR       8u           /* u32 len + u32 reserved before each message */
#define RKV_SHM_MAX_CREDITS    4096u        /* slots per ring */
#define RKV_SHM_MAX_RING_BYTES (256u << 20) /* one ring's slots, at most */
#define RKV_SHM_MIN_STAGING    4096u
#define RKV_SHM_MAX_STAGING    (1u << 30)
#define RKV_SHM_REASON_LEN     160u
#define RKV_SHM_CONN_FDS       2u /* region (read-only) + connection memfd */

/* ------------------------------------------------------------- handshake */

/* First message a client sends on the unix socket after connect(). */
struct rkv_shm_connect_msg {
    uint64_t magic;   /* RKV_SHM_MAGIC */
    uint32_t version; /* RKV_SHM_VERSION */
    uint32_t pid;     /* informational; the server trusts SO_PEERCRED instead */
};

/* The server's answer. With status RKV_OK it carries RKV_SHM_CONN_FDS file
 * descriptors (SCM_RIGHTS): the region, read-only, then the connection memfd.
 * Otherwise no descriptors, and `reason` says why (NUL-terminated). */
struct rkv_shm_accept_msg {
    uint64_t magic;        /* RKV_SHM_MAGIC */
    uint32_t version;      /* RKV_SHM_VERSION */
    uint32_t status;       /* rkv_status */
    uint32_t credits;      /* slots per ring = requests the client may have outstanding */
    uint32_t max_msg;      /* bytes per message, excluding the slot header */
    uint64_t region_size;  /* bytes of the region memfd the client must map */
    uint64_t staging_size; /* bytes of the staging area */
    uint64_t conn_size;    /* bytes of the connection memfd */
    char reason[RKV_SHM_REASON_LEN];
};

/* Send `len` bytes plus `nfds` descriptors as one packet; never blocks and
 * never raises SIGPIPE. Returns 0 or -errno. */
int rkv_shm_send_fds(int sock, const void *buf, size_t len, const int *fds, unsigned nfds);

/* Receive one packet of at most `len` bytes and up to `max_fds` descriptors
 * (extra or truncated descriptors are closed). *got is the byte count and
 * *nfds the descriptors stored in fds[]. Returns 0 or -errno (-EAGAIN when
 * nothing is waiting, -ECONNRESET on end of stream). */
int rkv_shm_recv_fds(int sock, void *buf, size_t len, size_t *got, int *fds, unsigned max_fds,
                     unsigned *nfds);

/* ---------------------------------------------------------- shared memory */

/* Each field is written by one side only and lives on its own cache line so
 * the two processes never false-share. */
struct rkv_shm_ctrl {
    _Alignas(RKV_CACHELINE) _Atomic uint64_t req_tail;        /* client: requests published */
    _Alignas(RKV_CACHELINE) _Atomic uint64_t req_head;        /* server: requests consumed */
    _Alignas(RKV_CACHELINE) _Atomic uint64_t rep_tail;        /* server: replies published */
    _Alignas(RKV_CACHELINE) _Atomic uint64_t rep_head;        /* client: replies consumed */
    _Alignas(RKV_CACHELINE) _Atomic uint32_t server_sleeping; /* server: 1 = wake me on publish */
    _Alignas(RKV_CACHELINE) _Atomic uint32_t client_sleeping; /* client: 1 = wake me on publish */
    _Alignas(RKV_CACHELINE) _Atomic uint32_t client_writing; /* client: 1 = writing slots/staging */
    _Alignas(RKV_CACHELINE) _Atomic uint32_t server_trimming; /* server: 1 = giving pages back */
};

/* Where everything lies in a connection memfd; both sides compute it from
 * (credits, max_msg, staging_size) with rkv_shm_layout_init(). */
struct rkv_shm_layout {
    uint32_t credits;    /* slots per ring */
    uint32_t max_msg;    /* largest message */
    size_t slot_stride;  /* bytes per slot: header + max_msg, cache-line rounded */
    size_t req_off;      /* first request slot */
    size_t rep_off;      /* first reply slot */
    size_t staging_off;  /* staging area, page aligned */
    size_t staging_size; /* bytes of staging */
    size_t total;        /* bytes of the whole memfd, page multiple */
};

/* Compute a layout. Returns RKV_INVALID (with a message in err) when a size
 * is out of range: credits 1..RKV_SHM_MAX_CREDITS, max_msg
 * RKV_MIN_MSG..RKV_MAX_MSG, staging RKV_SHM_MIN_STAGING..RKV_SHM_MAX_STAGING,
 * one ring at most RKV_SHM_MAX_RING_BYTES. */
rkv_status rkv_shm_layout_init(struct rkv_shm_layout *l, uint32_t credits, uint32_t max_msg,
                               uint64_t staging_size, char *err, size_t err_len);

/* One direction of a connection, as one side sees it. */
struct rkv_shm_ring {
    _Atomic uint64_t *tail; /* producer's published position (shared) */
    _Atomic uint64_t *head; /* consumer's released position (shared) */
    uint8_t *slots;         /* nslots slots of stride bytes (shared) */
    uint64_t pos;           /* private: the producer's tail or the consumer's head */
    uint32_t nslots;        /* = layout credits */
    uint32_t max_msg;       /* longest valid message */
    size_t stride;          /* bytes per slot */
};

enum rkv_shm_dir { RKV_SHM_REQUESTS, RKV_SHM_REPLIES };

/* Set r up over the connection memory at `base` (laid out by `l`), starting
 * at position 0 (a fresh memfd is zero-filled). */
void rkv_shm_ring_init(struct rkv_shm_ring *r, void *base, const struct rkv_shm_layout *l,
                       enum rkv_shm_dir dir);

static inline struct rkv_shm_ctrl *rkv_shm_ctrl_of(void *base)
{
    return (struct rkv_shm_ctrl *)base;
}

/* Producer: free slots, or -1 when the consumer's head is impossible. */
int rkv_shm_ring_space(const struct rkv_shm_ring *r);

/* Producer: payload of the i-th slot after the private tail (max_msg bytes). */
static inline void *rkv_shm_ring_slot(const struct rkv_shm_ring *r, unsigned i)
{
    return r->slots + ((r->pos + i) % r->nslots) * r->stride + RKV_SHM_SLOT_HDR;
}

/* Producer: record lens[0..n-1] and publish the n slots with one release
 * store. The caller checked n <= space and every len <= max_msg. */
void rkv_shm_ring_publish(struct rkv_shm_ring *r, const uint32_t *lens, unsigned n);

/* Consumer: messages published and not yet released, or -1 when the
 * producer's tail is impossible (behind the head or more than nslots ahead). */
int rkv_shm_ring_ready(const struct rkv_shm_ring *r);

/* Consumer: the i-th message after the private head; its length is read
 * exactly once into *len. NULL when that length exceeds max_msg. The bytes
 * stay in shared memory: a consumer that does not trust the producer copies
 * them before parsing. */
const void *rkv_shm_ring_peek(const struct rkv_shm_ring *r, unsigned i, uint32_t *len);

/* Consumer: give n slots back to the producer (one release store). */
void rkv_shm_ring_release(struct rkv_shm_ring *r, unsigned n);

/* ----------------------------------------------------------- sleep / wake */

/* A hint to the CPU inside a busy-poll loop. */
static inline void rkv_shm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleeper: announce "about to block" (store + full fence). Re-check the ring
 * after this and before blocking. */
void rkv_shm_sleep_announce(_Atomic uint32_t *flag);

/* Sleeper: done waiting (the wake-up may already have cleared it). */
static inline void rkv_shm_sleep_cancel(_Atomic uint32_t *flag)
{
    atomic_store_explicit(flag, 0, memory_order_relaxed);
}

/* Waker, right after a publish: true (and the flag cleared) when the peer
 * announced it is sleeping, i.e. when one wake-up must be sent. */
bool rkv_shm_peer_sleeping(_Atomic uint32_t *flag);

/* Send one wake-up byte on the connection socket without blocking. A full
 * socket buffer is success (the peer already has wake-ups pending). Returns
 * 0 or -errno (-EPIPE / -ECONNRESET: the peer is gone). */
int rkv_shm_wake(int sock);

/* Read pending wake-up bytes (bounded, non-blocking). Returns false when the
 * peer has closed its end. */
bool rkv_shm_drain(int sock);

/* ---------------------------------------------------------- giving back */

/* Client, before writing request slots or staging: announce it and wait
 * (up to timeout_ns) while the server gives pages back. False when the
 * server kept its flag set that long (a broken server). */
bool rkv_shm_write_begin(struct rkv_shm_ctrl *ctrl, uint64_t timeout_ns);

/* Client, after publishing what it wrote. */
static inline void rkv_shm_write_end(struct rkv_shm_ctrl *ctrl)
{
    atomic_store_explicit(&ctrl->client_writing, 0, memory_order_release);
}

/* Server: announce giving pages back; true when the client is not writing
 * (then, and only after re-checking its rings are idle, it may remove
 * pages). Always pair with rkv_shm_trim_end(). */
bool rkv_shm_trim_begin(struct rkv_shm_ctrl *ctrl);

static inline void rkv_shm_trim_end(struct rkv_shm_ctrl *ctrl)
{
    atomic_store_explicit(&ctrl->server_trimming, 0, memory_order_release);
}

#endif
