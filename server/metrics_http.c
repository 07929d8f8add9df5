/* metrics_http.c — the server's stats in Prometheus text format over HTTP.
 *
 * Optional ([stats] listen / --stats-listen HOST:PORT, 127.0.0.1 unless told
 * otherwise). The main thread polls the listening socket with the others; a
 * scrape is answered in one go and the connection closed. Reads and writes
 * carry short timeouts so a stuck scraper cannot stall accepts. Only
 * "GET /metrics" is served; anything else gets 404 or 400.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "log.h"
#include "metrics_http.h"
#include "util.h"

int rkv_metrics_listen(const char *host_port)
{
    char host[128];
    uint16_t port;
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    char portstr[8];
    int fd = -1, one = 1;

    if (!rkv_host_port(host_port, host, sizeof host, &port)) {
        RKV_ERROR("stats listen \"%s\": expected HOST:PORT, e.g. 127.0.0.1:9121", host_port);
        return -1;
    }
    snprintf(portstr, sizeof portstr, "%u", port);
    int rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0) {
        RKV_ERROR("stats listen %s: %s; give a numeric address such as 127.0.0.1", host_port,
                  gai_strerror(rc));
        return -1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        RKV_ERROR("stats listen %s: %s; pick a free port with --stats-listen", host_port,
                  strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    } else {
        RKV_INFO("Prometheus metrics on http://%s/metrics", host_port);
    }
    freeaddrinfo(ai);
    return fd;
}

/* Metrics that go up and down; every other line is a counter. */
static bool is_gauge(const char *name)
{
    static const char *const gauges[] = {
        "uptime",         "clock",        "clock_published", "items",   "bytes",       "bytes_free",
        "limit_maxbytes", "region_bytes", "hugepages",       "buckets", "connections", "workers",
    };
    for (size_t i = 0; i < RKV_ARRAY_SIZE(gauges); i++)
        if (strcmp(name, gauges[i]) == 0)
            return true;
    return false;
}

/* "name value\n" lines → Prometheus exposition with rkv_ prefix and TYPE. */
static size_t to_prometheus(const char *stats, char *out, size_t cap)
{
    size_t len = 0;
    const char *p = stats;
    while (*p && len < cap) {
        const char *nl = strchr(p, '\n');
        const char *sp = strchr(p, ' ');
        if (nl == NULL || sp == NULL || sp > nl)
            break;
        char name[64];
        size_t nlen = RKV_MIN((size_t)(sp - p), sizeof name - 1);
        memcpy(name, p, nlen);
        name[nlen] = '\0';
        int n = snprintf(out + len, cap - len, "# TYPE rkv_%s %s\nrkv_%s %.*s\n", name,
                         is_gauge(name) ? "gauge" : "counter", name, (int)(nl - sp - 1), sp + 1);
        if (n < 0)
            break;
        len = RKV_MIN(cap, len + (size_t)n);
        p = nl + 1;
    }
    return len;
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, type, len);
    if (write(fd, head, (size_t)n) == n && len)
        (void)!write(fd, body, len);
}

void rkv_metrics_serve(int listen_fd, struct rkv_server *srv)
{
    char req[1024], stats[8192], body[16384];
    struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ssize_t n = read(fd, req, sizeof req - 1);
    if (n <= 0) {
        close(fd);
        return;
    }
    req[n] = '\0';
    if (strncmp(req, "GET ", 4) != 0) {
        reply(fd, "400 Bad Request", "text/plain", "only GET /metrics\n", 17);
    } else if (strncmp(req + 4, "/metrics ", 9) != 0 && strncmp(req + 4, "/metrics\r", 9) != 0) {
        reply(fd, "404 Not Found", "text/plain", "try /metrics\n", 13);
    } else {
        rkv_server_stats_text(srv, stats, sizeof stats);
        size_t len = to_prometheus(stats, body, sizeof body);
        reply(fd, "200 OK", "text/plain; version=0.0.4", body, len);
    }
    close(fd);
}
