/* test_memcache_stats.c — the tcp door's `stats` groups against a real server.
 *
 * Every group's shape (each line "STAT name value", then END), key values
 * after known operations (items and slabs of one size class, store
 * failures, expired reads, evictions by class, settings), `stats reset`,
 * `stats detail`, and the replies to groups rkv does not serve.
 *
 * With --vs-memcached it instead runs memcached (/usr/bin/memcached) and
 * rkv side by side, does the same operations on both, and checks that the
 * field names of stats, stats settings, stats items and stats slabs from
 * rkv cover memcached's, less the list of fields rkv cannot know (each
 * named in docs/design.md, "The tcp door's stats"). Exit 77 without
 * memcached.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <signal.h>
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

#define MAX_FIELDS 2048

/* One group's reply: its STAT lines split into name and value. */
struct reply {
    unsigned n;
    char name[MAX_FIELDS][64];
    char value[MAX_FIELDS][96];
};

/* One "\r\n"-terminated line into buf (fails the test at EOF). */
static void read_line(int fd, char *buf, size_t cap)
{
    size_t n = mc_read_line(fd, buf, cap);
    if (n + 1 < cap && (n == 0 || buf[n - 1] != '\n'))
        fail_msg("connection ended after \"%s\"", buf);
}

/* Send req and expect exactly these lines back. */
static void exchange(int fd, const char *req, const char *want)
{
    char got[4096] = "", line[512];
    assert_true(mc_send_str(fd, req));
    while (strlen(got) < strlen(want)) {
        read_line(fd, line, sizeof line);
        if (strlen(got) + strlen(line) >= sizeof got)
            break;
        strcat(got, line);
    }
    if (strcmp(got, want) != 0)
        fail_msg("request %s\nwanted  %s\ngot     %s", req, want, got);
}

/* "stats <group>": every line must be "STAT name value" (one space each,
 * no empty part) until END. */
static void stats(int fd, const char *group, struct reply *r)
{
    char req[128], line[512];
    snprintf(req, sizeof req, group[0] ? "stats %s\r\n" : "stats\r\n", group);
    assert_true(mc_send_str(fd, req));
    r->n = 0;
    for (;;) {
        read_line(fd, line, sizeof line);
        if (strcmp(line, "END\r\n") == 0)
            return;
        size_t len = strlen(line);
        if (len < 2 || strcmp(line + len - 2, "\r\n") != 0)
            fail_msg("stats %s: line without CRLF: %s", group, line);
        line[len - 2] = '\0';
        char *name = line + 5, *sp = strchr(name, ' ');
        if (strncmp(line, "STAT ", 5) != 0 || sp == NULL || sp == name || sp[1] == '\0' ||
            strchr(sp + 1, ' ') != NULL)
            fail_msg("stats %s: not \"STAT name value\": %s", group, line);
        assert_true(r->n < MAX_FIELDS);
        snprintf(r->name[r->n], sizeof r->name[0], "%.*s", (int)(sp - name), name);
        snprintf(r->value[r->n], sizeof r->value[0], "%s", sp + 1);
        r->n++;
    }
}

static const char *get(const struct reply *r, const char *name)
{
    for (unsigned i = 0; i < r->n; i++)
        if (strcmp(r->name[i], name) == 0)
            return r->value[i];
    return NULL;
}

static uint64_t num(const struct reply *r, const char *name)
{
    const char *v = get(r, name);
    if (v == NULL)
        fail_msg("no STAT %s", name);
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end != '\0')
        fail_msg("STAT %s %s: not a number", name, v);
    return x;
}

static uint64_t numf(const struct reply *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static uint64_t numf(const struct reply *r, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return num(r, name);
}

static struct reply *reply_new(void)
{
    struct reply *r = calloc(1, sizeof *r);
    assert_non_null(r);
    return r;
}

/* Store n items "<prefix>NN" of vlen bytes each. */
static void store_n(int fd, const char *prefix, unsigned n, unsigned vlen)
{
    char *req = malloc(vlen + 256);
    assert_non_null(req);
    for (unsigned i = 0; i < n; i++) {
        int h = snprintf(req, 256, "set %s%02u 0 0 %u\r\n", prefix, i, vlen);
        memset(req + h, 'v', vlen);
        memcpy(req + h + vlen, "\r\n", 3);
        exchange(fd, req, "STORED\r\n");
    }
    free(req);
}

/* ------------------------------------------------------------ rkv alone */

struct env {
    struct server_proc sp;
    unsigned port;
};

static int setup(void **state)
{
    static struct env e;
    /* values up to 4000 bytes; 1 MiB slab pages; max_conns given, and kept
     * as given: the memory check would lower it on a machine (or in a
     * memory cgroup) that cannot back 1024 connections' buffers */
    const char *args[] = { "--workers",      "2",           "--max-value-len",
                           "4000",           "--max-conns", "1024",
                           "--memory-check", "off",         NULL };
    if (server_start_tcp(&e.sp, server_bin, 40, NULL, &e.port, args) != 0)
        return -1;
    *state = &e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    return server_stop(&e->sp) == 0 ? 0 : -1;
}

/* Every group rkv serves has memcached's shape. */
static void test_shapes(void **state)
{
    struct env *e = *state;
    struct reply *r = reply_new();
    int fd = mc_connect(e->port);
    store_n(fd, "shape", 3, 10);
    static const char *const groups[] = { "",         "settings",      "items",        "slabs",
                                          "sizes",    "sizes_disable", "sizes_enable", "conns",
                                          "extstore", "items extra",   "slabs extra" };
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        stats(fd, groups[i], r);
    /* memcached's order at the start of `stats`, and rkv's after it */
    stats(fd, "", r);
    assert_string_equal(r->name[0], "pid");
    assert_string_equal(r->name[1], "uptime");
    assert_string_equal(r->name[2], "time");
    assert_string_equal(r->name[3], "version");
    assert_memory_equal(get(r, "version"), "1.6.18-rkv-", 11);
    bool in_rkv = false;
    for (unsigned i = 0; i < r->n; i++) {
        bool rkv = strncmp(r->name[i], "rkv_", 4) == 0;
        if (in_rkv && !rkv)
            fail_msg("memcached's %s after rkv's own fields", r->name[i]);
        in_rkv |= rkv;
    }
    assert_true(in_rkv);
    /* rusage as seconds.microseconds, as exporters parse it */
    const char *ru = get(r, "rusage_user");
    assert_non_null(ru);
    assert_non_null(strchr(ru, '.'));
    assert_int_equal(strlen(strchr(ru, '.')), 7);
    /* stats conns: this connection's block, its fd its number */
    stats(fd, "conns", r);
    bool mine = false;
    for (unsigned i = 0; i < r->n; i++) {
        char *colon = strchr(r->name[i], ':');
        assert_non_null(colon);
        mine |= strcmp(colon, ":state") == 0 && strcmp(r->value[i], "conn_parse_cmd") == 0;
    }
    assert_true(mine);
    stats(fd, "sizes", r);
    assert_int_equal(r->n, 1);
    assert_string_equal(get(r, "sizes_status"), "disabled");
    close(fd);
    free(r);
}

/* Values after known operations. */
static void test_values(void **state)
{
    struct env *e = *state;
    struct reply *r = reply_new(), *s = reply_new();
    int fd = mc_connect(e->port);
    exchange(fd, "flush_all\r\n", "OK\r\n");
    stats(fd, "", r);
    uint64_t sets0 = num(r, "cmd_set"), large0 = num(r, "store_too_large");
    uint64_t exp0 = num(r, "get_expired"), items0 = num(r, "total_items");
    uint64_t reclaimed0 = num(r, "reclaimed");

    /* 20 items of 300 bytes: one class, and nothing else in the table */
    store_n(fd, "val", 20, 300);
    char want[1024];
    char v300[301];
    memset(v300, 'v', 300);
    v300[300] = '\0';
    snprintf(want, sizeof want, "VALUE val00 0 300\r\n%s\r\nVALUE val01 0 300\r\n%s\r\nEND\r\n",
             v300, v300);
    exchange(fd, "get val00 val01 nothere\r\n", want);
    stats(fd, "items", r);
    stats(fd, "slabs", s);
    unsigned id = 0;
    for (unsigned i = 0; i < r->n; i++) {
        unsigned c;
        char field[64];
        if (sscanf(r->name[i], "items:%u:%63s", &c, field) == 2 && strcmp(field, "number") == 0) {
            assert_int_equal(id, 0); /* one class holds items */
            id = c;
        }
    }
    assert_true(id >= 1); /* 1-based, as memcached's */
    assert_int_equal(numf(r, "items:%u:number", id), 20);
    assert_int_equal(numf(r, "items:%u:evicted", id), 0);
    assert_int_equal(numf(s, "%u:used_chunks", id), 20);
    assert_int_equal(numf(s, "%u:total_chunks", id),
                     numf(s, "%u:total_pages", id) * numf(s, "%u:chunks_per_page", id));
    assert_int_equal(numf(s, "%u:used_chunks", id) + numf(s, "%u:free_chunks", id),
                     numf(s, "%u:total_chunks", id));
    assert_true(numf(s, "%u:chunk_size", id) >= 300);
    assert_int_equal(numf(s, "%u:cmd_set", id), 20);
    assert_int_equal(numf(s, "%u:get_hits", id), 2);
    assert_true(num(s, "active_slabs") >= 1);
    const uint64_t page = 1048576u + 640; /* a 1 MiB item and room for a second key */
    assert_true(num(s, "total_malloced") >= numf(s, "%u:total_pages", id) * page);
    assert_int_equal(num(s, "total_malloced") % page, 0);

    /* a set over the largest item (4000 bytes of value for the longest
     * key; a 3-byte key leaves 247 more to the value): store_too_large */
    char big[4400];
    int h = snprintf(big, sizeof big, "set big 0 0 4248\r\n");
    memset(big + h, 'x', 4248);
    memcpy(big + h + 4248, "\r\n", 3);
    exchange(fd, big, "SERVER_ERROR object too large for cache\r\n");
    /* an expired item met by a get: get_expired, and a miss */
    exchange(fd, "set soon 0 1 1\r\nx\r\n", "STORED\r\n");
    struct timespec ts = { 2, 200000000 };
    nanosleep(&ts, NULL);
    exchange(fd, "get soon\r\n", "END\r\n");
    stats(fd, "", r);
    assert_int_equal(num(r, "cmd_set") - sets0, 21); /* the refused set is not one */
    assert_int_equal(num(r, "store_too_large") - large0, 1);
    /* the get meets it expired (get_expired), unless the server's expiry
     * scan reclaimed it first: which comes first is the scheduler's */
    uint64_t met = num(r, "get_expired") - exp0;
    assert_true(met == 1 || (met == 0 && num(r, "reclaimed") > reclaimed0));
    assert_int_equal(num(r, "total_items") - items0, 21);
    assert_true(num(r, "curr_items") >= 20); /* soon stays until reclaimed */
    assert_int_equal(num(r, "threads"), 2);
    assert_true(num(r, "curr_connections") >= 1);
    assert_string_equal(get(r, "cmd_meta"), "0");

    stats(fd, "settings", r);
    assert_int_equal(num(r, "item_size_max"), 1048576);
    /* the page holds two 512 KiB values with the longest keys */
    assert_int_equal(num(r, "rkv_slab_page_size"), 1048576 + 640);
    assert_int_equal(num(r, "rkv_max_value_len"), 4000);
    assert_int_equal(num(r, "tcpport"), e->port);
    assert_int_equal(num(r, "num_threads"), 2);
    assert_int_equal(num(r, "maxconns"), 1024);
    assert_string_equal(get(r, "inter"), "127.0.0.1");
    assert_string_equal(get(r, "evictions"), "on");
    assert_string_equal(get(r, "growth_factor"), "1.25");
    assert_string_equal(get(r, "cas_enabled"), "yes");
    assert_string_equal(get(r, "dump_enabled"), "no");
    close(fd);
    free(r);
    free(s);
}

/* stats reset: RESET; the counts memcached resets start again, current
 * values and rkv's own counters stay. */
static void test_reset(void **state)
{
    struct env *e = *state;
    struct reply *r = reply_new();
    int fd = mc_connect(e->port);
    store_n(fd, "rst", 5, 10);
    exchange(fd, "get rst00\r\ndelete rst01\r\n",
             "VALUE rst00 0 10\r\nvvvvvvvvvv\r\nEND\r\nDELETED\r\n");
    stats(fd, "", r);
    uint64_t items = num(r, "curr_items"), rkv_puts = num(r, "rkv_cmd_put");
    assert_true(num(r, "cmd_set") >= 5 && num(r, "total_connections") >= 1);
    exchange(fd, "stats reset\r\n", "RESET\r\n");
    stats(fd, "", r);
    static const char *const zeroed[] = { "cmd_get",     "cmd_set",         "get_hits",
                                          "delete_hits", "total_items",     "total_connections",
                                          "evictions",   "store_too_large", "get_expired" };
    for (size_t i = 0; i < sizeof zeroed / sizeof zeroed[0]; i++)
        if (num(r, zeroed[i]) != 0)
            fail_msg("%s is %s after stats reset", zeroed[i], get(r, zeroed[i]));
    assert_int_equal(num(r, "curr_items"), items);
    assert_true(num(r, "curr_connections") >= 1);
    assert_int_equal(num(r, "rkv_cmd_put"), rkv_puts);
    /* bytes_read counts from the reset on: the stats line after it */
    assert_int_equal(num(r, "bytes_read"), strlen("stats\r\n"));
    exchange(fd, "get rst02\r\n", "VALUE rst02 0 10\r\nvvvvvvvvvv\r\nEND\r\n");
    stats(fd, "", r);
    assert_int_equal(num(r, "cmd_get"), 1);
    assert_int_equal(num(r, "get_hits"), 1);
    close(fd);
    free(r);
}

/* stats detail: memcached's replies and per-prefix counts. */
static void test_detail(void **state)
{
    struct env *e = *state;
    struct reply *r = reply_new();
    int fd = mc_connect(e->port);
    exchange(fd, "stats detail\r\n", "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    exchange(fd, "stats detail sideways\r\n", "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    exchange(fd, "stats detail on\r\n", "OK\r\n");
    stats(fd, "settings", r);
    assert_string_equal(get(r, "detail_enabled"), "yes");
    exchange(fd, "set user:1 0 0 1\r\na\r\nget user:1 user:2 plain\r\ndelete user:1\r\n",
             "STORED\r\nVALUE user:1 0 1\r\na\r\nEND\r\nDELETED\r\n");
    exchange(fd, "stats detail dump\r\n", "PREFIX user get 2 hit 1 set 1 del 1\r\nEND\r\n");
    exchange(fd, "stats detail off\r\n", "OK\r\n");
    exchange(fd, "get user:3\r\n", "END\r\n"); /* not counted: off */
    exchange(fd, "stats detail dump\r\n", "PREFIX user get 2 hit 1 set 1 del 1\r\nEND\r\n");
    exchange(fd, "stats reset\r\n", "RESET\r\n"); /* memcached's reset clears prefixes */
    exchange(fd, "stats detail dump\r\n", "END\r\n");
    close(fd);
    free(r);
}

/* Groups rkv does not serve get memcached's replies, and the connection
 * goes on: each reply is whole (a client reading to END is not left
 * waiting), so the mn after it answers at once. */
static void test_unknown_groups(void **state)
{
    struct env *e = *state;
    int fd = mc_connect(e->port);
    exchange(fd, "stats nonsense\r\nmn\r\n", "ERROR\r\nMN\r\n");
    exchange(fd, "stats proxy\r\nmn\r\n", "ERROR\r\nMN\r\n");
    exchange(fd, "stats cachedump 1 10\r\nmn\r\n",
             "CLIENT_ERROR stats cachedump not allowed\r\nMN\r\n");
    exchange(fd, "stats sizes_enable\r\nmn\r\n",
             "STAT sizes_status error\r\nSTAT sizes_error not_supported\r\nEND\r\nMN\r\n");
    exchange(fd, "stats sizes_disable\r\nmn\r\n", "STAT sizes_status disabled\r\nEND\r\nMN\r\n");
    exchange(fd, "stats extstore\r\nmn\r\n", "END\r\nMN\r\n");
    close(fd);
}

/* Evictions are counted by the victim's class: with a small heap full,
 * items:<id>:evicted add up to `evictions`. */
static void test_evicted_by_class(void **state)
{
    (void)state;
    struct server_proc sp;
    unsigned port;
    const char *args[] = { "--memory", "8M", "--slab-page-size", "64K", "--workers", "1", NULL };
    assert_int_equal(server_start_tcp(&sp, server_bin, 41, NULL, &port, args), 0);
    struct reply *r = reply_new();
    int fd = mc_connect(port);
    store_n(fd, "a", 99, 2000); /* keys a00..a98, two sizes of item */
    for (unsigned round = 0; round < 160; round++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "r%u_", round);
        store_n(fd, prefix, 99, 1000 + 500 * (round % 2));
    }
    stats(fd, "", r);
    uint64_t evictions = num(r, "evictions");
    assert_true(evictions > 0);
    stats(fd, "items", r);
    uint64_t sum = 0;
    for (unsigned i = 0; i < r->n; i++) {
        unsigned c;
        char field[64];
        if (sscanf(r->name[i], "items:%u:%63s", &c, field) == 2 && strcmp(field, "evicted") == 0)
            sum += strtoull(r->value[i], NULL, 10);
    }
    /* a class left with no items is not listed (as in memcached): its
     * evictions are not in the sum */
    assert_true(sum > 0 && sum <= evictions);
    close(fd);
    free(r);
    assert_int_equal(server_stop(&sp), 0);
}

/* ------------------------------------------------------------ memcached */

/* memcached's fields rkv leaves out (docs/design.md says why, each). */
static const char *const omitted[] = {
    /* stats */
    "libevent",
    "connection_structures",
    "response_obj_oom",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
    "read_buf_oom",
    "reserved_fds",
    "slab_reassign_evictions_nomem",
    "slab_reassign_inline_reclaim",
    "slab_reassign_busy_items",
    "slab_reassign_busy_deletes",
    "slab_reassign_running",
    "lru_crawler_running",
    "lru_crawler_starts",
    "lru_maintainer_juggles",
    "malloc_fails",
    "log_worker_dropped",
    "log_worker_written",
    "log_watcher_skipped",
    "log_watcher_sent",
    "log_watchers",
    "unexpected_napi_ids",
    "round_robin_fallback",
    "slab_global_page_pool",
    "expired_unfetched",
    "evicted_unfetched",
    "evicted_active",
    "crawler_reclaimed",
    "crawler_items_checked",
    "lrutail_reflocked",
    "moves_to_cold",
    "moves_to_warm",
    "moves_within_lru",
    "direct_reclaims",
    "lru_bumps_dropped",
    /* stats settings */
    "verbosity",
    "oldest",
    "umask",
    "num_threads_per_udp",
    "reqs_per_event",
    "slab_automove_ratio",
    "slab_automove_window",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_wbuf_size",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "slab_automove_freeratio",
    "ext_drop_unread",
    "ssl_chain_cert",
    "ssl_key",
    "ssl_verify_mode",
    "ssl_keyformat",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version",
    "num_napi_ids",
    "memory_file",
    "drop_privileges",
    /* stats items (items:N:...) */
    "items:N:number_hot",
    "items:N:number_warm",
    "items:N:number_cold",
    "items:N:number_temp",
    "items:N:age_hot",
    "items:N:age_warm",
    "items:N:age",
    "items:N:mem_requested",
    "items:N:evicted_time",
    "items:N:outofmemory",
    "items:N:tailrepairs",
    "items:N:reclaimed",
    "items:N:expired_unfetched",
    "items:N:evicted_unfetched",
    "items:N:evicted_active",
    "items:N:crawler_reclaimed",
    "items:N:crawler_items_checked",
    "items:N:lrutail_reflocked",
    "items:N:moves_to_cold",
    "items:N:moves_to_warm",
    "items:N:moves_within_lru",
    "items:N:direct_reclaims",
    "items:N:hits_to_hot",
    "items:N:hits_to_warm",
    "items:N:hits_to_cold",
    "items:N:hits_to_temp",
    /* stats slabs (N:...) */
    "N:delete_hits",
    "N:incr_hits",
    "N:decr_hits",
};

/* A field's name with its class id made N (items:3:number → items:N:number,
 * 3:chunk_size → N:chunk_size). */
static void generic(const char *name, char *out, size_t cap)
{
    const char *p = name;
    size_t pre = strncmp(name, "items:", 6) == 0 ? 6 : 0;
    p += pre;
    const char *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q > p && *q == ':')
        snprintf(out, cap, "%.*sN%s", (int)pre, name, q);
    else
        snprintf(out, cap, "%s", name);
}

static bool has_generic(const struct reply *r, const char *g)
{
    char mine[96];
    for (unsigned i = 0; i < r->n; i++) {
        generic(r->name[i], mine, sizeof mine);
        if (strcmp(mine, g) == 0)
            return true;
    }
    return false;
}

static bool is_omitted(const char *g)
{
    for (size_t i = 0; i < sizeof omitted / sizeof omitted[0]; i++)
        if (strcmp(omitted[i], g) == 0)
            return true;
    return false;
}

static pid_t mc_pid;

static void mc_stop(void)
{
    if (mc_pid > 0) {
        kill(mc_pid, SIGTERM);
        waitpid(mc_pid, NULL, 0);
        mc_pid = 0;
    }
}

/* memcached on a free port (one bound and released first); its port. */
static unsigned mc_start(void)
{
    for (unsigned try = 0; try < 20; try++) {
        unsigned port = 30000 + (unsigned)((getpid() * 7 + try * 131) % 20000);
        char p[16];
        snprintf(p, sizeof p, "%u", port);
        mc_pid = fork();
        assert_true(mc_pid >= 0);
        if (mc_pid == 0) {
            if (geteuid() == 0)
                execl("/usr/bin/memcached", "memcached", "-p", p, "-U", "0", "-l", "127.0.0.1",
                      "-u", "root", "-m", "64", (char *)NULL);
            else
                execl("/usr/bin/memcached", "memcached", "-p", p, "-U", "0", "-l", "127.0.0.1",
                      "-m", "64", (char *)NULL);
            _exit(127);
        }
        for (int i = 0; i < 100; i++) {
            int fd = mc_connect(port);
            if (fd >= 0) {
                close(fd);
                return port;
            }
            if (waitpid(mc_pid, NULL, WNOHANG) == mc_pid)
                break; /* the port was taken: another */
            struct timespec ts = { 0, 20000000 };
            nanosleep(&ts, NULL);
        }
        mc_stop();
    }
    fail_msg("memcached did not start");
    return 0;
}

static void test_covers_memcached(void **state)
{
    (void)state;
    struct server_proc sp;
    unsigned port;
    const char *args[] = { "--workers", "2", NULL };
    assert_int_equal(server_start_tcp(&sp, server_bin, 42, NULL, &port, args), 0);
    unsigned mport = mc_start();
    struct reply *mine = reply_new(), *theirs = reply_new();
    int fd = mc_connect(port), mfd = mc_connect(mport);
    assert_true(fd >= 0 && mfd >= 0);
    store_n(fd, "same", 10, 100);
    store_n(mfd, "same", 10, 100);
    static const char *const groups[] = { "", "settings", "items", "slabs" };
    unsigned missing = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        stats(fd, groups[g], mine);
        stats(mfd, groups[g], theirs);
        assert_true(theirs->n > 0);
        for (unsigned i = 0; i < theirs->n; i++) {
            char name[96];
            generic(theirs->name[i], name, sizeof name);
            if (!has_generic(mine, name) && !is_omitted(name)) {
                print_error("stats %s: rkv has no %s (memcached: %s %s)\n", groups[g], name,
                            theirs->name[i], theirs->value[i]);
                missing++;
            }
        }
        /* and nothing rkv omits as unknowable is printed after all */
        for (unsigned i = 0; i < mine->n; i++) {
            char name[96];
            generic(mine->name[i], name, sizeof name);
            if (is_omitted(name))
                fail_msg("stats %s: %s is printed but listed as omitted", groups[g], name);
        }
    }
    assert_int_equal(missing, 0);
    close(fd);
    close(mfd);
    free(mine);
    free(theirs);
    mc_stop();
    assert_int_equal(server_stop(&sp), 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server [--vs-memcached]\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    if (argc > 2 && strcmp(argv[2], "--vs-memcached") == 0) {
        if (access("/usr/bin/memcached", X_OK) != 0) {
            printf("memcached not installed (scripts/install-deps.sh): skipped\n");
            return 77;
        }
        const struct CMUnitTest vs[] = { cmocka_unit_test(test_covers_memcached) };
        int failed = cmocka_run_group_tests(vs, NULL, NULL);
        mc_stop();
        return failed;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),         cmocka_unit_test(test_values),
        cmocka_unit_test(test_reset),          cmocka_unit_test(test_detail),
        cmocka_unit_test(test_unknown_groups), cmocka_unit_test(test_evicted_by_class),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
