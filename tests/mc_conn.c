/* mc_conn.c — a test's tcp connection to a memcached-protocol door on
 * 127.0.0.1 (see mc_conn.h). */
#include "mc_conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int mc_connect_opts(unsigned port, const struct mc_conn_opts *o)
{
    static const struct mc_conn_opts none = { 0 };
    if (o == NULL)
        o = &none;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    if (o->rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf, sizeof o->rcvbuf);
    if (o->timeout_s > 0) {
        struct timeval tv = { .tv_sec = (time_t)o->timeout_s };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    if (o->nonblock)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

int mc_connect(unsigned port)
{
    const struct mc_conn_opts o = { .timeout_s = MC_CONN_TIMEOUT_S };
    return mc_connect_opts(port, &o);
}

bool mc_send_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return true;
}

bool mc_send_str(int fd, const char *s)
{
    return mc_send_all(fd, s, strlen(s));
}

size_t mc_recv_n(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

size_t mc_read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap && recv(fd, buf + n, 1, 0) == 1)
        if (buf[n++] == '\n')
            break;
    if (cap > 0)
        buf[n] = '\0';
    return n;
}
