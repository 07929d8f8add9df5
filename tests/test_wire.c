/* test_wire.c — which wire protocol a listener speaks, and what that decides.
 *
 * A listen URI's scheme selects a transport (server/transports.c) and a wire
 * protocol (server/wires.c), and each accepted connection keeps that wire
 * (server/wire.h). Here, without a server process:
 *
 *   - each scheme selects its wire (shm, rdma: rkv; tcp: memcache), an
 *     unknown one none;
 *   - each pair fits: the rkv protocol only on a message transport (its
 *     requests call reply_buf, pull and region_desc), the memcached one
 *     only on tcp's byte stream (it works with tcp_server.h's stream view);
 *   - the memcached protocol's listener check: with a shared secret, which
 *     its clients cannot present, only loopback or an explicit allow; the
 *     rkv protocol has no objection;
 *   - the accept hook: the rkv protocol takes a HELLO slot (and says when
 *     that crowded out an older connection), the memcached one takes none,
 *     and closing it gives back nothing it does not hold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "log.h"
#include "server.h"
#include "tcp_server.h"
#include "wire.h"

static const char *const schemes[] = { "shm", "rdma", "tcp" };

/* ------------------------------------------------------------ selection */

static void test_scheme_selects_wire(void **state)
{
    (void)state;
    assert_ptr_equal(rkv_wire_by_scheme("shm"), &rkv_wire_rkv);
    assert_ptr_equal(rkv_wire_by_scheme("rdma"), &rkv_wire_rkv);
    assert_ptr_equal(rkv_wire_by_scheme("tcp"), &rkv_wire_memcache);
    assert_null(rkv_wire_by_scheme(""));
    assert_null(rkv_wire_by_scheme("TCP"));
    assert_null(rkv_wire_by_scheme("memcache"));
    assert_null(rkv_wire_by_scheme("tcpx"));
}

/* Every listen scheme has a transport and a wire, and the wire gets a
 * transport that carries what it needs. */
static void test_wire_fits_its_transport(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        const struct rkv_server_transport *t = rkv_server_transport_by_scheme(schemes[i]);
        const struct rkv_wire *wire = rkv_wire_by_scheme(schemes[i]);
        if (t == NULL || wire == NULL)
            fail_msg("scheme %s: transport %p, wire %p", schemes[i], (const void *)t,
                     (const void *)wire);
        assert_non_null(wire->name);
        assert_non_null(wire->serve);
        if (wire == &rkv_wire_rkv) {
            if (t->msg == NULL)
                fail_msg("scheme %s: the rkv protocol on a transport without message ops",
                         schemes[i]);
            assert_non_null(t->msg->region_desc);
            assert_non_null(t->msg->reply_buf);
            assert_non_null(t->msg->pull);
        } else {
            assert_ptr_equal(wire, &rkv_wire_memcache);
            assert_ptr_equal(t, &rkv_tcp_server_transport);
            assert_null(t->msg);
            assert_true(t->event_driven);
        }
    }
}

/* ------------------------------------------------------------ listener check */

static void test_memcache_listener_needs_loopback_with_a_secret(void **state)
{
    (void)state;
    struct rkv_server_config cfg;
    const struct rkv_wire *mc = &rkv_wire_memcache;
    rkv_server_config_defaults(&cfg);

    /* no secret: nothing to guard */
    assert_int_equal(rkv_wire_check_listener(mc, &cfg, "tcp://192.0.2.1:11211", "192.0.2.1:11211"),
                     0);

    snprintf(cfg.auth_secret, sizeof cfg.auth_secret, "s3cret");
    assert_int_equal(rkv_wire_check_listener(mc, &cfg, "tcp://127.0.0.1:11211", "127.0.0.1:11211"),
                     0);
    assert_int_equal(rkv_wire_check_listener(mc, &cfg, "tcp://[::1]:11211", "[::1]:11211"), 0);
    assert_int_equal(rkv_wire_check_listener(mc, &cfg, "tcp://192.0.2.1:11211", "192.0.2.1:11211"),
                     -1);
    assert_int_equal(rkv_wire_check_listener(mc, &cfg, "tcp://0.0.0.0:11211", "0.0.0.0:11211"), -1);

    cfg.tcp_allow_unauthenticated = true;
    assert_int_equal(rkv_wire_check_listener(mc, &cfg, "tcp://192.0.2.1:11211", "192.0.2.1:11211"),
                     0);

    /* the rkv protocol presents the secret in HELLO: any address will do */
    cfg.tcp_allow_unauthenticated = false;
    assert_int_equal(rkv_wire_check_listener(&rkv_wire_rkv, &cfg, "shm:///tmp/x.sock", "/tmp/x.sock"),
                     0);
}

/* ------------------------------------------------------------ accept */

static const char *fake_peer(struct rkv_sconn *c)
{
    (void)c;
    return "fake peer";
}

/* Only what the accept hooks call. */
static const struct rkv_server_transport fake_transport = {
    .scheme = "fake",
    .peer = fake_peer,
};

static void test_accept_admits_by_wire(void **state)
{
    (void)state;
    struct rkv_server *srv = calloc(1, sizeof *srv);
    struct rkv_sconn conn[3];
    struct rkv_listen_ep ep = { .ops = &fake_transport, .uri = "fake://wire" };
    struct rkv_wconn wc[3];
    assert_non_null(srv);
    rkv_server_config_defaults(&srv->cfg);
    srv->cfg.max_unauth_conns = 1;
    assert_int_equal(rkv_admission_init(srv), 0);
    for (unsigned i = 0; i < 3; i++)
        wc[i] = (struct rkv_wconn){ .ops = &fake_transport,
                                    .wire = i < 2 ? &rkv_wire_rkv : &rkv_wire_memcache,
                                    .conn = &conn[i],
                                    .ep = &ep };

    /* rkv: the one HELLO slot, then a newcomer crowds the first out */
    assert_false(rkv_wire_accept(wc[0].wire, srv, &wc[0]));
    assert_null(rkv_admission_check(srv, &wc[0], 0));
    assert_true(rkv_wire_accept(wc[1].wire, srv, &wc[1]));
    assert_non_null(rkv_admission_check(srv, &wc[0], 0));
    assert_null(rkv_admission_check(srv, &wc[1], 0));

    /* memcache: no slot, no ticket; closing it unauthenticated (refused
     * over max_conns) leaves the rkv connection's slot alone */
    assert_false(rkv_wire_accept(wc[2].wire, srv, &wc[2]));
    assert_int_equal(wc[2].ticket, 0);
    rkv_admission_leave(srv, &wc[2]);
    assert_null(rkv_admission_check(srv, &wc[1], 0));

    rkv_admission_leave(srv, &wc[1]);
    assert_int_equal(atomic_load(&srv->unauth[0]), 0);
    rkv_admission_leave(srv, &wc[0]);
    rkv_admission_free(srv);
    free(srv);
}

int main(void)
{
    rkv_log_set_level(RKV_LOG_ERROR); /* the checks' warnings are expected */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scheme_selects_wire),
        cmocka_unit_test(test_wire_fits_its_transport),
        cmocka_unit_test(test_memcache_listener_needs_loopback_with_a_secret),
        cmocka_unit_test(test_accept_admits_by_wire),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
