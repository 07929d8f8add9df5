/* test_transport_params.c — the transport parameters' defaults
 * (common/transport.c).
 *
 * Client side (rkv_ctrans_params_init/resolve), which both client transports
 * resolve their parameters through:
 *   - init holds librkv's defaults (rkv.h's RKV_DEFAULT_*, rdma_util.h's);
 *   - a NULL params pointer and an all-zero struct both resolve to init;
 *   - explicit values are kept, one field at a time, and signal_interval is
 *     capped at RKV_RDMA_MAX_SIGNAL;
 *   - an oversized local buffer and RC settings out of range are refused
 *     with a message naming the field and what is accepted;
 *   - shm and rdma connect() refuse such parameters alike, before they look
 *     at the address (so no server and no RDMA device are needed).
 * Server side (rkv_strans_params_init/resolve): NULL and zeros resolve to
 * init, and gid_index 0 stays GID 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "rdma_util.h"
#include "rkv.h"
#include "transport.h"

static void assert_contains(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL)
        fail_msg("\"%s\" does not contain \"%s\"", text, needle);
}

static void assert_same_ctrans(const struct rkv_ctrans_params *a, const struct rkv_ctrans_params *b)
{
    assert_int_equal(a->local_buf_size, b->local_buf_size);
    assert_int_equal(a->timeout_ms, b->timeout_ms);
    assert_int_equal(a->signal_interval, b->signal_interval);
    assert_ptr_equal(a->device, b->device);
    assert_int_equal(a->ack_timeout, b->ack_timeout);
    assert_int_equal(a->retry_count, b->retry_count);
}

static void assert_same_strans(const struct rkv_strans_params *a, const struct rkv_strans_params *b)
{
    assert_int_equal(a->credits, b->credits);
    assert_int_equal(a->max_msg, b->max_msg);
    assert_int_equal(a->max_conns, b->max_conns);
    assert_ptr_equal(a->rejected, b->rejected);
    assert_int_equal(a->make_dir, b->make_dir);
    assert_ptr_equal(a->now_ns, b->now_ns);
    assert_ptr_equal(a->device, b->device);
    assert_int_equal(a->cq_size, b->cq_size);
    assert_int_equal(a->max_inline, b->max_inline);
    assert_int_equal(a->signal_interval, b->signal_interval);
    assert_int_equal(a->tos, b->tos);
    assert_int_equal(a->gid_index, b->gid_index);
    assert_int_equal(a->ack_timeout, b->ack_timeout);
    assert_int_equal(a->retry_count, b->retry_count);
}

/* ------------------------------------------------------------ client side */

static void test_ctrans_init(void **state)
{
    (void)state;
    struct rkv_ctrans_params d;
    memset(&d, 0xa5, sizeof d);
    rkv_ctrans_params_init(&d);
    assert_int_equal(d.timeout_ms, RKV_DEFAULT_TIMEOUT_MS);
    assert_int_equal(d.ack_timeout, RKV_DEFAULT_RDMA_ACK_TIMEOUT);
    assert_int_equal(d.retry_count, RKV_DEFAULT_RDMA_RETRY_COUNT);
    assert_int_equal(d.signal_interval, RKV_RDMA_DEFAULT_SIGNAL);
    assert_null(d.device);
    /* room for two buckets and a largest item of a 1 MiB slab page */
    assert_true(d.local_buf_size >= (2u << 20));
    assert_true(d.local_buf_size <= RKV_CTRANS_MAX_LOCAL_BUF);
    /* the defaults are usable as they are */
    struct rkv_ctrans_params out;
    char err[256] = "";
    assert_int_equal(rkv_ctrans_params_resolve(&d, &out, err, sizeof err), RKV_OK);
    assert_same_ctrans(&out, &d);
    assert_string_equal(err, "");
}

static void test_ctrans_null_and_zeros_are_defaults(void **state)
{
    (void)state;
    struct rkv_ctrans_params d, out, zeros = { 0 };
    char err[256] = "";
    rkv_ctrans_params_init(&d);

    memset(&out, 0x5a, sizeof out);
    assert_int_equal(rkv_ctrans_params_resolve(NULL, &out, err, sizeof err), RKV_OK);
    assert_same_ctrans(&out, &d);

    memset(&out, 0x5a, sizeof out);
    assert_int_equal(rkv_ctrans_params_resolve(&zeros, &out, err, sizeof err), RKV_OK);
    assert_same_ctrans(&out, &d);
    assert_string_equal(err, "");
}

static void test_ctrans_explicit_values_kept(void **state)
{
    (void)state;
    struct rkv_ctrans_params d, out;
    char err[256];
    rkv_ctrans_params_init(&d);

    /* every field set at once */
    const struct rkv_ctrans_params all = { .local_buf_size = 1u << 16,
                                           .timeout_ms = 250,
                                           .signal_interval = 3,
                                           .device = "rxe0",
                                           .ack_timeout = 12,
                                           .retry_count = 2 };
    assert_int_equal(rkv_ctrans_params_resolve(&all, &out, err, sizeof err), RKV_OK);
    assert_same_ctrans(&out, &all);

    /* one field at a time: it is kept, every other is the default */
    struct rkv_ctrans_params p = { .local_buf_size = RKV_CTRANS_MAX_LOCAL_BUF };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_int_equal(out.local_buf_size, RKV_CTRANS_MAX_LOCAL_BUF);
    assert_int_equal(out.timeout_ms, d.timeout_ms);
    p = (struct rkv_ctrans_params){ .timeout_ms = 1 };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_int_equal(out.timeout_ms, 1);
    assert_int_equal(out.local_buf_size, d.local_buf_size);
    assert_int_equal(out.signal_interval, d.signal_interval);
    p = (struct rkv_ctrans_params){ .ack_timeout = RKV_RDMA_ACK_TIMEOUT_MAX,
                                    .retry_count = RKV_RDMA_RETRY_COUNT_MIN };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_int_equal(out.ack_timeout, RKV_RDMA_ACK_TIMEOUT_MAX);
    assert_int_equal(out.retry_count, RKV_RDMA_RETRY_COUNT_MIN);
    assert_int_equal(out.timeout_ms, d.timeout_ms);
    p = (struct rkv_ctrans_params){ .device = "mlx5_0" };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_string_equal(out.device, "mlx5_0");
    assert_int_equal(out.retry_count, d.retry_count);
}

/* rdma capped signal_interval rather than refusing it; resolve does the same. */
static void test_ctrans_signal_interval_capped(void **state)
{
    (void)state;
    struct rkv_ctrans_params out, p = { .signal_interval = RKV_RDMA_MAX_SIGNAL };
    char err[256];
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_int_equal(out.signal_interval, RKV_RDMA_MAX_SIGNAL);
    p.signal_interval = RKV_RDMA_MAX_SIGNAL + 1;
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_int_equal(out.signal_interval, RKV_RDMA_MAX_SIGNAL);
    p.signal_interval = 1;
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_OK);
    assert_int_equal(out.signal_interval, 1);
}

static void test_ctrans_out_of_range_refused(void **state)
{
    (void)state;
    struct rkv_ctrans_params out, p;
    char err[256];

    p = (struct rkv_ctrans_params){ .local_buf_size = RKV_CTRANS_MAX_LOCAL_BUF + 1 };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_INVALID);
    assert_string_equal(err, "local buffer of 1073741825 bytes is over the 1 GiB limit; lower "
                             "local_buf_size");

    p = (struct rkv_ctrans_params){ .ack_timeout = RKV_RDMA_ACK_TIMEOUT_MAX + 1 };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_INVALID);
    assert_contains(err, "ack_timeout 32 is out of range: use 1..31");

    p = (struct rkv_ctrans_params){ .retry_count = RKV_RDMA_RETRY_COUNT_MAX + 1 };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_INVALID);
    assert_contains(err, "retry_count 8 is out of range: use 1..7");

    /* an explicit value is refused even where the rest are defaults */
    p = (struct rkv_ctrans_params){ .timeout_ms = 10, .retry_count = 100 };
    assert_int_equal(rkv_ctrans_params_resolve(&p, &out, err, sizeof err), RKV_INVALID);
    assert_contains(err, "retry_count 100 is out of range");
}

/* Both client transports resolve first: the same parameters are refused
 * with the same status and message, whatever the address. */
static void test_transports_resolve_alike(void **state)
{
    (void)state;
    static const struct {
        const struct rkv_client_transport *ops;
        const char *addr;
    } transports[] = {
        { &rkv_shm_client_transport, "/nonexistent/rkv-test.sock" },
        { &rkv_rdma_client_transport, "192.0.2.1:7471" },
    };
    const struct rkv_ctrans_params bad[] = {
        { .local_buf_size = RKV_CTRANS_MAX_LOCAL_BUF + 1 },
        { .ack_timeout = 40 },
        { .retry_count = 9 },
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        char want[256], err[256];
        struct rkv_ctrans_params out;
        assert_int_equal(rkv_ctrans_params_resolve(&bad[b], &out, want, sizeof want), RKV_INVALID);
        for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++) {
            struct rkv_trans_counters ctr = { 0 };
            struct rkv_ctrans *t = (struct rkv_ctrans *)(uintptr_t)1; /* connect sets NULL */
            err[0] = '\0';
            assert_int_equal(transports[i].ops->connect(transports[i].addr, &bad[b], &ctr, &t, err,
                                                        sizeof err),
                             RKV_INVALID);
            assert_string_equal(err, want);
            assert_null(t);
            assert_int_equal(ctr.doorbells, 0);
        }
    }
}

/* ------------------------------------------------------------ server side */

static void test_strans_null_and_zeros_are_defaults(void **state)
{
    (void)state;
    struct rkv_strans_params d, out, zeros = { 0 };
    rkv_strans_params_init(&d);
    rkv_strans_params_resolve(NULL, &out);
    assert_same_strans(&out, &d);
    assert_int_equal(out.gid_index, -1); /* rdma_cm's choice */

    rkv_strans_params_resolve(&zeros, &out);
    assert_int_equal(out.credits, d.credits);
    assert_int_equal(out.max_msg, d.max_msg);
    assert_int_equal(out.max_conns, d.max_conns);
    assert_int_equal(out.max_inline, d.max_inline);
    assert_int_equal(out.signal_interval, d.signal_interval);
    assert_int_equal(out.ack_timeout, d.ack_timeout);
    assert_int_equal(out.retry_count, d.retry_count);
    assert_int_equal(out.gid_index, 0); /* GID 0, not rdma_cm's choice */

    struct rkv_strans_params p = { .credits = 7, .max_msg = 8192, .max_conns = 3 };
    rkv_strans_params_resolve(&p, &out);
    assert_int_equal(out.credits, 7);
    assert_int_equal(out.max_msg, 8192);
    assert_int_equal(out.max_conns, 3);
    assert_int_equal(out.max_inline, d.max_inline);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctrans_init),
        cmocka_unit_test(test_ctrans_null_and_zeros_are_defaults),
        cmocka_unit_test(test_ctrans_explicit_values_kept),
        cmocka_unit_test(test_ctrans_signal_interval_capped),
        cmocka_unit_test(test_ctrans_out_of_range_refused),
        cmocka_unit_test(test_transports_resolve_alike),
        cmocka_unit_test(test_strans_null_and_zeros_are_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
