/* shm_client.c — the client side of the shm transport (rkv_shm_client_transport).
 *
 * connect() talks to a server's unix socket (shm://PATH), receives the table
 * region as a read-only memfd and a per-connection memfd (see
 * common/shm_ring.h), and maps both. From then on:
 *
 *   read()   memcpy from the PROT_READ region mapping: a one-sided read that
 *            races server writes exactly like an RDMA READ, and that the
 *            lookup code verifies the same way. No peer is involved, so it
 *            rings no doorbell. The server's liveness word in the region
 *            header (common/layout.h) keeps a dead server's region, still
 *            mapped here, from being served.
 *   send()   requests are built in place in the request ring (send_buf()
 *            points into the slot: zero copy) and published with one release
 *            store per batch = one doorbell, plus one wake-up byte on the
 *            socket only when the server's worker said it is sleeping. The
 *            first send_buf() or staging() of a batch announces the writing
 *            (the server gives an idle connection's pages back meanwhile:
 *            shm_ring.h), send() ends it.
 *   recv()   takes a reply that is there at once (no clock read: the
 *            pipeline's non-blocking poll), else busy-polls the reply ring
 *            briefly, then sleeps on the socket, which also reports the
 *            server's death (hang-up).
 *
 * The server is trusted with data (it owns the table) but not with our
 * memory safety: ring positions and lengths it writes are validated too.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm_ring.h"
#include "transport.h"
#include "util.h"

#define SHM_SPIN_NS      200000ull     /* busy-poll this long before sleeping (as the server) */
#define SHM_TRIM_WAIT_NS 1000000000ull /* longest wait for the server to give pages back */

struct shm_ctrans {
    struct rkv_ctrans ctrans;            /* first: what the ops take (transport.h) */
    int sock;                            /* unix socket: wake-ups, and hang-up = server gone */
    struct rkv_trans_counters *counters; /* the caller's, or `own_counters` */
    struct rkv_trans_counters own_counters;
    const uint8_t *region; /* PROT_READ mapping of the table region */
    uint64_t region_size;
    void *area;                /* connection memfd mapping */
    struct rkv_shm_ctrl *ctrl; /* = area */
    struct rkv_shm_layout layout;
    struct rkv_shm_ring req; /* producer side */
    struct rkv_shm_ring rep; /* consumer side */
    unsigned taken;          /* replies handed out by recv(), not yet released */
    bool writing;            /* client_writing announced: slots or staging being written */
    uint8_t *local;          /* read landing buffer (private) */
    size_t local_len;
    bool broken; /* the server hung up or broke the protocol */
};

static inline struct shm_ctrans *shm_ctrans_of(struct rkv_ctrans *ctrans)
{
    return RKV_CONTAINER_OF(ctrans, struct shm_ctrans, ctrans);
}

static void shm_close(struct rkv_ctrans *ctrans)
{
    if (ctrans == NULL)
        return;
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    if (t->region != NULL)
        munmap((void *)t->region, t->region_size);
    if (t->area != NULL)
        munmap(t->area, t->layout.total);
    if (t->local != NULL)
        munmap(t->local, t->local_len);
    if (t->sock >= 0)
        close(t->sock);
    free(t);
}

/* connect() with a deadline: a server whose backlog is full answers EAGAIN. */
static rkv_status sock_connect(struct shm_ctrans *t, const char *path, uint64_t deadline, char *err,
                               size_t err_len)
{
    struct sockaddr_un sa;
    size_t plen = strlen(path);

    if (plen == 0 || plen >= sizeof sa.sun_path) {
        snprintf(err, err_len,
                 "shm address must be a socket path of 1..%zu bytes (shm://PATH), "
                 "got %zu bytes",
                 sizeof sa.sun_path - 1, plen);
        return RKV_INVALID;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, plen + 1);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1);

    t->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (t->sock < 0) {
        snprintf(err, err_len, "socket(AF_UNIX, SOCK_SEQPACKET): %s", strerror(errno));
        return RKV_CONNECTION;
    }
    for (;;) {
        if (connect(t->sock, (struct sockaddr *)&sa, salen) == 0)
            return RKV_OK;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN || rkv_now_ns() >= deadline)
            break;
        usleep(1000);
    }
    snprintf(err, err_len, "cannot connect: %s%s", strerror(errno),
             errno == ENOENT || errno == ECONNREFUSED ? "; is rkv-server running with this "
                                                        "shm listen path?"
             : errno == EACCES ? "; the client needs write permission on the "
                                 "socket (join the server's group)"
                               : "");
    return errno == EAGAIN ? RKV_TIMEOUT : RKV_CONNECTION;
}

/* Wait until `sock` is readable or `deadline` passes. Returns RKV_OK when
 * readable, RKV_TIMEOUT, or RKV_CONNECTION on a poll error. */
static rkv_status wait_readable(int sock, uint64_t deadline)
{
    for (;;) {
        uint64_t now = rkv_now_ns();
        if (now >= deadline)
            return RKV_TIMEOUT;
        int ms = (int)RKV_MIN((deadline - now + 999999) / 1000000, (uint64_t)INT32_MAX);
        struct pollfd pfd = { .fd = sock, .events = POLLIN | POLLRDHUP };
        int rc = poll(&pfd, 1, ms);
        if (rc > 0)
            return RKV_OK;
        if (rc < 0 && errno != EINTR)
            return RKV_CONNECTION;
    }
}

/* Map the descriptors the server sent and check them against its message. */
static rkv_status map_conn(struct shm_ctrans *t, const struct rkv_shm_accept_msg *m, const int *fds,
                           char *err, size_t err_len)
{
    struct stat st;
    rkv_status rc = rkv_shm_layout_init(&t->layout, m->credits, m->max_msg, m->staging_size, err,
                                        err_len);
    if (rc != RKV_OK)
        return RKV_PROTOCOL;
    if (fstat(fds[0], &st) != 0 || (uint64_t)st.st_size < m->region_size ||
        m->region_size < RKV_HEADER_SIZE || m->region_size > SIZE_MAX) {
        snprintf(err, err_len,
                 "shm server sent a region of %llu bytes that its memfd does not "
                 "back; upgrade or restart the server",
                 (unsigned long long)m->region_size);
        return RKV_PROTOCOL;
    }
    if (fstat(fds[1], &st) != 0 || m->conn_size != t->layout.total ||
        (uint64_t)st.st_size < t->layout.total) {
        snprintf(err, err_len,
                 "shm connection memory is %llu bytes, expected %zu; use "
                 "matching client and server builds",
                 (unsigned long long)m->conn_size, t->layout.total);
        return RKV_PROTOCOL;
    }
    void *region = mmap(NULL, m->region_size, PROT_READ, MAP_SHARED, fds[0], 0);
    if (region == MAP_FAILED) {
        snprintf(err, err_len, "cannot map the %llu-byte region read-only: %s",
                 (unsigned long long)m->region_size, strerror(errno));
        return RKV_NO_MEMORY;
    }
    t->region = region;
    t->region_size = m->region_size;
    void *area = mmap(NULL, t->layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    if (area == MAP_FAILED) {
        snprintf(err, err_len, "cannot map the shm connection memory: %s", strerror(errno));
        return RKV_NO_MEMORY;
    }
    t->area = area;
    t->ctrl = rkv_shm_ctrl_of(area);
    rkv_shm_ring_init(&t->req, area, &t->layout, RKV_SHM_REQUESTS);
    rkv_shm_ring_init(&t->rep, area, &t->layout, RKV_SHM_REPLIES);
    return RKV_OK;
}

/* Send our connect message and take the server's answer and descriptors. */
static rkv_status handshake(struct shm_ctrans *t, uint64_t deadline, char *err, size_t err_len)
{
    struct rkv_shm_connect_msg hello = {
        .magic = RKV_SHM_MAGIC,
        .version = RKV_SHM_VERSION,
        .pid = (uint32_t)getpid(),
    };
    struct rkv_shm_accept_msg m;
    int fds[RKV_SHM_CONN_FDS] = { -1, -1 };
    unsigned nfds = 0;
    size_t got = 0;
    rkv_status rc;

    int e = rkv_shm_send_fds(t->sock, &hello, sizeof hello, NULL, 0);
    if (e != 0) {
        snprintf(err, err_len, "sending the connect message failed: %s", strerror(-e));
        return RKV_CONNECTION;
    }
    for (;;) {
        rc = wait_readable(t->sock, deadline);
        if (rc != RKV_OK) {
            snprintf(err, err_len,
                     "no answer from the server within the timeout; is it "
                     "stopped or overloaded?");
            return rc;
        }
        e = rkv_shm_recv_fds(t->sock, &m, sizeof m, &got, fds, RKV_SHM_CONN_FDS, &nfds);
        if (e != -EAGAIN)
            break;
    }
    if (e == -ECONNRESET || (e == 0 && got == 0)) {
        /* a server short of handshake slots or descriptors hangs up */
        snprintf(err, err_len,
                 "the server closed the connection before answering "
                 "(busy: out of connection slots or file descriptors?); retry later");
        rc = RKV_SERVER_BUSY;
        goto done;
    }
    if (e != 0 || got != sizeof m || m.magic != RKV_SHM_MAGIC) {
        snprintf(err, err_len, "the server sent a bad answer (%s); is it an rkv server?",
                 e ? strerror(-e) : "bad message");
        rc = RKV_PROTOCOL;
        goto done;
    }
    m.reason[sizeof m.reason - 1] = '\0';
    if (m.version != RKV_SHM_VERSION) {
        snprintf(err, err_len,
                 "the server speaks shm transport version %u, this client %u; "
                 "use matching builds",
                 m.version, RKV_SHM_VERSION);
        rc = RKV_VERSION_MISMATCH;
        goto done;
    }
    if (m.status != RKV_OK) {
        snprintf(err, err_len, "the server refused the connection: %s", m.reason);
        rc = m.status < RKV_STATUS_COUNT ? (rkv_status)m.status : RKV_PROTOCOL;
        goto done;
    }
    if (nfds != RKV_SHM_CONN_FDS) {
        snprintf(err, err_len, "the server sent %u descriptors, expected %u", nfds, RKV_SHM_CONN_FDS);
        rc = RKV_PROTOCOL;
        goto done;
    }
    rc = map_conn(t, &m, fds, err, err_len);

done:
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]); /* the mappings keep the memory */
    return rc;
}

static rkv_status shm_connect(const char *addr, const struct rkv_ctrans_params *p,
                              struct rkv_trans_counters *counters, struct rkv_ctrans **out,
                              char *err, size_t err_len)
{
    struct shm_ctrans *t;
    struct rkv_ctrans_params params;
    rkv_status rc;

    *out = NULL;
    rc = rkv_ctrans_params_resolve(p, &params, err, err_len);
    if (rc != RKV_OK)
        return rc;
    if (addr == NULL) {
        snprintf(err, err_len, "shm address missing; use shm://PATH");
        return RKV_INVALID;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, err_len, "out of memory for an shm connection");
        return RKV_NO_MEMORY;
    }
    t->sock = -1;
    t->counters = counters != NULL ? counters : &t->own_counters;
    uint64_t deadline = rkv_now_ns() + (uint64_t)params.timeout_ms * 1000000ull;

    rc = sock_connect(t, addr, deadline, err, err_len);
    if (rc != RKV_OK)
        goto fail;
    rc = handshake(t, deadline, err, err_len);
    if (rc != RKV_OK)
        goto fail;
    t->local_len = RKV_ALIGN_UP(params.local_buf_size, 4096);
    void *local = mmap(NULL, t->local_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                       0);
    if (local == MAP_FAILED) {
        snprintf(err, err_len, "cannot allocate a %zu-byte read buffer: %s", t->local_len,
                 strerror(errno));
        rc = RKV_NO_MEMORY;
        goto fail;
    }
    t->local = local;
    *out = &t->ctrans;
    return RKV_OK;

fail:
    shm_close(&t->ctrans);
    return rc;
}

static rkv_status shm_set_region(struct rkv_ctrans *ctrans, const struct rkv_hello *h, char *err,
                                 size_t err_len)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    if (h->region_size != t->region_size) {
        snprintf(err, err_len,
                 "the server's HELLO names a %llu-byte region but its shm memfd "
                 "has %llu bytes; the socket may belong to a different server instance, "
                 "restart the client",
                 (unsigned long long)h->region_size, (unsigned long long)t->region_size);
        return RKV_PROTOCOL;
    }
    if (h->credits == 0 || h->credits > t->layout.credits || h->max_msg > t->layout.max_msg) {
        snprintf(err, err_len,
                 "the server's HELLO offers %u credits of %u bytes but its shm "
                 "rings hold %u of %u; use matching client and server builds",
                 h->credits, h->max_msg, t->layout.credits, t->layout.max_msg);
        return RKV_PROTOCOL;
    }
    return RKV_OK;
}

/* A read is a memcpy: round trips are free, every read costs its bytes. */
static enum rkv_read_cost shm_read_cost(struct rkv_ctrans *ctrans)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    (void)t;
    return RKV_COST_PER_READ;
}

static void *shm_local_buf(struct rkv_ctrans *ctrans, size_t *len)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    *len = t->local_len;
    return t->local;
}

/* The reads of ops[] into local (local_len bytes), checked and fenced;
 * RKV_CONNECTION once the server is gone. Touches nothing in t but what
 * connect() set: any thread may run it. */
static rkv_status read_into(const struct shm_ctrans *t, const struct rkv_read_op *ops, unsigned n,
                            const void *local, size_t local_len)
{
    /* Several reads are one round trip: every source line on its way before
     * the first copy waits for its own, so the misses of a pass's GETs
     * overlap as the READs of one doorbell do on a NIC. */
    for (unsigned i = 0; n > 1 && i < n; i++)
        if (ops[i].offset < t->region_size)
            __builtin_prefetch(t->region + ops[i].offset);
    for (unsigned i = 0; i < n; i++) {
        const struct rkv_read_op *op = &ops[i];
        uintptr_t dst = (uintptr_t)op->dst, lo = (uintptr_t)local;
        /* The same limits an RDMA READ has: inside the region, and landing in
         * the registered local buffer (so shm catches what rdma would). */
        if (op->offset > t->region_size || op->len > t->region_size - op->offset || dst < lo ||
            op->len > local_len || dst - lo > local_len - op->len)
            return RKV_INVALID;
        memcpy(op->dst, t->region + op->offset, op->len);
    }
    /* Later reads must not be satisfied before these (what the completion of
     * one RDMA round trip guarantees). */
    atomic_thread_fence(memory_order_acquire);
    /* The mapping outlives its server: after a crash it would still serve the
     * dead server's data. The server's liveness word (one load, kept by the
     * kernel even across SIGKILL) says whether what we copied is still served;
     * RDMA gets the same from its queue pair breaking. */
    if (!rkv_region_server_alive((const struct rkv_region_header *)(const void *)t->region))
        return RKV_CONNECTION;
    return RKV_OK;
}

static rkv_status shm_read(struct rkv_ctrans *ctrans, const struct rkv_read_op *ops, unsigned n)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    if (t->broken)
        return RKV_CONNECTION;
    rkv_status st = read_into(t, ops, n, t->local, t->local_len);
    if (RKV_UNLIKELY(st != RKV_OK)) {
        t->broken = st == RKV_CONNECTION;
        return st;
    }
    t->counters->reads += n;
    t->counters->read_round_trips += 1;
    return RKV_OK;
}

static rkv_status shm_read_shared(struct rkv_ctrans *ctrans, unsigned reader,
                                  const struct rkv_read_op *ops, unsigned n, const void *local,
                                  size_t local_len)
{
    (void)reader; /* a copy: every thread reads the mapping itself */
    return read_into(shm_ctrans_of(ctrans), ops, n, local, local_len);
}

/* An item's first and last line on their way (both lines of a small one;
 * the copy of a longer one streams between them). */
static void shm_prefetch(struct rkv_ctrans *ctrans, uint64_t offset, uint32_t len)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    if (offset < t->region_size && len != 0 && len <= t->region_size - offset) {
        __builtin_prefetch(t->region + offset);
        __builtin_prefetch(t->region + offset + len - 1);
    }
}

/* Before writing request slots or staging: see shm_ring.h, "Giving pages
 * back". With a request out whose reply we have not released, the server
 * cannot be giving pages back (it waits for our reply head to catch up),
 * so a pipelined client pays no fence. A server that never lets go breaks
 * the connection. */
static void begin_writing(struct shm_ctrans *t)
{
    if (t->writing || t->req.pos != t->rep.pos)
        return;
    t->writing = true;
    if (!rkv_shm_write_begin(t->ctrl, SHM_TRIM_WAIT_NS))
        t->broken = true;
}

static void end_writing(struct shm_ctrans *t)
{
    if (t->writing)
        rkv_shm_write_end(t->ctrl);
    t->writing = false;
}

static void *shm_send_buf(struct rkv_ctrans *ctrans, unsigned i)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    if (i >= t->layout.credits)
        return NULL;
    begin_writing(t);
    return rkv_shm_ring_slot(&t->req, i);
}

static rkv_status publish(struct shm_ctrans *t, const uint32_t *lens, unsigned n)
{
    if (t->broken)
        return RKV_CONNECTION;
    if (n == 0)
        return RKV_OK;
    /* Credits: a request holds its credit until recv_done() releases its
     * reply (the reply ring slot is only free then). */
    uint64_t outstanding = t->req.pos - t->rep.pos;
    if (outstanding + n > t->layout.credits)
        return RKV_INVALID;
    int space = rkv_shm_ring_space(&t->req);
    if (space < 0 || (unsigned)space < n) {
        t->broken = true; /* only a broken server lags behind its replies */
        return RKV_PROTOCOL;
    }
    for (unsigned i = 0; i < n; i++)
        if (lens[i] > t->layout.max_msg)
            return RKV_INVALID;
    rkv_shm_ring_publish(&t->req, lens, n);
    t->counters->doorbells += 1;
    t->counters->sends += n;
    /* Every shm message travels in the ring itself: the analogue of inline. */
    t->counters->inline_sends += n;
    if (rkv_shm_peer_sleeping(&t->ctrl->server_sleeping) && rkv_shm_wake(t->sock) != 0) {
        t->broken = true;
        return RKV_CONNECTION;
    }
    return RKV_OK;
}

static rkv_status shm_send(struct rkv_ctrans *ctrans, const uint32_t *lens, unsigned n)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    rkv_status st = publish(t, lens, n);
    end_writing(t); /* after the publish: the server must not trim under it */
    return st;
}

/* The next reply if one is there: RKV_OK with *msg set, RKV_TIMEOUT when
 * none yet, RKV_PROTOCOL when the server broke the ring. */
static rkv_status try_recv(struct shm_ctrans *t, const void **msg, size_t *len)
{
    int ready = rkv_shm_ring_ready(&t->rep);
    if (ready < 0)
        return RKV_PROTOCOL;
    if ((unsigned)ready <= t->taken)
        return RKV_TIMEOUT;
    uint32_t n;
    const void *m = rkv_shm_ring_peek(&t->rep, t->taken, &n);
    if (m == NULL)
        return RKV_PROTOCOL;
    t->taken++;
    *msg = m;
    *len = n;
    return RKV_OK;
}

static rkv_status shm_recv(struct rkv_ctrans *ctrans, const void **msg, size_t *len,
                           unsigned timeout_ms)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    rkv_status rc;
    if (t->broken)
        return RKV_CONNECTION;
    /* A reply already there, or a poll that may not wait (timeout 0): no
     * clock read, no sleep announcement (its fence) — the pipeline's
     * non-blocking check on every pass with a reply awaited. */
    rc = try_recv(t, msg, len);
    if (rc != RKV_TIMEOUT || timeout_ms == 0)
        goto out;
    uint64_t start = rkv_now_ns();
    uint64_t deadline = start + (uint64_t)timeout_ms * 1000000ull;
    uint64_t spin_end = start + RKV_MIN(SHM_SPIN_NS, (uint64_t)timeout_ms * 1000000ull);

    unsigned spins = 0;
    do {
        rc = try_recv(t, msg, len);
        if (rc != RKV_TIMEOUT)
            goto out;
        rkv_shm_cpu_relax();
        /* If the server's worker shares our CPU (a wake-up can put us on its
         * core), spinning only delays it: yield now and then so it runs. */
        if (++spins % 8 == 0)
            sched_yield();
    } while (rkv_now_ns() < spin_end);

    for (;;) {
        rkv_shm_sleep_announce(&t->ctrl->client_sleeping);
        rc = try_recv(t, msg, len);
        if (rc != RKV_TIMEOUT)
            break;
        uint64_t now = rkv_now_ns();
        if (now >= deadline)
            break;
        int ms = (int)RKV_MIN((deadline - now + 999999) / 1000000, (uint64_t)INT32_MAX);
        struct pollfd pfd = { .fd = t->sock, .events = POLLIN | POLLRDHUP };
        int prc = poll(&pfd, 1, ms);
        if (prc < 0 && errno != EINTR) {
            rc = RKV_CONNECTION;
            break;
        }
        bool gone = prc > 0 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
        if (prc > 0 && !rkv_shm_drain(t->sock))
            gone = true;
        if (gone) {
            /* Replies published before the server went away still count. */
            rc = try_recv(t, msg, len);
            if (rc == RKV_TIMEOUT)
                rc = RKV_CONNECTION;
            break;
        }
    }
    rkv_shm_sleep_cancel(&t->ctrl->client_sleeping);
out:
    if (rc == RKV_PROTOCOL || rc == RKV_CONNECTION)
        t->broken = true;
    return rc;
}

static void shm_recv_done(struct rkv_ctrans *ctrans)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    if (t->taken == 0)
        return;
    rkv_shm_ring_release(&t->rep, t->taken);
    t->taken = 0;
}

static uint32_t shm_clock(struct rkv_ctrans *ctrans)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    const struct rkv_region_header *h = (const void *)t->region;
    uint64_t c = __atomic_load_n(&h->clock, __ATOMIC_RELAXED);
    return c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
}

static void *shm_staging(struct rkv_ctrans *ctrans, size_t *cap, struct rkv_remote_buf *desc)
{
    struct shm_ctrans *t = shm_ctrans_of(ctrans);
    begin_writing(t); /* the caller may copy a value in now */
    desc->addr = 0;   /* offsets within the staging area */
    desc->rkey = 0;
    desc->len = 0;
    *cap = t->layout.staging_size;
    return (uint8_t *)t->area + t->layout.staging_off;
}

const struct rkv_client_transport rkv_shm_client_transport = {
    .scheme = "shm",
    .read_cost = shm_read_cost,
    .connect = shm_connect,
    .set_region = shm_set_region,
    .local_buf = shm_local_buf,
    .read = shm_read,
    .read_shared = shm_read_shared,
    .prefetch = shm_prefetch,
    .send_buf = shm_send_buf,
    .send = shm_send,
    .recv = shm_recv,
    .recv_done = shm_recv_done,
    .clock = shm_clock,
    .staging = shm_staging,
    .close = shm_close,
};
