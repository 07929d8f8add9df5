/* bench_memcache.c — rkv-bench's memcached text-protocol client; see
 * bench_memcache.h.
 *
 * Every call is a batch (a single call is a batch of one): ops are dealt
 * round-robin over the connections, encoded into each connection's output
 * buffer, sent with one send() per connection, then their replies are read
 * in the order sent, each connection in turn. A batch larger than
 * connections × depth goes in rounds of that size.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_memcache.h"
#include "util.h"

#define MC_KEY_MAX          250
#define MC_LINE_MAX         1024        /* longest reply line accepted */
#define MC_VALUE_LIMIT      (64u << 20) /* a VALUE longer than this is a broken reply */
#define MC_REQ_EXTRA        96          /* command, flags, exptime, length, cas, CRLFs */
#define MC_TTL_RELATIVE_MAX 2592000u    /* memcached: exptimes above are unix times */

struct mc_conn {
    int fd;    /* -1 while down */
    char *out; /* out_cap bytes */
    size_t out_len;
    char *in;              /* in_cap bytes */
    size_t in_pos, in_end; /* unread bytes: in[in_pos, in_end) */
};

struct bench_mc {
    char uri[256];
    struct sockaddr_storage addr;
    socklen_t addr_len;
    unsigned nconns, depth, timeout_ms;
    uint32_t value_max;     /* the longest value a request may carry */
    size_t out_cap, in_cap; /* out: depth requests of at most value_max */
    struct mc_conn *conns;
    bool *sent; /* nconns × depth: op of the round was sent */
    bool up;
    struct rkv_counters c;
    char last_error[512];
};

/* What one call does: which ops, and which reply each expects. */
enum mc_kind { MC_GET, MC_GETS, MC_STORE, MC_DELETE, MC_INCR };
struct mc_batch {
    enum mc_kind kind;
    struct rkv_get_op *g;       /* MC_GET, MC_GETS */
    struct rkv_item_info *info; /* MC_GETS: may be NULL */
    struct rkv_put_op *p;       /* MC_STORE */
    const void *del_key;        /* MC_DELETE, MC_INCR (n = 1) */
    size_t del_key_len;
    rkv_status del_status;
    int64_t delta;   /* MC_INCR: decr when negative */
    uint64_t result; /* MC_INCR: the number replied */
    size_t n;
};

static rkv_status say(struct bench_mc *m, rkv_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rkv_status say(struct bench_mc *m, rkv_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->last_error, sizeof m->last_error, fmt, ap);
    va_end(ap);
    return st;
}

/* ------------------------------------------------------------ connections */

static void drop_all(struct bench_mc *m)
{
    for (unsigned i = 0; i < m->nconns; i++) {
        struct mc_conn *cn = &m->conns[i];
        if (cn->fd >= 0)
            close(cn->fd);
        cn->fd = -1;
        cn->out_len = cn->in_pos = cn->in_end = 0;
    }
    m->up = false;
}

static rkv_status connect_all(struct bench_mc *m)
{
    struct timeval tv = { .tv_sec = m->timeout_ms / 1000, .tv_usec = (m->timeout_ms % 1000) * 1000 };
    int one = 1;
    for (unsigned i = 0; i < m->nconns; i++) {
        int fd = socket(m->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&m->addr, m->addr_len) != 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            drop_all(m);
            return say(m, RKV_CONNECTION,
                       "%s: connection %u of %u: %s; is the server listening "
                       "there (rkv-server --listen tcp://..., or memcached)?",
                       m->uri, i + 1, m->nconns, strerror(e));
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        m->conns[i].fd = fd;
    }
    m->up = true;
    return RKV_OK;
}

static rkv_status resolve(struct bench_mc *m, const char *uri)
{
    char scheme[8], host[256], port_s[8];
    const char *rest;
    uint16_t port;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    if (!rkv_uri_split(uri, scheme, sizeof scheme, &rest) || strcmp(scheme, "tcp") != 0 ||
        !rkv_host_port(rest, host, sizeof host, &port))
        return say(m, RKV_INVALID, "'%s' is not a memcached address; use tcp://HOST:PORT", uri);
    snprintf(port_s, sizeof port_s, "%u", (unsigned)port);
    int rc = getaddrinfo(host, port_s, &hints, &ai);
    if (rc != 0)
        return say(m, RKV_CONNECTION, "%s: cannot resolve %s: %s", uri, host, gai_strerror(rc));
    memcpy(&m->addr, ai->ai_addr, ai->ai_addrlen);
    m->addr_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return RKV_OK;
}

rkv_status bench_mc_connect(const char *uri, unsigned conns, unsigned depth, uint32_t value_max,
                            unsigned timeout_ms, struct bench_mc **out, char *err, size_t err_len)
{
    struct bench_mc *m = calloc(1, sizeof *m);
    rkv_status st = RKV_NO_MEMORY;
    *out = NULL;
    if (m == NULL) {
        snprintf(err, err_len, "out of memory");
        return RKV_NO_MEMORY;
    }
    snprintf(m->uri, sizeof m->uri, "%s", uri);
    m->nconns = RKV_MAX(conns, 1u);
    m->depth = RKV_MAX(depth, 1u);
    m->timeout_ms = timeout_ms ? timeout_ms : 5000;
    m->value_max = value_max;
    m->out_cap = (size_t)m->depth * (MC_KEY_MAX + MC_REQ_EXTRA + value_max);
    m->in_cap = (size_t)value_max + MC_KEY_MAX + MC_LINE_MAX + 65536;
    m->conns = calloc(m->nconns, sizeof *m->conns);
    m->sent = calloc((size_t)m->nconns * m->depth, sizeof *m->sent);
    for (unsigned i = 0; m->conns && i < m->nconns; i++) {
        m->conns[i].fd = -1;
        m->conns[i].out = malloc(m->out_cap);
        m->conns[i].in = malloc(m->in_cap);
        if (!m->conns[i].out || !m->conns[i].in)
            goto fail;
    }
    if (m->conns == NULL || m->sent == NULL)
        goto fail;
    st = resolve(m, uri);
    if (st == RKV_OK)
        st = connect_all(m);
    if (st != RKV_OK)
        goto fail;
    *out = m;
    return RKV_OK;
fail:
    snprintf(err, err_len, "%s", m->last_error[0] ? m->last_error : "out of memory");
    bench_mc_close(m);
    return st;
}

void bench_mc_close(struct bench_mc *m)
{
    if (m == NULL)
        return;
    for (unsigned i = 0; m->conns && i < m->nconns; i++) {
        if (m->conns[i].fd >= 0)
            close(m->conns[i].fd);
        free(m->conns[i].out);
        free(m->conns[i].in);
    }
    free(m->conns);
    free(m->sent);
    free(m);
}

/* ------------------------------------------------------------ wire I/O */

static rkv_status io_error(struct bench_mc *m, ssize_t r, const char *what)
{
    if (r == 0)
        return say(m, RKV_CONNECTION, "%s: the server closed the connection while %s", m->uri, what);
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return say(m, RKV_TIMEOUT, "%s: no progress within %u ms while %s", m->uri, m->timeout_ms,
                   what);
    return say(m, RKV_CONNECTION, "%s: %s while %s", m->uri, strerror(errno), what);
}

static rkv_status flush_out(struct bench_mc *m, struct mc_conn *cn)
{
    size_t off = 0;
    while (off < cn->out_len) {
        ssize_t w = send(cn->fd, cn->out + off, cn->out_len - off, MSG_NOSIGNAL);
        m->c.doorbells++;
        if (w <= 0)
            return io_error(m, w, "sending requests");
        off += (size_t)w;
    }
    cn->out_len = 0;
    return RKV_OK;
}

/* More input: at least one byte appended after in_end. */
static rkv_status fill(struct bench_mc *m, struct mc_conn *cn)
{
    if (cn->in_pos > 0) {
        memmove(cn->in, cn->in + cn->in_pos, cn->in_end - cn->in_pos);
        cn->in_end -= cn->in_pos;
        cn->in_pos = 0;
    }
    if (cn->in_end == m->in_cap)
        return say(m, RKV_PROTOCOL, "%s: a reply line longer than %zu bytes", m->uri, m->in_cap);
    ssize_t r = recv(cn->fd, cn->in + cn->in_end, m->in_cap - cn->in_end, 0);
    if (r <= 0)
        return io_error(m, r, "reading replies");
    cn->in_end += (size_t)r;
    return RKV_OK;
}

/* The next reply line (without CRLF), NUL-terminated in place. */
static rkv_status read_line(struct bench_mc *m, struct mc_conn *cn, char **line, size_t *len)
{
    size_t scanned = 0;
    for (;;) {
        size_t avail = cn->in_end - cn->in_pos;
        char *nl = memchr(cn->in + cn->in_pos + scanned, '\n', avail - scanned);
        if (nl) {
            char *start = cn->in + cn->in_pos;
            if (nl == start || nl[-1] != '\r' || nl - start > MC_LINE_MAX)
                return say(m, RKV_PROTOCOL,
                           "%s: a reply line not ended by \\r\\n or longer than %u "
                           "bytes",
                           m->uri, MC_LINE_MAX);
            nl[-1] = '\0';
            *line = start;
            *len = (size_t)(nl - 1 - start);
            cn->in_pos = (size_t)(nl + 1 - cn->in);
            return RKV_OK;
        }
        scanned = avail;
        if (scanned > MC_LINE_MAX)
            return say(m, RKV_PROTOCOL, "%s: a reply line longer than %u bytes", m->uri, MC_LINE_MAX);
        rkv_status st = fill(m, cn);
        if (st != RKV_OK)
            return st;
    }
}

/* Consume n bytes of a value: into dst when it is not NULL. */
static rkv_status take(struct bench_mc *m, struct mc_conn *cn, char *dst, size_t n)
{
    while (n > 0) {
        if (cn->in_pos == cn->in_end) {
            rkv_status st = fill(m, cn);
            if (st != RKV_OK)
                return st;
        }
        size_t k = RKV_MIN(n, cn->in_end - cn->in_pos);
        if (dst) {
            memcpy(dst, cn->in + cn->in_pos, k);
            dst += k;
        }
        cn->in_pos += k;
        n -= k;
    }
    return RKV_OK;
}

/* ------------------------------------------------------------ requests */

static bool key_ok(const void *key, size_t len)
{
    const unsigned char *k = key;
    if (key == NULL || len == 0 || len > MC_KEY_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (k[i] <= ' ' || k[i] == 0x7f)
            return false;
    return true;
}

static uint32_t exptime_of(const struct rkv_put_options *o)
{
    if (o == NULL || o->ttl == 0 || o->ttl == RKV_TTL_NEVER)
        return 0;
    return o->ttl <= MC_TTL_RELATIVE_MAX ? o->ttl : (uint32_t)time(NULL) + o->ttl;
}

static rkv_status *status_of(struct mc_batch *b, size_t i)
{
    switch (b->kind) {
    case MC_GET:
    case MC_GETS: return &b->g[i].status;
    case MC_STORE: return &b->p[i].status;
    case MC_DELETE:
    case MC_INCR: break;
    }
    return &b->del_status;
}

/* Op i's request into cn's output; false (its status set) when refused. */
static bool encode(struct bench_mc *m, struct mc_batch *b, size_t i, struct mc_conn *cn)
{
    static const char *const store_cmd[] = { "set", "add", "replace", "cas" };
    char *o = cn->out + cn->out_len;
    rkv_status *st = status_of(b, i);
    int n;
    switch (b->kind) {
    case MC_GET:
    case MC_GETS: {
        struct rkv_get_op *g = &b->g[i];
        if (!key_ok(g->key, g->key_len) || (g->buf == NULL && g->buf_len > 0)) {
            *st = RKV_INVALID;
            return false;
        }
        n = sprintf(o, "%s %.*s\r\n", b->kind == MC_GETS ? "gets" : "get", (int)g->key_len,
                    (const char *)g->key);
        m->c.gets++;
        break;
    }
    case MC_STORE: {
        struct rkv_put_op *p = &b->p[i];
        const struct rkv_put_options *po = p->opts;
        rkv_put_mode mode = po ? po->mode : RKV_SET;
        if (!key_ok(p->key, p->key_len) || (p->value == NULL && p->value_len > 0) ||
            (unsigned)mode > RKV_CAS) {
            *st = RKV_INVALID;
            return false;
        }
        if (p->value_len > m->value_max) { /* each request fits its share of out */
            *st = RKV_TOO_LARGE;
            return false;
        }
        n = sprintf(o, "%s %.*s %u %u %zu", store_cmd[mode], (int)p->key_len, (const char *)p->key,
                    po ? po->user_flags : 0u, exptime_of(po), p->value_len);
        if (mode == RKV_CAS)
            n += sprintf(o + n, " %llu", (unsigned long long)po->cas);
        memcpy(o + n, "\r\n", 2);
        if (p->value_len)
            memcpy(o + n + 2, p->value, p->value_len);
        n += 2 + (int)p->value_len;
        memcpy(o + n, "\r\n", 2);
        n += 2;
        p->version = 0; /* memcached's storage replies carry no CAS unique */
        m->c.puts++;
        break;
    }
    case MC_INCR:
        if (!key_ok(b->del_key, b->del_key_len)) {
            *st = RKV_INVALID;
            return false;
        }
        n = sprintf(o, "%s %.*s %llu\r\n", b->delta < 0 ? "decr" : "incr", (int)b->del_key_len,
                    (const char *)b->del_key,
                    b->delta < 0 ? 0ull - (unsigned long long)b->delta
                                 : (unsigned long long)b->delta);
        m->c.other_rpcs++;
        break;
    case MC_DELETE:
    default:
        if (!key_ok(b->del_key, b->del_key_len)) {
            *st = RKV_INVALID;
            return false;
        }
        n = sprintf(o, "delete %.*s\r\n", (int)b->del_key_len, (const char *)b->del_key);
        m->c.deletes++;
        break;
    }
    cn->out_len += (size_t)n;
    m->c.sends++;
    return true;
}

/* An error line where a reply was expected: its status (RKV_PROTOCOL when
 * it is not one of memcached's error lines). line is never NULL (read_line's
 * line); nonnull says so, or GCC with UBSan's recoverable nonnull check on
 * strncmp sees a path on which a NULL line reaches say()'s "%s". */
static rkv_status error_line(struct bench_mc *m, const char *line) __attribute__((nonnull));
static rkv_status error_line(struct bench_mc *m, const char *line)
{
    if (strncmp(line, "SERVER_ERROR", 12) == 0) {
        say(m, RKV_SERVER_BUSY, "%s: %s", m->uri, line);
        if (strstr(line, "too large"))
            return RKV_TOO_LARGE;
        return strstr(line, "out of memory") ? RKV_OUT_OF_MEMORY : RKV_SERVER_BUSY;
    }
    if (strncmp(line, "CLIENT_ERROR", 12) == 0)
        return say(m, RKV_INVALID, "%s: %s", m->uri, line);
    return say(m, RKV_PROTOCOL, "%s: unexpected reply \"%.80s\"", m->uri, line);
}

/* A retrieval reply: VALUE ... END, or END. */
static rkv_status decode_get(struct bench_mc *m, struct mc_batch *b, size_t i, struct mc_conn *cn)
{
    struct rkv_get_op *g = &b->g[i];
    bool found = false;
    for (;;) {
        char *line;
        size_t len;
        rkv_status st = read_line(m, cn, &line, &len);
        if (st != RKV_OK)
            return st;
        if (strcmp(line, "END") == 0)
            break;
        unsigned flags;
        unsigned long long bytes, cas = 0;
        int k = 0;
        if (found || sscanf(line, "VALUE %*s %u %llu %n", &flags, &bytes, &k) < 2 || k == 0) {
            g->status = error_line(m, line);
            if (g->status == RKV_PROTOCOL)
                return RKV_PROTOCOL;
            return RKV_OK;
        }
        if (b->kind == MC_GETS && sscanf(line + k, "%llu", &cas) != 1)
            return say(m, RKV_PROTOCOL, "%s: a gets reply without its CAS unique", m->uri);
        if (bytes > MC_VALUE_LIMIT)
            return say(m, RKV_PROTOCOL, "%s: a %llu-byte value (limit %u)", m->uri, bytes,
                       MC_VALUE_LIMIT);
        bool fits = bytes <= g->buf_len;
        char crlf[2];
        st = take(m, cn, fits ? g->buf : NULL, (size_t)bytes);
        if (st == RKV_OK)
            st = take(m, cn, crlf, 2);
        if (st != RKV_OK)
            return st;
        if (memcmp(crlf, "\r\n", 2) != 0)
            return say(m, RKV_PROTOCOL, "%s: a value not followed by \\r\\n", m->uri);
        g->value_len = (size_t)bytes;
        g->status = fits ? RKV_OK : RKV_BUFFER_TOO_SMALL;
        if (b->info)
            *b->info = (struct rkv_item_info){ .version = cas, .user_flags = flags };
        found = true;
    }
    if (!found)
        g->status = RKV_NOT_FOUND;
    if (found)
        m->c.get_hits++;
    else
        m->c.get_misses++;
    return RKV_OK;
}

/* A storage or delete reply: one line. */
static rkv_status decode_line(struct bench_mc *m, struct mc_batch *b, size_t i, struct mc_conn *cn)
{
    char *line;
    size_t len;
    rkv_status st = read_line(m, cn, &line, &len);
    if (st != RKV_OK)
        return st;
    rkv_put_mode mode = b->kind == MC_STORE && b->p[i].opts ? b->p[i].opts->mode : RKV_SET;
    rkv_status *out = status_of(b, i);
    unsigned long long num;
    int used = 0;
    if (b->kind == MC_INCR && line[0] >= '0' && line[0] <= '9' &&
        sscanf(line, "%llu%n", &num, &used) == 1 && (size_t)used == len) {
        b->result = num;
        *out = RKV_OK;
    } else if (b->kind == MC_INCR && strncmp(line, "CLIENT_ERROR", 12) == 0 &&
               strstr(line, "non-numeric") != NULL) {
        *out = RKV_NOT_NUMBER;
    } else if (strcmp(line, "STORED") == 0 || strcmp(line, "DELETED") == 0)
        *out = RKV_OK;
    else if (strcmp(line, "NOT_STORED") == 0)
        *out = mode == RKV_ADD ? RKV_EXISTS : RKV_NOT_STORED;
    else if (strcmp(line, "EXISTS") == 0)
        *out = RKV_CAS_MISMATCH;
    else if (strcmp(line, "NOT_FOUND") == 0)
        *out = b->kind == MC_DELETE || b->kind == MC_INCR ? RKV_NOT_FOUND : RKV_NOT_STORED;
    else if ((*out = error_line(m, line)) == RKV_PROTOCOL)
        return RKV_PROTOCOL;
    return RKV_OK;
}

/* Run a batch round by round; when a connection fails, every op of it
 * without a result gets the failure's status and the connections drop. */
static rkv_status run(struct bench_mc *m, struct mc_batch *b)
{
    size_t round = (size_t)m->nconns * m->depth, from = 0; /* ops [0, from) are settled */
    rkv_status st = m->up ? RKV_OK : connect_all(m);
    while (st == RKV_OK && from < b->n) {
        size_t end = RKV_MIN(b->n, from + round), i = from;
        for (size_t j = from; j < end; j++)
            m->sent[j - from] = encode(m, b, j, &m->conns[(j - from) % m->nconns]);
        for (unsigned c = 0; st == RKV_OK && c < m->nconns; c++)
            if (m->conns[c].out_len)
                st = flush_out(m, &m->conns[c]);
        while (st == RKV_OK && i < end) {
            struct mc_conn *cn = &m->conns[(i - from) % m->nconns];
            if (m->sent[i - from])
                st = b->kind == MC_GET || b->kind == MC_GETS ? decode_get(m, b, i, cn)
                                                             : decode_line(m, b, i, cn);
            if (st == RKV_OK)
                i++;
        }
        if (st != RKV_OK) {
            for (size_t j = i; j < end; j++)
                if (m->sent[j - from])
                    *status_of(b, j) = st;
            from = end;
            drop_all(m);
            break;
        }
        from = end;
    }
    for (size_t j = from; st != RKV_OK && j < b->n; j++)
        *status_of(b, j) = st;
    return st;
}

rkv_status bench_mc_get(struct bench_mc *m, const void *key, size_t key_len, void *buf,
                        size_t buf_len, size_t *value_len, struct rkv_item_info *info)
{
    struct rkv_get_op op = { .key = key, .key_len = key_len, .buf = buf, .buf_len = buf_len };
    struct mc_batch b = { .kind = info ? MC_GETS : MC_GET, .g = &op, .info = info, .n = 1 };
    run(m, &b);
    if (value_len)
        *value_len = op.value_len;
    return op.status;
}

rkv_status bench_mc_mget(struct bench_mc *m, struct rkv_get_op *ops, size_t n)
{
    struct mc_batch b = { .kind = MC_GET, .g = ops, .n = n };
    return run(m, &b);
}

rkv_status bench_mc_put(struct bench_mc *m, const void *key, size_t key_len, const void *value,
                        size_t value_len, const struct rkv_put_options *opts, uint64_t *new_version)
{
    struct rkv_put_op op = {
        .key = key, .key_len = key_len, .value = value, .value_len = value_len, .opts = opts
    };
    struct mc_batch b = { .kind = MC_STORE, .p = &op, .n = 1 };
    run(m, &b);
    if (new_version)
        *new_version = op.version;
    return op.status;
}

rkv_status bench_mc_mput(struct bench_mc *m, struct rkv_put_op *ops, size_t n)
{
    struct mc_batch b = { .kind = MC_STORE, .p = ops, .n = n };
    return run(m, &b);
}

rkv_status bench_mc_delete(struct bench_mc *m, const void *key, size_t key_len)
{
    struct mc_batch b = { .kind = MC_DELETE, .del_key = key, .del_key_len = key_len, .n = 1 };
    run(m, &b);
    return b.del_status;
}

rkv_status bench_mc_incr(struct bench_mc *m, const void *key, size_t key_len, int64_t delta,
                         uint64_t *result)
{
    struct mc_batch b = {
        .kind = MC_INCR, .del_key = key, .del_key_len = key_len, .delta = delta, .n = 1
    };
    run(m, &b);
    if (result != NULL && b.del_status == RKV_OK)
        *result = b.result;
    return b.del_status;
}

void bench_mc_get_counters(const struct bench_mc *m, struct rkv_counters *out)
{
    *out = m->c;
}

void bench_mc_reset_counters(struct bench_mc *m)
{
    memset(&m->c, 0, sizeof m->c);
}

const char *bench_mc_last_error(const struct bench_mc *m)
{
    return m->last_error;
}
