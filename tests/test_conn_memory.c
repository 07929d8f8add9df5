/* test_conn_memory.c — what an shm connection costs the server, bounded.
 *
 * A real rkv-server process and CONNS librkv connections over shm. The
 * server's resident memory (VmRSS in /proc/PID/status) may grow by at most
 * BOUND_KIB per connection — twice the target of 64 KiB (docs/design.md,
 * "Connection memory") — first with the connections idle since their
 * HELLO, then again once each has done one PUT of a value that goes
 * through its staging area and gone idle: the server gives an idle
 * connection's ring and staging pages back. Memory is deterministic enough
 * for a bound this loose; nothing depends on timing: the second look waits
 * for the condition, with a generous bound as a safety net.
 *
 * Usage: test_conn_memory PATH/TO/rkv-server
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rkv.h"
#include "server_proc.h"
#include "util.h"

#define CONNS     500
#define BOUND_KIB 128u         /* per connection: 2 x the 64 KiB target */
#define VALUE_LEN (256u << 10) /* past max_msg: travels through the staging area */
#define SAFETY_MS 60000        /* bound on the wait for pages to go back */

static const char *server_bin;
static struct server_proc sp;
static rkv_client *conns[CONNS];

/* VmRSS of pid in KiB. */
static uint64_t rss_kib(pid_t pid)
{
    char path[64], line[256];
    uint64_t kib = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1)
            break;
    fclose(f);
    assert_true(kib > 0);
    return kib;
}

static void close_all(void)
{
    for (unsigned i = 0; i < CONNS; i++) {
        rkv_close(conns[i]);
        conns[i] = NULL;
    }
}

static int teardown(void **state)
{
    (void)state;
    close_all();
    server_kill(&sp);
    return 0;
}

static void test_idle_connections_cost_little(void **state)
{
    (void)state;
    const char *const extra[] = { "--memory", "16M", NULL };
    char uri[256];
    snprintf(uri, sizeof uri, "shm:///tmp/rkv-test-connmem-%d.sock", (int)getpid());
    assert_int_equal(server_start(&sp, server_bin, uri, extra), 0);
    const uint64_t base = rss_kib(sp.pid);

    struct rkv_options o = { .location_cache = (unsigned)-1 };
    for (unsigned i = 0; i < CONNS; i++)
        assert_int_equal(rkv_connect(sp.uri, &o, &conns[i]), RKV_OK);
    uint64_t idle = rss_kib(sp.pid);
    print_message("server VmRSS %" PRIu64 " KiB, %" PRIu64 " KiB with %u idle connections\n", base,
                  idle, CONNS);
    assert_true(idle <= base + (uint64_t)CONNS * BOUND_KIB);

    char *value = malloc(VALUE_LEN);
    assert_non_null(value);
    memset(value, 'v', VALUE_LEN);
    for (unsigned i = 0; i < CONNS; i++) {
        char key[32];
        int klen = snprintf(key, sizeof key, "connmem-%u", i);
        assert_int_equal(rkv_put(conns[i], key, (size_t)klen, value, VALUE_LEN, NULL, NULL), RKV_OK);
    }
    /* Values and their items live in the region, which is resident from
     * the start; what grew is the connections' pages. */
    uint64_t used = rss_kib(sp.pid), deadline = rkv_now_ns() + SAFETY_MS * 1000000ull;
    print_message("%" PRIu64 " KiB right after one %u-byte PUT each\n", used, VALUE_LEN);
    while (used > base + (uint64_t)CONNS * BOUND_KIB && rkv_now_ns() < deadline) {
        usleep(50000); /* polling a condition, bounded by SAFETY_MS */
        used = rss_kib(sp.pid);
    }
    print_message("%" PRIu64 " KiB once they went idle\n", used);
    assert_true(used <= base + (uint64_t)CONNS * BOUND_KIB);

    /* Pages given back are zero pages again: every connection still works,
     * small values through its rings and a large one through its staging. */
    char *back = malloc(VALUE_LEN);
    assert_non_null(back);
    for (unsigned i = 0; i < CONNS; i++) {
        char key[32];
        size_t got = 0, len = i % 2 ? 100 : VALUE_LEN;
        int klen = snprintf(key, sizeof key, "connmem-again-%u", i);
        memset(value, (int)('a' + i % 26), len);
        assert_int_equal(rkv_put(conns[i], key, (size_t)klen, value, len, NULL, NULL), RKV_OK);
        assert_int_equal(rkv_get(conns[i], key, (size_t)klen, back, VALUE_LEN, &got, NULL), RKV_OK);
        assert_int_equal(got, len);
        assert_memory_equal(back, value, len);
    }
    free(back);
    free(value);

    close_all();
    assert_int_equal(server_stop(&sp), 0);
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_idle_connections_cost_little, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
