/* test_memcache.c — the tcp door against a real rkv-server over loopback.
 *
 * Written from memcached's protocol.txt: every classic command (with and
 * without noreply), the meta commands, pipelining, error strings and where
 * the connection closes; one table behind two doors (TCP writes read by
 * librkv over shm and the reverse: value, flags, TTL, CAS); append racing
 * append across workers; hostile clients (garbage, huge lengths, a
 * slowloris dribbling bytes while others are served, half-closed sockets,
 * a client that never reads, RKV_TEST_MC_CONNS connections at once, default
 * 200); max_conns shared with the other doors; the auth rule; and, where
 * Debian's python3-pymemcache is installed, a third-party client.
 *
 * No sleeps: every wait is for a reply, with a 20 s receive timeout only as
 * a safety net.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "mc_conn.h"
#include "rkv.h"
#include "server_proc.h"

static const char *server_bin;

struct env {
    const char *host; /* tcp door address; NULL = 127.0.0.1 */
    struct server_proc sp;
    unsigned port;
    rkv_client *kv; /* librkv over shm, the other door */
};

/* ------------------------------------------------------------ server */

/* A server with shm (for librkv and readiness) and a tcp door. */
static int start_server(struct env *e, unsigned uri_n, const char *const *extra)
{
    return server_start_tcp(&e->sp, server_bin, uri_n, e->host, &e->port, extra);
}

/* Send req, expect exactly `want` back. */
static void exchange(int fd, const char *req, const char *want)
{
    size_t n = strlen(want);
    char *buf = malloc(n + 1);
    assert_true(mc_send_all(fd, req, strlen(req)));
    size_t got = mc_recv_n(fd, buf, n);
    buf[got] = '\0';
    if (got != n || memcmp(buf, want, n) != 0)
        fail_msg("request %.200s\nwanted  %.400s\ngot     %.400s", req, want, buf);
    free(buf);
}

/* True when the server closed the connection (EOF or reset), after
 * reading whatever was still on the way. */
static bool closed_by_server(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return true;
        if (r < 0)
            return false; /* timed out: still open */
    }
}

/* Send req; its answer line is `pre` TTL `post`, with a TTL of at most
 * `ttl` and at least ttl - 2 (the server clock may tick meanwhile). */
static void expect_ttl(int fd, const char *req, const char *pre, const char *post, unsigned ttl)
{
    char line[512];
    assert_true(mc_send_all(fd, req, strlen(req)));
    mc_read_line(fd, line, sizeof line);
    size_t np = strlen(pre);
    char *end;
    if (strncmp(line, pre, np) != 0)
        fail_msg("request %s: answer %s does not start %s", req, line, pre);
    unsigned long got = strtoul(line + np, &end, 10);
    assert_string_equal(end, post);
    assert_true(got <= ttl && got + 2 >= ttl);
}

/* A storage line and a data block of n bytes of fill. */
static void send_block(int fd, const char *head, size_t n, char fill)
{
    char *blk = malloc(n + 2);
    assert_non_null(blk);
    memset(blk, fill, n);
    memcpy(blk + n, "\r\n", 2);
    assert_true(mc_send_all(fd, head, strlen(head)));
    assert_true(mc_send_all(fd, blk, n + 2));
    free(blk);
}

static uint64_t gets_cas(int fd, const char *key)
{
    char req[300], line[512];
    unsigned flags, bytes;
    unsigned long long cas = 0;
    snprintf(req, sizeof req, "gets %s\r\n", key);
    assert_true(mc_send_all(fd, req, strlen(req)));
    mc_read_line(fd, line, sizeof line);
    char k[256];
    assert_int_equal(sscanf(line, "VALUE %255s %u %u %llu", k, &flags, &bytes, &cas), 4);
    char *rest = malloc(bytes + 2 + 5);
    assert_int_equal(mc_recv_n(fd, rest, bytes + 2 + 5), bytes + 2 + 5);
    assert_memory_equal(rest + bytes, "\r\nEND\r\n", 7);
    free(rest);
    return cas;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL || start_server(e, 0, NULL) != 0)
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

/* ------------------------------------------------------------ commands */

static void test_storage_commands(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "set s1 7 0 5\r\nhello\r\n", "STORED\r\n");
    exchange(fd, "get s1\r\n", "VALUE s1 7 5\r\nhello\r\nEND\r\n");
    exchange(fd, "add s1 0 0 1\r\nx\r\n", "NOT_STORED\r\n");
    exchange(fd, "add s2 1 0 1\r\nx\r\n", "STORED\r\n");
    exchange(fd, "replace s3 0 0 1\r\nx\r\n", "NOT_STORED\r\n");
    exchange(fd, "replace s2 2 0 1\r\ny\r\n", "STORED\r\n");
    exchange(fd, "get s2 nope s1\r\n", "VALUE s2 2 1\r\ny\r\nVALUE s1 7 5\r\nhello\r\nEND\r\n");
    exchange(fd, "append s1 0 0 3\r\n!!!\r\n", "STORED\r\n");
    exchange(fd, "prepend s1 0 0 2\r\n<<\r\n", "STORED\r\n");
    /* append/prepend keep the item's flags and ignore theirs */
    exchange(fd, "get s1\r\n", "VALUE s1 7 10\r\n<<hello!!!\r\nEND\r\n");
    exchange(fd, "append nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n");
    exchange(fd, "prepend nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n");
    uint64_t cas = gets_cas(fd, "s1");
    char req[128], want[128];
    snprintf(req, sizeof req, "cas s1 9 0 2 %llu\r\nok\r\n", (unsigned long long)cas + 1000);
    exchange(fd, req, "EXISTS\r\n");
    snprintf(req, sizeof req, "cas s1 9 0 2 %llu\r\nok\r\n", (unsigned long long)cas);
    exchange(fd, req, "STORED\r\n");
    exchange(fd, req, "EXISTS\r\n"); /* the unique changed with the store */
    exchange(fd, "cas nope 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n");
    uint64_t cas2 = gets_cas(fd, "s1");
    assert_true(cas2 != cas);
    snprintf(req, sizeof req, "gets s1\r\n");
    snprintf(want, sizeof want, "VALUE s1 9 2 %llu\r\nok\r\nEND\r\n", (unsigned long long)cas2);
    exchange(fd, req, want);
    exchange(fd, "delete s1\r\n", "DELETED\r\n");
    exchange(fd, "delete s1\r\n", "NOT_FOUND\r\n");
    exchange(fd, "delete s2 0\r\n", "DELETED\r\n");
    exchange(fd, "get s1 s2\r\n", "END\r\n");
    /* empty value, binary-safe value */
    exchange(fd, "set e 0 0 0\r\n\r\n", "STORED\r\n");
    exchange(fd, "get e\r\n", "VALUE e 0 0\r\n\r\nEND\r\n");
    const char bin[] = "set b 4294967295 0 4\r\n\0\r\n\1\r\n";
    assert_true(mc_send_all(fd, bin, sizeof bin - 1));
    exchange(fd, "get b\r\n", "STORED\r\n");
    char buf[64];
    const char w[] = "VALUE b 4294967295 4\r\n\0\r\n\1\r\nEND\r\n";
    assert_int_equal(mc_recv_n(fd, buf, sizeof w - 1), sizeof w - 1);
    assert_memory_equal(buf, w, sizeof w - 1);
    close(fd);
}

static void test_noreply(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    /* nothing comes back for these: the "mn" after them answers first */
    exchange(fd,
             "set n1 0 0 1 noreply\r\na\r\nadd n1 0 0 1 noreply\r\nb\r\n"
             "replace n1 0 0 1 noreply\r\nc\r\nappend n1 0 0 1 noreply\r\nd\r\n"
             "prepend n1 0 0 1 noreply\r\ne\r\ncas n1 0 0 1 1 noreply\r\nf\r\n"
             "set n2 0 0 1 noreply\r\n5\r\nincr n2 5 noreply\r\ndecr n2 2 noreply\r\n"
             "touch n1 100 noreply\r\ndelete nope noreply\r\nverbosity 1 noreply\r\nmn\r\n",
             "MN\r\n");
    /* 5 + 5 is a new item of two digits, 10 - 2 fits it: "8 " in place */
    exchange(fd, "get n1 n2\r\n", "VALUE n1 0 3\r\necd\r\nVALUE n2 0 2\r\n8 \r\nEND\r\n");
    exchange(fd, "delete n1 noreply\r\nget n1\r\n", "END\r\n");
    /* noreply silences a classic command's errors too (memcached's
     * out_string); a refused line's data block is then read as a command */
    exchange(fd, "incr n2 x noreply\r\nmn\r\n", "MN\r\n");
    exchange(fd, "set n3 0 0 abc noreply\r\nxyz\r\n", "ERROR\r\n");
    exchange(fd, "set n3 x 0 1 noreply\r\nmn\r\n", "MN\r\n");                 /* the block "mn" */
    exchange(fd, "set n3 0 0 1 noreply\r\nabc\r\nmn\r\n", "ERROR\r\nMN\r\n"); /* bad chunk */
    exchange(fd,
             "delete n1 10 noreply\r\ntouch n1 x noreply\r\nverbosity x noreply\r\n"
             "verbosity noreply\r\nflush_all x noreply\r\nmn\r\n",
             "MN\r\n");
    char req[128];
    snprintf(req, sizeof req, "set n3 0 0 %u noreply\r\n", 2u << 20);
    send_block(fd, req, 2u << 20, 'x'); /* too large: silent too */
    exchange(fd, "mn\r\n", "MN\r\n");
    /* the word where noreply goes, when it is not noreply, is ignored */
    exchange(fd, "set n4 0 0 1 junk\r\n7\r\nincr n4 1 junk\r\ntouch n4 10 junk\r\n",
             "STORED\r\n8\r\nTOUCHED\r\n");
    /* ... and a noreply in the length's place is noreply with a bad length */
    exchange(fd, "set n4 0 0 noreply\r\nincr n4 noreply\r\nmn\r\n", "MN\r\n");
    close(fd);
}

static void test_arith_touch(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "incr a1 1\r\n", "NOT_FOUND\r\n");
    exchange(fd, "set a1 3 0 2\r\n10\r\n", "STORED\r\n");
    exchange(fd, "incr a1 5\r\n", "15\r\n");
    exchange(fd, "decr a1 100\r\n", "0\r\n"); /* stops at 0 */
    exchange(fd, "set a1 3 0 20\r\n18446744073709551615\r\n", "STORED\r\n");
    exchange(fd, "incr a1 1\r\n", "0\r\n"); /* wraps at 2^64 */
    /* in place, as memcached: the digits, then spaces to the old length */
    exchange(fd, "get a1\r\n", "VALUE a1 3 20\r\n0                   \r\nEND\r\n");
    exchange(fd, "incr a1 18446744073709551610\r\n", "18446744073709551610\r\n"); /* any delta */
    exchange(fd, "decr a1 18446744073709551615\r\n", "0\r\n");
    exchange(fd, "set a1 0 0 3\r\n100\r\ndecr a1 1\r\nget a1\r\n",
             "STORED\r\n99\r\nVALUE a1 0 3\r\n99 \r\nEND\r\n");
    exchange(fd, "incr a1 1\r\nget a1\r\n", "100\r\nVALUE a1 0 3\r\n100\r\nEND\r\n");
    exchange(fd, "incr a1 900\r\nget a1\r\n", "1000\r\nVALUE a1 0 4\r\n1000\r\nEND\r\n");
    /* an mg answer not yet written out holds its item (memcached): the
     * result is then a new item of just its digits; a get writes out */
    exchange(fd, "set a1 0 0 3\r\n100\r\nmg a1\r\ndecr a1 1\r\nget a1\r\n",
             "STORED\r\nHD\r\n99\r\nVALUE a1 0 2\r\n99\r\nEND\r\n");
    exchange(fd, "set a1 0 0 3\r\n100\r\nmg a1\r\nget x\r\ndecr a1 1\r\nget a1\r\n",
             "STORED\r\nHD\r\nEND\r\n99\r\nVALUE a1 0 3\r\n99 \r\nEND\r\n");
    /* the value read as strtoull reads it */
    static const char *const nums[][2] = { { " 5", "6" }, { "5 ", "6" },  { "-0", "1" },
                                           { "+7", "8" }, { "1 2", "2" }, { "007", "8" } };
    for (unsigned i = 0; i < 6; i++) {
        char req[96], want[64];
        snprintf(req, sizeof req, "set a3 0 0 %zu\r\n%s\r\nincr a3 1\r\n", strlen(nums[i][0]),
                 nums[i][0]);
        snprintf(want, sizeof want, "STORED\r\n%s\r\n", nums[i][1]);
        exchange(fd, req, want);
    }
    exchange(fd, "set a3 0 0 2\r\n-1\r\nincr a3 1\r\n",
             "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    exchange(fd, "set a2 0 0 3\r\nabc\r\n", "STORED\r\n");
    exchange(fd, "incr a2 1\r\n", "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    exchange(fd, "touch a2 100\r\n", "TOUCHED\r\n");
    exchange(fd, "touch nope 100\r\n", "NOT_FOUND\r\n");
    expect_ttl(fd, "mg a2 t v\r\n", "VA 3 t", "\r\n", 100);
    exchange(fd, "", "abc\r\n");
    exchange(fd, "gat 200 a2 nope\r\n", "VALUE a2 0 3\r\nabc\r\nEND\r\n");
    expect_ttl(fd, "mg a2 t\r\n", "HD t", "\r\n", 200);
    uint64_t cas = gets_cas(fd, "a2");
    char want[128];
    assert_true(mc_send_all(fd, "gats 300 a2\r\n", 13));
    char line[256];
    mc_read_line(fd, line, sizeof line);
    unsigned long long c2;
    assert_int_equal(sscanf(line, "VALUE a2 0 3 %llu", &c2), 1);
    assert_true(c2 != cas); /* touched: a new unique (rkv writes out of place) */
    snprintf(want, sizeof want, "abc\r\nEND\r\n");
    assert_int_equal(mc_recv_n(fd, line, strlen(want)), strlen(want));
    exchange(fd, "touch a2 -1\r\n", "TOUCHED\r\n"); /* negative: expired at once */
    exchange(fd, "get a2\r\n", "END\r\n");
    close(fd);
}

/* librkv's one-sided GET of key misses: the item is gone for every reader. */
static void gone_for_librkv(struct env *e, const char *key)
{
    char buf[64];
    size_t len;
    assert_int_equal(rkv_get(e->kv, key, strlen(key), buf, sizeof buf, &len, NULL), RKV_NOT_FOUND);
}

/* A touch to a past exptime (negative, or an absolute time gone by) on gat,
 * gats and mg T answers the item as it was, as memcached 1.6.18 does (value,
 * flags, CAS), and leaves it gone for every later read of either door. */
static void test_touch_expired(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char req[128], want[256];

    exchange(fd, "set x1 5 0 3\r\nabc\r\n", "STORED\r\n");
    exchange(fd, "gat -1 x1 xnope\r\n", "VALUE x1 5 3\r\nabc\r\nEND\r\n");
    exchange(fd, "get x1\r\n", "END\r\n");
    gone_for_librkv(e, "x1");
    exchange(fd, "gat -1 x1\r\n", "END\r\n"); /* a miss stays a miss */

    exchange(fd, "set x2 7 0 3\r\nabc\r\n", "STORED\r\n");
    uint64_t cas = gets_cas(fd, "x2");
    snprintf(want, sizeof want, "VALUE x2 7 3 %llu\r\nabc\r\nEND\r\n", (unsigned long long)cas);
    exchange(fd, "gats -1 x2\r\n", want); /* the CAS it had */
    exchange(fd, "gets x2\r\n", "END\r\n");
    gone_for_librkv(e, "x2");

    exchange(fd, "set x3 0 0 1\r\nz\r\n", "STORED\r\n");
    exchange(fd, "gat 1000000000 x3\r\n", "VALUE x3 0 1\r\nz\r\nEND\r\n"); /* 2001: past */
    exchange(fd, "get x3\r\n", "END\r\n");
    gone_for_librkv(e, "x3");

    /* mg T-1, with and without v: the hit with its flags; t shows what
     * memcached shows, the negative remainder as an unsigned number */
    exchange(fd, "set x4 5 0 3\r\nabc\r\n", "STORED\r\n");
    cas = gets_cas(fd, "x4");
    snprintf(want, sizeof want, "VA 3 c%llu f5 t", (unsigned long long)cas);
    assert_true(mc_send_all(fd, "mg x4 T-1 v c f t s\r\n", 21));
    char line[256];
    mc_read_line(fd, line, sizeof line);
    assert_memory_equal(line, want, strlen(want));
    unsigned long long left = strtoull(line + strlen(want), NULL, 10);
    assert_true(left >= 1ull << 31 && left < 1ull << 32);
    assert_non_null(strstr(line, " s3\r\n"));
    exchange(fd, "", "abc\r\n");
    exchange(fd, "mg x4 v\r\n", "EN\r\n");
    gone_for_librkv(e, "x4");
    exchange(fd, "set x4 6 0 3\r\nabc\r\n", "STORED\r\n");
    cas = gets_cas(fd, "x4");
    snprintf(want, sizeof want, "HD c%llu f6\r\n", (unsigned long long)cas);
    exchange(fd, "mg x4 T-1 c f\r\n", want);
    exchange(fd, "mg x4 v\r\n", "EN\r\n");
    gone_for_librkv(e, "x4");
    exchange(fd, "set x4 6 0 3\r\nabc\r\n", "STORED\r\n");
    exchange(fd, "mg x4 T-1\r\n", "HD\r\n");
    exchange(fd, "mg x4 T-1\r\n", "EN\r\n");
    exchange(fd, "mg x4 T-1 q\r\nmn\r\n", "MN\r\n");
    gone_for_librkv(e, "x4");

    /* touch: TOUCHED, then gone; a miss is NOT_FOUND */
    exchange(fd, "set x5 0 0 1\r\nz\r\n", "STORED\r\n");
    exchange(fd, "touch x5 -1\r\n", "TOUCHED\r\n");
    gone_for_librkv(e, "x5");
    exchange(fd, "touch x5 -1\r\n", "NOT_FOUND\r\n");
    /* a store after the expiring touch is a new item, untouched by it */
    snprintf(req, sizeof req, "set x5 0 0 2\r\nok\r\nget x5\r\n");
    exchange(fd, req, "STORED\r\nVALUE x5 0 2\r\nok\r\nEND\r\n");
    close(fd);
}

static void test_admin(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "version\r\n", "VERSION 1.6.18-rkv-" RKV_VERSION_STRING "\r\n");
    exchange(fd, "verbosity 1\r\n", "OK\r\n");
    exchange(fd, "stats detail off\r\n", "OK\r\n"); /* every group: test_memcache_stats.c */
    /* stats: STAT lines then END, with memcached's names */
    assert_true(mc_send_all(fd, "stats\r\n", 7));
    char line[512];
    bool saw_get = false, saw_items = false, saw_rkv = false;
    for (int i = 0; i < 500; i++) {
        mc_read_line(fd, line, sizeof line);
        if (strcmp(line, "END\r\n") == 0)
            break;
        assert_memory_equal(line, "STAT ", 5);
        saw_get |= strncmp(line, "STAT cmd_get ", 13) == 0;
        saw_items |= strncmp(line, "STAT curr_items ", 16) == 0;
        saw_rkv |= strncmp(line, "STAT rkv_uptime ", 16) == 0;
    }
    assert_true(saw_get && saw_items && saw_rkv);
    assert_true(mc_send_all(fd, "stats settings\r\n", 16));
    bool saw_max = false;
    for (int i = 0; i < 100; i++) {
        mc_read_line(fd, line, sizeof line);
        if (strcmp(line, "END\r\n") == 0)
            break;
        saw_max |= strncmp(line, "STAT item_size_max ", 19) == 0;
    }
    assert_true(saw_max);
    exchange(fd, "quit\r\n", "");
    assert_true(closed_by_server(fd));
    close(fd);
}

/* What test_stats_counts reads from one `stats`. */
struct stats_seen {
    uint64_t bytes_read, bytes_written, total_items;
    uint64_t cmd_get, get_hits, get_misses, cmd_touch, touch_hits, touch_misses;
};

/* One `stats`: its bytes_read, bytes_written and total_items; returns the
 * reply's length. */
static size_t stats_io(int fd, struct stats_seen *s)
{
    char line[512];
    size_t total = 0;
    unsigned long long v;
    *s = (struct stats_seen){ UINT64_MAX, UINT64_MAX, UINT64_MAX, 0, 0, 0, 0, 0, 0 };
    assert_true(mc_send_all(fd, "stats\r\n", 7));
    for (int i = 0; i < 500; i++) {
        mc_read_line(fd, line, sizeof line);
        total += strlen(line);
        if (strcmp(line, "END\r\n") == 0)
            break;
        if (sscanf(line, "STAT bytes_read %llu", &v) == 1)
            s->bytes_read = v;
        if (sscanf(line, "STAT bytes_written %llu", &v) == 1)
            s->bytes_written = v;
        if (sscanf(line, "STAT total_items %llu", &v) == 1)
            s->total_items = v;
        sscanf(line, "STAT cmd_get %" SCNu64, &s->cmd_get);
        sscanf(line, "STAT get_hits %" SCNu64, &s->get_hits);
        sscanf(line, "STAT get_misses %" SCNu64, &s->get_misses);
        sscanf(line, "STAT cmd_touch %" SCNu64, &s->cmd_touch);
        sscanf(line, "STAT touch_hits %" SCNu64, &s->touch_hits);
        sscanf(line, "STAT touch_misses %" SCNu64, &s->touch_misses);
    }
    assert_true(s->bytes_read != UINT64_MAX && s->bytes_written != UINT64_MAX &&
                s->total_items != UINT64_MAX);
    return total;
}

/* As memcached's: bytes_read and bytes_written count every byte the door
 * received and sent; total_items every item stored (either door; a touch
 * is not a store). On a server of its own, with one client, the counts
 * move by exactly what the client sent and was answered (a stats reply is
 * counted once it is written, so in the next one) and stored. */
static void test_stats_counts(void **state)
{
    (void)state;
    struct env e2 = { 0 };
    assert_int_equal(start_server(&e2, 2, NULL), 0);
    rkv_client *kv = connect_retry(e2.sp.uri, NULL, 10000);
    assert_non_null(kv);
    int fd = mc_connect(e2.port);
    static const char set[] = "set sb 0 0 5\r\nhello\r\n", get[] = "get sb\r\n";
    static const char got[] = "VALUE sb 0 5\r\nhello\r\nEND\r\n";
    struct stats_seen s0, s1, s2;
    size_t first = stats_io(fd, &s0);
    assert_int_equal(s0.bytes_read, 7); /* only this stats line came in so far */
    assert_int_equal(s0.bytes_written, 0);
    assert_int_equal(s0.total_items, 0);
    exchange(fd, set, "STORED\r\n");
    exchange(fd, get, got);
    stats_io(fd, &s1);
    assert_int_equal(s1.bytes_read, s0.bytes_read + strlen(set) + strlen(get) + 7);
    assert_int_equal(s1.bytes_written, s0.bytes_written + first + strlen("STORED\r\n") + strlen(got));
    assert_int_equal(s1.total_items, 1);
    /* touches are no stores; append, a librkv put and an expired store are */
    exchange(fd, "touch sb 100\r\ngat 200 sb\r\nmg sb T300\r\n",
             "TOUCHED\r\nVALUE sb 0 5\r\nhello\r\nEND\r\nHD\r\n");
    exchange(fd, "append sb 0 0 1\r\n!\r\nset sc 0 -1 1\r\nx\r\n", "STORED\r\nSTORED\r\n");
    assert_int_equal(rkv_put(kv, "sd", 2, "v", 1, NULL, NULL), RKV_OK);
    stats_io(fd, &s2);
    assert_int_equal(s2.total_items, 4);
    /* reads as memcached 1.6.18 counts them: a touching read is a touch
     * only, but an mg T miss a get miss */
    exchange(fd, "gat 100 sb sbnope\r\n", "VALUE sb 0 6\r\nhello!\r\nEND\r\n");
    exchange(fd, "mg sb T100\r\nmg sbnope T100\r\n", "HD\r\nEN\r\n");
    exchange(fd, "mg sb\r\nget sbnope\r\n", "HD\r\nEND\r\n");
    stats_io(fd, &s1);
    assert_int_equal(s1.cmd_get - s2.cmd_get, 3);
    assert_int_equal(s1.get_hits - s2.get_hits, 1);
    assert_int_equal(s1.get_misses - s2.get_misses, 2);
    assert_int_equal(s1.cmd_touch - s2.cmd_touch, 3);
    assert_int_equal(s1.touch_hits - s2.touch_hits, 2);
    assert_int_equal(s1.touch_misses - s2.touch_misses, 1);
    close(fd);
    rkv_close(kv);
    assert_int_equal(server_stop(&e2.sp), 0);
}

static void test_meta(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "mn\r\n", "MN\r\n");
    exchange(fd, "mg m1 v\r\n", "EN\r\n");
    exchange(fd, "mg m1 v q\r\nmn\r\n", "MN\r\n");
    exchange(fd, "ms m1 3 F9 T0\r\nabc\r\n", "HD\r\n");
    exchange(fd, "mg m1 v f s k t Oxy\r\n", "VA 3 f9 s3 km1 t-1 Oxy\r\nabc\r\n");
    exchange(fd, "mg m1\r\n", "HD\r\n");
    exchange(fd, "mg m1 k q\r\n", "HD km1\r\n"); /* q hides only the miss */
    uint64_t cas = gets_cas(fd, "m1");
    char req[128], want[128];
    snprintf(want, sizeof want, "HD c%llu\r\n", (unsigned long long)cas);
    exchange(fd, "mg m1 c\r\n", want);
    snprintf(req, sizeof req, "ms m1 1 C%llu\r\nz\r\n", (unsigned long long)cas + 1);
    exchange(fd, req, "EX\r\n");
    snprintf(req, sizeof req, "ms m1 1 C%llu q\r\nz\r\nmn\r\n", (unsigned long long)cas);
    exchange(fd, req, "MN\r\n");
    exchange(fd, "ms m1 1 ME\r\nx\r\n", "NS\r\n");
    exchange(fd, "ms m2 1 MR\r\nx\r\n", "NS\r\n");
    exchange(fd, "ms m1 2 MA\r\n!!\r\n", "HD\r\n");
    exchange(fd, "ms m1 2 MP\r\n<<\r\n", "HD\r\n");
    exchange(fd, "mg m1 v\r\n", "VA 5\r\n<<z!!\r\n");
    exchange(fd, "ms m1 1 T-1\r\nx\r\n", "HD\r\n"); /* expired on arrival */
    exchange(fd, "mg m1 v\r\n", "EN\r\n");
    exchange(fd, "md m1\r\n", "NF\r\n");
    exchange(fd, "ms m1 1\r\nx\r\n", "HD\r\n");
    exchange(fd, "md m1 q\r\nmd m1 q\r\nmn\r\n", "NF\r\nMN\r\n");
    /* md C<cas>: deletes only the version named, atomically */
    exchange(fd, "ms m1 1\r\nx\r\n", "HD\r\n");
    cas = gets_cas(fd, "m1");
    snprintf(req, sizeof req, "md m1 C%llu k\r\n", (unsigned long long)cas + 1);
    exchange(fd, req, "EX km1\r\n"); /* another version: kept */
    exchange(fd, "mg m1 v\r\n", "VA 1\r\nx\r\n");
    snprintf(req, sizeof req, "md m1 C%llu q\r\nmn\r\n", (unsigned long long)cas);
    exchange(fd, req, "MN\r\n"); /* its own: gone, q hides HD */
    exchange(fd, "mg m1 v\r\n", "EN\r\n");
    snprintf(req, sizeof req, "md m1 C%llu\r\n", (unsigned long long)cas);
    exchange(fd, req, "NF\r\n");
    exchange(fd, "md m1 Cx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"); /* md's one reason */
    /* base64 keys: binary keys the classic commands cannot name */
    exchange(fd, "ms AAEC b 2\r\n", "CLIENT_ERROR bad command line format\r\n");
    exchange(fd, "ms AAEC 2 b\r\nhi\r\n", "HD\r\n");
    exchange(fd, "mg AAEC b v k\r\n", "VA 2 kAAEC b\r\nhi\r\n");
    /* ma: vivify, delta, modes */
    exchange(fd, "ma c1\r\n", "NF\r\n");
    exchange(fd, "ma c1 N0 J10 v\r\n", "VA 2\r\n10\r\n");
    exchange(fd, "ma c1 D5 v\r\n", "VA 2\r\n15\r\n");
    exchange(fd, "ma c1 MD D20 v\r\n", "VA 1\r\n0\r\n");
    exchange(fd, "ma c1 q\r\nmn\r\n", "MN\r\n");
    exchange(fd, "mg c1 v\r\n", "VA 2\r\n1 \r\n"); /* "15" -> "0 " -> "1 ": in place */
    exchange(fd, "me m1\r\n", "CLIENT_ERROR me (meta debug) is not supported by rkv\r\n");
    close(fd);
}

/* Send req; its answer line is `pre`, a number at most `most`, `post`. */
static void expect_at_most(int fd, const char *req, const char *pre, const char *post,
                           unsigned long most)
{
    char line[512], *end;
    assert_true(mc_send_all(fd, req, strlen(req)));
    mc_read_line(fd, line, sizeof line);
    size_t np = strlen(pre);
    if (strncmp(line, pre, np) != 0)
        fail_msg("request %s: answer %s does not start %s", req, line, pre);
    unsigned long got = strtoul(line + np, &end, 10);
    assert_string_equal(end, post);
    assert_true(got <= most);
}

/* Herd protection, as memcached 1.6.18 answers it: mg N vivifies a miss
 * (the first client wins, W; later ones see Z and the empty item), R wins
 * the recache of an item near its expiry, md I and ms I leave a stale item
 * (X) whose next mg wins; h and l show the item's past reads. */
static void test_meta_herd(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char req[256], buf[16];
    size_t len;
    struct rkv_item_info info;

    /* N: a miss makes an empty item this client wins; fetched by that read */
    exchange(fd, "mg hv s v N30 t f\r\n", "VA 0 s0 t30 f0 W\r\n\r\n");
    expect_ttl(fd, "mg hv s N30 h t\r\n", "HD s0 h1 t", " Z\r\n", 30);
    exchange(fd, "mg hv2 t N30 T60 t\r\n", "CLIENT_ERROR duplicate flag\r\n");
    exchange(fd, "mg hv2 t N30 T60\r\n", "HD t-1 W\r\n");     /* t before N: none yet */
    expect_ttl(fd, "mg hv2 t\r\n", "HD t", " Z\r\n", 60);     /* the last of N, T */
    exchange(fd, "mg hv3 N30 q\r\nmn\r\n", "HD W\r\nMN\r\n"); /* q hides misses only */
    exchange(fd, "mg hv4 N30 u\r\nmg hv4 h\r\nmg hv4 h\r\n", "HD W\r\nHD h0 Z\r\nHD h1 Z\r\n");
    exchange(fd, "mg hv5 N-1 v\r\nmg hv5 v\r\n", "VA 0 W\r\n\r\nEN\r\n"); /* made expired */
    exchange(fd, "mg hv6 O123456789012345678901234567890123 N30\r\nmg hv6 h\r\n",
             "CLIENT_ERROR opaque token too long\r\nHD h0\r\n"); /* made, but not won */
    /* a set replaces the vivified item: a fresh one, no marks */
    exchange(fd, "ms hv 2\r\nok\r\nmg hv v h\r\n", "HD\r\nVA 2 h0\r\nok\r\n");

    /* R: an item with less than R seconds left is won once */
    exchange(fd, "set hr 0 1000 1\r\nx\r\n", "STORED\r\n");
    exchange(fd, "mg hr R10 v\r\n", "VA 1\r\nx\r\n");
    exchange(fd, "mg hr R2000 v\r\nmg hr R2000\r\n", "VA 1 W\r\nx\r\nHD Z\r\n");
    exchange(fd, "set hr 0 0 1\r\nx\r\nmg hr R2000\r\n", "STORED\r\nHD\r\n"); /* no expiry */
    exchange(fd, "set hr 0 1000 1\r\nx\r\nmg hr R0\r\nmg hr R-1\r\n", "STORED\r\nHD\r\nHD\r\n");
    /* R sees the TTL a T before it set */
    exchange(fd, "mg hr T3000 R2000\r\nmg hr R2000 T100\r\nmg hr T100 R2000\r\n",
             "HD\r\nHD\r\nHD W\r\n");
    exchange(fd, "mg hr Rx\r\n", "CLIENT_ERROR bad token in command line format\r\n");

    /* md I: stale, a new CAS, the token taken back; a later mg wins once */
    exchange(fd, "set hi 5 0 3\r\nold\r\n", "STORED\r\n");
    uint64_t cas1 = gets_cas(fd, "hi");
    exchange(fd, "md hi I\r\n", "HD\r\n");
    uint64_t cas2 = gets_cas(fd, "hi"); /* classic reads see the value, unmarked */
    assert_true(cas2 > cas1);
    exchange(fd, "mg hi v f\r\nmg hi v\r\n", "VA 3 f5 X W\r\nold\r\nVA 3 Z X\r\nold\r\n");
    exchange(fd, "md hi I q\r\nmn\r\nmg hi\r\n", "MN\r\nHD X W\r\n"); /* token back */
    /* librkv GET: a stale item is a hit on its (stale) value */
    assert_int_equal(rkv_get(e->kv, "hi", 2, buf, sizeof buf, &len, &info), RKV_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "old", 3);
    /* ms I with the CAS read before the invalidation: stored, still stale,
     * the token kept; with the current CAS it is a plain cas store */
    snprintf(req, sizeof req, "ms hi 3 I C%llu\r\nnew\r\n", (unsigned long long)cas1);
    exchange(fd, req, "HD\r\n");
    exchange(fd, "mg hi v f\r\n", "VA 3 f0 Z X\r\nnew\r\n");
    uint64_t cas3 = gets_cas(fd, "hi");
    snprintf(req, sizeof req, "ms hi 3 I C%llu\r\nfin\r\n", (unsigned long long)cas3);
    exchange(fd, req, "HD\r\n");
    exchange(fd, "mg hi v\r\n", "VA 3\r\nfin\r\n");
    snprintf(req, sizeof req, "ms hi 1 I C%llu\r\nz\r\n", (unsigned long long)cas3 + 1000000000);
    exchange(fd, req, "EX\r\n"); /* a newer CAS: no match */
    snprintf(req, sizeof req, "ms hi 1 I C%llu MA\r\nz\r\n", (unsigned long long)cas1);
    exchange(fd, req, "EX\r\n"); /* I is for a cas store only */
    /* md I: T a new TTL; C a condition; a miss */
    exchange(fd, "md hi I T500\r\n", "HD\r\n");
    expect_ttl(fd, "mg hi t\r\n", "HD t", " X W\r\n", 500);
    exchange(fd, "md hi I C1\r\nmd nohi I\r\n", "EX\r\nNF\r\n");
    exchange(fd, "md hi I T-1\r\nmg hi\r\n", "HD\r\nEN\r\n");

    /* h and l: fetched since stored, seconds since the last access */
    exchange(fd, "set hh 0 0 1\r\nx\r\n", "STORED\r\n");
    time_t t0 = time(NULL);
    exchange(fd, "mg hh h\r\nget hh\r\nmg hh h\r\n",
             "HD h0\r\nVALUE hh 0 1\r\nx\r\nEND\r\nHD h1\r\n");
    expect_at_most(fd, "mg hh l\r\n", "HD l", "\r\n", (unsigned long)(time(NULL) - t0) + 1);
    exchange(fd, "set hh 0 0 1\r\nx\r\ntouch hh 100\r\nmg hh h\r\n",
             "STORED\r\nTOUCHED\r\nHD h1\r\n"); /* a touch is a fetch */
    /* an incr in place keeps the item (and so its marks); one that an
     * unsent answer holds writes a new item, as memcached does */
    exchange(fd, "set hh 0 0 1\r\n5\r\nmg hh v\r\nma hh\r\nmg hh h\r\n",
             "STORED\r\nVA 1\r\n5\r\nHD\r\nHD h0\r\n");
    exchange(fd, "mg hh v\r\n", "VA 1\r\n6\r\n");
    exchange(fd, "ma hh\r\nmg hh h\r\n", "HD\r\nHD h1\r\n");
    exchange(fd, "mg hh h O123456789012345678901234567890123\r\nmg hh h\r\n",
             "CLIENT_ERROR opaque token too long\r\nHD h1\r\n");
    close(fd);
}

/* mg N with no memory for the item (a full table that may not evict):
 * memcached's allocation fails and the read is a miss, EN, not an error. */
static void test_meta_vivify_no_memory(void **state)
{
    (void)state;
    struct env e2 = { 0 };
    const char *extra[] = { "--memory", "8M", "--workers", "1", "--evict", "none", NULL };
    assert_int_equal(start_server(&e2, 10, extra), 0);
    int fd = mc_connect(e2.port);
    size_t n = 100u << 10;
    char head[64], line[128];
    bool full = false;
    for (unsigned i = 0; !full; i++) {
        assert_true(i < 1000);
        snprintf(head, sizeof head, "set big%u 0 0 %zu\r\n", i, n);
        send_block(fd, head, n, 'b');
        mc_read_line(fd, line, sizeof line);
        full = strcmp(line, "SERVER_ERROR out of memory storing object\r\n") == 0;
        if (!full)
            assert_string_equal(line, "STORED\r\n");
    }
    exchange(fd, "mg viv N30 v\r\nmg viv k O1 N30 q\r\nmn\r\n", "EN\r\nMN\r\n");
    close(fd);
    assert_int_equal(server_stop(&e2.sp), 0);
}

/* Concurrent clients, one win: after each invalidation, four connections
 * ask mg at once and exactly one gets W (the win is a test-and-set on the
 * item's state). */
struct herd_arg {
    int fd;
    pthread_barrier_t *go;
    unsigned rounds, wins;
};

static void *herd_loop(void *p)
{
    struct herd_arg *a = p;
    char line[128];
    for (unsigned i = 0; i < a->rounds; i++) {
        pthread_barrier_wait(a->go); /* the invalidation is done */
        assert_true(mc_send_all(a->fd, "mg herd\r\n", 9));
        mc_read_line(a->fd, line, sizeof line);
        a->wins += strstr(line, " W\r\n") != NULL;
        pthread_barrier_wait(a->go); /* every answer is in */
    }
    return NULL;
}

static void test_meta_herd_one_winner(void **state)
{
    struct env *e = *state;
    enum { N = 4, ROUNDS = 200 };
    int fd = mc_connect(e->port);
    pthread_barrier_t go;
    pthread_t t[N];
    struct herd_arg a[N];
    assert_int_equal(pthread_barrier_init(&go, NULL, N + 1), 0);
    exchange(fd, "set herd 0 0 1\r\nx\r\n", "STORED\r\n");
    for (int i = 0; i < N; i++) {
        a[i] = (struct herd_arg){ .fd = mc_connect(e->port), .go = &go, .rounds = ROUNDS };
        assert_int_equal(pthread_create(&t[i], NULL, herd_loop, &a[i]), 0);
    }
    for (unsigned r = 0; r < ROUNDS; r++) {
        exchange(fd, "md herd I\r\n", "HD\r\n");
        pthread_barrier_wait(&go);
        pthread_barrier_wait(&go);
        unsigned wins = 0;
        for (int i = 0; i < N; i++)
            wins += a[i].wins;
        assert_int_equal(wins, r + 1);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        close(a[i].fd);
    }
    pthread_barrier_destroy(&go);
    close(fd);
}

static void test_pipelining(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    /* many commands in one send: answered in order */
    size_t cap = 1 << 20, n = 0, wn = 0;
    char *req = malloc(cap), *want = malloc(cap);
    for (int i = 0; i < 2000; i++) {
        n += (size_t)snprintf(req + n, cap - n, "set p%d %d 0 %d\r\n%d\r\nget p%d\r\n", i, i,
                              (int)snprintf(NULL, 0, "%d", i * 7), i * 7, i);
        wn += (size_t)snprintf(want + wn, cap - wn, "STORED\r\nVALUE p%d %d %d\r\n%d\r\nEND\r\n", i,
                               i, (int)snprintf(NULL, 0, "%d", i * 7), i * 7);
    }
    n += (size_t)snprintf(req + n, cap - n, "mn\r\n");
    wn += (size_t)snprintf(want + wn, cap - wn, "MN\r\n");
    assert_true(mc_send_all(fd, req, n));
    char *got = malloc(wn);
    assert_int_equal(mc_recv_n(fd, got, wn), wn);
    assert_memory_equal(got, want, wn);
    /* a command split over many sends, byte by byte */
    const char *s = "set split 0 0 6\r\nabcdef\r\nget split\r\n";
    for (size_t i = 0; s[i]; i++)
        assert_true(mc_send_all(fd, s + i, 1));
    exchange(fd, "", "STORED\r\nVALUE split 0 6\r\nabcdef\r\nEND\r\n");
    free(req);
    free(want);
    free(got);
    close(fd);
}

/* A get line far over 64 KiB (libmemcached sends one for a whole mget):
 * answered as memcached answers it, in order, then the next command; a bad
 * key in a later part of such a line gets memcached's error and closes. */
static void test_long_multiget(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    size_t cap = 400000, n = 0; /* 20,000 keys of 17 bytes and the rest */
    char *line = malloc(cap);
    exchange(fd, "set lg:1 1 0 2\r\nv1\r\n", "STORED\r\n");
    exchange(fd, "set lg:2 2 0 2\r\nv2\r\n", "STORED\r\n");
    exchange(fd, "set lg:3 3 0 2\r\nv3\r\n", "STORED\r\n");
    n += (size_t)sprintf(line, "get lg:1");
    for (unsigned i = 0; i < 20000; i++) {
        n += (size_t)sprintf(line + n, " lg:missing:%05u", i);
        if (i == 10000)
            n += (size_t)sprintf(line + n, " lg:2");
    }
    assert_true(n > 3 * 65536 && n < cap - 64);
    n += (size_t)sprintf(line + n, " lg:3\r\nmn\r\n");
    exchange(fd, line,
             "VALUE lg:1 1 2\r\nv1\r\nVALUE lg:2 2 2\r\nv2\r\n"
             "VALUE lg:3 3 2\r\nv3\r\nEND\r\nMN\r\n");
    close(fd);

    fd = mc_connect(e->port);
    n = (size_t)sprintf(line, "get");
    for (unsigned i = 0; i < 10000; i++)
        n += (size_t)sprintf(line + n, " lg:missing:%05u", i);
    line[n++] = ' ';
    memset(line + n, 'k', 251); /* one byte over memcached's key limit */
    n += 251;
    n += (size_t)sprintf(line + n, " lg:1\r\n");
    assert_true(mc_send_all(fd, line, n));
    char got[64] = "";
    mc_read_line(fd, got, sizeof got);
    assert_string_equal(got, "CLIENT_ERROR bad command line format\r\n");
    assert_true(closed_by_server(fd));
    close(fd);
    free(line);
}

static void test_errors(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "bogus\r\n", "ERROR\r\n");
    exchange(fd, "\r\n", "ERROR\r\n");
    exchange(fd, "get\r\n", "ERROR\r\n");
    exchange(fd, "set k 0 0\r\n", "ERROR\r\n");
    exchange(fd, "set k abc 0 1\r\n", "CLIENT_ERROR bad command line format\r\n");
    exchange(fd, "x\r\n", "ERROR\r\n"); /* the data line, read as a command */
    exchange(fd, "delete k 5\r\n",
             "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
    char key[300];
    memset(key, 'k', 251);
    key[251] = '\0';
    char req[400];
    snprintf(req, sizeof req, "get %s\r\n", key);
    exchange(fd, req, "CLIENT_ERROR bad command line format\r\n");
    /* too large: SERVER_ERROR, the block is swallowed, the connection lives */
    snprintf(req, sizeof req, "set big 0 0 %u\r\n", 2u << 20);
    assert_true(mc_send_all(fd, req, strlen(req)));
    char *blk = calloc(1, (2u << 20) + 2);
    memcpy(blk + (2u << 20), "\r\n", 2);
    assert_true(mc_send_all(fd, blk, (2u << 20) + 2));
    free(blk);
    exchange(fd, "get big\r\n", "SERVER_ERROR object too large for cache\r\nEND\r\n");
    /* bad data chunk: not stored, the block's 3 bytes gone, the "\r\n"
     * after it an empty line (memcached keeps the connection) */
    exchange(fd, "set k 0 0 1\r\nabc\r\n", "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
    exchange(fd, "get k\r\n", "END\r\n");
    close(fd);
    /* a line that never ends: hung up on after 2048 bytes, with no answer
     * (memcached's), and what it owed before is dropped too */
    fd = mc_connect(e->port);
    char junk[4096];
    memcpy(junk, "mg k\r\n", 6);
    memset(junk + 6, 'x', sizeof junk - 6);
    assert_true(mc_send_all(fd, junk, sizeof junk));
    assert_true(closed_by_server(fd));
    close(fd);
    /* ... unless it is a get (many keys); and one with its end in what came
     * (up to memcached's 16 KiB read buffer) is served, however long */
    fd = mc_connect(e->port);
    char *longline = malloc(8192);
    memcpy(longline, "set k 0 0 1", 11);
    memset(longline + 11, ' ', 8192 - 11);
    memcpy(longline + 8192 - 2, "\r\n", 2);
    assert_true(mc_send_all(fd, longline, 8192));
    exchange(fd, "z\r\nget k\r\n", "STORED\r\nVALUE k 0 1\r\nz\r\nEND\r\n");
    free(longline);
    /* an HTTP request: hung up on, no answer */
    exchange(fd, "GET / HTTP/1.0\r\n", "");
    assert_true(closed_by_server(fd));
    close(fd);
    fd = mc_connect(e->port);
    exchange(fd, "quit now\r\n", ""); /* quit takes any arguments */
    assert_true(closed_by_server(fd));
    close(fd);
}

/* Commands as memcached 1.6.18 takes them, each case measured against it
 * (tests/mc_diff.c finds such cases). */
static void test_conformance(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "version foo bar\r\nversion noreply\r\nmn foo\r\nmn\r\n",
             "VERSION 1.6.18-rkv-" RKV_VERSION_STRING "\r\nVERSION 1.6.18-rkv-" RKV_VERSION_STRING
             "\r\nMN\r\nMN\r\n");
    exchange(fd,
             "verbosity 1\r\nverbosity invalid\r\nverbosity 1 foo\r\nverbosity\r\n"
             "verbosity 1 2 3\r\n",
             "OK\r\nCLIENT_ERROR bad command line format\r\nOK\r\nERROR\r\nERROR\r\n");
    exchange(fd, "shutdown\r\nshutdown graceful\r\n",
             "ERROR: shutdown not enabled\r\nERROR: shutdown not enabled\r\n");
    exchange(fd, "set c1 0 0 2\r\nhi\r\nbget c1\r\ngat 10\r\ngets\r\ngats 0\r\n",
             "STORED\r\nVALUE c1 0 2\r\nhi\r\nEND\r\nEND\r\nERROR\r\nEND\r\n");
    /* a key is any bytes but space (and the line's end) */
    exchange(fd, "set c\x01\x7f\t\rk 5 0 1\r\nx\r\nget c\x01\x7f\t\rk\r\n",
             "STORED\r\nVALUE c\x01\x7f\t\rk 5 1\r\nx\r\nEND\r\n");
    /* a NUL ends the command line (memcached reads a C string) */
    static const char nul[] = "get c1\0 junk\r\nset c2 0 0 1\0junk\r\ny\r\nget c2\r\n";
    static const char nul_want[] =
        "VALUE c1 0 2\r\nhi\r\nEND\r\nSTORED\r\nVALUE c2 0 1\r\ny\r\nEND\r\n";
    assert_true(mc_send_all(fd, nul, sizeof nul - 1));
    exchange(fd, "", nul_want);
    /* numbers as strtoul/strtol read them, cut to 32 bits */
    exchange(fd,
             "set c4 4294967296 0 4294967297\r\nz\r\nget c4\r\nset c4 -0 +5 +3\r\nabc\r\n"
             "set c4 0 \t5000 \v1\r\nq\r\nget c4\r\n",
             "STORED\r\nVALUE c4 0 1\r\nz\r\nEND\r\nSTORED\r\nSTORED\r\nVALUE c4 0 1\r\nq\r\nEND\r\n");
    exchange(fd, "mg\r\nms\r\nmd\r\nma\r\nme\r\nms k\r\n",
             "ERROR\r\nERROR\r\nERROR\r\nERROR\r\nCLIENT_ERROR bad command line format\r\n"
             "CLIENT_ERROR bad command line format\r\n");
    exchange(fd, "delete k 10 noreply\r\ndelete k noreply 0\r\ndelete k 0 x\r\nmn\r\n",
             "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
             "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\nMN\r\n");
    /* mg: a miss echoes O and k; every meta flag is taken (those mg has no
     * use for ignored, a token after a flag letter too); an opaque of 32
     * bytes with its O is the longest */
    exchange(fd, "mg cm1 k Oab\r\nmg cm1 q k\r\nmg cm1 v s t f c k Oxy q\r\nmn\r\n",
             "EN kcm1 Oab\r\nMN\r\n");
    exchange(fd,
             "ms cm1 2 T0 F5\r\nhi\r\nmg cm1 s v t f kjunk Oxy\r\nmg cm1 D5 J1 M+ P L u I\r\n"
             "mg cm1 O1234567890123456789012345678901\r\nmg cm1 O12345678901234567890123456789012\r\n"
             "mg nope O12345678901234567890123456789012\r\n",
             "HD\r\nVA 2 s2 t-1 f5 kcm1 Oxy\r\nhi\r\nHD\r\nHD O1234567890123456789012345678901\r\n"
             "CLIENT_ERROR opaque token too long\r\nCLIENT_ERROR opaque token too long\r\n");
    /* ms: modes in capitals; a bad mode is named before a long opaque */
    exchange(fd,
             "ms cm2 2 MS\r\nhi\r\nms cm2 2 Ms\r\nhi\r\nms cm2 2 Mz O123456789012345678901234567890123\r\n"
             "hi\r\nms cm2 2 O123456789012345678901234567890123\r\nhi\r\n",
             "HD\r\nCLIENT_ERROR invalid mode for ms M token\r\nCLIENT_ERROR invalid mode for ms M token\r\n"
             "CLIENT_ERROR opaque token too long\r\n");
    /* ms C: an add ignores it, a set or replace is a cas (NF when missing),
     * an append checks it (C0: no check) */
    exchange(fd,
             "ms cm3 2 ME C99\r\nhi\r\nms cm3 2 ME C99\r\nhi\r\nms cm3 2 MR C99\r\nhi\r\n"
             "ms cm4 2 MR C99\r\nhi\r\nms cm4 2 C99\r\nhi\r\nms cm3 2 MA C99\r\nhi\r\n"
             "ms cm4 2 MA C99\r\nhi\r\nms cm3 2 MA C0\r\n!!\r\nmg cm3 v\r\n",
             "HD\r\nNS\r\nEX\r\nNF\r\nNF\r\nEX\r\nNS\r\nHD\r\nVA 4\r\nhi!!\r\n");
    /* md and ma name one reason for any flag error; ma takes s and f */
    exchange(fd,
             "md cm3 Cx\r\nmd cm3 x\r\nma cm3 x\r\nma cm3 Mx\r\nma cm3 s f\r\n"
             "md cm3 O12345678901234567890123456789012 q\r\nmd cm3 q k\r\nmd cm3 q k\r\n",
             "CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid or duplicate flag\r\n"
             "CLIENT_ERROR invalid or duplicate flag\r\nCLIENT_ERROR invalid mode for ma M token\r\n"
             "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
             "CLIENT_ERROR opaque token too long\r\nNF kcm3\r\n");
    /* ma: q hides a change even with v, not a creation; C (0: none); an
     * over-long O after the change is made; T before t shows, and sticks
     * to an item changed in place only */
    exchange(fd,
             "ma cm5 q v\r\nma cm5 N0 J5 q v\r\nma cm5 q v\r\nma cm5 C1 v\r\nma cm5 C0 v k\r\n"
             "ma cm5 O12345678901234567890123456789012 T0\r\nmg cm5 v t\r\n"
             "ma nope O12345678901234567890123456789012\r\n",
             "NF\r\nVA 1\r\n5\r\nEX\r\nVA 1 kcm5\r\n7\r\nCLIENT_ERROR opaque token too long\r\n"
             "VA 1 t-1\r\n8\r\nCLIENT_ERROR opaque token too long\r\n");
    exchange(fd, "set cm6 0 0 1\r\n9\r\nma cm6 T500 v t\r\nmg cm6 t v\r\n",
             "STORED\r\nVA 2 t500\r\n10\r\nVA 2 t-1\r\n10\r\n");
    expect_ttl(fd, "ma cm6 T500 t\r\n", "HD t", "\r\n", 500);
    expect_ttl(fd, "mg cm6 t\r\n", "HD t", "\r\n", 500);
    close(fd);
}

/* ------------------------------------------------------------ two doors */

static void test_two_doors(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char buf[64], req[128], want[256];
    size_t len;
    struct rkv_item_info info;

    /* TCP → librkv: value, flags, TTL (relative), CAS = version */
    exchange(fd, "set door1 1234 100 5\r\nvalue\r\n", "STORED\r\n");
    uint64_t cas = gets_cas(fd, "door1");
    assert_int_equal(rkv_get(e->kv, "door1", 5, buf, sizeof buf, &len, &info), RKV_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "value", 5);
    assert_int_equal(info.user_flags, 1234);
    assert_int_equal(info.version, cas);
    assert_true(info.ttl_left >= 98 && info.ttl_left <= 100);
    /* absolute unix time beyond 30 days */
    snprintf(req, sizeof req, "set door2 0 %lld 1\r\nx\r\n", (long long)time(NULL) + 1000);
    exchange(fd, req, "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "door2", 5, buf, sizeof buf, &len, &info), RKV_OK);
    assert_true(info.ttl_left >= 990 && info.ttl_left <= 1000);
    /* exactly 30 days is still relative */
    exchange(fd, "set door3 0 2592000 1\r\nx\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "door3", 5, buf, sizeof buf, &len, &info), RKV_OK);
    assert_true(info.ttl_left >= 2591990 && info.ttl_left <= 2592000);
    /* an absolute time in the past, and negative: gone at once */
    exchange(fd, "set door3 0 2592001 1\r\nx\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "door3", 5, buf, sizeof buf, &len, &info), RKV_NOT_FOUND);
    exchange(fd, "set door2 0 -1 1\r\nx\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "door2", 5, buf, sizeof buf, &len, &info), RKV_NOT_FOUND);
    /* exptime 0: no expiry */
    exchange(fd, "set door2 0 0 1\r\nx\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "door2", 5, buf, sizeof buf, &len, &info), RKV_OK);
    assert_int_equal(info.ttl_left, 0);

    /* librkv → TCP */
    struct rkv_put_options po = { .ttl = 50, .user_flags = 77 };
    assert_int_equal(rkv_put(e->kv, "door4", 5, "from-shm", 8, &po, NULL), RKV_OK);
    assert_int_equal(rkv_get(e->kv, "door4", 5, buf, sizeof buf, &len, &info), RKV_OK);
    snprintf(want, sizeof want, "VALUE door4 77 8 %llu\r\nfrom-shm\r\nEND\r\n",
             (unsigned long long)info.version);
    exchange(fd, "gets door4\r\n", want);
    expect_ttl(fd, "mg door4 t f\r\n", "HD t", " f77\r\n", 50);
    /* a CAS from one door checked by the other */
    snprintf(req, sizeof req, "cas door4 5 0 2 %llu\r\nok\r\n", (unsigned long long)info.version);
    exchange(fd, req, "STORED\r\n");
    po = (struct rkv_put_options){ .mode = RKV_CAS, .cas = info.version };
    assert_int_equal(rkv_put(e->kv, "door4", 5, "no", 2, &po, NULL), RKV_CAS_MISMATCH);
    assert_int_equal(rkv_get(e->kv, "door4", 5, buf, sizeof buf, &len, &info), RKV_OK);
    assert_memory_equal(buf, "ok", 2);
    assert_int_equal(info.user_flags, 5);
    /* incr from both doors on one counter */
    exchange(fd, "set door5 0 0 1\r\n1\r\n", "STORED\r\n");
    uint64_t v;
    assert_int_equal(rkv_incr(e->kv, "door5", 5, 10, &v), RKV_OK);
    assert_int_equal(v, 11);
    exchange(fd, "incr door5 1\r\n", "12\r\n");
    /* a binary key, named in base64 over TCP, is the same bytes for librkv */
    exchange(fd, "ms AAEC 3 b F3\r\nbin\r\n", "HD\r\n");
    assert_int_equal(rkv_get(e->kv, "\0\1\2", 3, buf, sizeof buf, &len, &info), RKV_OK);
    assert_int_equal(len, 3);
    assert_int_equal(info.user_flags, 3);
    po = (struct rkv_put_options){ .user_flags = 4 };
    assert_int_equal(rkv_put(e->kv, "\xff\xfe", 2, "yy", 2, &po, NULL), RKV_OK);
    exchange(fd, "mg //4= b v f\r\n", "VA 2 f4\r\nyy\r\n");
    /* delete through librkv, seen by TCP */
    assert_int_equal(rkv_delete(e->kv, "door5", 5), RKV_OK);
    exchange(fd, "get door5\r\n", "END\r\n");
    close(fd);
}

/* ------------------------------------------------------------ atomicity */

struct appender {
    unsigned port, n;
    char ch;
    bool ok; /* all n answered STORED (checked by the main thread) */
};

/* All n appends in one send, then their n answers: the two connections'
 * workers run appends back to back, overlapping as much as they can. No
 * cmocka assertion here: they may only fail on the test's own thread. */
static void *append_loop(void *arg)
{
    struct appender *a = arg;
    int fd = mc_connect(a->port);
    char one[64];
    int len = snprintf(one, sizeof one, "append race 0 0 1\r\n%c\r\n", a->ch);
    char *req = malloc((size_t)len * a->n), *want = malloc(8u * a->n + 1), *got = malloc(8u * a->n);
    for (unsigned i = 0; i < a->n; i++) {
        memcpy(req + (size_t)i * (size_t)len, one, (size_t)len);
        memcpy(want + 8u * i, "STORED\r\n", 8);
    }
    size_t left = (size_t)len * a->n;
    const char *p = req;
    while (fd >= 0 && left > 0) {
        ssize_t w = send(fd, p, left, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        p += w;
        left -= (size_t)w;
    }
    a->ok = fd >= 0 && left == 0 && mc_recv_n(fd, got, 8u * a->n) == 8u * a->n &&
            memcmp(got, want, 8u * a->n) == 0;
    if (!a->ok)
        fprintf(stderr, "appender %c: not every append answered STORED\n", a->ch);
    free(req);
    free(want);
    free(got);
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void test_append_atomic(void **state)
{
    struct env *e = *state;
    enum { N = 3000 };
    int fd = mc_connect(e->port);
    exchange(fd, "set race 0 0 0\r\n\r\n", "STORED\r\n");
    /* two connections (the server has two workers: one each) appending
     * at once: no append may be lost */
    struct appender a[2] = { { e->port, N, 'a', false }, { e->port, N, 'b', false } };
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, append_loop, &a[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_true(a[0].ok && a[1].ok);
    assert_true(mc_send_all(fd, "get race\r\n", 10));
    char line[128];
    mc_read_line(fd, line, sizeof line);
    char wantl[64];
    snprintf(wantl, sizeof wantl, "VALUE race 0 %d\r\n", 2 * N);
    assert_string_equal(line, wantl);
    char *v = malloc(2 * N + 7);
    assert_int_equal(mc_recv_n(fd, v, 2 * N + 7), 2 * N + 7);
    unsigned na = 0, nb = 0;
    for (int i = 0; i < 2 * N; i++) {
        na += v[i] == 'a';
        nb += v[i] == 'b';
    }
    assert_int_equal(na, N);
    assert_int_equal(nb, N);
    free(v);
    close(fd);
}

/* ------------------------------------------------------------ failed updates */

/* Read "get key"'s answer: the value into val (NUL-terminated, at most
 * cap - 1 bytes), its length, or -1 for a miss. */
static long get_value(int fd, const char *key, char *val, size_t cap)
{
    char req[300], line[512];
    unsigned flags;
    unsigned long bytes;
    snprintf(req, sizeof req, "get %s\r\n", key);
    assert_true(mc_send_all(fd, req, strlen(req)));
    mc_read_line(fd, line, sizeof line);
    if (strcmp(line, "END\r\n") == 0)
        return -1;
    if (sscanf(line, "VALUE %*s %u %lu", &flags, &bytes) != 2 || bytes + 1 > cap)
        fail_msg("get %s: answer %s", key, line);
    assert_int_equal(mc_recv_n(fd, val, bytes), bytes);
    val[bytes] = '\0';
    mc_read_line(fd, line, sizeof line);
    assert_string_equal(line, "\r\n");
    mc_read_line(fd, line, sizeof line);
    assert_string_equal(line, "END\r\n");
    return (long)bytes;
}

/* A data block of n bytes (value `fill`) for a storage command of line
 * `head`, sent whole. */

/* A set refused for size drops the old value for both doors, as memcached
 * drops it; a refused add, replace, cas or append keeps it, as memcached
 * does (an append whose joined value has no room answers NOT_STORED). The
 * one-sided reader holds the item's location, so its miss shows the old
 * item was unlinked, not only hidden from the door. */
/* A counter the door's decr shrank is padded with spaces, as memcached pads
 * it; librkv's incr counts on from it, and the door reads what librkv wrote. */
static void test_counter_across_doors(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char buf[64];
    size_t n;
    uint64_t r;

    exchange(fd, "set ctr 0 0 2\r\n10\r\n", "STORED\r\n");
    exchange(fd, "decr ctr 1\r\n", "9\r\n");
    exchange(fd, "get ctr\r\n", "VALUE ctr 0 2\r\n9 \r\nEND\r\n");
    assert_int_equal(rkv_incr(e->kv, "ctr", 3, 5, &r), RKV_OK);
    assert_int_equal(r, 14);
    assert_int_equal(rkv_get(e->kv, "ctr", 3, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_int_equal(n, 2);
    assert_memory_equal(buf, "14", 2);
    exchange(fd, "incr ctr 1\r\n", "15\r\n");
    close(fd);
}

static void test_failed_set_drops_old_value(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char buf[64], req[128];
    size_t n, max = rkv_max_value_size(e->kv);
    size_t door = (1u << 20) - 59 - 2; /* memcached's largest for a 2-byte key, flags 0 */

    exchange(fd, "set fk 0 0 3\r\nMOO\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "fk", 2, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_int_equal(rkv_get(e->kv, "fk", 2, buf, sizeof buf, &n, NULL), RKV_OK); /* cached */
    snprintf(req, sizeof req, "set fk 0 0 %zu\r\n", door + 1);
    send_block(fd, req, door + 1, 'x');
    exchange(fd, "get fk\r\n", "SERVER_ERROR object too large for cache\r\nEND\r\n");
    assert_int_equal(rkv_get(e->kv, "fk", 2, buf, sizeof buf, &n, NULL), RKV_NOT_FOUND);

    exchange(fd, "ms fm 3\r\nMOO\r\n", "HD\r\n");
    snprintf(req, sizeof req, "ms fm %zu T0\r\n", door + 1);
    send_block(fd, req, door + 1, 'x');
    exchange(fd, "mg fm v\r\n", "SERVER_ERROR object too large for cache\r\nEN\r\n");

    /* the conditional commands keep the old value */
    exchange(fd, "set fr 0 0 3\r\nMOO\r\n", "STORED\r\n");
    uint64_t cas = gets_cas(fd, "fr");
    const char *cmds[] = { "replace", "add", "prepend" };
    for (unsigned i = 0; i < 3; i++) {
        snprintf(req, sizeof req, "%s fr 0 0 %zu\r\n", cmds[i], door + 1);
        send_block(fd, req, door + 1, 'x');
        exchange(fd, "mn\r\n", "SERVER_ERROR object too large for cache\r\nMN\r\n");
    }
    snprintf(req, sizeof req, "cas fr 0 0 %zu %llu\r\n", door + 1, (unsigned long long)cas);
    send_block(fd, req, door + 1, 'x');
    exchange(fd, "mn\r\n", "SERVER_ERROR object too large for cache\r\nMN\r\n");
    snprintf(req, sizeof req, "append fr 0 0 %zu\r\n", door - 1); /* fits alone, not joined */
    send_block(fd, req, door - 1, 'x');
    exchange(fd, "mn\r\n", "NOT_STORED\r\nMN\r\n");
    exchange(fd, "get fr\r\n", "VALUE fr 0 3\r\nMOO\r\nEND\r\n");

    /* librkv: a SET too large drops the key for the door too; a REPLACE
     * too large is refused with the old value kept */
    char *big = calloc(1, max + 1);
    assert_non_null(big);
    exchange(fd, "set fl 0 0 3\r\nMOO\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(e->kv, "fl", 2, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_int_equal(rkv_put(e->kv, "fl", 2, big, max + 1, NULL, NULL), RKV_TOO_LARGE);
    assert_non_null(strstr(rkv_last_error(e->kv), "old value was removed"));
    assert_int_equal(rkv_get(e->kv, "fl", 2, buf, sizeof buf, &n, NULL), RKV_NOT_FOUND);
    exchange(fd, "get fl\r\n", "END\r\n");
    const struct rkv_put_options repl = { .mode = RKV_REPLACE };
    assert_int_equal(rkv_put(e->kv, "fr", 2, big, max + 1, &repl, NULL), RKV_TOO_LARGE);
    exchange(fd, "get fr\r\n", "VALUE fr 0 3\r\nMOO\r\nEND\r\n");
    free(big);
    close(fd);
}

/* The largest value a key takes is memcached's: its item (48-byte header,
 * CAS, the key and its NUL, the data's "\r\n", 4 bytes for client flags
 * other than 0) within 1 MiB, so 1 MiB less 60 bytes under a one-byte key;
 * a longer value is SERVER_ERROR, its block skipped. librkv reads such a
 * value back (its buffer long enough). */
static void test_value_limits(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char req[400], key[251];
    static const struct {
        unsigned klen;
        unsigned flags;
        size_t max;
    } cases[] = {
        { 1, 0, (1u << 20) - 60 },
        { 1, 1, (1u << 20) - 64 },
        { 250, 0, (1u << 20) - 309 },
        { 250, 7, (1u << 20) - 313 },
    };
    for (unsigned i = 0; i < 4; i++) {
        memset(key, 'v', cases[i].klen);
        key[cases[i].klen] = '\0';
        snprintf(req, sizeof req, "set %s %u 0 %zu\r\n", key, cases[i].flags, cases[i].max + 1);
        send_block(fd, req, cases[i].max + 1, 'y');
        exchange(fd, "mn\r\n", "SERVER_ERROR object too large for cache\r\nMN\r\n");
        snprintf(req, sizeof req, "set %s %u 0 %zu\r\n", key, cases[i].flags, cases[i].max);
        send_block(fd, req, cases[i].max, 'y');
        exchange(fd, "mn\r\n", "STORED\r\nMN\r\n");
        snprintf(req, sizeof req, "ms %s %zu F%u\r\n", key, cases[i].max + 1, cases[i].flags);
        send_block(fd, req, cases[i].max + 1, 'y');
        exchange(fd, "mn\r\n", "SERVER_ERROR object too large for cache\r\nMN\r\n");
        /* what memcached would keep: the key went with the refused set */
        snprintf(req, sizeof req, "mg %s s\r\n", key);
        exchange(fd, req, "EN\r\n");
    }
    /* appends join up to the same limit, with the old item's flags */
    exchange(fd, "set v 0 0 1\r\nz\r\n", "STORED\r\n");
    snprintf(req, sizeof req, "append v 0 0 %zu\r\n", (size_t)(1u << 20) - 61);
    send_block(fd, req, (1u << 20) - 61, 'y');
    exchange(fd, "mn\r\n", "STORED\r\nMN\r\n");
    exchange(fd, "append v 0 0 1\r\n!\r\n", "NOT_STORED\r\n");
    size_t len, cap = (1u << 20);
    char *buf = malloc(cap);
    assert_int_equal(rkv_get(e->kv, "v", 1, buf, cap, &len, NULL), RKV_OK);
    assert_int_equal(len, (1u << 20) - 60);
    assert_int_equal(rkv_get(e->kv, "v", 1, buf, rkv_max_value_size(e->kv), &len, NULL),
                     RKV_BUFFER_TOO_SMALL);
    free(buf);
    close(fd);
}

/* A get with a key over 250 bytes drops every answer memcached had not
 * written out yet: those since its last write-out (an mg's, in one batch),
 * not those a get or an mn wrote out. */
static void test_long_key_drops_unsent(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    char req[600], key[252];
    memset(key, 'l', 251);
    key[251] = '\0';
    snprintf(req, sizeof req, "set lk 0 0 1\r\nx\r\nmg lk v\r\nget %s\r\nmn\r\n", key);
    exchange(fd, req, "CLIENT_ERROR bad command line format\r\nMN\r\n");
    snprintf(req, sizeof req, "mg lk v\r\nmn\r\nmg lk s\r\nget lk\r\nget lk %s\r\n", key);
    exchange(fd, req,
             "VA 1\r\nx\r\nMN\r\nHD s1\r\nVALUE lk 0 1\r\nx\r\nEND\r\n"
             "CLIENT_ERROR bad command line format\r\n");
    /* memcached reads 16 KiB at a time: a data block past that is read
     * into its item, after which it writes out what it owes (STORED); the
     * first long key's error is not written out when the second comes */
    size_t n = 20000;
    char *big = malloc(n + 1024);
    int h = snprintf(big, 64, "set lb 0 0 %zu\r\n", n);
    memset(big + h, 'b', n);
    snprintf(big + h + n, 1024, "\r\nget %s\r\nset ls 0 0 1\r\nx\r\nget %s\r\nmn\r\n", key, key);
    exchange(fd, big, "STORED\r\nCLIENT_ERROR bad command line format\r\nMN\r\n");
    free(big);
    close(fd);
}

/* Append under memory pressure, as a memcached client does it: a server
 * full of large values (it has begun to evict), then one key grown by 13
 * bytes at a time and read back after every append. Every append is
 * stored and the key is never lost: its growing item is the only live item
 * of its size class, whose page its superseded versions fill, and evicting
 * it to make room for its own next version lost the key (memcached stores
 * all of them). incr on a counter alone in its class, likewise. */
static void test_append_under_pressure(void **state)
{
    (void)state;
    struct env e2 = { 0 };
    const char *extra[] = { "--memory", "16M", "--workers", "1", NULL };
    assert_int_equal(start_server(&e2, 5, extra), 0);
    rkv_client *kv = connect_retry(e2.sp.uri, NULL, 10000);
    assert_non_null(kv);
    size_t fill_len = 300u << 10;
    char *fill = malloc(fill_len), key[32];
    assert_non_null(fill);
    memset(fill, 'f', fill_len);
    uint64_t evictions = 0;
    for (unsigned i = 0; evictions == 0; i++) {
        assert_true(i < 1000);
        snprintf(key, sizeof key, "fill%u", i);
        assert_int_equal(rkv_put(kv, key, strlen(key), fill, fill_len, NULL, NULL), RKV_OK);
        assert_true(server_stat(kv, 0, "evictions", &evictions));
    }
    free(fill);

    int fd = mc_connect(e2.port);
    enum { APPENDS = 1500, ADD = 13 };
    char *want = malloc(APPENDS * ADD + 2), *got = malloc(APPENDS * ADD + 2);
    assert_non_null(want);
    assert_non_null(got);
    exchange(fd, "set chain 0 0 1\r\n<\r\n", "STORED\r\n");
    want[0] = '<';
    size_t len = 1;
    for (unsigned i = 0; i < APPENDS; i++) {
        char req[64];
        snprintf(req, sizeof req, "append chain 0 0 %d\r\n", ADD);
        for (unsigned b = 0; b < ADD; b++)
            want[len + b] = (char)('a' + (i + b) % 26);
        assert_true(mc_send_all(fd, req, strlen(req)));
        assert_true(mc_send_all(fd, want + len, ADD));
        assert_true(mc_send_all(fd, "\r\n", 2));
        char line[128];
        mc_read_line(fd, line, sizeof line);
        if (strcmp(line, "STORED\r\n") != 0)
            fail_msg("append #%u (value %zu bytes) answered %s", i + 1, len, line);
        len += ADD;
        long n = get_value(fd, "chain", got, APPENDS * ADD + 2);
        if (n < 0)
            fail_msg("after append #%u the key is gone", i + 1);
        assert_int_equal(n, len);
        assert_memory_equal(got, want, len);
    }
    exchange(fd, "set ctr 0 0 1\r\n1\r\n", "STORED\r\n");
    for (unsigned i = 2; i <= 3000; i++) {
        char want_line[32];
        snprintf(want_line, sizeof want_line, "%u\r\n", i);
        exchange(fd, "incr ctr 1\r\n", want_line);
    }
    free(want);
    free(got);
    close(fd);
    rkv_close(kv);
    assert_int_equal(server_stop(&e2.sp), 0);
}

/* ------------------------------------------------------------ flush */

/* Store keys 0..n-1 through the door (odd) and librkv (even), then GET
 * each one-sidedly twice, so the second finds it through its cached
 * location. */
static void flush_fill(int fd, rkv_client *kv, unsigned n)
{
    char key[32], req[256], buf[32];
    size_t len;
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "fl%u", i);
        if (i % 2) {
            snprintf(req, sizeof req, "set %s 0 0 %zu\r\n%s\r\n", key, strlen(key), key);
            exchange(fd, req, "STORED\r\n");
        } else {
            assert_int_equal(rkv_put(kv, key, strlen(key), key, strlen(key), NULL, NULL), RKV_OK);
        }
    }
    for (unsigned r = 0; r < 2; r++)
        for (unsigned i = 0; i < n; i++) {
            snprintf(key, sizeof key, "fl%u", i);
            assert_int_equal(rkv_get(kv, key, strlen(key), buf, sizeof buf, &len, NULL), RKV_OK);
        }
}

/* After a flush no key 0..n-1 is found: one-sidedly (with the location
 * cached: design.md invariant 8), by get, gets, mg, incr and touch. */
static void flush_gone(int fd, rkv_client *kv, unsigned n)
{
    char key[32], req[256], buf[32];
    size_t len;
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "fl%u", i);
        assert_int_equal(rkv_get(kv, key, strlen(key), buf, sizeof buf, &len, NULL), RKV_NOT_FOUND);
        snprintf(req, sizeof req, "get %s\r\ngets %s\r\nmg %s v\r\nincr %s 1\r\ntouch %s 10\r\n",
                 key, key, key, key, key);
        exchange(fd, req, "END\r\nEND\r\nEN\r\nNOT_FOUND\r\nNOT_FOUND\r\n");
    }
}

/* flush_all through the door and rkv_flush through librkv: every item
 * stored before is gone for both doors at once, a reader's cached location
 * included; items stored after stay; noreply is silent; a delayed flush
 * keeps the items until its time, and a flush now replaces it. */
static void test_flush_all(void **state)
{
    (void)state;
    struct env e2 = { 0 };
    enum { N = 200 };
    assert_int_equal(start_server(&e2, 6, NULL), 0);
    rkv_client *kv = connect_retry(e2.sp.uri, NULL, 10000);
    assert_non_null(kv);
    int fd = mc_connect(e2.port);
    char buf[32];
    size_t len;

    flush_fill(fd, kv, N);
    exchange(fd, "flush_all\r\n", "OK\r\n");
    flush_gone(fd, kv, N);
    exchange(fd, "set after 0 0 1\r\na\r\n", "STORED\r\n");
    assert_int_equal(rkv_get(kv, "after", 5, buf, sizeof buf, &len, NULL), RKV_OK);

    flush_fill(fd, kv, N);
    exchange(fd, "flush_all noreply\r\nmn\r\n", "MN\r\n");
    flush_gone(fd, kv, N);
    exchange(fd, "get after\r\n", "END\r\n");

    flush_fill(fd, kv, N);
    assert_int_equal(rkv_flush(kv, 0), RKV_OK);
    flush_gone(fd, kv, N);

    /* delayed: nothing goes now; a flush now takes everything and replaces it */
    flush_fill(fd, kv, N);
    exchange(fd, "flush_all 1000\r\n", "OK\r\n");
    assert_int_equal(rkv_flush(kv, 2000), RKV_OK);
    exchange(fd, "get fl1\r\n", "VALUE fl1 0 3\r\nfl1\r\nEND\r\n");
    assert_int_equal(rkv_get(kv, "fl0", 3, buf, sizeof buf, &len, NULL), RKV_OK);
    exchange(fd, "flush_all 0\r\n", "OK\r\n");
    flush_gone(fd, kv, N);

    exchange(fd, "flush_all noreply 5\r\n", "CLIENT_ERROR invalid exptime argument\r\n");
    exchange(fd, "flush_all 5 noreply extra\r\n", "ERROR\r\n");
    uint64_t flushes = 0;
    assert_true(mc_send_all(fd, "stats\r\n", 7));
    for (int i = 0; i < 500; i++) {
        char line[512];
        mc_read_line(fd, line, sizeof line);
        if (strcmp(line, "END\r\n") == 0)
            break;
        unsigned long long v;
        if (sscanf(line, "STAT cmd_flush %llu", &v) == 1)
            flushes = v;
    }
    assert_int_equal(flushes, 5); /* memcached counts the refused one too, not the ERROR */
    close(fd);
    rkv_close(kv);
    assert_int_equal(server_stop(&e2.sp), 0);
}

/* ------------------------------------------------------------ eviction */

/* Read hot keys hot0..hot<n-1> through the door, pipelined (HD, or EN
 * once lost). */
static void read_hot_door(int fd, unsigned n)
{
    char req[64], line[256];
    for (unsigned i = 0; i < n; i++) {
        snprintf(req, sizeof req, "mg hot%07u\r\n", i);
        assert_true(mc_send_all(fd, req, strlen(req)));
    }
    for (unsigned i = 0; i < n; i++)
        mc_read_line(fd, line, sizeof line);
}

/* Read them by librkv: one-sided GETs, found or gone. */
static void read_hot_one_sided(rkv_client *kv, unsigned n)
{
    char key[64], buf[128];
    size_t len;
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "hot%07u", i);
        rkv_status st = rkv_get(kv, key, strlen(key), buf, sizeof buf, &len, NULL);
        assert_true(st == RKV_OK || st == RKV_NOT_FOUND);
    }
}

/* A skewed workload: 200 hot keys read between every 50 stores (through
 * the door) of keys never read again, 3x what the server holds. The hot
 * keys are read through the door (mg), or with `one_sided` by librkv over
 * shm, whose GETs the server never sees: their hints come in batches. Door
 * reads count as accesses (rkv_table_read) as hints do, so LRU and s3fifo
 * keep the hot keys and random eviction loses most of them. Without door
 * reads counting, LRU evicts the hot keys first (they are the oldest
 * stores). All keys are 10 bytes, so all items share one size class (the
 * policy chooses within it). Returns how many hot keys are still there at
 * the end. */
static unsigned hot_keys_kept(const char *policy, unsigned uri_n, bool one_sided)
{
    struct env e2 = { 0 };
    const char *extra[] = { "--memory", "8M", "--evict", policy, NULL };
    assert_int_equal(start_server(&e2, uri_n, extra), 0);
    int fd = mc_connect(e2.port);
    char req[256], val[101], line[256];
    memset(val, 'v', 100);
    val[100] = '\0';
    enum { HOT = 200, COLD_PER_ROUND = 50 };
    for (unsigned i = 0; i < HOT; i++) {
        snprintf(req, sizeof req, "set hot%07u 0 0 100\r\n%s\r\n", i, val);
        exchange(fd, req, "STORED\r\n");
    }
    uint64_t cold = 0, items = 0;
    rkv_client *kv = connect_retry(e2.sp.uri, NULL, 10000);
    assert_non_null(kv);
    assert_true(server_stat(kv, 0, "items", &items));
    uint64_t target = 0;
    for (unsigned round = 0; target == 0 || cold < target; round++) {
        if (one_sided)
            read_hot_one_sided(kv, HOT);
        else
            read_hot_door(fd, HOT);
        for (unsigned i = 0; i < COLD_PER_ROUND; i++, cold++) {
            snprintf(req, sizeof req, "set c%09llu 0 0 100 noreply\r\n%s\r\n",
                     (unsigned long long)cold, val);
            assert_true(mc_send_all(fd, req, strlen(req)));
        }
        exchange(fd, "mn\r\n", "MN\r\n");
        if (target == 0 && round % 50 == 49) {
            uint64_t ev = 0;
            assert_true(server_stat(kv, 0, "evictions", &ev));
            if (ev > 0) {
                assert_true(server_stat(kv, 0, "items", &items));
                target = cold + 3 * items; /* turn the cache over 3 times */
            }
        }
    }
    unsigned kept = 0;
    for (unsigned i = 0; i < HOT; i++) {
        snprintf(req, sizeof req, "mg hot%07u\r\n", i);
        assert_true(mc_send_all(fd, req, strlen(req)));
        mc_read_line(fd, line, sizeof line);
        kept += strcmp(line, "HD\r\n") == 0;
    }
    print_message("%s, reads by %s: %u of %u hot keys kept after %llu stores into %llu items\n",
                  policy, one_sided ? "librkv" : "the door", kept, HOT, (unsigned long long)cold,
                  (unsigned long long)items);
    close(fd);
    rkv_close(kv);
    assert_int_equal(server_stop(&e2.sp), 0);
    return kept;
}

static void test_door_reads_feed_lru(void **state)
{
    (void)state;
    unsigned lru = hot_keys_kept("lru", 7, false), rnd = hot_keys_kept("random", 8, false);
    unsigned s3 = hot_keys_kept("s3fifo", 9, false);
    assert_true(lru >= 190);
    assert_true(s3 >= 190);
    assert_true(rnd <= 100);
}

/* The same through librkv: one-sided GETs, hints in batches. */
static void test_hints_feed_policy(void **state)
{
    (void)state;
    unsigned lru = hot_keys_kept("lru", 10, true), rnd = hot_keys_kept("random", 11, true);
    unsigned s3 = hot_keys_kept("s3fifo", 12, true);
    assert_true(lru >= 190);
    assert_true(s3 >= 190);
    assert_true(rnd <= 100);
}

/* ------------------------------------------------------------ hostile */

static void test_garbage(void **state)
{
    struct env *e = *state;
    int good = mc_connect(e->port);
    exchange(good, "set g 0 0 1\r\n1\r\n", "STORED\r\n");
    srand(13);
    for (int round = 0; round < 20; round++) {
        int fd = mc_connect(e->port);
        char junk[8192];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (char)(rand() & 0xff);
        ssize_t w = send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        (void)w;
        shutdown(fd, SHUT_WR);
        assert_true(closed_by_server(fd));
        close(fd);
        exchange(good, "get g\r\n", "VALUE g 0 1\r\n1\r\nEND\r\n");
    }
    /* huge lengths: refused without buffering them */
    int fd = mc_connect(e->port);
    exchange(fd, "set h 0 0 2147483645\r\n", "SERVER_ERROR object too large for cache\r\n");
    exchange(fd, "set h 0 0 99999999999999999999999\r\n", "");
    close(fd);
    fd = mc_connect(e->port);
    exchange(fd, "ms h 2147483647\r\n", "CLIENT_ERROR bad command line format\r\n");
    close(fd);
    exchange(good, "get g\r\n", "VALUE g 0 1\r\n1\r\nEND\r\n");
    close(good);
}

static void test_slowloris(void **state)
{
    struct env *e = *state;
    int slow = mc_connect(e->port), other = mc_connect(e->port);
    const char *s = "set slow 0 0 10\r\n0123456789\r\n";
    /* one byte at a time; between bytes another client is served in full */
    for (size_t i = 0; s[i]; i++) {
        assert_true(mc_send_all(slow, s + i, 1));
        exchange(other, "set o 0 0 1\r\nx\r\nget o\r\n", "STORED\r\nVALUE o 0 1\r\nx\r\nEND\r\n");
    }
    exchange(slow, "", "STORED\r\n");
    close(slow);
    close(other);
}

static void test_half_close(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    const char *req = "set hc 0 0 2\r\nhi\r\nget hc\r\nset part 0 0 5\r\nab";
    assert_true(mc_send_all(fd, req, strlen(req)));
    shutdown(fd, SHUT_WR);
    /* what came complete is answered, the unfinished command dropped, then EOF */
    const char *want = "STORED\r\nVALUE hc 0 2\r\nhi\r\nEND\r\n";
    char buf[128];
    assert_int_equal(mc_recv_n(fd, buf, sizeof buf), strlen(want));
    assert_memory_equal(buf, want, strlen(want));
    close(fd);
    fd = mc_connect(e->port);
    exchange(fd, "get part\r\n", "END\r\n");
    close(fd);
}

static void test_many_connections(void **state)
{
    struct env *e = *state;
    const char *env = getenv("RKV_TEST_MC_CONNS");
    unsigned n = env ? (unsigned)atoi(env) : 200;
    int *fds = calloc(n, sizeof *fds);
    for (unsigned i = 0; i < n; i++) {
        fds[i] = mc_connect(e->port);
        assert_true(fds[i] >= 0);
    }
    for (unsigned i = 0; i < n; i++) {
        char req[64], want[64];
        snprintf(req, sizeof req, "set c%u 0 0 1\r\nx\r\n", i);
        exchange(fds[i], req, "STORED\r\n");
        snprintf(req, sizeof req, "get c%u\r\n", (i * 7) % (i + 1));
        snprintf(want, sizeof want, "VALUE c%u 0 1\r\nx\r\nEND\r\n", (i * 7) % (i + 1));
        exchange(fds[i], req, want);
    }
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
}

static void test_not_reading(void **state)
{
    struct env *e = *state;
    int other = mc_connect(e->port);
    /* a 512 KiB value; a client asks for it again and again, never reading */
    size_t vn = 512u << 10;
    char *v = malloc(vn + 64);
    int h = snprintf(v, 64, "set fat 0 0 %zu\r\n", vn);
    memset(v + h, 'f', vn);
    memcpy(v + h + vn, "\r\n", 2);
    assert_true(mc_send_all(other, v, (size_t)h + vn + 2));
    char line[64];
    mc_read_line(other, line, sizeof line);
    assert_string_equal(line, "STORED\r\n");
    free(v);
    int fd = mc_connect(e->port);
    int bufsz = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    uint64_t sent = 0;
    bool dropped = false;
    /* the server stops answering once its output is backed up, then drops
     * the client when its requests fill the input too */
    while (sent < (512ull << 20)) {
        ssize_t w = send(fd, "get fat\r\n", 9, MSG_NOSIGNAL);
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            dropped = true;
            break;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* our send buffer is full too: meanwhile others are served */
            exchange(other, "get none\r\n", "END\r\n");
            struct timeval tv = { .tv_sec = 20 };
            fd_set wr;
            FD_ZERO(&wr);
            FD_SET(fd, &wr);
            if (select(fd + 1, NULL, &wr, NULL, &tv) <= 0)
                fail_msg("the server keeps a client that reads none of its answers "
                         "(%llu bytes of requests sent)",
                         (unsigned long long)sent);
            continue;
        }
        if (w > 0)
            sent += (uint64_t)w;
    }
    if (!dropped) {
        fcntl(fd, F_SETFL, 0);
        dropped = closed_by_server(fd);
    }
    assert_true(dropped);
    exchange(other, "get none\r\n", "END\r\n");
    close(fd);
    close(other);
}

/* A get whose answer is larger than the connection's output buffer (8 MiB):
 * it streams, as memcached's does, rather than failing with SERVER_ERROR.
 * One 900,000-byte value named 24 times (21.6 MB): read back byte for byte
 * by a client that reads all it can, by one that reads 8 KiB at a time
 * while another client is served in full between its reads, and, as a gat,
 * with the line's exptime kept to the end; meanwhile a client that asked
 * for it too and never reads holds up no one. */
#define STREAM_VALUE 900000u
#define STREAM_TIMES 24u

static char *stream_request(const char *head)
{
    char *req = malloc(64 + STREAM_TIMES * 4);
    size_t n = (size_t)sprintf(req, "%s", head);
    for (unsigned i = 0; i < STREAM_TIMES; i++)
        n += (size_t)sprintf(req + n, " sv");
    sprintf(req + n, "\r\n");
    return req;
}

/* The answer to stream_request(): every VALUE, then END and MN. */
static char *stream_answer(const char *value, size_t *len)
{
    const char head[] = "VALUE sv 0 900000\r\n";
    size_t one = sizeof head - 1 + STREAM_VALUE + 2, n = 0;
    char *want = malloc(STREAM_TIMES * one + 16);
    for (unsigned i = 0; i < STREAM_TIMES; i++) {
        memcpy(want + n, head, sizeof head - 1);
        memcpy(want + n + sizeof head - 1, value, STREAM_VALUE);
        memcpy(want + n + one - 2, "\r\n", 2);
        n += one;
    }
    memcpy(want + n, "END\r\nMN\r\n", 9);
    *len = n + 9;
    return want;
}

static void expect_stream(int fd, const char *want, size_t len, size_t step, int other)
{
    char *got = malloc(len);
    size_t n = 0;
    while (n < len) {
        ssize_t r = recv(fd, got + n, step < len - n ? step : len - n, 0);
        if (r <= 0)
            fail_msg("the answer ended after %zu of %zu bytes", n, len);
        n += (size_t)r;
        if (other >= 0)
            exchange(other, "get none\r\n", "END\r\n");
    }
    size_t at = 0;
    while (at < len && got[at] == want[at])
        at++;
    if (at < len)
        fail_msg("the answer differs %zu bytes into its %zu", at, len);
    free(got);
}

static void test_streamed_multiget(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port), other = mc_connect(e->port);
    int idle = mc_connect(e->port),
        slow = mc_connect_opts(e->port, &(struct mc_conn_opts){ .rcvbuf = 4096,
                                                                .timeout_s = MC_CONN_TIMEOUT_S });
    char *value = malloc(STREAM_VALUE + 64);
    int h = snprintf(value, 64, "set sv 0 0 %u\r\n", STREAM_VALUE);
    for (size_t i = 0; i < STREAM_VALUE; i++)
        value[h + i] = (char)('a' + (i * 7 + i / 251) % 26);
    memcpy(value + h + STREAM_VALUE, "\r\n", 2);
    assert_true(mc_send_all(fd, value, (size_t)h + STREAM_VALUE + 2));
    char line[64];
    mc_read_line(fd, line, sizeof line);
    assert_string_equal(line, "STORED\r\n");

    size_t len;
    char *want = stream_answer(value + h, &len);
    char *get = stream_request("get"), *gat = stream_request("gat 1000");
    assert_true(len > (8u << 20) + (8u << 20));
    /* a client that never reads its answer */
    assert_true(mc_send_all(idle, get, strlen(get)));
    assert_true(mc_send_all(idle, "mn\r\n", 4));

    /* one that reads all it can, with a command after */
    assert_true(mc_send_all(fd, get, strlen(get)));
    assert_true(mc_send_all(fd, "mn\r\n", 4));
    expect_stream(fd, want, len, len, -1);
    exchange(other, "get none\r\n", "END\r\n");

    /* one that reads a little at a time, others served between its reads */
    assert_true(mc_send_all(slow, get, strlen(get)));
    assert_true(mc_send_all(slow, "mn\r\n", 4));
    expect_stream(slow, want, len, 8192, other);

    /* gat: the rest of the line keeps its exptime */
    assert_true(mc_send_all(fd, gat, strlen(gat)));
    assert_true(mc_send_all(fd, "mn\r\n", 4));
    expect_stream(fd, want, len, 1u << 20, -1);
    expect_ttl(fd, "mg sv t\r\n", "HD t", "\r\n", 1000);

    close(idle);
    exchange(other, "get none\r\n", "END\r\n");
    free(get);
    free(gat);
    free(want);
    free(value);
    close(fd);
    close(other);
    close(slow);
}

/* ------------------------------------------------------------ limits, auth */

/* Wait (bounded, 20 s) until the server counts n connections past admission. */
static void wait_conns(int fd, unsigned n)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        char line[256];
        unsigned cur = 0;
        assert_true(mc_send_all(fd, "stats\r\n", 7));
        for (int i = 0; i < 500; i++) {
            mc_read_line(fd, line, sizeof line);
            sscanf(line, "STAT curr_connections %u", &cur);
            if (strcmp(line, "END\r\n") == 0 || line[0] == '\0')
                break;
        }
        if (cur == n)
            return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 20)
            fail_msg("the server still counts %u connections, not %u", cur, n);
        usleep(2000);
    }
}

static void test_max_conns_shared(void **state)
{
    (void)state;
    struct env e2 = { 0 };
    const char *extra[] = { "--max-conns", "3", NULL };
    assert_int_equal(start_server(&e2, 1, extra), 0);
    rkv_client *kv = connect_retry(e2.sp.uri, NULL, 10000); /* one via shm */
    assert_non_null(kv);
    int a = mc_connect(e2.port), b;
    exchange(a, "mn\r\n", "MN\r\n");
    /* server_start's own probe connection may still be closing: wait for
     * the count to be ours (kv + a) */
    wait_conns(a, 2);
    b = mc_connect(e2.port);
    exchange(b, "mn\r\n", "MN\r\n");
    int c = mc_connect(e2.port); /* the fourth door-wide */
    char line[128];
    mc_read_line(c, line, sizeof line);
    assert_string_equal(line, "SERVER_ERROR too many open connections\r\n");
    assert_true(closed_by_server(c));
    close(c);
    close(a);
    /* a slot freed by tcp is taken by tcp again */
    int d = -1;
    wait_conns(b, 2); /* a's close reaches its worker asynchronously */
    for (int i = 0; i < 1; i++) {
        d = mc_connect(e2.port);
        assert_true(mc_send_all(d, "mn\r\n", 4));
        mc_read_line(d, line, sizeof line);
        if (strcmp(line, "MN\r\n") == 0)
            break;
        close(d);
        d = -1;
        exchange(b, "mn\r\n", "MN\r\n");
    }
    assert_true(d >= 0);
    close(d);
    close(b);
    rkv_close(kv);
    assert_int_equal(server_stop(&e2.sp), 0);
}

static void test_auth_rule(void **state)
{
    (void)state;
    struct env e2 = { 0 };
    char uri[256];
    test_uri(uri, sizeof uri, 2);
    /* a secret and a non-loopback tcp door: refused at start */
    const char *args[] = { "--memory",        "64M", "--auth-secret", "s3cret", "--listen",
                           "tcp://0.0.0.0:1", NULL };
    assert_int_not_equal(server_start(&e2.sp, server_bin, uri, args), 0);
    /* allowed explicitly, or on loopback */
    e2.host = "0.0.0.0";
    const char *allowed[] = { "--auth-secret", "s3cret", "--tcp-allow-unauthenticated", NULL };
    assert_int_equal(start_server(&e2, 3, allowed), 0);
    int fd = mc_connect(e2.port);
    exchange(fd, "mn\r\n", "MN\r\n");
    close(fd);
    assert_int_equal(server_stop(&e2.sp), 0);
    e2.host = NULL;
    const char *loop[] = { "--auth-secret", "s3cret", NULL };
    assert_int_equal(start_server(&e2, 4, loop), 0);
    fd = mc_connect(e2.port);
    exchange(fd, "mn\r\n", "MN\r\n");
    close(fd);
    assert_int_equal(server_stop(&e2.sp), 0);
}

/* ------------------------------------------------------------ pymemcache */

static void test_pymemcache(void **state)
{
    struct env *e = *state;
    if (system("/usr/bin/python3 -c 'import pymemcache' 2>/dev/null") != 0) {
        print_message("python3-pymemcache not installed (scripts/install-deps.sh): skipped\n");
        skip();
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 - <<'EOF'\n"
             "from pymemcache.client.base import Client\n"
             "c = Client(('127.0.0.1', %u))\n"
             "assert c.set('py1', b'hello', expire=100, noreply=False)\n"
             "assert c.get('py1') == b'hello'\n"
             "v, cas = c.gets('py1')\n"
             "assert v == b'hello'\n"
             "assert c.cas('py1', b'world', cas, noreply=False)\n"
             "assert not c.cas('py1', b'again', cas, noreply=False)\n"
             "assert c.add('py1', b'x', noreply=False) is False\n"
             "assert c.append('py1', b'!', noreply=False)\n"
             "assert c.get_many(['py1', 'nope']) == {'py1': b'world!'}\n"
             "c.set('pyn', b'5')\n"
             "assert c.incr('pyn', 3) == 8\n"
             "assert c.decr('pyn', 10) == 0\n"
             "assert c.touch('py1', 10, noreply=False)\n"
             "assert c.delete('py1', noreply=False)\n"
             "assert c.get('py1') is None\n"
             "s = c.stats()\n"
             "assert b'curr_items' in s or 'curr_items' in s\n"
             "c.close()\n"
             "EOF\n",
             e->port);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage_commands),
        cmocka_unit_test(test_noreply),
        cmocka_unit_test(test_arith_touch),
        cmocka_unit_test(test_touch_expired),
        cmocka_unit_test(test_admin),
        cmocka_unit_test(test_stats_counts),
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_meta_herd),
        cmocka_unit_test(test_meta_herd_one_winner),
        cmocka_unit_test(test_meta_vivify_no_memory),
        cmocka_unit_test(test_pipelining),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_conformance),
        cmocka_unit_test(test_long_multiget),
        cmocka_unit_test(test_two_doors),
        cmocka_unit_test(test_append_atomic),
        cmocka_unit_test(test_failed_set_drops_old_value),
        cmocka_unit_test(test_counter_across_doors),
        cmocka_unit_test(test_value_limits),
        cmocka_unit_test(test_long_key_drops_unsent),
        cmocka_unit_test(test_append_under_pressure),
        cmocka_unit_test(test_flush_all),
        cmocka_unit_test(test_door_reads_feed_lru),
        cmocka_unit_test(test_hints_feed_policy),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_slowloris),
        cmocka_unit_test(test_half_close),
        cmocka_unit_test(test_many_connections),
        cmocka_unit_test(test_not_reading),
        cmocka_unit_test(test_streamed_multiget),
        cmocka_unit_test(test_max_conns_shared),
        cmocka_unit_test(test_auth_rule),
        cmocka_unit_test(test_pymemcache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
