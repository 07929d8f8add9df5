/* test_restart.c — a clean restart keeps the cache (--state-file).
 *
 * Real rkv-server processes, each with --state-file in a fresh directory,
 * an shm listener (librkv) and a tcp door (the memcached text protocol):
 *
 *   - items stored through both doors, of several sizes (inline and
 *     rendezvous values), flags and TTLs, all come back after SIGTERM and a
 *     start with the same options: the same value, flags and CAS; TTLs
 *     still count (mg's t never grows, and shrinks by at most the time that
 *     passed); a librkv handle connected before the restart reconnects by
 *     itself; a write after the restart gets a larger CAS than any before;
 *     the file is gone once the server serves;
 *   - the time the server was down counts: a file whose stop time says the
 *     server stopped 2000 s ago loses the items whose TTL ran out meanwhile
 *     and keeps the rest with 2000 s less to live;
 *   - a byte flipped in one item's value in the file loses that item only
 *     (not served, counted as dropped), every other item is kept;
 *   - a file written with --memory 64M is refused by a start with --memory
 *     32M (exit 2, one message naming --memory 64M) and left in place; the
 *     start with 64M then keeps it;
 *   - after SIGKILL the next start is empty (and says why);
 *   - an upgrade: another build of the server (RKV_SERVER_NEXT, built with
 *     another version string and the same region format) keeps the cache
 *     the first one wrote — every item, value, flags and CAS — and says
 *     which version wrote it; the first one then keeps the second one's
 *     (a downgrade), with the item written in between.
 *
 * Nothing waits for time to pass: TTLs are long, and the downtime is
 * written into the file's header (through server/state_file.h's encoder,
 * so the header checksum stays right).
 *
 * Usage: test_restart PATH/TO/rkv-server [PATH/TO/RKV_SERVER_NEXT]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "mc_conn.h"
#include "rkv.h"
#include "server_proc.h"
#include "state_file.h"
#include "util.h"

#define NLIB 1200 /* keys stored over librkv */
#define NMC  300  /* keys stored through the tcp door */
#define BIG  (200u << 10)

static const char *server_bin, *server_next_bin;
static unsigned uri_seq = 40;

struct env {
    char dir[64], state[96], log[96];
    unsigned uri_n, port;
    struct server_proc sp;
};

/* ------------------------------------------------------------ helpers */

static void env_make(struct env *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "/tmp/rkv-test-restart-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->state, sizeof e->state, "%s/rkv.state", e->dir);
    snprintf(e->log, sizeof e->log, "%s/server.log", e->dir);
    e->uri_n = uri_seq++;
}

static void env_free(struct env *e)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
    assert_int_equal(system(cmd), 0);
}

/* Start `bin` (the same shm URI and, when free, the same tcp port every time). */
static void start_bin(struct env *e, const char *bin)
{
    const char *const extra[] = { "--state-file", e->state, "--log-file", e->log,
                                  "--log-level",  "info",   NULL };
    assert_int_equal(server_start_tcp(&e->sp, bin, e->uri_n, NULL, &e->port, extra), 0);
}

static void start(struct env *e)
{
    start_bin(e, server_bin);
}

static void stop(struct env *e)
{
    assert_int_equal(server_stop(&e->sp), 0);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The server log so far (caller frees). */
static char *log_text(const struct env *e)
{
    FILE *f = fopen(e->log, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The last line of the log that contains `what`, or "" (static). */
static const char *log_line(const struct env *e, const char *what)
{
    static char line[2048];
    char *text = log_text(e), *at = NULL, *p = text;
    while ((p = strstr(p, what)) != NULL)
        at = p++;
    line[0] = '\0';
    if (at != NULL) {
        while (at > text && at[-1] != '\n')
            at--;
        size_t n = strcspn(at, "\n");
        snprintf(line, sizeof line, "%.*s", (int)RKV_MIN(n, sizeof line - 1), at);
    }
    free(text);
    return line;
}

static void key_of(char *k, size_t len, const char *door, unsigned i)
{
    snprintf(k, len, "%s-key-%u", door, i);
}

/* Value i: names its key, 1 byte to 1 KiB, every 100th BIG (rendezvous).
 * Each size class in use holds at least one 1 MiB slab page, and the 64 MiB
 * region has 63 for the index and the classes: the mix spans the 54 classes
 * up to 1 KiB and BIG's three pages, so the cache keeps every item and no
 * page moves between classes. */
static size_t value_of(char *v, size_t cap, const char *door, unsigned i)
{
    size_t n = i % 100 == 7 ? BIG : 1 + (i * 53) % 1000;
    int h = snprintf(v, cap, "%s#%u#", door, i);
    for (size_t j = (size_t)h; j < n; j++)
        v[j] = (char)('a' + (j * 7 + i) % 26);
    return n < (size_t)h ? (size_t)h : n;
}

/* TTL of item i: never, 1000 s or 100000 s. */
static uint32_t ttl_of(unsigned i)
{
    return i % 3 == 0 ? 0 : i % 3 == 1 ? 1000 : 100000;
}

/* ------------------------------------------------------------ the door */

static void mc_set(int fd, const char *key, const char *v, size_t n, uint32_t flags, uint32_t ttl)
{
    char line[256];
    snprintf(line, sizeof line, "set %s %u %u %zu\r\n", key, flags, ttl, n);
    assert_true(mc_send_all(fd, line, strlen(line)));
    assert_true(mc_send_all(fd, v, n));
    assert_true(mc_send_all(fd, "\r\n", 2));
    mc_read_line(fd, line, sizeof line);
    assert_string_equal(line, "STORED\r\n");
}

struct mc_item {
    bool found;
    size_t len;
    uint32_t flags;
    long ttl; /* -1: never */
    uint64_t cas;
};

/* mg KEY s f t c v: the item, its value into v. */
static struct mc_item mc_get(int fd, const char *key, char *v, size_t cap)
{
    char line[512];
    struct mc_item it = { 0 };
    snprintf(line, sizeof line, "mg %s s f t c v\r\n", key);
    assert_true(mc_send_all(fd, line, strlen(line)));
    mc_read_line(fd, line, sizeof line);
    if (strcmp(line, "EN\r\n") == 0)
        return it;
    unsigned long long cas = 0;
    long ttl = 0;
    unsigned flags = 0;
    size_t size = 0, vlen = 0;
    if (sscanf(line, "VA %zu s%zu f%u t%ld c%llu", &vlen, &size, &flags, &ttl, &cas) != 5)
        fail_msg("mg %s: %s", key, line);
    assert_true(vlen + 2 <= cap);
    assert_int_equal(mc_recv_n(fd, v, vlen + 2), vlen + 2);
    it = (struct mc_item){ .found = true, .len = vlen, .flags = flags, .ttl = ttl, .cas = cas };
    return it;
}

/* ------------------------------------------------------------ what is stored */

struct stored {
    uint64_t lib_version[NLIB];
    struct mc_item mc[NMC];
    uint64_t max_cas;
    uint64_t t0_ns; /* when the items were stored */
};

static void store_all(struct env *e, rkv_client *c, struct stored *s)
{
    static char v[BIG + 64];
    char key[64];
    memset(s, 0, sizeof *s);
    s->t0_ns = rkv_now_ns();
    for (unsigned i = 0; i < NLIB; i++) {
        key_of(key, sizeof key, "lib", i);
        size_t n = value_of(v, sizeof v, "lib", i);
        struct rkv_put_options o = { .ttl = ttl_of(i) ? ttl_of(i) : RKV_TTL_NEVER,
                                     .user_flags = i * 3 };
        assert_int_equal(rkv_put(c, key, strlen(key), v, n, &o, &s->lib_version[i]), RKV_OK);
        s->max_cas = RKV_MAX(s->max_cas, s->lib_version[i]);
    }
    int fd = mc_connect(e->port);
    assert_true(fd >= 0);
    for (unsigned i = 0; i < NMC; i++) {
        key_of(key, sizeof key, "mc", i);
        size_t n = value_of(v, sizeof v, "mc", i);
        mc_set(fd, key, v, n, i * 5 + 1, ttl_of(i));
    }
    for (unsigned i = 0; i < NMC; i++) {
        key_of(key, sizeof key, "mc", i);
        s->mc[i] = mc_get(fd, key, v, sizeof v);
        assert_true(s->mc[i].found);
        s->max_cas = RKV_MAX(s->max_cas, s->mc[i].cas);
    }
    close(fd);
}

/* rkv_get through a handle that may have to reconnect first. */
static rkv_status get_retry(rkv_client *c, const char *key, void *buf, size_t cap, size_t *n,
                            struct rkv_item_info *info)
{
    uint64_t deadline = rkv_now_ns() + 20ull * 1000000000ull;
    rkv_status st;
    while ((st = rkv_get(c, key, strlen(key), buf, cap, n, info)) == RKV_CONNECTION ||
           st == RKV_TIMEOUT) {
        if (rkv_now_ns() > deadline)
            break;
        usleep(10000);
    }
    return st;
}

/* Every item as stored, except `lost` (a librkv key index, or -1) and,
 * when `ttl_gone`, the items with the 1000 s TTL. `down_s` seconds were
 * added to the downtime: TTLs shrink by that much more. */
static void check_all(struct env *e, rkv_client *c, const struct stored *s, int lost, bool ttl_gone,
                      unsigned down_s)
{
    static char v[BIG + 64], got[BIG + 64];
    char key[64];
    unsigned kept = 0;
    for (unsigned i = 0; i < NLIB; i++) {
        key_of(key, sizeof key, "lib", i);
        size_t n = value_of(v, sizeof v, "lib", i), len = 0;
        struct rkv_item_info info;
        rkv_status st = get_retry(c, key, got, sizeof got, &len, &info);
        if ((int)i == lost || (ttl_gone && ttl_of(i) == 1000)) {
            assert_int_equal(st, RKV_NOT_FOUND);
            continue;
        }
        if (st != RKV_OK)
            fail_msg("%s: %s", key, rkv_strerror(st));
        assert_int_equal(len, n);
        assert_memory_equal(got, v, n);
        assert_int_equal(info.version, s->lib_version[i]);
        assert_int_equal(info.user_flags, i * 3);
        if (ttl_of(i) == 0)
            assert_int_equal(info.ttl_left, 0);
        else
            assert_true(info.ttl_left <= ttl_of(i) - down_s && info.ttl_left > 0);
        kept++;
    }
    uint64_t elapsed = (rkv_now_ns() - s->t0_ns) / 1000000000ull + 2;
    int fd = mc_connect(e->port);
    assert_true(fd >= 0);
    for (unsigned i = 0; i < NMC; i++) {
        key_of(key, sizeof key, "mc", i);
        size_t n = value_of(v, sizeof v, "mc", i);
        struct mc_item it = mc_get(fd, key, got, sizeof got);
        if (ttl_gone && ttl_of(i) == 1000) {
            assert_false(it.found);
            continue;
        }
        assert_true(it.found);
        assert_int_equal(it.len, n);
        assert_memory_equal(got, v, n);
        assert_int_equal(it.flags, s->mc[i].flags);
        assert_int_equal(it.cas, s->mc[i].cas);
        if (ttl_of(i) == 0) {
            assert_int_equal(it.ttl, -1);
        } else {
            /* counts on: never more than before less the added downtime,
             * never less than that by more than the time that passed */
            assert_true(it.ttl <= s->mc[i].ttl - (long)down_s);
            assert_true(it.ttl >= s->mc[i].ttl - (long)down_s - (long)elapsed);
        }
        kept++;
    }
    close(fd);
    print_message("      %u items back as stored\n", kept);
}

/* ------------------------------------------------------------ the tests */

static void test_clean_restart_keeps_the_cache(void **state)
{
    (void)state;
    struct env e;
    static struct stored s;
    env_make(&e);
    start(&e);
    assert_non_null(strstr(log_line(&e, "no state file"), "starting empty"));
    rkv_client *c = connect_retry(e.sp.uri, NULL, 5000);
    assert_non_null(c);
    store_all(&e, c, &s);
    stop(&e);

    struct stat st;
    assert_int_equal(stat(e.state, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_non_null(strstr(log_line(&e, "wrote"), "(1500 items)"));

    start(&e);
    assert_false(exists(e.state)); /* removed before serving */
    const char *kept = log_line(&e, "kept");
    if (strstr(kept, "kept 1500 items") == NULL || strstr(kept, "dropped 0;") == NULL)
        fail_msg("log: %s", kept);
    check_all(&e, c, &s, -1, false, 0); /* c reconnects by itself */

    /* a write after the restart: a larger CAS than every kept item's */
    uint64_t v = 0;
    assert_int_equal(rkv_put(c, "after", 5, "x", 1, NULL, &v), RKV_OK);
    assert_true(v > s.max_cas);
    rkv_close(c);
    stop(&e);
    env_free(&e);
}

/* The file's header, rewritten as if the server had stopped `secs` earlier. */
static void shift_stop_time(const char *path, uint64_t secs)
{
    uint8_t buf[RKV_STATE_HEADER_SIZE];
    char err[256];
    struct rkv_state_header h;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    assert_true(rkv_state_decode(buf, sizeof buf, &h, err, sizeof err));
    h.stop_realtime_ns -= secs * 1000000000ull;
    rkv_state_encode(&h, buf);
    assert_int_equal(pwrite(fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    close(fd);
}

static void test_downtime_counts(void **state)
{
    (void)state;
    struct env e;
    static struct stored s;
    env_make(&e);
    start(&e);
    rkv_client *c = connect_retry(e.sp.uri, NULL, 5000);
    assert_non_null(c);
    store_all(&e, c, &s);
    stop(&e);
    shift_stop_time(e.state, 2000);
    start(&e);
    const char *kept = log_line(&e, "kept");
    if (strstr(kept, "kept 1000 items") == NULL || strstr(kept, "dropped 500 (expired 500)") == NULL)
        fail_msg("log: %s", kept);
    check_all(&e, c, &s, -1, true, 2000);
    rkv_close(c);
    stop(&e);
    env_free(&e);
}

/* Flip one byte of the value of librkv key i in the file. */
static void corrupt_value(const char *path, unsigned i)
{
    static char v[BIG + 64];
    value_of(v, sizeof v, "lib", i);
    char needle[64];
    size_t n = (size_t)snprintf(needle, sizeof needle, "lib#%u#", i);
    memcpy(needle + n, v + n, 16); /* the prefix and 16 bytes after: one item's */
    n += 16;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *all = malloc((size_t)st.st_size);
    assert_non_null(all);
    assert_int_equal(pread(fd, all, (size_t)st.st_size, 0), st.st_size);
    char *at = memmem(all + RKV_STATE_HEADER_SIZE, (size_t)st.st_size - RKV_STATE_HEADER_SIZE,
                      needle, n);
    assert_non_null(at);
    assert_null(memmem(at + 1, (size_t)(all + st.st_size - at - 1), needle, n)); /* one copy */
    char flipped = (char)(at[n - 1] ^ 0x20);
    assert_int_equal(pwrite(fd, &flipped, 1, at + n - 1 - all), 1);
    free(all);
    close(fd);
}

static void test_corrupt_item_dropped(void **state)
{
    (void)state;
    struct env e;
    static struct stored s;
    env_make(&e);
    start(&e);
    rkv_client *c = connect_retry(e.sp.uri, NULL, 5000);
    assert_non_null(c);
    store_all(&e, c, &s);
    stop(&e);
    corrupt_value(e.state, 42);
    start(&e);
    const char *kept = log_line(&e, "kept");
    if (strstr(kept, "kept 1499 items") == NULL || strstr(kept, "dropped 1 (checksum 1)") == NULL)
        fail_msg("log: %s", kept);
    assert_non_null(strstr(log_line(&e, "failed verification"), "1 items"));
    check_all(&e, c, &s, 42, false, 0);
    rkv_close(c);
    stop(&e);
    env_free(&e);
}

/* Run the server to its exit with args; its status, its stderr in *out. */
static int run_to_exit(const char *const *args, char *out, size_t cap)
{
    char path[] = "/tmp/rkv-test-restart-out-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *argv[32];
    unsigned n = 0;
    argv[n++] = server_bin;
    for (; *args != NULL && n < 31; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        execv(server_bin, (char *const *)argv);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    ssize_t r = pread(fd, out, cap - 1, 0);
    out[r > 0 ? r : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_other_memory_refused(void **state)
{
    (void)state;
    struct env e;
    static struct stored s;
    char out[8192], uri[256];
    env_make(&e);
    start(&e);
    rkv_client *c = connect_retry(e.sp.uri, NULL, 5000);
    assert_non_null(c);
    store_all(&e, c, &s);
    stop(&e);
    test_uri(uri, sizeof uri, e.uri_n);
    const char *const args[] = { "--listen", uri, "--memory", "32M", "--state-file", e.state, NULL };
    assert_int_equal(run_to_exit(args, out, sizeof out), 2);
    char want[256];
    snprintf(want, sizeof want,
             "--state-file %s was written with --memory 64M; start with "
             "--memory 64M to keep the cache, or remove the file to start empty",
             e.state);
    if (strstr(out, want) == NULL)
        fail_msg("stderr: %s", out);
    assert_true(exists(e.state)); /* refused, not removed */
    start(&e);                    /* the options that keep it */
    check_all(&e, c, &s, -1, false, 0);
    rkv_close(c);
    stop(&e);
    env_free(&e);
}

static void test_kill_starts_cold(void **state)
{
    (void)state;
    struct env e;
    static struct stored s;
    char buf[16];
    size_t n;
    env_make(&e);
    start(&e);
    rkv_client *c = connect_retry(e.sp.uri, NULL, 5000);
    assert_non_null(c);
    store_all(&e, c, &s);
    stop(&e);
    start(&e); /* kept, file removed */
    assert_int_equal(get_retry(c, "lib-key-0", buf, 0, &n, NULL), RKV_BUFFER_TOO_SMALL);
    server_kill(&e.sp);
    assert_false(exists(e.state));
    start(&e);
    assert_non_null(strstr(log_line(&e, "no state file"), "the last stop was not clean"));
    assert_int_equal(get_retry(c, "lib-key-0", buf, 0, &n, NULL), RKV_NOT_FOUND);
    int fd = mc_connect(e.port);
    assert_true(fd >= 0);
    char v[64];
    assert_false(mc_get(fd, "mc-key-0", v, sizeof v).found);
    close(fd);
    rkv_close(c);
    stop(&e);
    env_free(&e);
}

/* The log's last "kept" line says that `n` items were kept, none dropped,
 * from a file the server of version `by` wrote. */
static void assert_kept(const struct env *e, unsigned n, const char *by)
{
    char want[64], writer[64];
    snprintf(want, sizeof want, "kept %u items", n);
    snprintf(writer, sizeof writer, "(written by rkv-server %s)", by);
    const char *kept = log_line(e, "kept");
    if (strstr(kept, want) == NULL || strstr(kept, "dropped 0;") == NULL ||
        strstr(kept, writer) == NULL)
        fail_msg("log: %s", kept);
}

static void test_upgrade_keeps_the_cache(void **state)
{
    (void)state;
    struct env e;
    static struct stored s;
    char ready[64];
    if (server_next_bin == NULL)
        skip();
    env_make(&e);
    start(&e);
    rkv_client *c = connect_retry(e.sp.uri, NULL, 5000);
    assert_non_null(c);
    store_all(&e, c, &s);
    stop(&e);

    start_bin(&e, server_next_bin); /* the upgrade */
    snprintf(ready, sizeof ready, "rkv-server %s ready", RKV_VERSION_STRING);
    assert_null(strstr(log_line(&e, " ready: "), ready)); /* another version runs */
    assert_kept(&e, 1500, RKV_VERSION_STRING);
    check_all(&e, c, &s, -1, false, 0);
    uint64_t v = 0;
    assert_int_equal(rkv_put(c, "upgraded", 8, "x", 1, NULL, &v), RKV_OK);
    assert_true(v > s.max_cas);
    stop(&e);

    start(&e); /* and back */
    const char *next = strstr(log_line(&e, "written by"), "written by rkv-server ");
    assert_non_null(next);
    char by[40] = "";
    sscanf(next + strlen("written by rkv-server "), "%39[^)]", by);
    assert_string_not_equal(by, RKV_VERSION_STRING);
    assert_kept(&e, 1501, by);
    check_all(&e, c, &s, -1, false, 0);
    char got[8];
    size_t n = 0;
    struct rkv_item_info info;
    assert_int_equal(get_retry(c, "upgraded", got, sizeof got, &n, &info), RKV_OK);
    assert_int_equal(info.version, v);
    rkv_close(c);
    stop(&e);
    env_free(&e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RKV_SERVER_BINARY\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    server_next_bin = argc > 2 ? argv[2] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_restart_keeps_the_cache),
        cmocka_unit_test(test_downtime_counts),
        cmocka_unit_test(test_corrupt_item_dropped),
        cmocka_unit_test(test_other_memory_refused),
        cmocka_unit_test(test_kill_starts_cold),
        cmocka_unit_test(test_upgrade_keeps_the_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
