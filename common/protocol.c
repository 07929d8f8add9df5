/* protocol.c — building and validating RPC messages (see protocol.h).
 *
 * The parsers are the server's first line of defence (design.md invariant 5): they run
 * on bytes a peer sent and check every length against the received count
 * before any pointer is handed out. They never allocate and never read past
 * `len`. tests/fuzz/fuzz_protocol.c runs them on arbitrary bytes.
 */
#include <stdbool.h>
#include <string.h>

#include "protocol.h"

rkv_status rkv_req_parse(const void *msg, size_t len, uint32_t max_key_len, uint32_t max_value_len,
                         struct rkv_req_view *v)
{
    const uint8_t *p = msg;
    const struct rkv_req *h = msg;

    memset(v, 0, sizeof *v);
    if (len < sizeof *h || ((uintptr_t)msg & 7) != 0)
        return RKV_PROTOCOL;
    if (h->opcode < RKV_OP_HELLO || h->opcode >= RKV_OP_MAX || h->reserved != 0 ||
        (h->flags & ~RKV_REQ_FLAGS_ALL) != 0)
        return RKV_PROTOCOL;

    bool needs_key = h->opcode == RKV_OP_PUT || h->opcode == RKV_OP_DELETE ||
                     h->opcode == RKV_OP_INCR || h->opcode == RKV_OP_CLAIM;
    bool remote = (h->flags & RKV_REQ_REMOTE_VALUE) != 0;
    if (needs_key ? h->key_len == 0 : (h->opcode != RKV_OP_HELLO && h->key_len != 0))
        return RKV_PROTOCOL;
    if (h->opcode == RKV_OP_HELLO ? h->key_len > RKV_MAX_SECRET : h->key_len > max_key_len)
        return RKV_TOO_LARGE;
    if (h->opcode != RKV_OP_PUT &&
        (h->value_len != 0 || (h->flags & ~RKV_REQ_MORE) != 0 || h->user_flags != 0))
        return RKV_PROTOCOL;
    if (h->opcode == RKV_OP_PUT && h->value_len > max_value_len)
        return RKV_TOO_LARGE;

    size_t value_bytes = remote ? sizeof(struct rkv_remote_buf) : h->value_len;
    size_t need = sizeof *h + (size_t)h->key_len + value_bytes + (size_t)h->hint_count * 8;
    if (need != len)
        return RKV_PROTOCOL;

    v->hdr = h;
    v->key = p + sizeof *h;
    if (remote) {
        /* the descriptor follows the key; copy alignment is not guaranteed,
         * so callers read it with memcpy via rkv_remote_buf's fields below */
        v->remote = (const struct rkv_remote_buf *)(const void *)(v->key + h->key_len);
        struct rkv_remote_buf rb;
        memcpy(&rb, v->remote, sizeof rb);
        if (rb.len != h->value_len)
            return RKV_PROTOCOL;
    } else {
        v->value = v->key + h->key_len;
    }
    v->hints = v->key + h->key_len + value_bytes;
    return RKV_OK;
}

rkv_status rkv_resp_parse(const void *msg, size_t len, const struct rkv_resp **hdr,
                          const uint8_t **payload)
{
    const struct rkv_resp *h = msg;
    if (len < sizeof *h || ((uintptr_t)msg & 7) != 0)
        return RKV_PROTOCOL;
    if (h->opcode < RKV_OP_HELLO || h->opcode >= RKV_OP_MAX || h->status >= RKV_STATUS_COUNT ||
        (size_t)h->payload_len != len - sizeof *h)
        return RKV_PROTOCOL;
    *hdr = h;
    *payload = (const uint8_t *)msg + sizeof *h;
    return RKV_OK;
}

rkv_status rkv_hello_parse(const uint8_t *payload, size_t len, struct rkv_hello *out)
{
    if (len != sizeof *out)
        return RKV_PROTOCOL;
    memcpy(out, payload, sizeof *out);
    if (out->proto_version != RKV_PROTO_VERSION)
        return RKV_VERSION_MISMATCH;
    if (out->credits == 0 || out->credits > 4096 || out->max_msg < RKV_MIN_MSG ||
        out->max_msg > RKV_MAX_MSG || out->region_size < RKV_HEADER_SIZE)
        return RKV_PROTOCOL;
    return RKV_OK;
}

size_t rkv_req_size(size_t key_len, size_t inline_value_len, size_t hint_count, size_t max_msg)
{
    size_t n = sizeof(struct rkv_req) + key_len + inline_value_len + hint_count * 8;
    return n <= max_msg ? n : 0;
}

size_t rkv_req_build(void *buf, const struct rkv_req *hdr, const void *key, const void *value,
                     size_t inline_len, const rkv_hint *hints, size_t hint_count)
{
    uint8_t *p = buf;
    memcpy(p, hdr, sizeof *hdr);
    p += sizeof *hdr;
    if (hdr->key_len) {
        memcpy(p, key, hdr->key_len);
        p += hdr->key_len;
    }
    if (inline_len) {
        memcpy(p, value, inline_len);
        p += inline_len;
    }
    if (hint_count) {
        memcpy(p, hints, hint_count * sizeof *hints);
        p += hint_count * sizeof *hints;
    }
    return (size_t)(p - (uint8_t *)buf);
}
