/* test_recache.c — librkv's stale-while-revalidate (rkv_get_recache)
 * against a real rkv-server, with its memcached door beside it.
 *
 * A key is made stale through the door (md I, memcached's invalidation);
 * then many clients read it at once, through librkv (each with its own
 * handle or sharing one) and through the door's mg: exactly one wins the
 * recache and every one gets the stale value. The win token is the door's own: a librkv win makes mg answer Z,
 * an mg W makes librkv answer "taken". The winner's put makes a fresh item.
 * A fresh item costs no RPC. No sleeps: threads meet at barriers, and
 * "exactly one" holds whatever order they run in.
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
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "mc_conn.h"
#include "rkv.h"
#include "server_proc.h"

static const char *server_bin;

struct env {
    struct server_proc sp;
    unsigned port;
    rkv_client *kv;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL || server_start_tcp(&e->sp, server_bin, 0, NULL, &e->port, NULL) != 0)
        return -1;
    e->kv = connect_retry(e->sp.uri, NULL, 10000);
    if (e->kv == NULL)
        return -1;
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    rkv_close(e->kv);
    int rc = server_stop(&e->sp);
    free(e);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ the door */

/* A door connection (mc_connect's, with its receive timeout). */
static int door_connect(unsigned port)
{
    int fd = mc_connect(port);
    assert_true(fd >= 0);
    return fd;
}

/* Send req, expect exactly `want` back. */
static void exchange(int fd, const char *req, const char *want)
{
    size_t n = strlen(want);
    char buf[512];
    assert_true(n < sizeof buf);
    assert_true(mc_send_str(fd, req));
    size_t got = mc_recv_n(fd, buf, n);
    buf[got] = '\0';
    if (got != n || memcmp(buf, want, n) != 0)
        fail_msg("request %s\nwanted  %s\ngot     %s", req, want, buf);
}

/* ------------------------------------------------------------ helpers */

/* rkv_get_recache of key with threshold ttl: its status, marks and value. */
static uint32_t recache(rkv_client *c, const char *key, uint32_t ttl, const char *want_value)
{
    char buf[64];
    size_t len = 0;
    struct rkv_recache rc = { .recache_ttl = ttl };
    assert_int_equal(rkv_get_recache(c, key, strlen(key), buf, sizeof buf, &len, NULL, &rc), RKV_OK);
    assert_int_equal(len, strlen(want_value));
    assert_memory_equal(buf, want_value, len);
    return rc.marks;
}

/* ------------------------------------------------------------ tests */

enum { CLIENTS = 8, DOOR_CLIENTS = 2, ROUNDS = 40 };

struct reader {
    rkv_client *c; /* its own handle, or the shared one; NULL: reads through the door */
    int fd;        /* the door connection of a door reader */
    pthread_barrier_t *go;
    unsigned wins, taken, stale, wrong;
};

/* mg herd v through the door, as rkv_get_recache answers: W won, Z taken. */
static rkv_status door_read(int fd, char *buf, size_t *len, struct rkv_recache *rc)
{
    char line[128];
    assert_true(mc_send_str(fd, "mg herd v\r\n"));
    mc_read_line(fd, line, sizeof line);
    rc->marks = (strstr(line, " W") ? RKV_MARK_WON : 0) | (strstr(line, " Z") ? RKV_MARK_TAKEN : 0) |
                (strstr(line, " X") ? RKV_MARK_STALE : 0);
    *len = mc_recv_n(fd, buf, 5) - 2; /* "old\r\n" */
    return strncmp(line, "VA 3", 4) == 0 ? RKV_OK : RKV_PROTOCOL;
}

static void *reader_loop(void *arg)
{
    struct reader *r = arg;
    for (unsigned round = 0; round < ROUNDS; round++) {
        char buf[16];
        size_t len = 0;
        struct rkv_recache rc = { 0 };
        pthread_barrier_wait(r->go); /* the key is stale again */
        rkv_status st = r->c == NULL
                            ? door_read(r->fd, buf, &len, &rc)
                            : rkv_get_recache(r->c, "herd", 4, buf, sizeof buf, &len, NULL, &rc);
        r->wrong += st != RKV_OK || len != 3 || memcmp(buf, "old", 3) != 0;
        r->wins += (rc.marks & RKV_MARK_WON) != 0;
        r->taken += (rc.marks & RKV_MARK_TAKEN) != 0;
        r->stale += (rc.marks & RKV_MARK_STALE) != 0;
        r->wrong += ((rc.marks & RKV_MARK_WON) != 0) == ((rc.marks & RKV_MARK_TAKEN) != 0);
        pthread_barrier_wait(r->go); /* every answer is in */
    }
    return NULL;
}

/* N clients read a stale key at once, round after round: one wins, every
 * one gets the stale value marked stale, the others are told it is taken.
 * Two read through the door (mg), the others through librkv: half of
 * those with a handle each, half sharing one (RKV_OPT_SHARED). */
static void test_one_winner(void **state)
{
    struct env *e = *state;
    int fd = door_connect(e->port);
    pthread_barrier_t go;
    pthread_t t[CLIENTS];
    struct reader r[CLIENTS];
    struct rkv_options shared_opts = { .flags = RKV_OPT_SHARED };
    rkv_client *shared = connect_retry(e->sp.uri, &shared_opts, 10000);
    assert_non_null(shared);
    assert_int_equal(pthread_barrier_init(&go, NULL, CLIENTS + 1), 0);
    exchange(fd, "set herd 0 0 3\r\nold\r\n", "STORED\r\n");
    for (int i = 0; i < CLIENTS; i++) {
        bool door = i < DOOR_CLIENTS;
        rkv_client *c = door ? NULL : i % 2 ? shared : connect_retry(e->sp.uri, NULL, 10000);
        assert_true(door || c != NULL);
        r[i] = (struct reader){ .c = c, .fd = door ? door_connect(e->port) : -1, .go = &go };
        assert_int_equal(pthread_create(&t[i], NULL, reader_loop, &r[i]), 0);
    }
    for (unsigned round = 0; round < ROUNDS; round++) {
        exchange(fd, "md herd I\r\n", "HD\r\n"); /* stale, token free */
        pthread_barrier_wait(&go);
        pthread_barrier_wait(&go);
        unsigned wins = 0;
        for (int i = 0; i < CLIENTS; i++)
            wins += r[i].wins;
        assert_int_equal(wins, round + 1);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].wrong, 0);
        assert_int_equal(r[i].stale, ROUNDS);
        assert_int_equal(r[i].wins + r[i].taken, ROUNDS);
        if (r[i].fd >= 0)
            close(r[i].fd);
        else if (i % 2 == 0)
            rkv_close(r[i].c);
    }
    rkv_close(shared);
    pthread_barrier_destroy(&go);
    close(fd);
}

/* The door and librkv share the token: a librkv win is the door's Z, an
 * mg W is librkv's "taken". mg R and recache_ttl are one rule. */
static void test_door_shares_winner(void **state)
{
    struct env *e = *state;
    int fd = door_connect(e->port);
    exchange(fd, "set dw 0 0 3\r\nold\r\nmd dw I\r\n", "STORED\r\nHD\r\n");
    assert_int_equal(recache(e->kv, "dw", 0, "old"), RKV_MARK_STALE | RKV_MARK_WON);
    exchange(fd, "mg dw v\r\n", "VA 3 Z X\r\nold\r\n");
    assert_int_equal(recache(e->kv, "dw", 0, "old"), RKV_MARK_STALE | RKV_MARK_TAKEN);

    exchange(fd, "md dw I\r\nmg dw v\r\n", "HD\r\nVA 3 X W\r\nold\r\n"); /* the door wins */
    assert_int_equal(recache(e->kv, "dw", 0, "old"), RKV_MARK_STALE | RKV_MARK_TAKEN);

    /* an item near its expiry: recache_ttl as mg R */
    exchange(fd, "set dr 0 1000 1\r\nx\r\n", "STORED\r\n");
    assert_int_equal(recache(e->kv, "dr", 10, "x"), 0);
    assert_int_equal(recache(e->kv, "dr", 0, "x"), 0);
    assert_int_equal(recache(e->kv, "dr", 2000, "x"), RKV_MARK_WON);
    exchange(fd, "mg dr R2000 v\r\n", "VA 1 Z\r\nx\r\n");
    assert_int_equal(recache(e->kv, "dr", 2000, "x"), RKV_MARK_TAKEN);
    exchange(fd, "set dr 0 1000 1\r\ny\r\nmg dr R2000\r\n", "STORED\r\nHD W\r\n");
    assert_int_equal(recache(e->kv, "dr", 2000, "y"), RKV_MARK_TAKEN);
    /* no expiry: never due */
    exchange(fd, "set dn 0 0 1\r\nz\r\n", "STORED\r\n");
    assert_int_equal(recache(e->kv, "dn", UINT32_MAX, "z"), 0);

    /* a miss is a miss; a NULL rc is refused */
    char buf[8];
    size_t len;
    struct rkv_recache rc = { .recache_ttl = 100 };
    assert_int_equal(rkv_get_recache(e->kv, "nokey", 5, buf, sizeof buf, &len, NULL, &rc),
                     RKV_NOT_FOUND);
    assert_int_equal(rc.marks, 0);
    assert_int_equal(rkv_get_recache(e->kv, "dn", 2, buf, sizeof buf, &len, NULL, NULL), RKV_INVALID);
    rc.flags = 1;
    assert_int_equal(rkv_get_recache(e->kv, "dn", 2, buf, sizeof buf, &len, NULL, &rc), RKV_INVALID);
    close(fd);
}

/* The winner's put (or any store) makes a fresh item: not stale, token
 * free, for both doors. */
static void test_put_clears(void **state)
{
    struct env *e = *state;
    int fd = door_connect(e->port);
    exchange(fd, "set pc 0 0 3\r\nold\r\nmd pc I\r\n", "STORED\r\nHD\r\n");
    assert_int_equal(recache(e->kv, "pc", 0, "old"), RKV_MARK_STALE | RKV_MARK_WON);
    assert_int_equal(rkv_put(e->kv, "pc", 2, "new", 3, NULL, NULL), RKV_OK);
    assert_int_equal(recache(e->kv, "pc", 0, "new"), 0);
    exchange(fd, "mg pc v\r\n", "VA 3\r\nnew\r\n");
    /* and the next invalidation is won again */
    exchange(fd, "md pc I\r\n", "HD\r\n");
    assert_int_equal(recache(e->kv, "pc", 0, "new"), RKV_MARK_STALE | RKV_MARK_WON);
    close(fd);
}

/* A fresh item is read as rkv_get reads it: no RPC, no claim. So is one
 * whose token is out already (the read sees it taken). */
static void test_fresh_costs_no_rpc(void **state)
{
    struct env *e = *state;
    int fd = door_connect(e->port);
    struct rkv_counters before, after;
    exchange(fd, "set fr 0 0 1\r\nf\r\nset ft 0 0 1\r\nt\r\nmd ft I\r\nmg ft\r\n",
             "STORED\r\nSTORED\r\nHD\r\nHD X W\r\n");
    rkv_get_counters(e->kv, &before);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(recache(e->kv, "fr", 5, "f"), 0);
        assert_int_equal(recache(e->kv, "ft", 0, "t"), RKV_MARK_STALE | RKV_MARK_TAKEN);
    }
    rkv_get_counters(e->kv, &after);
    assert_int_equal(after.sends, before.sends);
    assert_int_equal(after.other_rpcs, before.other_rpcs);
    assert_int_equal(after.gets - before.gets, 20);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_winner),
        cmocka_unit_test(test_door_shares_winner),
        cmocka_unit_test(test_put_clears),
        cmocka_unit_test(test_fresh_costs_no_rpc),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
