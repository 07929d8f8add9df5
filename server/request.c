/* request.c — what the server does with one request message.
 *
 * Every request is validated by rkv_req_parse() before any field is used
 * (design.md invariant 5). A connection must HELLO first (with the shared
 * secret when one is configured); anything else before that is refused and
 * the connection closed, and nothing a request carries — hints included —
 * acts before its connection passed HELLO (admission.c bounds the wait).
 * Each request gets exactly one reply in the buffer the transport handed
 * us; nothing here allocates. tests/test_request.c checks these rules.
 */
#include <string.h>

#include "log.h"
#include "protocol.h"
#include "server.h"
#include "util.h"

/* Constant-time comparison of the offered secret against the configured one. */
static bool secret_ok(const char *want, const uint8_t *got, size_t got_len)
{
    size_t want_len = strlen(want);
    unsigned char diff = (unsigned char)(want_len != got_len);
    for (size_t i = 0; i < want_len; i++)
        diff |= (unsigned char)(want[i] ^ (i < got_len ? got[i] : 0));
    return diff == 0;
}

struct pull_ctx {
    struct rkv_wconn *wc;
    struct rkv_remote_buf rb;
};

static rkv_status pull_value(void *ctx, void *dst, uint32_t len)
{
    struct pull_ctx *p = ctx;
    if (len != p->rb.len)
        return RKV_PROTOCOL;
    return p->wc->ops->msg->pull(p->wc->conn, &p->rb, dst);
}

static void apply_hints(struct rkv_server *srv, struct rkv_worker *w, const struct rkv_req_view *v)
{
    rkv_table_hints(srv->table, v->hints, v->hdr->hint_count);
    rkv_stat_bump(&w->stats.hints, v->hdr->hint_count);
}

/* The reply buffer may be shared with the client (shm): write it, never
 * read it back. The status goes to *st. */
static uint32_t reply_hello(struct rkv_server *srv, struct rkv_wconn *wc,
                            const struct rkv_req_view *v, struct rkv_resp *r, rkv_status *st)
{
    const char *secret = srv->cfg.auth_secret;
    *st = RKV_OK;
    if (secret[0] != '\0' && !secret_ok(secret, v->key, v->hdr->key_len)) {
        RKV_WARN("%s: %s: wrong shared secret; closing", wc->ep->uri, wc->ops->peer(wc->conn));
        *st = RKV_AUTH;
        wc->closing = true;
        return sizeof *r;
    }
    if (v->hdr->arg != RKV_PROTO_VERSION) {
        *st = RKV_VERSION_MISMATCH;
        wc->closing = true;
        return sizeof *r;
    }
    if (!wc->authed && !rkv_admission_authenticate(srv, wc)) {
        RKV_WARN("%s: refusing %s: %u connections is the limit (raise [rpc] max_conns)",
                 wc->ep->uri, wc->ops->peer(wc->conn), srv->cfg.max_conns);
        *st = RKV_SERVER_BUSY;
        wc->closing = true;
        return sizeof *r;
    }
    struct rkv_hello h = {
        .proto_version = RKV_PROTO_VERSION,
        .credits = srv->cfg.credits,
        .max_msg = srv->cfg.max_msg,
        .region_size = srv->region.size,
        .generation = rkv_table_header(srv->table)->generation,
        .clock = rkv_table_clock(srv->table),
        .features = RKV_FEATURE_MORE | (rkv_evict_uses_access(srv->cfg.evict) ? RKV_FEATURE_HINTS : 0),
    };
    wc->ep->ops->msg->region_desc(wc->ep->l, &h.rkey, &h.region_addr);
    if (wc->ep->ops->msg->lane_key != NULL) {
        h.lane_key = wc->ep->ops->msg->lane_key(wc->ep->l);
        h.features |= RKV_FEATURE_LANES;
    }
    memcpy(r + 1, &h, sizeof h);
    r->payload_len = sizeof h;
    return (uint32_t)(sizeof *r + sizeof h);
}

static uint32_t reply_stats(struct rkv_server *srv, struct rkv_resp *r)
{
    size_t cap = srv->cfg.max_msg - sizeof *r;
    size_t n = rkv_server_stats_text(srv, (char *)(r + 1), cap);
    n = RKV_MIN(n, cap - 1); /* truncated text still ends at a line we wrote */
    r->payload_len = (uint32_t)n;
    return (uint32_t)(sizeof *r + n);
}

static rkv_status do_put(struct rkv_server *srv, struct rkv_wconn *wc, const struct rkv_req_view *v,
                         uint64_t *version)
{
    const struct rkv_req *h = v->hdr;
    struct pull_ctx pc = { .wc = wc };
    struct rkv_value_src src = { .data = v->value, .len = h->value_len };
    if (v->remote) {
        memcpy(&pc.rb, v->remote, sizeof pc.rb);
        src.data = NULL;
        src.pull = pull_value;
        src.ctx = &pc;
    }
    return rkv_table_put(srv->table, v->key, h->key_len, &src,
                         (rkv_put_mode)(h->flags & RKV_PUT_MODE_MASK), h->arg, h->ttl,
                         h->user_flags, version);
}

uint32_t rkv_handle_request(struct rkv_server *srv, struct rkv_worker *w, struct rkv_wconn *wc,
                            const struct rkv_msg *m, void *out)
{
    struct rkv_resp *r = out;
    struct rkv_req_view v;
    const struct rkv_region_header *g = rkv_table_header(srv->table);
    rkv_status st = rkv_req_parse(m->data, m->len, g->max_key_len, g->max_value_len, &v);
    uint32_t len = sizeof *r;
    uint64_t value = 0; /* the reply's value; `r` may be client-writable */

    memset(r, 0, sizeof *r);
    if (m->len >= sizeof(struct rkv_req)) {
        const struct rkv_req *h = m->data;
        r->req_id = h->req_id;
        r->opcode = h->opcode > 0 && h->opcode < RKV_OP_MAX ? h->opcode : RKV_OP_PING;
    } else {
        r->opcode = RKV_OP_PING;
        wc->closing = true; /* not even a header: the peer does not speak rkv */
    }
    if (st == RKV_OK && !wc->authed && v.hdr->opcode != RKV_OP_HELLO) {
        st = RKV_AUTH;
        wc->closing = true;
    }
    if (st == RKV_OK) {
        rkv_stat_bump(&w->stats.requests[v.hdr->opcode], 1);
        rkv_stat_bump(&w->stats.marked_requests, (v.hdr->flags & RKV_REQ_MORE) != 0);
        switch ((enum rkv_opcode)v.hdr->opcode) {
        case RKV_OP_HELLO: len = reply_hello(srv, wc, &v, r, &st); break;
        case RKV_OP_PUT: st = do_put(srv, wc, &v, &value); break;
        case RKV_OP_DELETE: st = rkv_table_delete(srv->table, v.key, v.hdr->key_len); break;
        case RKV_OP_INCR:
            st = rkv_table_incr(srv->table, v.key, v.hdr->key_len, (int64_t)v.hdr->arg, &value);
            break;
        case RKV_OP_STATS: len = reply_stats(srv, r); break;
        case RKV_OP_FLUSH:
            value = rkv_table_flush(srv->table,
                                    v.hdr->arg > UINT32_MAX ? UINT32_MAX : (uint32_t)v.hdr->arg);
            break;
        case RKV_OP_CLAIM: {
            uint32_t marks;
            st = rkv_table_claim(srv->table, v.key, v.hdr->key_len, v.hdr->arg, v.hdr->ttl, &marks);
            value = marks;
            break;
        }
        case RKV_OP_PING:
        case RKV_OP_HINTS:
        case RKV_OP_MAX: break;
        }
        /* after the dispatch: a HELLO's hints count only once it passed */
        if (v.hdr->hint_count && wc->authed)
            apply_hints(srv, w, &v);
    }
    if (st != RKV_OK)
        rkv_stat_bump(&w->stats.errors[st], 1);
    if (st == RKV_PROTOCOL)
        wc->closing = true; /* a peer that sends garbage gets its answer, then goodbye */
    r->status = (uint8_t)st;
    r->value = value;
    r->clock = rkv_table_clock(srv->table);
    return len;
}
