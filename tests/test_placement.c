/* test_placement.c — which server owns a key: jump and ketama, and the URI
 * parameters that choose and describe them.
 *
 * The ketama vectors (point counts, the continuum's first points, the owner
 * of each key) were computed independently of librkv by
 * tests/ketama_vectors.py from twemproxy's algorithm with Python's hashlib,
 * and are pinned here. tests/test_twemproxy.c checks the same agreement
 * against a real nutcracker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "placement.h"
#include "rkv.h"
#include "shard.h"

static const struct {
    const char *key;
    size_t len;
} keys[] = {
    { "a", 1 },
    { "key", 3 },
    { "foo", 3 },
    { "bar", 3 },
    { "user:1000", 9 },
    { "user:1001", 9 },
    { "session-42", 10 },
    { "0123456789abcdef", 16 },
    { "\x00\xff binary", 9 },
    { NULL, 250 } /* 250 × 'x' */,
};
#define NKEYS (sizeof keys / sizeof keys[0])

static char err[512];

/* Build a placer from a URI list (commas), as rkv_connect does. */
static rkv_status place(struct rkv_placer *p, rkv_placement kind, const char *list)
{
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", list);
    err[0] = '\0';
    rkv_status st = rkv_placement_init(p, kind, err, sizeof err);
    char *save = NULL;
    for (char *u = strtok_r(copy, ",", &save); st == RKV_OK && u; u = strtok_r(NULL, ",", &save))
        st = rkv_placement_add(p, u, err, sizeof err);
    if (st == RKV_OK)
        st = rkv_placement_build(p, err, sizeof err);
    return st;
}

static void check_owners(const struct rkv_placer *p, const unsigned *want)
{
    char longkey[250];
    memset(longkey, 'x', sizeof longkey);
    for (unsigned i = 0; i < NKEYS; i++) {
        const char *k = keys[i].key ? keys[i].key : longkey;
        unsigned got = rkv_placement_pick(p, k, keys[i].len, rkv_shard_hash(k, keys[i].len));
        if (got != want[i])
            fail_msg("key %u: server %u, twemproxy's ketama says %u", i, got, want[i]);
    }
}

static void test_md5_words(void **state)
{
    (void)state;
    /* RFC 1321: MD5("abc") = 900150983cd24fb0d6963f7d28e17f72 */
    assert_int_equal(rkv_ketama_hash("abc", 3, 0), 0x98500190u);
    assert_int_equal(rkv_ketama_hash("abc", 3, 1), 0xb04fd23cu);
    assert_int_equal(rkv_ketama_hash("abc", 3, 3), 0x727fe128u);
}

static void test_points(void **state)
{
    (void)state;
    assert_int_equal(rkv_ketama_points(1, 3, 3), 160); /* 1/3 in float: the epsilon's case */
    assert_int_equal(rkv_ketama_points(1, 11, 4), 56);
    assert_int_equal(rkv_ketama_points(2, 11, 4), 116);
    assert_int_equal(rkv_ketama_points(5, 11, 4), 288);
    assert_int_equal(rkv_ketama_points(3, 11, 4), 172);
    assert_int_equal(rkv_ketama_points(7, 7, 1), 160);
}

static void test_even3(void **state)
{
    (void)state;
    static const unsigned want[NKEYS] = { 1, 1, 0, 2, 1, 0, 0, 2, 0, 0 };
    struct rkv_placer p;
    assert_int_equal(place(&p, RKV_PLACEMENT_DEFAULT,
                           "shm:///tmp/a.sock?placement=ketama&tcp=127.0.0.1:22122,"
                           "shm:///tmp/b.sock?tcp=127.0.0.1:22123,"
                           "shm:///tmp/c.sock?tcp=127.0.0.1:22124&placement=ketama"),
                     RKV_OK);
    assert_int_equal(p.kind, RKV_PLACEMENT_KETAMA);
    assert_string_equal(p.servers[1].name, "127.0.0.1:22123");
    assert_int_equal(p.npoints, 480);
    assert_int_equal(p.points[0].value, 0x0037bc91u);
    assert_int_equal(p.points[0].server, 1);
    assert_int_equal(p.points[1].value, 0x005ba2e9u);
    assert_int_equal(p.points[1].server, 2);
    assert_int_equal(p.points[2].value, 0x01e0290fu);
    for (uint32_t i = 1; i < p.npoints; i++)
        assert_true(p.points[i - 1].value <= p.points[i].value);
    check_owners(&p, want);
    /* a hash past the last point wraps to the first point's server */
    assert_int_equal(rkv_ketama_find(p.points, p.npoints, UINT32_MAX), p.points[0].server);
    assert_int_equal(rkv_ketama_find(p.points, p.npoints, 0), p.points[0].server);
    assert_int_equal(rkv_ketama_find(p.points, p.npoints, 0x0037bc92u), 2);
    rkv_placement_free(&p);

    /* the same servers chosen by rkv_options, named by name= */
    assert_int_equal(place(&p, RKV_PLACEMENT_KETAMA,
                           "shm:///tmp/a.sock?name=127.0.0.1:22122,"
                           "shm:///tmp/b.sock?name=127.0.0.1:22123,"
                           "shm:///tmp/c.sock?name=127.0.0.1:22124"),
                     RKV_OK);
    check_owners(&p, want);
    rkv_placement_free(&p);
}

static void test_weighted(void **state)
{
    (void)state;
    static const unsigned want[NKEYS] = { 0, 1, 2, 2, 1, 0, 2, 1, 2, 3 };
    struct rkv_placer p;
    assert_int_equal(place(&p, RKV_PLACEMENT_KETAMA,
                           "shm:///tmp/a.sock?name=alpha,shm:///tmp/b.sock?name=beta&weight=2,"
                           "rdma://10.1.1.1:7000?weight=5&name=gamma,shm:///d?weight=3&name=delta"),
                     RKV_OK);
    assert_int_equal(p.npoints, 632);
    assert_int_equal(p.points[0].value, 0x0031b809u);
    assert_int_equal(p.points[0].server, 3);
    check_owners(&p, want);
    rkv_placement_free(&p);
}

/* memcached's default port is left out of the name, as libmemcached and
 * twemproxy leave it out: through tcp= and from the URI's own address. */
static void test_default_port_name(void **state)
{
    (void)state;
    static const unsigned want[NKEYS] = { 1, 0, 1, 1, 1, 1, 0, 1, 1, 0 };
    struct rkv_placer p;
    assert_int_equal(place(&p, RKV_PLACEMENT_KETAMA,
                           "shm:///tmp/a.sock?tcp=10.0.0.1:11211,rdma://10.0.0.2:11211"),
                     RKV_OK);
    assert_string_equal(p.servers[0].name, "10.0.0.1");
    assert_string_equal(p.servers[1].name, "10.0.0.2");
    assert_int_equal(p.npoints, 320);
    assert_int_equal(p.points[0].value, 0x0116d1edu);
    check_owners(&p, want);
    rkv_placement_free(&p);

    assert_int_equal(place(&p, RKV_PLACEMENT_KETAMA, "rdma://h:7000?weight=1,shm:///run/x.sock"),
                     RKV_OK);
    assert_string_equal(p.servers[0].name, "h:7000");
    assert_string_equal(p.servers[1].name, "/run/x.sock");
    rkv_placement_free(&p);
}

/* Without ketama the key's XXH3 goes through jump hashing, as before. */
static void test_jump_default(void **state)
{
    (void)state;
    struct rkv_placer p;
    assert_int_equal(place(&p, RKV_PLACEMENT_DEFAULT, "shm:///a,shm:///b,shm:///c?placement=jump"),
                     RKV_OK);
    assert_int_equal(p.kind, RKV_PLACEMENT_JUMP);
    for (unsigned i = 0; i < 1000; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "k%u", i);
        uint64_t h = rkv_shard_hash(k, (size_t)n);
        assert_int_equal(rkv_placement_pick(&p, k, (size_t)n, h), rkv_jump_hash(h, 3));
    }
    rkv_placement_free(&p);
    /* one server owns everything, under either policy */
    assert_int_equal(place(&p, RKV_PLACEMENT_KETAMA, "shm:///a"), RKV_OK);
    assert_int_equal(rkv_placement_pick(&p, "k", 1, rkv_shard_hash("k", 1)), 0);
    rkv_placement_free(&p);
}

/* URIs cut at '?': the transport sees scheme://address only. */
static void test_params_stripped(void **state)
{
    (void)state;
    struct rkv_placer p;
    char uri[] = "shm:///tmp/a.sock?placement=ketama&weight=4";
    assert_int_equal(rkv_placement_init(&p, RKV_PLACEMENT_DEFAULT, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_placement_add(&p, uri, err, sizeof err), RKV_OK);
    assert_string_equal(uri, "shm:///tmp/a.sock");
    assert_int_equal(p.servers[0].weight, 4);
    assert_string_equal(p.servers[0].name, "/tmp/a.sock");
    rkv_placement_free(&p);
}

static void refused(rkv_placement kind, const char *list, const char *why)
{
    struct rkv_placer p;
    rkv_status st = place(&p, kind, list);
    rkv_placement_free(&p);
    if (st != RKV_INVALID || strstr(err, why) == NULL)
        fail_msg("\"%s\": status %s, message \"%s\"; wanted invalid with \"%s\"", list,
                 rkv_status_name(st), err, why);
}

static void test_refused(void **state)
{
    (void)state;
    refused(RKV_PLACEMENT_DEFAULT, "shm:///a?colour=red", "bad parameter \"colour\"");
    refused(RKV_PLACEMENT_DEFAULT, "shm:///a?weight", "bad parameter \"weight\"");
    refused(RKV_PLACEMENT_DEFAULT, "shm:///a?name=", "bad parameter \"name\"");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?weight=0",
            "weight \"0\" is not a whole number in 1..65535");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?weight=65536", "1..65535");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?weight=2x", "1..65535");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?weight=1&weight=2", "weight= given twice");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?name=x&tcp=h:1", "name= and tcp= both");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?tcp=nohost", "is not HOST:PORT");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?tcp=h:0", "is not HOST:PORT");
    refused(RKV_PLACEMENT_DEFAULT, "shm:///a?placement=ring", "unknown placement \"ring\"");
    refused(RKV_PLACEMENT_DEFAULT, "shm:///a?placement=ketama,shm:///b?placement=jump",
            "an earlier URI says placement=ketama");
    refused(RKV_PLACEMENT_JUMP, "shm:///a?placement=ketama", "rkv_options.placement asks for jump");
    refused(RKV_PLACEMENT_DEFAULT, "shm:///a,shm:///b?weight=2", "add placement=ketama");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?name=n,shm:///b?name=n", "both named \"n\"");
    refused(RKV_PLACEMENT_KETAMA, "shm:///a?tcp=h:11211,shm:///b?name=h", "both named \"h\"");
    refused((rkv_placement)7, "shm:///a", "unknown rkv_options.placement 7");
}

/* rkv_connect refuses bad placement before it connects anywhere. */
static void test_connect_refuses(void **state)
{
    (void)state;
    rkv_client *c = (rkv_client *)1;
    assert_int_equal(rkv_connect("shm:///nonexistent.sock?weight=0&placement=ketama", NULL, &c),
                     RKV_INVALID);
    assert_null(c);
    assert_non_null(strstr(rkv_last_error(NULL), "weight \"0\""));
    struct rkv_options o = { .placement = RKV_PLACEMENT_KETAMA };
    assert_int_equal(rkv_connect("shm:///x.sock?name=a,shm:///y.sock?name=a", &o, &c), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(NULL), "both named \"a\""));
    o.placement = (rkv_placement)3;
    assert_int_equal(rkv_connect("shm:///x.sock", &o, &c), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(NULL), "unknown rkv_options.placement 3"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_md5_words),
        cmocka_unit_test(test_points),
        cmocka_unit_test(test_even3),
        cmocka_unit_test(test_weighted),
        cmocka_unit_test(test_default_port_name),
        cmocka_unit_test(test_jump_default),
        cmocka_unit_test(test_params_stripped),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_connect_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
