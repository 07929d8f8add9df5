/* test_rdma_lanes.c — a shared rdma handle's READ lanes against a real
 * server (run in the Soft-RoCE guest: tests/verbs/run.sh lanes).
 *
 * Threads GET and PUT through one RKV_OPT_SHARED handle, each checking
 * every value it reads; the handle opens min(threads, lanes allowed) lanes,
 * in the plain PD on Soft-RoCE (no thread domains there: the counters say
 * which way each lane went), and the server then holds exactly 1 + lanes
 * QPs, none after rkv_close. A lane that sends a message is closed, and a
 * lane with the wrong key is refused, while the connection beside it goes
 * on. Waits are for conditions (the server's QPs, as `rdma resource`
 * lists them), bounded generously, never for time.
 *
 * Usage: RKV_TEST_LISTEN=rdma://IP:PORT test_rdma_lanes PATH/TO/rkv-server
 * (without rdma it skips, exit 77).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <cmocka.h>

#include "protocol.h"
#include "read_lane.h"
#include "rkv.h"
#include "server_proc.h"
#include "transport.h"
#include "util.h"

#define NTHREADS  4
#define LANES_CAP 2  /* RKV_RDMA_LANES: fewer lanes than threads, so some share */
#define KEYS      16 /* per thread */
#define ROUNDS    12

static const char *server_bin;
static unsigned uri_seq;

/* QPs the server process holds (`rdma resource show qp`: one line per QP,
 * "... pid N comm ..."); -1 if the tool cannot say. */
static int server_qps(pid_t pid)
{
    char line[512], pat[32];
    int n = 0;
    FILE *f = popen("rdma resource show qp 2>/dev/null", "r");
    if (f == NULL)
        return -1;
    snprintf(pat, sizeof pat, " pid %d ", (int)pid);
    while (fgets(line, sizeof line, f) != NULL)
        if (strstr(line, pat) != NULL)
            n++;
    return pclose(f) == 0 ? n : -1;
}

/* Wait (bounded: 20 s, a loaded guest's teardown) until the server holds
 * `want` QPs; the count it holds then. */
static int qps_settle(pid_t pid, int want)
{
    int n = server_qps(pid);
    for (unsigned i = 0; i < 400 && n != want; i++) {
        usleep(50000);
        n = server_qps(pid);
    }
    return n;
}

static bool device_is_rxe(void)
{
    int n = 0;
    bool rxe = false;
    struct ibv_device **l = ibv_get_device_list(&n);
    for (int i = 0; l != NULL && i < n; i++)
        rxe = rxe || strncmp(ibv_get_device_name(l[i]), "rxe", 3) == 0;
    if (l != NULL)
        ibv_free_device_list(l);
    return rxe;
}

struct worker {
    pthread_t tid;
    unsigned id;
    rkv_client *c;
    pthread_barrier_t *start;
    char failed[256];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32], val[64], got[64];
    pthread_barrier_wait(w->start);
    for (unsigned r = 0; r < ROUNDS && !w->failed[0]; r++) {
        for (unsigned k = 0; k < KEYS && !w->failed[0]; k++) {
            int kl = snprintf(key, sizeof key, "lane-t%u-k%u", w->id, k);
            int vl = snprintf(val, sizeof val, "t%u k%u r%u", w->id, k, r);
            if (r % 3 == 0 && rkv_put(w->c, key, (size_t)kl, val, (size_t)vl, NULL, NULL) != RKV_OK) {
                snprintf(w->failed, sizeof w->failed, "put %s: %s", key, rkv_last_error(w->c));
                break;
            }
            /* what this thread last wrote: the round r rounded down to a PUT round */
            int el = snprintf(val, sizeof val, "t%u k%u r%u", w->id, k, r - r % 3);
            size_t len = 0;
            rkv_status st = rkv_get(w->c, key, (size_t)kl, got, sizeof got, &len, NULL);
            if (st != RKV_OK || len != (size_t)el || memcmp(got, val, len) != 0)
                snprintf(w->failed, sizeof w->failed, "get %s: %s, %zu bytes (want \"%s\")", key,
                         rkv_strerror(st), len, val);
        }
    }
    return NULL;
}

/* N threads on one shared handle: every value right, min(N, cap) lanes, in
 * the plain PD on Soft-RoCE, 1 + lanes QPs on the server, none after close. */
static void test_threads_on_lanes(void **state)
{
    (void)state;
    static const char *const extra[] = { "--memory", "16M", "--evict", "none", NULL };
    struct server_proc sp;
    char uri[128];
    struct worker w[NTHREADS];
    pthread_barrier_t start;
    rkv_client *c = NULL;
    const struct rkv_options o = { .flags = RKV_OPT_SHARED };
    uint32_t lanes = rkv_lanes_max(sysconf(_SC_NPROCESSORS_ONLN), LANES_CAP);
    lanes = RKV_MIN(lanes, NTHREADS);

    test_uri(uri, sizeof uri, uri_seq++);
    assert_int_equal(server_start(&sp, server_bin, uri, extra), 0);
    assert_int_equal(rkv_connect(uri, &o, &c), RKV_OK);
    assert_int_equal(qps_settle(sp.pid, 1), 1);

    pthread_barrier_init(&start, NULL, NTHREADS);
    for (unsigned i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){ .id = i, .c = c, .start = &start };
        assert_int_equal(pthread_create(&w[i].tid, NULL, worker_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < NTHREADS; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].failed[0])
            fail_msg("thread %u: %s", i, w[i].failed);
    }
    pthread_barrier_destroy(&start);

    struct rkv_counters k;
    rkv_get_counters(c, &k);
    assert_int_equal(k.read_lanes, lanes);
    if (device_is_rxe())
        assert_int_equal(k.read_lanes_td, 0); /* rxe has no thread domains: the fallback */
    assert_true(k.read_lanes_td <= k.read_lanes);
    assert_int_equal(qps_settle(sp.pid, 1 + (int)lanes), 1 + (int)lanes);

    rkv_close(c);
    assert_int_equal(qps_settle(sp.pid, 0), 0);
    assert_int_equal(server_stop(&sp), 0);
}

/* A raw connection (the client transport, no librkv) to the server. */
struct raw {
    const struct rkv_client_transport *ops;
    struct rkv_ctrans *t;
    struct rkv_trans_counters tc;
};

static rkv_status raw_open(struct raw *r, const char *uri, uint32_t lane_key)
{
    char scheme[8], err[256];
    const char *addr;
    memset(r, 0, sizeof *r);
    assert_true(rkv_uri_split(uri, scheme, sizeof scheme, &addr));
    r->ops = rkv_client_transport_by_scheme(scheme);
    struct rkv_ctrans_params p = { .local_buf_size = 1 << 16,
                                   .timeout_ms = 20000,
                                   .lane_key = lane_key };
    return r->ops->connect(addr, &p, &r->tc, &r->t, err, sizeof err);
}

/* Send one message (op, no key) and wait for its reply: its status, or -1
 * when there is none (the server closed the connection). */
static int raw_call(struct raw *r, uint8_t op, uint64_t arg, struct rkv_hello *hello)
{
    struct rkv_req h = { .opcode = op, .req_id = 1, .arg = arg };
    uint32_t len = (uint32_t)rkv_req_build(r->ops->send_buf(r->t, 0), &h, NULL, NULL, 0, NULL, 0);
    const void *reply;
    size_t rlen;
    const struct rkv_resp *resp;
    const uint8_t *payload;
    if (r->ops->send(r->t, &len, 1) != RKV_OK || r->ops->recv(r->t, &reply, &rlen, 5000) != RKV_OK)
        return -1;
    int st = rkv_resp_parse(reply, rlen, &resp, &payload) == RKV_OK ? resp->status : -2;
    if (st == RKV_OK && hello != NULL)
        assert_int_equal(rkv_hello_parse(payload, resp->payload_len, hello), RKV_OK);
    r->ops->recv_done(r->t);
    return st;
}

/* A lane that sends a message is closed (its QP goes); one with the wrong
 * key is refused; the connection that got the key keeps being served. */
static void test_lane_that_sends_is_closed(void **state)
{
    (void)state;
    static const char *const extra[] = { "--memory", "16M", NULL };
    struct server_proc sp;
    char uri[128];
    struct raw conn, lane, bad;
    struct rkv_hello hello;

    test_uri(uri, sizeof uri, uri_seq++);
    assert_int_equal(server_start(&sp, server_bin, uri, extra), 0);
    assert_int_equal(raw_open(&conn, uri, 0), RKV_OK);
    assert_int_equal(raw_call(&conn, RKV_OP_HELLO, RKV_PROTO_VERSION, &hello), RKV_OK);
    assert_true(hello.features & RKV_FEATURE_LANES);
    assert_true(hello.lane_key != 0);

    assert_int_not_equal(raw_open(&bad, uri, hello.lane_key ^ 1u), RKV_OK);
    assert_int_equal(raw_open(&lane, uri, hello.lane_key), RKV_OK);
    assert_int_equal(qps_settle(sp.pid, 2), 2);
    assert_int_equal(raw_call(&lane, RKV_OP_PING, 0, NULL), -1); /* no answer: closed */
    assert_int_equal(qps_settle(sp.pid, 1), 1);
    assert_int_equal(raw_call(&conn, RKV_OP_PING, 0, NULL), RKV_OK);
    lane.ops->close(lane.t);
    conn.ops->close(conn.t);
    assert_int_equal(qps_settle(sp.pid, 0), 0);
    assert_int_equal(server_stop(&sp), 0);
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    const char *l = getenv("RKV_TEST_LISTEN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    if (l == NULL || strncmp(l, "rdma://", 7) != 0) {
        printf("test_rdma_lanes: rdma only (RKV_TEST_LISTEN=rdma://IP:PORT): skipped\n");
        return 77;
    }
    setenv("RKV_RDMA_LANES", "2", 1); /* LANES_CAP, read at each connect */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_on_lanes),
        cmocka_unit_test(test_lane_that_sends_is_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
