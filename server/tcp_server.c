/* tcp_server.c — the tcp transport: the door memcached clients come in by.
 *
 * A plain TCP listener (non-blocking, SO_REUSEADDR) whose connections are
 * rkv_sconns like the other transports' (tcp_server.h): main accepts them,
 * a worker serves them, no thread per connection. Each connection has an
 * input and an output buffer, both bounded. The transport is event_driven:
 * event_fd() is the socket itself, in the worker's epoll set, watched for
 * what events() says — readable while input may be taken, writable while
 * output or a command stopped on a full output waits — and the worker serves a connection only when that epoll
 * reports it (a batch of events per epoll_wait, as memcached does): one
 * read — a read that does not fill the buffer took everything the socket
 * had — and one send() for the answers. The worker changes the
 * registration only when events() changed (no epoll_ctl per request).
 *
 * Nothing from the peer is trusted: all socket I/O is MSG_DONTWAIT |
 * MSG_NOSIGNAL; a peer that half-closes gets its buffered commands answered
 * and then the connection closes once the answers are written; the count of
 * connections is bounded by max_conns like the other doors (one more is
 * told "SERVER_ERROR too many open connections" and closed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "layout.h"
#include "log.h"
#include "memcache_proto.h"
#include "server.h"
#include "tcp_server.h"
#include "util.h"

#define TCP_BUF_MIN  (16u << 10) /* buffers start (and shrink back to) this size */
#define TCP_BUSY_MSG "SERVER_ERROR too many open connections\r\n"

struct tcp_quota {
    _Atomic unsigned refs; /* the listener + each connection */
    _Atomic unsigned live; /* connections not yet closed */
    unsigned max;
};

struct tcp_listener {
    struct rkv_listener listener; /* first: what the ops take (transport.h) */
    int sock;
    struct tcp_quota *quota;
    _Atomic uint64_t *rejected;
    size_t in_max, out_max;
    uint64_t last_warn_ns;
};

struct buf {
    char *p;
    size_t start, end, cap; /* live bytes are p[start, end) */
};

struct tcp_sconn {
    struct rkv_sconn sconn; /* first: what the ops take (transport.h) */
    int sock;
    struct tcp_quota *quota;
    struct buf in, out;
    size_t in_max, out_max;
    size_t in_want; /* input bytes the protocol needs buffered */
    uint64_t skip;  /* input bytes still to discard */
    bool eof;       /* the peer shut down its sending side */
    bool dead;
    const char *close_after;                /* close once output is written, and why */
    struct rkv_mc_stream mc;                /* inside a long retrieval line (memcache_exec.c) */
    _Atomic uint64_t *bytes_in, *bytes_out; /* the serving worker's counters, or NULL */
    char peer[64];
};

static inline struct tcp_listener *tcp_listener_of(struct rkv_listener *listener)
{
    return RKV_CONTAINER_OF(listener, struct tcp_listener, listener);
}

static inline struct tcp_sconn *tcp_sconn_of(struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, struct tcp_sconn, sconn);
}

static inline const struct tcp_sconn *tcp_sconn_of_const(const struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, const struct tcp_sconn, sconn);
}

/* ------------------------------------------------------------ buffers */

static bool buf_reserve(struct buf *b, size_t n, size_t max)
{
    if (b->start > 0 && b->cap - b->end < n) {
        memmove(b->p, b->p + b->start, b->end - b->start);
        b->end -= b->start;
        b->start = 0;
    }
    if (b->cap - b->end >= n)
        return true;
    if (b->end + n > max)
        return false;
    size_t cap = RKV_MAX(b->cap, TCP_BUF_MIN);
    while (cap < b->end + n)
        cap *= 2;
    cap = RKV_MIN(cap, max);
    char *p = realloc(b->p, cap);
    if (p == NULL)
        return false;
    b->p = p;
    b->cap = cap;
    return true;
}

/* Drained: give back memory a burst took. */
static void buf_settle(struct buf *b)
{
    if (b->start != b->end)
        return;
    b->start = b->end = 0;
    if (b->cap > TCP_BUF_MIN) {
        char *p = realloc(b->p, TCP_BUF_MIN);
        if (p != NULL) {
            b->p = p;
            b->cap = TCP_BUF_MIN;
        }
    }
}

/* ------------------------------------------------------------ connections */

static void mark_dead(struct tcp_sconn *c, const char *why)
{
    if (!c->dead)
        RKV_DEBUG("tcp: %s: %s", c->peer, why);
    c->dead = true;
}

static void quota_put(struct tcp_quota *q)
{
    if (atomic_fetch_sub(&q->refs, 1) == 1)
        free(q);
}

static void tcp_conn_close(struct rkv_sconn *sconn)
{
    if (sconn == NULL)
        return;
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    close(c->sock);
    free(c->in.p);
    free(c->out.p);
    atomic_fetch_sub(&c->quota->live, 1);
    quota_put(c->quota);
    free(c);
}

static void flush_out(struct tcp_sconn *c)
{
    while (!c->dead && c->out.end > c->out.start) {
        ssize_t n = send(c->sock, c->out.p + c->out.start, c->out.end - c->out.start,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            c->out.start += (size_t)n;
            if (c->bytes_out != NULL)
                rkv_stat_bump(c->bytes_out, (uint64_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        mark_dead(c, n < 0 ? strerror(errno) : "send returned 0");
    }
    buf_settle(&c->out);
    if (c->close_after != NULL && c->out.start == c->out.end)
        mark_dead(c, c->close_after);
}

/* Take what the socket has, up to the input limit. */
static void fill_in(struct tcp_sconn *c)
{
    for (unsigned i = 0; i < 4 && !c->eof && !c->dead; i++) {
        size_t target = RKV_MIN(RKV_MAX(c->in_want, (size_t)TCP_BUF_MIN), c->in_max);
        size_t have = c->in.end - c->in.start;
        /* grow toward what the pending command needs; beyond that only
         * what is already allocated (compacted) takes more pipelined input */
        if (!buf_reserve(&c->in, target > have ? target - have : 1,
                         target > have ? c->in_max : c->in.cap))
            return; /* full: the protocol consumes first */
        ssize_t n = recv(c->sock, c->in.p + c->in.end, c->in.cap - c->in.end, MSG_DONTWAIT);
        if (n > 0) {
            c->in.end += (size_t)n;
            if (c->bytes_in != NULL)
                rkv_stat_bump(c->bytes_in, (uint64_t)n);
            /* discard a refused data block as it arrives */
            size_t drop = (size_t)RKV_MIN(c->skip, (uint64_t)(c->in.end - c->in.start));
            c->in.start += drop;
            c->skip -= drop;
            if (c->in.end < c->in.cap)
                return;
            continue;
        }
        if (n == 0) {
            c->eof = true; /* answer what came, then close (flush_out) */
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            mark_dead(c, strerror(errno));
        return;
    }
}

static unsigned tcp_poll(struct rkv_sconn *sconn, struct rkv_msg *msgs, unsigned max)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    if (c->dead || max == 0)
        return 0;
    flush_out(c);
    fill_in(c);
    size_t have = c->in.end - c->in.start;
    if (rkv_tcp_out_backed_up(&c->sconn)) {
        if (c->in.cap > 0 && have == c->in.cap)
            mark_dead(c, "client does not read its replies (output and input buffers full)");
        return 0; /* backed up: no more answers until it reads */
    }
    if (c->eof && have > 0 && have < c->in_want) {
        c->in.start = c->in.end; /* an incomplete last command nothing can complete now */
        have = 0;
    }
    if (have == 0 || c->close_after != NULL) {
        if (c->eof && c->out.start == c->out.end)
            mark_dead(c, "peer closed its sending side");
        return 0;
    }
    if (have < c->in_want && !c->eof)
        return 0; /* the command is still incomplete: wait for more */
    msgs[0].data = c->in.p + c->in.start;
    msgs[0].len = (uint32_t)RKV_MIN(have, (size_t)UINT32_MAX);
    return 1;
}

/* lens[0]: input bytes the batch consumed. One send() for all answers. */
static rkv_status tcp_reply(struct rkv_sconn *sconn, const uint32_t *lens, unsigned n)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    if (n > 0) {
        c->in.start += RKV_MIN((size_t)lens[0], c->in.end - c->in.start);
        buf_settle(&c->in);
    }
    flush_out(c);
    if (c->eof && c->in.start == c->in.end && c->out.start == c->out.end)
        mark_dead(c, "peer closed its sending side");
    return RKV_OK; /* a dead connection shows in alive() */
}

static bool tcp_alive(struct rkv_sconn *sconn)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    return !c->dead;
}

static int tcp_event_fd(struct rkv_sconn *sconn)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    return c->sock;
}

static uint32_t tcp_events(struct rkv_sconn *sconn)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    uint32_t events = 0;
    /* input only while we would take it: not after EOF, not when closing,
     * and while answers back up only until the input buffer is full too
     * (then the client stopped reading: tcp_poll drops it); else a sender
     * would keep us awake */
    bool in_room = c->in.cap == 0 || c->in.end - c->in.start < c->in.cap;
    if (!c->eof && c->close_after == NULL && (!rkv_tcp_out_backed_up(&c->sconn) || in_room))
        events |= EPOLLIN | EPOLLRDHUP;
    /* writable, too, while a command that stopped on a full output waits
     * (a long answer streams: memcache_exec.c), even once the output
     * drained: the socket is writable then, so the next pass comes at once */
    size_t have = c->in.end - c->in.start;
    bool waiting = have > 0 && have >= c->in_want && c->close_after == NULL;
    if (rkv_tcp_out_pending(&c->sconn) > 0 || waiting)
        events |= EPOLLOUT;
    return events;
}

static const char *tcp_peer(struct rkv_sconn *sconn)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    return c->peer;
}

/* ------------------------------------------------------------ stream view */

void rkv_tcp_count_io(struct rkv_sconn *sconn, _Atomic uint64_t *bytes_in, _Atomic uint64_t *bytes_out)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    c->bytes_in = bytes_in;
    c->bytes_out = bytes_out;
}

struct rkv_mc_stream *rkv_tcp_mc_stream(struct rkv_sconn *sconn)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    return &c->mc;
}

bool rkv_tcp_want_input(struct rkv_sconn *sconn, size_t n)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    c->in_want = n;
    return n <= c->in_max;
}

void rkv_tcp_skip_input(struct rkv_sconn *sconn, uint64_t n)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    size_t drop = (size_t)RKV_MIN(n, (uint64_t)(c->in.end - c->in.start));
    c->in.start += drop;
    c->skip += n - drop;
}

char *rkv_tcp_out_reserve(struct rkv_sconn *sconn, size_t n)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    if (rkv_tcp_out_pending(sconn) + n > c->out_max || !buf_reserve(&c->out, n, c->out_max))
        return NULL;
    return c->out.p + c->out.end;
}

void rkv_tcp_out_commit(struct rkv_sconn *sconn, size_t n)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    c->out.end += n;
}

size_t rkv_tcp_out_mark(const struct rkv_sconn *sconn)
{
    const struct tcp_sconn *c = tcp_sconn_of_const(sconn);
    return c->out.end - c->out.start;
}

void rkv_tcp_out_rewind(struct rkv_sconn *sconn, size_t mark)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    c->out.end = c->out.start + mark;
}

size_t rkv_tcp_out_pending(const struct rkv_sconn *sconn)
{
    const struct tcp_sconn *c = tcp_sconn_of_const(sconn);
    return c->out.end - c->out.start;
}

bool rkv_tcp_out_backed_up(const struct rkv_sconn *sconn)
{
    const struct tcp_sconn *c = tcp_sconn_of_const(sconn);
    return rkv_tcp_out_pending(sconn) > c->out_max / 2;
}

void rkv_tcp_close_after_output(struct rkv_sconn *sconn, const char *why)
{
    struct tcp_sconn *c = tcp_sconn_of(sconn);
    c->close_after = why;
}

/* ------------------------------------------------------------ listener */

static int tcp_resolve(const char *host_port, struct addrinfo **res, char *err, size_t err_len)
{
    char host[256], port_s[8];
    uint16_t port;
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    if (!rkv_host_port(host_port, host, sizeof host, &port)) {
        snprintf(err, err_len, "\"%s\" is not HOST:PORT; use e.g. tcp://127.0.0.1:11211", host_port);
        return -1;
    }
    snprintf(port_s, sizeof port_s, "%u", port);
    int rc = getaddrinfo(host, port_s, &hints, res);
    if (rc != 0) {
        snprintf(err, err_len, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    return 0;
}

bool rkv_tcp_is_loopback(const char *host_port)
{
    struct addrinfo *res = NULL;
    char err[256];
    bool all = true;
    if (tcp_resolve(host_port, &res, err, sizeof err) != 0)
        return false;
    for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *s = (const void *)a->ai_addr;
            all = all && (ntohl(s->sin_addr.s_addr) >> 24) == 127;
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *s = (const void *)a->ai_addr;
            all = all && IN6_IS_ADDR_LOOPBACK(&s->sin6_addr);
        } else {
            all = false;
        }
    }
    freeaddrinfo(res);
    return all;
}

static rkv_status tcp_listen(const char *addr, const struct rkv_region *region,
                             const struct rkv_strans_params *p, struct rkv_listener **out,
                             char *err, size_t err_len)
{
    struct addrinfo *res = NULL;
    struct tcp_listener *l = calloc(1, sizeof *l);
    const struct rkv_region_header *h = region->base;
    struct rkv_strans_params rp;
    int one = 1;

    rkv_strans_params_resolve(p, &rp);

    *out = NULL;
    if (l == NULL) {
        snprintf(err, err_len, "out of memory");
        return RKV_NO_MEMORY;
    }
    l->sock = -1;
    l->quota = calloc(1, sizeof *l->quota);
    if (l->quota == NULL || tcp_resolve(addr, &res, err, err_len) != 0)
        goto fail;
    l->quota->refs = 1;
    l->quota->max = rp.max_conns;
    l->rejected = rp.rejected;
    l->in_max = rkv_tcp_in_max(h->max_value_len);
    l->out_max = rkv_tcp_out_max(h->max_value_len);
    l->sock = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->sock < 0 || setsockopt(l->sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(l->sock, res->ai_addr, res->ai_addrlen) != 0 || listen(l->sock, RKV_TCP_BACKLOG) != 0) {
        snprintf(err, err_len, "%s: %s%s", addr, strerror(errno),
                 errno == EADDRINUSE ? "; another process (memcached?) has the port: pick another"
                 : errno == EACCES   ? "; ports below 1024 need privileges"
                                     : "");
        goto fail;
    }
    freeaddrinfo(res);
    *out = &l->listener;
    return RKV_OK;
fail:
    if (res != NULL)
        freeaddrinfo(res);
    if (l->sock >= 0)
        close(l->sock);
    free(l->quota);
    free(l);
    return RKV_CONNECTION;
}

static int tcp_listener_fd(struct rkv_listener *listener)
{
    struct tcp_listener *l = tcp_listener_of(listener);
    return l->sock;
}

/* Over the limit: say so the way memcached does, and close. */
static void refuse(struct tcp_listener *l, int fd, const char *why)
{
    ssize_t r = send(fd, TCP_BUSY_MSG, sizeof TCP_BUSY_MSG - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)r;
    if (l->rejected != NULL)
        atomic_fetch_add(l->rejected, 1);
    uint64_t now = rkv_now_ns();
    if (now - l->last_warn_ns > 1000000000ull) {
        RKV_WARN("tcp: refused a client: %s", why);
        l->last_warn_ns = now;
    }
    close(fd);
}

static struct tcp_sconn *tcp_conn_create(struct tcp_listener *l, int fd,
                                         const struct sockaddr_storage *ss)
{
    struct tcp_sconn *c = calloc(1, sizeof *c);
    char host[INET6_ADDRSTRLEN] = "?";
    int one = 1;
    if (c == NULL) {
        refuse(l, fd, "out of memory");
        return NULL;
    }
    c->sock = fd;
    c->in_max = l->in_max;
    c->out_max = l->out_max;
    c->quota = l->quota;
    atomic_fetch_add(&l->quota->refs, 1);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)ss;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
        port = ntohs(s->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const void *)ss;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
        port = ntohs(s->sin6_port);
    }
    snprintf(c->peer, sizeof c->peer, "tcp %s:%u", host, port);
    return c;
}

static rkv_status tcp_accept(struct rkv_listener *listener, struct rkv_sconn **out)
{
    struct tcp_listener *l = tcp_listener_of(listener);
    struct sockaddr_storage ss;
    *out = NULL;
    for (;;) {
        socklen_t sl = sizeof ss;
        int fd = accept4(l->sock, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            uint64_t now = rkv_now_ns();
            if (errno != EAGAIN && errno != EWOULDBLOCK && now - l->last_warn_ns > 1000000000ull) {
                RKV_WARN("tcp: accept failed: %s%s", strerror(errno),
                         errno == EMFILE || errno == ENFILE ? "; raise the open-files limit "
                                                              "(ulimit -n / LimitNOFILE)"
                                                            : "");
                l->last_warn_ns = now;
            }
            return RKV_OK;
        }
        if (atomic_fetch_add(&l->quota->live, 1) >= l->quota->max) {
            atomic_fetch_sub(&l->quota->live, 1);
            refuse(l, fd, "max_conns connections are open; raise [rpc] max_conns");
            continue;
        }
        struct tcp_sconn *c = tcp_conn_create(l, fd, &ss);
        if (c == NULL) {
            atomic_fetch_sub(&l->quota->live, 1);
            continue;
        }
        *out = &c->sconn;
        return RKV_OK;
    }
}

static void tcp_close_listener(struct rkv_listener *listener)
{
    if (listener == NULL)
        return;
    struct tcp_listener *l = tcp_listener_of(listener);
    close(l->sock);
    quota_put(l->quota);
    free(l);
}

const struct rkv_server_transport rkv_tcp_server_transport = {
    .scheme = "tcp",
    .event_driven = true,
    .msg = NULL, /* a byte stream: no reply buffers, rendezvous or region to read */
    .listen = tcp_listen,
    .listener_fd = tcp_listener_fd,
    .accept = tcp_accept,
    .close_listener = tcp_close_listener,
    .poll = tcp_poll,
    .reply = tcp_reply,
    .alive = tcp_alive,
    .event_fd = tcp_event_fd,
    .events = tcp_events,
    .peer = tcp_peer,
    .close = tcp_conn_close,
};
