/* test_request.c — server/request.c against a real table and a fake transport.
 *
 * rkv_handle_request() is what a worker does with one received message. Here
 * it runs on a real region and table (server/region.c, server/table.c) with
 * the real admission bookkeeping (server/admission.c); only the transport is
 * fake: a connection whose reply_buf is a local array, whose pull copies from
 * a local "staging buffer", and whose peer name is fixed. So the rules a
 * server process enforces are checked in milliseconds, one message at a time:
 *
 *   - auth: nothing but HELLO acts before a connection passed HELLO (with the
 *     secret when one is set) — no write, no stats, no hint, not even a PING;
 *     a wrong secret, a wrong protocol version or a full max_conns close the
 *     connection, and the hints a refused HELLO carries are not applied;
 *   - every opcode's answer (HELLO's payload, PUT inline and by rendezvous,
 *     DELETE, INCR, PING, STATS, HINTS) and its counters;
 *   - malformed messages (short, misaligned fields, bad opcodes, lengths that
 *     disagree, a bad rendezvous descriptor, random bytes) get an error reply
 *     with the request's id, never a crash, and PROTOCOL closes the
 *     connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "log.h"
#include "protocol.h"
#include "region.h"
#include "server.h"
#include "table.h"
#include "util.h"

#define SECRET  "s3cret"
#define MAX_MSG 4096u

/* ------------------------------------------------------------ fake transport */

/* One connection: where replies land, and what pull() copies from. */
struct fake_request_sconn {
    struct rkv_sconn sconn; /* first: what the ops take (transport.h) */
    _Alignas(8) uint8_t reply[MAX_MSG];
    const uint8_t *staging; /* the client's staged value (rendezvous) */
    size_t staging_len;
    unsigned pulls;
};

static struct fake_request_sconn *fake_request_sconn_of(struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, struct fake_request_sconn, sconn);
}

static void *fake_reply_buf(struct rkv_sconn *sconn, unsigned i)
{
    struct fake_request_sconn *c = fake_request_sconn_of(sconn);
    assert_int_equal(i, 0);
    return c->reply;
}

static rkv_status fake_pull(struct rkv_sconn *sconn, const struct rkv_remote_buf *rb, void *dst)
{
    struct fake_request_sconn *c = fake_request_sconn_of(sconn);
    c->pulls++;
    if (rb->addr > c->staging_len || rb->len > c->staging_len - rb->addr)
        return RKV_PROTOCOL;
    memcpy(dst, c->staging + rb->addr, rb->len);
    return RKV_OK;
}

static void fake_region_desc(struct rkv_listener *l, uint32_t *rkey, uint64_t *addr)
{
    (void)l;
    *rkey = 0x1234;
    *addr = 0xabcd0000;
}

static const char *fake_peer(struct rkv_sconn *c)
{
    (void)c;
    return "fake peer";
}

/* Only what request.c calls; the worker's and listener's ops are not used. */
static const struct rkv_msg_transport_ops fake_msg_ops = {
    .region_desc = fake_region_desc,
    .reply_buf = fake_reply_buf,
    .pull = fake_pull,
};

static const struct rkv_server_transport fake_transport = {
    .scheme = "fake",
    .msg = &fake_msg_ops,
    .peer = fake_peer,
};

/* ------------------------------------------------------------ fixture */

struct fx {
    struct rkv_server *srv;
    struct rkv_worker *w;
    struct rkv_listen_ep ep;
    struct fake_request_sconn conn[2];
    struct rkv_wconn wc[2];
    _Alignas(8) uint8_t msg[MAX_MSG];
    uint32_t next_id;
};

/* A server with a table, one worker and two accepted, unauthenticated
 * connections; `secret` is the configured shared secret ("" = none). */
static struct fx *fx_new(const char *secret, unsigned max_conns)
{
    char err[512] = "";
    struct fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->srv = calloc(1, sizeof *f->srv);
    assert_non_null(f->srv);
    struct rkv_server *srv = f->srv;
    rkv_server_config_defaults(&srv->cfg);
    snprintf(srv->cfg.auth_secret, sizeof srv->cfg.auth_secret, "%s", secret);
    srv->cfg.max_conns = max_conns;
    srv->cfg.max_msg = MAX_MSG;
    srv->region.fd = srv->region.ro_fd = -1;
    assert_int_equal(rkv_region_create(16u << 20, &srv->region, err, sizeof err), RKV_OK);
    struct rkv_table_config tc = { .slab_page_size = 1u << 16,
                                   .max_key_len = RKV_MAX_KEY_LEN,
                                   .grace_ms = 100,
                                   .evict = RKV_EVICT_LRU };
    if (rkv_table_create(srv->region.base, srv->region.size, &tc, &srv->table, err, sizeof err) !=
        RKV_OK)
        fail_msg("rkv_table_create: %s", err);
    assert_int_equal(rkv_admission_init(srv), 0);
    srv->nworkers = 1;
    f->w = &srv->workers[0];
    f->w->srv = srv;
    f->ep = (struct rkv_listen_ep){ .ops = &fake_transport, .uri = "fake://test" };
    for (unsigned i = 0; i < 2; i++) {
        f->wc[i] =
            (struct rkv_wconn){ .ops = &fake_transport, .conn = &f->conn[i].sconn, .ep = &f->ep };
        assert_false(rkv_admission_admit(srv, &f->wc[i]));
    }
    return f;
}

static void fx_free(struct fx *f)
{
    for (unsigned i = 0; i < 2; i++)
        rkv_admission_leave(f->srv, &f->wc[i]);
    rkv_admission_free(f->srv);
    rkv_table_destroy(f->srv->table);
    rkv_region_destroy(&f->srv->region);
    free(f->srv);
    free(f);
}

/* One request as a client builds it; returns its length in f->msg. */
static uint32_t build(struct fx *f, struct rkv_req h, const void *key, const void *value,
                      size_t inline_len, const rkv_hint *hints)
{
    h.req_id = ++f->next_id;
    if (key != NULL && h.key_len == 0)
        h.key_len = (uint16_t)strlen(key);
    return (uint32_t)rkv_req_build(f->msg, &h, key, value, inline_len, hints, h.hint_count);
}

/* Hand `len` bytes of f->msg to rkv_handle_request on connection i; returns
 * the reply, which lies in that connection's reply buffer. */
static const struct rkv_resp *handle(struct fx *f, unsigned i, uint32_t len, uint32_t *reply_len)
{
    struct rkv_msg m = { .data = f->msg, .len = len };
    struct rkv_wconn *wc = &f->wc[i];
    void *out = wc->ops->msg->reply_buf(wc->conn, 0);
    memset(out, 0xee, MAX_MSG); /* a reply must set every byte it sends */
    uint32_t n = rkv_handle_request(f->srv, f->w, wc, &m, out);
    assert_true(n >= sizeof(struct rkv_resp) && n <= MAX_MSG);
    const struct rkv_resp *r = out;
    assert_int_equal(r->payload_len, n - sizeof *r);
    assert_int_equal(r->reserved, 0);
    if (reply_len)
        *reply_len = n;
    return r;
}

static const struct rkv_resp *hello(struct fx *f, unsigned i, const char *secret,
                                    const rkv_hint *hints, unsigned nhints)
{
    struct rkv_req h = { .opcode = RKV_OP_HELLO,
                         .arg = RKV_PROTO_VERSION,
                         .key_len = (uint16_t)strlen(secret),
                         .hint_count = (uint16_t)nhints };
    return handle(f, i, build(f, h, secret[0] ? secret : NULL, NULL, 0, hints), NULL);
}

static rkv_status put(struct fx *f, unsigned i, const char *key, const char *value)
{
    struct rkv_req h = { .opcode = RKV_OP_PUT, .value_len = (uint32_t)strlen(value) };
    return (rkv_status)handle(f, i, build(f, h, key, value, strlen(value), NULL), NULL)->status;
}

/* The slot word of the table's only item (what a client's hint carries). */
static rkv_hint only_slot(struct fx *f)
{
    const struct rkv_region_header *g = rkv_table_header(f->srv->table);
    const struct rkv_bucket *b = (const void *)((const uint8_t *)f->srv->region.base +
                                                g->index_offset);
    rkv_hint found = 0;
    for (uint64_t i = 0; i < g->index_capacity; i++)
        for (unsigned s = 0; s < RKV_SLOTS_PER_BUCKET; s++)
            if (b[i].slot[s] != 0) {
                assert_int_equal(found, 0);
                found = b[i].slot[s];
            }
    assert_int_not_equal(found, 0);
    return found;
}

static uint64_t table_hints(struct fx *f)
{
    struct rkv_table_stats ts;
    rkv_table_get_stats(f->srv->table, &ts);
    return ts.hints;
}

/* splitmix64: a deterministic stream of test bytes. */
static uint64_t next_random(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t counter(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* ------------------------------------------------------------ auth */

static void test_nothing_acts_before_hello(void **state)
{
    (void)state;
    struct fx *f = fx_new("", 16);
    static const uint8_t opcodes[] = { RKV_OP_PUT,   RKV_OP_DELETE, RKV_OP_INCR,  RKV_OP_PING,
                                       RKV_OP_STATS, RKV_OP_HINTS,  RKV_OP_FLUSH, RKV_OP_CLAIM };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(opcodes); i++) {
        bool keyed = opcodes[i] == RKV_OP_PUT || opcodes[i] == RKV_OP_DELETE ||
                     opcodes[i] == RKV_OP_INCR || opcodes[i] == RKV_OP_CLAIM;
        struct rkv_req h = { .opcode = opcodes[i], .value_len = opcodes[i] == RKV_OP_PUT ? 1 : 0 };
        uint32_t len = build(f, h, keyed ? "k" : NULL, "v", opcodes[i] == RKV_OP_PUT, NULL);
        f->wc[0].closing = false;
        const struct rkv_resp *r = handle(f, 0, len, NULL);
        assert_int_equal(r->status, RKV_AUTH);
        assert_int_equal(r->opcode, opcodes[i]);
        assert_int_equal(r->req_id, f->next_id);
        assert_int_equal(r->payload_len, 0);
        assert_true(f->wc[0].closing);
        assert_false(f->wc[0].authed);
        assert_int_equal(counter(&f->w->stats.requests[opcodes[i]]), 0); /* not served */
    }
    assert_null(rkv_table_find(f->srv->table, "k", 1));
    assert_int_equal(counter(&f->w->stats.errors[RKV_AUTH]), RKV_ARRAY_SIZE(opcodes));
    fx_free(f);
}

/* A HELLO with the right secret answers the connection's parameters. */
static void test_hello(void **state)
{
    (void)state;
    struct fx *f = fx_new(SECRET, 16);
    uint32_t n;
    struct rkv_req h = { .opcode = RKV_OP_HELLO, .arg = RKV_PROTO_VERSION };
    const struct rkv_resp *r = handle(f, 0, build(f, h, SECRET, NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->opcode, RKV_OP_HELLO);
    assert_int_equal(n, sizeof *r + sizeof(struct rkv_hello));
    struct rkv_hello hello_reply;
    assert_int_equal(rkv_hello_parse((const uint8_t *)(r + 1), r->payload_len, &hello_reply), RKV_OK);
    assert_int_equal(hello_reply.credits, f->srv->cfg.credits);
    assert_int_equal(hello_reply.max_msg, MAX_MSG);
    assert_int_equal(hello_reply.region_size, f->srv->region.size);
    assert_int_equal(hello_reply.generation, rkv_table_header(f->srv->table)->generation);
    assert_int_equal(hello_reply.features, RKV_FEATURE_HINTS | RKV_FEATURE_MORE);
    assert_int_equal(hello_reply.rkey, 0x1234);
    assert_int_equal(hello_reply.region_addr, 0xabcd0000);
    assert_true(f->wc[0].authed);
    assert_false(f->wc[0].closing);
    assert_int_equal(counter(&f->srv->conns_authed), 1);
    assert_null(rkv_admission_check(f->srv, &f->wc[0], UINT64_MAX)); /* past HELLO: no deadline */
    /* now the connection may act */
    assert_int_equal(put(f, 0, "k", "v"), RKV_OK);
    assert_non_null(rkv_table_find(f->srv->table, "k", 1));
    fx_free(f);
}

static void test_hello_refusals(void **state)
{
    (void)state;
    struct fx *f = fx_new(SECRET, 1);
    /* wrong secret, missing secret, a longer one that starts right */
    static const char *const wrong[] = { "s3cres", "", SECRET "x", "s3cre" };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(wrong); i++) {
        f->wc[0].closing = false;
        const struct rkv_resp *r = hello(f, 0, wrong[i], NULL, 0);
        assert_int_equal(r->status, RKV_AUTH);
        assert_int_equal(r->payload_len, 0);
        assert_true(f->wc[0].closing);
        assert_false(f->wc[0].authed);
    }
    /* another protocol version */
    f->wc[0].closing = false;
    struct rkv_req h = { .opcode = RKV_OP_HELLO, .arg = RKV_PROTO_VERSION + 1 };
    const struct rkv_resp *r = handle(f, 0, build(f, h, SECRET, NULL, 0, NULL), NULL);
    assert_int_equal(r->status, RKV_VERSION_MISMATCH);
    assert_true(f->wc[0].closing);
    assert_false(f->wc[0].authed);
    /* max_conns 1: the first gets in, the second is told the server is busy */
    f->wc[0].closing = false;
    assert_int_equal(hello(f, 0, SECRET, NULL, 0)->status, RKV_OK);
    r = hello(f, 1, SECRET, NULL, 0);
    assert_int_equal(r->status, RKV_SERVER_BUSY);
    assert_true(f->wc[1].closing);
    assert_false(f->wc[1].authed);
    assert_int_equal(counter(&f->srv->conns_authed), 1);
    assert_int_equal(counter(&f->srv->conns_rejected), 1);
    fx_free(f);
}

/* Regression: a HELLO's hints were once applied before its secret was
 * checked, so an unauthenticated peer could stamp LRU recency on any item.
 * Hints act only once their connection passed HELLO. */
static void test_refused_hello_applies_no_hints(void **state)
{
    (void)state;
    struct fx *f = fx_new(SECRET, 16);
    assert_int_equal(hello(f, 1, SECRET, NULL, 0)->status, RKV_OK);
    assert_int_equal(put(f, 1, "hot", "value"), RKV_OK);
    rkv_hint slot = only_slot(f);

    const struct rkv_resp *r = hello(f, 0, "wrong", &slot, 1);
    assert_int_equal(r->status, RKV_AUTH);
    assert_true(f->wc[0].closing);
    assert_int_equal(table_hints(f), 0);
    assert_int_equal(counter(&f->w->stats.hints), 0);
    /* a PUT before HELLO carrying the hint does not apply it either */
    struct rkv_req h = { .opcode = RKV_OP_PUT, .value_len = 1, .hint_count = 1 };
    f->wc[0].closing = false;
    assert_int_equal(handle(f, 0, build(f, h, "hot", "x", 1, &slot), NULL)->status, RKV_AUTH);
    assert_int_equal(table_hints(f), 0);

    /* the same hint on a HELLO that passes is applied */
    f->wc[0].closing = false;
    assert_int_equal(hello(f, 0, SECRET, &slot, 1)->status, RKV_OK);
    assert_int_equal(table_hints(f), 1);
    assert_int_equal(counter(&f->w->stats.hints), 1);
    fx_free(f);
}

/* ------------------------------------------------------------ opcodes */

static void test_opcodes(void **state)
{
    (void)state;
    struct fx *f = fx_new("", 16);
    uint32_t n;
    assert_int_equal(hello(f, 0, "", NULL, 0)->status, RKV_OK);

    /* PUT: the reply carries the new version; the item is in the table */
    struct rkv_req h = { .opcode = RKV_OP_PUT, .value_len = 2, .user_flags = 7 };
    const struct rkv_resp *r = handle(f, 0, build(f, h, "n", "41", 2, NULL), NULL);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->opcode, RKV_OP_PUT);
    uint64_t version = r->value;
    assert_int_not_equal(version, 0);
    assert_int_equal(r->clock, rkv_table_clock(f->srv->table));
    const struct rkv_item *it = rkv_table_find(f->srv->table, "n", 1);
    assert_non_null(it);
    assert_int_equal(rkv_item_version(it), version);
    assert_int_equal(rkv_item_user_flags(it), 7);
    /* put modes: ADD of an existing key, CAS with a stale version */
    h = (struct rkv_req){ .opcode = RKV_OP_PUT, .flags = RKV_ADD, .value_len = 1 };
    assert_int_equal(handle(f, 0, build(f, h, "n", "x", 1, NULL), NULL)->status, RKV_EXISTS);
    h = (struct rkv_req){ .opcode = RKV_OP_PUT, .flags = RKV_CAS, .value_len = 1, .arg = version + 1 };
    assert_int_equal(handle(f, 0, build(f, h, "n", "x", 1, NULL), NULL)->status, RKV_CAS_MISMATCH);

    /* INCR: the reply carries the result */
    h = (struct rkv_req){ .opcode = RKV_OP_INCR, .arg = 1 };
    r = handle(f, 0, build(f, h, "n", NULL, 0, NULL), NULL);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->value, 42);
    h = (struct rkv_req){ .opcode = RKV_OP_INCR, .arg = 1 };
    assert_int_equal(handle(f, 0, build(f, h, "absent", NULL, 0, NULL), NULL)->status, RKV_NOT_FOUND);

    /* DELETE, twice */
    h = (struct rkv_req){ .opcode = RKV_OP_DELETE };
    assert_int_equal(handle(f, 0, build(f, h, "n", NULL, 0, NULL), NULL)->status, RKV_OK);
    assert_null(rkv_table_find(f->srv->table, "n", 1));
    assert_int_equal(handle(f, 0, build(f, h, "n", NULL, 0, NULL), NULL)->status, RKV_NOT_FOUND);

    /* PING and HINTS: empty replies */
    h = (struct rkv_req){ .opcode = RKV_OP_PING };
    r = handle(f, 0, build(f, h, NULL, NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(n, sizeof *r);
    assert_int_equal(put(f, 0, "hot", "v"), RKV_OK);
    rkv_hint hints[2] = { only_slot(f), 0x5555 /* not a slot: ignored, counted */ };
    h = (struct rkv_req){ .opcode = RKV_OP_HINTS, .hint_count = 2 };
    r = handle(f, 0, build(f, h, NULL, NULL, 0, hints), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(n, sizeof *r);
    assert_int_equal(table_hints(f), 1);
    assert_int_equal(counter(&f->w->stats.hints), 2);

    /* STATS: text lines that count what we did, ending at a line */
    h = (struct rkv_req){ .opcode = RKV_OP_STATS };
    r = handle(f, 0, build(f, h, NULL, NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    char text[MAX_MSG + 1];
    memcpy(text, r + 1, r->payload_len);
    text[r->payload_len] = '\0';
    assert_non_null(strstr(text, "\nitems 1\n"));
    assert_non_null(strstr(text, "\ncmd_put 4\n"));
    assert_non_null(strstr(text, "\nerr_not_found 2\n"));
    assert_int_equal(text[r->payload_len - 1], '\n');

    /* CLAIM: a fresh item is nobody's to recache; a stale one goes to the
     * first claim, the next is told it is taken; another version or no key
     * is not claimed */
    const struct rkv_item *hot = rkv_table_find(f->srv->table, "hot", 3);
    assert_non_null(hot);
    uint64_t ver = rkv_item_version(hot);
    h = (struct rkv_req){ .opcode = RKV_OP_CLAIM, .arg = ver };
    r = handle(f, 0, build(f, h, "hot", NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->value, 0);
    assert_int_equal(rkv_table_set_state(f->srv->table, "hot", 3, ver, 0, RKV_ITEM_STALE, NULL),
                     RKV_OK);
    r = handle(f, 0, build(f, h, "hot", NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->value, RKV_MARK_STALE | RKV_MARK_WON);
    r = handle(f, 0, build(f, h, "hot", NULL, 0, NULL), &n);
    assert_int_equal(r->value, RKV_MARK_STALE | RKV_MARK_TAKEN);
    h.arg = ver + 1;
    assert_int_equal(handle(f, 0, build(f, h, "hot", NULL, 0, NULL), NULL)->status, RKV_CAS_MISMATCH);
    assert_int_equal(handle(f, 0, build(f, h, "cold", NULL, 0, NULL), NULL)->status, RKV_NOT_FOUND);
    assert_int_equal(handle(f, 0, build(f, h, NULL, NULL, 0, NULL), NULL)->status, RKV_PROTOCOL);
    f->wc[0].closing = false;
    assert_int_equal(counter(&f->w->stats.requests[RKV_OP_CLAIM]), 5);

    /* FLUSH: no key; the reply carries the items removed; with a key: refused */
    h = (struct rkv_req){ .opcode = RKV_OP_FLUSH };
    r = handle(f, 0, build(f, h, NULL, NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->value, 1); /* "hot" */
    assert_null(rkv_table_find(f->srv->table, "hot", 3));
    h = (struct rkv_req){ .opcode = RKV_OP_FLUSH, .arg = 60 }; /* scheduled: nothing now */
    assert_int_equal(put(f, 0, "later", "v"), RKV_OK);
    r = handle(f, 0, build(f, h, NULL, NULL, 0, NULL), &n);
    assert_int_equal(r->status, RKV_OK);
    assert_int_equal(r->value, 0);
    assert_non_null(rkv_table_find(f->srv->table, "later", 5));

    assert_false(f->wc[0].closing);
    h = (struct rkv_req){ .opcode = RKV_OP_FLUSH };
    assert_int_equal(handle(f, 0, build(f, h, "k", NULL, 0, NULL), NULL)->status, RKV_PROTOCOL);
    f->wc[0].closing = false;
    assert_int_equal(counter(&f->w->stats.requests[RKV_OP_PUT]), 5);
    assert_int_equal(counter(&f->w->stats.requests[RKV_OP_INCR]), 2);
    assert_int_equal(counter(&f->w->stats.requests[RKV_OP_DELETE]), 2);
    fx_free(f);
}

/* A value larger than a message travels by rendezvous: the server pulls it. */
static void test_put_rendezvous(void **state)
{
    (void)state;
    struct fx *f = fx_new("", 16);
    static uint8_t big[3 * MAX_MSG];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7);
    f->conn[0].staging = big;
    f->conn[0].staging_len = sizeof big;
    assert_int_equal(hello(f, 0, "", NULL, 0)->status, RKV_OK);

    struct rkv_remote_buf rb = { .addr = 0, .len = sizeof big };
    struct rkv_req h = { .opcode = RKV_OP_PUT, .flags = RKV_REQ_REMOTE_VALUE, .value_len = sizeof big };
    assert_int_equal(handle(f, 0, build(f, h, "big", &rb, sizeof rb, NULL), NULL)->status, RKV_OK);
    assert_int_equal(f->conn[0].pulls, 1);
    const struct rkv_item *it = rkv_table_find(f->srv->table, "big", 3);
    assert_non_null(it);
    assert_int_equal(rkv_item_value_len(it), sizeof big);
    assert_memory_equal(rkv_item_key(it) + 3, big, sizeof big);

    /* a descriptor outside the staging buffer: PROTOCOL, closed, old value kept */
    rb = (struct rkv_remote_buf){ .addr = 8, .len = sizeof big };
    assert_int_equal(handle(f, 0, build(f, h, "big", &rb, sizeof rb, NULL), NULL)->status,
                     RKV_PROTOCOL);
    assert_true(f->wc[0].closing);
    it = rkv_table_find(f->srv->table, "big", 3);
    assert_non_null(it);
    assert_memory_equal(rkv_item_key(it) + 3, big, sizeof big);
    fx_free(f);
}

/* ------------------------------------------------------------ malformed */

/* Each case: a valid PING header mutated; the reply echoes req_id and says why. */
static void test_malformed(void **state)
{
    (void)state;
    struct fx *f = fx_new("", 16);
    assert_int_equal(hello(f, 0, "", NULL, 0)->status, RKV_OK);
    struct rkv_req good = { .opcode = RKV_OP_PUT, .key_len = 1, .value_len = 1 };
    struct {
        const char *what;
        struct rkv_req h;
        uint32_t len_delta; /* added to the built length */
        rkv_status want;
        uint8_t want_opcode;
    } cases[] = {
        { "opcode 0", { .opcode = 0 }, 0, RKV_PROTOCOL, RKV_OP_PING },
        { "opcode past the last", { .opcode = RKV_OP_MAX }, 0, RKV_PROTOCOL, RKV_OP_PING },
        { "opcode 255", { .opcode = 255 }, 0, RKV_PROTOCOL, RKV_OP_PING },
        { "reserved set", { .opcode = RKV_OP_PING, .reserved = 1 }, 0, RKV_PROTOCOL, RKV_OP_PING },
        { "unknown flag",
          { .opcode = RKV_OP_PUT, .key_len = 1, .value_len = 1, .flags = 0x80 },
          0,
          RKV_PROTOCOL,
          RKV_OP_PUT },
        { "PUT without key", { .opcode = RKV_OP_PUT, .value_len = 1 }, 0, RKV_PROTOCOL, RKV_OP_PUT },
        { "PING with a value", { .opcode = RKV_OP_PING, .value_len = 1 }, 0, RKV_PROTOCOL, RKV_OP_PING },
        { "key over the limit",
          { .opcode = RKV_OP_DELETE, .key_len = RKV_MAX_KEY_LEN + 1 },
          0,
          RKV_TOO_LARGE,
          RKV_OP_DELETE },
        { "one byte missing", good, (uint32_t)-1, RKV_PROTOCOL, RKV_OP_PUT },
        { "one byte extra", good, 1, RKV_PROTOCOL, RKV_OP_PUT },
        { "hints past the end",
          { .opcode = RKV_OP_HINTS, .hint_count = 1000 },
          0,
          RKV_PROTOCOL,
          RKV_OP_HINTS },
    };
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(cases); i++) {
        struct rkv_req h = cases[i].h;
        h.req_id = 1000 + i;
        memset(f->msg, 'k', sizeof f->msg);
        memcpy(f->msg, &h, sizeof h);
        uint32_t len = (uint32_t)(sizeof h + (h.key_len <= RKV_MAX_KEY_LEN ? h.key_len : 0) +
                                  (h.value_len <= 8 ? h.value_len : 0)) +
                       cases[i].len_delta;
        f->wc[0].closing = false;
        const struct rkv_resp *r = handle(f, 0, len, NULL);
        if (r->status != cases[i].want)
            fail_msg("%s: status %s, want %s", cases[i].what,
                     rkv_status_name((rkv_status)r->status), rkv_status_name(cases[i].want));
        assert_int_equal(r->req_id, 1000 + i);
        assert_int_equal(r->opcode, cases[i].want_opcode);
        assert_int_equal(f->wc[0].closing, cases[i].want == RKV_PROTOCOL);
    }
    assert_null(rkv_table_find(f->srv->table, "k", 1));

    /* not even a header: answered, then closed */
    f->wc[0].closing = false;
    const struct rkv_resp *r = handle(f, 0, 7, NULL);
    assert_int_equal(r->status, RKV_PROTOCOL);
    assert_int_equal(r->opcode, RKV_OP_PING);
    assert_true(f->wc[0].closing);
    fx_free(f);
}

/* Random bytes (and random headers with a valid opcode) never crash, never
 * write, and always get a well-formed reply. Deterministic seed. */
static void test_random_bytes(void **state)
{
    (void)state;
    struct fx *f = fx_new("", 16);
    assert_int_equal(hello(f, 0, "", NULL, 0)->status, RKV_OK);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (unsigned i = 0; i < 20000; i++) {
        uint32_t len = (uint32_t)(next_random(&x) % 200);
        for (uint32_t b = 0; b < len; b++)
            f->msg[b] = (uint8_t)next_random(&x);
        if (len >= sizeof(struct rkv_req) && i % 2)
            f->msg[0] = (uint8_t)(RKV_OP_PUT + next_random(&x) % 3); /* PUT, DELETE or INCR */
        f->wc[0].closing = false;
        const struct rkv_resp *r = handle(f, 0, len, NULL);
        assert_true(r->opcode > 0 && r->opcode < RKV_OP_MAX);
        assert_true(r->status < RKV_STATUS_COUNT);
        if (r->status == RKV_PROTOCOL || len < sizeof(struct rkv_req))
            assert_true(f->wc[0].closing);
    }
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_acts_before_hello),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_hello_refusals),
        cmocka_unit_test(test_refused_hello_applies_no_hints),
        cmocka_unit_test(test_opcodes),
        cmocka_unit_test(test_put_rendezvous),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_random_bytes),
    };
    rkv_log_set_level(RKV_LOG_ERROR); /* the refusals' warnings are expected */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
