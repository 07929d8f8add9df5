/* client.c — librkv: connections, GET by one-sided read, writes by RPC,
 * and the pipelined core every call goes through.
 *
 * A handle holds one connection ("shard") per server URI. Per shard it keeps
 * the HELLO answer, a validated copy of the region header (the geometry a
 * lookup needs) and a buffer of access hints that ride on the next RPC so the
 * server's eviction knows what clients read. The location cache (key → slot
 * word, so a repeated GET is one READ) is the process's, shared with other
 * handles (location_cache.c), and keyed by region generation.
 *
 * The pipeline (rkv.h "pipelining"): every operation, from rkv_submit or from
 * a synchronous call, takes a slot of the handle's slot array and is linked
 * into its shard's work:
 *
 *   rkv_submit ──► slot ──► shard's GET list ──► lookup rounds (common/lookup.c:
 *                    │                          one round trip per shard and
 *                    │                          pass, all its pending GETs)
 *                    └────► shard's send queue ──► wire ring (sent, in order)
 *                           (FIFO of writes)       ──► replies, matched in order
 *   completion ──► the user's queue (rkv_poll/rkv_wait), or the wrappers' own
 *
 * progress() makes one pass over the shards with work: send what credits
 * allow (one doorbell per shard and pass), run one lookup round, take the
 * replies that are there. Nothing blocks but the reads themselves (a memcpy
 * over shm, one round trip over rdma) and, when only replies are awaited
 * from one server, the wait for them (run_until). Writes keep submission
 * order per shard: the send queue is FIFO, the wire carries them in that
 * order on one connection, the server executes and answers in order; a
 * value sent by rendezvous holds the queue until the one staging buffer is
 * free again (staged_out).
 *
 * Failure model: a transport error (or a reply late by timeout_ms) takes the
 * shard down, which completes every op it held with that error; the next
 * op reconnects, with exponential backoff, and a new HELLO; a changed region
 * generation changes the location cache's keys, so no location from the old
 * region is ever used (a GET takes its cached location when its first round
 * runs, after the reconnect).
 */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "hash.h"
#include "hint_buffer.h"
#include "location_cache.h"
#include "log.h"
#include "lookup.h"
#include "placement.h"
#include "protocol.h"
#include "rdma_util.h"
#include "read_cost.h"
#include "rkv.h"
#include "shard.h"
#include "transport.h"
#include "util.h"

#define MAX_SHARDS 64                  /* one bit each in rkv_client.busy */
#define MAX_HINTS  RKV_HINT_BUFFER_CAP /* hints carried by one RPC */
RKV_STATIC_ASSERT(sizeof(struct rkv_req) + MAX_HINTS * sizeof(rkv_hint) <= RKV_MIN_MSG,
                  "a HINTS request of MAX_HINTS fits the smallest message");
#define LOOKUP_OPS 1024 /* read ops one lookup round may post */
#define WRAP_SLOTS 128  /* ops the synchronous and batched calls keep in flight */
#define SEND_BATCH 256  /* requests one send() posts at most */
#define WIRE_SLOTS 4096 /* the most credits a server grants (rkv_hello_parse) */
#define NO_SLOT    UINT32_MAX
#define HOT        __attribute__((always_inline)) inline /* the GET path, one call deep */

/* Kinds beyond rkv_kind, for the control RPCs and hints the core also
 * sends, KIND_CLAIM (rkv_get_recache's claim of a stale item's recache),
 * and KIND_DROP: a SET refused for size, which goes out as a DELETE of its
 * key and completes as the PUT it was (RKV_TOO_LARGE). */
enum { KIND_PING = RKV_KIND_INCR + 1, KIND_STATS, KIND_HINTS, KIND_FLUSH, KIND_CLAIM, KIND_DROP };

/* One request on the wire, awaiting its reply: the slot it answers
 * (NO_SLOT for HELLO and HINTS, whose replies complete nothing). */
struct wire_entry {
    uint32_t slot;
    uint32_t req_id;
};

struct shard {
    char uri[256];
    unsigned index; /* in rkv_client.shards (its bit in busy) */
    const struct rkv_client_transport *ops;
    struct rkv_ctrans *t; /* NULL while down */
    const char *addr;     /* into uri, after "scheme://" */
    struct rkv_hello hello;
    struct rkv_region_header geom; /* validated copy */
    struct rkv_lookup_ctx lctx;
    struct rkv_read_op *read_ops; /* LOOKUP_OPS */
    uint64_t generation;          /* of the region last connected to */
    uint32_t next_req_id;         /* never 0 */
    uint64_t clock_base;          /* server clock at clock_local_ns */
    uint64_t clock_local_ns;
    uint64_t next_attempt_ns; /* reconnect backoff */
    unsigned backoff_ms;
    struct rkv_hint_buffer hints; /* for the next request (hint_buffer.h) */
    struct rkv_cost_watch watch; /* while the transport says "both buckets together" (read_cost.h) */
    /* the pipeline */
    struct wire_entry *wire; /* ring of WIRE_SLOTS: `outstanding` entries from wire_head */
    unsigned wire_head;
    unsigned outstanding;            /* requests sent, replies not yet taken */
    unsigned awaited;                /* of which answer an op (not HELLO or HINTS) */
    uint64_t reply_deadline_ns;      /* while outstanding: the next reply is late after this
                                        (0: not armed yet, reply_late()) */
    unsigned staged_out;             /* rendezvous requests sent, unanswered (0 or 1) */
    uint32_t queue_head, queue_tail; /* writes and control RPCs not yet sent (slot links) */
    uint32_t gets_head, gets_tail;   /* GETs being looked up (slot links) */
    /* shared handle: what lock-free GETs read the connection through (NULL
     * while down, and where the transport has no read_shared) */
    struct shard_view *view;
    uint64_t epoch; /* connections made so far (a view's, to tell them apart) */
};

/* A shard's connection as lock-free GETs of a shared handle see it: set
 * up after each connect, retired (view_retire) before the connection
 * closes. */
struct shard_view {
    struct rkv_ctrans *t;
    const struct shard *s; /* its clock, where the transport maps none (view_now) */
    const struct rkv_client_transport *ops;
    struct rkv_region_header geom; /* a copy: the shard's own changes on reconnect */
    uint64_t generation;
    uint64_t epoch;
    enum rkv_read_cost cost;
    bool hints; /* the server takes access hints */
};

#define TCTX_OPS 64 /* read ops of one lookup round of one GET */
RKV_STATIC_ASSERT(TCTX_OPS >= RKV_LOOKUP_MAX_CAND, "a lookup round of one GET fits");

/* One thread's lock-free GETs on one server of a shared handle. */
struct tshard {
    struct rkv_lookup_ctx lctx;
    const struct shard_view *v; /* the view this GET reads through */
    uint8_t *scratch;           /* where its reads land */
    unsigned reader;            /* the thread's context index (read_shared) */
    size_t scratch_len;
    struct rkv_read_op ops[TCTX_OPS];
    struct rkv_hint_buffer hints; /* merged into the shard's when full */
    uint64_t reads, read_round_trips;
};

/* One thread's context on a shared handle: created on its first GET,
 * freed by rkv_close. Its counters are written by that thread alone
 * (relaxed atomic stores) and summed by rkv_get_counters. */
struct tctx {
    struct tctx *next; /* the handle's list */
    pthread_t owner;
    int active;     /* 1 while a GET reads through a view (view_retire waits) */
    unsigned index; /* in creation order: the transport's reader (read_shared) */
    struct rkv_loc_cache_meter meter;
    uint64_t gets, get_hits, get_misses, cache_hits, cache_stale, verify_retries, forwards;
    struct tshard sh[]; /* one per shard */
};

/* A synchronous call's own completion on a shared handle (RKV_OPT_SHARED):
 * whichever thread moves its op along completes it here, under the lock. */
struct waiter {
    struct rkv_completion c;
    unsigned done; /* 1 once c holds the completion */
    bool has_msg;  /* msg: the failure's message, for the caller's thread */
    char msg[768];
};

/* One operation in flight. */
struct slot {
    uint8_t kind;  /* rkv_kind or KIND_* */
    bool internal; /* a wrapper's op: completes into wrapq */
    bool started;  /* GET: its lookup has begun */
    bool staged;   /* write: its value went by rendezvous */
    bool has_opts;
    uint32_t next; /* link: the free list, a shard's queue or GET list */
    struct shard *s;
    struct waiter *waiter; /* shared handle: the synchronous call waiting for it, or NULL */
    uint64_t token;
    uint64_t kh; /* the key's shard hash (location cache key) */
    const void *key;
    size_t key_len; /* not GET: a GET's key and buffer are in l */
    const void *value;
    size_t value_len;
    void *buf;
    size_t buf_len;              /* STATS: the payload's buffer */
    struct rkv_put_options opts; /* PUT, when has_opts */
    int64_t delta;               /* INCR */
    struct rkv_lookup l;         /* GET */
};

/* A wrapper's completion, with what its batch needs to know. */
struct wrap_completion {
    struct rkv_completion c;
    unsigned shard;
    bool shard_error; /* the shard went down under it */
};

struct rkv_client {
    struct rkv_options opts;
    char secret[RKV_MAX_SECRET + 1];
    unsigned nshards;
    struct shard *shards;
    struct rkv_placer placement;      /* which shard owns a key (placement.h) */
    struct rkv_loc_cache *cache;      /* the process's location cache; NULL when off */
    struct rkv_loc_cache_meter meter; /* this handle's finds and evictions: grows the cache */
    struct rkv_trans_counters tc;     /* bumped by the transports */
    struct rkv_counters c;            /* the rest, bumped here */
    /* the pipeline */
    struct slot *slots; /* window + WRAP_SLOTS */
    uint32_t free_head;
    unsigned window;
    unsigned outstanding;         /* user ops submitted, completion not yet taken */
    unsigned wrap_out;            /* wrapper ops submitted, completion not yet taken */
    uint64_t busy;                /* bit i: shard i holds ops */
    struct rkv_completion *userq; /* ring of userq_mask + 1 (>= window, a power of two:
                                     no division per op) completions for rkv_poll */
    unsigned userq_head, userq_count, userq_mask;
    struct wrap_completion *wrapq; /* ring of WRAP_SLOTS completions for the wrappers */
    unsigned wrapq_head, wrapq_count;
    struct rkv_lookup **round; /* window + WRAP_SLOTS: one lookup round's keys */
    char last_error[768];
    /* shared handle (RKV_OPT_SHARED): everything above is the lock's, but
     * what lock-free GETs read (placement, shard count, views' pointers) */
    bool shared;
    pthread_mutex_t lock;
    uint64_t serial;           /* tells a thread's cached context from a dead handle's */
    struct tctx *tctxs;        /* every thread's context */
    unsigned ntctx;            /* contexts made (the next one's index) */
    struct rkv_counters tbase; /* the contexts' sums at the last reset */
    unsigned waiter_ops;       /* synchronous calls' ops out (beside wrap_out) */
    unsigned waiters;          /* threads in run_shared's locked part, or on their way (atomic) */
    bool err_fresh;            /* a message was set since the last completion */
    bool err_written;          /* a message was set since the lock was taken */
};

static __thread char connect_error[768]; /* the last failed rkv_connect's message */
static __thread char thread_error[768];  /* this thread's last failure on a shared handle */
static uint64_t handle_serials;          /* the last handle's serial (atomic) */

const char *rkv_last_error(const rkv_client *c)
{
    return c == NULL ? connect_error : c->shared ? thread_error : c->last_error;
}

static rkv_status client_fail(rkv_client *c, rkv_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rkv_status client_fail(rkv_client *c, rkv_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
    c->err_fresh = c->err_written = true;
    return st;
}

/* A failure of a shared handle's lock-free GET: the message goes straight
 * to the calling thread's. */
static rkv_status thread_fail(rkv_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static rkv_status thread_fail(rkv_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(thread_error, sizeof thread_error, fmt, ap);
    va_end(ap);
    return st;
}

/* CLOCK_MONOTONIC_COARSE: a few ms coarse but several times cheaper than
 * rkv_now_ns() (no TSC read), and on the same time base, never ahead of it.
 * The clock of reply deadlines, read only by an empty poll (take_replies: a
 * reply or a send into an idle wire just disarms the deadline, and the first
 * empty poll after arms it), and of a GET pass's expiry clock (shard_now). */
static uint64_t coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ completions */

/* Complete slot idx with status st: its completion goes into its queue
 * (the caller adds the results through the pointer returned) and the slot
 * is free (its fields stay readable until the next submit). A DELETE forgets
 * the cached location whatever its outcome: there is nothing left to follow. */
static HOT struct rkv_completion *complete(rkv_client *c, uint32_t idx, rkv_status st,
                                           bool shard_error)
{
    struct slot *sl = &c->slots[idx];
    struct rkv_completion *r;
    if ((sl->kind == RKV_KIND_DELETE || sl->kind == KIND_DROP) && c->cache)
        rkv_loc_cache_store(c->cache, &c->meter, sl->s->generation, sl->kh, 0);
    if (RKV_UNLIKELY(sl->waiter != NULL)) {
        struct waiter *wt = sl->waiter;
        if (st != RKV_OK && c->err_fresh) {
            memcpy(wt->msg, c->last_error, sizeof wt->msg);
            wt->has_msg = true;
        }
        wt->done = 1;
        c->waiter_ops--;
        r = &wt->c;
    } else if (sl->internal) {
        struct wrap_completion *w = &c->wrapq[(c->wrapq_head + c->wrapq_count++) % WRAP_SLOTS];
        w->shard = sl->s->index;
        w->shard_error = shard_error;
        r = &w->c;
    } else {
        r = &c->userq[(c->userq_head + c->userq_count++) & c->userq_mask];
    }
    *r = (struct rkv_completion){ .token = sl->token,
                                  .status = st,
                                  .kind = sl->kind == KIND_DROP ? RKV_KIND_PUT : (rkv_kind)sl->kind };
    sl->next = c->free_head;
    c->free_head = idx;
    if (!shard_error)
        c->err_fresh = false; /* the message was this op's, if any */
    return r;
}

static void complete_error(rkv_client *c, uint32_t idx, rkv_status st)
{
    complete(c, idx, st, true);
}

/* Complete every op of the slot list from *head with st; the list is empty after. */
static void fail_list(rkv_client *c, uint32_t *head, uint32_t *tail, rkv_status st)
{
    while (*head != NO_SLOT) {
        uint32_t idx = *head;
        *head = c->slots[idx].next;
        complete_error(c, idx, st);
    }
    *tail = NO_SLOT;
}

/* ------------------------------------------------------------ connection */

/* Why the shard's transport failed, in its own words if it has them, else
 * the status's; call before shard_down(). */
static const char *shard_why(const struct shard *s, rkv_status st)
{
    const char *why = s->t && s->ops->why ? s->ops->why(s->t) : NULL;
    return why && why[0] ? why : rkv_strerror(st);
}

/* A shared handle's shard connected: publish its view for lock-free GETs
 * (where the transport reads for any thread; else they take the lock). No
 * memory for it: the same, until the next connect. */
static void view_publish(rkv_client *c, struct shard *s)
{
    s->epoch++;
    if (!c->shared || s->ops->read_shared == NULL ||
        (!rkv_ctrans_maps_clock(s->ops) && !(s->hello.features & RKV_FEATURE_LANES)))
        return;
    struct shard_view *v = malloc(sizeof *v);
    if (v == NULL)
        return;
    *v = (struct shard_view){ .t = s->t,
                              .s = s,
                              .ops = s->ops,
                              .geom = s->geom,
                              .generation = s->generation,
                              .epoch = s->epoch,
                              .cost = s->lctx.cost,
                              .hints = (s->hello.features & RKV_FEATURE_HINTS) != 0 };
    __atomic_store_n(&s->view, v, __ATOMIC_SEQ_CST);
}

/* Take the shard's view away from lock-free GETs before its connection
 * closes: unpublish it, then wait until no thread's GET is still reading
 * (a GET marks itself active before it loads the view, both seq_cst; so
 * either it sees no view, or this sees it active). A GET never waits for
 * the lock while active: this cannot deadlock. */
static void view_retire(rkv_client *c, struct shard *s)
{
    struct shard_view *v = s->view;
    if (v == NULL)
        return;
    __atomic_store_n(&s->view, NULL, __ATOMIC_SEQ_CST);
    for (const struct tctx *x = c->tctxs; x; x = x->next)
        while (__atomic_load_n(&x->active, __ATOMIC_SEQ_CST))
            sched_yield();
    free(v);
}

/* The shard is unusable (an error, or rkv_close): close it, and complete
 * every op it held — sent, queued or being looked up — with st. The caller
 * has set the message. */
static void shard_down(rkv_client *c, struct shard *s, rkv_status st)
{
    unsigned n = s->outstanding;
    view_retire(c, s);
    if (s->t)
        s->ops->close(s->t);
    s->t = NULL;
    s->outstanding = 0;
    s->awaited = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct wire_entry *e = &s->wire[(s->wire_head + i) % WIRE_SLOTS];
        if (e->slot != NO_SLOT)
            complete_error(c, e->slot, st);
    }
    s->wire_head = 0;
    s->staged_out = 0;
    rkv_hint_buffer_clear(&s->hints);
    fail_list(c, &s->queue_head, &s->queue_tail, st);
    fail_list(c, &s->gets_head, &s->gets_tail, st);
    c->err_fresh = false; /* the message was these ops' */
}

/* A lookup's doorbell timed for the cost watch (read_cost.h): once the
 * samples say the connection's READs serialize, its lookups read the first
 * bucket alone. Not inlined: lookup_read stays a check and a tail call. */
static __attribute__((noinline)) rkv_status watched_read(struct shard *s,
                                                         const struct rkv_read_op *ops, unsigned n)
{
    uint64_t start = rkv_now_ns();
    rkv_status st = s->ops->read(s->t, ops, n);
    if (st == RKV_OK && rkv_cost_watch_add(&s->watch, n, rkv_now_ns() - start)) {
        s->lctx.cost = RKV_COST_PER_READ;
        RKV_DEBUG("%s: 2 READs in one doorbell take %.2fx one (medians of %u sampled doorbells): "
                  "the second bucket only when needed from now on",
                  s->uri,
                  (double)s->watch.ns[1][RKV_COST_WATCH_SAMPLES / 2] /
                      (double)s->watch.ns[0][RKV_COST_WATCH_SAMPLES / 2],
                  RKV_COST_WATCH_SAMPLES);
    }
    return st;
}

static rkv_status lookup_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct shard *s = ctx;
    if (RKV_UNLIKELY(rkv_cost_watch_pick(&s->watch, ops, n)))
        return watched_read(s, ops, n);
    return s->ops->read(s->t, ops, n);
}

static void lookup_prefetch(void *ctx, uint64_t offset, uint32_t len)
{
    struct shard *s = ctx;
    s->ops->prefetch(s->t, offset, len);
}

/* The server clock for expiry (common/clock.h): the region header's word
 * where the transport maps the region (shm), else the last clock the server
 * sent, extrapolated to now_ns — never ahead of the server's own clock.
 * now_ns may be coarse_now_ns(): that clock runs behind rkv_now_ns() by at
 * most a tick, so it can only make the estimate lag (by milliseconds, of a
 * clock that counts seconds), never lead. */
static uint32_t shard_now(const struct shard *s, uint64_t now_ns)
{
    uint32_t now;
    if (rkv_ctrans_clock(s->ops, s->t, &now))
        return now;
    uint32_t seen = s->clock_base > UINT32_MAX ? UINT32_MAX : (uint32_t)s->clock_base;
    return rkv_clock_extrapolate(seen, s->clock_local_ns, now_ns);
}

static void shard_clock(struct shard *s, uint64_t server_clock)
{
    if (server_clock == 0 || rkv_ctrans_maps_clock(s->ops))
        return; /* shard_now() reads the mapping's clock instead */
    /* atomic: a shared handle's lock-free GETs read them (view_now) */
    __atomic_store_n(&s->clock_base, server_clock, __ATOMIC_RELAXED);
    __atomic_store_n(&s->clock_local_ns, rkv_now_ns(), __ATOMIC_RELAXED);
}

/* A client that only GETs hears no replies: where the clock is extrapolated,
 * re-read it from the region header (one 8-byte READ) every
 * RKV_CLOCK_REFRESH_NS, so the two hosts' clock rates cannot drift apart.
 * Lands in the local buffer before a lookup uses it; a failed READ is left
 * to the lookup to report. */
static void shard_clock_refresh(struct shard *s, uint64_t now_ns)
{
    size_t len;
    if (rkv_ctrans_maps_clock(s->ops) || now_ns < s->clock_local_ns + RKV_CLOCK_REFRESH_NS)
        return; /* the GET path: nothing more than this check */
    uint64_t *dst = s->ops->local_buf(s->t, &len);
    struct rkv_read_op op = { .offset = offsetof(struct rkv_region_header, clock),
                              .len = sizeof *dst,
                              .dst = dst };
    if (s->ops->read(s->t, &op, 1) == RKV_OK)
        shard_clock(s, *dst);
}

/* The next request id; never 0. */
static uint32_t shard_next_id(struct shard *s)
{
    if (++s->next_req_id == 0)
        s->next_req_id = 1;
    return s->next_req_id;
}

/* The one way requests leave this client: post messages 0..n-1 of the send
 * buffers (lengths lens[], ids ids[], answering slots[]) as one batch; they
 * join the wire ring first, so that the shard_down() the caller owes an
 * error completes them too. A server that reads RKV_REQ_MORE finds it on
 * all but the last: the rest of this doorbell follows. On error the message
 * says what was being sent. */
static rkv_status shard_send(rkv_client *c, struct shard *s, const uint32_t *lens,
                             const uint32_t *slots, const uint32_t *ids, unsigned n, const char *what)
{
    if (s->outstanding == 0)
        s->reply_deadline_ns = 0; /* disarmed: the next empty poll arms it */
    const bool mark = n > 1 && (s->hello.features & RKV_FEATURE_MORE);
    for (unsigned i = 0; i < n; i++) {
        if (mark)
            rkv_req_set_more(s->ops->send_buf(s->t, i), i + 1 < n);
        s->wire[(s->wire_head + s->outstanding + i) % WIRE_SLOTS] =
            (struct wire_entry){ .slot = slots[i], .req_id = ids[i] };
        s->awaited += slots[i] != NO_SLOT;
    }
    s->outstanding += n;
    rkv_status st = s->ops->send(s->t, lens, n);
    if (RKV_UNLIKELY(st != RKV_OK))
        client_fail(c, st, "%s: sending %s failed: %s", s->uri, what, shard_why(s, st));
    return st;
}

/* Take the reply msg (len bytes) to the oldest request on the wire: parse
 * it, check it answers that request, and drop the request from the wire
 * (*slot: the op it answers, or NO_SLOT). RKV_OK, or RKV_PROTOCOL with the
 * message set (the caller takes the shard down). */
static rkv_status reply_take(rkv_client *c, struct shard *s, const void *msg, size_t len,
                             const struct rkv_resp **h, const uint8_t **payload, uint32_t *slot)
{
    rkv_status st = rkv_resp_parse(msg, len, h, payload);
    if (RKV_UNLIKELY(st != RKV_OK))
        return client_fail(c, st, "%s: malformed reply (%zu bytes); dropping the connection",
                           s->uri, len);
    const struct wire_entry *e = &s->wire[s->wire_head];
    if (RKV_UNLIKELY((*h)->req_id != e->req_id))
        return client_fail(c, RKV_PROTOCOL,
                           "%s: a reply to request %llu came where %llu was next; "
                           "dropping the connection",
                           s->uri, (unsigned long long)(*h)->req_id, (unsigned long long)e->req_id);
    *slot = e->slot;
    s->wire_head = (s->wire_head + 1) % WIRE_SLOTS;
    s->outstanding--;
    s->awaited -= e->slot != NO_SLOT;
    shard_clock(s, (*h)->clock);
    s->reply_deadline_ns = 0; /* the next reply's clock starts at the next empty poll */
    return RKV_OK;
}

/* Wait for the reply to the only request outstanding (HELLO, while
 * connecting) and copy it out. On error the shard is down. */
static rkv_status shard_wait(rkv_client *c, struct shard *s, struct rkv_resp *resp, void *payload,
                             size_t payload_cap, size_t *payload_len)
{
    const void *msg;
    size_t len;
    const struct rkv_resp *h;
    const uint8_t *p;
    uint32_t slot = NO_SLOT;
    rkv_status st = s->ops->recv(s->t, &msg, &len, c->opts.timeout_ms);
    if (st != RKV_OK) {
        client_fail(c, st, "%s: no reply: %s", s->uri, shard_why(s, st));
    } else if ((st = reply_take(c, s, msg, len, &h, &p, &slot)) == RKV_OK) {
        *resp = *h;
        memcpy(payload, p, RKV_MIN((size_t)h->payload_len, payload_cap));
        *payload_len = h->payload_len;
        s->ops->recv_done(s->t);
    } else {
        s->ops->recv_done(s->t);
    }
    if (st != RKV_OK)
        shard_down(c, s, st);
    return st;
}

/* Take the hints that fit in a request with `room` spare bytes. */
static size_t take_hints(struct shard *s, size_t room, const rkv_hint **hints)
{
    return rkv_hint_buffer_take(&s->hints, room / sizeof(rkv_hint), hints);
}

static rkv_status shard_hello(rkv_client *c, struct shard *s)
{
    struct rkv_req req = { .opcode = RKV_OP_HELLO,
                           .key_len = (uint16_t)strlen(c->secret),
                           .req_id = shard_next_id(s),
                           .arg = RKV_PROTO_VERSION };
    uint32_t len = (uint32_t)rkv_req_build(s->ops->send_buf(s->t, 0), &req, c->secret, NULL, 0,
                                           NULL, 0);
    uint32_t none = NO_SLOT;
    rkv_status st = shard_send(c, s, &len, &none, &req.req_id, 1, "HELLO");
    if (st != RKV_OK)
        return st;

    struct rkv_resp resp;
    uint8_t payload[sizeof(struct rkv_hello)];
    size_t plen;
    st = shard_wait(c, s, &resp, payload, sizeof payload, &plen);
    if (st != RKV_OK)
        return st;
    if (resp.status == RKV_AUTH)
        return client_fail(c, RKV_AUTH,
                           "%s: the server refused our shared secret; set the secret it is "
                           "configured with (rkv_options.auth_secret, --auth)",
                           s->uri);
    if (resp.status != RKV_OK)
        return client_fail(c, (rkv_status)resp.status, "%s: HELLO refused: %s", s->uri,
                           rkv_strerror((rkv_status)resp.status));
    st = plen == sizeof payload ? rkv_hello_parse(payload, plen, &s->hello) : RKV_PROTOCOL;
    if (st == RKV_VERSION_MISMATCH)
        return client_fail(c, st,
                           "%s: server speaks protocol %u, this client %u; upgrade the older side",
                           s->uri, s->hello.proto_version, RKV_PROTO_VERSION);
    if (st != RKV_OK)
        return client_fail(c, st, "%s: malformed HELLO reply", s->uri);
    return RKV_OK;
}

/* Read and validate the region header; set up the lookup context. */
/* The cost model the lookup runs with: the caller's choice, else the
 * connection's (which the rdma transport times once). */
static enum rkv_read_cost lookup_cost(const rkv_client *c, const struct shard *s)
{
    switch (c->opts.bucket_reads) {
    case RKV_BUCKET_READS_TOGETHER: return RKV_COST_ROUND_TRIPS;
    case RKV_BUCKET_READS_FIRST: return RKV_COST_PER_READ;
    default: return s->ops->read_cost(s->t);
    }
}

static rkv_status shard_geometry(rkv_client *c, struct shard *s)
{
    size_t local_len;
    uint8_t *local = s->ops->local_buf(s->t, &local_len);
    struct rkv_read_op op = { .offset = 0, .len = RKV_HEADER_SIZE, .dst = local };
    rkv_status st = s->ops->read(s->t, &op, 1);
    if (st != RKV_OK)
        return client_fail(c, st, "%s: cannot read the region header: %s", s->uri, rkv_strerror(st));
    struct rkv_region_header g; /* s->geom keeps the last valid one (route() uses it) */
    memcpy(&g, local, sizeof g);
    char why[160];
    if (rkv_header_other_format(&g, why, sizeof why) != NULL)
        return client_fail(c, RKV_PROTOCOL, "%s: %s", s->uri, why);
    if (!rkv_header_valid(&g, s->hello.region_size) || g.generation != s->hello.generation)
        return client_fail(c, RKV_PROTOCOL,
                           "%s: the region header is invalid or from another server "
                           "generation; is the server version compatible?",
                           s->uri);
    if (local_len < rkv_lookup_scratch_need(&g, 1))
        return client_fail(c, RKV_INTERNAL,
                           "%s: local buffer (%zu bytes) smaller than the largest item", s->uri,
                           local_len);
    s->geom = g;
    s->lctx = (struct rkv_lookup_ctx){
        .geom = &s->geom,
        .read = lookup_read,
        .read_ctx = s,
        .prefetch = s->ops->prefetch ? lookup_prefetch : NULL,
        .scratch = local,
        .scratch_len = local_len,
        .ops = s->read_ops,
        .ops_cap = LOOKUP_OPS,
        .max_retries = c->opts.max_get_retries,
        .cost = lookup_cost(c, s),
    };
    s->watch.on = false;
    if (c->opts.bucket_reads == RKV_BUCKET_READS_AUTO && s->lctx.cost == RKV_COST_ROUND_TRIPS)
        rkv_cost_watch_start(&s->watch); /* the transport's verdict, checked as it goes */
    return RKV_OK;
}

static rkv_status shard_connect(rkv_client *c, struct shard *s)
{
    char err[512] = "";
    struct rkv_ctrans_params p;
    rkv_ctrans_params_init(&p);
    p.timeout_ms = c->opts.timeout_ms;
    p.device = c->opts.rdma_device;
    p.ack_timeout = c->opts.rdma_ack_timeout;
    p.retry_count = c->opts.rdma_retry_count;
    rkv_status st = s->ops->connect(s->addr, &p, &c->tc, &s->t, err, sizeof err);
    if (st != RKV_OK) {
        s->t = NULL;
        return client_fail(c, st, "%s: %s", s->uri, err[0] ? err : rkv_strerror(st));
    }
    st = shard_hello(c, s);
    if (st == RKV_OK) {
        err[0] = '\0';
        st = s->ops->set_region(s->t, &s->hello, err, sizeof err);
        if (st != RKV_OK)
            client_fail(c, st, "%s: %s", s->uri, err);
    }
    if (st == RKV_OK)
        st = shard_geometry(c, s);
    if (st != RKV_OK) {
        shard_down(c, s, st);
        return st;
    }
    s->generation = s->hello.generation; /* a new server: new cache keys (location_cache.h) */
    shard_clock(s, s->hello.clock);
    s->backoff_ms = 0;
    view_publish(c, s);
    return RKV_OK;
}

/* Make sure the shard is connected, reconnecting with backoff. */
static rkv_status shard_ready(rkv_client *c, struct shard *s)
{
    if (RKV_LIKELY(s->t != NULL))
        return RKV_OK;
    uint64_t now = rkv_now_ns();
    if (now < s->next_attempt_ns)
        return client_fail(c, RKV_CONNECTION,
                           "%s: server unreachable; next reconnect attempt in %llu ms", s->uri,
                           (unsigned long long)((s->next_attempt_ns - now) / 1000000));
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
            return client_fail(c, RKV_INVALID, "too many server URIs (at most %d)", MAX_SHARDS);
        struct shard *s = &c->shards[c->nshards];
        s->index = c->nshards;
        char scheme[8];
        if (len == 0 || len >= sizeof s->uri)
            return client_fail(c, RKV_INVALID, "empty or overlong server URI in \"%s\"", uris);
        memcpy(s->uri, p, len);
        s->uri[len] = '\0';
        rkv_status st = rkv_placement_add(&c->placement, s->uri, c->last_error, sizeof c->last_error);
        if (st != RKV_OK)
            return st;
        if (!rkv_uri_split(s->uri, scheme, sizeof scheme, &s->addr) || s->addr[0] == '\0' ||
            (s->ops = rkv_client_transport_by_scheme(scheme)) == NULL)
            return client_fail(c, RKV_INVALID,
                               "bad server URI \"%s\": use rdma://HOST:PORT or shm://PATH", s->uri);
        s->read_ops = calloc(LOOKUP_OPS, sizeof *s->read_ops);
        s->wire = calloc(WIRE_SLOTS, sizeof *s->wire);
        s->queue_head = s->queue_tail = s->gets_head = s->gets_tail = NO_SLOT;
        if (s->read_ops == NULL || s->wire == NULL)
            return client_fail(c, RKV_NO_MEMORY, "out of memory");
        c->nshards++;
        p += len + (end != NULL);
    }
    if (c->nshards == 0)
        return client_fail(c, RKV_INVALID, "no server URI given");
    return rkv_placement_build(&c->placement, c->last_error, sizeof c->last_error);
}

/* Each zero option becomes its default: a transport setting the
 * transports' own (rkv_ctrans_params_init), any other rkv.h's. */
static void apply_defaults(struct rkv_options *o)
{
    struct rkv_ctrans_params d;
    rkv_ctrans_params_init(&d);
    if (o->timeout_ms == 0)
        o->timeout_ms = d.timeout_ms;
    if (o->location_cache == 0)
        o->location_cache = RKV_DEFAULT_LOCATION_CACHE;
    if (o->max_get_retries == 0)
        o->max_get_retries = RKV_DEFAULT_GET_RETRIES;
    if (o->reconnect_ms == 0)
        o->reconnect_ms = RKV_DEFAULT_RECONNECT_MS;
    if (o->rdma_ack_timeout == 0)
        o->rdma_ack_timeout = d.ack_timeout;
    if (o->rdma_retry_count == 0)
        o->rdma_retry_count = d.retry_count;
}

static rkv_status set_window_core(rkv_client *c, unsigned window);

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
    pthread_mutex_init(&c->lock, NULL);
    c->shared = (c->opts.flags & RKV_OPT_SHARED) != 0;
    c->serial = __atomic_add_fetch(&handle_serials, 1, __ATOMIC_RELAXED);
    if (c->opts.flags & ~RKV_OPT_SHARED) {
        st = client_fail(c, RKV_INVALID,
                         "rkv_options.flags has unknown bits 0x%x; use RKV_OPT_SHARED",
                         c->opts.flags & ~RKV_OPT_SHARED);
        goto fail;
    }
    if ((unsigned)c->opts.bucket_reads > RKV_BUCKET_READS_FIRST) {
        st = client_fail(c, RKV_INVALID,
                         "rkv_options.bucket_reads is %u; use RKV_BUCKET_READS_AUTO, "
                         "_TOGETHER or _FIRST",
                         (unsigned)c->opts.bucket_reads);
        goto fail;
    }
    char rc_err[256];
    if (!rkv_rdma_rc_check(c->opts.rdma_ack_timeout, c->opts.rdma_retry_count, "rdma_ack_timeout",
                           "rdma_retry_count", rc_err, sizeof rc_err)) {
        st = client_fail(c, RKV_INVALID, "rkv_options: %s", rc_err);
        goto fail;
    }
    if (c->opts.auth_secret) {
        if (strlen(c->opts.auth_secret) > RKV_MAX_SECRET) {
            st = client_fail(c, RKV_INVALID, "auth secret longer than %u bytes", RKV_MAX_SECRET);
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
    c->wrapq = calloc(WRAP_SLOTS, sizeof *c->wrapq);
    if (c->wrapq == NULL)
        goto fail;
    st = rkv_placement_init(&c->placement, c->opts.placement, c->last_error, sizeof c->last_error);
    if (st == RKV_OK)
        st = parse_uris(c, uris ? uris : "");
    if (st == RKV_OK)
        st = set_window_core(c, RKV_DEFAULT_WINDOW);
    for (unsigned i = 0; st == RKV_OK && i < c->nshards; i++)
        st = shard_connect(c, &c->shards[i]);
    if (st != RKV_OK)
        goto fail;
    *out = c;
    return RKV_OK;
fail:
    if (c->last_error[0] == '\0')
        client_fail(c, st, "%s", rkv_strerror(st));
    memcpy(connect_error, c->last_error, sizeof connect_error);
    rkv_close(c);
    return st;
}

static void tctx_free_all(rkv_client *c);

void rkv_close(rkv_client *c)
{
    if (c == NULL)
        return;
    for (unsigned i = 0; c->shards && i < c->nshards; i++) {
        shard_down(c, &c->shards[i], RKV_CONNECTION);
        free(c->shards[i].read_ops);
        free(c->shards[i].wire);
    }
    free(c->shards);
    free(c->slots);
    free(c->userq);
    free(c->wrapq);
    free(c->round);
    tctx_free_all(c);
    pthread_mutex_destroy(&c->lock);
    rkv_placement_free(&c->placement);
    rkv_loc_cache_release(c->cache);
    free(c);
}

/* ------------------------------------------------------------ arguments */

/* The shard that owns a key; with one server, no call to ask. */
static struct shard *shard_for(rkv_client *c, const void *key, size_t key_len, uint64_t key_hash)
{
    if (c->nshards == 1)
        return &c->shards[0];
    return &c->shards[rkv_placement_pick(&c->placement, key, key_len, key_hash)];
}

/* Check an op's arguments and find the shard that owns its key (the key's
 * hash in *kh). Every call, single, batched or pipelined, is checked here
 * (through submit()), so none accepts what another refuses. `call` names it
 * in messages. RKV_OK, or RKV_INVALID / RKV_TOO_LARGE with the message set.
 * The limits are the owning server's, from its region header. */
static HOT rkv_status route(rkv_client *c, const struct rkv_op *op, const char *call,
                            struct shard **s, uint64_t *kh)
{
    bool get = op->kind == RKV_KIND_GET, put = op->kind == RKV_KIND_PUT;
    const void *data = get ? op->buf : op->value;
    size_t data_len = get ? op->buf_len : op->value_len;
    const char *what = put ? "value" : "buffer";
    *s = NULL; /* defined on every path, also for refused calls */
    *kh = 0;
    if (op->key == NULL || op->key_len == 0)
        return client_fail(c, RKV_INVALID, "%s: the key is %s; keys are 1..%u bytes", call,
                           op->key == NULL ? "NULL" : "empty (key_len 0)", RKV_MAX_KEY_LEN);
    if ((get || put) && data == NULL && data_len != 0)
        return client_fail(c, RKV_INVALID,
                           "%s: the %s is NULL but its length is %zu; pass a %s or "
                           "length 0",
                           call, what, data_len, what);
    if (put && op->opts && (unsigned)op->opts->mode > RKV_CAS)
        return client_fail(c, RKV_INVALID,
                           "%s: unknown put mode %u; use RKV_SET, RKV_ADD, RKV_REPLACE "
                           "or RKV_CAS",
                           call, (unsigned)op->opts->mode);
    *kh = rkv_shard_hash(op->key, op->key_len);
    *s = shard_for(c, op->key, op->key_len, *kh);
    /* a GET's location-cache set on its way as soon as it is known: while
     * the caller submits more, or, for a synchronous call, while the checks,
     * the slot and the pass's start run up to get_start's find */
    if (get && c->cache)
        rkv_loc_cache_prefetch(c->cache, (*s)->generation, *kh);
    if (op->key_len > (*s)->geom.max_key_len)
        return client_fail(c, RKV_TOO_LARGE,
                           "%s: key of %zu bytes is longer than the server's limit "
                           "of %u",
                           call, op->key_len, (*s)->geom.max_key_len);
    if (put && data_len > (*s)->geom.max_value_len)
        return client_fail(c, RKV_TOO_LARGE,
                           "%s: value of %zu bytes is longer than the server's limit "
                           "of %u (rkv_max_value_size)",
                           call, data_len, (*s)->geom.max_value_len);
    return RKV_OK;
}

/* ------------------------------------------------------------ GET rounds */

/* Buffer one access hint for the next request; a full buffer goes out on
 * its own before the next hit is noted (hints_flush: one doorbell per
 * MAX_HINTS distinct GET hits). A hit on an item the buffer names already
 * adds nothing LRU could tell apart (both stamps within one flush; a filter
 * bit says so, hint_buffer.h). A down shard
 * takes none, nor a full buffer whose flush failed (the shard goes down
 * after the round). */
static void note_hint(struct shard *s, uint64_t slot)
{
    if (s->t != NULL && (s->hello.features & RKV_FEATURE_HINTS))
        (void)rkv_hint_buffer_add(&s->hints, slot);
}

/* Fold one finished lookup into counters, cache and hints. */
static HOT void lookup_done(rkv_client *c, struct shard *s, struct rkv_lookup *l, uint64_t key_hash)
{
    bool found = l->status == RKV_OK || l->status == RKV_BUFFER_TOO_SMALL;
    c->c.gets++;
    c->c.cache_stale += l->cached_slot != 0 && !l->cache_used;
    if (found) {
        c->c.get_hits++;
        c->c.cache_hits += (uint64_t)l->cache_used;
        note_hint(s, l->slot);
    } else {
        c->c.get_misses += l->status == RKV_NOT_FOUND;
    }
    /* only changes are written: a hit leaves the shared cache line clean */
    uint64_t slot = found ? l->slot : 0;
    if (c->cache && rkv_loc_cache_changed(l->cached_slot, slot))
        rkv_loc_cache_store(c->cache, &c->meter, s->generation, key_hash, slot);
}

/* A GET's first round: its cached location (of the region connected now)
 * and the lookup's start (submit() has set its key and buffer). */
static HOT void get_start(rkv_client *c, struct shard *s, struct slot *sl)
{
    struct rkv_lookup *l = &sl->l;
    l->cached_slot = c->cache ? rkv_loc_cache_find(c->cache, &c->meter, s->generation, sl->kh) : 0;
    rkv_lookup_start(&s->lctx, l);
    sl->started = true;
}

/* The herd marks (RKV_MARK_*) a one-sided read sees in an item's state
 * word (layout.h): a hint, which rkv_get_recache's claim settles. */
static uint64_t read_marks(uint64_t state)
{
    return ((state & RKV_ITEM_STALE) ? RKV_MARK_STALE : 0) |
           ((state & RKV_ITEM_WON) ? RKV_MARK_TAKEN : 0);
}

/* A finished GET's completion. */
static HOT void get_complete(rkv_client *c, struct shard *s, uint32_t idx)
{
    struct slot *sl = &c->slots[idx];
    const struct rkv_lookup *l = &sl->l;
    lookup_done(c, s, &sl->l, sl->kh);
    if (RKV_UNLIKELY(l->status == RKV_RETRY_EXHAUSTED))
        client_fail(c, l->status, "get: the item changed under %u consecutive reads; retry",
                    c->opts.max_get_retries);
    struct rkv_completion *r = complete(c, idx, l->status, false);
    r->value_len = l->value_len;
    if (l->status == RKV_OK || l->status == RKV_BUFFER_TOO_SMALL) {
        uint32_t now = s->lctx.now; /* the server clock of this round */
        r->info.version = l->version;
        r->info.user_flags = l->user_flags;
        r->info.ttl_left = l->expire_at == 0 ? 0 : (l->expire_at > now ? l->expire_at - now : 1);
        r->value = read_marks(l->state);
    }
}

static rkv_status send_queued(rkv_client *c, struct shard *s);
static rkv_status take_replies(rkv_client *c, struct shard *s, unsigned timeout_ms);

/* Milliseconds from now until deadline_ns (rounded up; 0 once passed). */
static unsigned ms_until(uint64_t deadline_ns)
{
    uint64_t now = rkv_now_ns();
    return deadline_ns > now ? (unsigned)RKV_MIN((deadline_ns - now + 999999) / 1000000, 3600000ull)
                             : 0;
}

/* Send the full hint buffer (with the queued writes), waiting for a credit
 * where unanswered requests hold them all: hints are never dropped for a
 * server that is merely behind; one that stops answering times out here.
 * Returns RKV_OK or the error the caller takes the shard down with. */
static rkv_status hints_flush(rkv_client *c, struct shard *s)
{
    rkv_status st = RKV_OK;
    while (st == RKV_OK && s->outstanding >= s->hello.credits)
        st = take_replies(c, s, ms_until(s->reply_deadline_ns));
    return st == RKV_OK ? send_queued(c, s) : st;
}

/* One lookup round over the shard's pending GETs (new ones start in it):
 * one round trip for all of them, then the finished ones complete. Where
 * round trips are free (the cost model RKV_COST_PER_READ: shm, whose read
 * is a memcpy) the unfinished go on in further rounds of the same pass, as
 * many as they need: a later pass could batch no more of them for less, and
 * each pass costs its bookkeeping. Returns RKV_OK or the read's error (the
 * caller takes the shard down). */
/* The rounds of one pass over the lookups of round[0..n-1] (none done):
 * one, or while round trips are free, until all are done (each round
 * advances every lookup it reads for; a lookup ends within max_retries). */
static HOT rkv_status rounds(struct shard *s, struct rkv_lookup **round, unsigned n)
{
    bool free_trips = s->lctx.cost == RKV_COST_PER_READ;
    for (;;) {
        rkv_status st = rkv_lookup_round(&s->lctx, round, n);
        if (RKV_UNLIKELY(st != RKV_OK) || !free_trips)
            return st;
        unsigned left = 0;
        for (unsigned i = 0; i < n; i++)
            if (!rkv_lookup_done(round[i]))
                round[left++] = round[i];
        if (left == 0)
            return RKV_OK;
        n = left;
    }
}

static HOT rkv_status lookup_round(rkv_client *c, struct shard *s)
{
    unsigned n = 0;
    uint32_t idx;

    for (idx = s->gets_head; idx != NO_SLOT; idx = c->slots[idx].next) {
        struct slot *sl = &c->slots[idx];
        if (!sl->started)
            get_start(c, s, sl);
        if (!rkv_lookup_done(&sl->l))
            c->round[n++] = &sl->l;
    }
    if (n > 0) {
        /* one coarse clock read a pass (expiry counts seconds), none where
         * the region is mapped */
        uint64_t now_ns = rkv_ctrans_maps_clock(s->ops) ? 0 : coarse_now_ns();
        shard_clock_refresh(s, now_ns);
        s->lctx.now = shard_now(s, now_ns);
        s->lctx.retries = s->lctx.forwards = 0; /* the lookup adds this pass's */
        rkv_status st = rounds(s, c->round, n);
        c->c.verify_retries += s->lctx.retries;
        c->c.forwards += s->lctx.forwards;
        if (RKV_UNLIKELY(st != RKV_OK))
            return client_fail(c, st, "%s: read failed: %s", s->uri, shard_why(s, st));
    }
    /* unlink and complete the finished, keeping the others in order; the
     * list is left whole even if a hint flush fails (the caller then takes
     * the shard down) */
    rkv_status flush_st = RKV_OK;
    uint32_t *link = &s->gets_head, last = NO_SLOT;
    while ((idx = *link) != NO_SLOT) {
        struct slot *sl = &c->slots[idx];
        if (rkv_lookup_done(&sl->l)) {
            *link = sl->next;
            if (rkv_hint_buffer_full(&s->hints) && flush_st == RKV_OK)
                flush_st = hints_flush(c, s);
            get_complete(c, s, idx);
        } else {
            last = idx;
            link = &sl->next;
        }
    }
    s->gets_tail = last;
    return flush_st;
}

/* ------------------------------------------------------------ writes */

static bool needs_staging(const struct shard *s, const struct slot *sl)
{
    return rkv_req_size(sl->key_len, sl->value_len, 0, s->hello.max_msg) == 0;
}

/* A value that travels by rendezvous must fit this connection's staging
 * buffer (route() has checked everything else). */
static rkv_status check_staging(rkv_client *c, const struct shard *s, const struct slot *sl)
{
    size_t stage_cap = 0;
    struct rkv_remote_buf rb;
    if (!needs_staging(s, sl))
        return RKV_OK;
    s->ops->staging(s->t, &stage_cap, &rb);
    if (sl->value_len > stage_cap)
        return client_fail(c, RKV_TOO_LARGE,
                           "value of %zu bytes is larger than the client's "
                           "staging buffer (%zu bytes)",
                           sl->value_len, stage_cap);
    return RKV_OK;
}

/* Build slot sl's request into send buffer `i`; a value too large for a
 * message goes through the staging buffer (rendezvous). Spare room carries
 * hints. */
static uint32_t build_req(struct shard *s, unsigned i, const struct slot *sl, uint32_t req_id)
{
    static const uint8_t opcode[] = {
        [RKV_KIND_PUT] = RKV_OP_PUT,   [RKV_KIND_DELETE] = RKV_OP_DELETE,
        [RKV_KIND_INCR] = RKV_OP_INCR, [KIND_PING] = RKV_OP_PING,
        [KIND_STATS] = RKV_OP_STATS,   [KIND_HINTS] = RKV_OP_HINTS,
        [KIND_FLUSH] = RKV_OP_FLUSH,   [KIND_CLAIM] = RKV_OP_CLAIM,
        [KIND_DROP] = RKV_OP_DELETE
    };
    struct rkv_req h = { .opcode = opcode[sl->kind],
                         .key_len = (uint16_t)sl->key_len,
                         .value_len = (uint32_t)sl->value_len,
                         .req_id = req_id,
                         .arg = (uint64_t)sl->delta };
    if (sl->has_opts) {
        h.flags = (uint8_t)sl->opts.mode; /* route() refused unknown modes */
        h.ttl = sl->opts.ttl;
        h.arg = sl->opts.cas;
        h.user_flags = sl->opts.user_flags;
    }
    const void *value = sl->value;
    size_t inline_len = sl->value_len;
    struct rkv_remote_buf rb;
    if (sl->staged) {
        size_t cap;
        void *stage = s->ops->staging(s->t, &cap, &rb);
        memcpy(stage, sl->value, sl->value_len);
        rb.len = (uint32_t)sl->value_len;
        h.flags |= RKV_REQ_REMOTE_VALUE;
        value = &rb;
        inline_len = sizeof rb;
    }
    const rkv_hint *hints;
    h.hint_count = (uint16_t)take_hints(s, s->hello.max_msg - sizeof h - sl->key_len - inline_len,
                                        &hints);
    return (uint32_t)rkv_req_build(s->ops->send_buf(s->t, i), &h, sl->key, value, inline_len, hints,
                                   h.hint_count);
}

/* Send the head of the shard's queue, in order, as far as credits allow, as
 * one batch (one doorbell); a full hint buffer that rode on no write goes
 * along on its own. A value by rendezvous waits while another is out (one
 * staging buffer), and holds the writes behind it. Returns RKV_OK or the
 * send's error (the shard is then down). */
static rkv_status send_queued(rkv_client *c, struct shard *s)
{
    uint32_t lens[SEND_BATCH], slots[SEND_BATCH], ids[SEND_BATCH];
    unsigned room = RKV_MIN(s->hello.credits - s->outstanding, (unsigned)SEND_BATCH), k = 0;

    while (k < room && s->queue_head != NO_SLOT) {
        uint32_t idx = s->queue_head;
        struct slot *sl = &c->slots[idx];
        rkv_status st = sl->kind == RKV_KIND_PUT ? check_staging(c, s, sl) : RKV_OK;
        sl->staged = st == RKV_OK && sl->kind == RKV_KIND_PUT && needs_staging(s, sl);
        if (sl->staged && s->staged_out > 0)
            break;
        s->queue_head = sl->next;
        if (s->queue_head == NO_SLOT)
            s->queue_tail = NO_SLOT;
        if (st != RKV_OK) {
            complete(c, idx, st, false);
            continue;
        }
        s->staged_out += sl->staged;
        ids[k] = shard_next_id(s);
        slots[k] = idx;
        lens[k] = build_req(s, k, sl, ids[k]);
        k++;
    }
    if (k < room && rkv_hint_buffer_full(&s->hints)) {
        const struct slot hints = { .kind = KIND_HINTS };
        ids[k] = shard_next_id(s);
        slots[k] = NO_SLOT;
        lens[k] = build_req(s, k, &hints, ids[k]);
        k++;
    }
    return k ? shard_send(c, s, lens, slots, ids, k, "requests") : RKV_OK;
}

/* The reply *h (payload p) to write slot idx: its completion. */
static void write_complete(rkv_client *c, struct shard *s, uint32_t idx, const struct rkv_resp *h,
                           const uint8_t *p)
{
    struct slot *sl = &c->slots[idx];
    rkv_status st = (rkv_status)h->status;
    s->staged_out -= sl->staged;
    if (sl->kind == KIND_STATS) {
        size_t n = RKV_MIN((size_t)h->payload_len, sl->buf_len);
        if (n)
            memcpy(sl->buf, p, n);
    } else if (sl->kind == KIND_DROP && (st == RKV_OK || st == RKV_NOT_FOUND)) {
        st = RKV_TOO_LARGE;
        client_fail(c, st,
                    "put: the value is longer than the server's limit of %u bytes "
                    "(rkv_max_value_size); the key's old value was removed, as memcached's set "
                    "removes it",
                    s->geom.max_value_len);
    } else if (st != RKV_OK && sl->kind != KIND_PING &&
               !(sl->kind == KIND_CLAIM && (st == RKV_CAS_MISMATCH || st == RKV_NOT_FOUND))) {
        client_fail(c, st, "%s: server answered: %s", s->uri, rkv_strerror(st));
    }
    struct rkv_completion *r = complete(c, idx, st, false);
    r->value = h->value;
    r->value_len = sl->kind == KIND_STATS ? h->payload_len : 0;
}

/* After an empty poll: is the oldest reply on the wire late? The first
 * empty poll since the last reply (or since a send into an idle wire) arms
 * the deadline, timeout_ms on (to the coarse clock's tick). */
static bool reply_late(const rkv_client *c, struct shard *s)
{
    uint64_t now = coarse_now_ns();
    if (s->reply_deadline_ns == 0)
        s->reply_deadline_ns = now + (uint64_t)c->opts.timeout_ms * 1000000ull;
    return now >= s->reply_deadline_ns;
}

/* Take the replies that are there (waiting up to timeout_ms for the first)
 * and complete their ops. RKV_OK, or the error that takes the shard down: the
 * transport's, a bad reply, or RKV_TIMEOUT once a reply is timeout_ms late. */
static rkv_status take_replies(rkv_client *c, struct shard *s, unsigned timeout_ms)
{
    while (s->outstanding > 0) {
        const void *msg;
        size_t len;
        const struct rkv_resp *h;
        const uint8_t *p;
        uint32_t idx = NO_SLOT;
        rkv_status st = s->ops->recv(s->t, &msg, &len, timeout_ms);
        if (st == RKV_TIMEOUT && !reply_late(c, s))
            return RKV_OK; /* not yet */
        if (st == RKV_TIMEOUT)
            return client_fail(c, st,
                               "%s: no reply within %u ms (rkv_options.timeout_ms); "
                               "dropping the connection",
                               s->uri, c->opts.timeout_ms);
        if (st != RKV_OK)
            return client_fail(c, st, "%s: no reply: %s", s->uri, shard_why(s, st));
        st = reply_take(c, s, msg, len, &h, &p, &idx);
        if (st == RKV_OK && idx != NO_SLOT)
            write_complete(c, s, idx, h, p);
        s->ops->recv_done(s->t);
        if (st != RKV_OK)
            return st;
        timeout_ms = 0;
    }
    return RKV_OK;
}

/* ------------------------------------------------------------ progress */

/* One pass over shard s: connect if needed, send what credits allow, one
 * lookup round, a full hint buffer out, the replies that are there. Replies
 * that complete nothing (HINTS) are taken only with others, or when they
 * hold every credit: a GET-only client pays one poll per credits' worth of
 * hint messages, and its deadline is checked then. An error takes the shard
 * down (its ops complete with it). The shard stays busy while it holds ops. */
static HOT void shard_progress(rkv_client *c, struct shard *s)
{
    rkv_status st = shard_ready(c, s);
    if (st == RKV_OK && s->queue_head != NO_SLOT)
        st = send_queued(c, s);
    if (st == RKV_OK && s->gets_head != NO_SLOT)
        st = lookup_round(c, s);
    if (st == RKV_OK && rkv_hint_buffer_full(&s->hints))
        st = hints_flush(c, s);
    if (st == RKV_OK && (s->awaited > 0 || (s->t && s->outstanding == s->hello.credits)))
        st = take_replies(c, s, 0);
    if (st != RKV_OK)
        shard_down(c, s, st);
    if (s->awaited == 0 && s->queue_head == NO_SLOT && s->gets_head == NO_SLOT)
        c->busy &= ~(1ull << s->index);
}

static void progress(rkv_client *c)
{
    for (uint64_t b = c->busy; b; b &= b - 1)
        shard_progress(c, &c->shards[__builtin_ctzll(b)]);
}

/* Between passes: where only replies are awaited, and from one server,
 * block for them (up to deadline_ns, and no longer than the reply may take);
 * otherwise return for the next pass. */
static void await_replies(rkv_client *c, uint64_t deadline_ns)
{
    struct shard *s = NULL;
    for (uint64_t b = c->busy; b; b &= b - 1) {
        struct shard *x = &c->shards[__builtin_ctzll(b)];
        if (s || x->gets_head != NO_SLOT || x->awaited == 0 || x->t == NULL)
            return;
        s = x;
    }
    if (s == NULL)
        return;
    rkv_status st = take_replies(c, s, ms_until(RKV_MIN(deadline_ns, s->reply_deadline_ns)));
    if (st != RKV_OK)
        shard_down(c, s, st);
}

/* Move ops along until *count is non-zero, nothing is in flight, or
 * deadline_ns passes. Every op completes within about timeout_ms, so with
 * no deadline this ends. */
static void run_until(rkv_client *c, const unsigned *count, uint64_t deadline_ns)
{
    while (*count == 0) {
        progress(c);
        if (*count || c->busy == 0 || (deadline_ns != UINT64_MAX && rkv_now_ns() >= deadline_ns))
            return;
        await_replies(c, deadline_ns);
        if (*count)
            return;
    }
}

/* ------------------------------------------------------------ submit */

static const char *const kind_call[] = {
    [RKV_KIND_GET] = "get", [RKV_KIND_PUT] = "put", [RKV_KIND_DELETE] = "delete", [RKV_KIND_INCR] = "incr"
};

/* Take a free slot for an op on shard s and link it into the shard's work. */
static HOT uint32_t slot_enqueue(rkv_client *c, struct shard *s, uint8_t kind, bool internal,
                                 uint64_t token, struct waiter *w)
{
    uint32_t idx = c->free_head;
    struct slot *sl = &c->slots[idx];
    c->free_head = sl->next;
    sl->kind = kind;
    sl->internal = internal;
    sl->started = false;
    sl->staged = false;
    sl->has_opts = false;
    sl->next = NO_SLOT;
    sl->s = s;
    sl->waiter = w;
    sl->token = token;
    uint32_t *head = kind == RKV_KIND_GET ? &s->gets_head : &s->queue_head;
    uint32_t *tail = kind == RKV_KIND_GET ? &s->gets_tail : &s->queue_tail;
    if (*tail == NO_SLOT)
        *head = idx;
    else
        c->slots[*tail].next = idx;
    *tail = idx;
    c->busy |= 1ull << s->index;
    if (w)
        c->waiter_ops++;
    else if (internal)
        c->wrap_out++;
    else
        c->outstanding++;
    return idx;
}

/* A SET whose value is over the owning server's limit (route() refused it
 * for that alone): memcached's set then drops the key's old item, so that
 * no reader goes on getting the value the writer meant to replace
 * (design.md invariant 7); such a put goes out as a DELETE of its key
 * (KIND_DROP). */
static bool set_too_large(const struct rkv_op *op, const struct shard *s)
{
    return s != NULL && op->kind == RKV_KIND_PUT && (op->opts == NULL || op->opts->mode == RKV_SET) &&
           op->key_len <= s->geom.max_key_len && op->value_len > s->geom.max_value_len;
}

/* The one way an op enters the core: checked as its synchronous call checks
 * it (route()), then queued. `internal`: a wrapper's op, within WRAP_SLOTS,
 * outside the caller's window. `call` names it in messages: a batched
 * call's name, or NULL for rkv_submit and the synchronous calls (internal
 * and NULL: one op whose pass follows at once). */
static HOT rkv_status submit(rkv_client *c, const struct rkv_op *op, bool internal,
                             const char *call, struct waiter *w)
{
    if ((unsigned)op->kind > RKV_KIND_INCR)
        return client_fail(c, RKV_INVALID,
                           "submit: unknown op kind %u; use RKV_KIND_GET, _PUT, _DELETE "
                           "or _INCR",
                           (unsigned)op->kind);
    struct shard *s;
    uint64_t kh;
    uint8_t kind = (uint8_t)op->kind;
    rkv_status st = route(c, op, call ? call : kind_call[op->kind], &s, &kh);
    if (RKV_UNLIKELY(st != RKV_OK)) {
        if (!set_too_large(op, s))
            return st;
        kind = KIND_DROP;
    }
    if (RKV_UNLIKELY(!internal && c->outstanding >= c->window))
        return client_fail(c, RKV_WINDOW_FULL,
                           "submit: the window of %u ops is full; take completions "
                           "with rkv_poll/rkv_wait first (or widen it with rkv_set_window)",
                           c->window);
    struct slot *sl = &c->slots[slot_enqueue(c, s, kind, internal, op->token, w)];
    sl->kh = kh;
    if (op->kind == RKV_KIND_GET) { /* straight into its lookup (get_start) */
        sl->l.key = op->key;
        sl->l.key_len = op->key_len > UINT32_MAX ? UINT32_MAX : (uint32_t)op->key_len;
        sl->l.buf = op->buf;
        sl->l.buf_len = op->buf_len;
        return RKV_OK;
    }
    sl->key = op->key;
    sl->key_len = op->key_len;
    sl->value = NULL;
    sl->value_len = 0;
    sl->delta = 0;
    switch (op->kind) {
    case RKV_KIND_GET: break;
    case RKV_KIND_PUT:
        c->c.puts++;
        if (kind == KIND_DROP)
            break; /* its key's DELETE: no value, no options */
        sl->value = op->value;
        sl->value_len = op->value_len;
        if (op->opts) {
            sl->opts = *op->opts;
            sl->has_opts = true;
        }
        break;
    case RKV_KIND_DELETE: c->c.deletes++; break;
    case RKV_KIND_INCR:
        sl->delta = op->delta;
        c->c.other_rpcs++;
        break;
    }
    return RKV_OK;
}

static rkv_status submit_core(rkv_client *c, const struct rkv_op *op)
{
    if (op == NULL)
        return client_fail(c, RKV_INVALID, "submit: the op is NULL; pass a struct rkv_op");
    return submit(c, op, false, NULL, NULL);
}

/* Take up to max of the user's completions. */
static unsigned take_user(rkv_client *c, struct rkv_completion *out, unsigned max)
{
    unsigned n = RKV_MIN(max, c->userq_count);
    for (unsigned i = 0; i < n; i++)
        out[i] = c->userq[(c->userq_head + i) & c->userq_mask];
    c->userq_head = (c->userq_head + n) & c->userq_mask;
    c->userq_count -= n;
    c->outstanding -= n;
    return n;
}

static rkv_status check_poll_args(rkv_client *c, const char *call, const struct rkv_completion *out,
                                  unsigned max, const unsigned *n)
{
    if (out == NULL || max == 0 || n == NULL)
        return client_fail(c, RKV_INVALID,
                           "%s: %s; pass an array of max > 0 completions and a count", call,
                           n == NULL     ? "the count pointer is NULL"
                           : out == NULL ? "the completion array is NULL"
                                         : "max is 0");
    return RKV_OK;
}

static rkv_status poll_core(rkv_client *c, struct rkv_completion *out, unsigned max, unsigned *n)
{
    if (c == NULL)
        return RKV_INVALID;
    rkv_status st = check_poll_args(c, "poll", out, max, n);
    if (st != RKV_OK)
        return st;
    progress(c);
    *n = take_user(c, out, max);
    return RKV_OK;
}

static rkv_status wait_core(rkv_client *c, struct rkv_completion *out, unsigned max, unsigned *n,
                            unsigned timeout_ms)
{
    if (c == NULL)
        return RKV_INVALID;
    rkv_status st = check_poll_args(c, "wait", out, max, n);
    if (st != RKV_OK)
        return st;
    if (c->userq_count == 0 && c->outstanding > 0)
        progress(c); /* a pass first: the clock only if it is empty */
    if (c->userq_count == 0 && c->outstanding > 0 && timeout_ms > 0)
        run_until(c, &c->userq_count, rkv_now_ns() + (uint64_t)timeout_ms * 1000000ull);
    *n = take_user(c, out, max);
    return RKV_OK;
}

static rkv_status set_window_core(rkv_client *c, unsigned window)
{
    if (window == 0 || window > RKV_MAX_WINDOW)
        return client_fail(c, RKV_INVALID, "set_window: %u is out of range; use 1..%u", window,
                           RKV_MAX_WINDOW);
    if (c->outstanding > 0 || c->wrap_out > 0 || c->waiter_ops > 0)
        return client_fail(c, RKV_INVALID,
                           "set_window: %u ops are outstanding; take their completions "
                           "first",
                           c->outstanding + c->wrap_out + c->waiter_ops);
    /* a shared handle's synchronous calls have WRAP_SLOTS more (run_shared) */
    unsigned nslots = window + WRAP_SLOTS * (c->shared ? 2 : 1), ring = 1;
    while (ring < window)
        ring *= 2;
    struct slot *slots = calloc(nslots, sizeof *slots);
    struct rkv_completion *userq = calloc(ring, sizeof *userq);
    struct rkv_lookup **round = calloc(nslots, sizeof *round);
    if (slots == NULL || userq == NULL || round == NULL) {
        free(slots);
        free(userq);
        free(round);
        return client_fail(c, RKV_NO_MEMORY, "set_window: out of memory for %u slots", nslots);
    }
    for (unsigned i = 0; i < nslots; i++)
        slots[i].next = i + 1 < nslots ? i + 1 : NO_SLOT;
    free(c->slots);
    free(c->userq);
    free(c->round);
    c->slots = slots;
    c->userq = userq;
    c->round = round;
    c->free_head = 0;
    c->window = window;
    c->userq_mask = ring - 1;
    c->userq_head = c->userq_count = 0;
    return RKV_OK;
}

static unsigned window_core(const rkv_client *c)
{
    return c->window;
}

static unsigned outstanding_core(const rkv_client *c)
{
    return c->outstanding;
}

/* ------------------------------------------------------------ shared handle
 *
 * RKV_OPT_SHARED (rkv.h "Threading"): one handle, one connection per server,
 * many threads. Every call takes the handle's lock around the core above,
 * except a GET whose server's connection is up and read by a transport that
 * any thread may read through (read_shared: shm). That GET runs lock-free in
 * the calling thread's own context (struct tctx: lookup context, landing
 * buffer, counters, hints), through the shard's view (struct shard_view),
 * which view_retire() takes away before the connection closes. Its hints go
 * to the shard's buffer under the lock, once per RKV_HINT_BUFFER_CAP.
 *
 * A synchronous call's op completes into its caller's waiter; whichever
 * thread holds the lock moves every thread's ops along, so writes of
 * several threads leave in one doorbell (wait_own). */

#define TBUMP(x, n) __atomic_store_n(&(x), (x) + (n), __ATOMIC_RELAXED) /* one writer */
#define TLOAD(x)    __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* The context of the calling thread, found without the lock after its
 * first call on the handle; NULL when out of memory. */
static __thread struct {
    const rkv_client *c;
    uint64_t serial;
    struct tctx *x;
} my_tctx;

static __attribute__((noinline)) struct tctx *tctx_find(rkv_client *c)
{
    pthread_t me = pthread_self();
    pthread_mutex_lock(&c->lock);
    struct tctx *x = c->tctxs;
    while (x && !pthread_equal(x->owner, me))
        x = x->next;
    /* whole cache lines: a thread's GETs write its context on every call,
     * and must not share a line with another's */
    size_t size = RKV_ALIGN_UP(sizeof *x + c->nshards * sizeof x->sh[0], 64);
    if (x == NULL && posix_memalign((void **)&x, 64, size) == 0) {
        memset(x, 0, size);
        x->owner = me;
        x->index = c->ntctx++;
        for (unsigned i = 0; i < c->nshards; i++)
            x->sh[i].reader = x->index;
        x->next = c->tctxs;
        c->tctxs = x;
    }
    pthread_mutex_unlock(&c->lock);
    if (x) {
        my_tctx.c = c;
        my_tctx.serial = c->serial;
        my_tctx.x = x;
    }
    return x;
}

static HOT struct tctx *tctx_of(rkv_client *c)
{
    if (RKV_LIKELY(my_tctx.c == c && my_tctx.serial == c->serial))
        return my_tctx.x;
    return tctx_find(c);
}

/* The thread's landing buffer holds what one GET of view v reads. */
static bool tshard_fit(struct tshard *ts, const struct shard_view *v)
{
    size_t need = rkv_lookup_scratch_need(&v->geom, 1);
    if (RKV_LIKELY(ts->scratch_len >= need))
        return true;
    uint8_t *b = malloc(need);
    if (b == NULL)
        return false;
    free(ts->scratch);
    ts->scratch = b;
    ts->scratch_len = need;
    return true;
}

static rkv_status tshard_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct tshard *ts = ctx;
    const struct shard_view *v = ts->v;
    rkv_status st = v->ops->read_shared(v->t, ts->reader, ops, n, ts->scratch, ts->scratch_len);
    if (RKV_UNLIKELY(st == RKV_SERVER_BUSY)) /* nothing read: the GET takes the lock */
        return st;
    TBUMP(ts->reads, n);
    TBUMP(ts->read_round_trips, 1);
    return st;
}

static void tshard_prefetch(void *ctx, uint64_t offset, uint32_t len)
{
    const struct tshard *ts = ctx;
    ts->v->ops->prefetch(ts->v->t, offset, len);
}

/* A lock-free GET's read failed: under the lock, the shard goes down if
 * it is still the connection the GET read (epoch), and the thread gets
 * the message. */
static void shared_read_failed(rkv_client *c, struct shard *s, uint64_t epoch, rkv_status st)
{
    pthread_mutex_lock(&c->lock);
    client_fail(c, st, "%s: read failed: %s", s->uri,
                s->t && s->epoch == epoch ? shard_why(s, st) : rkv_strerror(st));
    memcpy(thread_error, c->last_error, sizeof thread_error);
    if (s->t && s->epoch == epoch)
        shard_down(c, s, st);
    pthread_mutex_unlock(&c->lock);
}

/* A thread's full hint buffer into the shard's, under the lock, sending
 * the shard's whenever it fills (hints_flush). A GET never waits for the
 * lock for this: where another thread holds it (and may be preempted
 * holding it, with many threads on few cores), the buffer stays full, the
 * thread's next GETs' hints are dropped, and its next GET of the shard
 * tries again. Hints are advice to eviction; a lock-holder's preemption
 * must not stall every GETting thread behind it (it halved 16 threads'
 * GET rate on 2 cores). */
static void hints_merge(rkv_client *c, struct shard *s, struct rkv_hint_buffer *b)
{
    rkv_status st = RKV_OK;
    if (pthread_mutex_trylock(&c->lock) != 0)
        return;
    for (unsigned i = 0; i < b->n && s->t != NULL && st == RKV_OK; i++) {
        if (rkv_hint_buffer_full(&s->hints))
            st = hints_flush(c, s);
        if (st == RKV_OK)
            note_hint(s, b->hints[i]);
    }
    if (st != RKV_OK)
        shard_down(c, s, st);
    pthread_mutex_unlock(&c->lock);
    rkv_hint_buffer_clear(b);
}

/* One finished lock-free lookup into the thread's counters, the location
 * cache and the thread's hints. */
static HOT void tshard_done(rkv_client *c, struct tctx *x, struct tshard *ts,
                            const struct rkv_lookup *l, uint64_t kh)
{
    bool found = l->status == RKV_OK || l->status == RKV_BUFFER_TOO_SMALL;
    TBUMP(x->gets, 1);
    TBUMP(x->cache_stale, (uint64_t)(l->cached_slot != 0 && !l->cache_used));
    TBUMP(x->verify_retries, ts->lctx.retries);
    TBUMP(x->forwards, ts->lctx.forwards);
    if (found) {
        TBUMP(x->get_hits, 1);
        TBUMP(x->cache_hits, (uint64_t)l->cache_used);
        if (ts->v->hints)
            (void)rkv_hint_buffer_add(&ts->hints, l->slot);
    } else {
        TBUMP(x->get_misses, (uint64_t)(l->status == RKV_NOT_FOUND));
    }
    uint64_t slot = found ? l->slot : 0;
    if (c->cache && rkv_loc_cache_changed(l->cached_slot, slot))
        rkv_loc_cache_store(c->cache, &x->meter, ts->v->generation, kh, slot);
}

/* The server clock for a lock-free GET: the mapping's (shm), else the one
 * the shard last heard, extrapolated as shard_now() does (rdma lanes). */
static uint32_t view_now(const struct shard_view *v)
{
    uint32_t now;
    if (rkv_ctrans_clock(v->ops, v->t, &now))
        return now;
    uint64_t base = __atomic_load_n(&v->s->clock_base, __ATOMIC_RELAXED);
    uint64_t at = __atomic_load_n(&v->s->clock_local_ns, __ATOMIC_RELAXED);
    return rkv_clock_extrapolate(base > UINT32_MAX ? UINT32_MAX : (uint32_t)base, at, rkv_now_ns());
}

/* The thread's lookup context for view v. The view changes only on a
 * reconnect; a new view at a freed one's address is the same shard's
 * transport, so the context made for the old one fits it. */
static void tshard_setup(const rkv_client *c, struct tshard *ts, const struct shard_view *v)
{
    ts->v = v;
    ts->lctx = (struct rkv_lookup_ctx){ .geom = &v->geom,
                                        .read = tshard_read,
                                        .read_ctx = ts,
                                        .prefetch = v->ops->prefetch ? tshard_prefetch : NULL,
                                        .scratch = ts->scratch,
                                        .scratch_len = ts->scratch_len,
                                        .ops = ts->ops,
                                        .ops_cap = TCTX_OPS,
                                        .max_retries = c->opts.max_get_retries,
                                        .cost = v->cost };
}

/* A shared handle's GET without the lock (see above). false: take the lock
 * instead (a bad argument, for route() to word; the server down; a
 * transport without read_shared; no memory). true: *r is its completion. */
static HOT bool shared_get(rkv_client *c, const struct rkv_op *op, struct rkv_completion *r)
{
    struct tctx *x = tctx_of(c);
    if (RKV_UNLIKELY(x == NULL || x->index >= RKV_SHARED_READERS_MAX || op->key == NULL ||
                     op->key_len == 0 || (op->buf == NULL && op->buf_len != 0)))
        return false;
    uint64_t kh = rkv_shard_hash(op->key, op->key_len);
    unsigned i = c->nshards == 1 ? 0 : rkv_placement_pick(&c->placement, op->key, op->key_len, kh);
    struct shard *s = &c->shards[i];
    struct tshard *ts = &x->sh[i];
    __atomic_store_n(&x->active, 1, __ATOMIC_SEQ_CST);
    const struct shard_view *v = __atomic_load_n(&s->view, __ATOMIC_SEQ_CST);
    if (RKV_UNLIKELY(v == NULL || op->key_len > v->geom.max_key_len || !tshard_fit(ts, v))) {
        __atomic_store_n(&x->active, 0, __ATOMIC_RELEASE);
        return false;
    }
    const uint64_t epoch = v->epoch;
    if (RKV_UNLIKELY(ts->v != v || ts->lctx.scratch != ts->scratch))
        tshard_setup(c, ts, v);
    ts->lctx.now = view_now(v);
    ts->lctx.retries = ts->lctx.forwards = 0; /* this GET's */
    struct rkv_lookup l = {
        .key = op->key, .key_len = (uint32_t)op->key_len, .buf = op->buf, .buf_len = op->buf_len
    };
    struct rkv_lookup *lp = &l;
    l.cached_slot = c->cache ? rkv_loc_cache_find(c->cache, &x->meter, v->generation, kh) : 0;
    rkv_lookup_start(&ts->lctx, &l);
    rkv_status st = RKV_OK;
    while (!rkv_lookup_done(&l) && (st = rkv_lookup_round(&ts->lctx, &lp, 1)) == RKV_OK)
        ;
    if (RKV_UNLIKELY(st == RKV_SERVER_BUSY)) { /* no lane to read on: the lock's way */
        __atomic_store_n(&x->active, 0, __ATOMIC_RELEASE);
        return false;
    }
    if (RKV_LIKELY(st == RKV_OK))
        tshard_done(c, x, ts, &l, kh);
    __atomic_store_n(&x->active, 0, __ATOMIC_RELEASE); /* v may go from here on */
    *r = (struct rkv_completion){ .kind = RKV_KIND_GET, .status = st, .value_len = l.value_len };
    if (RKV_UNLIKELY(st != RKV_OK)) {
        shared_read_failed(c, s, epoch, st);
        return true;
    }
    r->status = l.status;
    if (l.status == RKV_OK || l.status == RKV_BUFFER_TOO_SMALL) {
        uint32_t now = ts->lctx.now;
        r->info.version = l.version;
        r->info.user_flags = l.user_flags;
        r->info.ttl_left = l.expire_at == 0 ? 0 : (l.expire_at > now ? l.expire_at - now : 1);
        r->value = read_marks(l.state);
    } else if (RKV_UNLIKELY(l.status == RKV_RETRY_EXHAUSTED)) {
        thread_fail(l.status, "get: the item changed under %u consecutive reads; retry",
                    c->opts.max_get_retries);
    }
    if (RKV_UNLIKELY(rkv_hint_buffer_full(&ts->hints)))
        hints_merge(c, s, &ts->hints);
    return true;
}

/* Take the lock for a synchronous call: spin (yielding) rather than sleep,
 * since the holder gives it up within a pass or a reply's round trip, and
 * a sleeper's wake-up costs more than either. */
static void waiter_lock(rkv_client *c)
{
    while (pthread_mutex_trylock(&c->lock) != 0)
        sched_yield();
}

/* Wait, holding the lock, until w's op has completed. Alone, block as a
 * single thread does (run_until); with other threads waiting or on their
 * way to the lock (counted before they take it: one blocked on the lock is
 * waiting too), make one pass, then let them have the lock: each pass moves
 * every thread's ops, so their writes are in flight together. */
static void wait_own(rkv_client *c, struct waiter *w)
{
    while (!w->done) {
        if (__atomic_load_n(&c->waiters, __ATOMIC_RELAXED) == 1) {
            run_until(c, &w->done, UINT64_MAX);
            continue;
        }
        progress(c);
        if (w->done)
            break;
        pthread_mutex_unlock(&c->lock);
        sched_yield();
        waiter_lock(c);
    }
}

/* A synchronous call on a shared handle: a GET lock-free where it can,
 * else the op through the core under the lock, completing into w. The
 * thread's message is its own op's (a refusal's, or the failure's). */
static rkv_status run_shared(rkv_client *c, const struct rkv_op *op, struct waiter *w,
                             const struct rkv_completion **r)
{
    *r = &w->c;
    if (op->kind == RKV_KIND_GET && shared_get(c, op, &w->c))
        return RKV_OK;
    w->done = 0;
    w->has_msg = false;
    __atomic_add_fetch(&c->waiters, 1, __ATOMIC_RELAXED);
    waiter_lock(c);
    while (c->waiter_ops >= WRAP_SLOTS) { /* the slots set aside for these are all out */
        progress(c);
        pthread_mutex_unlock(&c->lock);
        sched_yield();
        waiter_lock(c);
    }
    c->err_fresh = false;
    rkv_status st = submit(c, op, true, NULL, w);
    if (st == RKV_OK)
        wait_own(c, w);
    else
        memcpy(thread_error, c->last_error, sizeof thread_error);
    pthread_mutex_unlock(&c->lock);
    __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_RELAXED);
    if (w->has_msg)
        memcpy(thread_error, w->msg, sizeof thread_error);
    return st;
}

/* The other calls on a shared handle: under the lock; a message the call
 * set becomes the thread's. */
static void shared_lock(const rkv_client *c)
{
    rkv_client *m = (rkv_client *)c; /* the lock is not the handle's state */
    pthread_mutex_lock(&m->lock);
    m->err_written = false;
}

static void shared_unlock(const rkv_client *c)
{
    rkv_client *m = (rkv_client *)c;
    if (m->err_written)
        memcpy(thread_error, m->last_error, sizeof thread_error);
    pthread_mutex_unlock(&m->lock);
}

/* The threads' counters, summed (rkv_get_counters adds them less tbase). */
static void tctx_sum(const rkv_client *c, struct rkv_counters *t)
{
    memset(t, 0, sizeof *t);
    for (const struct tctx *x = c->tctxs; x; x = x->next) {
        t->gets += TLOAD(x->gets);
        t->get_hits += TLOAD(x->get_hits);
        t->get_misses += TLOAD(x->get_misses);
        t->cache_hits += TLOAD(x->cache_hits);
        t->cache_stale += TLOAD(x->cache_stale);
        t->verify_retries += TLOAD(x->verify_retries);
        t->forwards += TLOAD(x->forwards);
        for (unsigned i = 0; i < c->nshards; i++) {
            t->reads += TLOAD(x->sh[i].reads);
            t->read_round_trips += TLOAD(x->sh[i].read_round_trips);
        }
    }
}

static void tctx_free_all(rkv_client *c)
{
    while (c->tctxs) {
        struct tctx *x = c->tctxs;
        c->tctxs = x->next;
        for (unsigned i = 0; i < c->nshards; i++)
            free(x->sh[i].scratch);
        free(x);
    }
}

/* ------------------------------------------------------------ synchronous calls */

/* Wait for the wrappers' next completion (one is always coming while
 * wrap_out > 0) and take it; valid until the next wrapper op is submitted. */
static const struct wrap_completion *wrap_take(rkv_client *c)
{
    if (c->wrapq_count == 0)
        progress(c); /* a synchronous GET over shm ends in this pass */
    if (c->wrapq_count == 0)
        run_until(c, &c->wrapq_count, UINT64_MAX);
    const struct wrap_completion *w = &c->wrapq[c->wrapq_head];
    c->wrapq_head = (c->wrapq_head + 1) % WRAP_SLOTS;
    c->wrapq_count--;
    c->wrap_out--;
    return w;
}

/* A synchronous call: one op through the core, waited for. RKV_OK with its
 * completion in *r, or the refusal. */
static HOT rkv_status run_one(rkv_client *c, const struct rkv_op *op, struct waiter *w,
                              const struct rkv_completion **r)
{
    if (RKV_UNLIKELY(c->shared))
        return run_shared(c, op, w, r);
    rkv_status st = submit(c, op, true, NULL, NULL);
    if (RKV_LIKELY(st == RKV_OK))
        *r = &wrap_take(c)->c;
    return st;
}

rkv_status rkv_get(rkv_client *c, const void *key, size_t key_len, void *buf, size_t buf_len,
                   size_t *value_len, struct rkv_item_info *info)
{
    const struct rkv_op op = {
        .kind = RKV_KIND_GET, .key = key, .key_len = key_len, .buf = buf, .buf_len = buf_len
    };
    const struct rkv_completion *r;
    struct waiter w;
    rkv_status st = run_one(c, &op, &w, &r);
    if (RKV_UNLIKELY(st != RKV_OK))
        return st;
    if (value_len)
        *value_len = r->value_len;
    if (info && (r->status == RKV_OK || r->status == RKV_BUFFER_TOO_SMALL))
        *info = r->info;
    return r->status;
}

rkv_status rkv_put(rkv_client *c, const void *key, size_t key_len, const void *value,
                   size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version)
{
    const struct rkv_op op = { .kind = RKV_KIND_PUT,
                               .key = key,
                               .key_len = key_len,
                               .value = value,
                               .value_len = value_len,
                               .opts = opts };
    const struct rkv_completion *r;
    struct waiter w;
    rkv_status st = run_one(c, &op, &w, &r);
    if (st != RKV_OK)
        return st;
    if (r->status == RKV_OK && new_version)
        *new_version = r->value;
    return r->status;
}

rkv_status rkv_delete(rkv_client *c, const void *key, size_t key_len)
{
    const struct rkv_op op = { .kind = RKV_KIND_DELETE, .key = key, .key_len = key_len };
    const struct rkv_completion *r;
    struct waiter w;
    rkv_status st = run_one(c, &op, &w, &r);
    return st != RKV_OK ? st : r->status;
}

rkv_status rkv_incr(rkv_client *c, const void *key, size_t key_len, int64_t delta, uint64_t *result)
{
    const struct rkv_op op = { .kind = RKV_KIND_INCR, .key = key, .key_len = key_len, .delta = delta };
    const struct rkv_completion *r;
    struct waiter w;
    rkv_status st = run_one(c, &op, &w, &r);
    if (st != RKV_OK)
        return st;
    if (r->status == RKV_OK && result)
        *result = r->value;
    return r->status;
}

/* ------------------------------------------------------------ batched calls */

/* A batched call (rkv_mget, rkv_mput) as batch_run() sees it: the caller's
 * ops, and the two things that differ per call. */
struct batch {
    void *ops; /* the caller's array of n ops */
    size_t n;
    const char *call; /* "mget", "mput" */
    /* op i as an rkv_op (token i) */
    void (*to_op)(const struct batch *b, size_t i, struct rkv_op *op);
    /* op i's outcome */
    void (*result)(struct batch *b, size_t i, const struct rkv_completion *r);
};

/* Keep up to WRAP_SLOTS of the batch's ops in the core: submit while there
 * is room, take a completion, submit the next. A server whose connection
 * failed under one of them is not used again by the call: its later ops get
 * that error without being sent. Returns the first such error, or RKV_OK. */
static rkv_status batch_run(rkv_client *c, struct batch *b)
{
    rkv_status first_error = RKV_OK, down[MAX_SHARDS];
    uint64_t down_mask = 0;
    size_t next = 0;

    while (next < b->n || c->wrap_out > 0) {
        for (; next < b->n && c->wrap_out < WRAP_SLOTS; next++) {
            struct rkv_op op;
            struct rkv_completion r = { .token = next };
            b->to_op(b, next, &op);
            op.token = next;
            if (down_mask && op.key && op.key_len &&
                (down_mask >> rkv_shard_of(c, op.key, op.key_len) & 1)) {
                r.status = down[rkv_shard_of(c, op.key, op.key_len)];
                b->result(b, next, &r);
            } else if ((r.status = submit(c, &op, true, b->call, NULL)) != RKV_OK) {
                b->result(b, next, &r); /* refused: route()'s status */
            }
        }
        if (c->wrap_out == 0)
            break;
        const struct wrap_completion *w = wrap_take(c);
        if (w->shard_error) {
            down_mask |= 1ull << w->shard;
            down[w->shard] = w->c.status;
            if (first_error == RKV_OK)
                first_error = w->c.status;
        }
        b->result(b, (size_t)w->c.token, &w->c);
    }
    return first_error;
}

static void mget_to_op(const struct batch *b, size_t i, struct rkv_op *op)
{
    const struct rkv_get_op *g = (const struct rkv_get_op *)b->ops + i;
    *op = (struct rkv_op){
        .kind = RKV_KIND_GET, .key = g->key, .key_len = g->key_len, .buf = g->buf, .buf_len = g->buf_len
    };
}

static void mget_result(struct batch *b, size_t i, const struct rkv_completion *r)
{
    struct rkv_get_op *g = (struct rkv_get_op *)b->ops + i;
    g->status = r->status;
    g->value_len = r->value_len;
}

static rkv_status mget_core(rkv_client *c, struct rkv_get_op *ops, size_t n)
{
    struct batch b = { .ops = ops, .n = n, .call = "mget", .to_op = mget_to_op, .result = mget_result };
    return batch_run(c, &b);
}

static void mput_to_op(const struct batch *b, size_t i, struct rkv_op *op)
{
    const struct rkv_put_op *p = (const struct rkv_put_op *)b->ops + i;
    *op = (struct rkv_op){ .kind = RKV_KIND_PUT,
                           .key = p->key,
                           .key_len = p->key_len,
                           .value = p->value,
                           .value_len = p->value_len,
                           .opts = p->opts };
}

static void mput_result(struct batch *b, size_t i, const struct rkv_completion *r)
{
    struct rkv_put_op *p = (struct rkv_put_op *)b->ops + i;
    p->status = r->status;
    p->version = r->status == RKV_OK ? r->value : 0;
}

static rkv_status mput_core(rkv_client *c, struct rkv_put_op *ops, size_t n)
{
    struct batch b = { .ops = ops, .n = n, .call = "mput", .to_op = mput_to_op, .result = mput_result };
    return batch_run(c, &b);
}

/* ------------------------------------------------------------ control */

/* A control RPC without key or value to shard s, through the core; the
 * payload is copied to buf (cap bytes), its length to *len. */
static rkv_status control_rpc(rkv_client *c, struct shard *s, uint8_t kind, int64_t arg, void *buf,
                              size_t cap, size_t *len)
{
    struct slot *sl = &c->slots[slot_enqueue(c, s, kind, true, 0, NULL)];
    sl->kh = 0;
    sl->key = NULL;
    sl->key_len = 0;
    sl->value = NULL;
    sl->value_len = 0;
    sl->delta = arg;
    sl->buf = buf;
    sl->buf_len = cap;
    c->c.other_rpcs++;
    const struct wrap_completion *w = wrap_take(c);
    if (len)
        *len = w->c.value_len;
    return w->c.status;
}

static rkv_status ping_core(rkv_client *c)
{
    for (unsigned i = 0; i < c->nshards; i++) {
        rkv_status st = control_rpc(c, &c->shards[i], KIND_PING, 0, NULL, 0, NULL);
        if (st != RKV_OK)
            return st;
    }
    return RKV_OK;
}

static rkv_status flush_core(rkv_client *c, uint32_t delay_s)
{
    rkv_status first = RKV_OK;
    for (unsigned i = 0; i < c->nshards; i++) { /* every server, even past a failed one */
        rkv_status st = control_rpc(c, &c->shards[i], KIND_FLUSH, delay_s, NULL, 0, NULL);
        if (first == RKV_OK)
            first = st;
    }
    return first;
}

/* A synchronous call's own failure message, outside the core: the calling
 * thread's on a shared handle, else the handle's. */
static rkv_status call_fail(rkv_client *c, rkv_status st, const char *msg)
{
    return c->shared ? thread_fail(st, "%s", msg) : client_fail(c, st, "%s", msg);
}

/* rkv_get_recache's claim of key's item of `version`: one RPC to the key's
 * server through the core's queue, as a write goes. The server's marks in
 * *marks. Under the lock on a shared handle. */
static rkv_status claim_core(rkv_client *c, const void *key, size_t key_len, uint64_t version,
                             uint32_t recache_ttl, uint32_t *marks)
{
    uint64_t kh = rkv_shard_hash(key, key_len);
    struct shard *s = shard_for(c, key, key_len, kh);
    struct slot *sl = &c->slots[slot_enqueue(c, s, KIND_CLAIM, true, 0, NULL)];
    sl->kh = kh;
    sl->key = key;
    sl->key_len = key_len;
    sl->value = NULL;
    sl->value_len = 0;
    sl->delta = 0;
    sl->opts = (struct rkv_put_options){ .ttl = recache_ttl, .cas = version };
    sl->has_opts = true;
    c->c.other_rpcs++;
    const struct wrap_completion *w = wrap_take(c);
    *marks = (uint32_t)w->c.value;
    return w->c.status;
}

static rkv_status claim(rkv_client *c, const void *key, size_t key_len, uint64_t version,
                        uint32_t recache_ttl, uint32_t *marks)
{
    if (!c->shared)
        return claim_core(c, key, key_len, version, recache_ttl, marks);
    shared_lock(c);
    rkv_status st = claim_core(c, key, key_len, version, recache_ttl, marks);
    shared_unlock(c);
    return st;
}

/* Does a read's item ask for a claim: stale or due (its TTL below
 * recache_ttl), and nobody's recache yet? */
static bool claim_due(const struct rkv_completion *r, uint32_t recache_ttl)
{
    bool due = recache_ttl != 0 && r->info.ttl_left != 0 && r->info.ttl_left < recache_ttl;
    return (r->value & RKV_MARK_TAKEN) == 0 && ((r->value & RKV_MARK_STALE) != 0 || due);
}

#define CLAIM_TRIES 8 /* reads rkv_get_recache makes while its item keeps changing */

/* rkv_get_recache: a GET, and when its item asks for it, the claim; a claim
 * that finds another version (replaced, deleted, expired since the read)
 * reads again, CLAIM_TRIES times at most. */
static rkv_status get_recache_core(rkv_client *c, const struct rkv_op *op, size_t *value_len,
                                   struct rkv_item_info *info, struct rkv_recache *rc)
{
    for (unsigned tries = 0; tries < CLAIM_TRIES; tries++) {
        const struct rkv_completion *r;
        struct waiter w;
        rkv_status st = run_one(c, op, &w, &r);
        if (st != RKV_OK)
            return st;
        rc->marks = 0;
        if (value_len)
            *value_len = r->value_len;
        if (r->status != RKV_OK && r->status != RKV_BUFFER_TOO_SMALL)
            return r->status;
        if (info)
            *info = r->info;
        rc->marks = (uint32_t)r->value;
        if (r->status != RKV_OK || !claim_due(r, rc->recache_ttl))
            return r->status;
        uint32_t marks;
        st = claim(c, op->key, op->key_len, r->info.version, rc->recache_ttl, &marks);
        if (st == RKV_OK) {
            rc->marks = marks;
            return RKV_OK;
        }
        if (st != RKV_CAS_MISMATCH && st != RKV_NOT_FOUND)
            return st;
    }
    return call_fail(c, RKV_SERVER_BUSY,
                     "get_recache: the item kept changing between the read and the "
                     "claim; retry");
}

rkv_status rkv_get_recache(rkv_client *c, const void *key, size_t key_len, void *buf, size_t buf_len,
                           size_t *value_len, struct rkv_item_info *info, struct rkv_recache *rc)
{
    const struct rkv_op op = {
        .kind = RKV_KIND_GET, .key = key, .key_len = key_len, .buf = buf, .buf_len = buf_len
    };
    if (rc == NULL || rc->flags != 0)
        return call_fail(c, RKV_INVALID,
                         rc == NULL ? "get_recache: rc is NULL; pass a struct rkv_recache"
                                    : "get_recache: rc->flags is not 0 (no options are defined)");
    return get_recache_core(c, &op, value_len, info, rc);
}

static rkv_status stats_core(rkv_client *c, unsigned shard, char *buf, size_t buf_len, size_t *len)
{
    size_t n = 0;
    if (shard >= c->nshards || (buf == NULL && buf_len))
        return client_fail(c, RKV_INVALID, "stats: no shard %u (have %u)", shard, c->nshards);
    rkv_status st = control_rpc(c, &c->shards[shard], KIND_STATS, 0, buf, buf_len, &n);
    if (len)
        *len = n;
    if (st == RKV_OK && n >= buf_len)
        return RKV_BUFFER_TOO_SMALL;
    if (st == RKV_OK)
        buf[n] = '\0';
    return st;
}

static void get_counters_core(const rkv_client *c, struct rkv_counters *out)
{
    *out = c->c;
    out->reads = c->tc.reads;
    out->read_round_trips = c->tc.read_round_trips;
    out->doorbells = c->tc.doorbells;
    out->sends = c->tc.sends;
    out->inline_sends = c->tc.inline_sends;
    out->read_lanes = __atomic_load_n(&c->tc.lanes, __ATOMIC_RELAXED);
    out->read_lanes_td = __atomic_load_n(&c->tc.lanes_td, __ATOMIC_RELAXED);
    if (!c->shared)
        return;
    struct rkv_counters t;
    tctx_sum(c, &t);
    out->gets += t.gets - c->tbase.gets;
    out->get_hits += t.get_hits - c->tbase.get_hits;
    out->get_misses += t.get_misses - c->tbase.get_misses;
    out->cache_hits += t.cache_hits - c->tbase.cache_hits;
    out->cache_stale += t.cache_stale - c->tbase.cache_stale;
    out->verify_retries += t.verify_retries - c->tbase.verify_retries;
    out->forwards += t.forwards - c->tbase.forwards;
    out->reads += t.reads - c->tbase.reads;
    out->read_round_trips += t.read_round_trips - c->tbase.read_round_trips;
}

static void reset_counters_core(rkv_client *c)
{
    memset(&c->c, 0, sizeof c->c);
    /* not the lanes (totals, bumped by GETting threads without the lock) */
    c->tc.reads = c->tc.read_round_trips = c->tc.doorbells = c->tc.sends = c->tc.inline_sends = 0;
    if (c->shared)
        tctx_sum(c, &c->tbase);
}

static size_t max_value_size_core(const rkv_client *c)
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

/* ------------------------------------------------------------ the calls' locks
 *
 * The calls that go through the core and not through run_one: as they are
 * on a handle of one thread, and under the lock on a shared one. */

#define SHARED_CALL(c, type, call) \
    do {                           \
        if (!(c)->shared)          \
            return call;           \
        shared_lock(c);            \
        type r_ = call;            \
        shared_unlock(c);          \
        return r_;                 \
    } while (0)

rkv_status rkv_submit(rkv_client *c, const struct rkv_op *op)
{
    SHARED_CALL(c, rkv_status, submit_core(c, op));
}

rkv_status rkv_poll(rkv_client *c, struct rkv_completion *out, unsigned max, unsigned *n)
{
    if (c == NULL)
        return RKV_INVALID;
    SHARED_CALL(c, rkv_status, poll_core(c, out, max, n));
}

rkv_status rkv_wait(rkv_client *c, struct rkv_completion *out, unsigned max, unsigned *n,
                    unsigned timeout_ms)
{
    if (c == NULL)
        return RKV_INVALID;
    SHARED_CALL(c, rkv_status, wait_core(c, out, max, n, timeout_ms));
}

rkv_status rkv_set_window(rkv_client *c, unsigned window)
{
    SHARED_CALL(c, rkv_status, set_window_core(c, window));
}

unsigned rkv_window(const rkv_client *c)
{
    SHARED_CALL(c, unsigned, window_core(c));
}

unsigned rkv_outstanding(const rkv_client *c)
{
    SHARED_CALL(c, unsigned, outstanding_core(c));
}

rkv_status rkv_mget(rkv_client *c, struct rkv_get_op *ops, size_t n)
{
    SHARED_CALL(c, rkv_status, mget_core(c, ops, n));
}

rkv_status rkv_mput(rkv_client *c, struct rkv_put_op *ops, size_t n)
{
    SHARED_CALL(c, rkv_status, mput_core(c, ops, n));
}

rkv_status rkv_ping(rkv_client *c)
{
    SHARED_CALL(c, rkv_status, ping_core(c));
}

rkv_status rkv_flush(rkv_client *c, uint32_t delay_s)
{
    SHARED_CALL(c, rkv_status, flush_core(c, delay_s));
}

rkv_status rkv_stats(rkv_client *c, unsigned shard, char *buf, size_t buf_len, size_t *len)
{
    SHARED_CALL(c, rkv_status, stats_core(c, shard, buf, buf_len, len));
}

size_t rkv_max_value_size(const rkv_client *c)
{
    SHARED_CALL(c, size_t, max_value_size_core(c));
}

void rkv_get_counters(const rkv_client *c, struct rkv_counters *out)
{
    if (!c->shared) {
        get_counters_core(c, out);
        return;
    }
    shared_lock(c);
    get_counters_core(c, out);
    shared_unlock(c);
}

void rkv_reset_counters(rkv_client *c)
{
    if (!c->shared) {
        reset_counters_core(c);
        return;
    }
    shared_lock(c);
    reset_counters_core(c);
    shared_unlock(c);
}
