/* test_rdma_util.c — the rdma transports' shared helpers (common/rdma_util.c).
 *
 * Runs anywhere, with or without an RDMA device:
 *   - every completion status has its IBV_WC_ name and an explanation, and
 *     the classic failures (remote access, retries, RNR) say what to do;
 *   - rdma_cm failures (address, route, reject with and without rkv's
 *     reason, unreachable) and errno failures (permissions, no device,
 *     memlock) produce the actionable messages;
 *   - the memlock check and its CAP_IPC_LOCK parser;
 *   - HOST:PORT parsing, wildcard detection and formatting;
 *   - the send-queue bookkeeping behind selective signaling, driven by a
 *     model of an in-order completion queue: never `interval` unsignaled WRs
 *     in a row, the last WR of a batch signaled whenever more than `keep`
 *     would stay outstanding, and completions freeing exactly what was posted.
 * With no device (this CI host) it checks that opening the verbs stack fails
 * with "no RDMA device found" and the Soft-RoCE hint, for the helpers and for
 * the client transport's connect(); inside the Soft-RoCE VM
 * (tests/verbs/run.sh) it checks the device, port and GID checks for real,
 * and connect()'s messages for a port nobody listens on, a wildcard address
 * and a device that is not the one the address routes through.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cmocka.h>

#include "rdma_util.h"
#include "transport.h"
#include "util.h"

static void assert_contains(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL)
        fail_msg("\"%s\" does not contain \"%s\"", text, needle);
}

/* ------------------------------------------------------------ messages */

static void test_wc_status_names(void **state)
{
    (void)state;
    for (int s = IBV_WC_SUCCESS; s <= IBV_WC_TM_RNDV_INCOMPLETE; s++) {
        const char *name = rkv_rdma_wc_status_name((enum ibv_wc_status)s);
        assert_int_equal(strncmp(name, "IBV_WC_", 7), 0);
        assert_string_not_equal(name, "IBV_WC_<unknown>");
        assert_true(strlen(rkv_rdma_wc_status_hint((enum ibv_wc_status)s)) > 5);
        for (int o = IBV_WC_SUCCESS; o < s; o++)
            assert_string_not_equal(name, rkv_rdma_wc_status_name((enum ibv_wc_status)o));
    }
    assert_string_equal(rkv_rdma_wc_status_name(IBV_WC_REM_ACCESS_ERR), "IBV_WC_REM_ACCESS_ERR");
    assert_string_equal(rkv_rdma_wc_status_name(IBV_WC_RNR_RETRY_EXC_ERR),
                        "IBV_WC_RNR_RETRY_EXC_ERR");
    assert_string_equal(rkv_rdma_wc_status_name((enum ibv_wc_status)999), "IBV_WC_<unknown>");
    assert_string_equal(rkv_rdma_wc_status_hint(IBV_WC_REM_ACCESS_ERR),
                        "remote access error: rkey/address outside the server's region or the region "
                        "isn't registered for remote read");
    assert_contains(rkv_rdma_wc_status_hint(IBV_WC_RETRY_EXC_ERR), "4791");
    assert_contains(rkv_rdma_wc_status_hint(IBV_WC_RNR_RETRY_EXC_ERR), "receive buffer");
    assert_contains(rkv_rdma_wc_status_hint(IBV_WC_REM_INV_REQ_ERR), "rkey");
    assert_contains(rkv_rdma_wc_status_hint((enum ibv_wc_status)999), "unknown");
}

static void test_wc_error_format(void **state)
{
    char err[400];
    (void)state;
    rkv_rdma_wc_error(IBV_WC_REM_ACCESS_ERR, "RDMA READ of the server's region", err, sizeof err);
    assert_string_equal(err,
                        "RDMA READ of the server's region failed: IBV_WC_REM_ACCESS_ERR (remote access "
                        "error: rkey/address outside the server's region or the region isn't "
                        "registered for remote read)");
    /* truncation keeps a terminated string */
    rkv_rdma_wc_error(IBV_WC_RETRY_EXC_ERR, "x", err, 16);
    assert_int_equal(strlen(err), 15);
}

static void test_async_event_texts(void **state)
{
    (void)state;
    assert_contains(rkv_rdma_async_event_text(IBV_EVENT_QP_ACCESS_ERR), "IBV_EVENT_QP_ACCESS_ERR");
    assert_contains(rkv_rdma_async_event_text(IBV_EVENT_QP_ACCESS_ERR),
                    "outside the registered buffer");
    assert_contains(rkv_rdma_async_event_text(IBV_EVENT_PORT_ERR), "ibv_devinfo");
    assert_contains(rkv_rdma_async_event_text(IBV_EVENT_DEVICE_FATAL), "dmesg");
    assert_non_null(rkv_rdma_async_event_text(IBV_EVENT_GID_CHANGE));
}

static void test_port_state_names(void **state)
{
    (void)state;
    assert_string_equal(rkv_rdma_port_state_name(IBV_PORT_ACTIVE), "ACTIVE");
    assert_string_equal(rkv_rdma_port_state_name(IBV_PORT_DOWN), "DOWN");
    assert_string_equal(rkv_rdma_port_state_name(IBV_PORT_INIT), "INIT");
    assert_string_equal(rkv_rdma_port_state_name((enum ibv_port_state)77), "UNKNOWN");
}

static void test_cm_errors(void **state)
{
    char err[512];
    struct rkv_rdma_reject rej = { .magic = RKV_RDMA_REJECT_MAGIC, .reason = RKV_REJECT_TOO_MANY };
    const char junk[8] = "abcdefg";
    (void)state;

    rkv_rdma_cm_error(RDMA_CM_EVENT_ADDR_ERROR, -19, NULL, 0, "192.0.2.9:7471", err, sizeof err);
    assert_contains(err, "cannot resolve 192.0.2.9:7471");
    assert_contains(err, "ADDR_ERROR");
    assert_contains(err, "rdma link add rxe0 type rxe netdev eth0");
    /* no answer to ARP: the peer is unreachable, not misrouted */
    rkv_rdma_cm_error(RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT, NULL, 0, "192.0.2.9:7471", err,
                      sizeof err);
    assert_contains(err, "192.0.2.9:7471 is unreachable: its address did not resolve in time");

    rkv_rdma_cm_error(RDMA_CM_EVENT_ROUTE_ERROR, -110, NULL, 0, "h:1", err, sizeof err);
    assert_contains(err, "no RDMA route to h:1");
    assert_contains(err, "ACTIVE");

    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, 28, &rej, sizeof rej, "h:1", err, sizeof err);
    assert_contains(err, "refused the connection");
    assert_contains(err, "max_conns");
    rej.reason = RKV_REJECT_WRONG_DEVICE;
    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, 28, &rej, sizeof rej, "h:1", err, sizeof err);
    assert_contains(err, "rdma_device");
    rej.reason = 99;
    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, 28, &rej, sizeof rej, "h:1", err, sizeof err);
    assert_contains(err, "unknown reason");
    /* short or foreign private data is not trusted */
    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, 28, &rej, 4, "h:1", err, sizeof err);
    assert_contains(err, "reason 28");
    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, 28, junk, sizeof junk, "h:1", err, sizeof err);
    assert_contains(err, "reason 28");
    /* no listener on the port (IB CM: invalid service id; iWARP: ECONNREFUSED) */
    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, 8, NULL, 0, "h:1", err, sizeof err);
    assert_contains(err, "nothing listens on that port");
    rkv_rdma_cm_error(RDMA_CM_EVENT_REJECTED, -ECONNREFUSED, NULL, 0, "h:1", err, sizeof err);
    assert_contains(err, "nothing listens on that port");

    rkv_rdma_cm_error(RDMA_CM_EVENT_UNREACHABLE, -110, NULL, 0, "h:1", err, sizeof err);
    assert_contains(err, "h:1 is unreachable");
    assert_contains(err, "--dport 4791");
    rkv_rdma_cm_error(RDMA_CM_EVENT_CONNECT_ERROR, -22, NULL, 0, "h:1", err, sizeof err);
    assert_contains(err, "CONNECT_ERROR");
    rkv_rdma_cm_error(RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0, "h:1", err, sizeof err);
    assert_string_equal(err, "h:1 closed the connection");
    rkv_rdma_cm_error(RDMA_CM_EVENT_MULTICAST_JOIN, 0, NULL, 0, "h:1", err, sizeof err);
    assert_contains(err, "unexpected rdma_cm event");
}

static void test_errno_errors(void **state)
{
    char err[400];
    (void)state;
    rkv_rdma_errno_error(EACCES, "ibv_open_device", err, sizeof err);
    assert_contains(err, "ibv_open_device: permission denied on /dev/infiniband");
    assert_contains(err, "chmod a+rw /dev/infiniband/*");
    rkv_rdma_errno_error(EPERM, "x", err, sizeof err);
    assert_contains(err, "/dev/infiniband");
    rkv_rdma_errno_error(ENODEV, "rdma_create_event_channel", err, sizeof err);
    assert_contains(err, "no RDMA device found");
    assert_contains(err,
                    "load a driver or create a Soft-RoCE device with `rdma link add rxe0 type rxe netdev eth0`");
    rkv_rdma_errno_error(ENOENT, "x", err, sizeof err);
    assert_contains(err, "no RDMA device found");
    rkv_rdma_errno_error(ENOMEM, "ibv_reg_mr(table region)", err, sizeof err);
    assert_contains(err, "ibv_reg_mr(table region)");
    assert_contains(err, "raise `ulimit -l` or set LimitMEMLOCK=infinity");
    rkv_rdma_errno_error(EADDRINUSE, "rdma_bind_addr", err, sizeof err);
    assert_contains(err, "already in use");
    rkv_rdma_errno_error(EBADF, "y", err, sizeof err);
    assert_string_equal(err, "y: Bad file descriptor");
}

/* ------------------------------------------------------------ memlock */

static void test_memlock_ok(void **state)
{
    char err[300] = "";
    (void)state;
    assert_false(rkv_rdma_memlock_ok(64 << 10, 1ull << 30, false, "region", err, sizeof err));
    assert_string_equal(err, "memlock limit 64 KiB is below the 1 GiB region; "
                             "raise `ulimit -l` or set LimitMEMLOCK=infinity");
    assert_true(
        rkv_rdma_memlock_ok((uint64_t)RLIM_INFINITY, 1ull << 40, false, "region", err, sizeof err));
    assert_true(rkv_rdma_memlock_ok(64 << 10, 1ull << 30, true, "region", err, sizeof err));
    assert_true(rkv_rdma_memlock_ok(1ull << 30, 1ull << 30, false, "region", err, sizeof err));
    assert_false(rkv_rdma_memlock_ok((1ull << 30) - 1, 1ull << 30, false, "region", err, sizeof err));
    assert_contains(err, "is below the 1 GiB region");
}

/* The worst case to notice a dead peer: 4.096 us x 2^timeout x (retries + 1). */
static void test_rc_detect_time(void **state)
{
    (void)state;
    assert_int_equal(rkv_rdma_detect_ns(16, 7), 4096ull * 65536 * 8); /* 2.147 s */
    assert_int_equal(rkv_rdma_detect_ns(RKV_RDMA_ACK_TIMEOUT, RKV_RDMA_RETRY_COUNT),
                     1879048192ull);                           /* 1.88 s */
    assert_int_equal(rkv_rdma_detect_ns(14, 7), 536870912ull); /* perftest's 14: 537 ms */
    assert_int_equal(rkv_rdma_detect_ns(1, 1), 16384ull);
    assert_int_equal(rkv_rdma_detect_ns(16, 0), 268435456ull);        /* one try */
    assert_int_equal(rkv_rdma_detect_ns(31, 7), (4096ull << 31) * 8); /* no overflow at the top */
    assert_int_equal(rkv_rdma_detect_ns(40, 7), rkv_rdma_detect_ns(31, 7)); /* clamped, never UB */
}

static void test_rc_check(void **state)
{
    char err[300] = "";
    (void)state;
    assert_true(rkv_rdma_rc_check(16, 7, "a", "r", err, sizeof err));
    assert_true(rkv_rdma_rc_check(1, 1, "a", "r", err, sizeof err));
    assert_true(rkv_rdma_rc_check(31, 7, "a", "r", err, sizeof err));
    assert_false(rkv_rdma_rc_check(0, 7, "rdma_ack_timeout", "rdma_retry_count", err, sizeof err));
    assert_string_equal(err, "rdma_ack_timeout 0 is out of range: use 1..31 (each try waits "
                             "4.096 us x 2^N for the peer's ACK; 16 = 268 ms)");
    assert_false(rkv_rdma_rc_check(32, 7, "t", "r", err, sizeof err));
    assert_contains(err, "t 32 is out of range: use 1..31");
    assert_false(rkv_rdma_rc_check(16, 0, "t", "rdma_retry_count", err, sizeof err));
    assert_string_equal(err, "rdma_retry_count 0 is out of range: use 1..7 (retransmissions "
                             "before a transfer fails)");
    assert_false(rkv_rdma_rc_check(16, 8, "t", "r", err, sizeof err));
    assert_contains(err, "r 8 is out of range: use 1..7");
}

static void test_ipc_lock_parser(void **state)
{
    (void)state;
    assert_true(rkv_rdma_status_has_ipc_lock(
        "Name:\tx\nCapInh:\t0\nCapPrm:\t0\nCapEff:\t000001ffffffffff\n"));
    assert_true(rkv_rdma_status_has_ipc_lock("CapEff:\t0000000000004000\n"));
    assert_false(
        rkv_rdma_status_has_ipc_lock("CapEff:\t0000000000003fff\nCapBnd:\t000001ffffffffff\n"));
    assert_false(rkv_rdma_status_has_ipc_lock("Name:\tx\nCapEff:\t0000000000000000\n"));
    assert_false(rkv_rdma_status_has_ipc_lock("Name:\tx\n"));
    assert_false(rkv_rdma_status_has_ipc_lock("CapEff:\tzz\n"));
    assert_false(rkv_rdma_status_has_ipc_lock(""));
}

/* The real check for this process: lower the soft limit to 64 KiB and ask
 * for 1 GiB; it must fail exactly when the process lacks CAP_IPC_LOCK. */
static void test_check_memlock_self(void **state)
{
    struct rlimit saved, low;
    char status[4096] = "", err[300] = "";
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n;
    (void)state;

    assert_true(fd >= 0);
    n = read(fd, status, sizeof status - 1);
    close(fd);
    assert_true(n > 0);
    bool cap = rkv_rdma_status_has_ipc_lock(status);
    assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
    low = saved;
    low.rlim_cur = 64 << 10;
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < low.rlim_cur)
        low.rlim_cur = saved.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &low), 0);
    rkv_status st = rkv_rdma_check_memlock(1ull << 30, "region", err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
    if (cap) {
        assert_int_equal(st, RKV_OK);
    } else {
        assert_int_equal(st, RKV_NO_MEMORY);
        assert_contains(err, "is below the 1 GiB region");
    }
    assert_int_equal(rkv_rdma_check_memlock(4096, "region", err, sizeof err), RKV_OK);
}

/* ------------------------------------------------------------ addresses */

static void test_parse_addr(void **state)
{
    struct sockaddr_storage ss;
    char err[200], text[80];
    (void)state;

    assert_int_equal(rkv_rdma_parse_addr("192.0.2.1:7471", false, &ss, err, sizeof err), RKV_OK);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 7471);
    assert_false(rkv_rdma_addr_is_wildcard((struct sockaddr *)&ss));
    rkv_rdma_format_addr((struct sockaddr *)&ss, text, sizeof text);
    assert_string_equal(text, "192.0.2.1:7471");

    assert_int_equal(rkv_rdma_parse_addr("0.0.0.0:1", true, &ss, err, sizeof err), RKV_OK);
    assert_true(rkv_rdma_addr_is_wildcard((struct sockaddr *)&ss));

    assert_int_equal(rkv_rdma_parse_addr("[::1]:65535", false, &ss, err, sizeof err), RKV_OK);
    assert_int_equal(ss.ss_family, AF_INET6);
    rkv_rdma_format_addr((struct sockaddr *)&ss, text, sizeof text);
    assert_string_equal(text, "[::1]:65535");
    assert_int_equal(rkv_rdma_parse_addr("[::]:9", true, &ss, err, sizeof err), RKV_OK);
    assert_true(rkv_rdma_addr_is_wildcard((struct sockaddr *)&ss));

    assert_int_equal(rkv_rdma_parse_addr("localhost:80", false, &ss, err, sizeof err), RKV_OK);

    static const char *const bad[] = {
        "192.0.2.1", "192.0.2.1:", "192.0.2.1:0",     "192.0.2.1:65536", ":7471",
        "[::1]7471", "[::1:7471",  "192.0.2.1:7471x", "192.0.2.1:-1",
    };
    for (size_t i = 0; i < RKV_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        assert_int_equal(rkv_rdma_parse_addr(bad[i], false, &ss, err, sizeof err), RKV_INVALID);
        assert_contains(err, "expected HOST:PORT");
    }
    assert_int_equal(rkv_rdma_parse_addr(NULL, false, &ss, err, sizeof err), RKV_INVALID);
    assert_int_equal(rkv_rdma_parse_addr("no-such-host.invalid:7471", false, &ss, err, sizeof err),
                     RKV_INVALID);
    assert_contains(err, "cannot resolve host \"no-such-host.invalid\"");
}

/* ------------------------------------------------------------ send queue */

/* A model of the send queue and its in-order CQ: posted WRs wait in `q`;
 * the "hardware" completes the oldest k of them; only signaled ones
 * produce a completion, which carries wr_id. */
struct sq_model {
    uint64_t wr_id[4096];
    bool sig[4096];
    unsigned head, tail; /* q[head..tail) posted, not completed by hardware */
    uint64_t cq[4096];
    unsigned cq_head, cq_tail; /* completions not yet polled */
};

static void model_hw_complete(struct sq_model *m, unsigned k)
{
    while (k-- > 0 && m->head != m->tail) {
        unsigned i = m->head++ % 4096;
        if (m->sig[i])
            m->cq[m->cq_tail++ % 4096] = m->wr_id[i];
    }
}

/* Poll everything the model CQ has; what rkv_rdma_sq_wait does minus ibv. */
static void model_poll(struct sq_model *m, struct rkv_rdma_sq *sq)
{
    while (m->cq_head != m->cq_tail)
        rkv_rdma_sq_done(sq, m->cq[m->cq_head++ % 4096]);
}

/* Wait until at most `limit` are outstanding, letting the hardware finish
 * one WR at a time; fails the test if that can never happen. */
static void model_wait(struct sq_model *m, struct rkv_rdma_sq *sq, uint32_t limit)
{
    while (sq->outstanding > limit) {
        assert_true(sq->outstanding != sq->unsignaled); /* a completion must be coming */
        model_hw_complete(m, 1);
        model_poll(m, sq);
    }
}

static void test_sq_signaling(void **state)
{
    static const uint32_t intervals[] = { 1, 2, 7, 16, 64 };
    (void)state;
    srand(12345);
    for (size_t k = 0; k < RKV_ARRAY_SIZE(intervals); k++) {
        static struct sq_model m;
        struct rkv_rdma_sq sq;
        const uint32_t credits = 64, interval = intervals[k];
        const uint32_t keep = 2 * interval, depth = credits + keep + 1;
        unsigned run = 0, posted = 0;

        memset(&m, 0, sizeof m);
        rkv_rdma_sq_init(&sq, depth, keep, interval);
        for (int batch = 0; batch < 3000; batch++) {
            unsigned n = 1 + (unsigned)rand() % credits;
            bool is_read = rand() % 8 == 0;
            if (is_read)
                n = 1 + n % 8;
            model_wait(&m, &sq, depth - n); /* room before posting */
            for (unsigned i = 0; i < n; i++) {
                bool last = i + 1 == n, sig;
                uint64_t id = rkv_rdma_sq_take(&sq, last, is_read && last, &sig);
                unsigned slot = m.tail++ % 4096;
                m.wr_id[slot] = id;
                m.sig[slot] = sig;
                posted++;
                run = sig ? 0 : run + 1;
                assert_true(run < interval); /* one in `interval` signaled */
                if (last && sq.outstanding > keep)
                    assert_true(sig); /* a wait after the batch can finish */
                if (sig)
                    assert_int_equal((uint32_t)(id >> 32), sq.seq);
            }
            assert_true(sq.outstanding <= depth);
            assert_true(m.tail - m.head <= depth); /* never more WRs in flight than slots */
            if (is_read) {
                model_wait(&m, &sq, 0); /* read(): wait for the last READ */
                assert_int_equal(sq.outstanding, 0);
            } else {
                model_wait(&m, &sq, keep); /* send ring slots free again */
            }
            /* the hardware sometimes runs ahead on its own */
            model_hw_complete(&m, (unsigned)rand() % 4);
            if (rand() % 2)
                model_poll(&m, &sq);
            /* outstanding = posted and not yet freed by a polled completion */
            assert_true(sq.outstanding >= m.tail - m.head);
        }
        /* drain: every WR is accounted for exactly once */
        model_hw_complete(&m, 1u << 20);
        model_poll(&m, &sq);
        assert_int_equal(sq.outstanding, sq.unsignaled);
        assert_int_equal(m.tail, posted);
    }
}

static void test_sq_wait_deadlock_guard(void **state)
{
    struct rkv_rdma_sq sq;
    enum ibv_wc_status bad;
    bool sig;
    (void)state;
    rkv_rdma_sq_init(&sq, 8, 8, 4);
    rkv_rdma_sq_take(&sq, false, false, &sig);
    assert_false(sig);
    rkv_rdma_sq_take(&sq, true, false, &sig); /* 2 outstanding <= keep: unsignaled */
    assert_false(sig);
    /* waiting for fewer than the unsignaled tail can never finish; the CQ
     * pointer is never touched on that path */
    assert_int_equal(rkv_rdma_sq_wait(&sq, NULL, 0, 0, NULL, NULL, &bad), -EDEADLK);
    assert_int_equal(rkv_rdma_sq_wait(&sq, NULL, 2, 0, NULL, NULL, &bad), 0);
    /* a completion frees exactly the count in its wr_id, never below zero */
    rkv_rdma_sq_done(&sq, ((uint64_t)1 << 32) | 5);
    assert_int_equal(sq.outstanding, 0);
}

static void test_ring_slots(void **state)
{
    static uint8_t mem[5 * 64];
    struct rkv_rdma_ring r = {
        .buf = { .mem = mem, .size = sizeof mem }, .stride = 64, .count = 5, .head = 3
    };
    (void)state;
    assert_ptr_equal(rkv_rdma_ring_slot(&r, 0), mem + 3 * 64);
    assert_ptr_equal(rkv_rdma_ring_slot(&r, 1), mem + 4 * 64);
    assert_ptr_equal(rkv_rdma_ring_slot(&r, 2), mem);
    assert_ptr_equal(rkv_rdma_ring_slot(&r, 6), mem + 4 * 64);
}

/* ------------------------------------------------------------ the real stack */

static void test_device_environment(void **state)
{
    char err[512] = "";
    struct ibv_context *ctx = NULL;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    (void)state;

    rkv_status st = rkv_rdma_open_id(NULL, &ch, &id, err, sizeof err);
    if (!rkv_rdma_sysfs_has_devices()) {
        /* what a user on a machine without RDMA sees */
        assert_int_equal(st, RKV_CONNECTION);
        assert_null(ch);
        assert_null(id);
        assert_contains(err, "no RDMA device found");
        assert_contains(err, "rdma link add rxe0 type rxe netdev eth0");
        assert_int_equal(rkv_rdma_find_device(NULL, &ctx, err, sizeof err), RKV_CONNECTION);
        assert_null(ctx);
        assert_contains(err, "no RDMA device found");
        return;
    }
    assert_int_equal(st, RKV_OK);
    assert_non_null(id);
    assert_true(fcntl(ch->fd, F_GETFL) & O_NONBLOCK);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);

    const char *dev = getenv("RXE_DEV");
    assert_int_equal(rkv_rdma_find_device(dev, &ctx, err, sizeof err), RKV_OK);
    assert_non_null(ctx);
    if (dev != NULL)
        assert_string_equal(rkv_rdma_device_name(ctx), dev);
    assert_int_equal(rkv_rdma_find_device("no-such-dev0", &ctx, err, sizeof err), RKV_INVALID);
    assert_contains(err, "RDMA device \"no-such-dev0\" not found; this host has: ");
    assert_int_equal(rkv_rdma_find_device(dev, &ctx, err, sizeof err), RKV_OK);

    struct rkv_rdma_caps caps;
    assert_int_equal(rkv_rdma_query_caps(ctx, &caps, err, sizeof err), RKV_OK);
    assert_true(caps.max_qp_wr >= 64);
    assert_int_equal(rkv_rdma_check_port(ctx, 0, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_rdma_check_port(ctx, 1, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_rdma_check_gid(ctx, 1, -1, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_rdma_check_gid(ctx, 1, 10000, err, sizeof err), RKV_INVALID);
    assert_contains(err, "GID index 10000 is out of range");
    const char *gid = getenv("RXE_GID_INDEX");
    if (gid != NULL)
        assert_int_equal(rkv_rdma_check_gid(ctx, 1, atoi(gid), err, sizeof err), RKV_OK);

    /* a registered buffer: page aligned, zeroed, with keys */
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct rkv_rdma_buf b;
    assert_non_null(pd);
    assert_int_equal(rkv_rdma_buf_alloc(pd, 5000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
                                        "test", &b, err, sizeof err),
                     RKV_OK);
    assert_true(b.size >= 5000 && ((uintptr_t)b.mem & 4095) == 0);
    assert_int_equal(b.mem[4999], 0);
    assert_true(b.mr->lkey != 0 || b.mr->rkey != 0);
    rkv_rdma_buf_free(&b);
    assert_null(b.mem);
    assert_int_equal(ibv_dealloc_pd(pd), 0);
}

static void test_client_connect_errors(void **state)
{
    const struct rkv_client_transport *ct = &rkv_rdma_client_transport;
    struct rkv_trans_counters ctr = { 0 };
    struct rkv_ctrans_params p = { .timeout_ms = 3000 };
    struct rkv_ctrans *t = NULL;
    char err[512] = "", addr[64];
    const char *ip = getenv("RXE_IP");
    (void)state;

    assert_int_equal(ct->connect("no-port", &p, &ctr, &t, err, sizeof err), RKV_INVALID);
    assert_contains(err, "expected HOST:PORT");
    assert_int_equal(ct->connect("0.0.0.0:7471", &p, &ctr, &t, err, sizeof err), RKV_INVALID);
    assert_contains(err, "wildcard");
    assert_null(t);
    if (!rkv_rdma_sysfs_has_devices()) {
        assert_int_equal(ct->connect("192.0.2.1:7471", &p, &ctr, &t, err, sizeof err),
                         RKV_CONNECTION);
        assert_contains(err, "no RDMA device found");
        assert_contains(err, "rdma link add rxe0 type rxe netdev eth0");
        assert_null(t);
        return;
    }
    if (ip == NULL)
        skip(); /* a device, but not the VM's: no address known to route through it */
    snprintf(addr, sizeof addr, "%s:7999", ip);
    assert_int_equal(ct->connect(addr, &p, &ctr, &t, err, sizeof err), RKV_CONNECTION);
    assert_contains(err, "nothing listens on that port");
    assert_null(t);
    p.device = "mlx5_9";
    assert_int_equal(ct->connect(addr, &p, &ctr, &t, err, sizeof err), RKV_INVALID);
    assert_contains(err, "not mlx5_9 (rdma_device)");
    assert_null(t);
    assert_int_equal(ctr.doorbells, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wc_status_names),
        cmocka_unit_test(test_wc_error_format),
        cmocka_unit_test(test_async_event_texts),
        cmocka_unit_test(test_port_state_names),
        cmocka_unit_test(test_cm_errors),
        cmocka_unit_test(test_errno_errors),
        cmocka_unit_test(test_memlock_ok),
        cmocka_unit_test(test_rc_detect_time),
        cmocka_unit_test(test_rc_check),
        cmocka_unit_test(test_ipc_lock_parser),
        cmocka_unit_test(test_check_memlock_self),
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test(test_sq_signaling),
        cmocka_unit_test(test_sq_wait_deadlock_guard),
        cmocka_unit_test(test_ring_slots),
        cmocka_unit_test(test_device_environment),
        cmocka_unit_test(test_client_connect_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
