/* client.c — librkv: connections, GET by one-sided read, writes by RPC.
 *
 * A handle holds one connection ("shard") per server URI. Per shard it keeps
 * the HELLO answer, a validated copy of the region header (the geometry a
 * lookup needs) and a buffer of access hints that ride on the next RPC so the
 * server's eviction knows what clients read. The location cache (key → slot
 * word, so a repeated GET is one READ) is the process's, shared with other
 * handles (location_cache.c), and keyed by region generation.
 *
 * GET runs common/lookup.c over the shard's transport. Writes build requests
 * straight into the transport's send buffers (inline when they fit, a
 * rendezvous descriptor when the value is larger than a message), post a
 * whole batch with one send(), then collect the replies in order.
 *
 * Failure model: a transport error marks the shard down and returns
 * RKV_CONNECTION. The next call reconnects, with exponential backoff, and a
 * new HELLO; a changed region generation changes the location cache's keys,
 * so no location from the old region is ever used.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hash.h"
#include "location_cache.h"
#include "lookup.h"
#include "placement.h"
#include "protocol.h"
#include "rdma_util.h"
#include "rkv.h"
#include "shard.h"
#include "transport.h"
#include "util.h"

#define MAX_SHARDS      64
#define MAX_HINTS       32        /* hints carried by one RPC */
RKV_STATIC_ASSERT(sizeof(struct rkv_req) + MAX_HINTS * sizeof(rkv_hint) <= RKV_MIN_MSG,
                  "a HINTS request of MAX_HINTS fits the smallest message");
#define LOOKUP_OPS      1024      /* read ops one lookup round may post */
#define BATCH_CHUNK     128       /* keys a batched call gathers per shard at a time */
#define DEFAULT_TIMEOUT 5000
#define DEFAULT_RETRIES 64
#define DEFAULT_BACKOFF 1000
#define LOCAL_BUF_SIZE  (4u << 20)

struct shard {
    char uri[256];
    const struct rkv_client_transport *ops;
    struct rkv_ctrans *t;            /* NULL while down */
    const char *addr;                /* into uri, after "scheme://" */
    struct rkv_hello hello;
    struct rkv_region_header geom;   /* validated copy */
    struct rkv_lookup_ctx lctx;
    struct rkv_read_op *read_ops;    /* LOOKUP_OPS */
    uint64_t generation;             /* of the region last connected to */
    uint32_t next_req_id;             /* never 0: 0 means "any reply" */
    unsigned outstanding;            /* requests sent, replies not yet consumed */
    uint64_t clock_base;             /* server clock at clock_local_ns */
    uint64_t clock_local_ns;
    uint64_t next_attempt_ns;        /* reconnect backoff */
    unsigned backoff_ms;
    rkv_hint hints[MAX_HINTS];
    unsigned nhints;
};

struct rkv_client {
    struct rkv_options opts;
    char secret[RKV_MAX_SECRET + 1];
    unsigned nshards;
    struct shard *shards;
    struct rkv_placer placement;     /* which shard owns a key (placement.h) */
    struct rkv_loc_cache *cache;     /* the process's location cache; NULL when off */
    struct rkv_loc_cache_meter meter;/* this handle's finds and evictions: grows the cache */
    struct rkv_trans_counters tc;    /* bumped by the transports */
    struct rkv_counters c;           /* the rest, bumped here */
    char last_error[768];
};

static __thread char connect_error[768]; /* the last failed rkv_connect's message */

const char *rkv_last_error(const rkv_client *c)
{
    return c ? c->last_error : connect_error;
}

static rkv_status fail(rkv_client *c, rkv_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rkv_status fail(rkv_client *c, rkv_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
    return st;
}

/* ------------------------------------------------------------ connection */

/* Why the shard's transport failed, in its own words if it has them, else
 * the status's; call before shard_down(). */
static const char *shard_why(const struct shard *s, rkv_status st)
{
    const char *why = s->t && s->ops->why ? s->ops->why(s->t) : NULL;
    return why && why[0] ? why : rkv_strerror(st);
}

static void shard_down(struct shard *s)
{
    if (s->t)
        s->ops->close(s->t);
    s->t = NULL;
    s->outstanding = 0;
    s->nhints = 0;
}

static rkv_status lookup_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct shard *s = ctx;
    return s->ops->read(s->t, ops, n);
}

/* The server clock for expiry (common/clock.h): the region header's word
 * where the transport maps the region (shm), else the last clock the server
 * sent, extrapolated — never ahead of the server's own clock. */
static uint32_t shard_now(const struct shard *s)
{
    uint32_t now;
    if (rkv_ctrans_clock(s->ops, s->t, &now))
        return now;
    uint32_t seen = s->clock_base > UINT32_MAX ? UINT32_MAX : (uint32_t)s->clock_base;
    return rkv_clock_extrapolate(seen, s->clock_local_ns, rkv_now_ns());
}

static void shard_clock(struct shard *s, uint64_t server_clock)
{
    if (server_clock == 0)
        return;
    s->clock_base = server_clock;
    s->clock_local_ns = rkv_now_ns();
}

/* A client that only GETs hears no replies: where the clock is extrapolated,
 * re-read it from the region header (one 8-byte READ) every
 * RKV_CLOCK_REFRESH_NS, so the two hosts' clock rates cannot drift apart.
 * Lands in the local buffer before a lookup uses it; a failed READ is left
 * to the lookup to report. */
static void shard_clock_refresh(struct shard *s)
{
    size_t len;
    if (rkv_ctrans_maps_clock(s->ops) || rkv_now_ns() - s->clock_local_ns < RKV_CLOCK_REFRESH_NS)
        return;   /* the GET path: nothing more than this check */
    uint64_t *dst = s->ops->local_buf(s->t, &len);
    struct rkv_read_op op = { .offset = offsetof(struct rkv_region_header, clock),
                              .len = sizeof *dst, .dst = dst };
    if (s->ops->read(s->t, &op, 1) == RKV_OK)
        shard_clock(s, *dst);
}

/* The next request id; never 0, which shard_wait() takes as "any reply". */
static uint32_t shard_next_id(struct shard *s)
{
    if (++s->next_req_id == 0)
        s->next_req_id = 1;
    return s->next_req_id;
}

/* Wait for the reply to req_id, consuming (and dropping) earlier replies,
 * which are fire-and-forget HINTS; req_id 0 consumes any one reply. The
 * reply is copied to *resp and payload when they are not NULL. */
static rkv_status shard_wait(rkv_client *c, struct shard *s, uint32_t req_id,
                             struct rkv_resp *resp, void *payload, size_t payload_cap,
                             size_t *payload_len)
{
    for (;;) {
        const void *msg;
        size_t len;
        const struct rkv_resp *h;
        const uint8_t *p;
        rkv_status st = s->ops->recv(s->t, &msg, &len, c->opts.timeout_ms);
        if (st != RKV_OK) {
            fail(c, st, "%s: no reply: %s", s->uri, shard_why(s, st));
            shard_down(s);
            return st;
        }
        st = rkv_resp_parse(msg, len, &h, &p);
        if (st != RKV_OK) {
            s->ops->recv_done(s->t);
            shard_down(s);
            return fail(c, st, "%s: malformed reply (%zu bytes); dropping the connection", s->uri, len);
        }
        s->outstanding--;
        shard_clock(s, h->clock);
        if (h->req_id == req_id || req_id == 0) {
            if (resp)
                *resp = *h;
            size_t n = RKV_MIN((size_t)h->payload_len, payload_cap);
            if (n)
                memcpy(payload, p, n);
            if (payload_len)
                *payload_len = h->payload_len;
            s->ops->recv_done(s->t);
            return RKV_OK;
        }
        s->ops->recv_done(s->t);
        if (s->outstanding == 0) {
            shard_down(s);
            return fail(c, RKV_PROTOCOL, "%s: reply for request %llu never came", s->uri,
                        (unsigned long long)req_id);
        }
    }
}

/* Make sure one credit is free: when async HINTS hold them all, take their
 * replies back first. */
static rkv_status shard_credit(rkv_client *c, struct shard *s)
{
    while (s->outstanding >= s->hello.credits) {
        rkv_status st = shard_wait(c, s, 0, NULL, NULL, 0, NULL);
        if (st != RKV_OK)
            return st;
    }
    return RKV_OK;
}

/* Take the hints that fit in a request with `room` spare bytes. */
static size_t take_hints(struct shard *s, size_t room, const rkv_hint **hints)
{
    size_t n = RKV_MIN((size_t)s->nhints, room / sizeof(rkv_hint));
    *hints = s->hints + s->nhints - n;
    s->nhints -= (unsigned)n;
    return n;
}

/* The one way requests leave this client: post messages 0..n-1 of the send
 * buffers (lengths lens[]) as one batch. On error the connection is unusable:
 * the shard is marked down (the caller must not use it again in this call)
 * and the message says what was being sent. On success the n requests are
 * outstanding until shard_wait() consumes their replies. */
static rkv_status shard_send(rkv_client *c, struct shard *s, const uint32_t *lens, unsigned n,
                             const char *what)
{
    rkv_status st = s->ops->send(s->t, lens, n);
    if (RKV_UNLIKELY(st != RKV_OK)) {
        fail(c, st, "%s: sending %s failed: %s", s->uri, what, shard_why(s, st));
        shard_down(s);
        return st;
    }
    s->outstanding += n;
    return RKV_OK;
}

/* Send one request without key or value (control RPCs, HINTS) once a credit
 * is free, carrying the buffered hints that fit; its id goes to *req_id. */
static rkv_status send_keyless(rkv_client *c, struct shard *s, uint8_t opcode, const char *what,
                               uint32_t *req_id)
{
    rkv_status st = shard_credit(c, s);
    if (st != RKV_OK)
        return st;
    struct rkv_req h = { .opcode = opcode, .req_id = shard_next_id(s) };
    const rkv_hint *hints;
    h.hint_count = (uint16_t)take_hints(s, s->hello.max_msg - sizeof h, &hints);
    uint32_t len = (uint32_t)rkv_req_build(s->ops->send_buf(s->t, 0), &h, NULL, NULL, 0,
                                           hints, h.hint_count);
    *req_id = h.req_id;
    return shard_send(c, s, &len, 1, what);
}

static rkv_status shard_hello(rkv_client *c, struct shard *s)
{
    struct rkv_req req = { .opcode = RKV_OP_HELLO, .key_len = (uint16_t)strlen(c->secret),
                           .req_id = shard_next_id(s), .arg = RKV_PROTO_VERSION };
    uint32_t len = (uint32_t)rkv_req_build(s->ops->send_buf(s->t, 0), &req, c->secret, NULL, 0, NULL, 0);
    rkv_status st = shard_send(c, s, &len, 1, "HELLO");
    if (st != RKV_OK)
        return st;

    struct rkv_resp resp;
    uint8_t payload[sizeof(struct rkv_hello)];
    size_t plen;
    st = shard_wait(c, s, req.req_id, &resp, payload, sizeof payload, &plen);
    if (st != RKV_OK)
        return st;
    if (resp.status == RKV_AUTH)
        return fail(c, RKV_AUTH, "%s: the server refused our shared secret; set the secret it is "
                    "configured with (rkv_options.auth_secret, --auth)", s->uri);
    if (resp.status != RKV_OK)
        return fail(c, (rkv_status)resp.status, "%s: HELLO refused: %s", s->uri,
                    rkv_strerror((rkv_status)resp.status));
    st = plen == sizeof payload ? rkv_hello_parse(payload, plen, &s->hello) : RKV_PROTOCOL;
    if (st == RKV_VERSION_MISMATCH)
        return fail(c, st, "%s: server speaks protocol %u, this client %u; upgrade the older side",
                    s->uri, s->hello.proto_version, RKV_PROTO_VERSION);
    if (st != RKV_OK)
        return fail(c, st, "%s: malformed HELLO reply", s->uri);
    return RKV_OK;
}

/* Read and validate the region header; set up the lookup context. */
/* The cost model the lookup runs with: the caller's choice, else the
 * connection's (which the rdma transport times once). */
static enum rkv_read_cost lookup_cost(const rkv_client *c, const struct shard *s)
{
    switch (c->opts.bucket_reads) {
    case RKV_BUCKET_READS_TOGETHER:
        return RKV_COST_ROUND_TRIPS;
    case RKV_BUCKET_READS_FIRST:
        return RKV_COST_PER_READ;
    default:
        return s->ops->read_cost(s->t);
    }
}

static rkv_status shard_geometry(rkv_client *c, struct shard *s)
{
    size_t local_len;
    uint8_t *local = s->ops->local_buf(s->t, &local_len);
    struct rkv_read_op op = { .offset = 0, .len = RKV_HEADER_SIZE, .dst = local };
    rkv_status st = s->ops->read(s->t, &op, 1);
    if (st != RKV_OK)
        return fail(c, st, "%s: cannot read the region header: %s", s->uri, rkv_strerror(st));
    struct rkv_region_header g;   /* s->geom keeps the last valid one (route() uses it) */
    memcpy(&g, local, sizeof g);
    if (!rkv_header_valid(&g, s->hello.region_size) || g.generation != s->hello.generation)
        return fail(c, RKV_PROTOCOL, "%s: the region header is invalid or from another server "
                    "generation; is the server version compatible?", s->uri);
    if (local_len < rkv_lookup_scratch_need(&g, 1))
        return fail(c, RKV_INTERNAL, "%s: local buffer (%zu bytes) smaller than the largest item",
                    s->uri, local_len);
    s->geom = g;
    s->lctx = (struct rkv_lookup_ctx){
        .geom = &s->geom, .read = lookup_read, .read_ctx = s,
        .scratch = local, .scratch_len = local_len,
        .ops = s->read_ops, .ops_cap = LOOKUP_OPS,
        .max_retries = c->opts.max_get_retries, .cost = lookup_cost(c, s),
    };
    return RKV_OK;
}

static rkv_status shard_connect(rkv_client *c, struct shard *s)
{
    char err[512] = "";
    struct rkv_ctrans_params p = { .local_buf_size = LOCAL_BUF_SIZE,
                                   .timeout_ms = c->opts.timeout_ms,
                                   .device = c->opts.rdma_device,
                                   .ack_timeout = c->opts.rdma_ack_timeout,
                                   .retry_count = c->opts.rdma_retry_count };
    rkv_status st = s->ops->connect(s->addr, &p, &c->tc, &s->t, err, sizeof err);
    if (st != RKV_OK) {
        s->t = NULL;
        return fail(c, st, "%s: %s", s->uri, err[0] ? err : rkv_strerror(st));
    }
    st = shard_hello(c, s);
    if (st == RKV_OK) {
        err[0] = '\0';
        st = s->ops->set_region(s->t, &s->hello, err, sizeof err);
        if (st != RKV_OK)
            fail(c, st, "%s: %s", s->uri, err);
    }
    if (st == RKV_OK)
        st = shard_geometry(c, s);
    if (st != RKV_OK) {
        shard_down(s);
        return st;
    }
    s->generation = s->hello.generation; /* a new server: new cache keys (location_cache.h) */
    shard_clock(s, s->hello.clock);
    s->backoff_ms = 0;
    return RKV_OK;
}

/* Make sure the shard is connected, reconnecting with backoff. */
static rkv_status shard_ready(rkv_client *c, struct shard *s)
{
    if (RKV_LIKELY(s->t != NULL))
        return RKV_OK;
    uint64_t now = rkv_now_ns();
    if (now < s->next_attempt_ns)
        return fail(c, RKV_CONNECTION, "%s: server unreachable; next reconnect attempt in %llu ms",
                    s->uri, (unsigned long long)((s->next_attempt_ns - now) / 1000000));
    rkv_status st = shard_connect(c, s);
    if (st == RKV_OK) {
        c->c.reconnects++;
        return RKV_OK;
    }
    s->backoff_ms = s->backoff_ms ? RKV_MIN(s->backoff_ms * 2, c->opts.reconnect_ms) : 10;
    s->next_attempt_ns = rkv_now_ns() + (uint64_t)s->backoff_ms * 1000000ull;
    return st;
}

static rkv_status parse_uris(rkv_client *c, const char *uris)
{
    const char *p = uris;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (c->nshards == MAX_SHARDS)
            return fail(c, RKV_INVALID, "too many server URIs (at most %d)", MAX_SHARDS);
        struct shard *s = &c->shards[c->nshards];
        char scheme[8];
        if (len == 0 || len >= sizeof s->uri)
            return fail(c, RKV_INVALID, "empty or overlong server URI in \"%s\"", uris);
        memcpy(s->uri, p, len);
        s->uri[len] = '\0';
        rkv_status st = rkv_placement_add(&c->placement, s->uri, c->last_error, sizeof c->last_error);
        if (st != RKV_OK)
            return st;
        if (!rkv_uri_split(s->uri, scheme, sizeof scheme, &s->addr) || s->addr[0] == '\0' ||
            (s->ops = rkv_client_transport_by_scheme(scheme)) == NULL)
            return fail(c, RKV_INVALID, "bad server URI \"%s\": use rdma://HOST:PORT or shm://PATH",
                        s->uri);
        s->read_ops = calloc(LOOKUP_OPS, sizeof *s->read_ops);
        if (s->read_ops == NULL)
            return fail(c, RKV_NO_MEMORY, "out of memory");
        c->nshards++;
        p += len + (end != NULL);
    }
    if (c->nshards == 0)
        return fail(c, RKV_INVALID, "no server URI given");
    return rkv_placement_build(&c->placement, c->last_error, sizeof c->last_error);
}

static void apply_defaults(struct rkv_options *o)
{
    if (o->timeout_ms == 0)
        o->timeout_ms = DEFAULT_TIMEOUT;
    if (o->location_cache == 0)
        o->location_cache = RKV_LOC_CACHE_DEFAULT;
    if (o->max_get_retries == 0)
        o->max_get_retries = DEFAULT_RETRIES;
    if (o->reconnect_ms == 0)
        o->reconnect_ms = DEFAULT_BACKOFF;
    if (o->rdma_ack_timeout == 0)
        o->rdma_ack_timeout = RKV_RDMA_ACK_TIMEOUT;
    if (o->rdma_retry_count == 0)
        o->rdma_retry_count = RKV_RDMA_RETRY_COUNT;
}

rkv_status rkv_connect(const char *uris, const struct rkv_options *opts, rkv_client **out)
{
    rkv_status st = RKV_NO_MEMORY;
    rkv_client *c = calloc(1, sizeof *c);
    *out = NULL;
    if (c == NULL)
        return RKV_NO_MEMORY;
    if (opts)
        c->opts = *opts;
    apply_defaults(&c->opts);
    if ((unsigned)c->opts.bucket_reads > RKV_BUCKET_READS_FIRST) {
        st = fail(c, RKV_INVALID, "rkv_options.bucket_reads is %u; use RKV_BUCKET_READS_AUTO, "
                  "_TOGETHER or _FIRST", (unsigned)c->opts.bucket_reads);
        goto fail;
    }
    char rc_err[256];
    if (!rkv_rdma_rc_check(c->opts.rdma_ack_timeout, c->opts.rdma_retry_count, "rdma_ack_timeout",
                           "rdma_retry_count", rc_err, sizeof rc_err)) {
        st = fail(c, RKV_INVALID, "rkv_options: %s", rc_err);
        goto fail;
    }
    if (c->opts.auth_secret) {
        if (strlen(c->opts.auth_secret) > RKV_MAX_SECRET) {
            st = fail(c, RKV_INVALID, "auth secret longer than %u bytes", RKV_MAX_SECRET);
            goto fail;
        }
        strcpy(c->secret, c->opts.auth_secret);
        c->opts.auth_secret = NULL; /* our copy is c->secret */
    }
    c->shards = calloc(MAX_SHARDS, sizeof *c->shards);
    if (c->shards == NULL)
        goto fail;
    if (c->opts.location_cache != (unsigned)-1 &&
        (c->cache = rkv_loc_cache_acquire(c->opts.location_cache)) == NULL)
        goto fail;
    st = rkv_placement_init(&c->placement, c->opts.placement, c->last_error, sizeof c->last_error);
    if (st == RKV_OK)
        st = parse_uris(c, uris ? uris : "");
    for (unsigned i = 0; st == RKV_OK && i < c->nshards; i++)
        st = shard_connect(c, &c->shards[i]);
    if (st != RKV_OK)
        goto fail;
    *out = c;
    return RKV_OK;
fail:
    if (c->last_error[0] == '\0')
        fail(c, st, "%s", rkv_strerror(st));
    memcpy(connect_error, c->last_error, sizeof connect_error);
    rkv_close(c);
    return st;
}

void rkv_close(rkv_client *c)
{
    if (c == NULL)
        return;
    for (unsigned i = 0; c->shards && i < c->nshards; i++) {
        shard_down(&c->shards[i]);
        free(c->shards[i].read_ops);
    }
    free(c->shards);
    rkv_placement_free(&c->placement);
    rkv_loc_cache_release(c->cache);
    free(c);
}

/* ------------------------------------------------------------ GET */

static struct shard *shard_for(rkv_client *c, const void *key, size_t key_len, uint64_t key_hash)
{
    return &c->shards[rkv_placement_pick(&c->placement, key, key_len, key_hash)];
}

/* What a call was given for one key. Single and batched calls check it with
 * the same route(), so a batch never accepts what a single call refuses. */
enum arg_data { DATA_NONE, DATA_BUFFER, DATA_VALUE };
struct call_args {
    const char *call;                    /* "get", "put", ... for messages */
    const void *key; size_t key_len;
    enum arg_data kind;                  /* what data/data_len are */
    const void *data; size_t data_len;   /* get: the buffer; put: the value */
    const struct rkv_put_options *opts;  /* put: may be NULL */
};

/* Check a call's arguments and find the shard that owns its key (the key's
 * hash in *kh). RKV_OK, or RKV_INVALID / RKV_TOO_LARGE with the message set.
 * The limits are the owning server's, from its region header. */
static rkv_status route(rkv_client *c, const struct call_args *a, struct shard **s, uint64_t *kh)
{
    const char *what = a->kind == DATA_VALUE ? "value" : "buffer";
    *s = NULL;           /* defined on every path, also for refused calls */
    *kh = 0;
    if (a->key == NULL || a->key_len == 0)
        return fail(c, RKV_INVALID, "%s: the key is %s; keys are 1..%u bytes", a->call,
                    a->key == NULL ? "NULL" : "empty (key_len 0)", RKV_MAX_KEY_LEN);
    if (a->kind != DATA_NONE && a->data == NULL && a->data_len != 0)
        return fail(c, RKV_INVALID, "%s: the %s is NULL but its length is %zu; pass a %s or "
                    "length 0", a->call, what, a->data_len, what);
    if (a->opts && (unsigned)a->opts->mode > RKV_CAS)
        return fail(c, RKV_INVALID, "%s: unknown put mode %u; use RKV_SET, RKV_ADD, RKV_REPLACE "
                    "or RKV_CAS", a->call, (unsigned)a->opts->mode);
    *kh = rkv_shard_hash(a->key, a->key_len);
    *s = shard_for(c, a->key, a->key_len, *kh);
    if (a->key_len > (*s)->geom.max_key_len)
        return fail(c, RKV_TOO_LARGE, "%s: key of %zu bytes is longer than the server's limit "
                    "of %u", a->call, a->key_len, (*s)->geom.max_key_len);
    if (a->kind == DATA_VALUE && a->data_len > (*s)->geom.max_value_len)
        return fail(c, RKV_TOO_LARGE, "%s: value of %zu bytes is longer than the server's limit "
                    "of %u (rkv_max_value_size)", a->call, a->data_len, (*s)->geom.max_value_len);
    return RKV_OK;
}

/* Send the buffered hints on their own, without waiting for the reply
 * (shard_wait drops it later). Costs one doorbell per MAX_HINTS GET hits.
 * Hints are best effort, but a failure to send them takes the shard down
 * like any other: the status says so, and the caller must not use the
 * shard again in this call. */
static rkv_status hints_flush(rkv_client *c, struct shard *s)
{
    uint32_t req_id;
    return send_keyless(c, s, RKV_OP_HINTS, "access hints", &req_id); /* MAX_HINTS always fit */
}

/* Buffer one access hint; a full buffer is flushed. A down shard takes none. */
static rkv_status note_hint(rkv_client *c, struct shard *s, uint64_t slot)
{
    if (s->t == NULL || !(s->hello.features & RKV_FEATURE_HINTS))
        return RKV_OK;
    s->hints[s->nhints++] = slot;
    return s->nhints == MAX_HINTS ? hints_flush(c, s) : RKV_OK;
}

/* Fold one finished lookup into counters, cache and hints. Returns RKV_OK,
 * or the error that took the shard down while flushing hints (the lookup's
 * own result stands: it was read and verified before). */
static rkv_status lookup_done(rkv_client *c, struct shard *s, struct rkv_lookup *l,
                              uint64_t key_hash)
{
    bool found = l->status == RKV_OK || l->status == RKV_BUFFER_TOO_SMALL;
    rkv_status hint_st = RKV_OK;
    c->c.gets++;
    c->c.cache_stale += l->cached_slot != 0 && !l->cache_used;
    if (found) {
        c->c.get_hits++;
        c->c.cache_hits += (uint64_t)l->cache_used;
        hint_st = note_hint(c, s, l->slot);
    } else {
        c->c.get_misses += l->status == RKV_NOT_FOUND;
    }
    /* only changes are written: a hit leaves the shared cache line clean */
    uint64_t slot = found ? l->slot : 0;
    if (c->cache && rkv_loc_cache_changed(l->cached_slot, slot))
        rkv_loc_cache_store(c->cache, &c->meter, s->generation, key_hash, slot);
    return hint_st;
}

static void prepare_lookup(rkv_client *c, const struct shard *s, struct rkv_lookup *l,
                           const void *key, size_t key_len, void *buf, size_t buf_len,
                           uint64_t key_hash)
{
    l->key = key;
    l->key_len = key_len > UINT32_MAX ? UINT32_MAX : (uint32_t)key_len;
    l->buf = buf;
    l->buf_len = buf_len;
    l->cached_slot = c->cache ? rkv_loc_cache_find(c->cache, &c->meter, s->generation, key_hash)
                              : 0;
}

static rkv_status run_lookups(rkv_client *c, struct shard *s, struct rkv_lookup *ls, unsigned n)
{
    shard_clock_refresh(s);
    s->lctx.now = shard_now(s);
    uint64_t retries = s->lctx.retries, forwards = s->lctx.forwards;
    rkv_status st = rkv_lookup_batch(&s->lctx, ls, n);
    c->c.verify_retries += s->lctx.retries - retries;
    c->c.forwards += s->lctx.forwards - forwards;
    if (st != RKV_OK) {
        fail(c, st, "%s: read failed: %s", s->uri, shard_why(s, st));
        shard_down(s);
        return st;
    }
    return RKV_OK;
}

rkv_status rkv_get(rkv_client *c, const void *key, size_t key_len, void *buf, size_t buf_len,
                   size_t *value_len, struct rkv_item_info *info)
{
    const struct call_args a = { .call = "get", .key = key, .key_len = key_len,
                                 .kind = DATA_BUFFER, .data = buf, .data_len = buf_len };
    struct shard *s;
    uint64_t kh;
    rkv_status st = route(c, &a, &s, &kh);
    if (RKV_LIKELY(st == RKV_OK))
        st = shard_ready(c, s);
    if (RKV_UNLIKELY(st != RKV_OK))
        return st;

    struct rkv_lookup l;
    prepare_lookup(c, s, &l, key, key_len, buf, buf_len, kh);
    st = run_lookups(c, s, &l, 1);
    if (RKV_UNLIKELY(st != RKV_OK))
        return st;
    (void)lookup_done(c, s, &l, kh); /* a failed hint send: the value stands, next call reconnects */
    if (value_len)
        *value_len = l.value_len;
    if (info && (l.status == RKV_OK || l.status == RKV_BUFFER_TOO_SMALL)) {
        uint32_t now = shard_now(s);
        info->version = l.version;
        info->user_flags = l.user_flags;
        info->ttl_left = l.expire_at == 0 ? 0 : (l.expire_at > now ? l.expire_at - now : 1);
    }
    if (l.status == RKV_RETRY_EXHAUSTED)
        return fail(c, l.status, "get: the item changed under %u consecutive reads; retry",
                    c->opts.max_get_retries);
    return l.status;
}

/* ------------------------------------------------------------ batched calls */

/* A batched call (rkv_mget, rkv_mput) as its one skeleton, batch_run(),
 * sees it: the caller's ops, and what differs per call. */
struct batch {
    rkv_client *c;
    void *ops;                           /* the caller's array of n ops */
    size_t n;
    /* op i's arguments, for route() */
    void (*args)(const struct batch *b, size_t i, struct call_args *a);
    /* op i gets status st and no result */
    void (*set_status)(struct batch *b, size_t i, rkv_status st);
    /* Run ops idx[0..k-1] (key hashes khs[]) on their shard s, whose state in
     * this call is `down`: once it is not RKV_OK the shard is not used again
     * and the ops without a result carry it (the first such error goes to
     * first_error). Every op gets a status. Returns the shard's state. */
    rkv_status (*run)(struct batch *b, struct shard *s, rkv_status down,
                      const size_t *idx, const uint64_t *khs, unsigned k);
    rkv_status first_error;
};

/* Every op starts RKV_INTERNAL; then one pass per shard gathers the ops it
 * owns (route() checks each; a refused op keeps route()'s status), in chunks
 * of BATCH_CHUNK, and runs each chunk. Returns the first shard error. */
static rkv_status batch_run(struct batch *b)
{
    size_t idx[BATCH_CHUNK];
    uint64_t khs[BATCH_CHUNK];

    for (size_t i = 0; i < b->n; i++)
        b->set_status(b, i, RKV_INTERNAL);
    for (unsigned sh = 0; sh < b->c->nshards; sh++) {
        struct shard *s = &b->c->shards[sh];
        rkv_status down = RKV_OK;
        size_t i = 0;
        while (i < b->n) {
            unsigned k = 0;
            for (; i < b->n && k < BATCH_CHUNK; i++) {
                struct call_args a;
                struct shard *owner;
                b->args(b, i, &a);
                rkv_status st = route(b->c, &a, &owner, &khs[k]);
                if (st != RKV_OK)
                    b->set_status(b, i, st);
                if (st != RKV_OK || owner != s)
                    continue;
                idx[k++] = i;
            }
            if (k > 0)
                down = b->run(b, s, down, idx, khs, k);
        }
    }
    return b->first_error;
}

static void mget_args(const struct batch *b, size_t i, struct call_args *a)
{
    const struct rkv_get_op *op = (const struct rkv_get_op *)b->ops + i;
    *a = (struct call_args){ .call = "mget", .key = op->key, .key_len = op->key_len,
                             .kind = DATA_BUFFER, .data = op->buf, .data_len = op->buf_len };
}

static void mget_set_status(struct batch *b, size_t i, rkv_status st)
{
    struct rkv_get_op *op = (struct rkv_get_op *)b->ops + i;
    op->status = st;
    op->value_len = 0;
}

/* Look up one chunk on shard s, as many keys per round as its scratch holds
 * (common/lookup.h). */
static rkv_status mget_run(struct batch *b, struct shard *s, rkv_status down,
                           const size_t *idx, const uint64_t *khs, unsigned k)
{
    rkv_client *c = b->c;
    struct rkv_get_op *ops = b->ops;
    struct rkv_lookup ls[BATCH_CHUNK];

    /* the finds, once every key's cache line is on its way */
    for (unsigned j = 0; c->cache && j < k; j++)
        rkv_loc_cache_prefetch(c->cache, s->generation, khs[j]);
    for (unsigned j = 0; j < k; j++) {
        const struct rkv_get_op *op = &ops[idx[j]];
        prepare_lookup(c, s, &ls[j], op->key, op->key_len, op->buf, op->buf_len, khs[j]);
        ls[j].status = RKV_INTERNAL;
    }
    if (down == RKV_OK)
        down = shard_ready(c, s);
    if (down == RKV_OK) {
        unsigned fit = RKV_MIN(k, rkv_lookup_batch_fit(&s->lctx));
        for (unsigned done = 0; down == RKV_OK && done < k; done += fit)
            down = run_lookups(c, s, ls + done, RKV_MIN(fit, k - done));
    }
    for (unsigned j = 0; j < k; j++) {
        struct rkv_get_op *op = &ops[idx[j]];
        if (down != RKV_OK && ls[j].status == RKV_INTERNAL) {
            op->status = down;           /* never looked up (or the read failed) */
            op->value_len = 0;
            if (b->first_error == RKV_OK)
                b->first_error = down;
            continue;
        }
        rkv_status hint = lookup_done(c, s, &ls[j], khs[j]);
        if (down == RKV_OK)
            down = hint;                 /* the shard went down: later chunks skip it */
        op->status = ls[j].status;
        op->value_len = ls[j].value_len;
    }
    return down;
}

rkv_status rkv_mget(rkv_client *c, struct rkv_get_op *ops, size_t n)
{
    struct batch b = { .c = c, .ops = ops, .n = n, .args = mget_args,
                       .set_status = mget_set_status, .run = mget_run };
    return batch_run(&b);
}

/* ------------------------------------------------------------ writes */

/* One request of a write batch, as the batching code sees it. */
struct write_req {
    uint8_t opcode;
    const void *key; size_t key_len;
    const void *value; size_t value_len;
    const struct rkv_put_options *opts;   /* PUT only; may be NULL */
    uint64_t arg;                         /* INCR delta */
    rkv_status status;                    /* out */
    uint64_t value_out;                   /* out: version or incr result */
};

static bool needs_staging(const struct shard *s, const struct write_req *w)
{
    return rkv_req_size(w->key_len, w->value_len, 0, s->hello.max_msg) == 0;
}

/* Build one request into send buffer `i`; a value too large for a message
 * goes through the staging buffer (rendezvous). Spare room carries hints. */
static uint32_t build_req(struct shard *s, unsigned i, const struct write_req *w, uint32_t req_id)
{
    const struct rkv_put_options *o = w->opts;
    struct rkv_req h = { .opcode = w->opcode, .key_len = (uint16_t)w->key_len,
                         .value_len = (uint32_t)w->value_len, .req_id = req_id, .arg = w->arg };
    if (o) {
        h.flags = (uint8_t)o->mode;      /* route() refused unknown modes */
        h.ttl = o->ttl;
        h.arg = o->cas;
        h.user_flags = o->user_flags;
    }
    const void *value = w->value;
    size_t inline_len = w->value_len;
    struct rkv_remote_buf rb;
    if (needs_staging(s, w)) {
        size_t cap;
        void *stage = s->ops->staging(s->t, &cap, &rb);
        memcpy(stage, w->value, w->value_len);
        rb.len = (uint32_t)w->value_len;
        h.flags |= RKV_REQ_REMOTE_VALUE;
        value = &rb;
        inline_len = sizeof rb;
    }
    const rkv_hint *hints;
    h.hint_count = (uint16_t)take_hints(s, s->hello.max_msg - sizeof h - w->key_len - inline_len,
                                        &hints);
    return (uint32_t)rkv_req_build(s->ops->send_buf(s->t, i), &h, w->key, value, inline_len,
                                   hints, h.hint_count);
}

/* A value that travels by rendezvous must fit this connection's staging
 * buffer (route() has checked everything else). */
static rkv_status check_staging(rkv_client *c, const struct shard *s, const struct write_req *w)
{
    size_t stage_cap = 0;
    struct rkv_remote_buf rb;
    if (!needs_staging(s, w))
        return RKV_OK;
    s->ops->staging(s->t, &stage_cap, &rb);
    if (w->value_len > stage_cap)
        return fail(c, RKV_TOO_LARGE, "value of %zu bytes is larger than the client's "
                    "staging buffer (%zu bytes)", w->value_len, stage_cap);
    return RKV_OK;
}

/* Send ws[0..n-1] (all owned by shard s, checked by route(), status
 * RKV_INTERNAL) in as few batches as credits allow (one doorbell each) and
 * collect every reply into its write_req. A value that needs the staging
 * buffer travels in a batch of its own. `down` is the shard's state in this
 * call: when it is, or becomes, an error, the shard is not used again and
 * every write without a reply carries that error. Returns the shard's state. */
static rkv_status shard_write_batch(rkv_client *c, struct shard *s, rkv_status down,
                                    struct write_req **ws, size_t n)
{
    struct write_req *sent[256];
    uint32_t lens[256];
    size_t i = 0;
    rkv_status st = down != RKV_OK ? down : shard_ready(c, s);

    while (st == RKV_OK && i < n) {
        if ((st = shard_credit(c, s)) != RKV_OK)
            break;
        unsigned room = RKV_MIN(s->hello.credits - s->outstanding, (unsigned)RKV_ARRAY_SIZE(lens));
        uint32_t ids[256];
        unsigned k = 0;
        for (; i < n && k < room; i++) {
            struct write_req *w = ws[i];
            if ((w->status = check_staging(c, s, w)) != RKV_OK)
                continue;
            w->status = RKV_INTERNAL;
            bool staged = needs_staging(s, w);
            if (staged && k > 0)
                break;
            sent[k] = w;
            ids[k] = shard_next_id(s);
            lens[k] = build_req(s, k, w, ids[k]);
            k++;
            if (staged) {
                i++;
                break;
            }
        }
        if (k == 0)
            continue;
        if ((st = shard_send(c, s, lens, k, "requests")) != RKV_OK)
            break;
        for (unsigned r = 0; st == RKV_OK && r < k; r++) {
            struct rkv_resp resp;
            st = shard_wait(c, s, ids[r], &resp, NULL, 0, NULL);
            if (st == RKV_OK) {
                sent[r]->status = (rkv_status)resp.status;
                sent[r]->value_out = resp.value;
                if (resp.status != RKV_OK)
                    fail(c, (rkv_status)resp.status, "%s: server answered: %s", s->uri,
                         rkv_strerror((rkv_status)resp.status));
            }
        }
    }
    for (size_t j = 0; st != RKV_OK && j < n; j++)
        if (ws[j]->status == RKV_INTERNAL)
            ws[j]->status = st;   /* not sent, or no reply: the shard's error */
    return st;
}

/* One write to the key's owner; returns its status. An update leaves the
 * cached location alone: the old item forwards to its replacement (one READ
 * more on the next GET, not the buckets); a delete leaves nothing to follow. */
static rkv_status write_one(rkv_client *c, const char *call, struct write_req *w)
{
    const struct call_args a = { .call = call, .key = w->key, .key_len = w->key_len,
                                 .kind = w->opcode == RKV_OP_PUT ? DATA_VALUE : DATA_NONE,
                                 .data = w->value, .data_len = w->value_len, .opts = w->opts };
    struct shard *s;
    uint64_t kh;
    struct write_req *p = w;
    rkv_status st = route(c, &a, &s, &kh);
    if (st != RKV_OK)
        return st;
    w->status = RKV_INTERNAL;
    shard_write_batch(c, s, RKV_OK, &p, 1);
    if (c->cache && w->opcode == RKV_OP_DELETE)
        rkv_loc_cache_store(c->cache, &c->meter, s->generation, kh, 0);
    return w->status;
}

rkv_status rkv_put(rkv_client *c, const void *key, size_t key_len, const void *value,
                   size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version)
{
    struct write_req w = { .opcode = RKV_OP_PUT, .key = key, .key_len = key_len,
                           .value = value, .value_len = value_len, .opts = opts };
    c->c.puts++;
    rkv_status st = write_one(c, "put", &w);
    if (st == RKV_OK && new_version)
        *new_version = w.value_out;
    return st;
}

rkv_status rkv_delete(rkv_client *c, const void *key, size_t key_len)
{
    struct write_req w = { .opcode = RKV_OP_DELETE, .key = key, .key_len = key_len };
    c->c.deletes++;
    return write_one(c, "delete", &w);
}

rkv_status rkv_incr(rkv_client *c, const void *key, size_t key_len, int64_t delta, uint64_t *result)
{
    struct write_req w = { .opcode = RKV_OP_INCR, .key = key, .key_len = key_len,
                           .arg = (uint64_t)delta };
    c->c.other_rpcs++;
    rkv_status st = write_one(c, "incr", &w);
    if (st == RKV_OK && result)
        *result = w.value_out;
    return st;
}

static void mput_args(const struct batch *b, size_t i, struct call_args *a)
{
    const struct rkv_put_op *op = (const struct rkv_put_op *)b->ops + i;
    *a = (struct call_args){ .call = "mput", .key = op->key, .key_len = op->key_len,
                             .kind = DATA_VALUE, .data = op->value, .data_len = op->value_len,
                             .opts = op->opts };
}

static void mput_set_status(struct batch *b, size_t i, rkv_status st)
{
    struct rkv_put_op *op = (struct rkv_put_op *)b->ops + i;
    op->status = st;
    op->version = 0;
}

/* Write one chunk to shard s in as few send batches as credits allow. */
static rkv_status mput_run(struct batch *b, struct shard *s, rkv_status down,
                           const size_t *idx, const uint64_t *khs, unsigned k)
{
    struct rkv_put_op *ops = b->ops;
    struct write_req ws[BATCH_CHUNK];
    struct write_req *wp[BATCH_CHUNK];

    (void)khs;
    for (unsigned j = 0; j < k; j++) {
        const struct rkv_put_op *op = &ops[idx[j]];
        ws[j] = (struct write_req){ .opcode = RKV_OP_PUT, .key = op->key, .key_len = op->key_len,
                                    .value = op->value, .value_len = op->value_len,
                                    .opts = op->opts, .status = RKV_INTERNAL };
        wp[j] = &ws[j];
    }
    b->c->c.puts += k;
    down = shard_write_batch(b->c, s, down, wp, k);
    for (unsigned j = 0; j < k; j++) {
        struct rkv_put_op *op = &ops[idx[j]];
        op->status = ws[j].status;
        op->version = ws[j].value_out;
        if (down != RKV_OK && op->status == down && b->first_error == RKV_OK)
            b->first_error = down;
    }
    return down;
}

rkv_status rkv_mput(rkv_client *c, struct rkv_put_op *ops, size_t n)
{
    struct batch b = { .c = c, .ops = ops, .n = n, .args = mput_args,
                       .set_status = mput_set_status, .run = mput_run };
    return batch_run(&b);
}

/* ------------------------------------------------------------ control */

/* A control RPC without key or value to shard s; the payload is copied out. */
static rkv_status control_rpc(rkv_client *c, struct shard *s, uint8_t opcode, void *payload,
                              size_t cap, size_t *len)
{
    uint32_t req_id;
    rkv_status st = shard_ready(c, s);
    if (st == RKV_OK)
        st = send_keyless(c, s, opcode, "the request", &req_id);
    if (st != RKV_OK)
        return st;
    c->c.other_rpcs++;
    struct rkv_resp resp;
    st = shard_wait(c, s, req_id, &resp, payload, cap, len);
    return st != RKV_OK ? st : (rkv_status)resp.status;
}

rkv_status rkv_ping(rkv_client *c)
{
    for (unsigned i = 0; i < c->nshards; i++) {
        rkv_status st = control_rpc(c, &c->shards[i], RKV_OP_PING, NULL, 0, NULL);
        if (st != RKV_OK)
            return st;
    }
    return RKV_OK;
}

rkv_status rkv_stats(rkv_client *c, unsigned shard, char *buf, size_t buf_len, size_t *len)
{
    size_t n = 0;
    if (shard >= c->nshards || (buf == NULL && buf_len))
        return fail(c, RKV_INVALID, "stats: no shard %u (have %u)", shard, c->nshards);
    rkv_status st = control_rpc(c, &c->shards[shard], RKV_OP_STATS, buf, buf_len, &n);
    if (len)
        *len = n;
    if (st == RKV_OK && n >= buf_len)
        return RKV_BUFFER_TOO_SMALL;
    if (st == RKV_OK)
        buf[n] = '\0';
    return st;
}

void rkv_get_counters(const rkv_client *c, struct rkv_counters *out)
{
    *out = c->c;
    out->reads = c->tc.reads;
    out->read_round_trips = c->tc.read_round_trips;
    out->doorbells = c->tc.doorbells;
    out->sends = c->tc.sends;
    out->inline_sends = c->tc.inline_sends;
}

void rkv_reset_counters(rkv_client *c)
{
    memset(&c->c, 0, sizeof c->c);
    memset(&c->tc, 0, sizeof c->tc);
}

size_t rkv_max_value_size(const rkv_client *c)
{
    uint32_t m = UINT32_MAX;
    for (unsigned i = 0; i < c->nshards; i++)
        m = RKV_MIN(m, c->shards[i].geom.max_value_len);
    return m;
}

unsigned rkv_shard_count(const rkv_client *c)
{
    return c->nshards;
}

unsigned rkv_shard_of(const rkv_client *c, const void *key, size_t key_len)
{
    return rkv_placement_pick(&c->placement, key, key_len, rkv_shard_hash(key, key_len));
}
