/* rkv.h — the rkv client library (librkv).
 *
 * rkv is a remote-memory key-value cache. A GET reads the server's table
 * directly (one-sided RDMA READ, or a read-only shared-memory mapping on the
 * same host): the server's CPU never sees it. PUT, DELETE and the other
 * writes are small RPCs to the server.
 *
 * Quick start:
 *
 *     rkv_client *c;
 *     if (rkv_connect("shm:///run/rkv/rkv.sock", NULL, &c) != RKV_OK) ...
 *     rkv_put(c, "k", 1, "v", 1, NULL);
 *     char buf[64]; size_t n;
 *     if (rkv_get(c, "k", 1, buf, sizeof buf, &n, NULL) == RKV_OK) ...
 *     rkv_close(c);
 *
 * URIs: "rdma://HOST:PORT" (RDMA verbs over rdma_cm) and "shm://PATH" (a unix
 * socket of a server on this host). Several URIs separated by commas shard
 * keys across servers with jump consistent hashing, or with ketama as
 * libmemcached and twemproxy place keys (rkv_options.placement, or
 * "?placement=ketama" on a URI), so librkv reads a key from the server a
 * memcached client wrote it to. A URI's parameters ("URI?KEY=VALUE&..."):
 *   placement=jump|ketama  the list's placement (URIs that say must agree)
 *   name=NAME              ketama: the server's name, verbatim (twemproxy's
 *                          "HOST:PORT:WEIGHT NAME")
 *   tcp=HOST:PORT          ketama: the server's tcp:// door as memcached
 *                          clients list it; named as they name it: "HOST:PORT",
 *                          or "HOST" when PORT is 11211
 *   weight=N               ketama: the server's share, 1..65535 (default 1)
 * Without name= or tcp= a server is named from its URI's address. E.g.
 *   "shm:///run/rkv/a.sock?placement=ketama&tcp=10.0.0.1:11211,shm:///run/rkv/b.sock?tcp=10.0.0.2:11211"
 *
 * Threading: a handle is used by one thread at a time unless it is shared.
 * Handles are independent and may talk to the same servers concurrently;
 * they share one location cache per process (lock-free), so threads warm
 * each other. A handle per thread costs each server a connection (over
 * rdma a QP) per thread.
 *
 * A shared handle (rkv_options.flags = RKV_OPT_SHARED) keeps one connection
 * per server for any number of threads, which may make any calls on it at
 * once, but rkv_close (no call may be running or follow). The rules:
 *   - A GET takes no lock: each thread reads through its own small context
 *     (made on its first call, freed by rkv_close; a thread that exits
 *     leaves it until then). Over shm it copies from the mapped region; over
 *     rdma it posts its READs on one of the handle's READ lanes to that
 *     server, QPs that carry only READs, opened as threads arrive: one per
 *     thread up to the online CPUs (at most 64; the environment variable
 *     RKV_RDMA_LANES=N caps them, 0 turns them off), later threads sharing
 *     them. So a server holds 1 + lanes QPs per shared handle, not one per
 *     thread. While a server is down, where it offers no lanes (older
 *     servers) or a lane cannot be opened, and for a thread past the
 *     4,096th, a GET takes the handle's lock as writes do. rkv_counters'
 *     read_lanes and read_lanes_td count the lanes.
 *   - Every other call takes the handle's lock to queue its requests and
 *     to move the connection along; a synchronous call (rkv_put, rkv_delete,
 *     rkv_incr, a locked rkv_get) then waits for its own op's completion,
 *     whichever thread's pass receives it, and lets other threads in
 *     between passes, so their requests share doorbells. rkv_mget, rkv_mput,
 *     rkv_ping, rkv_flush, rkv_stats and rkv_wait hold the lock for their
 *     whole duration (other threads' calls wait behind them).
 *   - Ordering per key: a thread's writes to one key take effect in the
 *     order it made them (each synchronous call returns after its reply,
 *     and one server's writes go in order on its one connection). Writes to
 *     one key from different threads at once take effect in some order, one
 *     at a time (INCRs are never lost), which their completions do not
 *     tell. A GET sees every write whose call returned before it began.
 *   - The pipelined window (rkv_submit/rkv_poll/rkv_wait) is the handle's,
 *     not a thread's: rkv_poll returns whichever ops completed, whoever
 *     submitted them, and a token means what its submitter meant. Use it
 *     from one thread at a time (or with tokens that name their thread and
 *     a hand-off of completions); the synchronous calls of other threads
 *     may run beside it and never take its completions.
 *   - rkv_last_error(c) is the calling thread's: the message of its own last
 *     failed call on any shared handle (another thread's failure never
 *     overwrites it), in a buffer valid until the thread exits.
 *   - rkv_get_counters sums every thread's work on the handle.
 *
 * Processes: a handle belongs to the process that connected it. A child of
 * fork() shares the parent's connections through it (over shm the socket
 * and the mapped request and reply rings, over rdma the verbs objects), so
 * it must make no call on an inherited handle, not even rkv_close(): a call
 * would take the parent's replies, write into its rings or tear its QP down.
 * The parent's handles are unaffected by the fork. The child connects
 * handles of its own (over rdma on a device context of its own, which works
 * in a child); an inherited handle's memory and file descriptors stay the
 * child's until it exits or execs, and a server keeps the connection until
 * both processes have let go of it. Fork while no other thread is inside
 * rkv_connect() or rkv_close(): they hold a process-wide lock for a moment,
 * and a child forked then may wait for it forever in its own rkv_connect().
 *
 * Errors: every call that can fail returns an rkv_status; its comment ends
 * with a "Returns:" line naming the statuses it gives. rkv_strerror() names
 * a status; rkv_last_error() gives the handle's last detailed message (which
 * server, what was wrong, what to do).
 *
 * Keys are binary-safe, 1..250 bytes. Values are 0..max_value_len bytes (the
 * server's configuration; 1 MiB less the item header and the longest key by
 * default; see rkv_max_value_size()). A shorter key leaves its room to the
 * value: what memcached clients store through a server's tcp door (as
 * memcached, up to its own limit) may be up to max_value_len + 250 - key
 * length bytes, which rkv_get answers RKV_BUFFER_TOO_SMALL with the length
 * when the buffer is shorter.
 *
 * Arguments: every call, single or batched, checks its arguments the same
 * way: a NULL or empty key, or a NULL value/buffer with a non-zero length,
 * or an unknown put mode is RKV_INVALID; a key or value over the server's
 * limits is RKV_TOO_LARGE. Nothing is sent for such an op, with one
 * exception: a SET (RKV_SET) whose value is over the limit removes the key's
 * current item, as memcached's set does, so that no reader goes on getting
 * the value the writer meant to replace. It is sent as that removal and
 * completes with RKV_TOO_LARGE. Failed updates in general: a SET refused for
 * size or memory leaves no item; a refused ADD, REPLACE, CAS or INCR leaves
 * the old item as it was.
 *
 * Connection errors: RKV_CONNECTION (cannot connect, the connection broke,
 * or a reconnect is backing off) and RKV_TIMEOUT (no reply within
 * timeout_ms; the connection is reset). Either can come from any call that
 * talks to a server; the next call reconnects.
 */
#ifndef RKV_H
#define RKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef RKV_VERSION_STRING /* a test build of rkv-server sets another (tests/meson.build) */
#define RKV_VERSION_STRING "0.1.0"
#endif

typedef enum rkv_status {
    RKV_OK = 0,
    RKV_NOT_FOUND,        /* no such key (or it expired) */
    RKV_EXISTS,           /* add: the key is already present */
    RKV_NOT_STORED,       /* replace/cas: the key is absent */
    RKV_CAS_MISMATCH,     /* cas: the item's version is not the one given */
    RKV_OUT_OF_MEMORY,    /* the server's region is full and eviction is off */
    RKV_TOO_LARGE,        /* key or value longer than the server accepts */
    RKV_BUFFER_TOO_SMALL, /* get: *value_len tells the size needed */
    RKV_INVALID,          /* a bad argument (NULL key, zero length, bad URI...) */
    RKV_NOT_NUMBER,       /* incr/decr on a value that is not a decimal u64 */
    RKV_PROTOCOL,         /* the peer sent something malformed */
    RKV_VERSION_MISMATCH, /* client and server speak different protocol versions */
    RKV_AUTH,             /* the server refused our shared secret */
    RKV_CONNECTION,       /* cannot connect, or the connection broke */
    RKV_TIMEOUT,          /* no reply within the handle's timeout */
    RKV_RETRY_EXHAUSTED,  /* get: the item kept changing under the read; retry */
    RKV_SERVER_BUSY,      /* the server refused the request for now */
    RKV_NO_MEMORY,        /* a local allocation failed */
    RKV_INTERNAL,         /* a bug: please report it */
    RKV_WINDOW_FULL,      /* rkv_submit: the window is full; take completions first */
    RKV_STATUS_COUNT
} rkv_status;

typedef struct rkv_client rkv_client;

/* How a GET that has no cached location reads the key's two candidate
 * buckets (docs/design.md, "The GET path"). */
typedef enum rkv_bucket_reads {
    RKV_BUCKET_READS_AUTO = 0, /* the connection decides: shm reads the first alone; rdma times
                                  9 doorbells of 1 READ and of 2 when it connects and reads the
                                  first alone when 2 take >= 1.25x as long (Soft-RoCE), else
                                  both together (a NIC), and keeps timing a few of its GETs'
                                  doorbells: once they say 1.25x, the first alone from then on */
    RKV_BUCKET_READS_TOGETHER, /* both in one round trip: 2 READs, 1 doorbell */
    RKV_BUCKET_READS_FIRST,    /* the first alone, the second only when the first has no
                                  match (most keys live in their first bucket) */
} rkv_bucket_reads;            /* any other value is refused with RKV_INVALID */
/* How a handle with several servers places keys on them. */
typedef enum rkv_placement {
    RKV_PLACEMENT_DEFAULT = 0, /* what the URIs say (placement=), else jump */
    RKV_PLACEMENT_JUMP,        /* jump consistent hashing of the key's XXH3-64 (rkv's own) */
    RKV_PLACEMENT_KETAMA,      /* libmemcached/twemproxy ketama: 160 MD5 points per server,
                                  scaled by weight; twemproxy's distribution: ketama, hash: md5 */
} rkv_placement;               /* any other value is refused with RKV_INVALID */

/* What a zero in struct rkv_options stands for: each default, written once. */
#define RKV_DEFAULT_TIMEOUT_MS       5000    /* timeout_ms */
#define RKV_DEFAULT_LOCATION_CACHE   4194304 /* location_cache, entries: 32 MiB */
#define RKV_DEFAULT_GET_RETRIES      64      /* max_get_retries */
#define RKV_DEFAULT_RECONNECT_MS     1000    /* reconnect_ms */
#define RKV_DEFAULT_RDMA_ACK_TIMEOUT 16      /* rdma_ack_timeout: 268 ms per try */
/* rdma_retry_count: with the default ACK timeout, a dead server is noticed in 1.88 s */
#define RKV_DEFAULT_RDMA_RETRY_COUNT 6

/* Options for rkv_connect_opts(); zero-initialise and set what you need. */
struct rkv_options {
    const char *auth_secret;       /* shared secret the server expects, or NULL */
    unsigned timeout_ms;           /* per-operation timeout; 0 = RKV_DEFAULT_TIMEOUT_MS */
    unsigned location_cache;       /* budget in entries (8 bytes each) of the key→item location
                                      cache, shared by the process's handles asking for the same
                                      budget; its table starts at 1/64 of it (at most 512 KiB) and
                                      doubles, up to the budget, while entries are being evicted;
                                      0 = RKV_DEFAULT_LOCATION_CACHE, (unsigned)-1 = this handle
                                      uses none */
    unsigned max_get_retries;      /* verification retries before RKV_RETRY_EXHAUSTED;
                                      0 = RKV_DEFAULT_GET_RETRIES */
    unsigned reconnect_ms;         /* longest backoff between reconnect attempts;
                                      0 = RKV_DEFAULT_RECONNECT_MS */
    const char *rdma_device;       /* RDMA device name, or NULL for rdma_cm's choice */
    rkv_bucket_reads bucket_reads; /* cold GETs: how the buckets are read; 0 = AUTO */
    rkv_placement placement;       /* several servers: which owns a key; must agree with
                                      the URIs' placement= when both say */
    unsigned rdma_ack_timeout;     /* rdma: RC ACK timeout exponent, 1..31: each try of a transfer
                                      waits 4.096 us x 2^N for the server's ACK;
                                      0 = RKV_DEFAULT_RDMA_ACK_TIMEOUT */
    unsigned rdma_retry_count;     /* rdma: RC retransmissions, 1..7, before a transfer fails with
                                      "retry exceeded" and the call with RKV_CONNECTION;
                                      0 = RKV_DEFAULT_RDMA_RETRY_COUNT. A dead server is noticed
                                      within 4.096 us x 2^timeout x (retries + 1), when that is
                                      below timeout_ms (else the call's RKV_TIMEOUT comes first).
                                      Soft-RoCE (rdma_rxe) retries forever at 7 */
    unsigned flags;                /* RKV_OPT_* bits; others are refused with RKV_INVALID */
};

/* rkv_options.flags: the handle may be used by several threads at once
 * ("Threading" above); without it, by one thread at a time. */
#define RKV_OPT_SHARED 0x1u

/* Connect to one server, or to several separated by commas (sharded). On
 * failure *out is NULL and rkv_last_error(NULL) says which server and why
 * ("URI: what went wrong; what to do"). Later calls on a handle reconnect by
 * themselves (with backoff) after a connection breaks; such a call returns
 * RKV_CONNECTION meanwhile.
 * Returns: RKV_OK, RKV_INVALID (bad URI or option), RKV_CONNECTION,
 * RKV_TIMEOUT, RKV_AUTH, RKV_VERSION_MISMATCH, RKV_SERVER_BUSY (the server's
 * max_conns), RKV_PROTOCOL, RKV_NO_MEMORY. */
rkv_status rkv_connect(const char *uris, const struct rkv_options *opts, rkv_client **out);

/* What rkv_get() tells about the item it found. */
struct rkv_item_info {
    uint64_t version;    /* CAS token */
    uint32_t user_flags; /* what the writer stored */
    uint32_t ttl_left;   /* seconds to expiry; 0 = never expires */
};

/* Read a value into buf. On RKV_OK, *value_len is its length. On
 * RKV_BUFFER_TOO_SMALL nothing is copied and *value_len is the length needed.
 * `info` (may be NULL) receives the item's version (for RKV_CAS), flags and
 * remaining TTL.
 * Returns: RKV_OK, RKV_NOT_FOUND, RKV_BUFFER_TOO_SMALL, RKV_RETRY_EXHAUSTED,
 * RKV_INVALID (NULL/empty key, buf NULL with buf_len > 0), RKV_TOO_LARGE
 * (key), RKV_CONNECTION, RKV_TIMEOUT. */
rkv_status rkv_get(rkv_client *c, const void *key, size_t key_len, void *buf, size_t buf_len,
                   size_t *value_len, struct rkv_item_info *info);

/* ------------------------------------------------- stale-while-revalidate
 *
 * An item invalidated through the memcached door (md I, ms I with an older
 * CAS) is stale: rkv_get still returns it as a hit. rkv_get_recache also
 * says whether it is stale, and hands the recache of a stale item, or of
 * one with less than recache_ttl seconds to live (mg R), to exactly one
 * client, as the door's mg W does. That client fetches the value from the
 * source and stores it (rkv_put); the others go on reading the stale value
 * one-sidedly meanwhile. The rules:
 *   - A fresh item costs what rkv_get costs: one-sided READs, no RPC. The
 *     item's marks travel in it; only a stale or due item that no client
 *     has won yet costs one RPC (the claim), which the server answers with
 *     one test-and-set, so one caller wins.
 *   - The win token is the door's: a win through librkv makes every mg
 *     answer Z (and no W), an mg W makes every rkv_get_recache answer
 *     RKV_MARK_TAKEN, until the item is replaced.
 *   - Any store of the key (rkv_put, a door set) makes a fresh item: no
 *     longer stale, token free. A winner that does not store leaves the
 *     token taken until the item is replaced or expires, as in memcached
 *     (md I hands it out again).
 *   - A miss is a miss (no token is made for an absent key). */
#define RKV_MARK_STALE 0x1u /* the value is stale (mg X) */
#define RKV_MARK_WON   0x2u /* this call won the recache: store the fresh value (mg W) */
#define RKV_MARK_TAKEN 0x4u /* another client holds the recache (mg Z) */

struct rkv_recache {
    uint32_t recache_ttl; /* in: win the recache of an item with fewer seconds than this to
                             live, too (mg R); 0 = of stale items only */
    uint32_t flags;       /* in: 0 (room for options to come; other values are refused with
                             RKV_INVALID) */
    uint32_t marks;       /* out: RKV_MARK_* (0: fresh, or a miss) */
};

/* rkv_get() that also says whether the value is stale and hands the
 * recache to one client (see above). rc may not be NULL; rc->flags must be
 * 0.
 * Returns: as rkv_get(), and RKV_SERVER_BUSY (the item kept changing
 * between the read and the claim). On RKV_BUFFER_TOO_SMALL no claim is
 * made (rc->marks are those the read saw). */
rkv_status rkv_get_recache(rkv_client *c, const void *key, size_t key_len, void *buf, size_t buf_len,
                           size_t *value_len, struct rkv_item_info *info, struct rkv_recache *rc);

/* How a write treats an existing item. */
typedef enum rkv_put_mode {
    RKV_SET = 0, /* store unconditionally */
    RKV_ADD,     /* only if absent, else RKV_EXISTS */
    RKV_REPLACE, /* only if present, else RKV_NOT_STORED */
    RKV_CAS,     /* only if present with version == cas, else RKV_CAS_MISMATCH / RKV_NOT_STORED */
} rkv_put_mode;  /* any other value is refused with RKV_INVALID */

/* rkv_put_options.ttl: the item never expires, whatever the server's
 * default TTL (--default-ttl). */
#define RKV_TTL_NEVER UINT32_MAX

struct rkv_put_options {
    rkv_put_mode mode;
    uint32_t ttl;        /* seconds to live; 0 = the server's default (--default-ttl,
                            * itself 0 = never); RKV_TTL_NEVER = never expires */
    uint64_t cas;        /* the version that RKV_CAS requires */
    uint32_t user_flags; /* stored with the item, returned by get */
};

/* Expiry: the server clock counts whole seconds since the server started.
 * A PUT with ttl T at server second C expires at second E = C + T: the item
 * is found while the clock is below E and gone from E on — for GET (judged
 * in the client against the server's clock, never ahead of it) and for
 * DELETE, INCR and PUT modes (judged by the server) alike, so once a GET
 * reports it expired no later request finds it. A ttl of T seconds thus
 * lasts between T-1 and T seconds, as in memcached.
 *
 * Store a value. opts may be NULL (RKV_SET, default TTL). `new_version`
 * (may be NULL) receives the stored item's version.
 * Returns: RKV_OK, RKV_EXISTS / RKV_NOT_STORED / RKV_CAS_MISMATCH (the mode's
 * condition failed), RKV_OUT_OF_MEMORY, RKV_TOO_LARGE (key or value; a SET
 * refused for either of these two leaves the key with no item),
 * RKV_INVALID (NULL/empty key, value NULL with value_len > 0, unknown mode),
 * RKV_CONNECTION, RKV_TIMEOUT, RKV_SERVER_BUSY. */
rkv_status rkv_put(rkv_client *c, const void *key, size_t key_len, const void *value,
                   size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version);

/* Remove a key.
 * Returns: RKV_OK, RKV_NOT_FOUND, RKV_INVALID (NULL/empty key), RKV_TOO_LARGE
 * (key), RKV_CONNECTION, RKV_TIMEOUT. */
rkv_status rkv_delete(rkv_client *c, const void *key, size_t key_len);

/* Add delta to a value that is a decimal u64, read as memcached reads a
 * counter (1..20 digits, with leading or trailing blanks, so a counter the
 * tcp door's decr padded with spaces still counts); the result goes
 * to *result and is stored as decimal text, keeping the item's TTL and flags.
 * Overflow is defined as memcached defines it: an increment wraps modulo 2^64
 * (18446744073709551615 + 1 = 0), a decrement (negative delta) saturates at 0.
 * Returns: RKV_OK, RKV_NOT_FOUND (absent), RKV_NOT_NUMBER, RKV_INVALID,
 * RKV_TOO_LARGE (key), RKV_SERVER_BUSY (the item kept changing),
 * RKV_CONNECTION, RKV_TIMEOUT. */
rkv_status rkv_incr(rkv_client *c, const void *key, size_t key_len, int64_t delta, uint64_t *result);

/* Batched operations: all requests go out with one doorbell per server and
 * batch. Every op gets its own status, exactly what the single call would
 * return for it (arguments are checked the same way). A server whose
 * connection fails during the call is not used again by it: its ops that
 * had no result yet get the error (RKV_CONNECTION, RKV_TIMEOUT), while ops
 * on other servers go ahead. */
struct rkv_get_op {
    const void *key;
    size_t key_len;
    void *buf;
    size_t buf_len;
    size_t value_len;  /* out */
    rkv_status status; /* out */
};
/* rkv_get() for ops[0..n-1]; each op's status as rkv_get() would return it.
 * The same key twice in one batch is two lookups run in lockstep: they may
 * return different versions in either order, each one current at some
 * moment during the call (reads are monotonic across calls, not inside one).
 * Returns: RKV_OK when no op carries a connection error, else the first such
 * error (RKV_CONNECTION, RKV_TIMEOUT). */
rkv_status rkv_mget(rkv_client *c, struct rkv_get_op *ops, size_t n);

struct rkv_put_op {
    const void *key;
    size_t key_len;
    const void *value;
    size_t value_len;
    const struct rkv_put_options *opts; /* may be NULL */
    uint64_t version;                   /* out */
    rkv_status status;                  /* out */
};
/* rkv_put() for ops[0..n-1]; each op's status and version as rkv_put()
 * would return them.
 * Returns: RKV_OK when no op carries a connection error, else the first such
 * error (RKV_CONNECTION, RKV_TIMEOUT). */
rkv_status rkv_mput(rkv_client *c, struct rkv_put_op *ops, size_t n);

/* ------------------------------------------------------------ pipelining
 *
 * The pipelined API: submit operations without waiting, then collect their
 * completions. rkv_get/put/delete/incr, rkv_mget/rkv_mput, rkv_ping and
 * rkv_stats are thin wrappers over this one core (a single op submitted and
 * waited for, or a batch kept in a window).
 *
 *     struct rkv_op op = { .kind = RKV_KIND_GET, .token = 7, .key = "k", .key_len = 1,
 *                          .buf = buf, .buf_len = sizeof buf };
 *     rkv_set_window(c, 16);
 *     if (rkv_submit(c, &op) != RKV_OK) ... (refused: rkv_last_error(c) says why)
 *     struct rkv_completion done[16];
 *     unsigned n;
 *     rkv_wait(c, done, 16, &n, 1000);   (or rkv_poll(c, done, 16, &n): never blocks)
 *     for (unsigned i = 0; i < n; i++) ... done[i].token, done[i].status ...
 *
 * Window: at most rkv_window(c) ops are outstanding per handle: submitted,
 * and their completion not yet taken by rkv_poll/rkv_wait. A submit beyond it
 * is refused with RKV_WINDOW_FULL (nothing is queued; take completions and
 * submit again). The synchronous calls and rkv_mget/rkv_mput have their own
 * slots beside the window: they may be called while pipelined ops are out,
 * and they move those along too (their completions wait for rkv_poll).
 *
 * Completion: every op rkv_submit accepted completes exactly once, with its
 * token, and within about the handle's timeout_ms: a server that stops
 * answering or goes away completes each of its ops with RKV_TIMEOUT or
 * RKV_CONNECTION (ops on other servers go ahead). Ops complete in any order,
 * except:
 *
 * Ordering: the writes (PUT, DELETE, INCR) of one handle to one server are
 * sent in submission order on that server's one connection, which the server
 * executes and answers in order; so writes to one key from one handle take
 * effect and complete in submission order. A GET is not ordered against
 * writes in flight: a GET submitted while a write to its key is outstanding
 * may see the value before or after it. To read your own write, submit the
 * GET after the write's completion.
 *
 * Memory: rkv_submit copies the rkv_op and its put options, but not what they
 * point to: the key, a PUT's value and a GET's buffer must stay valid (and
 * the value unchanged) until the op's completion has been taken. A GET
 * writes its buffer only just before it completes.
 *
 * Progress: ops advance only inside rkv_poll, rkv_wait and the synchronous
 * calls; rkv_submit only queues (so a burst of submits leaves with one
 * doorbell per server). Poll while ops are out. A GET's reads run inside
 * these calls (a memcpy over shm; over rdma one round trip per server and
 * pass, with all that server's pending GETs in it). */

/* What an op does. */
typedef enum rkv_kind {
    RKV_KIND_GET = 0, /* rkv_get(): key, buf, buf_len */
    RKV_KIND_PUT,     /* rkv_put(): key, value, value_len, opts */
    RKV_KIND_DELETE,  /* rkv_delete(): key */
    RKV_KIND_INCR,    /* rkv_incr(): key, delta */
} rkv_kind;           /* any other value is refused with RKV_INVALID */

/* One operation for rkv_submit(); zero-initialise and set what its kind uses. */
struct rkv_op {
    rkv_kind kind;
    uint64_t token; /* returned in its completion (an index, a pointer) */
    const void *key;
    size_t key_len;
    void *buf;
    size_t buf_len; /* GET: where the value goes */
    const void *value;
    size_t value_len;                   /* PUT: the value */
    const struct rkv_put_options *opts; /* PUT: may be NULL; copied at submit */
    int64_t delta;                      /* INCR */
};

/* What an op came to: the status and results its synchronous call gives. */
struct rkv_completion {
    uint64_t token; /* the op's token */
    rkv_kind kind;
    rkv_status status;
    size_t value_len;          /* GET: on RKV_OK and RKV_BUFFER_TOO_SMALL, as rkv_get */
    struct rkv_item_info info; /* GET: on RKV_OK and RKV_BUFFER_TOO_SMALL */
    uint64_t value;            /* PUT: the new version; INCR: the result; GET: the marks the
                                  read saw, RKV_MARK_STALE and RKV_MARK_TAKEN (no claim) */
};

#define RKV_DEFAULT_WINDOW 64 /* a handle's window until rkv_set_window */
#define RKV_MAX_WINDOW     4096

/* Set the handle's window (1..RKV_MAX_WINDOW), only while nothing is
 * outstanding (no op submitted whose completion was not taken).
 * Returns: RKV_OK, RKV_INVALID (out of range, or ops outstanding),
 * RKV_NO_MEMORY (the handle keeps its old window). */
rkv_status rkv_set_window(rkv_client *c, unsigned window);

/* The window, and the ops outstanding now (submitted, completion not taken).
 * Returns: counts (no status). */
unsigned rkv_window(const rkv_client *c);
unsigned rkv_outstanding(const rkv_client *c);

/* Start one operation; its completion comes from rkv_poll/rkv_wait. Arguments
 * are checked as its synchronous call checks them; a refused op gets no
 * completion. Connection errors do not refuse: they complete the op.
 * Returns: RKV_OK (accepted), RKV_INVALID (NULL op, unknown kind, or what the
 * call refuses), RKV_TOO_LARGE (a key; a value other than a SET's: a SET's
 * is accepted and completes with RKV_TOO_LARGE, see "Arguments" above),
 * RKV_WINDOW_FULL. */
rkv_status rkv_submit(rkv_client *c, const struct rkv_op *op);

/* Move ops along without blocking and take up to max completions into
 * out[0..*n-1] (*n may be 0).
 * Returns: RKV_OK, RKV_INVALID (c, out or n NULL, or max 0). */
rkv_status rkv_poll(rkv_client *c, struct rkv_completion *out, unsigned max, unsigned *n);

/* rkv_poll(), but wait up to timeout_ms for at least one completion. With
 * nothing outstanding it returns at once with *n = 0.
 * Returns: RKV_OK (*n = 0 when none came within timeout_ms), RKV_INVALID. */
rkv_status rkv_wait(rkv_client *c, struct rkv_completion *out, unsigned max, unsigned *n,
                    unsigned timeout_ms);

/* Round trip to each server, in order, stopping at the first that fails.
 * Returns: RKV_OK (all answered), else that server's RKV_CONNECTION,
 * RKV_TIMEOUT, RKV_AUTH or RKV_PROTOCOL. */
rkv_status rkv_ping(rkv_client *c);

/* Remove every item stored so far, on every server (memcached's
 * flush_all); with delay_s > 0, have each server do so delay_s seconds from
 * now instead (replacing a flush it has scheduled; a flush now cancels
 * one). Items stored after the flush stay. Once it returns, no GET of any
 * client, one-sided or through the memcached door, returns a flushed item,
 * whatever locations it has cached. Every server is asked, even after one
 * failed; the status is the first failure's.
 * Returns: RKV_OK, RKV_CONNECTION, RKV_TIMEOUT, RKV_PROTOCOL (a server older
 * than flush). */
rkv_status rkv_flush(rkv_client *c, uint32_t delay_s);

/* Server statistics as text, one "name value" line each, for server `shard`
 * (0 for a single server). *len (may be NULL) is the text's length; the
 * text is NUL-terminated when it fits.
 * Returns: RKV_OK, RKV_BUFFER_TOO_SMALL (buf holds the start; *len + 1 bytes
 * are needed), RKV_INVALID (no such shard, buf NULL with buf_len > 0),
 * RKV_CONNECTION, RKV_TIMEOUT. */
rkv_status rkv_stats(rkv_client *c, unsigned shard, char *buf, size_t buf_len, size_t *len);

/* What this handle did on the wire, summed over its servers. These counters
 * are hardware-independent: they show the shape of each operation. */
struct rkv_counters {
    uint64_t gets, get_hits, get_misses;
    uint64_t puts, deletes, other_rpcs;
    uint64_t reads;            /* one-sided READs issued (bucket pairs count 2) */
    uint64_t read_round_trips; /* waits for a batch of READs */
    uint64_t doorbells;        /* post calls: each ibv_post_send or ring publish */
    uint64_t sends;            /* request messages sent */
    uint64_t inline_sends;     /* of which went inline */
    uint64_t verify_retries;   /* reads that failed verification and were redone */
    uint64_t cache_hits;       /* GETs served through the location cache */
    uint64_t reconnects;       /* times the handle re-established a connection */
    uint64_t forwards;    /* READs that followed a superseded item's forward to its replacement */
    uint64_t cache_stale; /* GETs whose cached location was no longer the key's (index re-read) */
    /* rdma, a shared handle: READ lanes opened for its threads' GETs, and of
     * those in a thread domain of their own (where the device offers one;
     * 0 on Soft-RoCE). Totals since connect: rkv_reset_counters keeps them. */
    uint64_t read_lanes, read_lanes_td;
};
/* Copy the handle's counters to *out; rkv_reset_counters() zeroes them.
 * Returns: nothing; they cannot fail. */
void rkv_get_counters(const rkv_client *c, struct rkv_counters *out);
void rkv_reset_counters(rkv_client *c);

/* The longest value rkv_put accepts on this handle: the smallest
 * max_value_len of its servers (from their region headers at connect),
 * what every key can hold (a shorter key, stored through the tcp door, a
 * little more: see "Keys are binary-safe" above).
 * Returns: that length in bytes (no status). */
size_t rkv_max_value_size(const rkv_client *c);

/* Number of servers this handle shards over, and the one that owns a key
 * (by the handle's placement: jump, or ketama).
 * Returns: a count, and an index 0..count-1 (no status; no round trip). */
unsigned rkv_shard_count(const rkv_client *c);
unsigned rkv_shard_of(const rkv_client *c, const void *key, size_t key_len);

/* A status in words ("not found"), and as a stable snake_case identifier
 * ("not_found") for logs, metrics and JSON.
 * Returns: a static string, valid forever (for a value outside rkv_status:
 * "unknown status" and "unknown"). */
const char *rkv_strerror(rkv_status s);
const char *rkv_status_name(rkv_status s);
/* The handle's last detailed error message (a shared handle: this thread's,
 * see "Threading" above). With c == NULL: the message of this thread's last
 * failed rkv_connect().
 * Returns: a NUL-terminated string ("" before any error) owned by the
 * library. The pointer stays valid until rkv_close(c) (c == NULL: until the
 * thread exits); its text until the next call on c that fails (c == NULL:
 * this thread's next failed rkv_connect()), which overwrites it. A call that
 * succeeds leaves it alone. Copy it to keep it. */
const char *rkv_last_error(const rkv_client *c);

/* Close every connection and free the handle; c may be NULL.
 * Returns: nothing. */
void rkv_close(rkv_client *c);

#ifdef __cplusplus
}
#endif
#endif
