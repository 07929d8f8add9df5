/* protocol.h — the RPC messages that carry writes and control.
 *
 * GETs never appear here: they are one-sided reads of the region. Everything
 * that changes the table (PUT, DELETE, INCR, FLUSH, the recache CLAIM of a
 * stale item) and control (HELLO, PING, STATS, access HINTS) travels as one
 * message per request, each fitting one receive
 * buffer of `max_msg` bytes (agreed at HELLO). Every transport delivers whole
 * messages with their byte count; the parsers below check every length
 * against that count before anything is used.
 *
 * Request:  rkv_req (32 B) | key[key_len] | value or rendezvous | hints[hint_count]
 * Response: rkv_resp (32 B) | payload[payload_len]
 *
 * A value that does not fit inline travels by rendezvous: the request carries
 * an rkv_remote_buf describing a buffer the client registered, and the server
 * pulls it (RDMA READ, or a copy out of the client's shared staging memfd).
 */
#ifndef RKV_PROTOCOL_H
#define RKV_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "rkv.h"

#define RKV_PROTO_VERSION 1u
#define RKV_MIN_MSG       512u /* smallest receive buffer either side accepts */
#define RKV_MAX_MSG       (1u << 20)
#define RKV_MAX_SECRET    64u

enum rkv_opcode {
    RKV_OP_HELLO = 1, /* key = shared secret (may be empty); arg = proto version */
    RKV_OP_PUT,       /* flags: RKV_PUT_MODE_MASK, RKV_REQ_REMOTE_VALUE; arg = cas */
    RKV_OP_DELETE,
    RKV_OP_INCR, /* arg = delta as int64 */
    RKV_OP_PING,
    RKV_OP_STATS, /* reply payload: "name value\n" lines */
    RKV_OP_HINTS, /* no key: only access hints */
    RKV_OP_FLUSH, /* no key; arg = delay in seconds (0: now); reply value = items removed */
    RKV_OP_CLAIM, /* win the recache of key's item of version arg when it is stale or has
                     less than ttl seconds to live (0: stale only); reply value = RKV_MARK_* */
    RKV_OP_MAX
};

#define RKV_PUT_MODE_MASK    0x03u /* rkv_put_mode */
#define RKV_REQ_REMOTE_VALUE 0x04u /* value travels by rendezvous */
/* Any opcode: the next request of the same doorbell batch (one send() of the
 * client transport) is already on its way, so the server may hold this
 * one's reply to answer both with one doorbell. A client sets it only when
 * the server's HELLO offered RKV_FEATURE_MORE, on every request of a batch
 * but the last; a server holds replies for it only a bounded number of
 * worker passes (server/reply_batch.h), so a wrong mark costs its sender
 * latency, never a hang. */
#define RKV_REQ_MORE      0x10u
#define RKV_REQ_FLAGS_ALL 0x17u

struct rkv_req {
    uint8_t opcode;      /* enum rkv_opcode */
    uint8_t flags;       /* RKV_REQ_* / put mode */
    uint16_t key_len;    /* bytes of key after the header */
    uint32_t value_len;  /* inline value bytes, or the rendezvous length */
    uint32_t ttl;        /* seconds; 0 = server default, RKV_TTL_NEVER = never expires */
    uint16_t hint_count; /* 8-byte access hints after key and value */
    uint16_t reserved;   /* 0 */
    uint32_t req_id;     /* echoed in the response */
    uint32_t user_flags; /* PUT: stored with the item; else 0 */
    uint64_t arg;        /* cas version, incr delta, or hello protocol version */
};
RKV_STATIC_ASSERT(sizeof(struct rkv_req) == 32, "request header is 32 bytes");

/* A client buffer the server may pull a large value from. */
struct rkv_remote_buf {
    uint64_t addr; /* rdma: virtual address; shm: offset in the staging memfd */
    uint32_t rkey; /* rdma: the buffer's rkey; shm: 0 */
    uint32_t len;  /* must equal the request's value_len */
};

/* An access hint: the slot word the client found an item through. The server
 * uses hints as recency information for eviction (it never sees GETs). */
typedef uint64_t rkv_hint;

struct rkv_resp {
    uint8_t opcode;       /* the request's opcode */
    uint8_t status;       /* rkv_status */
    uint16_t reserved;    /* 0 */
    uint32_t payload_len; /* bytes after the header */
    uint32_t req_id;      /* the request's req_id */
    uint32_t reserved2;   /* 0 */
    uint64_t value;       /* new item version (PUT), incr result, or 0 */
    uint64_t clock;       /* the server clock when it replied */
};
RKV_STATIC_ASSERT(sizeof(struct rkv_resp) == 32, "response header is 32 bytes");

/* The HELLO reply payload: where the region is and how to talk to the server. */
struct rkv_hello {
    uint32_t proto_version;
    uint32_t credits;     /* requests the client may have outstanding */
    uint32_t max_msg;     /* bytes per request message, header included */
    uint32_t rkey;        /* rdma: the region's rkey; shm: 0 */
    uint64_t region_addr; /* rdma: remote address of byte 0; shm: 0 */
    uint64_t region_size; /* bytes */
    uint64_t generation;  /* must match the region header's */
    uint64_t clock;       /* server clock now */
    uint32_t features;    /* RKV_FEATURE_* the server wants */
    uint32_t lane_key;    /* with RKV_FEATURE_LANES: what a READ lane's connect carries;
                             else 0 (older servers: the reserved 0) */
};

#define RKV_FEATURE_HINTS 1u /* send access hints: the server evicts by recency */
#define RKV_FEATURE_MORE  2u /* the server reads RKV_REQ_MORE (older servers refuse it) */
/* rdma: the server accepts READ lanes, QPs that carry only one-sided READs,
 * opened by a shared handle's threads (rdma_util.h RKV_RDMA_CONNECT_LANE,
 * authenticated by lane_key). Older servers offer no lanes: threads then
 * GET through the connection, under the handle's lock. */
#define RKV_FEATURE_LANES 4u

/* A request that passed rkv_req_parse(): pointers into the message. */
struct rkv_req_view {
    const struct rkv_req *hdr;
    const uint8_t *key;                  /* hdr->key_len bytes */
    const uint8_t *value;                /* inline value, or NULL with remote set */
    const struct rkv_remote_buf *remote; /* rendezvous descriptor, or NULL */
    const uint8_t *hints;                /* hint_count * 8 bytes, unaligned */
};

/* Validate a received request of `len` bytes against the server's limits.
 * Returns RKV_OK and fills `v`, or the status to answer with (RKV_PROTOCOL for
 * a malformed message, RKV_TOO_LARGE for a key/value over the limits). */
rkv_status rkv_req_parse(const void *msg, size_t len, uint32_t max_key_len, uint32_t max_value_len,
                         struct rkv_req_view *v);

/* Validate a received response of `len` bytes. Returns RKV_OK or RKV_PROTOCOL. */
rkv_status rkv_resp_parse(const void *msg, size_t len, const struct rkv_resp **hdr,
                          const uint8_t **payload);

/* Validate a HELLO payload. Returns RKV_OK, RKV_PROTOCOL or RKV_VERSION_MISMATCH. */
rkv_status rkv_hello_parse(const uint8_t *payload, size_t len, struct rkv_hello *out);

/* Set or clear RKV_REQ_MORE in a built request (msg: its first byte). */
static inline void rkv_req_set_more(void *msg, bool more)
{
    uint8_t *flags = (uint8_t *)msg + offsetof(struct rkv_req, flags);
    *flags = (uint8_t)(more ? *flags | RKV_REQ_MORE : *flags & ~RKV_REQ_MORE);
}

/* Whether a received message of len bytes carries RKV_REQ_MORE; false for
 * one shorter than a header. Only a hint: the message may still be refused. */
static inline bool rkv_req_more(const void *msg, size_t len)
{
    return len >= sizeof(struct rkv_req) &&
           (((const uint8_t *)msg)[offsetof(struct rkv_req, flags)] & RKV_REQ_MORE) != 0;
}

/* Bytes a request with these parts needs; 0 if it would not fit in max_msg. */
size_t rkv_req_size(size_t key_len, size_t inline_value_len, size_t hint_count, size_t max_msg);

/* Build a request into buf (which has room for rkv_req_size() bytes); returns its length. */
size_t rkv_req_build(void *buf, const struct rkv_req *hdr, const void *key, const void *value,
                     size_t inline_len, const rkv_hint *hints, size_t hint_count);

#endif
