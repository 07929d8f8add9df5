/* shm_server.c — the server side of the shm transport (rkv_shm_server_transport).
 *
 * Same host, no NIC. The listener is a SOCK_SEQPACKET unix socket. A client
 * connects and sends an rkv_shm_connect_msg; the server answers with an
 * rkv_shm_accept_msg and two descriptors (SCM_RIGHTS): the table region
 * reopened O_RDONLY (the client can map it PROT_READ only, so a GET is a
 * one-sided memcpy the server CPU never sees) and a per-connection memfd with
 * the control block, the two rings and the staging area (common/shm_ring.h).
 * The connection's unix socket then carries only 1-byte wake-ups and, by
 * hanging up, the news that the peer died.
 *
 * Trust (design.md invariant 5): the connection memfd is writable by the client
 * at any moment. The server keeps its ring positions privately, reads each
 * peer-owned word once and validates it, copies every request into private
 * memory before handing it out, bounds-checks rendezvous descriptors, and
 * seals the memfd so the client cannot shrink it under the server (SIGBUS).
 * Any violation marks the connection dead; the worker then closes it.
 *
 * Memory (design.md, "Connection memory"): a connection's pages cost only
 * once touched, and a connection idle for SHM_TRIM_IDLE_NS gives back its
 * ring, staging and request-copy pages (the handshake in shm_ring.h keeps
 * that from racing the client's writes), so an idle connection costs the
 * control block's page and its structures.
 *
 * Never blocking on a client: the listener handles handshakes through an
 * epoll set of half-open sockets (a peer that connects and stays silent only
 * occupies a pending slot until it times out; the server calls accept at
 * least once a second so that happens with no other peer around; out of
 * descriptors, a reserve one lets it answer "busy"), and all socket I/O uses
 * MSG_DONTWAIT | MSG_NOSIGNAL, which no flag the client sets on its own end
 * can change.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "region.h"
#include "shm_ring.h"
#include "transport.h"
#include "util.h"

#define SHM_DEFAULT_STAGING (1u << 20)
#define SHM_MAX_PENDING     64u /* half-open handshakes at once */
#define SHM_HANDSHAKE_NS    (2ull * 1000000000ull)
#define SHM_ALIVE_CHECK_NS  (5ull * 1000000ull)
#define SHM_TRIM_IDLE_NS    (200ull * 1000000ull) /* idle this long: pages go back */
#define SHM_BACKLOG         128

/* Live-connection count shared by a listener and the connections it made,
 * so a connection may outlive its listener. */
struct shm_quota {
    _Atomic unsigned refs; /* the listener + each connection */
    _Atomic unsigned live; /* connections not yet closed */
    unsigned max;          /* max_conns */
};

/* A connected socket that has not sent its connect message yet. */
struct shm_pending {
    int fd;
    uint64_t deadline_ns; /* dropped when still silent at this time */
};

struct shm_listener {
    struct rkv_listener listener; /* first: what the ops take (transport.h) */
    int sock;                     /* listening unix socket */
    int epfd;                     /* sock + pending sockets; listener_fd() */
    int region_fd;                /* O_RDONLY region descriptor handed to clients */
    uint64_t region_size;         /* bytes clients map */
    struct rkv_shm_layout layout; /* every connection memfd's layout */
    struct shm_quota *quota;
    _Atomic uint64_t *rejected; /* the server's refusal counter, or NULL */
    int spare_fd;               /* reserve descriptor: closed to answer "busy" on EMFILE */
    uint64_t (*now_ns)(void);   /* handshake deadlines' clock (rkv_strans_params) */
    struct shm_pending pending[SHM_MAX_PENDING];
    unsigned npending;
    uint64_t last_accept_warn_ns; /* rate limit for accept() failure logs */
    dev_t sock_dev;               /* identity of the socket file we created, */
    ino_t sock_ino;               /*   so close only unlinks our own */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

struct shm_sconn {
    struct rkv_sconn sconn; /* first: what the ops take (transport.h) */
    int sock;               /* wake-ups both ways; HUP = peer died */
    struct shm_quota *quota;
    void *area;                /* connection memfd mapping (hostile memory) */
    struct rkv_shm_ctrl *ctrl; /* = area */
    struct rkv_shm_layout layout;
    struct rkv_shm_ring req;      /* consumer side; req.pos is private */
    struct rkv_shm_ring rep;      /* producer side; rep.pos is private */
    uint8_t *copies;              /* private copy of each polled request, one slot_stride each */
    size_t copies_len;            /* bytes of its own anonymous mapping */
    unsigned owed;                /* requests polled and not yet replied */
    bool dead;                    /* peer gone or broke the protocol */
    bool active;                  /* took requests since the last alive check */
    bool trimmed;                 /* pages given back and no request since */
    uint64_t idle_since_ns;       /* last alive check that saw it active */
    uint64_t next_alive_check_ns; /* rate limit for the socket HUP check */
    char peer[64];                /* "shm pid N uid N" */
};

static inline struct shm_listener *shm_listener_of(struct rkv_listener *listener)
{
    return RKV_CONTAINER_OF(listener, struct shm_listener, listener);
}

static inline struct shm_sconn *shm_sconn_of(struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, struct shm_sconn, sconn);
}

/* ------------------------------------------------------------- quota */

static void quota_put(struct shm_quota *q)
{
    if (atomic_fetch_sub(&q->refs, 1) == 1)
        free(q);
}

/* -------------------------------------------------------- connections */

#define SHM_PEER_HANGUP "peer closed its socket"

/* A protocol violation is worth a warning; a peer that hung up is routine
 * (the worker logs the close) and only shows at debug level. */
static void conn_mark_dead(struct shm_sconn *c, const char *why)
{
    if (!c->dead && strcmp(why, SHM_PEER_HANGUP) == 0)
        RKV_DEBUG("shm: dropping connection %s: %s", c->peer, why);
    else if (!c->dead)
        RKV_WARN("shm: dropping connection %s: %s", c->peer, why);
    c->dead = true;
}

/* The place is given back before the socket closes: a peer that sees the
 * hang-up and reconnects at once must not be refused "busy" for a place
 * this connection still seemed to hold. */
static void shm_conn_close(struct rkv_sconn *sconn)
{
    if (sconn == NULL)
        return;
    struct shm_sconn *c = shm_sconn_of(sconn);
    if (c->area != NULL)
        munmap(c->area, c->layout.total);
    if (c->copies != NULL)
        munmap(c->copies, c->copies_len);
    atomic_fetch_sub(&c->quota->live, 1);
    if (c->sock >= 0)
        close(c->sock);
    quota_put(c->quota);
    free(c);
}

/* A sealed memfd of `size` bytes: the client can neither shrink it (which
 * would SIGBUS the server) nor grow it. */
static int conn_memfd(size_t size)
{
    int fd = memfd_create("rkv-shm-conn", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Tell the peer why it is turned away; "busy" refusals are counted. The
 * caller closes fd next: what the peer sent and we never read is taken off
 * the socket first, or closing it would reset the connection and the peer
 * would see "connection reset" instead of the reason. */
static void refuse(struct shm_listener *l, int fd, rkv_status st, const char *reason)
{
    struct rkv_shm_accept_msg m;
    char unread[sizeof(struct rkv_shm_connect_msg)];
    if (st == RKV_SERVER_BUSY && l->rejected != NULL)
        atomic_fetch_add(l->rejected, 1);
    memset(&m, 0, sizeof m);
    m.magic = RKV_SHM_MAGIC;
    m.version = RKV_SHM_VERSION;
    m.status = st;
    snprintf(m.reason, sizeof m.reason, "%s", reason);
    (void)rkv_shm_send_fds(fd, &m, sizeof m, NULL, 0);
    for (int i = 0; i < 8 && recv(fd, unread, sizeof unread, MSG_DONTWAIT) > 0; i++)
        ; /* bounded: a peer that keeps sending just gets the reset */
}

/* Build a connection for socket `fd` (whose connect message was valid) and
 * send the client its descriptors. Takes ownership of fd either way. */
static struct shm_sconn *shm_conn_create(struct shm_listener *l, int fd)
{
    struct shm_sconn *c = NULL;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    int memfd = -1;
    char reason[RKV_SHM_REASON_LEN];

    if (atomic_fetch_add(&l->quota->live, 1) >= l->quota->max) {
        atomic_fetch_sub(&l->quota->live, 1);
        snprintf(reason, sizeof reason,
                 "server has its maximum of %u shm connections; "
                 "retry later or raise max_conns",
                 l->quota->max);
        refuse(l, fd, RKV_SERVER_BUSY, reason);
        RKV_WARN("shm: refused a client: %s", reason);
        close(fd);
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL)
        goto fail;
    c->sock = fd;
    c->quota = l->quota;
    atomic_fetch_add(&l->quota->refs, 1);
    c->layout = l->layout;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
        snprintf(c->peer, sizeof c->peer, "shm pid %d uid %u", (int)cred.pid, (unsigned)cred.uid);
    else
        snprintf(c->peer, sizeof c->peer, "shm pid ?");

    /* Its own mapping, not the heap: untouched pages cost nothing, and
     * conn_trim() can give touched ones back. */
    c->copies_len = RKV_ALIGN_UP(c->layout.slot_stride * c->layout.credits, 4096);
    c->copies = mmap(NULL, c->copies_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->copies == MAP_FAILED) {
        c->copies = NULL;
        goto fail;
    }
    memfd = conn_memfd(c->layout.total);
    if (memfd < 0)
        goto fail;
    c->area = mmap(NULL, c->layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (c->area == MAP_FAILED) {
        c->area = NULL;
        goto fail;
    }
    c->ctrl = rkv_shm_ctrl_of(c->area);
    rkv_shm_ring_init(&c->req, c->area, &c->layout, RKV_SHM_REQUESTS);
    rkv_shm_ring_init(&c->rep, c->area, &c->layout, RKV_SHM_REPLIES);

    struct rkv_shm_accept_msg m;
    memset(&m, 0, sizeof m);
    m.magic = RKV_SHM_MAGIC;
    m.version = RKV_SHM_VERSION;
    m.status = RKV_OK;
    m.credits = c->layout.credits;
    m.max_msg = c->layout.max_msg;
    m.region_size = l->region_size;
    m.staging_size = c->layout.staging_size;
    m.conn_size = c->layout.total;
    int fds[RKV_SHM_CONN_FDS] = { l->region_fd, memfd };
    int rc = rkv_shm_send_fds(fd, &m, sizeof m, fds, RKV_SHM_CONN_FDS);
    if (rc != 0) {
        errno = -rc;
        goto fail;
    }
    close(memfd); /* the mapping and the client's copy keep it alive */
    c->idle_since_ns = rkv_now_ns();
    c->next_alive_check_ns = c->idle_since_ns + SHM_ALIVE_CHECK_NS;
    c->trimmed = true; /* a fresh memfd: nothing touched yet */
    RKV_DEBUG("shm: accepted %s (%u credits, %u-byte messages)", c->peer, c->layout.credits,
              c->layout.max_msg);
    return c;

fail:
    snprintf(reason, sizeof reason,
             "server could not set up the connection (%s); "
             "busy, retry later",
             strerror(errno));
    RKV_WARN("shm: could not set up a connection for %s: %s", c != NULL ? c->peer : "a client",
             strerror(errno));
    refuse(l, fd, RKV_SERVER_BUSY, reason);
    if (memfd >= 0)
        close(memfd);
    if (c != NULL) {
        shm_conn_close(&c->sconn); /* closes fd, gives the quota back */
    } else {
        atomic_fetch_sub(&l->quota->live, 1);
        close(fd);
    }
    return NULL;
}

/* ---------------------------------------------------------- listener */

static void pending_remove(struct shm_listener *l, unsigned i, bool close_fd)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->pending[i].fd, NULL);
    if (close_fd)
        close(l->pending[i].fd);
    l->pending[i] = l->pending[--l->npending];
}

static int pending_find(const struct shm_listener *l, int fd)
{
    for (unsigned i = 0; i < l->npending; i++)
        if (l->pending[i].fd == fd)
            return (int)i;
    return -1;
}

/* Out of descriptors: give the reserve one up to accept the peer, tell it
 * "busy" and close it (rather than leave it hanging in the backlog, which
 * would also keep the listener readable forever), then take the reserve
 * back. Returns false when even that fails. */
static bool refuse_without_fds(struct shm_listener *l)
{
    if (l->spare_fd < 0)
        return false;
    close(l->spare_fd);
    int fd = accept4(l->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
        refuse(l, fd, RKV_SERVER_BUSY, "server is out of file descriptors; busy, retry later");
        close(fd);
    }
    l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
}

static void accept_new(struct shm_listener *l)
{
    for (;;) {
        int fd = accept4(l->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED)
                continue;
            uint64_t now = rkv_now_ns();
            if (e != EAGAIN && e != EWOULDBLOCK && now - l->last_accept_warn_ns > 1000000000ull) {
                /* once a second at most: EMFILE repeats until fds free up */
                RKV_WARN("shm: accept on %s failed: %s%s", l->path, strerror(e),
                         e == EMFILE || e == ENFILE ? "; refusing clients as busy; raise the "
                                                      "open-files limit (ulimit -n / LimitNOFILE)"
                                                    : "");
                l->last_accept_warn_ns = now;
            }
            if ((e == EMFILE || e == ENFILE) && refuse_without_fds(l))
                continue;
            return;
        }
        struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = fd };
        if (l->npending == SHM_MAX_PENDING) {
            refuse(l, fd, RKV_SERVER_BUSY, "too many shm handshakes in progress; busy, retry");
            close(fd);
            continue;
        }
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            RKV_WARN("shm: epoll_ctl for a new client failed: %s", strerror(errno));
            close(fd);
            continue;
        }
        l->pending[l->npending].fd = fd;
        l->pending[l->npending].deadline_ns = l->now_ns() + SHM_HANDSHAKE_NS;
        l->npending++;
    }
}

/* Advance pending handshake i. Returns a connection, or NULL when it is
 * still waiting or was dropped. */
static struct shm_sconn *handshake(struct shm_listener *l, unsigned i)
{
    int fd = l->pending[i].fd;
    struct rkv_shm_connect_msg m;
    size_t got;
    unsigned nfds;
    int unused_fds[1];

    int rc = rkv_shm_recv_fds(fd, &m, sizeof m, &got, unused_fds, 0, &nfds);
    if (rc == -EAGAIN || rc == -EWOULDBLOCK)
        return NULL;
    pending_remove(l, i, false);
    if (rc != 0 || got != sizeof m || m.magic != RKV_SHM_MAGIC) {
        RKV_WARN("shm: dropped a client on %s that sent no valid connect message", l->path);
        close(fd);
        return NULL;
    }
    if (m.version != RKV_SHM_VERSION) {
        char reason[RKV_SHM_REASON_LEN];
        snprintf(reason, sizeof reason,
                 "shm transport version %u, server speaks %u; "
                 "use matching rkv client and server builds",
                 m.version, RKV_SHM_VERSION);
        refuse(l, fd, RKV_VERSION_MISMATCH, reason);
        close(fd);
        return NULL;
    }
    return shm_conn_create(l, fd);
}

static void expire_pending(struct shm_listener *l)
{
    uint64_t now = l->now_ns();
    for (unsigned i = 0; i < l->npending;) {
        if (now >= l->pending[i].deadline_ns) {
            RKV_WARN("shm: dropped a client on %s that sent no connect message in time", l->path);
            pending_remove(l, i, true);
        } else {
            i++;
        }
    }
}

static rkv_status shm_accept(struct rkv_listener *listener, struct rkv_sconn **out)
{
    struct shm_listener *l = shm_listener_of(listener);
    struct epoll_event ev[16];

    *out = NULL;
    expire_pending(l);
    int n = epoll_wait(l->epfd, ev, (int)RKV_ARRAY_SIZE(ev), 0);
    for (int e = 0; e < n; e++) {
        if (ev[e].data.fd == l->sock) {
            accept_new(l);
            continue;
        }
        int i = pending_find(l, ev[e].data.fd);
        if (i < 0)
            continue;
        /* One connection per call; the level-triggered epoll set keeps the
         * rest readable for the next call. */
        struct shm_sconn *c = handshake(l, (unsigned)i);
        if (c != NULL) {
            *out = &c->sconn;
            return RKV_OK;
        }
    }
    return RKV_OK;
}

/* Staging must hold the largest value: one slab page per the region header,
 * and at least 1 MiB (a region without a valid header yet gets 1 MiB). */
static uint64_t staging_size_for(const struct rkv_region *region)
{
    uint64_t size = SHM_DEFAULT_STAGING;
    if (region->size >= sizeof(struct rkv_region_header)) {
        const struct rkv_region_header *h = region->base;
        if (h->magic == RKV_REGION_MAGIC && h->slab_page_size <= RKV_SHM_MAX_STAGING)
            size = RKV_MAX(size, (uint64_t)h->slab_page_size);
    }
    return size;
}

/* Make `path` free for bind(): fine if absent; a socket nobody listens on is
 * a leftover of a dead server and is removed; anything else is an error. */
static rkv_status clear_stale_socket(const char *path, const struct sockaddr_un *sa,
                                     socklen_t salen, char *err, size_t err_len)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return RKV_OK;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, err_len,
                 "shm://%s exists and is not a socket; remove it or choose "
                 "another path",
                 path);
        return RKV_INVALID;
    }
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) {
        snprintf(err, err_len, "socket(AF_UNIX): %s", strerror(errno));
        return RKV_INTERNAL;
    }
    int rc = connect(probe, (const struct sockaddr *)sa, salen);
    int e = errno;
    close(probe);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS) {
        snprintf(err, err_len,
                 "another server is already listening on shm://%s; stop it or "
                 "choose another path",
                 path);
        return RKV_INVALID;
    }
    if (e != ECONNREFUSED) {
        snprintf(err, err_len,
                 "cannot probe the existing socket shm://%s (%s); remove it if "
                 "no server uses it",
                 path, strerror(e));
        return RKV_INVALID;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, err_len, "cannot remove the stale socket shm://%s: %s", path, strerror(errno));
        return RKV_INVALID;
    }
    RKV_INFO("shm: removed the stale socket %s of a previous server", path);
    return RKV_OK;
}

static void shm_close_listener(struct rkv_listener *listener)
{
    struct stat st;
    if (listener == NULL)
        return;
    struct shm_listener *l = shm_listener_of(listener);
    while (l->npending > 0)
        pending_remove(l, 0, true);
    if (l->sock >= 0) {
        /* Unlink only the socket file we created, not a successor's. */
        if (l->path[0] != '\0' && lstat(l->path, &st) == 0 && st.st_dev == l->sock_dev &&
            st.st_ino == l->sock_ino)
            unlink(l->path);
        close(l->sock);
    }
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->region_fd >= 0)
        close(l->region_fd);
    if (l->spare_fd >= 0)
        close(l->spare_fd);
    if (l->quota != NULL)
        quota_put(l->quota);
    free(l);
}

/* params make_dir: the default socket lives in /run/rkv, which only systemd
 * creates (RuntimeDirectory=rkv); make a missing socket directory (one level). */
static void make_socket_dir(const char *path)
{
    char dir[sizeof((struct sockaddr_un *)0)->sun_path];
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path || (size_t)(slash - path) >= sizeof dir)
        return;
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    if (mkdir(dir, 0755) == 0)
        RKV_INFO("created the socket directory %s", dir);
}

static rkv_status shm_listen(const char *addr, const struct rkv_region *region,
                             const struct rkv_strans_params *p, struct rkv_listener **out,
                             char *err, size_t err_len)
{
    struct shm_listener *l = NULL;
    struct rkv_strans_params params;
    struct sockaddr_un sa;
    struct stat st;
    rkv_status st_rc = RKV_INVALID;
    size_t plen = addr != NULL ? strlen(addr) : 0;

    *out = NULL;
    rkv_strans_params_resolve(p, &params);
    p = &params;
    if (plen == 0 || plen >= sizeof sa.sun_path) {
        snprintf(err, err_len,
                 "shm listen address must be a socket path of 1..%zu bytes, "
                 "got %zu",
                 sizeof sa.sun_path - 1, plen);
        return RKV_INVALID;
    }
    if (region == NULL || region->fd < 0 || region->base == NULL || region->size == 0) {
        snprintf(err, err_len,
                 "the shm transport needs a memfd-backed region "
                 "(create it with rkv_region_create)");
        return RKV_INVALID;
    }
    l = calloc(1, sizeof *l);
    if (l == NULL) {
        snprintf(err, err_len, "out of memory for the shm listener");
        return RKV_NO_MEMORY;
    }
    l->sock = l->epfd = l->region_fd = -1;
    l->rejected = p->rejected;
    l->now_ns = p->now_ns != NULL ? p->now_ns : rkv_now_ns;
    l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    l->quota = calloc(1, sizeof *l->quota);
    if (l->quota == NULL) {
        snprintf(err, err_len, "out of memory for the shm listener");
        st_rc = RKV_NO_MEMORY;
        goto fail;
    }
    atomic_init(&l->quota->refs, 1);
    atomic_init(&l->quota->live, 0);
    l->quota->max = p->max_conns;
    st_rc = rkv_shm_layout_init(&l->layout, p->credits, p->max_msg, staging_size_for(region), err,
                                err_len);
    if (st_rc != RKV_OK)
        goto fail;

    l->region_fd = rkv_region_readonly_fd(region);
    if (l->region_fd < 0 || fstat(l->region_fd, &st) != 0 || (uint64_t)st.st_size < region->size) {
        snprintf(err, err_len,
                 "cannot reopen the region memfd read-only via /proc/self/fd "
                 "(%s); is /proc mounted?",
                 strerror(errno));
        st_rc = RKV_INTERNAL;
        goto fail;
    }
    l->region_size = region->size;

    if (p->make_dir)
        make_socket_dir(addr);
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, addr, plen + 1);
    memcpy(l->path, addr, plen + 1);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1);
    st_rc = clear_stale_socket(addr, &sa, salen, err, err_len);
    if (st_rc != RKV_OK)
        goto fail;

    st_rc = RKV_INVALID;
    l->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->sock < 0) {
        snprintf(err, err_len, "socket(AF_UNIX, SOCK_SEQPACKET): %s", strerror(errno));
        goto fail;
    }
    if (bind(l->sock, (struct sockaddr *)&sa, salen) != 0) {
        snprintf(err, err_len, "cannot bind shm://%s: %s%s", addr, strerror(errno),
                 errno == ENOENT   ? "; create its directory first"
                 : errno == EACCES ? "; the server needs write access to its directory"
                                   : "");
        goto fail;
    }
    /* 0660: the server's user and group may connect. Put clients in the
     * server's group (or the socket in a group-owned directory) to grant
     * access; they get the region read-only and every request is validated,
     * but anyone who connects can write to the cache. */
    if (chmod(addr, 0660) != 0 || lstat(addr, &st) != 0) {
        snprintf(err, err_len, "cannot set the mode of shm://%s: %s", addr, strerror(errno));
        unlink(addr);
        goto fail;
    }
    l->sock_dev = st.st_dev;
    l->sock_ino = st.st_ino;
    if (listen(l->sock, SHM_BACKLOG) != 0) {
        snprintf(err, err_len, "listen on shm://%s: %s", addr, strerror(errno));
        goto fail;
    }
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = l->sock };
    if (l->epfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->sock, &ev) != 0) {
        snprintf(err, err_len, "epoll setup for shm://%s: %s", addr, strerror(errno));
        goto fail;
    }
    char sz[32];
    RKV_INFO("shm: listening on %s (%u credits, %u-byte messages, %s staging per connection)", addr,
             l->layout.credits, l->layout.max_msg,
             rkv_format_size(l->layout.staging_size, sz, sizeof sz));
    *out = &l->listener;
    return RKV_OK;

fail:
    shm_close_listener(&l->listener);
    return st_rc;
}

static int shm_listener_fd(struct rkv_listener *listener)
{
    struct shm_listener *l = shm_listener_of(listener);
    return l->epfd;
}

static void shm_region_desc(struct rkv_listener *listener, uint32_t *rkey, uint64_t *addr)
{
    (void)listener;
    *rkey = 0; /* shm clients map the region; offsets are from its start */
    *addr = 0;
}

/* ------------------------------------------------------ request path */

static unsigned shm_poll(struct rkv_sconn *sconn, struct rkv_msg *msgs, unsigned max)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    if (c->dead)
        return 0;
    int ready = rkv_shm_ring_ready(&c->req);
    if (ready <= 0) {
        if (ready < 0)
            conn_mark_dead(c, "request ring tail out of range");
        return 0;
    }
    /* Take only requests whose replies are sure to fit: a client that does
     * not drain its replies stalls itself, never the server. */
    int space = rkv_shm_ring_space(&c->rep);
    if (space < 0) {
        conn_mark_dead(c, "reply ring head out of range");
        return 0;
    }
    unsigned room = (unsigned)space > c->owed ? (unsigned)space - c->owed : 0;
    unsigned n = RKV_MIN(RKV_MIN((unsigned)ready, max), room);
    for (unsigned i = 0; i < n; i++) {
        uint32_t len;
        const void *src = rkv_shm_ring_peek(&c->req, i, &len);
        if (src == NULL) {
            conn_mark_dead(c, "request longer than max_msg");
            return 0;
        }
        /* Private copy: the client may rewrite the slot while we parse. */
        uint8_t *dst = c->copies + ((c->req.pos + i) % c->layout.credits) * c->layout.slot_stride;
        memcpy(dst, src, len);
        msgs[i].data = dst;
        msgs[i].len = len;
    }
    rkv_shm_ring_release(&c->req, n);
    c->owed += n;
    c->active = true;
    return n;
}

/* Straight into the reply ring slot (zero copy). The client can read and
 * write this memory at any time: build the reply there, never read it back. */
static void *shm_reply_buf(struct rkv_sconn *sconn, unsigned i)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    if (i >= c->layout.credits)
        return NULL;
    return rkv_shm_ring_slot(&c->rep, i);
}

static rkv_status shm_reply(struct rkv_sconn *sconn, const uint32_t *lens, unsigned n)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    if (c->dead)
        return RKV_CONNECTION;
    if (n > c->owed) {
        RKV_ERROR("shm: %u replies for %u outstanding requests on %s (worker bug)", n, c->owed,
                  c->peer);
        return RKV_INTERNAL;
    }
    for (unsigned i = 0; i < n; i++) {
        if (lens[i] > c->layout.max_msg) {
            RKV_ERROR("shm: reply of %u bytes exceeds max_msg %u on %s (worker bug)", lens[i],
                      c->layout.max_msg, c->peer);
            return RKV_INTERNAL;
        }
    }
    rkv_shm_ring_publish(&c->rep, lens, n);
    c->owed -= n;
    if (rkv_shm_peer_sleeping(&c->ctrl->client_sleeping) && rkv_shm_wake(c->sock) != 0) {
        conn_mark_dead(c, SHM_PEER_HANGUP);
        return RKV_CONNECTION;
    }
    return RKV_OK;
}

static rkv_status shm_pull(struct rkv_sconn *sconn, const struct rkv_remote_buf *rb, void *dst)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    struct rkv_remote_buf d;
    memcpy(&d, rb, sizeof d); /* read the descriptor once; it may be unaligned */
    if (c->dead)
        return RKV_CONNECTION;
    if (d.rkey != 0 || d.addr > c->layout.staging_size || d.len > c->layout.staging_size - d.addr) {
        conn_mark_dead(c, "rendezvous descriptor outside the staging area");
        return RKV_PROTOCOL;
    }
    memcpy(dst, (const uint8_t *)c->area + c->layout.staging_off + d.addr, d.len);
    return RKV_OK;
}

/* Give an idle connection's pages back: everything after the control
 * block's page (rings, staging) and the private request copies. Only when
 * it owes no reply, its request ring is empty, the client consumed every
 * reply and is not writing (shm_ring.h, "Giving pages back"); the checks
 * on client-written words after trim_begin only decide whether the client
 * loses its own data. Returns whether the pages went back. */
static bool conn_trim(struct shm_sconn *c)
{
    bool done = false;
    if (c->owed != 0)
        return false;
    if (rkv_shm_trim_begin(c->ctrl) && rkv_shm_ring_ready(&c->req) == 0 &&
        atomic_load_explicit(c->rep.head, memory_order_acquire) == c->rep.pos) {
        uint8_t *start = (uint8_t *)c->area + c->layout.req_off;
        done = madvise(start, c->layout.total - c->layout.req_off, MADV_REMOVE) == 0 &&
               madvise(c->copies, c->copies_len, MADV_DONTNEED) == 0;
    }
    rkv_shm_trim_end(c->ctrl);
    return done;
}

/* Called on each alive check: an active connection restarts its idle
 * stretch; one idle for SHM_TRIM_IDLE_NS gives its pages back, once. */
static void trim_when_idle(struct shm_sconn *c, uint64_t now)
{
    if (c->active) {
        c->active = false;
        c->trimmed = false;
        c->idle_since_ns = now;
    } else if (!c->trimmed && now - c->idle_since_ns >= SHM_TRIM_IDLE_NS) {
        c->trimmed = conn_trim(c);
    }
}

static bool shm_alive(struct rkv_sconn *sconn)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    if (c->dead)
        return false;
    uint64_t now = rkv_now_ns();
    if (now < c->next_alive_check_ns)
        return true;
    c->next_alive_check_ns = now + SHM_ALIVE_CHECK_NS;
    trim_when_idle(c, now);
    struct pollfd pfd = { .fd = c->sock, .events = POLLRDHUP };
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)))
        conn_mark_dead(c, SHM_PEER_HANGUP);
    return !c->dead;
}

static int shm_event_fd(struct rkv_sconn *sconn)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    return c->sock; /* readable on a wake-up byte, and on hang-up */
}

static void shm_arm(struct rkv_sconn *sconn)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    if (!rkv_shm_drain(c->sock)) {
        conn_mark_dead(c, SHM_PEER_HANGUP);
        return;
    }
    rkv_shm_sleep_announce(&c->ctrl->server_sleeping);
}

static const char *shm_peer(struct rkv_sconn *sconn)
{
    struct shm_sconn *c = shm_sconn_of(sconn);
    return c->peer;
}

static const struct rkv_msg_transport_ops shm_msg_ops = {
    .region_desc = shm_region_desc,
    .reply_buf = shm_reply_buf,
    .pull = shm_pull,
};

const struct rkv_server_transport rkv_shm_server_transport = {
    .scheme = "shm",
    .msg = &shm_msg_ops,
    .listen = shm_listen,
    .listener_fd = shm_listener_fd,
    .accept = shm_accept,
    .close_listener = shm_close_listener,
    .poll = shm_poll,
    .reply = shm_reply,
    .alive = shm_alive,
    .event_fd = shm_event_fd,
    .arm = shm_arm,
    .peer = shm_peer,
    .close = shm_conn_close,
};
