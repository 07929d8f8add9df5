/* shm_ring.c — SPSC rings, wake-ups and fd passing for the shm transport
 * (see shm_ring.h for the memory layout and the trust model).
 *
 * Both shm_client.c and shm_server.c build on these helpers, so the two
 * sides cannot disagree on the layout, the slot format or the sleep/wake
 * handshake. Nothing here allocates; ring calls are a few loads and stores.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm_ring.h"
#include "util.h"

#define SHM_PAGE 4096u

RKV_STATIC_ASSERT(sizeof(struct rkv_shm_ctrl) == 8 * RKV_CACHELINE,
                  "each control word has its own cache line");
RKV_STATIC_ASSERT(RKV_SHM_SLOT_HDR % 8 == 0, "messages stay 8-byte aligned");

rkv_status rkv_shm_layout_init(struct rkv_shm_layout *l, uint32_t credits, uint32_t max_msg,
                               uint64_t staging_size, char *err, size_t err_len)
{
    memset(l, 0, sizeof *l);
    if (credits == 0 || credits > RKV_SHM_MAX_CREDITS) {
        snprintf(err, err_len, "shm credits %u out of range 1..%u; set credits within it", credits,
                 RKV_SHM_MAX_CREDITS);
        return RKV_INVALID;
    }
    if (max_msg < RKV_MIN_MSG || max_msg > RKV_MAX_MSG) {
        snprintf(err, err_len, "shm max_msg %u out of range %u..%u; set max_msg within it", max_msg,
                 RKV_MIN_MSG, RKV_MAX_MSG);
        return RKV_INVALID;
    }
    if (staging_size < RKV_SHM_MIN_STAGING || staging_size > RKV_SHM_MAX_STAGING) {
        snprintf(err, err_len, "shm staging size %llu out of range %u..%u bytes",
                 (unsigned long long)staging_size, RKV_SHM_MIN_STAGING, RKV_SHM_MAX_STAGING);
        return RKV_INVALID;
    }
    size_t stride = RKV_ALIGN_UP((size_t)RKV_SHM_SLOT_HDR + max_msg, RKV_CACHELINE);
    size_t ring = stride * credits;
    if (ring > RKV_SHM_MAX_RING_BYTES) {
        snprintf(err, err_len,
                 "shm ring of %u credits x %u bytes exceeds %u MiB; "
                 "lower credits or max_msg",
                 credits, max_msg, RKV_SHM_MAX_RING_BYTES >> 20);
        return RKV_INVALID;
    }
    l->credits = credits;
    l->max_msg = max_msg;
    l->slot_stride = stride;
    l->req_off = RKV_ALIGN_UP(sizeof(struct rkv_shm_ctrl), SHM_PAGE);
    l->rep_off = l->req_off + ring;
    l->staging_off = RKV_ALIGN_UP(l->rep_off + ring, SHM_PAGE);
    l->staging_size = RKV_ALIGN_UP((size_t)staging_size, SHM_PAGE);
    l->total = l->staging_off + l->staging_size;
    return RKV_OK;
}

void rkv_shm_ring_init(struct rkv_shm_ring *r, void *base, const struct rkv_shm_layout *l,
                       enum rkv_shm_dir dir)
{
    struct rkv_shm_ctrl *ctrl = rkv_shm_ctrl_of(base);
    bool req = dir == RKV_SHM_REQUESTS;

    r->tail = req ? &ctrl->req_tail : &ctrl->rep_tail;
    r->head = req ? &ctrl->req_head : &ctrl->rep_head;
    r->slots = (uint8_t *)base + (req ? l->req_off : l->rep_off);
    r->pos = 0;
    r->nslots = l->credits;
    r->max_msg = l->max_msg;
    r->stride = l->slot_stride;
}

/* The length word of a slot, as an atomic so a racing peer cannot make the
 * compiler read it twice. */
static _Atomic uint32_t *slot_len(const struct rkv_shm_ring *r, uint64_t pos)
{
    return (_Atomic uint32_t *)(void *)(r->slots + (pos % r->nslots) * r->stride);
}

int rkv_shm_ring_space(const struct rkv_shm_ring *r)
{
    uint64_t head = atomic_load_explicit(r->head, memory_order_acquire);
    uint64_t used = r->pos - head; /* wraps to huge when head > pos */
    if (used > r->nslots)
        return -1;
    return (int)(r->nslots - used);
}

void rkv_shm_ring_publish(struct rkv_shm_ring *r, const uint32_t *lens, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        atomic_store_explicit(slot_len(r, r->pos + i), lens[i], memory_order_relaxed);
    r->pos += n;
    atomic_store_explicit(r->tail, r->pos, memory_order_release);
}

int rkv_shm_ring_ready(const struct rkv_shm_ring *r)
{
    uint64_t tail = atomic_load_explicit(r->tail, memory_order_acquire);
    uint64_t ready = tail - r->pos; /* wraps to huge when tail < pos */
    if (ready > r->nslots)
        return -1;
    return (int)ready;
}

const void *rkv_shm_ring_peek(const struct rkv_shm_ring *r, unsigned i, uint32_t *len)
{
    uint64_t pos = r->pos + i;
    uint32_t n = atomic_load_explicit(slot_len(r, pos), memory_order_relaxed);
    if (n > r->max_msg)
        return NULL;
    *len = n;
    return r->slots + (pos % r->nslots) * r->stride + RKV_SHM_SLOT_HDR;
}

void rkv_shm_ring_release(struct rkv_shm_ring *r, unsigned n)
{
    r->pos += n;
    atomic_store_explicit(r->head, r->pos, memory_order_release);
}

void rkv_shm_sleep_announce(_Atomic uint32_t *flag)
{
    atomic_store_explicit(flag, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
}

bool rkv_shm_peer_sleeping(_Atomic uint32_t *flag)
{
    /* Orders our tail store before the flag load (the other half of the
     * sleeper's store-fence-load). The plain load first keeps the common
     * "peer is spinning" case free of a locked instruction. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(flag, memory_order_relaxed) == 0)
        return false;
    return atomic_exchange_explicit(flag, 0, memory_order_acq_rel) != 0;
}

bool rkv_shm_write_begin(struct rkv_shm_ctrl *ctrl, uint64_t timeout_ns)
{
    atomic_store_explicit(&ctrl->client_writing, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ctrl->server_trimming, memory_order_acquire) == 0)
        return true;
    /* The server is inside one madvise() call: wait it out, yielding (it
     * may need our CPU), but never for longer than timeout_ns. */
    uint64_t deadline = rkv_now_ns() + timeout_ns;
    while (atomic_load_explicit(&ctrl->server_trimming, memory_order_acquire) != 0) {
        if (rkv_now_ns() >= deadline)
            return false;
        sched_yield();
    }
    return true;
}

bool rkv_shm_trim_begin(struct rkv_shm_ctrl *ctrl)
{
    atomic_store_explicit(&ctrl->server_trimming, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&ctrl->client_writing, memory_order_acquire) == 0;
}

int rkv_shm_wake(int sock)
{
    static const uint8_t bell = 1;
    for (;;) {
        if (send(sock, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return 0;
        return -errno;
    }
}

bool rkv_shm_drain(int sock)
{
    uint8_t buf[64];
    /* Bounded: a peer that keeps ringing cannot hold us here. */
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(sock, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0)
            return false;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    return true;
}

int rkv_shm_send_fds(int sock, const void *buf, size_t len, const int *fds, unsigned nfds)
{
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

    if (nfds > 8)
        return -EINVAL;
    if (nfds > 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.bytes;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return 0;
        if (n >= 0)
            return -EMSGSIZE;
        if (errno != EINTR)
            return -errno;
    }
}

int rkv_shm_recv_fds(int sock, void *buf, size_t len, size_t *got, int *fds, unsigned max_fds,
                     unsigned *nfds)
{
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.bytes, .msg_controllen = sizeof ctl.bytes
    };
    ssize_t n;

    *nfds = 0;
    *got = 0;
    do {
        n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;

    /* Keep what fits in fds[], close everything else the peer sent. */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*nfds < max_fds)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    if (n == 0 && *nfds == 0)
        return -ECONNRESET;
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        for (unsigned i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        return -EMSGSIZE;
    }
    *got = (size_t)n;
    return 0;
}
