/* bench_procs.c — see bench_procs.h. */
#include <errno.h>
#include <unistd.h>

#include "bench_procs.h"
#include "bench_timeseries.h"

struct header {
    uint32_t kind;
    uint32_t len;
};

size_t bench_msg_size(uint32_t kind)
{
    switch (kind) {
    case BENCH_MSG_READY: return sizeof(struct bench_ready);
    case BENCH_MSG_TICK: return sizeof(struct bench_tick);
    case BENCH_MSG_FINAL: return sizeof(struct bench_final);
    default: return 0;
    }
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 0 read all; 1 end of stream before the first byte; -1 error or short. */
static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, c + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return got == 0 ? 1 : -1;
        got += (size_t)r;
    }
    return 0;
}

int bench_msg_send(int fd, uint32_t kind, const void *payload, size_t len)
{
    struct header h = { kind, (uint32_t)len };
    if (len != bench_msg_size(kind)) {
        errno = EINVAL;
        return -1;
    }
    return write_all(fd, &h, sizeof h) == 0 && write_all(fd, payload, len) == 0 ? 0 : -1;
}

int bench_msg_recv(int fd, uint32_t *kind, void *buf, size_t cap)
{
    struct header h;
    int r = read_all(fd, &h, sizeof h);
    if (r != 0)
        return r;
    size_t want = bench_msg_size(h.kind);
    if (want == 0 || h.len != want || h.len > cap)
        return -1;
    if (read_all(fd, buf, h.len) != 0)
        return -1;
    *kind = h.kind;
    return 0;
}
